//! How stacks are recorded: the kernel's frame-pointer callchain alone, or with each sample's user registers and a
//! copy of the top of its user stack, which the symbolize stage unwinds offline with the call frame information
//! (`.eh_frame`, `.debug_frame`) of the mapped files — the only way through code built without frame pointers
//! (most distribution libraries, libc among them).

/// The x86-64 registers a stack-copy sample carries: every general-purpose register, as `perf record --call-graph
/// dwarf` asks for (`PERF_REGS_MASK` of `tools/perf/arch/x86/include/perf_regs.h`: bits 0–23 but DS, ES, FS, GS).
/// profcpu's own unwinder needs only IP, SP and BP; perf's unwinders (libunwind, libdw) read the others, so `perf
/// script` can unwind our perf.data. They cost 160 bytes of a sample of several KB.
pub const X86_64_USER_REGS: u64 = 0xff_0fff;

/// Bytes of user stack `auto` copies per sample. The copy covers the frames near the leaf, where code without frame
/// pointers (libc, the runtime's native code) is; deeper frames come from the kernel's frame-pointer chain, which
/// the unwinder joins where the copy ends (JIT code keeps frame pointers). See docs/PERFORMANCE.md for the
/// measurements behind the size.
pub const AUTO_STACK_BYTES: u32 = 8192;

/// Bytes of user stack `dwarf` copies per sample: enough for deep stacks of code without any frame pointers.
/// A sample record is limited to 64 KB (its size is a u16), so the kernel cannot copy much more.
pub const DWARF_STACK_BYTES: u32 = 32768;

/// The `-call-graph` choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CallGraph {
    /// Stack copies of [`AUTO_STACK_BYTES`] plus the frame-pointer chain: complete stacks through code without
    /// frame pointers at a moderate size.
    #[default]
    Auto,
    /// The kernel's frame-pointer callchain only: smallest recording, stacks end where frame pointers do.
    Fp,
    /// Stack copies of [`DWARF_STACK_BYTES`] plus the frame-pointer chain: for deep stacks of native code.
    Dwarf,
}

impl CallGraph {
    pub const ALL: [CallGraph; 3] = [CallGraph::Auto, CallGraph::Fp, CallGraph::Dwarf];

    pub fn name(self) -> &'static str {
        match self {
            CallGraph::Auto => "auto",
            CallGraph::Fp => "fp",
            CallGraph::Dwarf => "dwarf",
        }
    }

    pub fn from_name(name: &str) -> Option<CallGraph> {
        CallGraph::ALL.into_iter().find(|c| c.name() == name)
    }

    /// Bytes of user stack each sample copies (0: none).
    pub fn stack_copy_bytes(self) -> u32 {
        match self {
            CallGraph::Auto => AUTO_STACK_BYTES,
            CallGraph::Fp => 0,
            CallGraph::Dwarf => DWARF_STACK_BYTES,
        }
    }
}
