//! `profcpu postprocess` on recordings of a real .NET Core 3.1 app (tests/data/symbolize/Workload.cs, "spin": two
//! JIT-compiled methods with a 3:1 split of the work):
//! - a `profcpu collect` run, moved elsewhere after the app exited and its /tmp files were deleted, regenerates the
//!   same folded stacks and perf script (run with /tmp and the .NET runtime hidden: nothing live is read);
//! - a `perf record -g` of the app: postprocess names its JIT frames, from /tmp while the app runs and from a perf
//!   map saved beside perf.data after it is gone, agreeing with `perf script`;
//! - the flame graph of the collection opens in headless Chromium and its search finds the hot method.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use support::chromium::chromium;
use support::dotnet::Dotnet;
use support::golden::copy_tree;
use support::perf::{perf_record, perf_script_leaves};
use support::profcpu::{folded_map, plain_tar_extract, postprocess_ok, read, tar_list};
use support::running_app::{exclusive, RunningApp};
use support::scratch::{run_dir, Scratch};
use support::{PROFCPU, START_TIMEOUT};

/// Still the legacy runtime: the .NET 8 move of these tests comes with naming .NET 8 processes started without
/// perf maps.
const DOTNET: Dotnet = Dotnet::V3_1;
const HOT_METHOD: &str = "Workload::SpinThreeQuarters";
const COLD_METHOD: &str = "Workload::SpinOneQuarter";

fn workload() -> PathBuf {
    DOTNET.build_app(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/symbolize/Workload.cs"))
}

/// Starts the spin workload (perf map on) and waits until its methods are compiled.
fn start_app() -> RunningApp {
    RunningApp::start(DOTNET.command(&DOTNET.runtime_dir(), &workload(), &["spin", "60"]), START_TIMEOUT)
}

/// Stops the app and deletes what it left in /tmp, as a container's end would.
fn stop_app(app: &mut RunningApp) {
    let pid = app.pid();
    app.kill_and_remove_files();
    assert!(!Path::new(&format!("/tmp/perf-{pid}.map")).exists());
}

/// `profcpu collect -pid PID` for 2 s at 499 Hz into `base`; returns the run folder.
fn collect(pid: u32, base: &Path) -> PathBuf {
    let out = Command::new(PROFCPU)
        .args(["collect", "-pid", &pid.to_string(), "-duration", "2", "-freq", "499", "-output"])
        .arg(base)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "profcpu collect failed (perf_event_open refused?):\n{stderr}");
    PathBuf::from(String::from_utf8_lossy(&out.stdout).lines().last().expect("no run folder printed"))
}

/// Share of the folded weight whose stack contains `method`.
fn share(folded: &str, method: &str) -> f64 {
    let stacks = folded_map(folded);
    let total: u64 = stacks.values().sum();
    stacks.iter().filter(|(s, _)| s.contains(method)).map(|(_, c)| c).sum::<u64>() as f64 / total.max(1) as f64
}

/// The JIT names and the 3:1 split the workload implies.
fn assert_spin_profile(folded: &str) {
    let (hot, cold) = (share(folded, HOT_METHOD), share(folded, COLD_METHOD));
    assert!(hot + cold >= 0.8, "the two methods hold only {:.0}% of the weight:\n{folded}", (hot + cold) * 100.0);
    let split = hot / (hot + cold);
    assert!((0.6..=0.9).contains(&split), "3:1 split measured as {:.0}%:{:.0}%", split * 100.0, 100.0 - split * 100.0);
    assert!(folded.contains("Workload::<Main>"), "the calling lambda is not named");
}

/// `cmd` in a private mount namespace where /tmp and the .NET runtime's folder are empty: a machine without the
/// app's files.
fn without_app_files(cmd: &[&str]) -> std::process::Output {
    let runtime_root = DOTNET.runtime_dir();
    let script = r#"mount -t tmpfs none /tmp && mount -t tmpfs none "$1" && shift && exec "$@""#;
    let out = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", script, "sh"])
        .arg(&runtime_root)
        .args(cmd)
        .output()
        .expect("cannot run unshare (util-linux)");
    assert!(out.status.success(), "{cmd:?} without the app's files failed:\n{}", String::from_utf8_lossy(&out.stderr));
    out
}

