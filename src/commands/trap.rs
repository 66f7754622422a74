//! `profcpu trap`: watch a process's CPU use — or its cgroup's, the whole container — and, once it has been above
//! (or below) a threshold for a while, run a collection exactly as `profcpu collect -pid` does; then cool down and
//! watch again, until `-count` collections are made, `-timeout` passes, a signal comes or the target exits.
//!
//! The CPU counter (`procfs`: the process's utime + stime, or its cgroup's `cpu.stat`/`cpuacct.usage`) is read every
//! 0.25 s; [`condition`] judges the readings, [`status`] shows them. Everything that could stop a collection later
//! (no such process, an unusable output folder, the kernel refusing to sample the target, an unreadable cgroup) is
//! checked before watching starts.
//!
//! Signals: while watching, the first SIGINT or SIGTERM ends the trap at once (the wait polls the signal pipe).
//! A collection runs through the stages of [`crate::interrupt`] as `collect` does — a signal while it samples still
//! leaves complete outputs — and the trap ends after it.

mod condition;
mod status;

use self::condition::{seconds, Condition, Detector, Reading, Relation, Step};
use self::status::{State, Status};
use super::collect;
use crate::cli::{CollectOptions, Scope, TrapArgs};
use crate::interrupt::{self, Interrupted};
use crate::procfs::{self, cgroup::CpuUsage, Process};
use crate::record::target::ExitWatch;
use crate::record::Target;
use crate::report::metadata_txt::Trigger;
use anyhow::{bail, Context, Result};
use std::io::{IsTerminal, Write};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How often the CPU counter is read (`top` refreshes every few seconds; a trap wants to start promptly).
const TICK: Duration = Duration::from_millis(250);

pub fn run(args: TrapArgs) -> Result<()> {
    let condition = condition_of(&args)?;
    let (pid, target) = (args.pid, Target::Pid(args.pid));
    crate::record::check_target(&target)?;
    let process = Process::open(pid).with_context(|| format!("PID {pid} is gone: /proc/{pid} cannot be opened"))?;
    let comm = process.comm(None).unwrap_or_default();
    let meter = match args.scope {
        Scope::Process => Meter::Process(process),
        Scope::Cgroup => Meter::Cgroup(CpuUsage::open(&process)?),
    };
    // The output folder and the kernel's permission, now rather than when the moment comes.
    collect::check(&target, &args.options)?;
    if let Meter::Cgroup(usage) = &meter {
        if usage.cgroup() == "/" {
            tracing::warn!("PID {pid} is in the root cgroup: -scope cgroup measures the whole machine's CPU use");
        }
    }
    let watch = Watch {
        pid,
        condition,
        options: args.options,
        scope: args.scope,
        count: args.count,
        cooldown: Duration::from_secs_f64(args.cooldown),
        timeout: args.timeout.map(Duration::from_secs_f64),
        started: Instant::now(),
        status: Status::new(std::io::stderr().is_terminal(), condition, pid, args.count),
        meter,
        exit: ExitWatch::new(pid),
        collected: 0,
        seen: Seen::default(),
    };
    watch.announce(&comm);
    watch.run(&comm)
}

/// The condition the flags give, refused when this machine can never meet it (one line saying why).
fn condition_of(args: &TrapArgs) -> Result<Condition> {
    let (relation, threshold) = match (args.cpu_above, args.cpu_below) {
        (Some(t), None) => (Relation::Above, t),
        (None, Some(t)) => (Relation::Below, t),
        _ => bail!("give exactly one of -cpu-above and -cpu-below"),
    };
    let cpus = procfs::online_cpus()?.len();
    let most = 100.0 * cpus as f64;
    let limits = format!("with {cpus} CPUs, CPU use is 0 to {most}% (percent of one CPU, as top counts it)");
    match relation {
        Relation::Above if threshold >= most => {
            bail!("-cpu-above {threshold} can never hold: {limits}; give a threshold below {most}")
        }
        Relation::Below if threshold <= 0.0 => {
            bail!("-cpu-below {threshold} can never hold: {limits}; give a threshold above 0")
        }
        Relation::Below if threshold > most => {
            bail!("-cpu-below {threshold} always holds: {limits}; give a threshold up to {most}")
        }
        _ => {}
    }
    Ok(Condition { relation, threshold, hold: Duration::from_secs_f64(args.hold) })
}

/// Where the CPU time comes from.
enum Meter {
    Process(Process),
    Cgroup(CpuUsage),
}

