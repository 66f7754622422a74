//! The engine: replays a recording's records in time order, keeps every process's address space current, and
//! names each sample's frames from the right source (see [`sources`](super::sources)) — kallsyms for kernel
//! frames; jitdump, then perf map for JIT code; the mapped file's symbols for code in files (ELF symbols, a
//! ReadyToRun image's methods; unnamed code grouped by function, see [`dso`](super::dso)).

use super::address_space::{AddressSpace, FileId, MapKind, Mapping, Processes};
use super::dso::FileHit;
use super::kallsyms::KERNEL_MODULE;
use super::off_cpu::{IntervalPass, Intervals, SwitchOuts};
use super::options::SymbolizeOptions;
use super::sources::Sources;
use super::symbols_dir::Usage;
use super::unwind::{
    CfiFiles, CodeModule, JitFrame, LiveFile, ModuleSource, StackWalker, UnwindStats, UserRegs, WalkEnd,
};
use super::{Frame, FrameKind, FrameName, OffCpuState, ResolvedSample, Stack, RUNNABLE_FRAME};
use crate::perf_data::abi::{CONTEXT_GUEST_KERNEL, CONTEXT_GUEST_USER, CONTEXT_HV, CONTEXT_KERNEL, CONTEXT_MAX};
use crate::perf_data::abi::{CONTEXT_USER, MISC_CPUMODE_MASK, MISC_KERNEL};
use crate::perf_data::abi::{REGS_ABI_64, REG_X86_BP, REG_X86_IP, REG_X86_SP};
use crate::perf_data::Skimmed;
use crate::perf_data::{with_pager, BuildIdEntry, Pager, PerfDataReader, PerfDataWriter, ReadStats, Record, Sample};
use anyhow::Result;
use rustc_hash::FxHashMap;
use std::cell::Cell;
use std::fs::File;
use std::hash::BuildHasher;
use std::ops::Range;
use std::sync::Arc;

/// How far naming a recording that is still being written may go (see [`Symbolizer::for_each_sample_paced`]).
pub(crate) trait Pace {
    /// The latest sample time whose names are in place, after bringing `symbolizer`'s sources up to date (it may
    /// reload them). `last`: every record is read, and the rest is named next (it may wait for what that needs).
    fn named_up_to(&mut self, symbolizer: &mut Symbolizer, last: bool) -> u64;
}

/// Counters for the run's summary line and for tests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SymbolizeStats {
    pub samples: u64,
    pub frames: u64,
    pub kernel_frames: u64,
    pub native_frames_named: u64,
    pub native_frames_unnamed: u64,
    pub jit_frames_named: u64,
    pub jit_frames_unnamed: u64,
    pub unknown_frames: u64,
    /// Samples the kernel reported as lost (LOST / LOST_SAMPLES records).
    pub lost_samples: u64,
    /// What reading the data section skipped.
    pub read: ReadStats,
    /// Every distinct warning, in the order raised (each also logged once).
    pub warnings: Vec<String>,
    /// How the samples' stack copies were unwound.
    pub unwind: UnwindStats,
    /// Switch-outs handed on with their time off the CPU (see [`super::off_cpu`]).
    pub switch_outs: u64,
}

/// A cached name, and whether its address is JIT code (named from the jitdump first, whose names change over time).
struct CachedName {
    name: Arc<FrameName>,
    jit_code: bool,
    /// The [`Frame::id`] of the frame it names at its address as a leaf; one more as a caller (whose address is one
    /// past the byte looked up).
    id: u64,
}

impl CachedName {
    fn new(name: Arc<FrameName>, jit_code: bool) -> CachedName {
        // Unique in the process, so no two frames ever share one (every symbolizer of a test run included).
        static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(2);
        let id = NEXT_ID.fetch_add(2, std::sync::atomic::Ordering::Relaxed);
        CachedName { name, jit_code, id }
    }

    /// The frame at `addr`, looked up at `addr` as a leaf, else at the byte before it (where a caller at address 0,
    /// looked up at 0 too, gets no id: a caller at 1 has that one).
    fn frame(&self, addr: u64, leaf: bool) -> Frame {
        let id = match (leaf, addr) {
            (true, _) => self.id,
            (false, 0) => 0,
            (false, _) => self.id + 1,
        };
        Frame::in_range(addr, &self.name, id)
    }
}

/// A record to replay in time order, packed in 64 bits (a long recording has millions): a sample's offset in the
/// data section, or with this bit set the index of another record, or with both bits set a switch record (kept
/// only while switch-outs are timed: see [`switch_entry`]).
const REPLAY_RECORD: u64 = 1 << 63;
const REPLAY_SWITCH: u64 = 1 << 62;

/// A switch record as a timeline entry: the thread in the low 32 bits, leaving (bit 32), preempted (bit 33).
fn switch_entry(tid: u32, out: bool, preempted: bool) -> u64 {
    REPLAY_RECORD | REPLAY_SWITCH | (preempted as u64) << 33 | (out as u64) << 32 | tid as u64
}

/// A record read but not replayed yet (its round is not complete): a sample by its place in the data section
/// (decoded when it is named), another record decoded (boxed: a recording without rounds waits whole, and samples
/// are most of it).
struct Waiting {
    time: u64,
    offset: u64,
    record: Option<Box<Record>>,
}

const _: () = assert!(std::mem::size_of::<Waiting>() == 24, "a waiting sample takes 24 bytes");

/// When a record the replay applies (a mapping, a name, a fork or an exit) takes effect; `None` for any other.
/// Records without a time (no sample_id_all) keep their place after the previous one, timed `last_time`.
fn replayed_at(record: &Record, last_time: u64) -> Option<u64> {
    match record {
        Record::Mmap(_) | Record::Comm(_) | Record::Fork(_) | Record::Exit(_) => {
            Some(record.time().unwrap_or(last_time))
        }
        _ => None,
    }
}

/// Samples a loss record says were lost.
fn lost_by(record: &Record) -> u64 {
    match record {
        Record::Lost(l) => l.lost,
        Record::LostSamples { lost, .. } => *lost,
        _ => 0,
    }
}

/// How many replayed records apart the pages behind the replay are dropped (with stack copies of ~7 KB, about 2 MB:
/// the mapped pages of perf.data, not the work, are what a long recording's peak RSS is made of).
const RELEASE_EVERY: usize = 256;

/// Cache key: (address space id, its generation, lookup address). Kernel addresses use space 0.
type CacheKey = (u64, u64, u64);

/// A named callchain, for the next sample with the same chain in the same address space.
struct CachedStack {
    stack: Stack,
    /// Sample times at which the names hold (jitdump code can be replaced at an address).
    steady: Range<u64>,
    counts: FrameCounts,
}

/// Frames kept in the stack cache before it starts over (a profile of few distinct stacks stays cached whole; one
/// of many never holds more than this).
const STACK_CACHE_FRAMES: usize = 1 << 17;

/// Stacks remembered (by a hash of their key) while none is cached, to tell when samples start repeating stacks
/// again: about what the stack cache holds of stacks some 20 frames deep.
const SEEN_STACKS: usize = 1 << 13;

/// Samples over which the stack cache's hit rate is judged.
const HIT_RATE_SAMPLES: u32 = 4096;

/// The first judgement comes sooner: in a profile of distinct stacks, the later stages keep what they work out per
/// shared stack (a sample's text, its folded slot) until they see the stacks are no longer shared.
const FIRST_HIT_RATE_SAMPLES: u32 = 512;

