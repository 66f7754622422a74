//! What `probe` does while the probes are in place: counts each hit as a call of its method (and tier), keeps
//! only real calls in perf.data, follows new JIT code of methods counted by breakpoints, shows calls per second on
//! a terminal, and saves what naming the callers needs (the [`Capture`]).

use super::pattern;
use super::plan::{is_entry_tier, JitCounting, Plan, Role, Version};
use crate::perf_data::{Record, Sample};
use crate::record::dotnet_stubs::Stubs;
use crate::record::probe::ProbePoint;
use crate::record::{EventControl, RecordObserver};
use crate::symbolize::code_index::JitFeed;
use crate::symbolize::Capture;
use std::collections::BTreeMap;
use std::os::fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

/// Calls counted so far.
#[derive(Debug, Clone, Default)]
pub struct Counts {
    /// Per method: calls by the entry address they went to (a version's, or other JIT code's).
    pub by_entry: Vec<BTreeMap<u64, u64>>,
}

impl Counts {
    /// Per method, all its calls.
    pub fn calls(&self) -> Vec<u64> {
        self.by_entry.iter().map(|entries| entries.values().sum()).collect()
    }
}

/// A new tier of a method seen while probing.
#[derive(Debug, Clone)]
pub struct Followed {
    pub method: usize,
    pub version: Version,
    /// Seconds since probing began.
    pub after: f64,
    /// For a method counted by breakpoints: the breakpoint event on it, or why there is none.
    pub breakpoint: Option<Result<usize, String>>,
}

pub struct ProbeObserver {
    pub plan: Plan,
    pub counts: Counts,
    pub followed: Vec<Followed>,
    /// Per event (index in the recording, 0 the side band): how often the kernel says it fired, read last.
    pub fired: Vec<u64>,
    /// Per probe event that only counts: its count when last taken in.
    read: Vec<u64>,
    pub capture: Option<Capture>,
    /// Where and how to start the capture once the target's PID is known (a launched command).
    pub capture_later: Option<(crate::fs::Dir, crate::symbolize::SymbolizeOptions)>,
    /// Keep calls' samples in perf.data (with -stacks).
    keep_samples: bool,
    /// Executable file-backed memory of the target: a precode watchpoint hit there is the runtime reading or
    /// rewriting the slot (or a call landing in a method's ReadyToRun body, which its uprobe counts).
    file_code: Vec<(u64, u64)>,
    stubs: Option<Stubs>,
    feed: Option<JitFeed>,
    /// New code (indexes into `followed`) waiting for a breakpoint.
    unplaced: Vec<usize>,
    inotify: Option<OwnedFd>,
    started: Option<Instant>,
    live: Option<LiveLine>,
    /// Said on stderr once every probe is in place.
    announcement: String,
}

impl ProbeObserver {
    /// `feed` reports new JIT code from where the plan's names were read; `stubs` are the target's .NET stubs
    /// (for the calls precode watchpoints see).
    pub fn new(
        plan: Plan,
        feed: Option<JitFeed>,
        stubs: Option<Stubs>,
        stacks: bool,
        capture: Option<Capture>,
        live: bool,
        announcement: String,
    ) -> ProbeObserver {
        let methods = plan.methods.len();
        let follows = plan.methods.iter().any(|m| m.jit == JitCounting::Breakpoints);
        // Woken as soon as the runtime reports new code, where breakpoints must follow it.
        let inotify = feed.as_ref().filter(|_| follows).and_then(watch_for_writes);
        ProbeObserver {
            counts: Counts { by_entry: vec![BTreeMap::new(); methods] },
            read: vec![0; plan.events.len()],
            followed: Vec::new(),
            fired: Vec::new(),
            capture,
            capture_later: None,
            keep_samples: stacks,
            file_code: Vec::new(),
            stubs,
            feed,
            unplaced: Vec::new(),
            inotify,
            started: None,
            live: live.then(LiveLine::new),
            announcement,
            plan,
        }
    }

