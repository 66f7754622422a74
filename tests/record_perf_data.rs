//! perf.data round trips: what `PerfDataWriter` writes, `PerfDataReader` reads back unchanged, and Debian's perf
//! accepts the file too.

mod support;

use perf_event_open_sys::bindings as abi;
use profcpu::fs::Dir;
use profcpu::perf_data::abi::{CONTEXT_KERNEL, CONTEXT_USER, MISC_COMM_EXEC, MISC_KERNEL, MISC_USER};
use profcpu::perf_data::header::HOST_PID;
use profcpu::perf_data::*;
use profcpu::record::SAMPLE_TYPE;
use support::perf::perf;
use support::recording::open_perf_data;
use support::scratch::Scratch;

fn attr(config: u64) -> Attr {
    let mut a = abi::perf_event_attr {
        size: abi::PERF_ATTR_SIZE_VER7,
        type_: abi::PERF_TYPE_SOFTWARE,
        config,
        sample_type: SAMPLE_TYPE,
        ..Default::default()
    };
    a.__bindgen_anon_1.sample_freq = 99;
    a.set_freq(1);
    a.set_sample_id_all(1);
    a.set_mmap2(1);
    a.set_comm(1);
    a.set_task(1);
    a.set_use_clockid(1);
    a.clockid = libc::CLOCK_MONOTONIC;
    Attr::from_kernel(&a)
}

fn sid(pid: u32, tid: u32, time: u64, id: u64) -> SampleId {
    SampleId { pid: Some(pid), tid: Some(tid), time: Some(time), id: Some(id), cpu: Some(1) }
}

fn sample(id: u64, time: u64, callchain: Vec<u64>) -> Record {
    Record::Sample(Sample {
        misc: MISC_USER,
        id: Some(id),
        ip: 0x401234,
        pid: 42,
        tid: 43,
        time,
        cpu: 1,
        period: 10_101_010,
        callchain,
        raw: vec![],
        user: None,
    })
}

fn records() -> Vec<Record> {
    vec![
        Record::Mmap(Mmap {
            misc: MISC_KERNEL,
            pid: u32::MAX,
            tid: 0,
            addr: 0xffffffff81000000,
            len: 0x1208d88,
            pgoff: 0xffffffff81000000,
            prot: 5,
            filename: "[kernel.kallsyms]_text".into(),
            sample_id: sid(u32::MAX, 0, 0, 0),
            ..Default::default()
        }),
        Record::Comm(Comm { misc: 0, pid: 42, tid: 42, comm: "app".into(), sample_id: sid(42, 42, 0, 0) }),
        Record::Fork(Task { pid: 42, ppid: 42, tid: 43, ptid: 42, time: 0, sample_id: sid(42, 43, 0, 0) }),
        // Names of every length: the padding to 8 bytes must round-trip.
        Record::Comm(Comm { misc: 0, pid: 42, tid: 43, comm: "worker-1234567".into(), sample_id: sid(42, 43, 0, 0) }),
        Record::Mmap(Mmap {
            misc: MISC_USER,
            pid: 42,
            tid: 42,
            addr: 0x400000,
            len: 0x10000,
            pgoff: 0x1000,
            maj: 0xfe,
            min: 1,
            ino: 123456,
            ino_generation: 7,
            build_id: None,
            prot: 5,
            flags: 2,
            filename: "/usr/bin/app with space".into(),
            sample_id: sid(42, 42, 0, 0),
        }),
        Record::Mmap(Mmap {
            misc: MISC_USER,
            pid: 42,
            tid: 42,
            addr: 0x7f0000000000,
            len: 0x2000,
            build_id: Some(vec![0xab; 20]),
            prot: 7,
            flags: 2,
            filename: "//anon".into(),
            sample_id: sid(42, 42, 5, 11),
            ..Default::default()
        }),
        sample(11, 1_000, vec![CONTEXT_USER, 0x401234, 0x400100]),
        sample(22, 2_000, vec![CONTEXT_KERNEL, 0xffffffff81001000, CONTEXT_USER, 0x401234]),
        sample(11, 3_000, vec![]),
        Record::Comm(Comm {
            misc: MISC_COMM_EXEC,
            pid: 42,
            tid: 42,
            comm: "exec'd".into(),
            sample_id: sid(42, 42, 3_500, 11),
        }),
        Record::Lost(Lost { id: 11, lost: 17, sample_id: sid(42, 43, 4_000, 11) }),
        Record::LostSamples { lost: 3, sample_id: sid(42, 43, 4_100, 22) },
        Record::Exit(Task { pid: 42, ppid: 1, tid: 43, ptid: 42, time: 5_000, sample_id: sid(42, 43, 5_000, 11) }),
        Record::FinishedRound,
        // A record type profcpu does not decode (THROTTLE) is carried through byte for byte.
        Record::Other { kind: 5, misc: 0, bytes: throttle_bytes() },
    ]
}

fn throttle_bytes() -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(&5u32.to_ne_bytes());
    b.extend_from_slice(&0u16.to_ne_bytes());
    b.extend_from_slice(&(8u16 + 24 + 32).to_ne_bytes());
    for v in [6_000u64, 11, 11, 42 | (43 << 32), 6_000, 1, 11] {
        b.extend_from_slice(&v.to_ne_bytes());
    }
    b
}

