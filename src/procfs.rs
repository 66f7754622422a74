//! Everything profcpu reads from `/proc` (and the few `/sys` files beside it), in one place.
//!
//! A [`Process`] holds the descriptor of `/proc/<pid>`, opened once: every later read (status, threads, maps,
//! environment, its root) goes through it, so a PID that is recycled meanwhile reads as gone instead of as another
//! program. What the target controls (its environment, its maps, its command line) is read with a cap.
//!
//! Why not the `procfs` crate: it was evaluated (0.18, `default-features = false`: small, it adds only
//! `procfs-core` and `hex`). It reads each file whole with no cap (`environ`, `maps`, `cmdline` are the target's to
//! inflate), parses every field of `status` and `stat` where profcpu needs four, and builds a `MemoryMaps` of owned
//! paths for every mapping where recording keeps only the executable ones. The few formats needed here are short to
//! parse and are tested below against this machine's `/proc`.

use anyhow::{bail, Context, Result};
use nix::fcntl::{openat, OFlag};
use nix::sys::stat::{fstat, Mode};
use std::fs::File;
use std::io::{self, BufRead, Read};
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::time::Duration;

pub mod cgroup;

/// Caps on what a process controls the size of.
const MAX_STATUS: u64 = 64 << 10;
const MAX_CMDLINE: u64 = 1 << 20;
const MAX_ENVIRON: u64 = 4 << 20;
const MAX_MAPS: u64 = 64 << 20;
const MAX_MOUNTINFO: u64 = 16 << 20;
/// `/proc/kallsyms` with every module loaded is some 20 MB.
const MAX_KALLSYMS: u64 = 256 << 20;

/// A process's `/proc/<pid>` directory, opened once.
#[derive(Debug)]
pub struct Process {
    pid: u32,
    dir: OwnedFd,
}

/// What profcpu uses of `/proc/<pid>/status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    pub name: String,
    /// Last field of `NStgid:` (else `NSpid:`, else `Tgid:`): the process's PID in its own namespace.
    pub nspid: Option<u32>,
    /// Real, effective, saved and filesystem uid, as the host sees them.
    pub uids: Vec<u32>,
}

/// One line of `/proc/<pid>/maps`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapsEntry {
    pub start: u64,
    pub end: u64,
    pub perms: String,
    pub offset: u64,
    pub maj: u32,
    pub min: u32,
    pub inode: u64,
    /// Empty for anonymous mappings.
    pub path: String,
}

impl MapsEntry {
    pub fn is_executable(&self) -> bool {
        self.perms.as_bytes().get(2) == Some(&b'x')
    }
}

