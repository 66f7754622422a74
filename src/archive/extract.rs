//! The safe extraction `postprocess` uses on archives (`prof.tar.gz`) that may come from anywhere.
//!
//! Extraction refuses, before writing anything, any archive with an absolute path, a `..` component, a path
//! through an archived symlink, a symlink or hard link pointing outside the extraction folder, a device, FIFO or
//! other special entry, or the same path twice. It then creates every file with `O_CREAT|O_EXCL|O_NOFOLLOW` while
//! walking directories with `O_NOFOLLOW`, so nothing already on disk (a planted symlink) can redirect a write.
//!
//! It also refuses, before writing anything, an archive that would unpack to more than a profcpu archive holds
//! (see [`MAX_UNPACKED_FILE`] and the constants after it) or to more than the free space where it goes: a
//! compression bomb (a few MB of gzip that unpack to GBs of zeros) must not fill the disk.

use anyhow::{anyhow, bail, Context, Result};
use flate2::read::GzDecoder;
use nix::errno::Errno;
use nix::fcntl::{openat, AtFlags, OFlag};
use nix::sys::stat::{fstatat, mkdirat, Mode, SFlag};
use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Seek, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use tar::{EntryType, Header};

/// The largest file an archive may unpack to. perf.data of a long recording at a high frequency on many CPUs
/// reaches GBs (10 minutes at 999 Hz on 64 busy CPUs with deep stacks: about 20 GB), perf_script.out more.
pub const MAX_UNPACKED_FILE: u64 = 64 << 30;
/// The most all files of an archive together may unpack to.
pub const MAX_UNPACKED_TOTAL: u64 = 128 << 30;
/// The most entries an archive may hold: a collection has a dozen files plus one per thread (`-per-thread`) and
/// one per library with samples (`symbols/`).
pub const MAX_ENTRIES: usize = 200_000;
/// The most an archive may unpack to per byte of it. gzip shrinks real profcpu outputs 5 to 90 times (the most
/// repetitive: perf_script.out of samples all with the same 200-frame stack, 87 times); deflate reaches at most
/// about 1030 times, on long runs of one byte, and a bomb of zeros made at the fastest level 229 times.
pub const MAX_RATIO: u64 = 150;
/// Archives that unpack to less than this are not held to [`MAX_RATIO`]: they cannot do harm.
pub const RATIO_CHECKED_FROM: u64 = 256 << 20;

/// Whether `total` unpacked bytes are believable from an archive of `archive_len` bytes, or the reason not.
fn check_unpacked_total(total: u64, archive_len: u64) -> std::result::Result<(), String> {
    if total > MAX_UNPACKED_TOTAL {
        return Err(format!("the archive unpacks to more than {}: not a profcpu archive?", bytes(MAX_UNPACKED_TOTAL)));
    }
    if total > RATIO_CHECKED_FROM && total / archive_len.max(1) > MAX_RATIO {
        return Err(format!(
            "the archive unpacks to more than {}, over {MAX_RATIO} times its {} (a compression bomb): not a profcpu \
             archive?",
            bytes(total),
            bytes(archive_len)
        ));
    }
    Ok(())
}

/// Room for what a tar stream holds besides file data: 512-byte headers, padding, long names.
const TAR_OVERHEAD: u64 = 64 << 20;

/// The most bytes of names and attributes one extension entry (a GNU long name or link, a pax header) may hold.
/// Real ones hold a path (PATH_MAX is 4 KiB) or a few attributes; the tar reader reads them whole into memory.
const MAX_EXTENSION_BYTES: u64 = 1 << 20;

