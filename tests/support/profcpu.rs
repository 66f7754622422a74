//! Running the `profcpu` binary as a user would (`collect`, `trap`, `postprocess`) and reading what it wrote.

use super::PROFCPU;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

/// The result of one `profcpu collect` run.
pub struct Collected {
    pub output: Output,
    pub stderr: String,
    pub stdout: String,
    /// The run folder profcpu printed as its last stdout line.
    pub run_dir: PathBuf,
}

impl Collected {
    pub fn perf_data(&self) -> PathBuf {
        self.run_dir.join("perf.data")
    }

    /// The sample count from profcpu's summary line.
    pub fn summary_samples(&self) -> u64 {
        let line = self
            .stderr
            .lines()
            .find(|l| l.starts_with("profcpu: ") && l.contains(" samples ("))
            .unwrap_or_else(|| panic!("no summary line in stderr:\n{}", self.stderr));
        line["profcpu: ".len()..].split(' ').next().unwrap().parse().unwrap()
    }
}

/// Runs `profcpu collect ARGS` to completion. Fails the test with profcpu's own explanation when it fails (for
/// example when perf_event_open is refused).
pub fn collect<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Collected {
    let output = Command::new(PROFCPU).arg("collect").args(args).output().unwrap();
    finish_collect(output)
}

pub fn finish_collect(output: Output) -> Collected {
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "profcpu collect failed ({}):\n{stderr}", output.status);
    assert!(!stderr.contains("panicked"), "{stderr}");
    let run_dir = PathBuf::from(stdout.lines().last().unwrap_or_else(|| panic!("no output path on stdout:\n{stderr}")));
    assert!(run_dir.is_dir(), "{} is not a folder", run_dir.display());
    Collected { output, stderr, stdout, run_dir }
}

/// What one `profcpu postprocess` run printed.
pub struct PostprocessRun {
    pub output: Output,
    pub stdout: String,
    pub stderr: String,
}

