//! Where the functions of an ELF file begin and end, from its `.eh_frame` call frame information: what a stripped
//! library (.NET 8's libcoreclr.so, most of a distribution's `.so` files) still says about code its symbol table
//! does not name. The symbolizer shows such code as one frame per function, `libcoreclr.so+0x<function start>`,
//! instead of one per sampled address, so a hot unnamed function is one box in the flame graph.
//!
//! Every FDE (frame description entry) of `.eh_frame` covers one function (or one part of it, such as a cold
//! block split off by the compiler): `[initial_location, initial_location + address_range)` in link-time
//! addresses. Spec: System V ABI AMD64 §4.2.4 / LSB Core "Exception Frames" (the DWARF CFI format with GCC's
//! pointer encodings); gimli parses it.
//!
//! The section is read on first use only: most libraries a profile touches have every sampled address named by
//! their symbols, and never need it. Its FDEs are then parsed only as lookups reach them, found through the
//! sorted table of `.eh_frame_hdr` (what unwinders search): libcoreclr.so has 16,000 FDEs, a profile a few dozen
//! of its functions. A file without that table (or with one in an encoding linkers do not write) has every FDE
//! parsed at once.

use super::elf::{vaddr_to_offset, ElfImage, LoadSegment};
use super::file_copy::FileCopy;
use super::ranges::{Range, RangeTable};
use gimli::{BaseAddresses, CieOrFde, EhFrame, EhFrameOffset, RunTimeEndian, UnwindSection};
use std::sync::{Mutex, OnceLock};

/// A larger `.eh_frame` is not read (the biggest real ones, a browser's, are tens of MB; a planted file could
/// claim anything).
const MAX_EH_FRAME_LEN: u64 = 256 << 20;

/// How far a lookup through `.eh_frame_hdr` walks past entries whose FDE does not count (does not parse, is empty,
/// or shares its start): real tables need a step or two.
const MAX_WALK: usize = 64;

/// Function ranges of one file, in file-offset space (like its symbols).
pub struct FunctionBounds {
    /// What to read on first use; taken once read.
    pending: Mutex<Option<Box<Pending>>>,
    table: OnceLock<Bounds>,
    /// The file's PT_LOAD segments (when read from the file): what a debug file found later needs to map its
    /// symbols to file offsets.
    loads: Vec<LoadSegment>,
}

struct Pending {
    /// The file, as far as its symbols were read.
    copy: FileCopy,
    /// File offset, size and link-time address of `.eh_frame`, and of `.eh_frame_hdr` if the file has one.
    eh_frame: Section,
    hdr: Option<Section>,
    loads: Vec<LoadSegment>,
    endian: RunTimeEndian,
    address_size: u8,
}

#[derive(Clone, Copy)]
struct Section {
    offset: u64,
    size: u64,
    address: u64,
}

enum Bounds {
    /// Every FDE's range (saved bounds, or a file without a usable `.eh_frame_hdr`).
    Table(RangeTable<()>),
    Indexed(Box<Indexed>),
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds::Table(RangeTable::default())
    }
}

/// `.eh_frame` with the table of `.eh_frame_hdr`: its FDEs by start address. Of `.eh_frame`, only the entries
/// lookups reach (each FDE and its CIE) are read from the file.
struct Indexed {
    copy: Mutex<FileCopy>,
    eh_frame: Section,
    endian: RunTimeEndian,
    address_size: u8,
    /// The table's entries: two 32-bit offsets from `hdr_address` each, the FDE's start and its own address.
    table: Vec<u8>,
    hdr_address: u64,
    loads: Vec<LoadSegment>,
}

impl std::fmt::Debug for FunctionBounds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.table.get() {
            Some(Bounds::Table(t)) => write!(f, "FunctionBounds({} functions)", t.len()),
            Some(Bounds::Indexed(i)) => write!(f, "FunctionBounds({} FDEs)", i.len()),
            None => f.write_str("FunctionBounds(not read yet)"),
        }
    }
}

impl FunctionBounds {
    /// No bounds known: unnamed addresses stay one frame each.
    pub fn none() -> FunctionBounds {
        FunctionBounds::known(RangeTable::default())
    }

    /// Bounds already known (a capture's saved ranges).
    pub fn known(table: RangeTable<()>) -> FunctionBounds {
        FunctionBounds { pending: Mutex::new(None), table: OnceLock::from(Bounds::Table(table)), loads: Vec::new() }
    }

