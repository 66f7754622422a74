//! Shared by the recording tests: building and running the `busy` target, running `profcpu collect`, reading the
//! result back, and asking Debian's `perf` about it.
#![allow(dead_code)]

use object::{Object, ObjectSymbol};
use profcpu::perf_data::{PerfDataReader, Record};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub const PROFCPU: &str = env!("CARGO_BIN_EXE_profcpu");

/// `examples/busy.rs` compiled with optimisations and frame pointers (so perf and profcpu get whole user stacks).
/// Built with the toolchain's own rustc, because cargo's build lock is held while tests run; it only needs std.
pub fn busy_binary() -> &'static Path {
    static BUSY: OnceLock<PathBuf> = OnceLock::new();
    BUSY.get_or_init(|| {
        let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
        let source = manifest.join("examples/busy.rs");
        let out_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("test-helpers");
        std::fs::create_dir_all(&out_dir).unwrap();
        let out = out_dir.join("busy");
        let fresh = |o: &Path| {
            let (Ok(bin), Ok(src)) = (std::fs::metadata(o), std::fs::metadata(&source)) else { return false };
            bin.modified().unwrap() >= src.modified().unwrap()
        };
        if !fresh(&out) {
            let rustc = Path::new(env!("CARGO")).with_file_name("rustc");
            let rustc = if rustc.exists() { rustc } else { PathBuf::from("rustc") };
            let tmp = out_dir.join(format!("busy.{}.tmp", std::process::id()));
            let status = Command::new(&rustc)
                .args(["--edition", "2021", "-O", "-g", "-C", "force-frame-pointers=yes", "-o"])
                .arg(&tmp)
                .arg(&source)
                .status()
                .unwrap_or_else(|e| panic!("cannot run {}: {e}", rustc.display()));
            assert!(status.success(), "compiling examples/busy.rs failed");
            // Atomic replace: another test binary may be running the old one.
            std::fs::rename(&tmp, &out).unwrap();
        }
        out
    })
}

/// Runtime addresses the busy target printed on its first line.
#[derive(Debug, Clone, Copy)]
pub struct BusyInfo {
    pub pid: u32,
    pub main_loop: u64,
    pub late_loop: u64,
    pub syscall_loop: u64,
}

pub fn parse_busy_line(line: &str) -> Option<BusyInfo> {
    let rest = line.trim().strip_prefix("busy ")?;
    let mut info = BusyInfo { pid: 0, main_loop: 0, late_loop: 0, syscall_loop: 0 };
    for field in rest.split_whitespace() {
        let (k, v) = field.split_once('=')?;
        let hex = || u64::from_str_radix(v.trim_start_matches("0x"), 16).ok();
        match k {
            "pid" => info.pid = v.parse().ok()?,
            "main" => info.main_loop = hex()?,
            "late" => info.late_loop = hex()?,
            "syscalls" => info.syscall_loop = hex()?,
            _ => {}
        }
    }
    Some(info)
}

/// A running busy target, killed when dropped.
pub struct Busy {
    pub child: Child,
    pub info: BusyInfo,
}

impl Busy {
    pub fn start(args: &[&str]) -> Busy {
        let mut child = Command::new(busy_binary()).args(args).stdout(Stdio::piped()).spawn().unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let info = parse_busy_line(&line).unwrap_or_else(|| panic!("busy printed {line:?}"));
        Busy { child, info }
    }

    pub fn thread_ids(&self) -> Vec<u32> {
        std::fs::read_dir(format!("/proc/{}/task", self.info.pid))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_str().unwrap().parse().unwrap())
            .collect()
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Size of symbol `name` in the ELF file at `path`, from its symtab.
pub fn symbol_size(path: &Path, name: &str) -> u64 {
    let data = std::fs::read(path).unwrap();
    let file = object::File::parse(&*data).unwrap();
    let sym = file.symbols().find(|s| s.name() == Ok(name)).unwrap_or_else(|| panic!("{name} not in the symtab"));
    assert!(sym.size() > 0, "{name} has no size");
    sym.size()
}

pub fn temp_dir(tag: &str) -> PathBuf {
    static COUNTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let dir = std::env::temp_dir().join(format!("profcpu-test-{tag}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The result of one `profcpu collect` run.
pub struct Collected {
    pub output: Output,
    pub stderr: String,
    pub stdout: String,
    /// The run folder profcpu printed as its last stdout line.
    pub run_dir: PathBuf,
}

impl Collected {
    pub fn perf_data(&self) -> PathBuf {
        self.run_dir.join("perf.data")
    }

    /// The sample count from profcpu's summary line.
    pub fn summary_samples(&self) -> u64 {
        let line = self
            .stderr
            .lines()
            .find(|l| l.starts_with("profcpu: ") && l.contains(" samples ("))
            .unwrap_or_else(|| panic!("no summary line in stderr:\n{}", self.stderr));
        line["profcpu: ".len()..].split(' ').next().unwrap().parse().unwrap()
    }
}

/// Runs `profcpu collect ARGS` to completion. Fails the test with profcpu's own explanation when it fails (for
/// example when perf_event_open is refused).
pub fn collect<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Collected {
    let output = Command::new(PROFCPU).arg("collect").args(args).output().unwrap();
    finish_collect(output)
}

pub fn finish_collect(output: Output) -> Collected {
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "profcpu collect failed ({}):\n{stderr}", output.status);
    assert!(!stderr.contains("panicked"), "{stderr}");
    let run_dir = PathBuf::from(stdout.lines().last().unwrap_or_else(|| panic!("no output path on stdout:\n{stderr}")));
    assert!(run_dir.is_dir(), "{} is not a folder", run_dir.display());
    Collected { output, stderr, stdout, run_dir }
}

/// Everything our own reader finds in a perf.data, after checking the file reads cleanly.
pub struct Recording {
    pub reader: PerfDataReader,
    pub records: Vec<Record>,
}

impl Recording {
    pub fn read(path: &Path) -> Recording {
        let reader = PerfDataReader::open(path).unwrap_or_else(|e| panic!("{e:#}"));
        assert!(reader.warnings().is_empty(), "reader warnings: {:?}", reader.warnings());
        let mut records = Vec::new();
        let stats = reader
            .for_each_record(|r| {
                records.push(r);
                Ok(())
            })
            .unwrap();
        assert_eq!((stats.undecodable, stats.truncated_bytes), (0, 0), "{stats:?}");
        Recording { reader, records }
    }

    pub fn samples(&self) -> impl Iterator<Item = &profcpu::perf_data::Sample> {
        self.records.iter().filter_map(|r| if let Record::Sample(s) = r { Some(s) } else { None })
    }
}

/// Runs Debian's perf on a recording; panics (does not skip) if perf is missing.
pub fn perf(args: &[&str]) -> Output {
    Command::new("perf")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run perf ({e}); install it with scripts/setup-deps.sh (linux-perf)"))
}

/// `perf script -i FILE` stdout, asserting perf exited cleanly.
pub fn perf_script(path: &Path) -> String {
    let out = perf(&["script", "-i", path.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "perf script failed: {stderr}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Waits for `child` up to `limit`; kills it and fails the test if it takes longer.
pub fn wait_with_timeout(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("process {} did not finish within {limit:?}", child.id());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn process_alive(pid: u32) -> bool {
    // A zombie still has a /proc entry; it counts as gone.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('Z')),
        Err(_) => false,
    }
}
