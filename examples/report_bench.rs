//! Times the report stage on a synthetic profile: 40,000 samples, 15 frames deep, ~1,500 distinct frames shared
//! the way the symbolizer shares them (one `Arc<str>` per name). Run in release:
//!
//! ```text
//! cargo run --release --example report_bench [SAMPLES] [OUTPUT_DIR]
//! cargo run --release --example report_bench --from-perf-script=FILE   # a real profile, as perf named it
//! ```
//!
//! Prints the best of 5 runs of each step (perf_script.out, fold + folded_stacks.out, flamegraph.svg), of `write_outputs`
//! (which writes the script on a second thread), and, for comparison, of inferno's own collapse + flame graph run
//! on our perf_script.out (the `perf script | inferno-collapse-perf | inferno-flamegraph` pipeline minus
//! `perf script` itself).

use inferno::collapse::perf::Folder;
use inferno::collapse::Collapse;
use profcpu::report::flamegraph::{write_svg, FlameOptions};
use profcpu::report::folded::{fold, FoldOptions};
use profcpu::report::script::{write_perf_script, ScriptOptions};
use profcpu::report::{write_outputs, ReportOptions};
use profcpu::symbolize::{Frame, FrameKind, ResolvedSample};
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// xorshift: deterministic, no dependency.
struct Rng(u64);
impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

struct Code {
    symbol: Option<Arc<str>>,
    module: Arc<str>,
    kind: FrameKind,
    base: u64,
}

fn synthetic_profile(count: usize) -> Vec<ResolvedSample> {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let jit: Arc<str> = Arc::from("/tmp/perf-1.map");
    let coreclr: Arc<str> = Arc::from("/usr/share/dotnet/shared/Microsoft.NETCore.App/8.0.0/libcoreclr.so");
    let corelib: Arc<str> =
        Arc::from("/usr/share/dotnet/shared/Microsoft.NETCore.App/8.0.0/System.Private.CoreLib.dll");
    let kernel: Arc<str> = Arc::from("[kernel.kallsyms]");
    let mut code = Vec::new();
    for i in 0..1500u64 {
        let (symbol, module, kind) = match i % 10 {
            0..=5 => (
                Some(format!(
                    "instance void [App] App.Services.Handler{}::Process{}(class App.Request, int32)[OptimizedTier1]",
                    i / 7,
                    i
                )),
                jit.clone(),
                FrameKind::Jit,
            ),
            6 | 7 => (Some(format!("MethodDesc::DoPrestub{i}(MethodTable*)")), coreclr.clone(), FrameKind::Native),
            8 => (None, corelib.clone(), FrameKind::Unknown),
            _ => (Some(format!("__x64_sys_call_{i}")), kernel.clone(), FrameKind::Kernel),
        };
        code.push(Code { symbol: symbol.map(Arc::from), module, kind, base: 0x7f00_0000_0000 + i * 0x1000 });
    }
    let comms: Vec<Arc<str>> =
        [".NET ThreadPool", "dotnet", ".NET TP Worker", "Kestrel"].into_iter().map(Arc::from).collect();
    let event: Arc<str> = Arc::from("cpu-clock");
    // A few hundred hot call paths, so stacks repeat as in a real profile.
    let paths: Vec<Vec<usize>> = (0..400).map(|_| (0..15).map(|_| rng.below(code.len())).collect()).collect();
    (0..count)
        .map(|i| {
            let path = &paths[rng.below(paths.len()).min(rng.below(paths.len()))];
            let frames = path
                .iter()
                .rev()
                .map(|&c| {
                    let code = &code[c];
                    // A hot function is sampled at a few dozen distinct instructions.
                    let offset = (rng.next_u64() % 48) * 4;
                    Frame {
                        addr: code.base + offset,
                        symbol: code.symbol.clone(),
                        offset: if code.symbol.is_some() { offset } else { code.base - 0x7f00_0000_0000 + offset },
                        module: code.module.clone(),
                        kind: code.kind,
                    }
                })
                .collect();
            ResolvedSample {
                pid: 4242,
                tid: 4242 + (i % 8) as u32,
                cpu: (i % 2) as u32,
                time: 1_000_000_000_000 + i as u64 * 10_101_010 / 2,
                period: 10_101_010,
                comm: comms[i % comms.len()].clone(),
                event: event.clone(),
                frames,
            }
        })
        .collect()
}

