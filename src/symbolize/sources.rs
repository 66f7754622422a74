//! Where names come from, loaded once each and cached: kernel symbols, each process's perf map and jitdump, each
//! mapped file's symbols. A capture's saved copies are preferred; the live system (`/proc/<pid>/…`, the files
//! through the target's own root, `/proc/kallsyms`) is read only when allowed.

use super::address_space::{FileId, MapKind, Mapping, Processes};
use super::debug_search::{self, SearchReport, SearchRoots};
use super::dso::{self, DsoSymbols};
use super::elf::{self, ElfInfo, SymbolSource};
use super::function_bounds::FunctionBounds;
use super::jit_files;
use super::jitdump::JitDump;
use super::kallsyms::{KernelSymbols, KERNEL_MODULE};
use super::options::SymbolizeOptions;
use super::perf_map::PerfMap;
use super::proc_info::ProcessInfo;
use super::r2r_symbols::{self, R2rSymbols};
use super::symbol_table::SymbolTable;
use super::symbols_dir::{jit_frames_name, CapturedDir, CapturedDso, CapturedTable};
use super::unwind::JitFrames;
use crate::fs::{input, Last, Limit, Root};
use anyhow::Result;
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;

/// Distinct warnings, each logged once, in the order raised.
#[derive(Debug, Default)]
pub struct Warnings {
    seen: HashSet<String>,
    pub list: Vec<String>,
}

impl Warnings {
    pub fn warn(&mut self, msg: String) {
        if self.seen.insert(msg.clone()) {
            log_once(&msg);
            self.list.push(msg);
        }
    }
}

/// Logs a warning unless this process logged the same one before. `collect` names the samples twice — the
/// capture's live pass finds which symbols to save, the outputs' pass names from that copy — and both meet the
/// same perf maps and jitdumps: the user hears of a problem with one once.
pub fn log_once(msg: &str) {
    static LOGGED: std::sync::Mutex<Option<HashSet<String>>> = std::sync::Mutex::new(None);
    let mut logged = LOGGED.lock().unwrap_or_else(|e| e.into_inner());
    if logged.get_or_insert_with(HashSet::new).insert(msg.to_string()) {
        tracing::warn!("{msg}");
    }
}

#[derive(Default)]
struct JitFiles {
    perf_map: Option<Arc<(Arc<str>, PerfMap)>>,
    perf_map_tried: bool,
    jitdump: Option<Arc<(Arc<str>, JitDump)>>,
    /// The jitdump path last tried (a process maps one per exec).
    jitdump_tried: Option<Arc<str>>,
    /// The frames of its JIT methods that frame pointers do not unwind, as a capture saved them.
    frames: Option<Option<Arc<JitFrames>>>,
}

pub struct Sources {
    opts: SymbolizeOptions,
    captured: Option<CapturedDir>,
    kernel: Option<Option<Arc<KernelSymbols>>>,
    /// The live kernel symbols being read on a thread of their own (see [`prefetch_kernel`](Self::prefetch_kernel)).
    kernel_prefetch: Option<std::thread::JoinHandle<Result<KernelSymbols, String>>>,
    /// Live jitdumps being read on threads of their own, by PID and path (see
    /// [`prefetch_jitdump`](Self::prefetch_jitdump)).
    jitdump_prefetch: HashMap<(u32, Arc<str>), std::thread::JoinHandle<PrefetchedJitdump>>,
    dsos: HashMap<Arc<FileId>, Arc<DsoSymbols>>,
    jit: HashMap<u32, JitFiles>,
    /// `/proc` facts per pid, read once; `None` when the process is gone (or the PID now belongs to another
    /// program).
    live_procs: HashMap<u32, Option<ProcessInfo>>,
    /// Build-ids the recording stored per path (perf.data BUILD_ID feature).
    pub build_ids: HashMap<String, Vec<u8>>,
    /// Kernel release the recording names (perf.data OSRELEASE feature), if any.
    pub recorded_release: Option<String>,
    /// Files a capture opened while their process lived.
    pub preopened: HashMap<FileId, File>,
    /// Namespace PIDs a capture read while the processes lived (before `processes.txt` is written).
    pub nspids: HashMap<u32, u32>,
    /// The captured JIT files are still being copied, under this lock: one may end in a record being written.
    pub jit_copies_growing: Option<Arc<std::sync::Mutex<()>>>,
    pub warnings: Warnings,
}

