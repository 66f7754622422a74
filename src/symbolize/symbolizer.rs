//! The engine: replays a recording's records in time order, keeps every process's address space current, and
//! names each sample's frames from the right source — kallsyms for kernel frames; jitdump, then perf map for JIT
//! code; the mapped file's ELF symbols for native code — preferring a capture's saved copies, and reading the live
//! system (through each target's own root) only when allowed.

use super::address_space::{FileId, MapKind, Mapping, Processes};
use super::captured::{CapturedDir, Usage};
use super::debug_search::SearchRoots;
use super::dso::{self, DsoSymbols};
use super::jit_files::{self, OpenError};
use super::jitdump::JitDump;
use super::kallsyms::{KernelSymbols, KERNEL_MODULE};
use super::perf_map::PerfMap;
use super::proc_info::ProcessInfo;
use super::{Frame, FrameKind, ResolvedSample};
use crate::perf_data::records::{
    PERF_CONTEXT_KERNEL, PERF_CONTEXT_MAX, PERF_CONTEXT_USER, PERF_RECORD_MISC_CPUMODE_MASK,
};
use crate::perf_data::{BuildIdEntry, PerfDataReader, Record, Sample};
use anyhow::Result;
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where names may come from.
#[derive(Debug, Clone, Default)]
pub struct SymbolizeOptions {
    /// A `symbols/` directory written by a capture; its copies are preferred over anything live.
    pub captured_dir: Option<PathBuf>,
    /// Whether the running system may be read: `/proc/<pid>/…`, the mapped files, `/proc/kallsyms`. Off for a
    /// fully offline run (then only `captured_dir` names frames).
    pub live: bool,
    /// Extra roots searched for split debug files like `/usr/lib/debug` (`-symbols DIR`).
    pub debug_roots: Vec<PathBuf>,
    /// Trust perf maps and jitdumps whatever their owner.
    pub force_maps: bool,
}

impl SymbolizeOptions {
    /// Names from the running system (and `captured_dir` when given).
    pub fn live() -> Self {
        SymbolizeOptions { live: true, ..Default::default() }
    }

    /// Names only from a capture's `symbols/` directory.
    pub fn offline(captured_dir: impl Into<PathBuf>) -> Self {
        SymbolizeOptions { captured_dir: Some(captured_dir.into()), live: false, ..Default::default() }
    }
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
    /// Every distinct warning, in the order raised (each also logged once).
    pub warnings: Vec<String>,
}

#[derive(Debug, Clone, Default)]
pub struct Symbolized {
    /// In time order.
    pub samples: Vec<ResolvedSample>,
    pub stats: SymbolizeStats,
}

/// Names a whole recording.
pub fn symbolize_file(reader: &PerfDataReader, opts: &SymbolizeOptions) -> Result<Symbolized> {
    Symbolizer::new(opts)?.run(reader)
}

/// A resolved frame minus its address: what the cache stores. `offset = addr - base`.
#[derive(Debug, Clone)]
struct Template {
    symbol: Option<Arc<str>>,
    base: u64,
    module: Arc<str>,
    kind: FrameKind,
}

impl Template {
    fn frame(&self, addr: u64) -> Frame {
        Frame {
            addr,
            symbol: self.symbol.clone(),
            offset: addr.wrapping_sub(self.base),
            module: self.module.clone(),
            kind: self.kind,
        }
    }
}

#[derive(Default)]
struct JitSources {
    perf_map: Option<(Arc<str>, PerfMap)>,
    perf_map_tried: bool,
    jitdump: Option<(Arc<str>, JitDump)>,
    /// The jitdump path last tried (a process maps one per exec).
    jitdump_tried: Option<Arc<str>>,
}

/// Cache key: (address space id, its generation, lookup address). Kernel addresses use space 0.
type CacheKey = (u64, u64, u64);