    /// The bounds in the `.eh_frame` of the file `image` was read from, read when first asked for. `loads` are the
    /// file's PT_LOAD segments.
    pub fn of_elf(image: ElfImage, loads: &[LoadSegment]) -> FunctionBounds {
        let Some((eh_frame, hdr, endian, address_size)) = locate_eh_frame(image.bytes()) else {
            return FunctionBounds::none();
        };
        let copy = image.into_copy();
        let pending = Pending { copy, eh_frame, hdr, loads: loads.to_vec(), endian, address_size };
        FunctionBounds { pending: Mutex::new(Some(Box::new(pending))), table: OnceLock::new(), loads: loads.to_vec() }
    }

    /// The PT_LOAD segments of the file the bounds were read from (none for saved bounds).
    pub fn loads(&self) -> &[LoadSegment] {
        &self.loads
    }

    /// The function holding file offset `offset`: its `[start, end)` file offsets.
    pub fn lookup(&self, offset: u64) -> Option<(u64, u64)> {
        let table = self.table.get_or_init(|| {
            let pending = self.pending.lock().unwrap_or_else(|e| e.into_inner()).take();
            pending.map(|p| (*p).read()).unwrap_or_default()
        });
        match table {
            Bounds::Table(table) => table.lookup(offset).map(|r| (r.start, r.end)),
            Bounds::Indexed(indexed) => indexed.lookup(offset),
        }
    }
}

impl Pending {
    fn read(mut self) -> Bounds {
        let hdr = self.hdr.and_then(|hdr| Some((hdr_table(whole(&mut self.copy, hdr)?, self.endian)?, hdr.address)));
        if let Some((table, hdr_address)) = hdr {
            return Bounds::Indexed(Box::new(Indexed {
                copy: Mutex::new(self.copy),
                eh_frame: self.eh_frame,
                endian: self.endian,
                address_size: self.address_size,
                table,
                hdr_address,
                loads: self.loads,
            }));
        }
        let Some(eh_frame) = whole(&mut self.copy, self.eh_frame) else { return Bounds::default() };
        Bounds::Table(every_fde(eh_frame, self.eh_frame.address, self.endian, self.address_size, &self.loads))
    }
}

/// All of a CFI section, read from the file.
fn whole(copy: &mut FileCopy, section: Section) -> Option<&[u8]> {
    if section.size > MAX_EH_FRAME_LEN {
        tracing::debug!("a {}-byte CFI section is not read", section.size);
        return None;
    }
    if let Err(e) = copy.fill(section.offset, section.size) {
        tracing::debug!("cannot read CFI: {e:#}");
        return None;
    }
    copy.bytes()
        .get(usize::try_from(section.offset).ok()?..usize::try_from(section.offset.checked_add(section.size)?).ok()?)
}

/// Every FDE's range in file offsets.
fn every_fde(
    eh_frame: &[u8],
    address: u64,
    endian: RunTimeEndian,
    address_size: u8,
    loads: &[LoadSegment],
) -> RangeTable<()> {
    let ranges = fde_ranges(eh_frame, address, endian, address_size)
        .into_iter()
        .filter_map(|(start, len)| {
            let offset = vaddr_to_offset(loads, start)?;
            Some(Range { start: offset, end: offset.checked_add(len)?, value: () })
        })
        .collect();
    RangeTable::from_unsorted(ranges)
}

/// `.eh_frame_hdr`'s search table: version 1, the table as linkers write it (`DW_EH_PE_datarel | DW_EH_PE_sdata4`:
/// pairs of signed 32-bit offsets from the header), a 4-byte pointer to `.eh_frame` and a 4-byte count before it.
/// `None` for anything else.
fn hdr_table(hdr: &[u8], endian: RunTimeEndian) -> Option<Vec<u8>> {
    const DATAREL_SDATA4: u8 = 0x3b;
    let &[1, eh_frame_ptr_enc, count_enc, DATAREL_SDATA4, ..] = hdr else { return None };
    // udata4 or sdata4, whether absolute, pc- or data-relative: four bytes each.
    let four_bytes = |enc: u8| matches!(enc & 0x0f, 0x03 | 0x0b);
    if !four_bytes(eh_frame_ptr_enc) || !four_bytes(count_enc) {
        return None;
    }
    let count = read_u32(hdr, 8, endian)? as usize;
    let table = hdr.get(12..12 + count.checked_mul(8)?)?;
    Some(table.to_vec())
}

