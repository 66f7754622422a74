//! End-to-end smoke tests: the `profcpu` binary profiles the sample web API (`examples/webapi`) under real HTTP load,
//! on the host and in the container situations of `docs/containers.md` reproduced with Linux namespaces (see
//! `docs/webapi-smoke.md` for what each test shows and the measured numbers). The API runs on .NET 8.0.4 with W^X
//! on (its default), started with no perf map variable: profcpu switches its perf map on over the diagnostics IPC
//! for the run and off again after. One API starts with `DOTNET_PerfMapEnabled=1` (left as it is), and the runtime
//! symbols test runs .NET Core 3.1, the legacy case, whose libcoreclr.so still has the symbols to split off.
//!
//! Every assertion names what was expected and prints what the profile showed (its top frames), so a red CI run
//! can be read without re-running it. The tests take turns on the CPUs: shares measured on 2 CPUs would be
//! distorted by a second loaded API.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
mod support;

use support::dotnet::Dotnet;
use support::running_app::exclusive;
use support::scratch::Scratch;
use support::symbol_server::{build_id_of, function_starts, hex, publish, Serve, Server};
use support::unwind::{script_samples, ScriptSample};
use support::webapi::{
    archive_listing, collect_args, files_under, namespace_of, prepared, run_collect, Api, Load, Profile, COMPILED_LATE,
    OUTPUT_FILES,
};
use support::PROFCPU;

/// Seconds each collection samples.
const SECONDS: u32 = 5;
/// Load runs this long before sampling starts: the runtime compiles the route's methods at its first requests.
const WARM_UP: Duration = Duration::from_secs(2);
/// Load that outlasts warm-up and sampling; it is stopped when the test drops it.
const LOAD_SECONDS: u32 = 30;
const CONNECTIONS: u32 = 4;
/// The CPU route's hottest method as .NET 8.0.4 names it: its PAL formatting drops the last character of a perf map
/// line that exactly fills its buffer (dotnet/runtime#102938), so a prefix matches the truncated and the full name.
const HOT_METHOD: &str = "PricingEngine::ComputeDiscountCurv";
/// metadata.txt's `jit_names` for a runtime profcpu switched on.
const SWITCHED_ON: &str = "perf map switched on over the .NET diagnostics IPC for the run, off again after";

fn profcpu(args: Vec<String>) -> Command {
    let mut cmd = Command::new(PROFCPU);
    cmd.args(args);
    cmd
}

/// `/tmp` files that would let a profiler name the namespaced API's code without looking inside its namespace.
fn assert_no_api_files_in_host_tmp(api: &Api) {
    let (n, host) = (api.nspid(), api.host_pid());
    for file in [format!("/tmp/perf-{n}.map"), format!("/tmp/perf-{host}.map"), format!("/tmp/jit-{n}.dump")] {
        assert!(
            !Path::new(&file).exists(),
            "expected no {file} on the host (the API's /tmp is private), but it exists: remove it and re-run"
        );
    }
}

