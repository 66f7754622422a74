//! The ReadyToRun decoder checked against the .NET runtime itself.
//!
//! * .NET 8: the runtime logs every precompiled method it starts using as a `[PreJIT]` jitdump record (address,
//!   size, its own name). Each address is turned into an RVA through the process's /proc/PID/maps (the mapping's
//!   file offset, then the image's sections), looked up in our decoder of the image file, and compared: same entry
//!   point, same size, same name.
//! * .NET Core 3.1 writes no jitdump: CPU samples taken with `perf record` in System.Private.CoreLib (R2R format
//!   major 3) must resolve to named methods, and the methods the workload is known to run must be among them.
//! * Hostile input: mutated real images parse and name without panicking.
//!
//! Needs: `scripts/dotnet-runtime.sh` (PyPI wheels), Debian's `mono-mcs` and `linux-perf` (scripts/setup-deps.sh).

#[path = "support/dotnet.rs"]
#[allow(dead_code)]
mod dotnet;
#[path = "support/running_app.rs"]
#[allow(dead_code)]
mod running_app;
#[path = "support/scratch.rs"]
#[allow(dead_code)]
mod scratch;

use dotnet::Dotnet;
use profcpu::symbolize::parsers::{CodePart, JitDump, R2rImage, R2rMap, R2rMethod};
use running_app::remove_runtime_files;
use scratch::Scratch;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

const WORKLOAD: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/r2r/Workload.cs");

/// The directory holding `dotnet` for `version` ("8" or "3.1").
fn runtime_dir(version: &str) -> PathBuf {
    Dotnet::of(version).runtime_dir()
}

/// `shared/Microsoft.NETCore.App/<version>` of the runtime of `version`.
fn framework_dir(version: &str) -> PathBuf {
    Dotnet::of(version).framework_dir(&runtime_dir(version))
}

/// Compiles the workload with mcs into `dir` with a runtimeconfig for `tfm`.
fn build_workload(dir: &Path, tfm: &str, framework_version: &str) -> PathBuf {
    let dll = dir.join("Workload.dll");
    let out = Command::new("mcs")
        .args(["-optimize+", "-r:System.dll", "-r:System.Core.dll"])
        .arg(format!("-out:{}", dll.display()))
        .arg(WORKLOAD)
        .output()
        .unwrap_or_else(|e| panic!("cannot run mcs ({e}): install the C# compiler with `apt-get install -y mono-mcs`"));
    assert!(out.status.success(), "mcs failed:\n{}", String::from_utf8_lossy(&out.stdout));
    let config = format!(
        r#"{{"runtimeOptions":{{"tfm":"{tfm}","framework":{{"name":"Microsoft.NETCore.App","version":"{framework_version}"}}}}}}"#
    );
    std::fs::write(dir.join("Workload.runtimeconfig.json"), config).unwrap();
    dll
}

/// The workload running, past its "STARTED" line; killed when dropped.
struct Target {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<std::process::ChildStdout>,
}

impl Target {
    fn start(runtime: &Path, dll: &Path, millis: u32, env: &[(&str, &Path)], extra: &[(&str, &str)]) -> Target {
        let mut cmd = Command::new(runtime.join("dotnet"));
        cmd.arg(dll).arg(millis.to_string()).env("DOTNET_SYSTEM_GLOBALIZATION_INVARIANT", "1");
        for (k, v) in env {
            cmd.env(k, v);
        }
        for (k, v) in extra {
            cmd.env(k, v);
        }
        let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("cannot start dotnet");
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut target = Target { child, stdin, stdout };
        target.expect_line("STARTED");
        target
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn expect_line(&mut self, prefix: &str) {
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        assert!(line.starts_with(prefix), "the workload printed {line:?}, expected {prefix}");
    }

    /// Closes stdin so the workload exits, and waits for it.
    fn finish(mut self) {
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "the workload did not exit after its stdin closed");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        remove_runtime_files(self.child.id());
    }
}

/// One mapping of a file in /proc/PID/maps.
struct FileMapping {
    start: u64,
    end: u64,
    /// Offset in the file of the byte mapped at `start`.
    file_offset: u64,
}

/// The RVA `ip` executes in `image`, mapped by `mappings`: its file offset through the mapping that holds it, as
/// the symbolizer computes it from a recording's MMAP2 records, then the image's section table.
fn rva_of(ip: u64, mappings: &[FileMapping], image: &R2rImage) -> Option<u32> {
    let m = mappings.iter().find(|m| m.start <= ip && ip < m.end)?;
    image.rva_of_file_offset(m.file_offset + (ip - m.start))
}

