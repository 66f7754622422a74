//! The robustness items of the hostile-input review (issue 15), each reproduced exactly as reported and checked
//! against what profcpu must do instead:
//! - SIGINT/SIGTERM at any moment — before sampling, while sampling, while the outputs are written (slowed by a
//!   JIT's 1.5M-line perf map) — leave complete, valid outputs or nothing plus one line; never a half-made folder or
//!   a stale staging folder;
//! - `-mmap-pages` values that overflow the ring size are refused up front;
//! - a 9.4 MB .tar.gz of a 2 GB file of zeros is refused before anything is written;
//! - control characters quoted from the input (a tar checksum field, a perf map name, an argument) reach stderr
//!   escaped;
//! - a perf map's 1 MB names are cut to 4 KiB, so the outputs stay small;
//! - a warning about a perf map or a jitdump is printed once; `-pid` with a command is refused.

mod support;

use flate2::write::GzEncoder;
use flate2::Compression;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use support::busy::Busy;
use support::perf::perf;
use support::profcpu::{collect, one_line_error, postprocess, postprocess_ok, tar_list, Background, Finished};
use support::scratch::Scratch;
use support::PROFCPU;

/// The outputs every finished collection has (flamegraph.svg unless profcpu says why not).
const OUTPUTS: [&str; 6] =
    ["perf.data", "perf_script.out", "folded_stacks.out", "metadata.txt", "prof.tar.gz", "symbols"];

/// Everything in `dir` whose name starts with `.profcpu-staging-`, at any depth.
fn staging_folders(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if entry.file_name().to_string_lossy().starts_with(".profcpu-staging-") {
            found.push(path);
        } else if entry.file_type().is_ok_and(|t| t.is_dir()) {
            found.extend(staging_folders(&path));
        }
    }
    found
}

/// The run folders under an output base.
fn run_folders(base: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(base).map(|d| d.flatten().map(|e| e.path()).collect()).unwrap_or_default()
}

/// A finished collection in `dir`: every output there and valid (perf.data read by Debian's perf, the archive
/// listing every output).
fn assert_complete(dir: &Path, stderr: &str) {
    for name in OUTPUTS {
        assert!(dir.join(name).exists(), "{name} missing in {}:\n{stderr}", dir.display());
    }
    let graph_skipped = stderr.contains("flamegraph.svg was not written");
    assert!(dir.join("flamegraph.svg").is_file() || graph_skipped, "no flamegraph.svg and no word why:\n{stderr}");
    let report = perf(&["report", "--stdio", "-i", dir.join("perf.data").to_str().unwrap()]);
    assert!(report.status.success(), "perf report cannot read it: {}", String::from_utf8_lossy(&report.stderr));
    let listed = tar_list(&dir.join("prof.tar.gz"));
    for name in ["perf.data", "perf_script.out", "folded_stacks.out", "metadata.txt"] {
        assert!(listed.iter().any(|l| l == name), "{name} not in prof.tar.gz: {listed:?}");
    }
    assert!(staging_folders(dir).is_empty(), "stale staging folder in {}", dir.display());
}

/// What one interrupted `collect` may leave: a complete run (exit 0, its folder named last on stdout) or nothing
/// (the signal's exit status and one line saying so). Returns whether it completed.
fn assert_complete_or_nothing(base: &Path, run: &Finished, what: &str) -> bool {
    let stderr = &run.stderr;
    assert!(staging_folders(base).is_empty(), "{what}: stale staging folder:\n{stderr}");
    if run.status.success() {
        let dir = PathBuf::from(run.stdout.lines().last().unwrap_or_else(|| panic!("{what}: no folder:\n{stderr}")));
        assert_complete(&dir, stderr);
        return true;
    }
    let code = run.status.code().unwrap_or_else(|| panic!("{what}: killed by a signal, said nothing:\n{stderr}"));
    let signal = match code {
        130 => "SIGINT",
        143 => "SIGTERM",
        other => panic!("{what}: exit status {other}:\n{stderr}"),
    };
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(
        lines,
        [format!("profcpu: interrupted by {signal} before sampling began: nothing was written")],
        "{what}: not one clear line"
    );
    assert!(run_folders(base).is_empty(), "{what}: left {:?}", run_folders(base));
    false
}

