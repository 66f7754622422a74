//! The stages after recording, shared by `collect` and `postprocess`: perf.data → symbolize → report → archive.
//!
//! Outputs are written into a fresh staging folder inside the output directory and then renamed into place, so a
//! regenerated file replaces the old one (or a planted symlink) instead of writing through it, and a failure never
//! leaves a half-written file under the final name.

use crate::archive;
use crate::perf_data::{PerfDataReader, Record};
use crate::report::flamegraph::FlameOptions;
use crate::report::meta::Metadata;
use crate::report::view::View;
use crate::report::{self, ReportOptions, ReportSummary, Weight};
use crate::symbolize::{symbolize_file, ResolvedSample, SymbolizeOptions, SymbolizeStats};
use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub const PERF_DATA_FILE: &str = "perf.data";

pub struct OutputRequest<'a> {
    /// The output directory; perf.data (and `symbols/` when captured) are in it.
    pub dir: &'a Path,
    pub symbolize: SymbolizeOptions,
    pub view: View,
    pub per_thread: bool,
    /// Overrides the flame graph's title.
    pub title: Option<String>,
    pub metadata: MetadataSource,
}

/// Where metadata.txt's facts come from.
pub enum MetadataSource {
    /// Known to the caller (the recorder, or a metadata.txt read back).
    Given(Box<Metadata>),
    /// Whatever perf.data says about itself (a recording from `perf record`): host, kernel, event, frequency,
    /// samples, lost, duration, and the process with most samples.
    FromRecording,
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
    if let Some(cut) = cut_short(&reader, &perf_data) {
        if !has_a_sample(&reader) {
            bail!("{} is {cut} before its first complete sample: there is nothing to show", perf_data.display());
        }
    }
    // The symbolizer reports the reader's warnings (with everything else it finds).
    let symbolized = symbolize_file(&reader, &req.symbolize)
        .with_context(|| format!("cannot name the frames of {}", perf_data.display()))?;
    let samples = req.view.apply(&symbolized.samples);
    if samples.is_empty() && !symbolized.samples.is_empty() && (req.view.pid.is_some() || req.view.tid.is_some()) {
        bail!("{}", nothing_selected(&req.view, &symbolized.samples));
    }

    let mut meta = match req.metadata {
        MetadataSource::Given(meta) => *meta,
        MetadataSource::FromRecording => metadata_from_recording(&reader, &symbolized.samples, &symbolized.stats),
    };
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
    if !produced.iter().any(|f| f.as_os_str() == report::FLAMEGRAPH_FILE) {
        // A graph from an earlier run would contradict the new folded stacks.
        remove_stale(&dir.join(report::FLAMEGRAPH_FILE))?;
    }

