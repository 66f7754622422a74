//! Function symbols of an ELF file (`.symtab`, else `.dynsym`), its build-id and debuglink, and its loadable
//! segments, which turn a file offset (what a mapping tells us) into the link-time address symbols are given in.
//!
//! Symbols are returned in *file-offset* space: `addr - mapping.start + mapping.pgoff` is then all a lookup needs,
//! whatever the load bias (PIE executables, shared libraries), and captured tables keep the same key.

use super::file_copy::FileCopy;
use super::symbol_table::{SymbolTable, SymbolTableBuilder};
use anyhow::{Context, Result};
use object::elf as abi;
use object::read::elf::{FileHeader, SectionHeader};
use object::{Object, ObjectSegment, ObjectSymbol, ReadRef, SectionIndex, SymbolKind, SymbolSection};
use std::fs::File;

pub const ELF_MAGIC: &[u8; 4] = b"\x7fELF";
/// Size given to a last zero-size symbol, which has no successor to end it.
const OPEN_ENDED_SIZE: u64 = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoadSegment {
    pub offset: u64,
    pub vaddr: u64,
    pub filesz: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ElfInfo {
    pub build_id: Option<Vec<u8>>,
    /// `.gnu_debuglink`: file name of the split debug file and the CRC-32 of its contents.
    pub debuglink: Option<(String, u32)>,
    pub loads: Vec<LoadSegment>,
    /// Whether `.symtab` holds any function.
    pub has_symtab_functions: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SymbolSource {
    Symtab,
    Dynsym,
}

/// The parts of an ELF file that naming reads (headers, section headers, symbol and string tables, notes, the
/// debuglink) in a [`FileCopy`] of it, read with a few large reads; the rest stays unread until a later reader (the
/// function bounds of `.eh_frame`) reaches it.
pub struct ElfImage {
    copy: FileCopy,
}

/// Larger files are not read (no shared library or debug file comes near it; a planted sparse file could).
const MAX_ELF_LEN: u64 = 4 << 30;

impl ElfImage {
    /// `None` when the file is not ELF.
    pub fn read(file: File) -> Result<Option<ElfImage>> {
        let len = file.metadata().context("cannot stat the file")?.len();
        anyhow::ensure!(len <= MAX_ELF_LEN, "{len} bytes is more than an ELF file profcpu reads ({MAX_ELF_LEN})");
        if len < 4 {
            return Ok(None);
        }
        let mut image = ElfImage { copy: FileCopy::new(file, len)? };
        image.copy.fill(0, 64)?;
        if !is_elf(image.bytes()) {
            return Ok(None);
        }
        match image.bytes().get(4).map(|&class| abi::FileClass(class)) {
            Some(abi::ELFCLASS64) => image.fill_tables::<abi::FileHeader64<object::Endianness>>()?,
            _ => image.fill_tables::<abi::FileHeader32<object::Endianness>>()?,
        }
        Ok(Some(image))
    }

    pub fn bytes(&self) -> &[u8] {
        self.copy.bytes()
    }

    /// The file the image was read from.
    pub fn file(&self) -> &File {
        self.copy.file()
    }

    /// The copy, for reading more of the file.
    pub fn into_copy(self) -> FileCopy {
        self.copy
    }

    fn fill_tables<Elf: FileHeader<Endian = object::Endianness>>(&mut self) -> Result<()> {
        let header = Elf::parse(self.bytes()).context("unreadable ELF header")?;
        let endian = header.endian().context("unreadable ELF header")?;
        let phdrs = header.e_phentsize(endian) as u64 * header.e_phnum(endian) as u64;
        let shdrs = header.e_shentsize(endian) as u64 * header.e_shnum(endian) as u64;
        let (phoff, shoff) = (header.e_phoff(endian).into(), header.e_shoff(endian).into());
        self.copy.fill(phoff, phdrs)?;
        self.copy.fill(shoff, shdrs)?;
        // Section names first: a PROGBITS section is read only when it is the debuglink.
        let names = {
            let header = Elf::parse(self.bytes()).context("unreadable ELF header")?;
            let Ok(sections) = header.sections(endian, self.bytes()) else { return Ok(()) };
            let index = header.shstrndx(endian, self.bytes()).ok();
            index.and_then(|i| sections.section(SectionIndex(i as usize)).ok()).and_then(|s| s.file_range(endian))
        };
        if let Some((offset, len)) = names {
            self.copy.fill(offset, len)?;
        }
        let wanted = [abi::SHT_SYMTAB, abi::SHT_DYNSYM, abi::SHT_STRTAB, abi::SHT_NOTE, abi::SHT_PROGBITS];
        let mut ranges: Vec<(u64, u64)> = Vec::new();
        let header = Elf::parse(self.bytes()).context("unreadable ELF header")?;
        let sections = header.sections(endian, self.bytes()).context("unreadable ELF section headers")?;
        for section in sections.iter() {
            let kind = section.sh_type(endian);
            if !wanted.contains(&kind) {
                continue;
            }
            // Of the PROGBITS sections, the debuglink, and `.debug_frame` (call frame information a debug file may be
            // the only holder of).
            let name = sections.section_name(endian, section);
            if kind == abi::SHT_PROGBITS && name != Ok(b".gnu_debuglink") && name != Ok(b".debug_frame") {
                continue;
            }
            ranges.extend(section.file_range(endian));
        }
        for (offset, len) in ranges {
            self.copy.fill(offset, len)?;
        }
        Ok(())
    }
}

/// The segments of `file` that have bytes in it, by address.
pub fn load_segments<'data, R: ReadRef<'data>>(file: &object::File<'data, R>) -> Vec<LoadSegment> {
    let mut loads: Vec<LoadSegment> = file
        .segments()
        .map(|s| {
            let (offset, filesz) = s.file_range();
            LoadSegment { offset, vaddr: s.address(), filesz }
        })
        .filter(|s| s.filesz > 0)
        .collect();
    loads.sort_by_key(|s| s.vaddr);
    loads
}

/// Whether the bytes start like an ELF file (cheap check before parsing; .NET maps many PE files too).
pub fn is_elf<'data, R: ReadRef<'data>>(data: R) -> bool {
    data.read_bytes_at(0, 4).is_ok_and(|m| m == ELF_MAGIC)
}

/// Reads headers, notes and the symbol table's presence, from an [`ElfImage`] (or any whole image in memory).
pub fn inspect<'data, R: ReadRef<'data>>(data: R) -> Result<ElfInfo> {
    let file = object::File::parse(data).context("unreadable ELF")?;
    let build_id = file.build_id().ok().flatten().filter(|b| !b.is_empty()).map(<[u8]>::to_vec);
    let debuglink = file
        .gnu_debuglink()
        .ok()
        .flatten()
        .map(|(name, crc)| (String::from_utf8_lossy(name).into_owned(), crc))
        .filter(|(name, _)| !name.is_empty() && !name.contains('/'));
    let loads = load_segments(&file);
    let has_symtab_functions = file.symbols().any(|s| is_function(&s));
    Ok(ElfInfo { build_id, debuglink, loads, has_symtab_functions })
}

fn is_function<'data, S: ObjectSymbol<'data>>(s: &S) -> bool {
    if !s.is_definition() || s.address() == 0 || !matches!(s.section(), SymbolSection::Section(_)) {
        return false;
    }
    match s.kind() {
        SymbolKind::Text => true,
        // Assembly labels without a type (perf keeps these as well), but not compiler-local ones.
        SymbolKind::Unknown => {
            s.name_bytes().is_ok_and(|n| !n.is_empty() && !n.starts_with(b".L") && !n.starts_with(b"$"))
        }
        _ => false,
    }
}

/// Preference among symbols at one address (lower wins): sized over zero-size, functions over labels, global over
/// weak over local, fewer leading underscores (`memcpy` over `__memcpy_avx_unaligned`), shorter, earlier in the
/// table. Packed into one number (in that order of importance; counts beyond their field are equal) so that sorting
/// thousands of symbols compares integers.
fn rank<'data, S: ObjectSymbol<'data>>(s: &S, name: &str, index: u32) -> u64 {
    let binding = if s.is_global() {
        0
    } else if s.is_weak() {
        1
    } else {
        2
    };
    let underscores = name.bytes().take_while(|&b| b == b'_').count().min(0xff) as u64;
    let len = name.len().min(0xf_ffff) as u64;
    ((s.size() == 0) as u64) << 63
        | ((s.kind() != SymbolKind::Text) as u64) << 62
        | binding << 60
        | underscores << 52
        | len << 32
        | index as u64
}

/// The file's function symbols from the given table, keyed by file offset (via `segments`, normally the file's own
/// PT_LOADs; a split debug file is read with the *binary's* segments).
pub fn function_symbols<'data, R: ReadRef<'data>>(
    data: R,
    source: SymbolSource,
    segments: &[LoadSegment],
) -> Result<SymbolTable> {
    use object::read::elf::{ElfFile32, ElfFile64};
    // The ELF reader itself rather than `object::File`, whose every call on a symbol first asks which format it is.
    let table = match object::FileKind::parse(data).context("unreadable ELF")? {
        object::FileKind::Elf64 => {
            let file = ElfFile64::<object::Endianness, R>::parse(data).context("unreadable ELF")?;
            match source {
                SymbolSource::Symtab => table_of(file.symbols(), segments),
                SymbolSource::Dynsym => table_of(file.dynamic_symbols(), segments),
            }
        }
        object::FileKind::Elf32 => {
            let file = ElfFile32::<object::Endianness, R>::parse(data).context("unreadable ELF")?;
            match source {
                SymbolSource::Symtab => table_of(file.symbols(), segments),
                SymbolSource::Dynsym => table_of(file.dynamic_symbols(), segments),
            }
        }
        _ => anyhow::bail!("not an ELF file"),
    };
    Ok(table)
}

fn table_of<'data, S: ObjectSymbol<'data>>(symbols: impl Iterator<Item = S>, segments: &[LoadSegment]) -> SymbolTable {
    // Per function symbol, its size and name, and a sort key: its file offset, then its rank.
    let mut found: Vec<(u64, &'data str)> = Vec::new();
    let mut keys: Vec<u128> = Vec::new();
    for s in symbols {
        if !is_function(&s) {
            continue;
        }
        let Ok(name) = s.name() else { continue };
        let Some(offset) = vaddr_to_offset(segments, s.address()) else { continue };
        let Ok(index) = u32::try_from(found.len()) else { break };
        let name = without_version(name);
        keys.push(u128::from(offset) << 64 | u128::from(rank(&s, name, index)));
        found.push((s.size(), name));
    }
    keys.sort_unstable();
    // The preferred symbol at each offset.
    keys.dedup_by_key(|key| *key >> 64);
    let mut table = SymbolTableBuilder::new(true);
    for (i, key) in keys.iter().enumerate() {
        let start = (key >> 64) as u64;
        let (size, name) = found[*key as u32 as usize];
        let end = if size > 0 {
            start.saturating_add(size)
        } else {
            keys.get(i + 1).map_or(start.saturating_add(OPEN_ENDED_SIZE), |next| (next >> 64) as u64)
        };
        table.push(start, end, name);
    }
    table.build()
}

/// A versioned dynamic name (`memcpy@@GLIBC_2.14`) without its version, which reads better.
fn without_version(name: &str) -> &str {
    // Names are short: a plain scan beats a searcher's setup.
    match name.as_bytes().windows(2).position(|pair| pair == b"@@") {
        Some(at) => &name[..at],
        None => name,
    }
}

/// The file offset of `vaddr`, through the PT_LOAD segment holding it (none when the offset would not fit in 64
/// bits: the headers are the file's, and a hostile one can say anything).
pub fn vaddr_to_offset(segments: &[LoadSegment], vaddr: u64) -> Option<u64> {
    let s = segments.iter().find(|s| vaddr >= s.vaddr && vaddr - s.vaddr < s.filesz)?;
    (vaddr - s.vaddr).checked_add(s.offset)
}

/// The debuglink CRC of a whole file, read in chunks: `.gnu_debuglink` uses zlib's CRC-32.
pub fn debuglink_crc_of(mut file: &std::fs::File) -> std::io::Result<u32> {
    use std::io::{Read, Seek};
    file.seek(std::io::SeekFrom::Start(0))?;
    let mut crc = crc32fast::Hasher::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            return Ok(crc.finalize());
        }
        crc.update(&buf[..n]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn self_exe() -> Vec<u8> {
        std::fs::read("/proc/self/exe").unwrap()
    }

    #[test]
    fn reads_this_test_binary() {
        let data = self_exe();
        let info = inspect(&data[..]).unwrap();
        assert!(!info.loads.is_empty());
        assert!(info.has_symtab_functions, "test binaries keep .symtab");
        let table = function_symbols(&data[..], SymbolSource::Symtab, &info.loads).unwrap();
        assert!(table.len() > 100);
        // This very function must be findable by its own file offset.
        let me = reads_this_test_binary as *const () as u64;
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let (start, pgoff) = maps
            .lines()
            .find_map(|l| {
                let mut f = l.split_whitespace();
                let range = f.next()?;
                let (s, e) = range.split_once('-')?;
                let (s, e) = (u64::from_str_radix(s, 16).ok()?, u64::from_str_radix(e, 16).ok()?);
                let off = u64::from_str_radix(f.nth(1)?, 16).ok()?;
                (me >= s && me < e).then_some((s, off))
            })
            .unwrap();
        let name = table.lookup(me - start + pgoff).unwrap().2;
        assert!(name.contains("reads_this_test_binary"), "{name}");
    }

    #[test]
    fn offsets_map_through_load_segments() {
        let segs = [
            LoadSegment { offset: 0, vaddr: 0, filesz: 0x1000 },
            LoadSegment { offset: 0x1000, vaddr: 0x401000, filesz: 0x2000 },
        ];
        assert_eq!(vaddr_to_offset(&segs, 0x401010), Some(0x1010));
        assert_eq!(vaddr_to_offset(&segs, 0x403000), None);
        assert_eq!(vaddr_to_offset(&segs, 0x10), Some(0x10));
        // Found by the elf fuzz target: a segment whose offset plus the address's distance into it overflows.
        let hostile = [LoadSegment { offset: u64::MAX - 4, vaddr: 0x1000, filesz: 0x100 }];
        assert_eq!(vaddr_to_offset(&hostile, 0x1010), None);
        assert_eq!(vaddr_to_offset(&hostile, 0x1002), Some(u64::MAX - 2));
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(inspect(&b"\x7fELF\x02\x01\x01"[..]).is_err());
        assert!(inspect(&b""[..]).is_err());
        let mut data = self_exe();
        data.truncate(4096);
        // A truncated ELF may parse partially or fail; either way it must not panic.
        if let Ok(info) = inspect(&data[..]) {
            let _ = function_symbols(&data[..], SymbolSource::Symtab, &info.loads);
        }
    }

    #[test]
    fn crc_matches_the_standard_check_value() {
        assert_eq!(crc32fast::hash(b"123456789"), 0xCBF4_3926, "the CRC .gnu_debuglink uses");
        let exe = std::fs::File::open("/proc/self/exe").unwrap();
        assert_eq!(debuglink_crc_of(&exe).unwrap(), crc32fast::hash(&self_exe()));
    }

    #[test]
    fn a_read_cache_over_a_file_gives_the_same_symbols() {
        let data = self_exe();
        let info = inspect(&data[..]).unwrap();
        let cache = object::ReadCache::new(std::fs::File::open("/proc/self/exe").unwrap());
        assert!(is_elf(&cache));
        assert_eq!(inspect(&cache).unwrap(), info);
        let a = function_symbols(&data[..], SymbolSource::Symtab, &info.loads).unwrap();
        let b = function_symbols(&cache, SymbolSource::Symtab, &info.loads).unwrap();
        assert_eq!(a.len(), b.len());
    }

    #[test]
    fn mutated_elf_files_never_panic() {
        // The headers and tables of a real ELF, damaged: parsing may fail, but never panic.
        let data = self_exe();
        let head = &data[..data.len().min(64 * 1024)];
        let mut rng = crate::random_inputs::Rng::new(0x5eed_0006);
        for input in rng.inputs(&[head, b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0"], 400) {
            if let Ok(info) = inspect(&input[..]) {
                let _ = function_symbols(&input[..], SymbolSource::Symtab, &info.loads);
                let _ = function_symbols(&input[..], SymbolSource::Dynsym, &info.loads);
            }
        }
    }
}
