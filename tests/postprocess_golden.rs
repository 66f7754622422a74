//! `profcpu postprocess` on a committed collection: a small perf.data recorded by profcpu from `workload.c` (two
//! threads, a known split of work, some time in the kernel), with its `symbols/` capture and metadata.txt. Offline
//! and machine-independent: the frames are named only from the capture. The outputs are compared with committed
//! expected files, inferno's own collapser must turn our perf_script.out into our folded_stacks.out, and the view
//! options, idempotence, planted symlinks and archive input are checked on it.
//!
//! After an intended change of the output format, re-bless and review the diff:
//! `PROFCPU_BLESS=1 cargo test --release --test postprocess_golden`. To re-record the collection itself:
//! `tests/data/postprocess/record-golden.sh`.

mod support;

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, UNIX_EPOCH};
use support::golden::*;
use support::inferno;
use support::profcpu::*;
use support::scratch::Scratch;

fn check_expected(name: &str, actual: &str) {
    let path = data_dir().join("expected").join(name);
    if std::env::var_os("PROFCPU_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, actual).unwrap();
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (run with PROFCPU_BLESS=1 to create it)", path.display()));
    if actual != expected {
        let first = actual.lines().zip(expected.lines()).position(|(a, e)| a != e);
        panic!(
            "{name} differs from {} (first differing line: {first:?}; {} vs {} lines)",
            path.display(),
            actual.lines().count(),
            expected.lines().count()
        );
    }
}

/// The committed recording is what its workload says, so a bad re-recording cannot be blessed unnoticed.
fn assert_workload_shape(folded: &str) {
    let stacks = folded_map(folded);
    let total: u64 = stacks.values().sum();
    let share = |pred: &dyn Fn(&str) -> bool| {
        stacks.iter().filter(|(s, _)| pred(s)).map(|(_, c)| *c).sum::<u64>() as f64 / total as f64
    };
    let main_thread = share(&|s| s.starts_with("workload;__libc_start_call_main;main;spin_main;hash_loop"));
    let worker_sum = share(&|s| s == "workload;start_thread;spin_worker;sum_loop");
    let worker_kernel = share(&|s| s.starts_with("workload;start_thread;spin_worker;read;entry_SYSCALL_64"));
    assert!((0.35..0.65).contains(&main_thread), "main thread share {main_thread:.2}");
    assert!(worker_sum > 0.2 && worker_kernel > 0.05, "worker shares {worker_sum:.2} / {worker_kernel:.2}");
    assert!(folded.contains(";read_zero "), "the kernel's read of /dev/zero is named from kernel.syms");
}

#[test]
fn golden_collection_regenerates_the_expected_outputs_offline() {
    let scratch = Scratch::new("golden");
    let dir = golden_copy(&scratch, "run");
    let run = postprocess_ok(&dir, &[]);
    assert_eq!(run.stdout.trim(), dir.to_str().unwrap(), "the output folder is the last line of stdout");
    assert!(run.warnings().is_empty(), "{}", run.stderr);

    let script = read(&dir.join("perf_script.out"));
    let folded = read(&dir.join("folded_stacks.out"));
    assert_workload_shape(&folded);
    check_expected("perf_script.out", &script);
    check_expected("folded_stacks.out", &folded);
    // Every sample of the recording is in the script, and the top table counts them all.
    let samples = script.lines().filter(|l| l.starts_with("workload ")).count() as u64;
    let metadata = read(&dir.join("metadata.txt"));
    assert!(metadata.contains(&format!("\nsamples: {samples}\n")), "{metadata}");
    assert_eq!(run.top_samples(), samples);
    let top: Vec<&str> = run.stderr.lines().skip_while(|l| !l.starts_with("Hottest")).skip(2).take(5).collect();
    assert_eq!(top.len(), 5, "{}", run.stderr);
    assert!(top[0].ends_with("  hash_loop") && top[1].ends_with("  sum_loop"), "{top:?}");

    // The graph draws the same stacks: every folded frame name is in it, the title from metadata.txt.
    let svg = read(&dir.join("flamegraph.svg"));
    // Directories are left out of the title (they are in metadata.txt).
    assert!(svg.contains(">workload 1.0 (PID "), "title from the recorded command line");
    for name in ["hash_loop", "sum_loop", "spin_worker", "read_zero", "start_thread"] {
        assert!(svg.contains(&format!("<title>{name} (")), "{name} not drawn");
    }

    // The archive: relative paths only, plain `tar xzf` extracts it, and it holds exactly the folder's files.
    let archive = dir.join("prof.tar.gz");
    let names = tar_list(&archive);
    for name in &names {
        assert!(!name.starts_with('/') && !name.split('/').any(|c| c == ".."), "{name}");
    }
    for want in ["perf.data", "perf_script.out", "folded_stacks.out", "flamegraph.svg", "metadata.txt"] {
        assert!(names.iter().any(|n| n == want), "{want} not archived: {names:?}");
    }
    assert!(names.iter().any(|n| n == "symbols/kernel.syms") && names.iter().any(|n| n == "symbols/dsos.txt"));
    let unpacked = scratch.join("unpacked");
    plain_tar_extract(&archive, &unpacked);
    let mut in_dir = tree(&dir);
    in_dir.remove(Path::new("prof.tar.gz"));
    assert_eq!(tree(&unpacked), in_dir, "the archive differs from the folder");
}

#[test]
fn inferno_collapse_of_the_regenerated_script_is_the_folded_file() {
    let scratch = Scratch::new("golden-inferno");
    let dir = golden_copy(&scratch, "run");
    postprocess_ok(&dir, &[]);
    let script = read(&dir.join("perf_script.out"));
    let folded = read(&dir.join("folded_stacks.out"));
    assert!(folded.lines().count() >= 5);
    assert_eq!(inferno::collapse(&script, 1), folded, "inferno's collapse (library) disagrees");
    assert_eq!(inferno::collapse_cli(&dir.join("perf_script.out")), folded, "inferno-collapse-perf disagrees");
}

#[test]
fn a_second_run_gives_the_same_outputs() {
    let scratch = Scratch::new("golden-twice");
    let dir = golden_copy(&scratch, "run");
    postprocess_ok(&dir, &[]);
    let first = tree(&dir);
    let first_archive = tree_of_archive(&scratch, &dir, "first");
    // The second run finds perf.data and symbols/ as the first archived them: it copies their compressed bytes.
    let run = postprocess_ok(&dir, &["-vv"]);
    for taken in ["perf.data's entry taken from the earlier", "the naming files' segment taken from the earlier"] {
        assert!(run.stderr.contains(taken), "not reused ({taken}):\n{}", run.stderr);
    }
    let mut second = tree(&dir);
    // The archive is compared by its contents (its entries carry modification times).
    let mut first = first;
    first.remove(Path::new("prof.tar.gz"));
    second.remove(Path::new("prof.tar.gz"));
    assert_eq!(first, second);
    assert_eq!(first_archive, tree_of_archive(&scratch, &dir, "second"));
    let leftovers: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "staging left behind: {leftovers:?}");

    // Once perf.data's last change is old enough to be told from a later one by its times, its stamp in the index
    // says it is unchanged without reading it; a file whose times changed is read again.
    let perf_data = dir.join("perf.data");
    let meta = std::fs::metadata(&perf_data).unwrap();
    let (modified, status_changed) = (meta.modified().unwrap(), UNIX_EPOCH + Duration::from_secs(meta.ctime() as u64));
    std::thread::sleep(Duration::from_millis(3100).saturating_sub(status_changed.elapsed().unwrap_or_default()));
    let stamped = postprocess_ok(&dir, &["-vv"]);
    let by_crc = "perf.data's entry taken from the earlier prof.tar.gz (the same by its CRC)";
    assert!(stamped.stderr.contains(by_crc), "no stamp taken of an old perf.data:\n{}", stamped.stderr);
    let by_stamp = postprocess_ok(&dir, &["-vv"]);
    let unread = "perf.data's entry taken from the earlier prof.tar.gz (the same by its stamp)";
    assert!(by_stamp.stderr.contains(unread), "the stamp was not believed:\n{}", by_stamp.stderr);
    assert_eq!(first_archive, tree_of_archive(&scratch, &dir, "stamped"));
    // The same modification time in seconds (the tar header's), the status-change time now: read again.
    let file = std::fs::File::options().write(true).open(&perf_data).unwrap();
    file.set_modified(modified).unwrap();
    let touched = postprocess_ok(&dir, &["-vv"]);
    assert!(touched.stderr.contains(by_crc), "a touched perf.data was not read again:\n{}", touched.stderr);
    assert_eq!(first_archive, tree_of_archive(&scratch, &dir, "touched"));
}

