//! Walking one sample's user stack: from its registers through the copy of the stack it carries, frame by frame
//! with the call frame information of the file each address lies in (framehop's DWARF CFI unwinder, with its rule
//! cache), by frame pointer where a frame has none (JIT code) — except, for a return address in a JIT method whose
//! frame frame pointers get wrong, by the rule read from its prologue ([`JitFrame`]). Where the copy ends, the
//! kernel's frame-pointer chain takes over if it passes through the last frame found; where the walk breaks (or
//! ends at what looks like the outermost frame, sooner than the chain) and the chain does not pass through its last
//! frame, the chain alone is kept if it is longer — stack copies never make a stack shorter than frame pointers give
//! it.
//!
//! Each address space keeps framehop's rule cache for all its samples; frames at addresses whose CFI framehop cannot
//! cache as a rule are unwound with a fresh cache instead (see [`uncached`](super::uncached) for why), so a stack's
//! frames never depend on which samples were walked before it. Every row framehop is about to use is vetted first
//! ([`vet`](super::vet)): one whose expressions could loop ends the walk. A cache per space rather than one for all:
//! framehop keys cached rules by a global 16-bit count of module changes, which wraps, and a shared cache could then
//! give one space a rule another cached for the same address; no rule is ever shared between spaces otherwise.
//!
//! Past the leaf, a walk is taken from one remembered ([`Walks`]) when the leaf returns to the same state and the
//! copy holds the same words wherever that walk read: with a fixed space, the walk is a function of those alone.
//! A recording samples the same code at the same depth over and over (99 % of the walks of a collection of the web
//! API are taken this way), so each sample costs a few dozen word comparisons instead of a walk.
//!
//! Every input is untrusted (the stack bytes and the CFI come from the target): the walk is bounded by a frame
//! limit, and the stack pointer must rise with every frame, so loops and wild CFA offsets end it.

use super::cfi::ModuleCfi;
use super::jit_frames::JitFrame;
use super::vet::{FileRows, Vetted};
use crate::perf_data::abi::{CONTEXT_MAX, CONTEXT_USER};
use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{FrameAddress, Module, Unwinder};
use gimli::UnwindContext;
use rustc_hash::{FxHashMap, FxHashSet};
use std::ops::Range;
use std::sync::Arc;

/// Deepest stack walked (perf's default `perf_event_max_stack` is 127; real recursion goes deeper).
pub const MAX_FRAMES: usize = 1024;

/// The user registers unwinding starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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
    /// Whether `addr` lies in executable memory of the process (a file's code, JIT code, the vDSO).
    fn is_code(&self, addr: u64) -> bool;
    /// The module holding `addr` with its unwind info (called once per mapping and generation of the space);
    /// `None` for JIT code, unknown memory or a file without readable unwind info (frames there are unwound by
    /// frame pointer).
    fn module_at(&mut self, addr: u64) -> Option<CodeModule>;
    /// How the JIT method holding `addr` is unwound once its prologue has run, where frame pointers would go astray
    /// (see [`JitFrame`]); `None` where they do not, or nothing is known (called for return addresses outside every
    /// module).
    fn jit_frame(&mut self, _addr: u64) -> Option<JitFrame> {
        None
    }
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

/// What a walk through a stack copy found, before the kernel's chain is looked at.
struct Walked {
    frames: Vec<u64>,
    /// It reached the outermost frame.
    complete: bool,
}

/// Frames from which on a walk may be taken from one remembered: the leaf's caller on (its IP and return address
/// are found).
const CALLERS_FROM: usize = 2;

/// Everything the walk from the leaf's caller on depends on but the stack bytes it reads: the space (its modules,
/// unwind info and JIT frames, all fixed within a generation; JIT files loaded again are forgotten with
/// [`StackWalker::forget_walks`]) and the caller's registers (its IP: the leaf's return address).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct CallerKey {
    space: (u64, u64),
    regs: UserRegs,
}

/// The walk from the leaf's caller on.
struct CallersWalked {
    frames: Vec<u64>,
    complete: bool,
}

/// Walks from the leaf's caller on, remembered with the stack slots they read. Such a walk is a function of its
/// key and of the values it reads, so a sample whose leaf returns to the same state, and whose copy holds the same
/// values at the same addresses, walks the same way: it is given the remembered frames after reading only those
/// slots (a few dozen words instead of unwinding every frame). A thread sampled over and over in one function at
/// the same depth returns to the same state wherever in it the sample fell. One walk per slot of a fixed table,
/// the latest: memory stays bounded whatever the recording. Where few walks are found (nearly every stack
/// distinct), remembering costs more than it saves: it rests a while, then tries again.
#[derive(Default)]
struct Walks {
    /// Empty until a walk is first remembered: a recording without stack copies never walks, and filling the table
    /// costs its naming thread a hundred page faults before its first sample.
    slots: Vec<Option<Remembered>>,
    /// Lookups and hits since the last check.
    lookups: u32,
    hits: u32,
    /// Walks left unremembered before the next try.
    resting: u32,
    /// The reads of the walk under way (kept for its allocation).
    log: Vec<(u64, Option<u64>)>,
}

struct Remembered {
    key: CallerKey,
    /// Each slot read, in order, with what it held (`None`: outside the copy).
    reads: Vec<(u64, Option<u64>)>,
    walked: CallersWalked,
}

/// Slots of [`Walks`]: more than the distinct stacks of a steady service, a few MB at most.
const REMEMBERED_WALKS: usize = 4096;
/// Lookups between two looks at the hit rate, and walks left unremembered after a rate below a quarter.
const CHECK_EVERY: u32 = 1024;
const REST: u32 = 16 * 1024;

