//! Walking one sample's user stack: from its registers through the copy of the stack it carries, frame by frame
//! with the call frame information of the file each address lies in (framehop's DWARF CFI unwinder, with its rule
//! cache), by frame pointer where a frame has none (JIT code). Where the copy ends, the kernel's frame-pointer chain
//! takes over if it passes through the last frame found; where the walk breaks and the chain does not, the chain
//! alone is kept if it is longer — stack copies never make a stack shorter than frame pointers give it.
//!
//! Every input is untrusted (the stack bytes and the CFI come from the target): the walk is bounded by a frame
//! limit, and the stack pointer must rise with every frame, so loops and wild CFA offsets end it.

use super::cfi::ModuleCfi;
use crate::perf_data::abi::{CONTEXT_MAX, CONTEXT_USER};
use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{FrameAddress, Module, Unwinder};
use rustc_hash::{FxHashMap, FxHashSet};
use std::ops::Range;
use std::sync::Arc;

/// Deepest stack walked (perf's default `perf_event_max_stack` is 127; real recursion goes deeper).
pub const MAX_FRAMES: usize = 1024;

/// The user registers unwinding starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UserRegs {
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
}

/// A mapped code module with its unwind info, as [`ModuleSource`] gives it.
#[derive(Debug, Clone)]
pub struct CodeModule {
    /// The executable mapping's addresses.
    pub avma: Range<u64>,
    /// Where the file's link-time address 0 is (see [`ModuleCfi::bias`]).
    pub base_avma: u64,
    pub cfi: Arc<ModuleCfi>,
    pub name: String,
}

/// Where the modules of the address space being walked come from.
pub trait ModuleSource {
    /// The start of the mapping holding `addr` (called for every frame: keep it cheap).
    fn mapping_start(&self, addr: u64) -> Option<u64>;
    /// The module holding `addr` with its unwind info (called once per mapping and generation of the space);
    /// `None` for JIT code, unknown memory or a file without readable unwind info (frames there are unwound by
    /// frame pointer).
    fn module_at(&mut self, addr: u64) -> Option<CodeModule>;
}

/// How a walk ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WalkEnd {
    /// The outermost frame (its CFI marks the return address undefined, or a zero return address / frame pointer).
    Complete,
    /// The stack copy ended and the kernel's frame-pointer chain continued from the last frame found.
    Joined,
    /// The walk broke (copy ended, bad CFI or stack data, too deep) and the frame-pointer chain was longer: it is
    /// used instead.
    FramePointers,
    /// The walk broke and nothing continued it: the stack is cut short.
    Stopped,
}

/// One walked stack: user addresses, leaf first (the first is the user IP, the others return addresses).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Walk {
    pub frames: Vec<u64>,
    pub end: WalkEnd,
}

/// An address space's framehop unwinder and which of its mappings have been added to it.
struct SpaceUnwinder {
    generation: u64,
    unwinder: UnwinderX86_64<Arc<[u8]>>,
    /// Starts of the mappings already looked up (with or without a module).
    looked_up: FxHashSet<u64>,
}

/// Walks stacks of many address spaces, keeping each one's modules and one shared cache of unwind rules.
#[derive(Default)]
pub struct StackWalker {
    spaces: FxHashMap<u64, SpaceUnwinder>,
    cache: CacheX86_64,
}

impl StackWalker {
    /// Walks the user stack of a sample of address space `space` (`(id, generation)`: a new generation means the
    /// mappings changed, and the space's modules are looked up again). `stack` is the copy of the stack from
    /// `regs.sp` up; `callchain` the kernel's callchain of the sample (its user part, after `PERF_CONTEXT_USER`,
    /// joins where the copy ends).
    pub fn walk(
        &mut self,
        space: (u64, u64),
        modules: &mut impl ModuleSource,
        regs: UserRegs,
        stack: &[u8],
        callchain: &[u64],
    ) -> Walk {
        let unwinder = self.spaces.entry(space.0).or_insert_with(|| SpaceUnwinder {
            generation: space.1,
            unwinder: UnwinderX86_64::new(),
            looked_up: FxHashSet::default(),
        });
        if unwinder.generation != space.1 {
            *unwinder =
                SpaceUnwinder { generation: space.1, unwinder: UnwinderX86_64::new(), looked_up: FxHashSet::default() };
        }
        let mut read_stack = |addr: u64| -> Result<u64, ()> {
            let at = addr.checked_sub(regs.sp).ok_or(())? as usize;
            let bytes = stack.get(at..at.checked_add(8).ok_or(())?).ok_or(())?;
            Ok(u64::from_le_bytes(bytes.try_into().expect("8 bytes")))
        };
        let mut frames = vec![regs.ip];
        let mut state = UnwindRegsX86_64::new(regs.ip, regs.sp, regs.bp);
        let mut address = FrameAddress::InstructionPointer(regs.ip);
        let complete = loop {
            if frames.len() >= MAX_FRAMES {
                break false;
            }
            unwinder.add_module_at(address.address_for_lookup(), modules);
            let sp_before = state.sp();
            match unwinder.unwinder.unwind_frame(address, &mut state, &mut self.cache, &mut read_stack) {
                Ok(None) => break true,
                Ok(Some(return_address)) => {
                    // Every real call frame lies above its callee's: a stack pointer that does not rise is a loop
                    // (hostile or corrupt CFI / stack bytes).
                    if state.sp() <= sp_before {
                        break false;
                    }
                    let Some(next) = FrameAddress::from_return_address(return_address) else { break true };
                    frames.push(return_address);
                    address = next;
                }
                Err(_) => break false,
            }
        };
        if complete {
            return Walk { frames, end: WalkEnd::Complete };
        }
        let chain = user_part(callchain);
        let last = *frames.last().expect("the IP is always there");
        // The chain's first entry is the IP itself: a walk that found nothing more joins there.
        let joins_at = if frames.len() == 1 {
            (chain.first() == Some(&last)).then_some(0)
        } else {
            chain.iter().skip(1).position(|&a| a == last).map(|i| i + 1)
        };
        if let Some(j) = joins_at {
            if j + 1 < chain.len() {
                frames.extend_from_slice(&chain[j + 1..]);
                frames.truncate(MAX_FRAMES);
                return Walk { frames, end: WalkEnd::Joined };
            }
        }
        if chain.len() > frames.len() {
            return Walk { frames: chain.to_vec(), end: WalkEnd::FramePointers };
        }
        Walk { frames, end: WalkEnd::Stopped }
    }
}

impl SpaceUnwinder {
    /// Adds the module holding `addr`, the first time its mapping is seen.
    fn add_module_at(&mut self, addr: u64, modules: &mut impl ModuleSource) {
        let Some(start) = modules.mapping_start(addr) else { return };
        if !self.looked_up.insert(start) {
            return;
        }
        let Some(module) = modules.module_at(addr) else { return };
        let section_info = module.cfi.section_info();
        self.unwinder.add_module(Module::new(module.name, module.avma, module.base_avma, section_info));
    }
}

/// The user addresses of a kernel callchain: what follows its last `PERF_CONTEXT_USER` marker, up to any other
/// marker (none when the chain has no user part, as in `perf record --call-graph dwarf` recordings).
pub fn user_part(callchain: &[u64]) -> &[u64] {
    let Some(start) = callchain.iter().rposition(|&a| a == CONTEXT_USER) else { return &[] };
    let rest = &callchain[start + 1..];
    let end = rest.iter().position(|&a| a >= CONTEXT_MAX).unwrap_or(rest.len());
    &rest[..end]
}
