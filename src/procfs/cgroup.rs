//! The CPU time a process's cgroup has used — the whole container, as `docker stats` counts it — from cgroup v2
//! `cpu.stat` (`usage_usec`) or cgroup v1 `cpuacct.usage` (nanoseconds).
//!
//! Finding the file: `/proc/PID/cgroup` names the process's cgroup in each hierarchy, relative to profcpu's cgroup
//! namespace; a mount of that hierarchy (`mountinfo`: the mount's root within the hierarchy, relative to the same
//! namespace, and its mount point) turns the name into a path. Two views are tried, in this order:
//!
//! 1. profcpu's own mounts: the host, or a container given the host's `/sys/fs/cgroup`;
//! 2. the target's mounts, through its root (`/proc/PID/root`, resolved inside it): a sidecar, or a profiler in the
//!    target's own container, reaches the container's cgroup as the container mounts it.
//!
//! Hierarchies, in this order: a cgroup of its own in v1 `cpuacct` (on a hybrid host, container runtimes keep
//! containers in the v1 controllers and may leave v2 at the root, and containers mount only v1), then one in v2,
//! then the root cgroup (the whole machine) in v2, then in v1.

use super::Process;
use crate::fs::{Last, Root};
use anyhow::{bail, Result};
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The two kinds of hierarchy that count a cgroup's CPU time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// A v1 hierarchy with the `cpuacct` controller (possibly together with `cpu`).
    V1,
    /// The unified (v2) hierarchy: every cgroup has `cpu.stat`, with or without the cpu controller.
    V2,
}

impl Version {
    /// The file that holds the cgroup's CPU time.
    pub fn file_name(self) -> &'static str {
        match self {
            Version::V1 => "cpuacct.usage",
            Version::V2 => "cpu.stat",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Version::V1 => "cgroup v1 cpuacct",
            Version::V2 => "cgroup v2",
        }
    }
}

/// The process's cgroup in one hierarchy that counts CPU time (a line of `/proc/PID/cgroup`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Membership {
    version: Version,
    /// As profcpu's cgroup namespace sees it; starts with `/`, may hold `/..` when outside that namespace.
    path: String,
}

/// A mount of a hierarchy that counts CPU time (a line of `mountinfo`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub version: Version,
    /// The cgroup the mount shows at its mount point, in the same terms as [`Membership::path`].
    pub root: String,
    pub mount_point: PathBuf,
}

/// A cgroup's CPU-time counter, opened once and re-read in place.
#[derive(Debug)]
pub struct CpuUsage {
    file: File,
    version: Version,
    cgroup: String,
    shown: PathBuf,
}

impl CpuUsage {
    /// Finds and opens the CPU counter of `process`'s cgroup (see the module documentation for where it looks).
    /// The error is one line: what was tried and how to make it readable.
    pub fn open(process: &Process) -> Result<CpuUsage> {
        let pid = process.pid();
        let listed = process.cgroups().map_err(|e| anyhow::anyhow!("cannot read /proc/{pid}/cgroup: {e}"))?;
        let mut memberships = parse_memberships(&listed);
        if memberships.is_empty() {
            bail!(
                "PID {pid} is in no cgroup that counts CPU time (/proc/{pid}/cgroup lists neither cgroup v2 nor a v1 \
                 cpuacct controller); use -scope process"
            );
        }
        memberships.sort_by_key(preference);
        let mut views = Vec::new();
        let mut tried = Vec::new();
        match (Root::host(), own_mountinfo()) {
            (Ok(root), Ok(text)) => views.push((root, parse_mounts(&text))),
            (Err(e), _) | (_, Err(e)) => tried.push(format!("profcpu's own mounts: {e}")),
        }
        if !process.shares_our_mounts() {
            match (process.root(), process.mountinfo()) {
                (Ok(root), Ok(text)) => views.push((root, parse_mounts(&text))),
                (Err(e), _) | (_, Err(e)) => tried.push(format!("/proc/{pid}/root and mountinfo: {e}")),
            }
        }
        for m in &memberships {
            for (root, mounts) in &views {
                for mount in mounts.iter().filter(|mount| mount.version == m.version) {
                    let Some(rel) = relative_to(&m.path, &mount.root) else { continue };
                    let path = mount.mount_point.join(rel).join(m.version.file_name());
                    let shown = root.shown(&path);
                    let opened = root.open_file(&path, Last::Follow).and_then(|file| {
                        let usage = CpuUsage { file, version: m.version, cgroup: m.path.clone(), shown: shown.clone() };
                        usage.read().map(|_| usage)
                    });
                    match opened {
                        Ok(usage) => return Ok(usage),
                        Err(e) => tried.push(format!("{}: {e}", shown.display())),
                    }
                }
            }
        }
        let cgroups: Vec<String> = memberships.iter().map(|m| format!("{} {}", m.version.name(), m.path)).collect();
        let tried = if tried.is_empty() {
            "no cgroup file system holding it is mounted here or in the target's root".to_string()
        } else {
            format!("tried {}", tried.join("; "))
        };
        bail!(
            "cannot read the CPU use of PID {pid}'s cgroup ({}): {tried}. From a container, mount the host's cgroups \
             (-v /sys/fs/cgroup:/sys/fs/cgroup:ro) or let profcpu read the target's through /proc/{pid}/root \
             (CAP_SYS_PTRACE, a shared PID namespace); or use -scope process",
            cgroups.join(", ")
        )
    }

