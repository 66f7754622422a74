//! Where framehop's rule cache must not be used. framehop turns the CFI row of an address into a small rule
//! (CFA = rsp + n, or the frame-pointer rule) and caches it by address; a row it cannot turn into one (a CFA by
//! expression or from another register, the return address anywhere but at CFA - 8, rbp saved in a way the
//! frame-pointer rule does not cover) is evaluated afresh with the frame's registers each time — and when that
//! evaluation fails (the stack copy ends before the saved return address, the frame's rbp is garbage, the stack
//! pointer would go down), framehop caches its frame-pointer fallback for the address instead (framehop 0.16,
//! `UnwinderInternal::with_cache`). Every later frame at that address, in any later sample, is then unwound by frame
//! pointer even where its own evaluation would have succeeded: the frames of a stack would depend on which samples
//! were walked before. Such rows are rare in compiled code (PLT stubs, signal trampolines, hand-written assembly),
//! so frames there are unwound with a fresh cache and the shared cache keeps everything else.
//!
//! The test is framehop's own translation of a row into a rule (`translate_into_unwind_rule` in its
//! `x86_64/dwarf.rs`), made no looser: a row found cacheable here is one framehop caches as a rule whatever the
//! registers. Rows of every FDE are looked at, so whichever FDE framehop finds for an address (through
//! `.eh_frame_hdr` or its own index), its row is covered.

use super::cfi::ModuleCfi;
use gimli::{BaseAddresses, CfaRule, CieOrFde, DebugFrame, EhFrame, EndianSlice, LittleEndian, RegisterRule};
use gimli::{UnwindContext, UnwindSection, UnwindTableRow, X86_64};
use std::ops::Range;

type Slice<'a> = EndianSlice<'a, LittleEndian>;

/// The link-time address ranges (sorted, disjoint) whose CFI rows framehop cannot cache as a rule.
pub fn uncached_rows(cfi: &ModuleCfi) -> Vec<Range<u64>> {
    let bases = cfi.bases();
    let mut ranges = Vec::new();
    if let Some(section) = &cfi.eh_frame {
        let mut eh_frame = EhFrame::new(&section.data, LittleEndian);
        eh_frame.set_address_size(8);
        uncached_in(&eh_frame, &bases, &mut ranges);
    }
    if let Some(section) = &cfi.debug_frame {
        let mut debug_frame = DebugFrame::new(&section.data, LittleEndian);
        debug_frame.set_address_size(8);
        uncached_in(&debug_frame, &bases, &mut ranges);
    }
    merged(ranges)
}

/// Adds the uncacheable rows of every FDE of `section` to `out`. Where an FDE's rows cannot be computed (from the
/// failing instruction on), framehop fails the same way for the same addresses; they are added all the same.
fn uncached_in<'a, S: UnwindSection<Slice<'a>>>(section: &S, bases: &BaseAddresses, out: &mut Vec<Range<u64>>) {
    let mut context = Box::new(UnwindContext::new());
    let mut entries = section.entries(bases);
    while let Ok(Some(entry)) = entries.next() {
        let CieOrFde::Fde(partial) = entry else { continue };
        let Ok(fde) = partial.parse(|s, b, o| s.cie_from_offset(b, o)) else { continue };
        let end = fde.end_address().max(fde.initial_address());
        let Ok(mut rows) = fde.rows(section, bases, &mut context) else {
            out.push(fde.initial_address()..end);
            continue;
        };
        let mut covered = fde.initial_address();
        loop {
            match rows.next_row() {
                Ok(Some(row)) => {
                    if !cacheable(row) {
                        out.push(row.start_address()..row.end_address().max(row.start_address()));
                    }
                    covered = covered.max(row.end_address());
                }
                Ok(None) => break,
                Err(_) => {
                    out.push(covered..end);
                    break;
                }
            }
        }
    }
}

/// Whether framehop turns `row` into a rule (and so caches a rule that holds for every frame at its addresses).
pub(super) fn cacheable(row: &UnwindTableRow<usize>) -> bool {
    match row.register(X86_64::RA) {
        // The outermost frame.
        None | Some(RegisterRule::Undefined) => return true,
        Some(RegisterRule::Offset(-8)) => {}
        _ => return false,
    }
    let rbp = row.register(X86_64::RBP);
    match *row.cfa() {
        CfaRule::RegisterAndOffset { register: X86_64::RSP, offset } => {
            if !(0..=8 * i64::from(u16::MAX)).contains(&offset) {
                return false;
            }
            match rbp {
                None | Some(RegisterRule::Undefined | RegisterRule::SameValue) => true,
                Some(RegisterRule::Offset(saved)) => {
                    offset.checked_add(saved).is_some_and(|at| i16::try_from(at / 8).is_ok())
                }
                _ => false,
            }
        }
        CfaRule::RegisterAndOffset { register: X86_64::RBP, offset: 16 } => rbp == Some(RegisterRule::Offset(-16)),
        _ => false,
    }
}

/// `ranges` sorted, with those that overlap or touch joined.
pub fn merged(mut ranges: Vec<Range<u64>>) -> Vec<Range<u64>> {
    ranges.retain(|r| !r.is_empty());
    ranges.sort_by_key(|r| r.start);
    let mut out: Vec<Range<u64>> = Vec::with_capacity(ranges.len());
    for r in ranges {
        match out.last_mut() {
            Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
            _ => out.push(r),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libc_has_few_uncacheable_rows_and_its_plt_is_one() {
        let file = std::fs::File::open("/usr/lib/x86_64-linux-gnu/libc.so.6").unwrap();
        let cfi = ModuleCfi::read(&file, None).unwrap().unwrap();
        let ranges = uncached_rows(&cfi);
        // libc's .plt (its CFA is a DWARF expression) is; its ordinary functions are not.
        assert!(!ranges.is_empty() && ranges.len() < 100, "{} ranges", ranges.len());
        let total: u64 = ranges.iter().map(|r| r.end - r.start).sum();
        let text = cfi.text.clone().unwrap();
        assert!(total < (text.end - text.start) / 100, "{total} bytes of {:?}", text);
        assert!(ranges.windows(2).all(|w| w[0].end < w[1].start));
    }
}
