//! The stages after recording, shared by `collect` and `postprocess`: perf.data → symbolize → report → archive.
//!
//! One pass over the recording: each sample is named on this thread, then shown through the view, rendered as perf
//! script text and folded on the `report` thread ([`sample_sink`]), and dropped back on this one when its batch is
//! reused, so memory does not grow with the recording. Beside it, one thread writes perf_script.out and another
//! compresses it into prof.tar.gz as it comes ([`script_file`], with [`crate::archive::deflate`] and
//! [`crate::archive::tarball`]), while others compress perf.data and what names the frames into the archive; the
//! small outputs join it at the end.
//! docs/ARCHITECTURE.md draws these threads.
//!
//! Outputs are written into a fresh staging folder inside the output directory and then renamed into place, so a
//! regenerated file replaces the old one (or a planted symlink) instead of writing through it, and a failure never
//! leaves a half-written file under the final name. The output directory, the staging folder and `symbols/` are
//! reached only through their descriptors ([`crate::fs::Dir`], [`Staging`]); what is read from them (perf.data,
//! the naming files) must be a regular file, not a symlink, within its size cap ([`crate::fs::input`]).

mod earlier;
mod handoff;
mod perf_data_follower;
mod sample_sink;
mod script_file;

pub use perf_data_follower::PerfDataFollower;

use crate::archive::deflate::Codec;
use crate::archive::tarball::{self, FileStamp, Indexed, Segment, StreamedEntries, Tarball};
use crate::fs::{Dir, Kind, Limit, Staging};
use crate::perf_data::echoes::StackEchoes;
use crate::perf_data::{EventDesc, PerfDataReader, PerfDataWriter, Record, SampleFormats};
use crate::report::flamegraph::{self, FlameOptions};
use crate::report::folded::Folded;
use crate::report::metadata_txt::Metadata;
use crate::report::profile::{Profile, RecordingFacts, ReportOptions};
use crate::report::top::{self, TopFrames};
use crate::report::view::View;
use crate::report::{self, Weight};
use crate::symbolize::{
    Capture, CaptureSummary, LiveNaming, Measure, ResolvedSample, SymbolizeOptions, SymbolizeStats, Symbolizer,
};
use anyhow::{anyhow, bail, Context, Result};
use earlier::{Made, SameOrNew};
use flate2::Compression;
use sample_sink::{Chunk, SampleSink};
use std::collections::{BTreeMap, HashSet};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Instant, SystemTime};

pub const PERF_DATA_FILE: &str = "perf.data";

pub struct OutputRequest<'a> {
    /// The output directory; perf.data (and `symbols/` when captured) are in it.
    pub dir: &'a Dir,
    pub recording: Recording,
    pub names: FrameNames,
    pub report: ReportOptions,
    /// Overrides the flame graph's title.
    pub title: Option<String>,
}

/// The perf.data the outputs are made from.
pub enum Recording {
    /// Complete, opened by [`open_recording`].
    Complete {
        file: File,
        /// Its entry in the archive, when it was compressed while recording ([`PerfDataFollower`]).
        perf_data_segments: Option<Vec<Segment>>,
        metadata: MetadataSource,
    },
    /// Still being recorded: read as it is written (an on-CPU recording, named by a capture's
    /// [`LiveNaming`]) and compressed into the archive as it grows; what is known only at its end comes through
    /// `end`. With `unwind_stack_copies`, a recording with stack copies is replaced by one with the callchains
    /// they were unwound into (see [`UnwoundPerfData`]).
    Following { reader: Box<PerfDataReader>, end: mpsc::Receiver<RecordingEnd>, unwind_stack_copies: bool },
}

/// What a recording named while it was written adds once it is over.
pub struct RecordingEnd {
    pub metadata: Metadata,
}

/// Where the frames' names come from.
pub enum FrameNames {
    /// The sources these options say: a folder's `symbols/`, or the live system (postprocess).
    Options(SymbolizeOptions),
    /// A collection's capture, while its target's files are still there: the pass that names the samples for the
    /// outputs is the one that finds what they used and saves it into `symbols/` (collect), so each sample is named
    /// once. `left` is what a second signal leaves once `symbols/` is complete (see [`crate::interrupt`]).
    Capture { capture: Box<Capture>, left: String },
    /// A capture naming the samples while they are recorded ([`Recording::Following`]).
    Live { naming: Box<LiveNaming>, left: String },
}

/// Names the samples as [`FrameNames`] says.
enum Namer {
    Symbolizer(Box<Symbolizer>),
    Capture(Box<Capture>, String),
    Live(Box<LiveNaming>, String),
}

impl Namer {
    fn new(names: FrameNames) -> Result<Namer> {
        Ok(match names {
            FrameNames::Options(opts) => Namer::Symbolizer(Box::new(Symbolizer::new(&opts)?)),
            FrameNames::Capture { capture, left } => Namer::Capture(capture, left),
            FrameNames::Live { naming, left } => Namer::Live(naming, left),
        })
    }

    /// Whether `symbols/` is complete before the samples are named (else it is written by naming them).
    fn symbols_ready(&self) -> bool {
        matches!(self, Namer::Symbolizer(_))
    }

