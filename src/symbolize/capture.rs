//! Saving what naming needs while the target still lives. A JIT's perf map and jitdump exist only in the target's
//! /tmp (or working directory) and, in a container, only as long as its mount namespace does; so while collecting,
//! [`Capture`] copies them into `<out>/symbols/` as soon as they appear and again whenever they grow. Files the
//! target maps are opened while it lives, so they stay readable after it exits. At the end it writes the symbols
//! the samples hit and the unwind info of the files their stack copies were unwound through (see
//! [`captured`](super::symbols_dir) for the format), so `postprocess` can name every frame offline.
//!
//! Everything is written through the descriptor of the output folder (see [`crate::fs::dir`]), and what is copied
//! must pass [`jit_files::open_trusted`]: a regular file of the target's own (not a symlink to one), owned by root
//! or the target's user, written since the target started (not left by a dead process with its PID), within
//! [`Limit::JIT_FILE`].
//!
//! Use: `Capture::new(&out_dir, &[pid], &opts)`, then for every record read `observe(&record)` (non-sample records
//! suffice), `poll()` about every 250 ms, and `finish(&reader, f)` once perf.data is complete: `f` gets each sample
//! as it is named (collect makes its outputs from them: each sample is named once).

use super::address_space::{FileId, MapKind, Processes};
use super::jit_files;
use super::jitdump;
use super::options::SymbolizeOptions;
use super::proc_info::ProcessInfo;
use super::prologues::Prologues;
use super::symbolizer::{Pace, SymbolizeStats, Symbolizer};
use super::symbols_dir::{self, CapturedProcess};
use super::ResolvedSample;
use crate::fs::{Dir, Last, Limit, Root};
use crate::perf_data::{PerfDataReader, PerfDataWriter, Record};
use anyhow::{Context, Result};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Name of the directory inside the output directory.
pub const SYMBOLS_DIR: &str = "symbols";

/// A growing file being mirrored: the source stays open, so it can be read to the end even after the target (and
/// its /tmp) is gone.
struct Mirror {
    src: File,
    dst: File,
    copied: u64,
}

impl Mirror {
    fn new(src: File, dir: &Dir, name: &str) -> Result<Mirror> {
        let dst = dir.create_file(name).with_context(|| format!("cannot create {}", dir.shown(name).display()))?;
        Ok(Mirror { src, dst, copied: 0 })
    }

    /// Copies what was appended since the last call; starts over if the source shrank (rewritten). A source that
    /// grows past [`Limit::JIT_FILE`] is copied up to it.
    fn sync(&mut self) -> std::io::Result<()> {
        let len = self.src.metadata()?.len();
        if len > Limit::JIT_FILE.bytes {
            return Err(std::io::Error::other(format!(
                "it grew past {} bytes, more than a JIT writes: copied no further",
                Limit::JIT_FILE.bytes
            )));
        }
        if len < self.copied {
            self.dst.set_len(0)?;
            self.copied = 0;
        }
        let mut buf = vec![0u8; 1 << 16];
        while self.copied < len {
            let want = ((len - self.copied) as usize).min(buf.len());
            let n = self.src.read_at(&mut buf[..want], self.copied)?;
            if n == 0 {
                break;
            }
            self.dst.write_all_at(&buf[..n], self.copied)?;
            self.copied += n as u64;
        }
        Ok(())
    }
}

#[derive(Default)]
struct Target {
    info: Option<ProcessInfo>,
    perf_map: Option<Mirror>,
    jitdump: Option<Mirror>,
    jitdump_path: Option<Arc<str>>,
    jitdump_copied_from: Option<Arc<str>>,
    /// The frames of the JIT methods its perf map lists, read from their code.
    prologues: Option<Prologues>,
    /// No longer in /proc: nothing new can be opened, open mirrors still sync.
    gone: bool,
}

