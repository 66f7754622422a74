//! The unwind-relevant parts of one ELF file: its call frame information (`.eh_frame` with its `.eh_frame_hdr`
//! search table, or `.debug_frame`), the addresses those sections and `.text`/`.got` are linked at, and its
//! loadable segments (to place a mapping's file offset at a link-time address). Read from the live file, or from
//! the copy a capture saved (see [`encode`](ModuleCfi::encode) for that format).

use super::super::elf::{load_segments, LoadSegment};
use anyhow::{bail, Context, Result};
use object::{Object, ObjectSection};
use std::fs::File;
use std::ops::Range;
use std::sync::Arc;

/// Larger sections are not read: the largest `.eh_frame` of a real library is a few MB (libxul's ~10 MB); a planted
/// file could claim gigabytes.
const MAX_SECTION_BYTES: u64 = 64 << 20;
/// Larger files are not read at all (as for symbols).
const MAX_FILE_BYTES: u64 = 4 << 30;

/// One section: the address it is linked at and its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CfiSection {
    pub svma: u64,
    pub data: Arc<[u8]>,
}

impl CfiSection {
    pub fn svma_range(&self) -> Range<u64> {
        self.svma..self.svma.saturating_add(self.data.len() as u64)
    }
}

/// What unwinding needs of one file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModuleCfi {
    pub loads: Vec<LoadSegment>,
    pub text: Option<Range<u64>>,
    pub got: Option<Range<u64>>,
    pub eh_frame_hdr: Option<CfiSection>,
    pub eh_frame: Option<CfiSection>,
    pub debug_frame: Option<CfiSection>,
}

/// Section names as the captured form spells them.
const EH_FRAME_HDR: &str = ".eh_frame_hdr";
const EH_FRAME: &str = ".eh_frame";
const DEBUG_FRAME: &str = ".debug_frame";
const MAGIC: &str = "# profcpu unwind info 1";

impl ModuleCfi {
    /// Whether there is any call frame information (else frames in this file are unwound by frame pointer).
    pub fn has_cfi(&self) -> bool {
        self.eh_frame.is_some() || self.debug_frame.is_some()
    }

    /// Whether framehop finds `.eh_frame`'s rows through `.eh_frame_hdr` (it takes the header whenever both are
    /// there: framehop 0.16, `ModuleUnwindDataInternal::new`) rather than by an index of its own. Such rows are
    /// vetted one by one as the walk reaches them ([`vet`](super::vet)); the others are checked whole when loaded.
    pub(super) fn read_through_header(&self) -> bool {
        self.eh_frame.is_some() && self.eh_frame_hdr.is_some()
    }

    /// Reads an ELF file's unwind info through positioned reads (no mapping: whoever owns the file, e.g. a
    /// container, could truncate it under us). `Ok(None)` when the file is not ELF.
    /// `expected_build_id` (from the recording) refuses a file replaced since.
    pub fn read(file: &File, expected_build_id: Option<&[u8]>) -> Result<Option<ModuleCfi>> {
        let len = file.metadata().context("cannot stat the file")?.len();
        if len > MAX_FILE_BYTES {
            bail!("{len} bytes is more than an ELF file profcpu reads");
        }
        let cache = object::ReadCache::new(file);
        if !super::super::elf::is_elf(&cache) {
            return Ok(None);
        }
        let elf = object::File::parse(&cache).context("unreadable ELF")?;
        if let (Some(want), Ok(Some(got))) = (expected_build_id, elf.build_id()) {
            if want != got {
                bail!("its build-id differs from the recording's (the file was replaced since)");
            }
        }
        Ok(Some(Self::from_object(&elf)?))
    }

    /// The unwind info of a parsed ELF file (from [`read`](Self::read), or an image in memory).
    pub fn from_object<'data, R: object::ReadRef<'data>>(elf: &object::File<'data, R>) -> Result<ModuleCfi> {
        let loads = load_segments(elf);
        let range = |name: &str| elf.section_by_name(name).map(|s| s.address()..s.address().saturating_add(s.size()));
        let section = |name: &str| -> Result<Option<CfiSection>> {
            let Some(s) = elf.section_by_name(name) else { return Ok(None) };
            if s.size() > MAX_SECTION_BYTES {
                bail!("its {name} of {} bytes is larger than profcpu reads ({MAX_SECTION_BYTES})", s.size());
            }
            // NOBITS (a stripped debug file's placeholder) reads as empty: no information.
            let data = s.data().with_context(|| format!("cannot read its {name}"))?;
            Ok((!data.is_empty()).then(|| CfiSection { svma: s.address(), data: Arc::from(data) }))
        };
        Ok(ModuleCfi {
            loads,
            text: range(".text"),
            got: range(".got"),
            eh_frame_hdr: section(EH_FRAME_HDR)?,
            eh_frame: section(EH_FRAME)?,
            debug_frame: section(DEBUG_FRAME)?,
        })
    }

