//! The stages after recording, shared by `collect` and `postprocess`: perf.data → symbolize → report → archive.
//!
//! Outputs are written into a fresh staging folder inside the output directory and then renamed into place, so a
//! regenerated file replaces the old one (or a planted symlink) instead of writing through it, and a failure never
//! leaves a half-written file under the final name.

use crate::archive;
use crate::perf_data::PerfDataReader;
use crate::report::flamegraph::FlameOptions;
use crate::report::meta::Metadata;
use crate::report::view::View;
use crate::report::{self, ReportOptions, ReportSummary, Weight};
use crate::symbolize::{symbolize_file, SymbolizeOptions, SymbolizeStats};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

pub const PERF_DATA_FILE: &str = "perf.data";

pub struct OutputRequest<'a> {
    /// The output directory; perf.data (and `symbols/` when captured) are in it.
    pub dir: &'a Path,
    pub symbolize: SymbolizeOptions,
    pub view: View,
    pub per_thread: bool,
    /// Overrides the flame graph's title.
    pub title: Option<String>,
    pub metadata: Metadata,
}

pub struct OutputSummary {
    pub report: ReportSummary,
    pub symbolize: SymbolizeStats,
    pub samples_shown: usize,
    pub archive: PathBuf,
}

/// Symbolizes `dir/perf.data` and (re)writes perf_script.out, folded_stacks.out, flamegraph.svg, metadata.txt and
/// prof.tar.gz in `dir`.
pub fn generate(req: OutputRequest) -> Result<OutputSummary> {
    let dir = req.dir;
    let perf_data = dir.join(PERF_DATA_FILE);
    let reader = PerfDataReader::open(&perf_data)?;
    for w in reader.warnings() {
        tracing::warn!("{}: {w}", perf_data.display());
    }
    let symbolized = symbolize_file(&reader, &req.symbolize)
        .with_context(|| format!("cannot name the frames of {}", perf_data.display()))?;
    let samples = req.view.apply(&symbolized.samples);

    let mut meta = req.metadata;
    if meta.event.is_empty() {
        meta.event = reader.events()[0].name.clone();
    }
    let mut flame = FlameOptions::for_profile(&meta, Weight::default());
    if let Some(title) = req.title {
        flame.title = title;
    }
    let opts = ReportOptions { flame, per_thread: req.per_thread, ..ReportOptions::default() };

    let staging = Staging::create(dir)?;
    let report = report::write_outputs(staging.path(), &samples, &opts)?;
    for note in &report.notes {
        tracing::warn!("{note}");
    }
    write_new(&staging.path().join(report::METADATA_FILE), meta.to_string().as_bytes())?;

    let mut produced: Vec<PathBuf> = report.files.clone();
    produced.push(report::METADATA_FILE.into());
    staging.publish(&produced)?;

    let mut entries: Vec<PathBuf> = vec![PERF_DATA_FILE.into()];
    entries.extend(produced.iter().cloned());
    if dir.join(report::SYMBOLS_DIR).is_dir() {
        entries.push(report::SYMBOLS_DIR.into());
    }
    let staged_archive = staging.path().join(report::ARCHIVE_FILE);
    archive::create(dir, &entries, &staged_archive)?;
    staging.publish(&[PathBuf::from(report::ARCHIVE_FILE)])?;

    Ok(OutputSummary {
        report,
        symbolize: symbolized.stats,
        samples_shown: samples.len(),
        archive: dir.join(report::ARCHIVE_FILE),
    })
}

/// Writes bytes to a path that must not exist yet (never through a symlink).
pub fn write_new(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    let mut f = report::create_output(path).with_context(|| format!("cannot create {}", path.display()))?;
    f.write_all(bytes).with_context(|| format!("cannot write {}", path.display()))
}

/// A private folder inside the output directory; files are made there and renamed into the directory.
struct Staging {
    dir: PathBuf,
    path: PathBuf,
}

impl Staging {
    fn create(dir: &Path) -> Result<Self> {
        let path = dir.join(format!(".profcpu-staging-{}", std::process::id()));
        if path.symlink_metadata().is_ok() {
            std::fs::remove_dir_all(&path).with_context(|| format!("cannot remove stale {}", path.display()))?;
        }
        std::fs::create_dir(&path).with_context(|| format!("cannot write into {}", dir.display()))?;
        Ok(Staging { dir: dir.to_owned(), path })
    }

    fn path(&self) -> &Path {
        &self.path
    }

    /// Renames the given staged files over their final names (a rename replaces a symlink, never follows it).
    fn publish(&self, files: &[PathBuf]) -> Result<()> {
        for f in files {
            let target = self.dir.join(f);
            if target.is_dir() && !target.is_symlink() {
                bail!("{} is a directory; remove it to regenerate", target.display());
            }
            std::fs::rename(self.path.join(f), &target)
                .with_context(|| format!("cannot move the new {} into place", target.display()))?;
        }
        Ok(())
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Prints the hottest frames (to stderr: stdout is kept for the output folder's path, for scripts).
pub fn print_summary(summary: &OutputSummary) {
    eprintln!("{}", summary.report.top);
}
