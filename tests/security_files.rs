//! The hostile-input review's file attacks (issue 15), reproduced as written against real processes, as root:
//!
//! 1. a target's user plants `/tmp/perf-PID.map -> /etc/shadow` (on the host, in a namespace with its own /tmp,
//!    and inside a container whose own /etc/shadow is the target): nothing of the file may reach the outputs;
//! 2. another user renames the run folder (collect) or the staging folder (postprocess) mid-run and plants a
//!    symlink in its place: nothing may be created where the link points;
//! 3. `metadata.txt` as a link to /dev/zero or a FIFO, a FIFO as the archive, perf.data as a link: one line, fast,
//!    no memory blow-up;
//! 5. a container swaps its /tmp for an absolute symlink with RENAME_EXCHANGE while profcpu opens
//!    `/tmp/perf-1.map` inside it: never a host file.

mod support;

use profcpu::fs::{Last, Root};
use std::io::Read;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};
use support::golden::{copy_tree, golden_dir};
use support::hostile::*;
use support::profcpu::*;
use support::PROFCPU;

/// The first line of the host's /etc/shadow: what must never appear in an output.
fn shadow_marker() -> Vec<u8> {
    let shadow = std::fs::read("/etc/shadow").expect("the tests run as root");
    shadow.split(|&b| b == b'\n').next().unwrap().to_vec()
}

/// `profcpu collect -pid PID -duration 2 -output OUT` (must succeed).
fn collect_pid(pid: u32, out: &Path) -> Collected {
    collect(&["-pid", &pid.to_string(), "-duration", "2", "-output", out.to_str().unwrap()])
}

/// A nobody-owned python that plants `/tmp/perf-<its pid>.map -> TARGET` and spins for 20 s (the review's
/// reproduction).
const PLANT_AND_SPIN: &str = r#"
import os, sys, time
os.symlink(sys.argv[1], "/tmp/perf-%d.map" % os.getpid())
print("planted", flush=True)
t = time.time()
while time.time() - t < 20: pass
"#;

fn assert_nothing_leaked(run: &Collected, marker: &[u8], pid: u32) {
    let leaked = files_containing(&run.run_dir, marker);
    assert!(leaked.is_empty(), "the planted file's content is in {leaked:?}");
    assert!(!run.run_dir.join(format!("symbols/perf-{pid}.map")).exists(), "the link was copied");
    assert!(
        run.stderr.contains("it is a symlink, and a JIT writes its map as a file"),
        "no warning about the link:\n{}",
        run.stderr
    );
}

#[test]
fn a_perf_map_linked_to_etc_shadow_on_the_host_is_not_copied() {
    let scratch = SharedScratch::new("sec-shadow-host");
    let (mut spinner, line) = start_and_wait_for_line(python_as_nobody(PLANT_AND_SPIN, &["/etc/shadow"]));
    assert_eq!(line.trim(), "planted");
    let pid = spinner.id();
    let planted = format!("/tmp/perf-{pid}.map");
    let run = collect_pid(pid, &scratch.join("o"));
    let _ = spinner.kill();
    let _ = spinner.wait();
    let _ = std::fs::remove_file(&planted);
    assert_nothing_leaked(&run, &shadow_marker(), pid);
}

#[test]
fn a_perf_map_linked_to_etc_shadow_in_a_private_tmp_is_not_copied() {
    let scratch = SharedScratch::new("sec-shadow-ns");
    // The target's own /tmp (a tmpfs in its mount namespace) and PID namespace, as in a container.
    let mut cmd = Command::new("unshare");
    cmd.args(["--pid", "--fork", "--kill-child", "--mount", "--propagation", "private", "sh", "-c"])
        .arg("mount -t tmpfs tmpfs /tmp && exec \"$@\"")
        .arg("sh")
        .args(AS_NOBODY)
        .args([PYTHON, "-c", PLANT_AND_SPIN, "/etc/shadow"]);
    let (mut unshare, line) = start_and_wait_for_line(cmd);
    assert_eq!(line.trim(), "planted");
    let pid = only_child(unshare.id());
    assert!(
        Path::new(&format!("/proc/{pid}/root/tmp/perf-1.map")).symlink_metadata().is_ok(),
        "the link is not in the target's /tmp"
    );
    let run = collect_pid(pid, &scratch.join("o"));
    // SAFETY: killing the process this test started.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    let _ = unshare.kill();
    let _ = unshare.wait();
    assert_nothing_leaked(&run, &shadow_marker(), pid);
}

