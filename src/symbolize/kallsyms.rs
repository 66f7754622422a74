//! Kernel symbols from `/proc/kallsyms` (`ADDRESS TYPE NAME [MODULE]` per line). Only code symbols are kept; a
//! symbol ends where the next one starts. Under `kernel.kptr_restrict` (or without privilege) every address reads
//! as zero: the table is then "hidden" and kernel frames can only be shown as `[kernel]`.

use super::ranges::{Range, RangeTable};
use std::sync::Arc;

/// Size given to the last symbol, which has no successor to end it (perf uses a page as well).
const LAST_SYMBOL_SIZE: u64 = 4096;

/// The kernel's code symbols. A kallsyms file holds over 100,000 of them and a profile hits a few dozen, so reading
/// one only locates its line (the address and type are at fixed places); its name and module are read from the line
/// when it is looked up.
#[derive(Debug, Default)]
pub struct KernelSymbols {
    /// Each symbol's line in `text`, by address range.
    table: RangeTable<u32>,
    text: Box<str>,
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

impl KernelSymbols {
    pub fn parse(text: &str) -> KernelSymbols {
        Self::parse_owned(text.to_owned())
    }

    /// [`parse`](Self::parse), keeping `text` for the names.
    fn parse_owned(text: String) -> KernelSymbols {
        let mut listed = 0usize;
        let mut any_nonzero = false;
        // Each symbol ends where the next starts, so while the lines come in address order (as kallsyms lists them)
        // a range is finished as soon as its successor is read: one pass, no sort, one table. A line in the kernel's
        // layout takes at least 21 bytes, so the table is sized once (its untouched end costs no page faults and is
        // given back at the end) instead of counting lines in a pass of its own.
        let mut ranges: Vec<Range<u32>> = Vec::with_capacity(text.len() / 21 + 1);
        let mut sorted = true;
        let mut at = 0;
        while at < text.len() {
            let (fields, next) = match fixed_line(text.as_bytes(), at) {
                Some((addr, kind, next)) => (Some((addr, kind)), next),
                None => {
                    let end = memchr::memchr(b'\n', &text.as_bytes()[at..]).map_or(text.len(), |i| at + i);
                    let fields = kallsyms_fields(&text[at..end]).and_then(|(addr, kind, ..)| {
                        Some((parse_address(addr)?, kind.as_bytes()[0] * (kind.len() == 1) as u8))
                    });
                    (fields, end + 1)
                }
            };
            let line = at as u32;
            at = next;
            let Some((addr, kind)) = fields else { continue };
            listed += 1;
            any_nonzero |= addr != 0;
            // Text symbols only (t/T, weak w/W): data symbols would swallow code addresses between them.
            if !matches!(kind, b't' | b'T' | b'w' | b'W') || addr == 0 {
                continue;
            }
            if let Some(last) = ranges.last_mut() {
                // Aliases share a start address (`_stext`/`_text`): the first listed is kept.
                if addr == last.start {
                    continue;
                }
                sorted &= addr > last.start;
                last.end = addr;
            }
            ranges.push(Range { start: addr, end: addr, value: line });
        }
        let hidden = listed > 0 && !any_nonzero;
        if !sorted {
            // The stable sort keeps the first listed of an address first.
            ranges.sort_by_key(|r| r.start);
            ranges.dedup_by_key(|r| r.start);
            for i in 1..ranges.len() {
                ranges[i - 1].end = ranges[i].start;
            }
        }
        if let Some(last) = ranges.last_mut() {
            last.end = last.start.saturating_add(LAST_SYMBOL_SIZE);
            if last.end == last.start {
                ranges.pop();
            }
        }
        ranges.shrink_to_fit();
        KernelSymbols { table: RangeTable::from_sorted(ranges), text: text.into_boxed_str(), hidden }
    }