impl Sources {
    pub fn new(opts: &SymbolizeOptions) -> Result<Sources> {
        let captured = opts.captured_dir.as_ref().map(CapturedDir::open).transpose()?;
        Ok(Sources {
            opts: opts.clone(),
            captured,
            kernel: None,
            kernel_prefetch: None,
            jitdump_prefetch: HashMap::new(),
            dsos: HashMap::new(),
            jit: HashMap::new(),
            live_procs: HashMap::new(),
            build_ids: HashMap::new(),
            recorded_release: None,
            preopened: HashMap::new(),
            nspids: HashMap::new(),
            jit_copies_growing: None,
            warnings: Warnings::default(),
        })
    }

    /// Starts reading the live kernel symbols on a thread of their own when the captured ones will not do (a
    /// recording with kernel frames, named live): kallsyms is the largest source of names, and `/proc/kallsyms`
    /// costs the kernel tens of milliseconds to format, time the naming of everything else can use.
    pub fn prefetch_kernel(&mut self) {
        let captured = self.captured.as_ref().is_some_and(|c| c.has_kernel());
        if self.kernel.is_some() || self.kernel_prefetch.is_some() || captured || !self.opts.live {
            return;
        }
        let perf_cache = self.build_ids.get(KERNEL_MODULE).filter(|_| self.same_kernel()).cloned();
        let load = move || load_live_kernel(perf_cache.as_deref());
        self.kernel_prefetch = std::thread::Builder::new().name("kallsyms".into()).spawn(load).ok();
    }

    /// Starts reading and parsing process `pid`'s live jitdump at `path` on a thread of its own, as soon as the
    /// recording shows the process mapping it: the largest of a JIT's files (its records carry the code), wanted
    /// with the first samples, while the main thread loads the libraries' symbols those samples need too.
    pub fn prefetch_jitdump(&mut self, pid: u32, path: &str) {
        let tried = |files: &JitFiles| files.jitdump_tried.as_deref() == Some(path);
        let captured = self.captured.as_ref().is_some_and(|c| c.has_jit_file(&c.jitdump(pid)));
        if !self.opts.live || captured || self.jit_copies_growing.is_some() || self.jit.get(&pid).is_some_and(tried) {
            return;
        }
        let key = (pid, Arc::from(path));
        if self.jitdump_prefetch.contains_key(&key) {
            return;
        }
        let (path, force) = (key.1.clone(), self.opts.force_maps);
        let read = move || {
            let read_as = ProcessInfo::read(pid);
            let dump = read_jitdump(read_as.as_ref(), pid, Path::new(&*path), force);
            PrefetchedJitdump { read_as, dump }
        };
        if let Ok(thread) = std::thread::Builder::new().name("jitdump".into()).spawn(read) {
            self.jitdump_prefetch.insert(key, thread);
        }
    }

    /// Whether a jitdump is still being read by [`prefetch_jitdump`](Self::prefetch_jitdump).
    pub fn reading_jitdump(&self) -> bool {
        self.jitdump_prefetch.values().any(|thread| !thread.is_finished())
    }

    /// The jitdump [`prefetch_jitdump`](Self::prefetch_jitdump) read, if it was read as the process is known now
    /// (else it is read again).
    fn prefetched_jitdump(&mut self, pid: u32, path: &Arc<str>, processes: &Processes) -> Option<Option<JitDump>> {
        let fetched = self.jitdump_prefetch.remove(&(pid, path.clone()))?.join().ok()?;
        let now = self.live_process(pid, processes);
        let same = |a: &ProcessInfo, b: &ProcessInfo| (a.uid, a.started_at, &a.comm) == (b.uid, b.started_at, &b.comm);
        let read_alike = match (&now, &fetched.read_as) {
            (Some(now), Some(then)) => same(now, then),
            (None, None) => true,
            _ => false,
        };
        read_alike.then(|| self.warned(fetched.dump))
    }

