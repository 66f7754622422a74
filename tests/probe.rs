//! `profcpu probe` and `profcpu offsets` through the binary, on real targets: a .NET 8 service (started with perf
//! maps, and without: names through the diagnostics IPC), a C program launched by profcpu, Debian's `perf probe` on
//! an offset `offsets` printed. Refusals (no such method, too many JIT addresses, a target that is gone,
//! breakpoints all taken, no uprobes) are one line each; no uprobe is left behind (SIGINT, SIGTERM, the target
//! crashing).

mod support;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::dotnet::Dotnet;
use support::profcpu::{read, Background, Finished};
use support::running_app::{exclusive, RunningApp};
use support::scratch::Scratch;
use support::PROFCPU;

/// The assembly is named after the file mcs wrote (support::dotnet builds `App.dll.partial…`, then renames it).
const RECONCILE: &str = "int64 [App.dll] Books::Reconcile(int32)";
const TO_BASE64: &str = "string [System.Private.CoreLib] System.Convert::ToBase64String(uint8[])";
const POST: &str = "instance int64 [App.dll] Ledger::Post(int32)";
const LIMIT: Duration = Duration::from_secs(120);

/// The test service (`tests/data/probe/Service.cs`) on .NET 8.
struct Service {
    app: RunningApp,
    port: u16,
}

impl Service {
    /// Started with `DOTNET_PerfMapEnabled=1`, or with no perf map variable at all.
    fn start(perf_maps: bool) -> Service {
        let runtime = Dotnet::V8.runtime_dir();
        let dll = Dotnet::V8.build_app(&repo().join("tests/data/probe/Service.cs"));
        let port = support::webapi::free_port();
        let mut cmd = Dotnet::V8.command(&runtime, &dll, &[&port.to_string()]);
        if !perf_maps {
            cmd.env_remove("DOTNET_PerfMapEnabled");
        }
        Service { app: RunningApp::start(cmd, support::START_TIMEOUT), port }
    }

    fn pid(&self) -> u32 {
        self.app.pid()
    }

    fn client(&self) -> Client {
        let stream = TcpStream::connect(("127.0.0.1", self.port)).expect("cannot connect to the test service");
        stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        Client { reader: BufReader::new(stream.try_clone().unwrap()), writer: stream }
    }

    /// The service's perf map as it is now (empty when it writes none).
    fn perf_map(&self) -> String {
        std::fs::read_to_string(self.perf_map_path()).unwrap_or_default()
    }

    fn perf_map_path(&self) -> PathBuf {
        PathBuf::from(format!("/tmp/perf-{}.map", self.pid()))
    }
}

struct Client {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Client {
    /// One request line (`r`, `p`, `b`: see Service.cs), one answer line.
    fn send(&mut self, request: &str) {
        writeln!(self.writer, "{request}").unwrap();
        let mut answer = String::new();
        self.reader.read_line(&mut answer).expect("the service did not answer");
        assert!(!answer.is_empty(), "the service closed the connection");
    }