/// A run writes over the perf_script.out of the run before (its cached pages cost less than new ones) only when
/// that is a plain file with no other name: one hard-linked elsewhere is replaced, the other name left as it was.
/// Where the earlier file already holds what the run writes, those bytes are left as they are; it is dated anew.
#[test]
fn an_earlier_script_is_written_over_only_when_no_other_name_holds_it() {
    use std::os::unix::fs::MetadataExt;
    let scratch = Scratch::new("golden-write-over");
    let dir = golden_copy(&scratch, "run");
    let script = dir.join("perf_script.out");
    postprocess_ok(&dir, &[]);
    let expected = read(&script);
    let kept = |run: &PostprocessRun| {
        let line = run.stderr.lines().find(|l| l.contains("perf_script.out: ") && l.contains(" as the earlier run"));
        let line = line.unwrap_or_else(|| panic!("no perf_script.out line:\n{}", run.stderr));
        let of = line.split(", ").nth(1).and_then(|s| s.split(' ').next()).and_then(|n| n.parse::<usize>().ok());
        of.unwrap_or_else(|| panic!("unreadable: {line}"))
    };

    let archived = |name: &str| {
        let archive = tree_of_archive(&scratch, &dir, name);
        String::from_utf8(archive[Path::new("perf_script.out")].clone()).unwrap()
    };

    // The same bytes: none written, the time of the file is the run's; the archive's copy is the earlier archive's.
    let old_date = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    std::fs::File::options().write(true).open(&script).unwrap().set_modified(old_date).unwrap();
    let same = postprocess_ok(&dir, &["-vv"]);
    assert_eq!(kept(&same), expected.len(), "{}", same.stderr);
    assert_eq!(read(&script), expected);
    assert!(std::fs::metadata(&script).unwrap().modified().unwrap() > old_date, "the file kept its old date");
    let copied = "perf_script.out's entry taken from the earlier prof.tar.gz";
    assert!(same.stderr.contains(copied), "not copied:\n{}", same.stderr);
    assert_eq!(archived("same"), expected);

    // One byte changed in the middle, or the file cut short: written again from there.
    let mut changed = expected.clone().into_bytes();
    let middle = changed.len() / 2;
    changed[middle] ^= 0x20;
    for (i, earlier) in [&changed[..], &expected.as_bytes()[..middle]].into_iter().enumerate() {
        std::fs::write(&script, earlier).unwrap();
        let run = postprocess_ok(&dir, &["-vv"]);
        assert!(kept(&run) <= middle, "{}", run.stderr);
        assert_eq!(read(&script), expected);
        assert!(!run.stderr.contains(copied), "copied though the text changed:\n{}", run.stderr);
        assert_eq!(archived(&format!("changed-{i}")), expected);
    }

    // Longer than what the next run writes: the rest must go.
    let mut longer = expected.clone();
    longer.push_str(&"an earlier run's tail\n".repeat(1000));
    std::fs::write(&script, &longer).unwrap();
    let inode = std::fs::metadata(&script).unwrap().ino();
    let run = postprocess_ok(&dir, &["-vv"]);
    assert_eq!(kept(&run), expected.len(), "{}", run.stderr);
    assert_eq!(std::fs::metadata(&script).unwrap().ino(), inode, "the earlier file was not written over");
    assert_eq!(read(&script), expected);

    let victim = scratch.join("victim.txt");
    std::fs::write(&victim, "do not touch\n").unwrap();
    std::fs::remove_file(&script).unwrap();
    std::fs::hard_link(&victim, &script).unwrap();
    postprocess_ok(&dir, &[]);
    assert_eq!(read(&victim), "do not touch\n", "a hard-linked perf_script.out was written over");
    assert_ne!(std::fs::metadata(&script).unwrap().ino(), std::fs::metadata(&victim).unwrap().ino());
    assert_eq!(read(&script), expected);
}

