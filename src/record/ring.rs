//! The kernel's mmap ring buffer of one CPU: a metadata page followed by 2^n data pages. The kernel writes records
//! and advances `data_head`; we copy them out and advance `data_tail`, which tells the kernel the space is free.
//!
//! Layout and ordering rules: `include/uapi/linux/perf_event.h` (`struct perf_event_mmap_page`): read `data_head`,
//! then an acquire barrier before reading the data; a full barrier (here: release) before writing `data_tail`.

use perf_event_open_sys::bindings::perf_event_mmap_page;
use std::io;
use std::ops::Range;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

/// The largest ring profcpu picks by itself (per CPU): 512 pages = 2 MiB with 4 KiB pages.
const MAX_DEFAULT_PAGES: usize = 512;

use crate::prefault::page_size;

/// Data pages per CPU when the user did not choose: as many as `perf_event_mlock_kb` lets an unprivileged user lock
/// per CPU (the kernel scales that budget by the number of CPUs), a power of two, at most 512.
pub fn default_data_pages() -> usize {
    let mlock_kb = crate::procfs::read_setting("/proc/sys/kernel/perf_event_mlock_kb")
        .ok()
        .and_then(|s| s.parse::<usize>().ok())
        .unwrap_or(516);
    pages_for_mlock_kb(mlock_kb, page_size())
}

/// [`default_data_pages`] for samples carrying `stack_copy_bytes` of user stack each, and for recordings of every
/// context switch (`every_switch`: a switch-heavy program makes 100k switch-outs a second, each with its
/// switch records): a few KB per sample, or a few hundred bytes at such rates, fill the default ring (512 KB)
/// within milliseconds, so a privileged recorder, whom `perf_event_mlock_kb` does not limit, takes 4 MB per CPU (as
/// many samples as 64 of frame-pointer ones).
pub fn default_data_pages_for(stack_copy_bytes: u32, every_switch: bool) -> usize {
    let pages = default_data_pages();
    // SAFETY: geteuid has no preconditions.
    if (stack_copy_bytes == 0 && !every_switch) || unsafe { libc::geteuid() } != 0 {
        return pages;
    }
    pages.max((4 << 20) / page_size()).next_power_of_two()
}

fn pages_for_mlock_kb(mlock_kb: usize, page_size: usize) -> usize {
    // One of the pages the budget pays for is the metadata page.
    let allowed = (mlock_kb * 1024 / page_size).saturating_sub(1).clamp(1, MAX_DEFAULT_PAGES);
    1 << allowed.ilog2()
}

pub struct RingBuffer {
    base: NonNull<u8>,
    map_len: usize,
    data_offset: usize,
    data_size: usize,
    /// Our copy of `data_tail`: only this reader writes it.
    tail: u64,
}

impl RingBuffer {
    /// Maps `data_pages` (a power of two) data pages plus the metadata page for the event `fd`.
    pub fn map(fd: BorrowedFd, data_pages: usize) -> io::Result<Self> {
        let page = page_size();
        // A size that wraps around would map a ring the kernel never writes into (silently recording nothing).
        let map_len = data_pages
            .checked_add(1)
            .and_then(|pages| pages.checked_mul(page))
            .filter(|_| data_pages.is_power_of_two())
            .ok_or_else(|| {
                io::Error::new(io::ErrorKind::InvalidInput, format!("{data_pages} is not a usable ring size in pages"))
            })?;
        // SAFETY: a fresh shared mapping of a perf event fd; the kernel validates the length. Writable so that
        // updating `data_tail` keeps the kernel from overwriting records we have not read yet.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = NonNull::new(ptr as *mut u8).ok_or_else(|| io::Error::other("mmap returned NULL"))?;
        let meta = base.as_ptr() as *const perf_event_mmap_page;
        // SAFETY: the metadata page is mapped and the kernel filled data_offset/data_size (0 before Linux 4.1).
        let (off, size) = unsafe { ((*meta).data_offset as usize, (*meta).data_size as usize) };
        let (data_offset, data_size) =
            if off != 0 && size != 0 && off.checked_add(size).is_some_and(|end| end <= map_len) {
                (off, size)
            } else {
                (page, data_pages * page)
            };
        // SAFETY: as above; nothing has been read yet, so the tail is whatever the kernel initialised (0).
        let tail = unsafe { (*meta).data_tail };
        Ok(RingBuffer { base, map_len, data_offset, data_size, tail })
    }

    fn control(&self, field_offset: usize) -> &AtomicU64 {
        // SAFETY: data_head/data_tail are 8-byte aligned u64 fields of the mapped metadata page, shared with the
        // kernel, so they are only accessed atomically.
        unsafe { AtomicU64::from_ptr(self.base.as_ptr().add(field_offset) as *mut u64) }
    }

    /// Appends every complete record the kernel has published to `out` and frees their space. Returns the number of
    /// bytes copied.
    pub fn read_into(&mut self, out: &mut Vec<u8>) -> usize {
        let head = self.control(std::mem::offset_of!(perf_event_mmap_page, data_head)).load(Ordering::Acquire);
        let tail = self.tail;
        if head == tail {
            return 0;
        }
        let pending = head.wrapping_sub(tail);
        let copied = if pending > self.data_size as u64 {
            // Cannot happen while we own data_tail; if it does, the bytes in between are not trustworthy.
            tracing::warn!(
                "ring buffer head ran {pending} bytes ahead of the tail ({} bytes); skipping",
                self.data_size
            );
            0
        } else {
            // SAFETY: the data area is mapped for data_size bytes, and the kernel does not write [tail, head) until
            // we move data_tail past it.
            unsafe { copy_pending(self.base.as_ptr().add(self.data_offset), self.data_size, tail, head, out) };
            pending as usize
        };
        self.tail = head;
        self.control(std::mem::offset_of!(perf_event_mmap_page, data_tail)).store(head, Ordering::Release);
        copied
    }
}