impl Meter {
    fn read(&self) -> std::io::Result<Reading> {
        let cpu = match self {
            Meter::Process(p) => p.cpu_time()?,
            Meter::Cgroup(c) => c.read()?,
        };
        Ok(Reading { at: Instant::now(), cpu })
    }

    /// The file read, for metadata.txt.
    fn source(&self) -> PathBuf {
        match self {
            Meter::Process(p) => PathBuf::from(format!("/proc/{}/stat", p.pid())),
            Meter::Cgroup(c) => c.file().to_path_buf(),
        }
    }

    /// Whose CPU use, for the first line.
    fn describe(&self) -> String {
        match self {
            Meter::Process(p) => format!("its CPU use (the process and all its threads, /proc/{}/stat)", p.pid()),
            Meter::Cgroup(c) => format!("the CPU use of its cgroup {} ({})", c.cgroup(), c.file().display()),
        }
    }
}

/// Why watching ended.
enum End {
    CountReached,
    Signal(i32),
    TargetExited,
    Timeout,
}

/// What the CPU use did while armed, to say why nothing fired.
#[derive(Default)]
struct Seen {
    range: Option<(f64, f64)>,
    longest: Duration,
}

impl Seen {
    fn note(&mut self, cpu: f64) {
        let (low, high) = self.range.get_or_insert((cpu, cpu));
        *low = low.min(cpu);
        *high = high.max(cpu);
    }

    /// `CPU was 2–41%; it was above 50% for at most 1.5 s of the 3 s needed`.
    fn describe(&self, condition: &Condition) -> String {
        let Some((low, high)) = self.range else { return "no CPU reading was made".into() };
        let range = format!("CPU was {low:.0}–{high:.0}%");
        if self.longest.is_zero() {
            format!("{range}, never {}", condition.threshold_text())
        } else {
            format!(
                "{range}; it was {} for at most {:.1} s of the {} needed",
                condition.threshold_text(),
                self.longest.as_secs_f64(),
                seconds(condition.hold)
            )
        }
    }
}

struct Watch {
    pid: u32,
    condition: Condition,
    options: CollectOptions,
    scope: Scope,
    count: u32,
    cooldown: Duration,
    timeout: Option<Duration>,
    started: Instant,
    status: Status,
    meter: Meter,
    exit: ExitWatch,
    collected: u32,
    seen: Seen,
}

impl Watch {
    /// The first line: what is watched, for what, and what happens then.
    fn announce(&self, comm: &str) {
        let mut plan = vec![match self.count {
            1 => "1 collection".to_string(),
            n => format!("up to {n} collections, {} apart at least", seconds(self.cooldown)),
        }];
        plan.push(match self.timeout {
            Some(t) => format!("for at most {}", seconds(t)),
            None => "no timeout".into(),
        });
        let line = format!(
            "watching PID {} ({comm}): a {} collection starts when {} is {}; {}",
            self.pid,
            seconds(Duration::from_secs_f64(self.options.duration)),
            self.meter.describe(),
            self.condition.describe(),
            plan.join(", ")
        );
        // The target names itself (its comm): a terminal must not obey what it says.
        self.status.say(&crate::escape::line(&line));
    }

    fn run(mut self, comm: &str) -> Result<()> {
        let Ok(first) = self.meter.read() else { return self.finish(End::TargetExited, comm) };
        let mut detector = Detector::new(self.condition, first);
        let mut last_at = first.at;
        let mut cooling_until: Option<Instant> = None;
        let end = loop {
            self.sleep_until(last_at + TICK);
            if let Some(signal) = interrupt::received() {
                break End::Signal(signal);
            }
            if self.exit.has_exited() {
                break End::TargetExited;
            }
            if self.timeout.is_some_and(|t| self.started.elapsed() >= t) {
                break End::Timeout;
            }
            let now = match self.meter.read() {
                Ok(reading) => reading,
                Err(_) if self.exit.has_exited() || !procfs::exists(self.pid) => break End::TargetExited,
                Err(e) => {
                    return Err(anyhow::Error::new(e).context(format!(
                        "cannot read the CPU use of PID {} from {}",
                        self.pid,
                        self.meter.source().display()
                    )))
                }
            };
            last_at = now.at;
            if let Some(until) = cooling_until {
                let cpu = detector.measure(now);
                if now.at < until {
                    self.status.update(cpu, State::CoolingDown(until - now.at), self.collected);
                } else {
                    cooling_until = None;
                    detector.arm(now);
                    self.status.update(cpu, State::Armed, self.collected);
                }
                continue;
            }
            let (cpu, step) = detector.step(now);
            self.seen.note(cpu);
            match step {
                Step::Armed => self.status.update(cpu, State::Armed, self.collected),
                Step::Holding(held) => {
                    self.seen.longest = self.seen.longest.max(held);
                    self.status.update(cpu, State::Holding(held), self.collected);
                }
                Step::Fired { average, held } => {
                    if let Some(end) = self.collect(average, held)? {
                        break end;
                    }
                    if self.collected == self.count {
                        break End::CountReached;
                    }
                    cooling_until = Some(Instant::now() + self.cooldown);
                    // The collection took a while: the readings start over.
                    match self.meter.read() {
                        Ok(reading) => {
                            detector.restart(reading);
                            last_at = reading.at;
                        }
                        Err(_) => break End::TargetExited,
                    }
                }
            }
        };
        self.finish(end, comm)
    }

