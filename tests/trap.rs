//! `profcpu trap` against real processes: the sample web API on .NET 8 idle and under wrk load, busy loops, child
//! cgroups made for the test (v2 and v1 cpuacct), and bad input. Times are read from the metadata.txt each
//! collection wrote (the trigger's time, the start of sampling) and compared with the moments the test changed the
//! load.
//!
//! The CPU-heavy tests take turns (`exclusive`) and give what they start a large CPU share (`favoured`): CPU
//! shares on 2 CPUs are what the triggers measure, and other work on the machine would otherwise decide them.

mod support;

use profcpu::procfs::cgroup::{parse_mounts, Version};
use profcpu::report::metadata_txt::Metadata;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use support::busy::Busy;
use support::hostile::{set_mode, SharedScratch, AS_NOBODY};
use support::profcpu::{Background, Finished};
use support::running_app::exclusive;
use support::scratch::Scratch;
use support::webapi::{Api, Load, Profile, OUTPUT_FILES};
use support::PROFCPU;

/// Longest a trap may take beyond what it was asked to watch and collect (writing outputs on a busy machine).
const GRACE: Duration = Duration::from_secs(60);

fn s(p: &Path) -> &str {
    p.to_str().expect("UTF-8 scratch path")
}

/// `profcpu ARGS` in the background, the arguments given as one line (none holds a space).
fn background(args: &str) -> Background {
    Background::start(&args.split(' ').collect::<Vec<_>>())
}

/// The folders a trap printed on stdout, each with its metadata.txt read by profcpu's own parser.
fn collections(run: &Finished) -> Vec<(PathBuf, Metadata)> {
    run.stdout
        .lines()
        .map(|line| {
            let dir = PathBuf::from(line);
            let text = std::fs::read_to_string(dir.join("metadata.txt")).unwrap_or_else(|e| {
                panic!("{line} printed on stdout, but no metadata.txt there ({e}):\n{}", run.stderr)
            });
            let meta = Metadata::parse(&text, "metadata.txt").unwrap();
            (dir, meta)
        })
        .collect()
}

fn assert_complete(dir: &Path) {
    for name in OUTPUT_FILES {
        let len = std::fs::metadata(dir.join(name)).map(|m| m.len()).unwrap_or(0);
        assert!(len > 0, "expected a non-empty {name} in {}, found {len} bytes", dir.display());
    }
}

/// Milliseconds from `from` to `to`.
fn ms_between(from: chrono::DateTime<chrono::FixedOffset>, to: chrono::DateTime<chrono::FixedOffset>) -> i64 {
    (to - from).num_milliseconds()
}

/// While held, this test process and everything it starts (the API, wrk, busy loops, profcpu) run in a cgroup of
/// the v1 `cpu` controller with ten times the usual weight, so that the CPU use the traps measure is the
/// workload's and not whatever else shares the machine's CPUs. (Nice values would not do: with autogroups they
/// only order processes within one session.) Without a v1 `cpu` hierarchy it says so and does nothing.
struct Favoured {
    _cgroup: Option<TestCgroup>,
}

fn favoured() -> Favoured {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let cpu_mount = mountinfo.lines().find_map(|line| {
        let (before, after) = line.split_once(" - ")?;
        let mut after = after.split(' ');
        let (fstype, super_options) = (after.next()?, after.nth(1)?);
        let fields: Vec<&str> = before.split(' ').collect();
        (fstype == "cgroup" && fields.get(3) == Some(&"/") && super_options.split(',').any(|o| o == "cpu"))
            .then(|| PathBuf::from(fields[4]))
    });
    let Some(mount) = cpu_mount else {
        eprintln!("no v1 cpu cgroup hierarchy: the workload competes with everything else on the machine");
        return Favoured { _cgroup: None };
    };
    let mut cgroup = TestCgroup::at(&mount, &format!("profcpu-trap-favoured-{}", std::process::id()));
    // Back where this process was when the test is over.
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    let original = cgroups.lines().find_map(|l| {
        let mut fields = l.splitn(3, ':');
        let controllers = fields.nth(1)?;
        controllers.split(',').any(|c| c == "cpu").then(|| fields.next()).flatten()
    });
    cgroup.parent_procs = mount.join(original.unwrap_or("/").trim_start_matches('/')).join("cgroup.procs");
    std::fs::write(cgroup.dir.join("cpu.shares"), "10240").unwrap();
    cgroup.add(std::process::id());
    Favoured { _cgroup: Some(cgroup) }
}