    /// Names every sample, handing each to `f`. Gives back a symbolizer once done with it, to be freed when the
    /// outputs are in place ([`free_in_background`]). A namer that names live writes `unwound_into` as it goes (see
    /// [`UnwoundPerfData`]).
    fn for_each_sample(
        self,
        reader: &PerfDataReader,
        unwound_into: Option<&mut PerfDataWriter>,
        f: impl FnMut(ResolvedSample) -> Result<()>,
    ) -> (Result<SymbolizeStats>, Option<Box<Symbolizer>>) {
        match self {
            Namer::Symbolizer(mut symbolizer) => (symbolizer.for_each_sample(reader, f), Some(symbolizer)),
            Namer::Capture(capture, left) => (capture.finish(reader, f).map(|saved| symbols_saved(saved, left)), None),
            Namer::Live(naming, left) => {
                (naming.for_each_sample(reader, unwound_into, f).map(|saved| symbols_saved(saved, left)), None)
            }
        }
    }
}

/// A capture's pass is over: says what it saved, and lets a second signal stop the run from now on (perf.data and
/// `symbols/` are complete), leaving `left`.
fn symbols_saved(saved: CaptureSummary, left: String) -> SymbolizeStats {
    tracing::info!(
        "saved {} perf map(s), {} jitdump(s) and symbols of {} file(s) ({} KB) into {} in {:.1?}",
        saved.perf_maps,
        saved.jitdumps,
        saved.dsos,
        saved.bytes / 1024,
        saved.dir.path().display(),
        saved.finish_time,
    );
    crate::interrupt::set_stage(crate::interrupt::Stage::Writing { left });
    saved.stats
}

/// Where metadata.txt's facts come from.
pub enum MetadataSource {
    /// Known to the caller (the recorder, or a metadata.txt read back).
    Given(Box<Metadata>),
    /// Whatever perf.data says about itself (a recording from `perf record`): host, kernel, event, frequency,
    /// samples, lost, duration, and the process with most samples.
    FromRecording,
}

/// What [`generate`] wrote and found.
pub struct OutputSummary {
    /// Files written, relative to the output directory, in writing order (prof.tar.gz not included).
    pub files: Vec<PathBuf>,
    pub top: TopFrames,
    /// Samples that made it into folded_stacks.out.
    pub folded_samples: u64,
    /// Things the user should know (e.g. no flame graph for an empty profile).
    pub notes: Vec<String>,
    pub symbolize: SymbolizeStats,
    pub samples_shown: u64,
    pub archive: PathBuf,
}

/// How many chunks of script text may wait for the writer thread.
const CHUNKS_IN_FLIGHT: usize = 3;

/// Named samples handed from the symbolizer to the report stage at a time, and how many such batches may wait:
/// enough that handing over costs little against naming and rendering them.
const BATCH_SAMPLES: usize = 512;
const BATCHES_IN_FLIGHT: usize = 4;

/// How many samples ahead of the one it renders the report stage fetches a sample's frames into its caches.
const REPORT_PREFETCH_AHEAD: usize = 4;

