//! Turns sampled addresses into frame names: JIT perf maps and jitdump, ELF symbols (with split debug files), .NET
//! ReadyToRun images (precompiled framework and app code, named from the image's metadata), kernel symbols; across
//! container namespaces. Code nothing names is shown one frame per function where its bounds are known (an ELF
//! file's `.eh_frame`, a ReadyToRun image's code blocks). Works from recorded data so `postprocess` can use it
//! offline.
//!
//! Entry points: [`Symbolizer`] (names a recording's samples one by one, in time order, first walking the user
//! stack copies they carry with [`unwind`]), [`Capture`] (saves what naming and unwinding need while the target
//! lives, for offline use through [`SymbolizeOptions::offline`]).

mod address_space;
mod capture;
pub mod code_index;
mod debug_search;
mod demangle;
mod dso;
mod elf;
mod file_copy;
mod function_bounds;
mod jit_files;
mod jitdump;
mod kallsyms;
mod name_limit;
mod off_cpu;
mod options;
mod perf_map;
mod proc_info;
mod prologues;
mod r2r;
mod r2r_symbols;
mod ranges;
mod sources;
pub mod symbol_server;
mod symbol_table;
mod symbolizer;
mod symbols_dir;
pub mod unwind;

pub use capture::{Capture, CaptureSummary, LiveNaming, SYMBOLS_DIR};
pub use off_cpu::Measure;
pub use options::SymbolizeOptions;
pub use symbolizer::{SymbolizeStats, Symbolizer};

/// The parsers, public for tests, fuzz targets and tools that inspect a single input: each is the entry point the
/// symbolizer itself calls.
pub mod parsers {
    pub use super::debug_search::SearchRoots;
    pub use super::demangle::demangle;
    pub use super::dso::{load as load_dso, DsoSymbols, FileHit};
    pub use super::jitdump::{trimmed as trimmed_jitdump, JitCode, JitDump};
    pub use super::kallsyms::{KernelSymbol, KernelSymbols};
    pub use super::perf_map::PerfMap;
    pub use super::proc_info::ProcessInfo;
    pub use super::r2r::{CodePart, CodeRange, Machine, PeSection, R2rImage, R2rMap, R2rMethod};
    pub use super::r2r_symbols::R2rSymbols;
    pub use super::symbols_dir::CapturedDir;
    pub use crate::procfs::{parse_status, Status};
}

use std::sync::Arc;

/// Where a frame's code came from; the report colours and filters by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FrameKind {
    Kernel,
    /// Machine code from an ELF file (executable or shared library).
    Native,
    /// Managed code: generated at run time and named by a perf map or jitdump (.NET, Node.js, …), or precompiled
    /// into a .NET ReadyToRun image (named from the image's own metadata).
    Jit,
    /// Code from a file profcpu cannot name into (not ELF, not ReadyToRun) or from no mapping at all.
    Unknown,
}

/// What names the addresses of one code range: a resolved frame minus its address. Frames named alike share one
/// (the symbolizer makes one per address it caches a name for, and one per jitdump entry): a frame is its address,
/// a reference to this and an id, 24 bytes with one reference count to keep.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FrameName {
    /// Symbol name, or `None` when only the module is known.
    pub symbol: Option<Arc<str>>,
    /// Module path or name as perf prints it (`/usr/lib/libc.so.6`, `[kernel.kallsyms]`, `[unknown]`,
    /// `/tmp/perf-1.map`).
    pub module: Arc<str>,
    pub kind: FrameKind,
    /// Where the symbol starts: a frame's offset is `addr - base`.
    pub base: u64,
    /// For code of an unnamed function: the offset every address of it shows, the function's start in the module
    /// (so the whole function is one frame, `module+0x<start>`).
    pub unnamed_function: Option<u64>,
}

/// One resolved stack frame.
#[derive(Clone)]
pub struct Frame {
    pub addr: u64,
    name: Arc<FrameName>,
    /// Frames with the same non-zero id are the same frame (address, names, module): the symbolizer gives one to
    /// each distinct frame it names from its cache, so that later stages work a frame out once and find it again by
    /// a number. 0: none (compare the frame itself). Not part of a frame's equality.
    pub id: u64,
}

const _: () = assert!(std::mem::size_of::<Frame>() == 24, "a frame takes 24 bytes: a million of them pass by");

impl Frame {
    /// The frame at `addr` of `symbol` (`None`: unnamed) at `offset` from its start, in `module`; without an id.
    pub fn new(addr: u64, symbol: Option<Arc<str>>, offset: u64, module: Arc<str>, kind: FrameKind) -> Frame {
        let name = FrameName { symbol, module, kind, base: addr.wrapping_sub(offset), unnamed_function: None };
        Frame { addr, name: Arc::new(name), id: 0 }
    }

    /// The frame at `addr` of the range `name` names, with [`id`](Self::id) `id`.
    pub fn in_range(addr: u64, name: &Arc<FrameName>, id: u64) -> Frame {
        Frame { addr, name: name.clone(), id }
    }

    /// Symbol name, or `None` when only the module is known.
    pub fn symbol(&self) -> Option<&str> {
        self.name.symbol.as_deref()
    }

    /// The symbol name as shared by the frames that show it (its identity tells names apart without reading them).
    pub fn shared_symbol(&self) -> Option<&Arc<str>> {
        self.name.symbol.as_ref()
    }

