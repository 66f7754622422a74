//! Outputs built from symbolized samples: `perf script` text, folded stacks, the flame graph, the top-frames table,
//! the metadata file.
//!
//! Driven one sample at a time by [`profile::ProfileBuilder`]: `view::Viewer` selects samples and frames,
//! `script::ScriptWriter` renders perf_script.out's text, `folded::Folder` folds the stacks (folded_stacks.out);
//! then `flamegraph::write_svg` draws flamegraph.svg from the folded stacks and `top::from_folded` makes the table
//! printed at the end of a run.
//!
//! The three text outputs agree by construction: `inferno-collapse-perf perf_script.out` (default options) gives
//! exactly folded_stacks.out, as long as both were made with the same [`Weight`]. [`names`] documents how frames
//! are spelled for that to hold.

pub mod flamegraph;
pub mod folded;
pub mod metadata_txt;
pub mod names;
pub mod profile;
pub mod script;
pub(crate) mod stacks;
pub mod top;
pub mod view;

pub const PERF_SCRIPT_FILE: &str = "perf_script.out";
pub const FOLDED_FILE: &str = "folded_stacks.out";
pub const FLAMEGRAPH_FILE: &str = "flamegraph.svg";
pub const METADATA_FILE: &str = "metadata.txt";
pub const ARCHIVE_FILE: &str = "prof.tar.gz";
pub const SYMBOLS_DIR: &str = "symbols";

/// `folded_stacks.<tid>.out`, written for `-per-thread`.
pub fn thread_folded_file(tid: u32) -> String {
    format!("folded_stacks.{tid}.out")
}

/// `flamegraph.<tid>.svg`, written for `-per-thread`.
pub fn thread_flamegraph_file(tid: u32) -> String {
    format!("flamegraph.{tid}.svg")
}

/// What a sample adds to the count of its stack in folded_stacks.out and the flame graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Weight {
    /// Its period (nanoseconds of CPU for cpu-clock/task-clock). perf_script.out then shows the period, as
    /// `perf script` does, and `perf script | inferno-collapse-perf` weights the same way.
    #[default]
    Period,
    /// 1 per sample. perf_script.out then leaves the period out so that collapsing it counts samples too.
    Samples,
    /// Microseconds, rounded: a clock sample's period (CPU time), a switch-out's time off the CPU (see
    /// [`crate::symbolize::Measure`]). perf_script.out then shows that number in the period's place, so collapsing
    /// it weights the same way. What off-CPU and wall-clock recordings are weighted by.
    Time,
}

impl Weight {
    /// What a sample adds to the count of its stack.
    pub fn of(self, sample: &crate::symbolize::ResolvedSample) -> u64 {
        match self {
            Weight::Period => sample.period,
            Weight::Samples => 1,
            Weight::Time => sample.period.saturating_add(500) / 1000,
        }
    }
}