/// x86-64 kernel addresses live in the upper half; used only when a chain carries no context marker.
const KERNEL_HALF: u64 = 0xffff_8000_0000_0000;
const PERF_CONTEXT_HV: u64 = -32i64 as u64;
const PERF_CONTEXT_GUEST_KERNEL: u64 = -2176i64 as u64;
const PERF_CONTEXT_GUEST_USER: u64 = -2560i64 as u64;

pub struct Symbolizer {
    opts: SymbolizeOptions,
    captured: Option<CapturedDir>,
    processes: Processes,
    kernel: Option<Option<Arc<KernelSymbols>>>,
    dsos: HashMap<Arc<FileId>, Arc<DsoSymbols>>,
    jit: HashMap<u32, JitSources>,
    /// `/proc` facts per pid, read once; `None` when the process is gone (or the PID now belongs to another
    /// program).
    live_procs: HashMap<u32, Option<ProcessInfo>>,
    own_mount_ns: Option<u64>,
    cache: HashMap<CacheKey, Template>,
    build_ids: HashMap<String, Vec<u8>>,
    /// Kernel release the recording names (perf.data OSRELEASE feature), if any.
    recorded_release: Option<String>,
    preopened: HashMap<FileId, File>,
    usage: Option<Usage>,
    stats: SymbolizeStats,
    warned: HashSet<String>,
    kernel_module: Arc<str>,
    unknown_module: Arc<str>,
    hidden_kernel: Arc<str>,
}

impl Symbolizer {
    pub fn new(opts: &SymbolizeOptions) -> Result<Symbolizer> {
        let captured = opts.captured_dir.as_deref().map(CapturedDir::open).transpose()?;
        Ok(Symbolizer {
            opts: opts.clone(),
            captured,
            processes: Processes::default(),
            kernel: None,
            dsos: HashMap::new(),
            jit: HashMap::new(),
            live_procs: HashMap::new(),
            own_mount_ns: mount_ns("self"),
            cache: HashMap::new(),
            build_ids: HashMap::new(),
            recorded_release: None,
            preopened: HashMap::new(),
            usage: None,
            stats: SymbolizeStats::default(),
            warned: HashSet::new(),
            kernel_module: Arc::from(KERNEL_MODULE),
            unknown_module: Arc::from("[unknown]"),
            hidden_kernel: Arc::from("[kernel]"),
        })
    }

    /// Build-ids the recorder stored (perf.data BUILD_ID feature): a live file whose build-id differs is not used.
    pub fn add_build_ids(&mut self, entries: &[BuildIdEntry]) {
        for e in entries {
            self.build_ids.insert(e.filename.clone(), e.build_id.clone());
        }
    }

    /// Files the capture opened while their process lived (a container's files vanish with it).
    pub(crate) fn set_preopened(&mut self, files: HashMap<FileId, File>) {
        self.preopened = files;
    }

    /// Remember which symbols the run used, for [`take_usage`](Self::take_usage).
    pub(crate) fn record_usage(&mut self) {
        self.usage = Some(Usage::default());
    }

    pub(crate) fn take_usage(&mut self) -> Option<Usage> {
        self.usage.take()
    }

    pub fn stats(&self) -> &SymbolizeStats {
        &self.stats
    }

    /// Names every sample of a recording. Records are replayed in time order (perf writes each CPU's buffer in
    /// turn, so file order is not time order).
    pub fn run(mut self, reader: &PerfDataReader) -> Result<Symbolized> {
        self.run_in_place(reader)
    }

