//! End-to-end smoke tests: the `profcpu` binary profiles the sample web API (`examples/webapi`) on the real .NET Core
//! 3.1 runtime under real HTTP load, on the host and in the container situations of `docs/containers.md` reproduced
//! with Linux namespaces (see `docs/webapi-smoke.md` for what each test shows and the measured numbers).
//!
//! Every assertion names what was expected and prints what the profile showed (its top frames), so a red CI run
//! can be read without re-running it. The tests take turns on the CPUs: shares measured on 2 CPUs would be
//! distorted by a second loaded API.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
mod support;

use support::running_app::exclusive;
use support::scratch::Scratch;
use support::webapi::{
    archive_listing, collect_args, files_under, namespace_of, prepared, run_collect, Api, Load, Profile, OUTPUT_FILES,
};
use support::PROFCPU;

/// Seconds each collection samples.
const SECONDS: u32 = 5;
/// Load runs this long before sampling starts: the runtime compiles the route's methods at its first requests.
const WARM_UP: Duration = Duration::from_secs(2);
/// Load that outlasts warm-up and sampling; it is stopped when the test drops it.
const LOAD_SECONDS: u32 = 30;
const CONNECTIONS: u32 = 4;

fn profcpu(args: Vec<String>) -> Command {
    let mut cmd = Command::new(PROFCPU);
    cmd.args(args);
    cmd
}