/// Mappings of every `.dll` in /proc/PID/maps, by path.
fn dll_mappings(pid: u32) -> BTreeMap<String, Vec<FileMapping>> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let mut out: BTreeMap<String, Vec<FileMapping>> = BTreeMap::new();
    for line in maps.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 6 || !fields[5].ends_with(".dll") {
            continue;
        }
        let (start, end) = fields[0].split_once('-').unwrap();
        out.entry(fields[5].to_string()).or_default().push(FileMapping {
            start: u64::from_str_radix(start, 16).unwrap(),
            end: u64::from_str_radix(end, 16).unwrap(),
            file_offset: u64::from_str_radix(fields[2], 16).unwrap(),
        });
    }
    out
}

/// Decoders of every ReadyToRun image among `paths` (IL-only ones are skipped), with the references their
/// instantiations need loaded from the framework directory.
fn load_images<'a>(paths: impl Iterator<Item = &'a String>, framework: &Path) -> HashMap<String, R2rImage> {
    let mut images = HashMap::new();
    for path in paths {
        let bytes = std::fs::read(path).unwrap();
        let mut image = match R2rImage::parse(&bytes) {
            Ok(image) => image,
            Err(e) => {
                assert!(format!("{e}").contains("IL-only"), "{path}: {e}");
                continue;
            }
        };
        for name in image.missing_references() {
            if let Ok(reference) = std::fs::read(framework.join(format!("{name}.dll"))) {
                image.add_reference(&name, &reference).unwrap();
            }
        }
        images.insert(path.clone(), image);
    }
    images
}

fn assembly_of(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path).trim_end_matches(".dll")
}

/// .NET 8.0.4's jitdump sometimes loses the last character of a method's name (`System.Math::Mi(int32,int32)` for
/// `Min`, `List`1[…]::.cto()` for `.ctor`: seen in its `[QuickJitted]` records too). Equal up to that defect.
fn same_name_but_runtime_truncation(runtime: &str, ours: &str) -> bool {
    if ours.len() != runtime.len() + 1 {
        return false;
    }
    let differ = runtime.bytes().zip(ours.bytes()).position(|(a, b)| a != b).unwrap_or(runtime.len());
    ours.as_bytes().get(differ + 1) == Some(&b'(') && ours[differ + 1..] == runtime[differ..]
}

