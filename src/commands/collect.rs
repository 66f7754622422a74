//! `profcpu collect`: record the target into a fresh `<output>/HH-MM-SS_YYYY-MM-DD/perf.data`, then hand the
//! finished recording to the later stages.
//!
//! The output base and the run folder are opened once ([`Dir`]); everything of the run is created and read through
//! the run folder's descriptor, so a user who can write to the base cannot redirect root's writes by renaming the
//! run folder and putting a symlink in its place.

use super::pipeline::{self, FrameNames, MetadataSource, OutputRequest, PerfDataFollower, Recording, RecordingEnd};
use crate::archive::tarball::Segment;
use crate::cli::{CollectArgs, CollectOptions};
use crate::fs::Dir;
use crate::perf_data::{EventDesc, PerfDataReader, Record, SampleFormats, WriteProgress, Written};
use crate::record::jit_names::{self, JitNames};
use crate::record::{self, EndReason, Mode, RecordObserver, RecordOptions, RecordSummary, Target};
use crate::report::metadata_txt::{Metadata, Trigger};
use crate::report::profile::ReportOptions;
use crate::symbolize::parsers::ProcessInfo;
use crate::symbolize::{Capture, SymbolizeOptions, SYMBOLS_DIR};
use anyhow::{bail, Result};
use std::collections::BTreeSet;
use std::io::{ErrorKind, IsTerminal};
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

/// How many same-second runs get a `-2`, `-3`, … suffix before giving up.
const MAX_RUN_DIR_SUFFIX: u32 = 1000;

pub fn run(args: CollectArgs) -> Result<()> {
    let target = if args.all {
        Target::All
    } else if !args.command.is_empty() {
        Target::Command(args.command.clone())
    } else {
        Target::Pid(args.pid)
    };
    let run_dir = collect(target, &args.options, None)?;
    println!("{}", run_dir.display());
    Ok(())
}

