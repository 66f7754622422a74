//! Where profcpu runs — on a host, in a container, in a Kubernetes pod — so that a refusal gives advice that
//! applies there (`sudo setcap` on a host, `--cap-add` for a container, a `securityContext` in Kubernetes).
//!
//! No single mark is reliable: Docker leaves `/.dockerenv` in every image it builds, so a VM or machine whose root
//! file system was made from a Docker image has one too (this project's test machines do), while a container
//! started with `--pid=host` shares the host's process list. So the judgement weighs what a container runtime
//! cannot avoid changing:
//! - the namespaces: the kernel gives its initial PID, user and cgroup namespaces fixed inode numbers
//!   (`include/linux/proc_ns.h`: `PROC_PID_INIT_INO` 0xEFFFFFFC, `PROC_USER_INIT_INO` 0xEFFFFFFD,
//!   `PROC_CGROUP_INIT_INO` 0xEFFFFFFB); a process in any other one is in a container or sandbox;
//! - the files runtimes put there per container (podman's `/run/.containerenv`), the `container` variable
//!   (systemd-nspawn, podman, LXC), the cgroup path (`docker`, `containerd`, `libpod`, `kubepods`, `lxc`), and
//!   `/.dockerenv` only together with an overlay root file system (the `--pid=host` container);
//! - for Kubernetes, the service variables and the service-account secret every pod gets.

use super::explain::Environment;
use std::path::Path;

/// Inode numbers of the kernel's initial namespaces, the same on every Linux (`include/linux/proc_ns.h`).
const PROC_PID_INIT_INO: u64 = 0xEFFF_FFFC;
const PROC_USER_INIT_INO: u64 = 0xEFFF_FFFD;

/// What profcpu can see of its surroundings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Evidence {
    /// The PID namespace is the kernel's initial one (`None`: unknown).
    pub initial_pid_namespace: Option<bool>,
    pub initial_user_namespace: Option<bool>,
    /// `/proc/self/cgroup`.
    pub cgroup: String,
    pub dockerenv: bool,
    pub containerenv: bool,
    /// The file system type mounted at `/` (from `/proc/self/mountinfo`).
    pub root_fs_type: String,
    /// The `container` environment variable is set.
    pub container_variable: bool,
    pub kubernetes_marks: bool,
}

impl Evidence {
    /// Reads the evidence of the running process.
    pub fn gather() -> Evidence {
        let in_initial = |ns: &str, ino: u64| {
            let link = std::fs::read_link(format!("/proc/self/ns/{ns}")).ok()?;
            Some(link.to_str()? == format!("{ns}:[{ino}]"))
        };
        Evidence {
            initial_pid_namespace: in_initial("pid", PROC_PID_INIT_INO),
            initial_user_namespace: in_initial("user", PROC_USER_INIT_INO),
            cgroup: crate::procfs::own("cgroup").unwrap_or_default(),
            dockerenv: Path::new("/.dockerenv").exists(),
            containerenv: Path::new("/run/.containerenv").exists(),
            root_fs_type: root_fs_type().unwrap_or_default(),
            container_variable: std::env::var_os("container").is_some(),
            kubernetes_marks: std::env::var_os("KUBERNETES_SERVICE_HOST").is_some()
                || Path::new("/var/run/secrets/kubernetes.io").exists(),
        }
    }

    pub fn environment(&self) -> Environment {
        let cgroup_names_a_container =
            ["docker", "containerd", "libpod", "kubepods", "lxc"].iter().any(|mark| self.cgroup.contains(mark));
        if self.kubernetes_marks || self.cgroup.contains("kubepods") {
            return Environment::Kubernetes;
        }
        let own_namespaces = self.initial_pid_namespace == Some(false) || self.initial_user_namespace == Some(false);
        if own_namespaces
            || self.containerenv
            || self.container_variable
            || cgroup_names_a_container
            || (self.dockerenv && self.root_fs_type == "overlay")
        {
            return Environment::Docker;
        }
        Environment::Host
    }
}

/// Where profcpu runs now.
pub fn detect() -> Environment {
    Evidence::gather().environment()
}

/// The type of the file system at `/` (the last mount there wins).
fn root_fs_type() -> Option<String> {
    let mountinfo = crate::procfs::own("mountinfo").ok()?;
    // `ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER_OPTIONS` (proc(5)).
    mountinfo
        .lines()
        .rev()
        .filter(|line| line.split(' ').nth(4) == Some("/"))
        .find_map(|line| line.split_once(" - ")?.1.split(' ').next().map(str::to_string))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host() -> Evidence {
        Evidence {
            initial_pid_namespace: Some(true),
            initial_user_namespace: Some(true),
            cgroup: "0::/user.slice/user-1000.slice/session-2.scope\n".into(),
            root_fs_type: "ext4".into(),
            ..Evidence::default()
        }
    }

    #[test]
    fn a_host_is_a_host_even_with_a_leftover_dockerenv() {
        assert_eq!(host().environment(), Environment::Host);
        // A VM whose root file system was built from a Docker image.
        assert_eq!(Evidence { dockerenv: true, ..host() }.environment(), Environment::Host);
    }

    #[test]
    fn containers_are_recognised_by_what_their_runtime_changes() {
        let cases = [
            // Docker or podman with cgroup namespaces: only the PID namespace tells.
            Evidence { initial_pid_namespace: Some(false), dockerenv: true, cgroup: "0::/\n".into(), ..host() },
            // A rootless container.
            Evidence { initial_user_namespace: Some(false), ..host() },
            Evidence { containerenv: true, ..host() },
            Evidence { container_variable: true, ..host() },
            // Docker without cgroup namespaces (cgroup v1).
            Evidence { cgroup: "12:pids:/docker/3f2a…\n".into(), ..host() },
            // `docker run --pid=host`: the host's process list, but Docker's overlay root.
            Evidence { dockerenv: true, root_fs_type: "overlay".into(), ..host() },
        ];
        for evidence in cases {
            assert_eq!(evidence.environment(), Environment::Docker, "{evidence:?}");
        }
        let pod = Evidence { initial_pid_namespace: Some(false), kubernetes_marks: true, ..host() };
        assert_eq!(pod.environment(), Environment::Kubernetes);
        let pod_v1 = Evidence { cgroup: "4:memory:/kubepods/burstable/pod1/abc\n".into(), ..host() };
        assert_eq!(pod_v1.environment(), Environment::Kubernetes);
    }

    #[test]
    fn the_root_file_system_type_is_read_from_mountinfo() {
        assert!(!root_fs_type().unwrap_or_default().is_empty());
    }
}
