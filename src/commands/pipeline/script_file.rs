//! perf_script.out on disk and in the archive: the writer thread (`writev` straight from the chunks' text and
//! shared stack texts, disk blocks reserved ahead; over an earlier run's file, only from the first byte
//! that differs) and the compressor thread (the archive's first entry, compressed as the chunks come by
//! [`RepeatDeflater`]; or, where every byte is the earlier run's, copied from the earlier archive).

use super::earlier::EarlierBytes;
use super::sample_sink::Chunk;
use super::thread_cpu;
use crate::archive::deflate::{EchoDeflater, RepeatDeflater};
use crate::archive::tarball::{ArchiveIndex, Indexed, Segment, Tarball};
use crate::fs::{Dir, Limit};
use crate::report;
use anyhow::{bail, Context, Result};
use crc32fast::Hasher as Crc;
use std::fs::File;
use std::io::{IoSlice, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::mpsc;
use std::time::{Instant, SystemTime};

/// A chunk the writer is done with, on its way to the compressor.
pub struct Written {
    pub chunk: Chunk,
    /// Whether the file held its bytes already (an earlier run's perf_script.out being written over), as it did
    /// every chunk's before it.
    pub as_before: bool,
}

/// The writer thread: perf_script.out on disk; each chunk then goes on to the compressor. At the first chunk,
/// `first_chunk` may hand over an earlier perf_script.out to write over instead of `file`.
pub fn write(
    mut file: File,
    path: &Path,
    chunks: mpsc::Receiver<Chunk>,
    done: mpsc::SyncSender<Written>,
    first_chunk: impl FnOnce() -> Option<File>,
) -> Result<()> {
    let started = Instant::now();
    let mut first_chunk = Some(first_chunk);
    let mut earlier: Option<Earlier> = None;
    let mut len = 0u64;
    let mut reserve = Reserve::default();
    let error = || format!("cannot write {}", path.display());
    while let Ok(chunk) = super::handoff::recv(&chunks) {
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
        if super::handoff::send(&done, Written { chunk, as_before: unchanged }).is_err() {
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

/// An earlier run's perf_script.out being written over. Its bytes are compared before any is written (see
/// [`super::earlier`]); from the first chunk that differs on, the rest is written.
struct Earlier {
    bytes: EarlierBytes,
    /// Bytes from its start known to be what this run writes; `u64::MAX` while it is still being compared.
    same_until: u64,
}

impl Earlier {
    fn of(file: &File) -> Earlier {
        let bytes = EarlierBytes::of(file);
        let same_until = if bytes.len() > 0 { u64::MAX } else { 0 };
        Earlier { bytes, same_until }
    }

    /// Whether the file holds `slices` at `at` already. At the first chunk that differs (or lies beyond its end),
    /// the file is positioned at `at` to be written from there on.
    fn holds(&mut self, file: &File, at: u64, slices: &[IoSlice]) -> std::io::Result<bool> {
        if self.same_until != u64::MAX {
            return Ok(false);
        }
        if slices.iter().all(|s| s.is_empty()) || self.bytes.holds(file, at, slices).unwrap_or(false) {
            return Ok(true);
        }
        self.same_until = at;
        self.bytes.unmap();
        let mut file = file;
        file.seek(SeekFrom::Start(at))?;
        Ok(false)
    }
}

/// The compressor thread: perf_script.out as the archive's first entry, compressed as it comes ([`Encoder`]).
/// Returns the archive and the script's length.
///
/// While every chunk is as the earlier run wrote it, nothing is compressed (their CRC is taken): if the whole text
/// is, `earlier` (what the earlier run archived) holds it compressed already, and its bytes are copied. From the
/// first chunk that differs, or where the earlier archive does not hold the text after all, the bytes passed by are
/// compressed from `script` (the file being written, which holds them).
pub fn compress(
    chunks: mpsc::Receiver<Written>,
    recycle: mpsc::Sender<Chunk>,
    mut archive: Tarball,
    script: &Dir,
    earlier: impl FnOnce() -> Option<File>,
) -> Result<(Tarball, u64)> {
    let started = Instant::now();
    let mut encoder = Encoder::default();
    let mut len = 0u64;
    // While the chunks are as before: the earlier archive and the CRC of the chunks passed by.
    let mut passing: Option<(File, Crc)> = None;
    let mut earlier = Some(earlier);
    while let Ok(Written { chunk, as_before }) = super::handoff::recv(&chunks) {
        if let Some(earlier) = earlier.take().filter(|_| as_before) {
            passing = holding_a_streamed_entry(earlier()).map(|archive| (archive, Crc::new()));
        }
        match (&mut passing, as_before) {
            (Some((_, crc)), true) => {
                let mut slices = Vec::new();
                chunk.pieces(&mut slices);
                slices.iter().for_each(|s| crc.update(s));
            }
            (Some(_), false) => {
                passing = None;
                encoder.feed_file(&mut archive, script, len)?;
                encoder.feed_chunk(&mut archive, &chunk)?;
            }
            (None, _) => encoder.feed_chunk(&mut archive, &chunk)?,
        }
        len += chunk.len as u64;
        let _ = recycle.send(chunk);
    }
    if let Some((earlier, crc)) = passing {
        let crc = crc.finalize();
        if let Some(content) = Segment::reused(earlier, Indexed::Streamed, len, None, || Some(crc)) {
            archive.end_streamed_with(&content)?;
            tracing::debug!(
                "perf_script.out's entry taken from the earlier {} in {:.1?} ({})",
                report::ARCHIVE_FILE,
                started.elapsed(),
                thread_cpu()
            );
            return Ok((archive, len));
        }
        encoder.feed_file(&mut archive, script, len)?;
    }
    let compressed = encoder.finish(&mut archive, len)?;
    tracing::debug!(
        "perf_script.out compressed to {:.2} MB in {:.1?} ({})",
        compressed as f64 / 1e6,
        started.elapsed(),
        thread_cpu()
    );
    Ok((archive, len))
}

/// An earlier archive whose index says where its streamed entry (perf_script.out) lies.
fn holding_a_streamed_entry(archive: Option<File>) -> Option<File> {
    let archive = archive?;
    ArchiveIndex::read(&archive)?.get(Indexed::Streamed)?;
    Some(archive)
}

/// perf_script.out's compressed bytes, as segments (see [`crate::archive::deflate`]) made by the encoder that suits
/// the text:
/// - [`RepeatDeflater`] for chunks of shared stacks: they repeat whole, which the chunk's hints say, and matching by
///   the hints is several times faster than searching;
/// - [`EchoDeflater`], which searches, for chunks of stacks the symbolizer did not share (nearly every stack
///   distinct): what repeats there is parts of lines (an address's first digits, a name), which the hints do not
///   tell. On 44k distinct stacks of a C program, as fast as the hints and a third of the size (3.2 MB, not 11.4).
///   Also for bytes that come without hints (read back from the file).
///
/// A change of encoder ends a segment.
#[derive(Default)]
struct Encoder {
    current: Option<Deflater>,
    /// The CRC of the segments ended.
    ended: Option<Crc>,
    compressed: u64,
}

enum Deflater {
    Repeat(RepeatDeflater),
    Echo(EchoDeflater),
}

impl Encoder {
    fn feed_chunk(&mut self, archive: &mut Tarball, chunk: &Chunk) -> Result<()> {
        match self.deflater(archive, chunk.mostly_unshared_stacks())? {
            Deflater::Echo(echo) => {
                let mut slices = Vec::new();
                chunk.pieces(&mut slices);
                slices.iter().for_each(|s| echo.feed(s));
            }
            Deflater::Repeat(repeat) => {
                for sample in chunk.samples() {
                    repeat.feed(sample.header, sample.header_spans);
                    repeat.feed_stack(sample.stack, sample.stack_lines);
                }
            }
        }
        self.write_output(archive)
    }

    /// Compresses the first `len` bytes of perf_script.out from the file in `dir` (which holds them: the earlier
    /// run wrote them as this one would have): the hints that came with them are gone.
    fn feed_file(&mut self, archive: &mut Tarball, dir: &Dir, len: u64) -> Result<()> {
        const READ: u64 = 128 << 10;
        let started = Instant::now();
        let path = dir.shown(report::PERF_SCRIPT_FILE);
        let (file, _) = dir.open_input(report::PERF_SCRIPT_FILE, Limit::NONE)?;
        let mut at = 0u64;
        while at < len {
            let n = READ.min(len - at) as usize;
            let Deflater::Echo(echo) = self.deflater(archive, true)? else { unreachable!("a searching encoder") };
            let space = &mut echo.space(n)[..n];
            file.read_exact_at(space, at).with_context(|| format!("cannot read {}", path.display()))?;
            echo.filled(n);
            let waiting = echo.waiting().1.len();
            echo.encode(waiting, &[]);
            self.write_output(archive)?;
            at += n as u64;
        }
        tracing::debug!(
            "the first {len} bytes of perf_script.out compressed from the file in {:.1?}",
            started.elapsed()
        );
        Ok(())
    }

    /// The searching encoder (`searching`) or the one that takes hints, after ending the other's segment.
    fn deflater(&mut self, archive: &mut Tarball, searching: bool) -> Result<&mut Deflater> {
        if self.current.as_ref().is_some_and(|d| matches!(d, Deflater::Echo(_)) != searching) {
            self.end_segment(archive)?;
        }
        Ok(self.current.get_or_insert_with(|| match searching {
            true => Deflater::Echo(EchoDeflater::new()),
            false => Deflater::Repeat(RepeatDeflater::new()),
        }))
    }

    fn write_output(&mut self, archive: &mut Tarball) -> Result<()> {
        let out = match &mut self.current {
            Some(Deflater::Repeat(d)) => d.take_output(),
            Some(Deflater::Echo(d)) => d.take_output(),
            None => return Ok(()),
        };
        self.compressed += out.len() as u64;
        archive.write_streamed(&out)
    }

    /// Ends the current segment, if any.
    fn end_segment(&mut self, archive: &mut Tarball) -> Result<()> {
        let (tail, crc) = match self.current.take() {
            Some(Deflater::Repeat(d)) => d.finish(),
            Some(Deflater::Echo(d)) => d.finish(),
            None => return Ok(()),
        };
        self.compressed += tail.len() as u64;
        archive.write_streamed(&tail)?;
        match &mut self.ended {
            Some(ended) => ended.combine(&crc),
            None => self.ended = Some(crc),
        }
        Ok(())
    }

    /// Ends the streamed entry (`len` bytes); returns the compressed size.
    fn finish(mut self, archive: &mut Tarball, len: u64) -> Result<u64> {
        // An empty text still ends a segment.
        self.current.get_or_insert_with(|| Deflater::Repeat(RepeatDeflater::new()));
        self.end_segment(archive)?;
        let crc = self.ended.take().expect("a segment ended");
        archive.end_streamed(&[], &crc, len)?;
        Ok(self.compressed)
    }
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
    use super::super::earlier::WINDOW_BYTES;
    use super::super::sample_sink::{Chunk, SampleSink};
    use super::*;
    use crate::archive::deflate::{deflate_segment, inflate_segment as inflate, Codec, RepeatDeflater};
    use crate::report::profile::ReportOptions;
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

    /// `n` samples of 300 stacks over 20 call paths (shared tails, leaves at a few addresses, depths 0 to 120):
    /// mostly a few hot stacks, sometimes any. `unshared(i)` says how likely sample `i`'s stack comes unshared (the
    /// symbolizer's cache stopped paying: no ids for its rests), in percent.
    fn random_samples(seed: u64, n: u64, unshared: impl Fn(u64) -> u64) -> Vec<ResolvedSample> {
        let mut rng = crate::random_inputs::Rng::new(seed);
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
        (0..n)
            .map(|i| {
                let stack = if next(4) == 0 { next(300) } else { next(6) } as usize;
                ResolvedSample {
                    pid: 7,
                    tid: 7 + next(3) as u32,
                    cpu: next(2) as u32,
                    time: 1_000_000_000 + i * 1_000_123,
                    period: 1_000_000,
                    off_cpu: None,
                    comm: comm.clone(),
                    event: event.clone(),
                    frames: match next(100) < unshared(i) {
                        true => Stack::from(stacks[stack].to_vec()),
                        false => stacks[stack].clone(),
                    },
                }
            })
            .collect()
    }

    /// Samples as the outputs stream renders them: header lines (fed with their spans) and stack texts (fed by
    /// their piece ids), from stacks that repeat near and far, share tails, come and go, shared or not.
    #[test]
    fn stack_texts_round_trip_and_repeats_become_matches() {
        let mut writer = ScriptWriter::new(&ScriptOptions::default());
        let mut deflater = RepeatDeflater::new();
        let mut text = Vec::new();
        let (mut header, mut spans, mut own_lines) = (Vec::new(), Vec::new(), Vec::new());
        let mut out = Vec::new();
        for (i, sample) in random_samples(0x9e37_79b9_7f4a_7c15, 6000, |_| 20).iter().enumerate() {
            header.clear();
            spans.clear();
            own_lines.clear();
            match writer.render(sample, &mut header, Some(&mut spans), &mut own_lines) {
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

    /// The chunks the report stage makes of `samples`, and their text.
    fn chunks_of(samples: &mut [ResolvedSample]) -> (Vec<Chunk>, Vec<u8>) {
        let (to_writer, chunks) = mpsc::sync_channel(samples.len() + 1);
        let (_recycle, recycled) = mpsc::channel();
        let mut sink = SampleSink::new(&ReportOptions::default(), to_writer, recycled);
        for sample in samples.iter_mut() {
            sink.take(sample).unwrap();
        }
        sink.finish().unwrap();
        let chunks: Vec<Chunk> = chunks.into_iter().collect();
        let mut text = Vec::new();
        for chunk in &chunks {
            let mut slices = Vec::new();
            chunk.pieces(&mut slices);
            slices.iter().for_each(|s| text.extend_from_slice(s));
        }
        (chunks, text)
    }

    /// An archive `name` in `dir` made by the compressor of `chunks`, the first `as_before` of them as the earlier
    /// run wrote them, with `earlier` as the earlier archive. Returns its perf_script.out and its streamed entry's
    /// compressed bytes.
    fn compressed(dir: &Dir, name: &str, chunks: Vec<Chunk>, as_before: usize, earlier: &str) -> (Vec<u8>, Vec<u8>) {
        let archive = Tarball::create(dir, name).unwrap();
        let (to_compressor, written) = mpsc::sync_channel(chunks.len());
        for (i, chunk) in chunks.into_iter().enumerate() {
            to_compressor.send(Written { chunk, as_before: i < as_before }).unwrap();
        }
        drop(to_compressor);
        let (recycle, _recycled) = mpsc::channel();
        let earlier = || File::open(dir.shown(earlier)).ok();
        let (archive, len) = compress(written, recycle, archive, dir, earlier).unwrap();
        archive
            .finish(&crate::archive::tarball::tar_header(Path::new("perf_script.out"), len, 0, false).unwrap())
            .unwrap();
        let file = File::open(dir.shown(name)).unwrap();
        let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(&file));
        let mut entry = tar.entries().unwrap().next().unwrap().unwrap();
        assert_eq!(entry.path().unwrap(), Path::new("perf_script.out"));
        let mut text = Vec::new();
        std::io::Read::read_to_end(&mut entry, &mut text).unwrap();
        let index = ArchiveIndex::read(&file).unwrap().get(Indexed::Streamed).expect("the streamed entry indexed");
        let mut bytes = vec![0; index.compressed_len as usize];
        file.read_exact_at(&mut bytes, index.at).unwrap();
        (text, bytes)
    }

    /// The compressor's ways with perf_script.out: chunks of shared and of unshared stacks (one encoder each, a
    /// segment per change), an earlier archive's entry copied where every chunk is as before and it holds them, and
    /// the bytes passed by compressed from the file where a chunk differs or it does not.
    #[test]
    fn the_script_entry_is_compressed_copied_or_caught_up_from_the_file() {
        let scratch = tempfile::tempdir().unwrap();
        let dir = Dir::open(scratch.path()).unwrap();
        // Shared stacks, then unshared ones, then shared again.
        let mixed = |seed| random_samples(seed, 3000, |i| if (1000..2000).contains(&i) { 100 } else { 5 });
        let (chunks, text) = chunks_of(&mut mixed(1));
        assert!(chunks.len() > 6 && chunks.iter().any(|c| c.mostly_unshared_stacks()));
        assert!(chunks.iter().filter(|c| !c.mostly_unshared_stacks()).count() > 2);
        dir.write_file("perf_script.out", &text).unwrap();

        let (unpacked, fresh) = compressed(&dir, "fresh.tar.gz", chunks_of(&mut mixed(1)).0, 0, "none");
        assert!(unpacked == text, "compressed anew");
        let (unpacked, copied) =
            compressed(&dir, "copied.tar.gz", chunks_of(&mut mixed(1)).0, usize::MAX, "fresh.tar.gz");
        assert!(unpacked == text && copied == fresh, "taken from the earlier archive");
        for as_before in [1, 3, 5] {
            let (unpacked, _) =
                compressed(&dir, "caught-up.tar.gz", chunks_of(&mut mixed(1)).0, as_before, "fresh.tar.gz");
            assert!(unpacked == text, "{as_before} chunks as before, then compressed");
            dir.remove_file("caught-up.tar.gz").unwrap();
        }
        // Every chunk as before, but the earlier archive holds another text (or none): compressed from the file.
        let (_, other) = chunks_of(&mut mixed(2));
        compressed(&dir, "other.tar.gz", chunks_of(&mut mixed(2)).0, 0, "none");
        for earlier in ["other.tar.gz", "none"] {
            let (unpacked, _) = compressed(&dir, "stale.tar.gz", chunks_of(&mut mixed(1)).0, usize::MAX, earlier);
            assert!(unpacked == text && other != text, "an earlier archive of another text ({earlier}) was believed");
            dir.remove_file("stale.tar.gz").unwrap();
        }
    }
}
