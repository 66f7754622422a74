//! Off-CPU and wall-clock profiles of a C program with a known split (`tests/data/offcpu/blockers.c`: one thread
//! sleeps in `wait_in_a` for the whole run, one in `wait_in_b` for a third of it, one spins), through the profcpu
//! binary on the real kernel, with the kernel's own per-thread accounts (schedstat) and Debian's perf as oracles;
//! recorded by launching the program (`-- COMMAND`) and system-wide (`-all`); and what bad input gets: no tracefs,
//! no privilege, a recording cut short.

mod support;

use std::path::Path;
use std::process::Command;
use std::time::Duration;
use support::offcpu::{build_blockers, metadata_value, stacks, thread_reports, weight, Stack, RUNNABLE};
use support::perf::perf;
use support::profcpu::{collect, postprocess_ok, read, Collected};
use support::running_app::{exclusive, RunningApp};
use support::scratch::Scratch;
use support::PROFCPU;

/// The program's run length: long enough that thread start-up is noise, short for the test budget.
const SECONDS: f64 = 3.0;

fn collect_blockers(dir: &Scratch, mode: &[&str]) -> Collected {
    let blockers = build_blockers(&dir.path);
    let out = dir.join("profilings");
    let mut args = mode.to_vec();
    let seconds = SECONDS.to_string();
    args.extend(["-duration", "30", "-output", out.to_str().unwrap(), "--", blockers.to_str().unwrap(), &seconds]);
    collect(&args)
}

/// `a` within `tolerance` (a fraction) of `b`, plus `slack`.
fn near(a: f64, b: f64, tolerance: f64, slack: f64) -> bool {
    (a - b).abs() <= b * tolerance + slack
}

#[test]
fn off_cpu_time_splits_by_where_threads_blocked() {
    let _cpu = exclusive();
    let dir = Scratch::new("offcpu-blockers");
    let run = collect_blockers(&dir, &["-mode", "offcpu"]);
    assert!(run.stderr.contains("switch-outs (0 lost)"), "{}", run.stderr);
    assert!(run.stderr.contains("Where the threads waited (off-CPU time"), "the table speaks in time:\n{}", run.stderr);
    assert_eq!(metadata_value(&run.run_dir, "mode"), "offcpu");
    let folded = read(&run.run_dir.join("folded_stacks.out"));
    let all = stacks(&folded);
    let total = weight(&all, |_| true);

    // Blocked time (µs) in each waiting function: reaching them takes the stack copies (usleep is in libc, built
    // without frame pointers), and it splits 3 : 1.
    let blocked_in = |f: &str| weight(&all, |s: &Stack| s.has(f) && !s.runnable());
    let (a, b) = (blocked_in("wait_in_a"), blocked_in("wait_in_b"));
    let share_a = a as f64 / (a + b).max(1) as f64;
    assert!(
        (0.70..=0.80).contains(&share_a),
        "wait_in_a has {:.1}% of a + b (a {a} µs, b {b} µs):\n{folded}",
        share_a * 100.0
    );
    // blocker-a was off the CPU its whole life, but for its moments on it and waiting for one.
    assert!(near(a as f64, SECONDS * 1e6, 0.1, 0.0), "wait_in_a {a} µs of a {SECONDS} s run");

    // The spinner never blocks: its time off the CPU is preemption, each switch-out ending in [runnable], and it
    // adds up to what the kernel counted as its time waiting for a CPU.
    let reports = thread_reports(&run.stdout);
    let spinner = reports.iter().find(|r| r.name == "spinner").expect("no spinner report");
    let spinner_blocked = weight(&all, |s| s.thread() == "spinner" && !s.runnable());
    let spinner_runnable = weight(&all, |s| s.thread() == "spinner" && s.runnable());
    assert!(
        spinner_blocked as f64 <= 0.02 * total as f64,
        "the spinner is blocked for {spinner_blocked} µs of {total} µs off-CPU:\n{folded}"
    );
    assert!(
        near(spinner_runnable as f64, spinner.runnable_ns as f64 / 1e3, 0.1, 5000.0),
        "the spinner is runnable for {spinner_runnable} µs; its schedstat says {} µs",
        spinner.runnable_ns / 1000
    );
    println!(
        "off-CPU: wait_in_a {a} µs, wait_in_b {b} µs ({:.1}% : {:.1}%), spinner blocked {spinner_blocked} µs, \
         runnable {spinner_runnable} µs (schedstat {} µs) of {total} µs",
        share_a * 100.0,
        100.0 - share_a * 100.0,
        spinner.runnable_ns / 1000
    );

    // The graph says what it shows, in cold colours.
    let svg = read(&run.run_dir.join("flamegraph.svg"));
    assert!(svg.contains("off-CPU time: blockers") && svg.contains("µs off CPU"), "title and unit missing");
    assert!(svg.contains("blue managed · cyan native"), "no off-CPU legend");
    // inferno-collapse-perf on our perf script text gives our folded stacks.
    let collapsed = support::inferno::collapse_cli(&run.run_dir.join("perf_script.out"));
    assert_eq!(collapsed, folded, "inferno-collapse-perf perf_script.out differs from folded_stacks.out");

    // perf reads the recording: its script prints the switches' fields, its report counts them.
    let data = run.perf_data();
    let script = perf(&["script", "-i", data.to_str().unwrap()]);
    let script_err = String::from_utf8_lossy(&script.stderr);
    assert!(script.status.success() && script_err.trim().is_empty(), "perf script: {script_err}");
    let script_out = String::from_utf8_lossy(&script.stdout);
    let switch_lines = script_out.lines().filter(|l| l.contains("sched:sched_switch: prev_comm=")).count();
    assert!(switch_lines > 500 && script_out.contains("prev_state=S ==>"), "perf script lists {switch_lines} switches");
    let report = perf(&["report", "--stdio", "-i", data.to_str().unwrap()]);
    assert!(report.status.success(), "perf report: {}", String::from_utf8_lossy(&report.stderr));
    assert!(String::from_utf8_lossy(&report.stdout).contains("of event 'sched:sched_switch'"));

    // Offline, from symbols/: the same profile.
    postprocess_ok(&run.run_dir, &[]);
    assert_eq!(read(&run.run_dir.join("folded_stacks.out")), folded, "postprocess differs from collect");

    // Cut short (a copy that stopped half-way): what is there is shown, with a warning.
    let cut = dir.join("cut");
    std::fs::create_dir(&cut).unwrap();
    let bytes = std::fs::read(&data).unwrap();
    std::fs::write(cut.join("perf.data"), &bytes[..bytes.len() * 6 / 10]).unwrap();
    copy_tree(&run.run_dir.join("symbols"), &cut.join("symbols"));
    std::fs::copy(run.run_dir.join("metadata.txt"), cut.join("metadata.txt")).unwrap();
    let partial = postprocess_ok(&cut, &[]);
    assert!(partial.warnings().iter().any(|w| w.contains("cut short")), "no warning:\n{}", partial.stderr);
    let partial_stacks = stacks(&read(&cut.join("folded_stacks.out")));
    let partial_a = weight(&partial_stacks, |s| s.has("wait_in_a") && !s.runnable());
    assert!(partial_a > a / 4 && partial_a < a, "cut short: wait_in_a {partial_a} µs of {a} µs");
    assert!(cut.join("flamegraph.svg").is_file());
}

