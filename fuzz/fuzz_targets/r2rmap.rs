//! A crossgen2 `.r2rmap` found beside a ReadyToRun image (in the target's file system).
#![no_main]
use libfuzzer_sys::fuzz_target;
use profcpu::symbolize::parsers::R2rMap;

fuzz_target!(|data: &[u8]| {
    let map = R2rMap::parse(data);
    let _ = (map.output_guid(), map.is_empty(), map.bad_lines);
    let mut rva = 0u32;
    for _ in 0..map.len().min(512) {
        let Some((start, size, _)) = map.lookup(rva) else {
            rva = rva.wrapping_add(0x10);
            continue;
        };
        assert!(start <= rva && rva - start < size);
        rva = start.saturating_add(size);
    }
});
