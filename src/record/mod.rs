//! The sampling engine: `perf_event_open` per CPU (and per thread of the target), one mmap ring buffer per CPU,
//! records streamed into a perf.data as they arrive.

mod buildid;
mod call_graph;
pub mod dotnet_ipc;
pub mod dotnet_stubs;
mod dsos;
mod engine;
mod environment;
mod events;
mod explain;
mod header_features;
pub mod jit_names;
pub mod probe;
mod progress;
pub mod ring;
pub mod synthesize;
pub mod target;
mod tracepoint;
pub mod uprobe_events;

pub use call_graph::CallGraph;
pub use engine::{check_access, check_target, record};
pub use events::SAMPLE_TYPE;
pub use progress::status_line;

use crate::fs::Dir;
use crate::perf_data::{EventDesc, Record, Sample, WriteProgress};
use std::os::fd::BorrowedFd;
use std::sync::Arc;
use std::time::Duration;

/// What to profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A running process (host PID) and all its threads, including ones it starts later.
    Pid(u32),
    /// Every process on the machine.
    All,
    /// Launch this command and profile it until it exits.
    Command(Vec<String>),
}

/// What drives sampling. The one list of events profcpu knows: the command line offers [`EventKind::ALL`] by
/// [`name`](EventKind::name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    CpuClock,
    TaskClock,
    /// Hardware cycles; falls back to cpu-clock with a notice where there is no PMU.
    Cycles,
}

impl EventKind {
    pub const ALL: [EventKind; 3] = [EventKind::CpuClock, EventKind::TaskClock, EventKind::Cycles];

    /// The event's name as perf spells it.
    pub fn name(self) -> &'static str {
        match self {
            EventKind::CpuClock => "cpu-clock",
            EventKind::TaskClock => "task-clock",
            EventKind::Cycles => "cycles",
        }
    }

    pub fn from_name(name: &str) -> Option<EventKind> {
        EventKind::ALL.into_iter().find(|e| e.name() == name)
    }
}

/// What a recording measures (`-mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Where threads run: samples of the sampling event on the CPU.
    #[default]
    Cpu,
    /// Where threads wait: the stack of every switch-out of a target thread (`sched:sched_switch`) and when it ran
    /// again (context-switch records).
    Offcpu,
    /// Both, so each thread's time is whole: on-CPU samples and off-CPU intervals.
    Wall,
}

impl Mode {
    pub const ALL: [Mode; 3] = [Mode::Cpu, Mode::Offcpu, Mode::Wall];

    pub fn name(self) -> &'static str {
        match self {
            Mode::Cpu => "cpu",
            Mode::Offcpu => "offcpu",
            Mode::Wall => "wall",
        }
    }

    pub fn from_name(name: &str) -> Option<Mode> {
        Mode::ALL.into_iter().find(|m| m.name() == name)
    }

    /// Records the sampling event (on-CPU samples).
    pub fn samples_on_cpu(self) -> bool {
        self != Mode::Offcpu
    }

    /// Records switch-outs and switch-ins.
    pub fn records_switches(self) -> bool {
        self != Mode::Cpu
    }
}

#[derive(Debug, Clone)]
pub struct RecordOptions {
    pub target: Target,
    pub mode: Mode,
    /// Variables added to a launched command's environment (`Target::Command`).
    pub command_env: Vec<(String, String)>,
    /// How long to sample; `None` for a launched command means "until it exits".
    pub duration: Option<Duration>,
    pub frequency: u64,
    pub event: EventKind,
    /// Ring-buffer data pages per CPU (a power of two); `None` picks a size that fits `perf_event_mlock_kb`.
    pub mmap_pages: Option<usize>,
    /// How stacks are recorded.
    pub call_graph: CallGraph,
    /// The folder to write perf.data into, and its name there (it must not exist).
    pub output: Dir,
    pub perf_data: String,
    /// Show the live progress line (on a TTY).
    pub progress: bool,
    /// Count probe hits instead of sampling (`mode`, `event` and `frequency` are then unused): a side-band event
    /// and these probes, on every task of the target.
    pub probes: Option<probe::ProbeRequest>,
}

/// Why collection stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndReason {
    DurationElapsed,
    Signal(String),
    TargetExited,
}

#[derive(Debug, Clone)]
pub struct RecordSummary {
    pub mode: Mode,
    /// Sample records of every event (switch-outs included).
    pub samples: u64,
    /// Of those, switch-outs (`sched:sched_switch` samples).
    pub switch_outs: u64,
    pub lost: u64,
    pub lost_per_cpu: Vec<u64>,
    pub bytes_written: u64,
    pub elapsed: Duration,
    /// The event actually used (after any fallback), as perf names it.
    pub event_name: String,
    pub frequency: u64,
    /// Host PID of the target process (the launched command's PID for `Target::Command`).
    pub target_pid: Option<u32>,
    pub target_cmdline: Vec<String>,
    pub start_time: chrono::DateTime<chrono::Local>,
    pub end_reason: EndReason,
    /// What profcpu changed or could not do, one line each (also logged as warnings): event fallbacks, hidden kernel
    /// frames, smaller ring buffers, lost records.
    pub notices: Vec<String>,
    /// Whether kernel-mode samples and kernel frames were recorded (false after the paranoid fallback).
    pub kernel_frames: bool,
}

/// Sees the non-sample records (MMAP2, COMM, FORK, EXIT) as they are read, and gets a periodic tick; the collect
/// command uses this to copy a JIT's perf map / jitdump while the target is still alive.
pub trait RecordObserver {
    /// Sampling has begun (every event is open): the target is known to be profiled from here on. `target_pid` is
    /// the process sampled (the launched command's PID for `Target::Command`), `None` for `Target::All`.
    fn on_start(&mut self, _target_pid: Option<u32>) {}
    /// perf.data is being written (just before [`on_start`](Self::on_start)): its records start at file offset
    /// `data_offset` and are appended as they are read, of `events`; `progress` tells how far they are in the file.
    fn on_perf_data(&mut self, _data_offset: u64, _events: &[EventDesc], _progress: &Arc<WriteProgress>) {}
    fn on_record(&mut self, _record: &Record) {}
    fn on_tick(&mut self) {}
    /// A sample of event `event` (its index in the recording: with probes, 0 is the side band and probe `i` is
    /// `i + 1`). Returns whether it goes into perf.data; it may be changed first.
    fn on_sample(&mut self, _event: usize, _sample: &mut Sample) -> bool {
        true
    }
    /// A descriptor whose readability wakes the recording loop for [`on_poll`](Self::on_poll) (e.g. an inotify
    /// watch on a JIT's perf map).
    fn wake_fd(&self) -> Option<BorrowedFd<'_>> {
        None
    }
    /// Called on every tick, whenever [`wake_fd`](Self::wake_fd) is readable, and once more after the last records
    /// were read (`last`), with access to the open events.
    fn on_poll(&mut self, _control: &mut dyn EventControl, _last: bool) {}
}

/// What an observer may do with the open events of a recording.
pub trait EventControl {
    /// Points breakpoint event `event` — on every task and CPU, and in the threads that inherited it — at `point`,
    /// and enables it.
    fn retarget(&mut self, event: usize, point: probe::ProbePoint) -> anyhow::Result<()>;
    /// How often each event fired so far (every task's descriptor, inherited copies included), by event index.
    fn counts(&self) -> Vec<u64>;
}
