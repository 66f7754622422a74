//! Records for the state that existed before recording started, read from /proc the way `perf record` synthesizes
//! them: per thread a FORK (non-leader threads, so the thread joins its process) then a COMM, per process an MMAP2
//! for every executable mapping, and once the kernel's own text mapping.
//!
//! Synthesized records carry time 0 and id 0 in their `sample_id`, as perf's do: they sort before every kernel record.

use crate::perf_data::abi::{MISC_KERNEL, MISC_MMAP_DATA, MISC_USER};
use crate::perf_data::{Comm, Mmap, Record, SampleId, Task};
use crate::procfs::{MapsEntry, Process};
use std::io;

/// perf's `HOST_KERNEL_ID`: the pid of kernel mappings.
const KERNEL_PID: u32 = u32::MAX;

fn sample_id(pid: u32, tid: u32) -> SampleId {
    SampleId { pid: Some(pid), tid: Some(tid), time: Some(0), id: Some(0), cpu: Some(0) }
}

fn mmap2_of(pid: u32, e: &MapsEntry) -> Record {
    let prot = [(0, libc::PROT_READ), (1, libc::PROT_WRITE), (2, libc::PROT_EXEC)]
        .iter()
        .filter(|(i, _)| e.perms.as_bytes().get(*i).is_some_and(|&c| c != b'-'))
        .fold(0, |acc, (_, p)| acc | p) as u32;
    let flags = if e.perms.as_bytes().get(3) == Some(&b's') { libc::MAP_SHARED } else { libc::MAP_PRIVATE } as u32;
    let filename = if e.path.is_empty() { "//anon".to_string() } else { e.path.clone() };
    Record::Mmap(Mmap {
        misc: MISC_USER,
        pid,
        tid: pid,
        addr: e.start,
        len: e.end - e.start,
        pgoff: e.offset,
        maj: e.maj,
        min: e.min,
        ino: e.inode,
        ino_generation: 0,
        build_id: None,
        prot,
        flags,
        filename,
        sample_id: sample_id(pid, pid),
    })
}

/// MMAP2 records for the executable mappings of a process; with `file_data`, also for its other file mappings,
/// marked `PERF_RECORD_MISC_MMAP_DATA` as `perf record --data` does: perf's libunwind-based DWARF unwinder reads a
/// library's `.eh_frame_hdr` through the process's address space, and in most libraries it lies in a read-only,
/// non-executable segment.
fn mappings(process: &Process, file_data: bool) -> io::Result<Vec<Record>> {
    let pid = process.pid();
    Ok(process
        .maps()?
        .iter()
        .filter(|e| e.is_executable() || (file_data && e.path.starts_with('/')))
        .map(|e| {
            let mut record = mmap2_of(pid, e);
            if let Record::Mmap(m) = &mut record {
                if !e.is_executable() {
                    m.misc |= MISC_MMAP_DATA;
                }
            }
            record
        })
        .collect())
}

/// FORK (for a thread other than the leader) then COMM for one thread; nothing if it is gone.
pub fn thread(pid: u32, tid: u32) -> Vec<Record> {
    match Process::open(pid) {
        Ok(process) => thread_of(&process, tid),
        Err(_) => vec![],
    }
}

fn thread_of(process: &Process, tid: u32) -> Vec<Record> {
    let pid = process.pid();
    let Some(comm) = process.comm(Some(tid)) else { return vec![] };
    let mut out = Vec::with_capacity(2);
    if tid != pid {
        // FORK first: perf copies the parent's name into a thread it learns of from a FORK, so the COMM must follow.
        out.push(Record::Fork(Task { pid, ppid: pid, tid, ptid: pid, time: 0, sample_id: sample_id(pid, tid) }));
    }
    out.push(Record::Comm(Comm { misc: 0, pid, tid, comm, sample_id: sample_id(pid, tid) }));
    out
}

/// Everything perf would synthesize for one process: its threads, then its executable mappings (and its other file
/// mappings with `file_data`, see [`mappings`]). A process that exits while being read yields what was read.
pub fn process(pid: u32, file_data: bool) -> Vec<Record> {
    let Ok(process) = Process::open(pid) else { return vec![] };
    let mut out = Vec::new();
    let mut tids = process.thread_ids().unwrap_or_default();
    tids.sort_unstable_by_key(|&t| (t != pid, t));
    for tid in tids {
        out.extend(thread_of(&process, tid));
    }
    if !out.is_empty() {
        // Kernel threads have no maps; a process that vanished reads as empty too.
        out.extend(mappings(&process, file_data).unwrap_or_default());
    }
    out
}

/// The kernel text mapping as perf synthesizes it: `[kernel.kallsyms]_text` from `_text` to `_etext`, pid -1, pgoff
/// = the address of `_text` (perf's relocation reference). `None` when /proc/kallsyms hides addresses.
pub fn kernel_text() -> Option<Record> {
    kernel_text_from_kallsyms(crate::procfs::kallsyms().ok()?)
}