    /// Sends `request` every 2 ms until the service's perf map names every one of `tiers` (`Method(args)[Tier]`),
    /// then `extra` more; returns how many were sent.
    fn send_until_compiled(&mut self, service: &Service, request: &str, tiers: &[&str], extra: u64) -> u64 {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut sent = 0;
        loop {
            self.send(request);
            sent += 1;
            if sent % 25 == 0 {
                let map = service.perf_map();
                if tiers.iter().all(|t| map.contains(t)) {
                    break;
                }
                assert!(Instant::now() < deadline, "no {tiers:?} in the perf map after {sent} requests:\n{map}");
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        for _ in 0..extra {
            self.send(request);
            sent += 1;
        }
        sent
    }
}

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `profcpu probe ARGS` in the background, returned once it says its probes are in place.
fn start_probe(args: &[&str]) -> Background {
    let mut args_with = vec!["probe"];
    args_with.extend_from_slice(args);
    let mut probe = Background::start(&args_with);
    if !probe.wait_for_line(|l| l.starts_with("Probing "), LIMIT) {
        let ended = probe.finish(LIMIT);
        panic!("profcpu probe did not start probing ({}):\n{}", ended.status, ended.stderr);
    }
    probe
}

/// What a finished probe printed: per method its calls (stdout lines `<calls> <method>`), and the output folder.
struct Probed {
    calls: Vec<(u64, String)>,
    run_dir: PathBuf,
    stderr: String,
}

impl Probed {
    fn of(finished: Finished) -> Probed {
        assert!(finished.status.success(), "profcpu probe failed ({}):\n{}", finished.status, finished.stderr);
        let lines: Vec<&str> = finished.stdout.lines().collect();
        let (folder, methods) = lines.split_last().unwrap_or_else(|| panic!("nothing on stdout:\n{}", finished.stderr));
        let calls = methods
            .iter()
            .map(|l| {
                let (n, name) = l.split_once(' ').unwrap_or_else(|| panic!("bad line {l:?}"));
                (n.parse().unwrap_or_else(|_| panic!("bad count in {l:?}")), name.to_string())
            })
            .collect::<Vec<_>>();
        let run_dir = PathBuf::from(folder);
        assert!(run_dir.is_dir(), "the last stdout line {folder:?} is not the output folder");
        Probed { calls, run_dir, stderr: finished.stderr }
    }

    fn calls_of(&self, method: &str) -> u64 {
        let found = self.calls.iter().find(|(_, name)| name == method);
        found.unwrap_or_else(|| panic!("no line for {method} in {:?}", self.calls)).0
    }

    fn file(&self, name: &str) -> String {
        read(&self.run_dir.join(name))
    }

    /// metadata.txt's value of `key`.
    fn metadata(&self, key: &str) -> String {
        let text = self.file("metadata.txt");
        let prefix = format!("{key}: ");
        let line = text.lines().find(|l| l.starts_with(&prefix));
        line.unwrap_or_else(|| panic!("no {key} in metadata.txt:\n{text}"))[prefix.len()..].to_string()
    }

    /// The metadata key prefix (`probe_method_N`) of `method`.
    fn method_key(&self, method: &str) -> String {
        let text = self.file("metadata.txt");
        let line = text.lines().find(|l| l.starts_with("probe_method_") && l.ends_with(&format!(": {method}")));
        line.unwrap_or_else(|| panic!("{method} not in metadata.txt:\n{text}")).split(':').next().unwrap().to_string()
    }

    /// Calls per tier of `method`, from metadata.txt (`Tier 0xADDR (…): N calls; …`).
    fn tiers_of(&self, method: &str) -> Vec<(String, u64)> {
        let code = self.metadata(&format!("{}_code", self.method_key(method)));
        code.split("; ")
            .map(|part| {
                let tier = part.split(' ').next().unwrap().to_string();
                let calls = part.rsplit_once(": ").unwrap().1.trim_end_matches(" calls").parse().unwrap();
                (tier, calls)
            })
            .collect()
    }

    /// The folded stacks' total of stacks that hold `frames` one after the other, leaf last.
    fn folded_through(&self, frames: &[&str]) -> u64 {
        let path = frames.join(";");
        support::profcpu::folded_map(&self.file("folded_stacks.out"))
            .iter()
            .filter(|(stack, _)| stack.ends_with(&path))
            .map(|(_, n)| n)
            .sum()
    }
}

/// profcpu's uprobes in tracefs now (definitions of a run are `profcpu_<pid>/…`).
fn profcpu_uprobes() -> Vec<String> {
    let text = std::fs::read_to_string("/sys/kernel/tracing/uprobe_events")
        .expect("cannot read /sys/kernel/tracing/uprobe_events (tracefs must be mounted for uprobes)");
    text.lines().filter(|l| l.contains("profcpu_")).map(str::to_string).collect()
}

/// The first byte of code at `addr` in process `pid` (a uprobe puts 0xCC there while it is in place).
fn code_byte(pid: u32, addr: u64) -> u8 {
    use std::os::unix::fs::FileExt;
    let mut byte = [0u8];
    std::fs::File::open(format!("/proc/{pid}/mem")).unwrap().read_exact_at(&mut byte, addr).unwrap();
    byte[0]
}

/// The entry address of `method`'s `tier` from metadata.txt.
fn entry_of(probed: &Probed, method: &str, tier: &str) -> u64 {
    let code = probed.metadata(&format!("{}_code", probed.method_key(method)));
    let part = code.split("; ").find(|p| p.starts_with(&format!("{tier} "))).unwrap();
    u64::from_str_radix(part.split(' ').nth(1).unwrap().trim_start_matches("0x"), 16).unwrap()
}

/// The service's request path, root to leaf, as the folded stacks spell it.
const REQUEST_PATH: [&str; 3] =
    ["void [App.dll] Service::Serve", "string [App.dll] Service::Answer", "string [App.dll] Service::HandleRequest"];

/// A JIT method probed from before its first call through Tier0 → instrumented → Tier1, a ReadyToRun CoreLib
/// method while it is tiered up (uprobe on CoreLib plus its precode), and a virtual method (breakpoint): every
/// request counted exactly once for each; the callers' stacks show the request path.
#[test]
fn counts_every_call_of_dotnet_methods_across_their_tiers() {
    let _cpu = exclusive();
    let out = Scratch::new("probe-dotnet");
    let service = Service::start(true);
    let mut client = service.client();
    // ToBase64String called once, so its precode leads to its ReadyToRun code; Post at its final tier already (a
    // virtual method's calls are counted by breakpoints on its newest code).
    client.send("b");
    client.send_until_compiled(&service, "p", &["Ledger::Post(int32)[OptimizedTier1]"], 0);
    // Reconcile is compiled (PrepareMethod at start-up) but has never been called: no tier but the first.
    let map = service.perf_map();
    assert!(map.contains("Books::Reconcile(int32)[QuickJitted]") && !map.contains("Books::Reconcile(int32)[Optimized"));
    let output = out.path.to_str().unwrap();
    let probe = start_probe(&[
        "-pid",
        &service.pid().to_string(),
        "-method",
        "Books::Reconcile",
        "System.Convert::ToBase64String(uint8[])",
        "Ledger::Post",
        "-duration",
        "100",
        "-output",
        output,
    ]);
    let tier1 = ["Books::Reconcile(int32)[OptimizedTier1]", "ToBase64String(uint8[])[OptimizedTier1]"];
    let requests = client.send_until_compiled(&service, "r", &tier1, 100);
    assert!(!profcpu_uprobes().is_empty(), "no uprobe defined while probing");
    probe.signal(libc::SIGINT);
    let probed = Probed::of(probe.finish(LIMIT));

    for method in [RECONCILE, TO_BASE64, POST] {
        assert_eq!(probed.calls_of(method), requests, "{method}: {} requests\n{}", requests, probed.stderr);
    }
    assert_eq!(probed.calls.len(), 3, "{:?}", probed.calls);
    // Every tier the method went through while probed had calls, counted as one method.
    let tiers = probed.tiers_of(RECONCILE);
    for tier in ["QuickJitted", "InstrumentedTier", "OptimizedTier1"] {
        assert!(tiers.iter().any(|(t, n)| t == tier && *n > 0), "{RECONCILE}: no calls at {tier}: {tiers:?}");
    }
    assert_eq!(tiers.iter().map(|(_, n)| n).sum::<u64>(), requests, "{tiers:?}");
    let tiers = probed.tiers_of(TO_BASE64);
    assert!(tiers.iter().any(|(t, n)| t == "PreJIT" && *n > 0), "no calls of its ReadyToRun code: {tiers:?}");
    assert!(tiers.iter().any(|(t, n)| t == "OptimizedTier1" && *n > 0), "no calls of its Tier1 code: {tiers:?}");
    let mechanism = |m: &str| probed.metadata(&format!("{}_mechanism", probed.method_key(m)));
    assert!(mechanism(RECONCILE).contains("precode"), "{}", mechanism(RECONCILE));
    assert!(mechanism(TO_BASE64).starts_with("uprobe") && mechanism(TO_BASE64).contains("precode"));
    assert!(mechanism(POST).contains("execute breakpoint"), "{}", mechanism(POST));

    // The callers: every call of Reconcile came up the request path; the graph shows it.
    let leaf = frame(RECONCILE);
    let mut path = REQUEST_PATH.to_vec();
    path.push(&leaf);
    assert_eq!(probed.folded_through(&path), requests, "{}", probed.file("folded_stacks.out"));
    let svg = probed.file("flamegraph.svg");
    assert!(svg.contains("Books::Reconcile") && svg.contains("Service::HandleRequest"), "flame graph lacks them");

    // perf reads the recording: one sample per call, named by method.
    let script = support::perf::perf_script(&probed.run_dir.join("perf.data"));
    let samples = |event: &str| script.lines().filter(|l| l.contains(&format!(" {event}:"))).count() as u64;
    assert_eq!(samples("probe:Books::Reconcile"), requests);
    assert_eq!(samples("probe:System.Convert::ToBase64String"), requests);
    assert_eq!(samples("probe:Ledger::Post"), requests);
    assert!(support::profcpu::tar_list(&probed.run_dir.join("prof.tar.gz")).contains(&"perf.data".to_string()));

    // Nothing is left in the target or tracefs.
    assert!(profcpu_uprobes().is_empty(), "uprobes left behind: {:?}", profcpu_uprobes());
    let body = entry_of(&probed, TO_BASE64, "PreJIT");
    assert_ne!(code_byte(service.pid(), body), 0xCC, "the uprobe's breakpoint is still in CoreLib's code");
}

/// The frame name the folded stacks give a method (no parameters, no tier).
fn frame(method: &str) -> String {
    method.split_once('(').map_or(method, |(head, _)| head).to_string()
}

/// A service started without perf maps: the probe switches its perf map on over the diagnostics socket for the
/// JIT names and off again, removing the files; the service then crashes mid-probe. Before that, the refusals that
/// need a JIT: more methods than debug registers, and breakpoints all taken by another tool.
#[test]
fn names_come_through_the_diagnostics_socket_and_a_crash_ends_the_probe() {
    let _cpu = exclusive();
    let out = Scratch::new("probe-ipc");
    let output = out.path.to_str().unwrap();
    let service = Service::start(false);
    let pid = service.pid().to_string();
    assert!(!service.perf_map_path().exists(), "the service writes a perf map without being asked");
    let mut client = service.client();
    client.send("b");

    // Every method of the app is JIT code: more addresses than x86-64 has debug registers.
    let line = one_line_error(&["probe", "-pid", &pid, "-method", "[App.dll] ", "-output", output]);
    assert!(line.contains("debug registers") && line.contains("Books::Reconcile"), "{line}");
    assert!(!service.perf_map_path().exists(), "the perf map stayed on after a refusal");
    // Another tool holds every debug register of the service's threads.
    let map = service_map_after_probe_refusal(&service, output);
    assert!(!map.exists());

    let probe = start_probe(&["-pid", &pid, "-method", "Books::Reconcile", "-duration", "100", "-output", output]);
    assert!(service.perf_map_path().exists(), "the perf map was not switched on");
    let requests = client.send_until_compiled(&service, "r", &["Books::Reconcile(int32)[OptimizedTier1]"], 50);
    // The target crashes: probing ends with it, every output is written.
    let mut service = service;
    service.app.kill();
    let probed = Probed::of(probe.finish(LIMIT));
    assert!(probed.stderr.contains("(the target exited)"), "{}", probed.stderr);
    assert_eq!(probed.calls_of(RECONCILE), requests, "{}", probed.stderr);
    let mut path = REQUEST_PATH.to_vec();
    let leaf = frame(RECONCILE);
    path.push(&leaf);
    assert_eq!(probed.folded_through(&path), requests, "{}", probed.file("folded_stacks.out"));
    assert!(!service.perf_map_path().exists(), "the perf map the probe switched on was not removed");
    assert!(profcpu_uprobes().is_empty());
}

/// `profcpu probe -pid` on a .NET service whose threads' debug registers another tool (perf) holds: one line.
/// Returns the service's perf map path (which must not exist afterwards).
fn service_map_after_probe_refusal(service: &Service, output: &str) -> PathBuf {
    // Four execute breakpoints on every thread of the service, as `perf stat -e mem:ADDR:x -p PID` places them.
    let code: Vec<String> = (0..4).map(|i| format!("mem:{:#x}:x", 0x400000 + i * 0x1000)).collect();
    let mut holder = Command::new("perf")
        .args(["stat", "-e", &code.join(","), "-p", &service.pid().to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("cannot run perf (scripts/setup-deps.sh installs linux-perf)");
    std::thread::sleep(Duration::from_millis(700));
    let line = one_line_error(&[
        "probe",
        "-pid",
        &service.pid().to_string(),
        "-method",
        "Books::Reconcile",
        "-output",
        output,
    ]);
    let _ = holder.kill();
    let _ = holder.wait();
    assert!(line.contains("no free hardware breakpoint"), "{line}");
    service.perf_map_path()
}

/// Runs `profcpu ARGS` expecting failure: exactly one `profcpu: error:` line, exit status 1. Returns the line.
fn one_line_error(args: &[&str]) -> String {
    let output = Command::new(PROFCPU).args(args).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(1), "{args:?}:\n{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{args:?} printed:\n{stderr}");
    assert!(lines[0].starts_with("profcpu: error: ") && !stderr.contains("panicked"), "{stderr}");
    lines[0].to_string()
}

/// `tests/data/probe/counted.c`, compiled into `dir` as `name`.
fn build_counted(dir: &Path, name: &str) -> PathBuf {
    let binary = dir.join(name);
    let out = Command::new("gcc")
        .args(["-O2", "-fno-omit-frame-pointer", "-pthread", "-o"])
        .arg(&binary)
        .arg(repo().join("tests/data/probe/counted.c"))
        .output()
        .unwrap_or_else(|e| panic!("cannot run gcc ({e}): install it with scripts/setup-deps.sh"));
    assert!(out.status.success(), "gcc failed: {}", String::from_utf8_lossy(&out.stderr));
    binary
}

/// A native function of a launched program, counted from its first instruction: on the main thread and on a thread
/// started later, 123,457 calls in all, each with its caller.
#[test]
fn counts_a_native_function_of_a_command_exactly() {
    let out = Scratch::new("probe-native");
    let program = build_counted(&out.path, "counted");
    let output = Command::new(PROFCPU)
        .args(["probe", "-method", "count_me", "-duration", "100", "-output"])
        .arg(out.join("runs"))
        .arg("--")
        .arg(&program)
        .args(["100000", "23457"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let probed = Probed::of(Finished { status: output.status, stdout, stderr });
    assert_eq!(probed.calls, [(123_457, "count_me".to_string())], "{}", probed.stderr);
    assert!(probed.stderr.contains("(the target exited)"), "{}", probed.stderr);
    let folded = support::profcpu::folded_map(&probed.file("folded_stacks.out"));
    let through = |path: &str| folded.iter().filter(|(s, _)| s.ends_with(path)).map(|(_, n)| n).sum::<u64>();
    assert_eq!(through("main;worker;count_me"), 100_000, "{folded:?}");
    assert_eq!(through("start_thread;worker;count_me"), 23_457, "{folded:?}");
    assert!(probed.metadata("probe_method_1_mechanism").starts_with("uprobe"));
    assert!(profcpu_uprobes().is_empty());
}

/// `profcpu offsets` prints the offset `perf probe` takes: a uprobe placed by Debian's perf at it counts every
/// call. A running probe stopped by SIGTERM writes every output and leaves no uprobe; refusals are one line.
#[test]
fn offsets_feed_perf_probe_and_sigterm_leaves_nothing_behind() {
    let out = Scratch::new("probe-offsets");
    let name = format!("counted{}", std::process::id());
    let program = build_counted(&out.path, &name);
    let mut waiting = Command::new(&program);
    waiting.args(["1000", "0", "wait"]).stdin(Stdio::piped());
    let mut app = RunningApp::start(waiting, Duration::from_secs(10));
    let pid = app.pid().to_string();

    let listing = Command::new(PROFCPU).args(["offsets", "-pid", &pid, "-image", &name]).output().unwrap();
    assert!(listing.status.success(), "{}", String::from_utf8_lossy(&listing.stderr));
    let listing = String::from_utf8_lossy(&listing.stdout).into_owned();
    let line = listing.lines().find(|l| l.ends_with(" count_me")).unwrap_or_else(|| panic!("{listing}"));
    let mut words = line.split(' ');
    let (offset, image) = (words.next().unwrap().to_string(), words.next().unwrap().to_string());
    assert_eq!(Path::new(&image), program, "{line}");
    // perf's own uprobe at that offset, on a fresh run of the program.
    let added = support::perf::perf(&["probe", "-q", "-x", &image, "--add", &offset]);
    assert!(added.status.success(), "perf probe: {}", String::from_utf8_lossy(&added.stderr));
    let event = format!("probe_{name}:abs_{}", offset.trim_start_matches("0x"));
    let counted = support::perf::perf(&["stat", "-x,", "-e", &event, "--", program.to_str().unwrap(), "777", "0"]);
    let _ = support::perf::perf(&["probe", "-q", "-d", &format!("probe_{name}:*")]);
    let stat = String::from_utf8_lossy(&counted.stderr);
    assert!(stat.lines().any(|l| l.starts_with("777,") && l.contains(&event)), "perf stat:\n{stat}");

    // Refusals: a name that matches nothing (with the closest names), a process that is gone.
    let runs = out.join("runs");
    let runs_arg = runs.to_str().unwrap();
    let line = one_line_error(&["probe", "-pid", &pid, "-method", "count_mee", "-output", runs_arg]);
    assert!(line.contains("matches no method") && line.contains("'count_me'"), "{line}");
    let line = one_line_error(&["probe", "-pid", "999999999", "-method", "count_me", "-output", runs_arg]);
    assert!(line.contains("no process with PID 999999999"), "{line}");
    assert!(!runs.exists() || std::fs::read_dir(&runs).unwrap().next().is_none(), "a refused probe left a folder");
    // Without tracefs (a container that does not mount it) there are no uprobes: one line that says so.
    let script =
        "for d in /sys/kernel/tracing /sys/kernel/debug/tracing /sys/kernel/debug; do umount -l $d 2>/dev/null; \
                  done; exec \"$@\"";
    let hidden = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", script, "sh", PROFCPU])
        .args(["probe", "-pid", &pid, "-method", "count_me", "-output", runs_arg])
        .output()
        .expect("cannot run unshare");
    let stderr = String::from_utf8_lossy(&hidden.stderr);
    assert_eq!(hidden.status.code(), Some(1), "{stderr}");
    assert!(stderr.trim().lines().count() == 1 && stderr.contains("no uprobes here"), "{stderr}");

    // SIGTERM while probing: outputs complete, uprobes gone, the program counted up to then.
    let probe = start_probe(&["-pid", &pid, "-method", "count_me", "-duration", "100", "-output", runs_arg]);
    assert_eq!(profcpu_uprobes().len(), 1, "{:?}", profcpu_uprobes());
    writeln!(app.child.stdin.as_mut().unwrap(), "go").unwrap();
    app.wait_for_line("called 1000", Duration::from_secs(30));
    probe.signal(libc::SIGTERM);
    let probed = Probed::of(probe.finish(LIMIT));
    assert!(probed.stderr.contains("(stopped by SIGTERM)"), "{}", probed.stderr);
    assert_eq!(probed.calls, [(1000, "count_me".to_string())]);
    for file in ["perf.data", "folded_stacks.out", "flamegraph.svg", "metadata.txt", "prof.tar.gz"] {
        assert!(probed.run_dir.join(file).is_file(), "no {file}");
    }
    assert!(profcpu_uprobes().is_empty(), "{:?}", profcpu_uprobes());
}
