//! A program started for a test that says when its measured phase begins (a `ready` line); killed when dropped.
//! Also the lock that keeps CPU-heavy workloads of one test binary from running at once, how a started process
//! tree is killed, and what a killed runtime leaves in /tmp.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// Held by a test while it runs a workload and samples it: tests of one binary run on parallel threads, and on a
/// small machine several busy runtimes at once starve each other of samples.
pub fn exclusive() -> std::sync::MutexGuard<'static, ()> {
    static CPU: std::sync::Mutex<()> = std::sync::Mutex::new(());
    CPU.lock().unwrap_or_else(|e| e.into_inner())
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

    /// Kills the program and deletes what its runtime left in /tmp, as a container's end would.
    pub fn kill_and_remove_files(&mut self) {
        self.kill();
        remove_runtime_files(self.pid());
    }
}

impl Drop for RunningApp {
    fn drop(&mut self) {
        self.kill_and_remove_files();
    }
}

/// Deletes what a killed runtime (.NET, or Node.js with perf maps on) of the host's PID `pid` leaves in the host's
/// /tmp: perf maps, the jitdump, .NET's diagnostics socket and its debugger pipes (.NET Core 3.1).
pub fn remove_runtime_files(pid: u32) {
    let named = [format!("perf-{pid}.map"), format!("perfinfo-{pid}.map"), format!("jit-{pid}.dump")];
    let prefixes = [format!("dotnet-diagnostic-{pid}-"), format!("clr-debug-pipe-{pid}-")];
    for entry in std::fs::read_dir("/tmp").into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if named.contains(&name) || prefixes.iter().any(|p| name.starts_with(p.as_str())) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// SIGKILL to a process we started, its process group and every descendant. Descendants are listed before anything
/// is killed (an orphan would be re-parented out of reach), and separately from the group because some programs
/// make their own (GNU `timeout`, which load.sh runs wrk under, does).
pub fn kill_tree(root: u32) {
    fn descendants(pid: u32, out: &mut Vec<u32>) {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return };
        for task in tasks.flatten() {
            let children = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            for child in children.split_whitespace().filter_map(|c| c.parse().ok()) {
                out.push(child);
                descendants(child, out);
            }
        }
    }
    let mut pids = vec![root];
    descendants(root, &mut pids);
    // SAFETY: kill(2) on processes this test started (and their group); no memory is involved.
    unsafe {
        libc::kill(-(root as i32), libc::SIGKILL);
        for pid in pids {
            libc::kill(pid as i32, libc::SIGKILL);
        }
    }
}