/// SIGINT or SIGTERM every 10 ms from the start to 200 ms: during argument parsing, set-up (kallsyms, opening the
/// events) and the first moments of sampling. Before the fix, signals in the first ~120 ms killed profcpu silently
/// with exit 143 and left a run folder holding an empty symbols/.
#[test]
fn a_signal_in_the_first_200_ms_leaves_complete_outputs_or_nothing() {
    let _cpu = support::running_app::exclusive();
    let busy = Busy::start(&["--seconds", "120"]);
    let scratch = Scratch::new("signal-start");
    let (mut cancelled, mut completed) = (0, 0);
    for (i, ms) in (0..=200).step_by(10).enumerate() {
        let base = scratch.join(format!("at-{ms}ms"));
        let signal = if i % 2 == 0 { libc::SIGINT } else { libc::SIGTERM };
        let pid = busy.info.pid.to_string();
        let args = ["collect", "-pid", &pid, "-duration", "0.5", "-output", base.to_str().unwrap()];
        // At 0 ms profcpu may not have reached `main` yet: the signal is held until its first instruction.
        let run = if ms == 0 { Background::start_with_signals_held(&args) } else { Background::start(&args) };
        std::thread::sleep(Duration::from_millis(ms));
        run.signal(signal);
        let run = run.finish(Duration::from_secs(60));
        if assert_complete_or_nothing(&base, &run, &format!("signal {signal} at {ms} ms")) {
            completed += 1;
        } else {
            cancelled += 1;
        }
    }
    eprintln!("{cancelled} runs cancelled before sampling, {completed} completed");
    // At 0 ms the signal is waiting for profcpu's first instruction: that run is always cancelled.
    assert!(cancelled >= 1);
}

/// A JIT-like target whose `/tmp/perf-PID.map` has 1.5 million lines (written before it says it is ready): naming
/// with it makes output generation take seconds.
fn busy_with_big_perf_map() -> Busy {
    Busy::start(&["--seconds", "600", "--jit-map-lines", "1500000"])
}

fn is_summary_line(line: &str) -> bool {
    line.starts_with("profcpu: ") && line.contains(" samples (")
}

/// One signal while the outputs are being made — right as sampling ends and at moments well into the slow
/// naming and writing — finishes them: before the fix profcpu exited 130/143 silently, without perf_script.out,
/// folded stacks, flame graph, metadata or archive, and with a stale `.profcpu-staging-PID`.
#[test]
fn one_signal_while_the_outputs_are_written_still_finishes_them() {
    let _cpu = support::running_app::exclusive();
    let busy = busy_with_big_perf_map();
    let scratch = Scratch::new("signal-outputs");
    let pid = busy.info.pid.to_string();
    for (i, after_ms) in [0u64, 700, 1500, 3000].into_iter().enumerate() {
        let base = scratch.join(format!("after-{after_ms}ms"));
        let mut run =
            Background::start(&["collect", "-pid", &pid, "-duration", "1", "-output", base.to_str().unwrap()]);
        assert!(run.wait_for_line(is_summary_line, Duration::from_secs(60)), "no summary line");
        std::thread::sleep(Duration::from_millis(after_ms));
        run.signal(if i % 2 == 0 { libc::SIGINT } else { libc::SIGTERM });
        let run = run.finish(Duration::from_secs(180));
        assert!(run.status.success(), "signal {after_ms} ms after sampling: {}\n{}", run.status, run.stderr);
        assert!(assert_complete_or_nothing(&base, &run, &format!("{after_ms} ms after sampling")));
        let finished_line = run.stderr.lines().any(|l| l.contains(": finishing the outputs"));
        let ended_first = run.stderr.contains("Hottest frames");
        assert!(finished_line || ended_first, "the signal went unmentioned:\n{}", run.stderr);
    }
}

