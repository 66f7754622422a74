//! Debian's `perf`, the independent reader and recorder our files and names are checked against. A missing perf
//! fails the test with the fix (it never skips).

use std::path::Path;
use std::process::{Command, Output};

/// Runs Debian's perf on a recording; panics (does not skip) if perf is missing.
pub fn perf(args: &[&str]) -> Output {
    Command::new("perf")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run perf ({e}); install it with scripts/setup-deps.sh (linux-perf)"))
}

/// `perf script -i FILE` stdout, asserting perf exited cleanly.
pub fn perf_script(path: &Path) -> String {
    let out = perf(&["script", "-i", path.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "perf script failed: {stderr}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `perf record -k CLOCK_MONOTONIC -F 999 -g -p PID -- sleep SECONDS` into `out`. Fails the test loudly, with
/// perf's own message, when sampling is refused or perf is missing: a profiler test must never pass silently
/// without samples.
pub fn perf_record(pid: u32, seconds: f64, out: &Path) {
    let output = Command::new("perf")
        .args(["record", "-k", "CLOCK_MONOTONIC", "-F", "999", "-g", "-q", "-o"])
        .arg(out)
        .args(["-p", &pid.to_string(), "--", "sleep", &seconds.to_string()])
        .output()
        .unwrap_or_else(|e| panic!("cannot run perf ({e}): install it with `apt-get install -y linux-perf`"));
    assert!(
        output.status.success() && out.is_file(),
        "perf record -p {pid} failed (perf_event_open refused? see /proc/sys/kernel/perf_event_paranoid): {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// `perf script`'s leaf symbol per sample, keyed by `(tid, time in µs)`, as an independent oracle.
pub fn perf_script_leaves(data: &Path) -> std::collections::HashMap<(u32, u64), String> {
    let output = Command::new("perf")
        .args(["script", "-F", "tid,time,ip,sym", "-G", "-i"])
        .arg(data)
        .output()
        .expect("cannot run perf script");
    assert!(output.status.success(), "perf script failed: {}", String::from_utf8_lossy(&output.stderr));
    let mut out = std::collections::HashMap::new();
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        // "  4242  1234.567890:     7f0012345678 Name with spaces"
        let mut rest = line.trim_start();
        let Some((tid, r)) = rest.split_once(char::is_whitespace) else { continue };
        rest = r.trim_start();
        let Some((time, r)) = rest.split_once(':') else { continue };
        let r = r.trim_start();
        let Some((_ip, sym)) = r.split_once(char::is_whitespace) else { continue };
        let (Ok(tid), Some((secs, micros))) = (tid.parse::<u32>(), time.trim().split_once('.')) else { continue };
        let (Ok(secs), Ok(micros)) = (secs.parse::<u64>(), micros.parse::<u64>()) else { continue };
        out.insert((tid, secs * 1_000_000 + micros), sym.trim().to_string());
    }
    out
}