    pub(crate) fn run_in_place(&mut self, reader: &PerfDataReader) -> Result<Symbolized> {
        self.add_build_ids(&reader.features().build_ids);
        self.recorded_release = reader.features().osrelease.clone();
        for w in reader.warnings() {
            self.warn(format!("perf.data: {w}"));
        }
        let event_names: Vec<Arc<str>> = reader.events().iter().map(|e| Arc::from(e.name.as_str())).collect();
        let mut timeline: Vec<(u64, Record)> = Vec::new();
        let mut last_time = 0u64;
        let mut lost = 0u64;
        let read = reader.for_each_record(|r| {
            match &r {
                Record::Sample(_) | Record::Mmap(_) | Record::Comm(_) | Record::Fork(_) | Record::Exit(_) => {
                    // Records without a time (no sample_id_all) keep their place after the previous one.
                    let t = r.time().unwrap_or(last_time);
                    last_time = t;
                    timeline.push((t, r));
                }
                Record::Lost(l) => lost += l.lost,
                Record::LostSamples { lost: n, .. } => lost += n,
                _ => {}
            }
            Ok(())
        })?;
        if read.undecodable > 0 {
            self.warn(format!("perf.data: {} records could not be decoded and were skipped", read.undecodable));
        }
        if read.truncated_bytes > 0 {
            self.warn(format!(
                "perf.data: the last {} bytes do not form a whole record (truncated file)",
                read.truncated_bytes
            ));
        }
        self.stats.lost_samples = lost;
        timeline.sort_by_key(|(t, _)| *t);
        let mut samples = Vec::with_capacity(timeline.len());
        for (_, record) in &timeline {
            match record {
                Record::Sample(s) => {
                    let ev = reader.event_of(s.id);
                    let idx = reader.events().iter().position(|e| std::ptr::eq(e, ev)).unwrap_or(0);
                    samples.push(self.resolve(s, event_names[idx].clone()));
                }
                other => self.observe(other),
            }
        }
        Ok(Symbolized { samples, stats: std::mem::take(&mut self.stats) })
    }

