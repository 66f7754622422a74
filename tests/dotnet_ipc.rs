//! `record::dotnet_ipc` against real .NET runtimes (8.0.4 and Core 3.1 from `scripts/dotnet-runtime.sh`), on the
//! host and in a "container" (own PID + mount namespace, private tmpfs on /tmp), and against hostile or broken
//! peers served by the test itself: a socket that answers garbage, never answers or hangs up; symlinks planted at
//! the socket's name or over the target's /tmp; a regular file or another user's socket in its place. Then the same
//! through the `profcpu` binary, as users meet it: `collect` on a runtime that cannot switch perf maps on, on broken
//! peers, on a launched command, and `-all` over a PID namespace holding two .NET 8 processes.

mod support;

use profcpu::record::dotnet_ipc::{AlreadyOn, DotnetRuntime, IpcError, Lookup, PerfMapType};
use profcpu::symbolize::parsers::JitDump;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use support::dotnet::Dotnet;
use support::profcpu::{collect, finish_collect, Background, Collected};
use support::running_app::remove_runtime_files;
use support::scratch::{run_dir, Scratch};
use support::webapi::OUTPUT_FILES;

const START_TIMEOUT: Duration = Duration::from_secs(60);

/// The test program (`tests/data/dotnet_ipc/App.cs`): each stdin line names a method to run, and `done <line>`
/// answers once it returned, so the test knows exactly which methods have been JIT-compiled at each step.
const APP_SOURCE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/dotnet_ipc/App.cs");

/// The directory holding `dotnet` for version "8" or "3.1".
fn runtime_dir(version: &str) -> PathBuf {
    Dotnet::of(version).runtime_dir()
}

/// App.dll compiled by mcs, with a runtimeconfig for `version`, outside /tmp (a namespaced app has its own /tmp).
fn app_dll(version: &str) -> PathBuf {
    Dotnet::of(version).build_app(Path::new(APP_SOURCE))
}

/// SIGKILL to a process group we started and to the given processes.
fn kill_all(group: u32, pids: &[u32]) {
    // SAFETY: kill(2) on processes this test started; no memory is involved.
    unsafe {
        libc::kill(-(group as i32), libc::SIGKILL);
        for &pid in pids {
            libc::kill(pid as i32, libc::SIGKILL);
        }
    }
}

fn first_child_of(pid: u32) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
        if let Some(child) = children.split_whitespace().next() {
            return child.parse().unwrap();
        }
        assert!(Instant::now() < deadline, "unshare (PID {pid}) started no child");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn nstgid(host_pid: u32) -> u32 {
    let status = std::fs::read_to_string(format!("/proc/{host_pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("NStgid:")).unwrap();
    line.split_whitespace().last().unwrap().parse().unwrap()
}

/// The test program on a real runtime, driven through its stdin. Killed (with its namespace) when dropped.
struct DotnetApp {
    leader: Child,
    host_pid: u32,
    nspid: u32,
    stdin: ChildStdin,
    lines: Receiver<String>,
    in_container: bool,
    started: Instant,
}

impl DotnetApp {
    fn start(version: &str, in_container: bool, env: &[(&str, &str)]) -> DotnetApp {
        let started = Instant::now();
        let dotnet = runtime_dir(version).join("dotnet");
        let dll = app_dll(version);
        let mut cmd =
            if in_container {
                let mut c = Command::new("unshare");
                c.args(["--pid", "--fork", "--kill-child", "--mount", "--mount-proc", "--propagation", "private"])
                    .args(["sh", "-c", "mount -t tmpfs tmpfs /tmp && exec \"$0\" \"$@\""]);
                c.arg(&dotnet);
                c
            } else {
                Command::new(&dotnet)
            };
        cmd.arg(&dll)
            .env_remove("DOTNET_PerfMapEnabled")
            .env_remove("COMPlus_PerfMapEnabled")
            .env("DOTNET_SYSTEM_GLOBALIZATION_INVARIANT", "1")
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .process_group(0);
        let mut leader = cmd.spawn().unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
        let stdin = leader.stdin.take().unwrap();
        let stdout = BufReader::new(leader.stdout.take().unwrap());
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in stdout.lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let leader_pid = leader.id();
        let host_pid = if in_container { first_child_of(leader_pid) } else { leader_pid };
        let mut app = DotnetApp { leader, host_pid, nspid: 0, stdin, lines, in_container, started };
        let ready = app.wait_for("ready ");
        app.nspid = ready.trim_start_matches("ready ").trim().parse().unwrap();
        assert_eq!(app.nspid, nstgid(host_pid), "the app's own PID differs from NStgid of host PID {host_pid}");
        if in_container {
            assert_eq!(app.nspid, 1, "the namespaced app is not PID 1 in its PID namespace");
        }
        app
    }

    fn wait_for(&mut self, prefix: &str) -> String {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            match self.lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(line) if line.starts_with(prefix) => return line,
                Ok(_) => {}
                Err(RecvTimeoutError::Timeout) => panic!("the app printed no {prefix:?} within {START_TIMEOUT:?}"),
                Err(RecvTimeoutError::Disconnected) => {
                    panic!("the app exited ({:?}) before printing {prefix:?}", self.leader.try_wait())
                }
            }
        }
    }

    /// Runs one of the app's methods and waits until it returned.
    fn call(&mut self, what: &str) {
        self.send(what);
        self.wait_for(&format!("done {what} "));
    }

    /// Starts one of the app's methods without waiting for it.
    fn send(&mut self, what: &str) {
        writeln!(self.stdin, "{what}").unwrap();
        self.stdin.flush().unwrap();
    }

    /// The host path of a file in the app's /tmp (through its root: a container's /tmp is private).
    fn tmp_file(&self, name: &str) -> PathBuf {
        PathBuf::from(format!("/proc/{}/root/tmp/{name}", self.host_pid))
    }
}

