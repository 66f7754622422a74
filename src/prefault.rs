//! Memory that is about to be filled, made present and writable in one call.
//!
//! A page fault taken inside a system call (a `read` into a fresh buffer) takes the process-wide lock of the memory
//! map, where a fault in user code locks only its own mapping. While other threads start, allocate and map, each
//! such fault queues behind their `mmap` and `mprotect` calls: in a 20 ms `postprocess`, threads spent 4–9 ms in
//! those queues. Populating a buffer first takes the lock once for all of its pages.

/// Buffers smaller than this are left to fault in: they are mostly on pages the heap already holds.
const WORTH_IT: usize = 16 << 10;

/// Makes the whole pages inside `memory` present and writable, without changing a byte of it. Kernels before 5.14
/// refuse the advice: the pages then fault in as they are written, as before.
pub fn for_writing<T>(memory: &mut [T]) {
    let (start, len) = (memory.as_mut_ptr() as usize, std::mem::size_of_val(memory));
    if len < WORTH_IT {
        return;
    }
    let page = page_size();
    let (first, end) = (start.next_multiple_of(page), (start + len) / page * page);
    if end > first {
        // SAFETY: the range lies inside `memory`, which this call borrows mutably; populating pages changes no
        // byte of it.
        unsafe { libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_POPULATE_WRITE) };
    }
}

/// The size of a memory page (4 KB where the system cannot say).
pub fn page_size() -> usize {
    // SAFETY: sysconf only reads a system setting.
    usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).ok().filter(|&n| n > 0).unwrap_or(4096)
}

#[cfg(test)]
mod tests {
    #[test]
    fn populating_changes_no_byte() {
        let mut buffer: Vec<u64> = (0..100_000).collect();
        super::for_writing(&mut buffer[3..]);
        assert!(buffer.iter().enumerate().all(|(i, &v)| v == i as u64));
        let mut small = [7u8; 100];
        super::for_writing(&mut small);
        assert_eq!(small, [7u8; 100]);
    }
}