impl Walks {
    fn slot(key: &CallerKey) -> usize {
        use std::hash::BuildHasher;
        // Fx's low bits are weak: the high ones pick the slot.
        (rustc_hash::FxBuildHasher.hash_one(key) >> 52) as usize % REMEMBERED_WALKS
    }

    /// Whether the next walk is looked up and remembered.
    fn active(&mut self) -> bool {
        self.resting = self.resting.saturating_sub(1);
        self.resting == 0
    }

    /// The walk remembered for `key`, if every slot it read still reads the same through `read`.
    fn get(&mut self, key: &CallerKey, read: impl Fn(u64) -> Result<u64, ()>) -> Option<&CallersWalked> {
        self.lookups += 1;
        if self.lookups == CHECK_EVERY {
            if self.hits * 4 < self.lookups {
                self.resting = REST;
            }
            (self.lookups, self.hits) = (0, 0);
        }
        let r = self.slots.get(Self::slot(key))?.as_ref().filter(|r| r.key == *key)?;
        let same = r.reads.iter().all(|&(addr, value)| read(addr).ok() == value);
        self.hits += same as u32;
        same.then_some(&r.walked)
    }

    fn put(&mut self, key: CallerKey, reads: &[(u64, Option<u64>)], frames: &[u64], complete: bool) {
        if self.slots.is_empty() {
            self.slots.resize_with(REMEMBERED_WALKS, || None);
        }
        match &mut self.slots[Self::slot(&key)] {
            // The slot's vectors are reused: no allocation per walk once the table is full.
            Some(r) => {
                r.key = key;
                r.reads.clear();
                r.reads.extend_from_slice(reads);
                r.walked.frames.clear();
                r.walked.frames.extend_from_slice(frames);
                r.walked.complete = complete;
            }
            empty => {
                let walked = CallersWalked { frames: frames.to_vec(), complete };
                *empty = Some(Remembered { key, reads: reads.to_vec(), walked });
            }
        }
    }
}

/// The 8 bytes at `addr` of a stack copy that starts at `sp`.
fn read_copy(stack: &[u8], sp: u64, addr: u64) -> Result<u64, ()> {
    let at = addr.checked_sub(sp).ok_or(())? as usize;
    let bytes = stack.get(at..at.checked_add(8).ok_or(())?).ok_or(())?;
    Ok(u64::from_le_bytes(bytes.try_into().expect("8 bytes")))
}

/// An address space's framehop unwinder, its rule cache and which of its mappings have been added to it.
struct SpaceUnwinder {
    generation: u64,
    unwinder: UnwinderX86_64<Arc<[u8]>>,
    cache: CacheX86_64,
    /// Starts of the mappings already looked up (with or without a module).
    looked_up: FxHashSet<u64>,
    /// The modules added (sorted by address, disjoint), as framehop finds them: where their rows are vetted.
    placed: Vec<Placed>,
}

/// A module of a space: its executable mapping, where its link-time 0 is, and its file's key in [`Files`].
struct Placed {
    avma: Range<u64>,
    base_avma: u64,
    file: usize,
}

/// Walks stacks of many address spaces, keeping each one's modules and cache of unwind rules.
#[derive(Default)]
pub struct StackWalker {
    spaces: FxHashMap<u64, SpaceUnwinder>,
    files: Files,
    /// gimli's row evaluation state, reused by every vetting.
    context: Box<UnwindContext<usize>>,
    walks: Walks,
}

/// Each file's vetted rows, shared by the spaces that map it: keyed by the address of its shared unwind info, which
/// the entry keeps alive.
type Files = FxHashMap<usize, FileRows>;