/// One whole collection of `target` as `options` say: records, saves what naming needs, writes every output, and
/// returns the run folder. Commands that collect (collect, trap) all come through here; `trigger` is what started
/// it, for metadata.txt.
pub fn collect(target: Target, options: &CollectOptions, trigger: Option<Trigger>) -> Result<PathBuf> {
    // A wrong PID or symbol server must not leave an empty run folder behind.
    record::check_target(&target)?;
    let symbol_servers = super::symbol_servers(&options.symbols)?;
    let (base, run_name, run_dir) = create_run_dir(&options.output, chrono::Local::now())?;
    let duration = Duration::from_secs_f64(options.duration);
    let symbol_opts = SymbolizeOptions {
        debug_roots: options.symbols.symbols.clone(),
        force_maps: options.symbols.force_maps,
        symbol_servers,
        ..SymbolizeOptions::live()
    };
    let command_env = match (&target, options.no_ipc) {
        (Target::Command(_), false) => jit_names::command_environment(),
        _ => Vec::new(),
    };
    let capture = match &target {
        Target::All => Some(Capture::new_all(&run_dir, &symbol_opts)?),
        Target::Pid(pid) => Some(Capture::new(&run_dir, &[*pid], &symbol_opts)?),
        // The command's PID is known once it has been started (on_start).
        Target::Command(_) => None,
    };
    let mut observer = CollectObserver {
        target: target.clone(),
        duration,
        run_dir: run_dir.clone(),
        capture,
        symbol_opts: symbol_opts.clone(),
        target_info: None,
        jit_names: if options.no_ipc { JitNamesState::LeftAlone } else { JitNamesState::NotYet },
        command_env_set: !command_env.is_empty(),
        command_pids: BTreeSet::new(),
        perf_data_follower: None,
        mode: options.mode(),
        perf_data: None,
        live_outputs: None,
        unwind_stack_copies: !options.keep_stack_copies,
    };

    let opts = RecordOptions { command_env, ..record_options(target, options, run_dir.clone()) };
    let recorded = record::record(&opts, &mut observer);
    // Sampling is over: the runtimes this run switched perf maps on in stop writing, the capture copies what they
    // wrote, then the files they wrote because of this run go (a run that failed switches off as well, and keeps
    // nothing).
    let mut jit_names = observer.jit_names.take();
    if let Some(names) = &mut jit_names {
        names.switch_off();
    }
    if let (Ok(_), Some(c)) = (&recorded, &mut observer.capture) {
        c.poll();
    }
    if let Some(names) = &mut jit_names {
        names.remove_files();
        names.remove_command_files(&observer.command_pids);
    }
    let summary = match recorded {
        Ok(summary) => summary,
        Err(e) => {
            if let Some(live) = observer.live_outputs.take() {
                live.abandon();
            }
            discard_run(&base, &run_name, &run_dir, observer.capture.as_ref());
            return Err(e);
        }
    };
    eprintln!("{}", summary_line(&summary));
    let mut metadata = metadata_of(&summary, observer.target_info.as_ref());
    metadata.trigger = trigger;
    metadata.jit_names = match (&observer.jit_names, &jit_names) {
        (JitNamesState::LeftAlone, _) => "left alone (-no-ipc)".to_string(),
        (_, names) => names.as_ref().and_then(JitNames::describe).unwrap_or_default(),
    };
    // perf.data is complete: what the follower has not compressed yet is little.
    let perf_data_segments =
        observer.perf_data_follower.take().and_then(|f| match f.finish().and_then(|f| f.into_segments()) {
            Ok(segments) => Some(segments),
            Err(e) => {
                tracing::debug!("perf.data is compressed again: {e:#}");
                None
            }
        });
    let outputs = match (observer.live_outputs.take(), observer.capture.take()) {
        // The outputs begun while recording get what they were waiting for.
        (Some(live), Some(capture)) => {
            // What the recorder knows goes in first, as after_recording does.
            run_dir.write_file(crate::report::METADATA_FILE, metadata.to_string().as_bytes())?;
            match live.finish(capture, RecordingEnd { metadata: metadata.clone() }) {
                Ok(outputs) => outputs?,
                // They stopped early (the reason is logged): made now instead.
                Err(capture) => after_recording(&run_dir, metadata, Some(*capture), None, None)?,
            }
        }
        (_, capture) => after_recording(&run_dir, metadata, capture, perf_data_segments, None)?,
    };
    pipeline::print_summary(&outputs);
    Ok(run_dir.path().to_path_buf())
}

/// Checks now that a collection of `target` as `options` say could start: the target exists, the output folder can
/// be made, and the kernel lets profcpu sample the target. For commands that collect later (trap), so they refuse
/// at once rather than when the moment comes.
pub fn check(target: &Target, options: &CollectOptions) -> Result<()> {
    record::check_target(target)?;
    super::symbol_servers(&options.symbols)?;
    let base = open_base(&options.output)?;
    record::check_access(&record_options(target.clone(), options, base))
}

/// How `options` record `target` into `output`.
fn record_options(target: Target, options: &CollectOptions, output: Dir) -> RecordOptions {
    RecordOptions {
        probes: None,
        target,
        mode: options.mode(),
        command_env: Vec::new(),
        duration: Some(Duration::from_secs_f64(options.duration)),
        frequency: options.freq,
        event: options.event,
        mmap_pages: options.mmap_pages,
        call_graph: options.call_graph,
        output,
        perf_data: pipeline::PERF_DATA_FILE.to_string(),
        progress: std::io::stderr().is_terminal(),
    }
}