fn now() -> chrono::DateTime<chrono::FixedOffset> {
    chrono::Local::now().fixed_offset()
}

/// Idle .NET 8 API: no collection in 10 s under `-cpu-above 50`; load starts: one collection starts within
/// `-for` plus a second and shows the loaded route's handler. Meanwhile `-cpu-below 20`, started on the busy API,
/// fires only after the load stops.
#[test]
fn webapi_idle_then_loaded_then_idle_again() {
    let _cpu = exclusive();
    let _favoured = favoured();
    let work = Scratch::new("trap-webapi");
    let api = Api::on_host(&work);
    let pid = api.host_pid().to_string();
    let (above_out, below_out) = (work.join("above"), work.join("below"));
    let mut above = background(&format!("trap -pid {pid} -cpu-above 50 -for 2 -duration 3 -output {}", s(&above_out)));
    let armed = above.wait_for_line(|l| l.contains("armed"), Duration::from_secs(10));
    assert!(armed, "the trap never armed:\n{}", above.stderr_so_far());

    // Idle: nothing may fire for 10 s.
    let fired_idle = above.wait_for_line(|l| l.contains("collecting"), Duration::from_secs(10));
    assert!(!fired_idle, "the trap fired on the idle API:\n{}", above.stderr_so_far());
    assert!(above.child.try_wait().unwrap().is_none(), "the trap ended while the API was idle");

    let load_started = now();
    let load = Load::start(&api, "cpu", 12, 4);
    let fired = above.wait_for_line(|l| l.contains("collecting, 1 of 1"), Duration::from_secs(10));
    assert!(fired, "no collection within 10 s of the load starting:\n{}", above.stderr_so_far());
    // The API is busy now: a trap for low CPU must wait for the load to stop.
    let mut below = background(&format!("trap -pid {pid} -cpu-below 20 -for 2 -duration 2 -output {}", s(&below_out)));
    let above = above.finish(GRACE);
    assert!(above.status.success(), "trap -cpu-above failed ({}):\n{}", above.status, above.stderr);
    let made = collections(&above);
    assert_eq!(made.len(), 1, "expected one collection:\n{}", above.stderr);
    let (dir, meta) = &made[0];
    assert_complete(dir);
    let trigger = meta.trigger.as_ref().expect("no trigger in metadata.txt");
    let started = meta.start_time.expect("no start_time");
    let (to_trigger, to_start) = (ms_between(load_started, trigger.time), ms_between(load_started, started));
    eprintln!("load start → trigger {to_trigger} ms, → sampling {to_start} ms (cpu {:.0}%)", trigger.cpu_pct);
    assert!(
        to_start <= 3000 && (1000..=to_start).contains(&to_trigger),
        "expected sampling to start within 3 s (-for 2 + 1 s) of the load, got {to_start} ms (trigger {to_trigger} ms)"
    );
    assert_eq!(
        (trigger.condition.as_str(), trigger.threshold_pct, trigger.scope.as_str()),
        ("cpu-above", 50.0, "process")
    );
    assert!(trigger.cpu_pct > 50.0 && trigger.for_secs == 2.0, "{trigger:?}");
    let svg = std::fs::read_to_string(dir.join("flamegraph.svg")).unwrap();
    assert!(svg.contains("CpuHandler::Handle"), "the flame graph does not show the /cpu route's handler");
    let profile = Profile::read(dir);
    let handler = profile.share(|s| s.has_frame("CpuHandler::Handle"));
    assert!(handler > 0.5, "CpuHandler::Handle in {:.0}% of samples; {}", handler * 100.0, profile.describe());

    // No low-CPU collection while loaded.
    assert!(
        !below.wait_for_line(|l| l.contains("collecting"), Duration::from_secs(1)),
        "trap -cpu-below 20 fired on the loaded API"
    );
    let result = load.finish();
    let load_stopped = now();
    assert!(result.requests > 0, "{result:?}");
    let below = below.finish(GRACE);
    assert!(below.status.success(), "trap -cpu-below failed ({}):\n{}", below.status, below.stderr);
    let made = collections(&below);
    assert_eq!(made.len(), 1, "expected one collection:\n{}", below.stderr);
    // An idle process gives few or no CPU samples (and then no flame graph): the recording and its archive exist.
    for name in ["perf.data", "metadata.txt", "prof.tar.gz"] {
        assert!(made[0].0.join(name).is_file(), "no {name} in {}", made[0].0.display());
    }
    let trigger = made[0].1.trigger.as_ref().expect("no trigger in metadata.txt");
    let after_stop = ms_between(load_stopped, trigger.time);
    eprintln!("load stop → low-CPU trigger {after_stop} ms (cpu {:.0}%)", trigger.cpu_pct);
    assert!(trigger.cpu_pct < 20.0, "{trigger:?}");
    // The condition held for 2 s once CPU fell; wrk's last moments may overlap the start of that by a little.
    assert!(
        (1500..=4000).contains(&after_stop),
        "expected the low-CPU trigger 2 s after the load stopped, got {after_stop} ms:\n{}",
        below.stderr
    );
}

