//! The sampling engine against real processes and the real kernel interface: what lands in perf.data, read back with
//! profcpu's own reader.

mod support;

use profcpu::perf_data::abi::{CONTEXT_MAX, MISC_KERNEL};
use profcpu::perf_data::Record;
use std::collections::HashSet;
use std::ops::Range;
use std::sync::Mutex;
use support::busy::*;
use support::profcpu::*;
use support::recording::*;
use support::scratch::Scratch;

/// Sampling tests run one at a time: parallel spinning targets on a small machine would starve each other and make
/// the sample counts meaningless.
static SERIAL: Mutex<()> = Mutex::new(());

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime fills the struct.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The first user-space address of a sample's callchain (its IP when it was sampled in user mode).
fn user_leaf(s: &profcpu::perf_data::Sample) -> Option<u64> {
    s.callchain.iter().copied().skip_while(|&a| a >= CONTEXT_MAX).find(|&a| a < CONTEXT_MAX)
}

fn in_callchain(s: &profcpu::perf_data::Sample, range: &Range<u64>) -> bool {
    s.callchain.iter().any(|a| range.contains(a))
}

#[test]
fn a_busy_process_is_sampled_in_its_known_function_and_only_its_threads() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // The late thread starts 600 ms after busy does, i.e. after collection began: it must be picked up by
    // inheritance in -pid mode.
    let busy = Busy::start(&["--seconds", "30", "--late-thread-ms", "600"]);
    let pid = busy.info.pid;
    let scratch = Scratch::new("engine-pid");
    let out = scratch.path.clone();
    let before = monotonic_ns();
    let c = collect(&["-pid", &pid.to_string(), "-duration", "2", "-freq", "199", "-output", out.to_str().unwrap()]);
    let after = monotonic_ns();
    let alive_tids: HashSet<u32> = busy.thread_ids().into_iter().collect();
    let rec = Recording::read(&c.perf_data());

    let binary = busy_binary();
    let main_range = busy.info.main_loop..busy.info.main_loop + symbol_size(binary, "busy_main_loop");
    let late_range = busy.info.late_loop..busy.info.late_loop + symbol_size(binary, "busy_late_thread_loop");

    let samples: Vec<_> = rec.samples().collect();
    assert_eq!(samples.len() as u64, c.summary_samples(), "profcpu's summary disagrees with the file");
    // Two spinning threads at 199 Hz for ~2 s would give ~650 samples; a quarter of that proves sampling works
    // without depending on how busy the machine is.
    assert!(samples.len() >= 150, "only {} samples", samples.len());

    let ids: HashSet<u64> = rec.reader.events()[0].ids.iter().copied().collect();
    for s in &samples {
        assert_eq!(s.pid, pid, "sample of another process: {s:?}");
        assert!(alive_tids.contains(&s.tid), "sample of thread {} which is not one of {alive_tids:?}", s.tid);
        assert!(s.id.is_some_and(|id| ids.contains(&id)), "sample id {:?} is not in the event's id list", s.id);
        assert!(
            (before..after).contains(&s.time),
            "sample time {} is not CLOCK_MONOTONIC in [{before}, {after}]",
            s.time
        );
    }

    let main_thread: Vec<_> = samples.iter().filter(|s| s.tid == pid).collect();
    let in_main = main_thread.iter().filter(|s| user_leaf(s).is_some_and(|ip| main_range.contains(&ip))).count();
    assert!(
        in_main * 10 >= main_thread.len() * 8,
        "only {in_main} of {} main-thread samples have their IP in busy_main_loop {main_range:x?}",
        main_thread.len()
    );

    // The late thread: sampled, a thread of its own, and announced by a kernel FORK record (so it was created while
    // recording and inherited the event).
    let late: Vec<_> = samples.iter().filter(|s| in_callchain(s, &late_range)).collect();
    assert!(late.len() >= 20, "the thread created after collection began has {} samples", late.len());
    let late_tid = late[0].tid;
    assert_ne!(late_tid, pid);
    assert!(late.iter().all(|s| s.tid == late_tid));
    assert!(
        rec.records.iter().any(|r| matches!(r, Record::Fork(t) if t.tid == late_tid && t.pid == pid && t.time > 0)),
        "no kernel FORK record for the late thread {late_tid}"
    );

    // State from before the recording was synthesized: the process's name and the mapping of its binary.
    let binary_path = binary.canonicalize().unwrap();
    assert!(rec
        .records
        .iter()
        .any(|r| matches!(r, Record::Comm(c) if c.pid == pid && c.tid == pid && c.comm == "busy")));
    assert!(
        rec.records.iter().any(|r| matches!(r, Record::Mmap(m) if m.pid == pid
            && m.filename == binary_path.to_str().unwrap() && m.prot & libc::PROT_EXEC as u32 != 0 && m.ino != 0
            && (m.addr..m.addr + m.len).contains(&busy.info.main_loop))),
        "no MMAP2 of {} covering busy_main_loop",
        binary_path.display()
    );
    assert!(rec
        .records
        .iter()
        .any(|r| matches!(r, Record::Mmap(m) if m.misc & 7 == MISC_KERNEL && m.filename == "[kernel.kallsyms]_text")));
    assert!(rec.records.iter().any(|r| matches!(r, Record::Mmap(m) if m.pid == pid && m.filename == "[vdso]")));
    assert!(rec.records.iter().any(|r| matches!(r, Record::FinishedRound)));

    let attr = &rec.reader.events()[0].attr;
    // The attr as the kernel's `perf_event_attr`, read from its bytes as perf does (not through profcpu's decoder).
    let mut raw = perf_event_open_sys::bindings::perf_event_attr::default();
    let n = attr.bytes().len().min(std::mem::size_of_val(&raw));
    // SAFETY: perf_event_attr is plain integers; `n` bytes fit in it and come from the slice.
    unsafe { std::ptr::copy_nonoverlapping(attr.bytes().as_ptr(), &mut raw as *mut _ as *mut u8, n) };
    assert_eq!((raw.use_clockid(), raw.clockid), (1, libc::CLOCK_MONOTONIC));
    assert!(attr.is_freq() && attr.sample_freq_or_period() == 199);

    let f = rec.reader.features();
    assert!(f.hostname.is_some() && f.osrelease.is_some() && f.arch.is_some());
    assert!(f.nr_cpus.is_some_and(|(_, online)| online >= 1));
    assert!(f.cmdline.as_ref().is_some_and(|c| c.iter().any(|a| a == "collect")), "{:?}", f.cmdline);
    assert!(
        f.build_ids.iter().any(|b| b.filename == binary_path.to_str().unwrap() && !b.build_id.is_empty()),
        "no build-id for the sampled binary: {:?}",
        f.build_ids
    );
}

