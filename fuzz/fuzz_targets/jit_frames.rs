//! A JIT method's prologue bytes as the capture reads them from the target (`classify`), the table it saves
//! (`symbols/jitframes-HOSTPID.txt`, parsed back), and a stack walked through the method with the rule found: JIT
//! code only, whose methods are unwound by the saved rules or by frame pointers. Input: 32 bytes of code, the
//! registers (ip, sp, bp), `u16` stack length, the stack bytes, then the saved table's text.
#![no_main]
use libfuzzer_sys::fuzz_target;
use profcpu::symbolize::unwind::{
    classify, jit_frame_line, CodeModule, JitFrame, JitFrames, ModuleSource, StackWalker, UserRegs, MAX_FRAMES,
    PROLOGUE_BYTES,
};
use std::ops::Range;

/// Where the JIT's code is; the classified method is its first 0x100 bytes.
const JIT: Range<u64> = 0x7f00_0000_0000..0x7f00_0010_0000;

struct JitOnly {
    classified: Option<JitFrame>,
    saved: JitFrames,
}

impl ModuleSource for JitOnly {
    fn mapping_start(&self, _addr: u64) -> Option<u64> {
        None
    }
    fn is_code(&self, addr: u64) -> bool {
        JIT.contains(&addr)
    }
    fn module_at(&mut self, _addr: u64) -> Option<CodeModule> {
        None
    }
    fn jit_frame(&mut self, addr: u64) -> Option<JitFrame> {
        match (JIT.start..JIT.start + 0x100).contains(&addr) {
            true => self.classified,
            false => self.saved.lookup(addr),
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut take = profcpu_fuzz::Take(data);
    let code = take.bytes(PROLOGUE_BYTES);
    let classified = classify(code);
    if let Some(frame) = classified {
        // What the capture writes reads back as the same rule.
        let (table, bad) = JitFrames::parse(&jit_frame_line(JIT.start, 0x100, frame));
        assert_eq!((table.lookup(JIT.start + 0xff), bad), (Some(frame), 0));
    }
    let regs = UserRegs { ip: take.u64(), sp: take.u64(), bp: take.u64() };
    let stack_len = take.u16() as usize;
    let stack = take.bytes(stack_len).to_vec();
    let (saved, _) = JitFrames::parse(&String::from_utf8_lossy(take.rest()));
    let mut modules = JitOnly { classified, saved };
    let mut walker = StackWalker::default();
    let first = walker.walk((1, 0), &mut modules, regs, &stack, &[]);
    assert!(first.frames.len() <= MAX_FRAMES, "{} frames", first.frames.len());
    assert_eq!(first, walker.walk((1, 0), &mut modules, regs, &stack, &[]));
});