/// A second signal while the outputs are written stops at once: one line says what the folder holds and that
/// `profcpu postprocess -dir DIR` makes the rest — which it then does. `postprocess` itself finishes on one
/// signal and stops on two, leaving no staging folder.
#[test]
fn a_second_signal_aborts_with_one_line_and_postprocess_makes_the_rest() {
    let _cpu = support::running_app::exclusive();
    let busy = busy_with_big_perf_map();
    let scratch = Scratch::new("signal-twice");
    let pid = busy.info.pid.to_string();
    let base = scratch.join("out");
    // The second signal comes while symbols/ is being completed (the abort waits for it) or while the outputs are
    // written (it is at once): both leave the same folder.
    let mut aborted = 0;
    for second_after_ms in [100u64, 2500] {
        let mut run =
            Background::start(&["collect", "-pid", &pid, "-duration", "1", "-output", base.to_str().unwrap()]);
        assert!(run.wait_for_line(is_summary_line, Duration::from_secs(60)), "no summary line");
        run.signal(libc::SIGINT);
        std::thread::sleep(Duration::from_millis(second_after_ms));
        run.signal(libc::SIGTERM);
        let run = run.finish(Duration::from_secs(180));
        if run.status.success() {
            // The run ended before the second signal (a fast machine): nothing to check here.
            assert!(assert_complete_or_nothing(&base, &run, "two signals"));
            continue;
        }
        // Two signals that wait together (profcpu's threads busy in the kernel) run their handlers nested, the
        // later first: either may be the one that aborts.
        let signal = match run.status.code() {
            Some(130) => "SIGINT",
            Some(143) => "SIGTERM",
            _ => panic!("{}:\n{}", run.status, run.stderr),
        };
        aborted += 1;
        let last = run.stderr.lines().last().unwrap();
        assert!(last.starts_with(&format!("profcpu: interrupted by {signal}")), "{}", run.stderr);
        let dir = run_folders(&base).into_iter().max().unwrap();
        let shown = dir.display().to_string();
        assert!(last.contains(&format!("{shown} holds perf.data, symbols/ and metadata.txt only")), "{last}");
        assert!(last.contains(&format!("`profcpu postprocess -dir {shown}` makes the rest")), "{last}");
        let mut left: Vec<String> =
            std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        left.sort();
        assert_eq!(left, ["metadata.txt", "perf.data", "symbols"], "{}", run.stderr);
        let report = perf(&["report", "--stdio", "-i", dir.join("perf.data").to_str().unwrap()]);
        assert!(report.status.success(), "{}", String::from_utf8_lossy(&report.stderr));

        // postprocess: two signals stop it with one line and no staging folder; one signal lets it finish.
        let mut pp = Background::start(&["postprocess", "-dir", &shown]);
        std::thread::sleep(Duration::from_millis(800));
        pp.signal(libc::SIGINT);
        assert!(pp.wait_for_line(|l| l.contains("finishing the outputs"), Duration::from_secs(30)));
        pp.signal(libc::SIGINT);
        let pp = pp.finish(Duration::from_secs(120));
        assert_eq!(pp.status.code(), Some(130), "{}", pp.stderr);
        let last = pp.stderr.lines().last().unwrap();
        assert!(last.starts_with("profcpu: interrupted by SIGINT: the outputs in "), "{last}");
        assert!(last.contains(&format!("`profcpu postprocess -dir {shown}` again")), "{last}");
        assert!(staging_folders(&dir).is_empty());
        let pp = Background::start(&["postprocess", "-dir", &shown]);
        std::thread::sleep(Duration::from_millis(800));
        pp.signal(libc::SIGTERM);
        let pp = pp.finish(Duration::from_secs(120));
        assert!(pp.status.success(), "{}", pp.stderr);
        assert_complete(&dir, &pp.stderr);
        // The outputs made later are those collect would have made: its metadata (command line, PID) included.
        let metadata = std::fs::read_to_string(dir.join("metadata.txt")).unwrap();
        assert!(metadata.contains(&pid), "{metadata}");
    }
    assert!(aborted >= 1, "no run was still writing its outputs when the second signal came");
}