/// What a capture saved, with the counters of the naming pass that found which symbols the samples hit.
pub struct CaptureSummary {
    pub stats: SymbolizeStats,
    pub dir: Dir,
    pub perf_maps: usize,
    pub jitdumps: usize,
    /// Mapped files with samples listed in `dsos.txt`.
    pub dsos: usize,
    /// Bytes of every file in the symbols directory.
    pub bytes: u64,
    pub finish_time: std::time::Duration,
}

/// What the capture has ready for a namer that names the samples while the recording goes on ([`LiveNaming`]).
#[derive(Default)]
struct Handoff {
    /// Counts the polls that found a perf map, jitdump or JIT frames grown.
    generation: u64,
    /// When the last poll began (CLOCK_MONOTONIC, the samples' clock): what a JIT wrote before then is in the copies.
    synced_to: u64,
    /// Files opened while their process lived, not yet handed to the namer.
    opened: HashMap<FileId, File>,
    /// Namespace PIDs and owners of the processes, as they were first read.
    processes: BTreeMap<u32, CapturedProcess>,
    /// The JIT files may still be written with what existed before the recording (perf maps being switched on):
    /// nothing is named until [`Capture::jit_files_settled`].
    unsettled: bool,
}

/// A capture's [`Handoff`], shared with its namer.
type SharedHandoff = Arc<Mutex<Handoff>>;

fn lock(handoff: &SharedHandoff) -> MutexGuard<'_, Handoff> {
    handoff.lock().unwrap_or_else(|e| e.into_inner())
}

pub struct Capture {
    dir: Dir,
    handoff: SharedHandoff,
    /// Held while the copies are written, and by a namer while it reads them.
    copying: Arc<Mutex<()>>,
    opts: SymbolizeOptions,
    all: bool,
    targets: HashMap<u32, Target>,
    processes: Processes,
    /// Mapped files to open while their process lives.
    to_open: Vec<(u32, Arc<FileId>)>,
    tried: HashSet<Arc<FileId>>,
    warned: HashSet<String>,
}

impl Capture {
    /// Starts a capture for the given host PIDs (their children are followed) into `<out_dir>/symbols`, which
    /// must not exist yet.
    pub fn new(out_dir: &Dir, pids: &[u32], opts: &SymbolizeOptions) -> Result<Capture> {
        let dir = out_dir
            .create_dir(SYMBOLS_DIR)
            .with_context(|| format!("cannot create {}", out_dir.shown(SYMBOLS_DIR).display()))?;
        let mut capture = Capture {
            dir,
            handoff: Arc::new(Mutex::new(Handoff { unsettled: true, ..Handoff::default() })),
            copying: Arc::default(),
            opts: opts.clone(),
            all: false,
            targets: HashMap::new(),
            processes: Processes::default(),
            to_open: Vec::new(),
            tried: HashSet::new(),
            warned: HashSet::new(),
        };
        for &pid in pids {
            capture.targets.entry(pid).or_default();
        }
        Ok(capture)
    }

    /// Captures for every process the recording mentions (`collect -all`).
    pub fn new_all(out_dir: &Dir, opts: &SymbolizeOptions) -> Result<Capture> {
        let mut c = Self::new(out_dir, &[], opts)?;
        c.all = true;
        Ok(c)
    }

    pub fn dir(&self) -> &Dir {
        &self.dir
    }

    fn is_target(&mut self, pid: u32) -> bool {
        if self.all && pid != 0 && pid != u32::MAX {
            self.targets.entry(pid).or_default();
        }
        self.targets.contains_key(&pid)
    }