/// `-count 2 -cooldown 2`: two collections, the second only after the cooldown and a new `-for`; a SIGTERM during a
/// collection still leaves complete outputs and ends the trap with success; a SIGINT while cooling down ends it
/// with success; the target exiting after a collection too. Run side by side.
#[test]
fn collections_cooldown_and_clean_stops() {
    let _cpu = exclusive();
    let _favoured = favoured();
    let work = Scratch::new("trap-busy");
    let out = |name: &str| work.join(name);
    let busy: Vec<Busy> = (0..3).map(|_| Busy::start(&["--seconds", "40"])).collect();
    let short = Busy::start(&["--seconds", "5"]);
    let pid = |b: &Busy| b.info.pid.to_string();
    let (p0, p1, p2, p3) = (pid(&busy[0]), pid(&busy[1]), pid(&busy[2]), pid(&short));
    // Four busy loops and their traps share 2 CPUs (with whatever else runs): a low threshold, this test is about
    // counting, cooling down and stopping.
    let common = ["-cpu-above", "10"];
    let start = |pid: &str, extra: &[&str], dir: &Path| {
        let mut args = vec!["trap", "-pid", pid];
        args.extend(common);
        args.extend(extra);
        args.extend(["-output", s(dir)]);
        Background::start(&args)
    };
    let counted = start(&p0, &["-for", "1", "-duration", "1", "-count", "2", "-cooldown", "2"], &out("counted"));
    let mut terminated = start(&p1, &["-for", "0.5", "-duration", "10", "-count", "3"], &out("terminated"));
    let mut interrupted =
        start(&p2, &["-for", "0.5", "-duration", "1", "-count", "2", "-cooldown", "30"], &out("interrupted"));
    let exited = start(&p3, &["-for", "0.5", "-duration", "1", "-count", "5", "-cooldown", "0.5"], &out("exited"));

    let collecting = terminated.wait_for_line(|l| l.starts_with("Profiling PID"), Duration::from_secs(20));
    assert!(collecting, "never collected:\n{}", terminated.stderr_so_far());
    std::thread::sleep(Duration::from_secs(1));
    terminated.signal(libc::SIGTERM);
    let cooling = interrupted.wait_for_line(|l| l.contains("cooling down"), Duration::from_secs(30));
    assert!(cooling, "never cooled down:\n{}", interrupted.stderr_so_far());
    let signalled = Instant::now();
    interrupted.signal(libc::SIGINT);

    let interrupted = interrupted.finish(GRACE);
    let stop_time = signalled.elapsed();
    assert!(interrupted.status.success(), "SIGINT while cooling down: {}\n{}", interrupted.status, interrupted.stderr);
    assert!(stop_time < Duration::from_secs(2), "SIGINT while cooling down took {stop_time:?} to end the trap");
    assert!(interrupted.stderr.contains("stopped by SIGINT; 1 of 2 collections made"), "{}", interrupted.stderr);
    assert_eq!(collections(&interrupted).len(), 1);

    let terminated = terminated.finish(GRACE);
    assert!(terminated.status.success(), "SIGTERM while collecting: {}\n{}", terminated.status, terminated.stderr);
    let made = collections(&terminated);
    assert_eq!(made.len(), 1, "{}", terminated.stderr);
    assert_complete(&made[0].0);
    assert!(made[0].1.duration_secs.unwrap() < 5.0, "the collection was not cut short: {:?}", made[0].1.duration_secs);
    assert!(terminated.stderr.contains("(stopped by SIGTERM)"), "{}", terminated.stderr);
    assert!(terminated.stderr.contains("stopped by SIGTERM; 1 of 3 collections made"), "{}", terminated.stderr);

    let exited = exited.finish(GRACE);
    assert!(exited.status.success(), "target exit after collecting: {}\n{}", exited.status, exited.stderr);
    let n = collections(&exited).len();
    assert!(n >= 1, "{}", exited.stderr);
    assert!(exited.stderr.contains(&format!("PID {p3} (busy) exited; {n} of 5 collections made")), "{}", exited.stderr);

    let counted = counted.finish(GRACE);
    assert!(counted.status.success(), "-count 2: {}\n{}", counted.status, counted.stderr);
    let made = collections(&counted);
    assert_eq!(made.len(), 2, "{}", counted.stderr);
    let (first, second) = (&made[0].1, &made[1].1);
    for (i, (dir, meta)) in made.iter().enumerate() {
        assert_complete(dir);
        let t = meta.trigger.as_ref().unwrap();
        assert_eq!((t.collection, t.count), (i as u32 + 1, 2));
    }
    let first_end =
        first.start_time.unwrap() + chrono::Duration::milliseconds((first.duration_secs.unwrap() * 1e3) as i64);
    let second_trigger = second.trigger.as_ref().unwrap().time;
    let gap = ms_between(first_end, second_trigger);
    eprintln!("first collection's end → second trigger: {gap} ms (cooldown 2 s + for 1 s)");
    assert!(gap >= 3000, "the second collection started {gap} ms after the first ended: before cooldown + for");
    assert!(counted.stderr.contains("done: 2 of 2 collections made"), "{}", counted.stderr);
    drop(busy);
}