impl Process {
    /// Opens `/proc/<pid>`; `ENOENT` when there is no such process.
    pub fn open(pid: u32) -> io::Result<Process> {
        let dir = nix::fcntl::open(
            format!("/proc/{pid}").as_str(),
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )?;
        Ok(Process { pid, dir })
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Reads `name` (relative to `/proc/<pid>`), at most `cap` bytes.
    fn read(&self, name: &str, cap: u64) -> io::Result<Vec<u8>> {
        let fd = openat(self.dir.as_fd(), name, OFlag::O_RDONLY | OFlag::O_CLOEXEC, Mode::empty())?;
        read_whole(File::from(fd), cap)
    }

    pub fn status(&self) -> io::Result<Status> {
        let text = self.read("status", MAX_STATUS)?;
        parse_status(&String::from_utf8_lossy(&text)).ok_or_else(|| io::Error::other("malformed /proc status"))
    }

    /// The owner of `/proc/<pid>`: the process's effective uid as the host sees it.
    pub fn owner_uid(&self) -> io::Result<u32> {
        Ok(fstat(self.dir.as_fd())?.st_uid)
    }

    /// Thread ids, sorted.
    pub fn thread_ids(&self) -> io::Result<Vec<u32>> {
        let fd =
            openat(self.dir.as_fd(), "task", OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, Mode::empty())?;
        let mut tids: Vec<u32> = nix::dir::Dir::from_fd(fd)?
            .into_iter()
            .filter_map(|e| e.ok()?.file_name().to_str().ok()?.parse().ok())
            .collect();
        tids.sort_unstable();
        Ok(tids)
    }

    /// Context switches of all the process's threads so far (`voluntary_ctxt_switches` +
    /// `nonvoluntary_ctxt_switches` of each `task/<tid>/status`); threads that ended take theirs with them.
    pub fn context_switches(&self) -> io::Result<u64> {
        let mut total = 0;
        for tid in self.thread_ids()? {
            let Ok(text) = self.read(&format!("task/{tid}/status"), MAX_STATUS) else { continue };
            total += context_switches_of(&String::from_utf8_lossy(&text));
        }
        Ok(total)
    }

    /// The command name of the process (`comm`), or of one of its threads.
    pub fn comm(&self, tid: Option<u32>) -> Option<String> {
        let name = match tid {
            Some(tid) => format!("task/{tid}/comm"),
            None => "comm".to_string(),
        };
        let raw = self.read(&name, 256).ok()?;
        Some(String::from_utf8_lossy(&raw).trim_end_matches('\n').to_string())
    }

    /// The arguments (`cmdline`), empty for a kernel thread or a process that is gone.
    pub fn cmdline(&self) -> Vec<String> {
        let raw = self.read("cmdline", MAX_CMDLINE).unwrap_or_default();
        raw.split(|&b| b == 0).filter(|a| !a.is_empty()).map(|a| String::from_utf8_lossy(a).into_owned()).collect()
    }

    /// The environment variables whose names `wanted` accepts (`environ`; needs root or the same user).
    pub fn environ(&self, wanted: impl Fn(&str) -> bool) -> io::Result<Vec<(String, String)>> {
        Ok(parse_environ(&self.read("environ", MAX_ENVIRON)?, wanted))
    }

    /// Every mapping (`maps`).
    pub fn maps(&self) -> io::Result<Vec<MapsEntry>> {
        let raw = self.read("maps", MAX_MAPS)?;
        Ok(raw.split(|&b| b == b'\n').filter_map(|l| parse_maps_line(&String::from_utf8_lossy(l))).collect())
    }

    /// Field 22 of `stat`: when the process started, in clock ticks since boot.
    pub fn start_time(&self) -> io::Result<u64> {
        stat_field(&self.read("stat", 4096)?, 22).ok_or_else(|| io::Error::other("malformed /proc stat"))
    }

    /// CPU time the process has used so far, every thread of it (running and exited) together: utime + stime
    /// (fields 14 and 15 of `stat`), what `top` and `ps` count. Time of reaped children is not included.
    pub fn cpu_time(&self) -> io::Result<Duration> {
        let stat = self.read("stat", 4096)?;
        match (stat_field(&stat, 14), stat_field(&stat, 15)) {
            (Some(user), Some(system)) => Ok(ticks_to_duration(user.saturating_add(system))),
            _ => Err(io::Error::other("malformed /proc stat")),
        }
    }

    /// Its cgroup memberships as it lists them (`cgroup`), paths as profcpu's cgroup namespace sees them.
    fn cgroups(&self) -> io::Result<String> {
        Ok(String::from_utf8_lossy(&self.read("cgroup", MAX_STATUS)?).into_owned())
    }

    /// Its mount table (`mountinfo`): mount points as it sees them.
    fn mountinfo(&self) -> io::Result<String> {
        Ok(String::from_utf8_lossy(&self.read("mountinfo", MAX_MOUNTINFO)?).into_owned())
    }

    /// Whether the process has exited but not been reaped (state Z or X in `stat`); a read error counts as exited.
    pub fn is_exited(&self) -> bool {
        match self.read("stat", 4096) {
            Ok(stat) => stat_state(&stat).map_or(true, |s| s == b'Z' || s == b'X'),
            Err(_) => true,
        }
    }

    /// The inode of its mount namespace (`ns/mnt`): equal inodes are the same namespace.
    pub fn mount_ns(&self) -> Option<u64> {
        let st = nix::sys::stat::fstatat(self.dir.as_fd(), "ns/mnt", nix::fcntl::AtFlags::empty()).ok()?;
        Some(st.st_ino)
    }

    /// Whether it shares profcpu's mount namespace (then its files are the host's files at the same paths).
    pub fn shares_our_mounts(&self) -> bool {
        let ours = own_mount_ns();
        ours.is_some() && self.mount_ns() == ours
    }

    /// Its root directory (`root`), to open files as it sees them.
    pub fn root(&self) -> io::Result<crate::fs::Root> {
        let fd =
            openat(self.dir.as_fd(), "root", OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, Mode::empty())?;
        Ok(crate::fs::Root::from_fd(fd, format!("/proc/{}/root", self.pid).into()))
    }
}

/// Whether a process with this PID exists.
pub fn exists(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Clock ticks per second (`sysconf(_SC_CLK_TCK)`), the unit of the times in `stat`; 100 on every Linux port
/// profcpu runs on, which is also the fallback.
fn clock_ticks_per_second() -> u64 {
    match nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK) {
        Ok(Some(hz)) if hz > 0 => hz as u64,
        _ => 100,
    }
}

fn ticks_to_duration(ticks: u64) -> Duration {
    let hz = clock_ticks_per_second();
    Duration::from_secs(ticks / hz) + Duration::from_nanos((ticks % hz) * 1_000_000_000 / hz)
}

/// The inode of profcpu's own mount namespace.
pub fn own_mount_ns() -> Option<u64> {
    std::fs::metadata("/proc/self/ns/mnt").ok().map(|m| std::os::unix::fs::MetadataExt::ino(&m))
}

/// PIDs of every process, sorted.
pub fn all_pids() -> io::Result<Vec<u32>> {
    let mut pids: Vec<u32> =
        std::fs::read_dir("/proc")?.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect();
    pids.sort_unstable();
    Ok(pids)
}

/// `/proc/kallsyms` as a stream of lines (`ADDRESS TYPE NAME [MODULE]`), capped.
pub fn kallsyms() -> io::Result<impl BufRead> {
    Ok(io::BufReader::with_capacity(1 << 16, File::open("/proc/kallsyms")?.take(MAX_KALLSYMS)))
}

/// What a read of a kernel-made file asks for first. Such a file says its size is 0, so a read into an empty buffer
/// starts with a 32-byte probe and doubles from there: eight reads for a 1.5 KB `/proc/PID/status`, each of which
/// has the kernel make the whole text again.
const FIRST_READ: usize = 16 << 10;

/// All of a kernel-made file, at most `cap` bytes.
fn read_whole(file: File, cap: u64) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::with_capacity(FIRST_READ.min(cap as usize));
    file.take(cap).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// [`read_whole`] as text (invalid UTF-8 is an error).
fn read_text(path: &str, cap: u64) -> io::Result<String> {
    String::from_utf8(read_whole(File::open(path)?, cap)?).map_err(|_| io::Error::other(format!("{path} is not text")))
}

/// A file of profcpu's own `/proc/self` (`cgroup`, `mountinfo`), as text.
pub fn own(name: &str) -> io::Result<String> {
    read_text(&format!("/proc/self/{name}"), MAX_MOUNTINFO)
}

/// A small kernel file (`/proc/sys/...`, `/sys/...`), trimmed.
pub fn read_setting(path: &str) -> io::Result<String> {
    Ok(read_text(path, 64 << 10)?.trim().to_string())
}

/// Context switches on the whole machine since boot (the `ctxt` line of `/proc/stat`).
pub fn system_context_switches() -> io::Result<u64> {
    system_stat("ctxt")
}

/// When a process whose `stat` start time is `start_ticks` started, in seconds since the epoch (to the second:
/// boot time is known to the second, `btime` in /proc/stat).
pub fn started_at(start_ticks: u64) -> io::Result<u64> {
    Ok(system_stat("btime")? + ticks_to_duration(start_ticks).as_secs())
}

/// Whether a file last modified at `mtime` (seconds since the epoch) was last written before a process that started
/// at `started` ([`started_at`]) existed: then it is a dead process's that had the same PID (killed runtimes leave
/// their perf maps and sockets in /tmp), not this one's. Two seconds of slack for the clocks' grain.
pub fn written_before_start(mtime: i64, started: u64) -> bool {
    mtime.saturating_add(2) < i64::try_from(started).unwrap_or(i64::MAX)
}

/// The value of /proc/stat's line `key VALUE`.
fn system_stat(key: &str) -> io::Result<u64> {
    let text = read_text("/proc/stat", MAX_STATUS * 16)?;
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.trim().parse().ok())
        .ok_or_else(|| io::Error::other(format!("no {key} line in /proc/stat")))
}

