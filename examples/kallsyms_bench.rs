//! Reads the kernel's symbols N times and prints the page faults it took, for measuring the reading's cost with
//! `valgrind --tool=callgrind` (instructions) where no PMU counts them.
//!
//! ```text
//! cargo run --release --example kallsyms_bench -- cache|live|FILE [N]
//! ```
//! `cache` reads perf's saved copy for build-id `00` (put a copy of /proc/kallsyms at
//! `$PERF_BUILDID_DIR/[kernel.kallsyms]/00/kallsyms`), `live` reads /proc/kallsyms, a FILE is read and parsed.
//! Only the first read's faults count what a run pays: later reads get the memory the first gave back.

use profcpu::symbolize::parsers::KernelSymbols;

fn main() {
    let mut args = std::env::args().skip(1);
    let source = args.next().expect("cache|live|FILE [N]");
    let n: usize = args.next().map_or(1, |s| s.parse().expect("N"));
    let mut symbols = 0;
    for i in 0..n {
        let before = minor_faults();
        let k = match source.as_str() {
            "cache" => {
                KernelSymbols::from_perf_cache(&[0]).expect("no $PERF_BUILDID_DIR/[kernel.kallsyms]/00/kallsyms")
            }
            "live" => KernelSymbols::read_live().expect("/proc/kallsyms"),
            path => KernelSymbols::parse(&std::fs::read_to_string(path).expect("FILE")),
        };
        symbols = k.len();
        if i == 0 {
            println!("first read: {} minor faults", minor_faults() - before);
        }
    }
    println!("{symbols} symbols, read {n} times");
}

fn minor_faults() -> i64 {
    // SAFETY: getrusage writes the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    usage.ru_minflt
}
