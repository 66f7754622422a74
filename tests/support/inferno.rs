//! inferno, the reference our outputs must agree with: its collapser as a library, and its command-line tools,
//! which the test command installs (`scripts/test.sh`, into `$PROFCPU_CACHE/inferno`). A comparison whose tool is
//! missing fails; it never passes silently.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The inferno release the tests and benchmarks compare against.
pub const VERSION: &str = "0.12.8";

/// inferno's collapser as a library: `perf script` text → folded stacks (`nthreads` as `inferno-collapse-perf
/// --nthreads`).
pub fn collapse(script: &str, nthreads: usize) -> String {
    use inferno::collapse::Collapse;
    let mut options = inferno::collapse::perf::Options::default();
    options.nthreads = nthreads;
    let mut out = Vec::new();
    inferno::collapse::perf::Folder::from(options).collapse(script.as_bytes(), &mut out).unwrap();
    String::from_utf8(out).unwrap()
}

/// An inferno command (`inferno-collapse-perf`, `inferno-flamegraph`): on PATH, or where the test command installs
/// it. Panics with the fix when it is in neither place.
pub fn command(name: &str) -> PathBuf {
    let cache = match std::env::var_os("PROFCPU_CACHE") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/profcpu"),
    };
    let candidates = [PathBuf::from(name), cache.join("inferno/bin").join(name)];
    candidates
        .into_iter()
        .find(|c| Command::new(c).arg("--help").output().is_ok_and(|o| o.status.success()))
        .unwrap_or_else(|| {
            panic!(
                "{name} is not installed: run scripts/test.sh, which installs it, or `cargo install inferno --version \
                 {VERSION} --root $PROFCPU_CACHE/inferno`"
            )
        })
}

/// `inferno-collapse-perf FILE`, the command users run on our perf_script.out.
pub fn collapse_cli(script_file: &Path) -> String {
    let cli = command("inferno-collapse-perf");
    let out = Command::new(&cli).arg(script_file).output().unwrap();
    assert!(out.status.success(), "{}: {}", cli.display(), String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}
