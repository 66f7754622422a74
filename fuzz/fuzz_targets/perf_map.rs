//! A JIT's perf map (`/tmp/perf-PID.map`, or the copy in `symbols/`): written by the process profiled.
#![no_main]
use libfuzzer_sys::fuzz_target;
use profcpu::symbolize::parsers::PerfMap;

fuzz_target!(|data: &[u8]| {
    let map = PerfMap::parse(data);
    assert!(map.bad_lines <= map.lines);
    for range in map.symbols.iter() {
        assert!(range.start < range.end, "empty range {:#x}..{:#x}", range.start, range.end);
        let found = map.symbols.lookup(range.start).expect("a range's start is found");
        assert_eq!(found.start, range.start);
        assert!(map.symbols.lookup(range.end - 1).is_some());
    }
});
