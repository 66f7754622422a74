//! prof.tar.gz as the outputs are being made: one gzip member (RFC 1952) of a plain tar (GNU headers, relative
//! paths, files and folders only), joined from deflate segments made independently (see [`super::deflate`]).
//!
//! The first entry (perf_script.out) is streamed: its content is compressed while it is written, before its size
//! is known, so its tar header goes into a stored block that is rewritten in place at the end. Every other entry
//! comes as a finished segment — but for one that may be compressed at the same time as the first, far into the
//! file ([`FarEntry`]: a recording's perf.data, hundreds of MB compressed), and joined to what precedes it without
//! copying. The CRC-32 of the whole is combined from the pieces' CRCs.
//!
//! The gzip header's extra field (RFC 1952 FEXTRA, ignored by every gzip reader) says where perf.data's entry, the
//! naming files' segment and the streamed entry's content lie in the file and what they unpack to
//! ([`ArchiveIndex`]): a later run that archives the same bytes copies their compressed bytes ([`Segment::reused`])
//! instead of compressing them again. For
//! perf.data it also keeps the file's [`FileStamp`], so that a later run knows the file unchanged without reading
//! hundreds of MB to compute their CRC again.

use super::deflate::{deflate_segment, stored_block, Codec, EchoDeflater, FINAL_BLOCK};
use crate::fs::Dir;
use crate::repeats::Echo;
use anyhow::{Context, Result};
use crc32fast::Hasher as Crc;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

pub const BLOCK: usize = 512;
const ZEROS: [u8; 2 * BLOCK] = [0; 2 * BLOCK];

/// Gzip header: deflate, an extra field, no name, no time, OS Unix; then the extra field's length (XLEN).
const GZIP_HEADER: [u8; 12] = [0x1f, 0x8b, 8, 4, 0, 0, 0, 0, 0, 3, INDEX_FIELD_LEN as u8, 0];

/// The extra field holds one subfield: its id, its length, then an [`ArchiveIndex`] (zeros until the archive is
/// finished).
const INDEX_ID: [u8; 2] = *b"PF";
const INDEX_LEN: usize = 4 + Indexed::ALL.len() * SLOT_LEN;
const SLOT_LEN: usize = 72;
const INDEX_FIELD_LEN: usize = 4 + INDEX_LEN;
const _: () = assert!(INDEX_FIELD_LEN <= u8::MAX as usize, "XLEN's high byte is written as zero");
/// Where the index lies in the file.
const INDEX_AT: u64 = (GZIP_HEADER.len() + 4) as u64;
const INDEX_VERSION: u8 = 3;

/// The last bytes of every segment: an empty stored block after a sync flush.
const SEGMENT_END: [u8; 4] = [0, 0, 0xff, 0xff];

/// The entries whose place the archive's index keeps, for a later run to copy instead of compressing again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Indexed {
    /// perf.data's tar entry.
    Recording,
    /// What names the frames (`symbols/`, or the perf maps beside a `perf record` file), as one segment.
    Naming,
    /// The streamed entry's content (perf_script.out's bytes, without its header and padding).
    Streamed,
}

impl Indexed {
    const ALL: [Indexed; 3] = [Indexed::Recording, Indexed::Naming, Indexed::Streamed];

    fn slot(self) -> usize {
        self as usize
    }
}

/// Where an indexed part of an archive lies: `compressed_len` bytes of independent deflate blocks at offset `at`,
/// unpacking to `len` bytes of CRC-32 `crc`; and, for a part made of one file, that file's stamp when it was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IndexEntry {
    pub at: u64,
    pub compressed_len: u64,
    pub len: u64,
    pub crc: u32,
    pub stamp: Option<FileStamp>,
}

/// What tells that a file's bytes are the ones read before, without reading them: its file system and inode (the same
/// file, not another put in its place), its length, and its modification and status-change times in nanoseconds.
/// A write, a truncation or `touch` sets the status-change time to the clock's time, and nobody but the kernel can set
/// it otherwise; so a file whose stamp is unchanged was not changed — provided its last change was before the stamp
/// was taken by more than a tick of the file system's clock ([`FileStamp::settled`]), and the clock was not set
/// back past it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime_ns: i64,
    ctime_ns: i64,
}

impl FileStamp {
    /// How long before `now` a file's last change must be for its stamp to be believed. File system clocks tick
    /// coarsely (a jiffy on Linux's local file systems, up to a second or two elsewhere): a file changed again in
    /// the tick of its last change would keep its times.
    const SETTLED_NS: i64 = 2_000_000_000;

    /// The stamp of the file `meta` describes, taken at `now`; `None` if its last change is too recent to tell a
    /// later change by its times.
    pub fn settled(meta: &std::fs::Metadata, now: SystemTime) -> Option<FileStamp> {
        let now_ns = i64::try_from(now.duration_since(SystemTime::UNIX_EPOCH).ok()?.as_nanos()).ok()?;
        let ns = |secs: i64, nsecs: i64| secs.checked_mul(1_000_000_000)?.checked_add(nsecs);
        let stamp = FileStamp {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
            mtime_ns: ns(meta.mtime(), meta.mtime_nsec())?,
            ctime_ns: ns(meta.ctime(), meta.ctime_nsec())?,
        };
        let settled = stamp.ctime_ns.max(stamp.mtime_ns).checked_add(Self::SETTLED_NS)? <= now_ns;
        (settled && stamp != FileStamp::EMPTY).then_some(stamp)
    }

    /// A slot's bytes for no stamp.
    const EMPTY: FileStamp = FileStamp { dev: 0, ino: 0, len: 0, mtime_ns: 0, ctime_ns: 0 };

    fn words(self) -> [u64; 5] {
        [self.dev, self.ino, self.len, self.mtime_ns as u64, self.ctime_ns as u64]
    }
}

/// The index in an archive's gzip header: version byte, three zeros, then per [`Indexed`] slot the little-endian
/// `at`, `compressed_len` and `len` (u64), `crc` (u32), four zeros, then the [`FileStamp`]'s device, inode, length,
/// modification and status-change times (u64, zeros for none); a slot of zeros is empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ArchiveIndex([Option<IndexEntry>; Indexed::ALL.len()]);

