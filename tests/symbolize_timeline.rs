//! The symbolizer's rules on a recording built record by record (perf.data written with profcpu's writer, names
//! from a hand-written `symbols/` directory in the documented format, symbolized offline): address spaces over
//! time (remap, fork, exec, threads), records out of file order, context markers, return addresses, JIT code named
//! by time from a jitdump, perf maps only on anonymous memory, unnamed frames keeping their module.

use profcpu::fs::Dir;
use profcpu::perf_data::abi::{CONTEXT_KERNEL, CONTEXT_USER, MISC_COMM_EXEC, MISC_USER};
use profcpu::perf_data::abi::{SAMPLE_CALLCHAIN, SAMPLE_CPU, SAMPLE_IP, SAMPLE_PERIOD, SAMPLE_TID, SAMPLE_TIME};
use profcpu::perf_data::{Attr, Comm, EventDesc, Features, Mmap, PerfDataWriter, Record, Sample, SampleId, Task};
mod support;

use profcpu::report::names::frame_label;
use profcpu::symbolize::{FrameKind, ResolvedSample, SymbolizeOptions};
use std::path::{Path, PathBuf};
use support::recording::open_perf_data;
use support::scratch::Scratch;
use support::symbolize::name_samples;

fn cpu_clock_attr() -> Attr {
    let mut b = vec![0u8; 128];
    b[0..4].copy_from_slice(&1u32.to_ne_bytes()); // TYPE_SOFTWARE
    b[4..8].copy_from_slice(&128u32.to_ne_bytes());
    let sample_type = SAMPLE_IP | SAMPLE_TID | SAMPLE_TIME | SAMPLE_CALLCHAIN | SAMPLE_CPU | SAMPLE_PERIOD;
    b[16..24].copy_from_slice(&999u64.to_ne_bytes());
    b[24..32].copy_from_slice(&sample_type.to_ne_bytes());
    let flags: u64 = (1 << 10) | (1 << 18); // freq, sample_id_all
    b[40..48].copy_from_slice(&flags.to_ne_bytes());
    Attr::from_bytes(b).unwrap()
}

fn at(time: u64, pid: u32, tid: u32) -> SampleId {
    SampleId { pid: Some(pid), tid: Some(tid), time: Some(time), id: None, cpu: Some(0) }
}

fn mmap(time: u64, pid: u32, addr: u64, len: u64, pgoff: u64, ino: u64, name: &str) -> Record {
    Record::Mmap(Mmap {
        misc: MISC_USER,
        pid,
        tid: pid,
        addr,
        len,
        pgoff,
        maj: 8,
        min: 1,
        ino,
        prot: 5,
        flags: 2,
        filename: name.into(),
        sample_id: at(time, pid, pid),
        ..Default::default()
    })
}

fn comm(time: u64, pid: u32, tid: u32, name: &str, exec: bool) -> Record {
    let misc = if exec { MISC_COMM_EXEC } else { 0 };
    Record::Comm(Comm { misc, pid, tid, comm: name.into(), sample_id: at(time, pid, tid) })
}

fn fork(time: u64, pid: u32, ppid: u32, tid: u32, ptid: u32) -> Record {
    Record::Fork(Task { pid, ppid, tid, ptid, time, sample_id: at(time, pid, tid) })
}

fn sample(time: u64, pid: u32, tid: u32, chain: &[u64]) -> Record {
    let ip = chain.iter().copied().find(|&a| a < CONTEXT_USER.min(CONTEXT_KERNEL)).unwrap_or(0);
    Record::Sample(Sample {
        misc: MISC_USER,
        id: None,
        ip,
        pid,
        tid,
        time,
        cpu: 0,
        period: 1_001_001,
        callchain: chain.to_vec(),
        raw: vec![],
        user: None,
    })
}