/// Symbolizes `dir/perf.data` and (re)writes perf_script.out, folded_stacks.out, flamegraph.svg, metadata.txt and
/// prof.tar.gz in `dir`.
pub fn generate(req: OutputRequest) -> Result<OutputSummary> {
    let begun = Instant::now();
    crate::fs::raise_open_files_limit();
    let dir = req.dir;
    let perf_data = dir.shown(PERF_DATA_FILE);
    let (reader, mut input, unwind_stack_copies) = match req.recording {
        Recording::Complete { file, perf_data_segments, metadata } => {
            let reader = PerfDataReader::from_file(&file, &perf_data)?;
            let len = file.metadata().with_context(|| format!("cannot read {}", perf_data.display()))?.len();
            if let Some(cut) = cut_short(&reader, len) {
                if !has_a_sample(&reader) {
                    bail!(
                        "{} is {cut} before its first complete sample: there is nothing to show",
                        perf_data.display()
                    );
                }
            }
            // Archived from its own handle (read in pieces, not through the reader's mapping, so it does not stay
            // resident).
            (reader, Input::Complete { file, perf_data_segments, metadata }, false)
        }
        Recording::Following { reader, end, unwind_stack_copies } => {
            let unwind = unwind_stack_copies && reader.events().iter().any(|e| e.attr.has_stack_copies());
            (*reader, Input::Following(end), unwind)
        }
    };
    let mut namer = Namer::new(req.names)?;
    if let Namer::Symbolizer(symbolizer) = &mut namer {
        symbolizer.prefetch(&reader);
    }
    // What the recording measured decides how samples weigh, whatever the caller asked for: off-CPU and wall-clock
    // recordings are weighted in time.
    let measure = Measure::of(&reader);
    let mut report_opts = req.report;
    if measure != Measure::OnCpu {
        report_opts.weight = Weight::Time;
    }

    // An abort (a second Ctrl+C while the outputs are written) removes it, so no half-made outputs stay behind.
    let staging = crate::interrupt::remove_until_published(&dir.shown(Staging::name()), || Staging::create(dir))?;
    let script_path = staging.dir().shown(report::PERF_SCRIPT_FILE);
    let script_file = staging
        .dir()
        .create_file(report::PERF_SCRIPT_FILE)
        .with_context(|| format!("cannot create {}", script_path.display()))?;
    let archive = Tarball::create(staging.dir(), report::ARCHIVE_FILE)?;
    let mut unwound = match unwind_stack_copies {
        true => Some(UnwoundPerfData::create(staging.dir(), &reader)?),
        false => None,
    };
    // A recording followed as it is written goes into the archive as it grows, far into the file, while
    // perf_script.out is streamed at its start; its unwound copy instead, as the naming writes it.
    let followed = match (reader.following_progress(), &unwound) {
        (Some(_), Some(UnwoundPerfData { writer: w })) => {
            Some((staging.dir(), w.data_offset(), SampleFormats::of(w.events()), w.progress()))
        }
        (Some(progress), None) => {
            Some((dir, reader.data_range().start, reader.sample_formats().clone(), progress.clone()))
        }
        (None, _) => None,
    };
    let mut follower = match followed {
        Some((in_dir, data_start, formats, progress)) => {
            let far = archive.far_entry(perf_data_follower::head_len(data_start))?;
            Some(PerfDataFollower::start(in_dir, data_start, formats, progress, Some(far))?)
        }
        None => None,
    };
    // Chunks of script text go from this thread to the writer, then to the compressor, then back for reuse.
    let (to_writer, chunks) = mpsc::sync_channel::<Chunk>(CHUNKS_IN_FLIGHT);
    let (to_compressor, written) = mpsc::sync_channel::<script_file::Written>(CHUNKS_IN_FLIGHT);
    let (recycle, recycled) = mpsc::channel::<Chunk>();

    let title = req.title;
    let (profile, (stats, symbolizer), mut archive, script_len, small) = std::thread::scope(|scope| -> Result<_> {
        // perf.data and what names the frames go into the archive as they are: compressing them needs nothing
        // from the other stages. Each on its own thread: with stack copies, perf.data alone can take as long as
        // naming every sample (a collection's was compressed while it was recorded).
        let perf_data_entry = match &mut input {
            Input::Complete { perf_data_segments: segments @ Some(_), .. } => {
                Some(PerfDataEntry::Ready(segments.take().unwrap_or_default()))
            }
            Input::Complete { file, .. } => {
                let file = file.try_clone().with_context(|| format!("cannot read {}", perf_data.display()))?;
                let (reader, staging, shown) = (&reader, &staging, &perf_data);
                Some(PerfDataEntry::Compressing(spawn_named(scope, "archive-perf-data", move || {
                    compress_perf_data(reader, file, shown, dir, staging)
                })?))
            }
            // Compressed into the archive while it is recorded, by the follower.
            Input::Following(_) => None,
        };
        let compress_naming = move || -> Result<Segment> {
            let started = Instant::now();
            let segment = naming_segment(dir)?;
            tracing::debug!("naming files compressed in {:.1?} ({})", started.elapsed(), thread_cpu());
            Ok(segment)
        };
        // A capture writes symbols/ as it names the samples: compressed after them (trimmed, it takes a few ms).
        let naming_segment = match namer.symbols_ready() {
            true => Some(spawn_named(scope, "archive-naming", move || {
                yield_to_naming();
                compress_naming()
            })?),
            false => None,
        };
        // The perf_script.out of an earlier run is taken as soon as this run has samples to show (not before: a
        // `-pid` that selects nothing keeps it) and written over; one that may not be (not a plain file of ours)
        // is deleted meanwhile, as freeing the page cache of a 100 MB file is the slowest file operation of a run.
        // The name stays empty until the new file is published; a run that fails after this point leaves no
        // perf_script.out (the earlier run's prof.tar.gz still holds it) and every other output as it was.
        let set_aside_old_script = staging.set_aside(report::PERF_SCRIPT_FILE);
        let writer = spawn_named(scope, "script-writer", move || {
            script_file::write(script_file, &script_path, chunks, to_compressor, || {
                match set_aside_old_script()?.write_over(report::PERF_SCRIPT_FILE) {
                    Ok(file) => Some(file),
                    Err(old) => {
                        // Without a thread to spare, it goes with the staging folder at the end.
                        let _ = spawn_named(scope, "old-script-rm", move || old.remove());
                        None
                    }
                }
            })
        })?;
        // perf.data's entry and the naming files' follow perf_script.out in the archive. Unless the recording is
        // followed (its entry is complete only at its end), the compressor appends them as soon as perf_script.out
        // is compressed, while the flame graphs are drawn.
        let (early_perf_data, late_perf_data) = match perf_data_entry {
            Some(entry) => (Some(entry), None),
            None => (None, Some(follower.take().expect("started for a followed recording"))),
        };
        // The naming files' entry goes with perf.data's when a thread of its own compresses it.
        let (early_naming, late_naming) = match (&early_perf_data, naming_segment) {
            (Some(_), Some(thread)) => (Some(thread), None),
            (_, naming) => (None, naming),
        };
        let naming_appended = early_naming.is_some();
        let staged = staging.dir();
        let compressor = spawn_named(scope, "script-deflate", move || -> Result<(Tarball, u64)> {
            let (mut archive, script_len) =
                script_file::compress(written, recycle, archive, staged, || earlier_archive(dir))?;
            if let Some(entry) = early_perf_data {
                archive.append_indexed(Indexed::Recording, &entry.segments()?)?;
            }
            if let Some(thread) = early_naming {
                archive.append_indexed(Indexed::Naming, &[joined_naming(thread)?])?;
            }
            Ok((archive, script_len))
        })?;
        // Named samples go from this thread to the report stage's in batches, and the batches come back empty.
        let (to_report, batches) = mpsc::sync_channel::<Vec<ResolvedSample>>(BATCHES_IN_FLIGHT);
        let (return_batch, returned_batches) = mpsc::channel::<Vec<ResolvedSample>>();
        let report_opts = &report_opts;
        let report = spawn_named(scope, "report", move || -> Result<Profile> {
            let started = Instant::now();
            let mut sink = SampleSink::new(report_opts, to_writer, recycled);
            while let Ok(mut batch) = handoff::recv(&batches) {
                for i in 0..batch.len() {
                    if let Some(ahead) = batch.get(i + 2 * REPORT_PREFETCH_AHEAD) {
                        ahead.frames.prefetch_place();
                    }
                    if let Some(ahead) = batch.get(i + REPORT_PREFETCH_AHEAD) {
                        ahead.frames.prefetch_frames();
                    }
                    sink.take(&mut batch[i])?;
                }
                // Dropped by the naming thread, whose core holds the counts of the names it shares: dropped
                // here, every sample's shared names would move their counts between the cores.
                let _ = return_batch.send(batch);
            }
            let profile = sink.finish();
            tracing::debug!("rendered and folded the samples in {:.1?} ({})", started.elapsed(), thread_cpu());
            profile
        })?;
        // The symbolizer reports the reader's warnings (with everything else it finds).
        let started = Instant::now();
        let mut batch = Vec::with_capacity(BATCH_SAMPLES);
        let unwound_into = unwound.as_mut().map(|u| &mut u.writer);
        let (stats, symbolizer) = namer.for_each_sample(&reader, unwound_into, |s| {
            batch.push(s);
            if batch.len() == BATCH_SAMPLES {
                let mut next = returned_batches.try_recv().unwrap_or_else(|_| Vec::with_capacity(BATCH_SAMPLES));
                next.clear();
                // A report stage that stopped (its writer failed) says why when joined.
                handoff::send(&to_report, std::mem::replace(&mut batch, next))
                    .map_err(|_| anyhow!("the report stage stopped"))?;
            }
            Ok(())
        });
        if !batch.is_empty() {
            let _ = handoff::send(&to_report, batch);
        }
        drop(to_report);
        tracing::debug!("named the samples in {:.1?} ({})", started.elapsed(), thread_cpu());
        // The recording is complete once its samples are named: so is its unwound copy.
        let stats = match (unwound.take(), stats) {
            (Some(unwound), Ok(stats)) => unwound.finish(dir).map(|()| stats),
            (_, stats) => stats,
        };
        let streamed = report.join().map_err(|_| anyhow!("the report stage panicked"))?;
        // The profile is complete: its small outputs are made while perf_script.out is still written and
        // compressed (when naming failed, or the report stage because the writer did, their errors come first).
        let small = match (&streamed, &stats) {
            (Ok(profile), Ok(stats)) => {
                let ended = match &input {
                    Input::Following(end) => {
                        Some(end.recv().map_err(|_| anyhow!("the recording ended without its facts"))?)
                    }
                    Input::Complete { .. } => None,
                };
                let meta = match (&input, ended) {
                    (_, Some(ended)) => ended.metadata,
                    (Input::Complete { metadata: MetadataSource::Given(meta), .. }, None) => (**meta).clone(),
                    (_, None) => metadata_from_recording(&reader, &profile.facts, stats),
                };
                let meta = completed(meta, &reader, measure, stats);
                Some(small_outputs(profile, meta, report_opts, title, &staging))
            }
            _ => None,
        };
        // A failed writer or compressor (disk full) is the cause of any failure the stream then reports; a
        // failed compressor stops the writer too.
        let written = writer.join().map_err(|_| anyhow!("the perf script writer panicked"))?;
        let compressed = compressor.join().map_err(|_| anyhow!("the perf script compressor panicked"))?;
        let (mut archive, script_len) = compressed?;
        written?;
        let stats = stats.with_context(|| format!("cannot name the frames of {}", perf_data.display()))?;
        if let Some(follower) = late_perf_data {
            follower.finish()?.add_to(&mut archive)?;
        }
        if !naming_appended {
            let naming = match late_naming {
                Some(thread) => joined_naming(thread)?,
                None => compress_naming()?,
            };
            archive.append_indexed(Indexed::Naming, &[naming])?;
        }
        let profile = streamed?;
        let small = small.expect("made once naming and the report stage succeeded")?;
        Ok((profile, (stats, symbolizer), archive, script_len, small))
    })?;
    let SmallOutputs { written, kept, folded_segment, last_segment, notes, now } = small;
    for note in &notes {
        tracing::warn!("{note}");
    }

    // The archive: perf_script.out (streamed), perf.data, what names the frames (appended above), the folded stacks,
    // then the graphs and metadata.txt.
    archive.append(&folded_segment)?;
    archive.append(&last_segment)?;
    archive.finish(&tarball::tar_header(Path::new(report::PERF_SCRIPT_FILE), script_len, now, false)?)?;

    tracing::debug!("archive finished after {:.1?}", begun.elapsed());

    let mut files: Vec<PathBuf> = vec![report::PERF_SCRIPT_FILE.into()];
    files.extend(written);
    if unwind_stack_copies {
        files.push(PERF_DATA_FILE.into());
    }
    // An output the same as the earlier one stays where it is.
    let mut published: Vec<PathBuf> =
        files.iter().filter(|name| !kept.iter().any(|(same, _)| same == *name)).cloned().collect();
    published.push(report::ARCHIVE_FILE.into());
    // All outputs are replaced or none (an abort waits for this).
    crate::interrupt::publish(|| staging.publish(&published))?;
    for (name, file) in kept {
        // Dated now, as a file this run made.
        if let Err(e) = file.set_modified(SystemTime::now()) {
            tracing::debug!("cannot date {} now: {e}", dir.shown(&name).display());
        }
    }
    if !files.iter().any(|f| f.as_os_str() == report::FLAMEGRAPH_FILE) {
        // A graph from an earlier run would contradict the new folded stacks.
        remove_stale(dir, report::FLAMEGRAPH_FILE)?;
    }
    tracing::debug!("outputs in place after {:.1?} ({})", begun.elapsed(), thread_cpu());
    let summary = OutputSummary {
        files,
        top: top::from_folded(&profile.folded, 5),
        folded_samples: profile.folded.samples(),
        notes,
        symbolize: stats,
        samples_shown: profile.shown,
        archive: dir.shown(report::ARCHIVE_FILE),
    };
    free_in_background((symbolizer, reader, profile));
    Ok(summary)
}