/// A cgroup made for the test, removed (with its processes moved out) when dropped.
struct TestCgroup {
    dir: PathBuf,
    parent_procs: PathBuf,
}

impl TestCgroup {
    /// A child of the root of the mounted hierarchy `version` (profcpu's own parser finds the mount).
    fn create(version: Version, name: &str) -> TestCgroup {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        let mount = parse_mounts(&mountinfo)
            .into_iter()
            .find(|m| m.version == version && m.root == "/")
            .unwrap_or_else(|| panic!("no {version:?} cgroup hierarchy mounted here (this machine kind has both)"));
        TestCgroup::at(&mount.mount_point, name)
    }

    /// A child of the hierarchy root mounted at `mount`.
    fn at(mount: &Path, name: &str) -> TestCgroup {
        let dir = mount.join(name);
        let _ = std::fs::remove_dir(&dir);
        std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("cannot create the cgroup {}: {e}", dir.display()));
        TestCgroup { dir, parent_procs: mount.join("cgroup.procs") }
    }

    fn add(&self, pid: u32) {
        std::fs::write(self.dir.join("cgroup.procs"), pid.to_string())
            .unwrap_or_else(|e| panic!("cannot move PID {pid} into {}: {e}", self.dir.display()));
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        let procs = std::fs::read_to_string(self.dir.join("cgroup.procs")).unwrap_or_default();
        for pid in procs.lines() {
            let _ = std::fs::write(&self.parent_procs, pid);
        }
        if let Err(e) = std::fs::remove_dir(&self.dir) {
            eprintln!("cannot remove the test cgroup {}: {e}", self.dir.display());
        }
    }
}

