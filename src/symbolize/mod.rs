//! Turns sampled addresses into frame names: JIT perf maps and jitdump, ELF symbols (with split debug files), kernel
//! symbols; across container namespaces. Works from recorded data so `postprocess` can use it offline.
//!
//! Entry points: [`symbolize_file`] (a whole perf.data), [`Symbolizer`] (record by record), [`Capture`] (saves
//! what naming needs while the target lives, for offline use through [`SymbolizeOptions::offline`]).

mod address_space;
mod capture;
mod captured;
mod debug_search;
mod demangle;
mod dso;
mod elf;
#[cfg(test)]
mod fuzz;
mod jit_files;
mod jitdump;
mod kallsyms;
mod perf_map;
mod proc_info;
mod ranges;
mod root_path;
mod sources;
mod symbolizer;

pub use capture::{Capture, CaptureSummary, SYMBOLS_DIR};
pub use symbolizer::{symbolize_file, SymbolizeOptions, SymbolizeStats, Symbolized, Symbolizer};

/// The parsers, public for tests and tools that inspect a single input.
pub mod parsers {
    pub use super::demangle::demangle;
    pub use super::jitdump::{JitCode, JitDump};
    pub use super::kallsyms::{KernelSymbol, KernelSymbols};
    pub use super::perf_map::PerfMap;
    pub use super::proc_info::{parse_status, ProcessInfo, Status};
    pub use super::root_path::{open_in_root, resolve_in_root};
}

use std::sync::Arc;

/// Where a frame's code came from; the report colours and filters by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FrameKind {
    Kernel,
    /// Machine code from an ELF file (executable or shared library).
    Native,
    /// Code generated at run time and named by a perf map or jitdump (.NET, Node.js, …).
    Jit,
    /// Code from a file profcpu cannot name into (e.g. ReadyToRun images) or from no mapping at all.
    Unknown,
}

/// One resolved stack frame.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Frame {
    pub addr: u64,
    /// Symbol name, or `None` when only the module is known.
    pub symbol: Option<Arc<str>>,
    /// Offset of `addr` from the symbol's start (or from the module's start when the symbol is unknown).
    pub offset: u64,
    /// Module path or name as perf prints it (`/usr/lib/libc.so.6`, `[kernel.kallsyms]`, `[unknown]`,
    /// `/tmp/perf-1.map`).
    pub module: Arc<str>,
    pub kind: FrameKind,
}

impl Frame {
    /// The name used in folded stacks and flame graphs: the symbol, else `module+0xoffset`, never a bare address.
    pub fn display_name(&self) -> String {
        match &self.symbol {
            Some(s) => s.to_string(),
            None => {
                let base = self.module.rsplit('/').next().unwrap_or(&self.module);
                format!("{base}+{:#x}", self.offset)
            }
        }
    }
}

/// A sample with its stack resolved, leaf first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedSample {
    pub pid: u32,
    pub tid: u32,
    pub cpu: u32,
    /// Nanoseconds on the recording clock (CLOCK_MONOTONIC for profcpu recordings).
    pub time: u64,
    pub period: u64,
    /// The thread's command name at the sample's time.
    pub comm: Arc<str>,
    /// Event name as perf prints it (`cpu-clock`).
    pub event: Arc<str>,
    pub frames: Vec<Frame>,
}
