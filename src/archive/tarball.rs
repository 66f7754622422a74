//! prof.tar.gz as the outputs are being made: one gzip member (RFC 1952) of a plain tar (GNU headers, relative
//! paths, files and folders only), joined from deflate segments made independently (see [`super::deflate`]).
//!
//! The first entry (perf_script.out) is streamed: its content is compressed while it is written, before its size
//! is known, so its tar header goes into a stored block that is rewritten in place at the end. Every other entry
//! comes as a finished segment. The CRC-32 of the whole is combined from the pieces' CRCs.

use super::deflate::{deflate_segment, stored_block, Codec, EchoDeflater, FINAL_BLOCK};
use crate::fs::Dir;
use crate::repeats::Echo;
use anyhow::{Context, Result};
use crc32fast::Hasher as Crc;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

pub const BLOCK: usize = 512;
const ZEROS: [u8; 2 * BLOCK] = [0; 2 * BLOCK];

/// Gzip header: deflate, no name or extra fields, no time, OS Unix.
const GZIP_HEADER: [u8; 10] = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3];

/// A tar header for a regular file or a folder (a relative path of at most 100 bytes).
pub fn tar_header(path: &Path, size: u64, mtime: u64, dir: bool) -> Result<[u8; BLOCK]> {
    let mut h = tar::Header::new_gnu();
    // A trailing slash marks folders the way GNU tar writes them.
    let mut name = path.as_os_str().to_os_string();
    if dir {
        name.push("/");
    }
    h.set_path(&name).with_context(|| format!("cannot archive {}: name too long", path.display()))?;
    h.set_entry_type(if dir { tar::EntryType::Directory } else { tar::EntryType::Regular });
    h.set_size(size);
    h.set_mode(if dir { 0o755 } else { 0o644 });
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(mtime);
    h.set_cksum();
    Ok(*h.as_bytes())
}

/// One archive entry made from bytes at hand.
pub enum Entry<'a> {
    Dir(PathBuf, u64),
    /// Name, content, modification time.
    File(PathBuf, &'a [u8], u64),
}

/// Copies a spilled segment's `len` bytes, in the kernel (copy_file_range): they never pass through this process's
/// memory.
fn copy_spilled(mut from: &File, len: u64, to: &mut File) -> std::io::Result<()> {
    from.seek(SeekFrom::Start(0))?;
    match std::io::copy(&mut from.take(len), to)? == len {
        true => Ok(()),
        false => Err(std::io::Error::other("its compressed segment became shorter")),
    }
}

/// Zero bytes that pad an entry of `size` bytes to the block size.
pub fn padding(size: u64) -> &'static [u8] {
    &ZEROS[..(BLOCK - size as usize % BLOCK) % BLOCK]
}

/// The end-of-archive marker: two zero blocks.
pub fn end_of_archive() -> &'static [u8] {
    &ZEROS
}

pub fn mtime_of(meta: &std::fs::Metadata) -> u64 {
    meta.modified().ok().and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok()).map_or(0, |d| d.as_secs())
}

pub fn now() -> u64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// One compressed piece of the archive and what it decompresses to.
pub struct Segment {
    pub compressed: Compressed,
    pub crc: Crc,
    /// Bytes it decompresses to.
    pub len: u64,
}

/// Where a segment's compressed bytes are.
pub enum Compressed {
    Memory(Vec<u8>),
    /// The first `len` bytes of a file (a segment that may be too large to keep in memory).
    File(File, u64),
}

impl Compressed {
    /// How many compressed bytes.
    pub fn size(&self) -> u64 {
        match self {
            Compressed::Memory(bytes) => bytes.len() as u64,
            Compressed::File(_, len) => *len,
        }
    }
}