    fn count(&mut self, method: usize, entry: u64) {
        *self.counts.by_entry[method].entry(entry).or_default() += 1;
    }

    /// Where a read of `method`'s precode target slot at `ip` went: the entry of the JIT code called (a
    /// call-counting stub resolved to the code behind it), or `None` when it is no call to count here — the
    /// runtime touching the slot, or a call into the method's ReadyToRun body (its uprobe counts that one).
    fn precode_call(&mut self, method: usize, ip: u64, time: u64) -> Option<u64> {
        let m = &self.plan.methods[method];
        let JitCounting::Precode(precode) = &m.jit else { return None };
        let has_file_code = m.versions.iter().any(|v| v.file.is_some());
        if ip == precode.fixup_thunk {
            // The method had no code (reset): the runtime's prestub picks it, a ReadyToRun body if there is one.
            return (!has_file_code).then_some(ip);
        }
        if self.file_code.iter().any(|&(s, e)| s <= ip && ip < e) || m.is_file_entry(ip) {
            return None;
        }
        if m.version_at(ip).is_some() {
            return Some(ip);
        }
        // A stub (call counting) or code too new to be known yet.
        let target = self.stubs.as_mut().and_then(|s| s.target(ip)).filter(|&t| t != 0);
        if target.is_some_and(|t| m.is_file_entry(t)) {
            return None;
        }
        let known = |m: &super::plan::Method, a: u64| m.version_at(a).is_some();
        if target.is_some_and(|t| known(m, t)) {
            return target;
        }
        self.take_new_code();
        let m = &self.plan.methods[method];
        match target {
            Some(t) if known(m, t) => Some(t),
            _ if known(m, ip) => Some(ip),
            // A stub that no longer says where it led (call counting is over and its stubs are reset). Before the
            // method had JIT code it led to its ReadyToRun body (whose uprobe counts the call); after, to the code
            // being counted then, the newest.
            _ => match (m.jit_since, m.newest_jit) {
                (Some(since), Some(newest)) if since <= time => Some(newest),
                _ if has_file_code => None,
                (_, newest) => Some(newest.unwrap_or(ip)),
            },
        }
    }

    /// Takes in the JIT code reported since the last look: new tiers of probed methods become their versions (the
    /// newest is where calls go now); those counted by breakpoints wait for one in `unplaced`.
    fn take_new_code(&mut self) {
        let Some(feed) = self.feed.as_mut() else { return };
        let after = self.started.map_or(0.0, |s| s.elapsed().as_secs_f64());
        for code in feed.read_new() {
            let (name, tier) = pattern::split_tier(&code.name);
            if !is_entry_tier(tier) {
                continue;
            }
            let Some(method) = self.plan.methods.iter().position(|m| m.name == name) else { continue };
            let m = &mut self.plan.methods[method];
            if m.version_at(code.start).is_some() {
                continue;
            }
            let version = Version { tier: tier.map(str::to_string), addr: code.start, size: code.size, file: None };
            m.versions.push(version.clone());
            m.newest_jit = Some(code.start);
            m.jit_since.get_or_insert_with(monotonic_now);
            let breakpoint = match m.jit {
                JitCounting::Breakpoints => {
                    self.unplaced.push(self.followed.len());
                    Some(Err("not placed yet".to_string()))
                }
                _ => None,
            };
            self.followed.push(Followed { method, version, after, breakpoint });
        }
    }

    /// Gives new code of methods counted by breakpoints a breakpoint.
    fn place_waiting(&mut self, control: &mut dyn EventControl) {
        for i in std::mem::take(&mut self.unplaced) {
            let (method, addr) = (self.followed[i].method, self.followed[i].version.addr);
            let placed = self.place_breakpoint(method, addr, control);
            if let Err(why) = &placed {
                let name = &self.plan.methods[method].name;
                tracing::warn!("new code of {name} at {addr:#x} is not probed: {why}");
            }
            self.followed[i].breakpoint = Some(placed);
        }
    }

