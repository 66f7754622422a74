//! Each process's address space over time, rebuilt from the recording's MMAP/MMAP2, COMM, FORK and EXIT records
//! (synthesized for what existed when recording started, live afterwards). Records are applied in time order, so
//! at any point the state is the one a sample taken at that time saw: a mapping replaced later does not affect
//! earlier samples, exec (COMM with the exec flag) starts an empty space, a forked process starts with a copy of
//! its parent's, and threads share their process's.

use crate::perf_data::abi::MISC_MMAP_DATA;
use crate::perf_data::{Comm, Mmap, Task};
use rustc_hash::FxHashMap;
use std::collections::HashMap;
use std::sync::Arc;

/// What kind of memory a mapping is, which decides how its addresses are named.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MapKind {
    /// A file's contents (ELF or not).
    File,
    /// Anonymous executable memory or a .NET W^X double mapping: where JIT code lives.
    Jit,
    /// The kernel's vDSO, an ELF image the same for every process of one kernel.
    Vdso,
    /// Other kernel-provided regions (`[vsyscall]`, `[stack]`, …).
    Special,
    /// The jitdump file itself (mapped only so that a recorder sees its name).
    JitDumpFile,
}

/// Identity of a mapped file as the recording saw it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FileId {
    /// Path as the target sees it (inside its mount namespace).
    pub path: Arc<str>,
    pub maj: u32,
    pub min: u32,
    pub ino: u64,
    pub build_id: Option<Arc<[u8]>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    pub pgoff: u64,
    pub kind: MapKind,
    pub file: Arc<FileId>,
}

impl Mapping {
    /// Offset into the mapped file (or region) of `addr`.
    pub fn file_offset(&self, addr: u64) -> u64 {
        addr.wrapping_sub(self.start).wrapping_add(self.pgoff)
    }
}

pub fn classify(path: &str) -> MapKind {
    if path.is_empty()
        || path == "//anon"
        || path.starts_with("[anon:")
        || path.starts_with("/memfd:doublemapper")
        || path.starts_with("/dev/zero")
        || path.starts_with("/anon_hugepage")
    {
        MapKind::Jit
    } else if path == "[vdso]" {
        MapKind::Vdso
    } else if path.starts_with('[') {
        MapKind::Special
    } else if is_jitdump_path(path) {
        MapKind::JitDumpFile
    } else {
        MapKind::File
    }
}

