//! ReadyToRun images as a symbol source: the symbolizer's side of the [`r2r`](super::r2r) decoder.
//!
//! A sample in a file-backed mapping of a PE file (System.Private.CoreLib.dll, other framework and app
//! assemblies) is named from the image itself: file offset `pgoff + (ip − start)` (what every mapping lookup
//! computes, see [`r2r::rva_of`](super::r2r::rva_of)) → RVA through the PE section table → the decoder's method,
//! spelled as the runtime's own perf map spells it (`[System.Private.CoreLib] System.String::IndexOf(…)[PreJIT]`).
//! Code no method claims (stubs, or a composite image whose metadata lives in its component files) is named by an
//! `.r2rmap` beside the image when there is one (crossgen2's spelling), else grouped by its runtime function: one
//! frame per code block, `System.Private.CoreLib.dll+0x<block start>`.
//!
//! Everything is in file-offset space, like ELF symbols: a capture saves the ranges samples hit in a
//! `symbols/r2r-N.syms` table ([`R2rSymbols::Captured`]) and postprocess names the same frames on a machine
//! without the image.
//!
//! The image is read whole (it is parsed in memory; a copy, so a file truncated by its owner cannot fault us),
//! capped at [`MAX_IMAGE_LEN`], and only when a sample hits it; names are built when a frame asks for them.

use super::dso::FileHit;
use super::r2r::{R2rImage, R2rMap};
use super::ranges::RangeTable;
use super::symbol_table::SymbolTable;
use crate::fs::{input, Limit};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

/// Larger files are not read (the whole file is read into memory): CoreLib is ~13 MB, a composite image of the
/// whole framework and ASP.NET under 200 MB.
pub const MAX_IMAGE_LEN: Limit = Limit { bytes: 512 << 20 };
/// An `.r2rmap` has one short line per method: tens of MB even for a composite framework image.
pub const MAX_R2RMAP_LEN: Limit = Limit { bytes: 256 << 20 };

/// PE debug directory entry type of an R2R perf map (dotnet/runtime `docs/design/specs/PE-COFF.md`, "R2R PerfMap
/// Debug Directory Entry (type 21)"): magic `R2RM`, 16-byte signature, u32 version, UTF-8 file name.
const DEBUG_TYPE_R2R_PERFMAP: u32 = 21;
const R2R_PERFMAP_MAGIC: &[u8; 4] = b"R2RM";
const IMAGE_DIRECTORY_ENTRY_DEBUG: usize = 6;
/// Debug directories hold a handful of entries; more means a corrupt header.
const MAX_DEBUG_ENTRIES: usize = 64;

pub enum R2rSymbols {
    /// The image file, parsed (boxed: the parsed metadata tables are large).
    Image { image: Box<R2rImage>, map: Option<R2rMap> },
    /// Ranges a capture saved: named methods and unnamed code blocks.
    Captured { names: SymbolTable, functions: RangeTable<()> },
}

impl std::fmt::Debug for R2rSymbols {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            R2rSymbols::Image { image, map } => write!(
                f,
                "R2rImage({}, {} methods, {} code blocks, r2rmap: {})",
                image.assembly_name(),
                image.method_count(),
                image.function_count(),
                map.as_ref().map_or(0, R2rMap::len)
            ),
            R2rSymbols::Captured { names, functions } => {
                write!(f, "R2rCaptured({} methods, {} code blocks)", names.len(), functions.len())
            }
        }
    }
}

/// Whether the file starts like a PE file (`MZ`): checked before reading a whole file to parse it.
pub fn looks_like_pe(file: &File) -> bool {
    let mut magic = [0u8; 2];
    file.read_exact_at(&mut magic, 0).is_ok() && &magic == b"MZ"
}

