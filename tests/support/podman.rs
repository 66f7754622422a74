//! Real containers for end-to-end tests: podman with the runc runtime, images built from local files by
//! `scripts/container-images.sh` (`profcpu-busybox`, `profcpu-dotnet8`), and the statically linked profcpu from
//! `scripts/build-static.sh`, which is bind-mounted read-only into whichever container runs it.
//!
//! Every container gets a unique name (`profcpu-t-<test pid>-<n>-<role>`) and is removed with `podman rm -f` when its
//! guard is dropped, also when a test fails; containers that a killed test run left behind are removed at set-up.

use std::io::Read;
use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use super::running_app::kill_tree;
use super::webapi::http_get;

/// The sample API's hottest method as the runtime names it. .NET 8.0.4 writes `ComputeDiscountCurv` (one character
/// short) in both its perf map and jitdump: a formatting bug of its PAL `_vsnprintf_s` when a line exactly fills the
/// buffer (dotnet/runtime#102938, fixed by #98687 in later 8.0 servicing), which also drops that line's newline. A
/// prefix matches the truncated and the full name.
pub const HOT_METHOD: &str = "PricingEngine::ComputeDiscountCurv";

/// The ordinary (dynamically linked) build of this checkout, used on the host for `postprocess`.
pub const HOST_PROFCPU: &str = env!("CARGO_BIN_EXE_profcpu");

pub const BUSYBOX_IMAGE: &str = "localhost/profcpu-busybox:latest";
pub const DOTNET_IMAGE: &str = "localhost/profcpu-dotnet8:latest";
/// Where the static binary appears inside containers (read-only bind mount); the images' PATH starts there, so the
/// commands say `profcpu`, as docs/containers.md does.
pub const PROFCPU_IN_CONTAINER: &str = "/usr/local/bin/profcpu";

/// `podman run` flags every container here needs on this machine kind: runc (crun fails on hybrid cgroups), the
/// host's network (no network set-up; the host loads the API on 127.0.0.1), and rlimits below the hard limits podman
/// cannot raise without CAP_SYS_RESOURCE (its defaults, nofile 1048576 and nproc 4194304, fail in runc).
pub const RUN_FLAGS: [&str; 8] =
    ["--runtime", "runc", "--network", "host", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096"];

/// What a profiler container needs to sample another container's process with podman: perf events, ptrace access to
/// its /proc entries, and a seccomp profile that lets perf_event_open through (podman's default profile allows it
/// only with CAP_SYS_ADMIN).
pub const PROFILER_PRIVILEGES: [&str; 6] =
    ["--cap-add", "PERFMON", "--cap-add", "SYS_PTRACE", "--security-opt", "seccomp=unconfined"];

/// How long the API may take to answer `/health` in its container (a cold start on a busy 2-CPU machine).
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// Extra time a podman command may take beyond the work it was given before the test calls it hung.
const GRACE: Duration = Duration::from_secs(90);

pub fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Held for a whole test: two loaded APIs on 2 CPUs would starve each other and the profiler.
pub fn exclusive() -> MutexGuard<'static, ()> {
    static CPU: Mutex<()> = Mutex::new(());
    CPU.lock().unwrap_or_else(|e| e.into_inner())
}

/// The static binary and the images, made once per test binary (both steps are no-ops when up to date).
pub struct Prepared {
    pub static_profcpu: PathBuf,
}

pub fn prepared() -> &'static Prepared {
    static PREPARED: OnceLock<Prepared> = OnceLock::new();
    PREPARED.get_or_init(|| {
        for tool in ["podman", "runc"] {
            let found = Command::new(tool).arg("--version").output().is_ok_and(|o| o.status.success());
            assert!(
                found,
                "{tool} is not installed: run scripts/setup-deps.sh (it installs podman, runc, busybox-static)"
            );
        }
        remove_leftovers();
        let started = Instant::now();
        let static_profcpu = PathBuf::from(script_line("scripts/build-static.sh", &[]));
        assert!(static_profcpu.is_file(), "build-static.sh printed {} but it is missing", static_profcpu.display());
        let built = started.elapsed();
        let images = script_output("scripts/container-images.sh", &["busybox", "dotnet8"]);
        for image in [BUSYBOX_IMAGE, DOTNET_IMAGE] {
            assert!(images.lines().any(|l| l == image), "container-images.sh did not provide {image}:\n{images}");
        }
        eprintln!(
            "podman: static profcpu ready in {:.1} s, images in {:.1} s",
            built.as_secs_f64(),
            (started.elapsed() - built).as_secs_f64()
        );
        Prepared { static_profcpu }
    })
}

