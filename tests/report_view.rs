//! The view (pid/tid filters, -no-kernel, -strip-tiers), per-thread grouping and files, the top table, and
//! write_outputs as the collect/postprocess commands will call it.

use profcpu::report::folded::{fold, FoldOptions};
use profcpu::report::top::{self, hottest_self};
use profcpu::report::view::{group_by_tid, strip_tier, View};
use profcpu::report::{self, write_outputs, ReportOptions, Weight};
use profcpu::symbolize::{FrameKind, ResolvedSample};
use std::borrow::Cow;
use std::path::PathBuf;

#[path = "report_common.rs"]
mod common;
use common::{golden_samples, jit, kernel, native, sample};

#[test]
fn strip_tier_drops_only_one_trailing_known_tier() {
    for (input, expected) in [
        ("int64 [App] App::Fib(int32)[OptimizedTier1]", "int64 [App] App::Fib(int32)"),
        ("void [App] A::B()[QuickJitted]", "void [App] A::B()"),
        ("void [App] A::B()[OptimizedTier1OSR]", "void [App] A::B()"),
        ("void [App] A::B()[Optimized]", "void [App] A::B()"),
        ("void [App] A::B()[MinOptJitted]", "void [App] A::B()"),
        ("void [App] A::B()[InstrumentedTier]", "void [App] A::B()"),
        ("void [App] A::B()[InstrumentedTierOptimized]", "void [App] A::B()"),
        ("void [App] A::B()[ReadyToRun]", "void [App] A::B()"),
        ("void [App] A::B()[PreJIT]", "void [App] A::B()"),
        // Only the trailing group, only once.
        ("void [App] A::B()[PreJIT][OptimizedTier1]", "void [App] A::B()[PreJIT]"),
        // Not a tier: kept.
        ("int[] [App] A::Arr()[Custom]", "int[] [App] A::Arr()[Custom]"),
        ("std::array<int, 3>::operator[]", "std::array<int, 3>::operator[]"),
        ("[OptimizedTier1]", "[OptimizedTier1]"),
        ("[App] A::B()[Instrumented Tier]", "[App] A::B()[Instrumented Tier]"),
        ("plain", "plain"),
    ] {
        assert_eq!(strip_tier(input), expected, "{input}");
    }
}

fn mixed() -> Vec<ResolvedSample> {
    let mut samples = vec![
        sample("dotnet", 10, 1, 1, vec![native("main", "/app/dotnet", 1), jit("void [App] A::Run()[QuickJitted]", 2)]),
        sample(
            "dotnet",
            11,
            2,
            1,
            vec![native("main", "/app/dotnet", 1), jit("void [App] A::Run()[OptimizedTier1]", 3)],
        ),
        sample("dotnet", 11, 3, 1, vec![native("main", "/app/dotnet", 1), kernel("do_syscall_64", 4)]),
        sample("kworker", 12, 4, 1, vec![kernel("worker_thread", 5), kernel("process_one_work", 6)]),
    ];
    samples[3].pid = 7;
    samples
}

#[test]
fn identity_view_borrows_and_changes_nothing() {
    let samples = mixed();
    let view = View::default();
    assert!(view.is_identity());
    assert!(matches!(view.apply(&samples), Cow::Borrowed(_)));
}

#[test]
fn pid_and_tid_filters() {
    let samples = mixed();
    let by_pid = View { pid: Some(4242), ..View::default() }.apply(&samples);
    assert_eq!(by_pid.iter().map(|s| s.tid).collect::<Vec<_>>(), [10, 11, 11]);
    let by_tid = View { tid: Some(11), ..View::default() }.apply(&samples);
    assert_eq!(by_tid.iter().map(|s| s.time).collect::<Vec<_>>(), [2, 3]);
    let none = View { pid: Some(4242), tid: Some(12), ..View::default() }.apply(&samples);
    assert!(none.is_empty());
}

#[test]
fn no_kernel_drops_kernel_frames_and_kernel_only_samples() {
    let samples = mixed();
    let shown = View { no_kernel: true, ..View::default() }.apply(&samples);
    assert_eq!(shown.len(), 3, "the kworker sample had only kernel frames");
    assert!(shown.iter().all(|s| s.frames.iter().all(|f| f.kind != FrameKind::Kernel)));
    assert_eq!(shown[2].frames.len(), 1, "main stays, do_syscall_64 goes");
}