fn read_u64(bytes: &[u8], at: usize, endian: RunTimeEndian) -> Option<u64> {
    let word: [u8; 8] = bytes.get(at..at.checked_add(8)?)?.try_into().ok()?;
    Some(match endian {
        RunTimeEndian::Little => u64::from_le_bytes(word),
        RunTimeEndian::Big => u64::from_be_bytes(word),
    })
}

fn read_u32(bytes: &[u8], at: usize, endian: RunTimeEndian) -> Option<u32> {
    let word: [u8; 4] = bytes.get(at..at + 4)?.try_into().ok()?;
    Some(match endian {
        RunTimeEndian::Little => u32::from_le_bytes(word),
        RunTimeEndian::Big => u32::from_be_bytes(word),
    })
}

impl Indexed {
    fn len(&self) -> usize {
        self.table.len() / 8
    }

    /// Entry `i`: the start it lists and the FDE's address.
    fn entry(&self, i: usize) -> (u64, u64) {
        let at = |n: usize| read_u32(&self.table, i * 8 + n, self.endian).unwrap_or(0) as i32 as i64;
        (self.hdr_address.wrapping_add_signed(at(0)), self.hdr_address.wrapping_add_signed(at(4)))
    }

    /// The range of entry `i`'s FDE, if it parses, starts where the table says and is not empty.
    fn fde(&self, i: usize) -> Option<(u64, u64)> {
        let (start, fde) = self.entry(i);
        let offset = fde.checked_sub(self.eh_frame.address)?;
        let mut copy = self.copy.lock().unwrap_or_else(|e| e.into_inner());
        let section = self.read_entry(&mut copy, offset)?;
        let mut eh_frame = EhFrame::new(section, self.endian);
        eh_frame.set_address_size(self.address_size);
        let bases = BaseAddresses::default().set_eh_frame(self.eh_frame.address);
        let parsed = eh_frame.fde_from_offset(&bases, EhFrameOffset(offset as usize), |section, bases, offset| {
            section.cie_from_offset(bases, offset)
        });
        let parsed = parsed.ok()?;
        (parsed.initial_address() == start && parsed.len() > 0).then(|| (start, parsed.len()))
    }