impl Drop for DotnetApp {
    fn drop(&mut self) {
        kill_all(self.leader.id(), &[self.host_pid]);
        let _ = self.leader.wait();
        if !self.in_container {
            remove_runtime_files(self.host_pid);
        }
    }
}

fn find(host_pid: u32) -> DotnetRuntime {
    match DotnetRuntime::find(host_pid).expect("find failed") {
        Lookup::Found(runtime) => runtime,
        other => panic!("no runtime found for PID {host_pid}: {other:?}"),
    }
}

/// Names in a perf map (`START SIZE NAME` lines).
fn perf_map_names(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    text.lines().filter_map(|l| l.splitn(3, ' ').nth(2)).map(str::to_string).collect()
}

fn jitdump_names(path: &Path) -> Vec<String> {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let dump = JitDump::parse(&bytes);
    assert!(dump.warnings.is_empty(), "{}: {:?}", path.display(), dump.warnings);
    dump.codes().iter().map(|c| c.name.to_string()).collect()
}

fn count_named(names: &[String], needle: &str) -> usize {
    names.iter().filter(|n| n.contains(needle)).count()
}

/// Enable on a runtime that never had perf maps: methods compiled before the call are named (R2R ones in the
/// jitdump too), disable stops all writing, and the cleanup removes exactly the three files.
fn enable_disable_cleanup(app: &mut DotnetApp) {
    app.call("before");
    let runtime = find(app.host_pid);
    assert_eq!(runtime.version(), Some("8.0.4"));
    // Its socket is named by its PID in its own namespace.
    let socket = runtime.socket_path();
    assert!(socket.starts_with(&format!("/tmp/dotnet-diagnostic-{}-", app.nspid)), "{socket}");
    assert_eq!(runtime.perf_maps_already_on().unwrap(), None);
    let (map, info, dump) = (
        app.tmp_file(&format!("perf-{}.map", app.nspid)),
        app.tmp_file(&format!("perfinfo-{}.map", app.nspid)),
        app.tmp_file(&format!("jit-{}.dump", app.nspid)),
    );
    assert!(!map.exists() && !dump.exists(), "perf map files exist before enabling");

    let started = Instant::now();
    let enabled = runtime.enable_perf_map(PerfMapType::All).unwrap_or_else(|e| panic!("enable failed: {e}"));
    eprintln!("EnablePerfMap(ALL) answered in {:?}", started.elapsed());
    let expected_files =
        [format!("perf-{}.map", app.nspid), format!("perfinfo-{}.map", app.nspid), format!("jit-{}.dump", app.nspid)];
    assert_eq!(enabled.created_files(), expected_files);
    assert!(info.is_file());

    let map_names = perf_map_names(&map);
    let dump_names = jitdump_names(&dump);
    assert_eq!(count_named(&map_names, "App::BeforeEnable"), 1, "perf map: {map_names:?}");
    assert_eq!(count_named(&dump_names, "App::BeforeEnable"), 1);
    let prejit_in_dump = count_named(&dump_names, "[PreJIT]");
    eprintln!(
        "after enable: perf map {} lines ({} [PreJIT]), jitdump {} records ({prejit_in_dump} [PreJIT])",
        map_names.len(),
        count_named(&map_names, "[PreJIT]"),
        dump_names.len()
    );
    assert!(prejit_in_dump > 10, "R2R methods restored before enabling are missing from the jitdump");

    app.call("while");
    assert_eq!(count_named(&perf_map_names(&map), "App::WhileEnabled"), 1);
    assert_eq!(count_named(&jitdump_names(&dump), "App::WhileEnabled"), 1);

    runtime.disable_perf_map().unwrap_or_else(|e| panic!("disable failed: {e}"));
    let sizes = |paths: &[&PathBuf]| paths.iter().map(|p| std::fs::metadata(p).unwrap().len()).collect::<Vec<_>>();
    let after_disable = sizes(&[&map, &dump]);
    app.call("after");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(sizes(&[&map, &dump]), after_disable, "the runtime still writes after DisablePerfMap");
    assert_eq!(count_named(&perf_map_names(&map), "App::AfterDisable"), 0);
    assert_eq!(count_named(&jitdump_names(&dump), "App::AfterDisable"), 0);

    let removed = enabled.remove_created_files().unwrap();
    assert_eq!(removed, expected_files);
    assert!(!map.exists() && !info.exists() && !dump.exists(), "cleanup left files behind");
    // The runtime lives on and still answers.
    app.call("before");
    runtime.disable_perf_map().unwrap();
}

#[test]
fn enable_names_earlier_methods_and_disable_stops_writing_on_the_host() {
    let mut app = DotnetApp::start("8", false, &[]);
    enable_disable_cleanup(&mut app);
}

