//! JIT code named through a jitdump: Node.js with `--perf-prof` writes `jit-<pid>.dump` in its working directory
//! and maps it, which is how the recording points at it. No perf map is written (no `--perf-basic-prof`), so every
//! JS name must come from the jitdump; a capture copies the dump for offline use.

use profcpu::fs::Dir;
mod support;

use profcpu::report::names::frame_label;

use profcpu::symbolize::{Capture, FrameKind, SymbolizeOptions};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use support::perf::perf_record;
use support::recording::open_perf_data;
use support::running_app::RunningApp;
use support::scratch::Scratch;
use support::symbolize::{name_samples, Named};

const HOT: &str = "hotLoopForProfcpu";

/// Share of samples whose leaf is the hot JS function named from `dump`.
fn hot_share(out: &Named, dump: &str) -> f64 {
    let hot = out
        .samples
        .iter()
        .filter(|s| {
            let f = &s.frames[0];
            f.kind() == FrameKind::Jit && f.module() == dump && f.symbol().is_some_and(|n| n.contains(HOT))
        })
        .count();
    hot as f64 / out.samples.len().max(1) as f64
}

#[test]
fn hot_js_function_is_named_from_the_jitdump() {
    let scratch = Scratch::new("symbolize-node");
    std::fs::copy(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/symbolize/hot.js"), scratch.join("hot.js"))
        .unwrap();
    let mut cmd = Command::new("node");
    cmd.args(["--perf-prof", "--interpreted-frames-native-stack", "hot.js", "5"]).current_dir(&scratch.path);
    let started = std::time::Instant::now();
    let mut app = RunningApp::start(cmd, Duration::from_secs(30));
    let pid = app.pid();
    let dump = scratch.join(format!("jit-{pid}.dump"));
    assert!(dump.is_file(), "node --perf-prof wrote no {}", dump.display());
    let dump = dump.to_str().unwrap().to_string();
    // A perf map of node's own would be a second source of names (one a dead process with node's PID left is not).
    let map = PathBuf::from(format!("/tmp/perf-{pid}.map"));
    assert!(!support::written_since(&map, started), "node wrote a perf map: names could come from it");

    let data = scratch.join("perf.data");
    perf_record(pid, 3.0, &data);
    let reader = open_perf_data(&data).unwrap();

    // The capture finds the dump through the recording's mapping of it and starts copying while node runs.
    let out_dir = scratch.join("out");
    std::fs::create_dir(&out_dir).unwrap();
    let mut capture = Capture::new(&Dir::open(&out_dir).unwrap(), &[pid], &SymbolizeOptions::live()).unwrap();
    reader
        .for_each_record(|r| {
            capture.observe(&r);
            Ok(())
        })
        .unwrap();
    capture.poll();

    // V8 writes its jitdump through a stdio buffer: the optimized code's record reaches the file at exit at the
    // latest. Let node finish, then name from the complete file (read on the host: the process is gone).
    app.wait_for_line("done", Duration::from_secs(30));
    app.child.wait().unwrap();
    let live = name_samples(&reader, &SymbolizeOptions::live()).unwrap();
    assert!(live.stats.warnings.is_empty(), "{:?}", live.stats.warnings);
    assert!(live.samples.len() >= 300, "only {} samples in 3 s", live.samples.len());
    let share = hot_share(&live, &dump);
    assert!(share >= 0.8, "{HOT} is the leaf of only {:.1}% of samples; stats {:?}", share * 100.0, live.stats);
    let jit_leaves = live.samples.iter().filter(|s| s.frames[0].kind() == FrameKind::Jit).count();
    let named =
        live.samples.iter().filter(|s| s.frames[0].kind() == FrameKind::Jit && s.frames[0].symbol().is_some()).count();
    assert!(named as f64 >= 0.9 * jit_leaves as f64, "{named} of {jit_leaves} JIT leaves named");

    // The dump disappears; the capture's copy (completed from the file it kept open) names the same frames.
    std::fs::remove_file(&dump).unwrap();
    let summary = capture.finish(&reader, |_| Ok(())).unwrap();
    assert_eq!((summary.perf_maps, summary.jitdumps), (0, 1));
    let offline = name_samples(&reader, &SymbolizeOptions::offline(summary.dir.clone())).unwrap();
    assert!(offline.stats.warnings.is_empty(), "{:?}", offline.stats.warnings);
    let names = |out: &Named| {
        out.samples
            .iter()
            .map(|s| s.frames.iter().map(|f| frame_label(f).into_owned()).collect::<Vec<_>>())
            .collect::<Vec<_>>()
    };
    assert_eq!(names(&offline), names(&live));
}
