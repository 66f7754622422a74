//! Kernel symbols: `/proc/kallsyms` as read live, and the `kernel.syms` a capture saved (the same table).
#![no_main]
use libfuzzer_sys::fuzz_target;
use profcpu::symbolize::parsers::KernelSymbols;

fuzz_target!(|data: &[u8]| {
    // Read live as text (`read_to_string`): not UTF-8 is an error there, never parsed.
    let Ok(text) = std::str::from_utf8(data) else { return };
    let symbols = KernelSymbols::parse(text);
    for symbol in symbols.iter().take(1024) {
        assert!(symbol.start < symbol.end);
        assert_eq!(symbols.lookup(symbol.start).as_ref(), Some(&symbol));
    }
});