#[test]
fn container_app_is_reached_through_its_root() {
    let host_map = PathBuf::from("/tmp/perf-1.map");
    let host_map_before = std::fs::metadata(&host_map).ok().map(|m| (m.len(), m.modified().unwrap()));
    let mut app = DotnetApp::start("8", true, &[]);
    let runtime = find(app.host_pid);
    assert!(runtime.socket_path().starts_with("/tmp/dotnet-diagnostic-1-"), "{}", runtime.socket_path());
    // The container's /tmp is its own: the socket is not visible in the host's.
    let socket_name = runtime.socket_path().trim_start_matches("/tmp/").to_string();
    assert!(!Path::new("/tmp").join(&socket_name).exists());
    enable_disable_cleanup(&mut app);
    let host_map_after = std::fs::metadata(&host_map).ok().map(|m| (m.len(), m.modified().unwrap()));
    assert_eq!(host_map_before, host_map_after, "enabling in the container touched the host's /tmp/perf-1.map");
}

#[test]
fn app_with_perf_maps_on_keeps_its_files() {
    let mut app = DotnetApp::start("8", false, &[("DOTNET_PerfMapEnabled", "1")]);
    app.call("before");
    let runtime = find(app.host_pid);
    assert_eq!(runtime.perf_maps_already_on().unwrap(), Some(AlreadyOn::Setting("DOTNET_PerfMapEnabled=1".into())));
    let map = app.tmp_file(&format!("perf-{}.map", app.nspid));
    let dump = app.tmp_file(&format!("jit-{}.dump", app.nspid));
    assert!(map.is_file() && dump.is_file());
    // A caller that enables anyway owns none of the files, so its cleanup removes nothing.
    let enabled = runtime.enable_perf_map(PerfMapType::All).unwrap();
    assert!(enabled.created_files().is_empty(), "{:?}", enabled.created_files());
    assert!(enabled.remove_created_files().unwrap().is_empty());
    assert!(map.is_file() && dump.is_file(), "the app's own perf map files were removed");
    app.call("while");
    assert_eq!(count_named(&perf_map_names(&map), "App::WhileEnabled"), 1);
}

#[test]
fn diagnostics_switched_off_is_reported() {
    let app = DotnetApp::start("8", false, &[("DOTNET_EnableDiagnostics", "0")]);
    match DotnetRuntime::find(app.host_pid).unwrap() {
        Lookup::DiagnosticsDisabled { setting, .. } => assert_eq!(setting, "DOTNET_EnableDiagnostics=0"),
        other => panic!("expected DiagnosticsDisabled, got {other:?}"),
    }
}

#[test]
fn dotnet_core_3_1_is_told_to_restart() {
    let mut app = DotnetApp::start("3.1", false, &[]);
    app.call("before");
    let runtime = find(app.host_pid);
    assert_eq!(runtime.version(), Some("3.1.23"));
    let err = runtime.enable_perf_map(PerfMapType::All).expect_err("3.1 cannot enable perf maps");
    assert!(matches!(err, IpcError::Unsupported { .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains("COMPlus_PerfMapEnabled=1") && message.contains("3.1.23"), "{message}");
    assert!(!support::written_since(&app.tmp_file(&format!("perf-{}.map", app.nspid)), app.started));
    assert!(matches!(runtime.disable_perf_map(), Err(IpcError::Unsupported { .. })));
    app.call("while");
}

// ---- Hostile and broken peers: a fake target whose root and /tmp the test controls. ----

// Both fake targets say they are ready on stdout once exec is done: only then are their environment and root those a
// lookup must see.
const READY_THEN_PAUSE: &str = "#include <unistd.h>\nint main(void) { write(1, \"r\", 1); for (;;) pause(); }\n";
const READY_THEN_SPIN: &str =
    "#include <unistd.h>\nint main(void) { volatile unsigned long n = 0; write(1, \"r\", 1); for (;;) n++; }\n";

/// A static `pause` program, so a chrooted process needs nothing else from its root.
fn pause_binary() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let dir = run_dir("dotnet-ipc").join("pause");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("pause.c"), READY_THEN_PAUSE).unwrap();
        let out = Command::new("gcc")
            .args(["-static", "-O2", "-o"])
            .arg(dir.join("pause"))
            .arg(dir.join("pause.c"))
            .output()
            .expect("cannot run gcc (scripts/setup-deps.sh installs it)");
        assert!(out.status.success(), "gcc -static failed:\n{}", String::from_utf8_lossy(&out.stderr));
        dir.join("pause")
    })
}

/// A static program that burns CPU until killed, so that a collection of it has samples.
fn spin_binary() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let dir = run_dir("dotnet-ipc").join("spin");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("spin.c"), READY_THEN_SPIN).unwrap();
        let out = Command::new("gcc")
            .args(["-static", "-O1", "-o"])
            .arg(dir.join("spin"))
            .arg(dir.join("spin.c"))
            .output()
            .expect("cannot run gcc (scripts/setup-deps.sh installs it)");
        assert!(out.status.success(), "gcc -static failed:\n{}", String::from_utf8_lossy(&out.stderr));
        dir.join("spin")
    })
}

/// A process chrooted into a directory of the test's: its root (`/proc/PID/root`) is `root`.
struct FakeTarget {
    child: Child,
    base: PathBuf,
    root: PathBuf,
}

