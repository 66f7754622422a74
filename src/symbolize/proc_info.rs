//! What the symbolizer needs to know about a live process from `/proc/<pid>`: its PID inside its own PID namespace
//! (perf maps and jitdumps are named with that one), its owner (to decide whether its maps can be trusted), its
//! name (to notice a recycled PID) and the root through which its files are reached.

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessInfo {
    pub pid: u32,
    /// The PID as the process itself sees it (innermost namespace).
    pub nspid: u32,
    /// Owner of `/proc/<pid>` (the process's effective uid as the host sees it).
    pub uid: u32,
    pub comm: String,
}

impl ProcessInfo {
    pub fn read(pid: u32) -> Option<ProcessInfo> {
        let dir = PathBuf::from(format!("/proc/{pid}"));
        let status = std::fs::read_to_string(dir.join("status")).ok()?;
        let uid = std::fs::metadata(&dir).ok()?.uid();
        let parsed = parse_status(&status)?;
        Some(ProcessInfo { pid, nspid: parsed.nspid.unwrap_or(pid), uid, comm: parsed.name })
    }

    pub fn root(&self) -> PathBuf {
        PathBuf::from(format!("/proc/{}/root", self.pid))
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    pub name: String,
    /// Last field of `NStgid:` (else `NSpid:`, else `Tgid:`): the process's PID in its own namespace.
    pub nspid: Option<u32>,
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
    Some(Status { name, nspid })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaced_process_reports_its_inner_pid() {
        let s = "Name:\tdotnet\nUmask:\t0022\nState:\tR (running)\nTgid:\t4242\nNgid:\t0\nPid:\t4243\n\
                 PPid:\t4200\nNStgid:\t4242\t1\nNSpid:\t4243\t2\nUid:\t0\t0\t0\t0\n";
        let st = parse_status(s).unwrap();
        assert_eq!(st.name, "dotnet");
        assert_eq!(st.nspid, Some(1));
    }

    #[test]
    fn fallbacks_for_old_kernels_and_bad_input() {
        assert_eq!(parse_status("Name:\tx\nNSpid:\t10\t3\n").unwrap().nspid, Some(3));
        assert_eq!(parse_status("Name:\tx\nTgid:\t77\n").unwrap().nspid, Some(77));
        assert_eq!(parse_status("Name:\tx\nNStgid:\tabc\n").unwrap().nspid, None);
        assert_eq!(parse_status("Name:\tx y\n").unwrap().name, "x y");
        assert!(parse_status("").is_none());
        assert!(parse_status("garbage\n\n\0").is_none());
    }

    #[test]
    fn reads_this_process() {
        let me = std::process::id();
        let info = ProcessInfo::read(me).unwrap();
        assert_eq!(info.pid, me);
        // The test runs in the host PID namespace: the inner PID is the PID.
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        assert_eq!(info.nspid, parse_status(&status).unwrap().nspid.unwrap());
        // SAFETY: geteuid has no preconditions.
        assert_eq!(info.uid, unsafe { libc::geteuid() });
    }

    #[test]
    fn random_and_mutated_status_never_panics() {
        let seed = b"Name:\tdotnet\nTgid:\t4242\nNStgid:\t4242\t1\nNSpid:\t4243\t2\n";
        let mut rng = crate::symbolize::random_inputs::Rng::new(0x5eed_0004);
        for input in rng.inputs(&[seed], 3000) {
            let _ = parse_status(&String::from_utf8_lossy(&input));
        }
    }
}