/// A recording with stack copies written again, as it is named, with each copy replaced by the callchain it was
/// unwound into (what `perf inject --convert-callchain` makes of a `perf record --call-graph dwarf` file): about
/// a thirtieth of the size, every stack as profcpu names it for `perf report` too (perf's own unwinder stops at the
/// first JIT frame), and a postprocess that has nothing left to unwind. It replaces the recording when the outputs
/// are published.
struct UnwoundPerfData {
    writer: PerfDataWriter,
}

impl UnwoundPerfData {
    /// Creates it in `staging`, for the recording `reader` follows.
    fn create(staging: &Dir, reader: &PerfDataReader) -> Result<UnwoundPerfData> {
        let events = reader.events().iter().map(EventDesc::without_stack_copies).collect();
        Ok(UnwoundPerfData { writer: PerfDataWriter::create(staging, PERF_DATA_FILE, events)? })
    }

    /// Completes it once the recording in `dir` is complete: the recording's features, and the sample ids of the
    /// events opened after it began.
    fn finish(mut self, dir: &Dir) -> Result<()> {
        let shown = dir.shown(PERF_DATA_FILE);
        let recorded = open_recording(dir)?;
        let recorded = PerfDataReader::from_file(&recorded, &shown)?;
        for (i, event) in recorded.events().iter().enumerate() {
            // A target of many threads on many CPUs has tens of thousands.
            let known: HashSet<u64> =
                self.writer.events().get(i).map(|e| e.ids.iter().copied().collect()).unwrap_or_default();
            let added: Vec<u64> = event.ids.iter().copied().filter(|id| !known.contains(id)).collect();
            self.writer.add_ids(i, &added);
        }
        self.writer.finish(recorded.features())
    }
}