#[test]
fn strip_tiers_merges_one_methods_tiers_everywhere() {
    let samples = mixed();
    let shown = View { strip_tiers: true, ..View::default() }.apply(&samples);
    let leaf = |s: &ResolvedSample| s.frames[0].symbol.as_deref().unwrap().to_string();
    assert_eq!(leaf(&shown[0]), "void [App] A::Run()");
    assert_eq!(leaf(&shown[1]), "void [App] A::Run()");
    // In the top table (which keeps the names of the flame graph) the method now has both samples.
    let top = hottest_self(shown.iter(), 5);
    assert_eq!(top.rows[0].name, "void [App] A::Run");
    assert_eq!(top.rows[0].samples, 2);
    // The unstripped input is untouched.
    assert_eq!(leaf(&samples[0]), "void [App] A::Run()[QuickJitted]");
}

#[test]
fn per_thread_grouping_partitions_the_samples() {
    let samples = golden_samples();
    let groups = group_by_tid(&samples);
    assert_eq!(groups.keys().copied().collect::<Vec<_>>(), [4242, 4250, 4251, 4252, 4253, 4254, 4255]);
    assert_eq!(groups.values().map(Vec::len).sum::<usize>(), samples.len());
    assert!(groups.iter().all(|(tid, group)| group.iter().all(|s| s.tid == *tid)));
    // Folding per thread and adding up gives the whole.
    let opts = FoldOptions { event: Some("cpu-clock".into()), weight: Weight::Samples };
    let whole = fold(&samples, &opts);
    let parts: u64 = groups.values().map(|g| fold(g.iter().copied(), &opts).total()).sum();
    assert_eq!(parts, whole.total());
}

#[test]
fn top_table_counts_leaf_samples() {
    let samples = golden_samples();
    let top = hottest_self(&samples, 3);
    assert_eq!(top.total_samples, 12);
    assert_eq!(top.rows.len(), 3);
    // Fib is the leaf of three cpu-clock samples (two OptimizedTier1, one QuickJitted); the task-clock sample is
    // not counted, as it is not in the folded stacks either.
    assert_eq!((top.rows[0].name.as_str(), top.rows[0].samples), ("int64 [App] App::Fib", 3));
    assert!((top.rows[0].percent - 25.0).abs() < 1e-9);
    let text = top.to_string();
    assert!(text.starts_with("Hottest frames by self time (12 samples):\n"), "{text}");
    assert!(text.contains("         3   25.0%  int64 [App] App::Fib\n"), "{text}");
    assert_eq!(text.lines().count(), 5, "{text}");
    // Ties are broken by name, so the table is stable.
    assert!(top.rows[1].samples == 1 && top.rows[1].name < top.rows[2].name, "{text}");
}

#[test]
fn top_table_from_folded_stacks_is_the_same_table() {
    let samples = golden_samples();
    let folded = fold(&samples, &FoldOptions { event: None, weight: Weight::Period });
    assert_eq!(top::from_folded(&folded, 10), hottest_self(&samples, 10));
    assert_eq!(top::from_folded(&folded, 10).rows.iter().map(|r| r.samples).sum::<u64>(), folded.samples());
}

