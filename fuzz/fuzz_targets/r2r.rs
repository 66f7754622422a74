//! A ReadyToRun image (a .NET assembly with precompiled code, from the target's file system) through the loader
//! the symbolizer calls: PE headers and sections, the READYTORUN header and its sections, the ECMA-335 metadata and
//! signatures behind every name, the native hashtables and arrays, referenced assemblies and the `.r2rmap` read
//! beside it; then frames looked up by file offset. Input: the image, then optional parts named `NAME.dll` (files
//! beside it, for type names from other assemblies) and `r2rmap` (any `.r2rmap` it asks for).
#![no_main]
use libfuzzer_sys::fuzz_target;
use profcpu::symbolize::parsers::{FileHit, R2rSymbols};

fuzz_target!(|data: &[u8]| {
    let parts = profcpu_fuzz::parts(data);
    let image = parts[0].1;
    let mut sibling = |name: &str, _limit: profcpu::fs::Limit| {
        let wanted = if name.ends_with(".r2rmap") { "r2rmap" } else { name };
        parts.iter().find(|(n, _)| n == wanted).map(|(_, bytes)| bytes.to_vec())
    };
    let Ok(symbols) = R2rSymbols::load(profcpu_fuzz::memfd(image), "fuzz.dll", &mut sibling) else { return };
    let _ = format!("{symbols:?}");
    let step = (image.len() / 4096).max(1);
    for offset in (0..image.len() as u64).step_by(step) {
        match symbols.lookup(offset) {
            FileHit::Symbol { start, end, name } => {
                assert!(start <= offset && offset < end, "{name} at {start:#x}..{end:#x} for {offset:#x}");
            }
            FileHit::Function { start, end } => assert!(start <= offset && offset < end),
            FileHit::Nothing => {}
        }
    }
});
