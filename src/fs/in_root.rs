//! Opening files as a target process sees them: through its root (`/proc/<pid>/root`), never out of it.
//!
//! A container controls every symlink inside it: `/tmp/perf-1.map -> /etc/shadow`, `-> ../../../host/file`, or a
//! `/tmp` swapped for a link to `/` while profcpu looks. So a path is resolved *by the kernel, relative to a
//! descriptor of the root*, in one step: `openat2(root, path, RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)` (Linux 5.6+)
//! treats the root as `/` for every symlink and `..`, and refuses `/proc/*/fd/*`-style magic links. Kernels without
//! `openat2` (ENOSYS) get the same rules from a walk of `O_PATH` descriptors: each component is opened
//! `O_PATH | O_NOFOLLOW` relative to the one before, a symlink is read (`readlinkat`) and its target walked from
//! the root's descriptor (absolute) or from where it was (relative), `..` steps back to the descriptor before and
//! never above the root, at most 40 links. Neither way ever looks a path up again by name after checking it, so a
//! rename between a check and an open cannot redirect the open.
//!
//! Files are opened `O_PATH` first: only a regular file is then reopened for reading (through its own descriptor,
//! `/proc/self/fd/N`), so a FIFO, socket or device planted where a map is expected is never opened at all.
//! [`Last::NoFollow`] refuses a symlink as the last component (what perf maps and jitdumps need: the file itself
//! must be the target's, not a link to someone else's file).

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nix::errno::Errno;
use nix::fcntl::{openat, openat2, readlinkat, OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::{fstat, FileStat, Mode, SFlag};

/// The kernel's own limit on symlinks followed during one lookup.
const MAX_LINKS: usize = 40;
/// `openat2` answers EAGAIN when a rename elsewhere raced with a `..` in the lookup; it is safe to try again.
const EAGAIN_RETRIES: usize = 16;

/// What to do with a symlink in the last component of a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Last {
    /// Follow it (inside the root), as the target itself would: mapped libraries, debug files.
    Follow,
    /// Refuse it (ELOOP): files whose owner decides whether they are trusted (perf maps, jitdumps), sockets.
    NoFollow,
}

/// A directory that paths are resolved in as if it were `/`: a process's root, or the host's.
#[derive(Debug, Clone)]
pub struct Root {
    fd: Arc<OwnedFd>,
    shown: PathBuf,
}

impl Root {
    /// The root of process `pid` (`/proc/<pid>/root`), opened once: a PID recycled later cannot redirect lookups.
    pub fn of_process(pid: u32) -> io::Result<Root> {
        Root::open(Path::new(&format!("/proc/{pid}/root")))
    }

    /// The host's own `/` (for a target that shares our mount namespace, and for processes that are gone).
    pub fn host() -> io::Result<Root> {
        Root::open(Path::new("/"))
    }

    /// `dir` as a root (the path itself is followed: it is ours, not the target's).
    pub fn open(dir: &Path) -> io::Result<Root> {
        let fd = nix::fcntl::open(dir, OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, Mode::empty())?;
        Ok(Root { fd: Arc::new(fd), shown: dir.to_path_buf() })
    }

    /// A directory descriptor opened elsewhere (`O_PATH` suffices), shown as `shown` in messages.
    pub fn from_fd(fd: OwnedFd, shown: PathBuf) -> Root {
        Root { fd: Arc::new(fd), shown }
    }

    /// `path` (as the target sees it) as a host path, for messages only: never open it.
    pub fn shown(&self, path: &Path) -> PathBuf {
        if self.shown == Path::new("/") {
            return path.to_path_buf();
        }
        self.shown.join(path.strip_prefix("/").unwrap_or(path))
    }