/// A jitdump in the format of the spec (`tools/perf/Documentation/jitdump-specification.txt`).
fn jitdump(pid: u32, loads: &[(u64, u64, u64, &str)]) -> Vec<u8> {
    let mut b = Vec::new();
    for v in [0x4A69_5444u32, 1, 40, 62, 0, pid] {
        b.extend_from_slice(&v.to_ne_bytes());
    }
    b.extend_from_slice(&0u64.to_ne_bytes());
    b.extend_from_slice(&0u64.to_ne_bytes());
    for &(time, addr, size, name) in loads {
        let mut body = Vec::new();
        body.extend_from_slice(&pid.to_ne_bytes());
        body.extend_from_slice(&pid.to_ne_bytes());
        for v in [addr, addr, size, 0] {
            body.extend_from_slice(&v.to_ne_bytes());
        }
        body.extend_from_slice(name.as_bytes());
        body.push(0);
        body.resize(body.len() + size as usize, 0x90);
        b.extend_from_slice(&0u32.to_ne_bytes());
        b.extend_from_slice(&((16 + body.len()) as u32).to_ne_bytes());
        b.extend_from_slice(&time.to_ne_bytes());
        b.extend_from_slice(&body);
    }
    b
}

const K: u64 = CONTEXT_KERNEL;
const U: u64 = CONTEXT_USER;

fn write_perf_data(path: &Path, records: &[Record]) {
    let events = vec![EventDesc { attr: cpu_clock_attr(), name: "cpu-clock".into(), ids: vec![] }];
    let dir = Dir::open(path.parent().unwrap()).unwrap();
    let mut w = PerfDataWriter::create(&dir, path.file_name().unwrap().to_str().unwrap(), events).unwrap();
    for r in records {
        w.write_record(r).unwrap();
    }
    w.finish(&Features::default()).unwrap();
}

/// The recording: processes 100 (JIT app + native lib + ReadyToRun dll), its thread 101, its child 200 (which
/// then execs), and 300 (a jitdump producer). Records are deliberately not in time order in the file.
fn recording(dir: &Path) -> PathBuf {
    let records = vec![
        comm(0, 100, 100, "app", false),
        mmap(0, 100, 0x10000, 0x10000, 0, 0, "//anon"),
        mmap(0, 100, 0x400000, 0x1000, 0x1000, 77, "/opt/app/libnative.so"),
        mmap(0, 100, 0x500000, 0x10000, 0x2000, 78, "/opt/app/System.Private.CoreLib.dll"),
        fork(5, 100, 100, 101, 100),
        sample(10, 100, 100, &[K, 0xffffffff81000010, 0xffffffff90000000, U, 0x10010, 0x400200, 0x400250]),
        // Written before the remap at t=30 but taken after it.
        sample(40, 100, 100, &[U, 0x10010]),
        mmap(30, 100, 0x10000, 0x1000, 0, 79, "/opt/app/other.so"),
        // Written after the remap but taken before it.
        sample(20, 100, 100, &[U, 0x10010, 0x400200, 0x500123, 0x7000, 0x90010]),
        sample(25, 100, 101, &[U, 0x10020]),
        comm(26, 100, 101, "worker", false),
        sample(27, 100, 101, &[U, 0x10020]),
        fork(50, 200, 100, 200, 100),
        sample(55, 200, 200, &[U, 0x400250, 0x11010]),
        comm(60, 200, 200, "newprog", true),
        sample(65, 200, 200, &[U, 0x400250]),
        comm(0, 300, 300, "node", false),
        mmap(0, 300, 0x30000, 0x10000, 0, 0, "//anon"),
        mmap(0, 300, 0x50000, 0x1000, 0, 80, "/work/jit-300.dump"),
        sample(150, 300, 300, &[U, 0x30010]),
        sample(250, 300, 300, &[U, 0x30010]),
        sample(260, 300, 300, &[]),
    ];
    let path = dir.join("perf.data");
    write_perf_data(&path, &records);
    path
}