    /// Applies a non-sample record (call in time order).
    pub fn observe(&mut self, record: &Record) {
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

    /// Names one sample's frames, leaf first, context markers removed.
    pub fn resolve(&mut self, s: &Sample, event: Arc<str>) -> ResolvedSample {
        let comm = self.processes.comm(s.pid, s.tid);
        let mut frames = Vec::with_capacity(s.callchain.len().max(1));
        let has_addresses = s.callchain.iter().any(|&a| a < PERF_CONTEXT_MAX);
        let sample_in_kernel =
            s.misc & PERF_RECORD_MISC_CPUMODE_MASK == crate::perf_data::records::PERF_RECORD_MISC_KERNEL;
        if has_addresses {
            let mut in_kernel: Option<bool> = None;
            let mut leaf = true;
            for &entry in &s.callchain {
                if entry >= PERF_CONTEXT_MAX {
                    in_kernel = match entry {
                        PERF_CONTEXT_KERNEL | PERF_CONTEXT_HV | PERF_CONTEXT_GUEST_KERNEL => Some(true),
                        PERF_CONTEXT_USER | PERF_CONTEXT_GUEST_USER => Some(false),
                        _ => in_kernel,
                    };
                    continue;
                }
                let kernel = in_kernel.unwrap_or(entry >= KERNEL_HALF);
                frames.push(self.frame(s.pid, entry, kernel, leaf, s.time));
                leaf = false;
            }
        } else {
            frames.push(self.frame(s.pid, s.ip, sample_in_kernel || s.ip >= KERNEL_HALF, true, s.time));
        }
        self.count(&frames);
        ResolvedSample { pid: s.pid, tid: s.tid, cpu: s.cpu, time: s.time, period: s.period, comm, event, frames }
    }

    fn count(&mut self, frames: &[Frame]) {
        let st = &mut self.stats;
        st.samples += 1;
        st.frames += frames.len() as u64;
        for f in frames {
            match (f.kind, f.symbol.is_some()) {
                (FrameKind::Kernel, _) => st.kernel_frames += 1,
                (FrameKind::Native, true) => st.native_frames_named += 1,
                (FrameKind::Native, false) => st.native_frames_unnamed += 1,
                (FrameKind::Jit, true) => st.jit_frames_named += 1,
                (FrameKind::Jit, false) => st.jit_frames_unnamed += 1,
                (FrameKind::Unknown, _) => st.unknown_frames += 1,
            }
        }
    }

    fn frame(&mut self, pid: u32, addr: u64, kernel: bool, leaf: bool, time: u64) -> Frame {
        if kernel {
            let key = (0, 0, addr);
            if let Some(t) = self.cache.get(&key) {
                return t.frame(addr);
            }
            let t = self.kernel_template(addr);
            let frame = t.frame(addr);
            self.cache.insert(key, t);
            return frame;
        }
        // A caller's entry is the return address, which can be the first byte after a call at a function's very
        // end: look up the byte before it, as perf does, but show the real address.
        let lookup = if leaf { addr } else { addr.saturating_sub(1) };
        let (space_key, mapping) = match self.processes.get(pid) {
            Some(p) => ((p.space.id, p.space.generation), p.space.find(lookup).cloned()),
            None => ((u64::MAX - pid as u64, 0), None),
        };
        let jit_code = mapping.as_ref().map_or(true, |m| m.kind == MapKind::Jit);
        if jit_code {
            if let Some(t) = self.jitdump_template(pid, lookup, time) {
                return t.frame(addr);
            }
        }
        let key = (space_key.0, space_key.1, lookup);
        if let Some(t) = self.cache.get(&key) {
            return t.frame(addr);
        }
        let t = self.user_template(pid, lookup, mapping.as_ref());
        let frame = t.frame(addr);
        self.cache.insert(key, t);
        frame
    }

    fn kernel_template(&mut self, addr: u64) -> Template {
        let unnamed = Template { symbol: None, base: 0, module: self.kernel_module.clone(), kind: FrameKind::Kernel };
        let Some(k) = self.kernel_symbols() else { return unnamed };
        if k.hidden {
            if let Some(u) = &mut self.usage {
                u.kernel_hidden = true;
            }
            return Template { symbol: Some(self.hidden_kernel.clone()), base: addr, ..unnamed };
        }
        let Some(r) = k.table.lookup(addr) else { return unnamed };
        if let Some(u) = &mut self.usage {
            u.kernel.insert(r.start, (r.end, r.value.name.clone(), r.value.module.clone()));
        }
        Template {
            symbol: Some(r.value.name.clone()),
            base: r.start,
            module: r.value.module.clone(),
            kind: FrameKind::Kernel,
        }
    }

    fn kernel_symbols(&mut self) -> Option<Arc<KernelSymbols>> {
        if let Some(k) = &self.kernel {
            return k.clone();
        }
        let mut loaded = None;
        if let Some(c) = &self.captured {
            match c.load_kernel() {
                Ok(k) => loaded = k,
                Err(e) => self.warn(format!("captured kernel symbols unreadable: {e:#}")),
            }
        }
        if loaded.is_none() && self.opts.live {
            match KernelSymbols::read_live() {
                Ok(k) => loaded = Some(k),
                Err(e) => self.warn(format!("cannot read /proc/kallsyms ({e}): kernel frames stay unnamed")),
            }
        }
        if loaded.as_ref().is_some_and(|k| k.hidden) {
            self.warn(
                "kernel symbols are hidden (/proc/kallsyms lists zero addresses because of kernel.kptr_restrict): \
                 kernel frames are shown as [kernel]; to name them run profcpu as root after \
                 `sysctl kernel.kptr_restrict=0`"
                    .to_string(),
            );
        }
        let k = loaded.map(Arc::new);
        self.kernel = Some(k.clone());
        k
    }

    fn user_template(&mut self, pid: u32, lookup: u64, mapping: Option<&Mapping>) -> Template {
        let Some(m) = mapping else {
            // perf names JIT code even when its mapping was never recorded.
            return self.perf_map_template(pid, lookup).unwrap_or(Template {
                symbol: None,
                base: 0,
                module: self.unknown_module.clone(),
                kind: FrameKind::Unknown,
            });
        };
        let module_base = m.start.wrapping_sub(m.pgoff);
        let module = m.file.path.clone();
        match m.kind {
            MapKind::Jit => self.perf_map_template(pid, lookup).unwrap_or(Template {
                symbol: None,
                base: module_base,
                module,
                kind: FrameKind::Jit,
            }),
            MapKind::File | MapKind::Vdso => {
                let dso = self.dso(pid, m);
                let usage = self.usage.as_mut().map(|u| u.dsos.entry(m.file.clone()).or_default());
                match &*dso {
                    DsoSymbols::Elf { table, .. } => {
                        let usage = usage.map(|u| u.get_or_insert_with(Default::default));
                        match table.lookup(m.file_offset(lookup)) {
                            Some(r) => {
                                let name = r.value.get();
                                if let Some(u) = usage {
                                    u.insert(r.start, (r.end, name.clone()));
                                }
                                Template {
                                    symbol: Some(name),
                                    base: module_base.wrapping_add(r.start),
                                    module,
                                    kind: FrameKind::Native,
                                }
                            }
                            None => Template { symbol: None, base: module_base, module, kind: FrameKind::Native },
                        }
                    }
                    DsoSymbols::Opaque { .. } => {
                        Template { symbol: None, base: module_base, module, kind: FrameKind::Unknown }
                    }
                }
            }
            MapKind::Special | MapKind::JitDumpFile => {
                Template { symbol: None, base: module_base, module, kind: FrameKind::Unknown }
            }
        }
    }

    fn perf_map_template(&mut self, pid: u32, addr: u64) -> Option<Template> {
        self.load_perf_map(pid);
        let (module, map) = self.jit.get(&pid)?.perf_map.as_ref()?;
        let r = map.symbols.lookup(addr)?;
        Some(Template { symbol: Some(r.value.clone()), base: r.start, module: module.clone(), kind: FrameKind::Jit })
    }

    fn jitdump_template(&mut self, pid: u32, addr: u64, time: u64) -> Option<Template> {
        let path = self.processes.get(pid)?.jitdump.clone()?;
        let sources = self.jit.entry(pid).or_default();
        if sources.jitdump_tried.as_ref() != Some(&path) {
            sources.jitdump_tried = Some(path.clone());
            let loaded = self.load_jitdump(pid, &path);
            self.jit.entry(pid).or_default().jitdump = loaded;
        }
        let (module, dump) = self.jit.get(&pid)?.jitdump.as_ref()?;
        let code = dump.lookup(addr, time)?;
        Some(Template {
            symbol: Some(code.name.clone()),
            base: code.start,
            module: module.clone(),
            kind: FrameKind::Jit,
        })
    }

    /// The process as it is now in `/proc`, if live lookups are allowed, it still runs, and it is still the program
    /// the recording saw (a recycled PID belongs to someone else).
    fn live_process(&mut self, pid: u32) -> Option<ProcessInfo> {
        if !self.opts.live {
            return None;
        }
        if let Some(known) = self.live_procs.get(&pid) {
            return known.clone();
        }
        let mut info = ProcessInfo::read(pid);
        if let (Some(now), Some(recorded)) = (&info, self.processes.process_comm(pid)) {
            if now.comm != *recorded {
                self.warn(format!(
                    "PID {pid} now runs '{}', not the recorded '{recorded}': not reading its files",
                    now.comm
                ));
                info = None;
            }
        }
        self.live_procs.insert(pid, info.clone());
        info
    }

    /// The root to read a live process's files through; `None` when it shares ours (plain host paths are then the
    /// same files, and cheaper).
    fn target_root(&self, info: &ProcessInfo) -> Option<PathBuf> {
        let theirs = mount_ns(&info.pid.to_string());
        if theirs.is_some() && theirs == self.own_mount_ns {
            None
        } else {
            Some(info.root())
        }
    }

    fn nspid(&mut self, pid: u32) -> u32 {
        if let Some(p) = self.captured.as_ref().and_then(|c| c.processes.get(&pid)) {
            return p.nspid;
        }
        self.live_process(pid).map_or(pid, |i| i.nspid)
    }

    fn load_perf_map(&mut self, pid: u32) {
        let sources = self.jit.entry(pid).or_default();
        if sources.perf_map_tried {
            return;
        }
        sources.perf_map_tried = true;
        let nspid = self.nspid(pid);
        let shown: Arc<str> = Arc::from(format!("/tmp/perf-{nspid}.map"));
        let mut bytes = None;
        if let Some(c) = &self.captured {
            bytes = read_captured(&c.perf_map(pid));
        }
        if bytes.is_none() {
            bytes = self.read_live_jit_file(pid, Path::new(&*shown));
        }
        let Some(bytes) = bytes else { return };
        let map = PerfMap::parse(&bytes);
        if map.bad_lines > 0 {
            self.warn(format!("{shown} (PID {pid}): skipped {} malformed of {} lines", map.bad_lines, map.lines));
        }
        self.jit.entry(pid).or_default().perf_map = Some((shown, map));
    }

    fn load_jitdump(&mut self, pid: u32, path: &Arc<str>) -> Option<(Arc<str>, JitDump)> {
        let mut bytes = self.captured.as_ref().and_then(|c| read_captured(&c.jitdump(pid)));
        let mut still_written = false;
        if bytes.is_none() {
            bytes = self.read_live_jit_file(pid, Path::new(&**path));
            still_written = self.live_procs.get(&pid).is_some_and(|p| p.is_some());
        }
        let bytes = bytes?;
        let dump = JitDump::parse(&bytes);
        for w in &dump.warnings {
            self.warn(format!("{path} (PID {pid}): {w}"));
        }
        match dump.incomplete_tail {
            // The JIT was mid-record when we read: expected, and only code loaded in that instant is missed.
            Some(n) if still_written => tracing::debug!("{path}: skipped a {n}-byte record being written"),
            Some(n) => self.warn(format!(
                "{path} (PID {pid}) ends in an incomplete record ({n} bytes): the file was cut short, code loaded last \
                 may be unnamed"
            )),
            None => {}
        }
        Some((path.clone(), dump))
    }

    /// Reads a perf map or jitdump of `pid` from the live system: through the process's root while it runs, else
    /// from the host path (where perf finds maps of processes that are gone), each with the ownership check.
    fn read_live_jit_file(&mut self, pid: u32, path: &Path) -> Option<Vec<u8>> {
        if !self.opts.live {
            return None;
        }
        let (root, allowed) = match self.live_process(pid) {
            Some(info) => (self.target_root(&info), vec![info.uid]),
            None => (None, vec![jit_files::current_euid()]),
        };
        match jit_files::open_trusted(root.as_deref(), path, &allowed, self.opts.force_maps) {
            Ok(mut f) => {
                let mut bytes = Vec::new();
                match f.read_to_end(&mut bytes) {
                    Ok(_) => Some(bytes),
                    Err(e) => {
                        self.warn(format!("cannot read {} of PID {pid}: {e}", path.display()));
                        None
                    }
                }
            }
            Err(OpenError::NotFound) => None,
            Err(OpenError::Untrusted { owner }) => {
                self.warn(jit_files::untrusted_warning(path, owner));
                None
            }
            Err(OpenError::Other(e)) => {
                self.warn(format!("cannot open {} of PID {pid}: {e}", path.display()));
                None
            }
        }
    }

    fn dso(&mut self, pid: u32, m: &Mapping) -> Arc<DsoSymbols> {
        if let Some(d) = self.dsos.get(&m.file) {
            return d.clone();
        }
        let loaded = Arc::new(self.load_dso(pid, m));
        match &*loaded {
            DsoSymbols::Opaque { reason } => tracing::debug!("{}: no symbols ({reason})", m.file.path),
            DsoSymbols::Elf { table, origin } => {
                tracing::debug!("{}: {} symbols from {origin:?}", m.file.path, table.len())
            }
        }
        self.dsos.insert(m.file.clone(), loaded.clone());
        loaded
    }

    fn load_dso(&mut self, pid: u32, m: &Mapping) -> DsoSymbols {
        let path = m.file.path.clone();
        if let Some(c) = &self.captured {
            if let Some(entry) = c.find_dso(&m.file) {
                return match &entry.symfile {
                    Some(name) => match c.load_dso_table(name) {
                        Ok(table) => DsoSymbols::Elf { table, origin: dso::Origin::Captured },
                        Err(e) => DsoSymbols::Opaque { reason: format!("captured table unreadable: {e:#}") },
                    },
                    None => DsoSymbols::Opaque { reason: "captured without symbols".into() },
                };
            }
        }
        if !self.opts.live {
            return DsoSymbols::Opaque { reason: "not in the captured symbols and live lookups are off".into() };
        }
        if m.kind == MapKind::Vdso {
            return if self.same_kernel() {
                dso::own_vdso()
            } else {
                DsoSymbols::Opaque { reason: "recorded on another kernel".into() }
            };
        }
        let expected = m.file.build_id.as_deref().map(<[u8]>::to_vec).or_else(|| self.build_ids.get(&*path).cloned());
        let info = self.live_process(pid);
        let root = info.as_ref().and_then(|i| self.target_root(i));
        let roots = SearchRoots { target_root: root.clone(), host: true, extra: self.opts.debug_roots.clone() };
        let file = match self.preopened.remove(&*m.file) {
            Some(f) => Ok(f),
            None => self.open_mapped_file(pid, m, info.as_ref(), root.as_deref()),
        };
        match file {
            Ok(f) => dso::load(f, &path, &roots, expected.as_deref()),
            Err(e) => {
                self.warn(format!("cannot read {path} (mapped by PID {pid}): {e}; its frames show as module+offset"));
                DsoSymbols::Opaque { reason: e }
            }
        }
    }

    fn open_mapped_file(
        &self,
        pid: u32,
        m: &Mapping,
        info: Option<&ProcessInfo>,
        root: Option<&Path>,
    ) -> Result<File, String> {
        let path = Path::new(&*m.file.path);
        let deleted = m.file.path.ends_with(" (deleted)");
        if info.is_some() && deleted {
            // The kernel still holds the replaced file; /proc/PID/map_files reaches exactly it.
            let p = format!("/proc/{pid}/map_files/{:x}-{:x}", m.start, m.end);
            return File::open(&p).map_err(|e| format!("{p}: {e}"));
        }
        match (info, root) {
            (Some(_), Some(root)) => super::root_path::open_in_root(root, path).map_err(|e| e.to_string()),
            (Some(_), None) => super::root_path::open_regular_nofollow(path).map_err(|e| e.to_string()),
            (None, _) => {
                // The process is gone: the host file at that path is only used if it is the file recorded.
                let f = super::root_path::open_regular_nofollow(path).map_err(|e| e.to_string())?;
                use std::os::unix::fs::MetadataExt;
                let ino = f.metadata().map_err(|e| e.to_string())?.ino();
                if m.file.ino != 0 && ino != m.file.ino && m.file.build_id.is_none() {
                    return Err("the file at that path is not the one the process mapped".into());
                }
                Ok(f)
            }
        }
    }

    /// Whether the recording was made on the kernel running now (unknown counts as yes: same machine is the
    /// normal live case).
    fn same_kernel(&self) -> bool {
        let running = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        self.recorded_release.as_deref().map_or(true, |r| r.trim() == running.trim())
    }

    fn warn(&mut self, msg: String) {
        if self.warned.insert(msg.clone()) {
            tracing::warn!("{msg}");
            self.stats.warnings.push(msg);
        }
    }
}

fn read_captured(path: &Path) -> Option<Vec<u8>> {
    let mut f = super::root_path::open_regular_nofollow(path).ok()?;
    let mut bytes = Vec::new();
    f.read_to_end(&mut bytes).ok()?;
    Some(bytes)
}

/// Inode of a process's mount namespace (`self` or a pid).
fn mount_ns(pid: &str) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(format!("/proc/{pid}/ns/mnt")).ok().map(|m| m.ino())
}