fn features() -> Features {
    Features {
        hostname: Some("host-a".into()),
        osrelease: Some("6.18.0-test".into()),
        version: Some("profcpu 0.1.0".into()),
        arch: Some("x86_64".into()),
        nr_cpus: Some((4, 2)),
        cmdline: Some(vec!["profcpu".into(), "collect".into(), "-pid".into(), "42".into()]),
        build_ids: vec![
            BuildIdEntry {
                pid: HOST_PID,
                is_kernel: true,
                build_id: vec![1; 20],
                filename: "[kernel.kallsyms]".into(),
            },
            BuildIdEntry {
                pid: HOST_PID,
                is_kernel: false,
                build_id: vec![2; 20],
                filename: "/usr/bin/app with space".into(),
            },
        ],
        ..Features::default()
    }
}

fn events() -> Vec<EventDesc> {
    vec![
        EventDesc { attr: attr(abi::PERF_COUNT_SW_CPU_CLOCK as u64), name: "cpu-clock".into(), ids: vec![11] },
        EventDesc { attr: attr(abi::PERF_COUNT_SW_TASK_CLOCK as u64), name: "task-clock".into(), ids: vec![22] },
    ]
}

fn write(path: &std::path::Path) {
    let dir = Dir::open(path.parent().unwrap()).unwrap();
    let mut w = PerfDataWriter::create(&dir, path.file_name().unwrap().to_str().unwrap(), events()).unwrap();
    w.add_ids(0, &[33]);
    for r in records() {
        match r {
            Record::FinishedRound => w.finished_round().unwrap(),
            Record::Other { bytes, .. } => w.write_raw(&bytes).unwrap(),
            r => w.write_record(&r).unwrap(),
        }
    }
    w.finish(&features()).unwrap();
}

#[test]
fn every_record_kind_and_feature_reads_back_unchanged() {
    let scratch = Scratch::new("perf-data-roundtrip");
    let dir = scratch.path.clone();
    let path = dir.join("perf.data");
    write(&path);

    let reader = open_perf_data(&path).unwrap();
    assert!(reader.warnings().is_empty(), "{:?}", reader.warnings());
    let mut expected_events = events();
    expected_events[0].ids.push(33);
    assert_eq!(reader.events(), &expected_events[..]);
    // What the writer described the events as (EVENT_DESC) reads back beside the features it was given.
    let described: Vec<(String, Vec<u64>)> = expected_events.iter().map(|e| (e.name.clone(), e.ids.clone())).collect();
    assert_eq!(reader.features(), &Features { event_desc: described, ..features() });
    let event_of = |id| &reader.events()[reader.sample_formats().event_index(Some(id))].name;
    assert_eq!(event_of(22), "task-clock");
    assert_eq!(event_of(33), "cpu-clock");

    let mut back = Vec::new();
    let stats = reader
        .for_each_record(|r| {
            back.push(r);
            Ok(())
        })
        .unwrap();
    assert_eq!(back, records());
    assert_eq!((stats.records, stats.undecodable, stats.truncated_bytes), (records().len() as u64, 0, 0));
}

#[test]
fn debian_perf_reads_the_file() {
    let scratch = Scratch::new("perf-data-perf");
    let dir = scratch.path.clone();
    let path = dir.join("perf.data");
    write(&path);
    let header = perf(&["report", "-i", path.to_str().unwrap(), "--header-only"]);
    let text = String::from_utf8_lossy(&header.stdout);
    assert!(header.status.success(), "{}", String::from_utf8_lossy(&header.stderr));
    for expected in [
        "# hostname : host-a",
        "# os release : 6.18.0-test",
        "# arch : x86_64",
        "# nrcpus online : 2",
        "# nrcpus avail : 4",
        "# cmdline : profcpu collect -pid 42",
        "# event : name = cpu-clock, , id = { 11, 33 }",
        "# event : name = task-clock, , id = { 22 }",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
    let ids = perf(&["buildid-list", "-i", path.to_str().unwrap()]);
    let ids = String::from_utf8_lossy(&ids.stdout);
    assert!(ids.contains(&format!("{} /usr/bin/app with space", "02".repeat(20))), "{ids}");
    assert!(ids.contains(&format!("{} [kernel.kallsyms]", "01".repeat(20))), "{ids}");

    // Three samples, each attributed to the event its id names.
    let script = perf(&["script", "-i", path.to_str().unwrap(), "-F", "event,pid,tid"]);
    assert!(script.status.success(), "{}", String::from_utf8_lossy(&script.stderr));
    let lines: Vec<String> = String::from_utf8_lossy(&script.stdout)
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    assert_eq!(lines, ["42/43 cpu-clock:", "42/43 task-clock:", "42/43 cpu-clock:"]);
}

#[test]
fn an_unfinished_file_is_recognised_and_existing_paths_are_never_overwritten() {
    let scratch = Scratch::new("perf-data-unfinished");
    let dir = scratch.path.clone();
    let path = dir.join("perf.data");
    let out = Dir::open(&dir).unwrap();
    let mut w = PerfDataWriter::create(&out, "perf.data", events()).unwrap();
    w.write_record(&records()[1]).unwrap();
    drop(w);
    let err = open_perf_data(&path).err().expect("an unfinished file must not read as a recording");
    assert!(format!("{err:#}").contains("not finished"), "{err:#}");

    // create refuses an existing file and a symlink (even a dangling one) instead of writing through it.
    assert!(PerfDataWriter::create(&out, "perf.data", events()).is_err());
    let target = dir.join("elsewhere");
    let link = dir.join("link.data");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    assert!(PerfDataWriter::create(&out, "link.data", events()).is_err());
    assert!(!target.exists(), "the writer followed a symlink");
}