/// The decompressed tar stream of an archive of `archive_len` bytes, guarded (see [`GuardedStream`]).
fn tar_stream(file: File, archive_len: u64) -> tar::Archive<GuardedStream<GzDecoder<BufReader<File>>>> {
    let allowed = archive_len.saturating_mul(MAX_RATIO).clamp(RATIO_CHECKED_FROM, MAX_UNPACKED_TOTAL);
    let inner = GzDecoder::new(BufReader::with_capacity(256 * 1024, file));
    tar::Archive::new(GuardedStream {
        inner,
        left: allowed.saturating_add(TAR_OVERHEAD),
        allowed,
        archive_len,
        header: [0; 512],
        header_len: 0,
        header_served: 0,
        until_header: 0,
        pax: None,
        next_size: None,
        walking: true,
    })
}

/// A tar stream that fails once it passes what the limits allow, and that checks each entry header as it goes
/// by: the tar reader reads extension entries (GNU long names, pax headers) whole into memory before any check of
/// the entries could see them, so one that claims more than [`MAX_EXTENSION_BYTES`] is refused here, unread.
///
/// Layout (POSIX.1-2001 `ustar`/`pax`, GNU tar manual "Basic Tar Format"): a 512-byte header, the entry's data
/// padded to 512 bytes, the next header; two zero blocks end the archive. A pax header's `size` record replaces
/// the next entry's size field.
struct GuardedStream<R> {
    inner: R,
    /// Bytes the stream may still yield.
    left: u64,
    allowed: u64,
    archive_len: u64,
    /// A header read ahead to be checked, `header_len` bytes of it filled and `header_served` handed on.
    header: [u8; 512],
    header_len: usize,
    header_served: usize,
    /// Data (with padding) of the current entry still to come before the next header.
    until_header: u64,
    /// The records of a pax header being passed on, kept to read its `size`.
    pax: Option<Vec<u8>>,
    next_size: Option<u64>,
    /// False after the end-of-archive block, or when a header cannot be read: bytes then just pass.
    walking: bool,
}

impl<R: Read> GuardedStream<R> {
    fn over_limit(&self) -> io::Error {
        io::Error::other(if self.allowed == MAX_UNPACKED_TOTAL {
            format!("the archive unpacks to more than {}: not a profcpu archive?", bytes(MAX_UNPACKED_TOTAL))
        } else {
            format!(
                "the archive unpacks to more than {}, over {MAX_RATIO} times its {} (a compression bomb): not a \
                 profcpu archive?",
                bytes(self.allowed),
                bytes(self.archive_len)
            )
        })
    }

    /// Reads the next header ahead and checks it.
    fn read_header(&mut self) -> io::Result<()> {
        self.header_len = 0;
        self.header_served = 0;
        while self.header_len < 512 {
            let n = self.inner.read(&mut self.header[self.header_len..])?;
            if n == 0 {
                // Cut short: the tar reader says so.
                self.walking = false;
                break;
            }
            self.header_len += n;
        }
        self.left = self.left.saturating_sub(self.header_len as u64);
        if !self.walking {
            return Ok(());
        }
        if self.header.iter().all(|&b| b == 0) {
            self.walking = false;
            return Ok(());
        }
        let header = Header::from_byte_slice(&self.header);
        let Ok(size) = header.entry_size() else {
            self.walking = false;
            return Ok(());
        };
        let kind = header.entry_type();
        let extension = kind.is_gnu_longname()
            || kind.is_gnu_longlink()
            || kind.is_pax_local_extensions()
            || kind.is_pax_global_extensions();
        if extension && size > MAX_EXTENSION_BYTES {
            return Err(io::Error::other(format!(
                "an extension entry (long name or pax header) holds {}: not a profcpu archive?",
                bytes(size)
            )));
        }
        let size = if extension { size } else { self.next_size.take().unwrap_or(size) };
        self.pax = kind.is_pax_local_extensions().then(Vec::new);
        self.until_header = size.div_ceil(512).saturating_mul(512);
        Ok(())
    }

    /// The `size` record of a pax header (`LENGTH key=value\n` records).
    fn pax_size(records: &[u8]) -> Option<u64> {
        records.split(|&b| b == b'\n').find_map(|record| {
            let (_, key_value) = record.split_at(record.iter().position(|&b| b == b' ')? + 1);
            let value = key_value.strip_prefix(b"size=")?;
            std::str::from_utf8(value).ok()?.parse().ok()
        })
    }
}

