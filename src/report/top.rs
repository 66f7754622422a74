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
    let total = folded.time_by_frame().iter().fold(0u64, |sum, t| sum.saturating_add(t.weight));
    let off =
        folded.time_by_frame().iter().filter(|t| t.state.is_some()).fold(0u64, |sum, t| sum.saturating_add(t.weight));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::folded::{FoldOptions, Folder};
    use crate::report::Weight;
    use crate::symbolize::{Frame, FrameKind, ResolvedSample, Stack};
    use std::sync::Arc;

    fn frame(name: &str, module: &str, kind: FrameKind) -> Frame {
        Frame::new(0x1000, Some(Arc::from(name)), 0, Arc::from(module), kind)
    }

    fn sample(frames: Vec<Frame>, micros: u64, off_cpu: Option<OffCpuState>) -> ResolvedSample {
        ResolvedSample {
            pid: 1,
            tid: 1,
            cpu: 0,
            time: 0,
            period: micros * 1000,
            off_cpu,
            comm: Arc::from("app"),
            event: Arc::from(if off_cpu.is_some() { "sched:sched_switch" } else { "cpu-clock" }),
            frames: Stack::from(frames),
        }
    }

    #[test]
    fn time_tables_rank_where_time_went_by_state() {
        let kernel = frame("__schedule", "[kernel.kallsyms]", FrameKind::Kernel);
        let futex = frame("__futex_abstimed_wait_common", "/usr/lib/libc.so.6", FrameKind::Native);
        let vdso = frame("clock_gettime", "[vdso]", FrameKind::Native);
        let wait = frame("void [App] Handler::Wait()", "/tmp/perf-1.map", FrameKind::Jit);
        let work = frame("void [App] Handler::Work()", "/tmp/perf-1.map", FrameKind::Jit);
        let mut runnable = vec![frame("[runnable]", "[unknown]", FrameKind::Unknown)];
        runnable[0].addr = 0;
        runnable.extend([kernel.clone(), vdso, work.clone()]);
        let mut folder = Folder::new(&FoldOptions { weight: Weight::Time, all_events: true, ..FoldOptions::default() });
        folder.add(&sample(vec![kernel.clone(), futex, wait.clone()], 3_000_000, Some(OffCpuState::Blocked)));
        folder.add(&sample(runnable, 500_000, Some(OffCpuState::Runnable)));
        folder.add(&sample(vec![work.clone()], 1_000_000, None));
        folder.add(&sample(vec![work], 1_000_000, None));
        let folded = folder.finish();
        // Handler::Work is on the CPU 2 s and runnable 0.5 s: warm; __schedule only waits: cold.
        assert!(folded.is_mostly_off_cpu("__schedule") && !folded.is_mostly_off_cpu("void [App] Handler::Work"));
        let table = from_folded(&folded, 5);
        let rows: Vec<(&str, Option<OffCpuState>, u64)> =
            table.rows.iter().map(|r| (r.name.as_str(), r.state, r.micros)).collect();
        // Off the CPU each wait is named by the innermost managed frame, not libc's futex wrapper or the vDSO.
        assert_eq!(
            rows,
            [
                ("void [App] Handler::Wait", Some(OffCpuState::Blocked), 3_000_000),
                ("void [App] Handler::Work", None, 2_000_000),
                ("void [App] Handler::Work", Some(OffCpuState::Runnable), 500_000)
            ]
        );
        let text = table.to_string();
        assert!(text.starts_with("Where the time went (wall clock: 2.000 s on the CPU, 3.500 s off it;"), "{text}");
        assert!(text.contains("   3.000 s   54.5%  blocked   void [App] Handler::Wait"), "{text}");
    }

    /// Times a hostile perf.data gives (a switch-out's interval ending near 2^64 ns) add up to their ceiling, not
    /// past it, in the folded stacks and the table; the flame graph, whose sums inferno makes in 64 bits, draws such
    /// stacks in proportion. Found by fuzzing postprocess: overflow panics with checks on, and in a release build
    /// wrapped sums (each of the two stacks drawn at 100 %).
    #[test]
    fn times_near_the_limit_add_up_without_overflow() {
        let wait = frame("void [App] Handler::Wait()", "/tmp/perf-1.map", FrameKind::Jit);
        let work = frame("void [App] Handler::Work()", "/tmp/perf-1.map", FrameKind::Jit);
        let mut folder = Folder::new(&FoldOptions { weight: Weight::Time, all_events: true, ..FoldOptions::default() });
        // A time weighs its µs: u64::MAX ns is 2^64 / 1000 µs, and 1001 of them pass 2^64.
        for frames in [vec![wait], vec![work]] {
            let mut huge = sample(frames, 0, Some(OffCpuState::Blocked));
            huge.period = u64::MAX;
            for _ in 0..1001 {
                folder.add(&huge);
            }
        }
        let folded = folder.finish();
        assert_eq!(folded.total(), u64::MAX);
        assert_eq!(folded.stacks().map(|(_, n)| n).collect::<Vec<_>>(), [u64::MAX, u64::MAX]);
        let table = from_folded(&folded, 5);
        assert_eq!(table.rows[0].micros, u64::MAX);
        // Drawn in proportion: each stack half of the graph.
        let mut svg = Vec::new();
        crate::report::flamegraph::write_svg(&folded, &crate::report::flamegraph::FlameOptions::default(), &mut svg)
            .unwrap();
        let svg = String::from_utf8(svg).unwrap();
        let titles: Vec<&str> =
            svg.match_indices("<title>").map(|(at, _)| &svg[at..at + svg[at..].find("</title>").unwrap()]).collect();
        assert!(
            titles.contains(&"<title>void [App] Handler::Wait (9,223,372,036,854,775,808 samples, 50.00%)"),
            "{titles:?}"
        );
    }
}