    /// Takes in what the events that only count (no samples: `-no-stacks`) counted since the last look, as calls of
    /// the code each points at.
    fn take_counts(&mut self, control: &dyn EventControl) {
        let fired = control.counts();
        for (e, _) in self.plan.events.iter().enumerate().filter(|(_, ev)| !ev.sampled) {
            let now = fired.get(e + 1).copied().unwrap_or(0);
            let delta = now.saturating_sub(self.read[e]);
            self.read[e] = now;
            let entry = match self.plan.roles[e] {
                Role::Uprobe { method, version } => Some((method, self.plan.methods[method].versions[version].addr)),
                Role::Breakpoint { method: Some(method) } => self.plan.breakpoints[&e].map(|addr| (method, addr)),
                _ => None,
            };
            if let (Some((method, addr)), true) = (entry, delta > 0) {
                *self.counts.by_entry[method].entry(addr).or_default() += delta;
            }
        }
        self.fired = fired;
    }

    /// Points a spare breakpoint (else the method's own oldest one) at `addr`.
    fn place_breakpoint(&mut self, method: usize, addr: u64, control: &mut dyn EventControl) -> Result<usize, String> {
        // What a counting breakpoint counted so far belongs to the code it pointed at.
        self.take_counts(control);
        let roles = &self.plan.roles;
        let spare = self
            .plan
            .breakpoints
            .iter()
            .find(|(e, at)| at.is_none() && roles[**e] == Role::Breakpoint { method: None });
        let own = self.plan.breakpoints.keys().find(|e| roles[**e] == Role::Breakpoint { method: Some(method) });
        let Some(&event) = spare.map(|(e, _)| e).or(own) else {
            return Err(format!("no debug register is free (x86-64 has {})", crate::record::probe::DEBUG_REGISTERS));
        };
        // The recording's events: 0 is the side band.
        control.retarget(event + 1, ProbePoint::Execute { addr }).map_err(|e| format!("{e:#}"))?;
        self.plan.roles[event] = Role::Breakpoint { method: Some(method) };
        self.plan.breakpoints.insert(event, Some(addr));
        Ok(event)
    }
}

impl RecordObserver for ProbeObserver {
    fn on_start(&mut self, target_pid: Option<u32>) {
        self.started = Some(Instant::now());
        eprintln!("{}", self.announcement);
        if let (Some(pid), Some((dir, opts))) = (target_pid, self.capture_later.take()) {
            match Capture::new(&dir, &[pid], &opts) {
                Ok(c) => self.capture = Some(c),
                Err(e) => tracing::warn!("the callers' frames will not be named: {e:#}"),
            }
        }
        if let Some(pid) = target_pid {
            let maps = crate::procfs::Process::open(pid).and_then(|p| p.maps()).unwrap_or_default();
            self.file_code = maps
                .iter()
                .filter(|m| m.is_executable() && m.path.starts_with('/') && !m.path.starts_with("/memfd:"))
                .map(|m| (m.start, m.end))
                .collect();
        }
    }

    fn on_record(&mut self, record: &Record) {
        if let Some(c) = &mut self.capture {
            c.observe(record);
        }
    }

    fn on_tick(&mut self) {
        if let Some(c) = &mut self.capture {
            c.poll();
        }
        if let (Some(live), Some(started)) = (&mut self.live, self.started) {
            live.update(started.elapsed(), &self.plan, &self.counts.calls());
        }
    }