impl<R: Read> Read for GuardedStream<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        if self.header_served == self.header_len && self.walking && self.until_header == 0 {
            if self.left == 0 {
                return Err(self.over_limit());
            }
            self.read_header()?;
        }
        if self.header_served < self.header_len {
            let n = buf.len().min(self.header_len - self.header_served);
            buf[..n].copy_from_slice(&self.header[self.header_served..self.header_served + n]);
            self.header_served += n;
            return Ok(n);
        }
        if self.left == 0 {
            return Err(self.over_limit());
        }
        let mut want = buf.len().min(self.left.min(usize::MAX as u64) as usize);
        if self.walking {
            want = want.min(self.until_header.min(usize::MAX as u64) as usize);
        }
        let n = self.inner.read(&mut buf[..want])?;
        self.left -= n as u64;
        if self.walking {
            self.until_header -= n as u64;
            if let Some(pax) = &mut self.pax {
                pax.extend_from_slice(&buf[..n]);
                if self.until_header == 0 {
                    self.next_size = Self::pax_size(pax);
                    self.pax = None;
                }
            }
            if n == 0 {
                self.walking = false;
            }
        }
        Ok(n)
    }
}

/// A size for a message: `9.4 MB`, `2.1 GB`, `64 GiB` for the round limits.
fn bytes(n: u64) -> String {
    if n >= 1 << 30 && n % (1 << 30) == 0 {
        format!("{} GiB", n >> 30)
    } else if n >= 1_000_000_000 {
        format!("{:.1} GB", n as f64 / 1e9)
    } else if n >= 1_000_000 {
        format!("{:.1} MB", n as f64 / 1e6)
    } else {
        format!("{n} bytes")
    }
}

/// Refuses to unpack `total` bytes into the open folder `dest` when they do not fit in its file system's free space.
fn check_free_space_at(dest: BorrowedFd, shown: &Path, total: u64) -> Result<()> {
    let Ok(stat) = nix::sys::statvfs::fstatvfs(dest) else { return Ok(()) };
    enough_space(&stat, shown, total)
}

fn enough_space(stat: &nix::sys::statvfs::Statvfs, shown: &Path, total: u64) -> Result<()> {
    let free = stat.blocks_available().saturating_mul(stat.fragment_size());
    if total > free {
        bail!("the archive unpacks to {}, more than the {} free in {}", bytes(total), bytes(free), shown.display());
    }
    Ok(())
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Dir,
    File,
    Symlink,
}

/// What one archive entry will become.
enum Planned {
    /// The extraction folder itself (`./` as GNU tar writes it).
    Root,
    Dir,
    File {
        mode: u32,
    },
    Symlink {
        target: OsString,
    },
    HardLink {
        target: Vec<OsString>,
    },
}

/// Extracts `archive` (a .tar.gz, opened as a regular file) into `dest` (a folder the caller made and holds: nothing
/// is looked up by its path; `shown` names it in messages), refusing hostile content with one error line that names
/// the entry and the problem. Nothing is written unless the whole archive passes the checks (also of size: it must
/// fit the limits above and the free space). Existing files are never overwritten. Returns the extracted paths
/// (relative to `dest`).
pub fn extract_into(archive: &File, name: &str, dest: BorrowedFd, shown: &Path) -> Result<Vec<PathBuf>> {
    let (plan, unpacked) = plan_extraction(archive).map_err(|e| anyhow!("refusing to extract {name}: {e:#}"))?;
    check_free_space_at(dest, shown, unpacked).map_err(|e| anyhow!("refusing to extract {name}: {e:#}"))?;
    let root = dest.try_clone_to_owned().with_context(|| format!("extracting {name}"))?;
    extract_planned(archive, name, plan, root)
}