/// `.../jit-<digits>.dump`, the name every jitdump producer uses.
pub fn is_jitdump_path(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    name.strip_prefix("jit-")
        .and_then(|r| r.strip_suffix(".dump"))
        .is_some_and(|digits| !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
}

/// One process's mappings, non-overlapping, in address order (a sorted array: looked up for every frame, changed
/// only by mmaps).
#[derive(Debug, Clone)]
pub struct AddressSpace {
    /// Unique per space instance (a new one on fork and exec), so caches never mix two processes' addresses.
    pub id: u64,
    /// Bumped on every change, so caches keyed by it never return a stale answer.
    pub generation: u64,
    maps: Vec<Mapping>,
}

impl AddressSpace {
    fn new(id: u64) -> Self {
        AddressSpace { id, generation: 0, maps: Vec::new() }
    }

    pub fn find(&self, addr: u64) -> Option<&Mapping> {
        let after = self.maps.partition_point(|m| m.start <= addr);
        let m = &self.maps[after.checked_sub(1)?];
        (addr < m.end).then_some(m)
    }

    /// Adds a mapping; whatever it overlaps is cut away (the kernel replaced those pages).
    pub fn insert(&mut self, m: Mapping) {
        if m.end <= m.start {
            return;
        }
        let (start, end) = (m.start, m.end);
        // The mappings that overlap [start, end): a run from `first` on.
        let first = self.maps.partition_point(|o| o.end <= start);
        let last = self.maps.partition_point(|o| o.start < end);
        let mut kept = Vec::new();
        for old in &self.maps[first..last] {
            if old.start < start {
                kept.push(Mapping { end: start, ..old.clone() });
            }
            if old.end > end {
                let pgoff = old.pgoff.wrapping_add(end - old.start);
                kept.push(Mapping { start: end, pgoff, ..old.clone() });
            }
        }
        let head = kept.iter().take_while(|k| k.start < start).count();
        kept.insert(head, m);
        self.maps.splice(first..last, kept);
        self.generation += 1;
    }
}

#[derive(Debug, Clone)]
pub struct Process {
    pub space: AddressSpace,
    /// The jitdump the process mapped (path as it sees it), if any.
    pub jitdump: Option<Arc<str>>,
    pub exited: bool,
}

/// Every process and thread the recording mentions.
#[derive(Debug, Default)]
pub struct Processes {
    procs: FxHashMap<u32, Process>,
    comms: FxHashMap<u32, Arc<str>>,
    next_space_id: u64,
    /// File identities are shared by every mapping of the same file.
    files: HashMap<FileId, Arc<FileId>>,
}

/// The pid perf uses for kernel mappings (`-1`).
const KERNEL_PID: u32 = u32::MAX;

impl Processes {
    fn new_space(&mut self) -> AddressSpace {
        self.next_space_id += 1;
        AddressSpace::new(self.next_space_id)
    }

    fn process_mut(&mut self, pid: u32) -> &mut Process {
        if !self.procs.contains_key(&pid) {
            let space = self.new_space();
            self.procs.insert(pid, Process { space, jitdump: None, exited: false });
        }
        self.procs.get_mut(&pid).expect("inserted above")
    }

    pub fn get(&self, pid: u32) -> Option<&Process> {
        self.procs.get(&pid)
    }

    /// Returns the mapping added, if the record was one the symbolizer keeps (executable, user space).
    pub fn on_mmap(&mut self, m: &Mmap) -> Option<Mapping> {
        // Kernel image and modules are named from kallsyms; data mappings (perf record --data) hold no code.
        if m.pid == KERNEL_PID || m.misc & MISC_MMAP_DATA != 0 {
            return None;
        }
        let id = FileId {
            path: super::name_limit::cap_arc(&m.filename),
            maj: m.maj,
            min: m.min,
            ino: m.ino,
            build_id: m.build_id.as_deref().map(Arc::from),
        };
        let file = self.files.entry(id.clone()).or_insert_with(|| Arc::new(id)).clone();
        let kind = classify(&m.filename);
        let mapping =
            Mapping { start: m.addr, end: m.addr.saturating_add(m.len), pgoff: m.pgoff, kind, file: file.clone() };
        let p = self.process_mut(m.pid);
        if kind == MapKind::JitDumpFile {
            p.jitdump = Some(file.path.clone());
        }
        p.space.insert(mapping.clone());
        Some(mapping)
    }

    pub fn on_comm(&mut self, c: &Comm) {
        self.comms.insert(c.tid, super::name_limit::cap_arc(&c.comm));
        if c.is_exec() {
            // The new program starts with a fresh address space; its mappings follow as MMAP records.
            let space = self.new_space();
            let p = self.process_mut(c.pid);
            p.space = space;
            p.jitdump = None;
            p.exited = false;
        }
    }

    pub fn on_fork(&mut self, t: &Task) {
        if let Some(parent_comm) = self.comms.get(&t.ptid).cloned() {
            self.comms.insert(t.tid, parent_comm);
        }
        if t.pid == t.ppid {
            return; // a new thread: it shares its process's space
        }
        let mut child = match self.procs.get(&t.ppid) {
            Some(parent) => parent.clone(),
            None => Process { space: self.new_space(), jitdump: None, exited: false },
        };
        child.space.id = self.new_space().id;
        child.exited = false;
        self.procs.insert(t.pid, child);
    }

    pub fn on_exit(&mut self, t: &Task) {
        // Kept: samples recorded just before the exit may be ordered after it, and the data stays useful for
        // naming. A reused PID gets a fresh space through its FORK.
        if t.pid == t.tid {
            if let Some(p) = self.procs.get_mut(&t.pid) {
                p.exited = true;
            }
        }
    }

    /// The thread's name (falling back to its process's), as perf shows it: `:<tid>` when never named.
    pub fn comm(&self, pid: u32, tid: u32) -> Arc<str> {
        self.comms.get(&tid).or_else(|| self.comms.get(&pid)).cloned().unwrap_or_else(|| Arc::from(format!(":{tid}")))
    }

    /// The process's own name (its main thread's).
    pub fn process_comm(&self, pid: u32) -> Option<Arc<str>> {
        self.comms.get(&pid).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf_data::abi::MISC_COMM_EXEC;
    use crate::perf_data::SampleId;

    fn mmap(pid: u32, addr: u64, len: u64, pgoff: u64, name: &str) -> Mmap {
        Mmap { pid, tid: pid, addr, len, pgoff, filename: name.into(), prot: 5, ..Default::default() }
    }

    fn comm(pid: u32, tid: u32, name: &str, exec: bool) -> Comm {
        let misc = if exec { MISC_COMM_EXEC } else { 0 };
        Comm { misc, pid, tid, comm: name.into(), sample_id: SampleId::default() }
    }

    fn task(pid: u32, ppid: u32, tid: u32, ptid: u32) -> Task {
        Task { pid, ppid, tid, ptid, time: 0, sample_id: SampleId::default() }
    }

    fn path_at(p: &Processes, pid: u32, addr: u64) -> Option<(String, u64)> {
        let m = p.get(pid)?.space.find(addr)?;
        Some((m.file.path.to_string(), m.file_offset(addr)))
    }

    #[test]
    fn remaps_cut_what_they_overlap() {
        let mut p = Processes::default();
        p.on_mmap(&mmap(1, 0x1000, 0x3000, 0, "/lib/a.so"));
        p.on_mmap(&mmap(1, 0x2000, 0x1000, 0, "//anon"));
        assert_eq!(path_at(&p, 1, 0x1fff).unwrap(), ("/lib/a.so".into(), 0xfff));
        assert_eq!(path_at(&p, 1, 0x2000).unwrap(), ("//anon".into(), 0));
        // The tail keeps its original file offset.
        assert_eq!(path_at(&p, 1, 0x3010).unwrap(), ("/lib/a.so".into(), 0x2010));
        assert!(path_at(&p, 1, 0x4000).is_none());
        assert_eq!(p.get(1).unwrap().space.maps.len(), 3);
    }

    #[test]
    fn random_remaps_leave_what_a_page_model_says() {
        // Pages 0..64 of one space, each owned by the last mapping placed over it (with its file offset).
        let mut rng = crate::random_inputs::Rng::new(0x9e37_79b9_7f4a_7c15);
        let mut next = move |n: u64| rng.below(n as usize) as u64;
        let mut p = Processes::default();
        let mut model: Vec<Option<(String, u64)>> = vec![None; 64];
        for i in 0..400 {
            let (first, pages) = (next(64), 1 + next(8));
            let name = format!("/lib/{i}.so");
            p.on_mmap(&mmap(1, first * 0x1000, pages * 0x1000, 0x10_0000, &name));
            for page in first..(first + pages).min(64) {
                model[page as usize] = Some((name.clone(), 0x10_0000 + (page - first) * 0x1000));
            }
            for page in 0..64u64 {
                assert_eq!(path_at(&p, 1, page * 0x1000), model[page as usize], "after mapping {i}, page {page}");
            }
        }
    }

    #[test]
    fn fork_copies_threads_share_exec_clears() {
        let mut p = Processes::default();
        p.on_comm(&comm(1, 1, "sh", false));
        p.on_mmap(&mmap(1, 0x1000, 0x1000, 0, "/bin/sh"));
        p.on_fork(&task(2, 1, 2, 1)); // new process
        p.on_fork(&task(1, 1, 3, 1)); // new thread of 1
        assert_eq!(path_at(&p, 2, 0x1000).unwrap().0, "/bin/sh");
        assert_eq!(p.comm(2, 2).as_ref(), "sh");
        assert_eq!(p.comm(1, 3).as_ref(), "sh");
        assert_ne!(p.get(1).unwrap().space.id, p.get(2).unwrap().space.id);
        p.on_comm(&comm(2, 2, "dotnet", true));
        assert!(path_at(&p, 2, 0x1000).is_none(), "exec must drop the old program's mappings");
        assert_eq!(path_at(&p, 1, 0x1000).unwrap().0, "/bin/sh", "the parent is untouched");
        // A mapping added to the child after fork does not appear in the parent.
        p.on_mmap(&mmap(2, 0x5000, 0x1000, 0, "/usr/bin/dotnet"));
        assert!(path_at(&p, 1, 0x5000).is_none());
        assert_eq!(p.comm(9, 9).as_ref(), ":9");
    }

    #[test]
    fn kernel_and_data_mappings_are_not_process_code() {
        let mut p = Processes::default();
        assert!(p.on_mmap(&mmap(u32::MAX, 0xffffffff81000000, 0x1000000, 0, "[kernel.kallsyms]_text")).is_none());
        let mut data = mmap(1, 0x1000, 0x1000, 0, "/data");
        data.misc = MISC_MMAP_DATA;
        assert!(p.on_mmap(&data).is_none());
    }

    #[test]
    fn classification() {
        assert_eq!(classify("//anon"), MapKind::Jit);
        assert_eq!(classify("/memfd:doublemapper (deleted)"), MapKind::Jit);
        assert_eq!(classify("[anon:JIT]"), MapKind::Jit);
        assert_eq!(classify(""), MapKind::Jit);
        assert_eq!(classify("[vdso]"), MapKind::Vdso);
        assert_eq!(classify("[vsyscall]"), MapKind::Special);
        assert_eq!(classify("/tmp/jit-123.dump"), MapKind::JitDumpFile);
        assert_eq!(classify("/tmp/jit-.dump"), MapKind::File);
        assert_eq!(classify("/usr/lib/libc.so.6"), MapKind::File);
    }
}