    fn on_sample(&mut self, event: usize, sample: &mut Sample) -> bool {
        let Some(&role) = event.checked_sub(1).and_then(|e| self.plan.roles.get(e)) else { return true };
        let (method, entry) = match role {
            Role::Uprobe { method, version } => (method, self.plan.methods[method].versions[version].addr),
            Role::Breakpoint { method: Some(method) } => (method, sample.ip),
            Role::Breakpoint { method: None } => return false,
            Role::Precode { method } => match self.precode_call(method, sample.ip, sample.time) {
                Some(entry) => {
                    // The call's sample names the code called, not the stub that led there.
                    if sample.ip != entry {
                        if let Some(leaf) = sample.callchain.iter_mut().find(|a| **a == sample.ip) {
                            *leaf = entry;
                        }
                        sample.ip = entry;
                    }
                    (method, entry)
                }
                None => return false,
            },
        };
        self.count(method, entry);
        self.keep_samples
    }

    fn wake_fd(&self) -> Option<BorrowedFd<'_>> {
        self.inotify.as_ref().map(|fd| fd.as_fd())
    }

    fn on_poll(&mut self, control: &mut dyn EventControl, last: bool) {
        if let Some(fd) = &self.inotify {
            drain_inotify(fd);
        }
        self.take_new_code();
        self.place_waiting(control);
        self.take_counts(control);
        if last {
            if let Some(live) = &mut self.live {
                live.finish();
            }
        }
    }
}

/// CLOCK_MONOTONIC in nanoseconds, the clock of sample times.
fn monotonic_now() -> u64 {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes into the struct it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

/// An inotify descriptor that becomes readable when the followed file is written; `None` when inotify is not
/// available (then new code is read on the regular tick).
fn watch_for_writes(feed: &JitFeed) -> Option<OwnedFd> {
    // SAFETY: inotify_init1 takes flags and returns a new descriptor or -1.
    let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    // SAFETY: a descriptor the kernel just gave us.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // The open file itself, through this process's descriptor table: no path of the target's is followed.
    let path =
        std::ffi::CString::new(format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&feed.as_fd()))).ok()?;
    // SAFETY: a valid NUL-terminated path and our inotify descriptor.
    let wd = unsafe { libc::inotify_add_watch(std::os::fd::AsRawFd::as_raw_fd(&fd), path.as_ptr(), libc::IN_MODIFY) };
    (wd >= 0).then_some(fd)
}

fn drain_inotify(fd: &OwnedFd) {
    let mut buf = [0u8; 4096];
    loop {
        // SAFETY: reading into a local buffer from a non-blocking descriptor we own.
        let n = unsafe { libc::read(std::os::fd::AsRawFd::as_raw_fd(fd), buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 {
            break;
        }
    }
}

/// The line on a terminal: elapsed time and, per method, calls and calls per second.
struct LiveLine {
    bar: indicatif::ProgressBar,
    last: Option<(Duration, Vec<u64>)>,
}

impl LiveLine {
    fn new() -> LiveLine {
        let bar = indicatif::ProgressBar::with_draw_target(None, indicatif::ProgressDrawTarget::stderr_with_hz(4));
        bar.set_style(
            indicatif::ProgressStyle::with_template("{spinner} {msg}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
        );
        LiveLine { bar, last: None }
    }

    fn update(&mut self, elapsed: Duration, plan: &Plan, calls: &[u64]) {
        let rates: Vec<f64> = match &self.last {
            Some((at, before)) if elapsed > *at => {
                let secs = (elapsed - *at).as_secs_f64();
                calls.iter().zip(before).map(|(now, then)| now.saturating_sub(*then) as f64 / secs).collect()
            }
            _ => vec![0.0; calls.len()],
        };
        let parts: Vec<String> = plan
            .methods
            .iter()
            .zip(calls)
            .zip(&rates)
            .map(|((m, calls), rate)| format!("{} {calls} calls ({rate:.0}/s)", pattern::Name::of(&m.name).qualified))
            .collect();
        let line = format!("probing {:.1} s  {}", elapsed.as_secs_f64(), parts.join("  "));
        self.bar.set_message(crate::escape::line(&line).into_owned());
        self.bar.tick();
        self.last = Some((elapsed, calls.to_vec()));
    }

    fn finish(&mut self) {
        self.bar.finish_and_clear();
    }
}