    let mut entries: Vec<PathBuf> = vec![PERF_DATA_FILE.into()];
    entries.extend(produced.iter().cloned());
    if dir.join(report::SYMBOLS_DIR).is_dir() {
        entries.push(report::SYMBOLS_DIR.into());
    } else {
        entries.extend(jit_files_beside(dir)?);
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

/// How a recording's data section is cut short ("cut short (120 of 40960 bytes of records present)"), if it is.
fn cut_short(reader: &PerfDataReader, path: &Path) -> Option<String> {
    let len = std::fs::metadata(path).ok()?.len();
    let data = reader.header().data;
    let end = data.offset.saturating_add(data.size);
    (end > len)
        .then(|| format!("cut short ({} of {} bytes of records present)", len.saturating_sub(data.offset), data.size))
}

/// Whether at least one sample record can be read (stops at the first).
fn has_a_sample(reader: &PerfDataReader) -> bool {
    let mut found = false;
    let _ = reader.for_each_record(|r| {
        found = matches!(r, Record::Sample(_));
        if found {
            bail!("found");
        }
        Ok(())
    });
    found
}

/// The one line said when `-pid`/`-tid` select nothing: what the recording does have.
fn nothing_selected(view: &View, samples: &[ResolvedSample]) -> String {
    let mut pids: BTreeMap<u32, (u64, Arc<str>)> = BTreeMap::new();
    let mut tids: BTreeMap<u32, u64> = BTreeMap::new();
    for s in samples {
        pids.entry(s.pid).or_insert_with(|| (0, s.comm.clone())).0 += 1;
        if view.pid == Some(s.pid) {
            *tids.entry(s.tid).or_default() += 1;
        }
    }
    let wanted = match (view.pid, view.tid) {
        (Some(pid), Some(tid)) => format!("PID {pid} thread {tid}"),
        (Some(pid), None) => format!("PID {pid}"),
        (None, Some(tid)) => format!("thread {tid}"),
        (None, None) => "the selection".into(),
    };
    let listing = |items: Vec<String>, what: &str| {
        let more = items.len().saturating_sub(10);
        let mut text = items.into_iter().take(10).collect::<Vec<_>>().join(", ");
        if more > 0 {
            text.push_str(&format!(" and {more} more"));
        }
        format!("{what} with samples: {text}")
    };
    let have = if view.pid.is_some() && !tids.is_empty() {
        listing(tids.keys().map(u32::to_string).collect(), &format!("threads of PID {}", view.pid.unwrap_or(0)))
    } else {
        let mut by_count: Vec<_> = pids.iter().collect();
        by_count.sort_by(|a, b| b.1 .0.cmp(&a.1 .0).then(a.0.cmp(b.0)));
        listing(by_count.iter().map(|(pid, (_, comm))| format!("{pid} ({comm})")).collect(), "PIDs")
    };
    format!("the recording has no samples of {wanted}; {have} (nothing was written)")
}

/// metadata.txt for a recording without one.
fn metadata_from_recording(reader: &PerfDataReader, samples: &[ResolvedSample], stats: &SymbolizeStats) -> Metadata {
    let features = reader.features();
    let attr = &reader.events()[0].attr;
    let mut per_pid: BTreeMap<u32, (u64, Arc<str>)> = BTreeMap::new();
    for s in samples {
        per_pid.entry(s.pid).or_insert_with(|| (0, s.comm.clone())).0 += 1;
    }
    // The process with most samples is the one the recording was about.
    let main = per_pid.iter().max_by_key(|(_, (n, _))| *n);
    let (first, last) = (samples.first().map(|s| s.time), samples.last().map(|s| s.time));
    Metadata {
        host: features.hostname.clone().unwrap_or_default(),
        kernel: features.osrelease.clone().unwrap_or_default(),
        pid: main.map(|(pid, _)| *pid),
        comm: main.map(|(_, (_, comm))| comm.to_string()).unwrap_or_default(),
        command_line: String::new(),
        duration_secs: match (first, last) {
            (Some(a), Some(b)) if b > a => Some((b - a) as f64 / 1e9),
            _ => None,
        },
        frequency_hz: attr.is_freq().then(|| attr.sample_freq_or_period()),
        event: reader.events()[0].name.clone(),
        samples: samples.len() as u64,
        lost: stats.lost_samples,
        ..Metadata::default()
    }
}

/// Removes an output an earlier run left (a file or a symlink, never what a symlink points to).
fn remove_stale(path: &Path) -> Result<()> {
    match path.symlink_metadata() {
        Ok(m) if !m.is_dir() => {
            std::fs::remove_file(path).with_context(|| format!("cannot remove the outdated {}", path.display()))
        }
        _ => Ok(()),
    }
}

/// `perf-<pid>.map` and `jit-<pid>.dump` files saved beside a perf.data from `perf record` (regular files only),
/// so its archive names JIT frames wherever it is opened.
fn jit_files_beside(dir: &Path) -> Result<Vec<PathBuf>> {
    let is_pid = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))? {
        let entry = entry.with_context(|| format!("cannot list {}", dir.display()))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let jit_file = name.strip_prefix("perf-").and_then(|n| n.strip_suffix(".map")).is_some_and(is_pid)
            || name.strip_prefix("jit-").and_then(|n| n.strip_suffix(".dump")).is_some_and(is_pid);
        if jit_file && entry.file_type().is_ok_and(|t| t.is_file()) {
            found.push(PathBuf::from(name));
        }
    }
    found.sort();
    Ok(found)
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
