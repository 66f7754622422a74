//! The sample web API (`examples/webapi`) on a real .NET runtime (8 by default, started with no perf map variable;
//! .NET Core 3.1 as the legacy case) as a target for end-to-end tests of the `profcpu` binary: started on the host or
//! in its own PID + mount namespace with a private `/tmp` (a "container"), loaded with `examples/webapi/load.sh`,
//! profiled by running the binary, and its outputs read back as text.
//!
//! Everything started here runs in its own process group and is killed when its guard is dropped, also when a test
//! fails half-way.

use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::dotnet::Dotnet;
use super::running_app::{kill_tree, remove_runtime_files};
use super::scratch::Scratch;
use super::START_TIMEOUT;

/// Extra time a collection may take beyond its duration (writing the outputs) before the test calls it hung.
const COLLECT_GRACE: Duration = Duration::from_secs(90);

/// A method the API compiles only at its first `/format` request, which no load here sends: the probe for "written
/// after the run".
pub const COMPILED_LATE: &str = "FormatHandler::Handle";

pub fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The runtime and the compiled API, from the repository's own set-up scripts (cached, so normally instant).
pub struct Prepared {
    /// The directory holding the `dotnet` host.
    pub runtime_dir: PathBuf,
    pub dll: PathBuf,
}

/// The runtime of `version` and the API built for it.
pub fn prepared(version: Dotnet) -> &'static Prepared {
    static PREPARED: OnceLock<Mutex<HashMap<Dotnet, &'static Prepared>>> = OnceLock::new();
    let mut all = PREPARED.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    all.entry(version).or_insert_with(|| {
        let runtime_dir = version.runtime_dir();
        let out = Command::new("bash")
            .arg(repo().join("examples/webapi/build.sh"))
            .arg(version.version())
            .output()
            .unwrap_or_else(|e| panic!("cannot run bash examples/webapi/build.sh: {e}"));
        assert!(
            out.status.success(),
            "examples/webapi/build.sh failed (run scripts/setup-deps.sh first; it installs mono-mcs):\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let dll = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        assert!(dll.is_file(), "build.sh printed {} but it does not exist", dll.display());
        Box::leak(Box::new(Prepared { runtime_dir, dll }))
    })
}

/// A port nobody listens on right now (the kernel's choice), so tests never meet each other's or a developer's API.
pub fn free_port() -> u16 {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("cannot bind a local port");
    listener.local_addr().unwrap().port()
}

/// The first child of `pid` (the program `unshare --fork` started), waiting for it to appear.
fn child_of(pid: u32) -> Option<u32> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
        if let Some(c) = children.split_whitespace().next() {
            return c.parse().ok();
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The PID a process has in its own PID namespace (the last field of `NStgid:`).
pub fn nspid_of(host_pid: u32) -> u32 {
    let status = std::fs::read_to_string(format!("/proc/{host_pid}/status"))
        .unwrap_or_else(|e| panic!("cannot read /proc/{host_pid}/status: {e}"));
    let line = status.lines().find(|l| l.starts_with("NStgid:")).expect("kernel without NStgid in /proc/PID/status");
    line.split_whitespace().last().unwrap().parse().unwrap()
}

/// `/proc/PID/ns/NAME` as the link text (`mnt:[4026532177]`), which identifies the namespace.
pub fn namespace_of(pid: u32, name: &str) -> String {
    std::fs::read_link(format!("/proc/{pid}/ns/{name}"))
        .unwrap_or_else(|e| panic!("cannot read /proc/{pid}/ns/{name}: {e}"))
        .to_string_lossy()
        .into_owned()
}

/// One GET on 127.0.0.1; the body, or `None` when nothing answers.
pub fn http_get(port: u16, path: &str) -> Option<String> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    // HTTP/1.0: the server closes after answering, so reading to the end returns.
    stream.write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes()).ok()?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply).ok()?;
    reply.split_once("\r\n\r\n").map(|(_, body)| body.to_string())
}

/// A running web API. Killed (with everything it started) when dropped.
pub struct Api {
    /// The process we spawned: the runtime itself on the host, `unshare` for a container.
    leader: Child,
    host_pid: u32,
    pub port: u16,
    pub log: PathBuf,
    in_container: bool,
    stopped: bool,
}

impl Api {
    /// The API on .NET 8 on the host, started with no perf map variable (`examples/webapi/run.sh --foreground`):
    /// what a user has who prepared nothing.
    pub fn on_host(work: &Scratch) -> Api {
        Api::on_host_with(work, Dotnet::V8, &[])
    }

