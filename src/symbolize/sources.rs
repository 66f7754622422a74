//! Where names come from, loaded once each and cached: kernel symbols, each process's perf map and jitdump, each
//! mapped file's symbols. A capture's saved copies are preferred; the live system (`/proc/<pid>/…`, the files
//! through the target's own root, `/proc/kallsyms`) is read only when allowed.

use super::address_space::{FileId, MapKind, Mapping, Processes};
use super::debug_search::SearchRoots;
use super::dso::{self, DsoSymbols};
use super::jit_files::{self, OpenError};
use super::jitdump::JitDump;
use super::kallsyms::{KernelSymbols, KERNEL_MODULE};
use super::options::SymbolizeOptions;
use super::perf_map::PerfMap;
use super::proc_info::ProcessInfo;
use super::symbols_dir::CapturedDir;
use anyhow::Result;
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
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
            tracing::warn!("{msg}");
            self.list.push(msg);
        }
    }
}

#[derive(Default)]
struct JitFiles {
    perf_map: Option<Arc<(Arc<str>, PerfMap)>>,
    perf_map_tried: bool,
    jitdump: Option<Arc<(Arc<str>, JitDump)>>,
    /// The jitdump path last tried (a process maps one per exec).
    jitdump_tried: Option<Arc<str>>,
}

pub struct Sources {
    opts: SymbolizeOptions,
    captured: Option<CapturedDir>,
    kernel: Option<Option<Arc<KernelSymbols>>>,
    dsos: HashMap<Arc<FileId>, Arc<DsoSymbols>>,
    jit: HashMap<u32, JitFiles>,
    /// `/proc` facts per pid, read once; `None` when the process is gone (or the PID now belongs to another
    /// program).
    live_procs: HashMap<u32, Option<ProcessInfo>>,
    own_mount_ns: Option<u64>,
    /// Build-ids the recording stored per path (perf.data BUILD_ID feature).
    pub build_ids: HashMap<String, Vec<u8>>,
    /// Kernel release the recording names (perf.data OSRELEASE feature), if any.
    pub recorded_release: Option<String>,
    /// Files a capture opened while their process lived.
    pub preopened: HashMap<FileId, File>,
    pub warnings: Warnings,
}

