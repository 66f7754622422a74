//! Every file profcpu writes is created here: it must not exist yet, and a symlink planted at its path is never
//! followed (the output folder may be shared with, or reachable by, the profiled container).

use std::fs::File;
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Creates `path` for writing with mode 0644; fails if anything (a file or a symlink) is already there.
pub fn create(path: &Path) -> io::Result<File> {
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// Creates `path` as [`create`] does and writes `bytes` into it; errors name the file.
pub fn write(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    use anyhow::Context;
    use std::io::Write;
    let mut f = create(path).with_context(|| format!("cannot create {}", path.display()))?;
    f.write_all(bytes).with_context(|| format!("cannot write {}", path.display()))
}
