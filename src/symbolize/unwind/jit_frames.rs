//! The frames of JIT-compiled methods, read from the first bytes of their code. JIT code has no CFI, so the walk
//! steps out of it by frame pointer; but an optimized method that needs no frame pointer (RyuJIT's tier 1 code of a
//! small method: `push rax; mov edi, 20; call [Thread:Sleep]; nop; add rsp, 8; ret`) leaves rbp pointing at its
//! caller's frame, and the frame-pointer step out of it lands in the caller's caller — the caller is lost.
//!
//! [`classify`] decodes the prologue patterns RyuJIT emits on x86-64 (pushes of callee-saved registers, `push rax`
//! for alignment, `sub rsp, N`, `mov rbp, rsp` / `lea rbp, [rsp+N]`) up to the first other instruction, and tells
//! how a frame of the method is unwound *once its prologue has run* (a return address in it, never the leaf):
//! [`JitFrame::StackPointer`] for a method without frame pointer (its stack size is fixed after the prologue),
//! [`JitFrame::FramePointer`] for one whose rbp does not point at the slot where it saved its caller's rbp. A method
//! whose rbp does (the usual frame), and any prologue not understood, gets no rule: frame pointers unwind it as
//! before. [`JitFrames`] is a process's table of rules: those a capture read from the live process's code and saved
//! in `symbols/` (see [`symbols_dir`](crate::symbolize::symbols_dir)), and those of its jitdump, whose load records
//! carry the code.
//!
//! The bytes come from the target: every size is bounded (a frame of at most [`MAX_FRAME`] bytes), the decoder
//! reads at most the bytes it is given and moves forward with every instruction.

use crate::symbolize::perf_map::parse_hex;
use crate::symbolize::ranges::{Range, RangeTable};

/// How many bytes of a method's code are read to classify its prologue (RyuJIT's longest frame setup — six pushes,
/// `sub rsp, imm32`, `lea rbp, [rsp+disp32]` — takes 24).
pub const PROLOGUE_BYTES: usize = 32;

/// The largest frame believed (bytes between the return address and the stack pointer): beyond it, frame pointers.
pub const MAX_FRAME: u32 = 64 << 10;

/// The largest method believed in a saved table.
const MAX_METHOD: u64 = 64 << 20;

/// How a frame of a JIT method is unwound once its prologue has run. Offsets are in bytes *below the CFA* (the
/// caller's stack pointer after the return: the return address is at CFA − 8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JitFrame {
    /// No frame pointer: CFA = sp + `cfa`; rbp unchanged, or restored from CFA − `rbp_slot` if the method pushed it.
    StackPointer { cfa: u32, rbp_slot: Option<u32> },
    /// rbp set up `cfa` bytes below the CFA (CFA = rbp + `cfa`), the caller's rbp saved at CFA − `rbp_slot`
    /// elsewhere than where rbp points.
    FramePointer { cfa: u32, rbp_slot: u32 },
}

impl JitFrame {
    /// The caller's registers `(return address, sp, bp)` for a frame with stack pointer `sp` and frame pointer `bp`,
    /// reading the stack with `read`; `None` when a value is out of reach or out of range.
    pub fn step(self, sp: u64, bp: u64, mut read: impl FnMut(u64) -> Option<u64>) -> Option<(u64, u64, u64)> {
        let (cfa, rbp_slot) = match self {
            JitFrame::StackPointer { cfa, rbp_slot } => (sp.checked_add(cfa.into())?, rbp_slot),
            JitFrame::FramePointer { cfa, rbp_slot } => (bp.checked_add(cfa.into())?, Some(rbp_slot)),
        };
        let return_address = read(cfa.checked_sub(8)?)?;
        let bp = match rbp_slot {
            Some(slot) => read(cfa.checked_sub(slot.into())?)?,
            None => bp,
        };
        Some((return_address, cfa, bp))
    }

    /// Whether the offsets could be a real frame's: the return address below the CFA, rbp's slot below it, within
    /// [`MAX_FRAME`], in whole stack slots.
    fn plausible(self) -> bool {
        let (cfa, slot) = match self {
            JitFrame::StackPointer { cfa, rbp_slot } => (cfa, rbp_slot),
            JitFrame::FramePointer { cfa, rbp_slot } => (cfa, Some(rbp_slot)),
        };
        let slot_ok = slot.map_or(true, |s| s >= 16 && s % 8 == 0 && s <= MAX_FRAME + 8);
        (8..=MAX_FRAME + 8).contains(&cfa) && cfa % 8 == 0 && slot_ok
    }
}