    /// Opens the regular file at `path` for reading. Anything else (directory, FIFO, socket, device) is refused
    /// without being opened; see [`Last`] for a symlink at the end.
    pub fn open_file(&self, path: &Path, last: Last) -> io::Result<File> {
        let (fd, st) = self.open_path(path, last)?;
        if kind_of(&st) != SFlag::S_IFREG {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is {}, not a regular file", self.shown(path).display(), describe_kind(&st)),
            ));
        }
        reopen(&fd, OFlag::O_RDONLY | OFlag::O_NONBLOCK)
    }

    /// Opens the directory at `path` for listing and for `*at` calls.
    pub fn open_dir(&self, path: &Path) -> io::Result<OwnedFd> {
        let rel = relative(path);
        self.resolve(&rel, OFlag::O_RDONLY | OFlag::O_DIRECTORY, Last::Follow)
    }

    /// An `O_PATH` descriptor of whatever is at `path` and its status: for callers that check what it is before
    /// using it (a socket to connect to through `/proc/self/fd/N`).
    pub fn open_path(&self, path: &Path, last: Last) -> io::Result<(OwnedFd, FileStat)> {
        let rel = relative(path);
        let fd = self.resolve(&rel, OFlag::O_PATH, last)?;
        let st = fstat(&fd)?;
        // `O_PATH | O_NOFOLLOW` opens a final symlink itself instead of failing.
        if last == Last::NoFollow && kind_of(&st) == SFlag::S_IFLNK {
            return Err(Errno::ELOOP.into());
        }
        Ok((fd, st))
    }

    fn resolve(&self, rel: &[u8], flags: OFlag, last: Last) -> io::Result<OwnedFd> {
        let mut flags = flags | OFlag::O_CLOEXEC;
        if last == Last::NoFollow {
            flags |= OFlag::O_NOFOLLOW;
        }
        let path = if rel.is_empty() { &b"."[..] } else { rel };
        let how =
            OpenHow::new().flags(flags).resolve(ResolveFlag::RESOLVE_IN_ROOT | ResolveFlag::RESOLVE_NO_MAGICLINKS);
        for _ in 0..EAGAIN_RETRIES {
            match openat2(self.fd.as_fd(), path, how) {
                Ok(fd) => return Ok(fd),
                Err(Errno::EAGAIN) => continue,
                Err(Errno::ENOSYS) => return walk(self.fd.as_fd(), rel, flags, last),
                Err(e) => return Err(e.into()),
            }
        }
        Err(io::Error::other(format!("{}: the target kept renaming its files during the lookup", self.shown.display())))
    }
}

/// `path` without its leading `/`s: relative to the root's descriptor.
fn relative(path: &Path) -> Vec<u8> {
    let bytes = path.as_os_str().as_bytes();
    let start = bytes.iter().position(|&b| b != b'/').unwrap_or(bytes.len());
    bytes[start..].to_vec()
}

fn kind_of(st: &FileStat) -> SFlag {
    SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT
}

/// "a directory", "a FIFO", … for messages.
pub(crate) fn describe_kind(st: &FileStat) -> &'static str {
    match kind_of(st) {
        SFlag::S_IFREG => "a regular file",
        SFlag::S_IFDIR => "a directory",
        SFlag::S_IFLNK => "a symlink",
        SFlag::S_IFIFO => "a FIFO",
        SFlag::S_IFSOCK => "a socket",
        SFlag::S_IFCHR => "a character device",
        SFlag::S_IFBLK => "a block device",
        _ => "a special file",
    }
}

/// Opens the very file an `O_PATH` descriptor refers to, for I/O: `/proc/self/fd/N` is resolved by the kernel to
/// the descriptor's file, not by name.
fn reopen(fd: &OwnedFd, flags: OFlag) -> io::Result<File> {
    let link = format!("/proc/self/fd/{}", fd.as_raw_fd());
    let opened = nix::fcntl::open(link.as_str(), flags | OFlag::O_CLOEXEC, Mode::empty())?;
    Ok(File::from(opened))
}

/// The user-space resolver for kernels without `openat2`: the same rules, one `O_PATH` descriptor per component.
/// `flags` are those of the final open.
fn walk(root: BorrowedFd, rel: &[u8], flags: OFlag, last: Last) -> io::Result<OwnedFd> {
    // Directories walked so far below the root; `..` pops one (at the root it stays there, as the kernel does).
    let mut stack: Vec<OwnedFd> = Vec::new();
    // Components still to walk, the next one last.
    let mut pending: Vec<Vec<u8>> = Vec::new();
    push_components(&mut pending, rel);
    let mut links = 0;
    while let Some(part) = pending.pop() {
        if part == b".." {
            stack.pop();
            continue;
        }
        let is_last = pending.is_empty();
        let parent = stack.last().map_or(root, |fd| fd.as_fd());
        let fd = openat(parent, part.as_slice(), OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC, Mode::empty())?;
        let st = fstat(&fd)?;
        if kind_of(&st) == SFlag::S_IFLNK {
            if is_last && last == Last::NoFollow {
                return Err(Errno::ELOOP.into());
            }
            links += 1;
            if links > MAX_LINKS {
                return Err(Errno::ELOOP.into());
            }
            // An empty path reads the link an O_PATH descriptor refers to.
            let target = readlinkat(&fd, "")?.into_vec();
            if target.starts_with(b"/") {
                stack.clear();
            }
            push_components(&mut pending, &target);
            continue;
        }
        if is_last {
            if flags.contains(OFlag::O_PATH) {
                return Ok(fd);
            }
            return Ok(reopen(&fd, flags & !(OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC))?.into());
        }
        if kind_of(&st) != SFlag::S_IFDIR {
            return Err(Errno::ENOTDIR.into());
        }
        stack.push(fd);
    }
    // The path named a directory already walked (empty, `/`, or ending in `..`).
    let here = stack.last().map_or(root, |fd| fd.as_fd());
    Ok(openat(here, ".", flags & !OFlag::O_NOFOLLOW, Mode::empty())?)
}

