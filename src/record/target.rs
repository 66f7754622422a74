//! The processes being profiled: the threads of a PID, the CPUs to sample on, a launched command held at exec until
//! its events exist, and noticing when a target is gone.

use anyhow::{bail, Context, Result};
use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

pub use crate::procfs::{online_cpus, possible_cpus};

/// Thread ids of process `pid` (its `/proc/PID/task`). `ENOENT` when the process does not exist.
pub fn thread_ids(pid: u32) -> io::Result<Vec<u32>> {
    crate::procfs::Process::open(pid)?.thread_ids()
}

/// The command name of a process (`/proc/PID/comm`).
pub fn process_name(pid: u32) -> Option<String> {
    crate::procfs::Process::open(pid).ok()?.comm(None)
}

pub fn process_exists(pid: u32) -> bool {
    crate::procfs::exists(pid)
}

/// Checks that `program` would be found and could be executed the way `execvp` looks for it, so a typo is
/// reported before anything is set up: one line, "cannot run 'X': …".
pub fn check_program(program: &str) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let runnable = |p: &std::path::Path| p.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
    if program.contains('/') {
        let path = std::path::Path::new(program);
        return match path.metadata() {
            Err(e) => bail!("cannot run '{program}': {e}"),
            Ok(_) if !runnable(path) => bail!("cannot run '{program}': it is not an executable file"),
            Ok(_) => Ok(()),
        };
    }
    let search = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    if std::env::split_paths(&search).any(|dir| runnable(&dir.join(program))) {
        return Ok(());
    }
    bail!("cannot run '{program}': no such command in PATH")
}

/// How many context switches a second `target` makes now, counted over `window` (`None` for a command not started
/// yet, or when /proc does not say).
pub fn switch_rate(target: &super::Target, window: Duration) -> Option<f64> {
    let count = || match target {
        super::Target::Pid(pid) => crate::procfs::Process::open(*pid).ok()?.context_switches().ok(),
        super::Target::All => crate::procfs::system_context_switches().ok(),
        super::Target::Command(_) => None,
    };
    let before = count()?;
    let started = Instant::now();
    std::thread::sleep(window);
    let after = count()?;
    Some(after.saturating_sub(before) as f64 / started.elapsed().as_secs_f64())
}

/// Lets the calling thread, which drains the ring buffers, run ahead of ordinary threads (nice -5) where it may
/// (root, CAP_SYS_NICE): on a busy machine a recorder that waits tens of milliseconds for a CPU while a switch-heavy
/// target fills its rings loses records. It uses a few percent of a CPU, so what it takes from others is small.
pub fn raise_priority() {
    // SAFETY: setpriority on this thread (PRIO_PROCESS with 0 is the calling thread on Linux); a refusal changes
    // nothing.
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, 0, -5);
    }
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two descriptors on success.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: freshly created, owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// A command forked and waiting, before exec, until its events are open (so nothing of its run is missed; the
/// events start at exec through `enable_on_exec`).
pub struct LaunchedCommand {
    pid: u32,
    /// Writing one byte (or closing) releases the child.
    go: Option<OwnedFd>,
    /// Carries the child's errno when exec fails; closed by a successful exec (it is close-on-exec).
    exec_error: Option<OwnedFd>,
    exited: bool,
    program: String,
}