/// How many frames of each sort a stack has (for [`SymbolizeStats`]).
#[derive(Clone, Copy, Default)]
struct FrameCounts {
    kernel: u64,
    native_named: u64,
    native_unnamed: u64,
    jit_named: u64,
    jit_unnamed: u64,
    unknown: u64,
}

impl FrameCounts {
    fn of(frames: &[Frame]) -> FrameCounts {
        let mut n = FrameCounts::default();
        for f in frames {
            match (f.kind(), f.symbol().is_some()) {
                (FrameKind::Kernel, _) => n.kernel += 1,
                (FrameKind::Native, true) => n.native_named += 1,
                (FrameKind::Native, false) => n.native_unnamed += 1,
                (FrameKind::Jit, true) => n.jit_named += 1,
                (FrameKind::Jit, false) => n.jit_unnamed += 1,
                (FrameKind::Unknown, _) => n.unknown += 1,
            }
        }
        n
    }
}

impl SymbolizeStats {
    fn count(&mut self, n: &FrameCounts) {
        self.samples += 1;
        self.frames += n.kernel + n.native_named + n.native_unnamed + n.jit_named + n.jit_unnamed + n.unknown;
        self.kernel_frames += n.kernel;
        self.native_frames_named += n.native_named;
        self.native_frames_unnamed += n.native_unnamed;
        self.jit_frames_named += n.jit_named;
        self.jit_frames_unnamed += n.jit_unnamed;
        self.unknown_frames += n.unknown;
    }
}

/// Recordings with more bytes of records than this are not kept mapped whole while they are replayed: a resident
/// recording of 10 MB was a third of postprocess's peak RSS.
const RELEASE_ABOVE: u64 = 4 << 20;

/// How many bytes of records the first pass reads between dropping the pages behind it.
const RELEASE_STEP: u64 = 2 << 20;

/// How many samples ahead of the one being named its record is fetched into the caches.
const PREFETCH_AHEAD: usize = 8;

/// x86-64 kernel addresses live in the upper half; used only when a chain carries no context marker.
const KERNEL_HALF: u64 = 0xffff_8000_0000_0000;

/// In a callchain rebuilt from a stack copy, where the walk was cut short: shown as a marker frame. An address
/// no code can have, user or kernel (non-canonical with 4- and 5-level page tables alike), so it can be written into
/// a recording's user callchain (see [`Symbolizer::for_each_sample_paced`]): perf shows it as an unknown frame,
/// where a context marker perf does not know would make it drop the whole chain.
const UNWIND_STOPPED: u64 = 0x8000_0000_0000_0000;

/// The marker frame's name.
pub const UNWIND_STOPPED_NAME: &str = "[unwinding stopped]";

pub struct Symbolizer {
    sources: Sources,
    processes: Processes,
    /// Keyed by small integers: a fast non-cryptographic hash (this lookup runs for every frame of every sample).
    cache: FxHashMap<CacheKey, CachedName>,
    /// Named stacks by (address space, generation, cpu mode, ip, callchain): most samples repeat a stack seen
    /// before, and then cost one lookup.
    stacks: FxHashMap<Box<[u64]>, CachedStack>,
    stack_cache_frames: usize,
    stack_key: Vec<u64>,
    /// Lookups and hits of the stack cache in the current stretch of [`HIT_RATE_SAMPLES`].
    stack_lookups: u32,
    stack_hits: u32,
    /// Whether stacks are cached and handed out as shared: only while samples do repeat stacks (in a profile where
    /// almost every stack is new, caching them and the per-stack work of later stages are all cost).
    share_stacks: bool,
    /// While stacks are not cached: the hashes of the keys of recent stacks, a slot each by the hash's low bits,
    /// which tell the hit rate a cache would have.
    seen: Vec<u64>,
    /// Whether the hit rate was judged once.
    judged: bool,
    usage: Option<Usage>,
    stats: SymbolizeStats,
    kernel_module: Arc<str>,
    unknown_module: Arc<str>,
    hidden_kernel: Arc<str>,
    /// The frames that stand for no code: where a walk stopped, atop a runnable thread's stack.
    unwind_stopped: Frame,
    runnable: Frame,
    /// JIT code's names from the jitdump, by the address of the name its entry shares and its start (the name,
    /// held here, keeps that address its own).
    jit_names: FxHashMap<(usize, u64), Arc<FrameName>>,
    walker: StackWalker,
    cfi: CfiFiles,
    ignore_stack_copies: bool,
    /// The callchain a stack copy's walk rebuilt (reused), and whether the sample named last was named by it.
    unwound: Vec<u64>,
    last_unwound: bool,
}

impl Symbolizer {
    pub fn new(opts: &SymbolizeOptions) -> Result<Symbolizer> {
        let unknown_module: Arc<str> = Arc::from("[unknown]");
        Ok(Symbolizer {
            sources: Sources::new(opts)?,
            processes: Processes::default(),
            cache: FxHashMap::default(),
            stacks: FxHashMap::default(),
            stack_cache_frames: 0,
            stack_key: Vec::new(),
            stack_lookups: 0,
            stack_hits: 0,
            share_stacks: true,
            seen: Vec::new(),
            judged: false,
            usage: None,
            stats: SymbolizeStats::default(),
            kernel_module: Arc::from(KERNEL_MODULE),
            unwind_stopped: Frame::new(
                0,
                Some(UNWIND_STOPPED_NAME.into()),
                0,
                unknown_module.clone(),
                FrameKind::Unknown,
            ),
            runnable: Frame::new(0, Some(RUNNABLE_FRAME.into()), 0, unknown_module.clone(), FrameKind::Unknown),
            unknown_module,
            hidden_kernel: Arc::from("[kernel]"),
            jit_names: FxHashMap::default(),
            walker: StackWalker::default(),
            cfi: CfiFiles::new(opts.captured_dir.as_ref()),
            ignore_stack_copies: opts.ignore_stack_copies,
            unwound: Vec::new(),
            last_unwound: false,
        })
    }

    /// What the recording's header says of the files and the kernel it was made with: their build-ids (which
    /// find perf's saved kallsyms too) and the kernel release.
    fn learn_recording(&mut self, reader: &PerfDataReader) {
        self.add_build_ids(&reader.features().build_ids);
        self.sources.recorded_release = reader.features().osrelease.clone();
    }

    /// Build-ids the recorder stored (perf.data BUILD_ID feature): a live file whose build-id differs is not used.
    fn add_build_ids(&mut self, entries: &[BuildIdEntry]) {
        for e in entries {
            self.sources.build_ids.insert(e.filename.clone(), e.build_id.clone());
        }
    }

    /// Files the capture opened while their process lived (a container's files vanish with it).
    pub(crate) fn add_preopened(&mut self, files: impl IntoIterator<Item = (FileId, File)>) {
        self.sources.preopened.extend(files);
    }

    /// A capture's copies of JIT files are still written, under `lock`: read them holding it, and one may end in a
    /// record the JIT is still writing (not a file cut short). `None`: they are complete.
    pub(crate) fn set_jit_copies_growing(&mut self, lock: Option<Arc<std::sync::Mutex<()>>>) {
        self.sources.jit_copies_growing = lock;
    }

    /// Namespace PIDs a capture read while the processes lived (they may be gone when their perf maps are named).
    pub(crate) fn add_process_ids(
        &mut self,
        processes: &std::collections::BTreeMap<u32, super::symbols_dir::CapturedProcess>,
    ) {
        for (&pid, p) in processes {
            self.sources.nspids.entry(pid).or_insert(p.nspid);
        }
    }