fn extract_planned(archive: &File, name: &str, plan: Plan, root: OwnedFd) -> Result<Vec<PathBuf>> {
    let name = name.to_string();
    let file = from_start(archive).with_context(|| format!("opening {name}"))?;
    let archive_len = file.metadata().with_context(|| format!("reading {name}"))?.len();
    let mut tar = tar_stream(file, archive_len);
    let mut plan = plan.into_iter();
    let mut extracted = Vec::new();
    for entry in tar.entries().with_context(|| format!("reading {name}"))? {
        let mut entry = entry.with_context(|| format!("reading {name}"))?;
        if entry.header().entry_type() == EntryType::XGlobalHeader {
            continue;
        }
        let (parts, what) = plan.next().ok_or_else(|| anyhow!("{name} changed while it was being extracted"))?;
        if matches!(what, Planned::Root) {
            continue;
        }
        let rel: PathBuf = parts.iter().collect();
        let fail = |e: &dyn std::fmt::Display| anyhow!("extracting {} from {name}: {e}", rel.display());
        let (leaf, dirs) = parts.split_last().expect("validated paths are not empty");
        let parent = walk_dirs(&root, dirs).map_err(|e| fail(&e))?;
        match what {
            Planned::Root => unreachable!("skipped above"),
            Planned::Dir => make_dir(&parent, leaf).map_err(|e| fail(&e))?,
            Planned::File { mode } => {
                let fd = openat(
                    &parent,
                    leaf.as_os_str(),
                    OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                    Mode::from_bits_truncate(mode),
                )
                .map_err(|e| fail(&describe(e)))?;
                let mut out = BufWriter::new(File::from(fd));
                io::copy(&mut entry, &mut out).and_then(|_| out.flush()).map_err(|e| fail(&e))?;
            }
            Planned::Symlink { target } => {
                nix::unistd::symlinkat(target.as_os_str(), &parent, leaf.as_os_str()).map_err(|e| fail(&describe(e)))?
            }
            Planned::HardLink { target } => {
                let (target_leaf, target_dirs) = target.split_last().expect("validated paths are not empty");
                let target_parent = walk_dirs(&root, target_dirs).map_err(|e| fail(&e))?;
                nix::unistd::linkat(
                    &target_parent,
                    target_leaf.as_os_str(),
                    &parent,
                    leaf.as_os_str(),
                    AtFlags::empty(),
                )
                .map_err(|e| fail(&describe(e)))?
            }
        }
        extracted.push(rel);
    }
    Ok(extracted)
}

/// What to create, in archive order: the path's components and what it becomes.
type Plan = Vec<(Vec<OsString>, Planned)>;

