//! The symbolizer on real .NET Core 3.1 processes sampled by the real kernel (`perf record`): JIT-compiled methods
//! named from the runtime's perf map with the shares the workload implies, libcoreclr named from a split debug
//! file laid out as dotnet-symbol does, and a target that exits before symbolization named from a capture.

mod support;

use profcpu::fs::Dir;
use profcpu::report::names::frame_label;

use profcpu::symbolize::{Capture, FrameKind, ResolvedSample, SymbolizeOptions};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use support::dotnet::Dotnet;
use support::perf::{perf_record, perf_script_leaves};
use support::recording::open_perf_data;
use support::running_app::{exclusive, RunningApp};
use support::scratch::Scratch;
use support::symbolize::{name_samples, Named};
use support::START_TIMEOUT;

/// Still the legacy runtime: the .NET 8 move of these tests comes with naming .NET 8 processes started without
/// perf maps.
const DOTNET: Dotnet = Dotnet::V3_1;

fn workload() -> PathBuf {
    DOTNET.build_app(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/symbolize/Workload.cs"))
}

fn leaf(s: &ResolvedSample) -> &profcpu::symbolize::Frame {
    s.frames.first().expect("every sample has a frame")
}

fn share(out: &Named, pred: impl Fn(&ResolvedSample) -> bool) -> f64 {
    out.samples.iter().filter(|s| pred(s)).count() as f64 / out.samples.len().max(1) as f64
}

/// Checks of the "spin" workload: JIT leaves named from `map_module`, split about 3:1.
fn assert_spin_profile(out: &Named, map_module: &str) {
    let n = out.samples.len();
    // 999 Hz for 3 s gives ~1800 here (cpu-clock ticks at ~600 Hz on this VM); far fewer means a starved run.
    assert!(n >= 300, "only {n} samples in 3 s");
    let jit: Vec<&ResolvedSample> = out.samples.iter().filter(|s| leaf(s).kind() == FrameKind::Jit).collect();
    let named = jit.iter().filter(|s| leaf(s).symbol().is_some() && leaf(s).module() == map_module).count();
    assert!(jit.len() as f64 >= 0.8 * n as f64, "the workload is JIT code, but only {} of {n} leaves are", jit.len());
    assert!(
        named as f64 >= 0.9 * jit.len() as f64,
        "only {named} of {} JIT leaves named from {map_module}; stats {:?}",
        jit.len(),
        out.stats
    );
    let unknown = share(out, |s| leaf(s).kind() == FrameKind::Unknown);
    assert!(unknown < 0.05, "{:.1}% of leaves in unknown code", unknown * 100.0);

    let method = |name: &'static str| move |s: &ResolvedSample| leaf(s).symbol().is_some_and(|n| n.contains(name));
    let three = share(out, method("Workload::SpinThreeQuarters(int32)"));
    let one = share(out, method("Workload::SpinOneQuarter(int32)"));
    assert!(three + one >= 0.9, "the two methods hold only {:.1}% of samples", (three + one) * 100.0);
    let split = three / (three + one);
    assert!(
        (0.65..=0.85).contains(&split),
        "3:1 work split measured as {:.1}% / {:.1}%",
        split * 100.0,
        100.0 - split * 100.0
    );
    // Callers are named too: the method that calls both.
    let main = out
        .samples
        .iter()
        .filter(|s| s.frames.iter().any(|f| f.symbol().is_some_and(|n| n.contains("Workload::<Main>"))))
        .count();
    assert!(main as f64 >= 0.8 * n as f64, "the calling lambda is named in only {main} of {n} stacks");
}

#[test]
fn jit_methods_are_named_from_the_perf_map_with_the_expected_shares() {
    let _cpu = exclusive();
    let runtime = DOTNET.runtime_dir();
    let dll = workload();
    let scratch = Scratch::new("symbolize-dotnet-perfmap");
    let mut app = RunningApp::start(DOTNET.command(&runtime, &dll, &["spin", "60"]), START_TIMEOUT);
    let pid = app.pid();
    let data = scratch.join("perf.data");
    perf_record(pid, 3.0, &data);
    let reader = open_perf_data(&data).unwrap();
    let out = name_samples(&reader, &SymbolizeOptions::live()).unwrap();
    // perf itself, reading the same perf map (so before the process and its map go), is the oracle for leaves.
    let oracle = perf_script_leaves(&data);
    app.kill_and_remove_files();

    assert_spin_profile(&out, &format!("/tmp/perf-{pid}.map"));
    assert!(out.stats.warnings.is_empty(), "{:?}", out.stats.warnings);
    for s in &out.samples {
        assert_eq!((s.pid, s.comm.as_ref(), s.event.as_ref()), (pid, "dotnet", "cpu-clock"));
    }
    // Native frames (libcoreclr keeps .symtab in this runtime) are named on the way to Main.
    let coreclr = out
        .samples
        .iter()
        .filter(|s| {
            s.frames
                .iter()
                .any(|f| f.symbol() == Some("CallDescrWorkerInternal") && f.module().ends_with("/libcoreclr.so"))
        })
        .count();
    assert!(coreclr as f64 >= 0.8 * out.samples.len() as f64, "coreclr caller named in {coreclr} stacks");

    let (mut compared, mut agreed) = (0, 0);
    for s in &out.samples {
        let Some(theirs) = oracle.get(&(s.tid, s.time / 1000)) else { continue };
        if theirs == "[unknown]" {
            continue; // perf names no ReadyToRun code; we keep the module there
        }
        compared += 1;
        agreed += (leaf(s).symbol() == Some(theirs.as_str())) as usize;
    }
    assert!(compared as f64 >= 0.9 * out.samples.len() as f64, "perf script matched only {compared} samples");
    assert!(agreed as f64 >= 0.97 * compared as f64, "perf and profcpu agree on {agreed} of {compared} leaves");
}

/// A copy of the runtime (hard links) whose libcoreclr.so is stripped; returns (runtime dir, full debug file).
fn stripped_runtime(scratch: &Scratch) -> (PathBuf, PathBuf) {
    let original = DOTNET.runtime_dir();
    let copy = scratch.join("runtime");
    let ok = Command::new("cp").arg("-al").arg(&original).arg(&copy).status().unwrap().success()
        || Command::new("cp").arg("-a").arg(&original).arg(&copy).status().unwrap().success();
    assert!(ok, "cannot copy the runtime");
    let lib = DOTNET.framework_dir(&copy).join("libcoreclr.so");
    let debug = scratch.join("libcoreclr.so.dbg");
    let run = |args: &[&std::ffi::OsStr]| {
        let out = Command::new(args[0]).args(&args[1..]).output().unwrap();
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    run(&["objcopy".as_ref(), "--only-keep-debug".as_ref(), lib.as_os_str(), debug.as_os_str()]);
    let stripped = scratch.join("libcoreclr.so.stripped");
    run(&["strip".as_ref(), "--strip-all".as_ref(), "-o".as_ref(), stripped.as_os_str(), lib.as_os_str()]);
    // Renaming replaces the hard link in the copy only, never the cached original.
    std::fs::rename(&stripped, &lib).unwrap();
    let sections = run(&["readelf".as_ref(), "-S".as_ref(), lib.as_os_str()]);
    assert!(
        !sections.contains(".symtab") && sections.contains(".gnu_debuglink"),
        "strip kept .symtab or lost the debuglink"
    );
    (copy, debug)
}

fn build_id(file: &Path) -> String {
    let out = Command::new("readelf").arg("-n").arg(file).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines().find_map(|l| l.trim().strip_prefix("Build ID: ")).expect("no build-id").trim().to_string()
}

/// Names of the frames in `lib`, in sample order.
fn frames_in<'a>(out: &'a Named, lib: &'a str) -> impl Iterator<Item = &'a profcpu::symbolize::Frame> + 'a {
    out.samples.iter().flat_map(|s| s.frames.iter()).filter(move |f| f.module() == lib)
}

#[test]
fn stripped_coreclr_is_named_from_a_dotnet_symbol_debug_file() {
    let _cpu = exclusive();
    let scratch = Scratch::new("symbolize-dotnet-debuglink");
    let (runtime, debug) = stripped_runtime(&scratch);
    let fw = DOTNET.framework_dir(&runtime);
    let lib = fw.join("libcoreclr.so");

    // dotnet-symbol's layout under a -symbols root: <root>/<runtime dir>/libcoreclr.so.dbg.
    let by_path = scratch.join("symbols-by-path");
    let placed = by_path.join(fw.strip_prefix("/").unwrap()).join("libcoreclr.so.dbg");
    std::fs::create_dir_all(placed.parent().unwrap()).unwrap();
    std::fs::copy(&debug, &placed).unwrap();
    // The same file found by build-id only.
    let by_id = scratch.join("symbols-by-build-id");
    let id = build_id(&lib);
    let id_path = by_id.join(format!(".build-id/{}/{}.debug", &id[..2], &id[2..]));
    std::fs::create_dir_all(id_path.parent().unwrap()).unwrap();
    std::fs::copy(&debug, &id_path).unwrap();
    // A decoy where the search looks first (<path>.dbg): the debug file of another library must be rejected.
    let decoy = fw.join("libcoreclr.so.dbg");
    let out =
        Command::new("objcopy").arg("--only-keep-debug").arg(fw.join("libclrjit.so")).arg(&decoy).output().unwrap();
    assert!(out.status.success());

    let dll = workload();
    let mut app = RunningApp::start(DOTNET.command(&runtime, &dll, &["alloc", "60"]), START_TIMEOUT);
    let pid = app.pid();
    let data = scratch.join("perf.data");
    perf_record(pid, 3.0, &data);
    let reader = open_perf_data(&data).unwrap();
    let symbolize = |roots: Vec<PathBuf>| {
        name_samples(&reader, &SymbolizeOptions { debug_roots: roots, ..SymbolizeOptions::live() }).unwrap()
    };
    let plain = symbolize(vec![]);
    let with_path = symbolize(vec![by_path.clone()]);
    let with_id = symbolize(vec![by_id.clone()]);
    app.kill_and_remove_files();

    let lib = lib.to_str().unwrap();
    let total = frames_in(&with_path, lib).count();
    let leaves = with_path.samples.iter().filter(|s| leaf(s).module() == lib).count();
    assert!(
        leaves as f64 >= 0.3 * with_path.samples.len() as f64,
        "the GC workload spent only {leaves} samples in coreclr"
    );
    for (how, out) in [("debuglink path", &with_path), ("build-id", &with_id)] {
        let named = frames_in(out, lib).filter(|f| f.symbol().is_some()).count();
        assert!(named as f64 >= 0.95 * total as f64, "{how}: {named} of {total} coreclr frames named");
        let gc = frames_in(out, lib).filter(|f| f.symbol().is_some_and(|n| n.starts_with("WKS::gc_heap::"))).count();
        assert!(gc as f64 >= 0.2 * total as f64, "{how}: only {gc} of {total} coreclr frames in the GC");
        assert!(frames_in(out, lib).all(|f| f.kind() == FrameKind::Native));
    }
    let names = |out: &Named| frames_in(out, lib).map(|f| frame_label(f).into_owned()).collect::<Vec<_>>();
    assert_eq!(names(&with_path), names(&with_id), "both layouts must find the same file");
    // Without the debug file only .dynsym is left (the decoy is rejected): the GC's internal functions stay unnamed.
    assert!(
        frames_in(&plain, lib).all(|f| !f.symbol().is_some_and(|n| n.contains("gc_heap"))),
        "GC internals named without the debug file: the decoy was accepted or .symtab survived"
    );
    let plain_named = frames_in(&plain, lib).filter(|f| f.symbol().is_some()).count();
    assert!(plain_named < total / 2, "{plain_named} of {total} named from .dynsym alone");
}

#[test]
fn frames_of_a_target_that_exited_are_named_from_the_capture() {
    let _cpu = exclusive();
    let runtime = DOTNET.runtime_dir();
    let dll = workload();
    let scratch = Scratch::new("symbolize-dotnet-exited");
    let mut app = RunningApp::start(DOTNET.command(&runtime, &dll, &["spin", "60"]), START_TIMEOUT);
    let pid = app.pid();
    let out_dir = scratch.join("out");
    std::fs::create_dir(&out_dir).unwrap();
    let mut capture = Capture::new(&Dir::open(&out_dir).unwrap(), &[pid], &SymbolizeOptions::live()).unwrap();
    let data = scratch.join("perf.data");
    let recorder = {
        let data = data.clone();
        std::thread::spawn(move || perf_record(pid, 3.0, &data))
    };
    while !recorder.is_finished() {
        capture.poll();
        std::thread::sleep(Duration::from_millis(250));
    }
    recorder.join().expect("perf record failed");

    // The target exits and its files go: only the capture knows the JIT names now.
    app.kill_and_remove_files();
    assert!(!Path::new(&format!("/proc/{pid}")).exists());
    let reader = open_perf_data(&data).unwrap();
    let mut live = Vec::new();
    let summary = capture
        .finish(&reader, |s| {
            live.push(s);
            Ok(())
        })
        .unwrap();
    assert!(summary.stats.warnings.is_empty(), "{:?}", summary.stats.warnings);
    assert_eq!((summary.perf_maps, summary.jitdumps), (1, 0));
    assert_eq!(summary.stats.samples, live.len() as u64);
    eprintln!(
        "capture: {} files, {} bytes in {}, finish took {:?}",
        std::fs::read_dir(summary.dir.path()).unwrap().count(),
        summary.bytes,
        summary.dir.path().display(),
        summary.finish_time
    );

    let offline = name_samples(&reader, &SymbolizeOptions::offline(summary.dir.clone())).unwrap();
    assert!(offline.stats.warnings.is_empty(), "{:?}", offline.stats.warnings);
    assert_spin_profile(&offline, &format!("/tmp/perf-{pid}.map"));
    // Offline names equal the ones made while collecting, frame for frame.
    let all = |samples: &[ResolvedSample]| {
        samples
            .iter()
            .map(|s| s.frames.iter().map(|f| (frame_label(f).into_owned(), f.kind())).collect::<Vec<_>>())
            .collect::<Vec<_>>()
    };
    assert_eq!(all(&offline.samples), all(&live));
    // Native and kernel frames come from the saved tables too.
    let named_native = offline
        .samples
        .iter()
        .flat_map(|s| &s.frames)
        .filter(|f| f.kind() == FrameKind::Native && f.symbol().is_some())
        .count();
    assert!(named_native >= offline.samples.len(), "only {named_native} named native frames offline");
    let kernel: Vec<_> =
        offline.samples.iter().flat_map(|s| &s.frames).filter(|f| f.kind() == FrameKind::Kernel).collect();
    let named_kernel = kernel.iter().filter(|f| f.symbol().is_some()).count();
    assert!(
        named_kernel as f64 >= 0.9 * kernel.len() as f64,
        "{named_kernel} of {} kernel frames named offline",
        kernel.len()
    );
}
