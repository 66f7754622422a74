//! Refusals and fallbacks with real permissions: profcpu runs as user `nobody` without capabilities (through
//! util-linux `setpriv`), against the kernel's real `perf_event_paranoid` setting. Needs root to switch users.

mod support;

use profcpu::perf_data::Record;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Command, Output};
use support::busy::*;
use support::perf::*;
use support::profcpu::*;
use support::recording::*;
use support::scratch::run_dir_under;
use support::PROFCPU;

const NOBODY: &str = "65534";

fn paranoid() -> i32 {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid").unwrap().trim().parse().unwrap()
}

/// A folder every user can reach, with copies of profcpu and the busy workload: the build folder may lie under a
/// home directory that `nobody` cannot enter (e.g. /root/…, mode 0700).
fn nobody_dir() -> &'static std::path::Path {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let dir = run_dir_under(&std::env::temp_dir(), "profcpu-perm");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        for (from, name) in [(PathBuf::from(PROFCPU), "profcpu"), (busy_binary().to_path_buf(), "busy")] {
            std::fs::copy(&from, dir.join(name)).unwrap_or_else(|e| panic!("copying {}: {e}", from.display()));
            std::fs::set_permissions(dir.join(name), std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        dir
    })
}

/// The busy workload, runnable by nobody.
fn busy_for_nobody() -> String {
    nobody_dir().join("busy").to_str().unwrap().to_string()
}

/// Runs `profcpu collect ARGS` as nobody with every capability dropped, under a shell prefix (e.g. `ulimit -l 64;`).
fn collect_as_nobody(shell_prefix: &str, args: &[&str]) -> (Output, PathBuf) {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, 0, "these tests switch to user nobody and must run as root");
    let out = nobody_dir().join(format!("out-{}", std::time::UNIX_EPOCH.elapsed().unwrap().as_nanos()));
    std::fs::create_dir(&out).unwrap();
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o777)).unwrap();
    let profcpu = nobody_dir().join("profcpu");
    let mut cmd = format!("{shell_prefix} exec {} collect -output {}", profcpu.display(), out.display());
    for a in args {
        cmd.push(' ');
        cmd.push_str(a);
    }
    let output = Command::new("setpriv")
        .args(["--reuid", NOBODY, "--regid", NOBODY, "--clear-groups", "--inh-caps=-all", "--bounding-set=-all"])
        .args(["sh", "-c", &cmd])
        .output()
        .expect("setpriv (util-linux)");
    (output, out)
}