/// `/tmp` files that would let a profiler name the namespaced API's code without looking inside its namespace.
fn assert_no_api_files_in_host_tmp(api: &Api) {
    for file in [format!("/tmp/perf-{}.map", api.nspid()), format!("/tmp/perf-{}.map", api.host_pid())] {
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
    let _load = Load::start(&api, "cpu", LOAD_SECONDS, CONNECTIONS);
    std::thread::sleep(WARM_UP);
    let profile = run_collect(profcpu(collect_args(api.host_pid(), SECONDS, &work.join("out"))), SECONDS, &work);

    profile.assert_jit_named(&format!("/tmp/perf-{}.map", api.host_pid()));
    assert_all_samples_from(&profile, api.host_pid());
    let dir = &profile.dir;
    for name in OUTPUT_FILES {
        let len = std::fs::metadata(dir.join(name)).map(|m| m.len()).unwrap_or(0);
        assert!(len > 0, "expected a non-empty {name} in {}, found {len} bytes", dir.display());
    }
    let saved_map = dir.join(format!("symbols/perf-{}.map", api.host_pid()));
    assert!(saved_map.is_file(), "expected the API's perf map saved as {}", saved_map.display());
    let svg = std::fs::read_to_string(dir.join("flamegraph.svg")).unwrap();
    assert!(
        svg.contains("<svg") && svg.contains("PricingEngine::ComputeDiscountCurve"),
        "expected an SVG flame graph naming PricingEngine::ComputeDiscountCurve; {}",
        profile.describe()
    );

    // The archive holds every file of the folder, byte counts equal (read by GNU tar, not by our own code).
    let mut on_disk = files_under(dir);
    on_disk.remove("prof.tar.gz");
    let listed = archive_listing(&dir.join("prof.tar.gz"));
    assert_eq!(listed, on_disk, "expected prof.tar.gz (left) to list every output file with its size (right)");

    // Debian's perf opens perf.data, counts the same samples and names the JIT code from the API's own perf map.
    let report = Command::new("perf")
        .args(["report", "--stdio", "--no-children", "--sort", "symbol", "-g", "none", "-i"])
        .arg(dir.join("perf.data"))
        .output()
        .expect("cannot run perf (apt-get install linux-perf)");
    let text = String::from_utf8_lossy(&report.stdout);
    let expected = format!("# Samples: {}  of event 'cpu-clock'", profile.samples.len());
    assert!(
        report.status.success() && text.contains(&expected) && text.contains("PricingEngine::ComputeDiscountCurve"),
        "expected `perf report` to succeed with {expected:?} and PricingEngine::ComputeDiscountCurve; it said \
         ({}):\n{}\n{}",
        report.status,
        text.lines().take(25).collect::<Vec<_>>().join("\n"),
        String::from_utf8_lossy(&report.stderr)
    );
}

#[test]
fn sleeping_route_is_off_cpu_under_equal_load() {
    let _cpu = exclusive();
    let work = Scratch::new("on-off-cpu");
    let api = Api::on_host(&work);
    // Both loads end about when sampling does, so their counts describe the sampled window.
    let seconds = WARM_UP.as_secs() as u32 + SECONDS + 1;
    let cpu_load = Load::start(&api, "cpu", seconds, CONNECTIONS);
    let sleep_load = Load::start(&api, "sleep", seconds, CONNECTIONS);
    std::thread::sleep(WARM_UP);
    let profile = run_collect(profcpu(collect_args(api.host_pid(), SECONDS, &work.join("out"))), SECONDS, &work);
    let (cpu, sleep) = (cpu_load.finish(), sleep_load.finish());

    // The sleep route really was busy: each connection completes ~10 requests/s of 100 ms each.
    let sleep_expected = (CONNECTIONS * seconds * 10) as u64;
    assert!(
        sleep.requests * 2 >= sleep_expected && sleep.errors == 0,
        "expected about {sleep_expected} /sleep requests without errors, got {sleep:?} (and {cpu:?} on /cpu)"
    );
    assert!(cpu.requests > 0 && cpu.errors == 0, "expected /cpu requests without errors, got {cpu:?}");
    // The handler ran and was compiled, so it would be named if it had been sampled.
    let map = std::fs::read_to_string(profile.dir.join(format!("symbols/perf-{}.map", api.host_pid())))
        .expect("the API's perf map was not saved");
    assert!(map.contains("SleepHandler::Handle"), "expected SleepHandler::Handle in the saved perf map");

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
  "own_tmp_entries=$(ls -A /tmp | wc -l) pid1_map=$(test -f /proc/1/root/tmp/perf-1.map && echo yes || echo no)" >&2
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
    assert_eq!(v("pid1_map"), "yes", "expected the API's perf map in its own /tmp; {}", context());
    assert_no_api_files_in_host_tmp(&api);

    profile.assert_jit_named("/tmp/perf-1.map");
    // PIDs as the sidecar's namespace sees them.
    assert_all_samples_from(&profile, 1);
    let meta = std::fs::read_to_string(profile.dir.join("metadata.txt")).unwrap();
    assert!(meta.lines().any(|l| l == "pid: 1"), "expected `pid: 1` in metadata.txt:\n{meta}");
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
    // The map's name is the one inside the namespace (PID 1), as perf would have looked it up there.
    profile.assert_jit_named("/tmp/perf-1.map");
    assert_all_samples_from(&profile, api.host_pid());
    let meta = std::fs::read_to_string(profile.dir.join("metadata.txt")).unwrap();
    assert!(
        meta.lines().any(|l| l == format!("pid: {}", api.host_pid())) && meta.lines().any(|l| l == "ns_pid: 1"),
        "expected the host PID and `ns_pid: 1` in metadata.txt:\n{meta}"
    );
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
  "ipc=$(readlink /proc/self/ns/ipc) map=$(test -f /tmp/perf-1.map && echo yes || echo no)" >&2
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
    assert_eq!(view.get("map").map(String::as_str), Some("yes"), "expected the API's /tmp/perf-1.map; {}", context());
    assert_no_api_files_in_host_tmp(&api);

    profile.assert_jit_named("/tmp/perf-1.map");
    assert_all_samples_from(&profile, 1);
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
    collected.assert_jit_named("/tmp/perf-1.map");
    let script = std::fs::read_to_string(collected.dir.join("perf_script.out")).unwrap();

    drop(load);
    let host_pid = api.host_pid();
    api.stop();
    assert!(
        !Path::new(&format!("/proc/{host_pid}")).exists(),
        "expected the API (host PID {host_pid}) gone, and with it its mount namespace and tmpfs /tmp"
    );
    assert!(!Path::new("/tmp/perf-1.map").exists(), "expected no /tmp/perf-1.map on the host: remove it and re-run");

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
    again.assert_jit_named("/tmp/perf-1.map");
}

/// A copy of the runtime whose libcoreclr.so is stripped, plus the debug part split off it: what Microsoft ships
/// and what `dotnet-symbol --symbols` downloads. Returns (runtime dir, framework dir, debug file).
fn stripped_runtime(work: &Scratch) -> (PathBuf, PathBuf, PathBuf) {
    let original = &prepared().runtime_dir;
    let copy = work.join("runtime");
    // Hard links where possible; the stripped library replaces its link in the copy only.
    let copied = Command::new("cp").arg("-al").arg(original).arg(&copy).status().unwrap().success()
        || Command::new("cp").arg("-a").arg(original).arg(&copy).status().unwrap().success();
    assert!(copied, "cannot copy {} to {}", original.display(), copy.display());
    let fw = std::fs::read_dir(copy.join("shared/Microsoft.NETCore.App"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.join("libcoreclr.so").is_file())
        .expect("no framework with libcoreclr.so in the runtime");
    let lib = fw.join("libcoreclr.so");
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
    (copy, fw, debug)
}

/// A file this test put under /usr/lib/debug; the directories it had to create go when dropped.
struct InstalledDebugFile {
    created_top: Option<PathBuf>,
    file: PathBuf,
}

impl InstalledDebugFile {
    fn install(from: &Path, to: &Path) -> InstalledDebugFile {
        let mut created_top = None;
        for dir in to.parent().unwrap().ancestors().collect::<Vec<_>>().into_iter().rev() {
            match dir.symlink_metadata() {
                Ok(m) if m.is_dir() => {}
                Ok(_) => panic!("{} exists and is not a directory; not writing through it", dir.display()),
                Err(_) => {
                    std::fs::create_dir(dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
                    created_top.get_or_insert_with(|| dir.to_owned());
                }
            }
        }
        let guard = InstalledDebugFile { created_top, file: to.to_owned() };
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(to)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", to.display()));
        std::io::copy(&mut std::fs::File::open(from).unwrap(), &mut out).unwrap();
        guard
    }
}

impl Drop for InstalledDebugFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.file);
        if let Some(top) = &self.created_top {
            let _ = std::fs::remove_dir_all(top);
        }
    }
}