impl R2rSymbols {
    /// Reads and parses the image in `file`, whose name in its folder is `file_name`. `sibling(name, limit)` reads
    /// a file of that plain name from the image's folder, as the target sees it: referenced assemblies (whose types
    /// complete generic instantiation names) and the `.r2rmap`. The error is a phrase for the log: an IL-only
    /// assembly, a composite component, not a PE file, too large.
    pub fn load(
        mut file: File,
        file_name: &str,
        sibling: &mut dyn FnMut(&str, Limit) -> Option<Vec<u8>>,
    ) -> Result<R2rSymbols, String> {
        let size = input::check(&file, MAX_IMAGE_LEN).map_err(|e| e.explain(std::path::Path::new("the image")))?;
        let bytes = input::read_all(&mut file, size, MAX_IMAGE_LEN).map_err(|e| e.to_string())?;
        let mut image = R2rImage::parse(&bytes).map_err(|e| format!("{e:#}"))?;
        let (major, minor) = image.version();
        tracing::debug!(
            "{file_name}: ReadyToRun {major}.{minor} image of {} ({} methods, {} code blocks)",
            image.assembly_name(),
            image.method_count(),
            image.function_count()
        );
        for name in image.missing_references() {
            let Some(reference) = sibling(&format!("{name}.dll"), MAX_IMAGE_LEN) else { continue };
            if let Err(e) = image.add_reference(&name, &reference) {
                tracing::debug!("{name}.dll beside {}: {e:#}", image.assembly_name());
            }
        }
        let map = find_r2rmap(&bytes, &image, file_name, sibling);
        Ok(R2rSymbols::Image { image: Box::new(image), map })
    }

    /// What names file offset `offset` of the image.
    pub fn lookup(&self, offset: u64) -> FileHit {
        match self {
            R2rSymbols::Image { image, map } => image_lookup(image, map.as_ref(), offset),
            R2rSymbols::Captured { names, functions } => match names.lookup(offset) {
                Some((start, end, name)) => FileHit::Symbol { start, end, name },
                None => match functions.lookup(offset) {
                    Some(r) => FileHit::Function { start: r.start, end: r.end },
                    None => FileHit::Nothing,
                },
            },
        }
    }
}

fn image_lookup(image: &R2rImage, map: Option<&R2rMap>, offset: u64) -> FileHit {
    let Some(rva) = image.rva_of_file_offset(offset) else { return FileHit::Nothing };
    // Within one section `file offset − RVA` is constant: ranges move to file-offset space by that difference.
    let delta = offset as i128 - rva as i128;
    let to_offset = |start_rva: u32, end_rva: u32| {
        let start = u64::try_from(start_rva as i128 + delta).ok()?;
        let end = u64::try_from(end_rva as i128 + delta).ok()?;
        (start < end).then_some((start, end))
    };
    if let Some(method) = image.lookup(rva) {
        // A method's hot code (body and funclets) is one frame, named like the runtime's [PreJIT] record of it,
        // which covers the same range; a cold part is its own range, as the runtime names it apart too.
        let block_end = method.start.saturating_add(method.len);
        let (start, end) = match method.part {
            super::r2r::CodePart::Cold => (method.start, block_end),
            _ => (
                method.method_start.min(method.start),
                method.method_start.saturating_add(method.method_len).max(block_end),
            ),
        };
        if let Some((start, end)) = to_offset(start, end) {
            return FileHit::Symbol { start, end, name: Arc::from(method.name) };
        }
    }
    let block = image.function_start(rva);
    if let Some((map_start, map_len, name)) = map.and_then(|m| m.lookup(rva)) {
        // Clipped to the code block, so that ranges saved by a capture never overlap a method's.
        let (mut start, mut end) = (map_start, map_start.saturating_add(map_len));
        if let Some(block) = block {
            (start, end) = (start.max(block.start), end.min(block.end));
        }
        if let Some((start, end)) = to_offset(start, end) {
            return FileHit::Symbol { start, end, name: Arc::from(name) };
        }
    }
    match block.and_then(|b| to_offset(b.start, b.end)) {
        Some((start, end)) => FileHit::Function { start, end },
        None => FileHit::Nothing,
    }
}