fn stderr_of(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The error line of a refused run: the only line on stderr.
fn refusal(o: &Output) -> String {
    let err = stderr_of(o);
    assert!(!o.status.success(), "expected a refusal, got success:\n{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "a refusal must be one line:\n{err}");
    assert!(lines[0].starts_with("profcpu: error: cannot sample "), "{}", lines[0]);
    lines[0].to_string()
}

#[test]
fn unprivileged_own_command_falls_back_to_user_space_with_a_notice() {
    let busy = busy_for_nobody();
    let (o, _) = collect_as_nobody("", &["-duration", "1", "--", &busy, "--seconds", "3"]);
    let c = finish_collect(o);
    let rec = Recording::read(&c.perf_data());
    assert!(rec.samples().count() >= 20, "{}", c.stderr);
    // Debian's perf tells what the attr asked for.
    let evlist = perf(&["evlist", "-v", "-f", "-i", c.perf_data().to_str().unwrap()]);
    let excludes_kernel_callchain = String::from_utf8_lossy(&evlist.stdout).contains("exclude_callchain_kernel: 1");
    if paranoid() >= 2 {
        assert!(
            c.stderr.contains("kernel frames hidden")
                && c.stderr.contains(&format!("perf_event_paranoid is {}", paranoid())),
            "{}",
            c.stderr
        );
        assert!(excludes_kernel_callchain);
        let kernel_addresses = 0xffff_8000_0000_0000..profcpu::perf_data::abi::CONTEXT_MAX;
        assert!(rec.samples().all(|s| !s.callchain.iter().any(|a| kernel_addresses.contains(a))), "kernel frames");
    } else {
        assert!(!c.stderr.contains("kernel frames hidden"), "{}", c.stderr);
        assert!(!excludes_kernel_callchain);
    }
}

#[test]
fn unprivileged_all_is_refused_naming_perf_event_paranoid() {
    let (o, out) = collect_as_nobody("", &["-all", "-duration", "1"]);
    if paranoid() <= 0 {
        finish_collect(o);
        return;
    }
    let line = refusal(&o);
    assert!(line.contains(&format!("perf_event_paranoid is {}", paranoid())), "{line}");
    assert!(line.contains("sysctl kernel.perf_event_paranoid=-1"), "{line}");
    assert!(std::fs::read_dir(&out).unwrap().next().is_none(), "a refused run left files behind");
}

#[test]
fn unprivileged_pid_of_another_user_is_refused_naming_the_capabilities() {
    // A process of root's: sampling it needs CAP_PERFMON and ptrace access, which nobody has.
    let busy = Busy::start(&["--seconds", "20"]);
    let (o, _) = collect_as_nobody("", &["-pid", &busy.info.pid.to_string(), "-duration", "1"]);
    let line = refusal(&o);
    assert!(line.contains(&format!("cannot sample PID {}", busy.info.pid)), "{line}");
    if paranoid() <= 2 {
        assert!(line.contains("CAP_PERFMON") && line.contains("SYS_PTRACE"), "{line}");
    } else {
        assert!(line.contains("perf_event_paranoid"), "{line}");
    }
}

#[test]
fn ring_buffers_shrink_when_locked_memory_runs_out() {
    let busy = busy_for_nobody();
    // 1024 pages (4 MiB) per CPU is far more than perf_event_mlock_kb plus a 64 KiB RLIMIT_MEMLOCK allow.
    let (o, _) =
        collect_as_nobody("ulimit -l 64;", &["-duration", "1", "-mmap-pages", "1024", "--", &busy, "--seconds", "3"]);
    let c = finish_collect(o);
    let notice = c
        .stderr
        .lines()
        .find(|l| l.contains("ring buffers reduced from 1024 to "))
        .unwrap_or_else(|| panic!("{}", c.stderr));
    assert!(notice.contains("EPERM") || notice.contains("ENOMEM"), "{notice}");
    let rec = Recording::read(&c.perf_data());
    assert!(rec.samples().count() >= 20);
    assert!(rec.records.iter().any(|r| matches!(r, Record::Comm(c) if c.is_exec())));
}

/// A refusal's advice fits where profcpu runs. This machine kind is a VM whose root file system was built from a
/// Docker image, so it carries a `/.dockerenv` although profcpu runs on the host there: the advice must be the
/// host's (`setcap`), not `--cap-add`. The same refusal in a PID namespace of its own — what every container
/// runtime makes — gives the container's.
#[test]
fn refusals_give_host_advice_on_a_host_and_container_advice_in_a_container() {
    let own_pid_ns = std::fs::read_link("/proc/self/ns/pid").unwrap();
    let root_is_overlay = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some("/") && l.contains(" - overlay "));
    if own_pid_ns.to_str() == Some("pid:[4026531836]") && !root_is_overlay {
        let busy = Busy::start(&["--seconds", "20"]);
        let (o, _) = collect_as_nobody("", &["-pid", &busy.info.pid.to_string(), "-duration", "1"]);
        let line = refusal(&o);
        assert!(line.contains("sudo setcap") && !line.contains("--cap-add"), "{line}");
    }

    // A root-owned busy and profcpu as nobody, both in a new PID namespace with its own /proc.
    let out = nobody_dir().join(format!("out-ns-{}", std::process::id()));
    std::fs::create_dir_all(&out).unwrap();
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o777)).unwrap();
    let script = format!(
        "{busy} --seconds 20 >/dev/null & sleep 0.5; setpriv --reuid {NOBODY} --regid {NOBODY} --clear-groups \
         --inh-caps=-all --bounding-set=-all {profcpu} collect -pid $! -duration 1 -output {out}; status=$?; \
         kill $!; exit $status",
        busy = busy_for_nobody(),
        profcpu = nobody_dir().join("profcpu").display(),
        out = out.display()
    );
    let o = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "sh", "-c", &script])
        .output()
        .expect("unshare (util-linux)");
    let line = refusal(&o);
    assert!(line.contains("--cap-add PERFMON") && !line.contains("setcap"), "{line}");
}