/// How the frames of the JIT method `name` (as its perf map or jitdump names it), whose code starts with `code`, are
/// unwound once its prologue has run; `None` for frame pointers. An on-stack-replacement method (`[OSR]`, .NET's
/// tier suffix) gets no rule: its frame extends its tier-0 frame, with no return address above its own prologue.
pub fn method_frame(name: &str, code: &[u8]) -> Option<JitFrame> {
    if name.ends_with("[OSR]") {
        return None;
    }
    classify(code)
}

/// How a method whose code starts with `code` is unwound once its prologue has run; `None` for frame pointers
/// (rbp set up at its saved slot, or a prologue this decoder does not follow to its end).
pub fn classify(code: &[u8]) -> Option<JitFrame> {
    // Bytes between the CFA and the stack pointer: the return address at first.
    let mut below: u32 = 8;
    let mut rbp_slot: Option<u32> = None;
    let mut at = 0;
    let (rbp_below, stop) = loop {
        let rest = code.get(at..)?;
        // (length, bytes pushed or subtracted)
        let (len, grows) = match rest {
            [] => return None, // the prologue may go on past what was read
            // push rbp
            [0x55, ..] => {
                if rbp_slot.is_some() {
                    return None;
                }
                rbp_slot = Some(below + 8);
                (1, 8)
            }
            // push rax (alignment), rbx, rsi, rdi
            [0x50 | 0x53 | 0x56 | 0x57, ..] => (1, 8),
            // push r12..r15
            [0x41, 0x54..=0x57, ..] => (2, 8),
            // sub rsp, imm8 (sign-extended)
            [0x48, 0x83, 0xec, n, ..] => (4, u32::try_from(*n as i8).ok()?),
            // sub rsp, imm32 (sign-extended)
            [0x48, 0x81, 0xec, a, b, c, d, ..] => (7, u32::try_from(i32::from_le_bytes([*a, *b, *c, *d])).ok()?),
            // mov rbp, rsp (either encoding)
            [0x48, 0x8b, 0xec, ..] | [0x48, 0x89, 0xe5, ..] => break (Some(below), None),
            // lea rbp, [rsp+disp8] / [rsp+disp32]: rbp = CFA - below + disp
            [0x48, 0x8d, 0x6c, 0x24, d, ..] => break (Some(minus(below, (*d as i8).into())?), None),
            [0x48, 0x8d, 0xac, 0x24, a, b, c, d, ..] => {
                break (Some(minus(below, i32::from_le_bytes([*a, *b, *c, *d]))?), None)
            }
            // nop, vzeroupper: no effect on the frame
            [0x90, ..] => (1, 0),
            [0xc5, 0xf8, 0x77, ..] => (3, 0),
            // Too few bytes left to tell another instruction from a cut-off prologue one.
            _ if rest.len() < 8 => return None,
            _ => break (None, Some(rest)),
        };
        below = below.checked_add(grows).filter(|&b| b <= MAX_FRAME + 8)?;
        at += len;
    };
    let frame = match (rbp_below, stop) {
        // rbp is the frame pointer: at its saved slot, frame pointers unwind it.
        (Some(rbp), _) => {
            let slot = rbp_slot?;
            if rbp == slot {
                return None;
            }
            JitFrame::FramePointer { cfa: rbp, rbp_slot: slot }
        }
        (None, Some(next)) => {
            // A stack probe before a large frame is allocated (`test [rsp-N], eax`, `lea r, [rsp-N]`): the frame is
            // not all set up yet, and rbp may still be established after it.
            if is_stack_probe(next) {
                return None;
            }
            // A method that calls keeps the stack 16-byte aligned at its calls (the CFA is): a frame that does not
            // is not one this decoder understood.
            if below % 16 != 0 {
                return None;
            }
            JitFrame::StackPointer { cfa: below, rbp_slot }
        }
        (None, None) => return None,
    };
    frame.plausible().then_some(frame)
}

/// `below - disp`, if it is a distance below the CFA.
fn minus(below: u32, disp: i32) -> Option<u32> {
    u32::try_from(i64::from(below) - i64::from(disp)).ok()
}

