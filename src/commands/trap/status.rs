//! What a trap shows while it watches: on a terminal, one live line rewritten four times a second; otherwise one
//! line per change of state, stamped with the time, for logs. Lines that stay (the start, each trigger, the end)
//! go above the live line.

use super::condition::{seconds, Condition};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::time::Duration;

/// Where the watch is after a reading.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum State {
    /// The condition does not hold.
    Armed,
    /// It has held for this long.
    Holding(Duration),
    /// After a collection: watching again in this long.
    CoolingDown(Duration),
}

pub struct Status {
    terminal: bool,
    bar: Option<ProgressBar>,
    condition: Condition,
    pid: u32,
    count: u32,
    last: Option<State>,
}

impl Status {
    /// `terminal`: a live line on stderr; otherwise lines on changes.
    pub fn new(terminal: bool, condition: Condition, pid: u32, count: u32) -> Self {
        let mut status = Status { terminal, bar: None, condition, pid, count, last: None };
        status.resume();
        status
    }

    /// The state after a reading of `cpu` percent, with `collected` collections made so far.
    pub fn update(&mut self, cpu: f64, state: State, collected: u32) {
        match &self.bar {
            Some(bar) => {
                bar.set_message(live_line(self.pid, cpu, state, &self.condition, collected, self.count));
                bar.tick();
            }
            None => {
                if let Some(line) = change_line(self.last, state, cpu, &self.condition) {
                    self.say(&line);
                }
            }
        }
        self.last = Some(state);
    }

    /// A line that stays, stamped with the time.
    pub fn say(&self, line: &str) {
        let line = format!("{} trap: {line}", chrono::Local::now().format("%H:%M:%S"));
        match &self.bar {
            Some(bar) => bar.println(line),
            None => eprintln!("{line}"),
        }
    }

    /// Takes the live line away while a collection shows its own progress.
    pub fn pause(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }

    /// Brings the live line back (on a terminal).
    pub fn resume(&mut self) {
        if self.terminal && self.bar.is_none() {
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr_with_hz(4));
            bar.set_style(
                ProgressStyle::with_template("{spinner} {msg}").unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            self.bar = Some(bar);
        }
    }
}

impl Drop for Status {
    fn drop(&mut self) {
        self.pause();
    }
}

/// The live line: `PID 4242  CPU 183%  above 50% for 1.2 of 3 s  ·  0 of 1 collected`.
pub fn live_line(pid: u32, cpu: f64, state: State, condition: &Condition, collected: u32, count: u32) -> String {
    let what = match state {
        State::Armed => format!("armed: collects when {}", condition.describe()),
        State::Holding(held) => {
            format!("{} for {:.1} of {}", condition.threshold_text(), held.as_secs_f64(), seconds(condition.hold))
        }
        State::CoolingDown(left) => format!("cooling down: armed again in {:.0} s", left.as_secs_f64().ceil()),
    };
    format!("PID {pid}  CPU {cpu:.0}%  {what}  ·  {collected} of {count} collected")
}

/// The line for a change from `last` to `state` (none when the state stays the same kind).
pub fn change_line(last: Option<State>, state: State, cpu: f64, condition: &Condition) -> Option<String> {
    Some(match (last, state) {
        (None, State::Armed) => format!("armed: CPU {cpu:.0}% (collects when {})", condition.describe()),
        (Some(State::Holding(held)), State::Armed) => {
            format!("CPU {cpu:.0}%, no longer {} after {:.1} s: armed", condition.threshold_text(), held.as_secs_f64())
        }
        (Some(State::CoolingDown(_)), State::Armed) => format!("cooldown over: armed, CPU {cpu:.0}%"),
        (Some(State::Holding(_)), State::Holding(_)) | (Some(State::Armed), State::Armed) => return None,
        (_, State::Holding(_)) => format!(
            "CPU {cpu:.0}% {}: collects if it stays so for {}",
            condition.threshold_text(),
            seconds(condition.hold)
        ),
        (Some(State::CoolingDown(_)), State::CoolingDown(_)) => return None,
        (_, State::CoolingDown(left)) => format!("cooling down for {}", seconds(left)),
    })
}

#[cfg(test)]
mod tests {
    use super::super::condition::Relation;
    use super::*;

    const COND: Condition = Condition { relation: Relation::Above, threshold: 50.0, hold: Duration::from_secs(3) };

    #[test]
    fn live_line_per_state() {
        let line = |state| live_line(42, 183.4, state, &COND, 1, 2);
        assert_eq!(line(State::Armed), "PID 42  CPU 183%  armed: collects when above 50% for 3 s  ·  1 of 2 collected");
        assert_eq!(
            line(State::Holding(Duration::from_millis(1300))),
            "PID 42  CPU 183%  above 50% for 1.3 of 3 s  ·  1 of 2 collected"
        );
        assert_eq!(
            line(State::CoolingDown(Duration::from_millis(11_200))),
            "PID 42  CPU 183%  cooling down: armed again in 12 s  ·  1 of 2 collected"
        );
    }

    #[test]
    fn one_line_per_change() {
        let held = State::Holding(Duration::from_millis(1500));
        let cooling = State::CoolingDown(Duration::from_secs(30));
        let line = |last, state| change_line(last, state, 12.0, &COND);
        assert_eq!(line(None, State::Armed).unwrap(), "armed: CPU 12% (collects when above 50% for 3 s)");
        assert_eq!(line(Some(State::Armed), State::Armed), None);
        assert_eq!(line(Some(State::Armed), held).unwrap(), "CPU 12% above 50%: collects if it stays so for 3 s");
        assert_eq!(line(Some(held), held), None);
        assert_eq!(line(Some(held), State::Armed).unwrap(), "CPU 12%, no longer above 50% after 1.5 s: armed");
        assert_eq!(line(Some(held), cooling).unwrap(), "cooling down for 30 s");
        assert_eq!(line(Some(cooling), cooling), None);
        assert_eq!(line(Some(cooling), State::Armed).unwrap(), "cooldown over: armed, CPU 12%");
    }
}
