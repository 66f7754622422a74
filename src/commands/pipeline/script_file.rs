//! perf_script.out on disk and in the archive: the writer thread (`writev` straight from the chunks' text and
//! shared stack texts, disk blocks reserved ahead; over an earlier run's file, only from the first byte
//! that differs) and the compressor thread (the archive's first entry, compressed as the chunks come by
//! [`RepeatDeflater`]).

use super::sample_sink::Chunk;
use super::thread_cpu;
use crate::archive::deflate::RepeatDeflater;
use crate::archive::tarball::Tarball;
use anyhow::{bail, Context, Result};
use std::fs::File;
use std::io::{IoSlice, Seek, SeekFrom, Write};
use std::path::Path;
use std::sync::mpsc;
use std::time::{Instant, SystemTime};

/// The writer thread: perf_script.out on disk; each chunk then goes on to the compressor. At the first chunk,
/// `first_chunk` may hand over an earlier perf_script.out to write over instead of `file`.
pub fn write(
    mut file: File,
    path: &Path,
    chunks: mpsc::Receiver<Chunk>,
    done: mpsc::SyncSender<Chunk>,
    first_chunk: impl FnOnce() -> Option<File>,
) -> Result<()> {
    let started = Instant::now();
    let mut first_chunk = Some(first_chunk);
    let mut earlier: Option<Earlier> = None;
    let mut len = 0u64;
    let mut reserve = Reserve::default();
    let error = || format!("cannot write {}", path.display());
    for chunk in chunks {
        if let Some(over) = first_chunk.take().and_then(|f| f()) {
            earlier = Some(Earlier::of(&over));
            file = over;
        }
        let mut slices = Vec::new();
        chunk.pieces(&mut slices);
        let unchanged = match &mut earlier {
            Some(earlier) => earlier.holds(&file, len, &slices).with_context(error)?,
            None => false,
        };
        if !unchanged {
            reserve.ahead_of(&file, len + chunk.len as u64);
            write_all_vectored(&mut file, &mut slices).with_context(error)?;
        }
        len += chunk.len as u64;
        if done.send(chunk).is_err() {
            // The compressor stopped on an error; it reports it.
            bail!("the perf script compressor stopped");
        }
    }
    let kept = match &earlier {
        Some(earlier) => {
            // What the earlier run wrote beyond this one's end goes; the file is dated now even where no byte of it
            // had to change.
            file.set_len(len).with_context(error)?;
            file.set_modified(SystemTime::now()).with_context(error)?;
            earlier.same_until.min(len)
        }
        None => {
            reserve.release_beyond(&file, len).with_context(error)?;
            0
        }
    };
    tracing::debug!(
        "perf_script.out: {len} bytes in {:.1?}, {kept} of them as the earlier run wrote them ({})",
        started.elapsed(),
        thread_cpu()
    );
    Ok(())
}

/// An earlier run's perf_script.out being written over. A run mostly writes what the run before wrote (the same
/// recording named from the same files), so its bytes are compared before any is written: reading the cached pages
/// costs less than writing them (no page dirtied, nothing to write to disk later). From the first chunk that
/// differs on, the rest is written.
struct Earlier {
    /// Its length when this run took it.
    len: u64,
    /// Bytes from its start known to be what this run writes; `u64::MAX` while it is still being compared.
    same_until: u64,
    /// The part of it mapped to be compared, and where that part starts.
    window: Option<(u64, memmap2::Mmap)>,
}

/// How much of the earlier file is mapped at a time. Unmapping interrupts every other core that runs one of this
/// process's threads (a TLB shootdown), so not a mapping per chunk (chunks of distinct stacks are small); reading
/// the bytes into a buffer instead cost a third more than writing them anew. A mapped window counts towards the
/// peak RSS.
const WINDOW_BYTES: u64 = 2 << 20;

impl Earlier {
    fn of(file: &File) -> Earlier {
        let len = file.metadata().map_or(0, |m| m.len());
        Earlier { len, same_until: if len > 0 { u64::MAX } else { 0 }, window: None }
    }

