//! A hostile user and a hostile container for the security tests: commands run as `nobody` (setpriv), a
//! "container" whose root is a folder of ours (a private mount namespace, `chroot`, the host's `/usr` bound in
//! read-only so Debian's python runs inside), a swapper that exchanges two names with `renameat2(RENAME_EXCHANGE)`,
//! and a watcher that renames a folder away as soon as it appears and plants a symlink in its place.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Debian's python, which `nobody` can run (the `python3` on root's PATH may live under /root).
pub const PYTHON: &str = "/usr/bin/python3";

/// A folder under /var/tmp (not the cargo tmp dir: `nobody` must be able to reach it, and not /tmp: namespaced
/// targets have their own). Removed when dropped unless the test fails.
pub struct SharedScratch {
    pub path: PathBuf,
}

impl SharedScratch {
    pub fn new(name: &str) -> SharedScratch {
        static COUNTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let path = PathBuf::from(format!("/var/tmp/profcpu-{name}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        set_mode(&path, 0o755);
        SharedScratch { path }
    }

    pub fn join(&self, p: impl AsRef<Path>) -> PathBuf {
        self.path.join(p)
    }
}

impl Drop for SharedScratch {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("kept {} for inspection", self.path.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

pub fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// `nobody`'s uid (65534 on Debian).
pub fn nobody_uid() -> u32 {
    let out = Command::new("id").args(["-u", "nobody"]).output().expect("id");
    String::from_utf8_lossy(&out.stdout).trim().parse().expect("no user nobody")
}

/// `setpriv` arguments that make what follows run as nobody:nogroup with no other groups.
pub const AS_NOBODY: [&str; 4] = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"];

/// `python3 -c SCRIPT ARGS…` as nobody.
pub fn python_as_nobody(script: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(AS_NOBODY[0]);
    cmd.args(&AS_NOBODY[1..]).arg(PYTHON).arg("-c").arg(script).args(args);
    cmd
}

/// The Python that swaps two names atomically and forever (until killed): `renameat2(A, B, RENAME_EXCHANGE)`.
pub const SWAPPER: &str = r#"
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
a, b = sys.argv[1].encode(), sys.argv[2].encode()
print("swapping", flush=True)
while True:
    if libc.renameat2(-100, a, -100, b, 2) != 0:
        sys.exit("renameat2: " + os.strerror(ctypes.get_errno()))
"#;

/// The Python (run as nobody) that waits for a new entry in folder argv[1] whose name starts with argv[2], then at
/// once renames it to argv[3] and puts a symlink to argv[4] in its place. Prints what it did.
pub const FOLDER_THIEF: &str = r#"
import os, sys, time
base, prefix, stolen, victim = sys.argv[1:5]
before = set(os.listdir(base))
print("watching", flush=True)
deadline = time.time() + 60
while time.time() < deadline:
    for name in os.listdir(base):
        if name.startswith(prefix) and name not in before:
            os.rename(os.path.join(base, name), stolen)
            os.symlink(victim, os.path.join(base, name))
            print("swapped " + name, flush=True)
            sys.exit(0)
sys.exit("nothing appeared")
"#;

/// Starts `cmd` with stdout piped and waits for its first line (the scripts above print one when ready).
pub fn start_and_wait_for_line(mut cmd: Command) -> (Child, String) {
    let mut child = cmd.stdout(Stdio::piped()).spawn().expect("cannot start the helper");
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.as_mut().unwrap()), &mut line).unwrap();
    (child, line)
}

/// A "container": a folder used as the root of a private mount (and PID) namespace, with the host's /usr bound
/// in read-only (and the usual /bin, /lib, /lib64 links), so that Debian's python runs inside.
pub struct ContainerRoot {
    pub root: PathBuf,
}

impl ContainerRoot {
    pub fn new(root: PathBuf) -> ContainerRoot {
        for dir in ["usr", "tmp", "etc"] {
            std::fs::create_dir_all(root.join(dir)).unwrap();
        }
        set_mode(&root.join("tmp"), 0o1777);
        for (link, to) in [("bin", "usr/bin"), ("lib", "usr/lib"), ("lib64", "usr/lib64"), ("sbin", "usr/sbin")] {
            std::os::unix::fs::symlink(to, root.join(link)).unwrap();
        }
        ContainerRoot { root }
    }

    /// Runs `argv` as `nobody` inside the container (PID 1 of a new PID namespace, its root this folder).
    pub fn spawn_as_nobody(&self, argv: &[&str]) -> InContainer {
        // Numeric ids: the container has no /etc/passwd.
        let nobody = nobody_uid();
        let script = format!(
            "mount --bind -o ro /usr \"$0/usr\" && exec chroot \"$0\" setpriv --reuid={nobody} --regid={nobody} \
             --clear-groups \"$@\""
        );
        let mut cmd = Command::new("unshare");
        cmd.args(["--mount", "--pid", "--fork", "--kill-child", "--propagation", "private", "sh", "-c"])
            .arg(script)
            .arg(&self.root)
            .args(argv)
            .stdout(Stdio::piped());
        let mut child = cmd.spawn().expect("cannot start unshare");
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.as_mut().unwrap()), &mut line).unwrap();
        let host_pid = only_child(child.id());
        InContainer { child, host_pid, first_line: line }
    }
}

/// A process started in a [`ContainerRoot`]: killed when dropped.
pub struct InContainer {
    pub child: Child,
    /// The innermost process as the host sees it (unshare forks it).
    pub host_pid: u32,
    pub first_line: String,
}

impl Drop for InContainer {
    fn drop(&mut self) {
        // SAFETY: signalling a process this test started.
        unsafe { libc::kill(self.host_pid as i32, libc::SIGKILL) };
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The one child of process `pid` (waits up to 10 s for it to exist).
pub fn only_child(pid: u32) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
        if let Some(child) = children.split_whitespace().next() {
            return child.parse().unwrap();
        }
        assert!(Instant::now() < deadline, "process {pid} started no child");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Every regular file under `dir` (recursively) whose bytes contain `needle`, and the archive members of any
/// `prof.tar.gz` that do.
pub fn files_containing(dir: &Path, needle: &[u8]) -> Vec<String> {
    let mut found = Vec::new();
    for (rel, bytes) in super::profcpu::tree(dir) {
        if bytes.windows(needle.len()).any(|w| w == needle) {
            found.push(rel.display().to_string());
        }
        if rel.file_name().is_some_and(|n| n == "prof.tar.gz") {
            let out = Command::new("tar").arg("xzOf").arg(dir.join(&rel)).output().expect("tar");
            if out.stdout.windows(needle.len()).any(|w| w == needle) {
                found.push(format!("{} (archive)", rel.display()));
            }
        }
    }
    found
}