/// The outputs made from the finished profile, written into the staging folder and compressed for the archive:
/// the folded stacks, the flame graph(s) and metadata.txt.
struct SmallOutputs {
    /// Their names, the folded stacks' first.
    written: Vec<PathBuf>,
    /// Those whose earlier file holds the same bytes and stays (not in the staging folder).
    kept: Vec<KeptOutput>,
    folded_segment: Segment,
    /// The graphs and metadata.txt, ending the archive.
    last_segment: Segment,
    /// Things the user should know.
    notes: Vec<String>,
    /// The archive entries' modification time.
    now: u64,
}

/// `meta` with what only the recording and the naming know: the events, the mode, the switch-outs.
fn completed(mut meta: Metadata, reader: &PerfDataReader, measure: Measure, stats: &SymbolizeStats) -> Metadata {
    if meta.event.is_empty() {
        meta.event = reader.events().iter().map(|e| e.name.as_str()).collect::<Vec<_>>().join(",");
    }
    meta.mode = measure.name().to_string();
    if measure != Measure::OnCpu && meta.switch_outs.is_none() {
        meta.switch_outs = Some(stats.switch_outs);
    }
    meta
}

/// Makes the [`SmallOutputs`] of `profile` in the folder `into`, with `meta` (see [`completed`]): the folded
/// stacks on a thread of their own while the flame graphs are drawn (with many distinct stacks, both take tens of
/// ms), all while perf_script.out is still being written.
fn small_outputs(
    profile: &Profile,
    meta: Metadata,
    report_opts: &ReportOptions,
    title: Option<String>,
    staging: &Staging,
) -> Result<SmallOutputs> {
    let into = staging.dir();
    let Profile { folded, threads, facts, shown } = profile;
    let view = &report_opts.view;
    if *shown == 0 && facts.samples > 0 && (view.pid.is_some() || view.tid.is_some()) {
        bail!("{}", nothing_selected(view, facts));
    }
    let mut flame = FlameOptions::for_profile(&meta, report_opts.weight);
    if let Some(title) = title {
        flame.title = title;
    }
    let now = tarball::now();
    // Written, and compressed into one segment of the archive (the last one ends it).
    let archived = |files: &[OutputFile], last: bool| -> Result<Segment> {
        for (name, bytes) in files {
            into.write_file(name, bytes)?;
        }
        let entries: Vec<tarball::Entry> =
            files.iter().map(|(name, bytes)| tarball::Entry::File(name.clone(), bytes, now)).collect();
        Segment::of_entries(Codec::Miniz(Compression::fast()), &entries, last)
    };
    // Written and compressed a piece at a time: with nearly every stack distinct, the folded stacks are as large as
    // the recording. An earlier run's file that holds the same stacks stays in place instead ([`SameOrNew`]).
    let write_folded = || -> Result<(Vec<PathBuf>, Vec<KeptOutput>, Segment)> {
        let mut files = vec![(PathBuf::from(report::FOLDED_FILE), folded)];
        files.extend(threads.iter().map(|(tid, _, thread)| (report::thread_folded_file(*tid).into(), thread)));
        let mut archived = StreamedEntries::default();
        let mut kept = Vec::new();
        for (name, folded) in &files {
            let len = folded.text_len();
            let mut file = SameOrNew::start(staging, name, len)?;
            archived.begin(name, len, now)?;
            folded.write_in_pieces(FOLDED_PIECE, |piece, echoes| {
                file.write(piece)?;
                archived.feed_echoing(piece, echoes)
            })?;
            archived.end()?;
            if let Made::Kept(earlier) = file.finish()? {
                kept.push((name.clone(), earlier));
            }
        }
        Ok((files.into_iter().map(|(name, _)| name).collect(), kept, archived.finish()?))
    };
    let draw = || -> Result<Vec<OutputFile>> {
        let started = Instant::now();
        let mut graphs = Vec::new();
        if folded.total() > 0 {
            graphs.push((report::FLAMEGRAPH_FILE.into(), svg(folded, &flame)?));
        }
        for (tid, comm, thread) in threads {
            if thread.total() > 0 {
                graphs.push((report::thread_flamegraph_file(*tid).into(), svg(thread, &flame.for_thread(*tid, comm))?));
            }
        }
        tracing::debug!("flame graphs drawn in {:.1?}", started.elapsed());
        Ok(graphs)
    };
    // The graphs and metadata.txt are compressed while the folded stacks may still be.
    let ((folded_files, kept, folded_segment), (rest, last_segment)) = std::thread::scope(|scope| -> Result<_> {
        let folded = spawn_named(scope, "folded", write_folded)?;
        let mut rest = draw()?;
        rest.push((report::METADATA_FILE.into(), meta.to_string().into_bytes()));
        let last_segment = archived(&rest, true)?;
        Ok((folded.join().map_err(|_| anyhow!("writing the folded stacks panicked"))??, (rest, last_segment)))
    })?;
    let mut notes = Vec::new();
    if folded.total() == 0 {
        let why = if folded.is_empty() { "no samples with a stack" } else { "every sample has period 0" };
        notes.push(format!("{why}: flamegraph.svg was not written"));
    }
    let written = folded_files.into_iter().chain(rest.into_iter().map(|(name, _)| name)).collect();
    Ok(SmallOutputs { written, kept, folded_segment, last_segment, notes, now })
}

