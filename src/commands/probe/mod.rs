//! `profcpu probe`: counts every call of the methods a pattern names — .NET methods whatever tier their code is
//! in (JIT-compiled or ReadyToRun), native functions — and records who called them (each call one sample with the
//! caller's stack), for `-duration` seconds, until Ctrl+C, or until the target exits.
//!
//! The steps: [`pattern`] says which names a `-method` means; [`plan`] finds the methods' code (through
//! [`CodeIndex`]) and decides how each one's calls are counted (uprobes, a .NET precode watchpoint, breakpoints);
//! the recording engine opens those probes on every thread; [`observer`] counts each hit, follows new tiers and
//! keeps the calls in perf.data; the pipeline turns the callers' stacks into folded stacks and a flame graph. stdout
//! gets one line `<calls> <method>` per method, most called first, then the output folder.

mod observer;
mod pattern;
mod plan;

use super::collect::{after_recording, create_run_dir, discard_run};
use crate::cli::ProbeArgs;
use crate::record::dotnet_ipc::PerfMapType;
use crate::record::dotnet_stubs::Stubs;
use crate::record::jit_names::JitNames;
use crate::record::probe::ProbeRequest;
use crate::record::target::LaunchedCommand;
use crate::record::{self, EndReason, RecordOptions, RecordSummary, Target};
use crate::report::metadata_txt::Metadata;
use crate::symbolize::code_index::{CodeIndex, ImageFilter, JitFeed};
use crate::symbolize::parsers::ProcessInfo;
use crate::symbolize::{Capture, SymbolizeOptions};
use anyhow::Result;
use observer::ProbeObserver;
use plan::{JitCounting, Plan, Role};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How often a launched command is looked at for the methods until they all exist.
const COMMAND_POLL: Duration = Duration::from_millis(50);
/// Ring-buffer pages per CPU unless `-mmap-pages` says otherwise: a method called a million times a second fills
/// 100 MB/s of samples (the engine halves it where locked memory is limited).
const PROBE_RING_PAGES: usize = 1024;

pub fn run(args: ProbeArgs) -> Result<()> {
    let opts = SymbolizeOptions {
        debug_roots: args.symbols.symbols.clone(),
        force_maps: args.symbols.force_maps,
        ..SymbolizeOptions::live()
    };
    let probed = if args.command.is_empty() { probe_pid(&args, &opts)? } else { probe_command(&args, &opts)? };
    let mut order: Vec<usize> = (0..probed.methods.len()).collect();
    order.sort_by_key(|&m| (std::cmp::Reverse(probed.calls[m]), probed.methods[m].clone()));
    for m in order {
        println!("{} {}", probed.calls[m], crate::escape::line(&probed.methods[m]));
    }
    println!("{}", probed.run_dir.display());
    Ok(())
}

/// What a probe run found.
struct Probed {
    methods: Vec<String>,
    calls: Vec<u64>,
    run_dir: PathBuf,
}

/// Probes a running process.
fn probe_pid(args: &ProbeArgs, opts: &SymbolizeOptions) -> Result<Probed> {
    let pid = args.pid;
    record::check_target(&Target::Pid(pid))?;
    let mut jit_names = JitNames::switch_on_as(&[pid], false, PerfMapType::PerfMap);
    let probed = resolve(pid, args, opts).and_then(|found| record_probes(Target::Pid(pid), found, args, opts));
    // Sampling is over (or never began): the runtime stops writing the map this run switched on, and the files it
    // wrote because of this run go (the capture holds them open and copies them to the end).
    jit_names.switch_off();
    jit_names.remove_files();
    finish(probed?)
}

