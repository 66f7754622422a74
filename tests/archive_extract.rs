//! prof.tar.gz: what a real run packs is listed by the real `tar tzf` with relative paths and extracted
//! identically by `tar xzf` and by `archive::extract_into` (what `postprocess -dir X.tar.gz` extracts with); it
//! refuses each kind of hostile archive with one clear error line and writes nothing.

mod support;

use flate2::write::GzEncoder;
use flate2::Compression;
use profcpu::archive;
use std::fs::File;
use std::os::fd::AsFd;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use support::busy::Busy;
use support::golden::golden_copy;
use support::profcpu::{finish_collect, plain_tar_extract, postprocess_ok, tar_list, tree};
use support::scratch::Scratch;
use tar::{EntryType, Header};

/// `archive` extracted into `dest` (made if missing) as `postprocess -dir X.tar.gz` does once it has opened both.
fn extract(archive: &Path, dest: &Path) -> anyhow::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dest)?;
    let (file, folder) = (File::open(archive)?, File::open(dest)?);
    archive::extract_into(&file, &archive.display().to_string(), folder.as_fd(), dest)
}

/// Every file (with content) and symlink (with target) below `root`, sorted.
fn snapshot(root: &Path) -> Vec<(PathBuf, String)> {
    tree(root)
        .into_iter()
        .map(|(path, bytes)| (path, format!("{:016x}", bytes.iter().fold(0u64, |h, &b| h.rotate_left(5) ^ b as u64))))
        .collect()
}

/// The prof.tar.gz a real `postprocess` writes lists relative paths only, and GNU tar and `extract_into` unpack
/// the same tree from it: the folder it was made from.
#[test]
fn a_real_archive_lists_relative_paths_and_extracts_identically() {
    let scratch = Scratch::new("archive-real");
    let src = golden_copy(&scratch, "14-03-22_2026-11-22");
    postprocess_ok(&src, &["-per-thread"]);
    let tarball = scratch.join("prof.tar.gz");
    std::fs::rename(src.join("prof.tar.gz"), &tarball).unwrap();

    let listed = tar_list(&tarball);
    assert!(listed.iter().all(|p| !p.starts_with('/') && !p.split('/').any(|c| c == "..")), "{listed:?}");
    for expected in ["perf.data", "perf_script.out", "folded_stacks.out", "flamegraph.svg", "metadata.txt", "symbols/"]
    {
        assert!(listed.iter().any(|p| p == expected), "{expected} missing from {listed:?}");
    }

    let by_tar = scratch.join("by-tar");
    plain_tar_extract(&tarball, &by_tar);
    let by_us = scratch.join("by-us");
    let extracted = extract(&tarball, &by_us).unwrap();
    assert_eq!(extracted.len(), listed.len());
    let original = snapshot(&src);
    assert_eq!(snapshot(&by_tar), original);
    assert_eq!(snapshot(&by_us), original);
}

/// `collect` compresses perf.data for the archive while recording it (stack copies kept: MBs a second), then what
/// came last; the archive holds it byte for byte, and its other entries are those of the folder.
#[test]
fn a_collection_archives_its_perf_data_compressed_while_it_was_recorded() {
    let scratch = Scratch::new("archive-collect");
    let busy = Busy::start(&["--seconds", "30"]);
    let pid = busy.info.pid.to_string();
    let out = scratch.join("out");
    let run = finish_collect(
        std::process::Command::new(support::PROFCPU)
            .env("RUST_LOG", "profcpu=debug")
            .args(["collect", "-pid", &pid, "-duration", "2", "-freq", "999", "-call-graph", "dwarf"])
            .args(["-keep-stack-copies", "-output"])
            .arg(&out)
            .output()
            .unwrap(),
    );
    drop(busy);
    let while_recording = run
        .stderr
        .lines()
        .find_map(|l| l.split("perf.data: ").nth(1)?.split(" of ").next()?.parse::<f64>().ok())
        .unwrap_or_else(|| {
            panic!("no line says how much of perf.data was compressed while recording:\n{}", run.stderr)
        });
    let recorded = std::fs::read(run.perf_data()).unwrap();
    assert!(
        while_recording * 1e6 >= recorded.len() as f64 / 2.0,
        "expected most of a {} byte perf.data compressed while recording, not {while_recording} MB",
        recorded.len()
    );
    let extracted = scratch.join("extracted");
    plain_tar_extract(&run.run_dir.join("prof.tar.gz"), &extracted);
    assert!(std::fs::read(extracted.join("perf.data")).unwrap() == recorded, "perf.data differs in the archive");
    let mut folder = snapshot(&run.run_dir);
    folder.retain(|(path, _)| path.as_os_str() != "prof.tar.gz");
    assert_eq!(snapshot(&extracted), folder);
}