    /// The CPU time the cgroup's processes have used since it was created.
    pub fn read(&self) -> io::Result<Duration> {
        let mut buf = [0u8; 4096];
        let mut len = 0;
        // A cgroup file is generated on each read from offset 0.
        while len < buf.len() {
            let n = self.file.read_at(&mut buf[len..], len as u64)?;
            if n == 0 {
                break;
            }
            len += n;
        }
        let text = String::from_utf8_lossy(&buf[..len]);
        parse_usage(self.version, &text).ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidData, format!("{} holds no CPU time: {text:?}", self.shown.display()))
        })
    }

    /// The cgroup, as profcpu's cgroup namespace names it (`/` is the whole machine).
    pub fn cgroup(&self) -> &str {
        &self.cgroup
    }

    /// The file read, as a path for messages.
    pub fn file(&self) -> &Path {
        &self.shown
    }
}

/// The order memberships are tried in (lowest first): a cgroup of its own, v1 first; then the root, v2 first.
fn preference(m: &Membership) -> (bool, bool) {
    let root = m.path == "/";
    (root, (m.version == Version::V2) != root)
}

fn own_mountinfo() -> io::Result<String> {
    Process::open(std::process::id())?.mountinfo()
}

/// The memberships in hierarchies that count CPU time, from the text of `/proc/PID/cgroup`
/// (`ID:CONTROLLERS:PATH` per line; v2 is `0::PATH`).
fn parse_memberships(text: &str) -> Vec<Membership> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.splitn(3, ':');
            let (id, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
            let version = if id == "0" && controllers.is_empty() {
                Version::V2
            } else if controllers.split(',').any(|c| c == "cpuacct") {
                Version::V1
            } else {
                return None;
            };
            path.starts_with('/').then(|| Membership { version, path: path.to_string() })
        })
        .collect()
}

/// The mounts of hierarchies that count CPU time, from the text of a `mountinfo` (proc(5): ID PARENT MAJ:MIN ROOT
/// MOUNT-POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER-OPTIONS).
pub fn parse_mounts(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|line| {
            let (before, after) = line.split_once(" - ")?;
            let fields: Vec<&str> = before.split(' ').collect();
            let (root, mount_point) = (fields.get(3)?, fields.get(4)?);
            let mut after = after.split(' ');
            let (fstype, _source, super_options) = (after.next()?, after.next()?, after.next().unwrap_or(""));
            let version = match fstype {
                "cgroup2" => Version::V2,
                "cgroup" if super_options.split(',').any(|o| o == "cpuacct") => Version::V1,
                _ => return None,
            };
            Some(Mount { version, root: unescape(root), mount_point: PathBuf::from(unescape(mount_point)) })
        })
        .collect()
}

/// mountinfo writes space, tab, newline and backslash in paths as `\ooo` octal escapes.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).filter(|d| d.iter().all(|b| (b'0'..=b'7').contains(b)));
        match (bytes[i], octal) {
            (b'\\', Some(d)) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `path` relative to the cgroup `root` (component by component), or `None` when it is not inside it.
fn relative_to<'a>(path: &'a str, root: &str) -> Option<&'a str> {
    let root = root.trim_end_matches('/');
    let rest = path.strip_prefix(root)?;
    if !rest.is_empty() && !rest.starts_with('/') {
        return None;
    }
    let rest = rest.trim_start_matches('/');
    // A name leading out of the mount (`..`) cannot be reached through it.
    (!rest.split('/').any(|c| c == "..")).then_some(rest)
}

