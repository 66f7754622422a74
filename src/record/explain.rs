//! Turns a refused `perf_event_open` into one line that says why and what to change, for the place profcpu runs in
//! (host, Docker, Kubernetes).

use std::io;

/// What the refused event was for, so the message can name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenTarget {
    Pid(u32),
    AllProcesses,
}

const CAP_SYS_PTRACE: u32 = 19;
const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Environment {
    Host,
    /// Docker, podman, containerd, LXC, or another sandbox with its own namespaces.
    Docker,
    Kubernetes,
}

/// Where profcpu runs (see [`super::environment`] for how that is judged).
pub fn environment() -> Environment {
    super::environment::detect()
}

fn max_sample_rate() -> Option<u64> {
    crate::procfs::read_setting("/proc/sys/kernel/perf_event_max_sample_rate").ok()?.parse().ok()
}

pub fn perf_event_paranoid() -> Option<i32> {
    crate::procfs::read_setting("/proc/sys/kernel/perf_event_paranoid").ok()?.parse().ok()
}

fn status_field(name: &str) -> Option<String> {
    let status = crate::procfs::read_setting("/proc/self/status").ok()?;
    status.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(':').map(|v| v.trim().to_string()))
}

fn has_capability(bit: u32) -> bool {
    status_field("CapEff").and_then(|v| u64::from_str_radix(&v, 16).ok()).is_some_and(|caps| caps & (1 << bit) != 0)
}

/// CAP_PERFMON, or CAP_SYS_ADMIN which implies it on kernels before 5.8.
pub fn has_perf_capability() -> bool {
    has_capability(CAP_PERFMON) || has_capability(CAP_SYS_ADMIN)
}

fn seccomp_filtered() -> bool {
    status_field("Seccomp").is_some_and(|v| v == "2")
}

pub fn errno_name(errno: i32) -> &'static str {
    match errno {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::ESRCH => "ESRCH",
        libc::EACCES => "EACCES",
        libc::EINVAL => "EINVAL",
        libc::EMFILE => "EMFILE",
        libc::ENFILE => "ENFILE",
        libc::ENOSYS => "ENOSYS",
        libc::ENODEV => "ENODEV",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::E2BIG => "E2BIG",
        libc::EBUSY => "EBUSY",
        libc::ENOMEM => "ENOMEM",
        _ => "error",
    }
}

fn capability_fix(env: Environment) -> String {
    match env {
        Environment::Host => {
            let exe = std::env::current_exe().map(|p| p.display().to_string()).unwrap_or_else(|_| "profcpu".into());
            format!("run it as root, or grant the capabilities: `sudo setcap cap_perfmon,cap_sys_ptrace+ep {exe}`")
        }
        Environment::Docker => {
            "start the container with `--cap-add PERFMON --cap-add SYS_PTRACE` (or `--privileged`)".into()
        }
        Environment::Kubernetes => {
            "add `securityContext.capabilities.add: [\"PERFMON\",\"SYS_PTRACE\"]` to the container spec".into()
        }
    }
}

fn seccomp_fix(env: Environment) -> &'static str {
    match env {
        Environment::Kubernetes => "set `securityContext.seccompProfile.type: Unconfined` on the container",
        Environment::Docker => "start the container with `--security-opt seccomp=unconfined`",
        Environment::Host => {
            "run profcpu without that seccomp filter (e.g. outside a service whose `SystemCallFilter=` or sandbox \
             blocks perf_event_open)"
        }
    }
}

/// Both fixes at once, for a sandbox that lacks the capability and filters the system call.
fn capability_and_seccomp_fix(env: Environment) -> String {
    match env {
        Environment::Docker => "start the container with `--cap-add PERFMON --cap-add SYS_PTRACE --security-opt \
                                seccomp=unconfined` (or `--privileged`)"
            .into(),
        Environment::Kubernetes => "add `securityContext.capabilities.add: [\"PERFMON\",\"SYS_PTRACE\"]` and \
                                    `securityContext.seccompProfile.type: Unconfined` to the container spec"
            .into(),
        Environment::Host => format!("{}; and {}", capability_fix(env), seccomp_fix(env)),
    }
}