/// The stages after recording: name every sample while the target's files are still there, saving what the
/// samples used into `symbols/` in the same pass (`postprocess` names them from that copy later, with the same
/// result), and write the reports and the archive.
pub(super) fn after_recording(
    run_dir: &Dir,
    metadata: Metadata,
    capture: Option<Capture>,
    perf_data_segments: Option<Vec<Segment>>,
    title: Option<String>,
) -> Result<pipeline::OutputSummary> {
    let recording = pipeline::open_recording(run_dir)?;
    // What the recorder knows goes in first, so that a run stopped while writing the outputs leaves what
    // `postprocess` needs to make exactly them; the pipeline replaces it with its own copy.
    run_dir.write_file(crate::report::METADATA_FILE, metadata.to_string().as_bytes())?;
    let left = |what: &str| outputs_left(run_dir, what);
    let names = match capture {
        // A second signal waits until symbols/ is complete (Stage::Saving), then leaves it.
        Some(capture) => {
            FrameNames::Capture { capture: Box::new(capture), left: left("perf.data, symbols/ and metadata.txt") }
        }
        // Nothing to name (probe -no-stacks): no symbols/.
        None => {
            crate::interrupt::set_stage(crate::interrupt::Stage::Writing { left: left("perf.data and metadata.txt") });
            FrameNames::Options(SymbolizeOptions { live: false, ..SymbolizeOptions::default() })
        }
    };
    pipeline::generate(OutputRequest {
        dir: run_dir,
        recording: Recording::Complete {
            file: recording,
            perf_data_segments,
            metadata: MetadataSource::Given(Box::new(metadata)),
        },
        names,
        report: ReportOptions::default(),
        title,
    })
}

/// What a run stopped before its outputs leaves, `what` being what `run_dir` holds.
fn outputs_left(run_dir: &Dir, what: &str) -> String {
    let shown = run_dir.path().display();
    format!(
        "the outputs were not written: {shown} holds {what} only; `profcpu postprocess -dir {shown}` makes the rest"
    )
}

/// metadata.txt for this run.
fn metadata_of(s: &RecordSummary, target: Option<&ProcessInfo>) -> Metadata {
    let pid = s.target_pid;
    Metadata {
        pid,
        ns_pid: target.map(|t| t.nspid),
        comm: target.map(|t| t.comm.clone()).unwrap_or_default(),
        command_line: Metadata::quote_command_line(&s.target_cmdline),
        start_time: Some(s.start_time.fixed_offset()),
        duration_secs: Some(s.elapsed.as_secs_f64()),
        frequency_hz: s.mode.samples_on_cpu().then_some(s.frequency),
        mode: s.mode.name().to_string(),
        event: s.event_name.clone(),
        samples: s.samples,
        switch_outs: s.mode.records_switches().then_some(s.switch_outs),
        lost: s.lost,
        ..Metadata::for_this_host()
    }
}

/// The .NET perf maps of the run: switched on by a thread while sampling runs (a runtime that does not answer must
/// not stall the draining of the ring buffers), then handed back when sampling is over.
enum JitNamesState {
    /// Sampling has not begun.
    NotYet,
    Switching(JoinHandle<JitNames>),
    Ready(JitNames),
    /// `-no-ipc`.
    LeftAlone,
}

impl JitNamesState {
    /// The decisions, once the thread has finished (its IPC waits are bounded by their timeouts).
    fn take(&mut self) -> Option<JitNames> {
        match std::mem::replace(self, JitNamesState::NotYet) {
            JitNamesState::Switching(thread) => match thread.join() {
                Ok(names) => Some(names),
                Err(_) => {
                    tracing::warn!("switching .NET perf maps on failed unexpectedly; see the log above");
                    None
                }
            },
            JitNamesState::Ready(names) => Some(names),
            JitNamesState::LeftAlone => {
                *self = JitNamesState::LeftAlone;
                None
            }
            JitNamesState::NotYet => None,
        }
    }
}