#[test]
fn prejit_entries_of_dotnet8_match_the_decoder() {
    let runtime = runtime_dir("8");
    let framework = framework_dir("8");
    let scratch = Scratch::new("r2r-dotnet8");
    let dll = build_workload(&scratch.path, "net8.0", "8.0.0");
    let dumps = scratch.join("tmp");
    std::fs::create_dir_all(&dumps).unwrap();
    // 2 = jitdump only; TMPDIR keeps the files out of the shared /tmp.
    let env = [("TMPDIR", dumps.as_path()), ("DOTNET_PerfMapJitDumpPath", dumps.as_path())];
    let mut target = Target::start(&runtime, &dll, 1500, &env, &[("DOTNET_PerfMapEnabled", "2")]);
    target.expect_line("READY");
    let pid = target.pid();
    let mappings = dll_mappings(pid);
    target.finish();
    let jitdump = std::fs::read(dumps.join(format!("jit-{pid}.dump")))
        .unwrap_or_else(|e| panic!("the runtime wrote no jitdump in {}: {e}", dumps.display()));
    let jitdump = JitDump::parse(&jitdump);

    let t = Instant::now();
    let images = load_images(mappings.keys(), &framework);
    println!("parsed {} ReadyToRun images in {:?}", images.len(), t.elapsed());

    #[derive(Default)]
    struct Tally {
        total: usize,
        same_method: usize,
        exact: usize,
    }
    let mut tallies: BTreeMap<String, Tally> = BTreeMap::new();
    let mut mismatches = Vec::new();
    let mut inexact = Vec::new();
    for code in jitdump.codes().iter().filter(|c| c.name.ends_with("[PreJIT]")) {
        let found = mappings.iter().find_map(|(path, maps)| {
            let image = images.get(path)?;
            let rva = rva_of(code.start, maps, image)?;
            Some((path, rva, image.lookup(rva)))
        });
        let Some((path, rva, method)) = found else {
            mismatches.push(format!("{:#x} {}: in no ReadyToRun image mapping", code.start, code.name));
            continue;
        };
        let tally = tallies.entry(assembly_of(path).to_string()).or_default();
        tally.total += 1;
        let Some(method) = method else {
            mismatches.push(format!("{} rva {rva:#x}: no method at that RVA ({})", code.name, assembly_of(path)));
            continue;
        };
        let size_matches = method.method_len as u64 == code.end - code.start;
        let name_matches = method.name == *code.name || same_name_but_runtime_truncation(&code.name, &method.name);
        if method.method_start == rva && method.part == CodePart::Body && size_matches && name_matches {
            tally.same_method += 1;
            if method.name == *code.name {
                tally.exact += 1;
            } else {
                inexact.push(format!("runtime: {}\n    ours: {}", code.name, method.name));
            }
        } else {
            mismatches.push(format!(
                "rva {rva:#x} size {:#x}\n    runtime: {}\n    ours:    {} (entry {:#x}, size {:#x}, {:?})",
                code.end - code.start,
                code.name,
                method.name,
                method.method_start,
                method.method_len,
                method.part
            ));
        }
    }
    for (assembly, t) in &tallies {
        println!(
            "{assembly}: {} [PreJIT] methods, same method {} ({:.2}%), exact name {} ({:.2}%)",
            t.total,
            t.same_method,
            100.0 * t.same_method as f64 / t.total as f64,
            t.exact,
            100.0 * t.exact as f64 / t.total as f64
        );
    }
    println!("names that differ only by the runtime's truncation ({}):", inexact.len());
    for line in inexact.iter().take(5) {
        println!("  {line}");
    }
    let total: usize = tallies.values().map(|t| t.total).sum();
    let same: usize = tallies.values().map(|t| t.same_method).sum();
    let exact: usize = tallies.values().map(|t| t.exact).sum();
    println!(
        "overall: {total} [PreJIT] methods, same method {same} ({:.2}%), exact name {exact} ({:.2}%)",
        100.0 * same as f64 / total.max(1) as f64,
        100.0 * exact as f64 / total.max(1) as f64
    );
    let corelib = tallies.get("System.Private.CoreLib").expect("no [PreJIT] method of System.Private.CoreLib");
    let others: Vec<(&String, &Tally)> =
        tallies.iter().filter(|(name, t)| *name != "System.Private.CoreLib" && t.total >= 20).collect();
    let (others_total, others_same) =
        others.iter().fold((0, 0), |(total, same), (_, t)| (total + t.total, same + t.same_method));
    let report = format!("mismatches ({}):\n{}", mismatches.len(), mismatches.join("\n"));
    assert!(corelib.total >= 200, "only {} CoreLib [PreJIT] methods: the workload ran too little", corelib.total);
    assert!(!others.is_empty(), "no other framework assembly has 20 [PreJIT] methods");
    assert!(corelib.same_method * 100 >= corelib.total * 99, "CoreLib below 99%\n{report}");
    assert!(others_same * 100 >= others_total * 99, "other framework assemblies below 99%\n{report}");
    assert!(same * 100 >= total * 99, "below 99% overall\n{report}");
    assert!(exact * 100 >= total * 95, "exact names below 95%\n{report}");
}