/// Reads `perf script -F comm,pid,tid,cpu,time,period,event,ip,sym,symoff,dso` text (thread names without
/// spaces) into samples named as perf named them, to time the report stage on a real profile.
fn samples_from_perf_script(path: &str) -> anyhow::Result<Vec<ResolvedSample>> {
    let text = std::fs::read_to_string(path)?;
    let mut names: std::collections::HashMap<String, Arc<str>> = Default::default();
    let mut intern = |s: &str| names.entry(s.to_string()).or_insert_with(|| Arc::from(s)).clone();
    let mut samples = Vec::new();
    for block in text.split("\n\n").filter(|b| !b.trim().is_empty()) {
        let mut lines = block.lines();
        let header = lines.next().unwrap_or_default();
        let mut fields = header.split_whitespace();
        let (Some(comm), Some(ids), Some(cpu), Some(time), Some(period), Some(event)) =
            (fields.next(), fields.next(), fields.next(), fields.next(), fields.next(), fields.next())
        else {
            anyhow::bail!("unexpected sample header {header:?}");
        };
        let (pid, tid) = ids.split_once('/').unwrap_or((ids, ids));
        let secs: f64 = time.trim_end_matches(':').parse()?;
        let mut frames = Vec::new();
        for line in lines {
            let line = line.trim_start();
            let Some((addr, rest)) = line.split_once(' ') else { continue };
            let Some((symbol, module)) = rest.rsplit_once(" (") else { continue };
            let module = module.trim_end_matches(')');
            let (symbol, offset) = match symbol.rsplit_once("+0x") {
                Some((s, off)) => (s, u64::from_str_radix(off, 16).unwrap_or(0)),
                None => (symbol, 0),
            };
            let kind = match module {
                "[kernel.kallsyms]" => FrameKind::Kernel,
                "[unknown]" => FrameKind::Unknown,
                m if m.starts_with("/tmp/perf-") => FrameKind::Jit,
                _ => FrameKind::Native,
            };
            frames.push(Frame {
                addr: u64::from_str_radix(addr, 16).unwrap_or(0),
                symbol: Some(intern(symbol)),
                offset,
                module: intern(module),
                kind,
            });
        }
        samples.push(ResolvedSample {
            pid: pid.parse()?,
            tid: tid.parse()?,
            cpu: cpu.trim_matches(['[', ']']).parse()?,
            time: (secs * 1e9) as u64,
            period: period.parse()?,
            comm: intern(comm),
            event: intern(event.trim_end_matches(':')),
            frames: frames.into(),
        });
    }
    Ok(samples)
}

fn main() -> anyhow::Result<()> {
    let first = std::env::args().nth(1);
    if let Some(path) = first.as_deref().and_then(|a| a.strip_prefix("--from-perf-script=")) {
        let t = Instant::now();
        let samples = samples_from_perf_script(path)?;
        let frames: usize = samples.iter().map(|s| s.frames.len()).sum();
        println!("read {} samples ({frames} frames) from {path} in {:?}", samples.len(), t.elapsed());
        return run(samples, None);
    }
    let count: usize = first.map(|s| s.parse()).transpose()?.unwrap_or(40_000);
    let t = Instant::now();
    let samples = synthetic_profile(count);
    println!("generated {count} samples x 15 frames in {:?}", t.elapsed());
    run(samples, std::env::args().nth(2).map(PathBuf::from))
}

