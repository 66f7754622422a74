//! ReadyToRun (precompiled .NET) frames named through the production path, and unnamed native code shown one
//! frame per function. The workload (tests/data/r2r/Workers.cs) runs framework code on worker threads.
//!
//! - .NET Core 3.1 (`profcpu collect`, then `postprocess` on a machine without the runtime): worker threads'
//!   stacks no longer hold unnamed System.Private.CoreLib frames (before: nearly all did, the thread start path is
//!   precompiled code the 3.1 runtime never reports).
//! - .NET 8 (jitdump only, `DOTNET_PerfMapEnabled=2`; tiered compilation off so precompiled code stays in use): the
//!   name profcpu gives a sample whose leaf is in a ReadyToRun image equals the runtime's own `[PreJIT]` jitdump
//!   record for that address, in CoreLib and other framework assemblies.
//! - .NET 8's libcoreclr.so is stripped: its unnamed frames are grouped by the functions `.eh_frame` describes
//!   (checked against binutils' `readelf --debug-dump=frames`), one label per function.
//! - Offline: each collection, moved and postprocessed with /tmp and the runtime hidden, gives the same output.
//! - A `perf record` folder postprocessed live names the ReadyToRun frames too.
//!
//! Needs: the runtimes (scripts/dotnet-runtime.sh), mono-mcs, linux-perf, binutils, util-linux
//! (scripts/setup-deps.sh).

mod support;

use profcpu::symbolize::parsers::JitDump;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use support::dotnet::{same_name_but_runtime_truncation, Dotnet};
use support::golden::copy_tree;
use support::perf::perf_record;
use support::profcpu::{collect, postprocess_hiding, postprocess_ok, read};
use support::running_app::{exclusive, RunningApp};
use support::scratch::{run_dir, Scratch};
use support::START_TIMEOUT;

const CORELIB: &str = "System.Private.CoreLib.dll";
/// Where every managed thread starts: precompiled CoreLib code, named as the runtime names it.
const THREAD_START: &str = "instance void [System.Private.CoreLib] System.Threading.ThreadHelper::ThreadStart(";
/// A frame of the workers' own (JIT-compiled) thread body: marks a worker thread's sample.
const WORKER_FRAME: &str = "Workers::RunWorker(object)";

fn workers(dotnet: Dotnet) -> PathBuf {
    dotnet.build_app(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/r2r/Workers.cs"))
}

/// One frame line of perf_script.out.
#[derive(Debug, Clone)]
struct ScriptFrame {
    addr: u64,
    label: String,
    module: String,
}

impl ScriptFrame {
    fn parse(line: &str) -> ScriptFrame {
        let (addr, rest) = line.trim_start().split_once(' ').unwrap_or_else(|| panic!("bad frame line {line:?}"));
        let (labelled, module) = rest.rsplit_once(" (").unwrap_or_else(|| panic!("bad frame line {line:?}"));
        let label = labelled.rsplit_once("+0x").map_or(labelled, |(l, _)| l);
        ScriptFrame {
            addr: u64::from_str_radix(addr, 16).unwrap(),
            label: label.to_string(),
            module: module.trim_end_matches(')').to_string(),
        }
    }

    fn module_name(&self) -> &str {
        self.module.rsplit('/').next().unwrap_or(&self.module)
    }

    /// Without a symbol, a frame is labelled `<module basename>+0x<offset>`.
    fn unnamed_offset(&self) -> Option<u64> {
        let offset = self.label.strip_prefix(self.module_name())?.strip_prefix("+0x")?;
        u64::from_str_radix(offset, 16).ok()
    }
}

/// The samples of a perf_script.out, frames leaf first.
fn samples(script: &str) -> Vec<Vec<ScriptFrame>> {
    script
        .split("\n\n")
        .filter(|block| !block.trim().is_empty())
        .map(|block| block.lines().skip(1).map(ScriptFrame::parse).collect())
        .collect()
}

/// Worker-thread samples, and how many of them hold an unnamed CoreLib frame.
fn unnamed_corelib_share(script: &str) -> (usize, usize) {
    let workers: Vec<Vec<ScriptFrame>> =
        samples(script).into_iter().filter(|s| s.iter().any(|f| f.label.contains(WORKER_FRAME))).collect();
    let unnamed =
        workers.iter().filter(|s| s.iter().any(|f| f.module_name() == CORELIB && f.unnamed_offset().is_some())).count();
    (workers.len(), unnamed)
}

/// A `profcpu collect` of the workload, taken once per runtime and shared by the tests of this file.
struct Collection {
    run_dir: PathBuf,
    script: String,
    folded: String,
    /// /proc/PID/maps while it was profiled.
    maps: String,
    runtime: PathBuf,
}

fn collect_workers(dotnet: Dotnet, env: &[(&str, &str)]) -> Collection {
    let _cpu = exclusive();
    let base = run_dir("r2r-symbolize").join(dotnet.version());
    std::fs::create_dir_all(&base).unwrap();
    let runtime = dotnet.runtime_dir();
    let mut cmd = dotnet.command(&runtime, &workers(dotnet), &["60", "2"]);
    for (key, value) in env {
        cmd.env(key, value);
    }
    cmd.env("DOTNET_PerfMapJitDumpPath", &base);
    let app = RunningApp::start(cmd, START_TIMEOUT);
    std::thread::sleep(Duration::from_millis(500));
    let maps = read(Path::new(&format!("/proc/{}/maps", app.pid())));
    let run =
        collect(&["-pid", &app.pid().to_string(), "-duration", "3", "-freq", "499", "-output", base.to_str().unwrap()]);
    drop(app);
    let script = read(&run.run_dir.join("perf_script.out"));
    let folded = read(&run.run_dir.join("folded_stacks.out"));
    Collection { run_dir: run.run_dir, script, folded, maps, runtime }
}

fn dotnet31() -> &'static Collection {
    static ONCE: std::sync::OnceLock<Collection> = std::sync::OnceLock::new();
    ONCE.get_or_init(|| collect_workers(Dotnet::V3_1, &[]))
}