#[test]
fn dotnet31_corelib_samples_resolve_to_methods() {
    let perf = Command::new("perf").arg("--version").output();
    assert!(
        perf.is_ok_and(|o| o.status.success()),
        "perf is missing: install Debian's linux-perf (scripts/setup-deps.sh)"
    );
    let runtime = runtime_dir("3.1");
    let framework = framework_dir("3.1");
    let scratch = Scratch::new("r2r-dotnet31");
    let dll = build_workload(&scratch.path, "netcoreapp3.1", "3.1.0");
    // Tiered compilation off: ReadyToRun code stays in use instead of being replaced by tier-1 JIT code.
    let target = Target::start(
        &runtime,
        &dll,
        4000,
        &[("TMPDIR", scratch.path.as_path())],
        &[("COMPlus_TieredCompilation", "0")],
    );
    let pid = target.pid();
    std::thread::sleep(Duration::from_millis(300));
    let data = scratch.join("perf.data");
    let record = Command::new("perf")
        .args(["record", "-q", "-e", "cpu-clock", "-F", "1999", "-o"])
        .arg(&data)
        .args(["-p", &pid.to_string(), "--", "sleep", "2"])
        .output()
        .unwrap();
    assert!(record.status.success(), "perf record failed: {}", String::from_utf8_lossy(&record.stderr));
    let mappings = dll_mappings(pid);
    let script = Command::new("perf").args(["script", "-F", "ip,dso", "-i"]).arg(&data).output().unwrap();
    assert!(script.status.success(), "perf script failed: {}", String::from_utf8_lossy(&script.stderr));
    target.finish();

    let corelib_path =
        mappings.keys().find(|p| p.ends_with("/System.Private.CoreLib.dll")).expect("CoreLib not mapped");
    let images = load_images(std::iter::once(corelib_path), &framework);
    let image = &images[corelib_path];
    let version = image.version();
    println!("System.Private.CoreLib 3.1: ReadyToRun {}.{}, {} methods", version.0, version.1, image.method_count());
    assert!(version.0 < 9, "3.1 CoreLib should use an older format than .NET 8's 9.x, got {version:?}");

    let text = String::from_utf8_lossy(&script.stdout);
    let (mut samples, mut named) = (0, 0);
    let mut by_method: HashMap<String, usize> = HashMap::new();
    for line in text.lines().filter(|l| l.contains("System.Private.CoreLib.dll")) {
        let ip = u64::from_str_radix(line.split_whitespace().next().unwrap(), 16).unwrap();
        samples += 1;
        let Some(rva) = rva_of(ip, &mappings[corelib_path], image) else { continue };
        if let Some(method) = image.lookup(rva) {
            assert!(method.start <= rva && rva < method.start + method.len);
            named += 1;
            *by_method.entry(method.name).or_default() += 1;
        }
    }
    let mut hottest: Vec<(&String, &usize)> = by_method.iter().collect();
    hottest.sort_by(|a, b| b.1.cmp(a.1));
    println!("{samples} samples in CoreLib, {named} named; hottest:");
    for (name, count) in hottest.iter().take(15) {
        println!("  {count:5} {name}");
    }
    assert!(samples >= 100, "only {samples} CoreLib samples: the workload did not run long enough");
    assert!(named * 100 >= samples * 95, "only {named} of {samples} CoreLib samples resolved to a method");
    // Code the workload certainly runs in CoreLib: dictionaries, string building and searching, number formatting,
    // array sorting.
    let expected = ["Dictionary`2", "System.Text.StringBuilder::", "System.String::", "System.Number::", "Sort"];
    let seen: Vec<&str> = expected.iter().copied().filter(|e| by_method.keys().any(|n| n.contains(e))).collect();
    assert!(seen.len() >= 3, "the sampled CoreLib methods lack what the workload runs: saw only {seen:?}");
}

/// Bytes of the framework file `name` of runtime `version`.
fn framework_file(version: &str, name: &str) -> Vec<u8> {
    std::fs::read(framework_dir(version).join(name)).unwrap()
}

#[test]
fn parse_errors_name_the_problem() {
    let il_only = R2rImage::parse(&framework_file("8", "System.Runtime.dll")).err().expect("a facade has no R2R code");
    assert!(format!("{il_only}").contains("IL-only"), "{il_only}");
    let native = std::fs::read(framework_dir("8").join("libcoreclr.so")).unwrap();
    let native = R2rImage::parse(&native).err().unwrap();
    assert!(format!("{native}").contains("not a PE file"), "{native}");
    let linq = framework_file("8", "System.Linq.dll");
    assert!(R2rImage::parse(&linq[..linq.len() / 3]).is_err());
    assert!(R2rImage::parse(&[]).is_err());
}