    /// Follows the recording: new child processes become targets, a mapped jitdump is noted, mapped files are
    /// queued to be opened.
    pub fn observe(&mut self, record: &Record) {
        match record {
            Record::Mmap(m) => {
                let Some(mapping) = self.processes.on_mmap(m) else { return };
                if !self.is_target(m.pid) {
                    return;
                }
                match mapping.kind {
                    MapKind::JitDumpFile => {
                        self.targets.entry(m.pid).or_default().jitdump_path = Some(mapping.file.path.clone());
                    }
                    MapKind::File => self.to_open.push((m.pid, mapping.file.clone())),
                    _ => {}
                }
            }
            Record::Comm(c) => {
                self.processes.on_comm(c);
                if c.is_exec() && self.is_target(c.pid) {
                    // A new program: its maps are new files (same names, new contents).
                    let t = self.targets.entry(c.pid).or_default();
                    t.jitdump_path = None;
                }
            }
            Record::Fork(t) => {
                self.processes.on_fork(t);
                if t.pid != t.ppid && (self.all || self.targets.contains_key(&t.ppid)) {
                    self.targets.entry(t.pid).or_default();
                }
            }
            Record::Exit(t) => {
                self.processes.on_exit(t);
                if t.pid == t.tid && self.targets.contains_key(&t.pid) {
                    // Last chance: copy what the process wrote before its /tmp disappears.
                    self.poll_target(t.pid);
                }
            }
            _ => {}
        }
    }

    /// Copies new or grown perf maps and jitdumps and opens newly mapped files. Call about every 250 ms.
    pub fn poll(&mut self) {
        let began = monotonic_now();
        let (copying, handoff) = (self.copying.clone(), self.handoff.clone());
        let _copying = copying.lock().unwrap_or_else(|e| e.into_inner());
        let mut handoff = lock(&handoff);
        let copied = self.jit_progress();
        let pids: Vec<u32> = self.targets.keys().copied().collect();
        for pid in pids {
            self.poll_target(pid);
        }
        for (pid, file) in std::mem::take(&mut self.to_open) {
            if let Some(opened) = self.open_mapped(pid, &file) {
                handoff.opened.insert((*file).clone(), opened);
            }
        }
        if self.jit_progress() != copied {
            handoff.generation += 1;
        }
        handoff.synced_to = began;
        for (&pid, t) in &self.targets {
            if let Some(info) = &t.info {
                handoff.processes.entry(pid).or_insert(CapturedProcess { nspid: info.nspid, uid: info.uid });
            }
        }
    }

    /// Perf maps switched on for the recording have been written with every method that existed, and the last
    /// poll began after that: samples taken before it may be named from the copies.
    pub fn jit_files_settled(&mut self) {
        lock(&self.handoff).unsettled = false;
    }

    /// How much of the JIT files has been copied or read so far: a change means the namer has more to load.
    fn jit_progress(&self) -> u64 {
        let copied = |m: &Option<Mirror>| m.as_ref().map_or(0, |m| m.copied);
        let targets = self.targets.values();
        targets
            .map(|t| copied(&t.perf_map) + copied(&t.jitdump) + t.prologues.as_ref().map_or(0, |p| p.saved) as u64)
            .sum()
    }

    fn poll_target(&mut self, pid: u32) {
        let mut t = self.targets.remove(&pid).unwrap_or_default();
        if !t.gone {
            match ProcessInfo::read(pid) {
                Some(info) => {
                    t.info.get_or_insert(info);
                }
                None => t.gone = true,
            }
        }
        if let Some(info) = t.info.clone().filter(|_| !t.gone) {
            if t.perf_map.is_none() {
                let path = PathBuf::from(format!("/tmp/perf-{}.map", info.nspid));
                t.perf_map = self.start_mirror(&info, &path, &symbols_dir::perf_map_name(pid));
            }
            if let Some(path) = t.jitdump_path.clone() {
                if t.jitdump_copied_from.as_ref() != Some(&path) {
                    if let Some(m) = self.start_mirror(&info, Path::new(&*path), &symbols_dir::jitdump_name(pid)) {
                        t.jitdump = Some(m);
                        t.jitdump_copied_from = Some(path);
                    }
                }
            }
        }
        for (what, mirror) in [("perf map", &mut t.perf_map), ("jitdump", &mut t.jitdump)] {
            if let Some(m) = mirror {
                if let Err(e) = m.sync() {
                    self.warn(format!("copying the {what} of PID {pid} failed: {e}"));
                }
            }
        }
        if let Some(map) = &t.perf_map {
            if t.prologues.is_none() {
                match Prologues::new(&self.dir, pid) {
                    Ok(p) => t.prologues = Some(p),
                    Err(e) => self.warn(format!("{e:#}")),
                }
            }
            if let Some(Err(e)) = t.prologues.as_mut().map(|p| p.follow(&map.src, map.copied)) {
                self.warn(format!("reading the JIT code of PID {pid} failed: {e:#}"));
            }
        }
        self.targets.insert(pid, t);
    }