/// `test [rsp+disp], r32` or `lea r64, [rsp+disp]` (ModRM with a SIB byte whose base is rsp): how RyuJIT probes
/// the stack pages of a frame of a page or more before moving rsp.
fn is_stack_probe(code: &[u8]) -> bool {
    let rsp_based = |modrm: u8, sib: u8| modrm >> 6 != 3 && modrm & 7 == 4 && sib & 7 == 4;
    match code {
        [0x85, modrm, sib, ..] => rsp_based(*modrm, *sib),
        [0x48 | 0x4c, 0x8d, modrm, sib, ..] => rsp_based(*modrm, *sib),
        _ => false,
    }
}

/// A process's JIT methods that frame pointers do not unwind, by code address.
#[derive(Debug, Default)]
pub struct JitFrames {
    rules: RangeTable<JitFrame>,
}

impl JitFrames {
    /// The rule of the method holding `addr`.
    pub fn lookup(&self, addr: u64) -> Option<JitFrame> {
        self.rules.lookup(addr).map(|r| r.value)
    }

    /// A table of `(start, end, rule)`; where methods overlap, the later start wins from there on.
    pub fn from_rules(rules: impl IntoIterator<Item = (u64, u64, JitFrame)>) -> JitFrames {
        let rules = rules.into_iter().map(|(start, end, value)| Range { start, end, value }).collect();
        JitFrames { rules: RangeTable::from_unsorted(rules) }
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Every rule as `(start, end, rule)`.
    pub fn rules(&self) -> impl Iterator<Item = (u64, u64, JitFrame)> + '_ {
        self.rules.iter().map(|r| (r.start, r.end, r.value))
    }

    /// Reads the saved form ([`line`] per method); lines that are not exactly that, or whose offsets no real frame
    /// has, are skipped and counted.
    pub fn parse(text: &str) -> (JitFrames, usize) {
        let mut bad = 0;
        let mut rules = Vec::new();
        for line in text.lines().filter(|l| !l.trim().is_empty() && !l.starts_with('#')) {
            match parse_line(line) {
                Some(range) => rules.push(range),
                None => bad += 1,
            }
        }
        (JitFrames { rules: RangeTable::from_unsorted(rules) }, bad)
    }
}

/// One method's saved rule: `START SIZE sp CFA [RBPSLOT]` or `START SIZE bp CFA RBPSLOT` (hex; offsets below the
/// CFA as in [`JitFrame`]).
pub fn line(start: u64, size: u64, frame: JitFrame) -> String {
    match frame {
        JitFrame::StackPointer { cfa, rbp_slot: Some(slot) } => format!("{start:x} {size:x} sp {cfa:x} {slot:x}\n"),
        JitFrame::StackPointer { cfa, rbp_slot: None } => format!("{start:x} {size:x} sp {cfa:x}\n"),
        JitFrame::FramePointer { cfa, rbp_slot } => format!("{start:x} {size:x} bp {cfa:x} {rbp_slot:x}\n"),
    }
}

