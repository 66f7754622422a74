//! Refusing call frame information that could make unwinding loop forever. framehop evaluates the DWARF expressions
//! of CFI rules (`DW_CFA_def_cfa_expression`, `DW_CFA_expression`, `DW_CFA_val_expression`) without an iteration
//! limit, so one backward `DW_OP_skip`/`DW_OP_bra` in a hostile file would hang the walk. Compilers never emit
//! backward branches there.
//!
//! Where framehop reads `.eh_frame` through `.eh_frame_hdr`, the walker vets the one row it is about to use
//! ([`vet`](super::vet)): nothing is checked here. A section framehop indexes itself (`.eh_frame` without a header,
//! `.debug_frame`) is checked whole, every entry by a walk through the section, and dropped if one entry fails (its
//! frames are then unwound by frame pointer).

use super::cfi::ModuleCfi;
use gimli::{BaseAddresses, CallFrameInstruction, CieOrFde, CommonInformationEntry, EndianSlice};
use gimli::{DebugFrame, EhFrame, LittleEndian, Operation, UnwindSection};
use rustc_hash::FxHashMap;

type Slice<'a> = EndianSlice<'a, LittleEndian>;

/// `cfi` with every section that fails the check removed, and why each was.
pub fn without_looping_expressions(mut cfi: ModuleCfi) -> (ModuleCfi, Vec<String>) {
    let mut problems = Vec::new();
    let bases = cfi.bases();
    if let Some(section) = cfi.eh_frame.as_ref().filter(|_| !cfi.read_through_header()) {
        let mut eh_frame = EhFrame::new(&section.data, LittleEndian);
        eh_frame.set_address_size(8);
        if let Err(why) = checked_fdes(&eh_frame, &bases) {
            problems.push(format!(".eh_frame dropped: {why}"));
            cfi.eh_frame = None;
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
/// wherever it is). The walk stops where the section stops making sense, as framehop's own index of the section does.
fn checked_fdes<'a, S: UnwindSection<Slice<'a>>>(section: &S, bases: &BaseAddresses) -> Result<(), String> {
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
    }
    Ok(())
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
        if expression.get(section).is_ok_and(branches_backwards) {
            return Err("a DWARF expression branches backwards (it could loop)".into());
        }
    }
    Ok(())
}

/// Whether `expression` has a backward `DW_OP_skip` or `DW_OP_bra` (as far as it can be read: evaluation stops where
/// reading does).
pub(super) fn branches_backwards(expression: gimli::Expression<Slice<'_>>) -> bool {
    let encoding = gimli::Encoding { format: gimli::Format::Dwarf64, version: 4, address_size: 8 };
    let mut ops = expression.operations(encoding);
    while let Ok(Some(op)) = ops.next() {
        if let Operation::Skip { target } | Operation::Bra { target } = op {
            if target < 0 {
                return true;
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Checked whole, as they would be without their `.eh_frame_hdr`.
    #[test]
    fn real_libraries_pass_whole() {
        let mut paths = vec!["/proc/self/exe".to_string(), "/usr/lib/x86_64-linux-gnu/libc.so.6".to_string()];
        paths.push("/usr/lib/x86_64-linux-gnu/libstdc++.so.6".into());
        for path in paths {
            let Ok(file) = std::fs::File::open(&path) else { continue };
            let mut cfi = ModuleCfi::read(&file, None).unwrap().unwrap();
            cfi.eh_frame_hdr = None;
            let (checked, problems) = without_looping_expressions(cfi.clone());
            assert!(problems.is_empty(), "{path}: {problems:?}");
            assert_eq!(checked, cfi, "{path}");
        }
    }
}