    /// Reads the FDE at `offset` in `.eh_frame`, and the CIE it points to, from the file: `.eh_frame` as far as it
    /// is read then.
    fn read_entry<'a>(&self, copy: &'a mut FileCopy, offset: u64) -> Option<&'a [u8]> {
        let cie_pointer_at = self.read_one(copy, offset)?;
        let cie_pointer = match cie_pointer_at - offset {
            4 => read_u32(self.section(copy)?, cie_pointer_at as usize, self.endian)? as u64,
            _ => read_u64(self.section(copy)?, cie_pointer_at as usize, self.endian)?,
        };
        self.read_one(copy, cie_pointer_at.checked_sub(cie_pointer)?)?;
        self.section(copy)
    }

    /// Reads the entry (CIE or FDE) at `offset` in `.eh_frame` from the file, and says where the field after its
    /// length is.
    fn read_one(&self, copy: &mut FileCopy, offset: u64) -> Option<u64> {
        let Section { offset: base, size, .. } = self.eh_frame;
        if offset >= size {
            return None;
        }
        let length_at = base.checked_add(offset)?;
        copy.fill(length_at, 12).ok()?;
        let (header, len) = match read_u32(self.section(copy)?, offset as usize, self.endian)? {
            // The 64-bit format: the length follows.
            0xffff_ffff => (12u64, read_u64(self.section(copy)?, offset as usize + 4, self.endian)?),
            len => (4, len as u64),
        };
        copy.fill(length_at, header.checked_add(len)?.min(size - offset)).ok()?;
        Some(offset + header)
    }

    /// `.eh_frame`, as far as it is read.
    fn section<'a>(&self, copy: &'a FileCopy) -> Option<&'a [u8]> {
        let Section { offset, size, .. } = self.eh_frame;
        copy.bytes().get(usize::try_from(offset).ok()?..usize::try_from(offset.checked_add(size)?).ok()?)
    }

    /// The number of entries listing a start at or below `addr` (the table is sorted by start).
    fn count_up_to(&self, addr: u64) -> usize {
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.entry(mid).0 <= addr {
                true => lo = mid + 1,
                false => hi = mid,
            }
        }
        lo
    }

    /// The entries listing the same start as entry `i`: `lo..hi` (at most [`MAX_WALK`] each side: a real table
    /// lists a start once or twice, a planted one could list one a million times).
    fn same_start(&self, i: usize) -> (usize, usize) {
        let start = self.entry(i).0;
        let (first, last) = (i.saturating_sub(MAX_WALK), (i + 1 + MAX_WALK).min(self.len()));
        let lo = (first..i).rev().find(|&j| self.entry(j).0 != start).map_or(first, |j| j + 1);
        let hi = (i + 1..last).find(|&j| self.entry(j).0 != start).unwrap_or(last);
        (lo, hi)
    }

    /// Of entries `lo..hi` (one start), the range of the FDE that counts: the last in `.eh_frame` that parses (the
    /// table of every FDE cuts the earlier ones to nothing).
    fn counted(&self, lo: usize, hi: usize) -> Option<(u64, u64)> {
        (lo..hi).filter_map(|j| Some((self.entry(j).1, self.fde(j)?))).max_by_key(|&(fde, _)| fde).map(|(_, r)| r)
    }

    /// As the table of every FDE would answer: the FDE with the highest start at or below the address, cut at the
    /// next FDE's start.
    fn lookup(&self, offset: u64) -> Option<(u64, u64)> {
        let segment = self.loads.iter().find(|s| offset >= s.offset && offset - s.offset < s.filesz)?;
        let addr = (offset - segment.offset).checked_add(segment.vaddr)?;
        let mut i = self.count_up_to(addr).checked_sub(1)?;
        let mut found = None;
        for _ in 0..MAX_WALK {
            let (lo, hi) = self.same_start(i);
            found = self.counted(lo, hi);
            if found.is_some() {
                break;
            }
            i = lo.checked_sub(1)?;
        }
        let (start, len) = found?;
        let mut end = start.checked_add(len)?;
        let mut next = self.count_up_to(start);
        for _ in 0..MAX_WALK {
            if next >= self.len() {
                break;
            }
            let (lo, hi) = self.same_start(next);
            if let Some((next_start, _)) = self.counted(lo, hi) {
                end = end.min(next_start);
                break;
            }
            next = hi;
        }
        // A damaged table (out of order) can give a start above the address or a next start below it.
        if !(start..end).contains(&addr) {
            return None;
        }
        // Back to file offsets through the segment the start lies in, which a damaged file may map elsewhere than
        // the one `offset` was found in: only a range that holds `offset` answers.
        let first = vaddr_to_offset(&self.loads, start)?;
        let last = first.checked_add(end - start)?;
        (first..last).contains(&offset).then_some((first, last))
    }
}

/// `.eh_frame`'s and `.eh_frame_hdr`'s file offset, size and address, and the file's byte order and address size.
fn locate_eh_frame(image: &[u8]) -> Option<(Section, Option<Section>, RunTimeEndian, u8)> {
    use object::{Object, ObjectSection};
    let file = object::File::parse(image).ok()?;
    let section = |name: &str| {
        let section = file.section_by_name(name)?;
        let (offset, size) = section.file_range()?;
        Some(Section { offset, size, address: section.address() })
    };
    let endian = if file.is_little_endian() { RunTimeEndian::Little } else { RunTimeEndian::Big };
    let address_size = if file.is_64() { 8 } else { 4 };
    Some((section(".eh_frame")?, section(".eh_frame_hdr"), endian, address_size))
}

