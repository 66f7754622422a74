//! Stacks through code without frame pointers: the C workload that spends its time inside libc, and measures of
//! how far stacks reach.

use std::path::{Path, PathBuf};

/// The frame that ends a stack whose walk was cut short (`symbolize::symbolizer::UNWIND_STOPPED_NAME`).
pub const UNWIND_STOPPED: &str = "[unwinding stopped]";
use std::process::Command;

/// `tests/data/unwind/sorter.c` built like distribution code (`-O2 -fomit-frame-pointer`) into `dir`.
pub fn build_sorter(dir: &Path) -> PathBuf {
    build_sorter_with(dir, &[])
}

/// [`build_sorter`] with more compiler flags.
pub fn build_sorter_with(dir: &Path, flags: &[&str]) -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/unwind/sorter.c");
    let binary = dir.join("sorter");
    let out = Command::new("gcc")
        .args(["-O2", "-fomit-frame-pointer"])
        .args(flags)
        .arg("-o")
        .arg(&binary)
        .arg(&source)
        .output()
        .unwrap_or_else(|e| panic!("cannot run gcc ({e}): install it with scripts/setup-deps.sh"));
    assert!(out.status.success(), "gcc failed: {}", String::from_utf8_lossy(&out.stderr));
    binary
}

/// Of the folded stacks whose first frame (the command name) is `comm`, the share of the weight whose stack holds
/// every one of `frames` (exact frame names), and that weight.
pub fn share_with_frames(folded: &str, comm: &str, frames: &[&str]) -> (f64, u64) {
    let (mut all, mut with) = (0u64, 0u64);
    for line in folded.lines() {
        let Some((stack, count)) = line.rsplit_once(' ') else { continue };
        let names: Vec<&str> = stack.split(';').collect();
        if names.first() != Some(&comm) {
            continue;
        }
        let count: u64 = count.parse().unwrap();
        all += count;
        if frames.iter().all(|f| names[1..].contains(f)) {
            with += count;
        }
    }
    (if all == 0 { 0.0 } else { with as f64 / all as f64 }, all)
}

/// One sample of a `perf script` text (ours or perf's): header line and frame symbols, leaf first.
#[derive(Debug, Clone)]
pub struct ScriptSample {
    pub header: String,
    pub symbols: Vec<String>,
}

/// Parses `perf script` text: a header line, then one `\tADDR SYMBOL+OFF (MODULE)` line per frame, a blank line.
pub fn script_samples(text: &str) -> Vec<ScriptSample> {
    let mut out = Vec::new();
    let mut current: Option<ScriptSample> = None;
    for line in text.lines() {
        if line.trim().is_empty() {
            out.extend(current.take());
        } else if line.starts_with(char::is_whitespace) {
            let frame = line.trim_start();
            let symbol = frame.split_once(' ').map_or("", |(_, s)| s);
            // "name+0x12 (module)": the name (which may hold spaces) ends at the last "+0x" before the module.
            let symbol = symbol.rsplit_once(" (").map_or(symbol, |(s, _)| s);
            let symbol = symbol.rsplit_once("+0x").map_or(symbol, |(s, _)| s);
            if let Some(s) = current.as_mut() {
                s.symbols.push(symbol.to_string());
            }
        } else {
            out.extend(current.take());
            current = Some(ScriptSample { header: line.to_string(), symbols: Vec::new() });
        }
    }
    out.extend(current);
    out
}
