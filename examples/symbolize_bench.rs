//! Times the symbolizer on a perf.data and prints what it named.
//!
//! ```text
//! cargo run --release --example symbolize_bench -- PERF_DATA [--offline SYMBOLS_DIR] [--symbols DIR]
//!     [--capture OUT_DIR] [--top N] [--stacks N]
//! ```
//! Prints the time to read + symbolize, the stats, the top leaf frames by share and, with `--stacks`, the first N
//! stacks. `--capture OUT_DIR` also runs a capture's final step (what `collect` does at the end: save the hit
//! symbols into OUT_DIR/symbols) and prints its size and time. Compare with `time perf script -i PERF_DATA >
//! /dev/null` on the same file.
//!
//! The numbers in the symbolizer's report came from a deep, busy .NET profile:
//! ```text
//! mcs -optimize+ -out:W.dll -r:System.dll tests/data/symbolize/Workload.cs   # + W.runtimeconfig.json
//! COMPlus_PerfMapEnabled=1 DOTNET_SYSTEM_GLOBALIZATION_INVARIANT=1 dotnet W.dll deep 80 &
//! perf record -k CLOCK_MONOTONIC -F 999 -g -o deep.data -p $! -- sleep 70
//! ```

use profcpu::perf_data::PerfDataReader;
use profcpu::report::names::frame_label;
use profcpu::symbolize::{Capture, SymbolizeOptions, Symbolizer};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let mut path = None;
    let mut opts = SymbolizeOptions::live();
    let (mut top, mut stacks) = (15usize, 0usize);
    let mut capture_dir: Option<PathBuf> = None;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--offline" => {
                opts = SymbolizeOptions {
                    debug_roots: opts.debug_roots,
                    ..SymbolizeOptions::offline(profcpu::fs::Dir::open(Path::new(
                        &args.next().expect("--offline DIR"),
                    ))?)
                }
            }
            "--symbols" => opts.debug_roots.push(PathBuf::from(args.next().expect("--symbols DIR"))),
            "--capture" => capture_dir = Some(PathBuf::from(args.next().expect("--capture OUT_DIR"))),
            "--top" => top = args.next().expect("--top N").parse()?,
            "--stacks" => stacks = args.next().expect("--stacks N").parse()?,
            _ => path = Some(PathBuf::from(a)),
        }
    }
    let path = path.expect("usage: symbolize_bench PERF_DATA [--offline DIR] [--symbols DIR] [--top N] [--stacks N]");
    let started = Instant::now();
    let reader = PerfDataReader::from_file(&std::fs::File::open(&path)?, &path)?;
    let opened = started.elapsed();
    let mut samples = Vec::new();
    let stats = Symbolizer::new(&opts)?.for_each_sample(&reader, |s| {
        samples.push(s);
        Ok(())
    })?;
    let total = started.elapsed();
    let frames: usize = samples.iter().map(|s| s.frames.len()).sum();
    println!(
        "{} samples, {frames} frames: open {:.1} ms, symbolize {:.1} ms, total {:.1} ms",
        samples.len(),
        opened.as_secs_f64() * 1e3,
        (total - opened).as_secs_f64() * 1e3,
        total.as_secs_f64() * 1e3
    );
    println!("{stats:#?}");
    let mut leaves: HashMap<String, usize> = HashMap::new();
    for s in &samples {
        if let Some(f) = s.frames.first() {
            *leaves.entry(format!("{} [{:?}] ({})", frame_label(f), f.kind(), f.module())).or_default() += 1;
        }
    }
    let mut leaves: Vec<_> = leaves.into_iter().collect();
    leaves.sort_by_key(|l| std::cmp::Reverse(l.1));
    for (name, n) in leaves.iter().take(top) {
        println!("{:6.2}%  {name}", 100.0 * *n as f64 / samples.len().max(1) as f64);
    }
    if let Some(dir) = capture_dir {
        std::fs::create_dir_all(&dir)?;
        let mut pids: Vec<u32> = samples.iter().map(|s| s.pid).collect();
        pids.sort_unstable();
        pids.dedup();
        let capture = Capture::new(&profcpu::fs::Dir::open(&dir)?, &pids, &opts)?;
        let summary = capture.finish(&reader, |_| Ok(()))?;
        println!(
            "capture: {} DSOs, {} bytes in {}, final step {:.1} ms",
            summary.dsos,
            summary.bytes,
            summary.dir.path().display(),
            summary.finish_time.as_secs_f64() * 1e3
        );
    }
    for s in samples.iter().take(stacks) {
        println!(
            "\n{} {}/{} {}.{:06} {} {}:",
            s.comm,
            s.pid,
            s.tid,
            s.time / 1_000_000_000,
            s.time % 1_000_000_000 / 1000,
            s.period,
            s.event
        );
        for f in &s.frames {
            println!("\t{:16x} {} ({})", f.addr, frame_label(f), f.module());
        }
    }
    Ok(())
}