impl ArchiveIndex {
    pub fn get(&self, which: Indexed) -> Option<IndexEntry> {
        self.0[which.slot()]
    }

    fn to_bytes(self) -> [u8; INDEX_LEN] {
        let mut b = [0u8; INDEX_LEN];
        b[0] = INDEX_VERSION;
        for (slot, entry) in self.0.iter().enumerate() {
            let Some(e) = entry else { continue };
            let at = 4 + slot * SLOT_LEN;
            b[at..at + 8].copy_from_slice(&e.at.to_le_bytes());
            b[at + 8..at + 16].copy_from_slice(&e.compressed_len.to_le_bytes());
            b[at + 16..at + 24].copy_from_slice(&e.len.to_le_bytes());
            b[at + 24..at + 28].copy_from_slice(&e.crc.to_le_bytes());
            let stamp = e.stamp.unwrap_or(FileStamp::EMPTY).words();
            for (i, word) in stamp.iter().enumerate() {
                b[at + 32 + 8 * i..at + 40 + 8 * i].copy_from_slice(&word.to_le_bytes());
            }
        }
        b
    }

    /// The index of an archive this module wrote; each entry only if it lies inside the file.
    pub fn read(archive: &File) -> Option<ArchiveIndex> {
        let mut head = [0u8; GZIP_HEADER.len() + INDEX_FIELD_LEN];
        archive.read_exact_at(&mut head, 0).ok()?;
        let wanted = [&GZIP_HEADER[..], &INDEX_ID, &(INDEX_LEN as u16).to_le_bytes(), &[INDEX_VERSION]].concat();
        if head[..wanted.len()] != wanted[..] {
            return None;
        }
        let file_len = archive.metadata().ok()?.len();
        let index = &head[INDEX_AT as usize..];
        let mut entries = [None; Indexed::ALL.len()];
        for (slot, entry) in entries.iter_mut().enumerate() {
            let at = 4 + slot * SLOT_LEN;
            let word = |i: usize| u64::from_le_bytes(index[at + i..at + i + 8].try_into().unwrap());
            let stamp = FileStamp {
                dev: word(32),
                ino: word(40),
                len: word(48),
                mtime_ns: word(56) as i64,
                ctime_ns: word(64) as i64,
            };
            let e = IndexEntry {
                at: word(0),
                compressed_len: word(8),
                len: word(16),
                crc: u32::from_le_bytes(index[at + 24..at + 28].try_into().unwrap()),
                stamp: (stamp != FileStamp::EMPTY).then_some(stamp),
            };
            let inside =
                e.at >= head.len() as u64 && e.at.checked_add(e.compressed_len).is_some_and(|end| end <= file_len);
            if inside && e.compressed_len >= SEGMENT_END.len() as u64 {
                *entry = Some(e);
            }
        }
        Some(ArchiveIndex(entries))
    }
}

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

/// Copies a spilled segment's `len` bytes at `at`, in the kernel (copy_file_range): they never pass through this
/// process's memory.
fn copy_spilled(mut from: &File, at: u64, len: u64, to: &mut File) -> std::io::Result<()> {
    from.seek(SeekFrom::Start(at))?;
    match std::io::copy(&mut from.take(len), to)? == len {
        true => Ok(()),
        false => Err(std::io::Error::other("its compressed segment became shorter")),
    }
}

/// Where a gap that starts at `end` may begin so that it can be collapsed (a multiple of `align`), leaving room
/// for deflate blocks that decode to nothing ([`no_op_blocks`]: none, or 5–7, 9 or more bytes).
fn collapse_start(end: u64, align: u64) -> u64 {
    let start = end.div_ceil(align) * align;
    match start - end {
        1..=4 | 8 => start + align,
        _ => start,
    }
}

/// Deflate blocks, `len` bytes in all (0, 5–7, or 9 and more), that decode to nothing: groups of k empty blocks of
/// fixed codes (10 bits each) and an empty stored block (which pads to the byte), 5, 6, 7 or 9 bytes for k = 0–3.
fn no_op_blocks(mut len: u64) -> Vec<u8> {
    let mut out = Vec::new();
    while len > 0 {
        let group = match len {
            5..=7 | 9 => len,
            _ if !matches!(len - 5, 1..=4 | 8) => 5,
            _ => 6,
        };
        let fixed_blocks = match group {
            9 => 3,
            g => g - 5,
        };
        let mut bits = vec![0u8; ((10 * fixed_blocks + 3) as usize).div_ceil(8)];
        for i in 0..fixed_blocks as usize {
            // BFINAL = 0, BTYPE = 01 (fixed codes), then end-of-block (seven zero bits).
            bits[(10 * i + 1) / 8] |= 1 << ((10 * i + 1) % 8);
        }
        out.extend_from_slice(&bits);
        out.extend_from_slice(&[0, 0, 0xff, 0xff]);
        len -= group;
    }
    out
}

/// Removes `len` bytes of `file` at `offset` (both multiples of its block size), moving what follows down
/// without copying it.
fn collapse_range(file: &File, offset: u64, len: u64) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let (offset, len) = (i64::try_from(offset).unwrap_or(i64::MAX), i64::try_from(len).unwrap_or(i64::MAX));
    // SAFETY: fallocate on a descriptor this process owns; it changes only that file.
    match unsafe { libc::fallocate(file.as_raw_fd(), libc::FALLOC_FL_COLLAPSE_RANGE, offset, len) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// Copies `len` bytes of `file` from `from` to `to` (ranges apart), in the kernel where it can.
fn copy_within(file: &File, mut from: u64, mut to: u64, len: u64) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let mut left = len;
    while left > 0 {
        let (mut off_in, mut off_out) = (from as i64, to as i64);
        let want = usize::try_from(left).unwrap_or(usize::MAX).min(1 << 30);
        // SAFETY: copy_file_range between offsets of one descriptor this process owns; the offsets are its own
        // variables.
        let n =
            unsafe { libc::copy_file_range(file.as_raw_fd(), &mut off_in, file.as_raw_fd(), &mut off_out, want, 0) };
        let n = match n {
            n if n > 0 => n as u64,
            0 => return Err(std::io::Error::other("the far entry ended early")),
            _ => {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                // No copy_file_range here (an old kernel, another file system): through memory.
                let mut buf = vec![0u8; want.min(1 << 20)];
                file.read_exact_at(&mut buf, from)?;
                file.write_all_at(&buf, to)?;
                buf.len() as u64
            }
        };
        (from, to, left) = (from + n, to + n, left - n);
    }
    Ok(())
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
    /// The stamp of the file it was made of, if that file's bytes are all it holds (see [`FileStamp`]).
    pub stamp: Option<FileStamp>,
}