/// A folded file that holds the stacks a run makes stays where it is, dated anew (writing it again would cost more
/// than comparing it); one that differs, has another name or may be written by others is replaced, the other name
/// left as it was.
#[test]
fn an_earlier_folded_file_stays_only_when_it_holds_the_same_stacks() {
    use std::os::unix::fs::PermissionsExt;
    let scratch = Scratch::new("golden-folded-kept");
    let dir = golden_copy(&scratch, "run");
    let folded = dir.join("folded_stacks.out");
    postprocess_ok(&dir, &[]);
    let expected = read(&folded);
    let inode = |path: &Path| std::fs::metadata(path).unwrap().ino();
    let first = inode(&folded);

    let old_date = UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    std::fs::File::options().write(true).open(&folded).unwrap().set_modified(old_date).unwrap();
    postprocess_ok(&dir, &[]);
    assert_eq!(inode(&folded), first, "the same stacks were written anew");
    assert!(std::fs::metadata(&folded).unwrap().modified().unwrap() > old_date, "the file kept its old date");
    assert_eq!(read(&folded), expected);

    // One byte changed in the middle, cut short, longer: replaced.
    let mut changed = expected.clone().into_bytes();
    changed[expected.len() / 2] ^= 0x20;
    let longer = format!("{expected}main;more 1\n");
    for earlier in [&changed[..], &expected.as_bytes()[..expected.len() / 2], longer.as_bytes()] {
        std::fs::write(&folded, earlier).unwrap();
        let before = inode(&folded);
        postprocess_ok(&dir, &[]);
        assert_ne!(inode(&folded), before);
        assert_eq!(read(&folded), expected);
    }

    // The same stacks under another name too, or in a file others may write: replaced, the other name untouched.
    let victim = scratch.join("victim.txt");
    std::fs::write(&victim, &expected).unwrap();
    std::fs::File::options().write(true).open(&victim).unwrap().set_modified(old_date).unwrap();
    std::fs::remove_file(&folded).unwrap();
    std::fs::hard_link(&victim, &folded).unwrap();
    postprocess_ok(&dir, &[]);
    assert_ne!(inode(&folded), inode(&victim), "a hard-linked folded file was kept");
    assert_eq!(std::fs::metadata(&victim).unwrap().modified().unwrap(), old_date, "the other name was dated");
    std::fs::set_permissions(&folded, std::fs::Permissions::from_mode(0o666)).unwrap();
    let before = inode(&folded);
    postprocess_ok(&dir, &[]);
    assert_ne!(inode(&folded), before, "a folded file others may write was kept");
    assert_eq!(std::fs::metadata(&folded).unwrap().permissions().mode() & 0o777, 0o644);
    assert_eq!(read(&folded), expected);
    let archive = tree_of_archive(&scratch, &dir, "folded");
    assert_eq!(archive[Path::new("folded_stacks.out")], expected.as_bytes());
}

