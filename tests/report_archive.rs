//! prof.tar.gz: what `archive::create` packs is listed by the real `tar tzf` with relative paths and extracted
//! identically by `tar xzf` and by `archive::extract_safe`; `extract_safe` refuses each kind of hostile archive
//! with one clear error line and writes nothing.

use flate2::write::GzEncoder;
use flate2::Compression;
use profcpu::archive;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;
use tar::{EntryType, Header};

struct TempDir(PathBuf);
impl TempDir {
    fn new(name: &str) -> Self {
        let path = std::env::temp_dir().join(format!("profcpu-archive-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }
}
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A profcpu output folder: outputs, metadata, captured symbols (nested) with an in-tree build-id symlink.
fn output_folder(root: &Path) {
    std::fs::write(root.join("perf.data"), vec![7u8; 300_000]).unwrap();
    std::fs::write(root.join("perf_script.out"), "dotnet  1/1  [000]  1.000000:  1 cpu-clock:\n\n").unwrap();
    std::fs::write(root.join("folded_stacks.out"), "dotnet;main 1\n").unwrap();
    std::fs::write(root.join("flamegraph.svg"), "<svg/>").unwrap();
    std::fs::write(root.join("metadata.txt"), "pid: 1\n").unwrap();
    let dbg = root.join("symbols/usr/share/dotnet/shared");
    std::fs::create_dir_all(&dbg).unwrap();
    std::fs::write(dbg.join("libcoreclr.so.dbg"), b"\x7fELF debug").unwrap();
    std::fs::create_dir_all(root.join("symbols/tmp")).unwrap();
    std::fs::write(root.join("symbols/tmp/perf-1.map"), "7F0000001000 20 int64 [App] App::Fib(int32)\n").unwrap();
    std::fs::create_dir_all(root.join("symbols/.build-id/ab")).unwrap();
    symlink("../../usr/share/dotnet/shared/libcoreclr.so.dbg", root.join("symbols/.build-id/ab/cdef.debug")).unwrap();
}

const ENTRIES: [&str; 6] =
    ["perf.data", "perf_script.out", "folded_stacks.out", "flamegraph.svg", "metadata.txt", "symbols"];

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(out.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// Every file (with content) and symlink (with target) below `root`, sorted.
fn snapshot(root: &Path) -> Vec<(PathBuf, String)> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<(PathBuf, String)>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let rel = path.strip_prefix(root).unwrap().to_path_buf();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.file_type().is_symlink() {
                out.push((rel, format!("-> {}", std::fs::read_link(&path).unwrap().display())));
            } else if meta.is_dir() {
                out.push((rel, "dir".into()));
                walk(root, &path, out);
            } else {
                out.push((rel, format!("{:x}", md5ish(&std::fs::read(&path).unwrap()))));
            }
        }
    }
    let mut out = Vec::new();
    walk(root, root, &mut out);
    out.sort();
    out
}

fn md5ish(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3))
}

#[test]
fn created_archive_lists_relative_paths_and_extracts_identically() {
    let tmp = TempDir::new("create");
    let src = tmp.0.join("14-03-22_2026-11-22");
    std::fs::create_dir_all(&src).unwrap();
    output_folder(&src);
    let tarball = src.join("prof.tar.gz");
    let archived = archive::create(&src, &ENTRIES, &tarball).unwrap();

    let listed: Vec<String> = run(Command::new("tar").arg("tzf").arg(&tarball)).lines().map(str::to_string).collect();
    assert!(listed.iter().all(|p| !p.starts_with('/') && !p.split('/').any(|c| c == "..")), "{listed:?}");
    for expected in [
        "perf.data",
        "metadata.txt",
        "symbols/",
        "symbols/tmp/perf-1.map",
        "symbols/usr/share/dotnet/shared/libcoreclr.so.dbg",
        "symbols/.build-id/ab/cdef.debug",
    ] {
        assert!(listed.iter().any(|p| p == expected), "{expected} missing from {listed:?}");
    }
    assert_eq!(listed.len(), archived.len(), "{listed:?} vs {archived:?}");
    assert!(!listed.iter().any(|p| p.contains("prof.tar.gz")));

    let by_tar = tmp.0.join("by-tar");
    std::fs::create_dir_all(&by_tar).unwrap();
    run(Command::new("tar").arg("xzf").arg(&tarball).arg("-C").arg(&by_tar));
    let by_us = tmp.0.join("by-us");
    let extracted = archive::extract_safe(&tarball, &by_us).unwrap();
    assert_eq!(extracted.len(), archived.len());

    std::fs::remove_file(&tarball).unwrap();
    let original = snapshot(&src);
    assert_eq!(snapshot(&by_tar), original);
    assert_eq!(snapshot(&by_us), original);
    assert_eq!(
        std::fs::read(by_us.join("symbols/.build-id/ab/cdef.debug")).unwrap(),
        b"\x7fELF debug",
        "the in-tree symlink resolves inside the extraction"
    );
}

