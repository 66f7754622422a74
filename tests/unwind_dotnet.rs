//! A .NET 8 thread on the CPU inside libc (a P/Invoke of libc's qsort with a managed comparator,
//! `tests/data/unwind/QsortApp.cs`): with the default stack copies its libc stacks reach the managed caller, the
//! thread's start method and libc's `clone3`; the kernel's frame-pointer chains of the same recording (its copies
//! kept: `-keep-stack-copies`) stop in libc.
//! Off the CPU (`-mode offcpu`), a thread blocked in `Monitor.Wait` and `Thread.Sleep` has switch-out stacks that
//! reach from libc's wait to the managed method that waited and the thread's start method.

mod support;

use support::dotnet::Dotnet;
use support::offcpu::{stacks, weight};
use support::profcpu::{collect, postprocess_ok, read};
use support::running_app::{exclusive, RunningApp};
use support::scratch::Scratch;
use support::unwind::{script_samples, ScriptSample};
use support::START_TIMEOUT;

/// The spinner thread's samples whose leaf frame is in libc.
fn in_libc(script: &str) -> Vec<ScriptSample> {
    script_samples(script)
        .into_iter()
        .filter(|s| s.header.starts_with("spinner "))
        .filter(|s| s.symbols.first().is_some_and(|f| f.contains("msort_with_tmp") || f.contains("qsort")))
        .collect()
}

fn reaching(samples: &[ScriptSample], frame: &str) -> usize {
    samples.iter().filter(|s| s.symbols.iter().any(|f| f.contains(frame))).count()
}

#[test]
fn dotnet_stacks_inside_libc_reach_the_managed_caller_and_the_thread_start() {
    let _cpu = exclusive();
    let dotnet = Dotnet::V8;
    let runtime = dotnet.runtime_dir();
    let dll = dotnet.build_app(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/unwind/QsortApp.cs"));
    let mut cmd = dotnet.command(&runtime, &dll, &["12"]);
    // Methods with loops compiled optimized at once: a tier-0 frame under an on-stack-replacement frame loses its
    // caller to any unwinder (the OSR method's frame is laid over the tier-0 one), which is not what this test is about.
    cmd.env("DOTNET_TC_QuickJitForLoops", "0");
    let app = RunningApp::start(cmd, START_TIMEOUT);
    let dir = Scratch::new("unwind-dotnet");
    let out = dir.join("profilings");
    let pid = app.pid().to_string();
    // The copies kept in perf.data, to be named without them too.
    let run = collect(&[
        "-pid",
        &pid,
        "-duration",
        "5",
        "-freq",
        "199",
        "-keep-stack-copies",
        "-output",
        out.to_str().unwrap(),
    ]);
    let off_cpu = collect(&["-pid", &pid, "-duration", "3", "-mode", "offcpu", "-output", out.to_str().unwrap()]);
    drop(app);
    assert!(!off_cpu.stderr.contains("warning"), "{}", off_cpu.stderr);
    blocked_stacks_reach_the_waiting_method_and_the_thread_start(&read(&off_cpu.run_dir.join("folded_stacks.out")));
    assert!(!run.stderr.contains("warning"), "{}", run.stderr);

    let script = read(&run.run_dir.join("perf_script.out"));
    let libc = in_libc(&script);
    assert!(libc.len() >= 20, "only {} spinner samples inside libc:\n{}", libc.len(), run.stderr);
    for frame in ["App::SpinLoop", "App::SpinMain"] {
        let n = reaching(&libc, frame);
        assert!(n as f64 >= 0.95 * libc.len() as f64, "{n} of {} libc stacks reach {frame}", libc.len());
    }
    let rooted = libc.iter().filter(|s| s.symbols.last().is_some_and(|f| f == "clone3")).count();
    assert!(rooted as f64 >= 0.95 * libc.len() as f64, "{rooted} of {} libc stacks end at clone3", libc.len());

    // The kernel's frame-pointer chains of the same samples.
    postprocess_ok(&run.run_dir, &["-ignore-stack-copies"]);
    let fp = in_libc(&read(&run.run_dir.join("perf_script.out")));
    let fp_main = reaching(&fp, "App::SpinMain");
    assert!(
        (fp_main as f64) < 0.5 * fp.len() as f64,
        "frame pointers alone reach SpinMain in {fp_main} of {} libc stacks",
        fp.len()
    );
}

/// The waiter thread's blocked time (µs), in Monitor.Wait (50 ms) and Thread.Sleep (20 ms) by turns: at least 95%
/// of it is in stacks that reach the managed method that waited, the thread's start method (WaitMain) and libc's
/// `clone3`, each of the two waits with its share. For the Thread.Sleep ones this takes the prologue rules the
/// capture reads from the JIT code: once `Nap` is recompiled at tier 1 without a frame (`push rax; mov edi, 20;
/// call [Sleep]`), rbp still points at WaitMain's frame, and the frame-pointer step out of Nap would land in
/// WaitMain's caller.
fn blocked_stacks_reach_the_waiting_method_and_the_thread_start(folded: &str) {
    let waiter: Vec<_> = stacks(folded).into_iter().filter(|s| s.thread() == "waiter" && !s.runnable()).collect();
    let total = weight(&waiter, |_| true);
    assert!(total >= 1_000_000, "only {total} µs of the waiter's blocked time in 3 s:\n{folded}");
    let mut complete = 0;
    for (caller, start) in [("App::BlockOnMonitor", "App::WaitMain"), ("App::Nap", "App::WaitMain")] {
        let reaching = weight(&waiter, |s| s.has_part(caller) && s.has_part(start) && s.has("clone3"));
        assert!(
            reaching as f64 >= 0.15 * total as f64,
            "{reaching} of the waiter's {total} µs blocked reach {caller}, {start} and clone3:\n{folded}"
        );
        complete += reaching;
    }
    assert!(
        complete as f64 >= 0.95 * total as f64,
        "{complete} of the waiter's {total} µs blocked reach the waiting method and clone3:\n{folded}"
    );
}