fn tree_of_archive(
    scratch: &Scratch,
    dir: &Path,
    name: &str,
) -> std::collections::BTreeMap<std::path::PathBuf, Vec<u8>> {
    let dest = scratch.join(format!("archive-{name}"));
    plain_tar_extract(&dir.join("prof.tar.gz"), &dest);
    tree(&dest)
}

#[test]
fn regenerated_files_replace_planted_symlinks_without_writing_through_them() {
    let scratch = Scratch::new("golden-symlinks");
    let dir = golden_copy(&scratch, "run");
    let victim = scratch.join("victim.txt");
    std::fs::write(&victim, "do not touch\n").unwrap();
    let outputs = ["perf_script.out", "folded_stacks.out", "flamegraph.svg", "prof.tar.gz"];
    for name in outputs {
        std::os::unix::fs::symlink(&victim, dir.join(name)).unwrap();
    }
    // A metadata.txt that is a symlink is not followed (it could lead to any file root can read): it is warned
    // about, left as it is where it points, and replaced by a regular file derived from perf.data.
    let outside_metadata = scratch.join("metadata-elsewhere.txt");
    std::fs::rename(dir.join("metadata.txt"), &outside_metadata).unwrap();
    let metadata = read(&outside_metadata);
    std::os::unix::fs::symlink(&outside_metadata, dir.join("metadata.txt")).unwrap();

    let run = postprocess_ok(&dir, &[]);
    let warnings = run.warnings();
    assert_eq!(warnings.len(), 1, "{}", run.stderr);
    assert!(warnings[0].contains("metadata.txt is a symlink, not a regular file"), "{}", warnings[0]);
    assert_eq!(read(&victim), "do not touch\n", "an output was written through a symlink");
    assert_eq!(read(&outside_metadata), metadata);
    for name in outputs.iter().chain(&["metadata.txt"]) {
        let meta = std::fs::symlink_metadata(dir.join(name)).unwrap();
        assert!(meta.file_type().is_file(), "{name} is still a symlink");
    }
    check_expected("folded_stacks.out", &read(&dir.join("folded_stacks.out")));
}

