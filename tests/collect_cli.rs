//! `profcpu collect` end to end: Debian's perf reads what it writes, stopping early still leaves a valid file, and bad
//! input gets one clear line.

mod support;

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use support::busy::*;
use support::perf::*;
use support::profcpu::*;
use support::recording::*;
use support::scratch::Scratch;
use support::PROFCPU;

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Frames perf printed for one module, as (symbol, module) pairs.
fn frames_in<'a>(script: &'a str, module: &str) -> Vec<&'a str> {
    script
        .lines()
        .filter(|l| l.starts_with('\t') && l.trim_end().ends_with(&format!("({module})")))
        .filter_map(|l| l.split_whitespace().nth(1))
        .collect()
}

/// Arguments of `profcpu collect` for a busy process it launches:
/// `-duration DURATION -output OUT [OPTIONS…] -- busy BUSY_ARGS…`.
fn busy_run(out: &Path, duration: &str, options: &[&str], busy_args: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = ["-duration", duration, "-output", out.to_str().unwrap()].map(String::from).into();
    args.extend(options.iter().map(|o| o.to_string()));
    args.extend(["--".into(), busy_binary().to_str().unwrap().to_string()]);
    args.extend(busy_args.iter().map(|a| a.to_string()));
    args
}

/// A recording cut short is still complete: it decodes, holds at least 50 samples, and perf names the busy loop.
fn assert_complete(c: &Collected) -> Recording {
    let rec = Recording::read(&c.perf_data());
    let n = rec.samples().count();
    assert!(n >= 50, "{n} samples");
    assert!(perf_script(&c.perf_data()).contains("busy_main_loop"));
    rec
}

#[test]
fn perf_names_native_frames_and_counts_the_samples_profcpu_reported() {
    let _s = serial();
    let scratch = Scratch::new("cli-perf");
    let out = scratch.path.clone();
    let c = collect(&busy_run(&out, "20", &[], &["--seconds", "1.5"]));
    let data = c.perf_data();
    let script = perf_script(&data);
    let busy_frames = frames_in(&script, busy_binary().canonicalize().unwrap().to_str().unwrap());
    let named = busy_frames.iter().filter(|f| f.starts_with("busy_main_loop+0x")).count();
    assert!(named >= 50, "perf script shows busy_main_loop {named} times:\n{}", &script[..script.len().min(3000)]);

    // The same number of samples, counted three ways: profcpu's summary, perf, our reader.
    let pids = perf(&["script", "-i", data.to_str().unwrap(), "-F", "pid"]);
    assert!(pids.status.success());
    let perf_count = String::from_utf8_lossy(&pids.stdout).lines().filter(|l| !l.trim().is_empty()).count() as u64;
    assert_eq!(perf_count, c.summary_samples(), "perf counts {perf_count} samples");
    assert_eq!(Recording::read(&data).samples().count() as u64, perf_count);

    let report = perf(&["report", "-i", data.to_str().unwrap(), "--stdio"]);
    let report_err = String::from_utf8_lossy(&report.stderr);
    assert!(report.status.success() && report_err.trim().is_empty(), "perf report complained: {report_err}");
    let report_out = String::from_utf8_lossy(&report.stdout);
    assert!(report_out.contains(&format!("# Samples: {perf_count}  of event 'cpu-clock")), "{report_out}");
    assert!(report_out.contains("busy_main_loop"));

    let header = perf(&["report", "-i", data.to_str().unwrap(), "--header-only"]);
    let header = String::from_utf8_lossy(&header.stdout);
    for expected in
        ["# hostname : ", "# os release : ", "# arch : ", "# nrcpus online : ", "# event : name = cpu-clock"]
    {
        assert!(header.contains(expected), "perf report --header-only lacks {expected:?}:\n{header}");
    }
    assert!(header.lines().any(|l| l.starts_with("# cmdline : ") && l.contains("collect -duration 20")), "{header}");
    let buildids = perf(&["buildid-list", "-i", data.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&buildids.stdout).contains(busy_binary().canonicalize().unwrap().to_str().unwrap()));
}

#[test]
fn perf_names_kernel_frames_of_a_workload_in_syscalls() {
    let _s = serial();
    let scratch = Scratch::new("cli-kernel");
    let out = scratch.path.clone();
    let c = collect(&busy_run(&out, "20", &[], &["--seconds", "1.5", "--work", "syscalls"]));
    let script = perf_script(&c.perf_data());
    let kernel = frames_in(&script, "[kernel.kallsyms]");
    let named: Vec<&str> = kernel.iter().copied().filter(|f| !f.starts_with("[unknown]")).collect();
    assert!(
        named.len() * 10 >= kernel.len() * 9 && !named.is_empty(),
        "{} of {} kernel frames have names:\n{}",
        named.len(),
        kernel.len(),
        &script[..script.len().min(3000)]
    );
    // Reading /dev/zero goes through the read system call in any kernel version.
    assert!(named.iter().any(|f| f.contains("read")), "no read path in the kernel frames: {named:?}");
    assert!(frames_in(&script, busy_binary().canonicalize().unwrap().to_str().unwrap())
        .iter()
        .any(|f| f.starts_with("busy_syscall_loop+")));
}

