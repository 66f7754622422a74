//! Stacks through code built without frame pointers: a C program whose loop (built `-O2 -fomit-frame-pointer`)
//! spends its time in libc's qsort. Frame-pointer callchains end inside libc; the stack copies profcpu records by
//! default, unwound with the files' CFI, reach the loop and `main` — in our outputs, offline from `symbols/`, and in
//! `perf script` of our perf.data, which holds the unwound callchains (or, with `-keep-stack-copies`, the copies,
//! which perf unwinds itself). A `perf record --call-graph dwarf` recording is unwound too.

mod support;

use support::perf::perf;
use support::profcpu::{collect, postprocess_ok, read};
use support::scratch::Scratch;
use support::unwind::{build_sorter, build_sorter_with, script_samples, share_with_frames};

const REACH: [&str; 2] = ["sorter_loop", "main"];

/// A collection of the sorter with the default stack copies, `extra` flags added.
fn collect_sorter(dir: &Scratch, seconds: &str, extra: &[&str]) -> support::profcpu::Collected {
    let sorter = build_sorter(&dir.path);
    let out = dir.join("profilings");
    let mut args = vec!["-duration", seconds, "-freq", "199", "-output", out.to_str().unwrap()];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--", sorter.to_str().unwrap(), "4"]);
    collect(&args)
}

/// The share of the sorter's samples in `perf script` text whose stacks reach the loop and `main`; panics if a
/// frame is printed twice.
fn perf_script_reaching(data: &std::path::Path) -> f64 {
    let script = perf(&["script", "-i", data.to_str().unwrap()]);
    assert!(script.status.success(), "perf script: {}", String::from_utf8_lossy(&script.stderr));
    let samples = script_samples(&String::from_utf8_lossy(&script.stdout));
    let sorter_samples: Vec<_> = samples.iter().filter(|s| s.header.starts_with("sorter ")).collect();
    assert!(!sorter_samples.is_empty(), "perf script printed no sample of the sorter");
    for s in &sorter_samples {
        let mains = s.symbols.iter().filter(|x| *x == "main").count();
        assert!(mains <= 1, "a frame printed twice by perf script: {s:?}");
    }
    let reaching = sorter_samples.iter().filter(|s| REACH.iter().all(|f| s.symbols.iter().any(|x| x == f))).count();
    reaching as f64 / sorter_samples.len() as f64
}

#[test]
fn stacks_through_libc_reach_the_loop_and_main() {
    let _cpu = support::running_app::exclusive();
    let dir = Scratch::new("unwind-sorter");
    // Default flags (-call-graph auto), a higher rate for a few hundred samples.
    let run = collect_sorter(&dir, "8", &[]);
    assert!(!run.stderr.contains("warning"), "{}", run.stderr);
    let folded = read(&run.run_dir.join("folded_stacks.out"));
    let (share, weight) = share_with_frames(&folded, "sorter", &REACH);
    assert!(weight > 0, "no samples of the sorter:\n{folded}");
    assert!(share >= 0.99, "only {:.1}% of the samples reach sorter_loop and main:\n{folded}", share * 100.0);
    assert!(run.summary_samples() >= 200, "{}", run.stderr);

    // perf.data holds the unwound stacks instead of the copies: perf reads them without a complaint and prints them.
    let data = run.perf_data();
    let evlist = perf(&["evlist", "-v", "-i", data.to_str().unwrap()]);
    let evlist = String::from_utf8_lossy(&evlist.stdout).into_owned();
    assert!(evlist.contains("CALLCHAIN") && !evlist.contains("STACK_USER"), "perf evlist -v: {evlist}");
    let report = perf(&["report", "--stdio", "-i", data.to_str().unwrap()]);
    let report_err = String::from_utf8_lossy(&report.stderr);
    assert!(report.status.success() && report_err.trim().is_empty(), "perf report: {report_err}");
    let report_out = String::from_utf8_lossy(&report.stdout);
    let counted: u64 = report_out
        .lines()
        .find_map(|l| l.strip_prefix("# Samples: "))
        .and_then(|n| n.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("perf report counted no samples:\n{report_out}"));
    assert_eq!(counted, run.summary_samples());
    let perf_share = perf_script_reaching(&data);
    assert!(perf_share >= 0.99, "perf script: {:.1}% of the samples reach main", perf_share * 100.0);

    // Named offline from symbols/ alone: the same profile.
    let again = postprocess_ok(&run.run_dir, &[]);
    assert!(again.warnings().is_empty(), "{}", again.stderr);
    assert_eq!(read(&run.run_dir.join("folded_stacks.out")), folded, "offline naming differs from collect's");
}

