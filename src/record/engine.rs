//! The recording loop: open the events, synthesize what existed before, then stream every ring buffer into the
//! perf.data until the duration ends, a signal arrives or the target exits; then drain and finish the file.

use super::dsos::DsoTracker;
use super::events::{self, EventSpec, Trigger};
use super::explain::{self, OpenTarget};
use super::probe::{self, HitRecord, ProbePoint};
use super::progress::Progress;
use super::ring::{self, RingBuffer};
use super::target::{self, ExitWatch, LaunchedCommand};
use super::{header_features, synthesize, tracepoint, CallGraph};
use super::{EndReason, EventControl, RecordObserver, RecordOptions, RecordSummary, Target};
use crate::interrupt;
use crate::perf_data::abi::{RECORD_FORK, RECORD_SAMPLE, RECORD_SWITCH, RECORD_SWITCH_CPU_WIDE};
use crate::perf_data::tracing::TracingData;
use crate::perf_data::{Attr, EventDesc, PerfDataWriter, Record, SampleFormat};
use anyhow::{bail, Context, Result};
use perf_event_open_sys::bindings::perf_event_attr;
use std::collections::{HashMap, HashSet};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

/// How often the observer ticks, the progress line updates and the buffers are drained even without a wake-up.
const TICK: Duration = Duration::from_millis(250);
/// How long a launched command gets to exit after SIGTERM when recording stops first.
const COMMAND_GRACE: Duration = Duration::from_secs(2);
/// Upper bound on re-listing a target's threads while it keeps creating new ones.
const MAX_THREAD_RESCANS: usize = 64;
/// How long a running target's switch rate is watched before `-call-graph auto` decides to copy switch-outs' stacks.
const SWITCH_RATE_WINDOW: Duration = Duration::from_millis(200);

/// One CPU's ring buffer and the event that owns its mapping; every other event on that CPU writes into it.
struct CpuBuffer {
    cpu: u32,
    owner: OwnedFd,
    /// The event the owner belongs to.
    event: usize,
    ring: RingBuffer,
    /// The owner's task is gone (poll reports POLLHUP forever): keep reading, stop polling.
    hung_up: bool,
}

/// An event redirected into its CPU's buffer.
struct TaskEvent {
    fd: Option<OwnedFd>,
    id: u64,
    event: usize,
}

struct Session<'o> {
    /// The recording's events, opened for every task and CPU: the first carries the side band (MMAP2, COMM, …).
    specs: Vec<EventSpec>,
    attrs: Vec<perf_event_attr>,
    /// Per event: its name in perf.data.
    names: Vec<String>,
    cpus: Vec<u32>,
    data_pages: usize,
    pages_requested: usize,
    map_refusal: Option<i32>,
    buffers: Vec<Option<CpuBuffer>>,
    others: Vec<TaskEvent>,
    /// Per event: the sample ids of its descriptors.
    ids: Vec<Vec<u64>>,
    /// Which event a sample id belongs to (with more than one event).
    event_of_id: HashMap<u64, usize>,
    writer: Option<PerfDataWriter>,
    /// Per event: its sample layout (the `sample_id` trailer of other records is the same for all).
    formats: Vec<SampleFormat>,
    /// Per event: samples read.
    samples: Vec<u64>,
    /// The tracepoints' formats, for the file's HEADER_TRACING_DATA.
    tracing: Option<TracingData>,
    lost_per_cpu: Vec<u64>,
    dsos: DsoTracker,
    /// While the target's threads are being listed: threads the kernel reported created (FORK), which carry an
    /// inherited event already. `None` once set-up is over, so a long recording does not collect every thread id.
    forked: Option<HashSet<u32>>,
    /// Threads found by re-listing /proc after the first events were open, and their own events.
    rescanned: HashMap<u32, Vec<usize>>,
    /// Ids of events closed because the thread turned out to have an inherited event too; their samples are
    /// duplicates.
    dropped_ids: HashSet<u64>,
    /// One copy-out buffer per ring, reused across passes.
    scratch: Vec<Vec<u8>>,
    notices: Vec<String>,
    /// When the first enabled event was opened: samples (and the duration) count from here.
    sampling_since: Option<Instant>,
    /// The kernel text mapping, read before any event is open (reading /proc/kallsyms takes a while).
    kernel_text: Option<Record>,
    observer: &'o mut dyn RecordObserver,
}

