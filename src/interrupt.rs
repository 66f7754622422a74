//! SIGINT and SIGTERM for a whole run, from the first line of `main` to the exit. What a signal does depends on the
//! [`Stage`] the run is in, so that an interrupted run leaves either complete outputs or nothing half-made:
//!
//! - [`Stage::Starting`] (before sampling): the first signal cancels the run — set-up stops at [`begin_sampling`]
//!   and nothing is kept; a second aborts at once, removing what set-up made.
//! - [`Stage::Sampling`]: the first ends sampling and everything is still written; a second waits until perf.data
//!   and `symbols/` are complete, then aborts.
//! - [`Stage::Saving`] (perf.data and `symbols/` being completed; in collect, the pass that names the samples): the
//!   first lets the outputs be finished; a second aborts once they are complete.
//! - [`Stage::Writing`] (the outputs): the first lets them be finished; a second aborts at once — the staging folder
//!   goes and one line says what is left.
//! - [`Stage::Done`]: only the summary is left to print; signals are ignored.
//!
//! The signal handler only notes the first signal and writes the signal's number as one byte to a pipe
//! (async-signal-safe); a thread named `signals` reads the pipe and acts in plain Rust, one byte at a time. (Each
//! byte names its own signal: two signals that wait while profcpu's threads are busy in the kernel run their
//! handlers nested, the later one first.) An abort removes the folders registered with [`remove_on_abort`] while
//! holding the state lock, so no such folder can be created between the removal and the exit.
//!
//! Without [`install`] (library use, tests that call the stages directly) nothing is caught and every stage change
//! is only bookkeeping.

use signal_hook::consts::{SIGINT, SIGTERM};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

/// Where the run is; see the module documentation for what a signal does in each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stage {
    Starting,
    Sampling,
    Saving,
    /// `left` completes "interrupted by SIGINT: " in the abort line: what was not finished, what the folder holds
    /// now and how to make the rest.
    Writing {
        left: String,
    },
    Done,
}

/// The run was cancelled by a signal before anything worth keeping was made. Its text is the one line to show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interrupted {
    pub signal: i32,
    /// Completes "interrupted by SIGINT ": when, and that nothing was made.
    pub outcome: String,
}

impl Interrupted {
    /// A signal during set-up, before sampling began.
    pub fn before_sampling(signal: i32) -> Self {
        Interrupted { signal, outcome: "before sampling began: nothing was written".into() }
    }

    /// The exit status a shell reports for a process killed by the signal (130 for SIGINT, 143 for SIGTERM).
    pub fn exit_code(&self) -> u8 {
        exit_code(self.signal)
    }
}

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "interrupted by {} {}", signal_name(self.signal), self.outcome)
    }
}

impl std::error::Error for Interrupted {}

struct State {
    stage: Stage,
    /// Signals the watcher has acted on.
    handled: u32,
    /// A second signal that came while perf.data or `symbols/` were being completed: acted on when they are.
    abort_pending: Option<i32>,
    /// Folders an abort removes (whole), registered by the stage that made them.
    remove_on_abort: Vec<PathBuf>,
    /// Folders an abort removes until the outputs are published, whatever the stage (a staging folder).
    remove_until_published: Vec<PathBuf>,
}

static STATE: Mutex<State> = Mutex::new(State {
    stage: Stage::Starting,
    handled: 0,
    abort_pending: None,
    remove_on_abort: Vec::new(),
    remove_until_published: Vec::new(),
});

/// Written by the signal handler (so only an atomic): the first signal.
static FIRST: AtomicI32 = AtomicI32::new(0);
/// Read by the signal handler: sampling is over (the stage is Saving or later). The stage a signal came in can
/// differ from the one the watcher finds (sampling stops as soon as the handler has run).
static SAMPLING_OVER: AtomicBool = AtomicBool::new(false);
/// Marks a byte of the pipe: the signal came after sampling.
const AFTER_SAMPLING: u8 = 0x80;

struct Pipes {
    /// The handler writes a byte per signal; the watcher thread reads them.
    signal_write: OwnedFd,
    /// Becomes readable with the first signal and stays so: a poll loop adds it to wake at once.
    stop_read: OwnedFd,
    stop_write: OwnedFd,
}

static PIPES: OnceLock<Pipes> = OnceLock::new();

