//! `examples/busy.rs`, the recording tests' workload: built once with frame pointers, started, and described by the
//! line it prints (its PID, thread ids and function addresses).

use object::{Object, ObjectSymbol};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;

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

impl Busy {
    /// The perf map a busy started with `--jit-map-lines` wrote.
    pub fn perf_map(&self) -> PathBuf {
        PathBuf::from(format!("/tmp/perf-{}.map", self.info.pid))
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // Like a JIT killed with SIGKILL, busy leaves its perf map behind (those of 1.5M lines are 50 MB).
        let _ = std::fs::remove_file(self.perf_map());
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