    /// The address the module's link-time address 0 is at when its file offset `pgoff` is mapped at `start`
    /// (`avma = svma + bias`); `None` when no loadable segment holds that offset.
    pub fn bias(&self, start: u64, pgoff: u64) -> Option<u64> {
        let page = 4096;
        // The headers are the file's: a hostile segment can end past 2^64.
        let seg =
            self.loads.iter().find(|s| pgoff >= s.offset / page * page && pgoff < s.offset.saturating_add(s.filesz))?;
        let bias = start as i128 - pgoff as i128 + seg.offset as i128 - seg.vaddr as i128;
        u64::try_from(bias).ok()
    }

    /// The captured form: text header lines, a `data` line, then the sections' bytes in header order.
    ///
    /// ```text
    /// # profcpu unwind info 1
    /// load OFFSET VADDR FILESZ       one per PT_LOAD (hex)
    /// text START END                 .text (hex SVMAs), optional
    /// got START END                  .got, optional
    /// section NAME SVMA SIZE         .eh_frame_hdr, .eh_frame, .debug_frame (hex), each optional
    /// data
    /// <the sections' bytes, concatenated in the order of the section lines>
    /// ```
    pub fn encode(&self) -> Vec<u8> {
        let mut head = format!("{MAGIC}\n");
        for l in &self.loads {
            head.push_str(&format!("load {:x} {:x} {:x}\n", l.offset, l.vaddr, l.filesz));
        }
        for (key, r) in [("text", &self.text), ("got", &self.got)] {
            if let Some(r) = r {
                head.push_str(&format!("{key} {:x} {:x}\n", r.start, r.end));
            }
        }
        let sections = self.sections();
        for (name, s) in &sections {
            head.push_str(&format!("section {name} {:x} {:x}\n", s.svma, s.data.len()));
        }
        head.push_str("data\n");
        let mut out = head.into_bytes();
        for (_, s) in sections {
            out.extend_from_slice(&s.data);
        }
        out
    }

    fn sections(&self) -> Vec<(&'static str, &CfiSection)> {
        [(EH_FRAME_HDR, &self.eh_frame_hdr), (EH_FRAME, &self.eh_frame), (DEBUG_FRAME, &self.debug_frame)]
            .into_iter()
            .filter_map(|(name, s)| Some((name, s.as_ref()?)))
            .collect()
    }

    /// Reads the captured form (untrusted: every size is checked against the bytes there are).
    pub fn decode(bytes: &[u8]) -> Result<ModuleCfi> {
        let head_end = bytes
            .windows(6)
            .position(|w| w == b"\ndata\n")
            .context("no `data` line: not a profcpu unwind info file")?;
        let head = std::str::from_utf8(&bytes[..head_end]).context("its header is not text")?;
        let mut data = &bytes[head_end + 6..];
        let mut lines = head.lines();
        if lines.next() != Some(MAGIC) {
            bail!("not a profcpu unwind info file (first line is not `{MAGIC}`)");
        }
        let hex = |s: Option<&str>| -> Result<u64> {
            u64::from_str_radix(s.context("a field is missing")?, 16).context("a field is not a hex number")
        };
        let mut cfi = ModuleCfi::default();
        for line in lines {
            let mut f = line.split(' ');
            match f.next() {
                Some("load") => cfi.loads.push(LoadSegment {
                    offset: hex(f.next())?,
                    vaddr: hex(f.next())?,
                    filesz: hex(f.next())?,
                }),
                Some(key @ ("text" | "got")) => {
                    let r = hex(f.next())?..hex(f.next())?;
                    *(if key == "text" { &mut cfi.text } else { &mut cfi.got }) = Some(r);
                }
                Some("section") => {
                    let name = f.next().context("a section line without a name")?;
                    let svma = hex(f.next())?;
                    let size = hex(f.next())?;
                    if size > data.len() as u64 {
                        bail!("section {name} of {size} bytes runs past the end of the file");
                    }
                    let (bytes, rest) = data.split_at(size as usize);
                    data = rest;
                    let section = Some(CfiSection { svma, data: Arc::from(bytes) });
                    match name {
                        EH_FRAME_HDR => cfi.eh_frame_hdr = section,
                        EH_FRAME => cfi.eh_frame = section,
                        DEBUG_FRAME => cfi.debug_frame = section,
                        other => bail!("unknown section {other:?}"),
                    }
                }
                _ => bail!("unknown line {line:?}"),
            }
        }
        Ok(cfi)
    }