#[test]
fn create_refuses_bad_inputs_and_never_overwrites() {
    let tmp = TempDir::new("create-bad");
    output_folder(&tmp.0);
    let out = tmp.0.join("prof.tar.gz");
    for (entry, problem) in [("/etc/passwd", "absolute path"), ("../x", "`..` in path"), ("missing.txt", "missing.txt")]
    {
        let err = format!("{:#}", archive::create(&tmp.0, &[entry], &out).unwrap_err());
        assert!(err.contains(problem), "{entry}: {err}");
        std::fs::remove_file(&out).unwrap();
    }
    symlink("/etc", tmp.0.join("symbols/escape")).unwrap();
    let err = format!("{:#}", archive::create(&tmp.0, &["symbols"], &out).unwrap_err());
    assert!(err.contains("symbols/escape") && err.contains("outside"), "{err}");
    std::fs::remove_file(tmp.0.join("symbols/escape")).unwrap();

    // The output path exists (here as a planted symlink): refused, the symlink's target untouched.
    std::fs::remove_file(&out).unwrap();
    let victim = tmp.0.join("victim");
    std::fs::write(&victim, "keep me").unwrap();
    symlink(&victim, &out).unwrap();
    let err = format!("{:#}", archive::create(&tmp.0, &["metadata.txt"], &out).unwrap_err());
    assert!(err.contains("creating") && err.contains("exists"), "{err}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me");
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
fn extract_safe_refuses_each_hostile_archive_with_one_clear_error() {
    let tmp = TempDir::new("hostile");
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
        let archive_path = tarball(&tmp.0, &format!("{name}.tar.gz"), &entries);
        let dest = tmp.0.join(format!("{name}-out"));
        let err = archive::extract_safe(&archive_path, &dest).unwrap_err();
        let message = format!("{err:#}");
        assert!(message.starts_with("refusing to extract "), "{name}: {message}");
        assert!(message.contains(expected), "{name}: expected {expected:?} in {message:?}");
        assert!(!message.contains('\n'), "{name}: not one line: {message:?}");
        assert!(!dest.exists() || std::fs::read_dir(&dest).unwrap().next().is_none(), "{name}: wrote something");
    }
    assert!(!Path::new("/tmp/profcpu-evil").exists());
}

#[test]
fn extract_safe_accepts_a_good_archive_with_in_tree_links() {
    let tmp = TempDir::new("good");
    let archive_path = tarball(
        &tmp.0,
        "good.tar.gz",
        &[
            ("./", DIR, "", ""),
            ("./symbols/lib/libx.so", FILE, "", "ELF"),
            ("symbols/.build-id/ab/cd.debug", SYMLINK, "../../lib/libx.so", ""),
            ("symbols/same.so", HARDLINK, "symbols/lib/libx.so", ""),
            ("metadata.txt", FILE, "", "pid: 1\n"),
        ],
    );
    let dest = tmp.0.join("out");
    let extracted = archive::extract_safe(&archive_path, &dest).unwrap();
    assert_eq!(extracted.len(), 4);
    assert_eq!(std::fs::read_to_string(dest.join("symbols/.build-id/ab/cd.debug")).unwrap(), "ELF");
    assert_eq!(std::fs::read_to_string(dest.join("symbols/same.so")).unwrap(), "ELF");
    assert_eq!(std::fs::read_to_string(dest.join("metadata.txt")).unwrap(), "pid: 1\n");
}

#[test]
fn extract_safe_never_writes_through_what_is_already_on_disk() {
    let tmp = TempDir::new("planted");
    let elsewhere = tmp.0.join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let dest = tmp.0.join("out");
    std::fs::create_dir_all(&dest).unwrap();
    // A planted symlink to a folder outside, and one to a file outside, where the archive writes.
    symlink(&elsewhere, dest.join("symbols")).unwrap();
    std::fs::write(elsewhere.join("target.txt"), "keep me").unwrap();
    symlink(elsewhere.join("target.txt"), dest.join("metadata.txt")).unwrap();

    let through_dir = tarball(&tmp.0, "a.tar.gz", &[("symbols/libx.so", FILE, "", "evil")]);
    let err = format!("{:#}", archive::extract_safe(&through_dir, &dest).unwrap_err());
    assert!(err.contains("symlink is in the way"), "{err}");
    assert!(!elsewhere.join("libx.so").exists());

    let onto_file = tarball(&tmp.0, "b.tar.gz", &[("metadata.txt", FILE, "", "evil")]);
    let err = format!("{:#}", archive::extract_safe(&onto_file, &dest).unwrap_err());
    assert!(err.contains("already exists"), "{err}");
    assert_eq!(std::fs::read_to_string(elsewhere.join("target.txt")).unwrap(), "keep me");
}

#[test]
fn extract_safe_rejects_files_that_are_not_archives() {
    let tmp = TempDir::new("garbage");
    let path = tmp.0.join("prof.tar.gz");
    std::fs::write(&path, b"this is not gzip").unwrap();
    let err = format!("{:#}", archive::extract_safe(&path, &tmp.0.join("out")).unwrap_err());
    assert!(err.starts_with("refusing to extract") && !err.contains('\n'), "{err}");
}