    /// The JIT's perf maps, jitdumps and JIT frames have grown since they were loaded: they are loaded again when
    /// next needed, and what was named from them is forgotten.
    pub(crate) fn reload_jit_files(&mut self) {
        self.sources.forget_jit_files();
        self.cache.clear();
        self.jit_names.clear();
        self.walker.forget_walks();
        self.stacks.clear();
        self.stack_cache_frames = 0;
    }

    /// Remember which symbols the run used, for [`take_usage`](Self::take_usage).
    pub(crate) fn record_usage(&mut self) {
        self.usage = Some(Usage::default());
    }

    pub(crate) fn take_usage(&mut self) -> Option<Usage> {
        let mut usage = self.usage.take()?;
        usage.cfi = self.cfi.live_loaded().into_iter().map(|(file, cfi)| (file, self.walker.as_used(&cfi))).collect();
        Some(usage)
    }

    /// Names every sample of a recording and hands each to `f` as soon as it is named, in time order. An on-CPU
    /// recording is read once, a round at a time ([`replay_by_rounds`](Self::replay_by_rounds)); one whose
    /// switch-outs are timed keeps an index of every record (see [`replay_timed`](Self::replay_timed)). Neither
    /// keeps samples, so memory does not grow with the length of the recording. Returns the run's counters and
    /// warnings. An error from `f` ends the run.
    pub fn for_each_sample(
        &mut self,
        reader: &PerfDataReader,
        f: impl FnMut(ResolvedSample) -> Result<()>,
    ) -> Result<SymbolizeStats> {
        self.for_each_sample_paced(reader, None, None, f)
    }

    /// Starts reading the jitdump `record` maps, if it maps one, on a thread of its own: the samples after it will
    /// want it at once.
    fn read_jitdump_ahead(&mut self, record: &Record) {
        if let Record::Mmap(m) = record {
            if super::address_space::is_jitdump_path(&m.filename) {
                self.sources.prefetch_jitdump(m.pid, &m.filename);
            }
        }
    }

    /// Starts reading what naming `reader`'s first samples will wait for, each on a thread of its own: the kernel's
    /// symbols, and the jitdumps the recording shows mapped before its first sample. Called as soon as the
    /// recording is open, it overlaps them with setting up the stages around naming;
    /// [`for_each_sample`](Self::for_each_sample) calls it too, for callers that did not (each source starts once).
    pub fn prefetch(&mut self, reader: &PerfDataReader) {
        self.learn_recording(reader);
        // The jitdumps first: the samples of a JIT's threads wait for them before anything else, and a thread
        // started while every CPU is busy can wait behind this one until it blocks (1–2 ms on 2 CPUs). Naming a
        // `perf record` folder of the API took 0.4–0.7 ms less this way round (60 alternating runs).
        // A recording still being written is not waited on here.
        if reader.following_progress().is_none() {
            let _first_sample = reader.skim_records(|_, record| match record {
                Skimmed::Sample { .. } => Err(anyhow::anyhow!("the first sample")),
                Skimmed::Record(record) => {
                    self.read_jitdump_ahead(&record);
                    Ok(())
                }
            });
        }
        if reader.events().iter().any(|e| !e.attr.excludes_kernel()) {
            self.sources.prefetch_kernel();
        }
    }

    /// [`for_each_sample`](Self::for_each_sample) of an on-CPU recording still being written (a reader
    /// [`following`](PerfDataReader::following) it): `pace` says how far naming may go. With `unwound_into` (its
    /// events those of `reader` [`without_stack_copies`](crate::perf_data::EventDesc::without_stack_copies)), the
    /// recording is written there again as it is replayed, in time order, a round at a time: every record as it
    /// is, but each sample with the callchain its stack copy was unwound into, instead of the copy.
    pub(crate) fn for_each_sample_paced(
        &mut self,
        reader: &PerfDataReader,
        mut pace: Option<&mut dyn Pace>,
        mut unwound_into: Option<&mut PerfDataWriter>,
        mut f: impl FnMut(ResolvedSample) -> Result<()>,
    ) -> Result<SymbolizeStats> {
        self.prefetch(reader);
        for w in reader.warnings() {
            self.warn(format!("perf.data: {w}"));
        }
        let event_names: Vec<Arc<str>> = reader.events().iter().map(|e| super::name_limit::cap_arc(&e.name)).collect();
        let switch_outs = SwitchOuts::of(reader);
        if switch_outs.untimed() {
            self.warn(
                "the recording's sched:sched_switch samples cannot be timed: it has no context-switch records (record \
                 with `profcpu collect -mode offcpu`, or `perf record --switch-events`); each counts as a sample"
                    .to_string(),
            );
        }
        let read = match switch_outs.measure() {
            super::Measure::OnCpu => {
                self.replay_by_rounds(reader, &mut pace, &mut unwound_into, &event_names, &mut f)?
            }
            _ if pace.is_some() => anyhow::bail!("only an on-CPU recording is named while it is written"),
            _ if unwound_into.is_some() => anyhow::bail!("only an on-CPU recording is written with unwound stacks"),
            _ => self.replay_timed(reader, &switch_outs, &event_names, &mut f)?,
        };
        // What only the replay needed goes now, before the stages that follow it take their memory.
        reader.release_data_before(u64::MAX);
        self.stacks = FxHashMap::default();
        self.stack_cache_frames = 0;
        for problem in read.problems() {
            self.warn(format!("perf.data: {problem}"));
        }
        self.stats.read = read;
        for w in std::mem::take(&mut self.cfi.warnings) {
            self.warn(w);
        }
        let u = self.stats.unwind;
        if u.walked > 0 {
            tracing::info!(
                "unwound {} stack copies: {} to the outermost frame, {} joined to the frame-pointer chain, {} kept the \
                 longer frame-pointer chain, {} cut short",
                u.walked,
                u.complete,
                u.joined,
                u.frame_pointers,
                u.stopped
            );
        }
        let mut stats = std::mem::take(&mut self.stats);
        stats.warnings = std::mem::take(&mut self.sources.warnings.list);
        Ok(stats)
    }

