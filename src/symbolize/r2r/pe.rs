//! From a PE file to its ReadyToRun header: PE headers (via the `object` crate) → CLI header (data directory 14,
//! ECMA-335 §II.25.3.3) → `ManagedNativeHeader` → `READYTORUN_HEADER` (dotnet/runtime `src/coreclr/inc/readytorun.h`):
//! signature `RTR`, major/minor version, flags, then `{type, rva, size}` sections. A composite image (many
//! assemblies compiled into one file) has no CLI header; its header is the `RTR_HEADER` export.

use anyhow::{bail, Context, Result};
use object::read::pe::{ImageNtHeaders, PeFile32, PeFile64, SectionTable};
use object::LittleEndian as LE;

pub const SECTION_RUNTIME_FUNCTIONS: u32 = 102;
pub const SECTION_METHOD_DEF_ENTRY_POINTS: u32 = 103;
pub const SECTION_INSTANCE_METHOD_ENTRY_POINTS: u32 = 109;
pub const SECTION_MANIFEST_METADATA: u32 = 112;
pub const SECTION_COMPONENT_ASSEMBLIES: u32 = 115;
pub const SECTION_OWNER_COMPOSITE_EXECUTABLE: u32 = 116;
pub const SECTION_HOT_COLD_MAP: u32 = 120;

const READYTORUN_SIGNATURE: u32 = 0x0052_5452;
const READYTORUN_FLAG_COMPONENT: u32 = 0x20;
const COMIMAGE_FLAGS_IL_LIBRARY: u32 = 0x4;
/// Far more than any real image has (about 20); a bigger count means a corrupt header.
const MAX_SECTIONS: u32 = 256;

/// The CPU the native code is for. ReadyToRun images XOR the PE machine with an OS tag (pedecoder.h
/// `IMAGE_FILE_MACHINE_NATIVE_OS_OVERRIDE`: Linux 0x7B79, Apple 0x4644, FreeBSD 0xADC4, NetBSD 0x1993, SunOS 0x1992).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Machine {
    X64,
    Arm64,
    X86,
    Arm,
    LoongArch64,
    RiscV64,
}

impl Machine {
    fn from_coff(raw: u16) -> Option<Machine> {
        [0u16, 0x7B79, 0x4644, 0xADC4, 0x1993, 0x1992].iter().find_map(|os| match raw ^ os {
            0x8664 => Some(Machine::X64),
            0xAA64 => Some(Machine::Arm64),
            0x014C => Some(Machine::X86),
            0x01C4 => Some(Machine::Arm),
            0x6264 => Some(Machine::LoongArch64),
            0x5064 => Some(Machine::RiscV64),
            _ => None,
        })
    }

    /// Bytes per RUNTIME_FUNCTION: x64 stores `{begin, end, unwind}`, the others `{begin, unwind}`.
    pub fn runtime_function_size(self) -> u32 {
        if self == Machine::X64 {
            12
        } else {
            8
        }
    }
}

/// The RVA of a file offset, through the section whose raw data holds it.
pub fn rva_of_file_offset(sections: &[PeSection], offset: u64) -> Option<u32> {
    sections.iter().find_map(|s| s.rva_of_file_offset(offset))
}

/// One PE section as mapped: RVA range and the file bytes backing it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeSection {
    pub rva: u32,
    pub virtual_size: u32,
    pub file_offset: u32,
    pub file_size: u32,
}

impl PeSection {
    /// The RVA of a file offset inside this section's raw data.
    pub fn rva_of_file_offset(&self, offset: u64) -> Option<u32> {
        let within = offset.checked_sub(self.file_offset as u64)?;
        // Raw data past the virtual size is file alignment padding, not mapped at an RVA of this section.
        let mapped = if self.virtual_size == 0 { self.file_size } else { self.file_size.min(self.virtual_size) };
        (within < mapped as u64).then(|| self.rva.checked_add(within as u32))?
    }