/// The image's `.r2rmap`, when one lies beside it and belongs to it: the name its PE debug directory gives,
/// `<name>.ni.r2rmap` (crossgen2's `--perfmap` output: `System.Private.CoreLib.ni.r2rmap`), or `<file>.r2rmap`.
/// An image that records its map's signature (.NET 6+) only takes a map with the same signature.
fn find_r2rmap(
    bytes: &[u8],
    image: &R2rImage,
    file_name: &str,
    sibling: &mut dyn FnMut(&str, Limit) -> Option<Vec<u8>>,
) -> Option<R2rMap> {
    let recorded = perf_map_entry(bytes, image);
    let stem = file_name.strip_suffix(".dll").unwrap_or(file_name);
    let mut names: Vec<String> = Vec::new();
    if let Some((_, name)) = &recorded {
        names.push(name.clone());
    }
    for name in [format!("{stem}.ni.r2rmap"), format!("{file_name}.r2rmap")] {
        if !names.contains(&name) {
            names.push(name);
        }
    }
    for name in names {
        let Some(text) = sibling(&name, MAX_R2RMAP_LEN) else { continue };
        let map = R2rMap::parse(&text);
        if let Some((signature, _)) = &recorded {
            if map.output_guid().and_then(unhex).as_deref() != Some(&signature[..]) {
                tracing::info!("{name} beside {file_name} is not its perf map (another signature): not used");
                continue;
            }
        }
        tracing::debug!("{name}: {} ranges for {file_name}", map.len());
        return Some(map);
    }
    None
}

/// The R2R PerfMap debug directory entry: `(signature, file name)`.
fn perf_map_entry(bytes: &[u8], image: &R2rImage) -> Option<([u8; 16], String)> {
    let (rva, size) = debug_directory(bytes)?;
    let at = image.sections().iter().find_map(|s| {
        let within = rva.checked_sub(s.rva)?;
        (within < s.file_size).then(|| s.file_offset as usize + within as usize)
    })?;
    let directory = bytes.get(at..at.checked_add(size as usize)?)?;
    for entry in directory.chunks_exact(28).take(MAX_DEBUG_ENTRIES) {
        let field = |at: usize| u32::from_le_bytes(entry[at..at + 4].try_into().expect("4 bytes"));
        if field(12) != DEBUG_TYPE_R2R_PERFMAP {
            continue;
        }
        let (len, pointer) = (field(16) as usize, field(24) as usize);
        let data = bytes.get(pointer..pointer.checked_add(len)?)?;
        if data.len() < 24 || &data[..4] != R2R_PERFMAP_MAGIC {
            return None;
        }
        let signature: [u8; 16] = data[4..20].try_into().ok()?;
        let path = &data[24..];
        let path = &path[..path.iter().position(|&b| b == 0).unwrap_or(path.len())];
        let path = String::from_utf8_lossy(path);
        // Only a plain name beside the image, whatever folder the compiler wrote it to.
        let name = path.rsplit(['/', '\\']).next().unwrap_or("").to_string();
        if name.is_empty() || name.starts_with('.') {
            return None;
        }
        return Some((signature, name));
    }
    None
}