fn context_switches_of(status: &str) -> u64 {
    status
        .lines()
        .filter_map(|l| {
            let (key, value) = l.split_once(':')?;
            matches!(key, "voluntary_ctxt_switches" | "nonvoluntary_ctxt_switches")
                .then(|| value.trim().parse::<u64>().ok())?
        })
        .sum()
}

/// Where file systems of type `fstype` are mounted, as this process sees them (`/proc/self/mounts`; octal escapes
/// such as `\040` for a space are decoded).
pub fn mount_points(fstype: &str) -> Vec<std::path::PathBuf> {
    let Ok(text) = read_text("/proc/self/mounts", MAX_MAPS) else { return Vec::new() };
    text.lines()
        .filter_map(|line| {
            let mut words = line.split(' ');
            let (_, dir, kind) = (words.next()?, words.next()?, words.next()?);
            (kind == fstype).then(|| std::path::PathBuf::from(unescape_octal(dir)))
        })
        .collect()
}

/// `\ooo` escapes of /proc's mount tables.
fn unescape_octal(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let digits = bytes.get(i + 1..i + 4).filter(|d| d.iter().all(|b| (b'0'..=b'7').contains(b)));
        match (bytes[i], digits) {
            (b'\\', Some(d)) => {
                out.push(d.iter().fold(0u8, |v, b| v.wrapping_mul(8).wrapping_add(b - b'0')));
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

/// The online CPUs, from `/sys/devices/system/cpu/online` ("0-3,6,8-9").
pub fn online_cpus() -> Result<Vec<u32>> {
    let list = read_setting("/sys/devices/system/cpu/online")
        .context("cannot read /sys/devices/system/cpu/online (is /sys mounted?)")?;
    parse_cpu_list(&list).with_context(|| format!("cannot parse the online CPU list {list:?}"))
}

/// The highest CPU number the machine can have plus one (perf's "nrcpus avail").
pub fn possible_cpus() -> u32 {
    read_setting("/sys/devices/system/cpu/present")
        .ok()
        .and_then(|s| parse_cpu_list(&s).ok())
        .and_then(|c| c.iter().max().map(|m| m + 1))
        .unwrap_or(1)
}

/// No kernel numbers CPUs this high (`NR_CPUS` is at most 8192): a larger number is no CPU list, and a range up to
/// it must not become billions of entries (found by fuzzing).
const MAX_CPU: u32 = 1 << 16;

pub fn parse_cpu_list(list: &str) -> Result<Vec<u32>> {
    let mut cpus = Vec::new();
    for part in list.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) = (a.parse()?, b.parse()?);
                if b < a || b >= MAX_CPU {
                    bail!("bad range {part}");
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(part.parse()?),
        }
    }
    if cpus.is_empty() {
        bail!("no CPUs listed");
    }
    Ok(cpus)
}

/// Parses `/proc/<pid>/status`. `NStgid` (the thread group's IDs, outermost first) is preferred over `NSpid` (the
/// thread's), which only differ when status is read through a thread.
pub fn parse_status(text: &str) -> Option<Status> {
    let field = |key: &str| {
        text.lines().find_map(|l| l.strip_prefix(key).and_then(|rest| rest.strip_prefix(':')).map(str::trim))
    };
    let last_number = |v: &str| v.split_whitespace().last().and_then(|n| n.parse::<u32>().ok());
    let name = field("Name")?.to_string();
    let nspid = field("NStgid")
        .and_then(last_number)
        .or_else(|| field("NSpid").and_then(last_number))
        .or_else(|| field("Tgid").and_then(last_number));
    let uids = field("Uid").map(|v| v.split_whitespace().filter_map(|u| u.parse().ok()).collect()).unwrap_or_default();
    Some(Status { name, nspid, uids })
}

/// Parses `start-end perms offset maj:min inode   path` (numbers in hex except the inode). The path starts after the
/// padding and may contain spaces; it is empty for anonymous mappings.
pub fn parse_maps_line(line: &str) -> Option<MapsEntry> {
    let mut rest = line;
    let mut field = || {
        let t = rest.trim_start();
        let end = t.find(' ').unwrap_or(t.len());
        let (f, r) = t.split_at(end);
        rest = r;
        f
    };
    let (range, perms, offset, dev, inode) = (field(), field(), field(), field(), field());
    let (start, end) = range.split_once('-')?;
    let (maj, min) = dev.split_once(':')?;
    Some(MapsEntry {
        start: u64::from_str_radix(start, 16).ok()?,
        end: u64::from_str_radix(end, 16).ok()?,
        perms: perms.to_string(),
        offset: u64::from_str_radix(offset, 16).ok()?,
        maj: u32::from_str_radix(maj, 16).ok()?,
        min: u32::from_str_radix(min, 16).ok()?,
        inode: inode.parse().ok()?,
        path: rest.trim_start().to_string(),
    })
}

/// `NAME=value` entries separated by NUL, keeping those `wanted` accepts; entries that are not UTF-8 are skipped.
pub fn parse_environ(raw: &[u8], wanted: impl Fn(&str) -> bool) -> Vec<(String, String)> {
    raw.split(|&b| b == 0)
        .filter_map(|entry| {
            let text = std::str::from_utf8(entry).ok()?;
            let (name, value) = text.split_once('=')?;
            wanted(name).then(|| (name.to_string(), value.to_string()))
        })
        .collect()
}

/// The fields after the command name of `stat`, which is in parentheses and may itself contain spaces and `)`.
fn stat_after_comm(stat: &[u8]) -> Option<&str> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    std::str::from_utf8(&stat[close + 1..]).ok()
}