impl Segment {
    /// A segment of one entry read from an open file (`len` bytes of it, in pieces: the file is not kept in
    /// memory), compressed by [`EchoDeflater`] with the echoes `find_echoes` gives (see [`SegmentWriter::read`]; the
    /// file's first byte follows the 512-byte tar header in the stream). `|_, bytes, _| bytes.len()` finds none. The
    /// compressed bytes go to `spill` as they are made (a file's segment can be hundreds of MB); `spill_name` names
    /// it in messages.
    pub fn of_file(
        name: &Path,
        mut file: File,
        len: u64,
        mtime: u64,
        mut find_echoes: impl FnMut(u64, &[u8], &mut Vec<Echo>) -> usize,
        spill: (File, &Path),
    ) -> Result<Segment> {
        let mut w = SegmentWriter::new(spill);
        w.feed(&tar_header(name, len, mtime, false)?);
        let mut left = len;
        while left > 0 {
            let n =
                w.read(&mut file, left, &mut find_echoes).with_context(|| format!("cannot read {}", name.display()))?;
            if n == 0 {
                anyhow::bail!("{} became shorter while it was archived", name.display());
            }
            left -= n as u64;
        }
        w.feed(padding(len));
        w.finish()
    }

    /// A segment of `parts`, one after the other (pieces of entries: the caller makes them whole).
    pub fn of_bytes(codec: Codec, parts: &[&[u8]]) -> Segment {
        let len = parts.iter().map(|p| p.len() as u64).sum();
        let (compressed, crc) = deflate_segment(codec, parts.iter().copied());
        Segment { compressed: Compressed::Memory(compressed), crc, len }
    }

    /// A segment of whole entries (header, content, padding each), ending the archive if `last`.
    pub fn of_entries(codec: Codec, entries: &[Entry], last: bool) -> Result<Segment> {
        let mut headers = Vec::with_capacity(entries.len());
        for entry in entries {
            headers.push(match entry {
                Entry::Dir(name, mtime) => tar_header(name, 0, *mtime, true)?,
                Entry::File(name, content, mtime) => tar_header(name, content.len() as u64, *mtime, false)?,
            });
        }
        let parts = entries.iter().zip(&headers).flat_map(|(entry, header)| {
            let content: &[u8] = match entry {
                Entry::Dir(..) => &[],
                Entry::File(_, content, _) => content,
            };
            [&header[..], content, padding(content.len() as u64)]
        });
        let end: &[u8] = if last { end_of_archive() } else { &[] };
        let len = parts.clone().chain([end]).map(|p| p.len() as u64).sum();
        let (compressed, crc) = deflate_segment(codec, parts.chain([end]));
        Ok(Segment { compressed: Compressed::Memory(compressed), crc, len })
    }
}

/// A segment compressed as its bytes come, by [`EchoDeflater`]: from a file while it is still being written, or
/// read whole ([`Segment::of_file`]). The compressed bytes go to a spill file as they are made.
pub struct SegmentWriter {
    d: EchoDeflater,
    spill: File,
    spill_name: PathBuf,
    compressed_len: u64,
    echoes: Vec<Echo>,
}

impl SegmentWriter {
    /// Into `spill` (named `spill_name` in messages), which must be empty.
    pub fn new((spill, spill_name): (File, &Path)) -> SegmentWriter {
        SegmentWriter {
            d: EchoDeflater::new(),
            spill,
            spill_name: spill_name.to_path_buf(),
            compressed_len: 0,
            echoes: Vec::new(),
        }
    }

    /// Bytes in which nothing is looked for; compressed with what follows them.
    pub fn feed(&mut self, bytes: &[u8]) {
        self.d.feed(bytes);
    }

    /// Reads at most `want` bytes (1 MB at a time) from `file` and compresses what can be: `find_echoes` is called
    /// with the stream from position `at` on, the bytes waiting to be compressed (those a previous call did not
    /// take come again), appends the echoes it finds there and returns how many of those bytes can be compressed
    /// now (the rest waits for the next read, or for [`finish`](Self::finish)). Returns the bytes read (0 at the
    /// end of the file).
    pub fn read(
        &mut self,
        file: &mut File,
        want: u64,
        find_echoes: &mut impl FnMut(u64, &[u8], &mut Vec<Echo>) -> usize,
    ) -> Result<usize> {
        const READ: usize = 1 << 20;
        let want = READ.min(usize::try_from(want).unwrap_or(usize::MAX));
        let n = file.read(&mut self.d.space(want)[..want])?;
        self.d.filled(n);
        let (at, waiting) = self.d.waiting();
        self.echoes.clear();
        let ready = find_echoes(at, waiting, &mut self.echoes).min(waiting.len());
        self.d.encode(ready, &self.echoes);
        self.spill()?;
        Ok(n)
    }