    /// Whether the file holds `slices` at `at` already. At the first chunk that differs (or lies beyond its end),
    /// the file is positioned at `at` to be written from there on.
    fn holds(&mut self, file: &File, at: u64, slices: &[IoSlice]) -> std::io::Result<bool> {
        if self.same_until != u64::MAX {
            return Ok(false);
        }
        let chunk_len: u64 = slices.iter().map(|s| s.len() as u64).sum();
        if chunk_len == 0 {
            return Ok(true);
        }
        if at + chunk_len <= self.len && self.compare(file, at, slices).unwrap_or(false) {
            return Ok(true);
        }
        self.same_until = at;
        self.window = None;
        let mut file = file;
        file.seek(SeekFrom::Start(at))?;
        Ok(false)
    }

    /// Whether `file` holds `slices` from `at` on (which lie within its length).
    fn compare(&mut self, file: &File, at: u64, slices: &[IoSlice]) -> std::io::Result<bool> {
        let mut at = at;
        for slice in slices {
            let mut rest: &[u8] = slice;
            while !rest.is_empty() {
                let held = self.mapped_from(file, at)?;
                let n = held.len().min(rest.len());
                if held[..n] != rest[..n] {
                    return Ok(false);
                }
                rest = &rest[n..];
                at += n as u64;
            }
        }
        Ok(true)
    }

    /// The file's bytes from `at` (within its length) to the end of the window that holds them, mapped first if
    /// the window does not.
    fn mapped_from(&mut self, file: &File, at: u64) -> std::io::Result<&[u8]> {
        let held = |w: &(u64, memmap2::Mmap)| at >= w.0 && at - w.0 < w.1.len() as u64;
        if !self.window.as_ref().is_some_and(held) {
            // One window at a time: the one before is unmapped first.
            self.window = None;
            let page = crate::prefault::page_size() as u64;
            let start = at - at % page;
            let len = WINDOW_BYTES.min(self.len - start) as usize;
            // SAFETY: the file is this process's own: `SetAside::write_over` took it only as a plain file of this
            // user with no other name, and renamed it into the staging folder. Only root or this user truncating it
            // there while it is compared could end the run (SIGBUS, as for perf.data: docs/SECURITY.md). The
            // window lies within the length it had when taken.
            let map = unsafe { memmap2::MmapOptions::new().offset(start).len(len).populate().map(file)? };
            self.window = Some((start, map));
        }
        let (start, map) = self.window.as_ref().expect("mapped above");
        Ok(&map[(at - start) as usize..])
    }
}

/// The compressor thread: perf_script.out as the archive's first entry, compressed as it comes. Returns the
/// archive and the script's length.
pub fn compress(
    chunks: mpsc::Receiver<Chunk>,
    recycle: mpsc::Sender<Chunk>,
    mut archive: Tarball,
) -> Result<(Tarball, u64)> {
    let started = Instant::now();
    let mut deflater = RepeatDeflater::new();
    let (mut len, mut compressed) = (0u64, 0u64);
    for chunk in chunks {
        for sample in chunk.samples() {
            deflater.feed(sample.header, sample.header_spans);
            deflater.feed_stack(sample.stack, sample.stack_lines);
        }
        let out = deflater.take_output();
        compressed += out.len() as u64;
        archive.write_streamed(&out)?;
        len += chunk.len as u64;
        let _ = recycle.send(chunk);
    }
    let (tail, crc) = deflater.finish();
    compressed += tail.len() as u64;
    archive.end_streamed(&tail, &crc, len)?;
    tracing::debug!(
        "perf_script.out compressed to {:.2} MB in {:.1?} ({})",
        compressed as f64 / 1e6,
        started.elapsed(),
        thread_cpu()
    );
    Ok((archive, len))
}

/// Disk blocks reserved for a file ahead of its writes (`fallocate`, size unchanged). Writing into reserved blocks
/// skips ext4's allocation per page, which costs about as much as copying the bytes (a third of writing the 105 MB
/// perf_script.out of a 40k-sample profile).
#[derive(Default)]
struct Reserve {
    end: u64,
}

