//! Kernel symbols from `/proc/kallsyms` (`ADDRESS TYPE NAME [MODULE]` per line). Only code symbols count; a
//! symbol ends where the next one starts. Under `kernel.kptr_restrict` (or without privilege) every address reads
//! as zero: the table is then "hidden" and kernel frames can only be shown as `[kernel]`.

use super::ranges::{Range, RangeTable};
use std::sync::{Arc, OnceLock};

/// Size given to the last symbol, which has no successor to end it (perf uses a page as well).
const LAST_SYMBOL_SIZE: u64 = 4096;

/// The kernel's code symbols. A kallsyms file holds over 100,000 of them and a profile hits a few dozen, so they
/// are looked up in the file's text itself: the kernel lists its own symbols in address order, so that part is
/// searched by halving through a small index, a line per page of it, where only the pages lookups land in are
/// read ([`Pages`]); only what follows it (module and BPF symbols, in no order) is sorted into a table. A symbol's name and module are read from its line when it is
/// looked up.
#[derive(Debug, Default)]
pub struct KernelSymbols {
    text: Text,
    index: Index,
    /// True when the file listed symbols but every address was zero.
    pub hidden: bool,
}

/// A kernel symbol [`KernelSymbols::lookup`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelSymbol {
    pub start: u64,
    pub end: u64,
    pub name: Arc<str>,
    /// `[kernel.kallsyms]` for the kernel image, `[module]` for module code, as perf prints them.
    pub module: Arc<str>,
}

pub const KERNEL_MODULE: &str = "[kernel.kallsyms]";

/// The lines: read into memory (`/proc/kallsyms` cannot be mapped), or perf's saved copy mapped (not copied).
#[derive(Debug)]
enum Text {
    Read(Box<[u8]>),
    Mapped(memmap2::Mmap),
}

impl Default for Text {
    fn default() -> Self {
        Text::Read(Box::default())
    }
}

impl std::ops::Deref for Text {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Text::Read(bytes) => bytes,
            Text::Mapped(map) => map,
        }
    }
}

#[derive(Debug)]
enum Index {
    /// A kallsyms listing.
    Pages(Pages),
    /// A capture's saved symbols, each with its own end: a table of their lines.
    Ranges(RangeTable<u32>),
}

impl Default for Index {
    fn default() -> Self {
        Index::Ranges(RangeTable::default())
    }
}

/// A code symbol's type: text (t/T) or weak (w/W). Data symbols would swallow code addresses between them.
fn is_code(kind: u8) -> bool {
    matches!(kind, b't' | b'T' | b'w' | b'W')
}

/// The lines after the sorted part, in any order and any layout the general split reads: their code symbols,
/// `(start, line)` by start, the first listed of each start.
struct Rest {
    code: Vec<(u64, u32)>,
    listed: usize,
    any_nonzero: bool,
}

impl Rest {
    fn read(bytes: &[u8], from: usize) -> Rest {
        let mut rest = Rest { code: Vec::new(), listed: 0, any_nonzero: false };
        let mut at = from;
        while at < bytes.len() && at <= u32::MAX as usize {
            let (fields, next) = match fixed_line(bytes, at) {
                Some((addr, kind, next)) => (Some((addr, kind)), next),
                None => {
                    let end = memchr::memchr(b'\n', &bytes[at..]).map_or(bytes.len(), |i| at + i);
                    let line = String::from_utf8_lossy(&bytes[at..end]);
                    let fields = kallsyms_fields(&line).and_then(|(addr, kind, ..)| {
                        Some((parse_address(addr)?, kind.as_bytes()[0] * (kind.len() == 1) as u8))
                    });
                    (fields, end + 1)
                }
            };
            let line = at as u32;
            at = next;
            let Some((addr, kind)) = fields else { continue };
            rest.listed += 1;
            rest.any_nonzero |= addr != 0;
            if is_code(kind) && addr != 0 {
                rest.code.push((addr, line));
            }
        }
        // The stable sort keeps the first listed of a start first.
        rest.code.sort_by_key(|&(addr, _)| addr);
        rest.code.dedup_by_key(|&mut (addr, _)| addr);
        rest
    }
}

/// A line's 16 address digits as one big-endian number: lowercase hex digits of a fixed width sort as the
/// addresses they spell.
type Digits = u128;

/// The address digits and type of a line in the kernel's own layout, `%016lx %c ` and a name, from its first 20
/// bytes.
fn fixed_start(line: &[u8]) -> Option<(Digits, u8)> {
    let start: &[u8; 20] = line.get(..20)?.try_into().unwrap();
    let digits: &[u8; 16] = start[..16].try_into().unwrap();
    let layout = start[16] == b' ' && start[18] == b' ' && start[17].is_ascii_graphic() && start[19].is_ascii_graphic();
    (layout && lower_hex16(digits)).then(|| (Digits::from_be_bytes(*digits), start[17]))
}

/// The address [`fixed_start`]'s digits spell.
fn address(digits: Digits) -> u64 {
    let [high, low] = [(digits >> 64) as u64, digits as u64].map(|half| hex8(half.to_be_bytes()).unwrap_or(0));
    u64::from(high) << 32 | u64::from(low)
}

/// Whether all 16 bytes are lowercase hex digits.
fn lower_hex16(digits: &[u8; 16]) -> bool {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SSE2 is part of x86-64; the load reads the 16 bytes of `digits`, at any alignment.
    return unsafe {
        use std::arch::x86_64::*;
        let v = _mm_loadu_si128(digits.as_ptr().cast());
        // Signed compares: a byte of 0x80 or more is negative, below both ranges.
        let within = |low: u8, high: u8| {
            let above = _mm_cmpgt_epi8(v, _mm_set1_epi8(low as i8 - 1));
            _mm_and_si128(above, _mm_cmplt_epi8(v, _mm_set1_epi8(high as i8 + 1)))
        };
        _mm_movemask_epi8(_mm_or_si128(within(b'0', b'9'), within(b'a', b'f'))) == 0xffff
    };
    #[cfg(not(target_arch = "x86_64"))]
    digits.iter().all(|d| matches!(d, b'0'..=b'9' | b'a'..=b'f'))
}