/// `-mmap-pages 4611686018427387904` made `(pages + 1) * page_size` wrap and recorded "0 samples (0 lost)"
/// silently; 2^30 spent seconds retrying after ENOMEM; any power of two passed although the help says 1 to 1024.
#[test]
fn mmap_pages_beyond_1024_are_refused_saying_why() {
    let scratch = Scratch::new("mmap-pages");
    let base = scratch.join("out");
    for pages in ["4611686018427387904", "1073741824", "2048", "3", "0"] {
        let started = Instant::now();
        let out = Command::new(PROFCPU)
            .args(["collect", "-pid", "1", "-duration", "1", "-mmap-pages", pages, "-output"])
            .arg(&base)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "-mmap-pages {pages}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.contains("power of two from 1 to 1024") && stderr.contains("locked memory"), "{stderr}");
        assert!(started.elapsed() < Duration::from_secs(2), "-mmap-pages {pages} took {:?}", started.elapsed());
        assert!(!base.exists(), "a refused run made {}", base.display());
    }
    // The largest allowed size records.
    let _cpu = support::running_app::exclusive();
    let busy = Busy::start(&["--seconds", "10"]);
    let c = collect(&[
        "-pid",
        &busy.info.pid.to_string(),
        "-duration",
        "1",
        "-mmap-pages",
        "1024",
        "-output",
        base.to_str().unwrap(),
    ]);
    assert!(c.summary_samples() > 20, "{}", c.stderr);
}

/// A gzip of a tar holding one 2 GB file of zeros, made at the fastest level: 9.4 MB, exactly the reported bomb.
fn zero_bomb(path: &Path) {
    const SIZE: u64 = 2 << 30;
    let mut header = tar::Header::new_gnu();
    header.set_path("perf.data").unwrap();
    header.set_size(SIZE);
    header.set_mode(0o644);
    header.set_entry_type(tar::EntryType::Regular);
    header.set_cksum();
    let file = std::fs::File::create(path).unwrap();
    let mut gz = GzEncoder::new(std::io::BufWriter::new(file), Compression::fast());
    use std::io::Write;
    gz.write_all(header.as_bytes()).unwrap();
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..SIZE >> 20 {
        gz.write_all(&zeros).unwrap();
    }
    gz.write_all(&[0u8; 1024]).unwrap();
    gz.finish().unwrap().flush().unwrap();
}

/// Bytes in use on the file system holding `path`.
fn used_bytes(path: &Path) -> u64 {
    let stat = nix::sys::statvfs::statvfs(path).unwrap();
    (stat.blocks() - stat.blocks_free()) as u64 * stat.fragment_size() as u64
}

/// Disk used by the files under `dir` (what `du` counts).
fn disk_usage(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    support::profcpu::tree(dir).keys().map(|rel| std::fs::symlink_metadata(dir.join(rel)).unwrap().blocks() * 512).sum()
}

/// Before the fix the 9.4 MB bomb left 2.1 GB on disk before failing; now it is refused before anything is
/// written, in one line that says why.
#[test]
fn a_compression_bomb_is_refused_before_anything_is_written() {
    let scratch = Scratch::new("bomb");
    let bomb = scratch.join("prof.tar.gz");
    zero_bomb(&bomb);
    // 9.4 MB with zlib's fastest level, 9.8 MB with flate2's.
    let bomb_len = std::fs::metadata(&bomb).unwrap().len();
    assert!((9_000_000..10_500_000).contains(&bomb_len), "the bomb is {bomb_len} bytes, not about 9.4 MB");
    let used_before = used_bytes(&scratch.path);
    let line = one_line_error(&["-dir", bomb.to_str().unwrap()]);
    assert!(line.contains("compression bomb") && line.contains("not a profcpu archive?"), "{line}");
    assert!(line.contains(&format!("{:.1} MB", bomb_len as f64 / 1e6)), "{line}");
    let listed: Vec<_> = std::fs::read_dir(&scratch.path).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(listed, ["prof.tar.gz"], "extraction left something behind");
    assert_eq!(
        disk_usage(&scratch.path),
        std::fs::symlink_metadata(&bomb)
            .map(|m| {
                use std::os::unix::fs::MetadataExt;
                m.blocks() * 512
            })
            .unwrap()
    );
    // Other processes write to this file system too: allow them 100 MB, a fraction of the 2 GB at stake.
    let grown = used_bytes(&scratch.path).saturating_sub(used_before);
    assert!(grown < 100 << 20, "disk use grew by {grown} bytes");
}

