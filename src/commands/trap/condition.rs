//! When a trap fires: CPU use from two readings of a cumulative CPU-time counter, and a condition that must hold
//! over consecutive readings for a while.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// A cumulative CPU-time counter read at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reading {
    pub at: Instant,
    pub cpu: Duration,
}

/// CPU use between two readings, percent of one CPU (200 = two cores busy all the time), as `top` shows it.
pub fn percent(from: Reading, to: Reading) -> f64 {
    let wall = to.at.saturating_duration_since(from.at).as_secs_f64();
    if wall <= 0.0 {
        return 0.0;
    }
    to.cpu.saturating_sub(from.cpu).as_secs_f64() / wall * 100.0
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Relation {
    Above,
    Below,
}

/// CPU use above (or below) a threshold for a while.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Condition {
    pub relation: Relation,
    /// Percent of one CPU.
    pub threshold: f64,
    /// How long it must hold.
    pub hold: Duration,
}

impl Condition {
    pub fn holds(&self, percent: f64) -> bool {
        match self.relation {
            Relation::Above => percent > self.threshold,
            Relation::Below => percent < self.threshold,
        }
    }

    /// The flag that set it, as metadata.txt records it.
    pub fn flag(&self) -> &'static str {
        match self.relation {
            Relation::Above => "cpu-above",
            Relation::Below => "cpu-below",
        }
    }

    /// `above 50%`.
    pub fn threshold_text(&self) -> String {
        let relation = match self.relation {
            Relation::Above => "above",
            Relation::Below => "below",
        };
        format!("{relation} {}%", number(self.threshold))
    }

    /// `above 50% for 3 s`.
    pub fn describe(&self) -> String {
        format!("{} for {}", self.threshold_text(), seconds(self.hold))
    }
}

/// What one new reading means.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Step {
    /// The condition does not hold.
    Armed,
    /// It has held for this long, not long enough yet.
    Holding(Duration),
    /// It has held long enough: the CPU use over the whole time it held.
    Fired { average: f64, held: Duration },
}

/// The CPU use a condition is judged on is measured over this long (or over the hold, if shorter), as `top`
/// refreshing every second shows it: a quarter-second figure of a process near the threshold jumps across it (a
/// clock tick is 4% of a quarter second).
pub const WINDOW: Duration = Duration::from_secs(1);

/// Follows readings and says when the condition has held long enough: when the CPU use over every window (one
/// second, or the hold if shorter) ending at a reading of the last `hold` seconds met it. The time held counts from
/// the start of the first window that met it, but never from before the detector was (re-)armed.
#[derive(Debug)]
pub struct Detector {
    condition: Condition,
    window: Duration,
    /// Readings back to the start of the latest window.
    history: VecDeque<Reading>,
    /// No hold starts before this reading.
    armed_at: Reading,
    /// Where the current hold started.
    since: Option<Reading>,
}

impl Detector {
    /// Armed from `first` on.
    pub fn new(condition: Condition, first: Reading) -> Self {
        let window = condition.hold.min(WINDOW);
        Detector { condition, window, history: VecDeque::from([first]), armed_at: first, since: None }
    }

    /// Adds a reading and returns the CPU use over the window ending there, without judging it (while cooling
    /// down).
    pub fn measure(&mut self, now: Reading) -> f64 {
        let start = self.window_start(now);
        self.history.push_back(now);
        // The oldest reading is kept while it is still the window's closest start.
        while self.history.len() > 2 && self.history[1].at <= now.at.checked_sub(self.window).unwrap_or(now.at) {
            self.history.pop_front();
        }
        percent(start, now)
    }

    /// Adds a reading and judges the window ending there: the CPU use over it, and what it means.
    pub fn step(&mut self, now: Reading) -> (f64, Step) {
        let start = self.window_start(now);
        let cpu = self.measure(now);
        if !self.condition.holds(cpu) {
            self.since = None;
            return (cpu, Step::Armed);
        }
        let earliest = if start.at >= self.armed_at.at { start } else { self.armed_at };
        let since = *self.since.get_or_insert(earliest);
        let held = now.at.saturating_duration_since(since.at);
        if held >= self.condition.hold {
            self.since = None;
            return (cpu, Step::Fired { average: percent(since, now), held });
        }
        (cpu, Step::Holding(held))
    }

    /// The earlier reading closest to one window before `now`.
    fn window_start(&self, now: Reading) -> Reading {
        let target = now.at.checked_sub(self.window).unwrap_or(now.at);
        let distance = |r: &&Reading| if r.at > target { r.at - target } else { target - r.at };
        self.history.iter().min_by_key(distance).copied().unwrap_or(now)
    }

    /// Judges from `now` on: a hold starts anew, no earlier than this reading.
    pub fn arm(&mut self, now: Reading) {
        self.armed_at = now;
        self.since = None;
    }

    /// Forgets every reading before `now` (after a gap in the readings, such as a collection).
    pub fn restart(&mut self, now: Reading) {
        self.history.clear();
        self.history.push_back(now);
        self.since = None;
    }
}