/// The newlines of a text in order, found 64 bytes at a time.
struct Newlines<'t> {
    bytes: &'t [u8],
    /// The 64 bytes at `base`: a bit per newline not returned yet.
    base: usize,
    mask: u64,
}

impl<'t> Newlines<'t> {
    /// Those at or after `from`.
    fn new(bytes: &'t [u8], from: usize) -> Newlines<'t> {
        let base = from - from % 64;
        Newlines { bytes, base, mask: bytes.get(base..).map_or(0, newline_mask) }
    }

    /// The first newline at or after `from` (which only grows from call to call).
    fn next_from(&mut self, from: usize) -> Option<usize> {
        if from >= self.base + 64 {
            self.base = from - from % 64;
            self.mask = newline_mask(self.bytes.get(self.base..)?);
        }
        self.mask &= u64::MAX << (from - self.base);
        while self.mask == 0 {
            self.base += 64;
            self.mask = newline_mask(self.bytes.get(self.base..).filter(|rest| !rest.is_empty())?);
        }
        Some(self.base + self.mask.trailing_zeros() as usize)
    }
}

/// A bit per newline among the first 64 bytes of `bytes` (the first byte's lowest).
fn newline_mask(bytes: &[u8]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if let Some(chunk) = bytes.get(..64) {
        return newline_mask_sse2(chunk.try_into().unwrap());
    }
    newline_mask_bytes(bytes)
}

/// [`newline_mask`] of 64 bytes in 16 instructions: a quarter of the time reading kallsyms took with a byte at a
/// time.
#[cfg(target_arch = "x86_64")]
fn newline_mask_sse2(chunk: &[u8; 64]) -> u64 {
    use std::arch::x86_64::{_mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_set1_epi8};
    // SAFETY: SSE2 is part of x86-64; each load reads 16 of the 64 bytes of `chunk`, at any alignment.
    unsafe {
        let mask16 = |i: usize| {
            let v = _mm_loadu_si128(chunk[i * 16..].as_ptr().cast());
            _mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8(b'\n' as i8))) as u16 as u64
        };
        mask16(0) | mask16(1) << 16 | mask16(2) << 32 | mask16(3) << 48
    }
}

/// [`newline_mask`] on any CPU (and of a text's last bytes), a byte at a time.
fn newline_mask_bytes(bytes: &[u8]) -> u64 {
    bytes.iter().take(64).enumerate().fold(0, |mask, (i, &b)| mask | u64::from(b == b'\n') << i)
}

impl KernelSymbols {
    /// The symbols of a kallsyms text.
    #[cfg(test)]
    pub fn parse(text: &str) -> KernelSymbols {
        Self::from_text(Text::Read(text.as_bytes().into()))
    }

    fn from_text(text: Text) -> KernelSymbols {
        let bytes: &[u8] = &text;
        let (pages, hidden) = match Pages::index(bytes) {
            Some(pages) => (pages, false),
            None => Pages::read_whole(bytes),
        };
        KernelSymbols { text, index: Index::Pages(pages), hidden }
    }

    /// A table of `(start, end, name, module)` entries (a capture's saved symbols).
    pub fn from_entries<'a>(entries: impl IntoIterator<Item = (u64, u64, &'a str, &'a str)>, hidden: bool) -> Self {
        let mut text = String::new();
        let mut ranges = Vec::new();
        for (start, end, name, module) in entries {
            ranges.push(Range { start, end, value: text.len() as u32 });
            text.push_str(&format!("{start:016x} t {name}\t{module}\n"));
        }
        let index = Index::Ranges(RangeTable::from_unsorted(ranges));
        KernelSymbols { text: Text::Read(text.into_bytes().into()), index, hidden }
    }

    /// The symbol holding `addr`, its name capped as every name is ([`super::name_limit`]).
    pub fn lookup(&self, addr: u64) -> Option<KernelSymbol> {
        let (start, end, at) = self.find(addr)?;
        let at = at as usize;
        let end_of_line = memchr::memchr(b'\n', &self.text[at..]).map_or(self.text.len(), |i| at + i);
        let line = String::from_utf8_lossy(&self.text[at..end_of_line]);
        let (_, _, name, module) = kallsyms_fields(&line)?;
        let module = match module {
            Some(m) if m.starts_with('[') && m.ends_with(']') => super::name_limit::cap_arc(m),
            _ => Arc::from(KERNEL_MODULE),
        };
        Some(KernelSymbol { start, end, name: super::name_limit::cap_arc(name), module })
    }

    /// The range and line of the code symbol holding `addr`: the highest code start at or below it (the first
    /// listed of that start), ending at the next code start, or a page on for the last.
    fn find(&self, addr: u64) -> Option<(u64, u64, u32)> {
        match &self.index {
            Index::Ranges(table) => table.lookup(addr).map(|r| (r.start, r.end, r.value)),
            Index::Pages(pages) => pages.find(&self.text, addr),
        }
    }

    /// Every symbol, in address order (each read from its line as for a lookup).
    #[cfg(test)]
    pub fn iter(&self) -> impl Iterator<Item = KernelSymbol> + '_ {
        let starts: Vec<u64> = match &self.index {
            Index::Ranges(table) => table.iter().map(|r| r.start).collect(),
            Index::Pages(pages) => pages.whole(&self.text).starts(&self.text),
        };
        starts.into_iter().filter_map(|start| self.lookup(start))
    }

    fn is_empty(&self) -> bool {
        match &self.index {
            Index::Ranges(table) => table.is_empty(),
            Index::Pages(pages) => !pages.shows_code,
        }
    }

    pub fn read_live() -> std::io::Result<KernelSymbols> {
        let mut text = Vec::new();
        std::io::Read::read_to_end(&mut crate::procfs::kallsyms()?, &mut text)?;
        Ok(Self::from_text(Text::Read(text.into())))
    }

    /// The copy of kallsyms that `perf record` saved in perf's build-id cache for the kernel with this build-id
    /// (`$PERF_BUILDID_DIR`, else `~/.debug`: `[kernel.kallsyms]/<build-id>/kallsyms`), as `perf script` uses it.
    /// Reading a file is many times cheaper than `/proc/kallsyms`, which the kernel formats line by line on every
    /// read. Only a regular file of the current user or root is believed (and mapped: only they could cut it
    /// short while it is read).
    pub fn from_perf_cache(build_id: &[u8]) -> Option<KernelSymbols> {
        use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
        const MAX_LEN: u64 = 256 << 20;
        let base = match std::env::var_os("PERF_BUILDID_DIR") {
            Some(dir) if !dir.is_empty() => std::path::PathBuf::from(dir),
            _ => std::path::PathBuf::from(std::env::var_os("HOME")?).join(".debug"),
        };
        let hex: String = build_id.iter().map(|b| format!("{b:02x}")).collect();
        let path = base.join(KERNEL_MODULE).join(hex).join("kallsyms");
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(&path)
            .ok()?;
        let meta = file.metadata().ok()?;
        let owner_ok = meta.uid() == 0 || meta.uid() == nix::unistd::geteuid().as_raw();
        if !meta.is_file() || !owner_ok || meta.len() > MAX_LEN || meta.len() == 0 {
            return None;
        }
        // Not populated: lookups read a few pages of it ([`Pages`]).
        // SAFETY: a regular file of root or this user, which perf writes once and never changes in place.
        let map = unsafe { memmap2::Mmap::map(&file) }.ok()?;
        let symbols = Self::from_text(Text::Mapped(map));
        (!symbols.hidden && !symbols.is_empty()).then_some(symbols)
    }
}