/// Sees the recording as it happens. Later stages hook in here to copy what vanishes with the target (a JIT's perf
/// map or jitdump) while it is still alive.
struct CollectObserver {
    target: Target,
    duration: Duration,
    run_dir: Dir,
    capture: Option<Capture>,
    symbol_opts: SymbolizeOptions,
    /// Read when sampling starts: the target may be gone by the end.
    target_info: Option<ProcessInfo>,
    jit_names: JitNamesState,
    /// A launched command got perf map variables from profcpu.
    command_env_set: bool,
    /// The launched command and the processes it forked (they inherit its environment).
    command_pids: BTreeSet<u32>,
    /// Compresses perf.data for the archive as it is written.
    perf_data_follower: Option<PerfDataFollower>,
    mode: Mode,
    /// perf.data being written: where its records start, its events, how far they are in the file.
    perf_data: Option<(u64, Vec<EventDesc>, Arc<WriteProgress>)>,
    /// The outputs made while recording.
    live_outputs: Option<LiveOutputs>,
    /// Whether the outputs made while recording replace perf.data by its copy with the stacks unwound.
    unwind_stack_copies: bool,
}

/// The outputs of an on-CPU collection made while it records: a thread names the samples from perf.data as it is
/// written (with the capture's copies as they grow) and writes perf_script.out and the archive as it goes, so
/// little is left when the recording ends (see docs/ARCHITECTURE.md).
struct LiveOutputs {
    thread: JoinHandle<Result<pipeline::OutputSummary>>,
    /// Where the capture goes once its last poll is done, and then what the recorder knows at the end.
    capture_to: mpsc::SyncSender<Capture>,
    end_to: mpsc::SyncSender<RecordingEnd>,
    progress: Arc<WriteProgress>,
}

impl LiveOutputs {
    /// The recording failed: the thread stops and removes what it made.
    fn abandon(self) {
        self.progress.set(Written::Abandoned);
        drop((self.capture_to, self.end_to));
        if let Ok(Err(e)) = self.thread.join() {
            tracing::debug!("the outputs begun while recording were dropped: {e:#}");
        }
    }

    /// The recording is complete: hands the thread what it was waiting for and waits for the outputs. The capture
    /// comes back if the thread had already stopped (its error is logged), for the outputs to be made after all.
    fn finish(self, capture: Capture, end: RecordingEnd) -> Result<Result<pipeline::OutputSummary>, Box<Capture>> {
        if let Err(mpsc::SendError(capture)) = self.capture_to.send(capture) {
            match self.thread.join() {
                Ok(Err(e)) => tracing::warn!("{e:#}; the outputs are made now"),
                _ => tracing::warn!("the outputs begun while recording stopped; they are made now"),
            }
            return Err(Box::new(capture));
        }
        let _ = self.end_to.send(end);
        // What is left is on the way to the user's prompt: at normal priority (lowering a nice value needs
        // CAP_SYS_NICE; without it they stay at 10).
        if let Ok(tids) = crate::procfs::Process::open(std::process::id()).and_then(|p| p.thread_ids()) {
            for tid in tids {
                pipeline::set_nice(tid, 0);
            }
        }
        Ok(self.thread.join().unwrap_or_else(|_| Err(anyhow::anyhow!("making the outputs panicked"))))
    }
}

impl CollectObserver {
    /// Starts making the outputs while recording, when the capture and perf.data are there.
    fn start_live_outputs(&mut self) -> Result<Option<LiveOutputs>> {
        let (Some(capture), Some((data_offset, events, progress))) = (&self.capture, &self.perf_data) else {
            return Ok(None);
        };
        let shown = self.run_dir.shown(pipeline::PERF_DATA_FILE);
        let file = pipeline::open_recording(&self.run_dir)?;
        let reader = PerfDataReader::following(&file, &shown, *data_offset, events.clone(), progress.clone())?;
        let (naming, capture_to) = capture.name_while_recording()?;
        let (end_to, end) = mpsc::sync_channel(1);
        let dir = self.run_dir.clone();
        let unwind_stack_copies = self.unwind_stack_copies;
        let left = outputs_left(&dir, "perf.data, symbols/ and metadata.txt");
        let thread = std::thread::Builder::new().name("outputs".into()).spawn(move || {
            // While sampling runs the target comes first: this thread and those it starts (they inherit it) keep
            // up at nice 10 with a fraction of a CPU; `LiveOutputs::finish` puts them back for the end.
            pipeline::set_nice(0, 10);
            pipeline::generate(OutputRequest {
                dir: &dir,
                recording: Recording::Following { reader: Box::new(reader), end, unwind_stack_copies },
                names: FrameNames::Live { naming: Box::new(naming), left },
                report: ReportOptions::default(),
                title: None,
            })
        })?;
        Ok(Some(LiveOutputs { thread, capture_to, end_to, progress: progress.clone() }))
    }
}