impl Drop for RingBuffer {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly what `map` mapped; no reference into it outlives self.
        unsafe {
            libc::munmap(self.base.as_ptr() as *mut libc::c_void, self.map_len);
        }
    }
}

/// The (at most two) pieces of a ring of `size` bytes that hold the bytes `[tail, head)`, in order; the second is
/// empty unless the data wraps past the end of the ring.
pub fn pending_ranges(size: usize, tail: u64, head: u64) -> [Range<usize>; 2] {
    let len = head.wrapping_sub(tail).min(size as u64) as usize;
    let start = (tail % size as u64) as usize;
    let first = len.min(size - start);
    [start..start + first, 0..len - first]
}

/// Copies `[tail, head)` out of the ring data area at `data` (of `size` bytes, a power of two) into `out`,
/// joining the piece at the end of the ring with the piece at its start, so a record that straddles the end comes
/// out whole.
///
/// # Safety
/// `data` must point to `size` readable bytes, and the bytes in `[tail, head)` must not be written concurrently.
pub unsafe fn copy_pending(data: *const u8, size: usize, tail: u64, head: u64, out: &mut Vec<u8>) {
    for range in pending_ranges(size, tail, head) {
        if !range.is_empty() {
            // SAFETY: the range lies within the `size` bytes at `data` (pending_ranges clamps to the ring).
            out.extend_from_slice(unsafe { std::slice::from_raw_parts(data.add(range.start), range.len()) });
        }
    }
}

/// Splits a buffer of whole records (as copied out of a ring) into records. A record whose header claims a size
/// that cannot be right ends the walk.
pub fn records(bytes: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut pos = 0;
    std::iter::from_fn(move || {
        let header = bytes.get(pos..pos + 8)?;
        let size = u16::from_ne_bytes([header[6], header[7]]) as usize;
        if size < 8 || pos + size > bytes.len() {
            return None;
        }
        let rec = &bytes[pos..pos + size];
        pos += size;
        Some(rec)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(kind: u32, body_len: usize, fill: u8) -> Vec<u8> {
        let size = 8 + body_len;
        let mut r = Vec::new();
        r.extend_from_slice(&kind.to_ne_bytes());
        r.extend_from_slice(&0u16.to_ne_bytes());
        r.extend_from_slice(&(size as u16).to_ne_bytes());
        r.resize(size, fill);
        r
    }

    /// Writes `bytes` into the ring at absolute position `pos` the way the kernel does: modulo the ring size.
    fn put(ring: &mut [u8], pos: u64, bytes: &[u8]) {
        let n = ring.len();
        for (i, b) in bytes.iter().enumerate() {
            ring[(pos as usize + i) % n] = *b;
        }
    }

    #[test]
    fn ranges_without_and_with_wrap() {
        assert_eq!(pending_ranges(64, 0, 0), [0..0, 0..0]);
        assert_eq!(pending_ranges(64, 8, 40), [8..40, 0..0]);
        assert_eq!(pending_ranges(64, 48, 80), [48..64, 0..16]);
        // Positions keep growing past the ring size; only their remainder addresses the ring.
        assert_eq!(pending_ranges(64, 64 * 5 + 56, 64 * 6 + 8), [56..64, 0..8]);
        assert_eq!(pending_ranges(64, 64, 128), [0..64, 0..0]);
        assert_eq!(pending_ranges(64, 32, 96), [32..64, 0..32]);
    }

    #[test]
    fn a_record_straddling_the_end_comes_out_whole() {
        let mut ring = vec![0xEEu8; 64];
        let a = record(9, 16, 0xA1); // 24 bytes at 40..64
        let b = record(3, 24, 0xB2); // 32 bytes at 64..96, i.e. ring 0..32
        let c = record(7, 24, 0xC3); // header split: starts at ring 60 after advancing
        put(&mut ring, 40, &a);
        put(&mut ring, 64, &b);
        let mut out = Vec::new();
        unsafe { copy_pending(ring.as_ptr(), ring.len(), 40, 96, &mut out) };
        let got: Vec<&[u8]> = records(&out).collect();
        assert_eq!(got, vec![&a[..], &b[..]]);

        // The next record starts 4 bytes before the end: even its 8-byte header is split.
        put(&mut ring, 124, &c);
        out.clear();
        unsafe { copy_pending(ring.as_ptr(), ring.len(), 124, 124 + c.len() as u64, &mut out) };
        assert_eq!(out, c);
        assert_eq!(records(&out).count(), 1);
    }

    #[test]
    fn a_full_ring_is_copied_once_and_records_with_bad_sizes_end_the_walk() {
        let mut ring = vec![0u8; 32];
        let a = record(9, 24, 1);
        put(&mut ring, 16, &a);
        let mut out = Vec::new();
        unsafe { copy_pending(ring.as_ptr(), 32, 16, 48, &mut out) };
        assert_eq!(out, a);

        let mut bad = record(9, 8, 2);
        bad[6..8].copy_from_slice(&4u16.to_ne_bytes());
        assert_eq!(records(&bad).count(), 0);
        let mut cut = record(9, 8, 2);
        cut.truncate(12);
        assert_eq!(records(&cut).count(), 0);
    }

    #[test]
    fn default_size_follows_the_mlock_budget() {
        assert_eq!(pages_for_mlock_kb(516, 4096), 128);
        assert_eq!(pages_for_mlock_kb(1 << 20, 4096), 512);
        assert_eq!(pages_for_mlock_kb(8, 4096), 1);
        assert_eq!(pages_for_mlock_kb(0, 4096), 1);
        assert_eq!(pages_for_mlock_kb(300, 4096), 64);
    }
}