/// Launches a command and probes it until it exits: from its first instruction when the methods are functions of
/// the program file itself, else from when they all exist in the running process.
fn probe_command(args: &ProbeArgs, opts: &SymbolizeOptions) -> Result<Probed> {
    let argv = &args.command;
    record::check_target(&Target::Command(argv.clone()))?;
    if let Some(program) = program_path(&argv[0]) {
        let index = CodeIndex::of_program(&program, opts)?;
        if let Ok(methods) = plan::select(&index, &args.methods) {
            let mut index = index;
            let plan = plan::lay_out(&mut index, methods, None, !args.no_stacks)?;
            let found = Found { plan, feed: None, stubs: None };
            let probed = record_probes(Target::Command(argv.clone()), found, args, opts);
            return finish(probed?);
        }
    }
    // Names that only the running process has (JIT code, libraries): wait for them, then probe it.
    let mut command = LaunchedCommand::spawn(argv, &[])?;
    command.release()?;
    let pid = command.pid();
    let waited = Instant::now();
    let deadline = waited + Duration::from_secs_f64(args.duration);
    let mut jit_names = None;
    let found = loop {
        if let Some(signal) = crate::interrupt::received() {
            break Err(crate::interrupt::Interrupted::before_sampling(signal).into());
        }
        if jit_names.is_none() {
            jit_names = JitNames::switch_on_when_ready(pid, PerfMapType::PerfMap);
        }
        let attempt = resolve(pid, args, opts);
        if attempt.is_ok() || command.try_reap() || Instant::now() >= deadline {
            break attempt.map_err(|e| {
                let why = if command.try_reap() { "the command exited" } else { "-duration passed" };
                e.context(format!("{why} before every -method matched"))
            });
        }
        std::thread::sleep(COMMAND_POLL);
    };
    let probed = found.and_then(|found| {
        tracing::warn!(
            "the methods exist {:.2} s after the command started: calls before are not counted",
            waited.elapsed().as_secs_f64()
        );
        record_probes(Target::Pid(pid), found, args, opts)
    });
    if let Some(names) = &mut jit_names {
        names.switch_off();
        names.remove_files();
    }
    command.terminate(Duration::from_secs(2));
    finish(probed?)
}

/// The executable `name` runs (looked up in PATH like execvp).
fn program_path(name: &str) -> Option<PathBuf> {
    if name.contains('/') {
        // Relative to where profcpu runs, as for the exec.
        return Some(std::env::current_dir().ok()?.join(name));
    }
    let search = std::env::var_os("PATH")?;
    std::env::split_paths(&search).map(|dir| dir.join(name)).find(|p| p.is_file())
}

/// The probes for the methods of process `pid` the patterns mean, with what follows its new code.
struct Found {
    plan: Plan,
    feed: Option<JitFeed>,
    stubs: Option<Stubs>,
}

fn resolve(pid: u32, args: &ProbeArgs, opts: &SymbolizeOptions) -> Result<Found> {
    // Opened before the names are read: code reported after this point is seen as new.
    let feed = JitFeed::open(pid, opts.force_maps).unwrap_or_else(|e| {
        tracing::warn!("{e}");
        None
    });
    let mut index = CodeIndex::read(pid, opts, ImageFilter::All)?;
    let methods = plan::select(&index, &args.methods)?;
    let mut stubs = match methods.iter().any(|m| m.dotnet) {
        true => Stubs::read(pid).map_err(|e| tracing::debug!("cannot read the stubs of PID {pid}: {e}")).ok(),
        false => None,
    };
    let plan = plan::lay_out(&mut index, methods, stubs.as_mut(), !args.no_stacks)?;
    Ok(Found { plan, feed, stubs })
}

/// The recording and what it counted.
struct Recorded {
    run_dir: crate::fs::Dir,
    observer: ProbeObserver,
    summary: RecordSummary,
    target: Option<ProcessInfo>,
    patterns: Vec<String>,
    stacks: bool,
}

