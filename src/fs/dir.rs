//! A directory opened once, and everything beneath it reached through that descriptor.
//!
//! Output folders may be writable by others (a `-output` base of mode 777, a volume the container's user owns, a
//! folder another user hands to `postprocess`). Rebuilding paths from a folder's name (`run_dir.join(…)`) lets such
//! a user rename the folder mid-run and put a symlink in its place, and root would then write wherever the link
//! points. A [`Dir`] holds the folder's descriptor instead: files are created with `openat(O_CREAT | O_EXCL |
//! O_NOFOLLOW)`, folders with `mkdirat` then opened `O_NOFOLLOW` and checked to be ours, renames are `renameat`
//! between descriptors, removals `unlinkat` — nothing is ever looked up again by a path someone can change. The
//! path is kept for messages only.
//!
//! [`Staging`] is the private folder outputs are written into before they are renamed into place.

use super::input::{self, InputError, Limit, NamedInputError};
use anyhow::{bail, Context, Result};
use nix::errno::Errno;
use nix::fcntl::{openat, renameat, renameat2, AtFlags, OFlag, RenameFlags};
use nix::sys::stat::{fstat, fstatat, mkdirat, FileStat, Mode, SFlag};
use nix::unistd::{unlinkat, UnlinkatFlags};
use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A directory opened once. Cheap to clone (the descriptor is shared).
#[derive(Debug, Clone)]
pub struct Dir {
    fd: Arc<OwnedFd>,
    path: PathBuf,
}

/// What a name in a directory is, without following a symlink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    File,
    Dir,
    Symlink,
    Other,
}

impl Kind {
    fn of(st: &FileStat) -> Kind {
        match SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT {
            SFlag::S_IFREG => Kind::File,
            SFlag::S_IFDIR => Kind::Dir,
            SFlag::S_IFLNK => Kind::Symlink,
            _ => Kind::Other,
        }
    }
}

impl Dir {
    /// Opens the directory at `path` (a path the user gave: symlinks in it are followed, as the user meant them).
    pub fn open(path: &Path) -> io::Result<Dir> {
        let fd = nix::fcntl::open(path, OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, Mode::empty())?;
        Ok(Dir { fd: Arc::new(fd), path: path.to_path_buf() })
    }

    /// Creates the directory at `path` and its parents if missing (`mkdir -p`), then opens it.
    pub fn create_all(path: &Path) -> io::Result<Dir> {
        std::fs::create_dir_all(path)?;
        Dir::open(path)
    }

    /// The path it was opened by, for messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `path/name`, for messages only: never open it.
    pub fn shown(&self, name: impl AsRef<Path>) -> PathBuf {
        self.path.join(name)
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Creates folder `name` (it must not exist) and opens it. It must still be the folder just made once opened:
    /// one renamed in its place by another user (owned by them) or a symlink is refused.
    pub fn create_dir(&self, name: &str) -> io::Result<Dir> {
        mkdirat(self.fd(), name, Mode::from_bits_truncate(0o755))?;
        let dir = self.open_dir(name)?;
        let st = fstat(dir.fd())?;
        // SAFETY: geteuid has no preconditions.
        let me = unsafe { libc::geteuid() };
        if st.st_uid != me {
            return Err(io::Error::other(format!(
                "{} was replaced by a folder of uid {} while it was being created (someone else can write to {})",
                self.shown(name).display(),
                st.st_uid,
                self.path.display()
            )));
        }
        Ok(dir)
    }

    /// Opens the existing folder `name`; a symlink there is refused (ELOOP/ENOTDIR).
    pub fn open_dir(&self, name: impl AsRef<Path>) -> io::Result<Dir> {
        let name = name.as_ref();
        let fd = openat(
            self.fd(),
            name,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )?;
        Ok(Dir { fd: Arc::new(fd), path: self.shown(name) })
    }

    /// Creates file `name` for writing (and reading back what was written) with mode 0644; fails if anything (a
    /// file or a symlink) is already there.
    pub fn create_file(&self, name: impl AsRef<Path>) -> io::Result<File> {
        let fd = openat(
            self.fd(),
            name.as_ref(),
            OFlag::O_RDWR | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o644),
        )?;
        Ok(File::from(fd))
    }