/// Records `opts.target` into `opts.perf_data` and returns what happened. On error no perf.data is left behind (an
/// unfinished one is unreadable).
pub fn record(opts: &RecordOptions, observer: &mut dyn RecordObserver) -> Result<RecordSummary> {
    let existed = opts.output.kind(&opts.perf_data).is_some();
    let result = record_into(opts, observer);
    if result.is_err() && !existed {
        let _ = opts.output.remove_file(&opts.perf_data);
    }
    result
}

/// What `opts` ask the kernel for.
struct Plan {
    /// The events, the one carrying the side band (MMAP2, COMM, …) first.
    specs: Vec<EventSpec>,
    /// Ring data pages per CPU.
    data_pages: usize,
    /// How stacks are recorded, after fitting the ring.
    call_graph: CallGraph,
    /// The tracepoints' formats, for the file's HEADER_TRACING_DATA.
    tracing: Option<TracingData>,
    /// What was adapted (a ring fitted to the stack copies, tracefs mounted).
    notices: Vec<String>,
}

/// What `opts` ask the kernel for. Reads the scheduler tracepoint from tracefs for the off-CPU modes: a missing
/// tracefs is the one line the user sees, before anything is opened.
fn plan(opts: &RecordOptions) -> Result<Plan> {
    let asked_pages = opts
        .mmap_pages
        .unwrap_or_else(|| {
            ring::default_data_pages_for(opts.call_graph.stack_copy_bytes(), opts.mode.records_switches())
        })
        .max(1);
    let (call_graph, data_pages, ring_notice) = opts.call_graph.fit_ring(asked_pages, crate::prefault::page_size());
    let switches = match opts.mode.records_switches() && opts.probes.is_none() {
        true => Some(tracepoint::sched_switch(opts.mode.name())?),
        false => None,
    };
    let sampling = EventSpec {
        trigger: Trigger::Sampling { kind: opts.event, frequency: opts.frequency },
        kernel: true,
        side_band: true,
        context_switch: false,
        inherit: !matches!(opts.target, Target::All),
        enable_on_exec: matches!(opts.target, Target::Command(_)),
        wakeup_bytes: (data_pages.saturating_mul(crate::prefault::page_size()) / 2).min(u32::MAX as usize) as u32,
        stack_copy_bytes: call_graph.stack_copy_bytes(),
    };
    let mut specs = Vec::new();
    if let Some(probes) = &opts.probes {
        // The side band comes from an event of its own: probes fire rarely, and may not fire at all.
        specs.push(EventSpec { trigger: Trigger::Tracking, kernel: false, ..sampling });
        for p in &probes.events {
            let record = match (p.sampled, probes.stacks) {
                (false, _) => HitRecord::Count,
                (true, false) => HitRecord::Hit,
                (true, true) => HitRecord::HitWithStack,
            };
            let trigger = Trigger::Probe { point: p.point, armed: p.armed, record };
            specs.push(EventSpec { trigger, kernel: false, side_band: false, ..sampling });
        }
    } else if opts.mode.samples_on_cpu() {
        specs.push(sampling);
    }
    if let Some(switches) = &switches {
        // Every switch-out of a target thread with its stack, and (context_switch) when each thread ran again.
        specs.push(EventSpec {
            trigger: Trigger::SchedSwitch { id: switches.id },
            side_band: specs.is_empty(),
            context_switch: true,
            ..sampling
        });
    }
    let tracing = switches.as_ref().map(|s| s.tracing.clone()).or_else(|| opts.probes.as_ref()?.tracing.clone());
    let notices = ring_notice.into_iter().chain(switches.as_ref().and_then(|s| s.notice.clone())).collect();
    Ok(Plan { specs, data_pages, call_graph, tracing, notices })
}

/// Opens, and closes at once, the events a recording with `opts` would open first (on the target process, or
/// CPU-wide for every process), so that a command which records later can refuse now, with the same explanation a
/// recording would give. A launched command is not checked (it does not exist yet).
pub fn check_access(opts: &RecordOptions) -> Result<()> {
    let Plan { mut specs, .. } = plan(opts)?;
    let cpu = target::online_cpus()?[0] as i32;
    let (pid, what) = match &opts.target {
        Target::Pid(pid) => (*pid as i32, OpenTarget::Pid(*pid)),
        Target::All => (-1, OpenTarget::AllProcesses),
        Target::Command(_) => return Ok(()),
    };
    for spec in &mut specs {
        events::open_first(spec, pid, cpu, &what)?;
    }
    Ok(())
}

