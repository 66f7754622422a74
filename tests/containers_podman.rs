//! profcpu against real containers: podman with runc, the sample web API on .NET 8 in an image built from local
//! files (`scripts/container-images.sh`), and the statically linked profcpu (`scripts/build-static.sh`), bind-mounted
//! into sidecars or `podman cp`'d into the app's container. The situations of docs/containers.md, run as written there:
//!
//! * from the host, by the container's host PID;
//! * from a sidecar container in the app's PID namespace (`--pid=container:APP`), with and without the privileges;
//! * from a sidecar in a pod-like shared PID namespace where a pause container is PID 1;
//! * from inside the app's own container, started `--read-only` with an output volume;
//! * the static binary alone in a root that holds nothing but busybox.
//!
//! No container shares /tmp with the host or another container: JIT names come from the app's own /tmp through
//! /proc. Every container is removed when its guard drops, also on failure.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;
use support::podman::{
    collect_args, exclusive, podman_ok, prepared, run_bounded, run_folder_line, App, Container, Load, RunFolder,
    WorkDir, BUSYBOX_IMAGE, OUTPUT_FILES, PROFCPU_IN_CONTAINER, PROFILER_PRIVILEGES, RUN_FLAGS,
};

/// Seconds each profile of the API samples (the docs' `-duration 10`).
const SECONDS: u32 = 10;
/// Load runs this long before sampling: the runtime compiles the route's methods at the first requests.
const WARM_UP: Duration = Duration::from_secs(2);
const CONNECTIONS: u32 = 4;
/// 10 s at 99 Hz of an API loaded on 2 CPUs gives ~600 samples; a third of that allows for a machine shared with
/// builds, far fewer means sampling went wrong.
const MIN_SAMPLES: usize = 200;

fn collect_time() -> Duration {
    Duration::from_secs(SECONDS as u64)
}

/// `-v HOST:CONTAINER[:ro]` as one argument.
fn volume(host: &Path, inside: &str, read_only: bool) -> String {
    format!("{}:{inside}{}", host.display(), if read_only { ":ro" } else { "" })
}

fn static_binary_mount() -> String {
    volume(&prepared().static_profcpu, PROFCPU_IN_CONTAINER, true)
}

/// The API started with `extra` flags, under load from the host for the whole test, warmed up.
fn loaded_app(extra: &[&str]) -> (App, Load) {
    let app = App::start(extra);
    let load = Load::start(&app, WARM_UP.as_secs() as u32 + SECONDS + 10, CONNECTIONS);
    std::thread::sleep(WARM_UP);
    (app, load)
}

/// profcpu's stderr lines that are not blank.
fn stderr_lines(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stderr).lines().filter(|l| !l.trim().is_empty()).map(str::to_string).collect()
}

/// A folder path printed inside a container, found under the host directory that is mounted at `mount_point`.
fn on_host(printed: &str, mount_point: &str, host_dir: &Path) -> PathBuf {
    let rel = printed
        .strip_prefix(mount_point)
        .unwrap_or_else(|| panic!("collect printed {printed:?}, which is not under {mount_point}"));
    host_dir.join(rel.trim_start_matches('/'))
}