/// Why `/proc/kallsyms` showed zero addresses, and the fix. The rule (kernel/ksyms_common.c,
/// `kallsyms_show_value`, applied to the opener's credentials): kptr_restrict 0 shows them when
/// perf_event_paranoid <= 1 or to CAP_SYSLOG, 1 only to CAP_SYSLOG, 2 to nobody.
pub fn kernel_symbols_hidden() -> String {
    const CAP_SYSLOG: u32 = 34;
    let restrict: Option<i32> =
        crate::procfs::read_setting("/proc/sys/kernel/kptr_restrict").ok().and_then(|v| v.parse().ok());
    let syslog = has_capability(CAP_SYSLOG);
    let paranoid = perf_event_paranoid().map_or_else(|| "unknown".to_string(), |p| p.to_string());
    let grant = match environment() {
        Environment::Host => "run as root",
        Environment::Docker => "add `--cap-add SYSLOG` to the container",
        Environment::Kubernetes => "add \"SYSLOG\" to `securityContext.capabilities.add`",
    };
    let (why, fix) = match restrict {
        Some(0) if !syslog => (
            format!("perf_event_paranoid is {paranoid} and profcpu lacks CAP_SYSLOG"),
            format!("{grant}, or on the host `sysctl kernel.perf_event_paranoid=1`"),
        ),
        Some(1) if !syslog => ("kptr_restrict is 1 and profcpu lacks CAP_SYSLOG".to_string(), grant.to_string()),
        Some(r) if r >= 2 => (format!("kptr_restrict is {r}"), "on the host `sysctl kernel.kptr_restrict=0`".into()),
        // CAP_SYSLOG held but not honoured (it only counts in the initial user namespace), or an unreadable setting.
        _ => (
            format!("kptr_restrict is {}", restrict.map_or_else(|| "unreadable".to_string(), |r| r.to_string())),
            "run profcpu as root on the host".into(),
        ),
    };
    format!("/proc/kallsyms hides kernel addresses ({why}): kernel frames will have no names; {fix}")
}

/// The highest `perf_event_paranoid` value that still allows the request without CAP_PERFMON.
fn paranoid_limit(target: &OpenTarget) -> i32 {
    match target {
        // CPU-wide events need paranoid <= 0.
        OpenTarget::AllProcesses => 0,
        // Per-task user-space events are allowed up to 2; Debian's extra level 3 forbids them all.
        OpenTarget::Pid(_) => 2,
    }
}

/// The notice printed when kernel sampling was refused and profcpu fell back to user space.
pub fn kernel_frames_hidden(errno: i32) -> String {
    let paranoid = perf_event_paranoid().map_or_else(|| "unknown".to_string(), |p| p.to_string());
    format!(
        "kernel frames hidden: kernel sampling was refused ({}; perf_event_paranoid is {paranoid}, no CAP_PERFMON), \
         so only user space is sampled; for kernel frames {}, or on the host `sysctl kernel.perf_event_paranoid=1`",
        errno_name(errno),
        capability_fix(environment())
    )
}

/// One line for a `perf_event_open` that failed for a reason profcpu cannot work around.
pub fn open_refused(err: &io::Error, target: &OpenTarget, event: &str, frequency: u64) -> anyhow::Error {
    let errno = err.raw_os_error().unwrap_or(0);
    let name = errno_name(errno);
    let what = match target {
        OpenTarget::Pid(pid) => format!("PID {pid}"),
        OpenTarget::AllProcesses => "all processes (-all)".to_string(),
    };
    let env = environment();
    let line = match errno {
        libc::ESRCH => match target {
            OpenTarget::Pid(pid) => {
                format!("no process with PID {pid}: it exited or never existed (list processes with `ps -e`)")
            }
            OpenTarget::AllProcesses => format!("perf_event_open failed with {name} for {what}"),
        },
        libc::EACCES | libc::EPERM => {
            let paranoid = perf_event_paranoid();
            let privileged = has_perf_capability();
            if !privileged && errno == libc::EPERM && seccomp_filtered() {
                // The kernel answers a missing capability with EACCES; EPERM under a seccomp filter is the filter
                // (Podman's default profile, Docker's before 24 and containerd's before 1.7 refuse perf_event_open
                // without CAP_SYS_ADMIN), so adding the capability alone would meet this refusal again.
                format!(
                    "cannot sample {what}: a seccomp filter blocks perf_event_open ({name}) and profcpu lacks \
                     CAP_PERFMON{}; {}",
                    if has_capability(CAP_SYS_PTRACE) { "" } else { " and CAP_SYS_PTRACE" },
                    capability_and_seccomp_fix(env)
                )
            } else if !privileged && paranoid.is_some_and(|p| p > paranoid_limit(target)) {
                format!(
                    "cannot sample {what}: kernel.perf_event_paranoid is {} and profcpu lacks CAP_PERFMON ({name}); \
                     allow it on the host with `sysctl kernel.perf_event_paranoid=-1`, or {}",
                    paranoid.unwrap_or_default(),
                    capability_fix(env)
                )
            } else if !privileged {
                format!(
                    "cannot sample {what}: profcpu lacks CAP_PERFMON/CAP_SYS_ADMIN{} ({name}); {}",
                    if has_capability(CAP_SYS_PTRACE) { "" } else { " and CAP_SYS_PTRACE" },
                    capability_fix(env)
                )
            } else if errno == libc::EPERM || seccomp_filtered() {
                format!(
                    "cannot sample {what}: perf_event_open is blocked ({name}) although profcpu has CAP_PERFMON, \
                     most likely by a seccomp filter; {}",
                    seccomp_fix(env)
                )
            } else {
                format!(
                    "cannot sample {what}: access denied ({name}) although profcpu has CAP_PERFMON; it also needs \
                     CAP_SYS_PTRACE to sample another user's process: {}",
                    capability_fix(env)
                )
            }
        }
        libc::ENOSYS if seccomp_filtered() || env != Environment::Host => format!(
            "cannot sample {what}: perf_event_open is blocked by a seccomp filter ({name}); {}",
            seccomp_fix(env)
        ),
        libc::ENOSYS => "this kernel has no perf events support (CONFIG_PERF_EVENTS is off; ENOSYS)".to_string(),
        libc::ENOENT | libc::EOPNOTSUPP | libc::ENODEV => format!(
            "the {event} event is not supported on this machine ({name}: no hardware PMU); use `-event cpu-clock`"
        ),
        libc::EMFILE | libc::ENFILE => format!(
            "too many open files ({name}): profcpu needs one descriptor per thread and CPU; raise the limit with \
             `ulimit -n 65536`"
        ),
        libc::EINVAL if max_sample_rate().is_some_and(|max| frequency > max) => format!(
            "-freq {frequency} is above the kernel's limit kernel.perf_event_max_sample_rate ({}); use a lower -freq",
            max_sample_rate().unwrap_or_default()
        ),
        libc::EINVAL | libc::E2BIG => format!(
            "the kernel rejected the event settings ({name}); profcpu needs Linux 4.5 or newer (mmap2, comm_exec, \
             use_clockid)"
        ),
        _ => format!("perf_event_open failed for {what}: {err}"),
    };
    anyhow::anyhow!(line)
}