    fn start_mirror(&mut self, info: &ProcessInfo, path: &Path, name: &str) -> Option<Mirror> {
        let opened = match info.root() {
            Ok(root) => jit_files::open_trusted(&root, path, &[info.uid], self.opts.force_maps, info.started_at),
            Err(e) => Err(jit_files::OpenError::Other(e.to_string())),
        };
        match opened {
            Ok((src, _)) => match Mirror::new(src, &self.dir, name) {
                Ok(m) => Some(m),
                Err(e) => {
                    // A second jitdump of the same PID (after exec) cannot reuse the name; keep the first.
                    self.warn(format!("{e:#}"));
                    None
                }
            },
            Err(e) => {
                if let Some(warning) = jit_files::refusal(path, info.pid, &e) {
                    self.warn(warning);
                }
                None
            }
        }
    }

    fn open_mapped(&mut self, pid: u32, file: &Arc<FileId>) -> Option<File> {
        if !self.tried.insert(file.clone()) || file.path.ends_with(" (deleted)") {
            return None;
        }
        Root::of_process(pid).and_then(|root| root.open_file(Path::new(&*file.path), Last::Follow)).ok()
    }

    /// Names the samples while the recording goes on, from the copies as they grow: returns the namer, and where
    /// to send this capture once the recording is over and its last poll done (the namer then names the last
    /// samples and saves what they used).
    pub fn name_while_recording(&self) -> Result<(LiveNaming, mpsc::SyncSender<Capture>)> {
        let mut symbolizer = Symbolizer::new(&self.naming_options())?;
        symbolizer.record_usage();
        symbolizer.set_jit_copies_growing(Some(self.copying.clone()));
        let (send, ended) = mpsc::sync_channel(1);
        let pace = LivePace {
            handoff: self.handoff.clone(),
            ended,
            capture: None,
            loaded_generation: 0,
            loaded_to: 0,
            reloaded: None,
            reloads: 0,
            processes_seen: 0,
            saved: (0, 0),
            failed: None,
        };
        Ok((LiveNaming { symbolizer, pace }, send))
    }

    fn naming_options(&self) -> SymbolizeOptions {
        SymbolizeOptions { captured_dir: Some(self.dir.clone()), live: true, ..self.opts.clone() }
    }

    /// Before the last samples are named: the final copies, jitdumps cut to what naming reads, processes.txt.
    fn complete(&mut self) -> Result<(usize, usize)> {
        self.poll();
        self.trim_jitdumps();
        let (mut perf_maps, mut jitdumps) = (0, 0);
        for t in self.targets.values() {
            perf_maps += t.perf_map.is_some() as usize;
            jitdumps += t.jitdump.is_some() as usize;
        }
        // The poll has noted every process read so far.
        symbols_dir::write_processes(&self.dir, &lock(&self.handoff).processes)?;
        Ok((perf_maps, jitdumps))
    }