/// Mutations of real images (headers, R2R sections, metadata tables): parsing and naming everything must neither
/// panic nor hang. Every file position is fair game, but most mutations go where the parser looks.
#[test]
fn mutated_images_never_panic() {
    let seeds = [framework_file("8", "System.Linq.dll"), framework_file("3.1", "System.Linq.dll")];
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let started = Instant::now();
    let mut parsed = 0;
    for round in 0..600 {
        let seed = &seeds[round % seeds.len()];
        let mut bytes = seed.clone();
        // Where the interesting structures are: the first 4 KiB (PE, CLI and R2R headers live near the start or are
        // pointed to from there) and the parts the decoder reads, found by looking where a clean parse reads.
        let hot: Vec<(usize, usize)> = interesting_ranges(seed);
        for _ in 0..1 + next() % 8 {
            let (start, end) = hot[(next() as usize) % hot.len()];
            let at = start + (next() as usize) % (end - start).max(1);
            if at >= bytes.len() {
                continue;
            }
            match next() % 4 {
                0 => bytes[at] ^= 1 << (next() % 8),
                1 => bytes[at] = [0, 0xff, 0x7f, 0x80, 0x3f, 0x15][(next() % 6) as usize],
                2 => bytes[at..(at + 4).min(seed.len())].iter_mut().for_each(|b| *b = next() as u8),
                _ => bytes.truncate(at),
            }
        }
        if let Ok(image) = R2rImage::parse(&bytes) {
            parsed += 1;
            let names: usize = image.methods().map(|m| m.name.len()).sum();
            assert!(names > 0 || image.method_count() == 0);
            for rva in (0..0x10_0000u32).step_by(0x1111) {
                let _ = image.lookup(rva);
                let _ = image.function_start(rva);
            }
        }
    }
    println!("600 mutated images, {parsed} still parsed, in {:?}", started.elapsed());
    assert!(parsed > 0, "no mutation left a parsable image: the mutations only hit the PE headers");
}

/// Byte ranges of `image` worth mutating: the header page and the R2R sections and metadata the parser reads.
fn interesting_ranges(image: &[u8]) -> Vec<(usize, usize)> {
    let mut ranges = vec![(0, 4096.min(image.len()))];
    let parsed = R2rImage::parse(image).unwrap();
    // The metadata and the native sections sit in the first PE section; sample spans across it so every structure
    // gets its share.
    if let Some(section) = parsed.sections().first() {
        let (start, end) = (section.file_offset as usize, (section.file_offset + section.file_size) as usize);
        let step = ((end - start) / 64).max(1);
        for span in (start..end).step_by(step) {
            ranges.push((span, (span + 256).min(image.len())));
        }
    }
    ranges
}

#[test]
fn corelib_parses_in_milliseconds_and_round_trips_through_an_r2rmap() {
    let bytes = framework_file("8", "System.Private.CoreLib.dll");
    let rss_before = rss_kib();
    let t = Instant::now();
    let image = R2rImage::parse(&bytes).unwrap();
    let parse_time = t.elapsed();
    let rss_after = rss_kib();
    let t = Instant::now();
    let methods: Vec<_> = image.methods().collect();
    let naming_time = t.elapsed();
    println!(
        "CoreLib 8.0 ({} MB): parse {parse_time:?} ({} runtime functions, {} methods, RSS +{} KiB); \
         naming all {} code ranges {naming_time:?}",
        bytes.len() >> 20,
        image.function_count(),
        image.method_count(),
        rss_after.saturating_sub(rss_before),
        methods.len()
    );
    assert!(image.method_count() > 30_000, "{} methods", image.method_count());
    assert!(parse_time < Duration::from_millis(500), "parsing took {parse_time:?}");
    assert!(methods.iter().all(|m| !m.name.contains('?')), "unnamed types in CoreLib names");
    let unnamed = (0..image.function_count()).len() - methods.len();
    println!("{unnamed} runtime functions belong to no method");

    // The same ranges as a crossgen2-style .r2rmap: header pseudo-entries, then `RVA SIZE NAME` lines, the names
    // without the runtime's `[PreJIT]` tag.
    fn name_without_tier(m: &R2rMethod) -> &str {
        m.name.rsplit_once('[').map_or(&m.name, |(base, _)| base)
    }
    let mut text = String::from("FFFFFFFF 00 00000000-0000-0000-0000-000000000000\nFFFFFFFE 00 Linux\n");
    for m in methods.iter().filter(|m| m.part == CodePart::Body) {
        let _ = writeln!(text, "{:08X} {:02X} {}", m.method_start, m.method_len, name_without_tier(m));
    }
    let map = R2rMap::parse(text.as_bytes());
    assert_eq!(map.bad_lines, 0);
    for m in methods.iter().step_by(97).filter(|m| m.part == CodePart::Body) {
        let (start, len, name) = map.lookup(m.start + m.len / 2).unwrap();
        assert_eq!((start, name), (m.method_start, name_without_tier(m)));
        assert!(len >= m.len);
    }
}

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}
