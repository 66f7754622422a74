//! The `symbols/` folder of a run (from an archive made elsewhere, or a folder others can write to) as the
//! symbolizer reads it: `processes.txt`, `dsos.txt`, the symbol tables it names (`dso-N.syms`, `r2r-N.syms`),
//! `kernel.syms`, saved perf maps, jitdumps and JIT frames (`jitframes-HOSTPID.txt`), and unwind info files. Input:
//! parts named as those files (the first, unnamed part is `dsos.txt`).
#![no_main]
use libfuzzer_sys::fuzz_target;
use profcpu::symbolize::parsers::{CapturedDir, JitDump, PerfMap};
use profcpu::symbolize::unwind::ModuleCfi;

fuzz_target!(|data: &[u8]| {
    let workdir = profcpu_fuzz::Workdir::new();
    for (i, (name, bytes)) in profcpu_fuzz::parts(data).into_iter().enumerate() {
        let name = if i == 0 { "dsos.txt" } else { name.as_str() };
        if let Some(name) = profcpu_fuzz::plain_name(name) {
            let _ = workdir.dir.write_file(name, bytes);
        }
    }
    let Ok(captured) = CapturedDir::open(&workdir.dir) else { return };
    for (&pid, _) in captured.processes.iter().take(16) {
        if let Some(bytes) = captured.read_jit_file(&captured.perf_map(pid)) {
            let _ = PerfMap::parse(&bytes);
        }
        if let Some(bytes) = captured.read_jit_file(&captured.jitdump(pid)) {
            let _ = JitDump::parse(&bytes);
        }
        if let Ok(Some((frames, _))) = captured.jit_frames(pid) {
            assert!(frames.rules().take((1 << 24) + 1).count() <= 1 << 24);
        }
    }
    for dso in captured.dsos.iter().take(16) {
        let Some(symfile) = &dso.symfile else { continue };
        if symfile.ends_with(".cfi") {
            // An unwind info file, as `unwind.txt` names them.
            if let Ok(bytes) = captured.dir.read_input(symfile, profcpu::fs::Limit::CAPTURE_TEXT) {
                let _ = ModuleCfi::decode(&bytes).map(ModuleCfi::checked);
            }
            continue;
        }
        let Ok(table) = captured.load_dso_table(symfile) else { continue };
        for (start, end, _) in table.names.iter().take(256) {
            assert!(start < end);
            assert!(table.names.lookup(start).is_some());
        }
        for range in table.functions.iter().take(256) {
            assert!(table.functions.lookup(range.start).is_some());
        }
    }
    if let Ok(Some(kernel)) = captured.load_kernel() {
        // Every answer holds the address asked for, and its start is found again.
        for addr in (0..256u64).map(|i| 0xffff_ffff_8000_0000u64.wrapping_add(i << 20)).chain([0, u64::MAX]) {
            if let Some(symbol) = kernel.lookup(addr) {
                assert!(symbol.start <= addr && addr < symbol.end, "{addr:#x} in {symbol:?}");
                assert!(kernel.lookup(symbol.start).is_some());
            }
        }
    }
});