    fn spill(&mut self) -> Result<()> {
        let out = self.d.take_output();
        self.compressed_len += out.len() as u64;
        self.spill.write_all(&out).with_context(|| format!("cannot write {} (disk full?)", self.spill_name.display()))
    }

    /// Compresses what is waiting and ends the segment.
    pub fn finish(mut self) -> Result<Segment> {
        let len = self.d.waiting().0 + self.d.waiting().1.len() as u64;
        let (tail, crc) = self.d.finish();
        self.compressed_len += tail.len() as u64;
        self.spill
            .write_all(&tail)
            .with_context(|| format!("cannot write {} (disk full?)", self.spill_name.display()))?;
        Ok(Segment { compressed: Compressed::File(self.spill, self.compressed_len), crc, len })
    }
}

pub struct Tarball {
    file: File,
    path: PathBuf,
    /// Where the streamed entry's header (the payload of a stored block) lies in the file.
    first_header_at: u64,
    /// The CRC and length of everything after that header.
    crc_after_header: Crc,
    len_after_header: u64,
}

impl Tarball {
    /// Creates the archive (a new file `name` in `dir`) and reserves the streamed first entry's header.
    pub fn create(dir: &Dir, name: &str) -> Result<Tarball> {
        let path = dir.shown(name);
        let mut file = dir.create_file(name).with_context(|| format!("cannot create {}", path.display()))?;
        let placeholder = stored_block(&[0; BLOCK]);
        file.write_all(&GZIP_HEADER)
            .and_then(|()| file.write_all(&placeholder))
            .with_context(|| format!("cannot write {}", path.display()))?;
        let first_header_at = (GZIP_HEADER.len() + placeholder.len() - BLOCK) as u64;
        Ok(Tarball { file, path, first_header_at, crc_after_header: Crc::new(), len_after_header: 0 })
    }

    /// Appends compressed bytes of the streamed entry (their CRC is given at [`end_streamed`](Self::end_streamed)).
    pub fn write_streamed(&mut self, compressed: &[u8]) -> Result<()> {
        self.file.write_all(compressed).with_context(|| format!("cannot write {}", self.path.display()))
    }

    /// Ends the streamed entry: its last compressed bytes, the CRC and length of its content, and the padding.
    pub fn end_streamed(&mut self, compressed: &[u8], content_crc: &Crc, content_len: u64) -> Result<()> {
        self.write_streamed(compressed)?;
        self.crc_after_header.combine(content_crc);
        let pad = padding(content_len);
        self.len_after_header += content_len + pad.len() as u64;
        if !pad.is_empty() {
            self.crc_after_header.update(pad);
            self.write_streamed(&stored_block(pad))?;
        }
        Ok(())
    }

    pub fn append(&mut self, segment: &Segment) -> Result<()> {
        self.crc_after_header.combine(&segment.crc);
        self.len_after_header += segment.len;
        let written = match &segment.compressed {
            Compressed::Memory(bytes) => self.file.write_all(bytes),
            Compressed::File(file, len) => copy_spilled(file, *len, &mut self.file),
        };
        written.with_context(|| format!("cannot write {}", self.path.display()))
    }

    /// Writes the end of the stream, the gzip trailer, and the streamed entry's real header over the reserved one.
    pub fn finish(mut self, first_header: &[u8; BLOCK]) -> Result<()> {
        let ctx = || format!("cannot write {}", self.path.display());
        let mut crc = Crc::new();
        crc.update(first_header);
        crc.combine(&self.crc_after_header);
        self.file.write_all(&FINAL_BLOCK).with_context(ctx)?;
        // ISIZE is the length modulo 2^32.
        let mut trailer = crc.clone().finalize().to_le_bytes().to_vec();
        trailer.extend_from_slice(&((BLOCK as u64 + self.len_after_header) as u32).to_le_bytes());
        self.file.write_all(&trailer).with_context(ctx)?;
        self.file.write_all_at(first_header, self.first_header_at).with_context(ctx)?;
        Ok(())
    }
}