impl RecordObserver for CollectObserver {
    fn on_perf_data(&mut self, data_offset: u64, events: &[EventDesc], progress: &Arc<WriteProgress>) {
        self.perf_data = Some((data_offset, events.to_vec(), progress.clone()));
    }

    /// Announced only once sampling really runs, so a refusal is the only line the user sees.
    fn on_start(&mut self, target_pid: Option<u32>) {
        self.target_info = target_pid.and_then(ProcessInfo::read);
        if let (Target::Command(_), Some(pid), None) = (&self.target, target_pid, &self.capture) {
            match Capture::new(&self.run_dir, &[pid], &self.symbol_opts) {
                Ok(c) => self.capture = Some(c),
                Err(e) => tracing::warn!("JIT names of the command will not be saved: {e:#}"),
            }
        }
        if self.mode == Mode::Cpu {
            match self.start_live_outputs() {
                Ok(live) => self.live_outputs = live,
                Err(e) => tracing::debug!("the samples will be named after the recording: {e:#}"),
            }
        }
        // The outputs made while recording compress perf.data into their archive themselves.
        if let (None, Some((data_offset, events, progress))) = (&self.live_outputs, &self.perf_data) {
            let formats = SampleFormats::of(events);
            match PerfDataFollower::start(&self.run_dir, *data_offset, formats, progress.clone(), None) {
                Ok(follower) => self.perf_data_follower = Some(follower),
                // The pipeline compresses it after the recording instead.
                Err(e) => tracing::debug!("perf.data will be compressed after the recording: {e:#}"),
            }
        }
        if matches!(self.jit_names, JitNamesState::NotYet) {
            self.jit_names = match (&self.target, target_pid) {
                (Target::Command(_), Some(pid)) => {
                    self.command_pids.insert(pid);
                    match self.command_env_set {
                        true => JitNamesState::Ready(JitNames::set_in_environment(pid)),
                        false => JitNamesState::NotYet,
                    }
                }
                (Target::Pid(pid), _) => switch_on_in_background(vec![*pid], false),
                (Target::All, _) => {
                    let me = std::process::id();
                    let pids = crate::procfs::all_pids().unwrap_or_default().into_iter().filter(|&p| p != me);
                    switch_on_in_background(pids.collect(), true)
                }
                _ => JitNamesState::NotYet,
            };
        }
        let line = format!(
            "{} into {}",
            describe_start(&self.target, target_pid, self.duration),
            self.run_dir.path().display()
        );
        // The target names itself (its comm): a terminal must not obey what it says.
        eprintln!("{}", crate::escape::line(&line));
    }
    fn on_record(&mut self, record: &Record) {
        if let Some(c) = &mut self.capture {
            c.observe(record);
        }
        if let Record::Fork(t) = record {
            if self.command_env_set && t.pid != t.ppid && self.command_pids.contains(&t.ppid) {
                self.command_pids.insert(t.pid);
            }
        }
    }
    fn on_tick(&mut self) {
        // A runtime whose perf map is switched on now writes the methods it already has at once: the outputs made
        // while recording name nothing until a poll has copied that (the poll must start after the switch).
        let switched = !matches!(&self.jit_names, JitNamesState::Switching(thread) if !thread.is_finished());
        if let Some(c) = &mut self.capture {
            c.poll();
            if switched {
                c.jit_files_settled();
            }
        }
    }
}