/// A sleeping process and a busy one in a cgroup of their own: `-scope cgroup` on the sleeper sees the busy one's
/// CPU (v2 and v1 cpuacct hierarchies, from the host's mounts and, for a profiler without them, through the
/// target's root), `-scope process` does not.
#[test]
fn cgroup_scope_sees_the_other_process() {
    let _cpu = exclusive();
    let _favoured = favoured();
    let work = Scratch::new("trap-cgroup");
    let me = std::process::id();
    let mut sleepers = Vec::new();
    let mut runs = Vec::new();
    let mut cgroups = Vec::new();
    let mut busies = Vec::new();
    for (version, view) in [(Version::V2, "host"), (Version::V1, "host"), (Version::V2, "target")] {
        let cgroup = TestCgroup::create(version, &format!("profcpu-trap-test-{me}-{version:?}-{view}"));
        let sleeper = Command::new("sleep").arg("60").spawn().unwrap();
        let busy = Busy::start(&["--seconds", "30"]);
        cgroup.add(sleeper.id());
        cgroup.add(busy.info.pid);
        let out = work.join(format!("{version:?}-{view}"));
        let trap = format!(
            "{PROFCPU} trap -pid {} -scope cgroup -cpu-above 10 -for 1 -duration 1 -timeout 20 -output {}",
            sleeper.id(),
            s(&out)
        );
        // A profiler without the host's cgroup mounts (a sidecar): an empty /sys/fs/cgroup of its own.
        let script = match view {
            "host" => format!("exec {trap}"),
            _ => format!("mount -t tmpfs none /sys/fs/cgroup && exec {trap}"),
        };
        let child = Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c", &script])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        runs.push((version, view, cgroup.dir.clone(), sleeper.id(), child));
        sleepers.push(sleeper);
        cgroups.push(cgroup);
        busies.push(busy);
    }
    // The sleeper alone never reaches 10%.
    let alone = Command::new(PROFCPU)
        .args(["trap", "-pid", &sleepers[0].id().to_string(), "-cpu-above", "10", "-for", "1", "-timeout", "3"])
        .args(["-output", s(&work.join("alone"))])
        .output()
        .unwrap();
    let alone_err = String::from_utf8_lossy(&alone.stderr);
    assert_eq!(alone.status.code(), Some(1), "{alone_err}");
    assert!(alone_err.contains("nothing was collected (CPU was 0–0%, never above 10%)"), "{alone_err}");

    for (version, view, dir, sleeper, child) in runs {
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{version:?} seen from the {view}: {}\n{stderr}", out.status);
        let folder = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let meta =
            Metadata::parse(&std::fs::read_to_string(Path::new(&folder).join("metadata.txt")).unwrap(), "m").unwrap();
        let trigger = meta.trigger.expect("no trigger in metadata.txt");
        let file = dir.join(version.file_name());
        let expected = match view {
            "host" => file,
            _ => PathBuf::from(format!("/proc/{sleeper}/root")).join(file.strip_prefix("/").unwrap()),
        };
        assert_eq!(Path::new(&trigger.source), expected, "{stderr}");
        assert_eq!(trigger.scope, "cgroup");
        assert!(trigger.cpu_pct > 10.0, "{trigger:?}");
        eprintln!("{version:?} from the {view}: fired at {:.0}% read from {}", trigger.cpu_pct, trigger.source);
    }
    for mut sleeper in sleepers {
        let _ = sleeper.kill();
        let _ = sleeper.wait();
    }
    drop(busies);
    drop(cgroups);
}

/// What `profcpu trap ARGS` did, run to the end.
struct Ran {
    code: Option<i32>,
    stderr: String,
    stdout: String,
    took: Duration,
}