/// Records the probes of `found` on `target` into a new run folder.
fn record_probes(target: Target, found: Found, args: &ProbeArgs, opts: &SymbolizeOptions) -> Result<Recorded> {
    let (base, run_name, run_dir) = create_run_dir(&args.output, chrono::Local::now())?;
    let stacks = !args.no_stacks;
    // What names the callers' frames (a launched command's is started once it runs); without stacks nothing needs
    // names.
    let capture = match &target {
        Target::Pid(pid) if stacks => Some(Capture::new(&run_dir, &[*pid], opts)?),
        _ => None,
    };
    let capture_later = (stacks && capture.is_none()).then(|| (run_dir.clone(), opts.clone()));
    let tracing = found.plan.uprobes.as_ref().map(|u| u.tracing_data()).transpose()?;
    let request = ProbeRequest { events: found.plan.events.clone(), stacks, tracing };
    let announcement = announcement(&target, &found.plan, args.duration, &run_dir);
    let live = std::io::stderr().is_terminal();
    let mut observer = ProbeObserver::new(found.plan, found.feed, found.stubs, stacks, capture, live, announcement);
    observer.capture_later = capture_later;
    let record_opts = RecordOptions {
        command_env: Vec::new(),
        target: target.clone(),
        mode: record::Mode::Cpu,
        duration: Some(Duration::from_secs_f64(args.duration)),
        frequency: 1,
        event: record::EventKind::CpuClock,
        mmap_pages: Some(args.mmap_pages.unwrap_or(PROBE_RING_PAGES)),
        call_graph: if stacks { args.call_graph } else { record::CallGraph::Fp },
        output: run_dir.clone(),
        perf_data: super::pipeline::PERF_DATA_FILE.to_string(),
        progress: false,
        probes: Some(request),
    };
    let recorded = record::record(&record_opts, &mut observer);
    // The recording closed its events: the uprobes go at once (an abort while the outputs are written would leave
    // their definitions).
    drop(observer.plan.uprobes.take());
    let summary = match recorded {
        Ok(summary) => summary,
        Err(e) => {
            discard_run(&base, &run_name, &run_dir, observer.capture.as_ref());
            return Err(e);
        }
    };
    if let Some(c) = &mut observer.capture {
        // Copies what the target's perf map holds now, before a map this run switched on is switched off.
        c.poll();
    }
    let target = summary.target_pid.and_then(ProcessInfo::read);
    Ok(Recorded { run_dir, observer, summary, target, patterns: args.methods.clone(), stacks })
}

/// What is probed and how: said once the probes are in place.
fn announcement(target: &Target, plan: &Plan, duration: f64, run_dir: &crate::fs::Dir) -> String {
    let who = match target {
        Target::Pid(pid) => match record::target::process_name(*pid) {
            Some(name) => format!("PID {pid} ({name})"),
            None => format!("PID {pid}"),
        },
        Target::Command(argv) => format!("`{}` until it exits", argv.join(" ")),
        Target::All => "every process".into(),
    };
    let mut lines = vec![format!(
        "Probing {} method(s) of {who} for at most {duration} s into {}:",
        plan.methods.len(),
        run_dir.path().display()
    )];
    for m in &plan.methods {
        lines.push(format!("  {}: {}", m.name, m.mechanism()));
        if let Some(caveat) = &m.caveat {
            lines.push(format!("    note: {caveat}"));
        }
    }
    crate::escape::lines(&lines.join("\n")).into_owned()
}

/// Writes the outputs of a recording and says what it counted.
fn finish(recorded: Recorded) -> Result<Probed> {
    let Recorded { run_dir, observer, summary, target, patterns, stacks } = recorded;
    let calls = final_calls(&observer, &summary);
    let total: u64 = calls.iter().sum();
    let methods: Vec<String> = observer.plan.methods.iter().map(|m| m.name.clone()).collect();
    eprintln!("{}", summary_line(&summary, total, methods.len()));
    let title = match methods.as_slice() {
        [one] => format!("Callers of {} ({total} calls)", pattern::Name::of(one).qualified),
        _ => format!("Callers of {} methods ({total} calls)", methods.len()),
    };
    let metadata = metadata(&summary, target.as_ref(), &observer, &calls, &patterns, stacks);
    let capture = observer.capture;
    let outputs = after_recording(&run_dir, metadata, capture, None, Some(title))?;
    for note in &outputs.notes {
        tracing::debug!("{note}");
    }
    Ok(Probed { methods, calls, run_dir: run_dir.path().to_path_buf() })
}

/// Calls per method. A method counted by uprobes and breakpoints alone takes the kernel's own count of its events
/// when samples were lost (the ring buffers overflowed); a precode watchpoint's hits must be seen to be counted.
fn final_calls(observer: &ProbeObserver, summary: &RecordSummary) -> Vec<u64> {
    let mut calls = observer.counts.calls();
    if summary.lost == 0 || observer.fired.is_empty() {
        return calls;
    }
    for (m, method) in observer.plan.methods.iter().enumerate() {
        if matches!(method.jit, JitCounting::Precode(_)) {
            tracing::warn!(
                "{} samples were lost: the count of {} may be low (use a larger -mmap-pages or -no-stacks)",
                summary.lost,
                method.name
            );
            continue;
        }
        let fired: u64 = observer
            .plan
            .roles
            .iter()
            .enumerate()
            .filter(|(_, role)| match role {
                Role::Uprobe { method, .. } | Role::Breakpoint { method: Some(method) } => *method == m,
                _ => false,
            })
            .map(|(e, _)| observer.fired.get(e + 1).copied().unwrap_or(0))
            .sum();
        calls[m] = calls[m].max(fired);
    }
    calls
}

