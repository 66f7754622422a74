//! Symbol names from ELF files (C++ and Rust manglings) as the symbolizer shows them: demangled lazily, on first use.
#![no_main]
use libfuzzer_sys::fuzz_target;
use profcpu::symbolize::parsers::demangle;

fuzz_target!(|data: &[u8]| {
    // Symbol names are read as UTF-8 (`object`'s `name()`); other names are skipped there.
    let Ok(name) = std::str::from_utf8(data) else { return };
    let _ = demangle(name);
    let _ = demangle(&format!("_Z{name}"));
    let _ = demangle(&format!("_R{name}"));
});
