//! `profcpu postprocess` on bad input: perf.data cut short at every kind of place, corrupted, random or empty;
//! folders without a recording; hostile archives. Each run either fails with exactly one `profcpu: error:` line
//! (exit 1, no panic, nothing written) or, when part of the file is readable, writes what it can and says in a
//! warning how much it skipped.

mod support;

use std::path::{Path, PathBuf};
use support::golden::*;
use support::inferno;
use support::profcpu::*;
use support::recording::open_perf_data;
use support::scratch::Scratch;

/// (data section offset, data section size, file length) of the golden perf.data.
fn golden_layout() -> (u64, u64, u64) {
    let path = golden_dir().join("perf.data");
    let reader = open_perf_data(&path).unwrap();
    let data = reader.header().data;
    (data.offset, data.size, std::fs::metadata(&path).unwrap().len())
}

fn golden_bytes() -> Vec<u8> {
    std::fs::read(golden_dir().join("perf.data")).unwrap()
}

/// A copy of the golden collection whose perf.data is `bytes`.
fn collection_with(scratch: &Scratch, name: &str, bytes: &[u8]) -> PathBuf {
    let dir = golden_copy(scratch, name);
    std::fs::write(dir.join("perf.data"), bytes).unwrap();
    dir
}

/// Sample header lines of a perf_script.out (each names its thread and time, so it is unique).
fn sample_lines(script: &str) -> Vec<&str> {
    script.lines().filter(|l| !l.starts_with('\t') && !l.is_empty()).collect()
}

fn full_script() -> String {
    read(&data_dir().join("expected/perf_script.out"))
}

#[test]
fn unreadable_beginnings_fail_with_one_line() {
    let scratch = Scratch::new("cut-head");
    let bytes = golden_bytes();
    let (data_offset, _, _) = golden_layout();
    for (cut, expect) in [
        (0, "too short"),
        (50, "header is truncated"),
        (104, "lie outside the file"),
        ((104 + data_offset) as usize / 2, "lie outside the file"),
    ] {
        let dir = collection_with(&scratch, &format!("cut-{cut}"), &bytes[..cut]);
        let before = tree(&dir);
        let line = one_line_error(&["-dir", dir.to_str().unwrap()]);
        assert!(line.contains("perf.data") && line.contains(expect), "cut at {cut}: {line}");
        assert_eq!(tree(&dir), before, "cut at {cut}: a failed run changed the folder");
    }
    // Cut right after the event descriptions: readable, but not one sample is there.
    let dir = collection_with(&scratch, "no-data", &bytes[..data_offset as usize]);
    let line = one_line_error(&["-dir", dir.to_str().unwrap()]);
    assert!(line.contains("cut short (0 of ") && line.contains("nothing to show"), "{line}");
}

#[test]
fn a_file_cut_in_its_data_yields_the_samples_before_the_cut_and_says_what_is_missing() {
    let scratch = Scratch::new("cut-data");
    let bytes = golden_bytes();
    let (offset, size, _) = golden_layout();
    let full = full_script();
    let full_samples = sample_lines(&full);
    let mut counts = Vec::new();
    for fraction in [0.2, 0.5, 0.9] {
        let cut = (offset + (size as f64 * fraction) as u64) as usize;
        let dir = collection_with(&scratch, &format!("cut-{fraction}"), &bytes[..cut]);
        let run = postprocess_ok(&dir, &[]);
        let missing = offset + size - cut as u64;
        let warning = format!("({missing} bytes of records missing)");
        assert!(run.warnings().iter().any(|w| w.contains(&warning)), "cut at {cut}: no {warning:?}:\n{}", run.stderr);
        // The record the cut went through is reported too, unless the cut fell between records.
        let script = read(&dir.join("perf_script.out"));
        let samples = sample_lines(&script);
        assert!(!samples.is_empty() && samples.len() < full_samples.len(), "{} samples", samples.len());
        assert!(samples.iter().all(|s| full_samples.contains(s)), "a sample that is not in the full recording");
        assert_eq!(run.top_samples(), samples.len() as u64);
        assert_eq!(inferno::collapse(&script, 1), read(&dir.join("folded_stacks.out")));
        assert!(dir.join("flamegraph.svg").is_file() && dir.join("prof.tar.gz").is_file());
        counts.push(samples.len());
    }
    assert!(counts.windows(2).all(|w| w[0] < w[1]), "later cuts keep more samples: {counts:?}");
}