fn parse_line(line: &str) -> Option<Range<JitFrame>> {
    let mut f = line.split_ascii_whitespace();
    let start = parse_hex(f.next()?)?;
    let size = parse_hex(f.next()?)?.min(MAX_METHOD + 1);
    let kind = f.next()?;
    let offset = |s: &str| parse_hex(s).and_then(|v| u32::try_from(v).ok());
    let cfa = offset(f.next()?)?;
    let slot = f.next().map(offset);
    let frame = match (kind, slot) {
        ("sp", None) => JitFrame::StackPointer { cfa, rbp_slot: None },
        ("sp", Some(slot)) => JitFrame::StackPointer { cfa, rbp_slot: Some(slot?) },
        ("bp", Some(slot)) => JitFrame::FramePointer { cfa, rbp_slot: slot? },
        _ => return None,
    };
    if f.next().is_some() || size == 0 || size > MAX_METHOD || !frame.plausible() {
        return None;
    }
    Some(Range { start, end: start.checked_add(size)?, value: frame })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ryujit_prologues() {
        // Each followed by int3 padding, as if the method went on.
        let classify = |code: &[u8]| classify(&[code, &[0xcc; 8][..]].concat());
        // App::Nap at tier 1: push rax; mov edi, 20; call [Thread:Sleep]
        let nap = [0x50, 0xbf, 0x14, 0, 0, 0, 0xff, 0x15, 0, 0, 0, 0, 0x90, 0x48, 0x83, 0xc4, 8, 0xc3];
        assert_eq!(classify(&nap), Some(JitFrame::StackPointer { cfa: 16, rbp_slot: None }));
        // push r15; push r14; push rbx; sub rsp, 0x10; mov rbx, rdi
        let saves = [0x41, 0x57, 0x41, 0x56, 0x53, 0x48, 0x83, 0xec, 0x10, 0x48, 0x8b, 0xdf];
        assert_eq!(classify(&saves), Some(JitFrame::StackPointer { cfa: 48, rbp_slot: None }));
        // rbp saved as a callee-saved register: push r15; push rbp; push rbx; sub rsp, 0x200; mov rbp, rdi
        let rbp_saved = [0x41, 0x57, 0x55, 0x53, 0x48, 0x81, 0xec, 0, 2, 0, 0, 0x48, 0x8b, 0xef];
        assert_eq!(classify(&rbp_saved), Some(JitFrame::StackPointer { cfa: 0x220, rbp_slot: Some(24) }));
        // Tier 0: push rbp; mov rbp, rsp — frame pointers
        assert_eq!(classify(&[0x55, 0x48, 0x89, 0xe5, 0x48, 0x83, 0xec, 0x10]), None);
        assert_eq!(classify(&[0x55, 0x48, 0x8b, 0xec, 0x90]), None);
        // push rbp; push rbx; sub rsp, 0x20; lea rbp, [rsp+0x28]: rbp at its saved slot — frame pointers
        assert_eq!(classify(&[0x55, 0x53, 0x48, 0x83, 0xec, 0x20, 0x48, 0x8d, 0x6c, 0x24, 0x28, 0x33, 0xc0]), None);
        // ... lea rbp, [rsp+0x10]: rbp 0x18 below its slot
        let low = [0x55, 0x53, 0x48, 0x83, 0xec, 0x20, 0x48, 0x8d, 0x6c, 0x24, 0x10, 0x33, 0xc0];
        assert_eq!(classify(&low), Some(JitFrame::FramePointer { cfa: 0x28, rbp_slot: 16 }));
        // lea rbp, [rsp+disp32]
        let far = [0x55, 0x48, 0x81, 0xec, 0, 1, 0, 0, 0x48, 0x8d, 0xac, 0x24, 0, 1, 0, 0, 0x33, 0xc0];
        assert_eq!(classify(&far), None);
    }

    #[test]
    fn prologues_not_understood_are_left_to_frame_pointers() {
        let cut_off: &[(&str, &[u8])] = &[
            ("empty", &[]),
            ("truncated sub", &[0x50, 0x48, 0x83]),
            ("truncated lea", &[0x55, 0x48, 0x8d, 0xac, 0x24, 0x10]),
            ("only pushes", &[0x53, 0x50]),
            ("nops to the end", &[0x90; 64]),
            ("pushes past the limit", &[0x50; 20000]),
        ];
        for (what, code) in cut_off {
            assert_eq!(classify(code), None, "{what}");
        }
        // Followed by a method body (mov eax, edi; ret; int3...).
        let cases: &[(&str, &[u8])] = &[
            ("no frame, no alignment (a leaf)", &[0x8b, 0xc7, 0xc3]),
            ("misaligned", &[0x53, 0x50, 0x8b, 0xc7]),
            ("negative sub", &[0x48, 0x83, 0xec, 0xf8, 0x8b, 0xc7]),
            ("negative sub imm32", &[0x48, 0x81, 0xec, 0, 0, 0, 0x80, 0x8b, 0xc7]),
            ("huge sub", &[0x50, 0x48, 0x81, 0xec, 0, 0, 0, 0x70, 0x8b, 0xc7]),
            ("frame just over the limit", &[0x48, 0x81, 0xec, 0x08, 0, 1, 0, 0x8b, 0xc7]),
            ("rbp pushed twice", &[0x55, 0x55, 0x8b, 0xc7]),
            ("mov rbp, rsp without saving rbp", &[0x50, 0x48, 0x8b, 0xec, 0x8b, 0xc7]),
            ("lea rbp above the frame", &[0x55, 0x48, 0x8d, 0x6c, 0x24, 0x7f, 0x8b, 0xc7]),
            ("lea rbp far above", &[0x55, 0x48, 0x8d, 0xac, 0x24, 0xff, 0xff, 0xff, 0x7f, 0x8b, 0xc7]),
            ("lea rbp far below", &[0x55, 0x48, 0x8d, 0xac, 0x24, 0, 0, 0, 0x80, 0x8b, 0xc7]),
            ("stack probe", &[0x55, 0x85, 0x84, 0x24, 0, 0xf0, 0xff, 0xff]),
            ("probe by lea", &[0x55, 0x48, 0x8d, 0x84, 0x24, 0, 0xe0, 0xff, 0xff]),
        ];
        const BODY: [u8; 8] = [0x8b, 0xc7, 0xc3, 0xcc, 0xcc, 0xcc, 0xcc, 0xcc];
        for (what, code) in cases {
            assert_eq!(classify(&[code, &BODY[..]].concat()), None, "{what}");
        }
        // A frame of exactly the limit is believed.
        let limit = [&[0x48, 0x81, 0xec, 0xf8, 0xff, 0, 0][..], &BODY].concat();
        assert_eq!(classify(&limit), Some(JitFrame::StackPointer { cfa: MAX_FRAME, rbp_slot: None }));
    }

    #[test]
    fn random_code_never_panics_and_gives_plausible_frames() {
        let mut rng = crate::random_inputs::Rng::new(0x5eed_f4a3);
        let seeds: [&[u8]; 3] = [
            &[0x41, 0x57, 0x55, 0x53, 0x48, 0x81, 0xec, 0, 2, 0, 0, 0x48, 0x8b, 0xef],
            &[0x55, 0x53, 0x48, 0x83, 0xec, 0x20, 0x48, 0x8d, 0x6c, 0x24, 0x10, 0x33, 0xc0],
            &[0x50, 0xbf, 0x14, 0, 0, 0],
        ];
        for code in rng.inputs(&seeds, 20000) {
            if let Some(frame) = classify(&code) {
                assert!(frame.plausible(), "{frame:?} from {code:02x?}");
            }
        }
    }

    #[test]
    fn a_step_reads_the_return_address_and_saved_rbp() {
        let stack: Vec<u64> = vec![0xaa, 0xbb, 0x7100, 0x5555];
        let read = |a: u64| stack.get(((a.checked_sub(0x7000)?) / 8) as usize).copied();
        let sp = JitFrame::StackPointer { cfa: 32, rbp_slot: Some(16) };
        assert_eq!(sp.step(0x7000, 0x9999, read), Some((0x5555, 0x7020, 0x7100)));
        let plain = JitFrame::StackPointer { cfa: 32, rbp_slot: None };
        assert_eq!(plain.step(0x7000, 0x9999, read), Some((0x5555, 0x7020, 0x9999)));
        let bp = JitFrame::FramePointer { cfa: 24, rbp_slot: 16 };
        assert_eq!(bp.step(0x7000, 0x7008, read), Some((0x5555, 0x7020, 0x7100)));
        // Out of the copy, or wrapping: no step.
        assert_eq!(plain.step(0x7010, 0, read), None);
        assert_eq!(plain.step(u64::MAX - 8, 0, read), None);
        assert_eq!(bp.step(0, u64::MAX, read), None);
    }

    #[test]
    fn saved_tables_round_trip_and_refuse_hostile_lines() {
        let frames = [
            (0x7f00_1000, 0x12, JitFrame::StackPointer { cfa: 16, rbp_slot: None }),
            (0x7f00_2000, 0x80, JitFrame::StackPointer { cfa: 0x220, rbp_slot: Some(24) }),
            (0x7f00_3000, 0x40, JitFrame::FramePointer { cfa: 0x40, rbp_slot: 16 }),
        ];
        let mut text = String::from("# comment\n");
        for (start, size, frame) in frames {
            text.push_str(&line(start, size, frame));
        }
        let hostile = [
            "1000 10 sp 8000000000 ",
            "1000 10 sp 10 8",
            "1000 10 sp 11",
            "1000 10 sp 0",
            "1000 10 sp 20000 ",
            "1000 0 sp 10",
            "ffffffffffffffff 10 sp 10",
            "1000 ffffffffffffffff sp 10",
            "1000 10 bp 10",
            "1000 10 xx 10 10",
            "1000 10 sp 10 10 10",
            "1000 10 sp -10",
            "zz 10 sp 10",
            "1000",
            "1000 10 sp 10 ffffffffff",
        ];
        for l in hostile {
            text.push_str(l);
            text.push('\n');
        }
        let (table, bad) = JitFrames::parse(&text);
        assert_eq!((table.len(), bad), (3, hostile.len()));
        for (start, size, frame) in frames {
            assert_eq!(table.lookup(start + size - 1), Some(frame));
            assert_eq!(table.lookup(start + size), None);
        }
        let mut rng = crate::random_inputs::Rng::new(0x5eed_f4a4);
        for input in rng.inputs(&[text.as_bytes()], 2000) {
            let (table, _) = JitFrames::parse(&String::from_utf8_lossy(&input));
            for r in table.rules.iter() {
                assert!(r.value.plausible());
            }
        }
    }
}