#[test]
fn static_profcpu_runs_alone_in_a_busybox_root() {
    let _cpu = exclusive();
    let work = WorkDir::new("busybox");
    let out_dir = work.join("out");
    std::fs::create_dir_all(&out_dir).unwrap();
    let mut busy = Container::named("busybox");
    let (binary, output) = (static_binary_mount(), volume(&out_dir, "/out", false));
    let mut args = vec!["run", "-d", "--name", busy.name.as_str()];
    args.extend_from_slice(&RUN_FLAGS);
    args.extend_from_slice(&PROFILER_PRIVILEGES);
    args.extend_from_slice(&["-v", &binary, "-v", &output, BUSYBOX_IMAGE, "sh", "-c", "while :; do :; done"]);
    podman_ok(&args, Duration::from_secs(30));

    // Nothing but busybox: no C library, no loader, nowhere to find one.
    let bare =
        busy.exec(&["sh", "-c", "ls -d /lib* /usr/lib* /etc/ld.so* 2>/dev/null; ls /bin | wc -l"], collect_time());
    let listing = String::from_utf8_lossy(&bare.stdout);
    assert!(
        bare.status.success() && listing.lines().count() == 1,
        "expected a root without /lib*, /usr/lib* and ld.so files, found:\n{listing}"
    );

    let collect = busy.exec(&["profcpu", "collect", "-pid", "1", "-duration", "3", "-output", "/out"], collect_time());
    let dir = on_host(&run_folder_line(&collect), "/out", &out_dir);
    let log = String::from_utf8_lossy(&collect.stderr).into_owned();
    eprintln!("profcpu in the busybox root said:\n{log}");
    let run = RunFolder::read(&dir, &log);
    for name in OUTPUT_FILES {
        let len = std::fs::metadata(dir.join(name)).map(|m| m.len()).unwrap_or(0);
        assert!(len > 0, "expected a non-empty {name} in {}, found {len} bytes", dir.display());
    }
    // The loop keeps one CPU busy: ~297 samples at 99 Hz in 3 s on an idle machine, ~150 on one that builds.
    assert!(run.samples.len() >= 100, "expected >= 100 samples of the busy shell; {}", run.describe());
    assert!(run.sample_pids.iter().all(|&p| p == 1), "expected every sample from PID 1; {}", run.describe());
    let in_busybox = run.samples.iter().filter(|s| s.iter().any(|f| f.module == "/bin/busybox")).count();
    assert!(
        in_busybox as f64 >= 0.9 * run.samples.len() as f64,
        "expected /bin/busybox frames in >= 90% of samples, got {in_busybox}; {}",
        run.describe()
    );
    busy.remove();
}

#[test]
fn host_profiles_the_app_container_by_its_host_pid() {
    let _cpu = exclusive();
    let work = WorkDir::new("host");
    let (mut app, load) = loaded_app(&[]);
    let host_pid = app.host_pid();
    let status = std::fs::read_to_string(format!("/proc/{host_pid}/status")).unwrap();
    assert!(
        status.lines().any(|l| l.starts_with("NSpid:") && l.split_whitespace().last() == Some("1")),
        "expected the API to be PID 1 in its container"
    );

    let mut cmd = Command::new(&prepared().static_profcpu);
    cmd.args(collect_args(host_pid, SECONDS, work.join("out").to_str().unwrap()));
    let out = run_bounded(cmd, collect_time());
    let dir = PathBuf::from(run_folder_line(&out));
    drop(load);
    // Gone before the checks: what names the profile now is only what collect saved.
    app.container.remove();

    let run = RunFolder::read(&dir, &String::from_utf8_lossy(&out.stderr));
    run.assert_complete();
    run.assert_jit_named(MIN_SAMPLES);
    assert!(run.sample_pids.iter().all(|&p| p == host_pid), "expected every sample from host PID {host_pid}");
    let metadata = std::fs::read_to_string(dir.join("metadata.txt")).unwrap();
    assert!(metadata.lines().any(|l| l == "ns_pid: 1"), "expected ns_pid: 1 in metadata.txt:\n{metadata}");
    run.assert_postprocess_reproduces(&work);
}

#[test]
fn sidecar_in_the_app_pid_namespace_profiles_pid_1_and_is_copied_out() {
    let _cpu = exclusive();
    let work = WorkDir::new("sidecar");
    let (mut app, load) = loaded_app(&[]);
    let mut sidecar = Container::named("sidecar");
    let share_pid = format!("container:{}", app.container.name);
    let binary = static_binary_mount();
    let collect = collect_args(1, SECONDS, "/profilings");
    // No volume: the profile stays in the sidecar, and `podman cp` takes it out (the `kubectl cp` recipe).
    let mut args = vec!["run", "--name", sidecar.name.as_str(), "--pid", share_pid.as_str()];
    args.extend_from_slice(&RUN_FLAGS);
    args.extend_from_slice(&PROFILER_PRIVILEGES);
    args.extend_from_slice(&["-v", &binary, BUSYBOX_IMAGE, "profcpu"]);
    args.extend(collect.iter().map(String::as_str));
    let out = support::podman::podman(&args, collect_time());
    let printed = run_folder_line(&out);
    drop(load);

    let copied = work.join("copied");
    podman_ok(&["cp", &format!("{}:/profilings", sidecar.name), copied.to_str().unwrap()], Duration::from_secs(30));
    sidecar.remove();
    app.container.remove();

    let dir = on_host(&printed, "/profilings", &copied);
    let run = RunFolder::read(&dir, &String::from_utf8_lossy(&out.stderr));
    run.assert_complete();
    run.assert_jit_named(MIN_SAMPLES);
    assert!(run.sample_pids.iter().all(|&p| p == 1), "expected every sample from PID 1 (the sidecar's view)");
    run.assert_postprocess_reproduces(&work);
}

