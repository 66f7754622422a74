//! What profcpu reads from `/proc/PID/…` of a process it profiles, whose contents that process controls in part:
//! `maps` lines (paths it chose), `status` (its name), `environ`; and the CPU lists of `/sys`.
#![no_main]
use libfuzzer_sys::fuzz_target;
use profcpu::procfs::{parse_cpu_list, parse_environ, parse_maps_line, parse_status};

fuzz_target!(|data: &[u8]| {
    let _ = parse_environ(data, |name| name.starts_with("DOTNET_") || name == "TMPDIR");
    let Ok(text) = std::str::from_utf8(data) else { return };
    for line in text.lines() {
        if let Some(entry) = parse_maps_line(line) {
            let _ = entry.is_executable();
        }
    }
    let _ = parse_status(text);
    if let Ok(cpus) = parse_cpu_list(text) {
        assert!(!cpus.is_empty());
    }
});