/// The runtime as Microsoft ships it (libcoreclr.so stripped) plus `dotnet-symbol --symbols --output
/// /usr/lib/debug/<runtime dir>`: profcpu finds libcoreclr.so.dbg there by the library's debuglink and names the
/// runtime's native frames.
#[test]
fn stripped_coreclr_is_named_from_its_debug_file_under_usr_lib_debug() {
    let _cpu = exclusive();
    let work = Scratch::new("dotnet-symbol");
    let (runtime, fw, debug) = stripped_runtime(&work);
    let lib = fw.join("libcoreclr.so");
    let target = Path::new("/usr/lib/debug").join(fw.strip_prefix("/").unwrap()).join("libcoreclr.so.dbg");
    let _installed = InstalledDebugFile::install(&debug, &target);

    let api = Api::with_runtime(&work, &runtime);
    let _load = Load::start(&api, "cpu", LOAD_SECONDS, CONNECTIONS);
    std::thread::sleep(WARM_UP);
    let profile = run_collect(profcpu(collect_args(api.host_pid(), SECONDS, &work.join("out"))), SECONDS, &work);

    let lib_path = lib.to_str().unwrap();
    let coreclr: Vec<_> = profile.frames().filter(|f| f.module == lib_path).collect();
    let named = coreclr.iter().filter(|f| f.is_named()).count();
    assert!(
        coreclr.len() >= profile.samples.len() && !coreclr.is_empty(),
        "expected every stack to pass through {lib_path} (thread start), found {} frames in {} samples; {}",
        coreclr.len(),
        profile.samples.len(),
        profile.describe()
    );
    assert!(
        named as f64 >= 0.95 * coreclr.len() as f64,
        "expected >= 95% of libcoreclr.so frames named from {}, got {named} of {}; unnamed e.g. {:?}; {}",
        target.display(),
        coreclr.len(),
        coreclr.iter().find(|f| !f.is_named()),
        profile.describe()
    );
    let thread_start =
        profile.share(|s| s.frames.iter().any(|f| f.module == lib_path && f.symbol == "ThreadNative::KickOffThread"));
    assert!(
        thread_start >= 0.8,
        "expected ThreadNative::KickOffThread (libcoreclr.so) in >= 80% of stacks, got {:.1}%; {}",
        thread_start * 100.0,
        profile.describe()
    );
    // Those names can only have come from the debug file: the stripped library exports none of them.
    let dynsym = Command::new("nm").args(["-D", "-C", "--defined-only"]).arg(&lib).output().unwrap();
    let dynsym = String::from_utf8_lossy(&dynsym.stdout);
    assert!(
        !dynsym.contains("KickOffThread") && !dynsym.contains("CallDescrWorkerInternal"),
        "the stripped libcoreclr.so still exports the names this test looks for; the test proves nothing"
    );
    assert!(
        profile.folded.contains("ThreadNative::KickOffThread;"),
        "expected the debug-file names in folded_stacks.out too; {}",
        profile.describe()
    );
}