fn dotnet8() -> &'static Collection {
    static ONCE: std::sync::OnceLock<Collection> = std::sync::OnceLock::new();
    // Jitdump only; no tiering, so the precompiled code keeps running instead of being re-JIT-compiled.
    ONCE.get_or_init(|| {
        collect_workers(Dotnet::V8, &[("DOTNET_PerfMapEnabled", "2"), ("DOTNET_TieredCompilation", "0")])
    })
}

/// The collection copied elsewhere and postprocessed with /tmp and the runtime hidden: the same outputs.
fn assert_same_offline(c: &Collection, name: &str) {
    let scratch = Scratch::new(name);
    let moved = scratch.join("moved");
    copy_tree(&c.run_dir, &moved);
    let run = postprocess_hiding(&moved, &[&c.runtime], &[]);
    assert!(!run.stderr.contains("warning"), "{}", run.stderr);
    assert_eq!(read(&moved.join("perf_script.out")), c.script, "perf script differs offline");
    assert_eq!(read(&moved.join("folded_stacks.out")), c.folded, "folded stacks differ offline");
    assert!(c.folded.contains("[PreJIT]") || c.script.contains("[PreJIT]"), "no ReadyToRun name in the collection");
}

#[test]
fn dotnet31_worker_threads_have_their_corelib_frames_named_offline() {
    let c = dotnet31();
    assert_same_offline(c, "r2r-31-offline");
    let (workers, unnamed) = unnamed_corelib_share(&c.script);
    println!("{workers} worker-thread samples, {unnamed} with an unnamed CoreLib frame");
    assert!(workers >= 300, "only {workers} worker-thread samples: the workload did not run");
    assert!(unnamed * 100 <= workers * 2, "{unnamed} of {workers} worker samples hold an unnamed CoreLib frame");
    // The thread start path, precompiled in CoreLib, is named as the runtime would name it.
    let start_path = samples(&c.script)
        .iter()
        .filter(|s| s.iter().any(|f| f.label.contains(WORKER_FRAME)))
        .filter(|s| s.iter().any(|f| f.label.starts_with(THREAD_START) && f.label.ends_with(")[PreJIT]")))
        .count();
    assert!(start_path * 10 >= workers * 9, "ThreadHelper::ThreadStart named in only {start_path} of {workers}");
    // Named ReadyToRun frames are managed code: folded under their names, coloured as JIT code.
    let svg = read(&c.run_dir.join("flamegraph.svg"));
    assert!(c.folded.contains("[System.Private.CoreLib] System.Threading.ThreadHelper::ThreadStart;"));
    assert!(svg.contains("ThreadHelper::ThreadStart"), "not in the flame graph");
}

