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

/// Switch-outs a second above which `auto` records them without stack copies: each copy takes its full size in the
/// ring (the kernel reserves it), so 10 000 a second are some 85 MB/s through the rings and 70 MB/s of perf.data;
/// beyond that the recorder on a small machine starts losing records (docs/PERFORMANCE.md, `bench-offcpu.py`).
pub const MAX_COPIED_SWITCHES_PER_SEC: f64 = 10_000.0;

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

    /// The mode and ring size (data pages) to record with when the user chose `data_pages`: a ring that cannot hold
    /// a few samples with stack copies loses them all (a sample record never spans a wrap-around's worth of free
    /// space), so `auto` falls back to frame pointers and `dwarf` gets a ring that fits; the notice says which.
    pub fn fit_ring(self, data_pages: usize, page_size: usize) -> (CallGraph, usize, Option<String>) {
        let copy = self.stack_copy_bytes() as usize;
        if copy == 0 {
            return (self, data_pages, None);
        }
        // Registers, the header fields and a full 127-frame callchain beside the copy; room for four samples.
        let needed_pages = (4 * (copy + 2048)).div_ceil(page_size).next_power_of_two();
        if data_pages >= needed_pages {
            return (self, data_pages, None);
        }
        match self {
            CallGraph::Dwarf => (
                self,
                needed_pages,
                Some(format!(
                    "a {data_pages}-page ring buffer cannot hold samples with {} KB stack copies: using {needed_pages} \
                     pages",
                    copy / 1024
                )),
            ),
            _ => (
                CallGraph::Fp,
                data_pages,
                Some(format!(
                    "a {data_pages}-page ring buffer is too small for stack copies (at least {needed_pages} pages): \
                     recording frame-pointer callchains only (-call-graph fp)"
                )),
            ),
        }
    }

    /// Bytes of user stack each switch-out copies, given how often the target switches (`None`: not known, as for
    /// a command not started yet), and the notice when `auto` records none because it switches too often. A
    /// switch-out's stack is copied as a sample's is (blocked .NET threads wait in libc, whose frames have no frame
    /// pointers: only a copy gets through them).
    pub fn switch_copy_bytes(self, switches_per_sec: Option<f64>, target: &str) -> (u32, Option<String>) {
        match (self, switches_per_sec) {
            (CallGraph::Auto, Some(rate)) if rate > MAX_COPIED_SWITCHES_PER_SEC => (
                0,
                Some(format!(
                    "{target} switches {rate:.0} times a second, too often to copy its stack at every switch-out \
                     (-call-graph auto copies up to {MAX_COPIED_SWITCHES_PER_SEC:.0}/s): its switch-outs are recorded \
                     with frame-pointer stacks, which end in code without frame pointers (libc's waits among it); \
                     -call-graph dwarf copies them anyway"
                )),
            ),
            _ => (self.stack_copy_bytes(), None),
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ring_too_small_for_stack_copies_is_never_used_with_them() {
        assert_eq!(CallGraph::Auto.fit_ring(512, 4096), (CallGraph::Auto, 512, None));
        let (mode, pages, notice) = CallGraph::Auto.fit_ring(1, 4096);
        assert_eq!((mode, pages), (CallGraph::Fp, 1));
        assert!(notice.unwrap().contains("-call-graph fp"));
        let (mode, pages, notice) = CallGraph::Dwarf.fit_ring(8, 4096);
        assert_eq!(mode, CallGraph::Dwarf);
        assert!(pages * 4096 >= 4 * DWARF_STACK_BYTES as usize && pages.is_power_of_two() && notice.is_some());
        assert_eq!(CallGraph::Fp.fit_ring(1, 4096), (CallGraph::Fp, 1, None));
    }

    #[test]
    fn auto_copies_switch_outs_unless_they_come_too_fast() {
        assert_eq!(CallGraph::Auto.switch_copy_bytes(Some(1000.0), "PID 7"), (AUTO_STACK_BYTES, None));
        assert_eq!(CallGraph::Auto.switch_copy_bytes(None, "PID 7"), (AUTO_STACK_BYTES, None));
        let (bytes, notice) = CallGraph::Auto.switch_copy_bytes(Some(90_000.0), "PID 7");
        assert_eq!(bytes, 0);
        assert!(notice.unwrap().starts_with("PID 7 switches 90000 times a second"));
        assert_eq!(CallGraph::Dwarf.switch_copy_bytes(Some(90_000.0), "x"), (DWARF_STACK_BYTES, None));
        assert_eq!(CallGraph::Fp.switch_copy_bytes(Some(10.0), "x"), (0, None));
    }
}
