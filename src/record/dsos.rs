//! Which mapped files the samples fell into, so perf.data gets build-ids for exactly those (as `perf record` marks
//! DSOs "hit"). Follows each process's executable mappings from MMAP2/FORK/COMM-exec/EXIT records.

use crate::perf_data::abi::{CONTEXT_MAX, CONTEXT_USER, MISC_CPUMODE_MASK};
use crate::perf_data::abi::{MISC_KERNEL, MISC_USER};
use crate::perf_data::{Record, Sample};
use std::collections::{BTreeMap, HashMap};

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DsoKey {
    pub path: String,
    pub maj: u32,
    pub min: u32,
    pub ino: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HitDso {
    pub path: String,
    /// A process that mapped it, to read the file through that process's root.
    pub pid: u32,
}

#[derive(Default)]
pub struct DsoTracker {
    dsos: Vec<(DsoKey, u32, bool)>,
    index: HashMap<DsoKey, usize>,
    /// Per process: mapping start → (end, dso index).
    maps: HashMap<u32, BTreeMap<u64, (u64, usize)>>,
    kernel_hit: bool,
}

impl DsoTracker {
    pub fn on_record(&mut self, record: &Record) {
        match record {
            Record::Mmap(m) if m.misc & MISC_CPUMODE_MASK == MISC_USER => {
                // Only real files have build-ids; //anon, [vdso], memfd: and the like do not.
                if !m.filename.starts_with('/') || m.len == 0 {
                    return;
                }
                let key = DsoKey { path: m.filename.clone(), maj: m.maj, min: m.min, ino: m.ino };
                let dso = match self.index.get(&key) {
                    Some(&i) => i,
                    None => {
                        self.dsos.push((key.clone(), m.pid, false));
                        self.index.insert(key, self.dsos.len() - 1);
                        self.dsos.len() - 1
                    }
                };
                let map = self.maps.entry(m.pid).or_default();
                let end = m.addr.saturating_add(m.len);
                // A new mapping replaces whatever it overlaps.
                let overlapping: Vec<u64> =
                    map.range(..end).filter(|(_, &(e, _))| e > m.addr).map(|(&s, _)| s).collect();
                for s in overlapping {
                    map.remove(&s);
                }
                map.insert(m.addr, (end, dso));
            }
            Record::Fork(t) if t.pid != t.ppid => {
                // A new process starts with a copy of its parent's address space.
                if let Some(parent) = self.maps.get(&t.ppid).cloned() {
                    self.maps.insert(t.pid, parent);
                }
            }
            Record::Comm(c) if c.is_exec() => {
                self.maps.remove(&c.pid);
            }
            Record::Exit(t) if t.pid == t.tid => {
                self.maps.remove(&t.pid);
            }
            _ => {}
        }
    }

    /// Marks the files holding the sample's user-space addresses (the IP and every user frame of the callchain).
    pub fn on_sample(&mut self, sample: &Sample) {
        let mut in_user = sample.misc & MISC_CPUMODE_MASK == MISC_USER;
        if sample.misc & MISC_CPUMODE_MASK == MISC_KERNEL {
            self.kernel_hit = true;
        }
        if sample.callchain.is_empty() && in_user {
            self.mark(sample.pid, sample.ip);
        }
        for &addr in &sample.callchain {
            if addr >= CONTEXT_MAX {
                in_user = addr == CONTEXT_USER;
                continue;
            }
            if in_user {
                self.mark(sample.pid, addr);
            }
        }
    }

    fn mark(&mut self, pid: u32, addr: u64) {
        let Some(map) = self.maps.get(&pid) else { return };
        if let Some((_, &(end, dso))) = map.range(..=addr).next_back() {
            if addr < end {
                self.dsos[dso].2 = true;
            }
        }
    }

    pub fn kernel_hit(&self) -> bool {
        self.kernel_hit
    }

    /// Files with at least one sample, each once per path (the first process seen mapping it).
    pub fn hit(&self) -> Vec<HitDso> {
        let mut seen = std::collections::HashSet::new();
        self.dsos
            .iter()
            .filter(|(_, _, hit)| *hit)
            .filter(|(key, _, _)| seen.insert(key.path.clone()))
            .map(|(key, pid, _)| HitDso { path: key.path.clone(), pid: *pid })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf_data::abi::CONTEXT_KERNEL;
    use crate::perf_data::{Comm, Mmap, SampleId, Task};

    fn mmap(pid: u32, addr: u64, len: u64, path: &str) -> Record {
        Record::Mmap(Mmap { misc: MISC_USER, pid, tid: pid, addr, len, filename: path.into(), ..Default::default() })
    }

    fn sample(pid: u32, misc: u16, callchain: Vec<u64>) -> Sample {
        Sample {
            misc,
            id: None,
            ip: callchain.get(1).copied().unwrap_or(0),
            pid,
            tid: pid,
            time: 1,
            cpu: 0,
            period: 1,
            callchain,
            raw: vec![],
            user: None,
        }
    }

    #[test]
    fn marks_files_under_user_frames_only() {
        let mut t = DsoTracker::default();
        t.on_record(&mmap(10, 0x1000, 0x1000, "/bin/app"));
        t.on_record(&mmap(10, 0x5000, 0x1000, "/lib/libc.so"));
        t.on_record(&mmap(10, 0x9000, 0x1000, "/lib/unused.so"));
        t.on_record(&mmap(10, 0xa000, 0x1000, "//anon"));
        t.on_sample(&sample(10, MISC_KERNEL, vec![CONTEXT_KERNEL, 0x9010, CONTEXT_USER, 0x5010, 0x1010]));
        let hit: Vec<String> = t.hit().into_iter().map(|h| h.path).collect();
        assert_eq!(hit, ["/bin/app", "/lib/libc.so"]);
        assert!(t.kernel_hit());
    }

    #[test]
    fn forks_copy_and_exec_clears_the_address_space() {
        let mut t = DsoTracker::default();
        t.on_record(&mmap(10, 0x1000, 0x1000, "/bin/parent"));
        t.on_record(&Record::Fork(Task {
            pid: 11,
            ppid: 10,
            tid: 11,
            ptid: 10,
            time: 0,
            sample_id: SampleId::default(),
        }));
        t.on_sample(&sample(11, MISC_USER, vec![CONTEXT_USER, 0x1800]));
        assert_eq!(t.hit()[0].path, "/bin/parent");

        let mut t2 = DsoTracker::default();
        t2.on_record(&mmap(10, 0x1000, 0x1000, "/bin/old"));
        t2.on_record(&Record::Comm(Comm {
            misc: 1 << 13,
            pid: 10,
            tid: 10,
            comm: "new".into(),
            sample_id: SampleId::default(),
        }));
        t2.on_record(&mmap(10, 0x1000, 0x800, "/bin/new"));
        t2.on_sample(&sample(10, MISC_USER, vec![CONTEXT_USER, 0x1100, 0x1900]));
        let hit: Vec<String> = t2.hit().into_iter().map(|h| h.path).collect();
        assert_eq!(hit, ["/bin/new"]);
    }
}