impl FakeTarget {
    fn new(name: &str) -> FakeTarget {
        FakeTarget::with_env(name, &[])
    }

    fn with_env(name: &str, env: &[(&str, &str)]) -> FakeTarget {
        FakeTarget::running(name, pause_binary(), env)
    }

    /// A fake target that keeps a CPU busy.
    fn spinning(name: &str) -> FakeTarget {
        FakeTarget::running(name, spin_binary(), &[])
    }

    fn running(name: &str, program: &Path, env: &[(&str, &str)]) -> FakeTarget {
        let base = run_dir("dotnet-ipc").join(format!("fake-{name}"));
        let _ = std::fs::remove_dir_all(&base);
        let root = base.join("root");
        std::fs::create_dir_all(root.join("tmp")).unwrap();
        std::fs::copy(program, root.join("pause")).unwrap();
        let child = Command::new("chroot")
            .arg(&root)
            .arg("/pause")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("cannot run chroot");
        let mut target = FakeTarget { child, base, root };
        // Its root changes before exec, and while exec runs /proc/PID/environ can read empty: wait for the program's
        // own word that it runs.
        let mut ready = [0u8; 1];
        let stdout = target.child.stdout.as_mut().unwrap();
        stdout
            .read_exact(&mut ready)
            .unwrap_or_else(|e| panic!("the chrooted {} did not start: {e}", program.display()));
        target
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn start_time(&self) -> u64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).unwrap();
        stat.rsplit_once(')').unwrap().1.split_whitespace().nth(19).unwrap().parse().unwrap()
    }

    /// The socket name the runtime would use, with `key` (the start time for a live runtime).
    fn socket_name(&self, key: u64) -> String {
        format!("dotnet-diagnostic-{}-{key}-socket", self.pid())
    }
}

impl Drop for FakeTarget {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

#[derive(Clone, Copy)]
enum Behaviour {
    /// Answers every request with an OK reply, like the runtime.
    Runtime,
    /// Answers with an HTTP error, like a docker socket would.
    Garbage,
    /// Accepts and reads but never answers.
    Silent,
    /// Accepts and hangs up at once.
    HangUp,
}

/// A Unix socket server on a thread; counts connections; stopped and removed when dropped.
struct Peer {
    path: PathBuf,
    accepted: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Peer {
    fn serve(path: &Path, behaviour: Behaviour) -> Peer {
        Peer::serve_moved(path, path, behaviour)
    }

    /// Binds at `bind_path` and then renames the socket to `path` (which may be longer than `sun_path` allows).
    fn serve_moved(bind_path: &Path, path: &Path, behaviour: Behaviour) -> Peer {
        let _ = std::fs::remove_file(bind_path);
        let listener =
            UnixListener::bind(bind_path).unwrap_or_else(|e| panic!("cannot bind {}: {e}", bind_path.display()));
        if bind_path != path {
            std::fs::rename(bind_path, path).unwrap();
        }
        listener.set_nonblocking(true).unwrap();
        let (accepted, stop) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicBool::new(false)));
        let (accepted2, stop2) = (accepted.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut held = Vec::new();
            while !stop2.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        accepted2.fetch_add(1, Ordering::SeqCst);
                        stream.set_nonblocking(false).unwrap();
                        if let Some(stream) = answer(stream, behaviour) {
                            held.push(stream);
                        }
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        Peer { path: path.to_path_buf(), accepted, stop, thread: Some(thread) }
    }

