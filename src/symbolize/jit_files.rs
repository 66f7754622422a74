//! Opening a JIT's perf map or jitdump safely. These files are written by the profiled process, and in a
//! container by whoever controls it, so a file is only believed when it is a regular file of its own — not a
//! symlink, which profcpu would otherwise follow as root to any file the target's user names — owned by root or the
//! target's user (perf ignores maps of other owners too: a map planted by another user could make the profile lie),
//! and not larger than [`Limit::JIT_FILE`]. `force_maps` overrides the owner check only. A file last written before
//! the process started is not its own either: a dead process that had the same PID left it (killed runtimes leave
//! their perf maps in /tmp, and PIDs come round again), and it would name the frames with another program's methods.

use crate::fs::{input, InputError, Last, Limit, Root};
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Why a JIT file could not be used, in words for a warning; `NotFound` is silent (the JIT simply did not write
/// one).
#[derive(Debug)]
pub enum OpenError {
    NotFound,
    Untrusted {
        owner: u32,
    },
    Symlink,
    /// Last written before the process started (silent too: the process may still write its own).
    Stale,
    Other(String),
}

/// Opens `path` (as the target sees it) inside `root`, without following a symlink at its end, requiring an owner
/// among `allowed_uids` (or root) unless `force`, and, when the process's start is known (`started_at`, seconds since
/// the epoch), a file written since. Returns the file and its size.
pub fn open_trusted(
    root: &Root,
    path: &Path,
    allowed_uids: &[u32],
    force: bool,
    started_at: Option<u64>,
) -> Result<(File, u64), OpenError> {
    let file = root.open_file(path, Last::NoFollow).map_err(|e| match InputError::from(e) {
        InputError::NotFound => OpenError::NotFound,
        InputError::Symlink => OpenError::Symlink,
        other => OpenError::Other(other.to_string()),
    })?;
    let size = input::check(&file, Limit::JIT_FILE).map_err(|e| OpenError::Other(e.to_string()))?;
    let meta = file.metadata().map_err(|e| OpenError::Other(e.to_string()))?;
    let owner = meta.uid();
    if !force && owner != 0 && !allowed_uids.contains(&owner) {
        return Err(OpenError::Untrusted { owner });
    }
    if started_at.is_some_and(|started| crate::procfs::written_before_start(meta.mtime(), started)) {
        return Err(OpenError::Stale);
    }
    Ok((file, size))
}

/// The warning for a file that was refused (`None` for [`OpenError::NotFound`], which is silent).
pub fn refusal(what: &Path, pid: u32, e: &OpenError) -> Option<String> {
    let what = what.display();
    Some(match e {
        OpenError::NotFound => return None,
        OpenError::Stale => {
            tracing::debug!("ignoring {what}: last written before PID {pid} started");
            return None;
        }
        OpenError::Untrusted { owner } => format!(
            "ignoring {what} of PID {pid} owned by uid {owner}, which is neither root nor the profiled process's \
             user (a planted map could name frames falsely); use -force-maps to trust it"
        ),
        OpenError::Symlink => format!(
            "ignoring {what} of PID {pid}: it is a symlink, and a JIT writes its map as a file (a link could make \
             profcpu copy a file the target's user may not read)"
        ),
        OpenError::Other(e) => format!("cannot open {what} of PID {pid}: {e}"),
    })
}

/// The user this process runs as (the owner perf accepts for maps of processes that are gone).
pub fn current_euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A scratch folder named after `test` holding a one-line perf map; returns both.
    fn planted_map(test: &str) -> (std::path::PathBuf, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!("profcpu-jitfiles-{test}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("perf-1.map");
        std::fs::write(&path, "1000 10 x\n").unwrap();
        (dir, path)
    }

    #[test]
    fn owners_other_than_root_or_the_target_and_symlinks_are_refused() {
        let (dir, path) = planted_map("owners");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let link = dir.join("perf-2.map");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        let host = Root::host().unwrap();
        let me = current_euid();
        assert!(open_trusted(&host, &path, &[me], false, None).is_ok());
        assert!(matches!(open_trusted(&host, &link, &[me], false, None), Err(OpenError::Symlink)));
        assert!(
            matches!(open_trusted(&host, &link, &[me], true, None), Err(OpenError::Symlink)),
            "forced through a link"
        );
        if me == 0 {
            // Give the file to another user: refused unless forced.
            std::os::unix::fs::chown(&path, Some(4321), Some(4321)).unwrap();
            assert!(matches!(
                open_trusted(&host, &path, &[1000], false, None),
                Err(OpenError::Untrusted { owner: 4321 })
            ));
            assert!(open_trusted(&host, &path, &[4321], false, None).is_ok());
            assert!(open_trusted(&host, &path, &[1000], true, None).is_ok());
        }
        assert!(matches!(open_trusted(&host, &dir.join("missing"), &[me], false, None), Err(OpenError::NotFound)));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_file_last_written_before_the_process_started_is_a_dead_processs() {
        let (dir, path) = planted_map("stale");
        let hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        File::options().write(true).open(&path).unwrap().set_modified(hour_ago).unwrap();
        let host = Root::host().unwrap();
        let me = current_euid();
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
        assert!(matches!(open_trusted(&host, &path, &[me], false, Some(now)), Err(OpenError::Stale)));
        assert!(matches!(open_trusted(&host, &path, &[me], true, Some(now)), Err(OpenError::Stale)), "forced");
        assert!(open_trusted(&host, &path, &[me], false, Some(now - 7200)).is_ok(), "written after the start");
        assert!(open_trusted(&host, &path, &[me], false, None).is_ok(), "start unknown");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