fn write_symbols(dir: &Path, kernel: &str) {
    let s = dir.join("symbols");
    std::fs::write(s.join("processes.txt"), "100 7 0\n300 1 0\n").unwrap();
    std::fs::write(
        s.join("perf-100.map"),
        "10000 100 int32 [App] App::Hot()[OptimizedTier1]\n90000 100 Unmapped::Code()\n",
    )
    .unwrap();
    std::fs::write(
        s.join("jit-300.dump"),
        jitdump(1, &[(100, 0x30000, 0x100, "JS:*first"), (200, 0x30000, 0x100, "JS:*second")]),
    )
    .unwrap();
    std::fs::write(
        s.join("dsos.txt"),
        "dso-0.syms 8:1:77 - /opt/app/libnative.so\n- 8:1:78 - /opt/app/System.Private.CoreLib.dll\n",
    )
    .unwrap();
    std::fs::write(s.join("dso-0.syms"), "1100 100 native_a\n1200 100 native_b\n").unwrap();
    std::fs::write(s.join("kernel.syms"), kernel).unwrap();
}

fn names(s: &ResolvedSample) -> Vec<String> {
    s.frames.iter().map(|f| frame_label(f).into_owned()).collect()
}

#[test]
fn recorded_state_over_time_names_every_frame() {
    let scratch = Scratch::new("symbolize-timeline");
    std::fs::create_dir_all(scratch.join("symbols")).unwrap();
    let data = recording(&scratch.path);
    write_symbols(&scratch.path, "ffffffff81000000 100 [kernel.kallsyms] do_syscall_64\n");
    let reader = open_perf_data(&data).unwrap();
    let out =
        name_samples(&reader, &SymbolizeOptions::offline(Dir::open(&scratch.path.join("symbols")).unwrap())).unwrap();
    assert!(out.stats.warnings.is_empty(), "{:?}", out.stats.warnings);
    let by_time = |pid: u32, tid: u32, t: u64| {
        out.samples
            .iter()
            .find(|s| s.pid == pid && s.tid == tid && s.time == t)
            .unwrap_or_else(|| panic!("no sample {pid}/{tid}@{t}"))
    };
    // Samples come back in time order, whatever the file order.
    let times: Vec<u64> = out.samples.iter().map(|s| s.time).collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");

    // Kernel frames from kallsyms; markers dropped; the leaf is the sample ip; a caller's return address is
    // looked up one byte earlier (0x400200 returns into native_a, whose last byte is 0x4001ff).
    let s = by_time(100, 100, 10);
    assert_eq!(
        names(s),
        [
            "do_syscall_64",
            "[kernel.kallsyms]+0xffffffff90000000",
            "int32 [App] App::Hot()[OptimizedTier1]",
            "native_a",
            "native_b"
        ]
    );
    assert_eq!(s.frames[0].kind(), FrameKind::Kernel);
    assert_eq!((s.frames[0].addr, s.frames[0].offset()), (0xffffffff81000010, 0x10));
    assert_eq!(s.frames[2].module(), "/tmp/perf-7.map", "perf map shown with the namespace PID");
    assert_eq!((s.frames[3].addr, s.frames[3].offset(), s.frames[3].kind()), (0x400200, 0x100, FrameKind::Native));
    assert_eq!(s.frames[4].offset(), 0x50);
    assert_eq!(s.comm.as_ref(), "app");
    assert_eq!(s.event.as_ref(), "cpu-clock");

    // Before the remap: JIT name, native, ReadyToRun file keeps module+file offset, no mapping -> [unknown], and
    // code outside every mapping still named by the perf map.
    let s = by_time(100, 100, 20);
    assert_eq!(
        names(s),
        [
            "int32 [App] App::Hot()[OptimizedTier1]",
            "native_a",
            "System.Private.CoreLib.dll+0x2123",
            "[unknown]+0x7000",
            "Unmapped::Code()"
        ]
    );
    let kinds: Vec<FrameKind> = s.frames.iter().map(|f| f.kind()).collect();
    assert_eq!(kinds, [FrameKind::Jit, FrameKind::Native, FrameKind::Unknown, FrameKind::Unknown, FrameKind::Jit]);

    // After the remap the same address is file-backed: the perf map no longer applies.
    let s = by_time(100, 100, 40);
    assert_eq!(names(s), ["other.so+0x10"]);
    assert_eq!(s.frames[0].kind(), FrameKind::Unknown);

    // A thread shares its process's mappings; its name follows the COMM records in time.
    assert_eq!(by_time(100, 101, 25).comm.as_ref(), "app");
    assert_eq!(names(by_time(100, 101, 25)), ["int32 [App] App::Hot()[OptimizedTier1]"]);
    assert_eq!(by_time(100, 101, 27).comm.as_ref(), "worker");

    // A forked child starts with its parent's mappings (taken after the remap: 0x11010 is still anonymous) but
    // not its perf map; after exec it has none of them.
    let s = by_time(200, 200, 55);
    assert_eq!(names(s), ["native_b", "anon+0x1010"]);
    assert_eq!((s.frames[1].kind(), s.frames[1].module()), (FrameKind::Jit, "//anon"));
    let s = by_time(200, 200, 65);
    assert_eq!(names(s), ["[unknown]+0x400250"]);
    assert_eq!(s.comm.as_ref(), "newprog");

    // The jitdump names the same address by time.
    let s = by_time(300, 300, 150);
    assert_eq!(names(s), ["JS:*first"]);
    assert_eq!(s.frames[0].module(), "/work/jit-300.dump");
    assert_eq!(names(by_time(300, 300, 250)), ["JS:*second"]);
    // A sample without a callchain is its ip alone (0 here: nothing there).
    assert_eq!(names(by_time(300, 300, 260)), ["[unknown]+0x0"]);

    assert_eq!(out.stats.samples, 10);
    assert_eq!(out.stats.jit_frames_named, 7);
    assert_eq!(out.stats.jit_frames_unnamed, 1);
}

