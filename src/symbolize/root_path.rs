//! Opening files as a target process sees them, through its root (`/proc/<pid>/root`), without ever leaving that
//! root. A container controls every symlink inside it: a link `/tmp/perf-1.map -> /etc/shadow` or
//! `-> ../../../../host/file` must resolve *inside* the container, the way the kernel would resolve it for the
//! target, never to a host file. So the path is walked one component at a time: each symlink is read and its target
//! re-walked (absolute targets restart at the root), `..` never climbs above the root, and link depth is bounded.

use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};

/// The kernel's own limit on symlinks followed during one lookup.
const MAX_LINKS: usize = 40;

/// The host path of `path` as resolved inside `root`: no component of the result below `root` is a symlink.
pub fn resolve_in_root(root: &Path, path: &Path) -> io::Result<PathBuf> {
    let mut pending: Vec<OsString> = Vec::new(); // reversed: next component at the end
    push_components(&mut pending, path);
    let mut resolved: Vec<OsString> = Vec::new();
    let mut links = 0;
    while let Some(part) = pending.pop() {
        if part == ".." {
            resolved.pop();
            continue;
        }
        let mut candidate = root.to_path_buf();
        candidate.extend(&resolved);
        candidate.push(&part);
        let meta = std::fs::symlink_metadata(&candidate)?;
        if meta.file_type().is_symlink() {
            links += 1;
            if links > MAX_LINKS {
                return Err(io::Error::other(format!("too many symlinks resolving {}", path.display())));
            }
            let target = std::fs::read_link(&candidate)?;
            if target.is_absolute() {
                resolved.clear();
            }
            push_components(&mut pending, &target);
        } else {
            resolved.push(part);
        }
    }
    let mut out = root.to_path_buf();
    out.extend(&resolved);
    Ok(out)
}

/// Queues `path`'s components so that popping yields them in order; `.` and the root are dropped (the walk always
/// starts from the root or from where it is).
fn push_components(pending: &mut Vec<OsString>, path: &Path) {
    let parts: Vec<OsString> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(s) => Some(s.to_os_string()),
            Component::ParentDir => Some(OsString::from("..")),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => None,
        })
        .collect();
    pending.extend(parts.into_iter().rev());
}

/// Opens `path` inside `root` for reading. Only regular files are opened: a FIFO or device planted where a map is
/// expected must not block or feed profcpu (O_NONBLOCK for the open, then a type check).
pub fn open_in_root(root: &Path, path: &Path) -> io::Result<File> {
    let host_path = resolve_in_root(root, path)?;
    open_regular_nofollow(&host_path)
}