/// Field `n` (1-based, as `man 5 proc` counts) of `stat`, for a numeric field after the command name.
fn stat_field(stat: &[u8], n: usize) -> Option<u64> {
    // Field 3 is the first after ')'.
    stat_after_comm(stat)?.split_whitespace().nth(n.checked_sub(3)?)?.parse().ok()
}

fn stat_state(stat: &[u8]) -> Option<u8> {
    stat_after_comm(stat)?.split_whitespace().next()?.bytes().next()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_switches_are_counted() {
        let me = Process::open(std::process::id()).unwrap();
        // This thread's own count grows with its sleep. The process's sum need not: it holds the test harness's other
        // threads, and one that ends takes its switches with it. It holds this thread's, though.
        // SAFETY: gettid only returns the calling thread's id.
        let tid = unsafe { libc::gettid() };
        let own = || {
            context_switches_of(&String::from_utf8_lossy(&me.read(&format!("task/{tid}/status"), MAX_STATUS).unwrap()))
        };
        let before = own();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let after = own();
        assert!(after > before, "{before} -> {after}");
        assert!(me.context_switches().unwrap() >= after);
        assert!(system_context_switches().unwrap() > 0);
        assert_eq!(context_switches_of("voluntary_ctxt_switches:\t7\nnonvoluntary_ctxt_switches:\t5\n"), 12);
    }

    #[test]
    fn mount_points_are_listed_with_escapes_decoded() {
        assert!(mount_points("proc").iter().any(|p| p == Path::new("/proc")), "{:?}", mount_points("proc"));
        assert!(mount_points("no-such-fs").is_empty());
        assert_eq!(unescape_octal(r"/mnt/a\040b\134c\9"), "/mnt/a b\\c\\9");
    }

    #[test]
    fn this_process_reads_back() {
        let me = Process::open(std::process::id()).unwrap();
        let status = me.status().unwrap();
        assert_eq!(status.nspid, Some(std::process::id()));
        // SAFETY: geteuid has no preconditions.
        let euid = unsafe { libc::geteuid() };
        assert_eq!(status.uids.get(1), Some(&euid));
        assert_eq!(me.owner_uid().unwrap(), euid);
        assert!(me.thread_ids().unwrap().contains(&std::process::id()));
        assert!(!me.cmdline().is_empty());
        assert!(me.start_time().unwrap() > 0);
        // Burn CPU until the process's time has moved by 30 ms (in whole ticks), however busy the machine is. (No
        // lower bound on the wall time it takes: the other test threads of this process count as well.)
        let before = me.cpu_time().unwrap();
        let spin = std::time::Instant::now();
        while me.cpu_time().unwrap() < before + Duration::from_millis(30) {
            assert!(spin.elapsed() < Duration::from_secs(10), "no CPU time counted in 10 s of spinning");
        }
        assert!(me.cgroups().unwrap().lines().any(|l| l.starts_with("0::") || l.contains(':')));
        assert!(me.mountinfo().unwrap().contains(" / "));
        assert!(!me.is_exited());
        assert!(me.shares_our_mounts());
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        assert!(me.maps().unwrap().iter().any(|m| m.is_executable() && Path::new(&m.path) == exe));
        assert!(me.comm(None).is_some() && me.comm(Some(std::process::id())).is_some());
        assert!(Process::open(u32::MAX).is_err());
        assert!(!online_cpus().unwrap().is_empty());
    }

    #[test]
    fn status_fields_and_fallbacks() {
        let s = "Name:\tdotnet\nUmask:\t0022\nState:\tR (running)\nTgid:\t4242\nNgid:\t0\nPid:\t4243\n\
                 PPid:\t4200\nNStgid:\t4242\t1\nNSpid:\t4243\t2\nUid:\t1000\t1001\t1002\t1003\n";
        let st = parse_status(s).unwrap();
        assert_eq!((st.name.as_str(), st.nspid, st.uids), ("dotnet", Some(1), vec![1000, 1001, 1002, 1003]));
        assert_eq!(parse_status("Name:\tx\nNSpid:\t10\t3\n").unwrap().nspid, Some(3));
        assert_eq!(parse_status("Name:\tx\nTgid:\t77\n").unwrap().nspid, Some(77));
        assert_eq!(parse_status("Name:\tx\nNStgid:\tabc\n").unwrap().nspid, None);
        assert_eq!(parse_status("Name:\tx y\n").unwrap().name, "x y");
        assert!(parse_status("").is_none());
        assert!(parse_status("garbage\n\n\0").is_none());
    }

    #[test]
    fn maps_lines_parse_like_the_kernel_prints_them() {
        let e = parse_maps_line(
            "7f12a4e28000-7f12a4e4e000 r-xp 00028000 fe:00 326279                     /usr/lib/x86_64-linux-gnu/libc.so.6",
        )
        .unwrap();
        assert_eq!(
            (e.start, e.end, e.offset, e.maj, e.min, e.inode),
            (0x7f12a4e28000, 0x7f12a4e4e000, 0x28000, 0xfe, 0, 326279)
        );
        assert_eq!(e.path, "/usr/lib/x86_64-linux-gnu/libc.so.6");
        assert!(e.is_executable());
        assert_eq!(parse_maps_line("7f0000000000-7f0000001000 rwxp 00000000 00:00 0 ").unwrap().path, "");
        let spaced = parse_maps_line("1000-2000 r-xs 00001000 103:02 99 /tmp/my app/lib x.so (deleted)").unwrap();
        assert_eq!((spaced.maj, spaced.min), (0x103, 2));
        assert_eq!(spaced.path, "/tmp/my app/lib x.so (deleted)");
        assert!(parse_maps_line("garbage").is_none());
    }

    #[test]
    fn stat_fields_survive_odd_command_names() {
        let stat = b"42 (a) b) c) S 1 42 42 0 -1 4194560 1 0 0 0 250 31 0 0 20 0 1 0 123456 0 0";
        assert_eq!(stat_field(stat, 22), Some(123456));
        assert_eq!((stat_field(stat, 14), stat_field(stat, 15)), (Some(250), Some(31)));
        assert_eq!(ticks_to_duration(clock_ticks_per_second() * 3 / 2), Duration::from_millis(1500));
        assert_eq!(stat_state(stat), Some(b'S'));
        assert_eq!(stat_field(b"garbage", 22), None);
    }

    #[test]
    fn environ_keeps_what_is_wanted() {
        let env = parse_environ(b"PATH=/bin\0DOTNET_X=1\0junk\0\xff\xfe=1\0", |n| n.starts_with("DOTNET_"));
        assert_eq!(env, [("DOTNET_X".to_string(), "1".to_string())]);
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-1\n").unwrap(), vec![0, 1]);
        assert_eq!(parse_cpu_list("0-2,5,7-8").unwrap(), vec![0, 1, 2, 5, 7, 8]);
        assert!(parse_cpu_list("").is_err());
        assert!(parse_cpu_list("3-1").is_err());
        // The procfs fuzz target's out-of-memory: a range of four billion CPUs.
        assert!(parse_cpu_list("00000-004000000001,+00").is_err());
        assert_eq!(parse_cpu_list("0-65535").unwrap().len(), 65536);
    }
}