/// Samples with the same callchain share one named stack (the stages after the symbolizer work once per stack),
/// but only while the names hold: a remap or JIT code replaced at the same address gives a new stack.
#[test]
fn repeated_callchains_share_a_stack_while_their_names_hold() {
    let scratch = Scratch::new("symbolize-shared-stacks");
    std::fs::create_dir_all(scratch.join("symbols")).unwrap();
    let chain = [U, 0x30010, 0x10010];
    let records = vec![
        comm(0, 300, 300, "node", false),
        mmap(0, 300, 0x30000, 0x10000, 0, 0, "//anon"),
        mmap(0, 300, 0x10000, 0x1000, 0, 81, "/opt/app/lib.so"),
        mmap(0, 300, 0x50000, 0x1000, 0, 80, "/work/jit-300.dump"),
        // "first" is loaded at 100, replaced by "second" at 200 (same address).
        sample(110, 300, 300, &chain),
        sample(120, 300, 300, &chain),
        sample(130, 300, 301, &chain),
        sample(210, 300, 300, &chain),
        sample(220, 300, 300, &chain),
        // lib.so is replaced by another file at the same address.
        mmap(300, 300, 0x10000, 0x1000, 0, 82, "/opt/app/other.so"),
        sample(310, 300, 300, &chain),
    ];
    let data = scratch.path.join("perf.data");
    write_perf_data(&data, &records);
    write_symbols(&scratch.path, "");
    std::fs::write(
        scratch.path.join("symbols/dsos.txt"),
        "dso-0.syms 8:1:81 - /opt/app/lib.so\ndso-1.syms 8:1:82 - /opt/app/other.so\n",
    )
    .unwrap();
    std::fs::write(scratch.path.join("symbols/dso-0.syms"), "0 100 in_lib\n").unwrap();
    std::fs::write(scratch.path.join("symbols/dso-1.syms"), "0 100 in_other\n").unwrap();
    let reader = open_perf_data(&data).unwrap();
    let out =
        name_samples(&reader, &SymbolizeOptions::offline(Dir::open(&scratch.path.join("symbols")).unwrap())).unwrap();
    assert!(out.stats.warnings.is_empty(), "{:?}", out.stats.warnings);

    let named: Vec<(u64, Vec<String>, u64)> = out.samples.iter().map(|s| (s.time, names(s), s.frames.id())).collect();
    let expect = |t: u64, leaf: &str, caller: &str| {
        let (_, n, id) = named.iter().find(|(time, ..)| *time == t).unwrap();
        assert_eq!(n, &[leaf, caller], "at {t}");
        assert_ne!(*id, 0, "a symbolized stack is shared");
        *id
    };
    let first = expect(110, "JS:*first", "in_lib");
    assert_eq!(expect(120, "JS:*first", "in_lib"), first);
    // Another thread of the same process: same address space, same stack.
    assert_eq!(expect(130, "JS:*first", "in_lib"), first);
    let second = expect(210, "JS:*second", "in_lib");
    assert_ne!(second, first);
    assert_eq!(expect(220, "JS:*second", "in_lib"), second);
    let remapped = expect(310, "JS:*second", "in_other");
    assert_ne!(remapped, second);
    // Counters count every sample, cached or not.
    assert_eq!(out.stats.samples, 6);
    assert_eq!(out.stats.jit_frames_named, 6);
    assert_eq!(out.stats.native_frames_named, 6);
}