/// `50`, `12.5`: a number as a user would type it.
pub fn number(v: f64) -> String {
    let text = format!("{v:.2}");
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// `3 s`, `0.5 s`.
pub fn seconds(d: Duration) -> String {
    format!("{} s", number(d.as_secs_f64()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn readings(start: Instant, cpu_ms_per_tick: &[u64]) -> Vec<Reading> {
        let mut cpu = Duration::ZERO;
        let mut out = vec![Reading { at: start, cpu }];
        for (i, ms) in cpu_ms_per_tick.iter().enumerate() {
            cpu += Duration::from_millis(*ms);
            out.push(Reading { at: start + Duration::from_millis(250 * (i as u64 + 1)), cpu });
        }
        out
    }

    #[test]
    fn percent_of_one_cpu() {
        let r = readings(Instant::now(), &[500, 125, 0]);
        assert_eq!(percent(r[0], r[1]), 200.0);
        assert_eq!(percent(r[1], r[2]), 50.0);
        assert_eq!(percent(r[2], r[3]), 0.0);
        assert!((percent(r[0], r[3]) - 250.0 / 3.0).abs() < 1e-9);
        // A counter that goes back (a reset) or no time passing reads as idle, never negative.
        assert_eq!(percent(r[3], r[0]), 0.0);
        assert_eq!(percent(r[1], r[1]), 0.0);
    }

    #[test]
    fn fires_once_every_window_of_the_hold_met_it() {
        let hold = Duration::from_millis(2000);
        let cond = Condition { relation: Relation::Above, threshold: 50.0, hold };
        // 250 ms of CPU per 250 ms tick is 100%. Idle for a second, then busy, with one idle tick: the one-second
        // windows around it stay above 50%, so it does not break the hold.
        let mut ticks = vec![0; 4];
        ticks.extend([250; 3]);
        ticks.push(0);
        ticks.extend([250; 8]);
        let r = readings(Instant::now(), &ticks);
        let mut d = Detector::new(cond, r[0]);
        let steps: Vec<(f64, Step)> = r[1..].iter().map(|&now| d.step(now)).collect();
        let cpu: Vec<f64> = steps.iter().map(|s| s.0).collect();
        assert_eq!(cpu[..8], [0.0, 0.0, 0.0, 0.0, 25.0, 50.0, 75.0, 75.0]);
        assert!(steps[..6].iter().all(|s| s.1 == Step::Armed), "{steps:?}");
        // The first window above 50% (75%: ticks 4-7) started at reading 3, 1 s before; the hold counts from there.
        assert_eq!(steps[6].1, Step::Holding(Duration::from_millis(1000)));
        assert_eq!(steps[9].1, Step::Holding(Duration::from_millis(1750)));
        let Step::Fired { average, held } = steps[10].1 else { panic!("{steps:?}") };
        assert_eq!(held, hold);
        // From reading 3 to 11: 6 busy ticks of 8.
        assert!((average - 75.0).abs() < 1e-9, "{average}");
        // After firing, a new hold needs a new start.
        assert_eq!(steps[11].1, Step::Holding(Duration::from_millis(1000)));
    }

    #[test]
    fn a_hold_starts_no_earlier_than_arming() {
        let cond = Condition { relation: Relation::Above, threshold: 50.0, hold: Duration::from_millis(1000) };
        let r = readings(Instant::now(), &[250; 10]);
        let mut d = Detector::new(cond, r[0]);
        // Cooling down: measured, not judged.
        for &now in &r[1..5] {
            assert_eq!(d.measure(now), 100.0);
        }
        d.arm(r[4]);
        assert_eq!(d.step(r[5]), (100.0, Step::Holding(Duration::from_millis(250))));
        assert_eq!(d.step(r[6]), (100.0, Step::Holding(Duration::from_millis(500))));
        assert_eq!(d.step(r[7]), (100.0, Step::Holding(Duration::from_millis(750))));
        assert!(matches!(d.step(r[8]), (_, Step::Fired { held, .. }) if held == Duration::from_millis(1000)));
        // After a gap, the window starts at the restart.
        d.restart(r[9]);
        d.arm(r[9]);
        let later = Reading { at: r[9].at + Duration::from_millis(250), cpu: r[9].cpu };
        assert_eq!(d.step(later), (0.0, Step::Armed));
    }

    #[test]
    fn short_holds_use_short_windows() {
        let cond = Condition { relation: Relation::Below, threshold: 20.0, hold: Duration::ZERO };
        let r = readings(Instant::now(), &[250, 25]);
        let mut d = Detector::new(cond, r[0]);
        assert_eq!(d.step(r[1]), (100.0, Step::Armed));
        let (cpu, Step::Fired { average, held }) = d.step(r[2]) else { panic!("did not fire") };
        assert!((cpu - 10.0).abs() < 1e-9 && (average - 10.0).abs() < 1e-9, "{cpu} {average}");
        // A hold of 0 fires on the first interval that meets the condition.
        assert_eq!(held, Duration::from_millis(250));
        assert!(!cond.holds(20.0) && cond.holds(19.9));
        assert_eq!(cond.describe(), "below 20% for 0 s");
        let above = Condition { relation: Relation::Above, threshold: 12.5, hold: Duration::from_millis(2500) };
        assert_eq!((above.describe().as_str(), above.flag()), ("above 12.5% for 2.5 s", "cpu-above"));
    }
}
