//! Off-CPU and wall-clock profiles: folded stacks weighted in µs read back as stacks and weights, and the C program
//! with a known split of blocked time (`tests/data/offcpu/blockers.c`) with the kernel's own account of its threads.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The leaf frame of a runnable switch-out (`symbolize::RUNNABLE_FRAME`).
pub const RUNNABLE: &str = "[runnable]";

/// One line of folded_stacks.out: frames root (thread name) first, and its weight.
#[derive(Debug, Clone)]
pub struct Stack {
    pub frames: Vec<String>,
    pub weight: u64,
}

impl Stack {
    pub fn thread(&self) -> &str {
        &self.frames[0]
    }

    pub fn has(&self, frame: &str) -> bool {
        self.frames[1..].iter().any(|f| f == frame)
    }

    /// A frame name containing `part`.
    pub fn has_part(&self, part: &str) -> bool {
        self.frames[1..].iter().any(|f| f.contains(part))
    }

    pub fn runnable(&self) -> bool {
        self.frames.last().is_some_and(|f| f == RUNNABLE)
    }
}

/// folded_stacks.out as stacks.
pub fn stacks(folded: &str) -> Vec<Stack> {
    folded
        .lines()
        .filter_map(|line| {
            let (stack, weight) = line.rsplit_once(' ')?;
            Some(Stack { frames: stack.split(';').map(str::to_string).collect(), weight: weight.parse().ok()? })
        })
        .collect()
}

/// The summed weight of the stacks for which `pred` holds.
pub fn weight(stacks: &[Stack], pred: impl Fn(&Stack) -> bool) -> u64 {
    stacks.iter().filter(|s| pred(s)).map(|s| s.weight).sum()
}

/// What the kernel says about one thread of the blockers program (its schedstat at the thread's end).
#[derive(Debug, Clone)]
pub struct ThreadReport {
    pub name: String,
    pub tid: u32,
    pub on_cpu_ns: u64,
    pub runnable_ns: u64,
}

/// `tests/data/offcpu/blockers.c` built like distribution code (optimised, no frame pointers: its stacks through
/// libc's sleep need the stack copies) into `dir`.
pub fn build_blockers(dir: &Path) -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/offcpu/blockers.c");
    let binary = dir.join("blockers");
    let out = Command::new("gcc")
        .args(["-O2", "-g", "-pthread", "-o"])
        .arg(&binary)
        .arg(&source)
        .output()
        .unwrap_or_else(|e| panic!("cannot run gcc ({e}): install it with scripts/setup-deps.sh"));
    assert!(out.status.success(), "gcc failed: {}", String::from_utf8_lossy(&out.stderr));
    binary
}

/// The `thread NAME TID ON_CPU_NS RUNNABLE_NS` lines the blockers program printed.
pub fn thread_reports(stdout: &str) -> Vec<ThreadReport> {
    stdout
        .lines()
        .filter_map(|line| {
            let words: Vec<&str> = line.strip_prefix("thread ")?.split(' ').collect();
            let [name, tid, on_cpu, runnable] = words[..] else { return None };
            Some(ThreadReport {
                name: name.to_string(),
                tid: tid.parse().ok()?,
                on_cpu_ns: on_cpu.parse().ok()?,
                runnable_ns: runnable.parse().ok()?,
            })
        })
        .collect()
}

/// A key of metadata.txt.
pub fn metadata_value(run_dir: &Path, key: &str) -> String {
    let text = std::fs::read_to_string(run_dir.join("metadata.txt")).expect("no metadata.txt");
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}: ")).map(str::to_string))
        .unwrap_or_else(|| panic!("no {key} in metadata.txt:\n{text}"))
}