/// `profcpu: 600 calls of 1 method from PID 1234 in 10.0 s, 0.1 MB perf.data`, plus why it stopped early.
fn summary_line(s: &RecordSummary, calls: u64, methods: usize) -> String {
    let from = s.target_pid.map_or("the command".to_string(), |pid| format!("PID {pid}"));
    let mut line = format!(
        "profcpu: {calls} calls of {methods} method(s) from {from} in {:.1} s, {:.1} MB perf.data",
        s.elapsed.as_secs_f64(),
        s.bytes_written as f64 / 1e6
    );
    if s.lost > 0 {
        line.push_str(&format!(" ({} samples lost)", s.lost));
    }
    match &s.end_reason {
        EndReason::DurationElapsed => {}
        EndReason::Signal(sig) => line.push_str(&format!(" (stopped by {sig})")),
        EndReason::TargetExited => line.push_str(" (the target exited)"),
    }
    line
}

/// metadata.txt: the usual facts, then per method its name, calls, how they were counted and where its code is.
fn metadata(
    s: &RecordSummary,
    target: Option<&ProcessInfo>,
    observer: &ProbeObserver,
    calls: &[u64],
    patterns: &[String],
    stacks: bool,
) -> Metadata {
    let mut extra = vec![
        ("probe_patterns".to_string(), patterns.iter().map(|p| format!("'{p}'")).collect::<Vec<_>>().join(" ")),
        ("probe_stacks".to_string(), if stacks { "yes" } else { "no (counting only)" }.to_string()),
    ];
    for (m, method) in observer.plan.methods.iter().enumerate() {
        let key = |what: &str| format!("probe_method_{}{what}", m + 1);
        extra.push((key(""), method.name.clone()));
        let by: Vec<String> = method.patterns.iter().map(|&p| format!("'{}'", patterns[p])).collect();
        extra.push((key("_matched_by"), by.join(" ")));
        extra.push((key("_calls"), calls[m].to_string()));
        extra.push((key("_mechanism"), method.mechanism()));
        let by_entry = &observer.counts.by_entry[m];
        let mut code: Vec<String> = method
            .versions
            .iter()
            .map(|v| {
                let tier = v.tier.as_deref().unwrap_or("native");
                let place = match &v.file {
                    Some(f) => format!("{}+{:#x}", f.image.rsplit('/').next().unwrap_or(&f.image), f.offset),
                    None => "JIT".to_string(),
                };
                let followed = observer
                    .followed
                    .iter()
                    .find(|f| f.method == m && f.version.addr == v.addr)
                    .map(|f| match &f.breakpoint {
                        None | Some(Ok(_)) => format!(", appeared after {:.2} s", f.after),
                        Some(Err(why)) => format!(", appeared after {:.2} s, not probed: {why}", f.after),
                    })
                    .unwrap_or_default();
                let n = by_entry.get(&v.addr).copied().unwrap_or(0);
                format!("{tier} {:#x} ({place}{followed}): {n} calls", v.addr)
            })
            .collect();
        let elsewhere: u64 =
            by_entry.iter().filter(|(addr, _)| method.version_at(**addr).is_none()).map(|(_, n)| n).sum();
        if elsewhere > 0 {
            code.push(format!("other JIT code: {elsewhere} calls"));
        }
        extra.push((key("_code"), code.join("; ")));
        if let Some(caveat) = &method.caveat {
            extra.push((key("_note"), caveat.clone()));
        }
    }
    Metadata {
        pid: s.target_pid,
        ns_pid: target.map(|t| t.nspid),
        comm: target.map(|t| t.comm.clone()).unwrap_or_default(),
        command_line: Metadata::quote_command_line(&s.target_cmdline),
        start_time: Some(s.start_time.fixed_offset()),
        duration_secs: Some(s.elapsed.as_secs_f64()),
        event: "probe".to_string(),
        samples: if stacks { calls.iter().sum() } else { 0 },
        lost: s.lost,
        extra,
        ..Metadata::for_this_host()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_are_found_like_execvp_finds_them() {
        assert_eq!(program_path("./x"), Some(std::env::current_dir().unwrap().join("./x")));
        assert!(program_path("sh").is_some_and(|p| p.ends_with("sh") && p.is_absolute()));
        assert_eq!(program_path("no-such-profcpu-program"), None);
    }
}
