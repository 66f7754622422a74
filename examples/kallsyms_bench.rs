//! Reads the kernel's symbols N times and prints the time and page faults it took, for measuring the reading's cost
//! (with `valgrind --tool=callgrind` for instructions, where no PMU counts them).
//!
//! ```text
//! cargo run --release --example kallsyms_bench -- cache|live [N]
//! ```
//! `cache` reads perf's saved copy for build-id `00` (put a copy of /proc/kallsyms at
//! `$PERF_BUILDID_DIR/[kernel.kallsyms]/00/kallsyms`), `live` reads /proc/kallsyms. Each read also looks up
//! `schedule`, as naming a kernel frame would. Only the first read's faults count what a run pays: later reads get
//! the memory the first gave back.

use profcpu::symbolize::parsers::KernelSymbols;
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let source = args.next().expect("cache|live [N]");
    let n: usize = args.next().map_or(1, |s| s.parse().expect("N"));
    let kallsyms = std::fs::read_to_string("/proc/kallsyms").expect("/proc/kallsyms");
    let line = kallsyms.lines().find(|l| l.ends_with(" T schedule")).expect("kallsyms lists schedule");
    let schedule = u64::from_str_radix(&line[..16], 16).expect("an address");
    let started = Instant::now();
    for i in 0..n {
        let before = minor_faults();
        let k = match source.as_str() {
            "cache" => {
                KernelSymbols::from_perf_cache(&[0]).expect("no $PERF_BUILDID_DIR/[kernel.kallsyms]/00/kallsyms")
            }
            "live" => KernelSymbols::read_live().expect("/proc/kallsyms"),
            other => panic!("{other}: cache or live"),
        };
        let found = k.lookup(schedule + 1).map(|s| s.name);
        if i == 0 {
            println!(
                "first read: {} minor faults, {:.2?}; found {found:?}",
                minor_faults() - before,
                started.elapsed()
            );
        }
    }
    println!("read {n} times, {:.2?} each", started.elapsed() / n as u32);
}

fn minor_faults() -> i64 {
    // SAFETY: getrusage writes the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    usage.ru_minflt
}