/// Records are named a round at a time (`PERF_RECORD_FINISHED_ROUND`, perf's rule): at the end of a round, what is
/// timed up to the latest time of the round before is complete. So a record of the next round timed earlier than
/// one of this round (another CPU's buffer, read later) still takes its place in time; one timed before what was
/// already named comes after it, as in perf.
#[test]
fn rounds_are_named_in_time_order_across_their_boundaries() {
    let scratch = Scratch::new("symbolize-rounds");
    std::fs::create_dir_all(scratch.join("symbols")).unwrap();
    let records = vec![
        comm(0, 100, 100, "app", false),
        mmap(0, 100, 0x10000, 0x10000, 0, 0, "//anon"),
        sample(10, 100, 100, &[U, 0x10010]),
        sample(30, 100, 100, &[U, 0x10010]),
        Record::FinishedRound,
        // Timed before the sample at 30 of the round before: both still come in time order, and the remap at 25
        // applies to the sample at 30.
        sample(20, 100, 100, &[U, 0x10010]),
        mmap(25, 100, 0x10000, 0x1000, 0, 79, "/opt/app/other.so"),
        sample(40, 100, 100, &[U, 0x10010]),
        Record::FinishedRound,
        sample(35, 100, 100, &[U, 0x10010]),
        Record::FinishedRound,
        // Timed before the sample at 40, which the round before completed: named after it.
        sample(38, 100, 100, &[U, 0x10010]),
    ];
    let data = scratch.path.join("perf.data");
    write_perf_data(&data, &records);
    write_symbols(&scratch.path, "");
    let reader = open_perf_data(&data).unwrap();
    let out =
        name_samples(&reader, &SymbolizeOptions::offline(Dir::open(&scratch.path.join("symbols")).unwrap())).unwrap();
    assert!(out.stats.warnings.is_empty(), "{:?}", out.stats.warnings);
    let named: Vec<(u64, String)> = out.samples.iter().map(|s| (s.time, names(s).join(";"))).collect();
    let jit = "int32 [App] App::Hot()[OptimizedTier1]";
    let other = "other.so+0x10";
    let expected = [(10, jit), (20, jit), (30, other), (35, other), (40, other), (38, other)];
    assert_eq!(named, expected.map(|(t, n)| (t, n.to_string())));
}

#[test]
fn hidden_kernel_symbols_show_as_kernel_with_a_notice() {
    let scratch = Scratch::new("symbolize-hidden-kernel");
    std::fs::create_dir_all(scratch.join("symbols")).unwrap();
    let data = recording(&scratch.path);
    write_symbols(&scratch.path, "# profcpu captured kernel symbols\n# hidden\n");
    let reader = open_perf_data(&data).unwrap();
    let out =
        name_samples(&reader, &SymbolizeOptions::offline(Dir::open(&scratch.path.join("symbols")).unwrap())).unwrap();
    let s = out.samples.iter().find(|s| s.time == 10).unwrap();
    assert_eq!(names(s)[..2], ["[kernel]", "[kernel]"]);
    assert_eq!(out.stats.warnings.len(), 1, "{:?}", out.stats.warnings);
    assert!(out.stats.warnings[0].contains("kptr_restrict"));
}