    /// A file in this folder without a name (`O_TMPFILE`; where the file system has none, one created under
    /// `name` and unlinked at once), open for reading and writing: scratch space on the folder's disk that nothing
    /// can open, and that goes with its last descriptor.
    pub fn scratch_file(&self, name: &str) -> io::Result<File> {
        let anonymous = openat(
            self.fd(),
            ".",
            OFlag::O_TMPFILE | OFlag::O_RDWR | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o600),
        );
        if let Ok(fd) = anonymous {
            return Ok(File::from(fd));
        }
        let fd = openat(
            self.fd(),
            name,
            OFlag::O_RDWR | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o600),
        )?;
        self.remove_file(name)?;
        Ok(File::from(fd))
    }

    /// Creates `name` as [`create_file`](Self::create_file) does and writes `bytes` into it; errors name the file.
    pub fn write_file(&self, name: impl AsRef<Path>, bytes: &[u8]) -> Result<()> {
        let shown = self.shown(name.as_ref());
        let mut f = self.create_file(name).with_context(|| format!("cannot create {}", shown.display()))?;
        f.write_all(bytes).with_context(|| format!("cannot write {}", shown.display()))
    }

    /// Opens input file `name` (see [`input`]): a regular file, not a symlink, within `limit`. Returns it and its
    /// size.
    pub fn open_input(&self, name: impl AsRef<Path>, limit: Limit) -> Result<(File, u64), NamedInputError> {
        input::open_at(self.fd(), name.as_ref(), limit).map_err(|error| self.named(name, error))
    }

    /// Reads input file `name` whole (see [`open_input`](Self::open_input)).
    pub fn read_input(&self, name: impl AsRef<Path>, limit: Limit) -> Result<Vec<u8>, NamedInputError> {
        input::read_at(self.fd(), name.as_ref(), limit).map_err(|error| self.named(name, error))
    }

    fn named(&self, name: impl AsRef<Path>, error: InputError) -> NamedInputError {
        NamedInputError { path: self.shown(name), error }
    }

    /// The status of `name` itself (a symlink is not followed); `None` when nothing is there.
    pub fn stat(&self, name: impl AsRef<Path>) -> io::Result<Option<FileStat>> {
        match fstatat(self.fd(), name.as_ref(), AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Some(st)),
            Err(Errno::ENOENT) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// What `name` is (not following a symlink), `None` when nothing is there.
    pub fn kind(&self, name: impl AsRef<Path>) -> Option<Kind> {
        self.stat(name).ok()?.map(|st| Kind::of(&st))
    }

    /// Renames `from` in this folder to `to` in folder `dest` (replacing a file or symlink there, never following
    /// one).
    pub fn rename(&self, from: impl AsRef<Path>, dest: &Dir, to: impl AsRef<Path>) -> io::Result<()> {
        Ok(renameat(self.fd(), from.as_ref(), dest.fd(), to.as_ref())?)
    }

    /// Removes file (or symlink) `name`.
    pub fn remove_file(&self, name: impl AsRef<Path>) -> io::Result<()> {
        Ok(unlinkat(self.fd(), name.as_ref(), UnlinkatFlags::NoRemoveDir)?)
    }

    /// Removes the empty folder `name` if it is still `which` (the folder this process holds open): a folder
    /// renamed in its place is left alone.
    pub fn remove_empty_dir(&self, name: &str, which: &Dir) -> io::Result<()> {
        if !self.is_same(name, which)? {
            return Ok(());
        }
        Ok(unlinkat(self.fd(), name, UnlinkatFlags::RemoveDir)?)
    }

    /// Removes folder `name` and everything in it, through descriptors (a symlink inside is removed, never
    /// followed). A missing folder is no error.
    pub fn remove_tree(&self, name: impl AsRef<Path>) -> io::Result<()> {
        let name = name.as_ref();
        match self.kind(name) {
            None => Ok(()),
            Some(Kind::Dir) => {
                let dir = self.open_dir(name)?;
                dir.remove_contents()?;
                Ok(unlinkat(self.fd(), name, UnlinkatFlags::RemoveDir)?)
            }
            Some(_) => self.remove_file(name),
        }
    }

    /// Removes everything in this folder (not the folder itself). Names are used as they are: an archive's entry
    /// need not be UTF-8, and a name changed to make it so would be another (missing) file. Files are unlinked a few
    /// at a time on threads of their own: freeing a file's blocks waits on the disk (on a file system mounted with
    /// `discard`, tens of milliseconds for a large output), and the waits overlap.
    pub fn remove_contents(&self) -> io::Result<()> {
        let (mut folders, mut files, mut bytes) = (Vec::new(), Vec::new(), 0u64);
        for name in self.list()? {
            let st = self.stat(&name).ok().flatten();
            match st.is_some_and(|st| Kind::of(&st) == Kind::Dir) {
                true => folders.push(name),
                false => {
                    bytes += st.map_or(0, |st| st.st_size.max(0) as u64);
                    files.push(name);
                }
            }
        }
        for name in folders {
            self.remove_tree(&name)?;
        }
        let remove = |name: &OsString| match self.remove_file(name) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            other => other,
        };
        // Freeing a large file's pages takes the kernel milliseconds (a 100 MB perf_script.out): such files go
        // on threads of their own. Starting a thread costs more than removing a few small files.
        const WORTH_A_THREAD: u64 = 8 << 20;
        let at_once = if bytes < WORTH_A_THREAD { 1 } else { 4 };
        let share = files.len().div_ceil(at_once).max(1);
        std::thread::scope(|scope| {
            let mut batches = files.chunks(share);
            let here = batches.next().unwrap_or_default();
            // A batch no thread can be started for is removed here.
            let mut threads = Vec::new();
            for batch in batches {
                match std::thread::Builder::new().spawn_scoped(scope, move || batch.iter().try_for_each(remove)) {
                    Ok(thread) => threads.push(thread),
                    Err(_) => batch.iter().try_for_each(remove)?,
                }
            }
            here.iter().try_for_each(remove)?;
            for thread in threads {
                thread.join().unwrap_or_else(|_| Err(io::Error::other("removing files panicked")))?;
            }
            Ok(())
        })
    }

    /// Whether `name` here is the folder `which` refers to (same device and inode).
    pub fn is_same(&self, name: &str, which: &Dir) -> io::Result<bool> {
        let here = self.stat(name)?;
        let theirs = fstat(which.fd())?;
        Ok(here.is_some_and(|h| (h.st_dev, h.st_ino) == (theirs.st_dev, theirs.st_ino)))
    }

    /// The names in this folder (`.` and `..` left out), in no particular order.
    pub fn list(&self) -> io::Result<Vec<OsString>> {
        // A fresh descriptor: listing moves its offset.
        let fd = openat(self.fd(), ".", OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, Mode::empty())?;
        let mut names = Vec::new();
        for entry in nix::dir::Dir::from_fd(fd)?.into_iter() {
            let name = entry?.file_name().to_bytes().to_vec();
            if name != b"." && name != b".." {
                names.push(OsString::from_vec(name));
            }
        }
        Ok(names)
    }

    /// Whether the folder is on a file system that holds no files (`/proc`, `/sys`).
    pub fn is_pseudo_fs(&self) -> bool {
        use nix::sys::statfs::{fstatfs, PROC_SUPER_MAGIC, SYSFS_MAGIC};
        fstatfs(self.fd()).is_ok_and(|s| s.filesystem_type() == PROC_SUPER_MAGIC || s.filesystem_type() == SYSFS_MAGIC)
    }
}