    /// Replays an on-CPU recording as it is read, a round at a time: the recorder ends each pass over its ring
    /// buffers with a `PERF_RECORD_FINISHED_ROUND`, and every record written after that was timed after the round
    /// before it ended. So at the end of a round, what is timed up to the latest time seen by the end of the round
    /// before is complete: it is sorted by (time, place in the file) and named (perf's rule for the same record).
    /// One pass over perf.data, with about two rounds of records waiting; a recording without rounds waits whole.
    fn replay_by_rounds(
        &mut self,
        reader: &PerfDataReader,
        pace: &mut Option<&mut dyn Pace>,
        unwound_into: &mut Option<&mut PerfDataWriter>,
        event_names: &[Arc<str>],
        f: &mut impl FnMut(ResolvedSample) -> Result<()>,
    ) -> Result<ReadStats> {
        let mut waiting: Vec<Waiting> = Vec::new();
        // Everything timed up to `complete_to` is read once the current round ends; `latest` is the latest time read.
        let (mut complete_to, mut latest, mut last_time) = (None, 0u64, 0u64);
        let mut lost = 0u64;
        let mut undecodable = 0u64;
        // One sample's buffers (its stack copy can be KBs), reused for every sample.
        let mut sample = Sample::default();
        // In a big recording, the pages behind what is still waiting are dropped as the pass goes on (they come
        // back from the file if needed), so that memory does not grow with the recording. A small one stays
        // mapped: mapping its pages again would cost more than the memory they take.
        let release = reader.header().data.size > RELEASE_ABOVE || reader.following_progress().is_some();
        // Mapping those pages before the pass reads them and dropping them behind it is done on a thread of its
        // own (see `Pager`).
        // The lowest place in the file of what waits (records are read in file order, so only a replay changes it).
        let mut lowest_waiting = None;
        let mut pass = |pager: Option<&Pager>| {
            reader.skim_records(|offset, r| {
                match r {
                    Skimmed::Sample { time, .. } => {
                        last_time = time;
                        latest = latest.max(time);
                        waiting.push(Waiting { time, offset, record: None });
                        lowest_waiting.get_or_insert(offset);
                    }
                    Skimmed::Record(Record::FinishedRound) => {
                        let paced = pace.as_mut().map_or(u64::MAX, |p| p.named_up_to(self, false));
                        if let Some(limit) = complete_to.map(|t: u64| t.min(paced)) {
                            let done = self.replay_waiting(
                                reader,
                                &mut waiting,
                                limit,
                                &mut sample,
                                unwound_into,
                                event_names,
                                f,
                            )?;
                            undecodable += done;
                            lowest_waiting = waiting.iter().map(|w| w.offset).min();
                        }
                        complete_to = Some(latest);
                    }
                    Skimmed::Record(r) => match replayed_at(&r, last_time) {
                        Some(time) => {
                            self.read_jitdump_ahead(&r);
                            last_time = time;
                            latest = latest.max(time);
                            waiting.push(Waiting { time, offset, record: Some(Box::new(r)) });
                            lowest_waiting.get_or_insert(offset);
                        }
                        None => {
                            lost += lost_by(&r);
                            // Written again in its place in time, though the replay does not apply it.
                            if unwound_into.is_some() {
                                let time = r.time().unwrap_or(last_time);
                                waiting.push(Waiting { time, offset, record: Some(Box::new(r)) });
                                lowest_waiting.get_or_insert(offset);
                            }
                        }
                    },
                }
                if let Some(pager) = pager {
                    pager.advance(offset, lowest_waiting.unwrap_or(offset));
                }
                Ok(())
            })
        };
        let mut read = if release { with_pager(reader, |pager| pass(Some(pager))) } else { pass(None) }?;
        if let Some(p) = pace {
            p.named_up_to(self, true);
        }
        undecodable +=
            self.replay_waiting(reader, &mut waiting, u64::MAX, &mut sample, unwound_into, event_names, f)?;
        read.undecodable_after_all(undecodable);
        self.stats.lost_samples = lost;
        Ok(read)
    }

    /// Names (or applies) the waiting records timed up to `limit`, in (time, place in the file) order, and takes
    /// them out of `waiting`, writing them into `unwound_into` as one round; returns how many of those samples did
    /// not decode.
    #[allow(clippy::too_many_arguments)]
    fn replay_waiting(
        &mut self,
        reader: &PerfDataReader,
        waiting: &mut Vec<Waiting>,
        limit: u64,
        sample: &mut Sample,
        unwound_into: &mut Option<&mut PerfDataWriter>,
        event_names: &[Arc<str>],
        f: &mut impl FnMut(ResolvedSample) -> Result<()>,
    ) -> Result<u64> {
        // Most of it is in order already (what waited from the round before, then each CPU's records in turn).
        waiting.sort_unstable_by_key(|w| (w.time, w.offset));
        let ready = waiting.partition_point(|w| w.time <= limit);
        let mut undecodable = 0;
        for i in 0..ready {
            // A sample's record is a few KB into a file much larger than the caches: fetching the ones the next
            // steps will read while this one is named hides most of the wait for memory (the header first, so that
            // its size is at hand when the rest is asked for).
            if let Some(w) = waiting.get(i + 2 * PREFETCH_AHEAD) {
                reader.prefetch_header(w.offset);
            }
            if let Some(w) = waiting.get(i + PREFETCH_AHEAD) {
                reader.prefetch_record(w.offset);
            }
            let w = &mut waiting[i];
            match w.record.take() {
                Some(record) => {
                    self.observe(&record);
                    if let Some(out) = unwound_into {
                        out.write_raw(reader.whole_record_at(w.offset)?)?;
                    }
                }
                None => {
                    let Ok(stack) = reader.sample_at(w.offset, sample) else {
                        undecodable += 1;
                        continue;
                    };
                    let event = reader.sample_formats().event_index(sample.id);
                    f(self.resolve(sample, stack, event_names[event].clone(), None))?;
                    if let Some(out) = unwound_into {
                        self.write_unwound(out, sample, event)?;
                    }
                }
            }
        }
        waiting.drain(..ready);
        if let Some(out) = unwound_into.as_mut().filter(|_| ready > 0) {
            out.finished_round()?;
        }
        Ok(undecodable)
    }

    /// Replays a recording whose switch-outs are timed: each switch-out weighs the time until its thread ran
    /// again, which may be recorded any number of rounds later, so a first pass indexes every record (16 bytes each)
    /// and sorts the index by time, then the replay follows it.
    fn replay_timed(
        &mut self,
        reader: &PerfDataReader,
        switch_outs: &SwitchOuts,
        event_names: &[Arc<str>],
        f: &mut impl FnMut(ResolvedSample) -> Result<()>,
    ) -> Result<ReadStats> {
        // (time, what): samples by their offset in the data section (decoded again when replayed), other records
        // by their index in `records`, switch records packed whole.
        let mut timeline: Vec<(u64, u64)> = Vec::new();
        let mut records: Vec<Record> = Vec::new();
        let mut last_time = 0u64;
        let mut lost = 0u64;
        // In a big recording, the pages each pass has read are dropped as it goes (they come back from the file if
        // needed), so that memory does not grow with the recording. A small one stays mapped: mapping its pages
        // again would cost more than the memory they take.
        let release = reader.header().data.size > RELEASE_ABOVE;
        let mut released_to = 0u64;
        let mut read = reader.skim_records(|offset, r| {
            if release && offset >= released_to + RELEASE_STEP {
                reader.release_data_before(offset);
                released_to = offset;
            }
            match r {
                Skimmed::Sample { time, .. } => {
                    last_time = time;
                    timeline.push((time, offset));
                }
                Skimmed::Record(Record::Switch(w)) => {
                    if let (Some(time), Some(tid)) = (w.sample_id.time, w.sample_id.tid) {
                        timeline.push((time, switch_entry(tid, w.out, w.preempt)));
                    }
                }
                Skimmed::Record(r) => match replayed_at(&r, last_time) {
                    Some(time) => {
                        last_time = time;
                        timeline.push((time, REPLAY_RECORD | records.len() as u64));
                        records.push(r);
                    }
                    None => lost += lost_by(&r),
                },
            }
            Ok(())
        })?;
        self.stats.lost_samples = lost;
        // Records with equal times keep their file order (switch entries have no place of their own to sort by).
        timeline.sort_by_key(|(t, _)| *t);
        let intervals = off_cpu_intervals(reader, &timeline, &records, switch_outs);
        // The replay drops the pages behind it as it moves on (records are written about in time order, so the
        // lowest offset still to come keeps rising).
        if release {
            reader.release_data_before(u64::MAX);
        }
        // The lowest sample offset from each stretch of RELEASE_EVERY replayed records on.
        let mut lowest_to_come = vec![u64::MAX; timeline.len() / RELEASE_EVERY + 1];
        let mut lowest = u64::MAX;
        for (i, &(_, replay)) in timeline.iter().enumerate().rev() {
            if replay & REPLAY_RECORD == 0 {
                lowest = lowest.min(replay);
            }
            if i % RELEASE_EVERY == 0 {
                lowest_to_come[i / RELEASE_EVERY] = lowest;
            }
        }
        // One sample's buffers (its stack copy can be KBs), reused for every sample.
        let mut sample = Sample::default();
        for (i, &(_, replay)) in timeline.iter().enumerate() {
            if release && i % RELEASE_EVERY == 0 {
                reader.release_data_before(lowest_to_come[i / RELEASE_EVERY]);
            }
            match replay & (REPLAY_RECORD | REPLAY_SWITCH) {
                0 => {
                    let Ok(stack) = reader.sample_at(replay, &mut sample) else {
                        read.undecodable_after_all(1);
                        continue;
                    };
                    let s = &mut sample;
                    let event = reader.sample_formats().event_index(s.id);
                    let mut off_cpu = None;
                    if switch_outs.times(event) {
                        // A switch-out weighs the time until its thread ran again; one without is left out.
                        let Some(interval) = intervals.get(i) else { continue };
                        off_cpu = Some(switch_outs.state(event, s, interval));
                        s.period = interval.end.saturating_sub(s.time);
                        self.stats.switch_outs += 1;
                    }
                    f(self.resolve(s, stack, event_names[event].clone(), off_cpu))?;
                }
                REPLAY_RECORD => self.observe(&records[(replay & !REPLAY_RECORD) as usize]),
                _ => {}
            }
        }
        if intervals.unmatched > 0 {
            tracing::info!(
                "{} switch-outs had no switch-in to time them (lost records, or a thread's last) and were left out",
                intervals.unmatched
            );
        }
        Ok(read)
    }

