//! `profcpu postprocess -dir DIR` on a run folder from elsewhere, as the command runs it: perf.data symbolized
//! offline from `symbols/` (address spaces from MMAP/COMM/FORK records, saved perf maps, jitdumps, symbol tables,
//! kernel symbols, stack copies unwound with saved unwind info), then perf_script.out, folded stacks, the flame
//! graph, metadata.txt and prof.tar.gz written. Input: perf.data, then parts named `metadata.txt` and
//! `symbols/NAME` (`symbols/` is always there: the folder is named offline, nothing of this machine is read).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let workdir = profcpu_fuzz::Workdir::new();
    let symbols = workdir.dir.create_dir("symbols").expect("symbols folder");
    for (i, (name, bytes)) in profcpu_fuzz::parts(data).into_iter().enumerate() {
        let _ = match name.strip_prefix("symbols/").and_then(profcpu_fuzz::plain_name) {
            Some(name) => symbols.write_file(name, bytes),
            None if i == 0 => workdir.dir.write_file("perf.data", bytes),
            None if name == "metadata.txt" => workdir.dir.write_file("metadata.txt", bytes),
            None => continue,
        };
    }
    let args = ["profcpu", "postprocess", "-dir"].map(std::ffi::OsString::from);
    let cli = profcpu::cli::parse(args.into_iter().chain([workdir.path().into_os_string()])).expect("arguments");
    // An error is one line for the user; a panic or a hang is a finding.
    let _ = profcpu::commands::run(cli);
    // Names come from the input: in the flame graph they are text, never markup (it is opened in browsers).
    if let Ok(svg) = std::fs::read_to_string(workdir.path().join("flamegraph.svg")) {
        assert_eq!(svg.matches("<script").count(), 1, "markup from the input in the flame graph");
    }
});
