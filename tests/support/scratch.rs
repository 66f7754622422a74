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
/// fake targets' roots, fixtures shared by its tests); see [`run_dir_under`].
pub fn run_dir(prefix: &str) -> PathBuf {
    run_dir_under(Path::new(env!("CARGO_TARGET_TMPDIR")), prefix)
}

/// `<base>/<prefix>-<pid>` (not created). It is removed when the test binary exits (a static is never dropped), and
/// the folders of earlier runs whose process is gone (killed before it could remove them) the first time a prefix
/// is asked for.
pub fn run_dir_under(base: &Path, prefix: &str) -> PathBuf {
    static GIVEN: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());
    extern "C" fn remove_given() {
        for dir in GIVEN.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
    let dir = base.join(format!("{prefix}-{}", std::process::id()));
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    if given.contains(&dir) {
        return dir;
    }
    let earlier = format!("{prefix}-");
    for entry in std::fs::read_dir(base).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(pid) = name.strip_prefix(&earlier).and_then(|p| p.parse::<u32>().ok()) {
            if !Path::new(&format!("/proc/{pid}")).exists() {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
    if given.is_empty() {
        // SAFETY: registers a plain function with the C runtime's exit handlers.
        unsafe { libc::atexit(remove_given) };
    }
    given.push(dir.clone());
    dir
}