/// Where a segment's compressed bytes are.
pub enum Compressed {
    Memory(Vec<u8>),
    /// `len` bytes of a file from offset `at` (a segment that may be too large to keep in memory, or one taken from
    /// an earlier archive).
    File {
        file: File,
        at: u64,
        len: u64,
    },
    /// `len` bytes in the archive's [`FarEntry`].
    Far(u64),
}

impl Compressed {
    /// How many compressed bytes.
    pub fn size(&self) -> u64 {
        match self {
            Compressed::Memory(bytes) => bytes.len() as u64,
            Compressed::File { len, .. } | Compressed::Far(len) => *len,
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

    /// Made of the file whose stamp (taken before it was read) is `stamp`.
    pub fn stamped(self, stamp: Option<FileStamp>) -> Segment {
        Segment { stamp, ..self }
    }

    /// The `which` part of an earlier `archive`, if it unpacks to what this run would archive there: `len` bytes
    /// whose CRC-32 `crc` computes (asked only when the rest fits: see [`file_entry_crc`] and [`entries_checksum`]),
    /// or — not asked — the bytes of the file whose `stamp` the index keeps for that part. Only an archive of this
    /// user is believed: its compressed bytes are copied as they are.
    pub fn reused(
        archive: File,
        which: Indexed,
        len: u64,
        stamp: Option<FileStamp>,
        crc: impl FnOnce() -> Option<u32>,
    ) -> Option<Segment> {
        use std::os::unix::fs::MetadataExt;
        // SAFETY: geteuid only reads this process's credentials.
        if archive.metadata().ok()?.uid() != unsafe { libc::geteuid() } {
            return None;
        }
        let index = ArchiveIndex::read(&archive)?.get(which)?;
        let mut end = [0u8; SEGMENT_END.len()];
        archive.read_exact_at(&mut end, index.at + index.compressed_len - SEGMENT_END.len() as u64).ok()?;
        if index.len != len || end != SEGMENT_END {
            return None;
        }
        let unchanged = stamp.is_some() && index.stamp == stamp;
        if !unchanged && crc()? != index.crc {
            return None;
        }
        let compressed = Compressed::File { file: archive, at: index.at, len: index.compressed_len };
        Some(Segment { compressed, crc: Crc::new_with_initial_len(index.crc, len), len, stamp })
    }

    /// A segment of `parts`, one after the other (pieces of entries: the caller makes them whole).
    pub fn of_bytes(codec: Codec, parts: &[&[u8]]) -> Segment {
        let len = parts.iter().map(|p| p.len() as u64).sum();
        let (compressed, crc) = deflate_segment(codec, parts.iter().copied());
        Segment { compressed: Compressed::Memory(compressed), crc, len, stamp: None }
    }

    /// A segment of whole entries (header, content, padding each), ending the archive if `last`.
    pub fn of_entries(codec: Codec, entries: &[Entry], last: bool) -> Result<Segment> {
        let headers = entry_headers(entries)?;
        let end: &[u8] = if last { end_of_archive() } else { &[] };
        let parts = entry_parts(entries, &headers).chain([end]);
        let len = parts.clone().map(|p| p.len() as u64).sum();
        let (compressed, crc) = deflate_segment(codec, parts);
        Ok(Segment { compressed: Compressed::Memory(compressed), crc, len, stamp: None })
    }
}

/// A segment of file entries whose contents come in pieces, compressed by [`EchoDeflater`] as they come, so that no
/// content is held whole: [`begin`](Self::begin) an entry with its length, [`feed_echoing`](Self::feed_echoing) its
/// bytes (with where they repeat earlier ones, if known), [`end`](Self::end) it.
#[derive(Default)]
pub struct StreamedEntries {
    deflater: EchoDeflater,
    len: u64,
    /// The entry begun: its name, how many of its bytes are still to come, and where its contents start in the
    /// stream.
    open: Option<(PathBuf, u64, u64)>,
    echoes: Vec<Echo>,
}

impl StreamedEntries {
    /// Begins a file entry of `len` bytes (the previous one must be ended).
    pub fn begin(&mut self, name: &Path, len: u64, mtime: u64) -> Result<()> {
        anyhow::ensure!(self.open.is_none(), "{}: an entry was begun before the one before it ended", name.display());
        self.deflater.feed(&tar_header(name, len, mtime, false)?);
        self.len += BLOCK as u64;
        self.open = Some((name.to_path_buf(), len, self.len));
        Ok(())
    }

    /// The next bytes of the entry begun, and where they repeat earlier bytes of it, if known: `echoes` count
    /// positions from the entry's first byte, in order.
    pub fn feed_echoing(&mut self, bytes: &[u8], echoes: &[Echo]) -> Result<()> {
        let Some((name, left, start)) = &mut self.open else { anyhow::bail!("archive content given outside an entry") };
        *left = left
            .checked_sub(bytes.len() as u64)
            .with_context(|| format!("{} became longer than its archive entry", name.display()))?;
        let start = *start;
        self.echoes.clear();
        self.echoes.extend(echoes.iter().map(|e| Echo { at: start + e.at, from: start + e.from, len: e.len }));
        self.deflater.space(bytes.len())[..bytes.len()].copy_from_slice(bytes);
        self.deflater.filled(bytes.len());
        self.deflater.encode(bytes.len(), &self.echoes);
        self.len += bytes.len() as u64;
        Ok(())
    }

    /// Ends the entry begun, which must have had all its bytes.
    pub fn end(&mut self) -> Result<()> {
        match self.open.take() {
            Some((_, 0, _)) => {}
            Some((name, ..)) => anyhow::bail!("{} is shorter than its archive entry", name.display()),
            None => anyhow::bail!("no archive entry to end"),
        }
        // Everything before the content is whole blocks.
        let pad = padding(self.len);
        self.deflater.feed(pad);
        self.len += pad.len() as u64;
        Ok(())
    }

    pub fn finish(self) -> Result<Segment> {
        anyhow::ensure!(self.open.is_none(), "an archive entry was not ended");
        let (compressed, crc) = self.deflater.finish();
        Ok(Segment { compressed: Compressed::Memory(compressed), crc, len: self.len, stamp: None })
    }
}

fn entry_headers(entries: &[Entry]) -> Result<Vec<[u8; BLOCK]>> {
    entries
        .iter()
        .map(|entry| match entry {
            Entry::Dir(name, mtime) => tar_header(name, 0, *mtime, true),
            Entry::File(name, content, mtime) => tar_header(name, content.len() as u64, *mtime, false),
        })
        .collect()
}

/// The bytes of `entries` in a tar: header, content and padding of each.
fn entry_parts<'a>(entries: &'a [Entry], headers: &'a [[u8; BLOCK]]) -> impl Iterator<Item = &'a [u8]> + Clone + 'a {
    entries.iter().zip(headers).flat_map(|(entry, header)| {
        let content: &[u8] = match entry {
            Entry::Dir(..) => &[],
            Entry::File(_, content, _) => content,
        };
        [&header[..], content, padding(content.len() as u64)]
    })
}

/// The length and CRC-32 of what [`Segment::of_entries`] makes of `entries` (not ending the archive).
pub fn entries_checksum(entries: &[Entry]) -> Result<(u64, u32)> {
    let headers = entry_headers(entries)?;
    let mut crc = Crc::new();
    entry_parts(entries, &headers).for_each(|part| crc.update(part));
    Ok((crc.total_len(), crc.finalize()))
}

/// The length of a file's tar entry: header, `len` bytes, padding.
pub fn file_entry_len(len: u64) -> u64 {
    BLOCK as u64 + len + padding(len).len() as u64
}

/// The CRC-32 of the tar entry [`Segment::of_file`] makes of the same arguments: its header, the first `len` bytes
/// of `content` (read in pieces, so the file is never held in memory), then the padding.
pub fn file_entry_crc(name: &Path, content: &File, len: u64, mtime: u64) -> Result<u32> {
    let mut crc = Crc::new();
    crc.update(&tar_header(name, len, mtime, false)?);
    let mut buf = vec![0u8; (1 << 20).min(len as usize)];
    let mut at = 0;
    while at < len {
        let n = buf.len().min((len - at) as usize);
        content.read_exact_at(&mut buf[..n], at)?;
        crc.update(&buf[..n]);
        at += n as u64;
    }
    crc.update(padding(len));
    Ok(crc.finalize())
}

/// A segment compressed as its bytes come, by [`EchoDeflater`]: from a file while it is still being written, or
/// read whole ([`Segment::of_file`]). The compressed bytes go to a spill file as they are made.
pub struct SegmentWriter {
    d: EchoDeflater,
    spill: File,
    spill_name: PathBuf,
    /// Where in `spill` the compressed bytes start (a [`FarEntry`]'s place in the archive).
    base: u64,
    far: bool,
    compressed_len: u64,
    echoes: Vec<Echo>,
}

impl SegmentWriter {
    /// Bytes read at a time: read, searched for echoes and compressed while they are in the core's cache. 1 MB
    /// reads left them to be fetched from memory again (and faulted in a buffer of 1 MB): compressing a 2.2 MB
    /// perf.data took 2.9 ms of CPU, 2.2 ms with 128 KB reads.
    const READ: usize = 128 << 10;