/// Queues `path`'s components so that popping yields them in order; empty components and `.` are dropped.
fn push_components(pending: &mut Vec<Vec<u8>>, path: &[u8]) {
    let parts: Vec<Vec<u8>> =
        path.split(|&b| b == b'/').filter(|p| !p.is_empty() && *p != b".").map(<[u8]>::to_vec).collect();
    pending.extend(parts.into_iter().rev());
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::unix::fs::symlink;

    struct FakeRoot {
        base: PathBuf,
    }

    impl FakeRoot {
        fn new(name: &str) -> FakeRoot {
            let base = std::env::temp_dir().join(format!("profcpu-in-root-{}-{name}", std::process::id()));
            let _ = std::fs::remove_dir_all(&base);
            std::fs::create_dir_all(base.join("root/tmp")).unwrap();
            std::fs::create_dir_all(base.join("root/app/lib")).unwrap();
            std::fs::write(base.join("root/app/lib/real.so"), b"inside").unwrap();
            std::fs::write(base.join("outside-secret"), b"host").unwrap();
            FakeRoot { base }
        }

        fn root(&self) -> Root {
            Root::open(&self.base.join("root")).unwrap()
        }

        fn dir(&self) -> PathBuf {
            self.base.join("root")
        }
    }

    impl Drop for FakeRoot {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.base);
        }
    }

    /// Reads through both resolvers: they must agree.
    fn read_in(root: &Root, p: &str, last: Last) -> io::Result<String> {
        let read = |f: io::Result<File>| -> io::Result<String> {
            let mut s = String::new();
            f?.read_to_string(&mut s)?;
            Ok(s)
        };
        let kernel = read(root.open_file(Path::new(p), last));
        let walked = read(walk_file(root, p, last));
        assert_eq!(kernel.as_ref().ok(), walked.as_ref().ok(), "{p}: openat2 and the walk disagree");
        kernel
    }

    fn walk_file(root: &Root, p: &str, last: Last) -> io::Result<File> {
        let mut flags = OFlag::O_PATH | OFlag::O_CLOEXEC;
        if last == Last::NoFollow {
            flags |= OFlag::O_NOFOLLOW;
        }
        let fd = walk(root.fd.as_fd(), &relative(Path::new(p)), flags, last)?;
        if kind_of(&fstat(&fd)?) != SFlag::S_IFREG {
            return Err(io::Error::other("not a regular file"));
        }
        reopen(&fd, OFlag::O_RDONLY)
    }

    #[test]
    fn plain_and_relative_links_resolve_inside() {
        let f = FakeRoot::new("plain");
        let r = f.dir();
        symlink("../app/lib/real.so", r.join("tmp/rel")).unwrap();
        symlink("/app/lib/real.so", r.join("tmp/abs")).unwrap();
        symlink("/app", r.join("applink")).unwrap();
        let root = f.root();
        for p in ["/app/lib/real.so", "/tmp/rel", "/tmp/abs", "/applink/lib/./real.so", "app//lib/../lib/real.so"] {
            assert_eq!(read_in(&root, p, Last::Follow).unwrap(), "inside", "{p}");
        }
        // Without following the last link, a link is refused; links on the way are still followed.
        assert!(read_in(&root, "/tmp/abs", Last::NoFollow).is_err());
        assert_eq!(read_in(&root, "/applink/lib/real.so", Last::NoFollow).unwrap(), "inside");
    }

    #[test]
    fn hostile_links_never_reach_the_host() {
        let f = FakeRoot::new("hostile");
        let r = f.dir();
        let secret = f.base.join("outside-secret");
        symlink(&secret, r.join("tmp/abs-host")).unwrap();
        symlink("../../../../../outside-secret", r.join("tmp/climb")).unwrap();
        symlink("/../../outside-secret", r.join("tmp/climb-abs")).unwrap();
        symlink(&f.base, r.join("tmp/hostdir")).unwrap();
        let root = f.root();
        for p in [
            "/tmp/abs-host",
            "/tmp/climb",
            "/tmp/climb-abs",
            "/../outside-secret",
            "/tmp/../../outside-secret",
            "/tmp/hostdir/outside-secret",
        ] {
            let got = read_in(&root, p, Last::Follow);
            assert!(got.is_err(), "{p} escaped the root and read {got:?}");
        }
        // The climbing link lands on <root>/outside-secret; planting that file shows where it resolved.
        std::fs::write(r.join("outside-secret"), b"inner copy").unwrap();
        assert_eq!(read_in(&root, "/tmp/climb", Last::Follow).unwrap(), "inner copy");
        assert_eq!(read_in(&root, "/tmp/climb-abs", Last::Follow).unwrap(), "inner copy");
    }

    #[test]
    fn link_loops_fail() {
        let f = FakeRoot::new("loops");
        let r = f.dir();
        symlink("/tmp/b", r.join("tmp/a")).unwrap();
        symlink("/tmp/a", r.join("tmp/b")).unwrap();
        symlink("self", r.join("tmp/self")).unwrap();
        let root = f.root();
        assert!(read_in(&root, "/tmp/a", Last::Follow).is_err());
        assert!(read_in(&root, "/tmp/self", Last::Follow).is_err());
    }

    #[test]
    fn fifos_sockets_and_directories_are_refused_without_blocking() {
        let f = FakeRoot::new("fifo");
        let r = f.dir();
        nix::unistd::mkfifo(&r.join("tmp/perf-1.map"), Mode::from_bits_truncate(0o600)).unwrap();
        let _listener = std::os::unix::net::UnixListener::bind(r.join("tmp/sock")).unwrap();
        let root = f.root();
        for p in ["/tmp/perf-1.map", "/tmp/sock", "/tmp", "/"] {
            let e = root.open_file(Path::new(p), Last::NoFollow).unwrap_err();
            assert!(e.to_string().contains("not a regular file"), "{p}: {e}");
            assert!(walk_file(&root, p, Last::NoFollow).is_err(), "{p}");
        }
        let (_, st) = root.open_path(Path::new("/tmp/sock"), Last::NoFollow).unwrap();
        assert_eq!(kind_of(&st), SFlag::S_IFSOCK);
        assert!(root.open_dir(Path::new("/tmp")).is_ok());
    }

    /// The fallback walk under the race of issue 15: `/tmp` swapped with an absolute link to a host folder
    /// (`renameat2(RENAME_EXCHANGE)`) while `/tmp/perf-1.map` is opened, 20,000 times.
    #[test]
    fn the_walk_never_reads_a_host_file_while_tmp_is_swapped() {
        let f = FakeRoot::new("race");
        let r = f.dir();
        std::fs::create_dir(f.base.join("host")).unwrap();
        std::fs::write(f.base.join("host/perf-1.map"), b"host").unwrap();
        std::fs::write(r.join("tmp/perf-1.map"), b"inside").unwrap();
        symlink(f.base.join("host"), r.join("tmpx")).unwrap();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let swapper = {
            let (a, b) = (r.join("tmp"), r.join("tmpx"));
            let stop = stop.clone();
            std::thread::spawn(move || {
                let a = std::ffi::CString::new(a.as_os_str().as_bytes()).unwrap();
                let b = std::ffi::CString::new(b.as_os_str().as_bytes()).unwrap();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    // SAFETY: two valid NUL-terminated paths; RENAME_EXCHANGE swaps them atomically.
                    let rc = unsafe {
                        libc::syscall(libc::SYS_renameat2, libc::AT_FDCWD, a.as_ptr(), libc::AT_FDCWD, b.as_ptr(), 2)
                    };
                    assert_eq!(rc, 0, "renameat2: {}", io::Error::last_os_error());
                }
            })
        };
        let root = f.root();
        let (mut host, mut inside) = (0, 0);
        for _ in 0..20_000 {
            let Ok(mut file) = walk_file(&root, "/tmp/perf-1.map", Last::NoFollow) else { continue };
            let mut s = String::new();
            file.read_to_string(&mut s).unwrap();
            if s == "host" {
                host += 1;
            } else {
                inside += 1;
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        swapper.join().unwrap();
        assert_eq!(host, 0, "the walk read the host's file {host} times");
        assert!(inside > 0);
    }

    #[test]
    fn random_paths_never_escape_or_panic() {
        let f = FakeRoot::new("random");
        let r = f.dir();
        symlink("../../..", r.join("tmp/up")).unwrap();
        symlink("/tmp/up/outside-secret", r.join("tmp/s")).unwrap();
        symlink(f.base.join("outside-secret"), r.join("tmp/h")).unwrap();
        let root = f.root();
        let parts = ["..", ".", "tmp", "up", "s", "h", "app", "lib", "real.so", "outside-secret", "", "x"];
        let mut rng = crate::random_inputs::Rng::new(0x5eed_0008);
        let mut below = |n: usize| rng.below(n);
        for _ in 0..2000 {
            let n = 1 + below(6);
            let p: Vec<&str> = (0..n).map(|_| parts[below(parts.len())]).collect();
            let path = format!("/{}", p.join("/"));
            for last in [Last::Follow, Last::NoFollow] {
                if let Ok(s) = read_in(&root, &path, last) {
                    assert_ne!(s, "host", "{path} read the host's file");
                }
            }
        }
    }
}