    /// Applies a non-sample record (call in time order).
    fn observe(&mut self, record: &Record) {
        match record {
            Record::Mmap(m) => {
                self.processes.on_mmap(m);
            }
            Record::Comm(c) => self.processes.on_comm(c),
            Record::Fork(t) => self.processes.on_fork(t),
            Record::Exit(t) => self.processes.on_exit(t),
            _ => {}
        }
    }

    /// The sample's callchain with its user part walked from the stack copy the sample carries, `stack` (into
    /// `self.unwound`); false when it carries none (or copies are ignored), and the kernel's callchain stands.
    fn unwind(&mut self, s: &Sample, stack: &[u8]) -> bool {
        if self.ignore_stack_copies {
            return false;
        }
        let Some(user) = s.user.as_ref().filter(|u| u.abi == REGS_ABI_64) else { return false };
        let (Some(ip), Some(sp), Some(bp)) = (user.reg(REG_X86_IP), user.reg(REG_X86_SP), user.reg(REG_X86_BP)) else {
            return false;
        };
        let Some(process) = self.processes.get(s.pid) else { return false };
        let space = (process.space.id, process.space.generation);
        let mut modules = Modules {
            pid: s.pid,
            processes: &self.processes,
            space: &process.space,
            last: Cell::new(None),
            sources: &mut self.sources,
            cfi: &mut self.cfi,
        };
        let walk = self.walker.walk(space, &mut modules, UserRegs { ip, sp, bp }, stack, &s.callchain);
        self.stats.unwind.count(walk.end);
        let kernel_part = s.callchain.iter().position(|&a| a == CONTEXT_USER).unwrap_or(s.callchain.len());
        self.unwound.clear();
        self.unwound.extend_from_slice(&s.callchain[..kernel_part]);
        self.unwound.push(CONTEXT_USER);
        self.unwound.extend_from_slice(&walk.frames);
        if walk.end == WalkEnd::Stopped {
            self.unwound.push(UNWIND_STOPPED);
        }
        true
    }

    /// Writes sample `s` of event `event`, just named, with the callchain its stack copy was unwound into (the one
    /// it was named by; as recorded if it was not unwound), in the layout of `out`'s events.
    fn write_unwound(&mut self, out: &mut PerfDataWriter, s: &mut Sample, event: usize) -> Result<()> {
        if !self.last_unwound {
            return out.write_sample(s, event);
        }
        std::mem::swap(&mut s.callchain, &mut self.unwound);
        let written = out.write_sample(s, event);
        std::mem::swap(&mut s.callchain, &mut self.unwound);
        written
    }

    /// Names one sample's frames, leaf first, context markers removed; a runnable switch-out's stack ends in a
    /// `[runnable]` frame.
    fn resolve(&mut self, s: &Sample, stack: &[u8], event: Arc<str>, off_cpu: Option<OffCpuState>) -> ResolvedSample {
        let comm = self.processes.comm(s.pid, s.tid);
        let space = match self.processes.get(s.pid) {
            Some(p) => (p.space.id, p.space.generation),
            None => (u64::MAX - s.pid as u64, 0),
        };
        // Unwinding first: the walked chain, not the recorded one, tells which stack this is.
        let unwound = self.unwind(s, stack);
        self.last_unwound = unwound;
        let chain = std::mem::take(&mut self.unwound);
        let callchain = if unwound { &chain[..] } else { &s.callchain[..] };
        let key = &mut self.stack_key;
        key.clear();
        let state = match off_cpu {
            None => 0,
            Some(OffCpuState::Blocked) => 1,
            Some(OffCpuState::Runnable) => 2,
        };
        key.extend_from_slice(&[space.0, space.1, (s.misc & MISC_CPUMODE_MASK) as u64 | state << 16, s.ip]);
        key.extend_from_slice(callchain);
        self.stack_lookups += 1;
        if self.stack_lookups == if self.judged { HIT_RATE_SAMPLES } else { FIRST_HIT_RATE_SAMPLES } {
            self.share_stacks = self.stack_hits * 4 >= self.stack_lookups;
            (self.stack_lookups, self.stack_hits, self.judged) = (0, 0, true);
        }
        let cached = match self.share_stacks {
            true => self.stacks.get(key.as_slice()).filter(|cached| cached.steady.contains(&s.time)),
            false => {
                let hash = rustc_hash::FxBuildHasher.hash_one(key.as_slice());
                if self.seen.is_empty() {
                    self.seen = vec![0; SEEN_STACKS];
                }
                let slot = &mut self.seen[hash as usize % SEEN_STACKS];
                self.stack_hits += (*slot == hash) as u32;
                *slot = hash;
                None
            }
        };
        let frames = match cached {
            Some(cached) => {
                self.stack_hits += 1;
                self.stats.count(&cached.counts);
                cached.stack.clone()
            }
            None => {
                let mut steady = 0..u64::MAX;
                let mut frames = self.resolve_frames(s, space, callchain, &mut steady);
                if off_cpu == Some(OffCpuState::Runnable) {
                    frames.insert(0, self.runnable.clone());
                }
                let counts = FrameCounts::of(&frames);
                self.stats.count(&counts);
                match self.share_stacks {
                    true => self.cache_stack(frames, steady, counts),
                    false => Stack::from(frames),
                }
            }
        };
        self.unwound = chain;
        ResolvedSample {
            pid: s.pid,
            tid: s.tid,
            cpu: s.cpu,
            time: s.time,
            period: s.period,
            off_cpu,
            comm,
            event,
            frames,
        }
    }

