//! Extracting an archive from elsewhere (`postprocess -dir prof.tar.gz`) into a fresh folder: hostile paths, links,
//! special entries, extension headers and sizes are refused before anything is written; what is written stays in
//! the folder. Input: a tar stream (gzip-compressed here, quickly, so that mutations reach the tar layer), or a
//! whole `.tar.gz` when it starts with gzip's magic.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

fuzz_target!(|data: &[u8]| {
    let archive = if data.starts_with(&[0x1f, 0x8b]) {
        data.to_vec()
    } else {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(data).unwrap();
        gz.finish().unwrap()
    };
    let file = profcpu_fuzz::memfd(&archive);
    let workdir = profcpu_fuzz::Workdir::new();
    let root = workdir.path();
    let Ok(extracted) = profcpu::archive::extract_into(&file, "fuzz.tar.gz", workdir.dir.fd(), &root) else {
        // Refused or broken: nothing may be left but folders.
        assert_no_files(&root);
        return;
    };
    for rel in &extracted {
        assert!(rel.is_relative() && rel.components().all(|c| matches!(c, Component::Normal(_))), "{rel:?}");
        assert!(std::fs::symlink_metadata(root.join(rel)).is_ok(), "{rel:?} reported but not there");
    }
    assert_links_stay_inside(&root, &root);
});

/// Every symlink under `dir` points, read lexically from where it is, to somewhere inside `root`.
fn assert_links_stay_inside(root: &Path, dir: &Path) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        let kind = entry.file_type().unwrap();
        if kind.is_dir() {
            assert_links_stay_inside(root, &path);
        } else if kind.is_symlink() {
            let target = std::fs::read_link(&path).unwrap();
            assert!(target.is_relative(), "{path:?} -> {target:?}");
            let mut at: PathBuf = path.parent().unwrap().strip_prefix(root).unwrap().to_path_buf();
            for c in target.components() {
                match c {
                    Component::ParentDir => assert!(at.pop(), "{path:?} -> {target:?} leaves the folder"),
                    Component::Normal(n) => at.push(n),
                    _ => {}
                }
            }
        } else {
            assert!(kind.is_file(), "{path:?} is a special file");
            assert!(!path.file_name().unwrap().as_bytes().is_empty());
        }
    }
}

fn assert_no_files(dir: &Path) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let kind = entry.file_type().unwrap();
        assert!(kind.is_dir(), "{:?} left behind by a refused archive", entry.path());
        assert_no_files(&entry.path());
    }
}