    /// One collection, as `collect` makes it, its folder printed on stdout. `Some` when the trap must end (a signal
    /// or the target's exit stopped it before it sampled).
    fn collect(&mut self, average: f64, held: Duration) -> Result<Option<End>> {
        let number = self.collected + 1;
        self.status.say(&format!(
            "CPU {} for {:.1} s (average {average:.0}%): collecting, {number} of {}",
            self.condition.threshold_text(),
            held.as_secs_f64(),
            self.count
        ));
        let trigger = Trigger {
            condition: self.condition.flag().to_string(),
            threshold_pct: self.condition.threshold,
            for_secs: self.condition.hold.as_secs_f64(),
            scope: self.scope.name().to_string(),
            source: self.meter.source().display().to_string(),
            cpu_pct: average,
            time: chrono::Local::now().fixed_offset(),
            collection: number,
            count: self.count,
        };
        self.status.pause();
        // Each collection is a run of its own: a signal during its set-up cancels it, one while it samples still
        // leaves every output (the stage after the last collection is Done).
        interrupt::set_stage(interrupt::Stage::Starting);
        let result = collect::collect(Target::Pid(self.pid), &self.options, Some(trigger));
        self.status.resume();
        match result {
            Ok(dir) => {
                let mut stdout = std::io::stdout().lock();
                let _ = writeln!(stdout, "{}", dir.display()).and_then(|()| stdout.flush());
                self.collected = number;
                Ok(None)
            }
            Err(e) => {
                if let Some(interrupted) = e.downcast_ref::<Interrupted>() {
                    return Ok(Some(End::Signal(interrupted.signal)));
                }
                if self.exit.has_exited() {
                    tracing::debug!("the collection ended with: {e:#}");
                    return Ok(Some(End::TargetExited));
                }
                Err(e.context(format!("collection {number} of {} failed", self.count)))
            }
        }
    }

    /// Sleeps until `at`, or less when a signal comes or the target exits.
    fn sleep_until(&self, at: Instant) {
        let mut fds: Vec<libc::pollfd> = [interrupt::stop_fd(), self.exit.fd()]
            .into_iter()
            .flatten()
            .map(|fd| libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 })
            .collect();
        let ms = at.saturating_duration_since(Instant::now()).as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: polling descriptors that live as long as `self`, through a correctly sized array. A timeout or
        // EINTR both mean: look again.
        unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
    }

    /// The last line, and the exit: success when something was collected.
    fn finish(self, end: End, comm: &str) -> Result<()> {
        let (pid, made, count) = (self.pid, self.collected, self.count);
        let why = match &end {
            End::CountReached => {
                format!("done: {made} of {count} collection{} made", if count == 1 { "" } else { "s" })
            }
            End::Signal(signal) => format!("stopped by {}", interrupt::signal_name(*signal)),
            End::TargetExited => format!("PID {pid} ({comm}) exited"),
            End::Timeout => format!("-timeout {} passed", seconds(self.timeout.unwrap_or_default())),
        };
        if made > 0 {
            let line = match end {
                End::CountReached => why,
                _ => format!("{why}; {made} of {count} collections made"),
            };
            self.status.say(&crate::escape::line(&line));
            return Ok(());
        }
        let seen = self.seen.describe(&self.condition);
        drop(self.status);
        match end {
            End::Signal(signal) => Err(Interrupted {
                signal,
                outcome: format!("while watching PID {pid}: nothing was collected ({seen})"),
            }
            .into()),
            _ => bail!("{why} while watching: nothing was collected ({seen})"),
        }
    }
}