/// A GNU long-name entry of 1 GB of zeros: the tar reader would read the name whole into memory before any size
/// check of the entries saw it. The decompressed stream itself is capped.
#[test]
fn a_huge_long_name_entry_is_refused_without_reading_it_into_memory() {
    let scratch = Scratch::new("bomb-longname");
    let path = scratch.join("names.tar.gz");
    {
        const SIZE: u64 = 1 << 30;
        let mut header = tar::Header::new_gnu();
        header.as_gnu_mut().unwrap().name[..13].copy_from_slice(b"././@LongLink");
        header.set_size(SIZE);
        header.set_mode(0o644);
        header.set_entry_type(tar::EntryType::GNULongName);
        header.set_cksum();
        let mut gz = GzEncoder::new(std::fs::File::create(&path).unwrap(), Compression::fast());
        use std::io::Write;
        gz.write_all(header.as_bytes()).unwrap();
        let zeros = vec![b'a'; 1 << 20];
        for _ in 0..SIZE >> 20 {
            gz.write_all(&zeros).unwrap();
        }
        gz.finish().unwrap();
    }
    let (status, stderr, peak_kb) = run_measuring_memory(&["postprocess", "-dir", path.to_str().unwrap()]);
    assert_eq!(status, 1, "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("long name or pax header") && stderr.contains("not a profcpu archive?"), "{stderr}");
    // A child's peak counts what it shared with this process before exec: compare with a refusal that reads
    // nothing (an empty file named like an archive).
    let empty = scratch.join("empty.tar.gz");
    std::fs::write(&empty, b"").unwrap();
    let (_, _, baseline_kb) = run_measuring_memory(&["postprocess", "-dir", empty.to_str().unwrap()]);
    std::fs::remove_file(&empty).unwrap();
    assert!(peak_kb < baseline_kb + 64 * 1024, "profcpu's peak memory was {peak_kb} KB ({baseline_kb} KB idle)");
    let listed: Vec<_> = std::fs::read_dir(&scratch.path).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(listed, ["names.tar.gz"], "extraction left something behind");
}

/// Runs profcpu to the end; its exit status, stderr and peak resident memory in KB (from wait4, so only its own).
#[allow(clippy::zombie_processes)] // reaped by wait4, which std's Child does not know of
fn run_measuring_memory(args: &[&str]) -> (i32, String, u64) {
    use std::io::Read;
    let mut child =
        Command::new(PROFCPU).args(args).stderr(std::process::Stdio::piped()).spawn().expect("cannot start profcpu");
    let mut stderr = String::new();
    child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    let mut status = 0;
    // SAFETY: rusage is plain integers; wait4 reaps our own child and fills both out-parameters.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let reaped = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    assert_eq!(reaped, child.id() as i32);
    assert!(libc::WIFEXITED(status), "profcpu died: {status}\n{stderr}");
    (libc::WEXITSTATUS(status), stderr, usage.ru_maxrss as u64)
}

/// A tar whose checksum field holds `ESC ] 0 ; PWN BEL` (an OSC sequence that retitles the terminal): the error
/// line quotes the field, escaped.
#[test]
fn control_characters_from_an_archive_reach_stderr_escaped() {
    let scratch = Scratch::new("escape-tar");
    let mut header = tar::Header::new_gnu();
    header.set_path("perf.data").unwrap();
    header.set_size(5);
    header.set_entry_type(tar::EntryType::Regular);
    header.as_gnu_mut().unwrap().cksum.copy_from_slice(b"\x1b]0;PWN\x07");
    let mut raw = header.as_bytes().to_vec();
    raw.extend_from_slice(b"hello");
    raw.resize(512 * 4, 0);
    let path = scratch.join("evil.tar.gz");
    let mut gz = GzEncoder::new(std::fs::File::create(&path).unwrap(), Compression::default());
    use std::io::Write;
    gz.write_all(&raw).unwrap();
    gz.finish().unwrap();
    let run = postprocess(&["-dir", path.to_str().unwrap()]);
    assert!(!run.ok());
    assert!(!run.stderr.contains('\x1b') && !run.stderr.contains('\x07'), "raw escape on stderr: {:?}", run.stderr);
    assert!(run.stderr.contains("\\x1b]0;PWN\\x07"), "{:?}", run.stderr);
    assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);

    // An argument, quoted back by the usage error (clap drops escape sequences itself, not a carriage return
    // that makes the rest of the line overwrite its start).
    let out = Command::new(PROFCPU).args(["collect", "-pid", "12\x1b[2J\r34\x07"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert!(!stderr.contains(['\x1b', '\r', '\x07']) && stderr.contains("12\\x0d34"), "{stderr:?}");
}

/// A frame name from a perf map with an escape sequence in it: the hottest-frames table shows the frame, but not
/// the control characters raw (the report stage already replaces them in names; the printer escapes what is left).
#[test]
fn control_characters_in_frame_names_reach_stderr_escaped() {
    let _cpu = support::running_app::exclusive();
    let busy = Busy::start(&["--seconds", "10", "--jit-map-lines", "1"]);
    let map = std::fs::read_to_string(busy.perf_map()).unwrap();
    let (start, size) = {
        let mut fields = map.split_whitespace();
        (fields.next().unwrap().to_string(), fields.next().unwrap().to_string())
    };
    std::fs::write(busy.perf_map(), format!("{start} {size} \x1b]0;PWN\x07jit_loop\n")).unwrap();
    let scratch = Scratch::new("escape-names");
    let c = collect(&["-pid", &busy.info.pid.to_string(), "-duration", "1", "-output", scratch.path.to_str().unwrap()]);
    assert!(!c.stderr.contains('\x1b') && !c.stderr.contains('\x07'), "raw escape on stderr: {:?}", c.stderr);
    let row = c.stderr.lines().find(|l| l.ends_with("jit_loop")).unwrap_or_else(|| panic!("no JIT row:\n{}", c.stderr));
    assert!(row.contains("]0") && row.contains("PWN"), "{row}");
}

/// A perf map whose name for the running JIT code is 1 MB long: before the fix, 95 samples made a 48 MB
/// perf_script.out and a 48 MB prof.tar.gz (the reviewer's 185 samples: 194 MB each). Names are cut to 4 KiB.
#[test]
fn one_megabyte_names_are_cut_to_4_kib() {
    let _cpu = support::running_app::exclusive();
    let busy = Busy::start(&["--seconds", "10", "--jit-map-lines", "1", "--jit-name-bytes", "1048576"]);
    let scratch = Scratch::new("long-names");
    let c = collect(&["-pid", &busy.info.pid.to_string(), "-duration", "2", "-output", scratch.path.to_str().unwrap()]);
    let samples = c.summary_samples();
    let script = std::fs::read_to_string(c.run_dir.join("perf_script.out")).unwrap();
    let jit_frames = script.lines().filter(|l| l.contains("[jit] spin_loop")).count() as u64;
    assert!(jit_frames > 10, "the JIT code was not sampled ({jit_frames} of {samples} samples):\n{}", c.stderr);
    let name = script.lines().find(|l| l.contains("[jit] spin_loop")).unwrap();
    let name = &name[name.find("[jit] spin_loop").unwrap()..];
    let name = name.split('…').next().unwrap();
    assert_eq!(name.len() + '…'.len_utf8(), 4096, "the name is not cut at 4 KiB");
    // About a KB per sample besides the name; before the fix over 500 KB per sample.
    let script_len = script.len() as u64;
    assert!(script_len < samples * 8 * 1024, "perf_script.out is {script_len} bytes for {samples} samples");
    let archive_len = std::fs::metadata(c.run_dir.join("prof.tar.gz")).unwrap().len();
    assert!(archive_len < 2 << 20, "prof.tar.gz is {archive_len} bytes");
    let folded = std::fs::read_to_string(c.run_dir.join("folded_stacks.out")).unwrap();
    assert!(folded.len() < 64 * 1024, "folded_stacks.out is {} bytes", folded.len());
    // postprocess reads the saved copy of the map (1 MB names) and cuts them the same way.
    let again = postprocess_ok(&c.run_dir, &[]);
    assert!(!again.stderr.contains("error"), "{}", again.stderr);
    assert_eq!(std::fs::read_to_string(c.run_dir.join("perf_script.out")).unwrap().len(), script.len());
}

/// A malformed line in a perf map is reported once, not by the capture and again by the naming of the outputs.
#[test]
fn a_perf_map_warning_is_printed_once() {
    let _cpu = support::running_app::exclusive();
    let busy = Busy::start(&["--seconds", "10", "--jit-map-lines", "3"]);
    let mut map = std::fs::read_to_string(busy.perf_map()).unwrap();
    map.push_str("this is not a perf map line\n");
    std::fs::write(busy.perf_map(), map).unwrap();
    let scratch = Scratch::new("warn-once");
    let c = collect(&["-pid", &busy.info.pid.to_string(), "-duration", "1", "-output", scratch.path.to_str().unwrap()]);
    let warnings: Vec<&str> = c.stderr.lines().filter(|l| l.contains("malformed")).collect();
    assert_eq!(warnings.len(), 1, "{}", c.stderr);
    assert!(
        warnings[0].starts_with("profcpu: warning: /tmp/perf-") && warnings[0].contains("skipped 1 malformed of 4")
    );
}

/// A "JIT" in Python: a thread spins in anonymous executable memory, and a jitdump names that code, then ends in a
/// record too short to be one (as a writer killed mid-record would leave it). The file is mapped executable, as
/// jitdump writers do so that recorders see its name.
const JIT_WITH_CORRUPT_JITDUMP: &str = r#"
import ctypes, mmap, os, struct, threading, time
code = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
code.write(b"\xeb\xfe")  # jmp .
addr = ctypes.addressof(ctypes.c_char.from_buffer(code))
threading.Thread(target=ctypes.CFUNCTYPE(None)(addr), daemon=True).start()
name = b"void [App] App::Spin()[Optimized]\0"
load = struct.pack("<IIQQQQ", os.getpid(), os.getpid(), addr, addr, 2, 1) + name + b"\xeb\xfe"
now = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
dump = struct.pack("<IIIIIIQQ", 0x4A695444, 1, 40, 62, 0, os.getpid(), now, 0)
dump += struct.pack("<IIQ", 0, 16 + len(load), now) + load + struct.pack("<IIQ", 0, 8, now)
path = "/tmp/jit-%d.dump" % os.getpid()
with open(path, "wb") as f:
    f.write(dump)
f = open(path, "rb")
mapped = mmap.mmap(f.fileno(), len(dump), prot=mmap.PROT_READ | mmap.PROT_EXEC)
print("ready", flush=True)
time.sleep(30)
"#;

/// A corrupt jitdump is reported once, not by the capture and again by the naming of the outputs (the review saw
/// warnings about jitdumps printed twice, like those about perf maps).
#[test]
fn a_jitdump_warning_is_printed_once() {
    let _cpu = support::running_app::exclusive();
    let mut jit = Command::new("python3")
        .args(["-c", JIT_WITH_CORRUPT_JITDUMP])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(jit.stdout.as_mut().unwrap()), &mut line).unwrap();
    assert_eq!(line.trim(), "ready");
    let pid = jit.id();
    let scratch = Scratch::new("warn-once-jitdump");
    let c = collect(&["-pid", &pid.to_string(), "-duration", "1", "-output", scratch.path.to_str().unwrap()]);
    let _ = jit.kill();
    let _ = jit.wait();
    let _ = std::fs::remove_file(format!("/tmp/jit-{pid}.dump"));
    let warnings: Vec<&str> = c.stderr.lines().filter(|l| l.contains("jitdump corrupt")).collect();
    assert_eq!(warnings.len(), 1, "{}", c.stderr);
    assert!(warnings[0].starts_with(&format!("profcpu: warning: /tmp/jit-{pid}.dump (PID {pid})")), "{}", warnings[0]);
    // The code the jitdump names before the damage is still named.
    let script = std::fs::read_to_string(c.run_dir.join("perf_script.out")).unwrap();
    assert!(script.contains("App::Spin()[Optimized]"), "{}", &script[..script.len().min(2000)]);
}

/// `-pid X -- CMD` used to profile CMD and ignore `-pid` silently; now the pair is refused in one line, before
/// anything runs or is made.
#[test]
fn a_pid_with_a_command_is_refused() {
    let scratch = Scratch::new("pid-and-command");
    let marker = scratch.join("ran");
    for flags in [&["-pid", "1"][..], &["-all"]] {
        let out = Command::new(PROFCPU)
            .arg("collect")
            .args(flags)
            .args(["-output", scratch.join("out").to_str().unwrap(), "--", "touch", marker.to_str().unwrap()])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.contains("cannot be used with '[COMMAND]...'"), "{stderr}");
        assert!(!marker.exists() && !scratch.join("out").exists());
    }
}