fn trap(args: &[&str]) -> Ran {
    let started = Instant::now();
    let out = Command::new(PROFCPU).arg("trap").args(args).output().unwrap();
    Ran {
        code: out.status.code(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        took: started.elapsed(),
    }
}

impl Ran {
    /// Exactly one line on stderr, starting with `start` and containing `wanted`; the exit status `code`.
    fn one_line(&self, code: i32, start: &str, wanted: &str) {
        assert_eq!(self.code, Some(code), "{}", self.stderr);
        let lines: Vec<&str> = self.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "expected one line:\n{}", self.stderr);
        assert!(lines[0].starts_with(start) && lines[0].contains(wanted), "expected {wanted:?}, got {}", lines[0]);
        assert!(self.stdout.is_empty(), "{}", self.stdout);
    }

    /// The last stderr line is the only error, containing `wanted`; the exit status `code`; nothing collected.
    fn ends_with_error(&self, code: i32, wanted: &str) {
        assert_eq!(self.code, Some(code), "{}", self.stderr);
        let last = self.stderr.lines().last().unwrap_or_default();
        assert!(last.contains(wanted), "expected {wanted:?} last, got:\n{}", self.stderr);
        let errors = self.stderr.lines().filter(|l| l.starts_with("profcpu:")).count();
        assert_eq!(errors, 1, "{}", self.stderr);
        assert!(self.stdout.is_empty(), "{}", self.stdout);
    }
}

fn sleeper(seconds: &str) -> Child {
    let child = Command::new("sleep").arg(seconds).spawn().unwrap();
    // `spawn` returns once the exec has begun, but the kernel names the process `sleep` only after waking this one:
    // a trap started at once could still see the test thread's name (seen in CI on a loaded machine).
    let comm = format!("/proc/{}/comm", child.id());
    let deadline = Instant::now() + Duration::from_secs(5);
    while std::fs::read_to_string(&comm).unwrap_or_default() != "sleep\n" {
        assert!(Instant::now() < deadline, "{comm} never read `sleep`");
        std::thread::sleep(Duration::from_millis(1));
    }
    child
}