    /// Into `spill` (named `spill_name` in messages), which must be empty.
    pub fn new((spill, spill_name): (File, &Path)) -> SegmentWriter {
        SegmentWriter {
            d: EchoDeflater::new(),
            spill,
            spill_name: spill_name.to_path_buf(),
            base: 0,
            far: false,
            compressed_len: 0,
            echoes: Vec::new(),
        }
    }

    /// Into the archive's far entry, after its head.
    pub fn far(entry: &FarEntry) -> Result<SegmentWriter> {
        let spill = entry.file.try_clone().with_context(|| format!("cannot write {}", entry.path.display()))?;
        let mut w = SegmentWriter::new((spill, &entry.path));
        (w.base, w.far) = (FAR + STORED_OVERHEAD + entry.head_len as u64, true);
        Ok(w)
    }

    /// Bytes in which nothing is looked for; compressed with what follows them.
    pub fn feed(&mut self, bytes: &[u8]) {
        self.d.feed(bytes);
    }

    /// Reads at most `want` bytes ([`READ`](Self::READ) at a time) from `file` and compresses what can be:
    /// `find_echoes` is called with the stream from position `at` on, the bytes waiting to be compressed (those a
    /// previous call did not take come again), appends the echoes it finds there and returns how many of those bytes
    /// can be compressed now (the rest waits for the next read, or for [`finish`](Self::finish)). Returns the bytes
    /// read (0 at the end of the file).
    pub fn read(
        &mut self,
        file: &mut File,
        want: u64,
        find_echoes: &mut impl FnMut(u64, &[u8], &mut Vec<Echo>) -> usize,
    ) -> Result<usize> {
        let want = Self::READ.min(usize::try_from(want).unwrap_or(usize::MAX));
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
        let at = self.base + self.compressed_len;
        self.compressed_len += out.len() as u64;
        self.spill
            .write_all_at(&out, at)
            .with_context(|| format!("cannot write {} (disk full?)", self.spill_name.display()))
    }