/// The Kubernetes pod with `shareProcessNamespace: true`: a pause container holds the PID namespace (PID 1), the app
/// and the profiler join it, and the profiler finds the app with `pidof`.
#[test]
fn pod_with_a_shared_pid_namespace_profiles_the_app_found_by_pidof() {
    let _cpu = exclusive();
    let work = WorkDir::new("pod");
    let out_dir = work.join("out");
    std::fs::create_dir_all(&out_dir).unwrap();
    let pause = Container::named("pause");
    let mut args = vec!["run", "-d", "--name", pause.name.as_str()];
    args.extend_from_slice(&RUN_FLAGS);
    args.extend_from_slice(&[BUSYBOX_IMAGE, "sleep", "infinity"]);
    podman_ok(&args, Duration::from_secs(30));
    let share_pid = format!("container:{}", pause.name);
    let (mut app, load) = loaded_app(&["--pid", &share_pid]);
    let status = std::fs::read_to_string(format!("/proc/{}/status", app.host_pid())).unwrap();
    let app_pid: u32 = status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:")?.split_whitespace().last()?.parse().ok())
        .expect("no NSpid in the app's /proc status");
    assert!(app_pid > 1, "expected the app not to be PID 1 in the pod's namespace (the pause container is)");

    let sidecar = Container::named("sidecar");
    let (binary, output) = (static_binary_mount(), volume(&out_dir, "/profilings", false));
    let script = format!("exec profcpu collect -pid \"$(pidof dotnet)\" -duration {SECONDS} -output /profilings");
    let mut args = vec!["run", "--rm", "--name", sidecar.name.as_str(), "--pid", share_pid.as_str()];
    args.extend_from_slice(&RUN_FLAGS);
    args.extend_from_slice(&PROFILER_PRIVILEGES);
    args.extend_from_slice(&["-v", &binary, "-v", &output, BUSYBOX_IMAGE, "sh", "-c", &script]);
    let out = support::podman::podman(&args, collect_time());
    let dir = on_host(&run_folder_line(&out), "/profilings", &out_dir);
    drop(load);
    app.container.remove();

    let run = RunFolder::read(&dir, &String::from_utf8_lossy(&out.stderr));
    run.assert_complete();
    run.assert_jit_named(MIN_SAMPLES);
    assert!(
        run.sample_pids.iter().all(|&p| p == app_pid),
        "expected every sample from PID {app_pid} (the app in the pod's namespace)"
    );
    run.assert_postprocess_reproduces(&work);
}

/// A sidecar run with `extra` flags that profiles PID 1 of `app` for `seconds`.
fn sidecar_collect(app: &App, extra: &[&str], seconds: u32) -> Output {
    let sidecar = Container::named("sidecar");
    let share_pid = format!("container:{}", app.container.name);
    let binary = static_binary_mount();
    let collect = collect_args(1, seconds, "/profilings");
    let mut args = vec!["run", "--rm", "--name", sidecar.name.as_str(), "--pid", share_pid.as_str()];
    args.extend_from_slice(&RUN_FLAGS);
    args.extend_from_slice(extra);
    args.extend_from_slice(&["-v", &binary, BUSYBOX_IMAGE, "profcpu"]);
    args.extend(collect.iter().map(String::as_str));
    support::podman::podman(&args, Duration::from_secs(seconds as u64))
}

/// The refusal must be profcpu's one line, and it must name what is missing and the flags that fix it.
fn assert_refused(out: &Output, situation: &str, must_name: &[&str]) -> String {
    let lines = stderr_lines(out);
    assert!(
        !out.status.success() && out.stdout.is_empty(),
        "expected {situation} to be refused without output; it exited {} and printed:\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        lines.join("\n")
    );
    assert!(
        lines.len() == 1 && lines[0].starts_with("profcpu: error: cannot sample PID 1: "),
        "expected one `profcpu: error: cannot sample PID 1: ...` line for {situation}, got:\n{}",
        lines.join("\n")
    );
    for needle in must_name {
        assert!(lines[0].contains(needle), "expected the refusal for {situation} to name {needle:?}:\n{}", lines[0]);
    }
    eprintln!("{situation}:\n  {}", lines[0]);
    lines[0].clone()
}