#[test]
fn wall_clock_time_of_each_thread_adds_up_to_the_run() {
    let _cpu = exclusive();
    let dir = Scratch::new("wall-blockers");
    let run = collect_blockers(&dir, &["-mode", "wall", "-freq", "999"]);
    assert!(run.stderr.contains("samples and") && run.stderr.contains("switch-outs (0 lost)"), "{}", run.stderr);
    assert!(run.stderr.contains("Where the time went (wall clock:"), "{}", run.stderr);
    let duration: f64 = metadata_value(&run.run_dir, "duration_secs").parse().unwrap();
    let all = stacks(&read(&run.run_dir.join("folded_stacks.out")));
    let reports = thread_reports(&run.stdout);

    // Threads that live through the run: on the CPU (samples of 1/999 s) plus off it (switch-outs), the run.
    for thread in ["blockers", "blocker-a", "spinner"] {
        let total = weight(&all, |s| s.thread() == thread) as f64 / 1e6;
        assert!(near(total, duration, 0.05, 0.0), "{thread}: {total:.3} s of a {duration:.3} s run");
    }
    // The spinner's time on the CPU is what the kernel counted.
    let spinner = reports.iter().find(|r| r.name == "spinner").expect("no spinner report");
    let on_cpu = weight(&all, |s| s.thread() == "spinner" && !s.has("__schedule")) as f64;
    assert!(
        near(on_cpu, spinner.on_cpu_ns as f64 / 1e3, 0.1, 20_000.0),
        "spinner on the CPU {on_cpu} µs, schedstat {} µs",
        spinner.on_cpu_ns / 1000
    );
    assert!(read(&run.run_dir.join("flamegraph.svg")).contains("wall-clock time: blockers"));
    // perf reads both events of the recording.
    let script = perf(&["script", "-i", run.perf_data().to_str().unwrap()]);
    let script_out = String::from_utf8_lossy(&script.stdout);
    assert!(script.status.success(), "perf script: {}", String::from_utf8_lossy(&script.stderr));
    assert!(script_out.contains(" cpu-clock:") && script_out.contains(" sched:sched_switch: prev_comm="));

    // One graph per thread, each the thread's whole time.
    postprocess_ok(&run.run_dir, &["-per-thread"]);
    let a = reports.iter().find(|r| r.name == "blocker-a").expect("no blocker-a report");
    let own = stacks(&read(&run.run_dir.join(format!("folded_stacks.{}.out", a.tid))));
    let total = weight(&own, |_| true) as f64 / 1e6;
    assert!(near(total, duration, 0.05, 0.0), "blocker-a's own graph: {total:.3} s of {duration:.3} s");
    // (Its first moments still have its creator's name, until it renames itself.)
    let named = weight(&own, |s| s.thread() == "blocker-a") as f64 / 1e6;
    assert!(named >= 0.99 * total, "blocker-a's graph: {named:.3} s of {total:.3} s under its name");
    assert!(run.run_dir.join(format!("flamegraph.{}.svg", a.tid)).is_file());
}