/// The CPU time in a cgroup file's text: `usage_usec` of v2 `cpu.stat`, the nanoseconds of v1 `cpuacct.usage`.
fn parse_usage(version: Version, text: &str) -> Option<Duration> {
    match version {
        Version::V2 => text
            .lines()
            .find_map(|l| l.strip_prefix("usage_usec "))
            .and_then(|v| v.trim().parse().ok())
            .map(Duration::from_micros),
        Version::V1 => text.trim().parse().ok().map(Duration::from_nanos),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memberships_of_hybrid_and_unified_hosts() {
        let hybrid = "9:name=systemd:/\n4:memory:/a\n2:cpuacct:/libpod_parent/libpod-1\n1:cpu:/x\n0::/u\n";
        assert_eq!(
            parse_memberships(hybrid),
            [
                Membership { version: Version::V1, path: "/libpod_parent/libpod-1".into() },
                Membership { version: Version::V2, path: "/u".into() }
            ]
        );
        let comounted = "3:cpu,cpuacct:/docker/abc\n";
        assert_eq!(parse_memberships(comounted)[0].path, "/docker/abc");
        let outside_our_namespace = "0::/../sibling:with:colons\n";
        assert_eq!(parse_memberships(outside_our_namespace)[0].path, "/../sibling:with:colons");
        assert!(parse_memberships("garbage\n1:cpu:/x\n").is_empty());
    }

    #[test]
    fn mounts_of_each_kind() {
        let info = "\
88 80 0:46 / /sys/fs/cgroup rw,nosuid - tmpfs tmpfs rw,mode=755
89 88 0:29 /libpod_parent/libpod-1 /sys/fs/cgroup/cpu ro,relatime - cgroup cgroup rw,cpu
90 88 0:30 /libpod_parent/libpod-1 /sys/fs/cgroup/cpuacct ro,relatime - cgroup cgroup rw,cpuacct
91 88 0:31 / /sys/fs/cgroup/cpu,cpuacct rw shared:9 master:2 - cgroup cgroup rw,cpu,cpuacct
92 88 0:32 / /sys/fs/cgroup/unified rw,relatime shared:7 - cgroup2 cgroup2 rw,nsdelegate
93 88 0:32 / /mnt/my\\040cgroups rw - cgroup2 none rw
";
        let mounts = parse_mounts(info);
        let points: Vec<(&Path, Version)> = mounts.iter().map(|m| (m.mount_point.as_path(), m.version)).collect();
        assert_eq!(
            points,
            [
                (Path::new("/sys/fs/cgroup/cpuacct"), Version::V1),
                (Path::new("/sys/fs/cgroup/cpu,cpuacct"), Version::V1),
                (Path::new("/sys/fs/cgroup/unified"), Version::V2),
                (Path::new("/mnt/my cgroups"), Version::V2),
            ]
        );
        assert_eq!(mounts[0].root, "/libpod_parent/libpod-1");
    }

    #[test]
    fn paths_inside_a_mount_only() {
        assert_eq!(relative_to("/a/b", "/"), Some("a/b"));
        assert_eq!(relative_to("/a/b", "/a"), Some("b"));
        assert_eq!(relative_to("/a", "/a"), Some(""));
        assert_eq!(relative_to("/", "/"), Some(""));
        assert_eq!(relative_to("/ab", "/a"), None);
        assert_eq!(relative_to("/b", "/a"), None);
        assert_eq!(relative_to("/../c", "/../c"), Some(""));
        assert_eq!(relative_to("/../c", "/"), None);
    }

    #[test]
    fn usage_in_both_formats() {
        let v2 = "usage_usec 1460750991\nuser_usec 1277092906\nsystem_usec 183658084\n";
        assert_eq!(parse_usage(Version::V2, v2), Some(Duration::from_micros(1460750991)));
        assert_eq!(parse_usage(Version::V1, "1468859401989\n"), Some(Duration::from_nanos(1468859401989)));
        assert_eq!(parse_usage(Version::V2, "user_usec 5\n"), None);
        assert_eq!(parse_usage(Version::V1, "x"), None);
    }

    #[test]
    fn this_process_cgroup_reads_and_grows() {
        let me = Process::open(std::process::id()).unwrap();
        let usage = CpuUsage::open(&me).unwrap_or_else(|e| panic!("{e:#}"));
        // The cgroup's time grows at least as fast as this spinning thread's.
        let before = usage.read().unwrap();
        let spin = std::time::Instant::now();
        while usage.read().unwrap() < before + Duration::from_millis(30) {
            assert!(spin.elapsed() < Duration::from_secs(10), "{} did not grow", usage.file().display());
        }
    }
}