    /// Compresses what is waiting and ends the segment.
    pub fn finish(mut self) -> Result<Segment> {
        let len = self.d.waiting().0 + self.d.waiting().1.len() as u64;
        let at = self.base + self.compressed_len;
        let (tail, crc) = self.d.finish();
        self.compressed_len += tail.len() as u64;
        self.spill
            .write_all_at(&tail, at)
            .with_context(|| format!("cannot write {} (disk full?)", self.spill_name.display()))?;
        let compressed = match self.far {
            true => Compressed::Far(self.compressed_len),
            false => Compressed::File { file: self.spill, at: 0, len: self.compressed_len },
        };
        Ok(Segment { compressed, crc, len, stamp: None })
    }
}

/// Where a [`FarEntry`] lies in the archive file: past anything the entries before it can reach (the file is sparse
/// until they are joined), a multiple of any file system's block size.
const FAR: u64 = 1 << 40;

/// Bytes a stored block adds to what it holds.
const STORED_OVERHEAD: u64 = 5;

/// An entry compressed far into the archive file while the streamed first entry is still being written, and
/// joined after it at the end ([`Tarball::join_far`]). Its first `head_len` bytes (its tar header among them) are
/// known only then: they go into a stored block at its start, written then.
pub struct FarEntry {
    file: File,
    path: PathBuf,
    head_len: usize,
}

pub struct Tarball {
    file: File,
    path: PathBuf,
    /// Where the streamed entry's header (the payload of a stored block) lies in the file.
    first_header_at: u64,
    /// The CRC and length of everything after that header.
    crc_after_header: Crc,
    len_after_header: u64,
    /// Compressed bytes of the streamed entry's content so far.
    streamed_len: u64,
    /// Where the indexed parts went, once they did.
    index: ArchiveIndex,
}

impl Tarball {
    /// Creates the archive (a new file `name` in `dir`) and reserves the streamed first entry's header.
    pub fn create(dir: &Dir, name: &str) -> Result<Tarball> {
        let path = dir.shown(name);
        let mut file = dir.create_file(name).with_context(|| format!("cannot create {}", path.display()))?;
        let placeholder = stored_block(&[0; BLOCK]);
        let index_field = [&INDEX_ID[..], &(INDEX_LEN as u16).to_le_bytes(), &[0; INDEX_LEN]].concat();
        file.write_all(&GZIP_HEADER)
            .and_then(|()| file.write_all(&index_field))
            .and_then(|()| file.write_all(&placeholder))
            .with_context(|| format!("cannot write {}", path.display()))?;
        let first_header_at = (GZIP_HEADER.len() + index_field.len() + placeholder.len() - BLOCK) as u64;
        let (crc_after_header, len_after_header, index) = (Crc::new(), 0, ArchiveIndex::default());
        Ok(Tarball { file, path, first_header_at, crc_after_header, len_after_header, streamed_len: 0, index })
    }

    /// Appends compressed bytes of the streamed entry (their CRC is given at [`end_streamed`](Self::end_streamed)).
    pub fn write_streamed(&mut self, compressed: &[u8]) -> Result<()> {
        self.streamed_len += compressed.len() as u64;
        self.file.write_all(compressed).with_context(|| format!("cannot write {}", self.path.display()))
    }

    /// Ends the streamed entry: its last compressed bytes (which end a segment), the CRC and length of its content,
    /// and the padding. Its content is indexed ([`Indexed::Streamed`]).
    pub fn end_streamed(&mut self, compressed: &[u8], content_crc: &Crc, content_len: u64) -> Result<()> {
        self.write_streamed(compressed)?;
        let at = self.first_header_at + BLOCK as u64;
        let entry = IndexEntry {
            at,
            compressed_len: self.streamed_len,
            len: content_len,
            crc: content_crc.clone().finalize(),
            stamp: None,
        };
        self.index.0[Indexed::Streamed.slot()] = Some(entry);
        self.crc_after_header.combine(content_crc);
        let pad = padding(content_len);
        self.len_after_header += content_len + pad.len() as u64;
        if !pad.is_empty() {
            self.crc_after_header.update(pad);
            self.file.write_all(&stored_block(pad)).with_context(|| format!("cannot write {}", self.path.display()))?;
        }
        Ok(())
    }

    /// Ends the streamed entry with `content`, its whole content compressed (an earlier archive's: see
    /// [`Segment::reused`]), after whatever was streamed before it.
    pub fn end_streamed_with(&mut self, content: &Segment) -> Result<()> {
        self.write_compressed(content)?;
        self.streamed_len += content.compressed.size();
        self.end_streamed(&[], &content.crc, content.len)
    }

    pub fn append(&mut self, segment: &Segment) -> Result<()> {
        self.crc_after_header.combine(&segment.crc);
        self.len_after_header += segment.len;
        self.write_compressed(segment)
    }

    fn write_compressed(&mut self, segment: &Segment) -> Result<()> {
        let written = match &segment.compressed {
            Compressed::Memory(bytes) => self.file.write_all(bytes),
            Compressed::File { file, at, len } => copy_spilled(file, *at, *len, &mut self.file),
            Compressed::Far(_) => Err(std::io::Error::other("a far entry's segment is joined by join_far")),
        };
        written.with_context(|| format!("cannot write {}", self.path.display()))
    }

    /// Appends `segments`, the `which` part of the archive, and notes where they lie for its index.
    pub fn append_indexed(&mut self, which: Indexed, segments: &[Segment]) -> Result<()> {
        let at = self.file.stream_position().with_context(|| format!("cannot write {}", self.path.display()))?;
        let mut crc = Crc::new();
        for segment in segments {
            self.append(segment)?;
            crc.combine(&segment.crc);
        }
        let compressed_len = segments.iter().map(|s| s.compressed.size()).sum();
        let stamp = match segments {
            [one] => one.stamp,
            _ => None,
        };
        let entry = IndexEntry { at, compressed_len, len: crc.total_len(), crc: crc.finalize(), stamp };
        self.index.0[which.slot()] = Some(entry);
        Ok(())
    }

    /// Reserves the far entry (see [`FarEntry`]) whose head is `head_len` bytes.
    pub fn far_entry(&self, head_len: usize) -> Result<FarEntry> {
        let file = self.file.try_clone().with_context(|| format!("cannot write {}", self.path.display()))?;
        Ok(FarEntry { file, path: self.path.clone(), head_len })
    }