/// One collection of the spin workload shared by the tests of this file (taken once; the app is gone after it).
struct Collection {
    run_dir: PathBuf,
    folded: String,
    script: String,
}

fn collection() -> &'static Collection {
    static ONCE: std::sync::OnceLock<Collection> = std::sync::OnceLock::new();
    ONCE.get_or_init(|| {
        let _cpu = exclusive();
        let base = run_dir("pp-dotnet");
        let _ = std::fs::remove_dir_all(&base);
        let mut app = start_app();
        let run_dir = collect(app.pid(), &base);
        stop_app(&mut app);
        let folded = read(&run_dir.join("folded_stacks.out"));
        let script = read(&run_dir.join("perf_script.out"));
        assert_spin_profile(&folded);
        Collection { run_dir, folded, script }
    })
}

#[test]
fn a_moved_collection_regenerates_the_same_stacks_without_the_app_or_its_files() {
    let c = collection();
    let scratch = Scratch::new("dotnet-moved");
    // "Another machine": the archive unpacked with plain tar into a fresh folder, processed where /tmp and the
    // runtime are empty and the app's PID is gone.
    let moved = scratch.join("moved");
    plain_tar_extract(&c.run_dir.join("prof.tar.gz"), &moved);
    assert!(tar_list(&c.run_dir.join("prof.tar.gz")).iter().any(|n| n.starts_with("symbols/perf-")), "no perf map");
    let out = without_app_files(&[PROFCPU, "postprocess", "-dir", moved.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("warning"), "{stderr}");
    assert_eq!(read(&moved.join("folded_stacks.out")), c.folded, "folded stacks differ from the original run");
    assert_eq!(read(&moved.join("perf_script.out")), c.script, "perf script differs from the original run");
    assert_spin_profile(&read(&moved.join("folded_stacks.out")));

    // -strip-tiers: one spelling per method in the script; the folded names (cut at the argument list) are equal.
    let stripped = scratch.join("stripped");
    copy_tree(&moved, &stripped);
    postprocess_ok(&stripped, &["-strip-tiers"]);
    let tiered: Vec<&str> = c.script.lines().filter(|l| l.contains(HOT_METHOD)).collect();
    assert!(tiered.iter().all(|l| l.contains(")[")), "the original names carry a tier: {:?}", tiered.first());
    let script = read(&stripped.join("perf_script.out"));
    let labels: std::collections::BTreeSet<&str> = script
        .lines()
        .filter(|l| l.contains(HOT_METHOD))
        .map(|l| l.trim_start().split_once(' ').unwrap().1.rsplit_once("+0x").unwrap().0)
        .collect();
    assert_eq!(labels.len(), 1, "tiers not merged: {labels:?}");
    assert!(labels.iter().all(|l| l.ends_with("(int32)")), "{labels:?}");
    assert_eq!(read(&stripped.join("folded_stacks.out")), c.folded);
}

#[test]
fn a_perf_record_of_the_app_gets_its_jit_frames_named() {
    let scratch = Scratch::new("dotnet-perf-record");
    let dir = scratch.join("perf-record");
    std::fs::create_dir(&dir).unwrap();
    let data = dir.join("perf.data");
    let (pid, oracle) = {
        let _cpu = exclusive();
        let mut app = start_app();
        let pid = app.pid();
        perf_record(pid, 2.0, &data);
        // While the app runs: its map is read from /tmp, as perf does. perf itself is the oracle for the leaves.
        let oracle = perf_script_leaves(&data);
        postprocess_ok(&dir, &[]);
        std::fs::copy(format!("/tmp/perf-{pid}.map"), dir.join(format!("perf-{pid}.map"))).unwrap();
        stop_app(&mut app);
        (pid, oracle)
    };
    let live = read(&dir.join("folded_stacks.out"));
    assert_spin_profile(&live);
    let metadata = read(&dir.join("metadata.txt"));
    assert!(metadata.contains(&format!("pid: {pid}\n")) && metadata.contains("comm: dotnet\n"), "{metadata}");

    // Every sample's leaf as perf names it (JIT code from the same map), except code perf cannot name.
    let script = read(&dir.join("perf_script.out"));
    let (mut compared, mut agreed) = (0, 0);
    for block in script.split("\n\n").filter(|b| !b.trim().is_empty()) {
        let mut lines = block.lines();
        let header = lines.next().unwrap();
        // "dotnet 4242/4250 [001]  1234.567890:     1001001 cpu-clock:"
        let mut fields = header.split_whitespace();
        let tid: u32 = fields.nth(1).unwrap().split_once('/').unwrap().1.parse().unwrap();
        let time = fields.nth(1).unwrap().trim_end_matches(':');
        let (secs, micros) = time.split_once('.').unwrap();
        let key = (tid, secs.parse::<u64>().unwrap() * 1_000_000 + micros.parse::<u64>().unwrap());
        let Some(theirs) = oracle.get(&key) else { continue };
        if theirs == "[unknown]" {
            continue;
        }
        let leaf = lines.next().unwrap().trim_start().split_once(' ').unwrap().1;
        let ours = leaf.rsplit_once(" (").unwrap().0.rsplit_once("+0x").unwrap().0;
        compared += 1;
        agreed += (ours == theirs) as usize;
    }
    let samples = script.lines().filter(|l| l.starts_with("dotnet ")).count();
    assert!(compared * 10 >= samples * 9, "matched only {compared} of {samples} samples with perf script");
    assert!(agreed * 100 >= compared * 97, "perf and profcpu agree on {agreed} of {compared} leaves");

    // The app and its /tmp map are gone: the map saved beside perf.data names the same frames.
    postprocess_ok(&dir, &[]);
    assert_eq!(read(&dir.join("folded_stacks.out")), live);
    // The archive carries that map, so it names them anywhere (here: /tmp and the runtime hidden too; libcoreclr's
    // frames then lose their names, the JIT frames keep theirs).
    assert!(tar_list(&dir.join("prof.tar.gz")).contains(&format!("perf-{pid}.map")));
    let elsewhere = scratch.join("elsewhere");
    plain_tar_extract(&dir.join("prof.tar.gz"), &elsewhere);
    without_app_files(&[PROFCPU, "postprocess", "-dir", elsewhere.to_str().unwrap()]);
    let offline = read(&elsewhere.join("folded_stacks.out"));
    assert!((share(&offline, HOT_METHOD) - share(&live, HOT_METHOD)).abs() < 1e-9, "JIT names lost offline");
}

#[test]
fn the_flame_graph_of_the_collection_renders_in_chromium_and_its_search_finds_the_hot_method() {
    let c = collection();
    let scratch = Scratch::new("dotnet-chromium");
    let svg = scratch.join("flamegraph.svg");
    std::fs::copy(c.run_dir.join("flamegraph.svg"), &svg).unwrap();
    let expected = share(&c.folded, HOT_METHOD) * 100.0;

    let url = format!("file://{}?s={}", svg.display(), "SpinThreeQuarters");
    let dom = chromium(&["--virtual-time-budget=2000", "--dump-dom"], &url, &scratch.join("profile-1"));
    assert!(dom.contains("Reset Search"), "the search did not run on load:\n{}", &dom[..dom.len().min(2000)]);
    let matched = dom.split("id=\"matched\"").nth(1).expect("no matched element");
    let matched = &matched[matched.find('>').unwrap() + 1..];
    let matched = &matched[..matched.find('<').unwrap()];
    let percent: f64 = matched
        .trim()
        .strip_prefix("Matched: ")
        .and_then(|m| m.strip_suffix('%'))
        .unwrap_or_else(|| panic!("matched text {matched:?}"))
        .parse()
        .unwrap();
    assert!((percent - expected).abs() < 1.0, "search matched {percent}%, the folded stacks say {expected:.1}%");
    assert!(dom.matches("fill=\"rgb(230,0,230)\"").count() >= 1, "no frame highlighted");
    let frames = dom.matches("<rect ").count();
    assert!(frames >= 10, "only {frames} frames rendered");
    let drawn = dom.split("<title>").skip(1).any(|t| t.split('<').next().unwrap().contains(HOT_METHOD));
    assert!(drawn, "the hot method is not drawn");

    let screenshot = scratch.join("flamegraph.png");
    chromium(
        &["--virtual-time-budget=2000", "--window-size=1200,600", &format!("--screenshot={}", screenshot.display())],
        &url,
        &scratch.join("profile-2"),
    );
    let png = std::fs::read(&screenshot).expect("no screenshot written");
    assert!(png.starts_with(b"\x89PNG") && png.len() > 10_000, "not a real screenshot ({} bytes)", png.len());
}
