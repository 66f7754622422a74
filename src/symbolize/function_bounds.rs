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
//! their symbols, and never need it.

use super::elf::{vaddr_to_offset, LoadSegment};
use super::ranges::{Range, RangeTable};
use gimli::{BaseAddresses, CieOrFde, EhFrame, RunTimeEndian, UnwindSection};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::{Mutex, OnceLock};

/// A larger `.eh_frame` is not read (the biggest real ones, a browser's, are tens of MB; a planted file could
/// claim anything).
const MAX_EH_FRAME_LEN: u64 = 256 << 20;

/// Function ranges of one file, in file-offset space (like its symbols).
pub struct FunctionBounds {
    /// What to read on first use; taken (and the file closed) once read.
    pending: Mutex<Option<Pending>>,
    table: OnceLock<RangeTable<()>>,
    /// The file's PT_LOAD segments (when read from the file): what a debug file found later needs to map its
    /// symbols to file offsets.
    loads: Vec<LoadSegment>,
}

struct Pending {
    file: File,
    /// File offset, size and link-time address of `.eh_frame`.
    offset: u64,
    size: u64,
    address: u64,
    loads: Vec<LoadSegment>,
    endian: RunTimeEndian,
    address_size: u8,
}

impl std::fmt::Debug for FunctionBounds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.table.get() {
            Some(t) => write!(f, "FunctionBounds({} functions)", t.len()),
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
        FunctionBounds { pending: Mutex::new(None), table: OnceLock::from(table), loads: Vec::new() }
    }

    /// The bounds in `file`'s `.eh_frame`, read when first asked for. `image` holds (at least) the file's ELF and
    /// section headers, `loads` its PT_LOAD segments.
    pub fn of_elf(file: File, image: &[u8], loads: &[LoadSegment]) -> FunctionBounds {
        let Some(pending) = locate_eh_frame(image).map(|(offset, size, address, endian, address_size)| Pending {
            file,
            offset,
            size,
            address,
            loads: loads.to_vec(),
            endian,
            address_size,
        }) else {
            return FunctionBounds::none();
        };
        FunctionBounds { pending: Mutex::new(Some(pending)), table: OnceLock::new(), loads: loads.to_vec() }
    }

    /// The PT_LOAD segments of the file the bounds were read from (none for saved bounds).
    pub fn loads(&self) -> &[LoadSegment] {
        &self.loads
    }

    /// The function holding file offset `offset`: its `[start, end)` file offsets.
    pub fn lookup(&self, offset: u64) -> Option<(u64, u64)> {
        let table = self.table.get_or_init(|| {
            let pending = self.pending.lock().unwrap_or_else(|e| e.into_inner()).take();
            pending.map(|p| p.read()).unwrap_or_default()
        });
        table.lookup(offset).map(|r| (r.start, r.end))
    }
}

impl Pending {
    fn read(self) -> RangeTable<()> {
        if self.size > MAX_EH_FRAME_LEN {
            tracing::debug!(".eh_frame of {} bytes not read", self.size);
            return RangeTable::default();
        }
        let mut bytes = vec![0u8; self.size as usize];
        if let Err(e) = self.file.read_exact_at(&mut bytes, self.offset) {
            tracing::debug!("cannot read .eh_frame: {e}");
            return RangeTable::default();
        }
        let ranges = fde_ranges(&bytes, self.address, self.endian, self.address_size)
            .into_iter()
            .filter_map(|(start, len)| {
                let offset = vaddr_to_offset(&self.loads, start)?;
                Some(Range { start: offset, end: offset.checked_add(len)?, value: () })
            })
            .collect();
        RangeTable::from_unsorted(ranges)
    }
}

/// `.eh_frame`'s file offset, size and address, and the file's byte order and address size.
fn locate_eh_frame(image: &[u8]) -> Option<(u64, u64, u64, RunTimeEndian, u8)> {
    use object::{Object, ObjectSection};
    let file = object::File::parse(image).ok()?;
    let section = file.section_by_name(".eh_frame")?;
    let (offset, size) = section.file_range()?;
    let endian = if file.is_little_endian() { RunTimeEndian::Little } else { RunTimeEndian::Big };
    let address_size = if file.is_64() { 8 } else { 4 };
    Some((offset, size, section.address(), endian, address_size))
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

    fn open_self() -> (File, Vec<u8>) {
        let bytes = std::fs::read("/proc/self/exe").unwrap();
        (File::open("/proc/self/exe").unwrap(), bytes)
    }

    /// This test binary's own functions: each one's FDE holds it, and the bounds agree with its symbol.
    #[test]
    fn functions_of_this_binary_are_found() {
        use object::{Object, ObjectSymbol, SymbolKind};
        let (file, bytes) = open_self();
        let info = super::super::elf::inspect(&bytes[..]).unwrap();
        let elf = object::File::parse(&bytes[..]).unwrap();
        let functions: Vec<(u64, u64)> = elf
            .symbols()
            .filter(|s| s.kind() == SymbolKind::Text && s.size() >= 16)
            .filter_map(|s| Some((vaddr_to_offset(&info.loads, s.address())?, s.size())))
            .collect();
        let bounds = FunctionBounds::of_elf(file, &bytes, &info.loads);
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

    #[test]
    fn garbage_sections_give_no_bounds_and_no_panic() {
        for bytes in [&b""[..], b"\x10\0\0\0\0\0\0\0\x01zR\0", &[0xff; 64]] {
            let _ = fde_ranges(bytes, 0x1000, RunTimeEndian::Little, 8);
        }
        let (_, image) = open_self();
        let (offset, size, address, endian, address_size) = locate_eh_frame(&image).unwrap();
        let section = &image[offset as usize..(offset + size) as usize];
        let mut rng = crate::symbolize::random_inputs::Rng::new(0x5eed_00e4);
        for input in rng.inputs(&[&section[..section.len().min(8192)]], 300) {
            let _ = fde_ranges(&input, address, endian, address_size);
        }
        assert!(FunctionBounds::none().lookup(0x1000).is_none());
    }
}