    /// Joins the far entry, the recording's, after what the archive holds so far: its `head`, then `rest` (made by
    /// [`SegmentWriter::far`]). The gap between them goes with `fallocate(FALLOC_FL_COLLAPSE_RANGE)`, which moves no
    /// data (ext4, XFS), after deflate blocks that decode to nothing have padded what precedes it to a block
    /// boundary; where the file system cannot, the entry is copied down.
    pub fn join_far(&mut self, far: FarEntry, head: &[u8], rest: &Segment) -> Result<()> {
        let ctx = || format!("cannot write {}", self.path.display());
        anyhow::ensure!(
            head.len() == far.head_len,
            "the far entry's head is {} bytes, not {}",
            head.len(),
            far.head_len
        );
        self.file.write_all_at(&stored_block(head), FAR).with_context(ctx)?;
        let far_len = STORED_OVERHEAD + head.len() as u64 + rest.compressed.size();
        let end = self.file.stream_position().with_context(ctx)?;
        let align = self.file.metadata().with_context(ctx)?.blksize().max(4096);
        let joined_at = collapse_start(end, align);
        anyhow::ensure!(joined_at < FAR, "{} grew past its far entry", self.path.display());
        self.file.write_all_at(&no_op_blocks(joined_at - end), end).with_context(ctx)?;
        let at = match collapse_range(&self.file, joined_at, FAR - joined_at) {
            Ok(()) => joined_at,
            Err(e) => {
                tracing::debug!("joining the far entry by copying it ({e})");
                copy_within(&self.file, FAR, end, far_len).with_context(ctx)?;
                self.file.set_len(end + far_len).with_context(ctx)?;
                end
            }
        };
        self.file.seek(SeekFrom::Start(at + far_len)).with_context(ctx)?;
        let mut crc = Crc::new();
        crc.update(head);
        crc.combine(&rest.crc);
        let len = head.len() as u64 + rest.len;
        self.crc_after_header.combine(&crc);
        self.len_after_header += len;
        self.index.0[Indexed::Recording.slot()] =
            Some(IndexEntry { at, compressed_len: far_len, len, crc: crc.finalize(), stamp: None });
        Ok(())
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
        self.file.write_all_at(&self.index.to_bytes(), INDEX_AT).with_context(ctx)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::time::Duration;

    /// Entries given in pieces make the bytes the same entries given whole make; a piece too many, or one too few,
    /// is refused.
    #[test]
    fn streamed_entries_are_the_entries_given_whole() {
        let (a, b) = (vec![b'a'; 1000], b"folded;stack 1\n".repeat(100));
        let whole = Segment::of_entries(
            Codec::Miniz(flate2::Compression::fast()),
            &[Entry::File("a".into(), &a, 7), Entry::File("b".into(), &b, 7)],
            false,
        )
        .unwrap();
        let mut streamed = StreamedEntries::default();
        for (name, content) in [("a", &a), ("b", &b)] {
            streamed.begin(Path::new(name), content.len() as u64, 7).unwrap();
            for piece in content.chunks(333) {
                streamed.feed_echoing(piece, &[]).unwrap();
            }
            streamed.end().unwrap();
        }
        let streamed = streamed.finish().unwrap();
        let bytes = |segment: &Segment| match &segment.compressed {
            Compressed::Memory(bytes) => crate::archive::deflate::inflate_segment(bytes),
            _ => panic!("a segment in memory"),
        };
        assert_eq!(bytes(&streamed), bytes(&whole));
        assert_eq!((streamed.len, streamed.crc.clone().finalize()), (whole.len, whole.crc.clone().finalize()));

        // Echoes are hints: right or wrong, the bytes are the same.
        let mut echoing = StreamedEntries::default();
        echoing.begin(Path::new("a"), a.len() as u64, 7).unwrap();
        echoing.feed_echoing(&a, &[Echo { at: 1, from: 0, len: 999 }]).unwrap();
        echoing.end().unwrap();
        echoing.begin(Path::new("b"), b.len() as u64, 7).unwrap();
        for (i, piece) in b.chunks(15 * 10).enumerate() {
            let at = (i * 150) as u64;
            let lines = (at..at + 150).step_by(15).skip(usize::from(i == 0));
            let mut echoes: Vec<Echo> = lines.map(|at| Echo { at, from: at - 15, len: 15 }).collect();
            echoes.push(Echo { at: at + 149, from: at + 3, len: 1 });
            echoing.feed_echoing(piece, &echoes).unwrap();
        }
        echoing.end().unwrap();
        let echoing = echoing.finish().unwrap();
        assert_eq!(bytes(&echoing), bytes(&whole));
        assert_eq!(echoing.crc.clone().finalize(), whole.crc.clone().finalize());

        let mut long = StreamedEntries::default();
        long.begin(Path::new("a"), 3, 7).unwrap();
        assert!(long.feed_echoing(b"four", &[]).is_err());
        let mut short = StreamedEntries::default();
        short.begin(Path::new("a"), 3, 7).unwrap();
        short.feed_echoing(b"ab", &[]).unwrap();
        assert!(short.end().is_err());
    }

    /// Every length the padding may take decodes to nothing between two segments.
    #[test]
    fn no_op_blocks_decode_to_nothing_at_every_length() {
        let (a, _) = deflate_segment(Codec::Miniz(flate2::Compression::fast()), [&b"before "[..]]);
        let (b, _) = deflate_segment(Codec::Miniz(flate2::Compression::fast()), [&b"after"[..]]);
        for end in 0..200u64 {
            let gap = collapse_start(end, 16) - end;
            assert!(gap % 16 == 16 - end % 16 || end % 16 == 0 || gap > 16, "end {end}: gap {gap}");
            let blocks = no_op_blocks(gap);
            assert_eq!(blocks.len() as u64, gap);
            let stream = [&a[..], &blocks, &b, &FINAL_BLOCK].concat();
            let mut out = Vec::new();
            flate2::read::DeflateDecoder::new(&stream[..]).read_to_end(&mut out).unwrap();
            assert_eq!(out, b"before after", "gap of {gap} bytes");
        }
    }

    /// A far entry joins the archive after the streamed first entry, whether the file system removes the gap
    /// (ext4 under /tmp here) or the entry is copied down (tmpfs cannot collapse a range): `tar` reads both.
    #[test]
    fn a_far_entry_joins_after_the_streamed_one() {
        for base in [std::env::temp_dir(), PathBuf::from("/dev/shm")] {
            let tmp = tempfile::tempdir_in(&base).unwrap();
            let dir = Dir::open(tmp.path()).unwrap();
            let mut archive = Tarball::create(&dir, "a.tar.gz").unwrap();
            let far = archive.far_entry(BLOCK + 100).unwrap();
            // The far entry is written first, while the streamed one is not complete.
            let content: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8 ^ (i / 7000) as u8).collect();
            let mut w = SegmentWriter::far(&far).unwrap();
            let (head_part, rest_part) = content.split_at(100);
            let mut rest_file = tempfile::tempfile().unwrap();
            rest_file.write_all(rest_part).unwrap();
            rest_file.seek(SeekFrom::Start(0)).unwrap();
            while w.read(&mut rest_file, u64::MAX, &mut |_, bytes, _| bytes.len()).unwrap() > 0 {}
            w.feed(padding(content.len() as u64));
            let rest = w.finish().unwrap();
            let streamed = b"streamed entry's text\n".repeat(5000);
            let (compressed, crc) = deflate_segment(Codec::Miniz(flate2::Compression::fast()), [&streamed[..]]);
            let mut content_crc = Crc::new();
            content_crc.combine(&crc);
            archive.end_streamed(&compressed, &content_crc, streamed.len() as u64).unwrap();
            let head =
                [&tar_header(Path::new("far.bin"), content.len() as u64, 0, false).unwrap()[..], head_part].concat();
            archive.join_far(far, &head, &rest).unwrap();
            let last = Segment::of_entries(
                Codec::Miniz(flate2::Compression::fast()),
                &[Entry::File("last.txt".into(), b"the end", 0)],
                true,
            )
            .unwrap();
            archive.append(&last).unwrap();
            archive.finish(&tar_header(Path::new("streamed.txt"), streamed.len() as u64, 0, false).unwrap()).unwrap();

            let len = std::fs::metadata(tmp.path().join("a.tar.gz")).unwrap().len();
            assert!(len < 1 << 20, "the gap stayed in {}", base.display());
            let found = unpack(&tmp.path().join("a.tar.gz"));
            let names: Vec<&str> = found.iter().map(|(n, _)| n.as_str()).collect();
            assert_eq!(names, ["streamed.txt", "far.bin", "last.txt"], "in {}", base.display());
            assert!(found[0].1 == streamed && found[1].1 == content && found[2].1 == b"the end");

            // The index finds the far entry wherever joining put it.
            let mut content_file = tempfile::tempfile().unwrap();
            content_file.write_all(&content).unwrap();
            let archive = File::open(tmp.path().join("a.tar.gz")).unwrap();
            let len = content.len() as u64;
            let crc = || file_entry_crc(Path::new("far.bin"), &content_file, len, 0).ok();
            let reused = Segment::reused(archive, Indexed::Recording, file_entry_len(len), None, crc);
            assert!(reused.is_some(), "the far entry was not found again in {}", base.display());
        }
    }