    /// A stack just named, shared and kept for the next sample with the same key (`self.stack_key`).
    fn cache_stack(&mut self, frames: Vec<Frame>, steady: Range<u64>, counts: FrameCounts) -> Stack {
        if self.stack_cache_frames + frames.len() > STACK_CACHE_FRAMES {
            self.stacks.clear();
            self.stack_cache_frames = 0;
        }
        self.stack_cache_frames += frames.len();
        let stack = Stack::shared(frames);
        let cached = CachedStack { stack: stack.clone(), steady, counts };
        self.stacks.insert(self.stack_key.as_slice().into(), cached);
        stack
    }

    /// Names a sample's frames in address space `space` (its id and generation); narrows `steady` to the times at
    /// which the same chain gets the same names.
    fn resolve_frames(
        &mut self,
        s: &Sample,
        space: (u64, u64),
        callchain: &[u64],
        steady: &mut Range<u64>,
    ) -> Vec<Frame> {
        let mut frames = Vec::with_capacity(callchain.len().max(1));
        let has_addresses = callchain.iter().any(|&a| a < CONTEXT_MAX && a != UNWIND_STOPPED);
        let sample_in_kernel = s.misc & MISC_CPUMODE_MASK == MISC_KERNEL;
        if has_addresses && self.sources.reading_jitdump() {
            self.load_libraries_of(s.pid, callchain);
        }
        if has_addresses {
            let mut in_kernel: Option<bool> = None;
            let mut leaf = true;
            for &entry in callchain {
                if entry == UNWIND_STOPPED {
                    frames.push(self.unwind_stopped.clone());
                    continue;
                }
                if entry >= CONTEXT_MAX {
                    in_kernel = match entry {
                        CONTEXT_KERNEL | CONTEXT_HV | CONTEXT_GUEST_KERNEL => Some(true),
                        CONTEXT_USER | CONTEXT_GUEST_USER => Some(false),
                        _ => in_kernel,
                    };
                    continue;
                }
                let kernel = in_kernel.unwrap_or(entry >= KERNEL_HALF);
                frames.push(self.frame(s, space, entry, kernel, leaf, steady));
                leaf = false;
            }
        } else {
            let kernel = sample_in_kernel || s.ip >= KERNEL_HALF;
            frames.push(self.frame(s, space, s.ip, kernel, true, steady));
        }
        frames
    }

    /// Loads the symbols of the files `callchain`'s user addresses lie in: done first while the jitdump is still
    /// being read on its thread, so that its first JIT frame waits for it after they are loaded, not before.
    fn load_libraries_of(&mut self, pid: u32, callchain: &[u64]) {
        let Some(process) = self.processes.get(pid) else { return };
        for &addr in callchain.iter().filter(|&&a| a < KERNEL_HALF) {
            if let Some(m) = process.space.find(addr.saturating_sub(1)).filter(|m| m.kind == MapKind::File) {
                self.sources.dso(pid, m, &self.processes);
            }
        }
    }

    /// The frame at `addr` of sample `s`, whose process's address space is `space` (its id and generation).
    fn frame(
        &mut self,
        s: &Sample,
        space: (u64, u64),
        addr: u64,
        kernel: bool,
        leaf: bool,
        steady: &mut Range<u64>,
    ) -> Frame {
        let (pid, time) = (s.pid, s.time);
        if kernel {
            let key = (0, 0, addr);
            if let Some(t) = self.cache.get(&key) {
                return t.frame(addr, true);
            }
            let cached = CachedName::new(Arc::new(self.kernel_name(addr)), false);
            let frame = cached.frame(addr, true);
            self.cache.insert(key, cached);
            return frame;
        }
        // A caller's entry is the return address, which can be the first byte after a call at a function's very
        // end: look up the byte before it, as perf does, but show the real address.
        let lookup = if leaf { addr } else { addr.saturating_sub(1) };
        let key = (space.0, space.1, lookup);
        // JIT code is named from the jitdump first: code there can be replaced over time, so its names are not
        // cached (the space's generation fixes the mapping, and so whether an address is JIT code).
        let jit_code = match self.cache.get(&key) {
            Some(t) if !t.jit_code => return t.frame(addr, leaf),
            Some(_) => true,
            None => {
                let mapping = self.processes.get(pid).and_then(|p| p.space.find(lookup));
                mapping.map_or(true, |m| m.kind == MapKind::Jit)
            }
        };
        if jit_code {
            if let Some(name) = self.jitdump_name(pid, lookup, time, steady) {
                return Frame::in_range(addr, &name, 0);
            }
        }
        if let Some(t) = self.cache.get(&key) {
            return t.frame(addr, leaf);
        }
        // Only a first sight of this address needs the mapping itself.
        let mapping = self.processes.get(pid).and_then(|p| p.space.find(lookup).cloned());
        let cached = CachedName::new(Arc::new(self.user_name(pid, lookup, mapping.as_ref())), jit_code);
        let frame = cached.frame(addr, leaf);
        self.cache.insert(key, cached);
        frame
    }

    fn kernel_name(&mut self, addr: u64) -> FrameName {
        let unnamed = FrameName {
            symbol: None,
            base: 0,
            module: self.kernel_module.clone(),
            kind: FrameKind::Kernel,
            unnamed_function: None,
        };
        let Some(k) = self.sources.kernel() else { return unnamed };
        if k.hidden {
            if let Some(u) = &mut self.usage {
                u.kernel_hidden = true;
            }
            return FrameName { symbol: Some(self.hidden_kernel.clone()), base: addr, ..unnamed };
        }
        let Some(symbol) = k.lookup(addr) else { return unnamed };
        if let Some(u) = &mut self.usage {
            u.kernel.insert(symbol.start, (symbol.end, symbol.name.clone(), symbol.module.clone()));
        }
        FrameName {
            symbol: Some(symbol.name),
            base: symbol.start,
            module: symbol.module,
            kind: FrameKind::Kernel,
            unnamed_function: None,
        }
    }

    fn user_name(&mut self, pid: u32, lookup: u64, mapping: Option<&Mapping>) -> FrameName {
        let Some(m) = mapping else {
            // perf names JIT code even when its mapping was never recorded.
            return self.perf_map_name(pid, lookup).unwrap_or(FrameName {
                symbol: None,
                base: 0,
                module: self.unknown_module.clone(),
                kind: FrameKind::Unknown,
                unnamed_function: None,
            });
        };
        let module_base = m.start.wrapping_sub(m.pgoff);
        let module = m.file.path.clone();
        match m.kind {
            MapKind::Jit => self.perf_map_name(pid, lookup).unwrap_or(FrameName {
                symbol: None,
                base: module_base,
                module,
                kind: FrameKind::Jit,
                unnamed_function: None,
            }),
            MapKind::File | MapKind::Vdso => {
                let dso = self.sources.dso(pid, m, &self.processes);
                let hit = dso.lookup(m.file_offset(lookup));
                if let Some(u) = &mut self.usage {
                    u.note_file(&m.file, &dso, &hit);
                }
                let kind = dso.frame_kind();
                let unnamed = FrameName { symbol: None, base: module_base, module, kind, unnamed_function: None };
                match hit {
                    FileHit::Symbol { start, name, .. } => {
                        FrameName { symbol: Some(name), base: module_base.wrapping_add(start), ..unnamed }
                    }
                    FileHit::Function { start, .. } => FrameName { unnamed_function: Some(start), ..unnamed },
                    FileHit::Nothing => unnamed,
                }
            }
            MapKind::Special | MapKind::JitDumpFile => {
                FrameName { symbol: None, base: module_base, module, kind: FrameKind::Unknown, unnamed_function: None }
            }
        }
    }

