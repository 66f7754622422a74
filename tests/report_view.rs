//! The view (pid/tid filters, -no-kernel, -strip-tiers), per-thread folding and the top table, driven as the
//! pipeline drives the report stage.

mod support;

use profcpu::report::profile::ReportOptions;
use profcpu::report::top;
use profcpu::report::view::{strip_tier, View};
use profcpu::report::Weight;
use profcpu::symbolize::ResolvedSample;
use support::fixtures::{golden_samples, jit, kernel, native, sample};
use support::report::{render, Rendered};

fn view(samples: &[ResolvedSample], view: View) -> Rendered {
    render(samples, &ReportOptions { view, per_thread: true, ..ReportOptions::default() })
}

/// Thread ids with samples in the view, each as often as it has samples.
fn tids(r: &Rendered) -> Vec<u32> {
    r.profile
        .threads
        .iter()
        .flat_map(|(tid, _, folded)| std::iter::repeat(*tid).take(folded.samples() as usize))
        .collect()
}

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
fn the_default_view_shows_every_sample_unchanged() {
    let samples = mixed();
    let r = view(&samples, View::default());
    assert_eq!(r.profile.shown, 4);
    assert!(r.script.contains("A::Run()[QuickJitted]+0x") && r.script.contains("do_syscall_64+0x"), "{}", r.script);
}

#[test]
fn pid_and_tid_filters() {
    let samples = mixed();
    assert_eq!(tids(&view(&samples, View { pid: Some(4242), ..View::default() })), [10, 11, 11]);
    let by_tid = view(&samples, View { tid: Some(11), ..View::default() });
    assert_eq!(tids(&by_tid), [11, 11]);
    assert_eq!(by_tid.profile.facts.samples, 4, "facts count every sample, before the view");
    let none = view(&samples, View { pid: Some(4242), tid: Some(12), ..View::default() });
    assert_eq!(none.profile.shown, 0);
    assert!(none.script.is_empty() && none.profile.folded.is_empty());
}

#[test]
fn no_kernel_drops_kernel_frames_and_kernel_only_samples() {
    let samples = mixed();
    let shown = view(&samples, View { no_kernel: true, ..View::default() });
    assert_eq!(shown.profile.shown, 3, "the kworker sample had only kernel frames");
    assert!(!shown.script.contains("kernel.kallsyms"), "{}", shown.script);
    assert!(shown.folded().contains("dotnet;main 1\n"), "main stays, do_syscall_64 goes:\n{}", shown.folded());
}

#[test]
fn strip_tiers_merges_one_methods_tiers_everywhere() {
    let samples = mixed();
    let shown = view(&samples, View { strip_tiers: true, ..View::default() });
    assert!(shown.script.contains("void [App] A::Run()+0x") && !shown.script.contains("Tier1"), "{}", shown.script);
    // In the top table (which keeps the names of the flame graph) the method now has both samples.
    let table = top::from_folded(&shown.profile.folded, 5);
    assert_eq!(table.rows[0].name, "void [App] A::Run");
    assert_eq!(table.rows[0].samples, 2);
    // The unstripped input is untouched.
    assert_eq!(samples[0].frames[0].symbol(), Some("void [App] A::Run()[QuickJitted]"));
}

#[test]
fn per_thread_folding_partitions_the_samples() {
    let samples = golden_samples();
    let r = render(&samples, &ReportOptions { weight: Weight::Samples, per_thread: true, ..ReportOptions::default() });
    let threads: Vec<u32> = r.profile.threads.iter().map(|(tid, _, _)| *tid).collect();
    assert_eq!(threads, [4242, 4250, 4251, 4252, 4253, 4254, 4255]);
    // Each thread's stacks begin with its own name, and adding up the threads gives the whole.
    let parts: u64 = r.profile.threads.iter().map(|(_, _, folded)| folded.total()).sum();
    assert_eq!(parts, r.profile.folded.total());
    for (tid, comm, _) in &r.profile.threads {
        assert!(samples.iter().any(|s| s.tid == *tid && s.comm == *comm), "{tid} {comm}");
    }
}

#[test]
fn top_table_counts_leaf_samples() {
    let samples = golden_samples();
    let table = top::from_folded(&render(&samples, &ReportOptions::default()).profile.folded, 3);
    assert_eq!(table.total_samples, 12);
    assert_eq!(table.rows.len(), 3);
    // Fib is the leaf of three cpu-clock samples (two OptimizedTier1, one QuickJitted); the task-clock sample is
    // not counted, as it is not in the folded stacks either.
    assert_eq!((table.rows[0].name.as_str(), table.rows[0].samples), ("int64 [App] App::Fib", 3));
    assert!((table.rows[0].percent - 25.0).abs() < 1e-9);
    let text = table.to_string();
    assert!(text.starts_with("Hottest frames by self time (12 samples):\n"), "{text}");
    assert!(text.contains("         3   25.0%  int64 [App] App::Fib\n"), "{text}");
    assert_eq!(text.lines().count(), 5, "{text}");
    // Ties are broken by name, so the table is stable.
    assert!(table.rows[1].samples == 1 && table.rows[1].name < table.rows[2].name, "{text}");
}

/// The symbolizer hands the samples of one callchain the same shared stack, and the stages after it work once per
/// stack: the outputs must be exactly those of the same samples with unshared stacks, under every view, when one
/// stack shows up under several thread names, and whether a stack is first met kept or filtered out.
#[test]
fn shared_stacks_give_the_outputs_of_unshared_ones() {
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
            let r = render(samples, &ReportOptions { view: view.clone(), ..ReportOptions::default() });
            (r.profile.folded.clone(), r.script, top::from_folded(&r.profile.folded, 5).to_string())
        };
        let (expected, actual) = (outputs(&unshared), outputs(&shared));
        assert_eq!(actual.0, expected.0, "{view:?}: folded stacks differ");
        assert!(actual.1 == expected.1, "{view:?}: perf script text differs");
        assert_eq!(actual.2, expected.2, "{view:?}: top table differs");
    }
}