    fn connections(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

/// Serves one connection; returns it when it must stay open.
fn answer(mut stream: UnixStream, behaviour: Behaviour) -> Option<UnixStream> {
    if let Behaviour::HangUp = behaviour {
        return None;
    }
    stream.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut header = [0u8; 20];
    if stream.read_exact(&mut header).is_err() {
        return None;
    }
    let size = u16::from_le_bytes([header[14], header[15]]) as usize;
    let mut payload = vec![0u8; size.saturating_sub(20)];
    let _ = stream.read_exact(&mut payload);
    match behaviour {
        Behaviour::Runtime => {
            let mut reply = b"DOTNET_IPC_V1\0".to_vec();
            reply.extend_from_slice(&[24, 0, 0xFF, 0x00, 0, 0, 0, 0, 0, 0]);
            let _ = stream.write_all(&reply);
            None
        }
        Behaviour::Garbage => {
            let _ = stream.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
            None
        }
        Behaviour::Silent => Some(stream),
        Behaviour::HangUp => None,
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

fn enable_on(pid: u32) -> Result<(), IpcError> {
    find(pid).enable_perf_map(PerfMapType::PerfMap).map(|_| ())
}

#[test]
fn peers_that_are_not_runtimes_give_clear_errors_quickly() {
    // What `collect` and `trap` wait for each reply.
    let timeout = profcpu::record::dotnet_ipc::DEFAULT_TIMEOUT;
    for (behaviour, want) in [
        (Behaviour::Garbage, "does not start with DOTNET_IPC_V1"),
        (Behaviour::Silent, "did not answer within 3.0 s"),
        (Behaviour::HangUp, "closed the connection"),
    ] {
        let target = FakeTarget::new("peer");
        let peer = Peer::serve(&target.root.join("tmp").join(target.socket_name(target.start_time())), behaviour);
        let started = Instant::now();
        let err = enable_on(target.pid()).expect_err("a fake peer cannot enable perf maps");
        let elapsed = started.elapsed();
        let message = err.to_string();
        assert!(
            message.contains(want) || (want == "closed the connection" && message.contains("dropped")),
            "{message}"
        );
        assert!(message.contains(&format!("/tmp/{}", target.socket_name(target.start_time()))), "{message}");
        assert!(elapsed < timeout + Duration::from_millis(900), "took {elapsed:?} with a {timeout:?} limit");
        assert_eq!(peer.connections(), 1);
    }
}

#[test]
fn a_well_behaved_peer_and_stale_sockets() {
    let target = FakeTarget::new("stale");
    // A stale socket file (nobody listens) under the live start-time key and a live one under an older key: the
    // stale one is tried first and skipped.
    let stale = target.root.join("tmp").join(target.socket_name(target.start_time()));
    drop(UnixListener::bind(&stale).unwrap());
    let live = Peer::serve(&target.root.join("tmp").join(target.socket_name(1)), Behaviour::Runtime);
    let runtime = find(target.pid());
    assert_eq!(runtime.socket_path(), format!("/tmp/{}", target.socket_name(target.start_time())));
    let enabled = runtime.enable_perf_map(PerfMapType::All).unwrap();
    assert!(enabled.created_files().is_empty(), "a fake runtime creates no files");
    runtime.disable_perf_map().unwrap();
    assert_eq!(live.connections(), 2);
    // A map file in the target's /tmp counts as "already on".
    assert_eq!(runtime.perf_maps_already_on().unwrap(), None);
    std::fs::write(target.root.join(format!("tmp/perf-{}.map", target.pid())), "").unwrap();
    assert_eq!(
        runtime.perf_maps_already_on().unwrap(),
        Some(AlreadyOn::FileExists(format!("/tmp/perf-{}.map", target.pid())))
    );
}

#[test]
fn socket_in_a_long_tmpdir_beyond_sun_path_is_reached() {
    // The runtime puts its socket in $TMPDIR; seen from the host through /proc/PID/root, this one's path is longer
    // than a sockaddr_un can hold.
    let tmpdir = format!("/tmp/{}", "x".repeat(120));
    let target = FakeTarget::with_env("long", &[("TMPDIR", &tmpdir)]);
    let name = target.socket_name(target.start_time());
    std::fs::create_dir_all(target.root.join(tmpdir.trim_start_matches('/'))).unwrap();
    let path = target.root.join(tmpdir.trim_start_matches('/')).join(&name);
    let host_view = format!("/proc/{}/root{tmpdir}/{name}", target.pid());
    assert!(host_view.len() > 108, "{host_view}");
    assert!(UnixStream::connect(&host_view).is_err(), "a plain connect should not fit the path");
    let peer = Peer::serve_moved(&target.base.join("bind.sock"), &path, Behaviour::Runtime);
    let runtime = find(target.pid());
    assert_eq!(runtime.socket_path(), format!("{tmpdir}/{name}"));
    runtime.enable_perf_map(PerfMapType::PerfMap).unwrap();
    assert_eq!(peer.connections(), 1);
}

#[test]
fn symlinks_at_the_socket_name_are_never_followed() {
    let target = FakeTarget::new("link");
    let name = target.socket_name(target.start_time());
    // A host socket outside the target's root, and one inside it (as a bind-mounted /run/docker.sock would be).
    let outside = Peer::serve(&target.base.join("host.sock"), Behaviour::Runtime);
    std::fs::create_dir_all(target.root.join("run")).unwrap();
    let inside = Peer::serve(&target.root.join("run/docker.sock"), Behaviour::Runtime);
    for link_target in [outside.path.clone(), PathBuf::from("/run/docker.sock"), PathBuf::from("../run/docker.sock")] {
        let link = target.root.join("tmp").join(&name);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&link_target, &link).unwrap();
        let err = enable_on(target.pid()).expect_err("a symlink must be refused");
        assert!(matches!(err, IpcError::Unsafe { .. }), "{err:?}");
        assert!(err.to_string().contains("symlink"), "{err}");
    }
    assert_eq!(outside.connections() + inside.connections(), 0, "connected through a planted symlink");
}

#[test]
fn a_symlinked_tmp_cannot_lead_out_of_the_root() {
    let target = FakeTarget::new("tmplink");
    // The target's /tmp points (absolutely) at a host directory that holds a socket with the right name. Walked
    // naively from the host, /proc/PID/root/tmp leads there; resolved inside the root it leads nowhere.
    let host_dir = target.base.join("host-tmp");
    std::fs::create_dir_all(&host_dir).unwrap();
    let host = Peer::serve(&host_dir.join(target.socket_name(target.start_time())), Behaviour::Runtime);
    std::fs::remove_dir(target.root.join("tmp")).unwrap();
    std::os::unix::fs::symlink(&host_dir, target.root.join("tmp")).unwrap();
    let naive = PathBuf::from(format!("/proc/{}/root/tmp/{}", target.pid(), target.socket_name(target.start_time())));
    assert!(naive.exists(), "the trap is not armed: {} does not reach the host socket", naive.display());

    match DotnetRuntime::find(target.pid()).unwrap() {
        Lookup::NotDotnet => {}
        other => panic!("found a socket outside the target's root: {other:?}"),
    }
    assert_eq!(host.connections(), 0);
}

#[test]
fn files_and_foreign_sockets_at_the_name_are_refused() {
    let target = FakeTarget::new("foreign");
    let path = target.root.join("tmp").join(target.socket_name(target.start_time()));
    std::fs::write(&path, b"not a socket").unwrap();
    let err = enable_on(target.pid()).unwrap_err();
    assert!(err.to_string().contains("regular file"), "{err}");
    std::fs::remove_file(&path).unwrap();

    let peer = Peer::serve(&path, Behaviour::Runtime);
    std::os::unix::fs::chown(&path, Some(4242), None).unwrap();
    let err = enable_on(target.pid()).unwrap_err();
    assert!(err.to_string().contains("uid 4242"), "{err}");
    assert_eq!(peer.connections(), 0);
}

#[test]
fn a_process_without_runtime_or_socket_is_not_dotnet() {
    let target = FakeTarget::new("plain");
    assert!(matches!(DotnetRuntime::find(target.pid()).unwrap(), Lookup::NotDotnet));
    assert!(DotnetRuntime::find(u32::MAX - 1).is_err());
}

// ---- Through the profcpu binary. ----

/// The lines profcpu printed as warnings.
fn warnings(c: &Collected) -> Vec<&str> {
    c.stderr.lines().filter(|l| l.starts_with("profcpu: warning:")).collect()
}

/// The value of `key` in the run's metadata.txt.
fn metadata(c: &Collected, key: &str) -> String {
    let text = std::fs::read_to_string(c.run_dir.join("metadata.txt")).unwrap();
    text.lines().find_map(|l| l.strip_prefix(&format!("{key}: "))).map(String::from).unwrap_or_default()
}

fn assert_outputs_complete(c: &Collected) {
    for name in OUTPUT_FILES {
        let len = std::fs::metadata(c.run_dir.join(name)).map(|m| m.len()).unwrap_or(0);
        assert!(len > 0, "expected a non-empty {name} in {}; profcpu said:\n{}", c.run_dir.display(), c.stderr);
    }
}

fn collect_for(pid: u32, seconds: &str, work: &Scratch) -> Collected {
    collect(&["-pid", &pid.to_string(), "-duration", seconds, "-output", work.join("out").to_str().unwrap()])
}

/// What is listening at the runtime's socket name is not a runtime: one line naming the socket and what went
/// wrong, and the collection completes (for a peer that never answers, once the IPC time limit has passed).
#[test]
fn collect_past_a_socket_that_is_not_a_runtime_says_so_in_one_line() {
    for (peer_kind, behaviour, want) in [
        ("garbage", Behaviour::Garbage, "does not start with DOTNET_IPC_V1"),
        ("silent", Behaviour::Silent, "did not answer within 3.0 s"),
        ("hang-up", Behaviour::HangUp, "connection"),
    ] {
        let work = Scratch::new("ipc-collect-peer");
        let target = FakeTarget::spinning("cp");
        let socket = target.socket_name(target.start_time());
        let peer = Peer::serve(&target.root.join("tmp").join(&socket), behaviour);
        let started = Instant::now();
        let c = collect_for(target.pid(), "1", &work);
        let elapsed = started.elapsed();
        let lines = warnings(&c);
        assert!(
            lines.len() == 1 && lines[0].contains(want) && lines[0].contains(&socket),
            "expected one warning naming {socket} and {want:?}, got:\n{}",
            c.stderr
        );
        assert_outputs_complete(&c);
        assert!(metadata(&c, "jit_names").starts_with(&format!("PID {}: none: ", target.pid())), "{}", c.stderr);
        assert_eq!(peer.connections(), 1, "expected one connection: no DisablePerfMap for what was never on");
        assert!(elapsed < Duration::from_secs(12), "collect took {elapsed:?}");
        eprintln!("{peer_kind} peer: collect took {elapsed:.1?}: {}", lines[0]);
    }
}

/// .NET Core 3.1 (no EnablePerfMap) and a .NET 8 app started with `DOTNET_EnableDiagnostics=0` (no socket): one
/// line each saying how to get names; nothing is written into their /tmp.
#[test]
fn collect_on_runtimes_that_cannot_switch_says_how_to_get_names() {
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], [&'a str; 2]);
    let cases: [Case; 2] = [
        ("3.1", &[], ["(3.1.23) cannot switch perf maps on while running", "COMPlus_PerfMapEnabled=1"]),
        ("8", &[("DOTNET_EnableDiagnostics", "0")], ["DOTNET_EnableDiagnostics=0", "DOTNET_PerfMapEnabled=1"]),
    ];
    for (version, env, want) in cases {
        let work = Scratch::new("ipc-collect-cannot");
        let mut app = DotnetApp::start(version, false, env);
        app.send("spin");
        let c = collect_for(app.host_pid, "1", &work);
        let lines = warnings(&c);
        assert!(
            lines.len() == 1 && want.iter().all(|w| lines[0].contains(w)),
            ".NET {version}: expected one warning with {want:?}, got:\n{}",
            c.stderr
        );
        assert_outputs_complete(&c);
        assert!(metadata(&c, "jit_names").contains(want[0]), "{}", metadata(&c, "jit_names"));
        for name in ["perf", "jit"] {
            let found = std::fs::read_dir(format!("/proc/{}/root/tmp", app.host_pid))
                .unwrap()
                .flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with(&format!("{name}-{}.", app.nspid)));
            assert!(!found, ".NET {version}: a {name} file appeared in the app's /tmp");
        }
    }
}

/// `collect -- dotnet App.dll`: the command gets DOTNET_PerfMapEnabled=1, its methods are named, and the files it
/// wrote because of that are gone after the run; with -no-ipc it gets nothing and writes nothing.
#[test]
fn a_launched_command_gets_the_variable_and_its_files_go_after_the_run() {
    let work = Scratch::new("ipc-command");
    let run = |extra: &[&str]| {
        let mut cmd = Command::new(support::PROFCPU);
        cmd.args(["collect", "-duration", "30", "-output", work.join("out").to_str().unwrap()])
            .args(extra)
            .arg("--")
            .arg(runtime_dir("8").join("dotnet"))
            .arg(app_dll("8"))
            .args(["spin", "1500"])
            .env("DOTNET_SYSTEM_GLOBALIZATION_INVARIANT", "1")
            .env_remove("DOTNET_PerfMapEnabled")
            .env_remove("COMPlus_PerfMapEnabled");
        finish_collect(cmd.output().unwrap())
    };
    let tmp_files = |pid: &str| {
        ["perf", "perfinfo", "jit"]
            .iter()
            .map(|kind| format!("/tmp/{kind}-{pid}.{}", if *kind == "jit" { "dump" } else { "map" }))
            .filter(|p| Path::new(p).exists())
            .collect::<Vec<_>>()
    };

    let c = run(&[]);
    let pid = metadata(&c, "pid");
    assert_eq!(
        metadata(&c, "jit_names"),
        format!("PID {pid}: DOTNET_PerfMapEnabled=1 set in its environment by profcpu")
    );
    assert!(warnings(&c).is_empty(), "{}", c.stderr);
    let saved = std::fs::read_to_string(c.run_dir.join(format!("symbols/perf-{pid}.map"))).unwrap_or_default();
    assert!(saved.contains("App::WhileEnabled"), "expected the command's perf map saved with App::WhileEnabled");
    let folded = std::fs::read_to_string(c.run_dir.join("folded_stacks.out")).unwrap();
    assert!(folded.contains("App::WhileEnabled"), "expected App::WhileEnabled named in the profile:\n{folded}");
    assert_eq!(tmp_files(&pid), Vec::<String>::new(), "the command's perf map files were left in /tmp");

    let c = run(&["-no-ipc"]);
    let pid = metadata(&c, "pid");
    assert_eq!(metadata(&c, "jit_names"), "left alone (-no-ipc)");
    let folded = std::fs::read_to_string(c.run_dir.join("folded_stacks.out")).unwrap();
    assert!(!folded.contains("App::WhileEnabled"), "-no-ipc: the command was named all the same");
    assert!(!c.run_dir.join(format!("symbols/perf-{pid}.map")).exists(), "-no-ipc: the command wrote a perf map");
}

/// `collect -all` in a PID namespace (so that it meets only the processes of this test) with two .NET 8 apps: the
/// one started without perf maps is switched on for the run and its files go; the one started with
/// `DOTNET_PerfMapEnabled=1` is left as it is, files and all. Both are named.
#[test]
fn collect_all_switches_on_every_dotnet_process_that_needs_it() {
    let work = Scratch::new("ipc-all");
    let script = r#"mount -t tmpfs tmpfs /tmp || exit 2
DOTNET_SYSTEM_GLOBALIZATION_INVARIANT=1 "$DOTNET" "$DLL" spin 30000 >/dev/null & plain=$!
DOTNET_SYSTEM_GLOBALIZATION_INVARIANT=1 DOTNET_PerfMapEnabled=1 "$DOTNET" "$DLL" spin 30000 >/dev/null & on=$!
i=0
until ls /tmp/dotnet-diagnostic-$plain-*-socket /tmp/dotnet-diagnostic-$on-*-socket >/dev/null 2>&1; do
    i=$((i + 1)); [ $i -gt 600 ] && exit 3; sleep 0.1
done
sleep 0.5
echo "pids: $plain $on" >&2
"$PROFCPU" collect -all -duration 1.5 -output "$OUT" || exit 4
echo "left: $(ls /tmp | tr '
' ' ')" >&2
kill $plain $on"#;
    let out = Command::new("unshare")
        .args(["--pid", "--fork", "--kill-child", "--mount", "--mount-proc", "--propagation", "private"])
        .args(["sh", "-c", script])
        .env("DOTNET", runtime_dir("8").join("dotnet"))
        .env("DLL", app_dll("8"))
        .env("PROFCPU", support::PROFCPU)
        .env("OUT", work.join("out"))
        .env_remove("DOTNET_PerfMapEnabled")
        .env_remove("COMPlus_PerfMapEnabled")
        .output()
        .unwrap();
    let c = finish_collect(out);
    let pids: Vec<String> = c
        .stderr
        .lines()
        .find_map(|l| l.strip_prefix("pids: "))
        .unwrap_or_else(|| panic!("{}", c.stderr))
        .split_whitespace()
        .map(String::from)
        .collect();
    let (plain, on) = (&pids[0], &pids[1]);
    let left = c.stderr.lines().find_map(|l| l.strip_prefix("left: ")).unwrap_or_default().to_string();
    let jit_names = metadata(&c, "jit_names");
    for want in [
        format!("PID {plain}: perf map switched on over the .NET diagnostics IPC for the run, off again after"),
        format!("PID {on}: perf map on already (its environment has DOTNET_PerfMapEnabled=1)"),
    ] {
        assert!(jit_names.contains(&want), "expected {want:?} in jit_names: {jit_names}\n{}", c.stderr);
    }
    for name in [format!("perf-{on}.map"), format!("perfinfo-{on}.map"), format!("jit-{on}.dump")] {
        assert!(left.split(' ').any(|f| f == name), "expected the app with perf maps on to keep {name}: {left}");
    }
    for name in [format!("perf-{plain}.map"), format!("perfinfo-{plain}.map"), format!("jit-{plain}.dump")] {
        assert!(!left.split(' ').any(|f| f == name), "expected {name} of the switched-on app removed: {left}");
    }
    let script = std::fs::read_to_string(c.run_dir.join("perf_script.out")).unwrap();
    for pid in [plain, on] {
        let named = script.split("\n\n").any(|s| s.contains(&format!(" {pid}/")) && s.contains("App::WhileEnabled"));
        assert!(named, "expected samples of PID {pid} named App::WhileEnabled\n{}", c.stderr);
    }
}

/// A collection that ends early still switches the perf map off and removes the files: stopped by SIGTERM (outputs
/// complete), by two SIGINTs (the second ends it once perf.data and symbols/ are complete), or by the app's own exit.
/// Afterwards a method the app compiles is written nowhere, not even into the jitdump the runtime keeps open.
#[test]
fn runs_cut_short_switch_the_perf_map_off_and_leave_no_files() {
    for (case, signals, kill_app) in [
        ("SIGTERM", &[libc::SIGTERM][..], false),
        ("two SIGINTs", &[libc::SIGINT, libc::SIGINT], false),
        ("app exit", &[], true),
    ] {
        let work = Scratch::new("ipc-cut-short");
        let mut app = DotnetApp::start("8", false, &[]);
        app.call("before");
        app.send("spin");
        let out = work.join("out");
        let mut run = Background::start(&[
            "collect",
            "-pid",
            &app.host_pid.to_string(),
            "-duration",
            "60",
            "-output",
            out.to_str().unwrap(),
        ]);
        let map = app.tmp_file(&format!("perf-{}.map", app.nspid));
        let deadline = Instant::now() + Duration::from_secs(20);
        while !map.exists() {
            assert!(Instant::now() < deadline, "{case}: the perf map was never switched on");
            std::thread::sleep(Duration::from_millis(50));
        }
        std::thread::sleep(Duration::from_millis(500));
        for (i, &signal) in signals.iter().enumerate() {
            if i > 0 {
                // The second once the first has ended sampling (its summary line), while perf.data and symbols/ are
                // still being completed: after a fixed wait it could come when the whole run is over (a run this
                // short finishes its outputs in a few ms).
                let summary = |l: &str| l.starts_with("profcpu: ") && l.contains(" samples (");
                assert!(run.wait_for_line(summary, Duration::from_secs(30)), "{case}: {}", run.stderr_so_far());
            }
            run.signal(signal);
        }
        if kill_app {
            kill_all(app.host_pid, &[app.host_pid]);
        }
        let done = run.finish(Duration::from_secs(60));
        let files: Vec<PathBuf> = ["perf", "perfinfo", "jit"]
            .iter()
            .map(|kind| {
                PathBuf::from(format!("/tmp/{kind}-{}.{}", app.nspid, if *kind == "jit" { "dump" } else { "map" }))
            })
            .filter(|p| p.exists())
            .collect();
        assert!(files.is_empty(), "{case}: left {files:?}; profcpu said:\n{}", done.stderr);
        let run_dir = out.join(std::fs::read_dir(&out).unwrap().next().unwrap().unwrap().file_name());
        let saved =
            std::fs::read_to_string(run_dir.join(format!("symbols/perf-{}.map", app.host_pid))).unwrap_or_default();
        assert!(saved.contains("App::BeforeEnable"), "{case}: the perf map was not saved before it was removed");
        match case {
            "two SIGINTs" => assert_eq!(done.status.code(), Some(130), "{}", done.stderr),
            _ => {
                assert!(done.status.success(), "{case}: {}", done.stderr);
                for name in OUTPUT_FILES {
                    assert!(run_dir.join(name).is_file(), "{case}: no {name}:\n{}", done.stderr);
                }
            }
        }
        if !kill_app {
            app.call("after");
            let fds = std::fs::read_dir(format!("/proc/{}/fd", app.host_pid)).unwrap();
            for fd in fds.flatten() {
                let target = std::fs::read_link(fd.path()).unwrap_or_default();
                if target.to_string_lossy().contains(&format!("jit-{}.dump", app.nspid)) {
                    let names = JitDump::parse(&std::fs::read(fd.path()).unwrap())
                        .codes()
                        .iter()
                        .map(|c| c.name.to_string())
                        .collect::<Vec<_>>();
                    assert_eq!(count_named(&names, "App::AfterDisable"), 0, "{case}: written after the run");
                }
            }
        }
        eprintln!(
            "{case}: {}",
            done.stderr.lines().filter(|l| l.starts_with("profcpu:")).collect::<Vec<_>>().join(" | ")
        );
    }
}
