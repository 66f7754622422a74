//! The CFI row framehop is about to unwind a frame with, vetted first. Two things are refused or worked around there:
//! a DWARF expression that could loop (framehop evaluates them without an iteration limit, see
//! [`check`](super::check)) and a row framehop cannot cache as a rule (see [`uncached`](super::uncached)).
//!
//! Where framehop finds rows through `.eh_frame_hdr` (every shared library and executable on a normal system), each
//! address is vetted the first time a frame is unwound from it, by the same lookup framehop makes (the table's
//! binary search, the FDE at the offset it points to, that FDE's row for the address, all through gimli): only the
//! rows samples hit are computed, instead of every row of every file (for libcoreclr, ~120M instructions at each
//! start). Where framehop builds its own index (`.eh_frame` without a header, `.debug_frame`), the section was checked
//! whole when it was loaded and its uncacheable rows are found by one scan.

use super::cfi::ModuleCfi;
use super::check::branches_backwards;
use super::uncached::{cacheable, uncached_rows};
use gimli::{BaseAddresses, CfaRule, EhFrame, EhFrameHdr, EhFrameOffset, EndianSlice, FrameDescriptionEntry};
use gimli::{LittleEndian, Pointer};
use gimli::{RegisterRule, UnwindContext, UnwindSection, UnwindTableRow};
use rustc_hash::FxHashMap;
use std::ops::Range;
use std::sync::Arc;

type Slice<'a> = EndianSlice<'a, LittleEndian>;

/// What the walker does with the row of one address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vetted {
    /// Unwind with the space's rule cache.
    Cached,
    /// Unwind with a fresh cache: framehop cannot cache this row as a rule.
    Fresh,
    /// Do not unwind from here: the row's expressions could loop, or the lookup would trip gimli (a table pointer
    /// before `.eh_frame`, whose subtraction wraps). The walk ends as if unwinding had failed.
    Refused,
}

/// One file's unwind info as the walker vets it, kept for every space that maps the file.
pub struct FileRows {
    /// Keeps the info (and so the key it is found by, its address) alive.
    cfi: Arc<ModuleCfi>,
    rows: Rows,
}

enum Rows {
    /// framehop looks rows up through `.eh_frame_hdr`: each link-time address vetted on first use.
    ByHeader(FxHashMap<u32, Vetted>),
    /// framehop indexes the section itself: the link-time ranges (sorted, disjoint) of rows it cannot cache.
    Scanned(Vec<Range<u64>>),
}

impl FileRows {
    pub fn new(cfi: Arc<ModuleCfi>) -> FileRows {
        let rows = if cfi.read_through_header() {
            Rows::ByHeader(FxHashMap::default())
        } else {
            Rows::Scanned(uncached_rows(&cfi))
        };
        FileRows { cfi, rows }
    }

    /// The verdict for the row of link-time address `svma` (framehop's relative lookup address; the module's base
    /// is at 0 as [`ModuleCfi::section_info`] gives it).
    pub fn vet(&mut self, svma: u32, context: &mut UnwindContext<usize>) -> Vetted {
        match &mut self.rows {
            Rows::ByHeader(verdicts) => {
                *verdicts.entry(svma).or_insert_with(|| by_header(&self.cfi, u64::from(svma), context))
            }
            Rows::Scanned(uncached) => {
                let svma = u64::from(svma);
                let after = uncached.partition_point(|r| r.start <= svma);
                if after > 0 && uncached[after - 1].contains(&svma) {
                    Vetted::Fresh
                } else {
                    Vetted::Cached
                }
            }
        }
    }

    /// The byte ranges of `.eh_frame` that the addresses vetted so far were unwound with (each one's FDE and the
    /// CIE it points to), sorted; `None` where rows are not looked up one by one (the whole section is used). What
    /// a capture must save of the section for the same samples to unwind the same way from it.
    pub fn used_entries(&self) -> Option<Vec<Range<usize>>> {
        let Rows::ByHeader(verdicts) = &self.rows else { return None };
        let (Some(section), Some(eh)) = (eh_frame(&self.cfi), &self.cfi.eh_frame) else { return Some(Vec::new()) };
        let bases = self.cfi.bases();
        let data = &eh.data[..];
        // An entry and its length field: 4 bytes, or 12 in the 64-bit form.
        let entry = |offset: usize, len: usize| {
            let field = if data.get(offset..offset + 4) == Some(&[0xff; 4]) { 12 } else { 4 };
            offset..offset.saturating_add(field).saturating_add(len).min(data.len())
        };
        let mut used: Vec<Range<usize>> = verdicts
            .keys()
            .filter_map(|&svma| fde_by_header(&self.cfi, &section, &bases, u64::from(svma)).ok())
            .flat_map(|fde| [entry(fde.offset(), fde.entry_len()), entry(fde.cie().offset(), fde.cie().entry_len())])
            .collect();
        used.sort_by_key(|r| (r.start, r.end));
        used.dedup();
        Some(used)
    }
}

