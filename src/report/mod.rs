//! Outputs built from symbolized samples: `perf script` text, folded stacks, the flame graph, the top-frames table,
//! the metadata file.
//!
//! Pipeline: `view::View::apply` selects samples/frames → `script::write_perf_script` (perf_script.out),
//! `folded::fold` → `Folded::write` (folded_stacks.out) → `flamegraph::write_svg` (flamegraph.svg);
//! `top::hottest_self` for the terminal. [`write_outputs`] does all of it for one output directory.
//!
//! The three text outputs agree by construction: `inferno-collapse-perf perf_script.out` (default options) gives
//! exactly folded_stacks.out, as long as both were made with the same [`Weight`]. [`names`] documents how frames
//! are spelled for that to hold.

pub mod flamegraph;
pub mod folded;
pub mod metadata_txt;
pub mod names;
pub mod script;
pub(crate) mod stacks;
pub mod top;
pub mod view;

use crate::symbolize::ResolvedSample;
use anyhow::{Context, Result};
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

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
}

/// Options for [`write_outputs`].
#[derive(Debug, Clone)]
pub struct ReportOptions {
    pub weight: Weight,
    pub flame: flamegraph::FlameOptions,
    /// Also write `folded_stacks.<tid>.out` and `flamegraph.<tid>.svg` for every thread.
    pub per_thread: bool,
    /// Rows of the hottest-frames table.
    pub top: usize,
}

impl Default for ReportOptions {
    fn default() -> Self {
        ReportOptions { weight: Weight::default(), flame: Default::default(), per_thread: false, top: 5 }
    }
}

/// What [`write_outputs`] did.
#[derive(Debug, Clone)]
pub struct ReportSummary {
    /// Files written, relative to the output directory, in writing order.
    pub files: Vec<PathBuf>,
    pub top: top::TopFrames,
    /// Samples that made it into folded_stacks.out.
    pub folded_samples: u64,
    /// Things the user should know (e.g. no flame graph for an empty profile).
    pub notes: Vec<String>,
}

/// Writes perf_script.out, folded_stacks.out and flamegraph.svg (and the per-thread files) into `dir` from
/// samples already passed through a [`view::View`]. Files must not exist yet. The script is written on a second
/// thread while the stacks are folded and drawn; the top table comes from the fold.
pub fn write_outputs(dir: &Path, samples: &[ResolvedSample], opts: &ReportOptions) -> Result<ReportSummary> {
    let script_path = dir.join(PERF_SCRIPT_FILE);
    let script_opts = script::ScriptOptions { weight: opts.weight };
    let fold_opts = folded::FoldOptions { event: None, weight: opts.weight };
    let mut notes = Vec::new();
    let mut files = vec![PathBuf::from(PERF_SCRIPT_FILE), PathBuf::from(FOLDED_FILE)];

    let (script_result, graph_result) = std::thread::scope(|scope| {
        let script_writer =
            scope.spawn(|| write_file(&script_path, |out| script::write_perf_script(samples, &script_opts, out)));
        let graph = (|| -> Result<(folded::Folded, bool)> {
            let all = folded::fold(samples, &fold_opts);
            write_file(&dir.join(FOLDED_FILE), |out| all.write(out))?;
            // An all-zero total (samples recorded without a period, weighted by it) has nothing to draw either.
            let drawn = all.total() > 0;
            if drawn {
                write_svg_file(&dir.join(FLAMEGRAPH_FILE), &all, &opts.flame)?;
            }
            Ok((all, drawn))
        })();
        (script_writer.join().expect("perf script writer panicked"), graph)
    });
    script_result?;
    let (all, drawn) = graph_result?;
    let top = top::from_folded(&all, opts.top);
    if drawn {
        files.push(PathBuf::from(FLAMEGRAPH_FILE));
    } else {
        let why =
            if all.is_empty() { "no samples with a stack" } else { "every sample has period 0 (use Weight::Samples)" };
        notes.push(format!("{why}: flamegraph.svg was not written"));
    }

    if opts.per_thread {
        // Every thread's graph shows the event of the whole graph, even if a thread's first sample is another.
        let thread_opts = folded::FoldOptions { event: all.event().map(str::to_string), ..fold_opts };
        for (tid, thread_samples) in view::group_by_tid(samples) {
            let thread = folded::fold(thread_samples.iter().copied(), &thread_opts);
            let folded_name = thread_folded_file(tid);
            write_file(&dir.join(&folded_name), |out| thread.write(out))?;
            files.push(folded_name.into());
            if thread.total() == 0 {
                continue;
            }
            let comm = thread_samples.first().map(|s| s.comm.to_string()).unwrap_or_default();
            let svg_name = thread_flamegraph_file(tid);
            write_svg_file(&dir.join(&svg_name), &thread, &opts.flame.for_thread(tid, &comm))?;
            files.push(svg_name.into());
        }
    }

    Ok(ReportSummary { files, top, folded_samples: all.samples(), notes })
}

fn write_file(path: &Path, write: impl FnOnce(&mut BufWriter<File>) -> io::Result<()>) -> Result<()> {
    let file = crate::new_file::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut out = BufWriter::with_capacity(256 * 1024, file);
    write(&mut out).and_then(|()| out.flush()).with_context(|| format!("writing {}", path.display()))
}

fn write_svg_file(path: &Path, folded: &folded::Folded, opts: &flamegraph::FlameOptions) -> Result<()> {
    let file = crate::new_file::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut out = BufWriter::with_capacity(256 * 1024, file);
    flamegraph::write_svg(folded, opts, &mut out).with_context(|| format!("writing {}", path.display()))?;
    out.flush().with_context(|| format!("writing {}", path.display()))
}
