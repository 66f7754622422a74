//! A JIT's jitdump (`jit-PID.dump`, or the copy in `symbols/`): written by the process profiled; code loads and
//! moves replayed in time order, then looked up by address and time as samples are; and the smaller copy `collect`
//! keeps in `symbols/`, which must read the same.
#![no_main]
use libfuzzer_sys::fuzz_target;
use profcpu::symbolize::parsers::{trimmed_jitdump, JitDump};

fuzz_target!(|data: &[u8]| {
    let dump = JitDump::parse(data);
    let _ = (dump.is_empty(), dump.loads, dump.moves, dump.incomplete_tail, &dump.warnings);
    if let Some(copy) = trimmed_jitdump(data) {
        let copy = JitDump::parse(&copy);
        assert_eq!(dump.codes(), copy.codes());
        assert_eq!((dump.loads, dump.moves, dump.incomplete_tail), (copy.loads, copy.moves, copy.incomplete_tail));
        assert_eq!(dump.warnings.len(), copy.warnings.len());
    }
    for code in dump.codes().iter().take(256) {
        assert!(code.start <= code.end);
        for (addr, time) in [(code.start, code.from), (code.end.saturating_sub(1), code.until), (code.start, 0)] {
            let (found, steady) = dump.lookup_steady(addr, time);
            if let Some(found) = found {
                assert!(found.start <= addr && addr < found.end, "{found:?} does not hold {addr:#x}");
            }
            // The answer holds for the whole steady range around the time (the symbolizer caches it for that range).
            assert!(steady.start <= time, "{time} before {steady:?}");
            if !steady.is_empty() {
                assert_eq!(dump.lookup_steady(addr, steady.start).0, found, "at the start of {steady:?}");
                assert_eq!(dump.lookup_steady(addr, steady.end - 1).0, found, "at the end of {steady:?}");
            }
        }
    }
});