fn record_into(opts: &RecordOptions, observer: &mut dyn RecordObserver) -> Result<RecordSummary> {
    let start_time = chrono::Local::now();
    crate::fs::raise_open_files_limit();
    target::raise_priority();
    let cpus = target::online_cpus()?;
    let Plan { mut specs, data_pages, call_graph, tracing, mut notices } = plan(opts)?;
    if let Some(switches) = specs.iter_mut().find(|s| matches!(s.trigger, Trigger::SchedSwitch { .. })) {
        // Switch-outs' stacks are copied as samples' are, unless `auto` finds the target switching too often.
        let rate = match call_graph {
            CallGraph::Auto => target::switch_rate(&opts.target, SWITCH_RATE_WINDOW),
            _ => None,
        };
        let what = match &opts.target {
            Target::Pid(pid) => format!("PID {pid}"),
            _ => "the machine".to_string(),
        };
        let (copy, notice) = call_graph.switch_copy_bytes(rate, &what);
        switches.stack_copy_bytes = copy;
        notices.extend(notice);
    }
    let mut names: Vec<String> = specs.iter().map(|s| s.event_name().to_string()).collect();
    if let Some(probes) = &opts.probes {
        for (name, p) in names[1..].iter_mut().zip(&probes.events) {
            name.clone_from(&p.name);
        }
    }
    let max_cpu = cpus.iter().max().copied().unwrap_or(0) as usize;
    let mut session = Session {
        attrs: specs.iter().map(events::build_attr).collect(),
        names,
        ids: vec![Vec::new(); specs.len()],
        event_of_id: HashMap::new(),
        formats: Vec::new(),
        samples: vec![0; specs.len()],
        tracing,
        specs,
        buffers: (0..cpus.len()).map(|_| None).collect(),
        cpus,
        data_pages,
        pages_requested: data_pages,
        map_refusal: None,
        others: Vec::new(),
        writer: None,
        lost_per_cpu: vec![0; max_cpu + 1],
        dsos: DsoTracker::default(),
        forked: None,
        rescanned: HashMap::new(),
        dropped_ids: HashSet::new(),
        scratch: Vec::new(),
        notices: Vec::new(),
        sampling_since: None,
        kernel_text: synthesize::kernel_text(),
        observer,
    };
    for n in notices {
        tracing::warn!("{n}");
        session.notices.push(n);
    }
    let mut launched = None;
    let (target_pid, target_cmdline, exit_watch) = match &opts.target {
        Target::Pid(pid) => {
            let pid = *pid;
            check_target(&opts.target)?;
            let cmdline = read_cmdline(pid);
            session.open_pid(pid, opts)?;
            (Some(pid), cmdline, Some(ExitWatch::new(pid)))
        }
        Target::All => {
            session.open_all(opts)?;
            (None, Vec::new(), None)
        }
        Target::Command(argv) => {
            let mut cmd = LaunchedCommand::spawn(argv, &opts.command_env)?;
            let pid = cmd.pid();
            session.open_events(pid as i32, &OpenTarget::Pid(pid))?;
            session.create_writer(opts)?;
            session.write_kernel_text()?;
            session.writer().finished_round()?;
            let watch = ExitWatch::new(pid);
            cmd.release()?;
            // The events were opened disabled; exec enabled them.
            session.sampling_since = Some(Instant::now());
            launched = Some(cmd);
            (Some(pid), argv.clone(), Some(watch))
        }
    };
    session.report_ring_size();
    // A signal during set-up cancels the run: nothing has been shown as sampled yet, so nothing is kept.
    interrupt::begin_sampling()?;
    let (data_offset, progress) = (session.writer().data_offset(), session.writer().progress());
    let events = session.writer().events().to_vec();
    session.observer.on_perf_data(data_offset, &events, &progress);
    session.observer.on_start(target_pid);

    let started = session.sampling_since.unwrap_or_else(Instant::now);
    let deadline = opts.duration.map(|d| started + d);
    let progress = Progress::new(opts.progress, opts.duration);
    let mut next_tick = started + TICK;
    let end_reason = loop {
        if let Some(sig) = interrupt::received() {
            break EndReason::Signal(interrupt::signal_name(sig).to_string());
        }
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            break EndReason::DurationElapsed;
        }
        let exited = match (&mut launched, &exit_watch) {
            (Some(cmd), _) => cmd.try_reap(),
            (None, Some(watch)) => watch.has_exited(),
            (None, None) => false,
        };
        if exited {
            break EndReason::TargetExited;
        }
        let wake_at = deadline.map_or(next_tick, |d| d.min(next_tick));
        let woken = session.wait(wake_at.saturating_duration_since(now), exit_watch.as_ref());
        if session.drain()? > 0 {
            session.writer().finished_round()?;
        }
        let tick = Instant::now() >= next_tick;
        if woken || tick {
            session.poll_observer(false);
        }
        if tick {
            session.observer.on_tick();
            progress.update(started.elapsed(), session.total_samples(), session.lost(), session.writer().data_size());
            next_tick = Instant::now() + TICK;
        }
    };
    let elapsed = started.elapsed();
    interrupt::set_stage(interrupt::Stage::Saving);

    // Stop the kernel first so the last drain gets everything and nothing more comes.
    session.disable_all();
    if session.drain()? > 0 {
        session.writer().finished_round()?;
    }
    session.poll_observer(true);
    if let Some(cmd) = &mut launched {
        cmd.terminate(COMMAND_GRACE);
    }
    progress.finish();
    session.finish(opts, start_time, elapsed, end_reason, target_pid, target_cmdline)
}

