//! Refusing call frame information that could make unwinding loop forever. framehop evaluates the DWARF expressions
//! of CFI rules (`DW_CFA_def_cfa_expression`, `DW_CFA_expression`, `DW_CFA_val_expression`) without an iteration
//! limit, so one backward `DW_OP_skip`/`DW_OP_bra` in a hostile file would hang the walk. Compilers never emit
//! backward branches there, so a section that has one is dropped (its frames are then unwound by frame pointer).
//! Every entry is checked by a walk through the section; `.eh_frame_hdr` could point framehop at an entry that walk
//! never reached (or into the middle of one), so it is kept only if each FDE it points to is one the walk checked.

use super::cfi::{CfiSection, ModuleCfi};
use gimli::{BaseAddresses, CallFrameInstruction, CieOrFde, CommonInformationEntry, EhFrameHdr, EndianSlice};
use gimli::{DebugFrame, EhFrame, LittleEndian, Operation, Pointer, UnwindSection};
use rustc_hash::{FxHashMap, FxHashSet};

type Slice<'a> = EndianSlice<'a, LittleEndian>;

/// `cfi` with every section that fails the check removed, and why each was.
pub fn without_looping_expressions(mut cfi: ModuleCfi) -> (ModuleCfi, Vec<String>) {
    let mut problems = Vec::new();
    let bases = cfi.bases();
    if let Some(section) = &cfi.eh_frame {
        let mut eh_frame = EhFrame::new(&section.data, LittleEndian);
        eh_frame.set_address_size(8);
        match checked_fdes(&eh_frame, &bases) {
            Ok(fdes) => {
                if let Some(hdr) = &cfi.eh_frame_hdr {
                    if let Err(why) = hdr_points_into(hdr, &fdes, &bases) {
                        problems.push(format!(".eh_frame_hdr dropped: {why}"));
                        cfi.eh_frame_hdr = None;
                    }
                }
            }
            Err(why) => {
                problems.push(format!(".eh_frame dropped: {why}"));
                (cfi.eh_frame, cfi.eh_frame_hdr) = (None, None);
            }
        }
    }
    if let Some(section) = &cfi.debug_frame {
        let mut debug_frame = DebugFrame::new(&section.data, LittleEndian);
        debug_frame.set_address_size(8);
        if let Err(why) = checked_fdes(&debug_frame, &bases) {
            problems.push(format!(".debug_frame dropped: {why}"));
            cfi.debug_frame = None;
        }
    }
    (cfi, problems)
}

/// Walks every entry of the section, checking the instructions of each CIE and FDE (and of the CIE each FDE names,
/// wherever it is); returns the offsets of the FDEs checked. The walk stops where the section stops making sense, as
/// framehop's own index of a section without `.eh_frame_hdr` does.
fn checked_fdes<'a, S: UnwindSection<Slice<'a>>>(section: &S, bases: &BaseAddresses) -> Result<FxHashSet<u64>, String> {
    let mut fdes = FxHashSet::default();
    // CIEs by offset, each parsed and checked once (a section has a few, shared by thousands of FDEs).
    let mut cies: FxHashMap<usize, Option<CommonInformationEntry<Slice<'a>>>> = FxHashMap::default();
    let mut failure = None;
    let mut entries = section.entries(bases);
    while let Ok(Some(entry)) = entries.next() {
        let partial = match entry {
            CieOrFde::Cie(cie) => {
                check_instructions(section, cie.instructions(section, bases))?;
                cies.insert(cie.offset(), Some(cie));
                continue;
            }
            CieOrFde::Fde(partial) => partial,
        };
        let fde = partial.parse(|s, b, o| {
            let cie = cies.entry(gimli::UnwindOffset::into(o)).or_insert_with(|| {
                let cie = s.cie_from_offset(b, o).ok()?;
                match check_instructions(section, cie.instructions(section, bases)) {
                    Ok(()) => Some(cie),
                    Err(why) => {
                        failure = Some(why);
                        None
                    }
                }
            });
            cie.clone().ok_or(gimli::Error::NoEntryAtGivenOffset(0))
        });
        if let Some(why) = failure {
            return Err(why);
        }
        let Ok(fde) = fde else { continue };
        check_instructions(section, fde.instructions(section, bases))?;
        fdes.insert(fde.offset() as u64);
    }
    Ok(fdes)
}