/// Bytes of text per entry of a [`Pages`] index.
const PAGE_BYTES: usize = 4096;

/// Texts shorter than this are read whole ([`Pages::read_whole`]).
const PAGED_FROM: usize = 16 * PAGE_BYTES;

/// A kallsyms text and where its lines are. The kernel lists its own symbols (over 100,000 lines) in address order,
/// so the index holds one line per page of that part, the first there at a new address, and a lookup reads the
/// lines of the page its address falls in (and of the pages around it, for the symbols before and after it); the
/// modules' symbols after them, in the order they were loaded, are tabled.
///
/// A long text is indexed without reading its lines ([`index`](Self::index)): reading every line first was most of
/// the time postprocess spent on kernel symbols (about 1.5 ms of CPU for 5.4 MB). Its index's lines show that order
/// up to where the text leaves it (or to its end); a lookup checks the lines it reads, and one that finds them out
/// of order has the whole text read line by line ([`read_whole`](Self::read_whole)), which answers from then on. A
/// text in order except in pages no lookup reads is read as if those were in order too.
#[derive(Debug)]
struct Pages {
    /// Where each page's first line at a new address is, and that address: in order, the first at the text's start.
    points: Vec<(u32, u64)>,
    /// Where the lines in the kernel's order end.
    sorted_end: usize,
    /// The address of their last line: the highest.
    last_addr: u64,
    /// The code symbols after them: `(start, line)` by start, the first listed of each start.
    rest: Vec<(u64, u32)>,
    /// Whether a code symbol with an address is listed.
    shows_code: bool,
    /// Whether every line up to `sorted_end` was read (no lookup can find them out of order).
    read_through: bool,
    /// The highest code start of the sorted part, with its line, once asked.
    last_code: OnceLock<Option<(u64, u32)>>,
    /// Each page's lines once read (a profile of the kernel can look up thousands of addresses).
    read: Vec<OnceLock<Box<[Line]>>>,
    /// The whole text read line by line, once a lookup found it out of order.
    full: OnceLock<Box<Pages>>,
}

/// A lookup found a line out of the kernel's order or layout where the index showed the text in it.
struct OutOfOrder;

/// A line of a [`Pages`] text: address, type and place.
type Line = (u64, u8, u32);

/// What follows a point of a [`Pages`] index.
enum Next {
    /// Where it is, its address and type.
    Point(u32, u64, u8),
    /// The text ends in order.
    End,
    /// A line out of order or layout (the lines from the last point on then tell where the order ends).
    Disorder,
}

impl Pages {
    /// The index of `bytes`, if it is long and starts in the kernel's order with a code symbol among its points
    /// (else it is read whole, which also tells a listing whose addresses are all hidden).
    fn index(bytes: &[u8]) -> Option<Pages> {
        if bytes.len() < PAGED_FROM || bytes.len() > u32::MAX as usize {
            return None;
        }
        // The kernel lists its own symbols first, then those of modules and BPF programs (each line ending in a tab
        // and the module's name), in the order they were loaded: those are read whole.
        let own = &bytes[..Self::first_tabbed_line(bytes)];
        let (first, kind, _) = own_line(own, 0)?;
        let mut points = vec![(0u32, first)];
        let mut shows_code = is_code(kind) && first != 0;
        let mut page = PAGE_BYTES;
        while page < own.len() {
            let (last_at, last_addr) = points[points.len() - 1];
            let last_at = last_at as usize;
            // The line holding the page's first byte (at or after the last point).
            let line = memchr::memrchr(b'\n', &own[last_at..page]).map_or(last_at, |i| last_at + i + 1);
            match Self::next_point(own, line, last_addr) {
                Next::Point(at, addr, kind) => {
                    points.push((at, addr));
                    shows_code |= is_code(kind) && addr != 0;
                    page = (at as usize / PAGE_BYTES + 1) * PAGE_BYTES;
                }
                Next::End | Next::Disorder => break,
            }
        }
        if !shows_code {
            return None;
        }
        // The lines after the last point are all read: where the order ends, and the highest address before.
        let (last_at, last_addr) = points[points.len() - 1];
        let sorted_end = Self::in_order_until(own, last_at as usize, last_addr);
        let last_line = memchr::memrchr(b'\n', &own[..sorted_end.checked_sub(1)?]).map_or(0, |i| i + 1);
        let (last_addr, ..) = own_line(own, last_line)?;
        Some(Pages::new(points, sorted_end, last_addr, Rest::read(bytes, sorted_end).code, false))
    }

