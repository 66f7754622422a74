//! `codec-compare LEVEL RUNS FILE...`: each file compressed to a raw deflate stream by flate2 (zlib-rs backend) at
//! LEVEL, RUNS times; prints `FILE BYTES COMPRESSED CPU_MS` with the least thread CPU time of the runs.

use std::io::Write;

/// The thread's CPU clock (exact, unlike `getrusage(RUSAGE_THREAD)`, which lags by up to a scheduler tick).
fn thread_cpu_ms() -> f64 {
    // SAFETY: clock_gettime only writes into the timespec.
    let mut t: libc::timespec = unsafe { std::mem::zeroed() };
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    t.tv_sec as f64 * 1e3 + t.tv_nsec as f64 / 1e6
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(level), Some(runs)) = (args.first().and_then(|a| a.parse().ok()), args.get(1).and_then(|a| a.parse().ok()))
    else {
        eprintln!("usage: codec-compare LEVEL RUNS FILE...");
        std::process::exit(2);
    };
    for path in &args[2..] {
        let data = std::fs::read(path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let (mut best, mut size) = (f64::MAX, 0);
        for _ in 0..runs {
            let before = thread_cpu_ms();
            let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::new(level));
            e.write_all(&data).unwrap();
            size = e.finish().unwrap().len();
            best = best.min(thread_cpu_ms() - before);
        }
        println!("{path} {} {size} {best:.1}", data.len());
    }
}
