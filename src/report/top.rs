//! The table printed at the end of a run. On-CPU profiles: the hottest frames by self time, the leaf frames (as the
//! flame graph names them) that were on CPU in the most samples. Time-weighted profiles (off-CPU, wall-clock): where
//! the most time went, in time — on the CPU by leaf frame, off it by the frame the thread waited in
//! ([`super::folded::waiting_frame`]), blocked and runnable apart.

use super::folded::Folded;
use crate::symbolize::OffCpuState;
use std::fmt;

/// One row of the table.
#[derive(Debug, Clone, PartialEq)]
pub struct HotFrame {
    /// The frame's folded name (as in the flame graph).
    pub name: String,
    /// Samples in which this frame was the leaf.
    pub samples: u64,
    /// `samples` as a percentage of all samples given; of all time in a time table.
    pub percent: f64,
    /// In a time table: where the time was spent (`None`: on the CPU), and how much (µs).
    pub state: Option<OffCpuState>,
    pub micros: u64,
}

/// The hottest frames; `Display` renders the terminal table.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TopFrames {
    pub rows: Vec<HotFrame>,
    /// All samples given, including those without a stack.
    pub total_samples: u64,
    /// A time table (rows by time): the time of all folded samples (µs), and how much of it was off the CPU.
    pub time: Option<(u64, u64)>,
}

/// The `n` frames that were the leaf in the most folded samples, most first (ties by name). Counts samples, not
/// periods, of the event folded stacks show; percentages are of all samples given to the folder.
pub fn from_folded(folded: &Folded, n: usize) -> TopFrames {
    if !folded.time_by_frame().is_empty() {
        return by_time(folded, n);
    }
    rank(folded.leaf_samples().iter().map(|(name, c)| (name.as_str(), *c)), folded.input_samples(), n)
}

/// The `n` frames (with their state) where the most time went, most first (ties by name).
fn by_time(folded: &Folded, n: usize) -> TopFrames {
    let total: u64 = folded.time_by_frame().iter().map(|t| t.weight).sum();
    let off: u64 = folded.time_by_frame().iter().filter(|t| t.state.is_some()).map(|t| t.weight).sum();
    let mut rows: Vec<HotFrame> = folded
        .time_by_frame()
        .iter()
        .map(|t| HotFrame {
            name: t.name.clone(),
            samples: t.samples,
            percent: 100.0 * t.weight as f64 / total.max(1) as f64,
            state: t.state,
            micros: t.weight,
        })
        .collect();
    rows.sort_by(|a, b| b.micros.cmp(&a.micros).then_with(|| a.name.cmp(&b.name)));
    rows.truncate(n);
    TopFrames { rows, total_samples: folded.input_samples(), time: Some((total, off)) }
}

fn rank<'n>(leaves: impl Iterator<Item = (&'n str, u64)>, total: u64, n: usize) -> TopFrames {
    let mut rows: Vec<HotFrame> = leaves
        .map(|(name, samples)| HotFrame {
            name: name.to_string(),
            samples,
            percent: 100.0 * samples as f64 / total as f64,
            state: None,
            micros: 0,
        })
        .collect();
    rows.sort_by(|a, b| b.samples.cmp(&a.samples).then_with(|| a.name.cmp(&b.name)));
    rows.truncate(n);
    TopFrames { rows, total_samples: total, time: None }
}

/// Longest frame name shown before it is shortened with `…`.
const NAME_WIDTH: usize = 100;

/// A time in µs as the table shows it: `12.345 s`, `67.8 ms`, `910 µs`.
pub fn seconds_text(micros: u64) -> String {
    match micros {
        m if m >= 1_000_000 => format!("{:.3} s", m as f64 / 1e6),
        m if m >= 1_000 => format!("{:.1} ms", m as f64 / 1e3),
        m => format!("{m} µs"),
    }
}

fn shortened(name: &str) -> String {
    if name.chars().count() > NAME_WIDTH {
        name.chars().take(NAME_WIDTH - 1).chain(['…']).collect()
    } else {
        name.to_string()
    }
}

impl fmt::Display for TopFrames {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.rows.is_empty() {
            return writeln!(f, "No samples with a stack.");
        }
        let Some((total, off)) = self.time else {
            writeln!(f, "Hottest frames by self time ({} samples):", self.total_samples)?;
            writeln!(f, "  {:>8}  {:>6}  frame", "samples", "%")?;
            for row in &self.rows {
                writeln!(f, "  {:>8}  {:>5.1}%  {}", row.samples, row.percent, shortened(&row.name))?;
            }
            return Ok(());
        };
        if off == total {
            writeln!(
                f,
                "Where the threads waited (off-CPU time {} in all; the frame each waited in):",
                seconds_text(off)
            )?;
        } else {
            writeln!(
                f,
                "Where the time went (wall clock: {} on the CPU, {} off it; leaf frames on it, the frame each \
                 waited in off it):",
                seconds_text(total - off),
                seconds_text(off)
            )?;
        }
        writeln!(f, "  {:>10}  {:>6}  {:<8}  frame", "time", "%", "state")?;
        for row in &self.rows {
            let state = match row.state {
                None => "on CPU",
                Some(OffCpuState::Blocked) => "blocked",
                Some(OffCpuState::Runnable) => "runnable",
            };
            let time = seconds_text(row.micros);
            writeln!(f, "  {time:>10}  {:>5.1}%  {state:<8}  {}", row.percent, shortened(&row.name))?;
        }
        Ok(())
    }
}
