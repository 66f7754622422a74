//! Shared by the `postprocess` tests: running the real binary, the committed golden collection, scratch folders,
//! and the checks every failure must pass. Included with `#[path]`; as its own test target it has no tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub const PROFCPU: &str = env!("CARGO_BIN_EXE_profcpu");

/// `tests/data/postprocess`.
pub fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/postprocess")
}

/// The committed collection of `workload.c` (perf.data, symbols/, metadata.txt), recorded by profcpu.
pub fn golden_dir() -> PathBuf {
    data_dir().join("golden")
}

#[path = "support/scratch.rs"]
mod scratch;
pub use scratch::Scratch;

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

/// What one `profcpu postprocess` run printed.
pub struct Run {
    pub output: Output,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn ok(&self) -> bool {
        self.output.status.success()
    }

    /// Lines of stderr that are warnings.
    pub fn warnings(&self) -> Vec<&str> {
        self.stderr.lines().filter(|l| l.starts_with("profcpu: warning: ")).collect()
    }

    /// The sample count of the "Hottest frames" table.
    pub fn top_samples(&self) -> u64 {
        let line = self
            .stderr
            .lines()
            .find(|l| l.starts_with("Hottest frames by self time ("))
            .unwrap_or_else(|| panic!("no top table:\n{}", self.stderr));
        line["Hottest frames by self time (".len()..].split(' ').next().unwrap().parse().unwrap()
    }
}

/// Runs `profcpu postprocess ARGS` (never panics on failure; see [`postprocess_ok`] and [`one_line_error`]).
pub fn postprocess(args: &[&str]) -> Run {
    let output = Command::new(PROFCPU).arg("postprocess").args(args).output().expect("cannot run profcpu");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(!stderr.contains("panicked") && !stderr.contains("RUST_BACKTRACE"), "{args:?} panicked:\n{stderr}");
    Run { output, stdout, stderr }
}

/// `profcpu postprocess -dir DIR EXTRA…`, which must succeed and print DIR (or where it extracted to) last.
pub fn postprocess_ok(dir: &Path, extra: &[&str]) -> Run {
    let mut args = vec!["-dir", dir.to_str().unwrap()];
    args.extend_from_slice(extra);
    let run = postprocess(&args);
    assert!(run.ok(), "postprocess {args:?} failed:\n{}", run.stderr);
    assert!(run.stderr.contains("Hottest frames by self time") || run.stderr.contains("No samples with a stack"));
    assert!(!run.stdout.trim().is_empty(), "no output folder printed");
    run
}

/// Runs `profcpu postprocess ARGS` expecting failure: exactly one `profcpu: error:` line on stderr, nothing else, no
/// panic, exit status 1. Returns the line.
pub fn one_line_error(args: &[&str]) -> String {
    let run = postprocess(args);
    assert!(!run.ok(), "{args:?} succeeded:\n{}", run.stderr);
    assert_eq!(run.output.status.code(), Some(1), "{args:?}: {}", run.stderr);
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{args:?} printed {} lines:\n{}", lines.len(), run.stderr);
    assert!(lines[0].starts_with("profcpu: error: "), "{}", lines[0]);
    lines[0].to_string()
}

pub fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every file under `dir` (relative path → bytes), symlinks as `-> target`.
pub fn tree(dir: &Path) -> std::collections::BTreeMap<PathBuf, Vec<u8>> {
    fn walk(root: &Path, rel: &Path, out: &mut std::collections::BTreeMap<PathBuf, Vec<u8>>) {
        for entry in std::fs::read_dir(root.join(rel)).unwrap() {
            let entry = entry.unwrap();
            let rel = rel.join(entry.file_name());
            let kind = entry.file_type().unwrap();
            if kind.is_dir() {
                walk(root, &rel, out);
            } else if kind.is_symlink() {
                let target = std::fs::read_link(entry.path()).unwrap();
                out.insert(rel, format!("-> {}", target.display()).into_bytes());
            } else {
                out.insert(rel, std::fs::read(entry.path()).unwrap());
            }
        }
    }
    let mut out = std::collections::BTreeMap::new();
    walk(dir, Path::new(""), &mut out);
    out
}

/// `tar xzf ARCHIVE -C DEST` with GNU tar: what a user on any machine would do.
pub fn plain_tar_extract(archive: &Path, dest: &Path) {
    std::fs::create_dir_all(dest).unwrap();
    let out = Command::new("tar").arg("xzf").arg(archive).arg("-C").arg(dest).output().expect("tar");
    assert!(out.status.success(), "tar xzf {}: {}", archive.display(), String::from_utf8_lossy(&out.stderr));
}

/// The names in an archive, as `tar tzf` lists them.
pub fn tar_list(archive: &Path) -> Vec<String> {
    let out = Command::new("tar").arg("tzf").arg(archive).output().expect("tar");
    assert!(out.status.success(), "tar tzf {}: {}", archive.display(), String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().lines().map(str::to_string).collect()
}

/// inferno's collapser as a library: `perf script` text → folded stacks.
pub fn inferno_collapse(script: &str) -> String {
    use inferno::collapse::Collapse;
    let mut out = Vec::new();
    inferno::collapse::perf::Folder::from(inferno::collapse::perf::Options::default())
        .collapse(script.as_bytes(), &mut out)
        .unwrap();
    String::from_utf8(out).unwrap()
}

/// The `inferno-collapse-perf` command: on PATH, or where `scripts/bench-postprocess.sh` installs it. `None` when
/// absent, unless PROFCPU_REQUIRE_INFERNO_CLI is set (as CI sets it), which makes absence a failure.
pub fn inferno_cli() -> Option<PathBuf> {
    let cache = match std::env::var_os("PROFCPU_CACHE") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/profcpu"),
    };
    let candidates = [PathBuf::from("inferno-collapse-perf"), cache.join("inferno/bin/inferno-collapse-perf")];
    let found =
        candidates.into_iter().find(|c| Command::new(c).arg("--help").output().is_ok_and(|o| o.status.success()));
    if found.is_none() {
        assert!(
            std::env::var_os("PROFCPU_REQUIRE_INFERNO_CLI").is_none(),
            "inferno-collapse-perf is not installed: cargo install inferno --version 0.12.8 (or \
             scripts/bench-postprocess.sh --setup)"
        );
    }
    found
}

/// Folded stacks as a map, for comparisons that should not depend on line order.
pub fn folded_map(text: &str) -> std::collections::BTreeMap<String, u64> {
    text.lines()
        .map(|l| {
            let (stack, count) = l.rsplit_once(' ').unwrap_or_else(|| panic!("bad folded line {l:?}"));
            (stack.to_string(), count.parse().unwrap_or_else(|_| panic!("bad count in {l:?}")))
        })
        .collect()
}
