//! From an instruction pointer in a live process to an RVA of a ReadyToRun image.
//!
//! CoreCLR on Linux (PAL `MAPMapPEFile`) reserves the image's virtual size, maps the PE headers at the base and then
//! each section at `base + align_down(VirtualAddress)` from file offset `align_down(PointerToRawData)`. crossgen2
//! lays sections out so `VirtualAddress ≡ PointerToRawData (mod page size)`, so within every such mapping
//! `file offset − RVA` is constant. The robust rule is therefore:
//!
//! `file offset = mapping.file_offset + (ip − mapping.start)`, then `RVA` = that offset translated through the PE
//! section table (`offset − PointerToRawData + VirtualAddress` of the section holding it).
//!
//! "ip − start of the mapping at file offset 0" is *not* safe: the first section is also mapped from file offset 0,
//! one page-aligned step above the base. Observed in /proc/PID/maps of a running app on this machine:
//! * .NET 8.0.4 CoreLib (`.text` VA 0x10200, raw 0x200): `r--p 0` at base (headers), `r-xp 0` at base+0x10000
//!   (`.text`!), `rw-p 0x93e000` at base+0x96e000 (`.data`); plus a separate flat `r--s 0` view of the whole file.
//! * .NET Core 3.1.23 CoreLib (`.data` first at VA 0x10200, `.text` VA 0x43200 raw 0x23200): `r--p 0` at base,
//!   `rw-p 0` at base+0x10000 (`.data`), `r-xp 0x23000` at base+0x43000 (`.text`).
//!
//! In both, the rule above gives `RVA = ip − base` with `base` the header mapping that perfinfo-PID.map reports.
//! It needs no knowledge of which mapping holds the headers and works for any number of loads of the same file
//! (each `ip` is translated through the mapping that contains it). perf's MMAP2 records carry the same
//! `(start, len, pgoff)` triple, so recorded data can be translated offline the same way.

use super::pe::PeSection;

/// One mapping of the image file in the process (`/proc/PID/maps` line or perf MMAP record).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileMapping {
    pub start: u64,
    pub end: u64,
    /// Offset in the file of the byte mapped at `start`.
    pub file_offset: u64,
}

/// The RVA `ip` executes, given the process's mappings of the image file and the image's PE sections
/// ([`R2rImage::sections`](super::R2rImage::sections)). `None` when no mapping holds `ip` or the file offset is
/// not inside any section's raw data (headers, padding).
pub fn rva_of(ip: u64, mappings: &[FileMapping], sections: &[PeSection]) -> Option<u32> {
    let mapping = mappings.iter().find(|m| m.start <= ip && ip < m.end)?;
    let offset = mapping.file_offset.checked_add(ip - mapping.start)?;
    sections.iter().find_map(|s| s.rva_of_file_offset(offset))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The .NET 8.0.4 CoreLib layout seen in /proc/PID/maps (see the module docs).
    #[test]
    fn dotnet8_corelib_layout() {
        let sections = [
            PeSection { rva: 0x10200, virtual_size: 0x93e77c, file_offset: 0x200, file_size: 0x93e800 },
            PeSection { rva: 0x96ea00, virtual_size: 0x2e430a, file_offset: 0x93ea00, file_size: 0x2e4400 },
        ];
        let base = 0x7fb9_f6e7_0000u64;
        let maps = [
            FileMapping { start: 0x7f79_4a80_0000, end: 0x7f79_4b42_d000, file_offset: 0 }, // flat r--s view
            FileMapping { start: base, end: base + 0x1000, file_offset: 0 },
            FileMapping { start: base + 0x10000, end: base + 0x94f000, file_offset: 0 },
            FileMapping { start: base + 0x96e000, end: base + 0xc53000, file_offset: 0x93e000 },
        ];
        assert_eq!(rva_of(base + 0x12345, &maps, &sections), Some(0x12345));
        assert_eq!(rva_of(base + 0x96ea10, &maps, &sections), Some(0x96ea10));
        // The header page is not code.
        assert_eq!(rva_of(base + 0x10, &maps, &sections), None);
        assert_eq!(rva_of(base - 1, &maps, &sections), None);
    }

    /// The .NET Core 3.1.23 CoreLib layout: `.data` first, `.text` mapped from a non-zero offset.
    #[test]
    fn dotnet31_corelib_layout() {
        let sections = [
            PeSection { rva: 0x10200, virtual_size: 0x22ed0, file_offset: 0x200, file_size: 0x23000 },
            PeSection { rva: 0x43200, virtual_size: 0x891643, file_offset: 0x23200, file_size: 0x891800 },
        ];
        let base = 0x7f78_cbac_0000u64;
        let maps = [
            FileMapping { start: base, end: base + 0x1000, file_offset: 0 },
            FileMapping { start: base + 0x10000, end: base + 0x34000, file_offset: 0 },
            FileMapping { start: 0x7f78_cbb0_3000, end: 0x7f78_cc39_5000, file_offset: 0x23000 },
        ];
        assert_eq!(rva_of(base + 0x43210, &maps, &sections), Some(0x43210));
        assert_eq!(rva_of(base + 0x10204, &maps, &sections), Some(0x10204));
    }
}