/// Reads the whole archive once and checks every entry; the plan is what to create, in archive order, and how
/// many bytes that is. A size limit is enforced as soon as an entry's header passes it, before its data is read.
fn plan_extraction(archive: &File) -> Result<(Plan, u64)> {
    let file = from_start(archive).context("cannot read it")?;
    let archive_len = file.metadata().context("cannot read it")?.len();
    let mut tar = tar_stream(file, archive_len);
    let mut plan = Vec::new();
    let mut unpacked = 0u64;
    // What each archived path is (folders also when only implied by a deeper path), to reject duplicates, paths
    // through symlinks or files, and hard links to anything but a file extracted before.
    let mut kinds: HashMap<Vec<OsString>, Kind> = HashMap::new();
    for entry in tar.entries().context("not a tar.gz archive")? {
        let entry = entry.context("corrupt or truncated archive")?;
        let header = entry.header();
        let entry_type = header.entry_type();
        if entry_type == EntryType::XGlobalHeader {
            continue;
        }
        let raw = entry.path_bytes();
        let shown = String::from_utf8_lossy(&raw).into_owned();
        let problem = |p: String| anyhow!("entry {shown:?}: {p}");
        if plan.len() >= MAX_ENTRIES {
            bail!("the archive holds more than {MAX_ENTRIES} entries: not a profcpu archive?");
        }
        // The header's size is what the entry's data takes in the archive, and all of it would be written.
        let size = entry.size();
        if size > MAX_UNPACKED_FILE {
            return Err(problem(format!(
                "unpacks to {}, more than the {} a file of a profcpu archive may have: not a profcpu archive?",
                bytes(size),
                bytes(MAX_UNPACKED_FILE)
            )));
        }
        unpacked = unpacked.saturating_add(size);
        check_unpacked_total(unpacked, archive_len).map_err(anyhow::Error::msg)?;
        let parts = relative_parts(&raw).map_err(|p| problem(p.to_string()))?;
        if parts.is_empty() {
            if entry_type != EntryType::Directory {
                return Err(problem("empty path".into()));
            }
            plan.push((parts, Planned::Root));
            continue;
        }
        for depth in 1..parts.len() {
            let via = || parts[..depth].iter().collect::<PathBuf>().display().to_string();
            match kinds.get(&parts[..depth]) {
                Some(Kind::Symlink) => {
                    return Err(problem(format!("path goes through the archived symlink {:?}", via())))
                }
                Some(Kind::File) => return Err(problem(format!("path goes through the archived file {:?}", via()))),
                Some(Kind::Dir) => {}
                None => {
                    kinds.insert(parts[..depth].to_vec(), Kind::Dir);
                }
            }
        }
        match kinds.get(&parts) {
            Some(Kind::Dir) if entry_type == EntryType::Directory => {}
            Some(_) => return Err(problem("the archive holds this path twice".into())),
            None => {}
        }
        let link = || entry.link_name_bytes().map(|b| b.into_owned()).unwrap_or_default();
        let planned = match entry_type {
            EntryType::Directory => Planned::Dir,
            EntryType::Regular | EntryType::Continuous => {
                Planned::File { mode: header.mode().unwrap_or(0o644) & 0o755 | 0o600 }
            }
            EntryType::Symlink => {
                let target = link();
                check_link_target(&parts[..parts.len() - 1], &target)
                    .map_err(|p| problem(format!("symlink to {:?} {p}", String::from_utf8_lossy(&target))))?;
                Planned::Symlink { target: OsStr::from_bytes(&target).to_os_string() }
            }
            EntryType::Link => {
                let target = link();
                let shown_target = String::from_utf8_lossy(&target).into_owned();
                let target = relative_parts(&target)
                    .map_err(|_| problem(format!("hard link to {shown_target:?} points outside the archive")))?;
                if kinds.get(&target) != Some(&Kind::File) {
                    return Err(problem(format!(
                        "hard link to {shown_target:?}, which is not a file extracted before it from this archive"
                    )));
                }
                Planned::HardLink { target }
            }
            other => {
                return Err(problem(format!(
                    "{} entries are not allowed (only files, folders and links)",
                    type_name(other)
                )))
            }
        };
        let kind = match planned {
            Planned::Symlink { .. } => Kind::Symlink,
            Planned::File { .. } | Planned::HardLink { .. } => Kind::File,
            Planned::Root | Planned::Dir => Kind::Dir,
        };
        kinds.insert(parts.clone(), kind);
        plan.push((parts, planned));
    }
    Ok((plan, unpacked))
}

/// The normal components of an archive path (none for `.`), or why it is not a safe relative path.
fn relative_parts(raw: &[u8]) -> std::result::Result<Vec<OsString>, &'static str> {
    if raw.starts_with(b"/") {
        return Err("absolute path (archive entries must be relative)");
    }
    if raw.contains(&0) {
        return Err("NUL byte in path");
    }
    let mut parts = Vec::new();
    for component in Path::new(OsStr::from_bytes(raw)).components() {
        match component {
            Component::Normal(part) => parts.push(part.to_os_string()),
            Component::CurDir => {}
            Component::ParentDir => return Err("`..` in path (it could leave the extraction folder)"),
            Component::RootDir | Component::Prefix(_) => {
                return Err("absolute path (archive entries must be relative)")
            }
        }
    }
    if raw.is_empty() {
        return Err("empty path");
    }
    Ok(parts)
}