impl StackWalker {
    /// `cfi` as a capture saves it: only the parts of `.eh_frame` the walks so far unwound with (the rest zeroed,
    /// see [`ModuleCfi::keeping`]), when they were looked up through its header; else all of it. Replaying the
    /// same samples from the saved copy walks the same way.
    pub fn as_used(&self, cfi: &Arc<ModuleCfi>) -> Arc<ModuleCfi> {
        let used = self.files.get(&(Arc::as_ptr(cfi) as usize)).and_then(|rows| rows.used_entries());
        match used {
            Some(kept) => Arc::new(cfi.keeping(&kept)),
            None => cfi.clone(),
        }
    }

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
        let Walked { mut frames, complete } = self.walk_copy(space, modules, regs, stack);
        let chain = user_part(callchain);
        // A walk that reached an outermost frame is trusted to be whole only if the chain is not longer: a guessed
        // leaf, or a zero return address or frame pointer read where a function's rules do not describe its code
        // (a hand-written helper of a runtime), can end a walk early, and a stack copy must never make a stack
        // shorter than frame pointers give it.
        if complete && frames.len() >= chain.len() {
            return Walk { frames, end: WalkEnd::Complete };
        }
        let last = *frames.last().expect("the IP is always there");
        // The chain's first entry is the IP itself: a walk that found nothing more joins there.
        let joins_at = if frames.len() == 1 {
            (chain.first() == Some(&last)).then_some(0)
        } else {
            chain.iter().skip(1).position(|&a| a == last).map(|i| i + 1)
        };
        if let Some(j) = joins_at {
            // Joined only if that does not make the stack shorter than the chain alone (the walk may have found
            // fewer frames below the join than the chain has).
            if j + 1 < chain.len() && frames.len() + (chain.len() - j - 1) >= chain.len() {
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

    /// The walk through the copy alone: its frames, and whether it reached the outermost one. Past the leaf, a walk
    /// remembered from the same caller state is taken when the copy holds what it read (see [`Walks`]).
    fn walk_copy(
        &mut self,
        space: (u64, u64),
        modules: &mut impl ModuleSource,
        regs: UserRegs,
        stack: &[u8],
    ) -> Walked {
        // Every slot read, with what it held: the reads of the walk past the leaf are what a remembered walk needs.
        let remember = self.walks.active();
        let mut log = std::mem::take(&mut self.walks.log);
        log.clear();
        let reads = std::cell::RefCell::new(log);
        let mut read_stack = |addr: u64| {
            let value = read_copy(stack, regs.sp, addr);
            if remember {
                reads.borrow_mut().push((addr, value.ok()));
            }
            value
        };
        let mut callers: Option<(CallerKey, usize)> = None;
        let unwinder = self.spaces.entry(space.0).or_insert_with(|| SpaceUnwinder::new(space.1));
        if unwinder.generation != space.1 {
            *unwinder = SpaceUnwinder::new(space.1);
        }
        let mut frames = vec![regs.ip];
        let mut state = UnwindRegsX86_64::new(regs.ip, regs.sp, regs.bp);
        let mut address = FrameAddress::InstructionPointer(regs.ip);
        let complete = loop {
            if frames.len() >= MAX_FRAMES {
                break false;
            }
            if remember && frames.len() == CALLERS_FROM && callers.is_none() {
                let key = CallerKey { space, regs: UserRegs { ip: state.ip(), sp: state.sp(), bp: state.bp() } };
                if let Some(walked) = self.walks.get(&key, |addr| read_copy(stack, regs.sp, addr)) {
                    frames.extend_from_slice(&walked.frames);
                    break walked.complete;
                }
                callers = Some((key, reads.borrow().len()));
            }
            let lookup = address.address_for_lookup();
            let in_mapping = unwinder.add_module_at(lookup, modules, &mut self.files);
            let sp_before = state.sp();
            // A return address (its method's prologue has run) in JIT code whose frame frame pointers do not unwind.
            let jit_frame = match address {
                FrameAddress::ReturnAddress(_) if !in_mapping => modules.jit_frame(lookup),
                _ => None,
            };
            let step = match jit_frame {
                Some(frame) => match frame.step(state.sp(), state.bp(), |a| read_stack(a).ok()) {
                    Some((return_address, sp, bp)) => {
                        state = UnwindRegsX86_64::new(return_address, sp, bp);
                        Ok(Some(return_address))
                    }
                    None => Err(()),
                },
                None => match unwinder.vet(lookup, &mut self.files, &mut self.context) {
                    Vetted::Refused => Err(()),
                    vetted => {
                        let mut fresh;
                        let cache = if vetted == Vetted::Fresh {
                            fresh = CacheX86_64::new();
                            &mut fresh
                        } else {
                            &mut unwinder.cache
                        };
                        unwinder.unwinder.unwind_frame(address, &mut state, cache, &mut read_stack).map_err(|_| ())
                    }
                },
            };
            match step {
                Ok(None) => break true,
                // Every real call frame lies above its callee's: a stack pointer that does not rise is a loop
                // (hostile or corrupt CFI / stack bytes).
                Ok(Some(return_address)) if state.sp() > sp_before => {
                    let Some(next) = FrameAddress::from_return_address(return_address) else { break true };
                    // A return address outside any code mapping: the walk read a wrong slot (CFI that does not
                    // describe this code, a corrupt copy). It ends here, not complete, so the kernel's chain can
                    // take over rather than a few bogus frames passing for a whole stack.
                    if !modules.is_code(return_address) {
                        break false;
                    }
                    frames.push(return_address);
                    address = next;
                }
                _ if frames.len() == 1 => {
                    // A leaf without CFI that has not set up a frame (a JIT stub, a prologue): its return address is
                    // where the stack pointer points, if that is code. Tried once, for the leaf only.
                    let Ok(return_address) = read_stack(regs.sp) else { break false };
                    let Some(next) = FrameAddress::from_return_address(return_address) else { break false };
                    if return_address == regs.ip || !modules.is_code(return_address) {
                        break false;
                    }
                    // The caller's stack pointer is above the return address; none is above the address space.
                    let Some(caller_sp) = regs.sp.checked_add(8) else { break false };
                    state = UnwindRegsX86_64::new(return_address, caller_sp, regs.bp);
                    frames.push(return_address);
                    address = next;
                }
                _ => break false,
            }
        };
        let log = reads.into_inner();
        if let Some((key, first_read)) = callers {
            self.walks.put(key, &log[first_read..], &frames[CALLERS_FROM..], complete);
        }
        self.walks.log = log;
        Walked { frames, complete }
    }

    /// Forgets the walks remembered: what they found may no longer hold (the JIT's files were loaded again).
    pub fn forget_walks(&mut self) {
        self.walks = Walks::default();
    }
}

impl SpaceUnwinder {
    fn new(generation: u64) -> SpaceUnwinder {
        SpaceUnwinder {
            generation,
            unwinder: UnwinderX86_64::new(),
            cache: CacheX86_64::new(),
            looked_up: FxHashSet::default(),
            placed: Vec::new(),
        }
    }

    /// Adds the module holding `addr`, the first time its mapping is seen; whether `addr` lies in a mapping at all.
    fn add_module_at(&mut self, addr: u64, modules: &mut impl ModuleSource, files: &mut Files) -> bool {
        let Some(start) = modules.mapping_start(addr) else { return false };
        if !self.looked_up.insert(start) {
            return true;
        }
        let Some(module) = modules.module_at(addr) else { return true };
        let file = Arc::as_ptr(&module.cfi) as usize;
        files.entry(file).or_insert_with(|| FileRows::new(module.cfi.clone()));
        let at = self.placed.partition_point(|p| p.avma.start < module.avma.start);
        self.placed.insert(at, Placed { avma: module.avma.clone(), base_avma: module.base_avma, file });
        let section_info = module.cfi.section_info();
        self.unwinder.add_module(Module::new(module.name, module.avma, module.base_avma, section_info));
        true
    }

    /// How the row framehop would use for `lookup` may be used: looked up as framehop does (the module whose mapping
    /// holds it; the address relative to its base, which must fit 32 bits). Where framehop finds no module, it uses
    /// its frame-pointer rule: nothing to vet.
    fn vet(&self, lookup: u64, files: &mut Files, context: &mut UnwindContext<usize>) -> Vetted {
        let after = self.placed.partition_point(|p| p.avma.start <= lookup);
        let Some(placed) = after.checked_sub(1).map(|i| &self.placed[i]).filter(|p| p.avma.contains(&lookup)) else {
            return Vetted::Cached;
        };
        let Some(svma) = lookup.checked_sub(placed.base_avma).and_then(|a| u32::try_from(a).ok()) else {
            return Vetted::Cached;
        };
        files.get_mut(&placed.file).map_or(Vetted::Cached, |rows| rows.vet(svma, context))
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

#[cfg(test)]
mod tests {
    use super::super::test_cfi::{eh_frame, with_header, PLAIN};
    use super::*;
    use crate::perf_data::abi::CONTEXT_KERNEL;
    use crate::symbolize::unwind::CfiSection;

    /// One module at `avma` (or none: everything is JIT code).
    struct OneModule(Option<CodeModule>);

    impl ModuleSource for OneModule {
        fn mapping_start(&self, addr: u64) -> Option<u64> {
            self.0.as_ref().filter(|m| m.avma.contains(&addr)).map(|m| m.avma.start)
        }
        fn is_code(&self, addr: u64) -> bool {
            // JIT code lives at 0x5000..0xa000 in these tests.
            self.mapping_start(addr).is_some() || (0x5000..0xa000).contains(&addr)
        }
        fn module_at(&mut self, addr: u64) -> Option<CodeModule> {
            self.0.clone().filter(|m| m.avma.contains(&addr))
        }
    }

    const TEXT: u64 = 0x40_0000;

    fn module(cfi: ModuleCfi) -> OneModule {
        let cfi = Arc::new(cfi);
        OneModule(Some(CodeModule { avma: TEXT..TEXT + 0x10_0000, base_avma: TEXT, cfi, name: "hostile".into() }))
    }

    fn words(values: &[u64]) -> Vec<u8> {
        values.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    /// A module with the given CFI, as profcpu takes untrusted CFI: decoded from the captured form and checked.
    fn hostile(cie_ops: &[u8], fde_ops: &[u8]) -> OneModule {
        hostile_with(&eh_frame(cie_ops, fde_ops))
    }

    #[test]
    fn a_plain_function_returns_to_its_caller() {
        let mut m = hostile(PLAIN, &[]);
        let stack = words(&[0x5678, 0]);
        let regs = UserRegs { ip: TEXT + 0x10, sp: 0x7000, bp: 0 };
        let walk = StackWalker::default().walk((1, 0), &mut m, regs, &stack, &[]);
        // The caller (JIT code, no module: frame pointer, bp 0) is the outermost frame.
        assert_eq!(walk, Walk { frames: vec![TEXT + 0x10, 0x5678], end: WalkEnd::Complete });
    }

    /// Seen once in a thousand stacks of the .NET 8 web API: a walk ended as if at the outermost frame two frames
    /// in (libc's memcpy, then a helper of libcoreclr's), where the kernel's chain went on for a dozen frames.
    #[test]
    fn a_walk_ended_early_never_makes_a_stack_shorter_than_the_chain() {
        let mut m = hostile(PLAIN, &[]);
        let stack = words(&[0x5678, 0]);
        let regs = UserRegs { ip: TEXT + 0x10, sp: 0x7000, bp: 0 };
        let mut walk_with = |chain: &[u64]| StackWalker::default().walk((1, 0), &mut m, regs, &stack, chain);
        // The chain passes through the last frame found: it continues the walk.
        let walk = walk_with(&[CONTEXT_USER, TEXT + 0x10, 0x5678, 0x5300]);
        assert_eq!(walk, Walk { frames: vec![TEXT + 0x10, 0x5678, 0x5300], end: WalkEnd::Joined });
        // It does not (frame pointers skip a frameless caller): the longer chain stands.
        let past = [CONTEXT_USER, TEXT + 0x10, 0x5100, 0x5200, 0x5300];
        assert_eq!(walk_with(&past), Walk { frames: past[1..].to_vec(), end: WalkEnd::FramePointers });
        // A chain no longer than the walk leaves it whole.
        let walk = walk_with(&[CONTEXT_USER, TEXT + 0x10, 0x5100]);
        assert_eq!(walk, Walk { frames: vec![TEXT + 0x10, 0x5678], end: WalkEnd::Complete });
    }

    #[test]
    fn a_return_address_outside_code_ends_the_walk_and_the_chain_takes_over() {
        let mut m = hostile(PLAIN, &[]);
        // The slot CFA-8 holds 1: not a return address (as in a libcoreclr stub whose CFI was for other code).
        let stack = words(&[1, 0]);
        let regs = UserRegs { ip: TEXT + 0x10, sp: 0x7000, bp: 0 };
        let chain = [CONTEXT_USER, TEXT + 0x10, 0x5100, 0x5200];
        let walk = StackWalker::default().walk((1, 0), &mut m, regs, &stack, &chain);
        assert_eq!(walk, Walk { frames: vec![TEXT + 0x10, 0x5100, 0x5200], end: WalkEnd::Joined });
    }

    #[test]
    fn hostile_cfi_ends_the_walk() {
        let cases: [(&str, Vec<u8>); 6] = [
            // CFA = rsp + 2^63: far past the copy.
            ("huge CFA offset", [&[0x0e][..], &[0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 1]].concat()),
            // CFA = rsp - 16 (factored -2 * -8 ... signed): below the stack pointer.
            ("negative CFA", vec![0x12, 7, 0x02]),
            // CFA = rsp: the return address would be below the stack pointer, sp does not rise.
            ("CFA at sp", vec![0x0e, 0]),
            // CFA from a register that holds garbage.
            ("CFA from rbx", vec![0x0c, 3, 8]),
            // CFA by an expression that loops on itself (DW_OP_skip -3).
            ("looping expression", vec![0x0f, 3, 0x2f, 0xfd, 0xff]),
            // The return address register is "same value": a loop at the same address.
            ("same value RA", vec![0x08, 16]),
        ];
        for (what, fde_ops) in cases {
            let mut m = hostile(PLAIN, &fde_ops);
            if what == "looping expression" {
                // framehop would evaluate it forever: the check drops the section.
                assert!(!m.0.as_ref().unwrap().cfi.has_cfi());
            }
            for stack in [words(&[TEXT + 0x20; 64]), words(&[0; 64]), words(&[u64::MAX; 64])] {
                let regs = UserRegs { ip: TEXT + 0x10, sp: 0x7000, bp: 0x7008 };
                let walk = StackWalker::default().walk((1, 0), &mut m, regs, &stack, &[]);
                assert!(walk.frames.len() <= MAX_FRAMES, "{what}: {} frames", walk.frames.len());
                assert_eq!(walk.frames[0], TEXT + 0x10, "{what}");
            }
        }
    }

    #[test]
    fn a_remembered_walk_is_taken_only_where_the_copy_reads_the_same() {
        // JIT code (no module), frame pointers: the leaf's frame at 0x7010, its callers' at 0x7030 and 0x7050.
        let mut slots = [0u64; 12];
        for (at, value) in [(0x7010, 0x7030), (0x7018, 0x5100), (0x7030, 0x7050), (0x7038, 0x5200), (0x7058, 0x5300)] {
            slots[(at - 0x7000) / 8] = value;
        }
        let mut walker = StackWalker::default();
        let mut check = |ip: u64, slots: &[u64], expected: &[u64]| {
            let regs = UserRegs { ip, sp: 0x7000, bp: 0x7010 };
            let stack = words(slots);
            let walk = walker.walk((1, 0), &mut OneModule(None), regs, &stack, &[]);
            let fresh = StackWalker::default().walk((1, 0), &mut OneModule(None), regs, &stack, &[]);
            assert_eq!(walk, fresh, "ip {ip:#x}");
            assert_eq!(walk, Walk { frames: expected.to_vec(), end: WalkEnd::Complete }, "ip {ip:#x}");
        };
        check(0x9000, &slots, &[0x9000, 0x5100, 0x5200, 0x5300]);
        // Elsewhere in the same leaf: its caller's state is the same, and so are the words the callers' walk read.
        check(0x9010, &slots, &[0x9010, 0x5100, 0x5200, 0x5300]);
        // A word the callers' walk read changed: walked again.
        let mut changed = slots;
        changed[(0x7038 - 0x7000) / 8] = 0x5250;
        check(0x9020, &changed, &[0x9020, 0x5100, 0x5250, 0x5300]);
        check(0x9000, &slots, &[0x9000, 0x5100, 0x5200, 0x5300]);
        // A word no walk reads changed: the same frames.
        let mut unread = slots;
        unread[(0x7040 - 0x7000) / 8] = 0xdead;
        check(0x9000, &unread, &[0x9000, 0x5100, 0x5200, 0x5300]);
        // Another space with the same registers and words is walked on its own.
        let regs = UserRegs { ip: 0x9000, sp: 0x7000, bp: 0x7010 };
        let walk = walker.walk((2, 0), &mut OneModule(None), regs, &words(&changed), &[]);
        assert_eq!(walk.frames, [0x9000, 0x5100, 0x5250, 0x5300]);
    }

    #[test]
    fn walks_that_never_repeat_stop_being_remembered_for_a_while() {
        let mut walker = StackWalker::default();
        for i in 0..CHECK_EVERY as u64 + 10 {
            // A frame-pointer chain of JIT frames at a different depth each time: no two callers' states alike.
            let sp = 0x10_0000 + i * 0x100;
            let stack = words(&[0, 0, sp + 0x30, 0x5100, 0, 0, 0, 0x5200]);
            let regs = UserRegs { ip: 0x9000, sp, bp: sp + 0x10 };
            let walk = walker.walk((1, 0), &mut OneModule(None), regs, &stack, &[]);
            assert_eq!(walk.frames, [0x9000, 0x5100, 0x5200], "walk {i}");
        }
        assert!(walker.walks.resting > 0, "a hit rate of 0 did not stop remembering");
        walker.forget_walks();
        assert_eq!(walker.walks.resting, 0);
    }

    #[test]
    fn frame_pointer_loops_stop_with_a_marker_end() {
        // JIT code (no module): bp points at itself.
        let stack = words(&[0x7000, 0x5000, 0x7000, 0x5000]);
        let regs = UserRegs { ip: 0x9000, sp: 0x7000, bp: 0x7000 };
        let walk = StackWalker::default().walk((1, 0), &mut OneModule(None), regs, &stack, &[]);
        assert_eq!(walk, Walk { frames: vec![0x9000, 0x5000], end: WalkEnd::Stopped });
        // A chain whose frames go down the stack is refused just the same.
        let stack = words(&[0x6ff0, 0x5000]);
        let walk = StackWalker::default().walk((1, 0), &mut OneModule(None), regs, &stack, &[]);
        assert_eq!(walk.end, WalkEnd::Stopped);
    }

    #[test]
    fn a_leaf_stub_without_a_frame_returns_to_the_code_at_the_stack_pointer() {
        // JIT leaf (no module) whose bp is no frame pointer (below the stack): [sp] is its caller. The caller's own
        // frame pointer is the same useless bp, so the walk ends there.
        let stack = words(&[0x5001, 0, 0x7020, 0x5002, 0, 0]);
        let regs = UserRegs { ip: 0x9000, sp: 0x7000, bp: 0x6000 };
        let walk = StackWalker::default().walk((1, 0), &mut OneModule(None), regs, &stack, &[]);
        assert_eq!(walk, Walk { frames: vec![0x9000, 0x5001], end: WalkEnd::Stopped });
        // [sp] that is not code is not taken.
        let stack = words(&[0x1234, 0, 0x7020, 0x5002, 0, 0]);
        let regs = UserRegs { ip: 0x9000, sp: 0x7000, bp: 0x6000 };
        let walk = StackWalker::default().walk((1, 0), &mut OneModule(None), regs, &stack, &[]);
        assert_eq!(walk, Walk { frames: vec![0x9000], end: WalkEnd::Stopped });
    }

    /// Found by the unwind fuzz target: a leaf guessed to return to the code at a stack pointer 8 bytes below the
    /// end of the address space (its caller's stack pointer would wrap to 0).
    #[test]
    fn a_stack_pointer_at_the_end_of_the_address_space_ends_the_walk() {
        let sp = u64::MAX - 7;
        let regs = UserRegs { ip: 0x9000, sp, bp: 0x6000 };
        let walk = StackWalker::default().walk((1, 0), &mut OneModule(None), regs, &words(&[0x5001]), &[]);
        assert_eq!(walk, Walk { frames: vec![0x9000], end: WalkEnd::Stopped });
    }

    /// framehop caches its frame-pointer fallback for an address whose CFI it cannot cache as a rule when evaluating
    /// that CFI fails for one frame: here a sample whose stack copy ends before the saved return address. A later
    /// sample through the same function, whose copy holds it, is walked as if the first had never been.
    #[test]
    fn a_short_stack_copy_does_not_change_later_walks_through_uncacheable_cfi() {
        // CFA = rsp + 16 by a DWARF expression (DW_OP_breg7 16), return address at CFA - 8.
        let mut m = hostile(PLAIN, &[0x0f, 2, 0x77, 16]);
        let regs = UserRegs { ip: TEXT + 0x10, sp: 0x7000, bp: 0 };
        let full = words(&[0, 0x5001]);
        let fresh = StackWalker::default().walk((1, 0), &mut m, regs, &full, &[]);
        assert_eq!(fresh, Walk { frames: vec![TEXT + 0x10, 0x5001], end: WalkEnd::Complete });
        let mut walker = StackWalker::default();
        walker.walk((1, 0), &mut m, regs, &words(&[0]), &[]);
        assert_eq!(walker.walk((1, 0), &mut m, regs, &full, &[]), fresh);
    }

    /// Found by the unwind fuzz target (crash-eace61cc…): the leaf at 0x833 returns to 0x830, which returns to itself
    /// (recursion) through CFI framehop cannot cache as a rule; the second time the evaluation fails on the frame's
    /// registers. Walking the same sample again must give the same frames.
    #[test]
    fn walking_a_stack_again_gives_the_same_frames() {
        const CFI_DATA: &str = concat!(
            "011b033b3c0000000600000018fdffff0000006888fdffffb000000078fdffff24010000c8fdffff58000000b8feffff",
            "c8000000d8feffffdc0000004400000000000000017a5200017810011b0c070890010710140000001c00000068fdffff",
            "2200000000000000000000001400000000000000017a5200011078011b0c070890010000240000001c00000088fcffff",
            "50000000000e10460effffffffffffffbe3f1a3b2a332422000000001400000044000000b0fcffff0800000000000000",
            "00000000100000005c000000e8fdffff15000000000000004400000070000000f4fdfffffb00000000420e108f02420e",
            "188e03420e208d04450e288c05440e308606430e388307500e7002cb0e38440e30410e28421020420e18420e10420e08",
            "14000000b80000004cfcffff4500000000440e1002400e0800000000",
        );
        let header = "# profcpu unwind info 1\nload 0 0 ab8\nload dd0 1dd0 260\ntext 6f0 94b\ngot 1fc0 1fe8\n\
                      section .eh_frame_hdr 978 3c\nsection .eh_frame 8b8 100\ndata\n";
        let data = (0..CFI_DATA.len()).step_by(2).map(|i| u8::from_str_radix(&CFI_DATA[i..i + 2], 16).unwrap());
        let captured: Vec<u8> = header.bytes().chain(data).collect();
        let cfi = ModuleCfi::decode(&captured).unwrap().checked().0;
        let text = 0x561b_ea5c_d000;
        let mut m = OneModule(Some(CodeModule {
            avma: text..text + 0x4000,
            base_avma: cfi.bias(text, 0).unwrap(),
            cfi: Arc::new(cfi),
            name: "fuzzed".into(),
        }));
        let stack = words(&[
            0x7f32789e1b9d,
            0,
            0x101bea5cd830,
            0,
            0x7ffc5d983df0,
            0x561bea5cf460,
            0x40,
            0,
            0x561bea5cf660,
            0x40,
            0x40,
            0xffffffffffffff80,
            8,
            0x7ffc5d983df0,
            0x7f32789e19a4,
            0,
            0x561bea5cd830,
            0,
            0x7ffc5d983df0,
            0x561bea5cf460,
            0x80,
            0xfffffffd00000000,
            0x800000a9e4159f,
            0,
            0xf460000000000000,
            0xffffffffffffea5c,
            8,
            0x7ffc5d983df0,
            0x7f32789e19c1,
            0,
            0x561bea5cd830,
            0x29,
        ]);
        let regs = UserRegs { ip: text + 0x833, sp: 0x7ffc5d983bf8, bp: 0x20 };
        let mut walker = StackWalker::default();
        let first = walker.walk((1, 0), &mut m, regs, &stack, &[]);
        let second = walker.walk((1, 0), &mut m, regs, &stack, &[]);
        assert_eq!(first, second);
        // A walker that never saw the stack agrees too.
        assert_eq!(StackWalker::default().walk((1, 0), &mut m, regs, &stack, &[]), first);
    }

    /// JIT code only, with the rules a capture saved for some of its methods.
    struct JitOnly(Vec<(Range<u64>, JitFrame)>);

    impl ModuleSource for JitOnly {
        fn mapping_start(&self, _addr: u64) -> Option<u64> {
            None
        }
        fn is_code(&self, addr: u64) -> bool {
            (0x5000..0xa000).contains(&addr)
        }
        fn module_at(&mut self, _addr: u64) -> Option<CodeModule> {
            None
        }
        fn jit_frame(&mut self, addr: u64) -> Option<JitFrame> {
            self.0.iter().find(|(r, _)| r.contains(&addr)).map(|(_, f)| *f)
        }
    }

    /// `WaitMain` (framed, at 0x6000) calls `Nap` (0x5000, tier 1: `push rax; mov edi, 20; call [Sleep]`, no frame
    /// pointer), which calls `Sleep` (the leaf, framed). rbp in `Nap` is still `WaitMain`'s: by frame pointer alone,
    /// the step out of `Nap` lands in `WaitMain`'s caller (0x5810).
    #[test]
    fn a_frameless_jit_method_returns_to_its_caller() {
        let stack = words(&[
            0x7020, // 0x7000: Sleep's saved rbp (WaitMain's)
            0x5010, // 0x7008: return into Nap
            0xdead, // 0x7010: Nap's push rax
            0x6010, // 0x7018: return into WaitMain
            0x7040, // 0x7020: WaitMain's saved rbp
            0x5810, // 0x7028: return into WaitMain's caller
            0, 0, 0, // 0x7040: the outermost frame
            0,
        ]);
        let regs = UserRegs { ip: 0x9000, sp: 0x7000, bp: 0x7000 };
        let by_fp = StackWalker::default().walk((1, 0), &mut JitOnly(vec![]), regs, &stack, &[]);
        assert_eq!(by_fp.frames, vec![0x9000, 0x5010, 0x5810]);
        let nap = (0x5000..0x5012, JitFrame::StackPointer { cfa: 16, rbp_slot: None });
        let mut rules = JitOnly(vec![nap.clone()]);
        let walk = StackWalker::default().walk((1, 0), &mut rules, regs, &stack, &[]);
        assert_eq!(walk, Walk { frames: vec![0x9000, 0x5010, 0x6010, 0x5810], end: WalkEnd::Complete });
        // The leaf is never stepped by its method's rule (its prologue may not have run): Nap as the leaf, right
        // after `call` (sp at the return address), is left to today's handling.
        let leaf = UserRegs { ip: 0x5000, sp: 0x7018, bp: 0x7020 };
        let walk = StackWalker::default().walk((1, 0), &mut rules, leaf, &stack[0x18..], &[]);
        assert_eq!(walk.frames, [0x5000, 0x5810], "{walk:?}");
        // rbp pushed by a frameless method is restored from its slot; a rule reading past the copy ends the walk.
        let pushed = JitOnly(vec![(0x5000..0x5012, JitFrame::StackPointer { cfa: 24, rbp_slot: Some(16) })]);
        let stack = words(&[0x7030, 0x5010, 0xdead, 0x7028, 0x6010, 0x7048, 0x5810, 0, 0, 0, 0, 0]);
        let walk = StackWalker::default().walk((1, 0), &mut { pushed }, regs, &stack, &[]);
        assert_eq!(walk, Walk { frames: vec![0x9000, 0x5010, 0x6010, 0x5810], end: WalkEnd::Complete });
        let far = JitOnly(vec![(0x5000..0x5012, JitFrame::StackPointer { cfa: 0x1000, rbp_slot: None })]);
        let walk = StackWalker::default().walk((1, 0), &mut { far }, regs, &stack, &[]);
        assert_eq!(walk, Walk { frames: vec![0x9000, 0x5010], end: WalkEnd::Stopped });
    }

    #[test]
    fn the_kernel_chain_continues_where_the_copy_ends() {
        // Two JIT frames in the copy; the third frame's record lies beyond it.
        let stack = words(&[0x7010, 0x5001, 0x7100, 0x5002]);
        let regs = UserRegs { ip: 0x9000, sp: 0x7000, bp: 0x7000 };
        let chain = [CONTEXT_KERNEL, 0xffff_ffff_8100_0000, CONTEXT_USER, 0x9000, 0x5001, 0x5002, 0x5003, 0x5004];
        let walk = StackWalker::default().walk((1, 0), &mut OneModule(None), regs, &stack, &chain);
        assert_eq!(walk, Walk { frames: vec![0x9000, 0x5001, 0x5002, 0x5003, 0x5004], end: WalkEnd::Joined });
        // A chain that does not pass through the last frame found, but is longer, wins.
        let other = [CONTEXT_USER, 0x9000, 0x6001, 0x6002, 0x6003, 0x6004];
        let walk = StackWalker::default().walk((1, 0), &mut OneModule(None), regs, &stack, &other);
        assert_eq!(walk, Walk { frames: other[1..].to_vec(), end: WalkEnd::FramePointers });
        // No chain: cut short.
        let walk = StackWalker::default().walk((1, 0), &mut OneModule(None), regs, &stack, &[]);
        assert_eq!(walk, Walk { frames: vec![0x9000, 0x5001, 0x5002], end: WalkEnd::Stopped });
    }

    #[test]
    fn random_stacks_and_cfi_never_hang_or_panic() {
        let own = ModuleCfi::read(&std::fs::File::open("/proc/self/exe").unwrap(), None).unwrap().unwrap();
        let text = own.text.clone().unwrap();
        let own = Arc::new(own);
        let mut rng = crate::random_inputs::Rng::new(0x5eed_57ac);
        let mut walker = StackWalker::default();
        let seed_cfi = eh_frame(PLAIN, &[0x0e, 16]);
        for round in 0..3000u64 {
            let mut m = if round % 2 == 0 {
                // The real CFI of this binary, placed so that its .text is at TEXT.
                OneModule(Some(CodeModule {
                    avma: TEXT..TEXT + (text.end - text.start),
                    base_avma: TEXT - text.start,
                    cfi: own.clone(),
                    name: "self".into(),
                }))
            } else {
                let data = rng.mutate(&seed_cfi);
                hostile_with(&data)
            };
            // Stacks of plausible-looking words: code addresses, stack addresses, garbage.
            let words_n = rng.below(600);
            let stack: Vec<u64> = (0..words_n)
                .map(|_| match rng.below(4) {
                    0 => TEXT + rng.below(0x2000) as u64,
                    1 => 0x7000 + 8 * rng.below(700) as u64,
                    2 => 0,
                    _ => rng.next(),
                })
                .collect();
            let regs =
                UserRegs { ip: TEXT + rng.below(0x2000) as u64, sp: 0x7000, bp: 0x7000 + 8 * rng.below(64) as u64 };
            let chain = [CONTEXT_USER, regs.ip, rng.next(), rng.next()];
            let walk = walker.walk((round % 7, round), &mut m, regs, &words(&stack), &chain);
            assert!(walk.frames.len() <= MAX_FRAMES);
        }
    }

    /// [`with_header`]`(eh_frame)` decoded and checked as untrusted CFI is: framehop looks rows up through the
    /// header, and the walker vets each row before framehop uses it.
    fn hostile_with_header(eh_frame: &[u8]) -> OneModule {
        module(ModuleCfi::decode(&with_header(eh_frame).encode()).unwrap().checked().0)
    }

    /// The same hostile rows as [`hostile_cfi_ends_the_walk`], read through a header: nothing is dropped when the
    /// file is loaded, and the walk still ends (a looping expression is refused as its row is reached).
    #[test]
    fn hostile_cfi_behind_a_header_ends_the_walk() {
        let looping = vec![0x0f, 3, 0x2f, 0xfd, 0xff];
        let mut m = hostile_with_header(&eh_frame(PLAIN, &looping));
        assert!(m.0.as_ref().unwrap().cfi.eh_frame_hdr.is_some(), "the header is kept");
        let regs = UserRegs { ip: TEXT + 0x10, sp: 0x7000, bp: 0x7008 };
        let chain = [CONTEXT_USER, TEXT + 0x10, 0x5100, 0x5200];
        let walk = StackWalker::default().walk((1, 0), &mut m, regs, &words(&[TEXT + 0x20; 64]), &chain);
        // The row is refused, the walk breaks there, and the kernel's chain stands.
        assert_eq!(walk, Walk { frames: vec![TEXT + 0x10, 0x5100, 0x5200], end: WalkEnd::FramePointers });
        // A plain function behind the same header is unwound by its CFI.
        let mut plain = hostile_with_header(&eh_frame(PLAIN, &[]));
        let regs = UserRegs { bp: 0, ..regs };
        let walk = StackWalker::default().walk((1, 0), &mut plain, regs, &words(&[0x5678, 0]), &[]);
        assert_eq!(walk, Walk { frames: vec![TEXT + 0x10, 0x5678], end: WalkEnd::Complete });
    }

    fn hostile_with(eh_frame: &[u8]) -> OneModule {
        let cfi = ModuleCfi {
            eh_frame: Some(CfiSection { svma: 0x10_0000, data: Arc::from(eh_frame) }),
            text: Some(0..0x1000),
            ..Default::default()
        };
        module(ModuleCfi::decode(&cfi.encode()).unwrap().checked().0)
    }
}