#[test]
fn dotnet8_names_equal_the_runtimes_prejit_records() {
    let c = dotnet8();
    assert_same_offline(c, "r2r-8-offline");
    let dump_name = std::fs::read_dir(c.run_dir.join("symbols"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .find(|n| n.starts_with("jit-") && n.ends_with(".dump"))
        .expect("the collection saved no jitdump");
    let dump = JitDump::parse(&std::fs::read(c.run_dir.join("symbols").join(dump_name)).unwrap());
    let prejit: BTreeMap<u64, (u64, &str)> = dump
        .codes()
        .iter()
        .filter(|code| code.name.ends_with("[PreJIT]"))
        .map(|code| (code.start, (code.end, &*code.name)))
        .collect();
    assert!(prejit.len() >= 500, "only {} [PreJIT] records: is DOTNET_PerfMapEnabled=2 honoured?", prejit.len());

    #[derive(Default, Debug)]
    struct Tally {
        leaves: usize,
        compared: usize,
        /// Equal, or equal but for the runtime's own truncation defect.
        equal: usize,
        exact: usize,
    }
    let mut tallies: BTreeMap<String, Tally> = BTreeMap::new();
    let mut differ = Vec::new();
    for sample in samples(&c.script) {
        let leaf = &sample[0];
        if !leaf.module.ends_with(".dll") {
            continue;
        }
        let tally = tallies.entry(leaf.module_name().to_string()).or_default();
        tally.leaves += 1;
        let record = prejit.range(..=leaf.addr).next_back().filter(|(_, (end, _))| leaf.addr < *end);
        let Some((_, (_, runtime_name))) = record else { continue };
        tally.compared += 1;
        if leaf.label == *runtime_name {
            tally.equal += 1;
            tally.exact += 1;
        } else if same_name_but_runtime_truncation(runtime_name, &leaf.label) {
            tally.equal += 1;
        } else {
            differ.push(format!("{:#x}\n    runtime: {runtime_name}\n    profcpu: {}", leaf.addr, leaf.label));
        }
    }
    for (module, t) in &tallies {
        println!(
            "{module}: {} leaf samples, {} with a [PreJIT] record, {} names equal ({} exactly, the rest but for the \
             runtime's truncation of the method name)",
            t.leaves, t.compared, t.equal, t.exact
        );
    }
    differ.sort();
    differ.dedup();
    println!(
        "names that differ ({}):\n{}",
        differ.len(),
        differ.iter().take(20).cloned().collect::<Vec<_>>().join("\n")
    );
    let corelib = tallies.get(CORELIB).expect("no leaf sample in CoreLib");
    assert!(corelib.compared >= 100, "only {} CoreLib leaves have a [PreJIT] record: {corelib:?}", corelib.compared);
    let others: Vec<_> = tallies.iter().filter(|(m, t)| *m != CORELIB && t.compared >= 20).collect();
    assert!(!others.is_empty(), "no other framework assembly with 20 compared leaves: {tallies:?}");
    let (compared, equal) = tallies.values().fold((0, 0), |(c, e), t| (c + t.compared, e + t.equal));
    assert!(equal * 100 >= compared * 99, "{equal} of {compared} names equal the runtime's");
    for (module, t) in &others {
        assert!(t.equal * 100 >= t.compared * 99, "{module}: {} of {} names equal", t.equal, t.compared);
    }
    // Leaves the runtime logged nothing for are still named from the image.
    let leaves: usize = tallies.values().map(|t| t.leaves).sum();
    let named =
        samples(&c.script).iter().filter(|s| s[0].module.ends_with(".dll") && s[0].unnamed_offset().is_none()).count();
    assert!(named * 100 >= leaves * 98, "only {named} of {leaves} leaves in .dll files are named");
}

/// `(file offset, link-time address, size)` of every PT_LOAD, from `readelf -lW`.
fn load_segments(file: &Path) -> Vec<(u64, u64, u64)> {
    let out = Command::new("readelf").arg("-lW").arg(file).output().expect("readelf (binutils) is missing");
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.trim_start().starts_with("LOAD"))
        .map(|l| {
            let f: Vec<u64> =
                l.split_whitespace().skip(1).take(5).map(|x| u64::from_str_radix(&x[2..], 16).unwrap()).collect();
            (f[0], f[1], f[3])
        })
        .collect()
}

/// Every FDE's `[start, end)` link-time addresses, from `readelf --debug-dump=frames` (binutils, an independent
/// reader of `.eh_frame`).
fn fde_ranges(file: &Path) -> BTreeMap<u64, u64> {
    let out =
        Command::new("readelf").arg("--debug-dump=frames").arg(file).output().expect("readelf (binutils) is missing");
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(" FDE "))
        .filter_map(|l| {
            let (start, end) = l.rsplit_once("pc=")?.1.split_once("..")?;
            Some((u64::from_str_radix(start, 16).ok()?, u64::from_str_radix(end.trim(), 16).ok()?))
        })
        .collect()
}

