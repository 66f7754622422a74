//! The committed golden collection (`tests/data/postprocess/golden`: perf.data, symbols/, metadata.txt of
//! `workload.c`, recorded by profcpu) and copies of it to work on.

use super::scratch::Scratch;
use std::path::{Path, PathBuf};
use std::process::Command;

/// `tests/data/postprocess`.
pub fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/postprocess")
}

/// The committed collection of `workload.c` (perf.data, symbols/, metadata.txt), recorded by profcpu.
pub fn golden_dir() -> PathBuf {
    data_dir().join("golden")
}

/// Copies a folder tree (files, folders, symlinks as symlinks).
pub fn copy_tree(from: &Path, to: &Path) {
    let status = Command::new("cp").arg("-a").arg(from).arg(to).status().expect("cp");
    assert!(status.success(), "cp -a {} {} failed", from.display(), to.display());
}

/// A copy of the golden collection at `scratch/name`.
pub fn golden_copy(scratch: &Scratch, name: &str) -> PathBuf {
    let dir = scratch.join(name);
    copy_tree(&golden_dir(), &dir);
    dir
}