impl PostprocessRun {
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
pub fn postprocess(args: &[&str]) -> PostprocessRun {
    let output = Command::new(PROFCPU).arg("postprocess").args(args).output().expect("cannot run profcpu");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(!stderr.contains("panicked") && !stderr.contains("RUST_BACKTRACE"), "{args:?} panicked:\n{stderr}");
    PostprocessRun { output, stdout, stderr }
}

/// `profcpu postprocess -dir DIR EXTRA…`, which must succeed and print DIR (or where it extracted to) last.
pub fn postprocess_ok(dir: &Path, extra: &[&str]) -> PostprocessRun {
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

/// Folded stacks as a map, for comparisons that should not depend on line order.
pub fn folded_map(text: &str) -> std::collections::BTreeMap<String, u64> {
    text.lines()
        .map(|l| {
            let (stack, count) = l.rsplit_once(' ').unwrap_or_else(|| panic!("bad folded line {l:?}"));
            (stack.to_string(), count.parse().unwrap_or_else(|_| panic!("bad count in {l:?}")))
        })
        .collect()
}

/// Waits for `child` up to `limit`; kills it and fails the test if it takes longer.
pub fn wait_with_timeout(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("process {} did not finish within {limit:?}", child.id());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn process_alive(pid: u32) -> bool {
    // A zombie still has a /proc entry; it counts as gone.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('Z')),
        Err(_) => false,
    }
}

/// A `profcpu` run in the background whose stderr is read line by line as it comes, so that a test can signal it
/// at a chosen moment (after a given line, or a given time after the start).
pub struct Background {
    pub child: Child,
    lines: std::sync::mpsc::Receiver<String>,
    stderr: Vec<String>,
    stdout: std::thread::JoinHandle<String>,
}

/// How a background run ended.
pub struct Finished {
    pub status: std::process::ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Background {
    /// Starts `profcpu ARGS`.
    pub fn start(args: &[&str]) -> Background {
        Self::spawn(args, false)
    }

    /// Starts `profcpu ARGS` with SIGINT and SIGTERM blocked; profcpu unblocks them once its handlers are in place,
    /// first thing in `main`. So a signal sent right after the start waits for profcpu's first instruction instead
    /// of hitting the dynamic loader before it (which no program can handle).
    pub fn start_with_signals_held(args: &[&str]) -> Background {
        Self::spawn(args, true)
    }

    fn spawn(args: &[&str], hold_signals: bool) -> Background {
        use std::io::{BufRead, Read};
        use std::os::unix::process::CommandExt;
        let mut cmd = Command::new(PROFCPU);
        cmd.args(args).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
        if hold_signals {
            // SAFETY: sigemptyset/sigaddset/sigprocmask are async-signal-safe and touch only a local set.
            unsafe {
                cmd.pre_exec(|| {
                    let mut set: libc::sigset_t = std::mem::zeroed();
                    libc::sigemptyset(&mut set);
                    libc::sigaddset(&mut set, libc::SIGINT);
                    libc::sigaddset(&mut set, libc::SIGTERM);
                    libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
                    Ok(())
                });
            }
        }
        let mut child = cmd.spawn().expect("cannot start profcpu");
        let stderr = std::io::BufReader::new(child.stderr.take().unwrap());
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let mut stdout = child.stdout.take().unwrap();
        let stdout = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = stdout.read_to_string(&mut text);
            text
        });
        Background { child, lines, stderr: Vec::new(), stdout }
    }

    /// Sends `signal` (SIGINT, SIGTERM) to profcpu.
    pub fn signal(&self, signal: i32) {
        // SAFETY: signalling our own child, not yet reaped.
        unsafe { libc::kill(self.child.id() as i32, signal) };
    }

    /// Waits up to `limit` for a stderr line that passes `wanted`; false if profcpu ended or time ran out first.
    pub fn wait_for_line(&mut self, wanted: impl Fn(&str) -> bool, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while let Ok(line) = self.lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            let found = wanted(&line);
            self.stderr.push(line);
            if found {
                return true;
            }
        }
        false
    }

    /// The stderr lines read so far (by [`wait_for_line`](Background::wait_for_line)), for failure messages.
    pub fn stderr_so_far(&self) -> String {
        self.stderr.join("\n")
    }

    /// Waits for the end (failing the test after `limit`) and returns what profcpu said.
    pub fn finish(mut self, limit: Duration) -> Finished {
        let status = wait_with_timeout(&mut self.child, limit);
        self.stderr.extend(self.lines.iter());
        let stdout = self.stdout.join().unwrap_or_default();
        let stderr = self.stderr.join("\n");
        assert!(!stderr.contains("panicked"), "profcpu panicked:\n{stderr}");
        Finished { status, stdout, stderr }
    }
}

/// `profcpu postprocess -dir DIR EXTRA…` on "another machine": in a private mount namespace where /tmp and every
/// folder of `hidden` (a runtime's install folder, say) are empty tmpfs mounts, so nothing of the target can be
/// read. Must succeed. `dir` must lie outside what is hidden (a [`Scratch`](super::scratch::Scratch) does).
pub fn postprocess_hiding(dir: &Path, hidden: &[&Path], extra: &[&str]) -> PostprocessRun {
    let script = r#"while [ "$1" != "--" ]; do mount -t tmpfs none "$1" || exit 1; shift; done; shift; exec "$@""#;
    let output = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", script, "sh", "/tmp"])
        .args(hidden)
        .args(["--", PROFCPU, "postprocess", "-dir"])
        .arg(dir)
        .args(extra)
        .output()
        .expect("cannot run unshare (util-linux, scripts/setup-deps.sh)");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "postprocess of {} with {hidden:?} hidden failed:\n{stderr}", dir.display());
    assert!(!stderr.contains("panicked"), "{stderr}");
    PostprocessRun { output, stdout, stderr }
}