#[test]
fn write_outputs_writes_every_file_and_never_overwrites() {
    let dir = std::env::temp_dir().join(format!("profcpu-outputs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let samples = golden_samples();
    let opts = ReportOptions { per_thread: true, ..ReportOptions::default() };
    let summary = write_outputs(&dir, &samples, &opts).unwrap();
    let mut expected: Vec<PathBuf> =
        vec![report::PERF_SCRIPT_FILE.into(), report::FOLDED_FILE.into(), report::FLAMEGRAPH_FILE.into()];
    for tid in [4242, 4250, 4251, 4252, 4253, 4254, 4255] {
        expected.push(report::thread_folded_file(tid).into());
        expected.push(report::thread_flamegraph_file(tid).into());
    }
    assert_eq!(summary.files, expected);
    for file in &summary.files {
        assert!(std::fs::metadata(dir.join(file)).unwrap().len() > 0, "{} is empty", file.display());
    }
    assert_eq!(summary.folded_samples, 9);
    assert_eq!(summary.top.rows.len(), 5);
    let thread_svg = std::fs::read_to_string(dir.join("flamegraph.4253.svg")).unwrap();
    assert!(thread_svg.contains("thread 4253 (java)"), "per-thread title");
    let thread_folded = std::fs::read_to_string(dir.join("folded_stacks.4253.out")).unwrap();
    assert!(thread_folded.lines().all(|l| l.starts_with("java;")), "{thread_folded}");

    // A second run into the same folder refuses instead of overwriting; a planted symlink is not followed.
    let err = format!("{:#}", write_outputs(&dir, &samples, &opts).unwrap_err());
    assert!(err.contains("exists"), "{err}");
    let other = dir.join("other");
    std::fs::create_dir(&other).unwrap();
    let victim = dir.join("victim.txt");
    std::fs::write(&victim, "keep").unwrap();
    std::os::unix::fs::symlink(&victim, other.join(report::FOLDED_FILE)).unwrap();
    let err = format!("{:#}", write_outputs(&other, &samples, &opts).unwrap_err());
    assert!(err.contains("folded_stacks.out"), "{err}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn write_outputs_without_stacks_says_so_instead_of_drawing() {
    let dir = std::env::temp_dir().join(format!("profcpu-outputs-empty-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let samples = vec![sample("dotnet", 1, 1, 1, vec![])];
    let summary = write_outputs(&dir, &samples, &ReportOptions::default()).unwrap();
    assert_eq!(summary.files, [PathBuf::from(report::PERF_SCRIPT_FILE), PathBuf::from(report::FOLDED_FILE)]);
    assert_eq!(summary.notes, ["no samples with a stack: flamegraph.svg was not written"]);
    assert!(!dir.join(report::FLAMEGRAPH_FILE).exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The symbolizer hands the samples of one callchain the same shared stack, and the stages after it work once per
/// stack: the outputs must be exactly those of the same samples with unshared stacks, under every view, when one
/// stack shows up under several thread names, and whether a stack is first met kept or filtered out.
#[test]
fn shared_stacks_give_the_outputs_of_unshared_ones() {
    use profcpu::report::script::{write_perf_script, ScriptOptions};
    use profcpu::symbolize::{Frame, Stack};
    use std::collections::HashMap;
    use std::sync::Arc;

    let mut unshared = golden_samples();
    unshared.extend(mixed());
    // Every stack again under another thread name, and once more under the first.
    let again: Vec<ResolvedSample> = unshared
        .iter()
        .flat_map(|s| {
            let mut other = s.clone();
            other.comm = Arc::from("other thread");
            [other, s.clone()]
        })
        .collect();
    unshared.extend(again);
    let mut stacks: HashMap<Vec<Frame>, Stack> = HashMap::new();
    let shared: Vec<ResolvedSample> = unshared
        .iter()
        .map(|s| {
            let stack = stacks.entry(s.frames.to_vec()).or_insert_with(|| Stack::shared(s.frames.to_vec())).clone();
            ResolvedSample { frames: stack, ..s.clone() }
        })
        .collect();
    assert!(stacks.len() * 3 <= shared.len(), "stacks do repeat");

    for view in [
        View::default(),
        View { no_kernel: true, ..View::default() },
        View { strip_tiers: true, ..View::default() },
        View { no_kernel: true, strip_tiers: true, ..View::default() },
        View { tid: Some(11), no_kernel: true, ..View::default() },
    ] {
        let outputs = |samples: &[ResolvedSample]| {
            let shown = view.apply(samples);
            let folded = fold(shown.iter(), &FoldOptions::default());
            let mut script = Vec::new();
            write_perf_script(shown.iter(), &ScriptOptions::default(), &mut script).unwrap();
            (folded, script, hottest_self(shown.iter(), 5).to_string())
        };
        let (expected, actual) = (outputs(&unshared), outputs(&shared));
        assert_eq!(actual.0, expected.0, "{view:?}: folded stacks differ");
        assert!(actual.1 == expected.1, "{view:?}: perf script text differs");
        assert_eq!(actual.2, expected.2, "{view:?}: top table differs");
    }
}