/// A private folder inside an output folder: outputs are written there and renamed into place, so a regenerated
/// file replaces the old one (or a planted symlink) instead of writing through it, and a failure never leaves a
/// half-written file under the final name. Removed with everything left in it when dropped.
pub struct Staging {
    parent: Dir,
    name: String,
    dir: Dir,
}

/// An earlier output moved into the staging folder by [`Staging::set_aside`], to be deleted.
pub struct SetAside {
    dir: Dir,
    name: String,
}

impl SetAside {
    pub fn remove(self) -> io::Result<()> {
        self.dir.remove_file(&self.name)
    }

    /// Takes the place of `staged`, a file just created in the staging folder that nothing was written to yet,
    /// and is returned open for writing over: when it is a regular file of this user with no other name (writing
    /// into a file's cached pages costs half of filling new ones and freeing the old). The empty file goes; if
    /// this one may not be written over, it gives itself back, to be removed.
    pub fn write_over(self, staged: &str) -> Result<File, SetAside> {
        let Some(opened) = open_own_file(&self.dir, &self.name, OFlag::O_RDWR) else { return Err(self) };
        let dir = self.dir.fd();
        if renameat2(dir, self.name.as_str(), dir, staged, RenameFlags::RENAME_EXCHANGE).is_err() {
            return Err(self);
        }
        // The empty file now has the set-aside name.
        let _ = self.dir.remove_file(&self.name);
        Ok(opened)
    }
}