#[test]
fn all_processes_off_cpu_with_perfcollects_flag() {
    let _cpu = exclusive();
    let dir = Scratch::new("offcpu-all");
    let blockers = build_blockers(&dir.path);
    let mut cmd = Command::new(&blockers);
    cmd.arg("4");
    let mut app = RunningApp::start(cmd, Duration::from_secs(10));
    let out = dir.join("profilings");
    // CPU-wide events on every CPU: switch records then name both tasks of each switch.
    let run = collect(&["-all", "-offcpu", "-call-graph", "fp", "-duration", "2", "-output", out.to_str().unwrap()]);
    app.kill();
    assert!(run.stderr.contains("switch-outs ("), "{}", run.stderr);
    let all = stacks(&read(&run.run_dir.join("folded_stacks.out")));
    let a = weight(&all, |s| s.thread() == "blocker-a" && !s.runnable()) as f64 / 1e6;
    assert!(near(a, 2.0, 0.1, 0.0), "blocker-a blocked {a:.3} s of a 2 s system-wide recording");
    // The idle task's switches are no thread's wait.
    assert!(all.iter().all(|s| !s.thread().starts_with("swapper")), "the idle task is in the profile");
    assert!(all.iter().any(|s| s.thread() == "spinner" && s.frames.last().is_some_and(|f| f == RUNNABLE)));
}

#[test]
fn missing_tracefs_or_privilege_is_one_line() {
    let dir = Scratch::new("offcpu-refused");
    let out = dir.join("profilings");
    // A mount namespace of an unprivileged user where tracefs is hidden and cannot be mounted (a container).
    let hidden = Command::new("unshare")
        .args(["-r", "-m", "sh", "-c"])
        .arg("mount -t tmpfs none /sys/kernel/tracing && mount -t tmpfs none /sys/kernel/debug && exec \"$@\"")
        .args(["sh", PROFCPU, "collect", "-mode", "offcpu", "-output", out.to_str().unwrap(), "--", "true"])
        .output()
        .expect("cannot run unshare");
    let line = one_line(&hidden);
    assert!(line.contains("tracefs is not mounted here") && line.contains("cannot mount it (EPERM)"), "{line}");

    // Without privilege: tracefs is root's. Mounted first, as profcpu run by root mounts it: on a machine where no
    // recording has run yet it is absent, and the refusal would name the mount instead.
    if !Path::new("/sys/kernel/tracing/events").is_dir() {
        let mount = Command::new("mount").args(["-t", "tracefs", "nodev", "/sys/kernel/tracing"]).output();
        let mounted = mount.expect("cannot run mount");
        assert!(mounted.status.success(), "cannot mount tracefs: {}", String::from_utf8_lossy(&mounted.stderr));
    }
    let nobody = Command::new("setpriv")
        .args(support::hostile::AS_NOBODY)
        .args([PROFCPU, "collect", "-mode", "wall", "-output", "/tmp", "--", "true"])
        .output()
        .expect("cannot run setpriv");
    let line = one_line(&nobody);
    assert!(line.contains("sched:sched_switch") && line.contains("EACCES") && line.contains("root"), "{line}");

    // Allowed to read tracefs, but not to record tracepoints (no CAP_PERFMON, perf_event_paranoid above -1).
    let reader = Command::new("setpriv")
        .args(support::hostile::AS_NOBODY)
        .args(["--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search"])
        .args([PROFCPU, "collect", "-mode", "offcpu", "-output", "/tmp", "--", "true"])
        .output()
        .expect("cannot run setpriv");
    let paranoid: i32 =
        std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid").unwrap().trim().parse().unwrap();
    if paranoid > -1 {
        let line = one_line(&reader);
        assert!(
            line.contains("cannot record the scheduler tracepoint sched:sched_switch") && line.contains("CAP_PERFMON"),
            "{line}"
        );
    } else {
        // Tracepoints are everybody's here: the same run records.
        assert!(reader.status.success(), "{}", String::from_utf8_lossy(&reader.stderr));
    }
}

/// The run failed with exactly one `profcpu: error:` line.
fn one_line(out: &std::process::Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(lines[0].starts_with("profcpu: error: "), "{stderr}");
    lines[0].to_string()
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap().map(Result::unwrap) {
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &to.join(entry.file_name()));
        } else {
            std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    }
}