    /// `examples/webapi/run.sh --runtime VERSION --foreground` with `env` added (e.g. `DOTNET_PerfMapEnabled=1`).
    pub fn on_host_with(work: &Scratch, version: Dotnet, env: &[(&str, &str)]) -> Api {
        prepared(version);
        let port = free_port();
        let mut cmd = Command::new("bash");
        cmd.arg(repo().join("examples/webapi/run.sh")).args([
            "--runtime",
            version.version(),
            "--foreground",
            "--port",
            &port.to_string(),
        ]);
        // Only what the test asks for: not a perf map setting of whoever runs the tests.
        cmd.env_remove("DOTNET_PerfMapEnabled").env_remove("COMPlus_PerfMapEnabled").envs(env.iter().copied());
        Api::spawn(cmd, port, work.join(format!("api-{port}.log")), false)
    }

    /// The API on .NET 8 in its own PID and mount namespace with a private tmpfs on /tmp (network shared, so the
    /// host can load it), started with no perf map variable: the `docker run` situation without Docker. It is PID 1
    /// there.
    pub fn in_container(work: &Scratch) -> Api {
        let prepared = prepared(Dotnet::V8);
        let port = free_port();
        let mut cmd = Command::new("unshare");
        // --kill-child: the API dies with unshare, whatever happens to the test. The runtime is started directly
        // (not through run.sh) because the checkout itself may live under the /tmp that the tmpfs hides.
        cmd.args(["--pid", "--fork", "--kill-child", "--mount", "--mount-proc", "--propagation", "private"])
            .args(["sh", "-c", "mount -t tmpfs tmpfs /tmp && exec \"$0\" \"$@\""])
            .arg(prepared.runtime_dir.join("dotnet"))
            .arg(&prepared.dll)
            .args(["--port", &port.to_string()])
            .env("DOTNET_SYSTEM_GLOBALIZATION_INVARIANT", "1")
            .env_remove("DOTNET_PerfMapEnabled")
            .env_remove("COMPlus_PerfMapEnabled");
        let api = Api::spawn(cmd, port, work.join(format!("api-{port}.log")), true);
        assert_eq!(api.nspid(), 1, "the namespaced API is not PID 1 in its PID namespace");
        api
    }

    /// The API of `version` on the host, run by the `dotnet` host in `runtime_dir` (e.g. a copy with a stripped
    /// libcoreclr), with `env` added.
    pub fn with_runtime(work: &Scratch, version: Dotnet, runtime_dir: &Path, env: &[(&str, &str)]) -> Api {
        let port = free_port();
        let mut cmd = Command::new(runtime_dir.join("dotnet"));
        cmd.arg(&prepared(version).dll)
            .args(["--port", &port.to_string()])
            .env("DOTNET_SYSTEM_GLOBALIZATION_INVARIANT", "1")
            .env_remove("DOTNET_PerfMapEnabled")
            .env_remove("COMPlus_PerfMapEnabled")
            .envs(env.iter().copied());
        Api::spawn(cmd, port, work.join(format!("api-{port}.log")), false)
    }

