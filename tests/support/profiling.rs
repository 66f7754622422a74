//! Running and recording real processes for the symbolizer's tests with Debian's `perf record` (profcpu's own
//! recorder is built elsewhere; the symbolizer must read perf's files anyway), and per-test scratch directories.
//!
//! Include from a test with `#[path = "support/profiling.rs"] mod profiling;`.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// Held by a test while it runs a workload and samples it: tests of one binary run on parallel threads, and on a
/// small machine several busy runtimes at once starve each other of samples.
pub fn exclusive() -> std::sync::MutexGuard<'static, ()> {
    static CPU: std::sync::Mutex<()> = std::sync::Mutex::new(());
    CPU.lock().unwrap_or_else(|e| e.into_inner())
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

/// A started program that prints `ready` when its measured phase begins; killed when dropped. Its stdout is read
/// on a thread, so the program never blocks on a full pipe.
pub struct RunningApp {
    pub child: Child,
    lines: Receiver<String>,
}

impl RunningApp {
    /// Starts `cmd` (stdout piped) and waits up to `timeout` for the line `ready`.
    pub fn start(mut cmd: Command, timeout: Duration) -> RunningApp {
        cmd.stdout(Stdio::piped()).stderr(Stdio::inherit());
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in stdout.lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let mut app = RunningApp { child, lines };
        app.wait_for_line("ready", timeout);
        app
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn wait_for_line(&mut self, want: &str, timeout: Duration) -> Vec<String> {
        let deadline = Instant::now() + timeout;
        let mut seen = Vec::new();
        loop {
            match self.lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(line) if line.trim() == want => return seen,
                Ok(line) => seen.push(line),
                Err(RecvTimeoutError::Timeout) => panic!("no {want:?} line within {timeout:?}; got {seen:?}"),
                Err(RecvTimeoutError::Disconnected) => {
                    let status = self.child.try_wait();
                    panic!("program ended before printing {want:?} (status {status:?}); got {seen:?}")
                }
            }
        }
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for RunningApp {
    fn drop(&mut self) {
        self.kill();
    }
}