fn script_output(script: &str, args: &[&str]) -> String {
    let out = Command::new("bash")
        .arg(repo().join(script))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run bash {script}: {e}"));
    assert!(out.status.success(), "{script} failed ({}):\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn script_line(script: &str, args: &[&str]) -> String {
    script_output(script, args).lines().last().unwrap_or_default().trim().to_string()
}

/// Containers of earlier runs of these tests whose test process is gone (killed before its guards ran).
fn remove_leftovers() {
    let out = Command::new("podman")
        .args(["ps", "-a", "--filter", "name=^profcpu-t-", "--format", "{{.Names}}"])
        .output()
        .expect("cannot run podman ps");
    for name in String::from_utf8_lossy(&out.stdout).lines() {
        let owner = name.strip_prefix("profcpu-t-").and_then(|rest| rest.split('-').next()?.parse::<u32>().ok());
        if owner.is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists()) {
            let _ = Command::new("podman").args(["rm", "-f", "-t", "0", name]).output();
        }
    }
}

/// A unique container name that says which test process owns it.
pub fn unique_name(role: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!("profcpu-t-{}-{}-{role}", std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}

/// A port nobody listens on right now (the kernel's choice); the API binds it in the host's network namespace.
pub fn free_port() -> u16 {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("cannot bind a local port");
    listener.local_addr().unwrap().port()
}

/// A fresh directory under cargo's tmp dir, mounted into containers as an output volume. Removed when dropped,
/// except when the test is failing: then it is kept for a look and its path printed.
pub struct WorkDir {
    pub path: PathBuf,
}

impl WorkDir {
    pub fn new(name: &str) -> WorkDir {
        let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("podman-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap_or_else(|e| panic!("cannot create {}: {e}", path.display()));
        WorkDir { path }
    }

    pub fn join(&self, p: impl AsRef<Path>) -> PathBuf {
        self.path.join(p)
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("podman: kept {} for inspection", self.path.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// Runs `cmd` to its end, killing it (and failing) when it outlives `work` plus a grace period.
pub fn run_bounded(mut cmd: Command, work: Duration) -> Output {
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0);
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
    // Drain both pipes on threads: a chatty child would otherwise block on a full pipe and look hung.
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = pipe.read_to_end(&mut buf);
            buf
        })
    };
    let stdout = drain(Box::new(child.stdout.take().unwrap()));
    let stderr = drain(Box::new(child.stderr.take().unwrap()));
    let deadline = Instant::now() + work + GRACE;
    let status: ExitStatus = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            kill_tree(child.id());
            let _ = child.wait();
            panic!("{cmd:?} still ran {GRACE:?} after the {work:?} it was given");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    Output { status, stdout: stdout.join().unwrap(), stderr: stderr.join().unwrap() }
}

/// `podman ARGS` with a bound on its run time; its output, whatever the exit status.
pub fn podman(args: &[&str], work: Duration) -> Output {
    let mut cmd = Command::new("podman");
    cmd.args(args);
    run_bounded(cmd, work)
}

/// `podman ARGS`, which must succeed; its stdout.
pub fn podman_ok(args: &[&str], work: Duration) -> String {
    let out = podman(args, work);
    assert!(
        out.status.success(),
        "podman {} failed ({}):\n{}{}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A container this test created; `podman rm -f` when dropped.
pub struct Container {
    pub name: String,
    removed: bool,
}

impl Container {
    /// Takes ownership of a container name before `podman run` creates it, so that even a half-started container
    /// is removed.
    pub fn named(role: &str) -> Container {
        Container { name: unique_name(role), removed: false }
    }

    /// Its main process as the host sees it.
    pub fn host_pid(&self) -> u32 {
        let pid = podman_ok(&["inspect", "--format", "{{.State.Pid}}", &self.name], Duration::from_secs(10));
        pid.trim().parse().unwrap_or_else(|_| panic!("podman inspect gave no PID for {}: {pid:?}", self.name))
    }

    pub fn logs(&self) -> String {
        let out = podman(&["logs", &self.name], Duration::from_secs(10));
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
    }

    /// `podman exec NAME ARGS`, bounded by `work`.
    pub fn exec(&self, args: &[&str], work: Duration) -> Output {
        let mut all = vec!["exec", self.name.as_str()];
        all.extend_from_slice(args);
        podman(&all, work)
    }

    pub fn remove(&mut self) {
        if !self.removed {
            self.removed = true;
            let _ = Command::new("podman").args(["rm", "-f", "-t", "0", &self.name]).output();
        }
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        self.remove();
    }
}

/// The sample web API on .NET 8 in a container of `profcpu-dotnet8`, listening on 127.0.0.1:`port` of the host's
/// network. No /tmp is shared with the host: the runtime's perf map and jitdump stay in the container's own /tmp.
pub struct App {
    pub container: Container,
    pub port: u16,
}

impl App {
    /// Starts the API with `extra` `podman run` flags (privileges, volumes, `--read-only`) and waits for `/health`.
    pub fn start(extra: &[&str]) -> App {
        prepared();
        let container = Container::named("app");
        let port = free_port();
        let port_text = port.to_string();
        let mut args = vec!["run", "-d", "--name", container.name.as_str()];
        args.extend_from_slice(&RUN_FLAGS);
        args.extend_from_slice(extra);
        args.extend_from_slice(&[DOTNET_IMAGE, "dotnet", "/app/App.dll", "--port", &port_text]);
        podman_ok(&args, Duration::from_secs(30));
        let app = App { container, port };
        let deadline = Instant::now() + START_TIMEOUT;
        while http_get(port, "/health").as_deref() != Some("ok") {
            let running = podman_ok(&["inspect", "--format", "{{.State.Running}}", &app.container.name], GRACE);
            assert!(running.trim() == "true", "the API's container stopped during start-up; its log:\n{}", app.logs());
            assert!(
                Instant::now() < deadline,
                "the API did not answer /health on port {port} in {START_TIMEOUT:?}; its log:\n{}",
                app.logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        app
    }

    pub fn host_pid(&self) -> u32 {
        self.container.host_pid()
    }

    pub fn logs(&self) -> String {
        self.container.logs()
    }
}

/// `examples/webapi/load.sh cpu SECONDS CONNECTIONS` from the host against the API's port. Killed when dropped.
pub struct Load {
    child: Child,
}

impl Load {
    pub fn start(app: &App, seconds: u32, connections: u32) -> Load {
        let child = Command::new("bash")
            .arg(repo().join("examples/webapi/load.sh"))
            .args(["cpu", &seconds.to_string(), &connections.to_string()])
            .env("PORT", app.port.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start examples/webapi/load.sh: {e}"));
        Load { child }
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        kill_tree(self.child.id());
        let _ = self.child.wait();
    }
}

/// `collect -pid PID -duration SECONDS -output DIR` as arguments.
pub fn collect_args(pid: u32, seconds: u32, output: &str) -> Vec<String> {
    ["collect", "-pid", &pid.to_string(), "-duration", &seconds.to_string(), "-output", output]
        .iter()
        .map(|s| s.to_string())
        .collect()
}

/// The last stdout line of a successful collect: the run folder (as profcpu saw it, maybe inside a container).
pub fn run_folder_line(out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "profcpu collect failed ({}); if perf_event_open was refused, this is the reason:\n{}{stdout}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout.lines().last().unwrap_or_default().trim().to_string()
}

/// The files a run folder must hold, all non-empty.
pub const OUTPUT_FILES: [&str; 6] =
    ["perf.data", "perf_script.out", "folded_stacks.out", "flamegraph.svg", "metadata.txt", "prof.tar.gz"];

/// One frame of `perf_script.out`: the label without its `+0x…` offset, and the module.
#[derive(Debug, Clone)]
pub struct Frame {
    pub symbol: String,
    pub module: String,
}

impl Frame {
    /// Code the JIT generated: named from a jitdump or perf map, or unnamed in an anonymous or W^X double-mapped
    /// region (.NET 7+ runs JIT code from `/memfd:doublemapper`).
    pub fn is_jit(&self) -> bool {
        self.is_named_jit() || self.module == "//anon" || self.module.contains("doublemapper")
    }

    pub fn is_named_jit(&self) -> bool {
        let base = self.module.rsplit('/').next().unwrap_or("");
        (base.starts_with("perf-") && base.ends_with(".map")) || (base.starts_with("jit-") && base.ends_with(".dump"))
    }
}

/// A run folder read back: its samples (leaf frame first), folded stacks and profcpu's stderr.
pub struct RunFolder {
    pub dir: PathBuf,
    pub samples: Vec<Vec<Frame>>,
    pub sample_pids: Vec<u32>,
    pub folded: String,
    pub log: String,
}

impl RunFolder {
    pub fn read(dir: &Path, log: &str) -> RunFolder {
        let script = std::fs::read_to_string(dir.join("perf_script.out"))
            .unwrap_or_else(|e| panic!("cannot read {}/perf_script.out: {e}", dir.display()));
        let folded = std::fs::read_to_string(dir.join("folded_stacks.out"))
            .unwrap_or_else(|e| panic!("cannot read {}/folded_stacks.out: {e}", dir.display()));
        let (samples, sample_pids) = parse_perf_script(&script);
        RunFolder { dir: dir.to_owned(), samples, sample_pids, folded, log: log.to_string() }
    }

    /// The `n` leaves with most weight in folded_stacks.out, for failure messages.
    pub fn describe(&self) -> String {
        let mut by_leaf: std::collections::HashMap<&str, u64> = std::collections::HashMap::new();
        for line in self.folded.lines() {
            let Some((stack, weight)) = line.rsplit_once(' ') else { continue };
            *by_leaf.entry(stack.rsplit(';').next().unwrap_or(stack)).or_default() += weight.parse().unwrap_or(0);
        }
        let mut top: Vec<_> = by_leaf.into_iter().collect();
        top.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        let top: Vec<String> = top.iter().take(8).map(|(leaf, w)| format!("  {w:6}  {leaf}")).collect();
        format!(
            "the run folder {} has {} samples; top leaves:\n{}\nprofcpu said:\n{}",
            self.dir.display(),
            self.samples.len(),
            top.join("\n"),
            self.log.trim_end()
        )
    }

    /// Every output present and non-empty, and the JIT's file saved under symbols/.
    pub fn assert_complete(&self) {
        for name in OUTPUT_FILES {
            let len = std::fs::metadata(self.dir.join(name)).map(|m| m.len()).unwrap_or(0);
            assert!(len > 0, "expected a non-empty {name} in {}, found {len} bytes", self.dir.display());
        }
        // Saved under the PID profcpu was given: 1 from a sidecar or inside, the host PID from the host.
        let saved = std::fs::read_dir(self.dir.join("symbols")).into_iter().flatten().flatten().any(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            (name.starts_with("jit-") && name.ends_with(".dump"))
                || (name.starts_with("perf-") && name.ends_with(".map"))
        });
        assert!(saved, "expected the app's jitdump or perf map saved under {}/symbols", self.dir.display());
    }

    /// The API's JIT code named from the container's own /tmp (`/tmp/jit-1.dump` or `/tmp/perf-1.map`: the app is
    /// PID 1 there), and its CPU route's methods in most samples.
    pub fn assert_jit_named(&self, min_samples: usize) {
        let n = self.samples.len();
        assert!(
            n >= min_samples,
            "expected at least {min_samples} samples of the loaded API, got {n}; {}",
            self.describe()
        );
        let jit: Vec<&Frame> = self.samples.iter().flatten().filter(|f| f.is_jit()).collect();
        let named = jit.iter().filter(|f| f.is_named_jit() && f.module.starts_with("/tmp/")).count();
        assert!(
            !jit.is_empty() && named as f64 >= 0.95 * jit.len() as f64,
            "expected >= 95% of JIT frames named from the container's /tmp/jit-1.dump or /tmp/perf-1.map, got {named} \
             of {}; modules: {:?}; {}",
            jit.len(),
            jit.iter().map(|f| f.module.as_str()).collect::<std::collections::BTreeSet<_>>(),
            self.describe()
        );
        let with_route = self.samples.iter().filter(|s| s.iter().any(|f| f.symbol.contains("PricingEngine::"))).count();
        assert!(
            with_route as f64 >= 0.6 * n as f64,
            "expected PricingEngine:: frames in >= 60% of samples, got {with_route} of {n}; {}",
            self.describe()
        );
        assert!(self.folded.contains(HOT_METHOD), "expected {HOT_METHOD} in folded_stacks.out; {}", self.describe());
        for file in ["/tmp/jit-1.dump", "/tmp/perf-1.map"] {
            assert!(
                !Path::new(file).exists(),
                "{file} exists on the host, so names could have come from there: remove it"
            );
        }
    }

    /// Copies the folder elsewhere on the host, deletes what postprocess makes, runs the host's
    /// `profcpu postprocess -dir COPY` and requires the same folded stacks and perf script text.
    pub fn assert_postprocess_reproduces(&self, work: &WorkDir) {
        let copy = work.join(format!("postprocessed-{}", self.dir.file_name().unwrap().to_string_lossy()));
        let status = Command::new("cp").arg("-a").arg(&self.dir).arg(&copy).status().expect("cannot run cp");
        assert!(status.success(), "cp -a {} {} failed", self.dir.display(), copy.display());
        for name in ["perf_script.out", "folded_stacks.out", "flamegraph.svg", "prof.tar.gz"] {
            std::fs::remove_file(copy.join(name)).unwrap();
        }
        let mut cmd = Command::new(HOST_PROFCPU);
        cmd.args(["postprocess", "-dir"]).arg(&copy);
        let out = run_bounded(cmd, Duration::from_secs(30));
        assert!(
            out.status.success(),
            "expected postprocess -dir {} to succeed; it said ({}):\n{}",
            copy.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let again = RunFolder::read(&copy, &String::from_utf8_lossy(&out.stderr));
        assert!(
            again.folded == self.folded,
            "expected the same folded stacks after postprocess on the host ({} vs {} lines).\nat collect: {}\nafter: {}",
            self.folded.lines().count(),
            again.folded.lines().count(),
            self.describe(),
            again.describe()
        );
        let script = |d: &Path| std::fs::read_to_string(d.join("perf_script.out")).unwrap();
        assert!(script(&self.dir) == script(&copy), "expected the same perf_script.out after postprocess on the host");
    }
}

/// Parses perf script text: a header line per sample, then `\t ADDR LABEL+0xOFF (MODULE)` per frame.
fn parse_perf_script(text: &str) -> (Vec<Vec<Frame>>, Vec<u32>) {
    let (mut samples, mut pids) = (Vec::new(), Vec::new());
    let mut current: Option<Vec<Frame>> = None;
    for line in text.lines() {
        if let Some(frame) = line.strip_prefix('\t') {
            let Some(sample) = current.as_mut() else { continue };
            let Some((_addr, rest)) = frame.trim_start().split_once(' ') else { continue };
            // The module is the last parenthesised group; .NET names have parentheses of their own.
            let Some((label, module)) = rest.rsplit_once(" (") else { continue };
            let symbol = label.rfind("+0x").map_or(label, |i| &label[..i]);
            sample.push(Frame { symbol: symbol.to_string(), module: module.trim_end_matches(')').to_string() });
        } else if line.trim().is_empty() {
            samples.extend(current.take());
        } else {
            samples.extend(current.take());
            // `comm pid/tid [cpu] secs.micros: period event:`; comm may hold spaces, so find the pid/tid word.
            let pid = line.split_whitespace().find_map(|w| {
                let (p, t) = w.split_once('/')?;
                t.parse::<u32>().ok()?;
                p.parse::<u32>().ok()
            });
            if let Some(pid) = pid {
                pids.push(pid);
                current = Some(Vec::new());
            }
        }
    }
    samples.extend(current);
    (samples, pids)
}