impl LaunchedCommand {
    /// Forks `argv`, held before exec until [`release`](Self::release); its environment is profcpu's with `env`
    /// added (replacing variables of the same name).
    pub fn spawn(argv: &[String], env: &[(String, String)]) -> Result<Self> {
        use std::os::unix::ffi::OsStrExt;
        let program = argv.first().context("no command given after --")?.clone();
        let args: Vec<CString> = argv
            .iter()
            .map(|a| CString::new(a.as_bytes()))
            .collect::<Result<_, _>>()
            .context("the command contains a NUL byte")?;
        let mut argv_ptrs: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
        argv_ptrs.push(std::ptr::null());
        let added = |name: &[u8]| env.iter().any(|(k, _)| k.as_bytes() == name);
        let environment: Vec<CString> = std::env::vars_os()
            .filter(|(k, _)| !added(k.as_bytes()))
            .map(|(k, v)| [k.as_bytes(), b"=", v.as_bytes()].concat())
            .chain(env.iter().map(|(k, v)| format!("{k}={v}").into_bytes()))
            .filter_map(|kv| CString::new(kv).ok())
            .collect();
        let mut env_ptrs: Vec<*const libc::c_char> = environment.iter().map(|e| e.as_ptr()).collect();
        env_ptrs.push(std::ptr::null());
        let (go_read, go_write) = pipe().context("cannot create a pipe")?;
        let (err_read, err_write) = pipe().context("cannot create a pipe")?;

        // SAFETY: fork; the child only calls async-signal-safe functions (close, read, execvpe, write, _exit) on
        // memory prepared before the fork.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(io::Error::last_os_error()).context("cannot fork to launch the command");
        }
        if pid == 0 {
            // Child.
            unsafe {
                libc::close(go_write.as_raw_fd());
                libc::close(err_read.as_raw_fd());
                let mut byte = 0u8;
                let n = loop {
                    let n = libc::read(go_read.as_raw_fd(), &mut byte as *mut u8 as *mut libc::c_void, 1);
                    if n >= 0 || *libc::__errno_location() != libc::EINTR {
                        break n;
                    }
                };
                if n != 1 {
                    // profcpu gave up (or died) before sampling started: do not run the command unprofiled.
                    libc::_exit(127);
                }
                libc::execvpe(argv_ptrs[0], argv_ptrs.as_ptr(), env_ptrs.as_ptr());
                let errno = *libc::__errno_location();
                libc::write(err_write.as_raw_fd(), &errno as *const i32 as *const libc::c_void, 4);
                libc::_exit(127);
            }
        }
        drop(go_read);
        drop(err_write);
        Ok(LaunchedCommand { pid: pid as u32, go: Some(go_write), exec_error: Some(err_read), exited: false, program })
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Lets the child exec. Fails with the exec error (e.g. "No such file or directory") if exec failed.
    pub fn release(&mut self) -> Result<()> {
        if let Some(go) = self.go.take() {
            // SAFETY: writing one byte from a local to a pipe we own.
            unsafe { libc::write(go.as_raw_fd(), b"g".as_ptr() as *const libc::c_void, 1) };
        }
        let Some(err) = self.exec_error.take() else { return Ok(()) };
        let mut buf = [0u8; 4];
        let n = loop {
            // SAFETY: reading at most 4 bytes into a local buffer.
            let n = unsafe { libc::read(err.as_raw_fd(), buf.as_mut_ptr() as *mut libc::c_void, 4) };
            if n >= 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                break n;
            }
        };
        if n == 4 {
            self.wait_blocking();
            let e = io::Error::from_raw_os_error(i32::from_ne_bytes(buf));
            bail!("cannot run '{}': {e}", self.program);
        }
        Ok(())
    }

    /// Reaps the child if it has exited. Returns true once it has.
    pub fn try_reap(&mut self) -> bool {
        if !self.exited {
            let mut status = 0;
            // SAFETY: waitpid on our own child.
            let rc = unsafe { libc::waitpid(self.pid as i32, &mut status, libc::WNOHANG) };
            self.exited = rc == self.pid as i32 || rc < 0;
        }
        self.exited
    }

    fn wait_blocking(&mut self) {
        if !self.exited {
            let mut status = 0;
            // SAFETY: waitpid on our own child.
            unsafe { libc::waitpid(self.pid as i32, &mut status, 0) };
            self.exited = true;
        }
    }

    /// Ends the command if it still runs (SIGTERM, then SIGKILL after `grace`) and reaps it, as `perf record` does
    /// with its workload when recording stops first.
    pub fn terminate(&mut self, grace: Duration) {
        if self.try_reap() {
            return;
        }
        // SAFETY: signalling our own, not yet reaped, child.
        unsafe { libc::kill(self.pid as i32, libc::SIGTERM) };
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if self.try_reap() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // SAFETY: as above.
        unsafe { libc::kill(self.pid as i32, libc::SIGKILL) };
        self.wait_blocking();
    }
}

impl Drop for LaunchedCommand {
    fn drop(&mut self) {
        // Never leave a held-back child waiting forever or a zombie behind: closing `go` makes it exit.
        self.go.take();
        if !self.exited {
            self.terminate(Duration::from_secs(2));
        }
    }
}

/// Becomes readable when a process has exited (a pidfd), so the wait loop can sleep in poll.
pub struct ExitWatch {
    pid: u32,
    pidfd: Option<OwnedFd>,
}

impl ExitWatch {
    pub fn new(pid: u32) -> Self {
        // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
        // SAFETY: a descriptor the kernel just gave us.
        let pidfd = (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as i32) });
        ExitWatch { pid, pidfd }
    }

    /// The descriptor to poll, if pidfds are available (Linux 5.3+).
    pub fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.pidfd.as_ref().map(|f| f.as_fd())
    }

    /// True once every thread of the process has exited (a zombie counts as exited).
    pub fn has_exited(&self) -> bool {
        if let Some(fd) = &self.pidfd {
            let mut p = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
            // SAFETY: polling one descriptor we own, without waiting.
            let n = unsafe { libc::poll(&mut p, 1, 0) };
            return n > 0 && p.revents != 0;
        }
        crate::procfs::Process::open(self.pid).map_or(true, |p| p.is_exited())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_launched_command_waits_for_release_and_exits() {
        let mut cmd = LaunchedCommand::spawn(&["true".to_string()], &[]).unwrap();
        let watch = ExitWatch::new(cmd.pid());
        std::thread::sleep(Duration::from_millis(50));
        assert!(!watch.has_exited(), "the child ran before it was released");
        cmd.release().unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while !watch.has_exited() {
            assert!(Instant::now() < deadline, "child did not exit");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(cmd.try_reap());
    }

    #[test]
    fn programs_are_checked_like_execvp_finds_them() {
        assert!(check_program("sh").is_ok());
        assert!(check_program("/bin/sh").is_ok());
        assert!(check_program("no-such-profcpu-program").unwrap_err().to_string().contains("not"));
        assert!(check_program("/nonexistent/x").unwrap_err().to_string().starts_with("cannot run '/nonexistent/x': "));
        let plain = std::env::temp_dir().join(format!("profcpu-not-executable-{}", std::process::id()));
        std::fs::write(&plain, b"data").unwrap();
        let err = check_program(plain.to_str().unwrap()).unwrap_err().to_string();
        std::fs::remove_file(&plain).unwrap();
        assert!(err.contains("not an executable"), "{err}");
    }

    #[test]
    fn a_command_that_cannot_run_is_one_clear_error() {
        let mut cmd = LaunchedCommand::spawn(&["/nonexistent/profcpu-test-prog".to_string()], &[]).unwrap();
        let err = cmd.release().unwrap_err().to_string();
        assert!(err.starts_with("cannot run '/nonexistent/profcpu-test-prog': No such file"), "{err}");
    }
}