    fn perf_map_name(&mut self, pid: u32, addr: u64) -> Option<FrameName> {
        let loaded = self.sources.perf_map(pid, &self.processes)?;
        let (module, map) = &*loaded;
        let r = map.symbols.lookup(addr)?;
        Some(FrameName {
            symbol: Some(r.value.clone()),
            base: r.start,
            module: module.clone(),
            kind: FrameKind::Jit,
            unnamed_function: None,
        })
    }

    fn jitdump_name(&mut self, pid: u32, addr: u64, time: u64, steady: &mut Range<u64>) -> Option<Arc<FrameName>> {
        let loaded = self.sources.jitdump(pid, &self.processes)?;
        let (module, dump) = &*loaded;
        let (code, code_steady) = dump.lookup_steady(addr, time);
        *steady = steady.start.max(code_steady.start)..steady.end.min(code_steady.end);
        let code = code?;
        let key = (Arc::as_ptr(&code.name) as *const u8 as usize, code.start);
        let name = self.jit_names.entry(key).or_insert_with(|| {
            Arc::new(FrameName {
                symbol: Some(code.name.clone()),
                base: code.start,
                module: module.clone(),
                kind: FrameKind::Jit,
                unnamed_function: None,
            })
        });
        Some(name.clone())
    }

    fn warn(&mut self, msg: String) {
        self.sources.warnings.warn(msg);
    }
}

/// Each timed switch-out's interval: the switch records, thread exits and forks of the time-ordered `timeline`
/// through [`IntervalPass`], keyed by the switch-out's place in the timeline.
fn off_cpu_intervals(
    reader: &PerfDataReader,
    timeline: &[(u64, u64)],
    records: &[Record],
    switch_outs: &SwitchOuts,
) -> Intervals {
    let mut pass = IntervalPass::default();
    let mut end = 0;
    for (i, &(time, replay)) in timeline.iter().enumerate() {
        end = end.max(time);
        match replay & (REPLAY_RECORD | REPLAY_SWITCH) {
            0 => {
                if let Some((event, tid)) = reader.sample_event_and_tid(replay) {
                    if switch_outs.times(event) {
                        pass.switch_out(i, tid, time);
                    }
                }
            }
            REPLAY_RECORD => match &records[(replay & !REPLAY_RECORD) as usize] {
                Record::Exit(t) => pass.exited(t.tid, time),
                Record::Fork(t) => pass.forked(t.tid),
                _ => {}
            },
            _ => pass.switched(replay as u32, replay & 1 << 32 != 0, replay & 1 << 33 != 0, time),
        }
    }
    pass.finish(end)
}

/// The modules of one process's address space, as the stack walker asks for them: its file mappings with their
/// unwind info (JIT code and the vDSO have none: frame pointers unwind them).
struct Modules<'a> {
    pid: u32,
    processes: &'a Processes,
    space: &'a AddressSpace,
    /// The mapping last looked up: a walk asks about the same mapping several times a frame (is the return address
    /// code, where does its mapping start, which module), and its frames lie in a few mappings.
    last: Cell<Option<&'a Mapping>>,
    sources: &'a mut Sources,
    cfi: &'a mut CfiFiles,
}

impl<'a> Modules<'a> {
    fn find(&self, addr: u64) -> Option<&'a Mapping> {
        if let Some(m) = self.last.get().filter(|m| (m.start..m.end).contains(&addr)) {
            return Some(m);
        }
        let m = self.space.find(addr)?;
        self.last.set(Some(m));
        Some(m)
    }
}

/// A mapped file as its unwind info is read from the live system.
struct LiveMapped<'a> {
    sources: &'a mut Sources,
    processes: &'a Processes,
    pid: u32,
    mapping: &'a Mapping,
}

impl LiveFile for LiveMapped<'_> {
    fn open(&mut self) -> Option<File> {
        self.sources.open_mapped(self.pid, self.mapping, self.processes)
    }

    fn debug_frame(&mut self) -> Option<Vec<u8>> {
        self.sources.debug_frame(self.pid, self.mapping, self.processes)
    }
}

