//! Kernel symbols as postprocess reads them: the copy of kallsyms `perf record` left in perf's build-id cache
//! (`$PERF_BUILDID_DIR/[kernel.kallsyms]/<build-id>/kallsyms`), parsed as `/proc/kallsyms` is.
#![no_main]
use libfuzzer_sys::fuzz_target;
use profcpu::symbolize::parsers::KernelSymbols;
use std::path::PathBuf;
use std::sync::OnceLock;

/// The build-id cache of this process: one folder, set as `PERF_BUILDID_DIR` before the first input.
fn cache_file() -> &'static PathBuf {
    static FILE: OnceLock<PathBuf> = OnceLock::new();
    FILE.get_or_init(|| {
        // One folder per fuzzing process (they run side by side); those of processes that are gone are removed.
        let prefix = "profcpu-fuzz-kallsyms-";
        for entry in std::fs::read_dir(std::env::temp_dir()).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let pid = name.strip_prefix(prefix).and_then(|pid| pid.parse::<u32>().ok());
            if pid.is_some_and(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists()) {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
        let base = std::env::temp_dir().join(format!("{prefix}{}", std::process::id()));
        let folder = base.join("[kernel.kallsyms]").join("00");
        std::fs::create_dir_all(&folder).unwrap();
        std::env::set_var("PERF_BUILDID_DIR", &base);
        folder.join("kallsyms")
    })
}

fuzz_target!(|data: &[u8]| {
    std::fs::write(cache_file(), data).unwrap();
    let Some(symbols) = KernelSymbols::from_perf_cache(&[0]) else { return };
    // The addresses the lines list, and around them: every answer holds the address asked for and is found again
    // at its own start.
    let listed = data.split(|&b| b == b'\n').take(256).filter_map(|line| {
        let hex = std::str::from_utf8(line.get(..16)?).ok()?;
        u64::from_str_radix(hex, 16).ok()
    });
    for addr in listed.flat_map(|a| [a, a.wrapping_add(1), a.wrapping_sub(1)]).chain([0, u64::MAX]) {
        if let Some(symbol) = symbols.lookup(addr) {
            assert!(symbol.start <= addr && addr < symbol.end, "{addr:#x} in {symbol:?}");
            assert_eq!(symbols.lookup(symbol.start).as_ref(), Some(&symbol));
        }
    }
});