#[test]
fn a_perf_map_linked_to_the_containers_own_shadow_is_not_copied() {
    let scratch = SharedScratch::new("sec-shadow-container");
    let container = ContainerRoot::new(scratch.join("root"));
    let secret = b"root:$y$container-secret-hash:19000:0:99999:7:::\n";
    std::fs::write(container.root.join("etc/shadow"), secret).unwrap();
    set_mode(&container.root.join("etc/shadow"), 0o600);
    let target = container.spawn_as_nobody(&["/usr/bin/python3", "-c", PLANT_AND_SPIN, "/etc/shadow"]);
    assert_eq!(target.first_line.trim(), "planted");
    let run = collect_pid(target.host_pid, &scratch.join("o"));
    drop(target);
    assert_nothing_leaked(&run, b"container-secret-hash", run_pid(&run));
}

/// The PID profcpu profiled (from its summary line).
fn run_pid(run: &Collected) -> u32 {
    let line = run.stderr.lines().find(|l| l.contains(" samples (")).unwrap();
    line.split("from PID ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap()
}

#[test]
fn a_run_folder_swapped_for_a_symlink_mid_run_is_never_written_through() {
    let scratch = SharedScratch::new("sec-run-swap");
    let base = scratch.join("out");
    std::fs::create_dir(&base).unwrap();
    set_mode(&base, 0o777);
    let victim = scratch.join("victim");
    std::fs::create_dir(&victim).unwrap();
    set_mode(&victim, 0o777);
    let stolen = base.join("stolen");
    let (mut thief, line) = start_and_wait_for_line(python_as_nobody(
        FOLDER_THIEF,
        &[base.to_str().unwrap(), "", stolen.to_str().unwrap(), victim.to_str().unwrap()],
    ));
    assert_eq!(line.trim(), "watching");
    let mut spinner = support::busy::Busy::start(&[]);
    let output = Command::new(PROFCPU)
        .args(["collect", "-pid", &spinner.info.pid.to_string(), "-duration", "2", "-output"])
        .arg(&base)
        .output()
        .unwrap();
    let _ = spinner.child.kill();
    let thief_status = wait_with_timeout(&mut thief, Duration::from_secs(30));
    assert!(thief_status.success(), "the thief never swapped the run folder");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    let in_victim: Vec<_> = std::fs::read_dir(&victim).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(in_victim.is_empty(), "root wrote {in_victim:?} through the planted symlink:\n{stderr}");
    if output.status.success() {
        // Everything went where the run folder went.
        for name in ["perf.data", "symbols/dsos.txt", "symbols/kernel.syms", "symbols/processes.txt", "prof.tar.gz"] {
            assert!(stolen.join(name).is_file(), "{name} missing from the moved run folder:\n{stderr}");
        }
    } else {
        let errors: Vec<_> = stderr.lines().filter(|l| l.starts_with("profcpu: error: ")).collect();
        assert_eq!(errors.len(), 1, "{stderr}");
    }
}

#[test]
fn a_staging_folder_swapped_for_a_symlink_is_never_written_through() {
    let scratch = SharedScratch::new("sec-staging-swap");
    let dir = scratch.join("run");
    copy_tree(&golden_dir(), &dir);
    let nobody = nobody_uid();
    let status = Command::new("chown").arg("-R").arg(format!("{nobody}:{nobody}")).arg(&dir).status().unwrap();
    assert!(status.success());
    let victim = scratch.join("victim");
    std::fs::create_dir(&victim).unwrap();
    set_mode(&victim, 0o777);
    let stolen = scratch.join("run/stolen-staging");
    // The staging folder lives for a fraction of a second: on a busy machine the polling thief can miss it, so the
    // run is repeated until it catches one.
    const ATTEMPTS: usize = 5;
    let mut caught = None;
    for _ in 0..ATTEMPTS {
        let (mut thief, line) = start_and_wait_for_line(python_as_nobody(
            FOLDER_THIEF,
            &[dir.to_str().unwrap(), ".profcpu-staging-", stolen.to_str().unwrap(), victim.to_str().unwrap()],
        ));
        assert_eq!(line.trim(), "watching");
        let run = postprocess(&["-dir", dir.to_str().unwrap()]);
        std::thread::sleep(Duration::from_secs(1));
        match thief.try_wait().unwrap() {
            Some(status) => {
                assert!(status.success(), "the thief failed: {status}");
                caught = Some(run);
                break;
            }
            None => {
                let _ = thief.kill();
                let _ = thief.wait();
            }
        }
    }
    let run = caught.unwrap_or_else(|| panic!("the thief never caught the staging folder in {ATTEMPTS} runs"));
    let in_victim: Vec<_> = std::fs::read_dir(&victim).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(in_victim.is_empty(), "root wrote {in_victim:?} through the planted symlink:\n{}", run.stderr);
    if run.ok() {
        for name in ["flamegraph.svg", "folded_stacks.out", "metadata.txt", "perf_script.out", "prof.tar.gz"] {
            let meta = std::fs::symlink_metadata(dir.join(name)).unwrap();
            assert!(meta.file_type().is_file(), "{name} is not a regular file");
        }
    } else {
        assert_eq!(run.stderr.lines().filter(|l| l.starts_with("profcpu: error: ")).count(), 1, "{}", run.stderr);
    }
}

/// Runs `postprocess ARGS` within 20 s (a hang fails the test) and returns it with the largest resident size any
/// child of this test process has had so far (KB).
fn postprocess_bounded(args: &[&str]) -> (PostprocessRun, u64) {
    let started = Instant::now();
    let mut child = Command::new(PROFCPU)
        .arg("postprocess")
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let status = wait_with_timeout(&mut child, Duration::from_secs(20));
    let mut stdout = String::new();
    let mut stderr = String::new();
    child.stdout.take().unwrap().read_to_string(&mut stdout).unwrap();
    child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    // SAFETY: rusage is plain integers; getrusage only writes into it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) }, 0);
    eprintln!("postprocess {args:?}: {:.1?}, {status}", started.elapsed());
    let output =
        std::process::Output { status, stdout: stdout.clone().into_bytes(), stderr: stderr.clone().into_bytes() };
    (PostprocessRun { output, stdout, stderr }, usage.ru_maxrss as u64)
}

/// Far below the 3.7 GB that `metadata.txt -> /dev/zero` reached.
const MAX_RSS_KB: u64 = 1 << 20;

#[test]
fn planted_metadata_and_archives_are_refused_in_one_line_fast() {
    let scratch = SharedScratch::new("sec-inputs");
    for (name, plant) in [("zero", "link"), ("fifo", "fifo")] {
        let dir = scratch.join(name);
        copy_tree(&golden_dir(), &dir);
        let metadata = dir.join("metadata.txt");
        std::fs::remove_file(&metadata).unwrap();
        match plant {
            "link" => std::os::unix::fs::symlink("/dev/zero", &metadata).unwrap(),
            _ => nix::unistd::mkfifo(&metadata, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap(),
        }
        let (run, rss) = postprocess_bounded(&["-dir", dir.to_str().unwrap()]);
        assert!(run.ok(), "{name}: {}", run.stderr);
        assert!(rss < MAX_RSS_KB, "{name}: {rss} KB resident");
        let warnings = run.warnings();
        assert_eq!(warnings.len(), 1, "{name}: {}", run.stderr);
        let expected =
            if plant == "link" { "is a symlink, not a regular file" } else { "is a FIFO, not a regular file" };
        assert!(warnings[0].contains("metadata.txt") && warnings[0].contains(expected), "{}", warnings[0]);
        // The planted file was replaced by the regenerated one, not written through.
        assert!(std::fs::symlink_metadata(&metadata).unwrap().file_type().is_file());
    }

    // A FIFO given as the archive.
    let fifo = scratch.join("x.tar.gz");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
    let (run, _) = postprocess_bounded(&["-dir", fifo.to_str().unwrap()]);
    assert_eq!(run.output.status.code(), Some(1), "{}", run.stderr);
    assert_eq!(run.stderr.lines().count(), 1, "{}", run.stderr);
    assert!(run.stderr.contains("x.tar.gz is a FIFO, not a regular file"), "{}", run.stderr);
    assert!(!scratch.join("x").exists(), "an extraction folder was left behind");

    // perf.data as a link (to a real recording, and to /dev/zero): refused, naming the fix.
    for (name, to) in [("data-link", golden_dir().join("perf.data")), ("data-zero", "/dev/zero".into())] {
        let dir = scratch.join(name);
        copy_tree(&golden_dir(), &dir);
        std::fs::remove_file(dir.join("perf.data")).unwrap();
        std::os::unix::fs::symlink(&to, dir.join("perf.data")).unwrap();
        let line = one_line_error(&["-dir", dir.to_str().unwrap()]);
        assert!(line.contains("perf.data is a symlink, not a regular file"), "{line}");
        assert!(line.contains("cp --remove-destination"), "{line}");
    }
}

#[test]
fn output_in_proc_says_what_is_wrong() {
    let busy = support::busy::Busy::start(&[]);
    let out = Command::new(PROFCPU)
        .args(["collect", "-pid", &busy.info.pid.to_string(), "-duration", "1", "-output", "/proc"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("/proc is in a kernel file system") && stderr.contains("-output"), "{stderr}");
}

/// How many of `tries` opens of `/tmp/perf-1.map` inside the swapping container read the host's file, its own,
/// or failed (the swap makes many lookups fail: that is fine, reading the host's file is not).
fn race_opens(root: &Root, tries: usize) -> (usize, usize, usize) {
    let (mut host, mut inside, mut failed) = (0, 0, 0);
    for _ in 0..tries {
        match root.open_file(Path::new("/tmp/perf-1.map"), Last::NoFollow) {
            Ok(mut f) => {
                let mut s = String::new();
                f.read_to_string(&mut s).unwrap();
                match s.as_str() {
                    "HOST" => host += 1,
                    _ => inside += 1,
                }
            }
            Err(_) => failed += 1,
        }
    }
    (host, inside, failed)
}

#[test]
fn a_container_swapping_its_tmp_for_a_host_link_never_gets_a_host_file_read() {
    let scratch = SharedScratch::new("sec-tmp-swap");
    let host_dir = scratch.join("host");
    std::fs::create_dir(&host_dir).unwrap();
    std::fs::write(host_dir.join("perf-1.map"), "HOST").unwrap();
    let container = ContainerRoot::new(scratch.join("root"));
    std::fs::write(container.root.join("tmp/perf-1.map"), "INSIDE").unwrap();
    // `/tmpx` inside the container: an absolute link to the host's folder (meaningless inside, but not on the host).
    std::os::unix::fs::symlink(&host_dir, container.root.join("tmpx")).unwrap();
    let nobody = nobody_uid();
    std::os::unix::fs::lchown(container.root.join("tmpx"), Some(nobody), Some(nobody)).unwrap();
    // The container's root folder is its own to rename in.
    std::os::unix::fs::chown(&container.root, Some(nobody), Some(nobody)).unwrap();
    let swapper = container.spawn_as_nobody(&["/usr/bin/python3", "-c", SWAPPER, "/tmp", "/tmpx"]);
    assert_eq!(swapper.first_line.trim(), "swapping");
    let root = Root::of_process(swapper.host_pid).unwrap();
    // Rounds of opens until both outcomes were seen: on a busy machine the swapper may sit out a whole round in one
    // state (CI once saw 20,000 opens all fail).
    let (mut tries, mut host, mut inside, mut failed) = (0, 0, 0, 0);
    let started = Instant::now();
    while tries == 0 || ((inside == 0 || failed == 0) && started.elapsed() < Duration::from_secs(20)) {
        let round = race_opens(&root, 20_000);
        (tries, host, inside, failed) = (tries + 20_000, host + round.0, inside + round.1, failed + round.2);
    }
    eprintln!("{tries} opens during the swap: {host} host-file reads, {inside} inside, {failed} failed");
    assert!(support::profcpu::process_alive(swapper.host_pid), "the swapper died");
    assert_eq!(host, 0, "read the host's file {host} times in {tries}");
    assert!(inside > 0 && failed > 0, "the swap did not race with the opens ({inside} inside, {failed} failed)");
}