    /// This info without any section framehop indexes itself that could make unwinding loop (see
    /// [`check`](super::check); rows read through `.eh_frame_hdr` are vetted one by one as the walk reaches them), and
    /// why each removed one was: every `ModuleCfi` from an untrusted source goes through this before it is unwound
    /// with.
    pub fn checked(self) -> (ModuleCfi, Vec<String>) {
        super::check::without_looping_expressions(self)
    }

    /// The addresses pointers in the CFI are relative to, as framehop sets them from [`section_info`](Self::section_info).
    pub(super) fn bases(&self) -> gimli::BaseAddresses {
        gimli::BaseAddresses::default()
            .set_eh_frame(self.eh_frame.as_ref().map_or(0, |s| s.svma))
            .set_eh_frame_hdr(self.eh_frame_hdr.as_ref().map_or(0, |s| s.svma))
            .set_text(self.text.as_ref().map_or(0, |r| r.start))
            .set_got(self.got.as_ref().map_or(0, |r| r.start))
    }

    /// This info with `.eh_frame` zeroed but for the byte ranges `kept` (entries found through the header, see
    /// [`FileRows::used_entries`](super::vet::FileRows::used_entries)), and the header's search table cut to the
    /// entries of the FDEs kept. Every entry stays at its offset, so the header and the entries' relative pointers
    /// still lead to them, and the zeros cost next to nothing compressed; a lookup through the shorter table finds
    /// what it found before for every address whose FDE was kept (the table's last start at or below it is still
    /// there, and no larger one was added).
    pub(super) fn keeping(&self, kept: &[Range<usize>]) -> ModuleCfi {
        let mut cfi = self.clone();
        let Some(eh) = &mut cfi.eh_frame else { return cfi };
        let mut data = vec![0; eh.data.len()];
        for r in kept {
            if let Some(bytes) = eh.data.get(r.clone()) {
                data[r.clone()].copy_from_slice(bytes);
            }
        }
        eh.data = Arc::from(data);
        if let Some(hdr) = &mut cfi.eh_frame_hdr {
            let starts: Vec<usize> = kept.iter().map(|r| r.start).collect();
            if let Some(table) = hdr_keeping(&hdr.data, hdr.svma, eh.svma, &starts) {
                hdr.data = Arc::from(table);
            }
        }
        cfi
    }

    /// Sections as framehop takes them.
    pub(super) fn section_info(&self) -> framehop::ExplicitModuleSectionInfo<Arc<[u8]>> {
        framehop::ExplicitModuleSectionInfo {
            base_svma: 0,
            text_svma: self.text.clone(),
            got_svma: self.got.clone(),
            eh_frame_hdr_svma: self.eh_frame_hdr.as_ref().map(CfiSection::svma_range),
            eh_frame_hdr: self.eh_frame_hdr.as_ref().map(|s| s.data.clone()),
            eh_frame_svma: self.eh_frame.as_ref().map(CfiSection::svma_range),
            eh_frame: self.eh_frame.as_ref().map(|s| s.data.clone()),
            debug_frame: self.debug_frame.as_ref().map(|s| s.data.clone()),
            ..Default::default()
        }
    }
}