    /// A table of `(start, end, name, module)` entries (a capture's saved symbols).
    pub fn from_entries<'a>(entries: impl IntoIterator<Item = (u64, u64, &'a str, &'a str)>, hidden: bool) -> Self {
        let mut text = String::new();
        let mut ranges = Vec::new();
        for (start, end, name, module) in entries {
            ranges.push(Range { start, end, value: text.len() as u32 });
            text.push_str(&format!("{start:016x} t {name}\t{module}\n"));
        }
        KernelSymbols { table: RangeTable::from_unsorted(ranges), text: text.into(), hidden }
    }

    /// The symbol holding `addr`, its name capped as every name is ([`super::name_limit`]).
    pub fn lookup(&self, addr: u64) -> Option<KernelSymbol> {
        let r = self.table.lookup(addr)?;
        let at = r.value as usize;
        let end = memchr::memchr(b'\n', &self.text.as_bytes()[at..]).map_or(self.text.len(), |i| at + i);
        let (_, _, name, module) = kallsyms_fields(&self.text[at..end])?;
        let module = match module {
            Some(m) if m.starts_with('[') && m.ends_with(']') => super::name_limit::cap_arc(m),
            _ => Arc::from(KERNEL_MODULE),
        };
        Some(KernelSymbol { start: r.start, end: r.end, name: super::name_limit::cap_arc(name), module })
    }

    /// Every symbol, in address order (each read from its line as for a lookup).
    pub fn iter(&self) -> impl Iterator<Item = KernelSymbol> + '_ {
        self.table.iter().filter_map(|r| self.lookup(r.start))
    }

    pub fn len(&self) -> usize {
        self.table.len()
    }

    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    pub fn read_live() -> std::io::Result<KernelSymbols> {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut crate::procfs::kallsyms()?, &mut text)?;
        Ok(Self::parse_owned(text))
    }

    /// The copy of kallsyms that `perf record` saved in perf's build-id cache for the kernel with this build-id
    /// (`$PERF_BUILDID_DIR`, else `~/.debug`: `[kernel.kallsyms]/<build-id>/kallsyms`), as `perf script` uses it.
    /// Reading a file is many times cheaper than `/proc/kallsyms`, which the kernel formats line by line on every
    /// read. Only a regular file of the current user or root is believed.
    pub fn from_perf_cache(build_id: &[u8]) -> Option<KernelSymbols> {
        use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
        const MAX_LEN: u64 = 256 << 20;
        let base = match std::env::var_os("PERF_BUILDID_DIR") {
            Some(dir) if !dir.is_empty() => std::path::PathBuf::from(dir),
            _ => std::path::PathBuf::from(std::env::var_os("HOME")?).join(".debug"),
        };
        let hex: String = build_id.iter().map(|b| format!("{b:02x}")).collect();
        let path = base.join(KERNEL_MODULE).join(hex).join("kallsyms");
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(&path)
            .ok()?;
        let meta = file.metadata().ok()?;
        let owner_ok = meta.uid() == 0 || meta.uid() == nix::unistd::geteuid().as_raw();
        if !meta.is_file() || !owner_ok || meta.len() > MAX_LEN {
            return None;
        }
        // Read whole at its known size (not grown by doubling), into memory not zeroed first.
        let bytes = crate::fs::input::read_all(&mut file, meta.len(), crate::fs::Limit { bytes: MAX_LEN }).ok()?;
        let symbols = Self::parse_owned(String::from_utf8(bytes).ok()?);
        (!symbols.hidden && !symbols.is_empty()).then_some(symbols)
    }
}