/// Appends an entry with a raw name and link name (the tar crate's safe setters would refuse hostile ones).
fn raw_entry(builder: &mut tar::Builder<GzEncoder<Vec<u8>>>, name: &[u8], kind: EntryType, link: &[u8], data: &[u8]) {
    let mut header = Header::new_gnu();
    {
        let gnu = header.as_gnu_mut().unwrap();
        gnu.name[..name.len()].copy_from_slice(name);
        gnu.linkname[..link.len()].copy_from_slice(link);
    }
    header.set_entry_type(kind);
    header.set_mode(0o644);
    header.set_size(data.len() as u64);
    header.set_cksum();
    builder.append(&header, data).unwrap();
}

type Entry<'a> = (&'a str, EntryType, &'a str, &'a str);

fn tarball(dir: &Path, name: &str, entries: &[Entry]) -> PathBuf {
    let mut builder = tar::Builder::new(GzEncoder::new(Vec::new(), Compression::fast()));
    for (path, kind, link, data) in entries {
        raw_entry(&mut builder, path.as_bytes(), *kind, link.as_bytes(), data.as_bytes());
    }
    let bytes = builder.into_inner().unwrap().finish().unwrap();
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

const FILE: EntryType = EntryType::Regular;
const DIR: EntryType = EntryType::Directory;
const SYMLINK: EntryType = EntryType::Symlink;
const HARDLINK: EntryType = EntryType::Link;

#[test]
fn extraction_refuses_each_hostile_archive_with_one_clear_error() {
    let tmp = Scratch::new(concat!("archive-", "hostile"));
    let cases: Vec<(&str, Vec<Entry>, &str)> = vec![
        ("absolute", vec![("/tmp/profcpu-evil", FILE, "", "x")], "entry \"/tmp/profcpu-evil\": absolute path"),
        ("dotdot", vec![("ok.txt", FILE, "", "x"), ("../evil", FILE, "", "x")], "entry \"../evil\": `..` in path"),
        ("inner-dotdot", vec![("a/../../evil", FILE, "", "x")], "`..` in path"),
        ("symlink-absolute", vec![("link", SYMLINK, "/etc", "")], "entry \"link\": symlink to \"/etc\" points outside"),
        ("symlink-climb", vec![("a/link", SYMLINK, "../../etc", "")], "symlink to \"../../etc\" points outside"),
        ("symlink-dotdot-after-name", vec![("s", SYMLINK, "x/../..", "")], "`..` after a folder name"),
        (
            "through-symlink",
            vec![("d", DIR, "", ""), ("l", SYMLINK, "d", ""), ("l/file", FILE, "", "x")],
            "entry \"l/file\": path goes through the archived symlink \"l\"",
        ),
        ("hardlink-absolute", vec![("h", HARDLINK, "/etc/passwd", "")], "hard link to \"/etc/passwd\" points outside"),
        ("hardlink-dotdot", vec![("h", HARDLINK, "../x", "")], "hard link to \"../x\" points outside"),
        ("hardlink-unknown", vec![("h", HARDLINK, "not-here", "")], "not a file extracted before it"),
        (
            "char-device",
            vec![("dev", EntryType::Char, "", "")],
            "entry \"dev\": character device entries are not allowed",
        ),
        ("block-device", vec![("blk", EntryType::Block, "", "")], "block device entries are not allowed"),
        ("fifo", vec![("pipe", EntryType::Fifo, "", "")], "FIFO entries are not allowed"),
        (
            "duplicate",
            vec![("a", FILE, "", "1"), ("a", FILE, "", "2")],
            "entry \"a\": the archive holds this path twice",
        ),
        (
            "file-then-dir",
            vec![("a", FILE, "", "1"), ("a/b", FILE, "", "2")],
            "path goes through the archived file \"a\"",
        ),
    ];
    for (name, entries, expected) in cases {
        let archive_path = tarball(&tmp.path, &format!("{name}.tar.gz"), &entries);
        let dest = tmp.path.join(format!("{name}-out"));
        let err = extract(&archive_path, &dest).unwrap_err();
        let message = format!("{err:#}");
        assert!(message.starts_with("refusing to extract "), "{name}: {message}");
        assert!(message.contains(expected), "{name}: expected {expected:?} in {message:?}");
        assert!(!message.contains('\n'), "{name}: not one line: {message:?}");
        assert!(!dest.exists() || std::fs::read_dir(&dest).unwrap().next().is_none(), "{name}: wrote something");
    }
    assert!(!Path::new("/tmp/profcpu-evil").exists());
}

#[test]
fn extraction_accepts_a_good_archive_with_in_tree_links() {
    let tmp = Scratch::new(concat!("archive-", "good"));
    let archive_path = tarball(
        &tmp.path,
        "good.tar.gz",
        &[
            ("./", DIR, "", ""),
            ("./symbols/lib/libx.so", FILE, "", "ELF"),
            ("symbols/.build-id/ab/cd.debug", SYMLINK, "../../lib/libx.so", ""),
            ("symbols/same.so", HARDLINK, "symbols/lib/libx.so", ""),
            ("metadata.txt", FILE, "", "pid: 1\n"),
        ],
    );
    let dest = tmp.path.join("out");
    let extracted = extract(&archive_path, &dest).unwrap();
    assert_eq!(extracted.len(), 4);
    assert_eq!(std::fs::read_to_string(dest.join("symbols/.build-id/ab/cd.debug")).unwrap(), "ELF");
    assert_eq!(std::fs::read_to_string(dest.join("symbols/same.so")).unwrap(), "ELF");
    assert_eq!(std::fs::read_to_string(dest.join("metadata.txt")).unwrap(), "pid: 1\n");
}

#[test]
fn extraction_never_writes_through_what_is_already_on_disk() {
    let tmp = Scratch::new(concat!("archive-", "planted"));
    let elsewhere = tmp.path.join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let dest = tmp.path.join("out");
    std::fs::create_dir_all(&dest).unwrap();
    // A planted symlink to a folder outside, and one to a file outside, where the archive writes.
    symlink(&elsewhere, dest.join("symbols")).unwrap();
    std::fs::write(elsewhere.join("target.txt"), "keep me").unwrap();
    symlink(elsewhere.join("target.txt"), dest.join("metadata.txt")).unwrap();

    let through_dir = tarball(&tmp.path, "a.tar.gz", &[("symbols/libx.so", FILE, "", "evil")]);
    let err = format!("{:#}", extract(&through_dir, &dest).unwrap_err());
    assert!(err.contains("symlink is in the way"), "{err}");
    assert!(!elsewhere.join("libx.so").exists());

    let onto_file = tarball(&tmp.path, "b.tar.gz", &[("metadata.txt", FILE, "", "evil")]);
    let err = format!("{:#}", extract(&onto_file, &dest).unwrap_err());
    assert!(err.contains("already exists"), "{err}");
    assert_eq!(std::fs::read_to_string(elsewhere.join("target.txt")).unwrap(), "keep me");
}

#[test]
fn extraction_rejects_files_that_are_not_archives() {
    let tmp = Scratch::new(concat!("archive-", "garbage"));
    let path = tmp.path.join("prof.tar.gz");
    std::fs::write(&path, b"this is not gzip").unwrap();
    let err = format!("{:#}", extract(&path, &tmp.path.join("out")).unwrap_err());
    assert!(err.starts_with("refusing to extract") && !err.contains('\n'), "{err}");
}