    /// The index of `bytes` with every line read: those in the kernel's order and layout from its start, up to the
    /// first that is not, a point per page, and the rest tabled. Also says whether the text lists symbols with every
    /// address zero (hidden).
    fn read_whole(bytes: &[u8]) -> (Pages, bool) {
        let (mut points, mut listed, mut any_nonzero, mut shows_code) = (Vec::new(), 0usize, false, false);
        let (mut at, mut low, mut page_end) = (0usize, 0u64, 0usize);
        while at < bytes.len() && at <= u32::MAX as usize {
            let Some((addr, kind, next)) = own_line(bytes, at).filter(|&(addr, ..)| addr >= low) else { break };
            // A page's point is its first line at a new address, so that the lines of one address share a page.
            if at >= page_end && (points.is_empty() || addr > low) {
                points.push((at as u32, addr));
                page_end = (at / PAGE_BYTES + 1) * PAGE_BYTES;
            }
            listed += 1;
            any_nonzero |= addr != 0;
            shows_code |= is_code(kind) && addr != 0;
            (low, at) = (addr, next);
        }
        let sorted_end = at.min(bytes.len());
        let rest = Rest::read(bytes, sorted_end);
        let hidden = listed + rest.listed > 0 && !(any_nonzero || rest.any_nonzero);
        let mut pages = Pages::new(points, sorted_end, low, rest.code, true);
        pages.shows_code = shows_code || !pages.rest.is_empty();
        (pages, hidden)
    }

    fn new(
        points: Vec<(u32, u64)>,
        sorted_end: usize,
        last_addr: u64,
        rest: Vec<(u64, u32)>,
        read_through: bool,
    ) -> Pages {
        let read = points.iter().map(|_| OnceLock::new()).collect();
        let (last_code, full) = (OnceLock::new(), OnceLock::new());
        Pages { points, sorted_end, last_addr, rest, shows_code: true, read_through, last_code, read, full }
    }

    /// Where the first line holding a tab starts (the text's end if none), found by halving: lines of the kernel's
    /// own symbols hold none, and every line after the first module symbol does.
    fn first_tabbed_line(bytes: &[u8]) -> usize {
        let line_at = |pos: usize| memchr::memrchr(b'\n', &bytes[..pos]).map_or(0, |i| i + 1);
        let end_of = |at: usize| memchr::memchr(b'\n', &bytes[at..]).map_or(bytes.len(), |i| at + i);
        let tabbed = |at: usize| memchr::memchr(b'\t', &bytes[at..end_of(at)]).is_some();
        // The first page whose first byte is on a tabbed line.
        let (mut low, mut high) = (0, bytes.len().div_ceil(PAGE_BYTES));
        while low < high {
            let mid = (low + high) / 2;
            match tabbed(line_at(mid * PAGE_BYTES)) {
                true => high = mid,
                false => low = mid + 1,
            }
        }
        let mut at = line_at(low.saturating_sub(1) * PAGE_BYTES);
        while at < bytes.len() && !tabbed(at) {
            at = end_of(at) + 1;
        }
        at.min(bytes.len())
    }

    /// The first line after the line at `at` (whose address is at least `low`) with a higher address than it.
    fn next_point(own: &[u8], mut at: usize, low: u64) -> Next {
        let Some((addr, _, mut next)) = own_line(own, at).filter(|&(addr, ..)| addr >= low) else {
            return Next::Disorder;
        };
        loop {
            at = next;
            if at >= own.len() {
                return Next::End;
            }
            match own_line(own, at) {
                Some((same, _, after)) if same == addr => next = after,
                Some((higher, kind, _)) if higher > addr => return Next::Point(at as u32, higher, kind),
                _ => return Next::Disorder,
            }
        }
    }

    /// Where the lines from `at` on (the first at least `low`) leave the kernel's order or layout.
    fn in_order_until(own: &[u8], mut at: usize, mut low: u64) -> usize {
        while at < own.len() {
            match own_line(own, at) {
                Some((addr, _, next)) if addr >= low => (low, at) = (addr, next),
                _ => return at,
            }
        }
        own.len()
    }

    /// This index if it read every line, else the whole text read line by line.
    fn whole(&self, text: &[u8]) -> &Pages {
        match self.read_through {
            true => self,
            false => self.full.get_or_init(|| Box::new(Pages::read_whole(text).0)),
        }
    }

    fn find(&self, text: &[u8], addr: u64) -> Option<(u64, u64, u32)> {
        if let Some(whole) = self.full.get() {
            return whole.find(text, addr);
        }
        self.find_in_order(text, addr).unwrap_or_else(|OutOfOrder| match self.read_through {
            // Every page of a text read line by line was checked: not reached.
            true => None,
            false => self.whole(text).find(text, addr),
        })
    }

