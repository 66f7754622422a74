//! Unwinding user stacks from the stack copies samples carry (`PERF_SAMPLE_REGS_USER` + `PERF_SAMPLE_STACK_USER`),
//! offline, with the call frame information of the mapped files — through code built without frame pointers, where
//! the kernel's frame-pointer callchain stops or goes astray.
//!
//! - [`ModuleCfi`]: what unwinding needs of one ELF file (its `.eh_frame`/`.eh_frame_hdr`/`.debug_frame` and link
//!   addresses), read from the live file or from the copy a capture saved in `symbols/`.
//! - [`StackWalker::walk`]: one sample's walk — any sample record with registers and a stack copy (on-CPU samples,
//!   context-switch samples alike); modules come through a [`ModuleSource`], so the walk itself touches no file.
//! - [`CfiFiles`]: each file's unwind info, captured copy first, loaded once.
//! - [`JitFrame`]: how a JIT method's frames are unwound where frame pointers go astray, classified from its
//!   prologue bytes ([`classify`]); a process's table of them is [`JitFrames`].
//!
//! The walk is fed untrusted bytes (stack contents and CFI come from the target) and always ends: see
//! [`walk`](walk) for its bounds, [`ModuleCfi::checked`] for what is refused when a file's CFI is loaded, and
//! [`vet`](vet) for the rows refused as the walk reaches them. A fuzz target composes
//! `ModuleCfi::decode` (bytes as a capture saves them) and `checked`, a one-module [`ModuleSource`] and
//! [`StackWalker::walk`].

mod cfi;
mod check;
mod jit_frames;
mod saved;
#[cfg(test)]
mod test_cfi;
mod uncached;
mod vet;
mod walk;

pub use cfi::{CfiSection, ModuleCfi};
pub use jit_frames::{classify, line as jit_frame_line, method_frame, JitFrame, JitFrames, PROLOGUE_BYTES};
pub use saved::{write_saved, CfiFiles, LiveFile, UNWIND_INDEX};
pub use walk::{user_part, CodeModule, ModuleSource, StackWalker, UserRegs, Walk, WalkEnd, MAX_FRAMES};

/// How the stacks of a run were unwound, for its log and for tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UnwindStats {
    /// Samples whose stack copy was unwound.
    pub walked: u64,
    /// … to the outermost frame.
    pub complete: u64,
    /// … joined to the kernel's frame-pointer chain where the copy ended.
    pub joined: u64,
    /// … where the frame-pointer chain alone was longer and was kept.
    pub frame_pointers: u64,
    /// … cut short (the stack ends with a marker frame).
    pub stopped: u64,
}

impl UnwindStats {
    pub fn count(&mut self, end: WalkEnd) {
        self.walked += 1;
        match end {
            WalkEnd::Complete => self.complete += 1,
            WalkEnd::Joined => self.joined += 1,
            WalkEnd::FramePointers => self.frame_pointers += 1,
            WalkEnd::Stopped => self.stopped += 1,
        }
    }
}