/// Checks that the target can be profiled at all before anything is created for it (one clear line if not).
pub fn check_target(target: &Target) -> Result<()> {
    match target {
        Target::Pid(pid) if !target::process_exists(*pid) => bail!("{}", no_such_process(*pid)),
        Target::Command(argv) => match argv.first() {
            Some(program) => target::check_program(program),
            None => bail!("no command given after --"),
        },
        _ => Ok(()),
    }
}

fn no_such_process(pid: u32) -> String {
    format!(
        "no process with PID {pid}: /proc/{pid} does not exist (give the PID as seen from here; `ps -e` lists them)"
    )
}

fn read_cmdline(pid: u32) -> Vec<String> {
    crate::procfs::Process::open(pid).map(|p| p.cmdline()).unwrap_or_default()
}

impl Session<'_> {
    fn writer(&mut self) -> &mut PerfDataWriter {
        self.writer.as_mut().expect("the writer is created right after the first events are opened")
    }

    fn lost(&self) -> u64 {
        self.lost_per_cpu.iter().sum()
    }

    /// Whether event `e`'s samples carry a probed function's caller in their stack copy (see
    /// [`probe::ask_for_caller`]), to be spliced into the callchain before they are written.
    fn splices_caller(&self, e: usize) -> bool {
        let spec = &self.specs[e];
        matches!(spec.trigger, Trigger::Probe { record: HitRecord::HitWithStack, .. }) && spec.stack_copy_bytes == 0
    }

    fn total_samples(&self) -> u64 {
        self.samples.iter().sum()
    }

    /// The event that carries the side band, whose settings (stack copies, launch) hold for all.
    fn lead(&self) -> &EventSpec {
        &self.specs[0]
    }

    /// Events for every thread of `pid` (re-listing until no thread is missing), then the synthesized state.
    fn open_pid(&mut self, pid: u32, opts: &RecordOptions) -> Result<()> {
        // Listed before any event exists, so none of these threads can have inherited one.
        let initial = target::thread_ids(pid).map_err(|_| anyhow::anyhow!(no_such_process(pid)))?;
        self.open_events(pid as i32, &OpenTarget::Pid(pid))?;
        self.create_writer(opts)?;
        self.write_kernel_text()?;
        for &tid in initial.iter().filter(|&&t| t != pid) {
            self.open_task(tid, false)?;
        }
        for record in synthesize::process(pid, self.lead().stack_copy_bytes > 0) {
            self.write_synthesized(&record)?;
        }
        let initial_count = initial.len();
        let mut opened: HashSet<u32> = initial.into_iter().collect();
        opened.insert(pid);
        self.forked = Some(HashSet::new());
        // A thread created between the listing and the opening of its creator's events has no event: list again
        // until the list is stable. Threads the kernel reported through FORK already inherited one.
        let (mut rescans, mut opened_late, mut inherited) = (0, 0, 0);
        for _ in 0..MAX_THREAD_RESCANS {
            self.drain()?;
            rescans += 1;
            let Ok(now) = target::thread_ids(pid) else { break };
            let forked = self.forked.as_ref().expect("set above");
            let new: Vec<u32> = now.into_iter().filter(|t| !opened.contains(t)).collect();
            let missing: Vec<u32> = new.iter().copied().filter(|t| !forked.contains(t)).collect();
            inherited += new.len() - missing.len();
            opened.extend(new.iter().filter(|t| forked.contains(t)));
            if missing.is_empty() {
                break;
            }
            for tid in missing {
                opened.insert(tid);
                if self.open_task(tid, true)? {
                    opened_late += 1;
                    for record in synthesize::thread(pid, tid) {
                        self.write_synthesized(&record)?;
                    }
                }
            }
        }
        self.forked = None;
        self.writer().finished_round()?;
        tracing::debug!(
            "PID {pid}: {initial_count} threads listed, {rescans} re-listings found {opened_late} more without an \
             event and {inherited} that inherited one; {} CPUs",
            self.cpus.len()
        );
        Ok(())
    }

    /// CPU-wide events on every CPU, each CPU with its own buffer, then every process synthesized.
    fn open_all(&mut self, opts: &RecordOptions) -> Result<()> {
        self.open_events(-1, &OpenTarget::AllProcesses)?;
        self.create_writer(opts)?;
        self.write_kernel_text()?;
        for pid in crate::procfs::all_pids().context("cannot list /proc")? {
            for record in synthesize::process(pid, self.lead().stack_copy_bytes > 0) {
                self.write_synthesized(&record)?;
            }
        }
        self.writer().finished_round()?;
        Ok(())
    }

    /// Every event for task `pid` (-1: all tasks) on every CPU. On the first CPU each event's settings are decided
    /// (with fallbacks); the other CPUs follow them.
    fn open_events(&mut self, pid: i32, what: &OpenTarget) -> Result<()> {
        for e in 0..self.specs.len() {
            let (first, notices) = events::open_first(&mut self.specs[e], pid, self.cpus[0] as i32, what)?;
            self.adopt_spec(e, notices);
            self.attach(0, first, e)?;
        }
        for i in 1..self.cpus.len() {
            for e in 0..self.specs.len() {
                let fd = events::open(&self.attrs[e], pid, self.cpus[i] as i32)
                    .map_err(|err| events::refused(&self.specs[e], &err, what))?;
                self.attach(i, fd, e)?;
            }
        }
        Ok(())
    }

    fn adopt_spec(&mut self, e: usize, notices: Vec<String>) {
        self.attrs[e] = events::build_attr(&self.specs[e]);
        for n in notices {
            tracing::warn!("{n}");
            self.notices.push(n);
        }
    }

    /// Opens `tid`'s events on every CPU. Returns false when the thread is already gone.
    fn open_task(&mut self, tid: u32, rescanned: bool) -> Result<bool> {
        let mut opened = Vec::new();
        for i in 0..self.cpus.len() {
            for e in 0..self.specs.len() {
                match events::open(&self.attrs[e], tid as i32, self.cpus[i] as i32) {
                    Ok(fd) => {
                        opened.push(self.others.len());
                        self.attach(i, fd, e)?;
                    }
                    // The thread exited since it was listed.
                    Err(err) if err.raw_os_error() == Some(libc::ESRCH) => {
                        for &j in &opened {
                            self.others[j].fd = None;
                        }
                        return Ok(false);
                    }
                    Err(err) => return Err(events::refused(&self.specs[e], &err, &OpenTarget::Pid(tid))),
                }
            }
        }
        if rescanned {
            self.rescanned.insert(tid, opened);
        }
        Ok(true)
    }

    /// Makes `fd` (of event `e`) the owner of CPU slot `i`'s ring buffer, or redirects it into the existing one.
    fn attach(&mut self, i: usize, fd: OwnedFd, e: usize) -> Result<()> {
        if !self.lead().enable_on_exec {
            self.sampling_since.get_or_insert_with(Instant::now);
        }
        let id = events::event_id(fd.as_fd()).context("PERF_EVENT_IOC_ID failed")?;
        self.ids[e].push(id);
        self.event_of_id.insert(id, e);
        if let Some(w) = self.writer.as_mut() {
            w.add_ids(e, &[id]);
        }
        match &self.buffers[i] {
            Some(buffer) => {
                events::redirect_output(fd.as_fd(), buffer.owner.as_fd())
                    .with_context(|| format!("cannot redirect an event into CPU {}'s ring buffer", buffer.cpu))?;
                self.others.push(TaskEvent { fd: Some(fd), id, event: e });
            }
            None => {
                let ring = self.map_ring(&fd)?;
                self.buffers[i] = Some(CpuBuffer { cpu: self.cpus[i], owner: fd, event: e, ring, hung_up: false });
            }
        }
        Ok(())
    }

    /// Maps a ring of the chosen size, halving it while the kernel refuses to lock that much memory.
    fn map_ring(&mut self, fd: &OwnedFd) -> Result<RingBuffer> {
        loop {
            match RingBuffer::map(fd.as_fd(), self.data_pages) {
                Ok(ring) => return Ok(ring),
                Err(e) if matches!(e.raw_os_error(), Some(libc::EPERM | libc::ENOMEM)) && self.data_pages > 1 => {
                    self.map_refusal = e.raw_os_error();
                    self.data_pages /= 2;
                }
                Err(e) => bail!(
                    "cannot map a {}-page perf ring buffer: {e}; raise the locked-memory limit (`ulimit -l`) or \
                     `sysctl kernel.perf_event_mlock_kb`",
                    self.data_pages
                ),
            }
        }
    }

    fn report_ring_size(&mut self) {
        if self.data_pages < self.pages_requested {
            let n = format!(
                "ring buffers reduced from {} to {} pages per CPU ({} when locking more): raise `ulimit -l` or \
                 `sysctl kernel.perf_event_mlock_kb` if samples get lost",
                self.pages_requested,
                self.data_pages,
                explain::errno_name(self.map_refusal.unwrap_or(0))
            );
            tracing::warn!("{n}");
            self.notices.push(n);
        }
        tracing::debug!(
            "{} data pages per CPU ring buffer, {} events",
            self.data_pages,
            self.ids.iter().map(Vec::len).sum::<usize>()
        );
    }

    fn create_writer(&mut self, opts: &RecordOptions) -> Result<()> {
        let mut descs = Vec::new();
        for e in 0..self.specs.len() {
            let attr = match self.splices_caller(e) {
                true => Attr::from_kernel(&probe::without_caller_copy(&self.attrs[e])),
                false => Attr::from_kernel(&self.attrs[e]),
            };
            descs.push(EventDesc { name: self.names[e].clone(), attr, ids: self.ids[e].clone() });
        }
        self.formats = self.attrs.iter().map(|a| Attr::from_kernel(a).sample_format()).collect();
        self.writer = Some(PerfDataWriter::create(&opts.output, &opts.perf_data, descs)?);
        Ok(())
    }

    fn write_kernel_text(&mut self) -> Result<()> {
        match self.kernel_text.take() {
            Some(record) => self.write_synthesized(&record),
            None if !self.specs.iter().any(|s| s.kernel) => Ok(()),
            None => {
                tracing::warn!("{}", explain::kernel_symbols_hidden());
                Ok(())
            }
        }
    }

    fn write_synthesized(&mut self, record: &Record) -> Result<()> {
        self.dsos.on_record(record);
        self.observer.on_record(record);
        self.writer().write_record(record)
    }

    /// Sleeps until a buffer passes its watermark, the target exits, a signal arrives, the observer's wake-up
    /// descriptor is readable (then returns true) or `timeout` passes.
    fn wait(&mut self, timeout: Duration, exit_watch: Option<&ExitWatch>) -> bool {
        let mut fds: Vec<libc::pollfd> = self
            .buffers
            .iter()
            .flatten()
            .filter(|b| !b.hung_up)
            .map(|b| libc::pollfd { fd: b.owner.as_raw_fd(), events: libc::POLLIN, revents: 0 })
            .collect();
        let owners = fds.len();
        if let Some(fd) = exit_watch.and_then(ExitWatch::fd) {
            fds.push(libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 });
        }
        if let Some(fd) = interrupt::stop_fd() {
            fds.push(libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 });
        }
        let wake = self.observer.wake_fd().map(|fd| fd.as_raw_fd());
        if let Some(fd) = wake {
            fds.push(libc::pollfd { fd, events: libc::POLLIN, revents: 0 });
        }
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: polling descriptors we own, through a correctly sized array.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        if n <= 0 {
            // Timeout, or EINTR from a signal: the loop checks the stop flag next.
            return false;
        }
        let hung: HashSet<i32> =
            fds[..owners].iter().filter(|p| p.revents & (libc::POLLHUP | libc::POLLERR) != 0).map(|p| p.fd).collect();
        for b in self.buffers.iter_mut().flatten() {
            if hung.contains(&b.owner.as_raw_fd()) {
                b.hung_up = true;
            }
        }
        wake.is_some() && fds.last().is_some_and(|p| p.revents != 0)
    }

    /// Lets the observer look at (and retarget) the open events.
    fn poll_observer(&mut self, last: bool) {
        let mut control = Control { buffers: &self.buffers, others: &self.others, attrs: &self.attrs };
        self.observer.on_poll(&mut control, last);
    }

    /// Copies every buffer's pending records into the perf.data. Returns the number of bytes read.
    ///
    /// All buffers are copied out before any record is written: a FORK saying a re-listed thread inherited an event
    /// is in the kernel's buffers before that thread's own events can have sampled it, so seeing all FORKs first
    /// lets `on_fork` drop every duplicate sample, whichever CPU's buffer holds what.
    fn drain(&mut self) -> Result<usize> {
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.resize_with(self.buffers.len(), Vec::new);
        let mut total = 0;
        for (buffer, bytes) in self.buffers.iter_mut().zip(scratch.iter_mut()) {
            bytes.clear();
            if let Some(buffer) = buffer {
                total += buffer.ring.read_into(bytes);
            }
        }
        if !self.rescanned.is_empty() || self.forked.is_some() {
            for bytes in &scratch {
                for record in ring::records(bytes) {
                    if u32::from_ne_bytes(record[..4].try_into().expect("8-byte header")) == RECORD_FORK {
                        if let Ok(Record::Fork(t)) = Record::decode(record, &self.formats[0]) {
                            self.on_fork(t.tid);
                        }
                    }
                }
            }
        }
        for (i, bytes) in scratch.iter().enumerate() {
            let Some(cpu) = self.buffers[i].as_ref().map(|b| b.cpu) else { continue };
            let mut consumed = 0;
            for record in ring::records(bytes) {
                consumed += record.len();
                self.consume(record, cpu)?;
            }
            if consumed != bytes.len() {
                tracing::warn!(
                    "CPU {cpu}: {} bytes at the end of the ring buffer do not form a record",
                    bytes.len() - consumed
                );
            }
        }
        self.scratch = scratch;
        Ok(total)
    }

    fn consume(&mut self, bytes: &[u8], cpu: u32) -> Result<()> {
        let kind = u32::from_ne_bytes(bytes[..4].try_into().expect("records are at least 8 bytes"));
        if kind == RECORD_SWITCH || kind == RECORD_SWITCH_CPU_WIDE {
            // Two per switch-out: nothing here needs them decoded.
            return self.writer().write_raw(bytes);
        }
        if kind == RECORD_SAMPLE {
            // SAMPLE_IDENTIFIER puts the id first in every sample.
            let id = bytes.get(8..16).map(|b| u64::from_ne_bytes(b.try_into().expect("8 bytes")));
            if id.is_some_and(|id| self.dropped_ids.contains(&id)) {
                return Ok(());
            }
            let e = match self.formats.len() {
                1 => 0,
                _ => id.and_then(|id| self.event_of_id.get(&id).copied()).unwrap_or(0),
            };
            self.samples[e] += 1;
            if let Ok(Record::Sample(mut sample)) = Record::decode(bytes, &self.formats[e]) {
                let ip = sample.ip;
                let splice = self.splices_caller(e);
                if splice {
                    probe::splice_caller(&mut sample);
                }
                if !self.observer.on_sample(e, &mut sample) {
                    return Ok(());
                }
                self.dsos.on_sample(&sample);
                if sample.user.is_some() || sample.ip != ip || splice {
                    // Re-encoded: the codec keeps the user callchain where perf does not read it (see
                    // SampleFormat::write_sample).
                    return self.writer().write_sample(&sample, e);
                }
            }
            return self.writer().write_raw(bytes);
        }
        match Record::decode(bytes, &self.formats[0]) {
            Ok(record) => {
                match &record {
                    Record::Lost(l) => self.lost_per_cpu[cpu as usize] += l.lost,
                    Record::LostSamples { lost, .. } => self.lost_per_cpu[cpu as usize] += lost,
                    _ => {}
                }
                self.dsos.on_record(&record);
                self.observer.on_record(&record);
            }
            Err(e) => tracing::debug!("undecodable record of type {kind}: {e:#}"),
        }
        self.writer().write_raw(bytes)
    }

    /// A FORK means the new thread inherited an event. If a re-listing got there first and opened events of its
    /// own for it, those would double its samples: close them and drop what they wrote.
    fn on_fork(&mut self, tid: u32) {
        if let Some(forked) = self.forked.as_mut() {
            forked.insert(tid);
        }
        if let Some(indices) = self.rescanned.remove(&tid) {
            for i in indices {
                let ev = &mut self.others[i];
                if ev.fd.take().is_some() {
                    self.dropped_ids.insert(ev.id);
                }
            }
            tracing::debug!("thread {tid} was found by re-listing and inherited an event too; kept the inherited one");
        }
    }

    fn disable_all(&self) {
        for b in self.buffers.iter().flatten() {
            events::disable(b.owner.as_fd());
        }
        for ev in &self.others {
            if let Some(fd) = &ev.fd {
                events::disable(fd.as_fd());
            }
        }
    }

    fn finish(
        mut self,
        opts: &RecordOptions,
        start_time: chrono::DateTime<chrono::Local>,
        elapsed: Duration,
        end_reason: EndReason,
        target_pid: Option<u32>,
        target_cmdline: Vec<String>,
    ) -> Result<RecordSummary> {
        let lost = self.lost();
        if lost > 0 {
            let per_cpu: Vec<String> = self
                .lost_per_cpu
                .iter()
                .enumerate()
                .filter(|(_, &n)| n > 0)
                .map(|(cpu, n)| format!("CPU {cpu}: {n}"))
                .collect();
            let copied_switches =
                self.specs.iter().any(|s| matches!(s.trigger, Trigger::SchedSwitch { .. }) && s.stack_copy_bytes > 0);
            let fix = match copied_switches {
                // Switch-outs come as fast as the target switches: the rate cannot be lowered, their size can.
                true => "switch-outs with stack copies came faster than they could be saved: record them with \
                         -call-graph fp, or use a larger -mmap-pages"
                    .to_string(),
                false => "use a larger -mmap-pages or a lower -freq".to_string(),
            };
            let n = format!(
                "lost {lost} records ({}): the ring buffers ({} pages per CPU) overflowed; {fix}",
                per_cpu.join(", "),
                self.data_pages
            );
            tracing::warn!("{n}");
            self.notices.push(n);
        }
        // The rings and events go before the (possibly slow) build-id reading.
        self.buffers.clear();
        self.others.clear();
        let kernel = self.specs.iter().any(|s| s.kernel);
        let features =
            header_features::features(&self.dsos.hit(), kernel && self.dsos.kernel_hit(), self.tracing.take());
        let writer = self.writer.take().expect("writer exists once events are open");
        writer.finish(&features)?;
        let bytes_written = opts.output.stat(&opts.perf_data).ok().flatten().map_or(0, |st| st.st_size.max(0) as u64);
        let switch_outs = self
            .specs
            .iter()
            .zip(&self.samples)
            .filter(|(spec, _)| matches!(spec.trigger, Trigger::SchedSwitch { .. }))
            .map(|(_, n)| n)
            .sum();
        let event_name = self.specs.iter().map(EventSpec::event_name).collect::<Vec<_>>().join(",");
        Ok(RecordSummary {
            mode: opts.mode,
            samples: self.samples.iter().sum(),
            switch_outs,
            lost,
            lost_per_cpu: self.lost_per_cpu,
            bytes_written,
            elapsed,
            event_name,
            frequency: opts.frequency,
            target_pid,
            target_cmdline,
            start_time,
            end_reason,
            notices: self.notices,
            kernel_frames: kernel,
        })
    }
}