#[test]
fn a_thread_started_after_collection_began_is_sampled() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let scratch = Scratch::new("engine-late");
    let out = scratch.path.clone();
    // Launched by profcpu: sampling starts at exec, the thread 800 ms later, the command exits after 2 s.
    let busy = busy_binary().to_str().unwrap();
    let c = collect(&[
        "-duration",
        "10",
        "-output",
        out.to_str().unwrap(),
        "--",
        busy,
        "--seconds",
        "2",
        "--late-thread-ms",
        "800",
    ]);
    let info = parse_busy_line(c.stdout.lines().next().unwrap()).expect("busy's first line");
    assert!(c.stderr.contains("(the target exited)"), "{}", c.stderr);
    let rec = Recording::read(&c.perf_data());
    let late_range = info.late_loop..info.late_loop + symbol_size(busy_binary(), "busy_late_thread_loop");
    let late: Vec<_> = rec.samples().filter(|s| in_callchain(s, &late_range)).collect();
    assert!(late.len() >= 30, "{} samples in busy_late_thread_loop", late.len());
    let tid = late[0].tid;
    assert!(tid != info.pid && late.iter().all(|s| s.pid == info.pid && s.tid == tid));
    // Created while sampling: the kernel reported it, and it was named by the kernel too (thread name).
    assert!(rec.records.iter().any(|r| matches!(r, Record::Fork(t) if t.tid == tid && t.time > 0)));
    assert!(rec.records.iter().any(|r| matches!(r, Record::Comm(c) if c.tid == tid && c.comm == "busy-late")));
    // The exec itself: a COMM with the exec flag and the kernel's MMAP2 of the new binary.
    assert!(rec.records.iter().any(|r| matches!(r, Record::Comm(c) if c.pid == info.pid && c.is_exec())));
    assert!(rec.records.iter().any(|r| matches!(r, Record::Exit(t) if t.pid == info.pid && t.tid == info.pid)));
}

