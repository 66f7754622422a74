//! A mapped ELF file and its split debug file, through the code that names frames and finds unwind info: the
//! headers, build-id and debuglink, `.symtab`/`.dynsym`, a debug file found beside it and verified (build-id or
//! debuglink CRC), the function bounds of a stripped file's `.eh_frame`, and the unwind sections as a capture reads
//! and saves them. Input: the file, then optionally a part named `debug` (its debug file, found as `<path>.debug`
//! in a `-symbols` folder).
#![no_main]
use libfuzzer_sys::fuzz_target;
use profcpu::symbolize::parsers::{load_dso, DsoSymbols, FileHit, SearchRoots};
use profcpu::symbolize::unwind::ModuleCfi;

fuzz_target!(|data: &[u8]| {
    let parts = profcpu_fuzz::parts(data);
    let binary = parts[0].1;
    let workdir = profcpu_fuzz::Workdir::new();
    if let Some((_, debug)) = parts.iter().find(|(name, _)| name == "debug") {
        let bin = workdir.dir.create_dir("bin").expect("bin folder");
        bin.write_file("x.debug", debug).expect("writing the debug file");
    }
    let file = profcpu_fuzz::memfd(binary);

    // Unwind info, as read from a live file and saved into symbols/ (then read back from there).
    if let Ok(Some(cfi)) = ModuleCfi::read(&file, None) {
        let saved = cfi.encode();
        assert_eq!(ModuleCfi::decode(&saved).expect("saved unwind info reads back"), cfi);
        let _ = cfi.bias(0x7f00_0000_0000, 0);
        let (checked, _problems) = cfi.checked();
        let _ = checked.has_cfi();
    }

    // Symbols: only the debug folder of this input is searched (never the host's files).
    let roots = SearchRoots { target_root: None, host: false, extra: vec![workdir.path()], servers: None };
    let symbols = load_dso(file.try_clone().expect("dup"), "/bin/x", &roots, None);
    let DsoSymbols::Elf { table, .. } = &symbols else { return };
    let mut probes: Vec<u64> = table.iter().take(256).flat_map(|(start, end, _)| [start, end.saturating_sub(1)]).collect();
    // Offsets no symbol covers reach the function bounds of `.eh_frame` (read on first use).
    probes.extend((0..binary.len() as u64).step_by(61).take(256));
    for offset in probes {
        match symbols.lookup(offset) {
            FileHit::Symbol { start, end, name } => {
                assert!(start <= offset && offset < end, "{name} at {start:#x}..{end:#x} for {offset:#x}");
            }
            FileHit::Function { start, end } => assert!(start <= offset && offset < end),
            FileHit::Nothing => {}
        }
    }
    let _ = symbols.frame_kind();
});