fn switch_on_in_background(pids: Vec<u32>, every_process: bool) -> JitNamesState {
    let thread = std::thread::Builder::new()
        .name("perf-maps-on".into())
        .spawn(move || JitNames::switch_on(&pids, every_process));
    match thread {
        Ok(thread) => JitNamesState::Switching(thread),
        Err(e) => {
            tracing::warn!("cannot start a thread to switch .NET perf maps on ({e}): JIT code may stay unnamed");
            JitNamesState::NotYet
        }
    }
}

fn seconds(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s.fract() == 0.0 {
        format!("{s:.0} s")
    } else {
        format!("{s} s")
    }
}

/// "Profiling PID 1234 (dotnet) for 10 s", "Profiling all processes for 5 s", "Profiling PID 99 (`dotnet App.dll`)
/// until it exits (at most 20 s)".
fn describe_start(target: &Target, target_pid: Option<u32>, duration: Duration) -> String {
    match target {
        Target::All => format!("Profiling all processes for {}", seconds(duration)),
        Target::Command(argv) => format!(
            "Profiling PID {} (`{}`) until it exits (at most {})",
            target_pid.unwrap_or_default(),
            argv.join(" "),
            seconds(duration)
        ),
        Target::Pid(pid) => match record::target::process_name(*pid) {
            Some(name) => format!("Profiling PID {pid} ({name}) for {}", seconds(duration)),
            None => format!("Profiling PID {pid} for {}", seconds(duration)),
        },
    }
}

/// `profcpu: 3012 samples (0 lost) from PID 1234 in 10.0 s, 1.2 MB recorded`, plus why it stopped early; the
/// off-CPU modes count switch-outs (`… 3012 samples and 40211 switch-outs (0 lost) …`).
pub fn summary_line(s: &RecordSummary) -> String {
    let from = match s.target_pid {
        Some(pid) => format!("PID {pid}"),
        None => "all processes".to_string(),
    };
    let what = match s.mode {
        Mode::Cpu => format!("{} samples", s.samples),
        Mode::Offcpu => format!("{} switch-outs", s.switch_outs),
        Mode::Wall => format!("{} samples and {} switch-outs", s.samples - s.switch_outs, s.switch_outs),
    };
    let mut line = format!(
        "profcpu: {what} ({} lost) from {from} in {:.1} s, {:.1} MB recorded",
        s.lost,
        s.elapsed.as_secs_f64(),
        s.bytes_written as f64 / 1e6
    );
    match &s.end_reason {
        EndReason::DurationElapsed => {}
        EndReason::Signal(sig) => line.push_str(&format!(" (stopped by {sig})")),
        EndReason::TargetExited => line.push_str(" (the target exited)"),
    }
    line
}

/// After a recording failed: removes what the run created (an empty symbols/ folder at most) and the run folder
/// itself, `run_name` in `base`.
pub(super) fn discard_run(base: &Dir, run_name: &str, run_dir: &Dir, capture: Option<&Capture>) {
    if let Some(c) = capture {
        let _ = run_dir.remove_empty_dir(SYMBOLS_DIR, c.dir());
    }
    let _ = base.remove_empty_dir(run_name, run_dir);
}