    /// Entries, as `tar` lists and reads them.
    fn unpack(archive: &Path) -> Vec<(String, Vec<u8>)> {
        let gz = File::open(archive).unwrap();
        let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(gz));
        let mut found = Vec::new();
        for entry in tar.entries().unwrap() {
            let mut entry = entry.unwrap();
            let mut bytes = Vec::new();
            entry.read_to_end(&mut bytes).unwrap();
            found.push((entry.path().unwrap().to_string_lossy().into_owned(), bytes));
        }
        found
    }

    /// An archive of a streamed entry, then `recording` as the recording's entry (compressed from `content`, or
    /// `reused`), then a last entry.
    fn archive_with_recording(dir: &Dir, name: &str, content: &File, len: u64, reused: Option<Segment>) {
        archive_with_stamped_recording(dir, name, content, len, reused, None)
    }

    /// [`archive_with_recording`], a recording compressed from `content` carrying `stamp`.
    fn archive_with_stamped_recording(
        dir: &Dir,
        name: &str,
        content: &File,
        len: u64,
        reused: Option<Segment>,
        stamp: Option<FileStamp>,
    ) {
        let mut archive = Tarball::create(dir, name).unwrap();
        let streamed = b"perf script text\n".repeat(1000);
        let (compressed, crc) = deflate_segment(Codec::Miniz(flate2::Compression::fast()), [&streamed[..]]);
        let mut content_crc = Crc::new();
        content_crc.combine(&crc);
        archive.end_streamed(&compressed, &content_crc, streamed.len() as u64).unwrap();
        let recording = reused.unwrap_or_else(|| {
            let spill = (tempfile::tempfile().unwrap(), Path::new("spill"));
            let mut file = content.try_clone().unwrap();
            file.seek(SeekFrom::Start(0)).unwrap();
            Segment::of_file(Path::new("perf.data"), file, len, 7, |_, bytes, _| bytes.len(), spill)
                .unwrap()
                .stamped(stamp)
        });
        archive.append_indexed(Indexed::Recording, &[recording]).unwrap();
        let naming = [Entry::Dir("symbols".into(), 0), Entry::File("symbols/perf-1.map".into(), b"1000 10 f\n", 0)];
        let naming = Segment::of_entries(Codec::Probe, &naming, false).unwrap();
        archive.append_indexed(Indexed::Naming, &[naming]).unwrap();
        let last = Entry::File("metadata.txt".into(), b"samples: 1\n", 0);
        archive
            .append(&Segment::of_entries(Codec::Miniz(flate2::Compression::fast()), &[last], true).unwrap())
            .unwrap();
        archive.finish(&tar_header(Path::new("perf_script.out"), streamed.len() as u64, 0, false).unwrap()).unwrap();
    }

    /// A later archive takes the recording's entry of an earlier one only when it unpacks to the same bytes: same
    /// content, length and tar header, an index that fits the file, an archive of this user.
    #[test]
    fn the_recording_entry_is_reused_only_when_it_is_the_same() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = Dir::open(tmp.path()).unwrap();
        let content: Vec<u8> = (0..1_500_000u32).map(|i| (i % 241) as u8 ^ (i / 5000) as u8).collect();
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(&content).unwrap();
        let len = content.len() as u64;
        let reused = |archive: File, which: Indexed, content: &File, len: u64, mtime: u64| {
            let crc = || file_entry_crc(Path::new("perf.data"), content, len, mtime).ok();
            Segment::reused(archive, which, file_entry_len(len), None, crc)
        };
        let earlier = || File::open(tmp.path().join("first.tar.gz")).unwrap();
        archive_with_recording(&dir, "first.tar.gz", &file, len, None);
        let index = ArchiveIndex::read(&earlier()).expect("the archive has an index");
        let recording = index.get(Indexed::Recording).expect("the index says where the recording is");
        assert!(index.get(Indexed::Naming).is_some());