    /// After the samples were named by `symbolizer`: the symbols they used.
    fn summary(
        self,
        mut symbolizer: Symbolizer,
        stats: SymbolizeStats,
        saved: (usize, usize),
        started: Instant,
    ) -> Result<CaptureSummary> {
        let usage = symbolizer.take_usage().unwrap_or_default();
        symbols_dir::write_usage(&self.dir, &usage)?;
        let bytes = dir_size(&self.dir);
        Ok(CaptureSummary {
            stats,
            dir: self.dir,
            perf_maps: saved.0,
            jitdumps: saved.1,
            dsos: usage.dsos.len(),
            bytes,
            finish_time: started.elapsed(),
        })
    }

    /// Final copies, then the symbols the recording's samples hit, found by naming every sample live and handing it
    /// to `f` as it is named (samples are not kept: memory does not grow with the recording).
    pub fn finish(
        mut self,
        recording: &PerfDataReader,
        f: impl FnMut(ResolvedSample) -> Result<()>,
    ) -> Result<CaptureSummary> {
        let started = Instant::now();
        let saved = self.complete()?;
        let mut symbolizer = Symbolizer::new(&self.naming_options())?;
        symbolizer.add_preopened(std::mem::take(&mut lock(&self.handoff).opened));
        symbolizer.record_usage();
        let stats = symbolizer.for_each_sample(recording, f)?;
        self.summary(symbolizer, stats, saved, started)
    }

    /// Rewrites each copied jitdump without the code bytes naming does not read (see [`jitdump::trimmed`]): they
    /// are most of a .NET jitdump, and `postprocess` would read and compress them every time.
    fn trim_jitdumps(&mut self) {
        let mut failed = Vec::new();
        for (&pid, t) in &mut self.targets {
            let Some(mirror) = &mut t.jitdump else { continue };
            let name = symbols_dir::jitdump_name(pid);
            let trimmed = self.dir.read_input(&name, Limit::JIT_FILE).map_err(anyhow::Error::from).and_then(|bytes| {
                let Some(trimmed) = jitdump::trimmed(&bytes) else { return Ok(()) };
                mirror.dst.set_len(0)?;
                mirror.dst.write_all_at(&trimmed, 0)?;
                Ok(())
            });
            if let Err(e) = trimmed {
                failed.push(format!("cannot rewrite {}: {e:#}", self.dir.shown(&name).display()));
            }
        }
        for msg in failed {
            self.warn(msg);
        }
    }

    fn warn(&mut self, msg: String) {
        if self.warned.insert(msg.clone()) {
            super::sources::log_once(&msg);
        }
    }
}

/// A capture's namer while the recording goes on ([`Capture::name_while_recording`]).
pub struct LiveNaming {
    symbolizer: Symbolizer,
    pace: LivePace,
}

/// How often a namer that follows a recording loads the JIT's files again while they grow: each time, what it has
/// named is forgotten, and a perf map can take milliseconds to parse.
const RELOAD_EVERY: Duration = Duration::from_secs(1);

struct LivePace {
    handoff: SharedHandoff,
    ended: mpsc::Receiver<Capture>,
    /// The capture, once the recording is over.
    capture: Option<Capture>,
    /// The [`Handoff::generation`] of the copies the symbolizer reads, and up to when they are complete.
    loaded_generation: u64,
    loaded_to: u64,
    reloaded: Option<Instant>,
    reloads: u32,
    /// How many of the handoff's processes the symbolizer knows.
    processes_seen: usize,
    /// Perf maps and jitdumps copied, once complete.
    saved: (usize, usize),
    /// Completing the capture failed: the run fails once the samples are named.
    failed: Option<anyhow::Error>,
}