/// Starts `profcpu collect ARGS` in the background and returns it once the busy target it launched (or was given)
/// is known to be running.
fn spawn_collect<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> std::process::Child {
    Command::new(PROFCPU).arg("collect").args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap()
}

fn signal(pid: u32, sig: i32) {
    // SAFETY: sending a signal to a process we started.
    assert_eq!(unsafe { libc::kill(pid as i32, sig) }, 0);
}

fn finish_background(mut child: std::process::Child, limit: Duration) -> Collected {
    let mut stdout = String::new();
    let mut stderr = String::new();
    let mut out_pipe = child.stdout.take().unwrap();
    let mut err_pipe = child.stderr.take().unwrap();
    let status = wait_with_timeout(&mut child, limit);
    out_pipe.read_to_string(&mut stdout).unwrap();
    err_pipe.read_to_string(&mut stderr).unwrap();
    finish_collect(std::process::Output { status, stdout: stdout.into_bytes(), stderr: stderr.into_bytes() })
}

#[test]
fn sigint_mid_run_stops_and_still_writes_a_valid_file() {
    let _s = serial();
    let scratch = Scratch::new("cli-sigint");
    let out = scratch.path.clone();
    let mut child = spawn_collect(&busy_run(&out, "60", &[], &["--seconds", "60"]));
    // The launched command shares profcpu's stdout: its first line says it runs (and is being sampled).
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    let busy = parse_busy_line(&line).unwrap_or_else(|| panic!("busy printed {line:?}"));
    child.stdout = None;
    std::thread::sleep(Duration::from_millis(1200));
    let t0 = Instant::now();
    signal(child.id(), libc::SIGINT);
    let mut rest = String::new();
    let mut err = String::new();
    let mut err_pipe = child.stderr.take().unwrap();
    let status = wait_with_timeout(&mut child, Duration::from_secs(15));
    stdout.read_to_string(&mut rest).unwrap();
    err_pipe.read_to_string(&mut err).unwrap();
    assert!(t0.elapsed() < Duration::from_secs(5), "stopping took {:?}", t0.elapsed());
    let c = finish_collect(std::process::Output { status, stdout: rest.into_bytes(), stderr: err.into_bytes() });
    assert!(c.stderr.contains("(stopped by SIGINT)"), "{}", c.stderr);
    // profcpu launched it, so profcpu ends it.
    assert!(!process_alive(busy.pid), "the launched command {} still runs", busy.pid);

    let n = assert_complete(&c).samples().count() as u64;
    assert_eq!(n, c.summary_samples(), "{n} samples, summary says {}", c.summary_samples());
}

#[test]
fn sigterm_mid_run_of_a_pid_still_writes_a_valid_file() {
    let _s = serial();
    let busy = Busy::start(&["--seconds", "60"]);
    let scratch = Scratch::new("cli-sigterm");
    let out = scratch.path.clone();
    let child =
        spawn_collect(&["-pid", &busy.info.pid.to_string(), "-duration", "60", "-output", out.to_str().unwrap()]);
    std::thread::sleep(Duration::from_millis(1500));
    signal(child.id(), libc::SIGTERM);
    let c = finish_background(child, Duration::from_secs(15));
    assert!(c.stderr.contains("(stopped by SIGTERM)"), "{}", c.stderr);
    // A process profcpu did not start is left alone.
    assert!(process_alive(busy.info.pid));
    assert_complete(&c);
}

#[test]
fn the_target_exiting_mid_run_ends_collection_with_a_valid_file() {
    let _s = serial();
    let busy = Busy::start(&["--seconds", "1.5"]);
    let pid = busy.info.pid;
    let scratch = Scratch::new("cli-exit");
    let out = scratch.path.clone();
    let t0 = Instant::now();
    let c = collect(&["-pid", &pid.to_string(), "-duration", "60", "-output", out.to_str().unwrap()]);
    assert!(t0.elapsed() < Duration::from_secs(10), "collect ran {:?} after its target exited", t0.elapsed());
    assert!(c.stderr.contains("(the target exited)"), "{}", c.stderr);
    let rec = assert_complete(&c);
    assert!(rec.records.iter().any(|r| matches!(r, profcpu::perf_data::Record::Exit(t) if t.pid == pid)));
}

