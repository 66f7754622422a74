//! What the symbolizer needs to know about a live process from `/proc/<pid>` (read by [`crate::procfs`]): its PID
//! inside its own PID namespace (perf maps and jitdumps are named with that one), its owner (to decide whether its
//! maps can be trusted), its name (to notice a recycled PID) and the root through which its files are reached.

use crate::fs::Root;
use crate::procfs::Process;

#[derive(Debug, Clone)]
pub struct ProcessInfo {
    pub pid: u32,
    /// The PID as the process itself sees it (innermost namespace).
    pub nspid: u32,
    /// Owner of `/proc/<pid>` (the process's effective uid as the host sees it).
    pub uid: u32,
    pub comm: String,
    /// When it started, in seconds since the epoch ([`crate::procfs::started_at`]).
    pub started_at: Option<u64>,
    /// Whether it lives in another mount namespace (a container): its files are then reached through its root.
    in_container: bool,
    /// That root, opened once (`None` when it shares our mounts, or when it could not be opened).
    root: Option<Root>,
}

impl ProcessInfo {
    pub fn read(pid: u32) -> Option<ProcessInfo> {
        let process = Process::open(pid).ok()?;
        let status = process.status().ok()?;
        let uid = process.owner_uid().ok()?;
        let in_container = !process.shares_our_mounts();
        let root = if in_container { process.root().ok() } else { None };
        let started_at = process.start_time().and_then(crate::procfs::started_at).ok();
        Some(ProcessInfo {
            pid,
            nspid: status.nspid.unwrap_or(pid),
            uid,
            comm: status.name,
            started_at,
            in_container,
            root,
        })
    }

    /// The root to open its files through: its own, or the host's when it shares our mounts.
    pub fn root(&self) -> std::io::Result<Root> {
        match (&self.root, self.in_container) {
            (Some(root), _) => Ok(root.clone()),
            (None, false) => Root::host(),
            (None, true) => Err(std::io::Error::other(format!("cannot open /proc/{}/root", self.pid))),
        }
    }

    /// Whether it lives in another mount namespace than profcpu.
    pub fn in_container(&self) -> bool {
        self.in_container
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        let me = std::process::id();
        let info = ProcessInfo::read(me).unwrap();
        assert_eq!(info.pid, me);
        // The test runs in the host PID namespace: the inner PID is the PID.
        assert_eq!(info.nspid, me);
        // SAFETY: geteuid has no preconditions.
        assert_eq!(info.uid, unsafe { libc::geteuid() });
        assert!(!info.in_container());
        assert!(ProcessInfo::read(u32::MAX).is_none());
    }
}