/// The address, type and end of the line at `at` if it starts with the kernel's own layout, `%016lx %c ` and a
/// name (over 100,000 lines per kallsyms: this is most of reading it); `None` for any other line, which is read by
/// the general split. The line is found by a search for its newline two words at a time.
fn fixed_line(bytes: &[u8], at: usize) -> Option<(u64, u8, usize)> {
    let line = &bytes[at..];
    if line.len() < 20 || line[16] != b' ' || line[18] != b' ' {
        return None;
    }
    let addr = (hex8(line[..8].try_into().unwrap())? as u64) << 32 | hex8(line[8..16].try_into().unwrap())? as u64;
    if !line[17].is_ascii_graphic() || !line[19].is_ascii_graphic() {
        return None;
    }
    // Sixteen bytes a step (names are 24 bytes on average); a word's lowest flagged byte is a true newline.
    const NEWLINES: u64 = ONES * b'\n' as u64;
    let newlines = |word: &[u8]| {
        let word = u64::from_le_bytes(word.try_into().unwrap()) ^ NEWLINES;
        word.wrapping_sub(ONES) & !word & HIGH_BITS
    };
    let mut i = 20;
    while let Some(chunk) = line.get(i..i + 16) {
        let (low, high) = (newlines(&chunk[..8]), newlines(&chunk[8..]));
        if low | high != 0 {
            let bit = if low != 0 { low.trailing_zeros() } else { 64 + high.trailing_zeros() };
            return Some((addr, line[17], at + i + bit as usize / 8 + 1));
        }
        i += 16;
    }
    let end = line[i..].iter().position(|&b| b == b'\n').map_or(line.len(), |n| i + n);
    Some((addr, line[17], at + end + 1))
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
    fn hex8_takes_lowercase_hex_only() {
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

    #[test]
    fn one_pass_reads_as_sorting_and_clipping() {
        let mut live = String::new();
        std::io::Read::read_to_string(&mut crate::procfs::kallsyms().unwrap(), &mut live).unwrap();
        // Out of order, repeated and odd lines.
        let mut shuffled: Vec<&str> = live.lines().collect();
        shuffled.reverse();
        let third = shuffled.len() / 3;
        shuffled.rotate_left(third);
        let shuffled = shuffled.join("\n");
        let odd = "ffffffff81000010 T b\nffffffff81000000 t a\nffffffff81000010 W b2\nFFFFFFFF81000020 T upper\n\
                   0xffffffff81000030 T prefixed\nffffffff81000000 T a2\n  ffffffff81000040\tT spaced\n\
                   ffffffffffffffff T last\nffffffff8100005 T short\nffffffff81000050 D data\n";
        let mut rng = crate::symbolize::random_inputs::Rng::new(0x5eed_0004);
        let mut inputs = vec![live.clone(), shuffled, odd.to_string(), SAMPLE.to_string()];
        inputs.extend(
            rng.inputs(&[SAMPLE.as_bytes(), odd.as_bytes()], 2000)
                .into_iter()
                .map(|b| String::from_utf8_lossy(&b).into()),
        );
        for text in &inputs {
            let k = KernelSymbols::parse(text);
            let table: Vec<_> = k.table.iter().map(|r| (r.start, r.end, r.value)).collect();
            assert_eq!((table, k.hidden), reference_table(text), "{:?}", &text[..text.len().min(200)]);
        }
    }

    #[test]
    fn all_zero_addresses_mean_hidden() {
        let k = KernelSymbols::parse("0000000000000000 T _stext\n0000000000000000 t foo [mod]\n");
        assert!(k.hidden);
        assert!(k.is_empty());
        assert!(!KernelSymbols::parse("").hidden);
    }

    #[test]
    fn garbage_lines_are_ignored() {
        let k = KernelSymbols::parse("zzz T x\nffffffff81000000\n\nffffffff81000000 T ok\n\u{0} \u{1}\n");
        assert_eq!(k.len(), 1);
        assert!(!k.hidden);
    }

    #[test]
    fn live_kallsyms_parses() {
        let k = KernelSymbols::read_live().unwrap();
        assert!(k.hidden || k.len() > 1000, "only {} kernel symbols", k.len());
    }

    #[test]
    fn random_and_mutated_input_never_panics() {
        let mut rng = crate::symbolize::random_inputs::Rng::new(0x5eed_0003);
        for input in rng.inputs(&[SAMPLE.as_bytes()], 3000) {
            let k = KernelSymbols::parse(&String::from_utf8_lossy(&input));
            assert_eq!(k.iter().count(), k.len());
            for s in k.iter() {
                assert!(s.start < s.end);
            }
        }
    }
}