#[test]
fn all_mode_samples_every_process_and_synthesizes_them() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let busy = Busy::start(&["--seconds", "30"]);
    // One more spinner per further CPU, so that every CPU has work to be sampled (an idle CPU in a tickless kernel
    // may give no cpu-clock sample at all in 1.5 s).
    let online = profcpu::record::target::online_cpus().unwrap();
    let _others: Vec<Busy> = (1..online.len()).map(|_| Busy::start(&["--seconds", "30"])).collect();
    let scratch = Scratch::new("engine-all");
    let out = scratch.path.clone();
    // -no-ipc: this is about the engine; other .NET processes on the machine (other tests') keep their perf maps
    // as they are.
    let c = collect(&["-all", "-no-ipc", "-duration", "1.5", "-output", out.to_str().unwrap()]);
    let rec = Recording::read(&c.perf_data());
    let pids: HashSet<u32> = rec.samples().map(|s| s.pid).collect();
    assert!(pids.contains(&busy.info.pid), "the busy process was not sampled; pids: {pids:?}");
    let cpus: HashSet<u32> = rec.samples().map(|s| s.cpu).collect();
    assert_eq!(cpus.len(), online.len(), "samples from CPUs {cpus:?}, online {online:?}");
    // The single spinning thread gets ~99 Hz x 1.5 s samples: not fewer than a loaded machine allows, and not more
    // (no sample is recorded twice across the per-CPU buffers).
    let expected = 99.0 * 1.5;
    let n = rec.samples().filter(|s| s.pid == busy.info.pid).count() as f64;
    assert!(n > expected * 0.3 && n < expected * 1.2, "{n} samples of the busy process, expected about {expected}");
    // Every process was synthesized, PID 1 included, and processes started by others carry their own names.
    let comms: HashSet<u32> =
        rec.records.iter().filter_map(|r| if let Record::Comm(c) = r { Some(c.pid) } else { None }).collect();
    assert!(comms.contains(&1) && comms.contains(&busy.info.pid) && comms.len() > 5, "{} processes", comms.len());
    assert_eq!(rec.reader.events()[0].ids.len(), online.len(), "one event per CPU");
}

#[test]
fn a_one_page_ring_wraps_constantly_and_every_loss_is_counted() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let busy = Busy::start(&["--seconds", "30", "--late-thread-ms", "0"]);
    let scratch = Scratch::new("engine-small-ring");
    let out = scratch.path.clone();
    // One data page per CPU at a high rate: records wrap around the ring constantly.
    let c = collect(&[
        "-pid",
        &busy.info.pid.to_string(),
        "-duration",
        "1.5",
        "-freq",
        "997",
        "-mmap-pages",
        "1",
        "-output",
        out.to_str().unwrap(),
    ]);
    let rec = Recording::read(&c.perf_data());
    let n = rec.samples().count() as u64;
    assert_eq!(n, c.summary_samples());
    assert!(n >= 500, "{n} samples at 997 Hz for 1.5 s with two spinning threads");
    let lost: u64 = rec.records.iter().map(|r| if let Record::Lost(l) = r { l.lost } else { 0 }).sum();
    assert!(
        c.stderr.contains(&format!("({lost} lost)")),
        "LOST records ({lost}) and the summary disagree: {}",
        c.stderr
    );
    // Every sample decodes with a callchain that starts with a context marker: nothing was cut at the wrap.
    assert!(rec.samples().all(|s| s.callchain.first().is_some_and(|&m| m >= CONTEXT_MAX)));
}

#[test]
fn threads_appearing_while_attaching_are_sampled_once() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // A new short-lived spinning thread every 3 ms: threads are created while profcpu lists and opens them, which
    // exercises re-listing and the inherited-event bookkeeping.
    let busy = Busy::start(&["--seconds", "30", "--churn-ms", "3"]);
    let scratch = Scratch::new("engine-churn");
    let out = scratch.path.clone();
    let c = collect(&[
        "-pid",
        &busy.info.pid.to_string(),
        "-duration",
        "1.5",
        "-freq",
        "997",
        "-output",
        out.to_str().unwrap(),
    ]);
    let rec = Recording::read(&c.perf_data());
    // A thread with two live events on one CPU (its own and an inherited one) would be sampled twice, with two ids.
    let mut ids_per_thread_cpu = std::collections::HashMap::<(u32, u32), HashSet<u64>>::new();
    for s in rec.samples() {
        assert_eq!(s.pid, busy.info.pid);
        ids_per_thread_cpu.entry((s.tid, s.cpu)).or_default().insert(s.id.unwrap());
    }
    let doubled: Vec<_> = ids_per_thread_cpu.iter().filter(|(_, ids)| ids.len() > 1).collect();
    assert!(doubled.is_empty(), "threads sampled through two events: {doubled:?}");
    let threads: HashSet<u32> = rec.samples().map(|s| s.tid).collect();
    assert!(threads.len() >= 20, "only {} threads sampled", threads.len());
}
