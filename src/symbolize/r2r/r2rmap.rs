//! `.r2rmap` files: the perf map crossgen2 writes for a ReadyToRun image (`--perfmap`, also shipped in symbol
//! packages). Format (ILCompiler.Diagnostics `PerfMapWriter`): one `RVA SIZE NAME` line per hot or cold code range,
//! hex numbers (`{rva:X8} {length:X2}`), the name to the end of the line; first a few pseudo-entries whose RVA is
//! `FFFFFFFx` and whose name is a value: `FFFFFFFF` output GUID, `FFFFFFFE` target OS, `FFFFFFFD` target
//! architecture, `FFFFFFFC` format version (older files: input assembly name / MVID).
//!
//! A later line wins where ranges overlap (like a runtime perf map); malformed lines are counted and skipped.

/// The lowest pseudo RVA: header entries, not code.
const FIRST_PSEUDO_RVA: u64 = 0xFFFF_FFF0;

fn parse_hex(s: &str) -> Option<u64> {
    let digits = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")).unwrap_or(s);
    if digits.is_empty() || digits.len() > 16 || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(digits, 16).ok()
}

#[derive(Debug, Default)]
pub struct R2rMap {
    /// `(start, end, name)` sorted by start, non-overlapping.
    entries: Vec<(u32, u32, Box<str>)>,
    /// Header values by pseudo RVA (`0xFFFFFFFF` = output GUID, …).
    pub header: Vec<(u32, String)>,
    pub bad_lines: usize,
}

impl R2rMap {
    pub fn parse(text: &[u8]) -> R2rMap {
        let mut map = R2rMap::default();
        let mut ranges: Vec<(u32, u32, usize, Box<str>)> = Vec::new();
        for (line_no, raw) in text.split(|&b| b == b'\n').enumerate() {
            let line = String::from_utf8_lossy(raw);
            let line = line.trim();
            if line.is_empty() {
                continue;
            }
            let mut parts = line.splitn(3, |c: char| c.is_ascii_whitespace());
            let (Some(rva), Some(size), name) = (parts.next(), parts.next(), parts.next()) else {
                map.bad_lines += 1;
                continue;
            };
            let name = name.unwrap_or("").trim();
            let (Some(rva), Some(size)) = (parse_hex(rva), parse_hex(size)) else {
                map.bad_lines += 1;
                continue;
            };
            if (FIRST_PSEUDO_RVA..=0xFFFF_FFFF).contains(&rva) {
                map.header.push((rva as u32, name.to_string()));
                continue;
            }
            let end = rva.checked_add(size).filter(|&e| e <= u32::MAX as u64 && size > 0);
            match end {
                Some(end) if !name.is_empty() => {
                    ranges.push((rva as u32, end as u32, line_no, super::super::name_limit::cap(name).into()))
                }
                _ => map.bad_lines += 1,
            }
        }
        // Later lines win: sort by start, then keep each range minus what later lines cover. Real maps do not
        // overlap, so the simple rule (drop an earlier range that a later one overlaps) is enough.
        ranges.sort_by_key(|&(start, _, line, _)| (start, std::cmp::Reverse(line)));
        for (start, end, _, name) in ranges {
            if let Some(last) = map.entries.last() {
                if start < last.1 {
                    continue;
                }
            }
            map.entries.push((start, end, name));
        }
        map
    }

    /// The name of the code range holding `rva`, with its start and size.
    pub fn lookup(&self, rva: u32) -> Option<(u32, u32, &str)> {
        let i = self.entries.partition_point(|&(start, _, _)| start <= rva).checked_sub(1)?;
        let (start, end, name) = &self.entries[i];
        (rva < *end).then_some((*start, end - start, &**name))
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The output GUID crossgen2 derived from the inputs' MVIDs, to check the map belongs to the image.
    pub fn output_guid(&self) -> Option<&str> {
        self.header.iter().find(|(rva, _)| *rva == 0xFFFF_FFFF).map(|(_, v)| v.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_header_and_ranges() {
        let map = R2rMap::parse(
            b"FFFFFFFF 00 4c1b7e0f-8c43-e4a9-2d2b-0e4d3ab24a6c\n\
              FFFFFFFE 00 Linux\r\n\
              FFFFFFFD 00 X64\n\
              FFFFFFFC 00 1\n\
              00010200 1A System.String.IndexOf(char, int32)\n\
              00010220 08 [S.P.CoreLib]System.Object..ctor()\n\
              garbage\n\
              00010300 00 empty\n",
        );
        assert_eq!(map.output_guid(), Some("4c1b7e0f-8c43-e4a9-2d2b-0e4d3ab24a6c"));
        assert_eq!(map.header.len(), 4);
        assert_eq!(map.len(), 2);
        assert_eq!(map.bad_lines, 2);
        assert_eq!(map.lookup(0x10200), Some((0x10200, 0x1a, "System.String.IndexOf(char, int32)")));
        assert_eq!(map.lookup(0x10219).map(|e| e.0), Some(0x10200));
        assert_eq!(map.lookup(0x1021a), None);
        assert_eq!(map.lookup(0x10227).map(|e| e.2), Some("[S.P.CoreLib]System.Object..ctor()"));
        assert_eq!(map.lookup(0x100), None);
    }
}