        let again = reused(earlier(), Indexed::Recording, &file, len, 7).expect("the same entry");
        assert_eq!((again.len, again.compressed.size()), (recording.len, recording.compressed_len));
        archive_with_recording(&dir, "second.tar.gz", &file, len, Some(again));
        let entries = unpack(&tmp.path().join("second.tar.gz"));
        let names: Vec<&str> = entries.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["perf_script.out", "perf.data", "symbols/", "symbols/perf-1.map", "metadata.txt"]);
        assert!(entries[1].1 == content);
        let second = ArchiveIndex::read(&File::open(tmp.path().join("second.tar.gz")).unwrap()).unwrap();
        assert_eq!(second.get(Indexed::Recording), Some(recording));

        // Another modification time, one byte changed, a shorter file: compressed again.
        assert!(reused(earlier(), Indexed::Recording, &file, len, 8).is_none());
        let mut changed = content.clone();
        changed[len as usize / 2] ^= 1;
        let mut changed_file = tempfile::tempfile().unwrap();
        changed_file.write_all(&changed).unwrap();
        assert!(reused(earlier(), Indexed::Recording, &changed_file, len, 7).is_none());
        assert!(reused(earlier(), Indexed::Recording, &file, len - 1, 7).is_none());
        // The naming segment's checksum is not the recording's.
        assert!(reused(earlier(), Indexed::Naming, &file, len, 7).is_none());

        // An index that points past the end, or an unknown version.
        let bytes = std::fs::read(tmp.path().join("first.tar.gz")).unwrap();
        for (at, value) in
            [(INDEX_AT as usize + 4 + 7, 0x7fu8), (INDEX_AT as usize + 4, 0), (INDEX_AT as usize, INDEX_VERSION + 1)]
        {
            let mut bad = bytes.clone();
            bad[at] = value;
            std::fs::write(tmp.path().join("bad.tar.gz"), &bad).unwrap();
            let bad = File::open(tmp.path().join("bad.tar.gz")).unwrap();
            assert!(reused(bad, Indexed::Recording, &file, len, 7).is_none(), "byte {at} set to {value}");
        }

        // Somebody else's archive.
        if nix::unistd::geteuid().is_root() {
            std::os::unix::fs::chown(tmp.path().join("first.tar.gz"), Some(65534), None).unwrap();
            assert!(reused(earlier(), Indexed::Recording, &file, len, 7).is_none());
        }
    }

    /// A file whose stamp is the one the index keeps is taken without reading it; any change to the file changes its
    /// stamp, and a stamp is only taken of a file whose last change is not too recent to tell.
    #[test]
    fn the_recording_entry_is_reused_by_its_stamp_without_reading_it() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = Dir::open(tmp.path()).unwrap();
        let path = tmp.path().join("perf.data");
        std::fs::write(&path, b"a recording".repeat(10_000)).unwrap();
        let file = File::open(&path).unwrap();
        let len = file.metadata().unwrap().len();
        let stamp_at =
            |later: u64| FileStamp::settled(&file.metadata().unwrap(), SystemTime::now() + Duration::from_secs(later));
        assert_eq!(stamp_at(0), None, "a file changed just now has no stamp");
        let stamp = stamp_at(10);
        assert!(stamp.is_some());
        archive_with_stamped_recording(&dir, "first.tar.gz", &file, len, None, stamp);
        let earlier = || File::open(tmp.path().join("first.tar.gz")).unwrap();
        assert_eq!(ArchiveIndex::read(&earlier()).unwrap().get(Indexed::Recording).unwrap().stamp, stamp);
        // Not read: a CRC that cannot be computed does not matter.
        let unread = || None;
        let again = Segment::reused(earlier(), Indexed::Recording, file_entry_len(len), stamp, unread);
        let again = again.expect("taken by its stamp");
        archive_with_stamped_recording(&dir, "second.tar.gz", &file, len, Some(again), None);
        let second = ArchiveIndex::read(&File::open(tmp.path().join("second.tar.gz")).unwrap()).unwrap();
        assert_eq!(second.get(Indexed::Recording).unwrap().stamp, stamp, "the stamp is kept");
        assert!(unpack(&tmp.path().join("second.tar.gz"))[1].1 == b"a recording".repeat(10_000));

        // Its modification time changed (a write, `touch`): the CRC decides.
        File::options().write(true).open(&path).unwrap().set_modified(SystemTime::UNIX_EPOCH).unwrap();
        let changed = stamp_at(10);
        assert!(changed.is_some() && changed != stamp);
        assert!(Segment::reused(earlier(), Indexed::Recording, file_entry_len(len), changed, unread).is_none());
        let crc = || file_entry_crc(Path::new("perf.data"), &file, len, 7).ok();
        assert!(Segment::reused(earlier(), Indexed::Recording, file_entry_len(len), changed, crc).is_some());
        // Another file in its place, with the same times and length.
        let other = tmp.path().join("other");
        std::fs::write(&other, b"a recording".repeat(10_000)).unwrap();
        let other = File::open(&other).unwrap();
        other.set_modified(SystemTime::UNIX_EPOCH).unwrap();
        let other_stamp = FileStamp::settled(&other.metadata().unwrap(), SystemTime::now() + Duration::from_secs(10));
        assert!(other_stamp.is_some() && other_stamp != changed);
    }

    /// The naming segment is found by the checksum of the entries it would be made of.
    #[test]
    fn the_naming_segment_is_reused_by_its_entries_checksum() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = Dir::open(tmp.path()).unwrap();
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(b"recording").unwrap();
        archive_with_recording(&dir, "first.tar.gz", &file, 9, None);
        let earlier = || File::open(tmp.path().join("first.tar.gz")).unwrap();
        let same = [Entry::Dir("symbols".into(), 0), Entry::File("symbols/perf-1.map".into(), b"1000 10 f\n", 0)];
        let other = [Entry::Dir("symbols".into(), 0), Entry::File("symbols/perf-1.map".into(), b"1000 10 g\n", 0)];
        let reused = |entries: &[Entry]| {
            let (len, crc) = entries_checksum(entries).unwrap();
            Segment::reused(earlier(), Indexed::Naming, len, None, || Some(crc))
        };
        assert_eq!(reused(&same).unwrap().len, Segment::of_entries(Codec::Probe, &same, false).unwrap().len);
        assert!(reused(&other).is_none());
    }
}