impl Sources {
    pub fn new(opts: &SymbolizeOptions) -> Result<Sources> {
        let captured = opts.captured_dir.as_deref().map(CapturedDir::open).transpose()?;
        Ok(Sources {
            opts: opts.clone(),
            captured,
            kernel: None,
            dsos: HashMap::new(),
            jit: HashMap::new(),
            live_procs: HashMap::new(),
            own_mount_ns: mount_ns("self"),
            build_ids: HashMap::new(),
            recorded_release: None,
            preopened: HashMap::new(),
            warnings: Warnings::default(),
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
        if loaded.is_none() && self.opts.live && self.same_kernel() {
            // The recording names its kernel's build-id: perf's own saved copy of kallsyms for it, if any.
            loaded = self.build_ids.get(KERNEL_MODULE).and_then(|id| KernelSymbols::from_perf_cache(id));
        }
        if loaded.is_none() && self.opts.live {
            match KernelSymbols::read_live() {
                Ok(k) => loaded = Some(k),
                Err(e) => self.warnings.warn(format!("cannot read /proc/kallsyms ({e}): kernel frames stay unnamed")),
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

    /// The process's perf map and the name it is shown under (`/tmp/perf-<nspid>.map`).
    pub fn perf_map(&mut self, pid: u32, processes: &Processes) -> Option<Arc<(Arc<str>, PerfMap)>> {
        let files = self.jit.entry(pid).or_default();
        if files.perf_map_tried {
            return files.perf_map.clone();
        }
        files.perf_map_tried = true;
        let nspid = self.nspid(pid, processes);
        let shown: Arc<str> = Arc::from(format!("/tmp/perf-{nspid}.map"));
        let mut bytes = self.captured.as_ref().and_then(|c| read_captured(&c.perf_map(pid)));
        if bytes.is_none() {
            bytes = self.read_live_jit_file(pid, Path::new(&*shown), processes);
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
        let mut bytes = self.captured.as_ref().and_then(|c| read_captured(&c.jitdump(pid)));
        let mut still_written = false;
        if bytes.is_none() {
            bytes = self.read_live_jit_file(pid, Path::new(&**path), processes);
            still_written = self.live_procs.get(&pid).is_some_and(|p| p.is_some());
        }
        let dump = JitDump::parse(&bytes?);
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
        let loaded = Arc::new(self.load_dso(pid, m, processes));
        match &*loaded {
            DsoSymbols::Opaque { reason } => tracing::debug!("{}: no symbols ({reason})", m.file.path),
            DsoSymbols::Elf { table, origin } => {
                tracing::debug!("{}: {} symbols from {origin:?}", m.file.path, table.len())
            }
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
        let info = self.live_process(pid, processes);
        let root = info.as_ref().and_then(|i| self.target_root(i));
        let roots = SearchRoots { target_root: root.clone(), host: true, extra: self.opts.debug_roots.clone() };
        // A copy of the handle: the unwinder may need the same file.
        let file = match self.preopened.get(&*m.file).and_then(|f| f.try_clone().ok()) {
            Some(f) => Ok(f),
            None => open_mapped_file(pid, m, info.is_some(), root.as_deref()),
        };
        match file {
            Ok(f) => dso::load(f, &path, &roots, expected.as_deref()),
            Err(e) => {
                self.warnings
                    .warn(format!("cannot read {path} (mapped by PID {pid}): {e}; its frames show as module+offset"));
                DsoSymbols::Opaque { reason: e }
            }
        }
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
        let root = info.as_ref().and_then(|i| self.target_root(i));
        open_mapped_file(pid, m, info.is_some(), root.as_deref()).ok()
    }

    /// The `.debug_frame` of a mapped file's split debug file (found and verified as for its symbols), for a file
    /// that carries no call frame information itself. `None` offline, or when there is none.
    pub fn debug_frame(&mut self, pid: u32, m: &Mapping, processes: &Processes) -> Option<Vec<u8>> {
        use object::{Object, ObjectSection};
        let file = self.open_mapped(pid, m, processes)?;
        let image = super::elf::ElfImage::read(&file).ok()??;
        let info = super::elf::inspect(image.bytes()).ok()?;
        let root = self.live_process(pid, processes).and_then(|i| self.target_root(&i));
        let roots = SearchRoots { target_root: root, host: true, extra: self.opts.debug_roots.clone() };
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

    fn nspid(&mut self, pid: u32, processes: &Processes) -> u32 {
        if let Some(p) = self.captured.as_ref().and_then(|c| c.processes.get(&pid)) {
            return p.nspid;
        }
        self.live_process(pid, processes).map_or(pid, |i| i.nspid)
    }

    /// Reads a perf map or jitdump of `pid` from the live system: through the process's root while it runs, else
    /// from the host path (where perf finds maps of processes that are gone), each with the ownership check.
    fn read_live_jit_file(&mut self, pid: u32, path: &Path, processes: &Processes) -> Option<Vec<u8>> {
        if !self.opts.live {
            return None;
        }
        let (root, allowed) = match self.live_process(pid, processes) {
            Some(info) => (self.target_root(&info), vec![info.uid]),
            None => (None, vec![jit_files::current_euid()]),
        };
        match jit_files::open_trusted(root.as_deref(), path, &allowed, self.opts.force_maps) {
            Ok(mut f) => {
                let mut bytes = Vec::new();
                match f.read_to_end(&mut bytes) {
                    Ok(_) => Some(bytes),
                    Err(e) => {
                        self.warnings.warn(format!("cannot read {} of PID {pid}: {e}", path.display()));
                        None
                    }
                }
            }
            Err(OpenError::NotFound) => None,
            Err(OpenError::Untrusted { owner }) => {
                self.warnings.warn(jit_files::untrusted_warning(path, owner));
                None
            }
            Err(OpenError::Other(e)) => {
                self.warnings.warn(format!("cannot open {} of PID {pid}: {e}", path.display()));
                None
            }
        }
    }

    /// Whether the recording was made on the kernel running now (unknown counts as yes: same machine is the
    /// normal live case).
    fn same_kernel(&self) -> bool {
        let running = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        self.recorded_release.as_deref().map_or(true, |r| r.trim() == running.trim())
    }
}

/// Opens the file behind a mapping: through the target's root while it runs (via `/proc/PID/map_files` when the
/// file was deleted or replaced), else the host file at that path if it is still the one recorded.
fn open_mapped_file(pid: u32, m: &Mapping, alive: bool, root: Option<&Path>) -> Result<File, String> {
    let path = Path::new(&*m.file.path);
    if alive && m.file.path.ends_with(" (deleted)") {
        // The kernel still holds the replaced file; /proc/PID/map_files reaches exactly it.
        let p = format!("/proc/{pid}/map_files/{:x}-{:x}", m.start, m.end);
        return File::open(&p).map_err(|e| format!("{p}: {e}"));
    }
    match (alive, root) {
        (true, Some(root)) => super::root_path::open_in_root(root, path).map_err(|e| e.to_string()),
        (true, None) => super::root_path::open_regular_nofollow(path).map_err(|e| e.to_string()),
        (false, _) => {
            let f = super::root_path::open_regular_nofollow(path).map_err(|e| e.to_string())?;
            let ino = f.metadata().map_err(|e| e.to_string())?.ino();
            if m.file.ino != 0 && ino != m.file.ino && m.file.build_id.is_none() {
                return Err("the file at that path is not the one the process mapped".into());
            }
            Ok(f)
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
    std::fs::metadata(format!("/proc/{pid}/ns/mnt")).ok().map(|m| m.ino())
}