#[test]
fn a_file_cut_after_its_data_keeps_every_sample() {
    let scratch = Scratch::new("cut-tail");
    let bytes = golden_bytes();
    let (offset, size, len) = golden_layout();
    let data_end = (offset + size) as usize;
    // Feature index gone, feature bodies cut, sample ids cut: all samples read, all names from symbols/.
    for (cut, expect_warning) in
        [(data_end, true), (data_end + 40, true), ((data_end + len as usize) / 2, true), (len as usize - 4, false)]
    {
        let dir = collection_with(&scratch, &format!("tail-{cut}"), &bytes[..cut]);
        let run = postprocess_ok(&dir, &[]);
        let warned = run.warnings().iter().any(|w| w.contains("header feature section(s) are missing"));
        assert_eq!(warned, expect_warning, "cut at {cut} of {len}:\n{}", run.stderr);
        assert_eq!(read(&dir.join("perf_script.out")), full_script(), "cut at {cut}");
        assert_eq!(read(&dir.join("folded_stacks.out")), read(&data_dir().join("expected/folded_stacks.out")));
    }
}

#[test]
fn a_corrupt_record_stops_reading_there_with_a_warning() {
    let scratch = Scratch::new("corrupt");
    let mut bytes = golden_bytes();
    let (offset, size, _) = golden_layout();
    // Walk the records to the one nearest the middle of the data section and give it an impossible size (0).
    let (mut pos, middle) = (offset as usize, (offset + size / 2) as usize);
    while pos < middle {
        let record_size = u16::from_ne_bytes([bytes[pos + 6], bytes[pos + 7]]) as usize;
        assert!(record_size >= 8);
        pos += record_size;
    }
    bytes[pos + 6] = 0;
    bytes[pos + 7] = 0;
    let dir = collection_with(&scratch, "corrupt", &bytes);
    let run = postprocess_ok(&dir, &[]);
    let at = pos as u64 - offset;
    let skipped = offset + size - pos as u64;
    let expected =
        format!("a corrupt record at byte {at} of the data section stopped reading: its last {skipped} bytes");
    assert!(run.warnings().iter().any(|w| w.contains(&expected)), "no {expected:?}:\n{}", run.stderr);
    let samples = sample_lines(&read(&dir.join("perf_script.out"))).len();
    assert!(samples > 0 && samples < sample_lines(&full_script()).len());
}

