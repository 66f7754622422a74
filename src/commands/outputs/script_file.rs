//! perf_script.out on disk and in the archive: the writer thread (`writev` straight from the chunks' header
//! lines and shared stack texts, disk blocks reserved ahead) and the compressor thread (the archive's first
//! entry, compressed as the chunks come by [`SpanDeflater`]).

use super::deflate::SpanDeflater;
use super::stream::Chunk;
use super::tarball::Tarball;
use super::thread_cpu;
use anyhow::{bail, Context, Result};
use std::fs::File;
use std::io::{IoSlice, Write};
use std::path::Path;
use std::sync::mpsc;
use std::time::Instant;

/// The writer thread: perf_script.out on disk; each chunk then goes on to the compressor.
pub fn write(
    mut file: File,
    path: &Path,
    chunks: mpsc::Receiver<Chunk>,
    done: mpsc::SyncSender<Chunk>,
    first_chunk: impl FnOnce(),
) -> Result<()> {
    let started = Instant::now();
    let mut first_chunk = Some(first_chunk);
    let mut len = 0u64;
    let mut reserve = Reserve::default();
    let error = || format!("cannot write {}", path.display());
    for chunk in chunks {
        if let Some(f) = first_chunk.take() {
            f();
        }
        reserve.ahead_of(&file, len + chunk.len as u64);
        let mut slices = Vec::with_capacity(chunk.samples.len() * 2);
        for (header, _, stack) in chunk.samples() {
            slices.push(IoSlice::new(header));
            slices.push(IoSlice::new(&stack.text));
        }
        write_all_vectored(&mut file, &mut slices).with_context(error)?;
        len += chunk.len as u64;
        if done.send(chunk).is_err() {
            // The compressor stopped on an error; it reports it.
            bail!("the perf script compressor stopped");
        }
    }
    reserve.release_beyond(&file, len).with_context(error)?;
    tracing::debug!("perf_script.out: {len} bytes written in {:.1?} ({})", started.elapsed(), thread_cpu());
    Ok(())
}

/// The compressor thread: perf_script.out as the archive's first entry, compressed as it comes. Returns the
/// archive and the script's length.
pub fn compress(
    chunks: mpsc::Receiver<Chunk>,
    recycle: mpsc::Sender<Chunk>,
    mut archive: Tarball,
) -> Result<(Tarball, u64)> {
    let started = Instant::now();
    let mut deflater = SpanDeflater::new();
    let mut len = 0u64;
    for chunk in chunks {
        for (header, spans, stack) in chunk.samples() {
            deflater.feed(header, spans);
            deflater.feed_stack(stack);
        }
        archive.write_streamed(&deflater.take_output())?;
        len += chunk.len as u64;
        let _ = recycle.send(chunk);
    }
    let (tail, crc) = deflater.finish();
    archive.end_streamed(&tail, &crc, len)?;
    tracing::debug!("perf_script.out compressed in {:.1?} ({})", started.elapsed(), thread_cpu());
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