fn check_instructions<'a, S: UnwindSection<Slice<'a>>>(
    section: &S,
    mut instructions: gimli::CallFrameInstructionIter<'_, Slice<'a>>,
) -> Result<(), String> {
    // A malformed instruction ends its list for gimli too (the row is never computed).
    while let Ok(Some(instruction)) = instructions.next() {
        let expression = match instruction {
            CallFrameInstruction::DefCfaExpression { expression } => expression,
            CallFrameInstruction::Expression { expression, .. } => expression,
            CallFrameInstruction::ValExpression { expression, .. } => expression,
            _ => continue,
        };
        let Ok(expression) = expression.get(section) else { continue };
        let encoding = gimli::Encoding { format: gimli::Format::Dwarf64, version: 4, address_size: 8 };
        let mut ops = expression.operations(encoding);
        while let Ok(Some(op)) = ops.next() {
            if let Operation::Skip { target } | Operation::Bra { target } = op {
                if target < 0 {
                    return Err("a DWARF expression branches backwards (it could loop)".into());
                }
            }
        }
    }
    Ok(())
}

/// Whether every FDE the `.eh_frame_hdr` table points to is one of `fdes`.
fn hdr_points_into(hdr: &CfiSection, fdes: &FxHashSet<u64>, bases: &BaseAddresses) -> Result<(), String> {
    let parsed = EhFrameHdr::new(&hdr.data, LittleEndian).parse(bases, 8).map_err(|e| format!("unreadable: {e}"))?;
    let Some(table) = parsed.table() else { return Ok(()) };
    let Pointer::Direct(eh_frame) = parsed.eh_frame_ptr() else { return Err("an indirect .eh_frame pointer".into()) };
    let mut rows = table.iter(bases);
    loop {
        match rows.next() {
            Ok(Some((_, pointer))) => {
                // The offset in .eh_frame, subtracted here with a check: gimli's `pointer_to_offset` does not check
                // for a pointer before the section (found by fuzzing: it wraps, or panics with overflow checks).
                let offset = match pointer {
                    Pointer::Direct(at) => at.checked_sub(eh_frame).ok_or("an FDE pointer before .eh_frame")?,
                    Pointer::Indirect(_) => return Err("an indirect FDE pointer".into()),
                };
                if !fdes.contains(&offset) {
                    return Err(format!("it points to offset {offset:#x}, which holds no checked FDE"));
                }
            }
            Ok(None) => return Ok(()),
            Err(e) => return Err(format!("unreadable table: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn real_libraries_pass_whole() {
        let mut paths = vec!["/proc/self/exe".to_string(), "/usr/lib/x86_64-linux-gnu/libc.so.6".to_string()];
        paths.push("/usr/lib/x86_64-linux-gnu/libstdc++.so.6".into());
        for path in paths {
            let Ok(file) = std::fs::File::open(&path) else { continue };
            let cfi = ModuleCfi::read(&file, None).unwrap().unwrap();
            let (checked, problems) = without_looping_expressions(cfi.clone());
            assert!(problems.is_empty(), "{path}: {problems:?}");
            assert_eq!(checked, cfi, "{path}");
        }
    }

    #[test]
    fn a_stray_hdr_pointer_drops_the_hdr() {
        let file = std::fs::File::open("/proc/self/exe").unwrap();
        let mut cfi = ModuleCfi::read(&file, None).unwrap().unwrap();
        let hdr = cfi.eh_frame_hdr.as_mut().unwrap();
        // The table's first FDE pointer (sdata4, relative to the hdr) moved by 4 bytes: into the middle of an entry.
        let mut bytes = hdr.data.to_vec();
        let at = 12 + 4;
        let moved = i32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) + 4;
        bytes[at..at + 4].copy_from_slice(&moved.to_le_bytes());
        hdr.data = Arc::from(bytes);
        let (checked, problems) = without_looping_expressions(cfi);
        assert!(checked.eh_frame_hdr.is_none() && checked.eh_frame.is_some(), "{problems:?}");
    }

    /// Found by the unwind, elf and postprocess fuzz targets: a table entry pointing before `.eh_frame`.
    #[test]
    fn an_hdr_pointer_before_eh_frame_drops_the_hdr() {
        let file = std::fs::File::open("/proc/self/exe").unwrap();
        let mut cfi = ModuleCfi::read(&file, None).unwrap().unwrap();
        let hdr = cfi.eh_frame_hdr.as_mut().unwrap();
        let to_eh_frame = cfi.eh_frame.as_ref().unwrap().svma as i64 - hdr.svma as i64;
        // The first FDE pointer (sdata4, relative to the hdr) set to 16 bytes before .eh_frame.
        let mut bytes = hdr.data.to_vec();
        bytes[16..20].copy_from_slice(&((to_eh_frame - 16) as i32).to_le_bytes());
        hdr.data = Arc::from(bytes);
        let (checked, problems) = without_looping_expressions(cfi);
        assert!(checked.eh_frame_hdr.is_none() && checked.eh_frame.is_some(), "{problems:?}");
        assert!(problems[0].contains("an FDE pointer before .eh_frame"), "{problems:?}");
    }
}