/// `name` in `dir` opened with `access`, when it is a regular file of this user with no other name that nobody
/// else may write to: a file only this user can change (truncating a mapped file under a reader ends it with
/// SIGBUS), and changing which touches nothing else.
fn open_own_file(dir: &Dir, name: &str, access: OFlag) -> Option<File> {
    let flags = access | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
    let opened = openat(dir.fd(), name, flags, Mode::empty()).ok()?;
    let st = fstat(&opened).ok()?;
    let others_write = Mode::S_IWGRP | Mode::S_IWOTH;
    let ours = Kind::of(&st) == Kind::File
        && st.st_nlink == 1
        && st.st_uid == nix::unistd::geteuid().as_raw()
        && Mode::from_bits_truncate(st.st_mode).intersection(others_write).is_empty();
    ours.then(|| File::from(opened))
}

impl Staging {
    /// The staging folder's name: `.profcpu-staging-<pid>`.
    pub fn name() -> String {
        format!(".profcpu-staging-{}", std::process::id())
    }

    /// [`Staging::name`] in `parent` (one left by an earlier process with this PID is removed first).
    pub fn create(parent: &Dir) -> Result<Staging> {
        let name = Staging::name();
        parent
            .remove_tree(&name)
            .with_context(|| format!("cannot remove the stale {}", parent.shown(&name).display()))?;
        let dir = parent.create_dir(&name).with_context(|| format!("cannot write into {}", parent.path().display()))?;
        Ok(Staging { parent: parent.clone(), name, dir })
    }

    /// The staging folder.
    pub fn dir(&self) -> &Dir {
        &self.dir
    }