    /// The file offset of an RVA inside this section's raw data (where a uprobe on that code goes).
    pub fn file_offset_of_rva(&self, rva: u32) -> Option<u64> {
        let within = rva.checked_sub(self.rva)?;
        let mapped = if self.virtual_size == 0 { self.file_size } else { self.file_size.min(self.virtual_size) };
        (within < mapped).then(|| self.file_offset as u64 + within as u64)
    }
}

#[derive(Debug, Clone, Copy)]
pub struct R2rSection {
    pub kind: u32,
    pub rva: u32,
    pub size: u32,
}

pub struct Headers {
    pub machine: Machine,
    pub sections: Vec<PeSection>,
    pub major: u16,
    pub minor: u16,
    pub flags: u32,
    pub r2r_sections: Vec<R2rSection>,
    /// The ECMA metadata blob (file range); `None` for a composite image.
    pub metadata: Option<(u32, u32)>,
    pub composite: bool,
    /// Component assemblies' R2R sections (a composite image's per-assembly headers), in component order.
    pub components: Vec<Vec<R2rSection>>,
}

impl Headers {
    pub fn section(&self, kind: u32) -> Option<R2rSection> {
        self.r2r_sections.iter().find(|s| s.kind == kind).copied()
    }

    /// File offset of an RVA, and how many file bytes follow it in its section.
    pub fn file_range(&self, rva: u32) -> Option<(u32, u32)> {
        self.sections.iter().find_map(|s| {
            let within = rva.checked_sub(s.rva)?;
            (within < s.file_size).then(|| (s.file_offset + within, s.file_size - within))
        })
    }

    /// File range `(start, end)` of an R2R section, checked to lie within its PE section's raw data.
    pub fn section_file_range(&self, section: R2rSection) -> Option<(u32, u32)> {
        let (start, available) = self.file_range(section.rva)?;
        (section.size <= available).then(|| (start, start + section.size))
    }
}

fn u16_at(data: &[u8], at: u32) -> Option<u16> {
    let at = at as usize;
    Some(u16::from_le_bytes(data.get(at..at.checked_add(2)?)?.try_into().ok()?))
}

fn u32_at(data: &[u8], at: u32) -> Option<u32> {
    let at = at as usize;
    Some(u32::from_le_bytes(data.get(at..at.checked_add(4)?)?.try_into().ok()?))
}

pub fn parse(data: &[u8]) -> Result<Headers> {
    with_pe(data, |machine, table, pe| parse_pe(data, machine, table, pe, true))
}

/// The file range of the ECMA metadata of any .NET assembly, IL-only or ReadyToRun.
pub fn metadata_range(data: &[u8]) -> Result<(u32, u32)> {
    let headers = with_pe(data, |machine, table, pe| parse_pe(data, machine, table, pe, false))?;
    headers.metadata.context("not a .NET assembly: the PE file has no CLI header")
}

fn with_pe<T>(data: &[u8], f: impl FnOnce(u16, SectionTable, &dyn PeView) -> Result<T>) -> Result<T> {
    if data.get(..2) != Some(b"MZ") {
        bail!("not a PE file (no MZ header): not a .NET assembly");
    }
    match object::read::pe::optional_header_magic(data) {
        Ok(object::pe::IMAGE_NT_OPTIONAL_HDR64_MAGIC) => {
            let pe = PeFile64::parse(data).context("malformed PE32+ headers")?;
            f(pe.nt_headers().file_header().machine.get(LE).0, pe.section_table(), &pe)
        }
        Ok(object::pe::IMAGE_NT_OPTIONAL_HDR32_MAGIC) => {
            let pe = PeFile32::parse(data).context("malformed PE32 headers")?;
            f(pe.nt_headers().file_header().machine.get(LE).0, pe.section_table(), &pe)
        }
        _ => bail!("malformed PE headers: not a .NET assembly"),
    }
}

/// What the two PE flavours share for our purposes.
trait PeView {
    fn directory(&self, index: usize) -> Option<(u32, u32)>;
    fn rtr_header_export(&self) -> Option<u32>;
}