/// The row framehop finds for `svma` through the header, vetted. Where that lookup fails, framehop's fails the same
/// way every time (no register plays a part in it) and it caches its fallback rule: [`Vetted::Cached`].
fn by_header(cfi: &ModuleCfi, svma: u64, context: &mut UnwindContext<usize>) -> Vetted {
    let Some(section) = eh_frame(cfi) else { return Vetted::Cached };
    let bases = cfi.bases();
    let fde = match fde_by_header(cfi, &section, &bases, svma) {
        Ok(fde) => fde,
        Err(verdict) => return verdict,
    };
    let Ok(row) = fde.unwind_info_for_address(&section, &bases, context, svma) else { return Vetted::Cached };
    if could_loop(&section, row) {
        Vetted::Refused
    } else if cacheable(row) {
        Vetted::Cached
    } else {
        Vetted::Fresh
    }
}

fn eh_frame(cfi: &ModuleCfi) -> Option<EhFrame<Slice<'_>>> {
    let mut section = EhFrame::new(&cfi.eh_frame.as_ref()?.data, LittleEndian);
    section.set_address_size(8);
    Some(section)
}

/// The FDE framehop finds for `svma` through the header; where the lookup ends before one, the verdict for it.
fn fde_by_header<'a>(
    cfi: &'a ModuleCfi,
    section: &EhFrame<Slice<'a>>,
    bases: &BaseAddresses,
    svma: u64,
) -> Result<FrameDescriptionEntry<Slice<'a>>, Vetted> {
    let Some(hdr) = &cfi.eh_frame_hdr else { return Err(Vetted::Cached) };
    let Ok(parsed) = EhFrameHdr::new(&hdr.data, LittleEndian).parse(bases, 8) else { return Err(Vetted::Cached) };
    let Some(table) = parsed.table() else { return Err(Vetted::Cached) };
    let Ok(pointer) = table.lookup(svma, bases) else { return Err(Vetted::Cached) };
    // gimli's `pointer_to_offset`, with the subtraction checked.
    let (Pointer::Direct(at), Pointer::Direct(start)) = (pointer, parsed.eh_frame_ptr()) else {
        return Err(Vetted::Cached);
    };
    let Some(offset) = at.checked_sub(start) else { return Err(Vetted::Refused) };
    let Ok(offset) = usize::try_from(offset) else { return Err(Vetted::Cached) };
    section.fde_from_offset(bases, EhFrameOffset(offset), EhFrame::cie_from_offset).map_err(|_| Vetted::Cached)
}

/// Whether evaluating `row` could run one of its expressions forever.
fn could_loop(section: &EhFrame<Slice<'_>>, row: &UnwindTableRow<usize>) -> bool {
    let cfa = match row.cfa() {
        CfaRule::Expression(e) => Some(e),
        CfaRule::RegisterAndOffset { .. } => None,
    };
    let registers = row.registers().filter_map(|(_, rule)| match rule {
        RegisterRule::Expression(e) | RegisterRule::ValExpression(e) => Some(e),
        _ => None,
    });
    // An expression that cannot be read is never evaluated either.
    cfa.into_iter().chain(registers).any(|e| e.get(section).is_ok_and(branches_backwards))
}

#[cfg(test)]
mod tests {
    use super::super::test_cfi::{eh_frame, with_header, PLAIN};
    use super::*;

    fn own_cfi() -> ModuleCfi {
        ModuleCfi::read(&std::fs::File::open("/proc/self/exe").unwrap(), None).unwrap().unwrap()
    }

    /// Addresses across this binary and libc, and every address of libc's uncacheable rows (its PLT among them),
    /// get the same verdict by header as from the whole-section scan.
    #[test]
    fn vetting_by_header_agrees_with_the_scan() {
        for path in ["/proc/self/exe", "/usr/lib/x86_64-linux-gnu/libc.so.6"] {
            let cfi = Arc::new(ModuleCfi::read(&std::fs::File::open(path).unwrap(), None).unwrap().unwrap());
            let text = cfi.text.clone().unwrap();
            let uncached = uncached_rows(&cfi);
            let mut by_header = FileRows::new(cfi.clone());
            let mut scanned = FileRows { cfi: cfi.clone(), rows: Rows::Scanned(uncached.clone()) };
            let mut context = UnwindContext::new();
            let spread = (text.start..text.end).step_by(61);
            let in_uncached = uncached.iter().take(8).flat_map(|r| r.clone());
            let mut fresh = 0;
            for svma in spread.chain(in_uncached) {
                let svma = u32::try_from(svma).unwrap();
                let want = scanned.vet(svma, &mut context);
                assert_eq!(by_header.vet(svma, &mut context), want, "{path}: {svma:#x}");
                fresh += usize::from(want == Vetted::Fresh);
            }
            assert!(path.contains("self") || fresh > 0, "{path}: no uncacheable row vetted");
        }
    }