#[test]
fn offline_without_captured_files_keeps_modules() {
    let scratch = Scratch::new("symbolize-bare-offline");
    std::fs::create_dir_all(scratch.join("symbols")).unwrap();
    let data = recording(&scratch.path);
    let reader = open_perf_data(&data).unwrap();
    let out =
        name_samples(&reader, &SymbolizeOptions::offline(Dir::open(&scratch.path.join("symbols")).unwrap())).unwrap();
    let s = out.samples.iter().find(|s| s.time == 20).unwrap();
    assert_eq!(
        names(s),
        [
            "anon+0x10",
            "libnative.so+0x1200",
            "System.Private.CoreLib.dll+0x2123",
            "[unknown]+0x7000",
            "[unknown]+0x90010"
        ]
    );
    // The return address is shown as recorded; only the lookup used the byte before it.
    assert_eq!((s.frames[1].addr, s.frames[1].offset()), (0x400200, 0x1200));
}

#[test]
fn bad_symbols_dir_is_one_clear_error() {
    let e = Dir::open(Path::new("/nonexistent/symbols")).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
    // A symbols folder whose index is not a regular file: one error naming it.
    let scratch = Scratch::new("symbolize-bad-dir");
    std::fs::create_dir_all(scratch.join("symbols")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", scratch.join("symbols/dsos.txt")).unwrap();
    let data = recording(&scratch.path);
    let reader = open_perf_data(&data).unwrap();
    let opts = SymbolizeOptions::offline(Dir::open(&scratch.join("symbols")).unwrap());
    let e = name_samples(&reader, &opts).unwrap_err();
    assert!(format!("{e:#}").contains("symbols/dsos.txt is a symlink, not a regular file"), "{e:#}");
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        from[(self.next() % from.len() as u64) as usize]
    }

    /// Mostly edge values, sometimes anything.
    fn value(&mut self) -> u64 {
        const EDGES: [u64; 12] =
            [0, 1, 0xfff, 0x1000, 0x10000, 0x400200, u64::MAX, u64::MAX - 1, 1 << 63, K, U, 0xffffffff81000010];
        if self.next() % 3 == 0 {
            self.next()
        } else {
            self.pick(&EDGES)
        }
    }
}

#[test]
fn random_records_never_panic() {
    // Hostile or garbage recordings (overlapping maps at the edges of the address space, forks of unknown
    // processes, callchains full of markers) must symbolize without a panic.
    let scratch = Scratch::new("symbolize-random-records");
    std::fs::create_dir_all(scratch.join("symbols")).unwrap();
    write_symbols(&scratch.path, "ffffffff81000000 100 [kernel.kallsyms] do_syscall_64\n");
    let mut rng = Rng(0x9e3779b97f4a7c15);
    for round in 0..20 {
        let mut records = Vec::new();
        for _ in 0..300 {
            let pid = rng.pick(&[100, 200, 300, 0, u32::MAX]);
            let t = rng.next() % 1000;
            records.push(match rng.next() % 6 {
                0 => {
                    let name = rng.pick(&["//anon", "/opt/app/libnative.so", "/x/jit-1.dump", ""]);
                    let (addr, len, pgoff, ino) = (rng.value(), rng.value(), rng.value(), rng.next() % 3);
                    mmap(t, pid, addr, len, pgoff, ino, name)
                }
                1 => comm(t, pid, pid, "x", rng.next() % 2 == 0),
                2 => fork(t, pid, rng.pick(&[100, 200, 7]), pid, 100),
                _ => {
                    let chain: Vec<u64> = (0..rng.next() % 20).map(|_| rng.value()).collect();
                    sample(t, pid, pid, &chain)
                }
            });
        }
        let path = scratch.path.join(format!("random-{round}.data"));
        write_perf_data(&path, &records);
        let reader = open_perf_data(&path).unwrap();
        let out = name_samples(&reader, &SymbolizeOptions::offline(Dir::open(&scratch.path.join("symbols")).unwrap()))
            .unwrap();
        assert!(out.samples.iter().all(|s| !s.frames.is_empty()));
    }
}