/// `key=value` words of the line starting with `view:` that a wrapper shell printed on stderr before running
/// profcpu.
fn view_of(profile: &Profile) -> HashMap<String, String> {
    let line = profile.log.lines().find_map(|l| l.strip_prefix("view:")).unwrap_or_else(|| {
        panic!("the wrapper printed no `view:` line; stderr:\n{}", profile.log);
    });
    line.split_whitespace().filter_map(|w| w.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

fn assert_all_samples_from(profile: &Profile, pid: u32) {
    let others: Vec<u32> = profile.samples.iter().map(|s| s.pid).filter(|&p| p != pid).collect();
    assert!(others.is_empty(), "expected every sample from PID {pid}, found PIDs {others:?}; {}", profile.describe());
}

#[test]
fn host_cpu_route_dominates_and_every_output_is_complete() {
    let _cpu = exclusive();
    let work = Scratch::new("host");
    let api = Api::on_host(&work);
    assert!(api.perf_map_files().is_empty(), "the API wrote perf map files without being asked");
    let _load = Load::start(&api, "cpu", LOAD_SECONDS, CONNECTIONS);
    std::thread::sleep(WARM_UP);
    let profile = run_collect(profcpu(collect_args(api.host_pid(), SECONDS, &work.join("out"))), SECONDS, &work);

    profile.assert_jit_named(api.host_pid());
    assert_all_samples_from(&profile, api.host_pid());
    assert_eq!(profile.metadata("jit_names"), format!("PID {}: {SWITCHED_ON}", api.host_pid()));
    assert!(!profile.log.contains("warning"), "expected no warning; profcpu said:\n{}", profile.log);
    let dir = &profile.dir;
    for name in OUTPUT_FILES {
        let len = std::fs::metadata(dir.join(name)).map(|m| m.len()).unwrap_or(0);
        assert!(len > 0, "expected a non-empty {name} in {}, found {len} bytes", dir.display());
    }
    for saved in [format!("symbols/perf-{}.map", api.host_pid()), format!("symbols/jit-{}.dump", api.host_pid())] {
        assert!(dir.join(&saved).is_file(), "expected the API's perf map and jitdump saved, no {saved}");
    }
    let svg = std::fs::read_to_string(dir.join("flamegraph.svg")).unwrap();
    assert!(
        svg.contains("<svg") && svg.contains(HOT_METHOD),
        "expected an SVG flame graph naming {HOT_METHOD}; {}",
        profile.describe()
    );

    // The archive holds every file of the folder, byte counts equal (read by GNU tar, not by our own code).
    let mut on_disk = files_under(dir);
    on_disk.remove("prof.tar.gz");
    let listed = archive_listing(&dir.join("prof.tar.gz"));
    assert_eq!(listed, on_disk, "expected prof.tar.gz (left) to list every output file with its size (right)");

    // Debian's perf opens perf.data and counts the same samples (it cannot name .NET 8's JIT code: with W^X that
    // runs from `memfd:doublemapper` mappings, which perf does not look up in perf maps).
    let report = perf_report(dir);
    let expected = format!("# Samples: {}  of event 'cpu-clock'", profile.samples.len());
    assert!(report.contains(&expected), "expected `perf report` to say {expected:?}; it said:\n{report}");
    // perf.data holds the stacks profcpu unwound from the stack copies, not the copies: perf prints every frame
    // profcpu does (its own unwinder would stop at the first JIT frame).
    let data = std::fs::read(dir.join("perf.data")).unwrap();
    assert!(data.len() < 2000 * profile.samples.len(), "{} bytes for {} samples", data.len(), profile.samples.len());
    let perf_script = Command::new("perf").args(["script", "-i"]).arg(dir.join("perf.data")).output().unwrap();
    let theirs = script_samples(&String::from_utf8_lossy(&perf_script.stdout));
    let ours = script_samples(&std::fs::read_to_string(dir.join("perf_script.out")).unwrap());
    let frames = |samples: &[ScriptSample]| samples.iter().map(|s| s.symbols.len()).sum::<usize>();
    assert_eq!(theirs.len(), ours.len(), "samples printed by perf script and in perf_script.out");
    assert_eq!(frames(&theirs), frames(&ours), "frames printed by perf script and in perf_script.out");
    assert!(frames(&ours) >= 8 * ours.len(), "{} frames in {} samples", frames(&ours), ours.len());

    api.assert_nothing_left_or_written_after(dir);
}

/// `perf report --stdio` of a run folder's perf.data, by symbol; panics with what perf said when it fails.
fn perf_report(dir: &Path) -> String {
    let report = Command::new("perf")
        .args(["report", "--stdio", "--no-children", "--sort", "symbol", "-g", "none", "-i"])
        .arg(dir.join("perf.data"))
        .output()
        .expect("cannot run perf (apt-get install linux-perf)");
    let text = String::from_utf8_lossy(&report.stdout).into_owned();
    assert!(
        report.status.success(),
        "perf report failed ({}):\n{text}{}",
        report.status,
        String::from_utf8_lossy(&report.stderr)
    );
    text
}

/// An API whose perf map is on from its start (`DOTNET_PerfMapEnabled=1`) is left as it is: its files stay and it
/// goes on writing them after the run. Two loads, one on a route that sleeps: it is off-CPU, so it hardly shows.
#[test]
fn app_with_perf_map_on_keeps_it_and_sleeping_route_is_off_cpu() {
    let _cpu = exclusive();
    let work = Scratch::new("on-off-cpu");
    let api = Api::on_host_with(&work, Dotnet::V8, &[("DOTNET_PerfMapEnabled", "1")]);
    // Both loads end about when sampling does, so their counts describe the sampled window.
    let seconds = WARM_UP.as_secs() as u32 + SECONDS + 1;
    let cpu_load = Load::start(&api, "cpu", seconds, CONNECTIONS);
    let sleep_load = Load::start(&api, "sleep", seconds, CONNECTIONS);
    std::thread::sleep(WARM_UP);
    let before = api.perf_map_files();
    assert_eq!(before.len(), 3, "expected the API's perf map, perf info and jitdump in /tmp, found {before:?}");
    let profile = run_collect(profcpu(collect_args(api.host_pid(), SECONDS, &work.join("out"))), SECONDS, &work);
    let (cpu, sleep) = (cpu_load.finish(), sleep_load.finish());

    assert_eq!(
        profile.metadata("jit_names"),
        format!("PID {}: perf map on already (its environment has DOTNET_PerfMapEnabled=1)", api.host_pid())
    );
    profile.assert_jit_named(api.host_pid());
    assert_eq!(api.perf_map_files(), before, "expected the API's own perf map files left in place");
    api.compile_late_method();
    let map = std::fs::read_to_string(format!("/tmp/perf-{}.map", api.host_pid())).unwrap();
    assert!(map.contains(COMPILED_LATE), "expected the API to go on writing its perf map ({COMPILED_LATE} missing)");

    // The sleep route really was busy: each connection completes ~10 requests/s of 100 ms each.
    let sleep_expected = (CONNECTIONS * seconds * 10) as u64;
    assert!(
        sleep.requests * 2 >= sleep_expected && sleep.errors == 0,
        "expected about {sleep_expected} /sleep requests without errors, got {sleep:?} (and {cpu:?} on /cpu)"
    );
    assert!(cpu.requests > 0 && cpu.errors == 0, "expected /cpu requests without errors, got {cpu:?}");
    // The handler ran and was compiled, so it would be named if it had been sampled.
    let saved = std::fs::read_to_string(profile.dir.join(format!("symbols/perf-{}.map", api.host_pid())))
        .expect("the API's perf map was not saved");
    assert!(saved.contains("SleepHandler::Handle"), "expected SleepHandler::Handle in the saved perf map");

    let sleep_share = profile.share(|s| s.has_frame("SleepHandler::Handle"));
    let cpu_share = profile.share(|s| s.has_frame("PricingEngine::"));
    eprintln!(
        "on/off-CPU: {} samples; PricingEngine:: in {:.1}%, SleepHandler::Handle in {:.2}% ({} samples); \
         requests /cpu {} /sleep {}",
        profile.samples.len(),
        cpu_share * 100.0,
        sleep_share * 100.0,
        profile.count(|s| s.has_frame("SleepHandler::Handle")),
        cpu.requests,
        sleep.requests
    );
    assert!(
        sleep_share < 0.05,
        "expected the sleeping route's handler in < 5% of on-CPU samples, got {:.1}%; {}",
        sleep_share * 100.0,
        profile.describe()
    );
    assert!(
        cpu_share >= 0.6,
        "expected the CPU route's PricingEngine:: chain in >= 60% of on-CPU samples, got {:.1}%; {}",
        cpu_share * 100.0,
        profile.describe()
    );
}

/// The `--pid=container:app` sidecar: a process that joined only the API's PID namespace, with its own mount
/// namespace, its own /proc (so the API is PID 1 there) and its own empty /tmp.
#[test]
fn sidecar_in_the_api_pid_namespace_names_jit_frames_without_a_shared_tmp() {
    let _cpu = exclusive();
    let work = Scratch::new("sidecar");
    let api = Api::in_container(&work);
    let _load = Load::start(&api, "cpu", LOAD_SECONDS, CONNECTIONS);
    std::thread::sleep(WARM_UP);
    let sidecar_shell = r#"mount -t proc proc /proc && mount -t tmpfs tmpfs /tmp || exit 1
echo "view: pid1=$(cat /proc/1/comm) pidns=$(readlink /proc/self/ns/pid) mnt=$(readlink /proc/self/ns/mnt)" \
  "pid1_mnt=$(readlink /proc/1/ns/mnt) tmp_dev=$(stat -c %d /tmp) pid1_tmp_dev=$(stat -c %d /proc/1/root/tmp)" \
  "own_tmp_entries=$(ls -A /tmp | wc -l) pid1_map=$(test -e /proc/1/root/tmp/perf-1.map && echo yes || echo no)" >&2
exec "$0" "$@""#;
    let mut cmd = Command::new("nsenter");
    cmd.args(["--target", &api.host_pid().to_string(), "--pid", "--"])
        .args(["unshare", "--mount", "--fork", "--propagation", "private", "sh", "-c", sidecar_shell, PROFCPU])
        .args(collect_args(1, SECONDS, &work.join("out")));
    let profile = run_collect(cmd, SECONDS, &work);

    let view = view_of(&profile);
    let v = |k: &str| view.get(k).map(String::as_str).unwrap_or("?");
    let context = || format!("the sidecar saw {view:?}; {}", profile.describe());
    assert_eq!(v("pid1"), "dotnet", "expected the API as PID 1 in the sidecar's /proc; {}", context());
    assert_eq!(v("pidns"), namespace_of(api.host_pid(), "pid"), "expected the API's PID namespace; {}", context());
    assert_ne!(v("mnt"), v("pid1_mnt"), "expected a mount namespace of the sidecar's own; {}", context());
    assert_ne!(v("tmp_dev"), v("pid1_tmp_dev"), "expected a /tmp other than the API's; {}", context());
    assert_eq!(v("own_tmp_entries"), "0", "expected an empty /tmp in the sidecar; {}", context());
    assert_eq!(v("pid1_map"), "no", "expected no perf map in the API's /tmp before the run; {}", context());
    assert_no_api_files_in_host_tmp(&api);

    profile.assert_jit_named(1);
    // PIDs as the sidecar's namespace sees them.
    assert_all_samples_from(&profile, 1);
    assert_eq!(profile.metadata("pid"), "1");
    assert_eq!(profile.metadata("jit_names"), format!("PID 1: {SWITCHED_ON}"));
    api.assert_nothing_left_or_written_after(&profile.dir);
}

/// Node-level profiling: profcpu on the host, the API in its namespaces, addressed by its host PID.
#[test]
fn host_names_jit_frames_of_the_namespaced_api_by_host_pid() {
    let _cpu = exclusive();
    let work = Scratch::new("host-to-container");
    let api = Api::in_container(&work);
    let _load = Load::start(&api, "cpu", LOAD_SECONDS, CONNECTIONS);
    std::thread::sleep(WARM_UP);
    let profile = run_collect(profcpu(collect_args(api.host_pid(), SECONDS, &work.join("out"))), SECONDS, &work);

    assert_no_api_files_in_host_tmp(&api);
    // The files' names are the ones inside the namespace (PID 1), as perf would have looked them up there.
    profile.assert_jit_named(1);
    assert_all_samples_from(&profile, api.host_pid());
    assert_eq!((profile.metadata("pid"), profile.metadata("ns_pid")), (api.host_pid().to_string(), "1".into()));
    assert_eq!(profile.metadata("jit_names"), format!("PID {}: {SWITCHED_ON}", api.host_pid()));
    assert!(api.perf_map_files().is_empty(), "perf map files left in the API's /tmp: {:?}", api.perf_map_files());
}

/// `docker exec app profcpu …`: profcpu in every namespace of the API, sharing its /tmp.
#[test]
fn inside_the_api_namespaces_names_jit_frames() {
    let _cpu = exclusive();
    let work = Scratch::new("inside");
    let api = Api::in_container(&work);
    let _load = Load::start(&api, "cpu", LOAD_SECONDS, CONNECTIONS);
    std::thread::sleep(WARM_UP);
    let inside_shell = r#"echo "view: pid1=$(cat /proc/1/comm) pid=$(readlink /proc/self/ns/pid)" \
  "mnt=$(readlink /proc/self/ns/mnt) net=$(readlink /proc/self/ns/net) uts=$(readlink /proc/self/ns/uts)" \
  "ipc=$(readlink /proc/self/ns/ipc) map=$(test -e /tmp/perf-1.map && echo yes || echo no)" >&2
exec "$0" "$@""#;
    let mut cmd = Command::new("nsenter");
    cmd.args(["--target", &api.host_pid().to_string(), "--all", "--", "sh", "-c", inside_shell, PROFCPU])
        .args(collect_args(1, SECONDS, &work.join("out")));
    let profile = run_collect(cmd, SECONDS, &work);

    let view = view_of(&profile);
    let context = || format!("profcpu's shell saw {view:?}; {}", profile.describe());
    assert_eq!(view.get("pid1").map(String::as_str), Some("dotnet"), "expected the API as PID 1; {}", context());
    for ns in ["pid", "mnt", "net", "uts", "ipc"] {
        assert_eq!(
            view.get(ns).cloned().unwrap_or_default(),
            namespace_of(api.host_pid(), ns),
            "expected profcpu in the API's {ns} namespace; {}",
            context()
        );
    }
    assert_eq!(view.get("map").map(String::as_str), Some("no"), "expected no /tmp/perf-1.map yet; {}", context());
    assert_no_api_files_in_host_tmp(&api);

    profile.assert_jit_named(1);
    assert_all_samples_from(&profile, 1);
    assert_eq!(profile.metadata("jit_names"), format!("PID 1: {SWITCHED_ON}"));
    api.assert_nothing_left_or_written_after(&profile.dir);
}

/// The container and its /tmp are gone and the output folder has moved: `postprocess` rebuilds the same profile
/// from what collect saved.
#[test]
fn postprocess_after_the_container_is_gone_reproduces_the_folded_stacks() {
    let _cpu = exclusive();
    let work = Scratch::new("postprocess");
    let mut api = Api::in_container(&work);
    let load = Load::start(&api, "cpu", LOAD_SECONDS, CONNECTIONS);
    std::thread::sleep(WARM_UP);
    let collected = run_collect(profcpu(collect_args(api.host_pid(), SECONDS, &work.join("out"))), SECONDS, &work);
    collected.assert_jit_named(1);
    let script = std::fs::read_to_string(collected.dir.join("perf_script.out")).unwrap();

    drop(load);
    let host_pid = api.host_pid();
    api.stop();
    assert!(
        !Path::new(&format!("/proc/{host_pid}")).exists(),
        "expected the API (host PID {host_pid}) gone, and with it its mount namespace and tmpfs /tmp"
    );
    for name in ["/tmp/perf-1.map", "/tmp/jit-1.dump"] {
        assert!(!Path::new(name).exists(), "expected no {name} on the host: remove it and re-run");
    }

    let moved = work.join("elsewhere/run");
    std::fs::create_dir_all(moved.parent().unwrap()).unwrap();
    std::fs::rename(&collected.dir, &moved).unwrap();
    // Only the inputs stay: whatever postprocess produces is made now.
    for name in ["perf_script.out", "folded_stacks.out", "flamegraph.svg", "prof.tar.gz"] {
        std::fs::remove_file(moved.join(name)).unwrap();
    }
    let out = Command::new(PROFCPU).args(["postprocess", "-dir"]).arg(&moved).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.lines().last() == moved.to_str(),
        "expected postprocess to succeed and print {}; it said ({}):\n{stdout}{}",
        moved.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let mut again = Profile::read(&moved);
    again.log = String::from_utf8_lossy(&out.stderr).into_owned();
    for name in OUTPUT_FILES {
        assert!(moved.join(name).is_file(), "expected postprocess to write {name}");
    }
    if again.folded != collected.folded {
        panic!(
            "expected the same folded stacks after postprocess ({} vs {} lines).\nat collect: {}\nafter \
             postprocess: {}",
            collected.folded.lines().count(),
            again.folded.lines().count(),
            collected.describe(),
            again.describe()
        );
    }
    assert!(
        std::fs::read_to_string(moved.join("perf_script.out")).unwrap() == script,
        "expected the same perf_script.out after postprocess; {}",
        again.describe()
    );
    again.assert_jit_named(1);
}

/// A copy of .NET Core 3.1's runtime whose libcoreclr.so is stripped, plus the debug part split off it: what
/// Microsoft ships and what `dotnet-symbol` downloads. (.NET 8.0.4's libcoreclr.so is stripped already and its debug
/// file is on Microsoft's symbol server only, which this machine kind cannot reach; 3.1's still carries its symbols,
/// so splitting it gives a real runtime, a real debug file and the truth to check names against.) Returns (runtime
/// dir, stripped libcoreclr.so, debug file).
fn stripped_runtime(work: &Scratch) -> (PathBuf, PathBuf, PathBuf) {
    let original = &prepared(Dotnet::V3_1).runtime_dir;
    let copy = work.join("runtime");
    // Hard links where possible; the stripped library replaces its link in the copy only.
    let copied = Command::new("cp").arg("-al").arg(original).arg(&copy).status().unwrap().success()
        || Command::new("cp").arg("-a").arg(original).arg(&copy).status().unwrap().success();
    assert!(copied, "cannot copy {} to {}", original.display(), copy.display());
    let lib = Dotnet::V3_1.framework_dir(&copy).join("libcoreclr.so");
    let debug = work.join("libcoreclr.so.dbg");
    let stripped = work.join("libcoreclr.so.stripped");
    for args in [
        vec!["objcopy".as_ref(), "--only-keep-debug".as_ref(), lib.as_os_str(), debug.as_os_str()],
        vec!["strip".as_ref(), "--strip-all".as_ref(), "-o".as_ref(), stripped.as_os_str(), lib.as_os_str()],
    ] {
        let out = Command::new(args[0]).args(&args[1..]).output().unwrap();
        assert!(out.status.success(), "{args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    std::fs::rename(&stripped, &lib).unwrap();
    let sections = Command::new("readelf").arg("-S").arg(&lib).output().unwrap();
    let sections = String::from_utf8_lossy(&sections.stdout);
    assert!(
        !sections.contains(".symtab") && sections.contains(".gnu_debuglink"),
        "expected the stripped copy without .symtab and with a .gnu_debuglink"
    );
    // Those names can only come from the debug file: the stripped library exports none of them.
    let dynsym = Command::new("nm").args(["-D", "-C", "--defined-only"]).arg(&lib).output().unwrap();
    let dynsym = String::from_utf8_lossy(&dynsym.stdout);
    assert!(
        !dynsym.contains("KickOffThread") && !dynsym.contains("CallDescrWorkerInternal"),
        "the stripped libcoreclr.so still exports the names this test looks for; the test proves nothing"
    );
    (copy, lib, debug)
}

/// The runtime as Microsoft ships it (libcoreclr.so stripped) and a symbol server on 127.0.0.1 holding its debug
/// file in the SSQP layout (as Microsoft's does). Without `-symbol-server` nothing is fetched and the runtime's
/// frames are one per function; with it, they are named from the fetched debug file, and the names are saved so
/// that `postprocess` needs neither the server nor the cache.
#[test]
fn stripped_coreclr_is_named_from_a_symbol_server_only_when_asked() {
    let _cpu = exclusive();
    let work = Scratch::new("symbol-server");
    let (runtime, lib, debug) = stripped_runtime(&work);
    let build_id = build_id_of(&lib);
    publish(&work.join("server"), "ssqp", &build_id, &debug);
    let server = Server::start(Serve::Tree(work.join("server")));
    let cache = work.join("cache");

    let api = Api::with_runtime(&work, Dotnet::V3_1, &runtime, &[("COMPlus_PerfMapEnabled", "1")]);
    // Load for each collection of its own: a slow machine may take long over the first one's outputs.
    let collect = |extra: &[&str]| {
        let _load = Load::start(&api, "cpu", LOAD_SECONDS, CONNECTIONS);
        std::thread::sleep(WARM_UP);
        let mut cmd = profcpu(collect_args(api.host_pid(), SECONDS, &work.join("out")));
        cmd.args(extra).env("XDG_CACHE_HOME", &cache).env_remove("DEBUGINFOD_URLS");
        run_collect(cmd, SECONDS, &work)
    };
    let lib_path = lib.to_str().unwrap();

    // Not asked: nothing is fetched, and every address of an unnamed function is one frame at its start.
    let plain = collect(&[]);
    assert!(server.requests().is_empty(), "fetched without -symbol-server: {:?}", server.requests());
    assert!(!cache.exists(), "a symbol cache was made without -symbol-server");
    let starts = function_starts(&lib);
    let coreclr: Vec<_> = plain.frames().filter(|f| f.module == lib_path).collect();
    let offsets: BTreeSet<u64> = coreclr
        .iter()
        .filter_map(|f| f.symbol.strip_prefix("libcoreclr.so+0x").map(|o| u64::from_str_radix(o, 16).unwrap()))
        .collect();
    let not_a_start: Vec<_> = offsets.iter().filter(|o| !starts.contains(o)).map(|o| format!("{o:#x}")).collect();
    assert!(
        coreclr.len() >= plain.samples.len() && !offsets.is_empty() && not_a_start.is_empty(),
        "expected every stack through {lib_path}, each frame there at the start of its function ({} known from \
         .eh_frame); {} frames, {} distinct, not at a function start: {not_a_start:?}; {}",
        starts.len(),
        coreclr.len(),
        offsets.len(),
        plain.describe()
    );
    eprintln!("without -symbol-server: {} libcoreclr.so frames, {} distinct functions", coreclr.len(), offsets.len());

    // Asked: fetched once by build-id, verified, cached, and every runtime frame named.
    let started = Instant::now();
    let named_run = collect(&["-symbol-server", &server.url]);
    // Other stripped files the samples hit are asked for too (in both layouts, as the server has them not).
    let ssqp = format!("/_.debug/elf-buildid-sym-{}/_.debug", hex(&build_id));
    let requests = server.requests();
    assert_eq!(requests.iter().filter(|r| **r == ssqp).count(), 1, "expected one {ssqp} request: {requests:?}");
    assert!(cache.join(format!("profcpu/symbols/{}.debug", hex(&build_id))).is_file(), "the debug file was not cached");
    let coreclr: Vec<_> = named_run.frames().filter(|f| f.module == lib_path).collect();
    let named = coreclr.iter().filter(|f| f.is_named()).count();
    assert!(
        !coreclr.is_empty() && named as f64 >= 0.95 * coreclr.len() as f64,
        "expected >= 95% of libcoreclr.so frames named from the fetched debug file, got {named} of {}; unnamed e.g. \
         {:?}; {}",
        coreclr.len(),
        coreclr.iter().find(|f| !f.is_named()),
        named_run.describe()
    );
    let thread_start =
        named_run.share(|s| s.frames.iter().any(|f| f.module == lib_path && f.symbol == "ThreadNative::KickOffThread"));
    assert!(
        thread_start >= 0.8,
        "expected ThreadNative::KickOffThread (libcoreclr.so) in >= 80% of stacks, got {:.1}%; {}",
        thread_start * 100.0,
        named_run.describe()
    );
    // Other stripped files of the runtime (System.Native.so) are not on this server: one line each says so.
    let warnings: Vec<&str> = named_run.log.lines().filter(|l| l.contains("warning")).collect();
    assert!(
        warnings.iter().all(|w| w.contains("no debug file for") && !w.contains("libcoreclr")),
        "expected no warning about libcoreclr.so; profcpu said:\n{}",
        named_run.log
    );
    eprintln!(
        "with -symbol-server: {named} of {} libcoreclr.so frames named ({:.1}%), run took {:.1?}",
        coreclr.len(),
        named as f64 * 100.0 / coreclr.len() as f64,
        started.elapsed()
    );

    // The run made without the flag is named afterwards: `postprocess -symbol-server` on what it saved.
    let out = Command::new(PROFCPU)
        .args(["postprocess", "-symbol-server", &server.url, "-dir"])
        .arg(&plain.dir)
        .env("XDG_CACHE_HOME", &cache)
        .output()
        .unwrap();
    assert!(out.status.success(), "postprocess -symbol-server failed: {}", String::from_utf8_lossy(&out.stderr));
    let renamed = Profile::read(&plain.dir);
    let coreclr: Vec<_> = renamed.frames().filter(|f| f.module == lib_path).collect();
    let named = coreclr.iter().filter(|f| f.is_named()).count();
    assert!(
        named as f64 >= 0.95 * coreclr.len() as f64,
        "expected postprocess -symbol-server to name >= 95% of libcoreclr.so frames, got {named} of {}",
        coreclr.len()
    );

    // Offline: no server, no cache; the names come from what the run saved.
    drop(server);
    std::fs::remove_dir_all(&cache).unwrap();
    let out = Command::new(PROFCPU).args(["postprocess", "-dir"]).arg(&named_run.dir).output().unwrap();
    assert!(out.status.success(), "postprocess failed: {}", String::from_utf8_lossy(&out.stderr));
    let again = Profile::read(&named_run.dir);
    assert_eq!(again.folded, named_run.folded, "expected the same folded stacks offline");
    assert!(again.folded.contains("ThreadNative::KickOffThread;"), "expected the runtime's names in folded_stacks.out");
}