/// How far ahead blocks are reserved, and in what steps.
const RESERVE_STEP: u64 = 16 << 20;

impl Reserve {
    /// Makes sure blocks up to `end` are reserved. Best effort: where `fallocate` is not supported, writes
    /// allocate as usual.
    fn ahead_of(&mut self, file: &File, end: u64) {
        use std::os::fd::AsRawFd;
        if end <= self.end {
            return;
        }
        let start = self.end;
        self.end = end.next_multiple_of(RESERVE_STEP);
        // SAFETY: plain syscall on a descriptor we own; no memory is passed.
        let failed = unsafe {
            libc::fallocate(file.as_raw_fd(), libc::FALLOC_FL_KEEP_SIZE, start as i64, (self.end - start) as i64)
        } != 0;
        if failed {
            // Not supported (or no space, which the writes themselves will report): stop trying.
            self.end = u64::MAX;
        }
    }

    /// Gives back the blocks reserved beyond the file's final length.
    fn release_beyond(&self, file: &File, len: u64) -> std::io::Result<()> {
        if self.end != u64::MAX && self.end > len {
            file.set_len(len)?;
        }
        Ok(())
    }
}

/// Writes every byte of `slices` (`Write::write_all_vectored` is not stable yet).
fn write_all_vectored(file: &mut File, mut slices: &mut [IoSlice]) -> std::io::Result<()> {
    while !slices.is_empty() {
        match file.write_vectored(slices) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut slices, n),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{Earlier, WINDOW_BYTES};
    use crate::archive::deflate::{deflate_segment, inflate_segment as inflate, Codec, RepeatDeflater};
    use crate::report::script::{RenderedStack, ScriptOptions, ScriptWriter};
    use crate::symbolize::{Frame, FrameKind, ResolvedSample, Stack};
    use flate2::Compression;
    use std::sync::Arc;

    /// Chunks compared across the windows the earlier file is mapped in: the same bytes hold, a byte changed on
    /// either side of a window's edge does not, and nothing beyond the file's end holds.
    #[test]
    fn an_earlier_file_holds_only_the_same_bytes_across_windows() {
        use std::io::{IoSlice, Write};
        let mut rng = crate::random_inputs::Rng::new(7);
        let text: Vec<u8> = (0..WINDOW_BYTES as usize * 5 / 2).map(|_| b'a' + rng.below(26) as u8).collect();
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(&text).unwrap();
        let edge = WINDOW_BYTES as usize;
        // Chunks in order, of odd sizes and in several slices, the way the writer hands them over.
        let mut earlier = Earlier::of(&file);
        let mut at = 0;
        while at < text.len() {
            let len = (100_003 + rng.below(300_000)).min(text.len() - at);
            let chunk = &text[at..at + len];
            let slices: Vec<IoSlice> = chunk.chunks(70_001).map(IoSlice::new).collect();
            assert!(earlier.holds(&file, at as u64, &slices).unwrap(), "same bytes at {at}");
            at += len;
        }
        for changed in [edge - 1, edge, edge + 1, 2 * edge + 5, text.len() - 1] {
            let mut other = text.clone();
            other[changed] ^= 1;
            let mut earlier = Earlier::of(&file);
            let (start, end) = (changed.saturating_sub(300_000), (changed + 300_000).min(text.len()));
            assert!(earlier.holds(&file, 0, &[IoSlice::new(&text[..start])]).unwrap());
            let slices = [IoSlice::new(&other[start..changed + 1]), IoSlice::new(&other[changed + 1..end])];
            assert!(!earlier.holds(&file, start as u64, &slices).unwrap(), "a byte changed at {changed} held");
        }
        let mut earlier = Earlier::of(&file);
        let beyond = [IoSlice::new(&text[text.len() - 10..]), IoSlice::new(b"more")];
        assert!(!earlier.holds(&file, text.len() as u64 - 10, &beyond).unwrap());
    }

    /// Samples as the outputs stream renders them: header lines (fed with their spans) and stack texts (fed by
    /// their piece ids), from stacks that repeat near and far, share tails, come and go, shared or not.
    #[test]
    fn stack_texts_round_trip_and_repeats_become_matches() {
        let mut rng = crate::random_inputs::Rng::new(0x9e37_79b9_7f4a_7c15);
        let mut next = move |n: u64| rng.below(n as usize) as u64;
        let names: Vec<Arc<str>> = (0..60).map(|i| Arc::from(format!("Namespace.Type{i}::Method{i}(int32)"))).collect();
        let modules: Vec<Arc<str>> = (0..4).map(|i| Arc::from(format!("/usr/lib/lib{i}.so"))).collect();
        let frame = |name: usize, addr: u64| {
            Frame::new(
                0x7f00_0000_0000 + name as u64 * 0x1000 + addr,
                (name % 7 != 0).then(|| names[name].clone()),
                addr,
                modules[name % modules.len()].clone(),
                FrameKind::Native,
            )
        };
        // 300 stacks over 20 call paths: shared tails, leaves at a few addresses, depths 0 to 120.
        let paths: Vec<Vec<usize>> =
            (0..20).map(|p| (0..[0, 1, 5, 20, 120][p % 5]).map(|_| next(60) as usize).collect()).collect();
        let stacks: Vec<Stack> = (0..300)
            .map(|i| {
                let path = &paths[i % paths.len()];
                let mut frames: Vec<Frame> = path.iter().map(|&n| frame(n, 0x10 + next(8) * 4)).collect();
                if let Some(leaf) = frames.first_mut() {
                    leaf.addr += next(3) * 0x100;
                }
                Stack::shared(frames)
            })
            .collect();
        let comm: Arc<str> = Arc::from("app");
        let event: Arc<str> = Arc::from("cpu-clock");
        let mut writer = ScriptWriter::new(&ScriptOptions::default());
        let mut deflater = RepeatDeflater::new();
        let mut text = Vec::new();
        let (mut header, mut spans, mut own_lines) = (Vec::new(), Vec::new(), Vec::new());
        let mut out = Vec::new();
        for i in 0..6000u64 {
            // Mostly a few hot stacks, sometimes any.
            let stack = if next(4) == 0 { next(300) } else { next(6) } as usize;
            let sample = ResolvedSample {
                pid: 7,
                tid: 7 + next(3) as u32,
                cpu: next(2) as u32,
                time: 1_000_000_000 + i * 1_000_123,
                period: 1_000_000,
                off_cpu: None,
                comm: comm.clone(),
                event: event.clone(),
                // Some stacks come unshared (the symbolizer's cache stopped paying): no ids for their rests.
                frames: if next(5) == 0 { Stack::from(stacks[stack].to_vec()) } else { stacks[stack].clone() },
            };
            header.clear();
            spans.clear();
            own_lines.clear();
            match writer.render(&sample, &mut header, Some(&mut spans), &mut own_lines) {
                RenderedStack::Shared(stack) => {
                    deflater.feed(&header, &spans);
                    deflater.feed_stack(&stack.text, &stack.lines);
                    text.extend_from_slice(&header);
                    text.extend_from_slice(&stack.text);
                }
                RenderedStack::Appended(len) => {
                    let (head, stack) = header.split_at(header.len() - len);
                    deflater.feed(head, &spans);
                    deflater.feed_stack(stack, &own_lines);
                    text.extend_from_slice(&header);
                }
            }
            if i % 500 == 0 {
                out.extend(deflater.take_output());
            }
        }
        let (tail, crc) = deflater.finish();
        out.extend(tail);
        assert!(inflate(&out) == text, "round trip differs");
        assert_eq!(crc.finalize(), crc32fast::hash(&text));
        let (zlib_fast, _) = deflate_segment(Codec::Miniz(Compression::fast()), [&text[..]]);
        assert!(out.len() < zlib_fast.len() * 2, "{} of {} bytes (zlib: {})", out.len(), text.len(), zlib_fast.len());
    }
}
