//! The symbols of one mapped file: its `.symtab`; else a verified split debug file's; else its `.dynsym`, and then
//! the code no exported symbol covers is grouped by the function bounds of its `.eh_frame` ([`FunctionBounds`]). A ReadyToRun `.dll`
//! is named by its own metadata ([`R2rSymbols`]). Any other file (an IL-only assembly, a data file) is "opaque": its
//! frames keep module and offset.

use super::debug_search::{self, SearchReport, SearchRoots};
use super::elf::{self, ElfImage, SymbolSource};
use super::function_bounds::FunctionBounds;
use super::r2r_symbols::R2rSymbols;
use super::symbol_table::SymbolTable;
use super::FrameKind;
use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Debug)]
pub enum DsoSymbols {
    /// Function symbols keyed by file offset, and where the functions no symbol names begin and end.
    Elf { table: SymbolTable, origin: Origin, functions: FunctionBounds },
    /// A ReadyToRun image (precompiled .NET code).
    R2r(R2rSymbols),
    /// Not ELF, or unusable: `reason` says why (for the log).
    Opaque { reason: String },
}

/// What names one file offset of a mapped file. Ranges are file offsets, `[start, end)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileHit {
    /// A named symbol or method.
    Symbol {
        start: u64,
        end: u64,
        name: Arc<str>,
    },
    /// An unnamed function (one frame for all its addresses).
    Function {
        start: u64,
        end: u64,
    },
    Nothing,
}

impl DsoSymbols {
    /// What names the code at `offset` in the file.
    pub fn lookup(&self, offset: u64) -> FileHit {
        match self {
            DsoSymbols::Elf { table, functions, .. } => match table.lookup(offset) {
                Some((start, end, name)) => FileHit::Symbol { start, end, name },
                None => match functions.lookup(offset) {
                    Some((start, end)) => FileHit::Function { start, end },
                    None => FileHit::Nothing,
                },
            },
            DsoSymbols::R2r(r2r) => r2r.lookup(offset),
            DsoSymbols::Opaque { .. } => FileHit::Nothing,
        }
    }

    /// The kind of the file's frames: precompiled .NET code is managed code like JIT output (and coloured so).
    pub fn frame_kind(&self) -> FrameKind {
        match self {
            DsoSymbols::Elf { .. } => FrameKind::Native,
            DsoSymbols::R2r(_) => FrameKind::Jit,
            DsoSymbols::Opaque { .. } => FrameKind::Unknown,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    Symtab,
    DebugFile(PathBuf),
    Dynsym,
    /// A table saved by a capture.
    Captured,
    /// profcpu's own vDSO (same kernel).
    Vdso,
}

/// Loads the symbols of `file`, the binary the target mapped at `path`. `expected_build_id` (from the recording)
/// guards against a file replaced since.
pub fn load(file: File, path: &str, roots: &SearchRoots, expected_build_id: Option<&[u8]>) -> DsoSymbols {
    let image = match ElfImage::read(file) {
        Ok(Some(image)) => image,
        Ok(None) => return DsoSymbols::Opaque { reason: "not an ELF file".into() },
        Err(e) => return DsoSymbols::Opaque { reason: format!("{e:#}") },
    };
    let data = image.bytes();
    let info = match elf::inspect(data) {
        Ok(info) => info,
        Err(e) => return DsoSymbols::Opaque { reason: format!("{e:#}") },
    };
    if let (Some(want), Some(got)) = (expected_build_id, &info.build_id) {
        if want != got.as_slice() {
            return DsoSymbols::Opaque {
                reason: "its build-id differs from the recording's (the file was replaced since)".into(),
            };
        }
    }
    if info.has_symtab_functions {
        let table = elf::function_symbols(data, SymbolSource::Symtab, &info.loads).unwrap_or_default();
        return DsoSymbols::Elf { table, origin: Origin::Symtab, functions: FunctionBounds::none() };
    }
    let mut report = SearchReport::default();
    if let Some(found) = debug_search::find_debug_file(path, &info, roots, &mut report) {
        let t = elf::function_symbols(found.data.bytes(), SymbolSource::Symtab, &info.loads).unwrap_or_default();
        if !t.is_empty() {
            tracing::debug!("{path}: symbols from {}", found.found_at.display());
            return DsoSymbols::Elf {
                table: t,
                origin: Origin::DebugFile(found.found_at),
                functions: FunctionBounds::none(),
            };
        }
    }
    for why in &report.rejected {
        tracing::info!("{path}: debug file candidate rejected: {why}");
    }
    let table = elf::function_symbols(data, SymbolSource::Dynsym, &info.loads).unwrap_or_default();
    // A stripped file: its exported symbols name little of its code, the rest is grouped by function (the copy, and
    // with it the file, stays open: `.eh_frame`'s entries are read as lookups reach them; with a full symbol table
    // they hardly ever are, so it is not kept).
    let functions = FunctionBounds::of_elf(image, &info.loads);
    DsoSymbols::Elf { table, origin: Origin::Dynsym, functions }
}

/// The vDSO mapped into this process: the image every process gets from the running kernel, so it names the
/// target's `[vdso]` frames when the recording was made on this kernel.
pub fn own_vdso() -> DsoSymbols {
    let maps = crate::procfs::Process::open(std::process::id()).and_then(|me| me.maps()).unwrap_or_default();
    let range = maps.iter().find(|m| m.path == "[vdso]").map(|m| (m.start, m.end));
    let Some((start, end)) = range.filter(|(s, e)| e > s) else {
        return DsoSymbols::Opaque { reason: "this process has no vDSO".into() };
    };
    // SAFETY: the kernel maps [vdso] readable for the whole life of the process at exactly this range, and never
    // changes it.
    let image = unsafe { std::slice::from_raw_parts(start as usize as *const u8, (end - start) as usize) };
    let Ok(info) = elf::inspect(image) else {
        return DsoSymbols::Opaque { reason: "the vDSO is not a readable ELF image".into() };
    };
    let source = if info.has_symtab_functions { SymbolSource::Symtab } else { SymbolSource::Dynsym };
    let table = elf::function_symbols(image, source, &info.loads).unwrap_or_default();
    DsoSymbols::Elf { table, origin: Origin::Vdso, functions: FunctionBounds::none() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_vdso_names_clock_gettime() {
        let DsoSymbols::Elf { table, .. } = own_vdso() else { panic!("no vDSO symbols") };
        assert!(table.iter().any(|(_, _, n)| n.contains("clock_gettime")), "{} symbols", table.len());
    }
}