    fn spawn(mut cmd: Command, port: u16, log: PathBuf, in_container: bool) -> Api {
        let log_file = std::fs::File::create(&log).unwrap_or_else(|e| panic!("cannot create {}: {e}", log.display()));
        cmd.stdin(Stdio::null()).stdout(log_file.try_clone().unwrap()).stderr(log_file).process_group(0);
        let leader = cmd.spawn().unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
        let leader_pid = leader.id();
        let mut api = Api { leader, host_pid: leader_pid, port, log, in_container, stopped: false };
        if in_container {
            api.host_pid =
                child_of(leader_pid).unwrap_or_else(|| panic!("unshare started no child; {}", api.log_tail()));
        }
        let deadline = Instant::now() + START_TIMEOUT;
        while http_get(port, "/health").as_deref() != Some("ok") {
            if let Ok(Some(status)) = api.leader.try_wait() {
                panic!("the web API exited during start-up ({status}); {}", api.log_tail());
            }
            assert!(
                Instant::now() < deadline,
                "the web API did not answer /health in {START_TIMEOUT:?}; {}",
                api.log_tail()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let exe = std::fs::read_link(format!("/proc/{}/exe", api.host_pid)).unwrap_or_default();
        assert!(exe.ends_with("dotnet"), "PID {} is {} rather than the runtime", api.host_pid, exe.display());
        api
    }

    /// The runtime's PID as the host sees it.
    pub fn host_pid(&self) -> u32 {
        self.host_pid
    }

    /// The runtime's PID in its own PID namespace (1 in a container, the host PID otherwise).
    pub fn nspid(&self) -> u32 {
        nspid_of(self.host_pid)
    }

    /// The runtime's perf map, perf info and jitdump files in its own /tmp (reached from the host through its root)
    /// that exist now.
    pub fn perf_map_files(&self) -> Vec<PathBuf> {
        let (tmp, n) = (PathBuf::from(format!("/proc/{}/root/tmp", self.host_pid)), self.nspid());
        [format!("perf-{n}.map"), format!("perfinfo-{n}.map"), format!("jit-{n}.dump")]
            .into_iter()
            .map(|name| tmp.join(name))
            .filter(|p| p.symlink_metadata().is_ok())
            .collect()
    }

    /// Makes the runtime compile [`COMPILED_LATE`] now (one `/format` request).
    pub fn compile_late_method(&self) {
        let body = http_get(self.port, "/format?rows=10").unwrap_or_default();
        assert!(body.starts_with("rows 10"), "GET /format answered {body:?}; {}", self.log_tail());
    }

    /// Files the runtime holds open whose name says perf map or jitdump (also ones removed since: the runtime keeps
    /// its jitdump open after DisablePerfMap), as `(fd link target, contents)`.
    pub fn open_perf_map_files(&self) -> Vec<(String, Vec<u8>)> {
        let fds = std::fs::read_dir(format!("/proc/{}/fd", self.host_pid)).unwrap();
        fds.flatten()
            .filter_map(|fd| {
                let target = std::fs::read_link(fd.path()).ok()?.to_string_lossy().into_owned();
                let name = target.rsplit('/').next().unwrap_or("");
                let ours = name.starts_with("perf-") || name.starts_with("perfinfo-") || name.starts_with("jit-");
                ours.then(|| (target.clone(), std::fs::read(fd.path()).unwrap_or_default()))
            })
            .collect()
    }

    /// After a collection that switched the API's perf map on: no perf map, perf info or jitdump left in its /tmp,
    /// and a method compiled after the run ([`COMPILED_LATE`]) written nowhere — not in its /tmp, not in a file it
    /// holds open, not in what the run saved.
    pub fn assert_nothing_left_or_written_after(&self, run_dir: &Path) {
        let left = self.perf_map_files();
        assert!(left.is_empty(), "expected no perf map files left in the API's /tmp after the run, found {left:?}");
        self.compile_late_method();
        let left = self.perf_map_files();
        assert!(left.is_empty(), "the API wrote {left:?} after the run (its perf map was not switched off)");
        for (target, contents) in self.open_perf_map_files() {
            assert!(
                !contains(&contents, COMPILED_LATE),
                "{COMPILED_LATE}, compiled after the run, was written into {target} (still open in the API)"
            );
        }
        for (name, _) in files_under(&run_dir.join("symbols")) {
            let contents = std::fs::read(run_dir.join("symbols").join(&name)).unwrap();
            assert!(!contains(&contents, COMPILED_LATE), "{COMPILED_LATE} found in the saved symbols/{name}");
        }
    }

    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        format!("last lines of {}:\n{}", self.log.display(), lines[lines.len().saturating_sub(15)..].join("\n"))
    }

    /// Kills the API and waits until its process is gone (for a container: with its namespaces and its /tmp).
    pub fn stop(&mut self) {
        if self.stopped {
            return;
        }
        self.stopped = true;
        // The leader is not reaped yet, so its PID (and its descendants', the runtime's among them) are still ours.
        kill_tree(self.leader.id());
        let _ = self.leader.wait();
        let deadline = Instant::now() + Duration::from_secs(15);
        while Path::new(&format!("/proc/{}", self.host_pid)).exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if !self.in_container {
            remove_runtime_files(self.host_pid);
        }
    }
}

impl Drop for Api {
    fn drop(&mut self) {
        self.stop();
    }
}

/// What `load.sh` reported.
#[derive(Debug, Clone, Copy)]
pub struct LoadResult {
    pub requests: u64,
    pub errors: u64,
    /// The mean time a request took, as the load generator measured it.
    pub latency_ms: f64,
}

/// `examples/webapi/load.sh ROUTE SECONDS CONNS` against an API, running in the background. Killed when dropped.
pub struct Load {
    child: Option<Child>,
    route: String,
}

impl Load {
    pub fn start(api: &Api, route: &str, seconds: u32, connections: u32) -> Load {
        let child = Command::new("bash")
            .arg(repo().join("examples/webapi/load.sh"))
            .args([route, &seconds.to_string(), &connections.to_string()])
            .env("PORT", api.port.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start examples/webapi/load.sh: {e}"));
        Load { child: Some(child), route: route.to_string() }
    }

    /// Waits for the load to end and returns its counts.
    pub fn finish(mut self) -> LoadResult {
        let out = self.child.take().unwrap().wait_with_output().expect("cannot wait for load.sh");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let field = |name: &str| {
            stdout
                .split_whitespace()
                .find_map(|w| w.strip_prefix(name)?.strip_prefix('=')?.parse::<f64>().ok())
                .unwrap_or_else(|| {
                    panic!(
                        "load.sh {} printed no {name}= ({}):\n{stdout}{}",
                        self.route,
                        out.status,
                        String::from_utf8_lossy(&out.stderr)
                    )
                })
        };
        LoadResult {
            requests: field("requests") as u64,
            errors: field("errors") as u64,
            latency_ms: field("latency_ms"),
        }
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            kill_tree(child.id());
            let _ = child.wait();
        }
    }
}

/// `profcpu collect -pid PID -duration SECONDS -output OUTPUT`, as arguments for whatever runs the binary.
pub fn collect_args(pid: u32, seconds: u32, output: &Path) -> Vec<String> {
    ["collect", "-pid", &pid.to_string(), "-duration", &seconds.to_string(), "-output"]
        .iter()
        .map(|s| s.to_string())
        .chain([output.to_str().expect("UTF-8 output path").to_string()])
        .collect()
}

/// Runs `cmd` (a `profcpu collect`, possibly wrapped in nsenter/unshare), requires success and reads the run folder
/// it printed as its last stdout line. `seconds` is the collection's duration, for the hang watchdog.
pub fn run_collect(mut cmd: Command, seconds: u32, work: &Scratch) -> Profile {
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let (out_path, err_path) = (work.join(format!("collect-{n}.stdout")), work.join(format!("collect-{n}.stderr")));
    cmd.stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .process_group(0);
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
    let deadline = Instant::now() + Duration::from_secs(seconds as u64) + COLLECT_GRACE;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            kill_tree(child.id());
            let _ = child.wait();
            panic!(
                "{cmd:?} still ran {COLLECT_GRACE:?} after its {seconds} s; stderr:\n{}",
                std::fs::read_to_string(&err_path).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stdout = std::fs::read_to_string(&out_path).unwrap_or_default();
    let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
    assert!(
        status.success(),
        "{cmd:?} failed ({status}); if perf_event_open was refused, this is the reason:\n{stderr}{stdout}"
    );
    let dir = stdout.lines().last().map(PathBuf::from).unwrap_or_default();
    assert!(dir.join("perf.data").is_file(), "collect's last stdout line is not a run folder: {stdout:?}\n{stderr}");
    let mut profile = Profile::read(&dir);
    profile.log = stderr;
    profile
}

/// One frame of `perf_script.out`.
#[derive(Debug, Clone)]
pub struct Frame {
    /// The label without its `+0x…` offset: a symbol, or `module+0x…` when unnamed.
    pub symbol: String,
    pub module: String,
}

impl Frame {
    /// Code generated at run time: named from a perf map (`/tmp/perf-N.map`) or jitdump, or unnamed in an anonymous
    /// mapping (`//anon`) or, with W^X (.NET 7+), a `memfd:doublemapper` one.
    pub fn is_jit(&self) -> bool {
        self.module == "//anon" || self.module.contains("memfd:doublemapper") || self.is_named_jit()
    }

    pub fn is_named_jit(&self) -> bool {
        let base = self.module.rsplit('/').next().unwrap_or("");
        (base.starts_with("perf-") && base.ends_with(".map")) || (base.starts_with("jit-") && base.ends_with(".dump"))
    }

    /// Whether the frame has a symbol rather than only its module and offset.
    pub fn is_named(&self) -> bool {
        let base = self.module.rsplit('/').next().unwrap_or(&self.module);
        !self.symbol.starts_with(&format!("{base}+0x")) && self.symbol != "[unknown]"
    }
}

/// One sample of `perf_script.out`, leaf frame first.
#[derive(Debug, Clone)]
pub struct Sample {
    pub comm: String,
    pub pid: u32,
    pub tid: u32,
    pub frames: Vec<Frame>,
}

impl Sample {
    pub fn has_frame(&self, needle: &str) -> bool {
        self.frames.iter().any(|f| f.symbol.contains(needle))
    }
}

/// The outputs of one run folder, read as text.
pub struct Profile {
    pub dir: PathBuf,
    pub samples: Vec<Sample>,
    pub folded: String,
    /// profcpu's stderr (and whatever the wrapper printed there).
    pub log: String,
}

impl Profile {
    pub fn read(dir: &Path) -> Profile {
        let script = std::fs::read_to_string(dir.join("perf_script.out"))
            .unwrap_or_else(|e| panic!("cannot read {}/perf_script.out: {e}", dir.display()));
        let folded = std::fs::read_to_string(dir.join("folded_stacks.out"))
            .unwrap_or_else(|e| panic!("cannot read {}/folded_stacks.out: {e}", dir.display()));
        Profile { dir: dir.to_owned(), samples: parse_perf_script(&script), folded, log: String::new() }
    }

    pub fn count(&self, pred: impl Fn(&Sample) -> bool) -> usize {
        self.samples.iter().filter(|s| pred(s)).count()
    }

    /// The fraction of samples for which `pred` holds.
    pub fn share(&self, pred: impl Fn(&Sample) -> bool) -> f64 {
        self.count(pred) as f64 / self.samples.len().max(1) as f64
    }

    pub fn frames(&self) -> impl Iterator<Item = &Frame> {
        self.samples.iter().flat_map(|s| s.frames.iter())
    }

    /// The `n` frames with most self weight in folded_stacks.out, one per line with their share.
    pub fn top_frames(&self, n: usize) -> String {
        let mut by_leaf: HashMap<&str, u64> = HashMap::new();
        let mut total = 0u64;
        for line in self.folded.lines() {
            let Some((stack, weight)) = line.rsplit_once(' ') else { continue };
            let Ok(weight) = weight.parse::<u64>() else { continue };
            *by_leaf.entry(stack.rsplit(';').next().unwrap_or(stack)).or_default() += weight;
            total += weight;
        }
        let mut top: Vec<(&str, u64)> = by_leaf.into_iter().collect();
        top.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        top.iter()
            .take(n)
            .map(|(leaf, w)| format!("  {:5.1}%  {leaf}", *w as f64 * 100.0 / total.max(1) as f64))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// For failure messages: what the profile showed.
    pub fn describe(&self) -> String {
        format!(
            "the profile in {} has {} samples; top 10 frames by self time (folded_stacks.out):\n{}\nprofcpu said:\n{}",
            self.dir.display(),
            self.samples.len(),
            self.top_frames(10),
            self.log.trim_end()
        )
    }

    /// Checks that the JIT-compiled code of the API is named from the perf map or jitdump its runtime wrote as
    /// `nspid` (the paths as the target sees them): >= 90% of the samples whose leaf is JIT code, >= 95% of all JIT
    /// frames, and the CPU route's chain in most samples. Returns the named share of JIT leaves.
    pub fn assert_jit_named(&self, nspid: u32) -> f64 {
        let modules = [format!("/tmp/perf-{nspid}.map"), format!("/tmp/jit-{nspid}.dump")];
        let from_api = |f: &Frame| f.is_named_jit() && modules.contains(&f.module);
        let n = self.samples.len();
        assert!(n >= 100, "expected at least 100 samples of the loaded API in 5 s, got {n}; {}", self.describe());
        let jit_leaves: Vec<&Frame> =
            self.samples.iter().filter_map(|s| s.frames.first()).filter(|f| f.is_jit()).collect();
        let named_leaves = jit_leaves.iter().filter(|f| from_api(f)).count();
        let leaf_share = named_leaves as f64 / jit_leaves.len().max(1) as f64;
        assert!(
            !jit_leaves.is_empty() && leaf_share >= 0.9,
            "expected >= 90% of the samples with a JIT leaf named from {modules:?}, got {named_leaves} of {}; {}",
            jit_leaves.len(),
            self.describe()
        );
        let jit: Vec<&Frame> = self.frames().filter(|f| f.is_jit()).collect();
        let named = jit.iter().filter(|f| from_api(f)).count();
        assert!(
            named as f64 >= 0.95 * jit.len() as f64,
            "expected >= 95% of JIT frames named from {modules:?}, got {named} of {}; JIT modules seen: {:?}; {}",
            jit.len(),
            jit.iter().map(|f| f.module.as_str()).collect::<std::collections::BTreeSet<_>>(),
            self.describe()
        );
        let chain = self.share(|s| s.frames.iter().any(|f| f.symbol.contains("PricingEngine::") && from_api(f)));
        assert!(
            chain >= 0.6,
            "expected PricingEngine:: frames (named from {modules:?}) in >= 60% of samples, got {:.1}%; {}",
            chain * 100.0,
            self.describe()
        );
        eprintln!(
            "{}: {named_leaves} of {} JIT leaves named ({:.1}%), {named} of {} JIT frames",
            self.dir.display(),
            jit_leaves.len(),
            leaf_share * 100.0,
            jit.len()
        );
        leaf_share
    }

    /// The value of `key` in the run's metadata.txt.
    pub fn metadata(&self, key: &str) -> String {
        let text = std::fs::read_to_string(self.dir.join("metadata.txt")).unwrap();
        let prefix = format!("{key}: ");
        text.lines().find_map(|l| l.strip_prefix(&prefix)).map(String::from).unwrap_or_default()
    }
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// Parses perf script text: a header line per sample, then `\t ADDR LABEL+0xOFF (MODULE)` per frame.
pub fn parse_perf_script(text: &str) -> Vec<Sample> {
    let mut samples = Vec::new();
    let mut current: Option<Sample> = None;
    for line in text.lines() {
        if line.trim().is_empty() {
            samples.extend(current.take());
        } else if let Some(frame) = line.strip_prefix('\t') {
            let Some(sample) = current.as_mut() else { continue };
            let Some((_addr, rest)) = frame.trim_start().split_once(' ') else { continue };
            // The module is the last parenthesised group; JIT names have parentheses of their own.
            let Some((label, module)) = rest.rsplit_once(" (") else { continue };
            let symbol = match label.rfind("+0x") {
                Some(i) => &label[..i],
                None => label,
            };
            sample.frames.push(Frame { symbol: symbol.to_string(), module: module.trim_end_matches(')').to_string() });
        } else {
            samples.extend(current.take());
            // `comm pid/tid [cpu] secs.micros: period event:`; comm may hold spaces, so find the pid/tid word.
            let words: Vec<&str> = line.split_whitespace().collect();
            let Some(at) = words.iter().position(|w| {
                w.split_once('/').is_some_and(|(p, t)| p.parse::<u32>().is_ok() && t.parse::<u32>().is_ok())
            }) else {
                continue;
            };
            let (pid, tid) = words[at].split_once('/').unwrap();
            current = Some(Sample {
                comm: words[..at].join(" "),
                pid: pid.parse().unwrap(),
                tid: tid.parse().unwrap(),
                frames: Vec::new(),
            });
        }
    }
    samples.extend(current);
    samples
}

/// The files a run folder must hold (besides `symbols/`), all non-empty.
pub const OUTPUT_FILES: [&str; 6] =
    ["perf.data", "perf_script.out", "folded_stacks.out", "flamegraph.svg", "metadata.txt", "prof.tar.gz"];

/// Every regular file under `dir`, relative, with its size.
pub fn files_under(dir: &Path) -> BTreeMap<String, u64> {
    fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<String, u64>) {
        for entry in std::fs::read_dir(dir).unwrap().map(Result::unwrap) {
            let meta = entry.path().symlink_metadata().unwrap();
            if meta.is_dir() {
                walk(base, &entry.path(), out);
            } else {
                let rel = entry.path().strip_prefix(base).unwrap().to_string_lossy().into_owned();
                out.insert(rel, meta.len());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// `tar -tvzf ARCHIVE` (GNU tar, an independent reader): regular files with their sizes.
pub fn archive_listing(archive: &Path) -> BTreeMap<String, u64> {
    let out = Command::new("tar").arg("-tvzf").arg(archive).output().expect("cannot run tar");
    assert!(out.status.success(), "tar cannot list {}: {}", archive.display(), String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with('-'))
        .filter_map(|l| {
            // -rw-r--r-- root/root  117212 2026-11-22 02:43 perf.data
            let words: Vec<&str> = l.split_whitespace().collect();
            Some((words.get(5..)?.join(" "), words.get(2)?.parse().ok()?))
        })
        .collect()
}