impl<'data, Pe: ImageNtHeaders> PeView for object::read::pe::PeFile<'data, Pe, &'data [u8]> {
    fn directory(&self, index: usize) -> Option<(u32, u32)> {
        let dir = self.data_directory(index)?;
        Some((dir.virtual_address.get(LE), dir.size.get(LE)))
    }

    fn rtr_header_export(&self) -> Option<u32> {
        let table = self.export_table().ok()??;
        let exports = table.exports().ok()?;
        exports.iter().find(|e| e.name == Some(&b"RTR_HEADER"[..])).and_then(|e| match e.target {
            object::read::pe::ExportTarget::Address(rva) => Some(rva),
            _ => None,
        })
    }
}

/// With `want_r2r` false, stops after the CLI header (for [`metadata_range`]).
fn parse_pe(data: &[u8], coff_machine: u16, table: SectionTable, pe: &dyn PeView, want_r2r: bool) -> Result<Headers> {
    let sections: Vec<PeSection> = table
        .iter()
        .map(|s| PeSection {
            rva: s.virtual_address.get(LE),
            virtual_size: s.virtual_size.get(LE),
            file_offset: s.pointer_to_raw_data.get(LE),
            file_size: s
                .size_of_raw_data
                .get(LE)
                .min((data.len() as u64).saturating_sub(s.pointer_to_raw_data.get(LE) as u64) as u32),
        })
        .collect();
    let mut headers = Headers {
        machine: Machine::X64,
        sections,
        major: 0,
        minor: 0,
        flags: 0,
        r2r_sections: Vec::new(),
        metadata: None,
        composite: false,
        components: Vec::new(),
    };
    let cli =
        pe.directory(object::pe::IMAGE_DIRECTORY_ENTRY_COM_DESCRIPTOR).filter(|&(rva, size)| rva != 0 && size != 0);
    let header_rva = match cli {
        Some((cli_rva, _)) => {
            let (cli_at, available) = headers.file_range(cli_rva).context("the CLI header lies outside the file")?;
            if available < 72 {
                bail!("the CLI header is cut short");
            }
            let metadata_rva = u32_at(data, cli_at + 8).unwrap_or(0);
            let metadata_size = u32_at(data, cli_at + 12).unwrap_or(0);
            let cor_flags = u32_at(data, cli_at + 16).unwrap_or(0);
            let native_header_rva = u32_at(data, cli_at + 64).unwrap_or(0);
            let native_header_size = u32_at(data, cli_at + 68).unwrap_or(0);
            let (md_at, md_available) =
                headers.file_range(metadata_rva).context("the metadata directory lies outside the file")?;
            if metadata_size > md_available {
                bail!("the metadata directory runs past its section");
            }
            headers.metadata = Some((md_at, md_at + metadata_size));
            if !want_r2r {
                return Ok(headers);
            }
            if cor_flags & COMIMAGE_FLAGS_IL_LIBRARY == 0 || native_header_rva == 0 || native_header_size == 0 {
                bail!(
                    "IL-only assembly: it has no ReadyToRun code (its methods are JIT-compiled and named by the \
                     runtime's perf map or jitdump)"
                );
            }
            native_header_rva
        }
        None => {
            headers.composite = true;
            pe.rtr_header_export().context(
                "not a .NET assembly: the PE file has neither a CLI header nor an RTR_HEADER export (native DLL?)",
            )?
        }
    };
    headers.machine = Machine::from_coff(coff_machine)
        .with_context(|| format!("ReadyToRun code for an unknown machine {coff_machine:#06x}"))?;
    let (at, available) = headers.file_range(header_rva).context("the ReadyToRun header lies outside the file")?;
    if u32_at(data, at) != Some(READYTORUN_SIGNATURE) || available < 16 {
        bail!("no ReadyToRun header signature ('RTR') where the CLI header points: not a ReadyToRun image");
    }
    headers.major = u16_at(data, at + 4).unwrap_or(0);
    headers.minor = u16_at(data, at + 6).unwrap_or(0);
    headers.flags = u32_at(data, at + 8).unwrap_or(0);
    headers.r2r_sections = read_sections(data, at + 12, available - 12)?;
    if headers.flags & READYTORUN_FLAG_COMPONENT != 0 {
        let owner = headers
            .section(SECTION_OWNER_COMPOSITE_EXECUTABLE)
            .and_then(|s| headers.section_file_range(s))
            .and_then(|(start, end)| data.get(start as usize..end as usize))
            .map(|name| String::from_utf8_lossy(name).trim_end_matches('\0').to_string())
            .unwrap_or_default();
        bail!("component of the composite ReadyToRun image '{owner}': its code is in that file; parse it instead");
    }
    if headers.composite {
        if let Some(section) = headers.section(SECTION_COMPONENT_ASSEMBLIES) {
            // READYTORUN_COMPONENT_ASSEMBLIES_ENTRY: {CorHeader rva,size; ReadyToRunCoreHeader rva,size}
            let (start, end) = headers.section_file_range(section).context("component assembly list out of bounds")?;
            let mut entry = start;
            while entry + 16 <= end && headers.components.len() < 4096 {
                let core_rva = u32_at(data, entry + 8).unwrap_or(0);
                let sections = headers
                    .file_range(core_rva)
                    .and_then(|(core_at, available)| read_sections(data, core_at + 4, available.checked_sub(4)?).ok())
                    .unwrap_or_default();
                headers.components.push(sections);
                entry += 16;
            }
        }
    }
    Ok(headers)
}

