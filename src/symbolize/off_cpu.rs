//! Off-CPU time: every switch-out of a thread (a `sched:sched_switch` sample, which carries the thread's stack)
//! weighted by how long the thread then stayed off the CPU — until its next switch-in (a PERF_RECORD_SWITCH or
//! SWITCH_CPU_WIDE record of that thread) — and told runnable (preempted: it wanted the CPU) or blocked. This is the
//! one place where switches become weighted intervals; the symbolizer hands each switch-out on with its interval
//! as the sample's period (nanoseconds), like a clock event's period is its CPU time.
//!
//! [`IntervalPass`] runs over the recording in time order before samples are named: it pairs each switch-out with
//! the same thread's next switch-in. What it cannot pair is dropped rather than guessed: a switch-out followed by
//! another one of the same thread (the switch-in was lost), a switch-out after the thread exited (its last one).
//! A thread still off the CPU when the recording ends counts until its last record.

use super::OffCpuState;
use crate::perf_data::tracing::{SchedSwitchLayout, SCHED_SWITCH};
use crate::perf_data::{EventDesc, PerfDataReader, Sample};
use rustc_hash::FxHashMap;

/// What a recording measures, from its events: the report weights and titles follow it, whatever flags were given
/// when it was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Measure {
    /// Samples of an event on the CPU (or switch-outs that cannot be timed: counted as samples).
    #[default]
    OnCpu,
    /// Switch-outs weighted by the time off the CPU.
    OffCpu,
    /// On-CPU samples of a clock event and timed switch-outs: each thread's time whole.
    Wall,
}

impl Measure {
    pub fn of(reader: &PerfDataReader) -> Measure {
        SwitchOuts::of(reader).measure()
    }

    /// As `collect -mode` spells it (metadata.txt's `mode`).
    pub fn name(self) -> &'static str {
        match self {
            Measure::OnCpu => "cpu",
            Measure::OffCpu => "offcpu",
            Measure::Wall => "wall",
        }
    }
}

/// Which events of a recording are switch-outs, and how their raw data tells a thread's state.
#[derive(Debug, Clone, Default)]
pub struct SwitchOuts {
    /// Per event: `Some` for a switch-out event, with the layout of its raw fields when the recording describes
    /// them (its tracing data).
    events: Vec<Option<Option<SchedSwitchLayout>>>,
    /// Switch-ins are recorded (some event asked for context-switch records), so intervals can be measured.
    timed: bool,
    measure: Measure,
}

impl SwitchOuts {
    pub fn of(reader: &PerfDataReader) -> SwitchOuts {
        let tracing = reader.features().tracing.as_ref();
        let events: Vec<Option<Option<SchedSwitchLayout>>> = reader
            .events()
            .iter()
            .map(|ev| {
                is_switch_out(ev).then(|| {
                    let format = tracing.and_then(|t| t.event(ev.attr.config()))?;
                    SchedSwitchLayout::new(format).ok()
                })
            })
            .collect();
        let timed = reader.events().iter().any(|ev| ev.attr.context_switch());
        let switch_outs = events.iter().any(Option::is_some);
        let on_cpu = events.iter().any(Option::is_none);
        let measure = match (switch_outs && timed, on_cpu) {
            (false, _) => Measure::OnCpu,
            (true, false) => Measure::OffCpu,
            (true, true) => Measure::Wall,
        };
        SwitchOuts { events, timed, measure }
    }

    pub fn measure(&self) -> Measure {
        self.measure
    }

    /// Whether samples of event `event` (its index in the recording) are switch-outs to be timed.
    pub fn times(&self, event: usize) -> bool {
        self.timed && self.events.get(event).is_some_and(Option::is_some)
    }

    /// Whether the recording has switch-outs that cannot be timed (no context-switch records).
    pub fn untimed(&self) -> bool {
        !self.timed && self.events.iter().any(Option::is_some)
    }

    /// How a switch-out's thread left the CPU: from the sample's `prev_state`, else from the switch record's
    /// preemption flag; blocked when neither tells.
    pub fn state(&self, event: usize, sample: &Sample, interval: &Interval) -> OffCpuState {
        let from_raw = self.events.get(event).and_then(|e| e.as_ref()?.as_ref()?.decode(&sample.raw));
        let runnable = match from_raw {
            Some(switch) => switch.runnable(),
            None => interval.preempted.unwrap_or(false),
        };
        if runnable {
            OffCpuState::Runnable
        } else {
            OffCpuState::Blocked
        }
    }
}

