//! Unwinding one sample's stack copy with hostile call frame information and stack bytes: the captured unwind info
//! (`symbols/unwind-N.cfi`, decoded and checked as every untrusted CFI is) of one module mapped in the sample's
//! address space, JIT code beside it (frame pointers), and the kernel's callchain to join where the copy ends.
//! Input: `u64` mapping start, length and file offset, the registers (ip, sp, bp), `u16` stack length, `u8`
//! callchain length and its `u64` entries, the stack bytes, then the unwind info file.
#![no_main]
use libfuzzer_sys::fuzz_target;
use profcpu::symbolize::unwind::{CodeModule, ModuleCfi, ModuleSource, StackWalker, UserRegs, WalkEnd, MAX_FRAMES};
use std::ops::Range;
use std::sync::Arc;

/// Where the JIT's code is (no module: frame pointers).
const JIT: Range<u64> = 0x7f00_0000_0000..0x7f00_0010_0000;

struct OneModule {
    mapping: Range<u64>,
    pgoff: u64,
    cfi: Option<Arc<ModuleCfi>>,
}

impl ModuleSource for OneModule {
    fn mapping_start(&self, addr: u64) -> Option<u64> {
        if self.mapping.contains(&addr) {
            Some(self.mapping.start)
        } else {
            JIT.contains(&addr).then_some(JIT.start)
        }
    }
    fn is_code(&self, addr: u64) -> bool {
        self.mapping_start(addr).is_some()
    }
    fn module_at(&mut self, addr: u64) -> Option<CodeModule> {
        if !self.mapping.contains(&addr) {
            return None;
        }
        // As the symbolizer places a module: its bias from the mapping's start and file offset.
        let cfi = self.cfi.clone()?;
        let base_avma = cfi.bias(self.mapping.start, self.pgoff)?;
        Some(CodeModule { avma: self.mapping.clone(), base_avma, cfi, name: "fuzzed".into() })
    }
}

fuzz_target!(|data: &[u8]| {
    let mut take = profcpu_fuzz::Take(data);
    let (start, len, pgoff) = (take.u64(), take.u64(), take.u64());
    let regs = UserRegs { ip: take.u64(), sp: take.u64(), bp: take.u64() };
    let stack_len = take.u16() as usize;
    let chain_len = take.u8() as usize;
    let chain: Vec<u64> = (0..chain_len).map(|_| take.u64()).collect();
    let stack = take.bytes(stack_len).to_vec();
    let cfi = ModuleCfi::decode(take.rest()).ok().map(|cfi| cfi.checked().0).filter(ModuleCfi::has_cfi);
    let mut modules = OneModule { mapping: start..start.saturating_add(len), pgoff, cfi: cfi.map(Arc::new) };

    let mut walker = StackWalker::default();
    let first = walker.walk((1, 0), &mut modules, regs, &stack, &chain);
    assert!(first.frames.len() <= MAX_FRAMES, "{} frames", first.frames.len());
    if first.end != WalkEnd::FramePointers {
        assert_eq!(first.frames[0], regs.ip);
    }
    // Rules cached by the first walk do not change the second.
    let second = walker.walk((1, 0), &mut modules, regs, &stack, &chain);
    assert_eq!(first, second, "the same walk with the rule cache filled");
});