    fn warned<T>(&mut self, read: Result<Option<T>, String>) -> Option<T> {
        read.unwrap_or_else(|warning| {
            self.warnings.warn(warning);
            None
        })
    }

    pub fn kernel(&mut self) -> Option<Arc<KernelSymbols>> {
        if let Some(k) = &self.kernel {
            return k.clone();
        }
        let mut loaded = None;
        if let Some(c) = &self.captured {
            match c.load_kernel() {
                Ok(k) => loaded = k,
                Err(e) => self.warnings.warn(format!("captured kernel symbols unreadable: {e:#}")),
            }
        }
        if loaded.is_none() && self.opts.live {
            let perf_cache = self.build_ids.get(KERNEL_MODULE).filter(|_| self.same_kernel()).cloned();
            let live = match self.kernel_prefetch.take() {
                Some(thread) => thread.join().unwrap_or_else(|_| Err("reading kallsyms panicked".into())),
                None => load_live_kernel(perf_cache.as_deref()),
            };
            match live {
                Ok(k) => loaded = Some(k),
                Err(e) => self.warnings.warn(e),
            }
        }
        if loaded.as_ref().is_some_and(|k| k.hidden) {
            self.warnings.warn(
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

    /// A captured perf map or jitdump (named by `name`), read whole (while the capture writes none).
    fn read_captured_jit_file(&self, name: impl Fn(&CapturedDir) -> String) -> Option<Vec<u8>> {
        let captured = self.captured.as_ref()?;
        let _copying = self.jit_copies_growing.as_ref().map(|l| l.lock().unwrap_or_else(|e| e.into_inner()));
        captured.read_jit_file(&name(captured))
    }

    /// Forgets every perf map, jitdump and set of JIT frames loaded: they are read again when next needed (a
    /// capture's copies have grown).
    pub fn forget_jit_files(&mut self) {
        self.jit.clear();
    }

    /// The process's perf map and the name it is shown under (`/tmp/perf-<nspid>.map`).
    pub fn perf_map(&mut self, pid: u32, processes: &Processes) -> Option<Arc<(Arc<str>, PerfMap)>> {
        let files = self.jit.entry(pid).or_default();
        if files.perf_map_tried {
            return files.perf_map.clone();
        }
        files.perf_map_tried = true;
        let nspid = self.nspid(pid, processes);
        let shown: Arc<str> = Arc::from(format!("/tmp/perf-{nspid}.map"));
        let mut bytes = self.read_captured_jit_file(|c| c.perf_map(pid));
        if bytes.is_none() {
            bytes = self.read_live(pid, Path::new(&*shown), processes, read_jit_file);
        }
        let map = PerfMap::parse(&bytes?);
        if map.bad_lines > 0 {
            self.warnings
                .warn(format!("{shown} (PID {pid}): skipped {} malformed of {} lines", map.bad_lines, map.lines));
        }
        let loaded = Arc::new((shown, map));
        self.jit.entry(pid).or_default().perf_map = Some(loaded.clone());
        Some(loaded)
    }

    /// The frames of a process's JIT methods that frame pointers do not unwind: those a capture read from the live
    /// process's code, and those of its jitdump (whose records carry the code).
    pub fn jit_frames(&mut self, pid: u32, processes: &Processes) -> Option<Arc<JitFrames>> {
        if let Some(frames) = self.jit.get(&pid).and_then(|f| f.frames.as_ref()) {
            return frames.clone();
        }
        let mut rules = Vec::new();
        let copying = self.jit_copies_growing.as_ref().map(|l| l.lock().unwrap_or_else(|e| e.into_inner()));
        let captured = self.captured.as_ref().map(|c| c.jit_frames(pid));
        drop(copying);
        match captured {
            Some(Ok(Some((frames, bad)))) => {
                if bad > 0 {
                    self.warnings.warn(format!("{} (PID {pid}): skipped {bad} malformed lines", jit_frames_name(pid)));
                }
                rules.extend(frames.rules());
            }
            Some(Err(e)) => self.warnings.warn(format!("captured JIT frames of PID {pid} unreadable: {e:#}")),
            _ => {}
        }
        if let Some(dump) = self.jitdump(pid, processes) {
            rules.extend(dump.1.frames());
        }
        let loaded = (!rules.is_empty()).then(|| Arc::new(JitFrames::from_rules(rules)));
        self.jit.entry(pid).or_default().frames = Some(loaded.clone());
        loaded
    }

    /// The jitdump the process mapped (path as it sees it), parsed.
    pub fn jitdump(&mut self, pid: u32, processes: &Processes) -> Option<Arc<(Arc<str>, JitDump)>> {
        let path = processes.get(pid)?.jitdump.clone()?;
        let files = self.jit.entry(pid).or_default();
        if files.jitdump_tried.as_ref() == Some(&path) {
            return files.jitdump.clone();
        }
        files.jitdump_tried = Some(path.clone());
        let loaded = self.load_jitdump(pid, &path, processes).map(Arc::new);
        self.jit.entry(pid).or_default().jitdump = loaded.clone();
        loaded
    }

    fn load_jitdump(&mut self, pid: u32, path: &Arc<str>, processes: &Processes) -> Option<(Arc<str>, JitDump)> {
        let (dump, still_written) = match self.read_captured_jit_file(|c| c.jitdump(pid)) {
            Some(bytes) => (JitDump::parse(&bytes), self.jit_copies_growing.is_some()),
            None => {
                let dump = match self.prefetched_jitdump(pid, path, processes) {
                    Some(prefetched) => prefetched,
                    None => self.read_live(pid, Path::new(&**path), processes, read_jitdump),
                };
                (dump?, self.live_procs.get(&pid).is_some_and(|p| p.is_some()))
            }
        };
        for w in &dump.warnings {
            self.warnings.warn(format!("{path} (PID {pid}): {w}"));
        }
        match dump.incomplete_tail {
            // The JIT was mid-record when we read: expected, and only code loaded in that instant is missed.
            Some(n) if still_written => tracing::debug!("{path}: skipped a {n}-byte record being written"),
            Some(n) => self.warnings.warn(format!(
                "{path} (PID {pid}) ends in an incomplete record ({n} bytes): the file was cut short, code loaded last \
                 may be unnamed"
            )),
            None => {}
        }
        Some((path.clone(), dump))
    }

    /// The symbols of a mapped file (or the vDSO).
    pub fn dso(&mut self, pid: u32, m: &Mapping, processes: &Processes) -> Arc<DsoSymbols> {
        if let Some(d) = self.dsos.get(&m.file) {
            return d.clone();
        }
        let started = std::time::Instant::now();
        let loaded = Arc::new(self.load_dso(pid, m, processes));
        let took = started.elapsed();
        match &*loaded {
            DsoSymbols::Opaque { reason } => tracing::debug!("{}: no symbols ({reason})", m.file.path),
            DsoSymbols::Elf { table, origin, .. } => {
                tracing::debug!("{}: {} symbols from {origin:?} in {took:.1?}", m.file.path, table.len())
            }
            DsoSymbols::R2r(r2r) => tracing::debug!("{}: {r2r:?} in {took:.1?}", m.file.path),
        }
        self.dsos.insert(m.file.clone(), loaded.clone());
        loaded
    }

    fn load_dso(&mut self, pid: u32, m: &Mapping, processes: &Processes) -> DsoSymbols {
        let path = m.file.path.clone();
        if let Some(c) = &self.captured {
            if let Some(entry) = c.find_dso(&m.file) {
                return match &entry.symfile {
                    Some(name) => match c.load_dso_table(name) {
                        Ok(t) if t.managed => {
                            DsoSymbols::R2r(R2rSymbols::Captured { names: t.names, functions: t.functions })
                        }
                        Ok(t) => match self.fetched_names(entry, &t) {
                            Some((table, found_at)) => DsoSymbols::Elf {
                                table,
                                origin: dso::Origin::DebugFile(found_at),
                                functions: FunctionBounds::known(t.functions),
                            },
                            None => DsoSymbols::Elf {
                                table: t.names,
                                origin: dso::Origin::Captured,
                                functions: FunctionBounds::known(t.functions),
                            },
                        },
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
        let info = self.live_process(pid, processes);
        // A container's files only through its root: never the host's file of the same name.
        let root = match &info {
            Some(i) if i.in_container() => match i.root() {
                Ok(root) => Some(root),
                Err(e) => return DsoSymbols::Opaque { reason: e.to_string() },
            },
            _ => None,
        };
        let roots = SearchRoots {
            target_root: root.clone(),
            host: true,
            extra: self.opts.debug_roots.clone(),
            servers: self.opts.symbol_servers.clone(),
        };
        // A copy of the handle: the unwinder may need the same file.
        let preopened = self.preopened.get(&*m.file).and_then(|f| f.try_clone().ok());
        let opened_early = preopened.is_some();
        let file = match preopened {
            Some(f) => Ok(f),
            None => open_mapped_file(pid, m, info.is_some(), root.as_ref()),
        };
        match file {
            Ok(f) if r2r_symbols::looks_like_pe(&f) => {
                // Files beside a ReadyToRun image are read as the image was: through a live target's root; from
                // the host only when the image itself was (never a container's path on the host).
                let siblings_root = match (&info, &root) {
                    (Some(_), Some(root)) => Some(root.clone()),
                    (Some(_), None) => Root::host().ok(),
                    (None, _) if !opened_early => Root::host().ok(),
                    (None, _) => None,
                };
                let in_container = root.is_some();
                let mut sibling =
                    |name: &str, limit: Limit| read_sibling(siblings_root.as_ref()?, &path, name, limit, in_container);
                let file_name = path.rsplit('/').next().unwrap_or(&path);
                match R2rSymbols::load(f, file_name, &mut sibling) {
                    Ok(r2r) => DsoSymbols::R2r(r2r),
                    Err(reason) => DsoSymbols::Opaque { reason },
                }
            }
            Ok(f) => dso::load(f, &path, &roots, expected.as_deref()),
            Err(e) => {
                self.warnings
                    .warn(format!("cannot read {path} (mapped by PID {pid}): {e}; its frames show as module+offset"));
                DsoSymbols::Opaque { reason: e }
            }
        }
    }

    /// Names for a captured ELF file whose capture left functions unnamed (it was stripped), from its debug file
    /// fetched now by build-id (`postprocess -symbol-server`), mapped to file offsets with the saved load segments.
    fn fetched_names(
        &self,
        entry: &CapturedDso,
        captured: &CapturedTable,
    ) -> Option<(SymbolTable, std::path::PathBuf)> {
        let servers = self.opts.symbol_servers.as_ref()?;
        if captured.functions.is_empty() || captured.loads.is_empty() {
            return None;
        }
        // The capture's index has the build-id when the kernel gave it; the recording's BUILD_ID feature otherwise.
        let build_id = entry.build_id.as_deref().or_else(|| self.build_ids.get(&entry.path).map(Vec::as_slice))?;
        let info = ElfInfo { build_id: Some(build_id.to_vec()), ..Default::default() };
        let mut report = SearchReport::default();
        let Some(found) = debug_search::fetch(servers, build_id, &entry.path, &info, &mut report) else {
            for why in &report.rejected {
                tracing::info!("{}: {why}", entry.path);
            }
            return None;
        };
        let table = elf::function_symbols(found.data.bytes(), SymbolSource::Symtab, &captured.loads).ok()?;
        (!table.is_empty()).then_some((table, found.found_at))
    }

    /// The file behind a mapping, opened as for its symbols: the capture's handle, else through the live target's
    /// root. `None` when live lookups are off or it cannot be opened.
    pub fn open_mapped(&mut self, pid: u32, m: &Mapping, processes: &Processes) -> Option<File> {
        if !self.opts.live || m.kind != MapKind::File {
            return None;
        }
        if let Some(f) = self.preopened.get(&*m.file) {
            return f.try_clone().ok();
        }
        let info = self.live_process(pid, processes);
        let root = info.as_ref().and_then(container_root);
        open_mapped_file(pid, m, info.is_some(), root.as_ref()).ok()
    }

    /// The `.debug_frame` of a mapped file's split debug file (found and verified as for its symbols), for a file
    /// that carries no call frame information itself. `None` offline, or when there is none.
    pub fn debug_frame(&mut self, pid: u32, m: &Mapping, processes: &Processes) -> Option<Vec<u8>> {
        use object::{Object, ObjectSection};
        let file = self.open_mapped(pid, m, processes)?;
        let image = super::elf::ElfImage::read(file).ok()??;
        let info = super::elf::inspect(image.bytes()).ok()?;
        let root = self.live_process(pid, processes).as_ref().and_then(container_root);
        let roots = SearchRoots {
            target_root: root,
            host: true,
            extra: self.opts.debug_roots.clone(),
            servers: self.opts.symbol_servers.clone(),
        };
        let found = super::debug_search::find_debug_file(&m.file.path, &info, &roots, &mut Default::default())?;
        let debug = object::File::parse(found.data.bytes()).ok()?;
        let data = debug.section_by_name(".debug_frame")?.data().ok()?;
        (!data.is_empty()).then(|| data.to_vec())
    }

    /// The process as it is now in `/proc`, if live lookups are allowed, it still runs, and it is still the program
    /// the recording saw (a recycled PID belongs to someone else).
    fn live_process(&mut self, pid: u32, processes: &Processes) -> Option<ProcessInfo> {
        if !self.opts.live {
            return None;
        }
        if let Some(known) = self.live_procs.get(&pid) {
            return known.clone();
        }
        let mut info = ProcessInfo::read(pid);
        if let (Some(now), Some(recorded)) = (&info, processes.process_comm(pid)) {
            if now.comm != *recorded {
                self.warnings.warn(format!(
                    "PID {pid} now runs '{}', not the recorded '{recorded}': not reading its files",
                    now.comm
                ));
                info = None;
            }
        }
        self.live_procs.insert(pid, info.clone());
        info
    }

    fn nspid(&mut self, pid: u32, processes: &Processes) -> u32 {
        if let Some(p) = self.captured.as_ref().and_then(|c| c.processes.get(&pid)) {
            return p.nspid;
        }
        if let Some(&nspid) = self.nspids.get(&pid) {
            return nspid;
        }
        self.live_process(pid, processes).map_or(pid, |i| i.nspid)
    }

    /// A JIT file of `pid` as it runs now (if it is still the recorded program), read by `read` ([`read_jit_file`]
    /// or [`read_jitdump`]); its refusal a warning.
    fn read_live<T>(&mut self, pid: u32, path: &Path, processes: &Processes, read: JitFileReader<T>) -> Option<T> {
        let info = self.opts.live.then(|| self.live_process(pid, processes))?;
        let read = read(info.as_ref(), pid, path, self.opts.force_maps);
        self.warned(read)
    }

    /// Whether the recording was made on the kernel running now (unknown counts as yes: same machine is the
    /// normal live case).
    fn same_kernel(&self) -> bool {
        let running = crate::procfs::read_setting("/proc/sys/kernel/osrelease").unwrap_or_default();
        self.recorded_release.as_deref().map_or(true, |r| r.trim() == running.trim())
    }
}

/// A jitdump read and parsed by [`Sources::prefetch_jitdump`], and the process as it was read.
struct PrefetchedJitdump {
    read_as: Option<ProcessInfo>,
    dump: Result<Option<JitDump>, String>,
}

/// [`read_jit_file`] or [`read_jitdump`].
type JitFileReader<T> = fn(Option<&ProcessInfo>, u32, &Path, bool) -> Result<Option<T>, String>;

/// A perf map or jitdump of process `pid` from the live system: through the process's root while it runs (`info`),
/// else from the host path (where perf finds maps of processes that are gone), each with the checks of
/// [`jit_files::open_trusted`]. `Ok(None)` when it does not exist; the error is the warning to give.
fn read_jit_file(info: Option<&ProcessInfo>, pid: u32, path: &Path, force: bool) -> Result<Option<Vec<u8>>, String> {
    read_jit_file_with(info, pid, path, force, |file, size| input::read_all(file, size, Limit::JIT_FILE))
}

/// The jitdump of process `pid` from the live system, as [`read_jit_file`] finds it, parsed as it is read.
fn read_jitdump(info: Option<&ProcessInfo>, pid: u32, path: &Path, force: bool) -> Result<Option<JitDump>, String> {
    read_jit_file_with(info, pid, path, force, |file, _| JitDump::read(file, Limit::JIT_FILE))
}

/// [`read_jit_file`], the file opened (with its size) handed to `read`.
fn read_jit_file_with<T>(
    info: Option<&ProcessInfo>,
    pid: u32,
    path: &Path,
    force: bool,
    read: impl FnOnce(&mut File, u64) -> Result<T, input::InputError>,
) -> Result<Option<T>, String> {
    let (root, allowed, started_at) = match info {
        Some(info) => (info.root(), vec![info.uid], info.started_at),
        None => (Root::host(), vec![jit_files::current_euid()], None),
    };
    let opened = match root {
        Ok(root) => jit_files::open_trusted(&root, path, &allowed, force, started_at),
        Err(e) => Err(jit_files::OpenError::Other(e.to_string())),
    };
    match opened {
        Ok((mut f, size)) => {
            read(&mut f, size).map(Some).map_err(|e| format!("cannot read {} of PID {pid}: {e}", path.display()))
        }
        Err(e) => jit_files::refusal(path, pid, &e).map_or(Ok(None), Err),
    }
}

/// The running kernel's symbols: perf's own saved copy of kallsyms for the kernel with the build-id the recording
/// names (`perf_cache`), if there is one, else `/proc/kallsyms`; the error is the warning to give.
fn load_live_kernel(perf_cache: Option<&[u8]>) -> Result<KernelSymbols, String> {
    if let Some(k) = perf_cache.and_then(KernelSymbols::from_perf_cache) {
        return Ok(k);
    }
    KernelSymbols::read_live().map_err(|e| format!("cannot read /proc/kallsyms ({e}): kernel frames stay unnamed"))
}

/// Reads the file `name` in the folder of `image_path` (a path as the target sees it) through `root`, if it is a
/// regular file within `limit`; `None` when it is not there or refused.
fn read_sibling(root: &Root, image_path: &str, name: &str, limit: Limit, in_container: bool) -> Option<Vec<u8>> {
    if name.contains('/') || name.starts_with('.') {
        return None;
    }
    let path = Path::new(image_path).parent()?.join(name);
    // In a container's root a symlink is resolved inside it; on the host none is followed (as for mapped files).
    let last = if in_container { Last::Follow } else { Last::NoFollow };
    let mut file = root.open_file(&path, last).ok()?;
    let size = input::check(&file, limit).ok()?;
    input::read_all(&mut file, size, limit).ok()
}

/// Opens the file behind a mapping: through the target's root while it runs (via `/proc/PID/map_files` when the
/// file was deleted or replaced), else the host file at that path if it is still the one recorded.
fn open_mapped_file(pid: u32, m: &Mapping, alive: bool, root: Option<&Root>) -> Result<File, String> {
    let path = Path::new(&*m.file.path);
    if alive && m.file.path.ends_with(" (deleted)") {
        // The kernel still holds the replaced file; /proc/PID/map_files reaches exactly it.
        let p = format!("/proc/{pid}/map_files/{:x}-{:x}", m.start, m.end);
        return File::open(&p).map_err(|e| format!("{p}: {e}"));
    }
    let host = || Root::host().map_err(|e| e.to_string());
    match (alive, root) {
        (true, Some(root)) => root.open_file(path, Last::Follow).map_err(|e| e.to_string()),
        (true, None) => host()?.open_file(path, Last::NoFollow).map_err(|e| e.to_string()),
        (false, _) => {
            let f = host()?.open_file(path, Last::NoFollow).map_err(|e| e.to_string())?;
            let ino = f.metadata().map_err(|e| e.to_string())?.ino();
            if m.file.ino != 0 && ino != m.file.ino && m.file.build_id.is_none() {
                return Err("the file at that path is not the one the process mapped".into());
            }
            Ok(f)
        }
    }
}

/// The root a live process's files are read through when it lives in another mount namespace (a container);
/// `None` when it shares ours or its root cannot be opened.
fn container_root(info: &ProcessInfo) -> Option<Root> {
    info.in_container().then(|| info.root().ok()).flatten()
}