/// Frees what a run built (symbol tables, the recording's mapping, the stacks) on a thread of its own, so that the
/// caller goes on at once and a process that ends after the run does not wait for it: a few hundred thousand small
/// allocations and a mapping to undo, 0.2–0.3 ms of a 12 ms postprocess. Only for values whose drop frees memory and
/// does nothing else: the process may end before the thread has finished.
fn free_in_background<T: Send + 'static>(leftovers: T) {
    // A thread that cannot start drops them here, with the closure.
    let _ = std::thread::Builder::new().name("free".into()).spawn(move || drop(leftovers));
}

/// The archive entry of a complete recording: compressed while it was recorded, or being compressed by a thread. (A
/// recording followed as it is written has its entry made by its [`PerfDataFollower`].)
enum PerfDataEntry<'scope> {
    Ready(Vec<Segment>),
    Compressing(std::thread::ScopedJoinHandle<'scope, Result<Segment>>),
}

impl PerfDataEntry<'_> {
    fn segments(self) -> Result<Vec<Segment>> {
        match self {
            PerfDataEntry::Ready(segments) => Ok(segments),
            PerfDataEntry::Compressing(thread) => {
                Ok(vec![thread.join().map_err(|_| anyhow!("compressing perf.data panicked"))??])
            }
        }
    }
}

/// The naming files' segment, compressed by `thread`.
fn joined_naming(thread: std::thread::ScopedJoinHandle<'_, Result<Segment>>) -> Result<Segment> {
    thread.join().map_err(|_| anyhow!("compressing the naming files panicked"))?
}

/// The recording as [`generate`] takes it in.
enum Input {
    Complete { file: File, perf_data_segments: Option<Vec<Segment>>, metadata: MetadataSource },
    Following(mpsc::Receiver<RecordingEnd>),
}

/// Sets thread `tid`'s nice value (0: the calling thread); a refusal leaves it as it was.
pub(super) fn set_nice(tid: u32, nice: i32) {
    // SAFETY: setpriority changes only the scheduling priority of the thread named.
    unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice) };
}

/// Lowers the calling thread's priority: what it makes is wanted only when the archive is finished, while naming
/// the samples is what every other output waits for.
fn yield_to_naming() {
    set_nice(0, 10);
}