#[test]
fn sidecars_without_the_privileges_are_refused_in_one_line() {
    let _cpu = exclusive();
    let app = App::start(&[]);

    // Podman's defaults: no CAP_PERFMON, and a seccomp profile that returns EPERM for perf_event_open without
    // CAP_SYS_ADMIN. Both are missing, and the line says so, with both flags.
    let out = sidecar_collect(&app, &[], 2);
    assert_refused(
        &out,
        "a sidecar with podman's default capabilities and seccomp profile",
        &[
            "seccomp",
            "EPERM",
            "CAP_PERFMON",
            "`--cap-add PERFMON --cap-add SYS_PTRACE --security-opt seccomp=unconfined`",
        ],
    );

    // The capabilities alone do not get past podman's seccomp profile.
    let out = sidecar_collect(&app, &["--cap-add", "PERFMON", "--cap-add", "SYS_PTRACE"], 2);
    assert_refused(
        &out,
        "a sidecar with CAP_PERFMON and CAP_SYS_PTRACE under podman's default seccomp profile",
        &["seccomp", "EPERM", "although profcpu has CAP_PERFMON", "`--security-opt seccomp=unconfined`"],
    );

    // What kubelet puts in every container's environment makes profcpu give the Kubernetes fix.
    let out = sidecar_collect(&app, &["-e", "KUBERNETES_SERVICE_HOST=10.96.0.1"], 2);
    assert_refused(
        &out,
        "the same unprivileged sidecar, marked as a Kubernetes pod",
        &[
            "seccomp",
            "securityContext.capabilities.add: [\"PERFMON\",\"SYS_PTRACE\"]",
            "seccompProfile.type: Unconfined",
        ],
    );

    // Without the seccomp filter, the kernel's own rule decides: perf_event_paranoid <= 2 lets a process of the same
    // user be sampled in user space only (kernel frames hidden, with a notice); 3 (Debian's default) refuses it.
    let out = sidecar_collect(&app, &["--security-opt", "seccomp=unconfined"], 2);
    let paranoid: i32 =
        std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid").unwrap().trim().parse().unwrap();
    let log = stderr_lines(&out).join("\n");
    if paranoid <= 1 {
        assert!(out.status.success(), "expected collect to succeed at perf_event_paranoid {paranoid}:\n{log}");
    } else if paranoid == 2 {
        assert!(
            out.status.success() && log.contains("kernel frames hidden: kernel sampling was refused (EACCES"),
            "expected user-space sampling with a `kernel frames hidden` notice at perf_event_paranoid 2:\n{log}"
        );
        eprintln!("a sidecar with seccomp=unconfined only:\n  {}", log.lines().next().unwrap_or_default());
    } else {
        assert_refused(&out, "a sidecar with seccomp=unconfined only", &["perf_event_paranoid", "CAP_PERFMON"]);
    }
}

/// `podman cp` (like `docker cp` and `kubectl cp`) puts the static binary into the running app container's /tmp, the
/// one writable place of a read-only root; the profile goes to an output volume.
#[test]
fn inside_the_read_only_app_container_profiles_pid_1_into_a_volume() {
    let _cpu = exclusive();
    let work = WorkDir::new("inside");
    let out_dir = work.join("out");
    std::fs::create_dir_all(&out_dir).unwrap();
    let output = volume(&out_dir, "/out", false);
    let mut extra = vec!["--read-only", "-v", &output];
    extra.extend_from_slice(&PROFILER_PRIVILEGES);
    let (mut app, load) = loaded_app(&extra);

    let probe = app.container.exec(&["touch", "/written-at-run-time"], collect_time());
    assert!(!probe.status.success(), "expected the app container's root file system to be read-only");
    let target = format!("{}:/tmp/profcpu", app.container.name);
    podman_ok(&["cp", prepared().static_profcpu.to_str().unwrap(), &target], Duration::from_secs(30));

    let collect = collect_args(1, SECONDS, "/out");
    let mut args = vec!["/tmp/profcpu"];
    args.extend(collect.iter().map(String::as_str));
    let out = app.container.exec(&args, collect_time());
    let dir = on_host(&run_folder_line(&out), "/out", &out_dir);
    drop(load);
    app.container.remove();

    let run = RunFolder::read(&dir, &String::from_utf8_lossy(&out.stderr));
    run.assert_complete();
    run.assert_jit_named(MIN_SAMPLES);
    assert!(run.sample_pids.iter().all(|&p| p == 1), "expected every sample from PID 1 (the container's view)");
    run.assert_postprocess_reproduces(&work);
}