/// Bad input and ends with nothing collected: one clear line, non-zero exit, nothing written. Also the live line
/// on a terminal. Cheap processes only, run side by side.
#[test]
fn bad_input_and_empty_ends() {
    let work = Scratch::new("trap-bad");
    let out = work.join("out");
    let idle = sleeper("30");
    let pid = idle.id().to_string();
    let cpus = std::thread::available_parallelism().unwrap().get();
    let too_high = (100 * cpus + 50).to_string();
    let base = |extra: &[&str]| -> Vec<String> {
        ["-pid", &pid].iter().chain(extra).chain(&["-output", s(&out)]).map(|a| a.to_string()).collect()
    };
    let run = |extra: &[&str]| {
        let args = base(extra);
        trap(&args.iter().map(String::as_str).collect::<Vec<_>>())
    };
    std::thread::scope(|scope| {
        let exiting = scope.spawn(|| {
            let mut short = sleeper("1.5");
            let ran = trap(&["-pid", &short.id().to_string(), "-cpu-above", "25", "-output", s(&out)]);
            let _ = short.wait();
            ran
        });
        let timed_out = scope.spawn(|| run(&["-cpu-above", "25", "-timeout", "1.5"]));
        let unreadable = scope.spawn(|| {
            let script = format!(
                "mount -t tmpfs none /sys/fs/cgroup || exit 9; sleep 5 & exec {PROFCPU} trap -pid $! -scope cgroup \
                 -cpu-above 25 -output {}",
                s(&out)
            );
            let started = Instant::now();
            let out =
                Command::new("unshare").args(["--mount", "--propagation", "private", "sh", "-c", &script]).output();
            let out = out.unwrap();
            Ran {
                code: out.status.code(),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
                stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
                took: started.elapsed(),
            }
        });
        let terminal = scope.spawn(|| {
            let typescript = work.join("typescript");
            // A wide terminal, so the live line is not cut to 80 columns.
            let command =
                format!("stty cols 200; {PROFCPU} trap -pid {pid} -cpu-above 25 -timeout 1.5 -output {}", s(&out));
            let status = Command::new("script")
                .args(["-qfec", &command])
                .arg(&typescript)
                .stdout(Stdio::null())
                .status()
                .expect("cannot run script(1) (util-linux)");
            (status, std::fs::read_to_string(&typescript).unwrap_or_default())
        });
        let mut interrupted = Background::start(&["trap", "-pid", &pid, "-cpu-above", "25", "-output", s(&out)]);

        run(&["-cpu-above", "50", "-cpu-below", "20"]).one_line(2, "profcpu: error: ", "cannot be used with");
        run(&[]).one_line(2, "profcpu: error: ", "--cpu-above");
        run(&["-cpu-above", &too_high]).one_line(1, "profcpu: error: ", "can never hold");
        run(&["-cpu-above", "-5"]).one_line(2, "profcpu: error: ", "percentage");
        run(&["-cpu-below", "0"]).one_line(1, "profcpu: error: ", "-cpu-below 0 can never hold");
        run(&["-cpu-below", &too_high]).one_line(1, "profcpu: error: ", "always holds");
        run(&["-cpu-above", "50", "-scope", "pod"]).one_line(2, "profcpu: error: ", "process, cgroup");
        trap(&["-pid", "0", "-cpu-above", "50"]).one_line(2, "profcpu: error: ", "a PID is a positive number");
        trap(&["-pid", "4194304", "-cpu-above", "50", "-output", s(&out)]).one_line(
            1,
            "profcpu: error: ",
            "no process with PID 4194304",
        );
        // The kernel's refusal comes at the start, not when the condition is met hours later.
        let shared = SharedScratch::new("trap-nobody");
        let binary = shared.join("profcpu");
        std::fs::copy(PROFCPU, &binary).unwrap();
        set_mode(&binary, 0o755);
        let as_nobody = |output: &Path| {
            let started = Instant::now();
            let out = Command::new(AS_NOBODY[0])
                .args(&AS_NOBODY[1..])
                .arg(&binary)
                .args(["trap", "-pid", &pid, "-cpu-above", "50", "-output", s(output)])
                .output()
                .unwrap();
            Ran {
                code: out.status.code(),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
                stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
                took: started.elapsed(),
            }
        };
        // An output folder the user cannot create, then one it can.
        as_nobody(&shared.join("out")).one_line(1, "profcpu: error: cannot create the output folder ", "-output");
        let writable = shared.join("writable");
        std::fs::create_dir(&writable).unwrap();
        set_mode(&writable, 0o777);
        as_nobody(&writable).one_line(1, "profcpu: error: cannot sample PID ", "CAP_PERFMON");

        let exiting = exiting.join().unwrap();
        exiting.ends_with_error(1, "(sleep) exited while watching: nothing was collected (CPU was 0–0%");
        assert!(exiting.took < Duration::from_secs(5), "noticing the exit took {:?}", exiting.took);
        let timed_out = timed_out.join().unwrap();
        timed_out.ends_with_error(1, "-timeout 1.5 s passed while watching: nothing was collected");
        assert!(timed_out.took < Duration::from_secs(5), "-timeout 1.5 took {:?}", timed_out.took);
        unreadable.join().unwrap().one_line(1, "profcpu: error: cannot read the CPU use of PID ", "use -scope process");

        assert!(interrupted.wait_for_line(|l| l.contains("trap: armed"), Duration::from_secs(10)));
        interrupted.signal(libc::SIGINT);
        let interrupted = interrupted.finish(Duration::from_secs(5));
        assert_eq!(interrupted.status.code(), Some(130), "{}", interrupted.stderr);
        let last = interrupted.stderr.lines().last().unwrap();
        assert!(last.starts_with("profcpu: interrupted by SIGINT while watching PID"), "{}", interrupted.stderr);
        assert!(last.contains("nothing was collected"), "{last}");

        let (status, typescript) = terminal.join().unwrap();
        // Nothing was collected: the trap's own exit status, through script(1).
        assert_eq!(status.code(), Some(1), "{typescript}");
        let live = format!("PID {pid}  CPU 0%  armed: collects when above 25% for 3 s  ·  0 of 1 collected");
        assert!(typescript.contains(&live), "no live line on the terminal:\n{typescript}");
        assert!(!typescript.contains("trap: armed"), "state lines on a terminal:\n{typescript}");
    });
    // Nothing was collected anywhere.
    let left: Vec<_> = std::fs::read_dir(&out).map(|d| d.flatten().map(|e| e.path()).collect()).unwrap_or_default();
    assert!(left.is_empty(), "folders left in {}: {left:?}", out.display());
    let mut idle = idle;
    let _ = idle.kill();
    let _ = idle.wait();
}