/// The scheduler's switch tracepoint: by name (its format in the file, or perf's description of the events), or —
/// in a file whose descriptions were cut off — as profcpu records it: a tracepoint that asks for switch records.
fn is_switch_out(ev: &EventDesc) -> bool {
    ev.attr.is_tracepoint() && (ev.name == SCHED_SWITCH || ev.attr.context_switch())
}

/// How long a switch-out's thread stayed off the CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interval {
    /// When it ran again (or the recording ended).
    pub end: u64,
    /// The switch-out record's preemption flag, when one followed the sample.
    pub preempted: Option<bool>,
}

/// The switch-outs' intervals, by the key each switch-out was given.
#[derive(Debug, Default)]
pub struct Intervals {
    by_key: FxHashMap<usize, Interval>,
    /// Switch-outs without an interval: their switch-in was lost, or they were a thread's last.
    pub unmatched: u64,
    /// Intervals cut by the end of the recording.
    pub open_at_end: u64,
}

impl Intervals {
    pub fn get(&self, key: usize) -> Option<&Interval> {
        self.by_key.get(&key)
    }
}

/// Pairs switch-outs with switch-ins; fed in time order.
#[derive(Debug, Default)]
pub struct IntervalPass {
    /// Per thread: the switch-out waiting for its switch-in (key, preemption flag).
    pending: FxHashMap<u32, (usize, Option<bool>)>,
    /// Threads that exited, and when.
    exited: FxHashMap<u32, u64>,
    done: Intervals,
}

impl IntervalPass {
    /// Thread `tid` switched out at `time` (a sample, identified by `key`).
    pub fn switch_out(&mut self, key: usize, tid: u32, time: u64) {
        if self.pending.remove(&tid).is_some() {
            self.done.unmatched += 1;
        }
        // The idle task leaving a CPU is no thread waiting; a thread's switch-out after its exit is its last.
        if tid == 0 || self.exited.get(&tid).is_some_and(|&exit| time >= exit) {
            self.done.unmatched += 1;
            return;
        }
        self.pending.insert(tid, (key, None));
    }

    /// A switch record of thread `tid`: leaving (with its preemption flag) or arriving on a CPU.
    pub fn switched(&mut self, tid: u32, out: bool, preempted: bool, time: u64) {
        if out {
            if let Some((_, flag)) = self.pending.get_mut(&tid) {
                flag.get_or_insert(preempted);
            }
        } else if let Some((key, flag)) = self.pending.remove(&tid) {
            self.done.by_key.insert(key, Interval { end: time, preempted: flag });
        }
    }

    pub fn exited(&mut self, tid: u32, time: u64) {
        self.exited.insert(tid, time);
    }

    /// A new thread: its id may be one an exited thread had.
    pub fn forked(&mut self, tid: u32) {
        self.exited.remove(&tid);
    }

    /// Closes what is still off the CPU at `end`, the recording's last time.
    pub fn finish(mut self, end: u64) -> Intervals {
        for (_, (key, flag)) in self.pending.drain() {
            self.done.by_key.insert(key, Interval { end, preempted: flag });
            self.done.open_at_end += 1;
        }
        self.done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn switch_outs_pair_with_the_same_threads_next_switch_in() {
        let mut pass = IntervalPass::default();
        pass.switch_out(1, 10, 100);
        pass.switched(10, true, true, 101);
        pass.switch_out(2, 20, 105);
        pass.switched(20, true, false, 106);
        pass.switched(30, false, false, 107); // another thread arriving
        pass.switched(20, false, false, 150);
        pass.switched(10, false, false, 300);
        // Thread 20 again; its switch-in is lost, so the next switch-out finds it pending.
        pass.switch_out(3, 20, 400);
        pass.switch_out(4, 20, 500);
        // The idle task and a thread's last switch-out after its exit are not waits.
        pass.switch_out(5, 0, 510);
        pass.exited(40, 520);
        pass.switch_out(6, 40, 521);
        pass.forked(40);
        pass.switch_out(7, 40, 530);
        let done = pass.finish(600);
        assert_eq!(done.get(1), Some(&Interval { end: 300, preempted: Some(true) }));
        assert_eq!(done.get(2), Some(&Interval { end: 150, preempted: Some(false) }));
        assert_eq!(done.get(3), None);
        assert_eq!(done.get(4), Some(&Interval { end: 600, preempted: None }));
        assert_eq!((done.get(5), done.get(6)), (None, None));
        assert_eq!(done.get(7), Some(&Interval { end: 600, preempted: None }));
        assert_eq!((done.unmatched, done.open_at_end), (3, 2));
    }
}