fn run(samples: Vec<ResolvedSample>, keep: Option<PathBuf>) -> anyhow::Result<()> {
    let dir = keep
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join(format!("profcpu-report-bench-{}", std::process::id())));
    std::fs::create_dir_all(&dir)?;

    // Each step runs RUNS times; the fastest run is reported (the machine may be shared).
    let script_path = dir.join("bench.perf_script.out");
    let script_time = best(|| -> anyhow::Result<()> {
        let _ = std::fs::remove_file(&script_path);
        let mut out = BufWriter::with_capacity(256 * 1024, std::fs::File::create(&script_path)?);
        write_perf_script(&samples, &ScriptOptions::default(), &mut out)?;
        out.flush()?;
        Ok(())
    })?;
    let script_size = std::fs::metadata(&script_path)?.len();
    let script_sink = best(|| -> anyhow::Result<()> {
        write_perf_script(&samples, &ScriptOptions::default(), &mut std::io::sink())?;
        Ok(())
    })?;

    let fold_only = best(|| -> anyhow::Result<()> {
        fold(&samples, &FoldOptions::default());
        Ok(())
    })?;
    let folded = fold(&samples, &FoldOptions::default());
    let folded_path = dir.join("bench.folded_stacks.out");
    let fold_time = best(|| -> anyhow::Result<()> {
        let folded = fold(&samples, &FoldOptions::default());
        let _ = std::fs::remove_file(&folded_path);
        let mut out = BufWriter::new(std::fs::File::create(&folded_path)?);
        folded.write(&mut out)?;
        out.flush()?;
        Ok(())
    })?;
    let svg_path = dir.join("bench.flamegraph.svg");
    let svg_time = best(|| -> anyhow::Result<()> {
        let _ = std::fs::remove_file(&svg_path);
        let out = BufWriter::with_capacity(256 * 1024, std::fs::File::create(&svg_path)?);
        write_svg(&folded, &FlameOptions::default(), out)?;
        Ok(())
    })?;

    println!(
        "perf_script.out      {:>8.1} ms  ({:.1} MB; {:.1} ms formatting only)",
        ms(script_time),
        script_size as f64 / 1e6,
        ms(script_sink)
    );
    println!("fold                 {:>8.1} ms  ({} distinct stacks)", ms(fold_only), folded.stacks().len());
    println!("fold + folded file   {:>8.1} ms", ms(fold_time));
    println!(
        "flamegraph.svg       {:>8.1} ms  ({:.1} MB)",
        ms(svg_time),
        std::fs::metadata(&svg_path)?.len() as f64 / 1e6
    );
    println!("sequential total     {:>8.1} ms", ms(script_time + fold_time + svg_time));

    let outputs = dir.join("write_outputs");
    let outputs_time = best(|| -> anyhow::Result<()> {
        let _ = std::fs::remove_dir_all(&outputs);
        std::fs::create_dir_all(&outputs)?;
        write_outputs(&outputs, &samples, &ReportOptions::default())?;
        Ok(())
    })?;
    println!("write_outputs        {:>8.1} ms  (script written on a second thread)", ms(outputs_time));

    // inferno's pipeline on the same text, as the reference tools would run it.
    let script = std::fs::read(&script_path)?;
    let mut collapsed = Vec::new();
    let collapse_time = best(|| -> anyhow::Result<()> {
        collapsed.clear();
        Folder::default().collapse(&script[..], &mut collapsed)?;
        Ok(())
    })?;
    let flame_time = best(|| -> anyhow::Result<()> {
        let mut svg = Vec::new();
        inferno::flamegraph::from_reader(&mut inferno::flamegraph::Options::default(), &collapsed[..], &mut svg)?;
        Ok(())
    })?;
    println!("inferno collapse     {:>8.1} ms  (same folded output: {})", ms(collapse_time), {
        let mut ours = Vec::new();
        folded.write(&mut ours)?;
        ours == collapsed
    });
    println!("inferno flamegraph   {:>8.1} ms", ms(flame_time));
    if keep.is_none() {
        std::fs::remove_dir_all(&dir)?;
    }
    Ok(())
}

const RUNS: usize = 5;

fn best(mut step: impl FnMut() -> anyhow::Result<()>) -> anyhow::Result<Duration> {
    let mut fastest = Duration::MAX;
    for _ in 0..RUNS {
        let t = Instant::now();
        step()?;
        fastest = fastest.min(t.elapsed());
    }
    Ok(fastest)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