/// perf.data (complete, read by `reader`) compressed for the archive, with its stack copies' echoes. Its compressed
/// segment can be hundreds of MB: kept in a nameless file in `staging` until it joins the archive.
fn compress_perf_data(
    reader: &PerfDataReader,
    file: File,
    shown: &Path,
    dir: &Dir,
    staging: &Staging,
) -> Result<Segment> {
    let started = Instant::now();
    yield_to_naming();
    let meta = file.metadata().with_context(|| format!("cannot read {}", shown.display()))?;
    let (name, len, mtime) = (Path::new(PERF_DATA_FILE), meta.len(), tarball::mtime_of(&meta));
    // Regenerating the outputs of a folder: its archive may hold this very perf.data already.
    // Taken before the file is read: a change after it changes the stamp.
    let stamp = FileStamp::settled(&meta, SystemTime::now());
    let mut read_whole = false;
    let crc = || {
        read_whole = true;
        tarball::file_entry_crc(name, &file, len, mtime).ok()
    };
    let reused = earlier_archive(dir)
        .and_then(|archive| Segment::reused(archive, Indexed::Recording, tarball::file_entry_len(len), stamp, crc));
    if let Some(segment) = reused {
        tracing::debug!(
            "perf.data's entry taken from the earlier {} (the same by its {}) in {:.1?}",
            report::ARCHIVE_FILE,
            if read_whole { "CRC" } else { "stamp" },
            started.elapsed()
        );
        return Ok(segment);
    }
    let mut echoes = StackEchoes::new(reader, tarball::BLOCK as u64);
    let spill_name = ".perf.data.deflate";
    let spill_path = staging.dir().shown(spill_name);
    let spill = staging
        .dir()
        .scratch_file(spill_name)
        .with_context(|| format!("cannot create a scratch file in {}", staging.dir().path().display()))?;
    let segment =
        Segment::of_file(name, file, len, mtime, |at, bytes, out| echoes.scan(at, bytes, out), (spill, &spill_path))?
            .stamped(stamp);
    tracing::debug!(
        "perf.data compressed to {:.2} MB in {:.1?} ({})",
        segment.compressed.size() as f64 / 1e6,
        started.elapsed(),
        thread_cpu()
    );
    Ok(segment)
}

/// An output whose earlier file holds the same bytes, and that file (to be dated now once the outputs are in place).
type KeptOutput = (PathBuf, File);

/// A small output's name and bytes.
type OutputFile = (PathBuf, Vec<u8>);

/// Bytes of folded stacks made, written and compressed at a time.
const FOLDED_PIECE: usize = 256 << 10;

/// Starts a thread with a name (shown by `top -H`, `perf` and debuggers).
fn spawn_named<'scope, T: Send + 'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    name: &str,
    f: impl FnOnce() -> T + Send + 'scope,
) -> Result<std::thread::ScopedJoinHandle<'scope, T>> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn_scoped(scope, f)
        .with_context(|| format!("cannot start the {name} thread (out of memory or over the process limit?)"))
}

/// The calling thread's CPU time so far (user and system), for the stage timings of `-vv`. From the thread's CPU
/// clock, which is exact: `getrusage(RUSAGE_THREAD)` leaves out the running time slice (up to a scheduler tick, 4
/// ms here) and gave 0 ms for stages that took 3.
pub(crate) fn thread_cpu() -> String {
    match nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID) {
        Ok(t) => format!("thread CPU: {:.1} ms", t.tv_sec() as f64 * 1e3 + t.tv_nsec() as f64 / 1e6),
        Err(_) => "CPU time unknown".into(),
    }
}

fn svg(folded: &Folded, opts: &FlameOptions) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    flamegraph::write_svg(folded, opts, &mut out)?;
    Ok(out)
}

/// The archive segment of what names the frames: `symbols/`, or the perf maps and jitdumps beside a `perf record`
/// perf.data.
fn naming_segment(dir: &Dir) -> Result<Segment> {
    let mut naming_files = Vec::new();
    if dir.kind(report::SYMBOLS_DIR) == Some(Kind::Dir) {
        let symbols = dir
            .open_dir(report::SYMBOLS_DIR)
            .with_context(|| format!("cannot archive {}", dir.shown(report::SYMBOLS_DIR).display()))?;
        collect_tree(&symbols, Path::new(report::SYMBOLS_DIR), &mut naming_files)?;
    } else {
        for name in jit_files_beside(dir)? {
            naming_files.push(Naming::File(name.clone(), dir.clone(), name));
        }
    }
    let contents = naming_files.iter().map(Naming::read).collect::<Result<Vec<_>>>()?;
    let mut entries = Vec::new();
    for (naming, content) in naming_files.iter().zip(&contents) {
        entries.push(match (naming, content) {
            (Naming::Dir(name, mtime), _) => tarball::Entry::Dir(name.clone(), *mtime),
            (Naming::File(name, ..), Some((bytes, mtime))) => tarball::Entry::File(name.clone(), bytes, *mtime),
            (Naming::File(..), None) => continue,
        });
    }
    // The same files as the folder's archive holds: their compressed bytes are taken from it.
    let (len, crc) = tarball::entries_checksum(&entries)?;
    let reused =
        earlier_archive(dir).and_then(|archive| Segment::reused(archive, Indexed::Naming, len, None, || Some(crc)));
    if let Some(segment) = reused {
        tracing::debug!("the naming files' segment taken from the earlier {}", report::ARCHIVE_FILE);
        return Ok(segment);
    }
    Segment::of_entries(Codec::Probe, &entries, false)
}

/// The folder's prof.tar.gz from an earlier run, whose compressed parts this run may copy ([`Segment::reused`]).
fn earlier_archive(dir: &Dir) -> Option<File> {
    dir.open_input(report::ARCHIVE_FILE, Limit::NONE).ok().map(|(archive, _)| archive)
}

/// A file or folder of what names the frames (`symbols/`, or perf maps beside a `perf record` perf.data).
enum Naming {
    Dir(PathBuf, u64),
    /// Its path in the archive, the folder holding it and its name there.
    File(PathBuf, Dir, PathBuf),
}