#[test]
fn random_garbage_and_random_damage_never_panic() {
    let scratch = Scratch::new("garbage");
    // Fixed seed: a failure is reproducible.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let garbage: Vec<u8> = (0..5000).map(|_| next() as u8).collect();
    let dir = collection_with(&scratch, "garbage", &garbage);
    let line = one_line_error(&["-dir", dir.to_str().unwrap()]);
    assert!(line.contains("not a perf.data"), "{line}");
    let mut magic_then_garbage = b"PERFILE2".to_vec();
    magic_then_garbage.extend_from_slice(&garbage);
    let dir = collection_with(&scratch, "magic", &magic_then_garbage);
    one_line_error(&["-dir", dir.to_str().unwrap()]);

    // Damage in any part of a real file: a clean failure or outputs (with warnings), never a crash.
    let bytes = golden_bytes();
    let (mut ok, mut failed) = (0, 0);
    for round in 0..40 {
        let mut damaged = bytes.clone();
        for _ in 0..1 + next() % 8 {
            let at = (next() % damaged.len() as u64) as usize;
            damaged[at] = next() as u8;
        }
        let dir = collection_with(&scratch, &format!("damaged-{round}"), &damaged);
        let run = postprocess(&["-dir", dir.to_str().unwrap()]);
        match run.output.status.code() {
            Some(0) => ok += 1,
            Some(1) => {
                assert_eq!(
                    run.stderr.lines().filter(|l| l.starts_with("profcpu: error: ")).count(),
                    1,
                    "{}",
                    run.stderr
                );
                failed += 1;
            }
            other => panic!("round {round}: exit {other:?}:\n{}", run.stderr),
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
    eprintln!("damaged files: {ok} processed, {failed} refused");
    assert!(ok > 0, "most single-byte damage leaves a readable file");
}

#[test]
fn folders_without_a_usable_recording_fail_with_one_line() {
    let scratch = Scratch::new("no-recording");
    let empty = scratch.join("empty");
    std::fs::create_dir(&empty).unwrap();
    let line = one_line_error(&["-dir", empty.to_str().unwrap()]);
    assert!(line.contains("holds no perf.data") && line.contains("perf record -g"), "{line}");

    let only_archive = scratch.join("only-archive");
    std::fs::create_dir(&only_archive).unwrap();
    std::fs::write(only_archive.join("prof.tar.gz"), b"x").unwrap();
    let line = one_line_error(&["-dir", only_archive.to_str().unwrap()]);
    assert!(line.contains("pass -dir") && line.contains("prof.tar.gz"), "{line}");

    let data_is_dir = scratch.join("data-is-dir");
    std::fs::create_dir_all(data_is_dir.join("perf.data")).unwrap();
    one_line_error(&["-dir", data_is_dir.to_str().unwrap()]);

    let dangling = scratch.join("dangling");
    std::fs::create_dir(&dangling).unwrap();
    std::os::unix::fs::symlink(scratch.join("nowhere"), dangling.join("perf.data")).unwrap();
    one_line_error(&["-dir", dangling.to_str().unwrap()]);

    let line = one_line_error(&["-dir", scratch.join("missing").to_str().unwrap()]);
    assert!(line.contains("cannot open") && line.contains("missing"), "{line}");
    let file = scratch.join("notes.txt");
    std::fs::write(&file, "hello").unwrap();
    let line = one_line_error(&["-dir", file.to_str().unwrap()]);
    assert!(line.contains("neither a directory nor a .tar.gz"), "{line}");
    // A usage error: one line too, with clap's exit status for usage errors.
    let run = postprocess(&[]);
    assert_eq!(run.output.status.code(), Some(2));
    assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
    assert!(run.stderr.starts_with("profcpu: error: ") && run.stderr.contains("--dir"), "{}", run.stderr);
}

#[test]
fn a_perf_data_symlink_is_refused_with_the_fix() {
    let scratch = Scratch::new("data-symlink");
    let dir = golden_copy(&scratch, "run");
    let real = scratch.join("recording.data");
    std::fs::rename(dir.join("perf.data"), &real).unwrap();
    std::os::unix::fs::symlink(&real, dir.join("perf.data")).unwrap();
    let before = tree(&dir);
    // A link could lead root into any file: profcpu reads a folder's recording only as a regular file.
    let line = one_line_error(&["-dir", dir.to_str().unwrap()]);
    assert!(line.contains("perf.data is a symlink, not a regular file"), "{line}");
    assert!(line.contains("cp --remove-destination"), "{line}");
    assert_eq!(tree(&dir), before, "a refused run changed the folder");
    // Doing what the line says makes it work.
    std::fs::remove_file(dir.join("perf.data")).unwrap();
    std::fs::copy(&real, dir.join("perf.data")).unwrap();
    postprocess_ok(&dir, &[]);
    assert_eq!(read(&dir.join("folded_stacks.out")), read(&data_dir().join("expected/folded_stacks.out")));
}

type Forger = tar::Builder<flate2::write::GzEncoder<std::fs::File>>;
type Forge = Box<dyn Fn(&mut Forger)>;

/// A .tar.gz with the given entries, built with the `tar` crate so that any header can be forged.
fn forge_archive(path: &Path, build: impl FnOnce(&mut Forger)) {
    let file = std::fs::File::create(path).unwrap();
    let mut builder = tar::Builder::new(flate2::write::GzEncoder::new(file, flate2::Compression::fast()));
    build(&mut builder);
    builder.into_inner().unwrap().finish().unwrap();
}

fn entry(kind: tar::EntryType, size: u64) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(kind);
    h.set_size(size);
    h.set_mode(0o644);
    h
}

/// Writes a raw name into a header (bypassing the builder's own checks against `..` and absolute paths).
fn set_raw_name(h: &mut tar::Header, name: &str) {
    let gnu = h.as_gnu_mut().unwrap();
    gnu.name = [0; 100];
    gnu.name[..name.len()].copy_from_slice(name.as_bytes());
    h.set_cksum();
}

#[test]
fn hostile_archives_are_refused_before_anything_is_written() {
    let scratch = Scratch::new("hostile");
    let outside = scratch.join("outside");
    std::fs::create_dir(&outside).unwrap();
    let outside_file = outside.join("pwned");
    let cases: Vec<(&str, Forge, &str)> = vec![
        (
            "absolute",
            Box::new(|b| {
                let mut h = entry(tar::EntryType::Regular, 3);
                set_raw_name(&mut h, "/tmp/profcpu-hostile-absolute");
                b.append(&h, &b"bad"[..]).unwrap();
            }),
            "absolute path",
        ),
        (
            "dotdot",
            Box::new(|b| {
                let mut h = entry(tar::EntryType::Regular, 3);
                set_raw_name(&mut h, "../outside/pwned");
                b.append(&h, &b"bad"[..]).unwrap();
            }),
            "`..` in path",
        ),
        (
            "symlink-out",
            Box::new(move |b| {
                let mut h = entry(tar::EntryType::Symlink, 0);
                b.append_link(&mut h, "symbols", "../outside").unwrap();
                let mut h = entry(tar::EntryType::Regular, 3);
                b.append_data(&mut h, "symbols/pwned", &b"bad"[..]).unwrap();
            }),
            "symlink to",
        ),
        (
            "hardlink-out",
            Box::new(|b| {
                let mut h = entry(tar::EntryType::Link, 0);
                b.append_link(&mut h, "perf.data", "/etc/passwd").unwrap();
            }),
            "hard link",
        ),
        (
            "device",
            Box::new(|b| {
                let mut h = entry(tar::EntryType::Char, 0);
                b.append_data(&mut h, "perf.data", &b""[..]).unwrap();
            }),
            "character device",
        ),
        ("not-gzip", Box::new(|_| {}), ""),
    ];
    for (name, build, expect) in cases {
        let folder = scratch.join(name);
        std::fs::create_dir(&folder).unwrap();
        let archive = folder.join("prof.tar.gz");
        if name == "not-gzip" {
            std::fs::write(&archive, b"this is not gzip data at all").unwrap();
        } else {
            forge_archive(&archive, |b| build(b));
        }
        let line = one_line_error(&["-dir", archive.to_str().unwrap()]);
        assert!(line.contains(expect), "{name}: {line}");
        let left: Vec<_> = std::fs::read_dir(&folder).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left, vec![std::ffi::OsString::from("prof.tar.gz")], "{name}: left behind {left:?}");
        assert!(!outside_file.exists(), "{name}: wrote outside the extraction folder");
    }
    assert!(!Path::new("/tmp/profcpu-hostile-absolute").exists());
}