/// `.eh_frame_hdr` (at `hdr_svma`) with only the search-table entries whose FDE starts at one of the `.eh_frame`
/// offsets `fde_starts` (sorted); `None` unless the header has the layout every linker writes (version 1, a
/// pc-relative `.eh_frame` pointer, a 4-byte count, 4-byte entries relative to the header) with its table sorted, as
/// a binary search needs (a planted file's need not be: searching fewer entries could then find another FDE).
fn hdr_keeping(hdr: &[u8], hdr_svma: u64, eh_frame_svma: u64, fde_starts: &[usize]) -> Option<Vec<u8>> {
    const PCREL_SDATA4: u8 = 0x1b;
    const UDATA4: u8 = 0x03;
    const DATAREL_SDATA4: u8 = 0x3b;
    if hdr.get(..4)? != [1, PCREL_SDATA4, UDATA4, DATAREL_SDATA4] {
        return None;
    }
    let count = u32::from_le_bytes(hdr.get(8..12)?.try_into().ok()?) as usize;
    let entries = hdr.get(12..12 + count.checked_mul(8)?)?;
    let start = |entry: &[u8]| i32::from_le_bytes(entry[..4].try_into().unwrap());
    if !entries.chunks_exact(8).zip(entries.chunks_exact(8).skip(1)).all(|(a, b)| start(a) <= start(b)) {
        return None;
    }
    let mut out = hdr[..12].to_vec();
    let mut kept = 0u32;
    for entry in entries.chunks_exact(8) {
        let fde = i64::from(i32::from_le_bytes(entry[4..].try_into().unwrap()));
        let offset = (hdr_svma as i64).wrapping_add(fde).wrapping_sub(eh_frame_svma as i64);
        if usize::try_from(offset).is_ok_and(|o| fde_starts.binary_search(&o).is_ok()) {
            out.extend_from_slice(entry);
            kept += 1;
        }
    }
    out[8..12].copy_from_slice(&kept.to_le_bytes());
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libc_has_eh_frame_and_round_trips() {
        let libc = File::open("/proc/self/exe").unwrap();
        let cfi = ModuleCfi::read(&libc, None).unwrap().unwrap();
        assert!(cfi.eh_frame.is_some() && cfi.eh_frame_hdr.is_some(), "Rust binaries carry .eh_frame");
        assert!(cfi.text.is_some() && !cfi.loads.is_empty());
        let bytes = cfi.encode();
        assert_eq!(ModuleCfi::decode(&bytes).unwrap(), cfi);
        // Cut anywhere: an error, never a panic or a silently shorter section.
        for cut in [0, 10, bytes.len() / 2, bytes.len() - 1] {
            if let Ok(back) = ModuleCfi::decode(&bytes[..cut]) {
                panic!("a file cut at {cut} decoded: {back:?}");
            }
        }
    }

    /// The search table is cut to the kept FDEs only when it is sorted; a header of another layout stays whole.
    #[test]
    fn only_a_sorted_search_table_is_cut() {
        // Version 1, the usual encodings, `.eh_frame` pointer, 3 entries (start, FDE), relative to the header at
        // 0x1000; `.eh_frame` at 0x2000, so FDE pointer 0x1000 + x is offset x there.
        let table = |starts: [i32; 3]| {
            let mut hdr = vec![1, 0x1b, 0x03, 0x3b, 0, 0, 0, 0, 3, 0, 0, 0];
            for (start, fde) in starts.into_iter().zip([0x1000i32, 0x1020, 0x1040]) {
                hdr.extend_from_slice(&start.to_le_bytes());
                hdr.extend_from_slice(&fde.to_le_bytes());
            }
            hdr
        };
        let cut = hdr_keeping(&table([0x10, 0x20, 0x30]), 0x1000, 0x2000, &[0x20]).unwrap();
        assert_eq!(cut.len(), 12 + 8);
        assert_eq!(&cut[8..12], &1u32.to_le_bytes());
        assert_eq!(&cut[12..], &table([0x10, 0x20, 0x30])[20..28]);
        assert_eq!(hdr_keeping(&table([0x10, 0x30, 0x20]), 0x1000, 0x2000, &[0x20]), None);
        let mut other = table([0x10, 0x20, 0x30]);
        other[3] = 0x1b;
        assert_eq!(hdr_keeping(&other, 0x1000, 0x2000, &[0x20]), None);
    }

    #[test]
    fn bias_places_file_offsets_at_link_addresses() {
        let cfi = ModuleCfi {
            loads: vec![
                LoadSegment { offset: 0, vaddr: 0, filesz: 0x1000 },
                LoadSegment { offset: 0x1000, vaddr: 0x1000, filesz: 0x5000 },
                LoadSegment { offset: 0x6010, vaddr: 0x7010, filesz: 0x100 },
            ],
            ..Default::default()
        };
        // A shared library's text mapped at 0x7f0000001000 from file offset 0x1000: loaded at 0x7f0000000000.
        assert_eq!(cfi.bias(0x7f00_0000_1000, 0x1000), Some(0x7f00_0000_0000));
        // A segment whose vaddr is one page above its offset.
        assert_eq!(cfi.bias(0x7f00_0000_7000, 0x6000), Some(0x7f00_0000_0000));
        assert_eq!(cfi.bias(0x1000, 0x9000), None);
        // Found by the elf fuzz target: a segment whose offset plus size overflows.
        let hostile = ModuleCfi {
            loads: vec![LoadSegment { offset: u64::MAX - 0x1000, vaddr: 0, filesz: 0x2000 }],
            ..Default::default()
        };
        assert_eq!(hostile.bias(0x1000, 0x9000), None);
        assert!(hostile.bias(u64::MAX, u64::MAX - 0x800).is_some());
    }

    #[test]
    fn mutated_files_never_panic() {
        let cfi = ModuleCfi::read(&File::open("/proc/self/exe").unwrap(), None).unwrap().unwrap();
        let mut small = cfi.clone();
        for s in [&mut small.eh_frame, &mut small.eh_frame_hdr].into_iter().flatten() {
            s.data = Arc::from(&s.data[..s.data.len().min(256)]);
        }
        let bytes = small.encode();
        let mut rng = crate::random_inputs::Rng::new(0x5eed_0c1f);
        for input in rng.inputs(&[&bytes], 2000) {
            let _ = ModuleCfi::decode(&input);
        }
    }
}