/// `(start, length)` of every FDE in an `.eh_frame` section loaded at `address`. A damaged entry ends the walk
/// (its length field is what finds the next one); an FDE that does not parse is skipped.
fn fde_ranges(bytes: &[u8], address: u64, endian: RunTimeEndian, address_size: u8) -> Vec<(u64, u64)> {
    let mut eh_frame = EhFrame::new(bytes, endian);
    eh_frame.set_address_size(address_size);
    let bases = BaseAddresses::default().set_eh_frame(address);
    let mut entries = eh_frame.entries(&bases);
    let mut out = Vec::new();
    // Each CIE parsed once: a library has a few, shared by thousands of FDEs.
    let mut cies = rustc_hash::FxHashMap::default();
    while let Ok(Some(entry)) = entries.next() {
        let CieOrFde::Fde(partial) = entry else { continue };
        let fde = partial.parse(|section, bases, offset| {
            cies.entry(offset.0).or_insert_with(|| section.cie_from_offset(bases, offset)).clone()
        });
        if let Ok(fde) = fde {
            if fde.len() > 0 {
                out.push((fde.initial_address(), fde.len()));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(path: &str) -> ElfImage {
        ElfImage::read(std::fs::File::open(path).unwrap()).unwrap().unwrap()
    }

    /// This test binary's own functions: each one's FDE holds it, and the bounds agree with its symbol.
    #[test]
    fn functions_of_this_binary_are_found() {
        use object::{Object, ObjectSymbol, SymbolKind};
        let bytes = std::fs::read("/proc/self/exe").unwrap();
        let info = super::super::elf::inspect(&bytes[..]).unwrap();
        let elf = object::File::parse(&bytes[..]).unwrap();
        let functions: Vec<(u64, u64)> = elf
            .symbols()
            .filter(|s| s.kind() == SymbolKind::Text && s.size() >= 16)
            .filter_map(|s| Some((vaddr_to_offset(&info.loads, s.address())?, s.size())))
            .collect();
        let bounds = FunctionBounds::of_elf(image("/proc/self/exe"), &info.loads);
        let checked: Vec<&(u64, u64)> = functions.iter().step_by(50).take(200).collect();
        let agree =
            checked.iter().filter(|(start, size)| bounds.lookup(start + size / 2) == Some((*start, start + size)));
        let agree = agree.count();
        assert!(checked.len() >= 50, "only {} functions checked", checked.len());
        // Compilers emit an FDE per function; hand-written assembly may lack one.
        assert!(
            agree * 100 >= checked.len() * 95,
            "FDE bounds agree with the symbol table for {agree} of {}",
            checked.len()
        );
    }

    /// Lookups through `.eh_frame_hdr` answer as the table of every FDE, at each function's edges and middle, for
    /// this binary and libc.
    #[test]
    fn indexed_lookups_read_as_the_table_of_every_fde() {
        for path in ["/proc/self/exe", "/lib/x86_64-linux-gnu/libc.so.6"] {
            let bytes = std::fs::read(path).unwrap();
            let loads = super::super::elf::inspect(&bytes[..]).unwrap().loads;
            let bounds = FunctionBounds::of_elf(image(path), &loads);
            assert!(bounds.lookup(u64::MAX).is_none());
            let Some(Bounds::Indexed(indexed)) = bounds.table.get() else { panic!("{path}: no .eh_frame_hdr index") };
            let (eh_frame, hdr, endian, address_size) = locate_eh_frame(&bytes).unwrap();
            assert!(hdr.is_some());
            let section = &bytes[eh_frame.offset as usize..(eh_frame.offset + eh_frame.size) as usize];
            let every = every_fde(section, eh_frame.address, endian, address_size, &loads);
            assert!(every.len() > 100, "{path}: only {} FDEs", every.len());
            for r in every.iter() {
                for offset in [r.start, r.start + (r.end - r.start) / 2, r.end - 1, r.end, r.start.wrapping_sub(1)] {
                    let expected = every.lookup(offset).map(|r| (r.start, r.end));
                    assert_eq!(indexed.lookup(offset), expected, "{path} at {offset:#x}");
                }
            }
        }
    }

    /// Found by the elf fuzz target: load segments mapping one address range from two places in the file. A lookup
    /// found its address through one of them and mapped the function's start back through the other, answering a
    /// range that did not hold the offset asked about.
    #[test]
    fn a_range_found_through_another_segment_is_not_answered() {
        let path = "/proc/self/exe";
        let bytes = std::fs::read(path).unwrap();
        let mut loads = super::super::elf::inspect(&bytes[..]).unwrap().loads;
        let text = *loads.iter().max_by_key(|s| s.filesz).unwrap();
        // The same addresses again, from past the end of the file, listed first (where addresses are looked up).
        let beyond = LoadSegment { offset: bytes.len() as u64 + 0x10_0000, ..text };
        loads.insert(0, beyond);
        let bounds = FunctionBounds::of_elf(image(path), &loads);
        let mut answered = 0;
        for offset in (text.offset..text.offset + text.filesz).step_by(4099) {
            if let Some((start, end)) = bounds.lookup(offset) {
                assert!(start <= offset && offset < end, "{start:#x}..{end:#x} for {offset:#x}");
                answered += 1;
            }
        }
        // The copy past the end answers for its own offsets.
        let inside = beyond.offset + text.filesz / 2;
        let (start, end) = bounds.lookup(inside).expect("an FDE holds the middle of the text");
        assert!(start <= inside && inside < end);
        assert_eq!(answered, 0, "offsets of the shadowed segment were answered through the other");
    }

    #[test]
    fn garbage_sections_give_no_bounds_and_no_panic() {
        for bytes in [&b""[..], b"\x10\0\0\0\0\0\0\0\x01zR\0", &[0xff; 64]] {
            let _ = fde_ranges(bytes, 0x1000, RunTimeEndian::Little, 8);
        }
        let exe = std::fs::read("/proc/self/exe").unwrap();
        let (eh_frame, hdr, endian, address_size) = locate_eh_frame(&exe).unwrap();
        let (offset, size, address) = (eh_frame.offset as usize, eh_frame.size as usize, eh_frame.address);
        let section = &exe[offset..offset + size];
        let mut rng = crate::random_inputs::Rng::new(0x5eed_00e4);
        for input in rng.inputs(&[&section[..section.len().min(8192)]], 300) {
            let _ = fde_ranges(&input, address, endian, address_size);
        }
        assert!(FunctionBounds::none().lookup(0x1000).is_none());
        // Damaged search tables: any table, however unsorted or repetitive, answers each lookup in a few steps.
        let hdr = hdr.unwrap();
        let hdr_bytes = &exe[hdr.offset as usize..(hdr.offset + hdr.size) as usize];
        let loads = super::super::elf::inspect(&exe[..]).unwrap().loads;
        let one_entry = hdr_bytes[12..20].repeat(200_000);
        let mut tables: Vec<Vec<u8>> = vec![one_entry];
        for input in rng.inputs(&[&hdr_bytes[..hdr_bytes.len().min(4096)]], 300) {
            tables.extend(hdr_table(&input, endian));
        }
        let lookups = |indexed: &Indexed| {
            for offset in (0..exe.len() as u64).step_by(exe.len() / 64 + 1) {
                let _ = indexed.lookup(offset);
            }
        };
        let real_table = hdr_table(hdr_bytes, endian).unwrap();
        let mut indexed = Indexed {
            copy: Mutex::new(image("/proc/self/exe").into_copy()),
            eh_frame,
            endian,
            address_size,
            table: real_table.clone(),
            hdr_address: hdr.address,
            loads: loads.clone(),
        };
        for table in tables {
            indexed.table = table;
            lookups(&indexed);
        }
        // Damaged entries, read from the file as lookups reach them: lengths and CIE pointers that lead anywhere.
        let damaged = tempfile::NamedTempFile::new().unwrap();
        for input in rng.inputs(&[section], 30) {
            std::fs::write(damaged.path(), &input).unwrap();
            let file = std::fs::File::open(damaged.path()).unwrap();
            indexed.copy = Mutex::new(FileCopy::new(file, input.len() as u64).unwrap());
            indexed.eh_frame = Section { offset: 0, size: input.len() as u64, address };
            indexed.table = real_table.clone();
            lookups(&indexed);
        }
    }

    /// A lookup reads the entries it parses, not the whole of `.eh_frame`.
    #[test]
    fn lookups_read_little_of_the_section() {
        let path = "/lib/x86_64-linux-gnu/libc.so.6";
        let bytes = std::fs::read(path).unwrap();
        let loads = super::super::elf::inspect(&bytes[..]).unwrap().loads;
        let bounds = FunctionBounds::of_elf(image(path), &loads);
        let text = *loads.iter().max_by_key(|s| s.filesz).unwrap();
        let offsets: Vec<u64> = (1..=4).map(|i| text.offset + text.filesz / 5 * i).collect();
        assert!(offsets.iter().filter(|&&o| bounds.lookup(o).is_some()).count() >= 3);
        let Some(Bounds::Indexed(indexed)) = bounds.table.get() else { panic!("{path}: no .eh_frame_hdr index") };
        let copy = indexed.copy.lock().unwrap();
        let (start, end) = (indexed.eh_frame.offset, indexed.eh_frame.offset + indexed.eh_frame.size);
        let page = crate::prefault::page_size() as u64;
        let read = (start / page..end.div_ceil(page)).filter(|&p| copy.is_filled(p as usize)).count() as u64;
        let pages = end.div_ceil(page) - start / page;
        // Each lookup reads the pages of its FDE, of the next function's and of their CIE.
        assert!(read * 3 <= pages, "4 lookups read {read} of the section's {pages} pages");
    }
}
