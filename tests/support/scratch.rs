//! A per-test scratch folder under cargo's tmp dir (not under /tmp: a namespaced target or profiler has its own
//! /tmp). Removed when dropped, except when the test is failing (then kept for a look, its path printed) or with
//! `PROFCPU_KEEP_TEST_DIRS=1`. And a folder for what lives as long as a test binary's run ([`run_dir`]).

use std::path::{Path, PathBuf};

pub struct Scratch {
    pub path: PathBuf,
}

impl Scratch {
    /// `<cargo tmp>/<name>-<pid>-<n>`: unique per test binary run and per call.
    pub fn new(name: &str) -> Scratch {
        static COUNTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap_or_else(|e| panic!("cannot create {}: {e}", path.display()));
        Scratch { path }
    }

    pub fn join(&self, p: impl AsRef<Path>) -> PathBuf {
        self.path.join(p)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("kept {} for inspection", self.path.display());
        } else if std::env::var_os("PROFCPU_KEEP_TEST_DIRS").is_none() {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// `<cargo tmp>/<prefix>-<pid>`: this test binary's folder for what lasts the whole run (programs built once,
/// fake targets' roots). The folders of earlier runs whose process is gone are removed the first time a prefix is
/// asked for.
pub fn run_dir(prefix: &str) -> PathBuf {
    static CLEANED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let mut cleaned = CLEANED.lock().unwrap_or_else(|e| e.into_inner());
    if !cleaned.iter().any(|p| p == prefix) {
        let earlier = format!("{prefix}-");
        for entry in std::fs::read_dir(&base).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(pid) = name.strip_prefix(&earlier).and_then(|p| p.parse::<u32>().ok()) {
                if !Path::new(&format!("/proc/{pid}")).exists() {
                    let _ = std::fs::remove_dir_all(entry.path());
                }
            }
        }
        cleaned.push(prefix.to_string());
    }
    base.join(format!("{prefix}-{}", std::process::id()))
}