#[test]
fn stripped_libcoreclr_is_one_frame_per_function() {
    let c = dotnet8();
    let maps: Vec<(u64, u64, u64, String)> = c
        .maps
        .lines()
        .filter(|l| l.ends_with("/libcoreclr.so"))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (start, end) = f[0].split_once('-').unwrap();
            let hex = |s: &str| u64::from_str_radix(s, 16).unwrap();
            (hex(start), hex(end), hex(f[2]), f[5].to_string())
        })
        .collect();
    let library = PathBuf::from(&maps.first().expect("libcoreclr.so not mapped").3);
    let symtab = Command::new("readelf").arg("-SW").arg(&library).output().unwrap();
    assert!(!String::from_utf8_lossy(&symtab.stdout).contains(".symtab"), "{} is not stripped", library.display());
    let loads = load_segments(&library);
    let fdes = fde_ranges(&library);
    assert!(fdes.len() > 1000, "only {} FDEs", fdes.len());
    let offset_of =
        |vaddr: u64| loads.iter().find(|(_, v, size)| (*v..v + size).contains(&vaddr)).map(|(o, v, _)| vaddr - v + o);

    // Each unnamed libcoreclr frame: the function holding its address (a caller's return address is looked up
    // one byte back, as perf does).
    let mut labels = BTreeSet::new();
    let mut functions = BTreeSet::new();
    let mut addresses_per_label: HashMap<u64, BTreeSet<u64>> = HashMap::new();
    let (mut frames, mut in_fde, mut wrong) = (0, 0, Vec::new());
    for sample in samples(&c.script) {
        for (depth, frame) in sample.iter().enumerate() {
            if frame.module_name() != "libcoreclr.so" {
                continue;
            }
            let Some(label) = frame.unnamed_offset() else { continue };
            frames += 1;
            labels.insert(label);
            let lookup = if depth == 0 { frame.addr } else { frame.addr - 1 };
            let (start, _, pgoff, _) =
                maps.iter().find(|(s, e, _, _)| (*s..*e).contains(&lookup)).expect("address outside libcoreclr");
            let file_offset = lookup - start + pgoff;
            addresses_per_label.entry(label).or_default().insert(file_offset);
            let vaddr = loads
                .iter()
                .find(|(o, _, size)| (*o..o + size).contains(&file_offset))
                .map(|(o, v, _)| file_offset - o + v);
            let fde = vaddr.and_then(|a| fdes.range(..=a).next_back().filter(|(_, end)| a < **end));
            match fde {
                Some((&fde_start, _)) => {
                    in_fde += 1;
                    functions.insert(fde_start);
                    if Some(label) != offset_of(fde_start) {
                        wrong.push(format!(
                            "{:#x}: label +{label:#x}, function at {:?}",
                            frame.addr,
                            offset_of(fde_start)
                        ));
                    }
                }
                // Hand-written stubs without CFI: their own address is all that is known.
                None => {
                    functions.insert(u64::MAX - file_offset);
                }
            }
        }
    }
    let grouped = addresses_per_label.values().filter(|a| a.len() > 1).count();
    println!(
        "{frames} unnamed libcoreclr frames ({in_fde} in an FDE), {} labels, {} functions, {grouped} labels for \
         several addresses",
        labels.len(),
        functions.len()
    );
    assert!(frames >= 100, "only {frames} unnamed libcoreclr frames");
    assert!(wrong.is_empty(), "labels that are not their function's start:\n{}", wrong.join("\n"));
    assert!(labels.len() <= functions.len(), "{} labels for {} functions", labels.len(), functions.len());
    assert!(in_fde * 10 >= frames * 8, "only {in_fde} of {frames} frames lie in an FDE");
    assert!(grouped >= 5, "only {grouped} functions were sampled at more than one address: nothing was grouped");
    // The folded stacks (and so the flame graph) hold exactly these labels: one box per function.
    let folded_labels: BTreeSet<u64> = c
        .folded
        .split([';', ' '])
        .filter_map(|name| u64::from_str_radix(name.strip_prefix("libcoreclr.so+0x")?, 16).ok())
        .collect();
    assert_eq!(folded_labels, labels, "the folded stacks label libcoreclr differently");
}

#[test]
fn a_perf_record_folder_postprocessed_live_names_readytorun_frames() {
    let scratch = Scratch::new("r2r-perf-record");
    let dir = scratch.join("perf-record");
    std::fs::create_dir(&dir).unwrap();
    let dotnet = Dotnet::V3_1;
    let script = {
        let _cpu = exclusive();
        let app =
            RunningApp::start(dotnet.command(&dotnet.runtime_dir(), &workers(dotnet), &["60", "2"]), START_TIMEOUT);
        // perf record -p fails when a thread it lists exits before it opens it: let the runtime's start-up threads
        // (tiered compilation's background worker) come and go first.
        std::thread::sleep(Duration::from_millis(2500));
        perf_record(app.pid(), 2.0, &dir.join("perf.data"));
        // While the app runs: its files are read live.
        postprocess_ok(&dir, &[]);
        read(&dir.join("perf_script.out"))
    };
    let (workers, unnamed) = unnamed_corelib_share(&script);
    println!("perf record: {workers} worker-thread samples, {unnamed} with an unnamed CoreLib frame");
    assert!(workers >= 200, "only {workers} worker-thread samples");
    assert!(unnamed * 100 <= workers * 2, "{unnamed} of {workers} worker samples hold an unnamed CoreLib frame");
    assert!(script.contains(THREAD_START), "the thread start path is not named");
}