    /// The code symbol holding `addr`: the highest code start at or below it in the sorted part or the rest (on
    /// equal starts the sorted part's line, listed first), ending at the next code start in either.
    fn find_in_order(&self, text: &[u8], addr: u64) -> Result<Option<(u64, u64, u32)>, OutOfOrder> {
        let rest = &self.rest;
        let sorted = self.floor(text, addr)?;
        let i = rest.partition_point(|&(start, _)| start <= addr);
        let (start, line) = match (sorted, i.checked_sub(1).map(|i| rest[i])) {
            (Some(s), Some(r)) if r.0 > s.0 => r,
            (Some(s), _) => s,
            (None, Some(r)) => r,
            (None, None) => return Ok(None),
        };
        let after_rest = rest.get(rest.partition_point(|&(s, _)| s <= start)).map(|&(s, _)| s);
        let after = match (self.next_after(text, start)?, after_rest) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => a.or(b).unwrap_or(start.saturating_add(LAST_SYMBOL_SIZE)),
        };
        Ok((addr < after).then_some((start, after, line)))
    }

    /// Every code start, in order.
    #[cfg(test)]
    fn starts(&self, text: &[u8]) -> Vec<u64> {
        let mut starts: Vec<u64> = (0..self.points.len())
            .flat_map(|p| self.page(text, p).unwrap_or_default().iter().copied())
            .filter(|&(addr, kind, _)| is_code(kind) && addr != 0)
            .map(|(addr, ..)| addr)
            .collect();
        starts.extend(self.rest.iter().map(|&(start, _)| start));
        starts.sort_unstable();
        starts.dedup();
        starts
    }

    /// The sorted part's lines of page `p` (of `points`), all of them, checked to be in order and layout, so that a
    /// lookup answers only from a page that is; read once.
    fn page(&self, text: &[u8], p: usize) -> Result<&[Line], OutOfOrder> {
        if let Some(lines) = self.read[p].get() {
            return Ok(lines);
        }
        let lines = self.read_page(text, p)?;
        Ok(self.read[p].get_or_init(|| lines.into()))
    }

    fn read_page(&self, text: &[u8], p: usize) -> Result<Vec<Line>, OutOfOrder> {
        let (mut at, mut low) = (self.points[p].0 as usize, self.points[p].1);
        let (end, below) = match self.points.get(p + 1) {
            Some(&(at, addr)) => (at as usize, Some(addr)),
            None => (self.sorted_end, None),
        };
        let mut lines = Vec::with_capacity(PAGE_BYTES / 32);
        while at < end {
            match own_line(&text[..end], at) {
                Some((addr, kind, next)) if addr >= low && below.map_or(true, |below| addr < below) => {
                    lines.push((addr, kind, at as u32));
                    (low, at) = (addr, next);
                }
                _ => return Err(OutOfOrder),
            }
        }
        Ok(lines)
    }

    /// The highest code start at or below `addr` in the sorted part, with the line of the first symbol listed there.
    fn floor(&self, text: &[u8], addr: u64) -> Result<Option<(u64, u32)>, OutOfOrder> {
        if addr > self.last_addr {
            // Above every line (module and BPF code listed after them, say): their last code symbol, found once.
            if let Some(&last) = self.last_code.get() {
                return Ok(last);
            }
            let last = self.highest_code_from(text, self.points.len(), u64::MAX)?;
            return Ok(*self.last_code.get_or_init(|| last));
        }
        let pages = self.points.partition_point(|&(_, first)| first <= addr);
        self.highest_code_from(text, pages, addr)
    }

    /// The highest code start at or below `addr` in the pages before page `pages`, reading back a page at a time.
    fn highest_code_from(&self, text: &[u8], pages: usize, addr: u64) -> Result<Option<(u64, u32)>, OutOfOrder> {
        for p in (0..pages).rev() {
            let mut found: Option<(u64, u32)> = None;
            for &(line_addr, kind, at) in self.page(text, p)? {
                if line_addr > addr {
                    break;
                }
                // Lines at one address are never split between pages: the first listed is in this one.
                if is_code(kind) && line_addr != 0 && found.map_or(true, |(start, _)| start != line_addr) {
                    found = Some((line_addr, at));
                }
            }
            if found.is_some() {
                return Ok(found);
            }
        }
        Ok(None)
    }

    /// The lowest code start above `start` in the sorted part.
    fn next_after(&self, text: &[u8], start: u64) -> Result<Option<u64>, OutOfOrder> {
        if start >= self.last_addr {
            return Ok(None);
        }
        let first = self.points.partition_point(|&(_, first)| first <= start).saturating_sub(1);
        for p in first..self.points.len() {
            for &(addr, kind, _) in self.page(text, p)? {
                if addr > start && is_code(kind) {
                    return Ok(Some(addr));
                }
            }
        }
        Ok(None)
    }
}

/// The address, type and end of the line at `at` if it starts with the kernel's own layout, `%016lx %c ` and a
/// name; `None` for any other line, which is read by the general split.
fn fixed_line(bytes: &[u8], at: usize) -> Option<(u64, u8, usize)> {
    let line = &bytes[at..];
    let (digits, kind) = fixed_start(line)?;
    let addr = address(digits);
    let end = Newlines::new(bytes, at + 20).next_from(at + 20).unwrap_or(bytes.len());
    Some((addr, kind, end + 1))
}