fn lock() -> MutexGuard<'static, State> {
    // A panic while holding the lock leaves consistent data (every update is a single assignment).
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Catches SIGINT and SIGTERM from now on (call it first thing in `main`). Also unblocks them: a parent that
/// started profcpu with them blocked would otherwise leave no way to stop a recording early.
pub fn install() -> std::io::Result<()> {
    if PIPES.get().is_some() {
        return Ok(());
    }
    let (signal_read, signal_write) = pipe()?;
    // A handler must never block: with the pipe full (thousands of signals unread) a byte more is not needed.
    nix::fcntl::fcntl(&signal_write, nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK))
        .map_err(std::io::Error::from)?;
    let (stop_read, stop_write) = pipe()?;
    let pipes = PIPES.get_or_init(|| Pipes { signal_write, stop_read, stop_write });
    let signal_fd = pipes.signal_write.as_raw_fd();
    for sig in [SIGINT, SIGTERM] {
        // SAFETY: the action touches only atomics and write(2), which are async-signal-safe.
        unsafe {
            signal_hook::low_level::register(sig, move || {
                let _ = FIRST.compare_exchange(0, sig, Ordering::SeqCst, Ordering::SeqCst);
                let after = if SAMPLING_OVER.load(Ordering::SeqCst) { AFTER_SAMPLING } else { 0 };
                let byte = sig as u8 | after;
                libc::write(signal_fd, (&byte as *const u8).cast(), 1);
            })
        }?;
    }
    std::thread::Builder::new().name("signals".into()).spawn(move || watch(signal_read))?;
    // SAFETY: a sigset built with sigemptyset/sigaddset, applied to this (the main) thread.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, SIGINT);
        libc::sigaddset(&mut set, SIGTERM);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
    }
    Ok(())
}

fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(std::io::Error::from)
}

/// The watcher thread: one pass per byte the handler wrote.
fn watch(signal_read: OwnedFd) {
    let mut byte = [0u8; 1];
    loop {
        match nix::unistd::read(&signal_read, &mut byte) {
            Ok(0) => return,
            Ok(_) => on_signal((byte[0] & !AFTER_SAMPLING).into(), byte[0] & AFTER_SAMPLING != 0),
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return,
        }
    }
}

/// Acts on one signal; `after_sampling`: it came once sampling was over.
fn on_signal(sig: i32, after_sampling: bool) {
    let mut state = lock();
    state.handled += 1;
    let first = state.handled == 1;
    if first {
        if let Some(p) = PIPES.get() {
            // SAFETY: writing one byte from a static to a pipe we own.
            unsafe { libc::write(p.stop_write.as_raw_fd(), b"s".as_ptr().cast(), 1) };
        }
    }
    let name = signal_name(sig);
    match state.stage.clone() {
        // Set-up notices it at begin_sampling and says so on the way out.
        Stage::Starting if first => {}
        Stage::Starting => {
            let line = format!("profcpu: {}", Interrupted::before_sampling(sig));
            abort(state, sig, &line)
        }
        Stage::Sampling if first => {}
        // It stopped sampling, which the summary line will say.
        Stage::Saving | Stage::Writing { .. } if first && !after_sampling => {}
        Stage::Sampling | Stage::Saving if !first && state.abort_pending.is_none() => {
            state.abort_pending = Some(sig);
            eprintln!("profcpu: {name} again: stopping as soon as perf.data and symbols/ are complete");
        }
        Stage::Saving if first => eprintln!(
            "profcpu: {name}: finishing the outputs (another signal stops once perf.data and symbols/ are complete)"
        ),
        Stage::Writing { .. } if first => {
            eprintln!("profcpu: {name}: finishing the outputs (another signal stops at once)")
        }
        Stage::Writing { left } => {
            let line = format!("profcpu: interrupted by {name}: {left}");
            abort(state, sig, &line)
        }
        _ => {}
    }
}

/// Removes what the stage registered, says `line` and ends the process with the signal's exit status. The lock is
/// held until the exit, so nothing registered can be made again in between.
fn abort(state: MutexGuard<'static, State>, sig: i32, line: &str) -> ! {
    for dir in state.remove_on_abort.iter().chain(&state.remove_until_published) {
        remove_tree(dir);
    }
    eprintln!("{}", crate::escape::line(line));
    // SAFETY: _exit ends the process at once; other threads may be writing into folders just removed, which is
    // why exit handlers and destructors must not run.
    unsafe { libc::_exit(exit_code(sig).into()) }
}

