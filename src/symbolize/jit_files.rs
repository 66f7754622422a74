//! Opening a JIT's perf map or jitdump safely. These files are written by the profiled process, and in a
//! container by whoever controls it, so a file is only believed when its owner is root or the target's user (as
//! perf does): a map planted by another user could make the profile lie. `force_maps` overrides that.

use super::root_path;
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Why a JIT file could not be used, in words for a warning; `NotFound` is silent (the JIT simply did not write
/// one).
#[derive(Debug)]
pub enum OpenError {
    NotFound,
    Untrusted { owner: u32 },
    Other(String),
}

/// Opens `path` (as the target sees it) inside `root` (or on the host when `root` is `None`), requiring an owner
/// among `allowed_uids` unless `force`.
pub fn open_trusted(root: Option<&Path>, path: &Path, allowed_uids: &[u32], force: bool) -> Result<File, OpenError> {
    let opened = match root {
        Some(root) => root_path::open_in_root(root, path),
        None => root_path::open_regular_nofollow(path),
    };
    let file = opened.map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => OpenError::NotFound,
        _ => OpenError::Other(e.to_string()),
    })?;
    let owner = file.metadata().map_err(|e| OpenError::Other(e.to_string()))?.uid();
    if !force && owner != 0 && !allowed_uids.contains(&owner) {
        return Err(OpenError::Untrusted { owner });
    }
    Ok(file)
}

/// The warning for an untrusted file.
pub fn untrusted_warning(what: &Path, owner: u32) -> String {
    format!(
        "ignoring {} owned by uid {owner}, which is neither root nor the profiled process's user (a planted map \
         could name frames falsely); use -force-maps to trust it",
        what.display()
    )
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

    #[test]
    fn owners_other_than_root_or_the_target_are_refused() {
        let dir = std::env::temp_dir().join(format!("profcpu-jitfiles-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("perf-1.map");
        std::fs::write(&path, "1000 10 x\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let me = current_euid();
        assert!(open_trusted(None, &path, &[me], false).is_ok());
        if me == 0 {
            // Give the file to another user: refused unless forced.
            let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
            // SAFETY: valid NUL-terminated path; chown to an unprivileged uid.
            assert_eq!(unsafe { libc::chown(c.as_ptr(), 4321, 4321) }, 0);
            assert!(matches!(open_trusted(None, &path, &[1000], false), Err(OpenError::Untrusted { owner: 4321 })));
            assert!(open_trusted(None, &path, &[4321], false).is_ok());
            assert!(open_trusted(None, &path, &[1000], true).is_ok());
        }
        assert!(matches!(open_trusted(None, &dir.join("missing"), &[me], false), Err(OpenError::NotFound)));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