impl Naming {
    /// A file's bytes and modification time, read as an input file (regular, not a symlink, within its cap);
    /// `None` for a folder.
    fn read(&self) -> Result<Option<(Vec<u8>, u64)>> {
        let Naming::File(_, dir, name) = self else { return Ok(None) };
        let is_jit_file = name.extension().is_some_and(|e| e == "map" || e == "dump");
        let limit = if is_jit_file { Limit::JIT_FILE } else { Limit::CAPTURE_TEXT };
        let (mut file, size) = dir.open_input(name, limit)?;
        let bytes = crate::fs::input::read_all(&mut file, size, limit)
            .map_err(|error| crate::fs::NamedInputError { path: dir.shown(name), error })?;
        let mtime = file.metadata().map(|m| tarball::mtime_of(&m)).unwrap_or(0);
        Ok(Some((bytes, mtime)))
    }
}

/// Folder `dir` (at `rel` in the archive) and everything in it, in name order: folders and regular files; anything
/// else (a symlink, a device) is left out with a warning.
fn collect_tree(dir: &Dir, rel: &Path, out: &mut Vec<Naming>) -> Result<()> {
    let st = nix::sys::stat::fstat(dir.fd()).with_context(|| format!("cannot archive {}", dir.path().display()))?;
    out.push(Naming::Dir(rel.to_owned(), st.st_mtime.max(0) as u64));
    let mut children = dir.list().with_context(|| format!("cannot list {}", dir.path().display()))?;
    children.sort();
    for child in children {
        let name = PathBuf::from(&child);
        match dir.kind(&name) {
            Some(Kind::Dir) => {
                let sub =
                    dir.open_dir(&name).with_context(|| format!("cannot archive {}", dir.shown(&name).display()))?;
                collect_tree(&sub, &rel.join(&name), out)?;
            }
            Some(Kind::File) => out.push(Naming::File(rel.join(&name), dir.clone(), name)),
            _ => tracing::warn!("{} is not a regular file: left out of the archive", dir.shown(&name).display()),
        }
    }
    Ok(())
}

/// How a recording's data section is cut short ("cut short (120 of 40960 bytes of records present)"), if it is.
fn cut_short(reader: &PerfDataReader, len: u64) -> Option<String> {
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
fn nothing_selected(view: &View, facts: &RecordingFacts) -> String {
    let pids = &facts.per_pid;
    let tids: BTreeMap<u32, u64> = facts
        .per_thread
        .iter()
        .filter(|((pid, _), _)| view.pid == Some(*pid))
        .map(|((_, tid), n)| (*tid, *n))
        .collect();
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
fn metadata_from_recording(reader: &PerfDataReader, facts: &RecordingFacts, stats: &SymbolizeStats) -> Metadata {
    let features = reader.features();
    let attr = &reader.events()[0].attr;
    // The process with most samples is the one the recording was about.
    let main = facts.per_pid.iter().max_by_key(|(pid, (n, _))| (*n, **pid));
    Metadata {
        host: features.hostname.clone().unwrap_or_default(),
        kernel: features.osrelease.clone().unwrap_or_default(),
        pid: main.map(|(pid, _)| *pid),
        comm: main.map(|(_, (_, comm))| comm.to_string()).unwrap_or_default(),
        command_line: String::new(),
        duration_secs: match facts.first_time {
            Some(first) if facts.last_time > first => Some((facts.last_time - first) as f64 / 1e9),
            _ => None,
        },
        frequency_hz: attr.is_freq().then(|| attr.sample_freq_or_period()),
        event: reader.events().iter().map(|e| e.name.as_str()).collect::<Vec<_>>().join(","),
        samples: facts.samples,
        lost: stats.lost_samples,
        ..Metadata::default()
    }
}

/// Removes an output an earlier run left (a file or a symlink, never what a symlink points to).
fn remove_stale(dir: &Dir, name: &str) -> Result<()> {
    match dir.kind(name) {
        Some(kind) if kind != Kind::Dir => {
            dir.remove_file(name).with_context(|| format!("cannot remove the outdated {}", dir.shown(name).display()))
        }
        _ => Ok(()),
    }
}

/// `perf-<pid>.map` and `jit-<pid>.dump` files saved beside a perf.data from `perf record` (regular files only),
/// so its archive names JIT frames wherever it is opened.
fn jit_files_beside(dir: &Dir) -> Result<Vec<PathBuf>> {
    let is_pid = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let mut found = Vec::new();
    for name in dir.list().with_context(|| format!("cannot list {}", dir.path().display()))? {
        let Some(name) = name.to_str() else { continue };
        let jit_file = name.strip_prefix("perf-").and_then(|n| n.strip_suffix(".map")).is_some_and(is_pid)
            || name.strip_prefix("jit-").and_then(|n| n.strip_suffix(".dump")).is_some_and(is_pid);
        if jit_file && dir.kind(name) == Some(Kind::File) {
            found.push(PathBuf::from(name));
        }
    }
    found.sort();
    Ok(found)
}

/// Opens a folder's perf.data for reading: a regular file, not a symlink (a link could lead the folder's owner's
/// way into any file root can read), with one line naming the fix otherwise.
pub fn open_recording(dir: &Dir) -> Result<File> {
    Ok(dir.open_input(PERF_DATA_FILE, Limit::NONE)?.0)
}

/// Prints the hottest frames (to stderr: stdout is kept for the output folder's path, for scripts).
pub fn print_summary(summary: &OutputSummary) {
    // Frame names come from the target's perf maps and files: escaped so a terminal shows them, not obeys them.
    eprintln!("{}", crate::escape::lines(&summary.top.to_string()));
}