#[test]
fn kept_stack_copies_are_unwound_offline_and_by_perf() {
    let _cpu = support::running_app::exclusive();
    let dir = Scratch::new("unwind-sorter-kept");
    let run = collect_sorter(&dir, "5", &["-keep-stack-copies"]);
    assert!(!run.stderr.contains("warning"), "{}", run.stderr);
    let folded = read(&run.run_dir.join("folded_stacks.out"));
    let (share, weight) = share_with_frames(&folded, "sorter", &REACH);
    assert!(weight > 0 && share >= 0.99, "only {:.1}% reach sorter_loop and main:\n{folded}", share * 100.0);

    // What unwinding needs was captured: the same result offline, from symbols/ alone.
    assert!(run.run_dir.join("symbols/unwind.txt").is_file());
    let again = postprocess_ok(&run.run_dir, &[]);
    assert!(again.warnings().is_empty(), "{}", again.stderr);
    assert_eq!(read(&run.run_dir.join("folded_stacks.out")), folded, "offline naming differs from collect's");

    // The same recording named from the kernel's frame-pointer chains alone: they stop in libc.
    let fp = postprocess_ok(&run.run_dir, &["-ignore-stack-copies"]);
    assert!(fp.warnings().is_empty(), "{}", fp.stderr);
    let fp_folded = read(&run.run_dir.join("folded_stacks.out"));
    let (fp_share, _) = share_with_frames(&fp_folded, "sorter", &REACH);
    assert!(fp_share < 0.5, "frame pointers alone reach main in {:.1}% of the samples", fp_share * 100.0);

    // perf unwinds the copies with its own DWARF unwinder and prints no frame twice (the user callchain is kept
    // where perf does not look).
    let perf_share = perf_script_reaching(&run.perf_data());
    assert!(perf_share >= 0.95, "perf script unwound {:.1}% of the samples to main", perf_share * 100.0);
}

#[test]
fn a_perf_record_dwarf_recording_is_unwound_by_postprocess() {
    let _cpu = support::running_app::exclusive();
    let dir = Scratch::new("unwind-perf-dwarf");
    let sorter = build_sorter(&dir.path);
    let data = dir.join("perf.data");
    let out = perf(&[
        "record",
        "-q",
        "-F",
        "199",
        "--call-graph",
        "dwarf,16384",
        "-o",
        data.to_str().unwrap(),
        sorter.to_str().unwrap(),
        "4",
    ]);
    assert!(out.status.success(), "perf record: {}", String::from_utf8_lossy(&out.stderr));
    let run = postprocess_ok(&dir.path, &[]);
    assert!(run.top_samples() >= 200, "{}", run.stderr);
    let folded = read(&dir.join("folded_stacks.out"));
    let (share, _) = share_with_frames(&folded, "sorter", &REACH);
    assert!(share >= 0.99, "only {:.1}% reach sorter_loop and main:\n{folded}", share * 100.0);
}

#[test]
fn a_binary_without_cfi_is_unwound_with_its_debug_files_debug_frame() {
    let _cpu = support::running_app::exclusive();
    let dir = Scratch::new("unwind-debug-frame");
    // Call frame information only in .debug_frame (no unwind tables), then split off into sorter.debug the way
    // distributions ship debug files, and the binary's own (crt) .eh_frame removed: its only CFI is in the debug file.
    let sorter = build_sorter_with(&dir.path, &["-g", "-fno-asynchronous-unwind-tables"]);
    let objcopy = |args: &[&str]| {
        let out = std::process::Command::new("objcopy").args(args).output().expect("objcopy (binutils) is missing");
        assert!(out.status.success(), "objcopy {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    let (bin, debug) = (sorter.to_str().unwrap(), dir.join("sorter.debug"));
    objcopy(&["--only-keep-debug", bin, debug.to_str().unwrap()]);
    objcopy(&["--strip-debug", "--remove-section=.eh_frame", "--remove-section=.eh_frame_hdr", bin]);
    objcopy(&["--add-gnu-debuglink", debug.to_str().unwrap(), bin]);
    let out = dir.join("profilings");
    let run = collect(&["-duration", "8", "-freq", "199", "-output", out.to_str().unwrap(), "--", bin, "3"]);
    let folded = read(&run.run_dir.join("folded_stacks.out"));
    let (share, weight) = share_with_frames(&folded, "sorter", &REACH);
    assert!(weight > 0 && share >= 0.99, "only {:.1}% reach sorter_loop and main:\n{folded}", share * 100.0);
    // Saved for offline use: the same again from symbols/ alone.
    postprocess_ok(&run.run_dir, &[]);
    assert_eq!(read(&run.run_dir.join("folded_stacks.out")), folded);
}