    /// What a capture keeps of a section (the entries the vetted addresses were unwound with, the rest zeroed)
    /// gives those addresses the same FDE and the same row, and is mostly zeros.
    #[test]
    fn the_entries_kept_unwind_the_vetted_addresses_alike() {
        let cfi = Arc::new(
            ModuleCfi::read(&std::fs::File::open("/usr/lib/x86_64-linux-gnu/libc.so.6").unwrap(), None)
                .unwrap()
                .unwrap(),
        );
        let text = cfi.text.clone().unwrap();
        let mut rows = FileRows::new(cfi.clone());
        let mut context = UnwindContext::new();
        let vetted: Vec<u32> = (text.start..text.end).step_by(4093).map(|a| u32::try_from(a).unwrap()).collect();
        for &svma in &vetted {
            rows.vet(svma, &mut context);
        }
        let kept = cfi.keeping(&rows.used_entries().unwrap());
        let eh = |c: &ModuleCfi| c.eh_frame.as_ref().unwrap().data.clone();
        let nonzero = eh(&kept).iter().filter(|&&b| b != 0).count();
        assert!(nonzero < eh(&cfi).len() / 2, "{nonzero} of {} bytes kept", eh(&cfi).len());
        let hdr_len = |c: &ModuleCfi| c.eh_frame_hdr.as_ref().unwrap().data.len();
        assert!(hdr_len(&kept) < hdr_len(&cfi) / 2, "search table of {} bytes kept whole", hdr_len(&cfi));
        let (sections, bases) = ((super::eh_frame(&cfi).unwrap(), super::eh_frame(&kept).unwrap()), cfi.bases());
        let mut found = 0;
        for &svma in &vetted {
            let svma = u64::from(svma);
            let before = fde_by_header(&cfi, &sections.0, &bases, svma);
            let after = fde_by_header(&kept, &sections.1, &bases, svma);
            assert_eq!(before.as_ref().map(|f| f.offset()).ok(), after.as_ref().map(|f| f.offset()).ok());
            let (Ok(before), Ok(after)) = (before, after) else { continue };
            let mut other = UnwindContext::new();
            let row = |fde: &FrameDescriptionEntry<Slice<'_>>, section, context| {
                fde.unwind_info_for_address(section, &bases, context, svma).map(|r| format!("{r:?}")).ok()
            };
            assert_eq!(row(&before, &sections.0, &mut context), row(&after, &sections.1, &mut other), "{svma:#x}");
            found += 1;
        }
        assert!(found > vetted.len() / 2, "only {found} of {} addresses have an FDE", vetted.len());
    }

    /// A table pointer before `.eh_frame` (found by fuzzing: gimli's subtraction wraps, or panics with overflow
    /// checks) is refused, never looked up.
    #[test]
    fn an_hdr_pointer_before_eh_frame_is_refused() {
        let mut cfi = own_cfi();
        let hdr = cfi.eh_frame_hdr.as_mut().unwrap();
        let to_eh_frame = cfi.eh_frame.as_ref().unwrap().svma as i64 - hdr.svma as i64;
        // Every FDE pointer (sdata4, relative to the hdr) set to 16 bytes before .eh_frame.
        let mut bytes = hdr.data.to_vec();
        let count = u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize;
        for entry in 0..count {
            let at = 12 + 8 * entry + 4;
            bytes[at..at + 4].copy_from_slice(&((to_eh_frame - 16) as i32).to_le_bytes());
        }
        hdr.data = Arc::from(bytes);
        let text = cfi.text.clone().unwrap();
        let mut rows = FileRows::new(Arc::new(cfi));
        let svma = u32::try_from(text.start + 0x40).unwrap();
        assert_eq!(rows.vet(svma, &mut UnwindContext::new()), Vetted::Refused);
    }

    /// The row of an address whose CFA is computed by an expression that branches backwards (`DW_OP_skip -3`) is
    /// refused.
    #[test]
    fn a_looping_expression_in_the_row_is_refused() {
        let cfi = with_header(&eh_frame(PLAIN, &[0x0f, 3, 0x2f, 0xfd, 0xff]));
        let mut rows = FileRows::new(Arc::new(cfi));
        assert_eq!(rows.vet(0x10, &mut UnwindContext::new()), Vetted::Refused);
        let mut plain = FileRows::new(Arc::new(with_header(&eh_frame(PLAIN, &[]))));
        assert_eq!(plain.vet(0x10, &mut UnwindContext::new()), Vetted::Cached);
    }
}