/// Scans `address type name [module]` lines for `_text` (or `_stext`) and `_etext`, stopping at `_etext`: the file
/// has over 100,000 lines and this runs before sampling starts.
fn kernel_text_from_kallsyms(mut kallsyms: impl std::io::BufRead) -> Option<Record> {
    let mut text = None;
    let mut etext = None;
    let mut line = Vec::new();
    while etext.is_none() {
        line.clear();
        if kallsyms.read_until(b'\n', &mut line).ok()? == 0 {
            break;
        }
        let trimmed = line.strip_suffix(b"\n").unwrap_or(&line);
        let name = trimmed.rsplit(|&b| b == b' ').next().unwrap_or_default();
        let slot = match name {
            b"_text" => &mut text,
            b"_stext" if text.is_none() => &mut text,
            b"_etext" => &mut etext,
            _ => continue,
        };
        let addr = trimmed.split(|&b| b == b' ').next().unwrap_or_default();
        *slot = std::str::from_utf8(addr).ok().and_then(|a| u64::from_str_radix(a, 16).ok());
    }
    let start = text.filter(|&a| a != 0)?;
    let end = etext.filter(|&e| e > start).unwrap_or(u64::MAX);
    Some(Record::Mmap(Mmap {
        misc: MISC_KERNEL,
        pid: KERNEL_PID,
        tid: 0,
        addr: start,
        len: end - start,
        pgoff: start,
        prot: libc::PROT_READ as u32 | libc::PROT_EXEC as u32,
        filename: "[kernel.kallsyms]_text".into(),
        sample_id: SampleId { pid: Some(KERNEL_PID), tid: Some(0), time: Some(0), id: Some(0), cpu: Some(0) },
        ..Default::default()
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mmap2_records_follow_the_maps_line() {
        let anon = crate::procfs::parse_maps_line("7f0000000000-7f0000001000 rwxp 00000000 00:00 0 ").unwrap();
        let Record::Mmap(m) = mmap2_of(7, &anon) else { panic!() };
        assert_eq!(m.filename, "//anon");
        assert_eq!(m.prot, (libc::PROT_READ | libc::PROT_WRITE | libc::PROT_EXEC) as u32);
        assert_eq!(m.flags, libc::MAP_PRIVATE as u32);
        let shared = crate::procfs::parse_maps_line("1000-2000 r-xs 00001000 103:02 99 /tmp/x.so").unwrap();
        let Record::Mmap(m) = mmap2_of(7, &shared) else { panic!() };
        assert_eq!(m.flags, libc::MAP_SHARED as u32);
    }

    #[test]
    fn kernel_text_spans_text_to_etext() {
        let ks =
            "ffffffff81000000 T _stext\nffffffff81000000 T _text\nffffffff81000010 t foo\nffffffff82208d88 T _etext\n";
        let Some(Record::Mmap(m)) = kernel_text_from_kallsyms(ks.as_bytes()) else { panic!() };
        assert_eq!((m.addr, m.len, m.pgoff, m.pid), (0xffffffff81000000, 0x1208d88, 0xffffffff81000000, u32::MAX));
        assert_eq!(m.filename, "[kernel.kallsyms]_text");
        assert!(kernel_text_from_kallsyms("0000000000000000 T _text\n".as_bytes()).is_none());
        // A module symbol named like the kernel's is not the kernel's (the module column follows the name).
        let modules = "ffffffff81000000 T _text\nffffffffc0000000 t _etext\t[some_mod]\nffffffff82000000 T _etext\n";
        let Some(Record::Mmap(m)) = kernel_text_from_kallsyms(modules.as_bytes()) else { panic!() };
        assert_eq!(m.len, 0x1000000);
    }

    #[test]
    fn this_process_synthesizes_itself() {
        let me = std::process::id();
        let records = process(me, false);
        let Some(Record::Comm(first)) = records.first() else { panic!("{records:?}") };
        assert_eq!((first.pid, first.tid), (me, me));
        // The test binary runs from an executable mapping of itself.
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        assert!(records.iter().any(|r| matches!(r, Record::Mmap(m) if m.filename == exe.to_str().unwrap())));
        assert!(records.iter().any(|r| matches!(r, Record::Mmap(m) if m.filename == "[vdso]")));
        assert!(records.iter().all(|r| !matches!(r, Record::Mmap(m) if m.misc & MISC_MMAP_DATA != 0)));

        // With file data: the binary's read-only segments too, marked as data; anonymous memory never.
        let with_data = process(me, true);
        let data: Vec<&Mmap> = with_data
            .iter()
            .filter_map(|r| match r {
                Record::Mmap(m) if m.misc & MISC_MMAP_DATA != 0 => Some(m),
                _ => None,
            })
            .collect();
        assert!(data.iter().any(|m| m.filename == exe.to_str().unwrap() && m.prot & libc::PROT_EXEC as u32 == 0));
        assert!(data.iter().all(|m| m.filename.starts_with('/')));
    }
}