#[test]
fn view_options_filter_and_split_the_profile() {
    let scratch = Scratch::new("golden-views");
    let full_dir = golden_copy(&scratch, "full");
    postprocess_ok(&full_dir, &[]);
    let full = folded_map(&read(&full_dir.join("folded_stacks.out")));
    let script = read(&full_dir.join("perf_script.out"));
    // "workload 27095/27096 [000] …": the process and its two threads.
    let mut ids: Vec<(u32, u32)> = script
        .lines()
        .filter_map(|l| l.strip_prefix("workload "))
        .map(|l| {
            let (pid, tid) = l.split_whitespace().next().unwrap().split_once('/').unwrap();
            (pid.trim().parse().unwrap(), tid.trim().parse().unwrap())
        })
        .collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 2, "two threads expected: {ids:?}");
    let pid = ids[0].0;
    let (main_tid, worker_tid) = if ids[0].1 == pid { (ids[0].1, ids[1].1) } else { (ids[1].1, ids[0].1) };

    // -no-kernel: no kernel frame is left, user stacks keep their weight (kernel-only tails fold into `read`).
    let dir = golden_copy(&scratch, "no-kernel");
    postprocess_ok(&dir, &["-no-kernel"]);
    let no_kernel = folded_map(&read(&dir.join("folded_stacks.out")));
    assert!(no_kernel.keys().all(|s| !s.contains("entry_SYSCALL_64") && !s.contains("read_zero")), "{no_kernel:?}");
    let read_weight: u64 = full.iter().filter(|(s, _)| s.contains(";spin_worker;read")).map(|(_, c)| c).sum();
    assert_eq!(no_kernel["workload;start_thread;spin_worker;read"], read_weight);
    assert!(!read(&dir.join("perf_script.out")).contains("[kernel.kallsyms]"));

    // -tid: only that thread; -pid of the process keeps everything.
    let dir = golden_copy(&scratch, "tid");
    postprocess_ok(&dir, &["-tid", &worker_tid.to_string()]);
    let worker = folded_map(&read(&dir.join("folded_stacks.out")));
    assert!(!worker.is_empty() && worker.keys().all(|s| s.starts_with("workload;start_thread;spin_worker")));
    let dir = golden_copy(&scratch, "pid");
    postprocess_ok(&dir, &["-pid", &pid.to_string()]);
    assert_eq!(folded_map(&read(&dir.join("folded_stacks.out"))), full);

    // -per-thread: one folded file and graph per thread, which add up to the whole.
    let dir = golden_copy(&scratch, "per-thread");
    postprocess_ok(&dir, &["-per-thread", "-title", "Golden <workload> & friends"]);
    let mut sum = std::collections::BTreeMap::new();
    for tid in [main_tid, worker_tid] {
        let part = folded_map(&read(&dir.join(format!("folded_stacks.{tid}.out"))));
        assert!(!part.is_empty());
        for (stack, count) in part {
            *sum.entry(stack).or_insert(0) += count;
        }
        let svg = read(&dir.join(format!("flamegraph.{tid}.svg")));
        assert!(svg.contains(&format!("thread {tid}")), "thread {tid} graph title");
    }
    assert_eq!(sum, full);
    assert_eq!(folded_map(&read(&dir.join("folded_stacks.out"))), full);
    // -title, escaped for SVG; the per-thread files are archived too.
    let svg = read(&dir.join("flamegraph.svg"));
    assert!(svg.contains("Golden &lt;workload&gt; &amp; friends"), "title not in the SVG");
    let names = tar_list(&dir.join("prof.tar.gz"));
    assert!(names.contains(&format!("folded_stacks.{worker_tid}.out")), "{names:?}");

    // A filter that selects nothing says what there is instead, and changes nothing: the outputs of an earlier
    // run all stay.
    let dir = golden_copy(&scratch, "nothing");
    postprocess_ok(&dir, &[]);
    let before = tree(&dir);
    assert!(before.keys().any(|p| p.as_os_str() == "perf_script.out"));
    let line = one_line_error(&["-dir", dir.to_str().unwrap(), "-pid", &(pid + 1).to_string()]);
    assert!(line.contains(&format!("no samples of PID {}", pid + 1)) && line.contains(&format!("{pid} (workload)")));
    let line = one_line_error(&["-dir", dir.to_str().unwrap(), "-pid", &pid.to_string(), "-tid", "1"]);
    assert!(line.contains(&main_tid.to_string()) && line.contains(&worker_tid.to_string()), "{line}");
    assert_eq!(tree(&dir), before, "a failed run changed the folder");
}

#[test]
fn an_archive_in_place_of_a_directory_is_extracted_beside_it() {
    let scratch = Scratch::new("golden-archive");
    let dir = golden_copy(&scratch, "run");
    postprocess_ok(&dir, &[]);
    let moved = scratch.join("elsewhere");
    std::fs::create_dir(&moved).unwrap();
    let archive = moved.join("prof.tar.gz");
    std::fs::copy(dir.join("prof.tar.gz"), &archive).unwrap();

    let run = postprocess_ok(&archive, &[]);
    let extracted = moved.join("prof");
    assert_eq!(run.stdout.trim(), extracted.to_str().unwrap());
    assert!(run.stderr.contains(&format!("extracted {} into {}", archive.display(), extracted.display())));
    check_expected("folded_stacks.out", &read(&extracted.join("folded_stacks.out")));
    check_expected("perf_script.out", &read(&extracted.join("perf_script.out")));
    // Again: a new folder, the first one is left as it is.
    let run = postprocess_ok(&archive, &["-no-kernel"]);
    assert_eq!(run.stdout.trim(), moved.join("prof-2").to_str().unwrap());
    check_expected("folded_stacks.out", &read(&extracted.join("folded_stacks.out")));
}