impl ModuleSource for Modules<'_> {
    fn mapping_start(&self, addr: u64) -> Option<u64> {
        let m = self.find(addr)?;
        (m.kind == MapKind::File).then_some(m.start)
    }

    fn is_code(&self, addr: u64) -> bool {
        self.find(addr).is_some_and(|m| matches!(m.kind, MapKind::File | MapKind::Jit | MapKind::Vdso))
    }

    fn module_at(&mut self, addr: u64) -> Option<CodeModule> {
        let m = self.find(addr)?;
        let mut live = LiveMapped { sources: &mut *self.sources, processes: self.processes, pid: self.pid, mapping: m };
        let cfi = self.cfi.get(&m.file, &mut live)?;
        let base_avma = cfi.bias(m.start, m.pgoff)?;
        Some(CodeModule { avma: m.start..m.end, base_avma, cfi, name: m.file.path.to_string() })
    }

    fn jit_frame(&mut self, addr: u64) -> Option<JitFrame> {
        self.sources.jit_frames(self.pid, self.processes)?.lookup(addr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::Dir;
    use crate::perf_data::echoes::tests::{stack_copy_writer, write_stack_copies};
    use crate::perf_data::{Comm, EventDesc, Lost, SampleId};

    fn records_of(path: &std::path::Path) -> (PerfDataReader, Vec<Record>) {
        let reader = PerfDataReader::from_file(&File::open(path).unwrap(), path).unwrap();
        let mut records = Vec::new();
        reader
            .for_each_record(|r| {
                records.push(r);
                Ok(())
            })
            .unwrap();
        (reader, records)
    }

    /// A recording written again as it is replayed keeps every record, in time order a round at a time, and its
    /// samples lose their stack copies and nothing else (these copies are of threads of no known process: their
    /// callchains stay as recorded).
    #[test]
    fn a_recording_written_again_keeps_every_record_in_time_order_without_the_copies() {
        let tmp = tempfile::tempdir().unwrap();
        let mut w = stack_copy_writer(tmp.path());
        let at = |time| SampleId { pid: Some(100), tid: Some(100), time: Some(time), ..Default::default() };
        let comm = Comm { misc: 0, pid: 100, tid: 100, comm: "sorter".into(), sample_id: at(500) };
        w.write_record(&Record::Comm(comm)).unwrap();
        // Each round's samples out of time order (two threads' rings drained in turn).
        write_stack_copies(&mut w, 10..20);
        write_stack_copies(&mut w, 0..10);
        w.finished_round().unwrap();
        w.write_record(&Record::Lost(Lost { id: 0, lost: 7, sample_id: at(25_500) })).unwrap();
        write_stack_copies(&mut w, 30..40);
        write_stack_copies(&mut w, 20..30);
        w.finished_round().unwrap();
        w.finish(&Default::default()).unwrap();
        let (reader, recorded) = records_of(&tmp.path().join("perf.data"));

        let again = tempfile::tempdir().unwrap();
        let events = reader.events().iter().map(EventDesc::without_stack_copies).collect();
        let mut out = PerfDataWriter::create(&Dir::open(again.path()).unwrap(), "perf.data", events).unwrap();
        let mut symbolizer = Symbolizer::new(&SymbolizeOptions::offline(Dir::open(again.path()).unwrap())).unwrap();
        let mut named = 0;
        let count = |_| {
            named += 1;
            Ok(())
        };
        let stats = symbolizer.for_each_sample_paced(&reader, None, Some(&mut out), count).unwrap();
        out.finish(reader.features()).unwrap();
        assert_eq!((named, stats.lost_samples), (40, 7));

        let (rewritten, records) = records_of(&again.path().join("perf.data"));
        assert!(reader.events()[0].attr.has_stack_copies() && !rewritten.events()[0].attr.has_stack_copies());
        assert_eq!(rewritten.events()[0].attr.bytes().len(), reader.events()[0].attr.bytes().len());
        let times: Vec<u64> = records.iter().filter_map(Record::time).collect();
        assert!(times.windows(2).all(|t| t[0] <= t[1]), "not in time order: {times:?}");
        let rounds = records.iter().filter(|r| matches!(r, Record::FinishedRound)).count();
        assert_eq!(rounds, 2);
        // The same records but for the copies, sorted the same way.
        let by_time = |records: &[Record]| {
            let mut kept: Vec<Record> = records
                .iter()
                .filter(|r| !matches!(r, Record::FinishedRound))
                .cloned()
                .map(|r| match r {
                    Record::Sample(s) => Record::Sample(Sample { user: None, ..s }),
                    r => r,
                })
                .collect();
            kept.sort_by_key(|r| r.time());
            kept
        };
        assert_eq!(by_time(&records), by_time(&recorded));
        assert_eq!(records.len(), recorded.len());
    }

    /// A recording in `dir` of samples with callchains (and ip, thread and time).
    fn callchain_writer(dir: &std::path::Path) -> PerfDataWriter {
        use crate::perf_data::abi::{SAMPLE_CALLCHAIN, SAMPLE_IP, SAMPLE_TID, SAMPLE_TIME};
        let mut attr = perf_event_open_sys::bindings::perf_event_attr {
            size: 128,
            sample_type: SAMPLE_IP | SAMPLE_TID | SAMPLE_TIME | SAMPLE_CALLCHAIN,
            ..Default::default()
        };
        attr.set_sample_id_all(1);
        let attr = crate::perf_data::Attr::from_kernel(&attr);
        let event = EventDesc { name: attr.event_name(), attr, ids: vec![] };
        PerfDataWriter::create(&Dir::open(dir).unwrap(), "perf.data", vec![event]).unwrap()
    }

    /// Stacks are cached and shared while samples repeat them, and not while nearly every one is new; the choice
    /// follows the hit rate either way.
    #[test]
    fn stacks_are_shared_only_while_samples_repeat_them() {
        let tmp = tempfile::tempdir().unwrap();
        let mut w = callchain_writer(tmp.path());
        // A stretch of distinct stacks, one of four stacks over and over, distinct ones again.
        let phases = [(0, 3 * HIT_RATE_SAMPLES), (1, 3 * HIT_RATE_SAMPLES), (0, 3 * HIT_RATE_SAMPLES)];
        let mut time = 0u64;
        for (repeat, n) in phases {
            for i in 0..n as u64 {
                time += 1;
                let leaf = match repeat {
                    1 => 0x40_0000 + i % 4 * 0x10,
                    _ => 0x50_0000 + time * 0x10,
                };
                let callchain = vec![CONTEXT_USER, leaf, 0x40_1000, 0x40_2000];
                let s =
                    Sample { misc: 2, ip: leaf, pid: 100, tid: 100, time, period: 1, callchain, ..Default::default() };
                w.write_record(&Record::Sample(s)).unwrap();
            }
            w.finished_round().unwrap();
        }
        w.finish(&Default::default()).unwrap();
        let (reader, _) = records_of(&tmp.path().join("perf.data"));
        let mut symbolizer = Symbolizer::new(&SymbolizeOptions::offline(Dir::open(tmp.path()).unwrap())).unwrap();
        let mut ids = Vec::new();
        symbolizer
            .for_each_sample(&reader, |s| {
                ids.push((s.frames.id(), s.frames[0].addr));
                Ok(())
            })
            .unwrap();
        let n = HIT_RATE_SAMPLES as usize;
        assert_eq!(ids.len(), 9 * n);
        // Judged after the first stretch: the rest of the distinct stacks are not shared.
        assert!(ids[FIRST_HIT_RATE_SAMPLES as usize..3 * n].iter().all(|&(id, _)| id == 0));
        // Once the repeats are judged, each of the four stacks is shared: one id each.
        let repeated = &ids[5 * n..6 * n];
        assert!(repeated.iter().all(|&(id, _)| id != 0));
        let mut by_leaf: Vec<(u64, u64)> = repeated.iter().map(|&(id, leaf)| (leaf, id)).collect();
        by_leaf.sort();
        by_leaf.dedup();
        assert_eq!(by_leaf.len(), 4, "{by_leaf:?}");
        // And new stacks again stop being shared.
        assert!(ids[8 * n..].iter().all(|&(id, _)| id == 0));
    }

    /// Frames with the same id are the same frame: a leaf and a caller looked up at the same byte are not, nor a
    /// caller at address 0 and one at 1 (both looked up at 0).
    #[test]
    fn frames_with_the_same_id_are_the_same_frame() {
        let tmp = tempfile::tempdir().unwrap();
        let mut w = callchain_writer(tmp.path());
        let chains = [
            vec![CONTEXT_KERNEL, 0xffff_ffff_8100_0010, CONTEXT_USER, 0x40_1000, 0x40_1001, 0x40_1000],
            vec![CONTEXT_USER, 0x40_1001, 0x1, 0x0, 0x40_1001],
            vec![CONTEXT_USER, 0x0, 0x0, 0x1],
        ];
        for (time, callchain) in chains.iter().cycle().take(30).enumerate() {
            let ip = callchain[1];
            let s = Sample {
                misc: 2,
                ip,
                pid: 100,
                tid: 100,
                time: time as u64,
                period: 1,
                callchain: callchain.clone(),
                ..Default::default()
            };
            w.write_record(&Record::Sample(s)).unwrap();
        }
        w.finish(&Default::default()).unwrap();
        let (reader, _) = records_of(&tmp.path().join("perf.data"));
        let mut symbolizer = Symbolizer::new(&SymbolizeOptions::offline(Dir::open(tmp.path()).unwrap())).unwrap();
        let mut by_id: std::collections::HashMap<u64, Frame> = std::collections::HashMap::new();
        let (mut frames, mut without) = (0, 0);
        symbolizer
            .for_each_sample(&reader, |s| {
                for (i, f) in s.frames.iter().enumerate() {
                    frames += 1;
                    if f.id == 0 {
                        assert!(i > 0 && f.addr == 0, "{f:?} has no id");
                        without += 1;
                        continue;
                    }
                    let first = by_id.entry(f.id).or_insert_with(|| f.clone());
                    assert!(first == f && first.addr == f.addr, "{first:?} and {f:?} share id {}", f.id);
                }
                Ok(())
            })
            .unwrap();
        assert_eq!((frames, without), (110, 20));
        // The kernel leaf; callers at 0x401000, 0x401001 (looked up where the leaf at 0x401000 would be) and 1;
        // leaves at 0x401001 and 0.
        assert_eq!(by_id.len(), 6, "{by_id:?}");
    }
}