/// [`fixed_line`] of a line of the kernel's own symbols: none holds a tab (a module's name follows one).
fn own_line(bytes: &[u8], at: usize) -> Option<(u64, u8, usize)> {
    let (addr, kind, next) = fixed_line(bytes, at)?;
    let end = (next - 1).min(bytes.len());
    memchr::memchr(b'\t', &bytes[at + 20..end]).is_none().then_some((addr, kind, next))
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGH_BITS: u64 = ONES << 7;

/// Eight lowercase hex digits (as the kernel prints them; any other line is left to the general split), all eight
/// at once: a byte at a time was a quarter of reading kallsyms.
fn hex8(digits: [u8; 8]) -> Option<u32> {
    // The first digit in the top byte, so the nibbles pack in order.
    let x = u64::from_be_bytes(digits);
    // With every byte below 0x80, adding 0x80 - n to each sets its top bit exactly where it is at least n, and
    // never carries into the next byte.
    let at_least = |n: u8| x.wrapping_add(ONES * (0x80 - n) as u64) & HIGH_BITS;
    let digit = at_least(b'0') & !at_least(b'9' + 1);
    let letter = at_least(b'a') & !at_least(b'f' + 1);
    if x & HIGH_BITS != 0 || digit | letter != HIGH_BITS {
        return None;
    }
    let mut n = (x & (ONES * 0xf)) + (letter >> 7) * 9;
    n = (n | n >> 4) & 0x00ff_00ff_00ff_00ff;
    n = (n | n >> 8) & 0x0000_ffff_0000_ffff;
    Some((n | n >> 16) as u32)
}

/// A kallsyms address: hex digits (an optional `0x`), at most 16 of them.
fn parse_address(text: &str) -> Option<u64> {
    let digits = text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")).unwrap_or(text).as_bytes();
    if digits.is_empty() || digits.len() > 16 {
        return None;
    }
    let mut value = 0u64;
    for &d in digits {
        let nibble = match d {
            b'0'..=b'9' => d - b'0',
            b'a'..=b'f' => d - b'a' + 10,
            b'A'..=b'F' => d - b'A' + 10,
            _ => return None,
        };
        value = value << 4 | nibble as u64;
    }
    Some(value)
}

/// The fields of a kallsyms line, `ADDRESS TYPE NAME [MODULE]`, split at whitespace (`None` with fewer than three).
fn kallsyms_fields(line: &str) -> Option<(&str, &str, &str, Option<&str>)> {
    if !line.is_ascii() {
        let mut fields = line.split_whitespace();
        return Some((fields.next()?, fields.next()?, fields.next()?, fields.next()));
    }
    // The same split on bytes: over 100,000 lines per kallsyms, this is most of reading it.
    let bytes = line.as_bytes();
    let mut at = 0;
    let mut next = || {
        while at < bytes.len() && bytes[at].is_ascii_whitespace() {
            at += 1;
        }
        let start = at;
        while at < bytes.len() && !bytes[at].is_ascii_whitespace() {
            at += 1;
        }
        (at > start).then(|| &line[start..at])
    };
    Some((next()?, next()?, next()?, next()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
ffffffff81000000 T _stext
ffffffff81000000 T _text
ffffffff81001000 t do_one_initcall
ffffffff81002000 D some_data
ffffffff81003000 T __x64_sys_read
ffffffffc0100000 t ext4_readdir\t[ext4]
ffffffffc0100200 t ext4_release_dir\t[ext4]
";

    #[test]
    fn lookups_name_kernel_and_module_code() {
        let k = KernelSymbols::parse(SAMPLE);
        assert!(!k.hidden);
        let at = |a: u64| k.lookup(a).map(|s| (s.name.to_string(), s.module.to_string()));
        assert_eq!(at(0xffffffff81000010).unwrap().0, "_stext");
        assert_eq!(at(0xffffffff81001fff).unwrap().0, "do_one_initcall");
        // The data symbol is not code: the preceding function extends over it up to the next function.
        assert_eq!(at(0xffffffff81002500).unwrap().0, "do_one_initcall");
        assert_eq!(at(0xffffffff81003001).unwrap(), ("__x64_sys_read".into(), "[kernel.kallsyms]".into()));
        assert_eq!(at(0xffffffffc0100010).unwrap(), ("ext4_readdir".into(), "[ext4]".into()));
        assert_eq!(at(0xffffffffc0100200 + 4095).unwrap().0, "ext4_release_dir");
        assert!(at(0xffffffffc0100200 + 4096).is_none());
        assert!(at(0x1000).is_none());
    }

    #[test]
    fn fixed_layout_reads_as_the_whitespace_split() {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut crate::procfs::kallsyms().unwrap(), &mut text).unwrap();
        let odd = "ffffffff81000000 T name\t\nffffffff81000000 T name\t[mod] more\nffffffff81000000 T name [mod]\n\
                   ffffffff81000000 T nämé\t[mod]\n fffffff81000000 T name\nffffffff81000000 TT name\n\
                   ffffffff81000000  T name\nffffffff81000000 T  name\nffffffff8100000g T name\nffffffff81000000 T\n\
                   ffffffff81000000 T x\r\nffffffff81000000 T a-very-long-name-that-spans-words\n";
        for text in [text.as_str(), odd] {
            let mut at = 0;
            while at < text.len() {
                let end = text[at..].find('\n').map_or(text.len(), |i| at + i);
                let line = &text[at..end];
                let mut split = line.split_whitespace();
                let general = (split.next().and_then(parse_address), split.next(), split.next());
                if let Some((addr, kind, next)) = fixed_line(text.as_bytes(), at) {
                    assert_eq!(next, end + 1, "{line:?}");
                    assert_eq!(general.0, Some(addr), "{line:?}");
                    assert_eq!(general.1, Some(&line[17..18]), "{line:?}");
                    assert_eq!(kind, line.as_bytes()[17], "{line:?}");
                    assert!(general.2.is_some(), "{line:?}");
                }
                at = end + 1;
            }
        }
    }

    #[test]
    fn hex_digits_are_lowercase_only() {
        for at in 0..8 {
            for b in 0..=255u8 {
                let mut digits = *b"09af5c3e";
                digits[at] = b;
                let expected = match b {
                    b'0'..=b'9' | b'a'..=b'f' => u32::from_str_radix(std::str::from_utf8(&digits).unwrap(), 16).ok(),
                    _ => None,
                };
                assert_eq!(hex8(digits), expected, "{digits:?}");
            }
        }
        for at in 0..16 {
            for b in 0..=255u8 {
                let mut digits = *b"09af5c3e71bd2486";
                digits[at] = b;
                assert_eq!(lower_hex16(&digits), matches!(b, b'0'..=b'9' | b'a'..=b'f'), "{digits:?}");
            }
        }
    }

    /// The table as read before the one-pass reading: every line split at whitespace, sorted, clipped.
    fn reference_table(text: &str) -> (Vec<(u64, u64, u32)>, bool) {
        let (mut listed, mut any_nonzero, mut entries) = (0, false, Vec::new());
        let mut at = 0;
        while at < text.len() {
            let end = text[at..].find('\n').map_or(text.len(), |i| at + i);
            let mut split = text[at..end].split_whitespace();
            let fields = (split.next().and_then(parse_address), split.next(), split.next());
            if let (Some(addr), Some(kind), Some(_)) = fields {
                listed += 1;
                any_nonzero |= addr != 0;
                if ["t", "T", "w", "W"].contains(&kind) && addr != 0 {
                    entries.push((addr, at as u32));
                }
            }
            at = end + 1;
        }
        entries.sort_by_key(|&(addr, _)| addr);
        entries.dedup_by_key(|&mut (addr, _)| addr);
        let ranges = (0..entries.len()).map(|i| {
            let (start, line) = entries[i];
            let end = entries.get(i + 1).map_or(start.saturating_add(LAST_SYMBOL_SIZE), |next| next.0);
            Range { start, end, value: line }
        });
        let table = RangeTable::from_unsorted(ranges.collect());
        (table.iter().map(|r| (r.start, r.end, r.value)).collect(), listed > 0 && !any_nonzero)
    }

    /// `k` finds what the reference table holds, at every symbol's first and last byte, just outside each and at
    /// `extra` addresses.
    fn assert_reads_as_reference(k: &KernelSymbols, text: &str, extra: &[u64]) {
        let (table, hidden) = reference_table(text);
        let shown: String = text.chars().take(200).collect();
        assert_eq!(k.hidden, hidden, "{shown:?}");
        let reference = RangeTable::from_unsorted(
            table.iter().map(|&(start, end, value)| Range { start, end, value }).collect::<Vec<_>>(),
        );
        let expected = |addr: u64| reference.lookup(addr).map(|r| (r.start, r.end, r.value));
        let probes = table
            .iter()
            .flat_map(|&(start, end, _)| [start, end - 1, end, start.wrapping_sub(1), start + (end - start) / 2]);
        for addr in probes.chain(extra.iter().copied()) {
            assert_eq!(k.find(addr), expected(addr), "at {addr:#x} of {shown:?}");
        }
        assert_eq!(k.is_empty(), table.is_empty(), "{shown:?}");
    }

    #[test]
    fn lookups_read_as_sorting_and_clipping() {
        let mut live = String::new();
        std::io::Read::read_to_string(&mut crate::procfs::kallsyms().unwrap(), &mut live).unwrap();
        // Out of order, repeated and odd lines.
        let mut shuffled: Vec<&str> = live.lines().collect();
        shuffled.reverse();
        let third = shuffled.len() / 3;
        shuffled.rotate_left(third);
        let shuffled = shuffled.join("\n");
        // In order, then modules out of order, with aliases and data across pages.
        let mut blocks = String::new();
        for i in 0..320u64 {
            let kind = ["T", "t", "D", "W", "d"][(i % 7 % 5) as usize];
            let addr = 0xffffffff81000000 + (i / 3) * 0x40;
            blocks.push_str(&format!("{addr:016x} {kind} f{i}\n"));
        }
        blocks.push_str("ffffffffc0000040 t m2\t[mod]\nffffffffc0000000 t m1\t[mod]\nffffffff81000040 T late\n");
        let odd = "ffffffff81000010 T b\nffffffff81000000 t a\nffffffff81000010 W b2\nFFFFFFFF81000020 T upper\n\
                   0xffffffff81000030 T prefixed\nffffffff81000000 T a2\n  ffffffff81000040\tT spaced\n\
                   ffffffffffffffff T last\nffffffff8100005 T short\nffffffff81000050 D data\n";
        let mut rng = crate::random_inputs::Rng::new(0x5eed_0004);
        let mut inputs = vec![live.clone(), shuffled, blocks, odd.to_string(), SAMPLE.to_string()];
        inputs.extend(
            rng.inputs(&[SAMPLE.as_bytes(), odd.as_bytes()], 2000)
                .into_iter()
                .map(|b| String::from_utf8_lossy(&b).into()),
        );
        for text in &inputs {
            assert_reads_as_reference(&KernelSymbols::parse(text), text, &[0, 1, u64::MAX, 0xffffffff81000000]);
        }
        let k = KernelSymbols::parse(&live);
        assert_reads_as_reference(&k, &live, &[]);
        assert!(k.hidden || paged(&k), "the live listing, in the kernel's order, is read where lookups land");
    }

    /// Whether `k` is read where lookups land, not whole ([`Pages`]).
    fn paged(k: &KernelSymbols) -> bool {
        matches!(&k.index, Index::Pages(pages) if !pages.read_through && pages.full.get().is_none())
    }

    /// A long listing in the kernel's layout: its own symbols in address order, with runs of aliases longer than a
    /// page and data between the code, then modules' symbols out of order.
    fn long_listing() -> String {
        let mut text = String::new();
        let mut addr = 0xffffffff81000000u64;
        for i in 0..6000u64 {
            let (kind, step) = match i % 97 {
                0..=9 => ("d", 0x10),
                10 => ("T", 0),
                _ if i % 5 == 0 => ("t", 0x40),
                _ => ("T", 0x20),
            };
            text.push_str(&format!("{addr:016x} {kind} symbol_{i}\n"));
            addr += step;
            if i == 3000 {
                // Aliases spanning two pages.
                for a in 0..250 {
                    text.push_str(&format!("{addr:016x} T alias_{a}\n"));
                }
                addr += 0x30;
            }
        }
        for (module, base) in
            [("ext4", 0xffffffffc0200000u64), ("xfs", 0xffffffffc0100000), ("kvm", 0xffffffffc0300000)]
        {
            for f in 0..40u64 {
                text.push_str(&format!("{:016x} t {module}_f{f}\t[{module}]\n", base + f * 0x80));
            }
        }
        text
    }

    #[test]
    fn a_long_listing_is_read_where_lookups_land() {
        let text = long_listing();
        assert!(text.len() > PAGED_FROM);
        let k = KernelSymbols::parse(&text);
        assert!(paged(&k));
        let Index::Pages(pages) = &k.index else { unreachable!() };
        assert!(pages.points.len() > 20, "{} points", pages.points.len());
        assert_eq!(pages.rest.len(), 120, "the modules' symbols are read whole");
        assert_reads_as_reference(&k, &text, &[0, 1, u64::MAX, 0xffffffffc0000000, 0xffffffffffffff00]);
        assert!(paged(&k), "every lookup read lines in order");
        assert_eq!(k.lookup(0xffffffffc0100085).unwrap().name.as_ref(), "xfs_f1");
    }

    #[test]
    fn a_long_listing_out_of_order_where_a_lookup_reads_is_read_whole() {
        for (a, b) in [(2000, 2001), (4000, 4100)] {
            let mut lines: Vec<String> = long_listing().lines().map(String::from).collect();
            lines.swap(a, b);
            let text = lines.join("\n") + "\n";
            let k = KernelSymbols::parse(&text);
            assert!(paged(&k));
            // Before the line listed too early (the lookup's own lines are in order).
            let lower = parse_address(&lines[b][..16]).unwrap();
            k.find(lower);
            assert!(!paged(&k), "a lookup read the page with lines {a} and {b} swapped");
            assert_reads_as_reference(&k, &text, &[0, u64::MAX]);
        }
        // The index stops where the kernel's order does when its pages show it: what follows is read whole.
        let mut lines: Vec<String> = long_listing().lines().map(String::from).collect();
        lines[2000..4300].rotate_left(1500);
        let rotated = lines.join("\n") + "\n";
        let k = KernelSymbols::parse(&rotated);
        assert_reads_as_reference(&k, &rotated, &[0, u64::MAX]);
        assert!(paged(&k), "the part in order read where lookups land, the rest whole");
        let reversed: String = long_listing().lines().rev().map(|l| format!("{l}\n")).collect();
        assert_reads_as_reference(&KernelSymbols::parse(&reversed), &reversed, &[0, u64::MAX]);
    }

    #[test]
    fn a_mutated_long_listing_never_panics() {
        let mut rng = crate::random_inputs::Rng::new(0x5eed_0005);
        let listing = long_listing();
        for _ in 0..40 {
            let mut text = listing.as_bytes().to_vec();
            for _ in 0..rng.below(12) {
                text = rng.mutate(&text);
            }
            let k = KernelSymbols::from_text(Text::Read(text.clone().into()));
            let listed = text
                .split(|&b| b == b'\n')
                .filter_map(|line| u64::from_str_radix(std::str::from_utf8(line.get(..16)?).ok()?, 16).ok());
            let probes: Vec<u64> = listed.step_by(7).flat_map(|a| [a, a.wrapping_add(1), a.wrapping_sub(1)]).collect();
            for addr in probes.into_iter().chain([0, u64::MAX, rng.next()]) {
                if let Some(symbol) = k.lookup(addr) {
                    assert!(symbol.start <= addr && addr < symbol.end, "{addr:#x} in {symbol:?}");
                }
            }
        }
    }

    #[test]
    fn perf_cache_copy_reads_as_the_text() {
        let mut live = String::new();
        std::io::Read::read_to_string(&mut crate::procfs::kallsyms().unwrap(), &mut live).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let copy = dir.path().join(KERNEL_MODULE).join("00");
        std::fs::create_dir_all(&copy).unwrap();
        std::fs::write(copy.join("kallsyms"), &live).unwrap();
        // SAFETY of the environment change: tests of this module are the only readers of PERF_BUILDID_DIR.
        unsafe { std::env::set_var("PERF_BUILDID_DIR", dir.path()) };
        let mapped = KernelSymbols::from_perf_cache(&[0]);
        unsafe { std::env::remove_var("PERF_BUILDID_DIR") };
        match mapped {
            Some(k) => assert_reads_as_reference(&k, &live, &[]),
            None => assert!(KernelSymbols::parse(&live).hidden, "a visible kallsyms copy was refused"),
        }
    }

    #[test]
    fn all_zero_addresses_mean_hidden() {
        let k = KernelSymbols::parse("0000000000000000 T _stext\n0000000000000000 t foo [mod]\n");
        assert!(k.hidden);
        assert!(k.is_empty());
        assert!(!KernelSymbols::parse("").hidden);
        // A long listing too (kallsyms under kptr_restrict).
        let zeroed: String = long_listing().lines().map(|l| format!("{:016x}{}\n", 0, &l[16..])).collect();
        let k = KernelSymbols::parse(&zeroed);
        assert!(k.hidden && k.is_empty());
        assert!(k.lookup(0).is_none());
    }

    #[test]
    fn garbage_lines_are_ignored() {
        let k = KernelSymbols::parse("zzz T x\nffffffff81000000\n\nffffffff81000000 T ok\n\u{0} \u{1}\n");
        assert_eq!(k.lookup(0xffffffff81000fff).unwrap().name.as_ref(), "ok");
        assert!(k.lookup(0xffffffff81001000).is_none());
        assert!(!k.hidden);
    }

    #[test]
    fn live_kallsyms_names_the_scheduler() {
        let k = KernelSymbols::read_live().unwrap();
        let mut text = String::new();
        std::io::Read::read_to_string(&mut crate::procfs::kallsyms().unwrap(), &mut text).unwrap();
        let line = text.lines().find(|l| l.ends_with(" T schedule")).expect("kallsyms lists schedule");
        let addr = parse_address(&line[..16]).unwrap();
        match k.hidden {
            true => assert_eq!(addr, 0),
            false => assert_eq!(k.lookup(addr + 1).unwrap().name.as_ref(), "schedule"),
        }
    }

    #[test]
    fn random_and_mutated_input_never_panics() {
        let mut rng = crate::random_inputs::Rng::new(0x5eed_0003);
        for input in rng.inputs(&[SAMPLE.as_bytes()], 3000) {
            let text = String::from_utf8_lossy(&input);
            let k = KernelSymbols::parse(&text);
            let starts: Vec<u64> = k.iter().map(|s| s.start).collect();
            let expected: Vec<u64> = reference_table(&text).0.iter().map(|r| r.0).collect();
            assert_eq!(starts, expected);
            for s in k.iter() {
                assert!(s.start < s.end);
            }
        }
    }

    /// Both ways of finding newlines agree.
    #[test]
    fn the_newline_searches_agree() {
        let mut rng = crate::random_inputs::Rng::new(0x5eed_0004);
        for input in rng.inputs(&[SAMPLE.as_bytes()], 3000) {
            for chunk in input.chunks_exact(64) {
                #[cfg(target_arch = "x86_64")]
                assert_eq!(newline_mask_sse2(chunk.try_into().unwrap()), newline_mask_bytes(chunk), "{chunk:?}");
                let first = chunk.iter().position(|&b| b == b'\n');
                assert_eq!(Newlines::new(chunk, 0).next_from(0), first, "{chunk:?}");
            }
        }
    }
}
