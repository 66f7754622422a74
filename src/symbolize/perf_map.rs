//! The perf map a JIT writes to `/tmp/perf-<pid>.map`: one `START SIZE NAME` line per code range, hex numbers
//! (with or without `0x`), the name running to the end of the line (it may contain spaces). Lines are appended as
//! code is generated, so a later line wins where ranges overlap. Input comes from a process we do not trust: bad
//! lines are skipped and counted, never fatal. A NUL byte ends a line as a newline does: .NET 8 sometimes writes one
//! in place of the newline, and a name never holds one.

use super::name_limit;
use super::ranges::{LaterWinsBuilder, RangeTable};
use std::borrow::Cow;
use std::sync::Arc;

#[derive(Debug, Default)]
pub struct PerfMap {
    pub symbols: RangeTable<Arc<str>>,
    pub lines: usize,
    pub bad_lines: usize,
}

impl PerfMap {
    pub fn parse(bytes: &[u8]) -> PerfMap {
        let mut builder = LaterWinsBuilder::default();
        let (mut line_count, mut bad_lines) = (0, 0);
        for line in lines(bytes) {
            let line = line.trim_end_matches('\r');
            if line.trim().is_empty() {
                continue;
            }
            line_count += 1;
            match parse_line(line) {
                Some((start, end, name)) => builder.insert(start, end, name_limit::cap_arc(name)),
                None => bad_lines += 1,
            }
        }
        PerfMap { symbols: builder.build(), lines: line_count, bad_lines }
    }
}

/// Whether `b` ends a perf map line.
pub fn is_line_end(b: &u8) -> bool {
    *b == b'\n' || *b == 0
}

/// The lines of a perf map's bytes, decoded lossily (a name is shown, not trusted).
pub fn lines(bytes: &[u8]) -> impl Iterator<Item = Cow<'_, str>> {
    bytes.split(is_line_end).map(String::from_utf8_lossy)
}

/// `(start, end, name)` of one line, or `None` when it is not a usable entry.
pub fn parse_line(line: &str) -> Option<(u64, u64, &str)> {
    let line = line.trim_start();
    let (start, rest) = line.split_once(|c: char| c.is_ascii_whitespace())?;
    let rest = rest.trim_start();
    let (size, name) = rest.split_once(|c: char| c.is_ascii_whitespace())?;
    let name = name.trim();
    let (start, size) = (parse_hex(start)?, parse_hex(size)?);
    if name.is_empty() || size == 0 {
        return None;
    }
    Some((start, start.checked_add(size)?, name))
}

pub fn parse_hex(s: &str) -> Option<u64> {
    let digits = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(digits, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name_at(m: &PerfMap, addr: u64) -> Option<String> {
        m.symbols.lookup(addr).map(|r| r.value.to_string())
    }

    #[test]
    fn parses_dotnet_lines_with_spaces_in_names() {
        let m = PerfMap::parse(
            b"00007F3157E40078 48 stub<1> AllocateTemporaryEntryPoints<PRECODE_FIXUP>\n\
              00007F3157E57800 28 int64 [App] Workload::Spin(int32)[Optimized]\n",
        );
        assert_eq!((m.lines, m.bad_lines), (2, 0));
        assert_eq!(name_at(&m, 0x7F3157E57800).unwrap(), "int64 [App] Workload::Spin(int32)[Optimized]");
        assert_eq!(name_at(&m, 0x7F3157E57827).unwrap(), "int64 [App] Workload::Spin(int32)[Optimized]");
        assert!(name_at(&m, 0x7F3157E57828).is_none());
        assert_eq!(name_at(&m, 0x7F3157E40078 + 0x47).unwrap(), "stub<1> AllocateTemporaryEntryPoints<PRECODE_FIXUP>");
    }

    #[test]
    fn accepts_0x_prefixes_tabs_and_crlf() {
        let m = PerfMap::parse(b"0x1000 0x10 LazyCompile:*fib /app/x.js:3\r\n0X2000\t0X8\tBuiltin:Add\n");
        assert_eq!(m.bad_lines, 0);
        assert_eq!(name_at(&m, 0x100f).unwrap(), "LazyCompile:*fib /app/x.js:3");
        assert_eq!(name_at(&m, 0x2007).unwrap(), "Builtin:Add");
    }

    #[test]
    fn bad_lines_are_skipped_and_counted() {
        let m = PerfMap::parse(
            b"garbage\n1000 10\n1000 zz name\nfffffffffffffff0 100 overflow\n2000 0 empty\n\n1000 10 good\n\xff\xfe 1 x\n",
        );
        assert_eq!(m.lines, 7);
        assert_eq!(m.bad_lines, 6);
        assert_eq!(name_at(&m, 0x1000).unwrap(), "good");
    }

    #[test]
    fn a_nul_ends_a_line_like_a_newline() {
        // .NET 8 wrote this: the NUL stands where the newline belongs, and both entries are meant.
        let m = PerfMap::parse(b"1000 10 A::F()[QuickJitted]\x002000 8 stub<1> B\n3000 4 C\x00\x00\n");
        assert_eq!((m.lines, m.bad_lines), (3, 0));
        assert_eq!(name_at(&m, 0x1000).unwrap(), "A::F()[QuickJitted]");
        assert_eq!(name_at(&m, 0x2000).unwrap(), "stub<1> B");
        assert_eq!(name_at(&m, 0x3000).unwrap(), "C");
    }

    #[test]
    fn later_lines_win_on_overlap() {
        let m = PerfMap::parse(b"1000 100 Foo()[QuickJitted]\n1000 100 Foo()[OptimizedTier1]\n1080 10 Stub\n");
        assert_eq!(name_at(&m, 0x1000).unwrap(), "Foo()[OptimizedTier1]");
        assert_eq!(name_at(&m, 0x1085).unwrap(), "Stub");
        assert_eq!(name_at(&m, 0x1090).unwrap(), "Foo()[OptimizedTier1]");
    }

    #[test]
    fn truncated_last_line_is_used_when_complete_enough() {
        // A copy taken while the JIT is writing may end mid-line; the partial name is still the best we have.
        let m = PerfMap::parse(b"1000 10 Complete\n2000 10 Partial na");
        assert_eq!(name_at(&m, 0x2000).unwrap(), "Partial na");
        let m = PerfMap::parse(b"1000 10 Complete\n20");
        assert_eq!((m.lines, m.bad_lines), (2, 1));
    }

    #[test]
    fn random_and_mutated_maps_never_panic() {
        let seed = b"00007F3157E57800 28 int64 [App] W::S(int32)[Optimized]\n0x10 0x8 a b\n1000 10 x\n";
        let mut rng = crate::random_inputs::Rng::new(0x5eed_0001);
        for input in rng.inputs(&[seed], 3000) {
            let m = PerfMap::parse(&input);
            assert!(m.bad_lines <= m.lines);
            for r in m.symbols.iter() {
                assert!(r.start < r.end);
                assert_eq!(m.symbols.lookup(r.start).map(|x| x.start), Some(r.start));
            }
        }
    }
}
