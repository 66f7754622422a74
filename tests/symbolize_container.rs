//! The container case: a .NET app in its own PID and mount namespace with a private /tmp (what a sidecar or the
//! host sees of a container), recorded from outside by its host PID. Its perf map exists only inside the
//! namespace, under its namespace PID; profcpu must find it through /proc/PID/root, and a capture must keep it after
//! the container is gone.

mod support;

use profcpu::fs::Dir;
use profcpu::report::names::frame_label;

use profcpu::symbolize::{Capture, FrameKind, SymbolizeOptions};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};
use support::dotnet::Dotnet;
use support::perf::perf_record;
use support::recording::open_perf_data;
use support::running_app::RunningApp;
use support::scratch::Scratch;
use support::symbolize::{name_samples, Named};

/// Still the legacy runtime: the .NET 8 move of these tests comes with naming .NET 8 processes started without
/// perf maps.
const DOTNET: Dotnet = Dotnet::V3_1;

/// The host PID of the namespace's first process (the app): the child of `unshare --fork`.
fn child_of(pid: u32) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
        if let Some(c) = children.split_whitespace().next() {
            return c.parse().unwrap();
        }
        assert!(Instant::now() < deadline, "unshare started no child");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn nspid_of(pid: u32) -> u32 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("NStgid:")).expect("kernel without NStgid");
    line.split_whitespace().last().unwrap().parse().unwrap()
}

fn jit_leaf_names(out: &Named, module: &str) -> (usize, usize) {
    let jit: Vec<_> = out.samples.iter().map(|s| &s.frames[0]).filter(|f| f.kind() == FrameKind::Jit).collect();
    let named = jit.iter().filter(|f| f.symbol().is_some() && f.module() == module).count();
    (named, jit.len())
}

#[test]
fn jit_frames_of_an_app_in_its_own_namespaces_are_named_from_outside() {
    let runtime = DOTNET.runtime_dir();
    let dll = DOTNET.build_app(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/symbolize/Workload.cs"));
    let scratch = Scratch::new("symbolize-container");
    let mut cmd = Command::new("unshare");
    cmd.args(["--pid", "--fork", "--kill-child", "--mount", "--mount-proc", "--propagation", "private", "sh", "-c"])
        .arg("mount -t tmpfs tmpfs /tmp && exec \"$0\" \"$@\"")
        .arg(runtime.join("dotnet"))
        .arg(&dll)
        .args(["spin", "60"])
        .env("DOTNET_SYSTEM_GLOBALIZATION_INVARIANT", "1")
        .env("COMPlus_PerfMapEnabled", "1");
    let mut app = RunningApp::start(cmd, Duration::from_secs(60));
    let host_pid = child_of(app.pid());
    let nspid = nspid_of(host_pid);
    assert_ne!(nspid, host_pid, "the app is not in its own PID namespace");
    let inner_map = format!("/tmp/perf-{nspid}.map");
    assert!(Path::new(&format!("/proc/{host_pid}/root{inner_map}")).is_file(), "the runtime wrote no perf map");

    // A sidecar's view: record and capture by host PID.
    let out_dir = scratch.join("out");
    std::fs::create_dir(&out_dir).unwrap();
    let mut capture = Capture::new(&Dir::open(&out_dir).unwrap(), &[host_pid], &SymbolizeOptions::live()).unwrap();
    let data = scratch.join("perf.data");
    let recorder = {
        let data = data.clone();
        std::thread::spawn(move || perf_record(host_pid, 3.0, &data))
    };
    while !recorder.is_finished() {
        capture.poll();
        std::thread::sleep(Duration::from_millis(250));
    }
    recorder.join().expect("perf record failed");
    let reader = open_perf_data(&data).unwrap();
    let live = name_samples(&reader, &SymbolizeOptions::live()).unwrap();

    // Nothing of the app is visible in the host's /tmp: the names can only have come from inside.
    for host_file in
        [format!("/tmp/perf-{nspid}.map"), format!("/tmp/perf-{host_pid}.map"), format!("/tmp/perfinfo-{host_pid}.map")]
    {
        assert!(!Path::new(&host_file).exists(), "{host_file} exists on the host");
    }
    let (named, jit) = jit_leaf_names(&live, &inner_map);
    assert!(jit as f64 >= 0.8 * live.samples.len() as f64, "only {jit} of {} leaves in JIT code", live.samples.len());
    assert!(named as f64 >= 0.9 * jit as f64, "{named} of {jit} JIT leaves named; stats {:?}", live.stats);
    assert!(live
        .samples
        .iter()
        .any(|s| s.frames[0].symbol().is_some_and(|n| n.contains("Workload::SpinThreeQuarters"))));

    // The container goes away (its tmpfs with it); the capture still names everything.
    app.kill();
    // --kill-child delivers SIGKILL as unshare dies; the app is then reaped by init.
    let deadline = Instant::now() + Duration::from_secs(10);
    while Path::new(&format!("/proc/{host_pid}")).exists() {
        assert!(Instant::now() < deadline, "the app outlived its namespace");
        std::thread::sleep(Duration::from_millis(20));
    }
    let summary = capture.finish(&reader, |_| Ok(())).unwrap();
    assert_eq!(summary.perf_maps, 1);
    let offline = name_samples(&reader, &SymbolizeOptions::offline(summary.dir.clone())).unwrap();
    let (named_offline, jit_offline) = jit_leaf_names(&offline, &inner_map);
    assert_eq!((named_offline, jit_offline), (named, jit));
    let names = |out: &Named| out.samples.iter().map(|s| frame_label(&s.frames[0]).into_owned()).collect::<Vec<_>>();
    assert_eq!(names(&offline), names(&live));
}