/// A symlink at `link_dir/<name>` may only point inside the tree: relative, with `..` only as leading
/// components (they climb real folders, since paths through symlinks are refused) that do not climb above the
/// root.
fn check_link_target(link_dir: &[OsString], target: &[u8]) -> std::result::Result<(), &'static str> {
    if target.is_empty() {
        return Err("is empty");
    }
    if target.starts_with(b"/") {
        return Err("points outside the extraction folder (absolute target)");
    }
    let mut climbing = true;
    let mut ups = 0usize;
    for component in Path::new(OsStr::from_bytes(target)).components() {
        match component {
            Component::ParentDir if climbing => ups += 1,
            Component::ParentDir => return Err("has `..` after a folder name (it could leave the extraction folder)"),
            Component::CurDir => {}
            Component::Normal(_) => climbing = false,
            Component::RootDir | Component::Prefix(_) => return Err("points outside the extraction folder"),
        }
    }
    if ups > link_dir.len() {
        return Err("points outside the extraction folder");
    }
    Ok(())
}

/// A handle on the archive that reads it from its first byte (each pass gets its own).
fn from_start(archive: &File) -> io::Result<File> {
    let mut file = archive.try_clone()?;
    file.rewind()?;
    Ok(file)
}

fn open_dir_nofollow(parent: Option<&OwnedFd>, name: &OsStr) -> nix::Result<OwnedFd> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    match parent {
        Some(fd) => openat(fd, name, flags, Mode::empty()),
        None => nix::fcntl::open(name, flags, Mode::empty()),
    }
}

/// Opens `dirs` below `root` one level at a time without following symlinks, creating missing folders.
fn walk_dirs(root: &OwnedFd, dirs: &[OsString]) -> std::result::Result<OwnedFd, String> {
    let mut current = root.try_clone().map_err(|e| e.to_string())?;
    for dir in dirs {
        make_dir(&current, dir)?;
        current = open_dir_nofollow(Some(&current), dir)
            .map_err(|e| format!("opening folder {:?}: {}", dir.to_string_lossy(), describe(e)))?;
    }
    Ok(current)
}

/// Creates a folder; an existing real folder is fine, anything else in the way is an error.
fn make_dir(parent: &impl AsFd, name: &OsStr) -> std::result::Result<(), String> {
    match mkdirat(parent, name, Mode::from_bits_truncate(0o755)) {
        Ok(()) => Ok(()),
        Err(Errno::EEXIST) => {
            let stat = fstatat(parent, name, AtFlags::AT_SYMLINK_NOFOLLOW).map_err(|e| describe(e).to_string())?;
            match SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT {
                SFlag::S_IFDIR => Ok(()),
                SFlag::S_IFLNK => Err(format!(
                    "{:?} is a symlink, and a symlink is in the way (extraction never follows one)",
                    name.to_string_lossy()
                )),
                _ => Err(format!("{:?} exists and is not a folder", name.to_string_lossy())),
            }
        }
        Err(e) => Err(format!("creating folder {:?}: {}", name.to_string_lossy(), describe(e))),
    }
}

fn describe(e: Errno) -> String {
    match e {
        Errno::EEXIST => "it already exists (extraction never overwrites)".into(),
        Errno::ELOOP => "a symlink is in the way (extraction never follows one)".into(),
        Errno::ENOTDIR => "a non-folder is in the way".into(),
        other => other.desc().to_string(),
    }
}

fn type_name(t: EntryType) -> &'static str {
    match t {
        EntryType::Char => "character device",
        EntryType::Block => "block device",
        EntryType::Fifo => "FIFO",
        EntryType::GNUSparse => "sparse file",
        _ => "special",
    }
}