/// Opens a regular file without following a symlink in its last component and without blocking on a FIFO.
pub fn open_regular_nofollow(path: &Path) -> io::Result<File> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)?;
    let ft = file.metadata()?.file_type();
    if !ft.is_file() || ft.is_fifo() {
        return Err(io::Error::other(format!("{} is not a regular file", path.display())));
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    struct FakeRoot {
        base: PathBuf,
    }

    impl FakeRoot {
        fn new(name: &str) -> FakeRoot {
            let base = std::env::temp_dir().join(format!("profcpu-root-{}-{name}", std::process::id()));
            let _ = std::fs::remove_dir_all(&base);
            std::fs::create_dir_all(base.join("root/tmp")).unwrap();
            std::fs::create_dir_all(base.join("root/app/lib")).unwrap();
            std::fs::write(base.join("root/app/lib/real.so"), b"inside").unwrap();
            std::fs::write(base.join("outside-secret"), b"host").unwrap();
            FakeRoot { base }
        }

        fn root(&self) -> PathBuf {
            self.base.join("root")
        }
    }

    impl Drop for FakeRoot {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.base);
        }
    }

    fn read_in(root: &Path, p: &str) -> io::Result<String> {
        use std::io::Read;
        let mut s = String::new();
        open_in_root(root, Path::new(p))?.read_to_string(&mut s)?;
        Ok(s)
    }

    #[test]
    fn plain_and_relative_links_resolve_inside() {
        let f = FakeRoot::new("plain");
        let r = f.root();
        symlink("../app/lib/real.so", r.join("tmp/rel")).unwrap();
        symlink("/app/lib/real.so", r.join("tmp/abs")).unwrap();
        symlink("/app", r.join("applink")).unwrap();
        assert_eq!(read_in(&r, "/app/lib/real.so").unwrap(), "inside");
        assert_eq!(read_in(&r, "/tmp/rel").unwrap(), "inside");
        assert_eq!(read_in(&r, "/tmp/abs").unwrap(), "inside");
        assert_eq!(read_in(&r, "/applink/lib/./real.so").unwrap(), "inside");
        assert_eq!(resolve_in_root(&r, Path::new("/tmp/abs")).unwrap(), r.join("app/lib/real.so"));
    }

    #[test]
    fn hostile_links_never_reach_the_host() {
        let f = FakeRoot::new("hostile");
        let r = f.root();
        let secret = f.base.join("outside-secret");
        // An absolute link to the host path of the secret: inside the root that path does not exist.
        symlink(&secret, r.join("tmp/abs-host")).unwrap();
        // Climbing with .. must stop at the root.
        symlink("../../../../../outside-secret", r.join("tmp/climb")).unwrap();
        symlink("/../../outside-secret", r.join("tmp/climb-abs")).unwrap();
        // A path that climbs by itself.
        for p in ["/tmp/abs-host", "/tmp/climb", "/tmp/climb-abs", "/../outside-secret", "/tmp/../../outside-secret"] {
            let got = read_in(&r, p);
            assert!(got.is_err(), "{p} escaped the root and read {got:?}");
        }
        // The climbing link lands on <root>/outside-secret; planting that file shows where it resolved.
        std::fs::write(r.join("outside-secret"), b"inner copy").unwrap();
        assert_eq!(read_in(&r, "/tmp/climb").unwrap(), "inner copy");
        assert_eq!(read_in(&r, "/tmp/climb-abs").unwrap(), "inner copy");
    }

    #[test]
    fn link_loops_and_deep_chains_fail() {
        let f = FakeRoot::new("loops");
        let r = f.root();
        symlink("/tmp/b", r.join("tmp/a")).unwrap();
        symlink("/tmp/a", r.join("tmp/b")).unwrap();
        assert!(read_in(&r, "/tmp/a").is_err());
        symlink("self", r.join("tmp/self")).unwrap();
        assert!(read_in(&r, "/tmp/self").is_err());
    }

    #[test]
    fn fifos_and_directories_are_refused_without_blocking() {
        let f = FakeRoot::new("fifo");
        let r = f.root();
        let fifo = r.join("tmp/perf-1.map");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo with a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert!(read_in(&r, "/tmp/perf-1.map").is_err());
        assert!(read_in(&r, "/tmp").is_err());
    }

    #[test]
    fn random_paths_never_escape_or_panic() {
        let f = FakeRoot::new("random");
        let r = f.root();
        symlink("../../..", r.join("tmp/up")).unwrap();
        symlink("/tmp/up/outside-secret", r.join("tmp/s")).unwrap();
        let parts = ["..", ".", "tmp", "up", "s", "app", "lib", "real.so", "outside-secret", "", "x"];
        let mut rng = crate::symbolize::random_inputs::Rng::new(0x5eed_0008);
        for _ in 0..2000 {
            let n = 1 + rng.below(6);
            let p: Vec<&str> = (0..n).map(|_| parts[rng.below(parts.len())]).collect();
            let path = format!("/{}", p.join("/"));
            if let Ok(resolved) = resolve_in_root(&r, Path::new(&path)) {
                assert!(resolved.starts_with(&r), "{path} resolved to {}", resolved.display());
            }
            if let Ok(mut file) = open_in_root(&r, Path::new(&path)) {
                use std::io::Read;
                let mut s = String::new();
                let _ = file.read_to_string(&mut s);
                assert_ne!(s, "host", "{path} read the host's file");
            }
        }
    }
}