/// Removes a folder and everything in it (never following a symlink), retrying while another thread of this
/// process is still creating files in it.
fn remove_tree(dir: &Path) {
    for _ in 0..50 {
        match std::fs::remove_dir_all(dir) {
            Ok(()) => return,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
            Err(_) => std::thread::sleep(Duration::from_millis(2)),
        }
    }
}

fn exit_code(sig: i32) -> u8 {
    (128 + sig).clamp(0, 255) as u8
}

pub fn signal_name(sig: i32) -> &'static str {
    match sig {
        SIGINT => "SIGINT",
        SIGTERM => "SIGTERM",
        _ => "a signal",
    }
}

/// The first signal received, if any.
pub fn received() -> Option<i32> {
    match FIRST.load(Ordering::SeqCst) {
        0 => None,
        sig => Some(sig),
    }
}

/// A descriptor that becomes readable with the first signal (for a poll loop that should wake at once); `None`
/// when signals are not caught.
pub fn stop_fd() -> Option<BorrowedFd<'static>> {
    PIPES.get().map(|p| p.stop_read.as_fd())
}

/// Set-up is over and sampling runs from now on; fails when a signal came during set-up (the run is cancelled).
pub fn begin_sampling() -> Result<(), Interrupted> {
    let mut state = lock();
    if let Some(signal) = received() {
        return Err(Interrupted::before_sampling(signal));
    }
    state.stage = Stage::Sampling;
    SAMPLING_OVER.store(false, Ordering::SeqCst);
    state.remove_on_abort.clear();
    Ok(())
}

/// Moves the run to `stage`. What earlier stages registered for removal is forgotten (it is complete now). A
/// second signal that waited for perf.data and `symbols/` to be complete aborts here, when `stage` is
/// [`Stage::Writing`], removing what was registered meanwhile (collect's staging folder, made before the pass that
/// completes `symbols/`).
pub fn set_stage(stage: Stage) {
    let mut state = lock();
    if let (Stage::Writing { left }, Some(sig)) = (&stage, state.abort_pending) {
        let line = format!("profcpu: interrupted by {}: {left}", signal_name(sig));
        abort(state, sig, &line)
    }
    state.remove_on_abort.clear();
    SAMPLING_OVER.store(!matches!(stage, Stage::Starting | Stage::Sampling), Ordering::SeqCst);
    state.stage = stage;
}

/// Runs `make` (which creates the folder `dir`) so that, when it succeeds, an abort of the current stage removes
/// `dir` whole: an abort either comes before `make` runs or removes what it made.
pub fn remove_on_abort<T, E>(dir: &Path, make: impl FnOnce() -> Result<T, E>) -> Result<T, E> {
    let mut state = lock();
    let made = make()?;
    state.remove_on_abort.push(dir.to_owned());
    Ok(made)
}

/// Like [`remove_on_abort`], but `dir` stays registered through later stages until [`publish`]: a staging folder
/// made while sampling still runs (collect makes its outputs while it records) holds nothing complete until then.
pub fn remove_until_published<T, E>(dir: &Path, make: impl FnOnce() -> Result<T, E>) -> Result<T, E> {
    let mut state = lock();
    let made = make()?;
    state.remove_until_published.push(dir.to_owned());
    Ok(made)
}

/// Runs `publish` (which moves finished outputs into place) with no abort in between, and marks the run
/// [`Stage::Done`] when it succeeds: an abort comes before the first output is replaced or not at all.
pub fn publish<T, E>(publish: impl FnOnce() -> Result<T, E>) -> Result<T, E> {
    let mut state = lock();
    let published = publish()?;
    state.stage = Stage::Done;
    state.remove_on_abort.clear();
    state.remove_until_published.clear();
    Ok(published)
}

/// Whether a second signal asked the run to end as soon as perf.data and `symbols/` are complete: long work that
/// only adds to them (downloads) stops early.
pub fn abort_pending() -> bool {
    lock().abort_pending.is_some()
}

/// The current stage.
pub fn stage() -> Stage {
    lock().stage.clone()
}