/// RVA and size of the PE debug directory (data directory 6).
fn debug_directory(bytes: &[u8]) -> Option<(u32, u32)> {
    use object::read::pe::{PeFile32, PeFile64};
    let directory = match object::FileKind::parse(bytes).ok()? {
        object::FileKind::Pe64 => *PeFile64::parse(bytes).ok()?.data_directory(IMAGE_DIRECTORY_ENTRY_DEBUG)?,
        object::FileKind::Pe32 => *PeFile32::parse(bytes).ok()?.data_directory(IMAGE_DIRECTORY_ENTRY_DEBUG)?,
        _ => return None,
    };
    let (rva, size) = directory.address_range();
    (rva != 0 && size != 0).then_some((rva, size))
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    let s = s.trim();
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_signatures() {
        assert_eq!(unhex("2EDFF7CA"), Some(vec![0x2e, 0xdf, 0xf7, 0xca]));
        assert_eq!(unhex("4c1b7e0f-8c43"), None);
        assert_eq!(unhex("abc"), None);
    }

    /// .NET 8's CoreLib, from the runtime the tests use (`$PROFCPU_DOTNET_DIR` or scripts/dotnet-runtime.sh).
    fn dotnet8_corelib() -> Vec<u8> {
        let dir = match std::env::var_os("PROFCPU_DOTNET_DIR").filter(|d| !d.is_empty()) {
            Some(dir) => std::path::PathBuf::from(dir),
            None => {
                let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/dotnet-runtime.sh");
                let out = std::process::Command::new("bash").args([script, "8"]).output().unwrap();
                assert!(out.status.success(), "{script} 8 failed: {}", String::from_utf8_lossy(&out.stderr));
                std::path::PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
            }
        };
        let path = dir.join("shared/Microsoft.NETCore.App/8.0.4/System.Private.CoreLib.dll");
        std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    /// The map crossgen2 would write for CoreLib: found by the name the image records, taken only with the
    /// image's signature, and naming code no method claims.
    #[test]
    fn an_r2rmap_beside_the_image_is_used_only_with_its_signature() {
        let bytes = dotnet8_corelib();
        let image = R2rImage::parse(&bytes).unwrap();
        let (signature, recorded) = perf_map_entry(&bytes, &image).expect("CoreLib 8 records its perf map");
        assert_eq!(recorded, "System.Private.CoreLib.ni.r2rmap");
        // An RVA of the code section that no runtime function covers (R2R headers and tables live there too).
        let text = image.sections()[0];
        let unclaimed = (text.rva..text.rva + text.file_size)
            .step_by(16)
            .find(|&rva| image.function_start(rva).is_none())
            .expect("no unclaimed RVA");
        let signature_hex: String = signature.iter().map(|b| format!("{b:02X}")).collect();
        let map_text = |signature: &str| {
            format!("FFFFFFFF 00 {signature}\nFFFFFFFE 00 1\n{unclaimed:08X} 10 [S.P.CoreLib]Unclaimed.Stub()\n")
        };
        let (good, bad) = (map_text(&signature_hex), map_text("00112233445566778899AABBCCDDEEFF"));
        let mut asked = Vec::new();
        let map = find_r2rmap(&bytes, &image, "System.Private.CoreLib.dll", &mut |name, _| {
            asked.push(name.to_string());
            (name == recorded).then(|| good.clone().into_bytes())
        });
        assert_eq!(asked, ["System.Private.CoreLib.ni.r2rmap"]);
        let map = map.expect("the right map is used");
        let offset = (unclaimed - text.rva + text.file_offset) as u64 + 4;
        let FileHit::Symbol { start, end, name } = image_lookup(&image, Some(&map), offset) else {
            panic!("the map does not name {unclaimed:#x}")
        };
        assert_eq!((start, end, &*name), (offset - 4, offset - 4 + 0x10, "[S.P.CoreLib]Unclaimed.Stub()"));
        assert_eq!(image_lookup(&image, None, offset), FileHit::Nothing);
        // Claimed code keeps the decoder's name, spelled as the runtime spells it.
        let method = image.methods().next().unwrap();
        let method_offset = (method.start - text.rva + text.file_offset) as u64;
        let FileHit::Symbol { name, .. } = image_lookup(&image, Some(&map), method_offset) else { panic!() };
        assert_eq!(&*name, method.name);

        let mut asked = Vec::new();
        let wrong = find_r2rmap(&bytes, &image, "System.Private.CoreLib.dll", &mut |name, _| {
            asked.push(name.to_string());
            Some(bad.clone().into_bytes())
        });
        assert!(wrong.is_none(), "a map with another signature was used");
        assert_eq!(asked.len(), 2, "{asked:?}");
    }

    #[test]
    fn non_pe_input_is_refused_with_a_reason() {
        let path = std::env::temp_dir().join(format!("profcpu-r2r-symbols-{}", std::process::id()));
        std::fs::write(&path, b"MZ but nothing more").unwrap();
        let file = File::open(&path).unwrap();
        assert!(looks_like_pe(&file));
        let err = R2rSymbols::load(file, "x.dll", &mut |_, _| None).err().unwrap();
        assert!(!err.is_empty());
        std::fs::write(&path, b"\x7fELF").unwrap();
        assert!(!looks_like_pe(&File::open(&path).unwrap()));
        std::fs::remove_file(&path).unwrap();
    }
}