/// The open events, as an observer may touch them (see [`EventControl`]).
struct Control<'a> {
    buffers: &'a [Option<CpuBuffer>],
    others: &'a [TaskEvent],
    attrs: &'a [perf_event_attr],
}

impl Control<'_> {
    /// Every open descriptor of event `event`.
    fn fds(&self, event: usize) -> impl Iterator<Item = BorrowedFd<'_>> {
        let owners = self.buffers.iter().flatten().filter(move |b| b.event == event).map(|b| b.owner.as_fd());
        let others =
            self.others.iter().filter(move |t| t.event == event).filter_map(|t| t.fd.as_ref().map(|f| f.as_fd()));
        owners.chain(others)
    }
}

impl EventControl for Control<'_> {
    fn retarget(&mut self, event: usize, point: ProbePoint) -> Result<()> {
        let attr = self.attrs.get(event).context("no such event")?;
        for fd in self.fds(event) {
            match probe::retarget(fd, attr, &point) {
                Ok(()) => {}
                // The task is gone: nothing to point.
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                Err(e) => return Err(probe::refused(&point, &e, &OpenTarget::Pid(0))),
            }
        }
        Ok(())
    }

    fn counts(&self) -> Vec<u64> {
        (0..self.attrs.len()).map(|e| self.fds(e).map(probe::read_count).sum()).collect()
    }
}
