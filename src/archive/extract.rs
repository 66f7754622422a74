//! The safe extraction `postprocess` uses on archives (`prof.tar.gz`) that may come from anywhere.
//!
//! Extraction refuses, before writing anything, any archive with an absolute path, a `..` component, a path
//! through an archived symlink, a symlink or hard link pointing outside the extraction folder, a device, FIFO or
//! other special entry, or the same path twice. It then creates every file with `O_CREAT|O_EXCL|O_NOFOLLOW` while
//! walking directories with `O_NOFOLLOW`, so nothing already on disk (a planted symlink) can redirect a write.

use crate::fs::{input, Limit};
use anyhow::{anyhow, Context, Result};
use flate2::read::GzDecoder;
use nix::errno::Errno;
use nix::fcntl::{openat, AtFlags, OFlag};
use nix::sys::stat::{fstatat, mkdirat, Mode, SFlag};
use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Seek, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use tar::EntryType;

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

/// Extracts `archive` (a .tar.gz) into `dest` (created if missing), refusing hostile content with one error line
/// that names the entry and the problem. Nothing is written unless the whole archive passes the checks. Existing
/// files are never overwritten. Returns the extracted paths (relative to `dest`).
pub fn extract_safe(archive: &Path, dest: &Path) -> Result<Vec<PathBuf>> {
    let name = archive.display().to_string();
    // A regular file only: a FIFO named like an archive would block the read forever.
    let (file, _) = input::open_path(archive, Limit::NONE)
        .map_err(|e| anyhow!("refusing to extract {name}: {}", e.explain(archive)))?;
    let plan = plan_extraction(&file).map_err(|e| anyhow!("refusing to extract {name}: {e:#}"))?;
    std::fs::create_dir_all(dest).with_context(|| format!("creating {}", dest.display()))?;
    let root = open_dir_nofollow(None, dest.as_os_str()).with_context(|| format!("opening {}", dest.display()))?;
    extract_planned(&file, &name, plan, root)
}

/// [`extract_safe`] from an archive already opened (a regular file) into a folder already opened (`dest`, which
/// the caller made and holds: nothing is looked up by its path).
pub fn extract_into(archive: &File, name: &str, dest: BorrowedFd) -> Result<Vec<PathBuf>> {
    let plan = plan_extraction(archive).map_err(|e| anyhow!("refusing to extract {name}: {e:#}"))?;
    let root = dest.try_clone_to_owned().with_context(|| format!("extracting {name}"))?;
    extract_planned(archive, name, plan, root)
}

fn extract_planned(
    archive: &File,
    name: &str,
    plan: Vec<(Vec<OsString>, Planned)>,
    root: OwnedFd,
) -> Result<Vec<PathBuf>> {
    let name = name.to_string();
    let file = from_start(archive).with_context(|| format!("opening {name}"))?;
    let mut tar = tar::Archive::new(GzDecoder::new(BufReader::with_capacity(256 * 1024, file)));
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

/// Reads the whole archive once and checks every entry; the plan is what to create, in archive order.
fn plan_extraction(archive: &File) -> Result<Vec<(Vec<OsString>, Planned)>> {
    let file = from_start(archive).context("cannot read it")?;
    let mut tar = tar::Archive::new(GzDecoder::new(BufReader::with_capacity(256 * 1024, file)));
    let mut plan = Vec::new();
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
    Ok(plan)
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