/// A section array: `u32 count` at `at`, then `count` entries of `{u32 type, u32 rva, u32 size}`.
fn read_sections(data: &[u8], at: u32, available: u32) -> Result<Vec<R2rSection>> {
    let count = u32_at(data, at).context("ReadyToRun header is cut short")?;
    if count > MAX_SECTIONS || 4 + count as u64 * 12 > available as u64 {
        bail!("ReadyToRun header claims {count} sections: corrupt header");
    }
    Ok((0..count)
        .filter_map(|i| {
            let entry = at + 4 + i * 12;
            Some(R2rSection {
                kind: u32_at(data, entry)?,
                rva: u32_at(data, entry + 4)?,
                size: u32_at(data, entry + 8)?,
            })
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One mapping of the image file: `(start, end, file offset of start)`.
    type FileMapping = (u64, u64, u64);

    /// The rule of `r2r`'s docs: the mapping that holds `ip` gives its file offset (as the symbolizer takes it from
    /// a sample's MMAP2 record), the section table its RVA.
    fn rva_of(ip: u64, mappings: &[FileMapping], sections: &[PeSection]) -> Option<u32> {
        let &(start, _, offset) = mappings.iter().find(|&&(start, end, _)| start <= ip && ip < end)?;
        rva_of_file_offset(sections, offset + (ip - start))
    }

    /// The .NET 8.0.4 CoreLib layout seen in /proc/PID/maps (see `r2r`'s docs).
    #[test]
    fn dotnet8_corelib_layout() {
        let sections = [
            PeSection { rva: 0x10200, virtual_size: 0x93e77c, file_offset: 0x200, file_size: 0x93e800 },
            PeSection { rva: 0x96ea00, virtual_size: 0x2e430a, file_offset: 0x93ea00, file_size: 0x2e4400 },
        ];
        let base = 0x7fb9_f6e7_0000u64;
        let maps = [
            (0x7f79_4a80_0000, 0x7f79_4b42_d000, 0), // flat r--s view
            (base, base + 0x1000, 0),
            (base + 0x10000, base + 0x94f000, 0),
            (base + 0x96e000, base + 0xc53000, 0x93e000),
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
            (base, base + 0x1000, 0),
            (base + 0x10000, base + 0x34000, 0),
            (0x7f78_cbb0_3000, 0x7f78_cc39_5000, 0x23000),
        ];
        assert_eq!(rva_of(base + 0x43210, &maps, &sections), Some(0x43210));
        assert_eq!(rva_of(base + 0x10204, &maps, &sections), Some(0x10204));
    }
}