/// Creates `<base>/HH-MM-SS_YYYY-MM-DD` (or `…-2`, `…-3` if taken) as a new directory and opens it. The base may be
/// a symlink the user made; the run folder itself is always created fresh, never reused, and is reached through
/// its descriptor from then on. Returns the base, the run folder's name in it, and the run folder.
pub(super) fn create_run_dir(base: &Path, now: chrono::DateTime<chrono::Local>) -> Result<(Dir, String, Dir)> {
    let base_dir = open_base(base)?;
    let stem = now.format("%H-%M-%S_%Y-%m-%d").to_string();
    for n in 1..=MAX_RUN_DIR_SUFFIX {
        let name = if n == 1 { stem.clone() } else { format!("{stem}-{n}") };
        // A second Ctrl+C during set-up removes the folder with whatever set-up has put in it.
        match crate::interrupt::remove_on_abort(&base.join(&name), || base_dir.create_dir(&name)) {
            Ok(dir) => return Ok((base_dir, name, dir)),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(unusable(base, e)),
        }
    }
    bail!("cannot create a run folder in {}: {MAX_RUN_DIR_SUFFIX} folders named {stem} exist", base.display())
}

/// Opens the output base (`-output`), creating it if needed; refuses what cannot hold outputs.
fn open_base(base: &Path) -> Result<Dir> {
    if base.exists() && !base.is_dir() {
        bail!("the output folder {} is not a folder; choose another with -output", base.display());
    }
    let base_dir = Dir::create_all(base).map_err(|e| unusable(base, e))?;
    if base_dir.is_pseudo_fs() {
        bail!(
            "the output folder {} is in a kernel file system (/proc or /sys), which cannot hold outputs; choose a \
             folder on a disk with -output",
            base.display()
        );
    }
    Ok(base_dir)
}

fn unusable(base: &Path, e: std::io::Error) -> anyhow::Error {
    anyhow::anyhow!("cannot create the output folder {}: {e}; choose a writable folder with -output", base.display())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_folders_are_new_and_numbered() {
        let base = std::env::temp_dir().join(format!("profcpu-rundir-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let now = chrono::Local::now();
        let a = create_run_dir(&base, now).unwrap().2;
        let b = create_run_dir(&base, now).unwrap().2;
        let c = create_run_dir(&base, now).unwrap().2;
        let stem = now.format("%H-%M-%S_%Y-%m-%d").to_string();
        assert_eq!(a.path().file_name().unwrap().to_str().unwrap(), stem);
        assert_eq!(b.path().file_name().unwrap().to_str().unwrap(), format!("{stem}-2"));
        assert_eq!(c.path().file_name().unwrap().to_str().unwrap(), format!("{stem}-3"));
        // A symlink squatting on the next name is skipped, not followed.
        let elsewhere = base.join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, base.join(format!("{stem}-4"))).unwrap();
        let (_, name, _) = create_run_dir(&base, now).unwrap();
        assert_eq!(name, format!("{stem}-5"));
        let err = create_run_dir(Path::new("/proc"), now).unwrap_err().to_string();
        assert!(err.contains("kernel file system"), "{err}");
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn summary_line_reads_like_the_spec() {
        let s = RecordSummary {
            mode: Mode::Cpu,
            samples: 3012,
            switch_outs: 0,
            lost: 0,
            lost_per_cpu: vec![0, 0],
            bytes_written: 1_234_567,
            elapsed: Duration::from_millis(10_020),
            event_name: "cpu-clock".into(),
            frequency: 99,
            target_pid: Some(1234),
            target_cmdline: vec![],
            start_time: chrono::Local::now(),
            end_reason: EndReason::DurationElapsed,
            notices: vec![],
            kernel_frames: true,
        };
        assert_eq!(summary_line(&s), "profcpu: 3012 samples (0 lost) from PID 1234 in 10.0 s, 1.2 MB recorded");
        let s = RecordSummary { end_reason: EndReason::Signal("SIGINT".into()), target_pid: None, ..s };
        assert!(summary_line(&s).ends_with("from all processes in 10.0 s, 1.2 MB recorded (stopped by SIGINT)"));
        let s = RecordSummary { mode: Mode::Wall, switch_outs: 12, target_pid: Some(7), ..s };
        assert!(summary_line(&s).starts_with("profcpu: 3000 samples and 12 switch-outs (0 lost) from PID 7"));
    }
}