/// One line for a refused tracepoint event. Tracepoints with their raw fields need CAP_PERFMON (or CAP_SYS_ADMIN)
/// or `perf_event_paranoid` -1, whatever the target (`perf_allow_tracepoint` in kernel/events/core.c); other
/// refusals read as for any event.
pub fn tracepoint_refused(err: &io::Error, target: &OpenTarget, event: &str) -> anyhow::Error {
    let errno = err.raw_os_error().unwrap_or(0);
    let paranoid = perf_event_paranoid();
    let needs_capability = matches!(errno, libc::EACCES | libc::EPERM)
        && !has_perf_capability()
        && !seccomp_filtered()
        && paranoid.is_some_and(|p| p > -1);
    if !needs_capability {
        return open_refused(err, target, event, 0);
    }
    let what = match target {
        OpenTarget::Pid(pid) => format!("PID {pid}"),
        OpenTarget::AllProcesses => "all processes (-all)".to_string(),
    };
    anyhow::anyhow!(
        "cannot record the scheduler tracepoint {event} for {what}: tracepoints need CAP_PERFMON or \
         kernel.perf_event_paranoid -1 (it is {}; {}); allow it on the host with `sysctl \
         kernel.perf_event_paranoid=-1`, or {}",
        paranoid.unwrap_or_default(),
        errno_name(errno),
        capability_fix(environment())
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_explanation_is_one_line_naming_the_target() {
        for errno in
            [libc::ESRCH, libc::EACCES, libc::EPERM, libc::ENOSYS, libc::ENOENT, libc::EMFILE, libc::EINVAL, libc::EIO]
        {
            let msg =
                open_refused(&io::Error::from_raw_os_error(errno), &OpenTarget::Pid(4242), "cycles", 99).to_string();
            assert_eq!(msg.lines().count(), 1, "{msg}");
            assert!(!msg.is_empty());
        }
        let msg = open_refused(&io::Error::from_raw_os_error(libc::ESRCH), &OpenTarget::Pid(4242), "x", 99).to_string();
        assert!(msg.starts_with("no process with PID 4242"), "{msg}");
        let msg = open_refused(&io::Error::from_raw_os_error(libc::EMFILE), &OpenTarget::Pid(1), "x", 99).to_string();
        assert!(msg.contains("ulimit -n"), "{msg}");
        let msg =
            open_refused(&io::Error::from_raw_os_error(libc::EINVAL), &OpenTarget::Pid(1), "x", u64::MAX).to_string();
        assert!(msg.starts_with("-freq"), "{msg}");
    }

    #[test]
    fn hidden_kernel_symbols_are_explained_in_one_line() {
        let msg = kernel_symbols_hidden();
        assert_eq!(msg.lines().count(), 1, "{msg}");
        assert!(msg.starts_with("/proc/kallsyms hides kernel addresses ("), "{msg}");
    }
}