    /// What moves an earlier output `name` (a file or symlink, not a folder) out of the parent into the staging
    /// folder, ahead of [`publish`](Self::publish). On a failure it stays, and publishing reports what is wrong.
    pub fn set_aside(&self, name: &str) -> impl FnOnce() -> Option<SetAside> + Send + 'static {
        let (parent, dir, name) = (self.parent.clone(), self.dir.clone(), name.to_string());
        move || {
            let replaceable = matches!(parent.kind(&name), Some(k) if k != Kind::Dir);
            let aside = format!(".old-{name}");
            (replaceable && parent.rename(&name, &dir, &aside).is_ok()).then_some(SetAside { dir, name: aside })
        }
    }

    /// An earlier output `name` in the parent, open for reading, when it is a file that only this user can change
    /// (see [`open_own_file`]): one the new output may leave in place where it holds the same bytes.
    pub fn earlier_output(&self, name: &str) -> Option<File> {
        open_own_file(&self.parent, name, OFlag::O_RDONLY)
    }

    /// Moves the given staged files to their names in the parent (a rename replaces a symlink, never follows it).
    /// Checks first that no final name is a folder, so that either all or (on an I/O error) few are replaced.
    ///
    /// An old file is first moved into the staging folder (and deleted with it): renaming over an existing file
    /// makes ext4 write the new file out at once (its `auto_da_alloc` safeguard), which for a big perf_script.out
    /// costs more than everything else of a run.
    pub fn publish(&self, files: &[PathBuf]) -> Result<()> {
        for f in files {
            if self.parent.kind(f) == Some(Kind::Dir) {
                bail!("{} is a folder; remove it to regenerate the outputs", self.parent.shown(f).display());
            }
        }
        for (i, f) in files.iter().enumerate() {
            let shown = self.parent.shown(f);
            if self.parent.kind(f).is_some() {
                self.parent
                    .rename(f, &self.dir, format!(".old-{i}"))
                    .with_context(|| format!("cannot move the old {} out of the way", shown.display()))?;
            }
            self.dir
                .rename(f, &self.parent, f)
                .with_context(|| format!("cannot move the new {} into place", shown.display()))?;
        }
        Ok(())
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        let _ = self.dir.remove_contents();
        let _ = self.parent.remove_empty_dir(&self.name, &self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("profcpu-dir-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_folder_renamed_away_and_replaced_by_a_symlink_is_still_written_through_its_descriptor() {
        let base = temp("swap");
        let victim = base.join("victim");
        std::fs::create_dir(&victim).unwrap();
        let out = Dir::open(&base).unwrap();
        let run = out.create_dir("run").unwrap();
        std::fs::rename(base.join("run"), base.join("moved")).unwrap();
        std::os::unix::fs::symlink(&victim, base.join("run")).unwrap();
        run.write_file("perf.data", b"x").unwrap();
        let sub = run.create_dir("symbols").unwrap();
        sub.write_file("dsos.txt", b"y").unwrap();
        assert_eq!(std::fs::read_dir(&victim).unwrap().count(), 0, "wrote through the symlink");
        assert_eq!(std::fs::read(base.join("moved/symbols/dsos.txt")).unwrap(), b"y");
        // Creating over a symlink fails, and so does opening one as a folder.
        assert!(out.create_dir("run").is_err());
        assert!(out.open_dir("run").is_err());
        assert!(out.create_file("run").is_err());
        std::fs::remove_dir_all(&base).unwrap();
    }

    /// Found by the tar_extract fuzz target: a folder extracted from an archive with a name that is not UTF-8 was
    /// left behind by the clean-up of a failed postprocess (it removed the name made valid UTF-8, which is not
    /// there).
    #[test]
    fn names_that_are_not_utf8_are_removed() {
        use std::os::unix::ffi::OsStrExt;
        let base = temp("not-utf8");
        let odd = std::ffi::OsStr::from_bytes(b"d\xff");
        std::fs::create_dir(base.join(odd)).unwrap();
        std::fs::write(base.join(odd).join(std::ffi::OsStr::from_bytes(b"f\xfe")), b"x").unwrap();
        std::fs::write(base.join(std::ffi::OsStr::from_bytes(b"\xc3")), b"y").unwrap();
        let dir = Dir::open(&base).unwrap();
        dir.remove_contents().unwrap();
        assert_eq!(std::fs::read_dir(&base).unwrap().count(), 0);
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn staging_publishes_by_rename_and_cleans_up() {
        let base = temp("staging");
        let out = Dir::open(&base).unwrap();
        std::fs::write(base.join("victim"), "keep").unwrap();
        std::os::unix::fs::symlink(base.join("victim"), base.join("a.txt")).unwrap();
        {
            let staging = Staging::create(&out).unwrap();
            staging.dir().write_file("a.txt", b"new").unwrap();
            staging.publish(&[PathBuf::from("a.txt")]).unwrap();
        }
        assert_eq!(std::fs::read_to_string(base.join("a.txt")).unwrap(), "new");
        assert_eq!(std::fs::read_to_string(base.join("victim")).unwrap(), "keep");
        let mut left: Vec<_> = std::fs::read_dir(&base).unwrap().map(|e| e.unwrap().file_name()).collect();
        left.sort();
        assert_eq!(left, ["a.txt", "victim"]);
        std::fs::remove_dir_all(&base).unwrap();
    }
}
