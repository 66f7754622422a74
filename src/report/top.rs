//! The "hottest frames by self time" table printed at the end of a run: the leaf frames (as the flame graph names
//! them) that were on CPU in the most samples.

use super::folded::Folded;
use std::fmt;

/// One row of the table.
#[derive(Debug, Clone, PartialEq)]
pub struct HotFrame {
    /// The frame's folded name (as in the flame graph).
    pub name: String,
    /// Samples in which this frame was the leaf.
    pub samples: u64,
    /// `samples` as a percentage of all samples given.
    pub percent: f64,
}

/// The hottest frames; `Display` renders the terminal table.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TopFrames {
    pub rows: Vec<HotFrame>,
    /// All samples given, including those without a stack.
    pub total_samples: u64,
}

/// The `n` frames that were the leaf in the most folded samples, most first (ties by name). Counts samples, not
/// periods, of the event folded stacks show; percentages are of all samples given to the folder.
pub fn from_folded(folded: &Folded, n: usize) -> TopFrames {
    rank(folded.leaf_samples().iter().map(|(name, c)| (name.as_str(), *c)), folded.input_samples(), n)
}

fn rank<'n>(leaves: impl Iterator<Item = (&'n str, u64)>, total: u64, n: usize) -> TopFrames {
    let mut rows: Vec<HotFrame> = leaves
        .map(|(name, samples)| HotFrame {
            name: name.to_string(),
            samples,
            percent: 100.0 * samples as f64 / total as f64,
        })
        .collect();
    rows.sort_by(|a, b| b.samples.cmp(&a.samples).then_with(|| a.name.cmp(&b.name)));
    rows.truncate(n);
    TopFrames { rows, total_samples: total }
}

/// Longest frame name shown before it is shortened with `…`.
const NAME_WIDTH: usize = 100;

impl fmt::Display for TopFrames {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.rows.is_empty() {
            return writeln!(f, "No samples with a stack.");
        }
        writeln!(f, "Hottest frames by self time ({} samples):", self.total_samples)?;
        writeln!(f, "  {:>8}  {:>6}  frame", "samples", "%")?;
        for row in &self.rows {
            let name: String = if row.name.chars().count() > NAME_WIDTH {
                row.name.chars().take(NAME_WIDTH - 1).chain(['…']).collect()
            } else {
                row.name.clone()
            };
            writeln!(f, "  {:>8}  {:>5.1}%  {}", row.samples, row.percent, name)?;
        }
        Ok(())
    }
}