#[test]
fn the_live_line_shows_on_a_terminal_and_only_a_summary_otherwise() {
    let _s = serial();
    let scratch = Scratch::new("cli-tty");
    let out = scratch.path.clone();
    let cmd =
        format!("{PROFCPU} collect -duration 1.2 -output {} -- {} --seconds 5", out.display(), busy_binary().display());
    // `script` gives profcpu a pseudo-terminal as stderr.
    let tty = Command::new("script").args(["-qefc", &cmd, "/dev/null"]).output().expect("script (util-linux)");
    let text = String::from_utf8_lossy(&tty.stdout);
    assert!(tty.status.success(), "{text}");
    assert!(text.contains("recording ") && text.contains(" samples ") && text.contains("/1.2 s"), "{text}");
    assert!(text.contains("profcpu: ") && text.contains(" samples ("), "{text}");

    let c = collect(&busy_run(&out, "1", &[], &["--seconds", "5"]));
    let lines: Vec<&str> = c.stderr.lines().collect();
    // Off a terminal: the start line, the summary line, then the hottest-frames table; no live progress lines.
    assert!(lines.len() >= 3, "off a terminal: start line, summary and top table expected:\n{}", c.stderr);
    assert!(lines[2].starts_with("Hottest frames by self time"), "{}", c.stderr);
    assert!(!c.stderr.contains("recording "), "a live line was printed off a terminal:\n{}", c.stderr);
    assert!(
        lines[0].starts_with("Profiling PID ")
            && lines[0].contains(" (`")
            && lines[0].ends_with(c.run_dir.to_str().unwrap()),
        "{}",
        lines[0]
    );
    assert!(lines[1].starts_with("profcpu: ") && lines[1].contains(" samples (0 lost) from PID "), "{}", lines[1]);
    assert!(!c.stderr.contains('\r') && !c.stderr.contains('\x1b'));
}

/// Runs `profcpu ARGS` expecting failure: exactly one line on stderr, no panic, non-zero exit. Returns the line.
fn one_line_error(args: &[&str]) -> String {
    let out = Command::new(PROFCPU).args(args).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "{args:?} succeeded");
    assert!(!stderr.contains("panicked") && !stderr.contains("RUST_BACKTRACE"), "{args:?}: {stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{args:?} printed {} lines:\n{stderr}", lines.len());
    assert!(lines[0].starts_with("profcpu: error: "), "{}", lines[0]);
    lines[0].to_string()
}

fn is_empty_dir(dir: &Path) -> bool {
    std::fs::read_dir(dir).map(|mut d| d.next().is_none()).unwrap_or(true)
}

#[test]
fn bad_input_gets_one_clear_line() {
    let scratch = Scratch::new("cli-bad");
    let base = scratch.path.clone();
    let b = base.to_str().unwrap();
    let pid_max: u64 = std::fs::read_to_string("/proc/sys/kernel/pid_max").unwrap().trim().parse().unwrap();
    let missing = (pid_max + 1).to_string();
    let line = one_line_error(&["collect", "-pid", &missing, "-output", b]);
    assert!(line.contains(&format!("no process with PID {missing}")), "{line}");
    assert!(is_empty_dir(&base), "a run folder was created for a missing PID");

    for bad in ["0", "-5", "abc"] {
        let line = one_line_error(&["collect", "-duration", bad, "-output", b]);
        assert!(line.contains("duration"), "{line}");
    }
    let line = one_line_error(&["collect", "-nosuchflag", "-output", b]);
    assert!(line.contains("nosuchflag") && line.contains("--help"), "{line}");
    let line = one_line_error(&["collect", "-freq", "0", "-output", b]);
    assert!(line.contains("freq"), "{line}");
    let line = one_line_error(&["collect", "-mmap-pages", "3", "-output", b]);
    assert!(line.contains("power of two"), "{line}");

    // An output base that cannot be a folder: a file, and a place where nothing can be created.
    let file = base.join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let line = one_line_error(&["collect", "-pid", &std::process::id().to_string(), "-output", file.to_str().unwrap()]);
    assert!(line.contains("a-file") && line.contains("-output"), "{line}");
    let line = one_line_error(&["collect", "-pid", &std::process::id().to_string(), "-output", "/proc/profcpu-out"]);
    assert!(line.contains("/proc/profcpu-out") && line.contains("-output"), "{line}");

    // A command that cannot run: said once, and nothing left behind.
    let line = one_line_error(&["collect", "-output", b, "--", "/nonexistent/program"]);
    assert!(line.contains("cannot run '/nonexistent/program'"), "{line}");
    let leftovers: Vec<_> = std::fs::read_dir(&base).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(leftovers, vec![std::ffi::OsString::from("a-file")], "left behind: {leftovers:?}");
}

#[test]
fn cycles_without_a_pmu_fall_back_to_cpu_clock_and_task_clock_is_honoured() {
    let _s = serial();
    let scratch = Scratch::new("cli-events");
    let out = scratch.path.clone();
    let c = collect(&busy_run(&out, "1", &["-event", "cycles"], &["--seconds", "3"]));
    let rec = Recording::read(&c.perf_data());
    let attr = &rec.reader.events()[0].attr;
    if c.stderr.contains("the cycles event is not supported here") {
        assert_eq!(attr.event_name(), "cpu-clock");
        assert_eq!(rec.reader.events()[0].name, "cpu-clock");
    } else {
        // A machine with a hardware PMU samples cycles as asked.
        assert_eq!(attr.event_name(), "cycles", "{}", c.stderr);
    }
    assert!(rec.samples().count() >= 20);

    let c = collect(&busy_run(&out, "1", &["-event", "task-clock"], &["--seconds", "3"]));
    let rec = Recording::read(&c.perf_data());
    assert_eq!(rec.reader.events()[0].attr.event_name(), "task-clock");
    assert!(rec.samples().count() >= 20);
}