    /// Module path or name as perf prints it (`/usr/lib/libc.so.6`, `[kernel.kallsyms]`, `[unknown]`,
    /// `/tmp/perf-1.map`).
    pub fn module(&self) -> &str {
        &self.name.module
    }

    /// The module name as shared by the frames that show it.
    pub fn shared_module(&self) -> &Arc<str> {
        &self.name.module
    }

    pub fn kind(&self) -> FrameKind {
        self.name.kind
    }

    /// Offset of `addr` from the symbol's start. Without a symbol: the offset in the module of the start of the
    /// function holding `addr` when its bounds are known (every address of an unnamed function shows the same
    /// offset, so it is one frame), else of `addr` itself.
    pub fn offset(&self) -> u64 {
        self.name.unnamed_function.unwrap_or_else(|| self.addr.wrapping_sub(self.name.base))
    }

    /// What names it, shared with the other frames named alike.
    pub fn name(&self) -> &Arc<FrameName> {
        &self.name
    }

    /// The same frame, but for its id: what a frame is, for equality and hashing.
    fn identity(&self) -> (u64, Option<&str>, u64, &str, FrameKind) {
        (self.addr, self.symbol(), self.offset(), self.module(), self.kind())
    }
}

impl std::fmt::Debug for Frame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Frame")
            .field("addr", &self.addr)
            .field("symbol", &self.symbol())
            .field("offset", &self.offset())
            .field("module", &self.module())
            .field("kind", &self.kind())
            .field("id", &self.id)
            .finish()
    }
}

impl PartialEq for Frame {
    fn eq(&self, other: &Frame) -> bool {
        self.identity() == other.identity()
    }
}

impl Eq for Frame {}

impl std::hash::Hash for Frame {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.identity().hash(state);
    }
}

/// How a thread left the CPU at a switch-out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OffCpuState {
    /// Still runnable: preempted (or yielding), waiting for a CPU. Its stack ends in a `[runnable]` frame.
    Runnable,
    /// Blocked: sleeping, waiting on a lock, I/O, a futex.
    Blocked,
}

/// The leaf frame of a runnable switch-out's stack.
pub const RUNNABLE_FRAME: &str = "[runnable]";

/// A sample with its stack resolved, leaf first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedSample {
    pub pid: u32,
    pub tid: u32,
    pub cpu: u32,
    /// Nanoseconds on the recording clock (CLOCK_MONOTONIC for profcpu recordings).
    pub time: u64,
    /// What the sample weighs: the event's period (nanoseconds of CPU for a clock event); for a switch-out, the
    /// nanoseconds until the thread ran again.
    pub period: u64,
    /// For a switch-out (off-CPU time): how the thread left the CPU.
    pub off_cpu: Option<OffCpuState>,
    /// The thread's command name at the sample's time.
    pub comm: Arc<str>,
    /// Event name as perf prints it (`cpu-clock`).
    pub event: Arc<str>,
    pub frames: Stack,
}

/// A sample's frames, leaf first. The symbolizer hands the same `Stack` (same [`id`](Stack::id)) to every sample
/// with the same callchain in the same address space, so the stages after it can do their per-stack work (render
/// text, fold names) once per distinct stack instead of once per sample.
#[derive(Clone, Default)]
pub struct Stack {
    id: u64,
    /// A `Vec` behind the `Arc`: a stack named for one sample is handed on as it was built, not copied.
    frames: Arc<Vec<Frame>>,
}

impl Stack {
    /// Frames that other samples will share: gets a new id, never given to another stack.
    pub fn shared(frames: Vec<Frame>) -> Stack {
        static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        Stack { id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed), frames: Arc::new(frames) }
    }

    /// Stacks with the same non-zero id have the same frames; 0 means "not shared" (no per-stack caching).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Asks the CPU for where the frames are (first of two steps: see [`prefetch_frames`](Self::prefetch_frames)).
    pub fn prefetch_place(&self) {
        crate::prefetch::at(Arc::as_ptr(&self.frames).cast());
    }

    /// Asks the CPU for the frames: a few samples ahead of the one in hand, for a stage on another thread than the
    /// one that named them, whose caches hold none of them. It reads where they are, which
    /// [`prefetch_place`](Self::prefetch_place) fetched a few samples earlier still.
    pub fn prefetch_frames(&self) {
        crate::prefetch::all(&self.frames);
    }
}

/// An unshared stack (id 0).
impl From<Vec<Frame>> for Stack {
    fn from(frames: Vec<Frame>) -> Stack {
        Stack { id: 0, frames: Arc::new(frames) }
    }
}

impl FromIterator<Frame> for Stack {
    fn from_iter<I: IntoIterator<Item = Frame>>(frames: I) -> Stack {
        Stack::from(frames.into_iter().collect::<Vec<_>>())
    }
}

impl<'a> IntoIterator for &'a Stack {
    type Item = &'a Frame;
    type IntoIter = std::slice::Iter<'a, Frame>;
    fn into_iter(self) -> Self::IntoIter {
        self.frames.iter()
    }
}

impl std::ops::Deref for Stack {
    type Target = [Frame];
    fn deref(&self) -> &[Frame] {
        &self.frames
    }
}

/// Equal when the frames are (the id is only a cache key).
impl PartialEq for Stack {
    fn eq(&self, other: &Stack) -> bool {
        self.frames == other.frames
    }
}

impl Eq for Stack {}

impl std::fmt::Debug for Stack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.frames.iter()).finish()
    }
}