impl Pace for LivePace {
    fn named_up_to(&mut self, symbolizer: &mut Symbolizer, last: bool) -> u64 {
        if last {
            // The recording is over: its last poll copies what the JIT wrote last.
            self.capture = self.ended.recv().ok();
            match self.capture.as_mut().map(Capture::complete) {
                Some(Ok(saved)) => self.saved = saved,
                Some(Err(e)) => self.failed = Some(e),
                None => {}
            }
            symbolizer.set_jit_copies_growing(None);
        }
        let mut handoff = lock(&self.handoff);
        let opened = std::mem::take(&mut handoff.opened);
        symbolizer.add_preopened(opened);
        // Processes are only ever added: new ones since the last round, if any.
        if handoff.processes.len() != self.processes_seen {
            symbolizer.add_process_ids(&handoff.processes);
            self.processes_seen = handoff.processes.len();
        }
        if handoff.generation == self.loaded_generation {
            self.loaded_to = handoff.synced_to;
        } else if last || self.reloaded.map_or(true, |at| at.elapsed() >= RELOAD_EVERY) {
            symbolizer.reload_jit_files();
            self.reloads += 1;
            self.loaded_generation = handoff.generation;
            self.loaded_to = handoff.synced_to;
            self.reloaded = Some(Instant::now());
        }
        match last {
            true => u64::MAX,
            false if handoff.unsettled => 0,
            false => self.loaded_to,
        }
    }
}

impl LiveNaming {
    /// Names every sample of the recording `reader` follows, handing each to `f`, then saves what they used into
    /// `symbols/` (the capture must have been sent when the recording ended).
    /// With `unwound_into`, writes the recording there again with its stack copies unwound (see
    /// [`Symbolizer::for_each_sample_paced`]).
    pub fn for_each_sample(
        mut self,
        reader: &PerfDataReader,
        unwound_into: Option<&mut PerfDataWriter>,
        f: impl FnMut(ResolvedSample) -> Result<()>,
    ) -> Result<CaptureSummary> {
        let started = Instant::now();
        let stats = self.symbolizer.for_each_sample_paced(reader, Some(&mut self.pace), unwound_into, f)?;
        tracing::debug!("named while recording: the JIT's files loaded again {} times", self.pace.reloads);
        if let Some(e) = self.pace.failed.take() {
            return Err(e);
        }
        let Some(capture) = self.pace.capture.take() else {
            anyhow::bail!("the recording ended without its capture");
        };
        capture.summary(self.symbolizer, stats, self.pace.saved, started)
    }
}

/// The clock of the samples, now.
fn monotonic_now() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn dir_size(dir: &Dir) -> u64 {
    let names = dir.list().unwrap_or_default();
    names.iter().filter_map(|n| dir.stat(n).ok().flatten()).map(|st| st.st_size.max(0) as u64).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, SystemTime};

    /// A perf map that a dead process with the same PID left in /tmp is not copied as the new process's; once the
    /// process writes its own (the file is rewritten), it is.
    #[test]
    fn a_perf_map_left_by_a_dead_process_with_the_same_pid_is_not_captured() {
        let mut sleeper = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let pid = sleeper.id();
        let map = PathBuf::from(format!("/tmp/perf-{pid}.map"));
        std::fs::write(&map, "1000 10 DeadProcess::Method\n").unwrap();
        let hour_ago = SystemTime::now() - Duration::from_secs(3600);
        File::options().write(true).open(&map).unwrap().set_modified(hour_ago).unwrap();
        let out = std::env::temp_dir().join(format!("profcpu-capture-stale-{pid}"));
        std::fs::create_dir_all(&out).unwrap();
        let mut capture = Capture::new(&Dir::open(&out).unwrap(), &[pid], &SymbolizeOptions::live()).unwrap();
        capture.poll();
        let copy = out.join(SYMBOLS_DIR).join(symbols_dir::perf_map_name(pid));
        let stale_copied = copy.exists();
        std::fs::write(&map, "2000 10 LiveProcess::Method\n").unwrap();
        capture.poll();
        let copied = std::fs::read_to_string(&copy).unwrap_or_default();
        let _ = sleeper.kill();
        let _ = sleeper.wait();
        let _ = std::fs::remove_file(&map);
        let _ = std::fs::remove_dir_all(&out);
        assert!(!stale_copied, "the dead process's map was copied");
        assert_eq!(copied, "2000 10 LiveProcess::Method\n");
    }
}
