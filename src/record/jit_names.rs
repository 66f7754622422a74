//! Where a collection's .NET JIT names come from, and getting them without restarting the app. A .NET process names
//! its JIT-compiled code only in the perf map and jitdump it writes when asked. For each .NET process a collection
//! samples, [`JitNames`] decides:
//!
//! - its perf maps are on already (its environment asks for them, or the files exist): left exactly as they are;
//! - .NET 8+: switched on over the diagnostics IPC for the run ([`PERF_MAP_TYPE`]), switched off again at the end
//!   and the files that switching on created removed — the caller copies them first (see `commands::collect`);
//! - a command profcpu launches: `DOTNET_PerfMapEnabled=1` in its environment ([`command_environment`]);
//! - otherwise (.NET Core 3.1 and 5–7, diagnostics switched off, a socket that is not a runtime): one line saying
//!   how to get names.
//!
//! What was decided per process goes into metadata.txt ([`JitNames::describe`]). Dropping a [`JitNames`] switches
//! off what it switched on, so an error on the way out leaves no runtime writing perf maps.

use super::dotnet_ipc::{DotnetRuntime, EnabledPerfMaps, IpcError, Lookup, PerfMapType};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::Path;

/// What EnablePerfMap asks for. Only ALL and JITDUMP make the runtime re-emit the ReadyToRun methods it restored
/// before the call (as `[PreJIT]` jitdump records; dotnet/runtime `src/coreclr/vm/perfmap.cpp`, `PerfMap::Enable`:
/// "PerfMap does not log R2R methods so only proceed if we are emitting jitdumps"); ALL also writes the perf map
/// that perf and other tools read. Methods JIT-compiled before the call are re-emitted into both.
const PERF_MAP_TYPE: PerfMapType = PerfMapType::All;

/// The variables a launched command gets (3.1 reads only the `COMPlus_` one, .NET 5+ prefers `DOTNET_`).
const COMMAND_VARIABLES: [&str; 2] = ["DOTNET_PerfMapEnabled", "COMPlus_PerfMapEnabled"];

/// Where one process's JIT names come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NameSource {
    /// It wrote perf maps before profcpu came (why: the setting or the file): left as it was.
    AlreadyOn(String),
    /// Switched on over the diagnostics IPC for the run.
    SwitchedOn,
    /// A launched command, started with `DOTNET_PerfMapEnabled=1` by profcpu.
    SetInEnvironment,
    /// A .NET process whose code stays unnamed: why, and how to get names.
    Unavailable(String),
}

impl fmt::Display for NameSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NameSource::AlreadyOn(why) => write!(f, "perf map on already ({why})"),
            NameSource::SwitchedOn => {
                write!(f, "perf map switched on over the .NET diagnostics IPC for the run, off again after")
            }
            NameSource::SetInEnvironment => write!(f, "DOTNET_PerfMapEnabled=1 set in its environment by profcpu"),
            NameSource::Unavailable(why) => write!(f, "none: {why}"),
        }
    }
}

/// A runtime whose perf map this run switched on.
struct Switched {
    runtime: DotnetRuntime,
    enabled: EnabledPerfMaps,
    state: SwitchState,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SwitchState {
    On,
    /// Switched off (or the process is gone): nothing writes the files any more.
    Off,
    /// Switching off failed: the runtime may still write, so its files stay where the user can see them.
    StillOn,
    /// Its files are removed.
    Done,
}

/// The JIT-name decisions of one collection, and the runtimes it switched on.
#[derive(Default)]
pub struct JitNames {
    sources: BTreeMap<u32, NameSource>,
    switched: Vec<Switched>,
}

impl JitNames {
    /// Switches perf maps on in each .NET process of `pids` (host PIDs) that does not write them yet. With
    /// `every_process` (`-all`) processes that are not .NET, or vanish meanwhile, pass without a word; a single
    /// target that cannot be inspected gets a line.
    pub fn switch_on(pids: &[u32], every_process: bool) -> JitNames {
        JitNames::switch_on_as(pids, every_process, PERF_MAP_TYPE)
    }

    /// [`switch_on`](Self::switch_on), asking for `kind` (`probe` wants the perf map alone: the jitdump's
    /// re-emitted ReadyToRun methods are of no use to it).
    pub fn switch_on_as(pids: &[u32], every_process: bool, kind: PerfMapType) -> JitNames {
        let mut names = JitNames::default();
        for &pid in pids {
            names.switch_on_one(pid, DotnetRuntime::find(pid), every_process, kind);
        }
        names
    }

    /// [`switch_on_as`](Self::switch_on_as) for one process that is still starting (a launched command): `None`
    /// while it has no diagnostics socket yet (its runtime has not opened it, or is not loaded yet), so the caller
    /// asks again.
    pub fn switch_on_when_ready(pid: u32, kind: PerfMapType) -> Option<JitNames> {
        let lookup = DotnetRuntime::find(pid).ok()?;
        if !matches!(lookup, Lookup::Found(_) | Lookup::DiagnosticsDisabled { .. }) {
            return None;
        }
        let mut names = JitNames::default();
        names.switch_on_one(pid, Ok(lookup), false, kind);
        Some(names)
    }

    fn switch_on_one(&mut self, pid: u32, lookup: anyhow::Result<Lookup>, every_process: bool, kind: PerfMapType) {
        let runtime = match lookup {
            Ok(Lookup::Found(runtime)) => runtime,
            Ok(Lookup::NotDotnet) => return,
            Ok(lookup) => {
                let why = lookup.explain().unwrap_or_default();
                return self.unavailable(pid, why);
            }
            Err(e) if every_process => return tracing::debug!("PID {pid}: {e:#}"),
            Err(e) => return self.unavailable(pid, format!("{e:#}; its JIT-compiled code stays unnamed")),
        };
        match runtime.perf_maps_already_on() {
            Ok(Some(why)) => {
                tracing::info!("PID {pid} writes perf maps already ({why}): left as they are");
                self.sources.insert(pid, NameSource::AlreadyOn(why.to_string()));
                return;
            }
            Ok(None) => {}
            Err(e) => {
                let why = format!(
                    "cannot tell whether PID {pid} writes perf maps ({e} in its {}), so they are left alone",
                    runtime.perf_map_dir()
                );
                return self.unavailable(pid, why);
            }
        }
        match runtime.enable_perf_map(kind) {
            Ok(enabled) => {
                tracing::info!(
                    "switched the perf map of PID {pid} (.NET {}) on over {} for this run",
                    runtime.version().unwrap_or("8+"),
                    runtime.socket_path()
                );
                self.sources.insert(pid, NameSource::SwitchedOn);
                self.switched.push(Switched { runtime, enabled, state: SwitchState::On });
            }
            // It exited between the lookup and the command.
            Err(IpcError::Gone { .. }) if every_process => {}
            Err(e) => self.unavailable(pid, e.to_string()),
        }
    }

    fn unavailable(&mut self, pid: u32, why: String) {
        tracing::warn!("{why}");
        self.sources.insert(pid, NameSource::Unavailable(why));
    }

    /// Notes that the launched command `pid` got [`command_environment`].
    pub fn set_in_environment(pid: u32) -> JitNames {
        JitNames { sources: BTreeMap::from([(pid, NameSource::SetInEnvironment)]), switched: Vec::new() }
    }

    /// metadata.txt's `jit_names` value, `None` when no .NET process was met: `PID 1234: perf map switched on …`,
    /// entries joined by `; `.
    pub fn describe(&self) -> Option<String> {
        let entries: Vec<String> = self.sources.iter().map(|(pid, source)| format!("PID {pid}: {source}")).collect();
        (!entries.is_empty()).then(|| entries.join("; "))
    }

    /// Switches off every perf map this run switched on (DisablePerfMap): from here the runtimes write nothing more.
    /// Call once sampling is over, before the capture's last copy.
    pub fn switch_off(&mut self) {
        for s in self.switched.iter_mut().filter(|s| s.state == SwitchState::On) {
            let pid = s.runtime.host_pid();
            s.state = match s.runtime.disable_perf_map() {
                Ok(()) => {
                    tracing::info!("switched the perf map of PID {pid} off again");
                    SwitchState::Off
                }
                Err(IpcError::Gone { .. }) => SwitchState::Off,
                Err(e) => {
                    tracing::warn!(
                        "could not switch the perf map of PID {pid} off again ({e}): it keeps writing {} until it \
                         exits, so those files are left in place",
                        s.enabled.created_files().join(", ")
                    );
                    SwitchState::StillOn
                }
            };
        }
    }

    /// Removes the files that switching on created, once [`switch_off`](Self::switch_off) stopped the runtimes
    /// writing them. Call after the capture copied them.
    pub fn remove_files(&mut self) {
        for s in self.switched.iter_mut().filter(|s| s.state == SwitchState::Off) {
            s.state = SwitchState::Done;
            match s.enabled.remove_created_files() {
                Ok(removed) => tracing::debug!("PID {}: removed {}", s.runtime.host_pid(), removed.join(", ")),
                Err(e) => tracing::warn!("PID {}: {e}", s.runtime.host_pid()),
            }
        }
    }

    /// Removes what the runtimes of a launched command (`pids`: it and the children that inherited its
    /// environment) wrote because profcpu set [`command_environment`]: `perf-PID.map`, `perfinfo-PID.map` and
    /// `jit-PID.dump` in /tmp, for each PID that left a `perfinfo-PID.map` (only .NET writes that one, so another
    /// JIT's own perf map, e.g. node's `--perf-basic-prof`, stays). Call after the capture copied them.
    pub fn remove_command_files(&self, pids: &BTreeSet<u32>) {
        if !self.sources.values().any(|s| *s == NameSource::SetInEnvironment) {
            return;
        }
        let tmp = Path::new("/tmp");
        for pid in pids {
            let is_file = |name: &str| std::fs::symlink_metadata(tmp.join(name)).is_ok_and(|m| m.is_file());
            if !is_file(&format!("perfinfo-{pid}.map")) {
                continue;
            }
            for name in PerfMapType::All.file_names(*pid) {
                if is_file(&name) {
                    if let Err(e) = std::fs::remove_file(tmp.join(&name)) {
                        tracing::warn!("cannot remove /tmp/{name} (written by PID {pid} of the command): {e}");
                    }
                }
            }
        }
    }
}

impl Drop for JitNames {
    /// A run that ends on an error still switches off what it switched on.
    fn drop(&mut self) {
        self.switch_off();
        self.remove_files();
    }
}

/// What a launched command's environment gets so that a .NET runtime names its code: both perf map variables set
/// to 1, unless profcpu's own environment sets either (the user's choice stands). Empty when nothing is added.
pub fn command_environment() -> Vec<(String, String)> {
    if COMMAND_VARIABLES.iter().any(|v| std::env::var_os(v).is_some()) {
        return Vec::new();
    }
    COMMAND_VARIABLES.iter().map(|v| (v.to_string(), "1".to_string())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_read_as_one_metadata_line() {
        let mut names = JitNames::set_in_environment(42);
        assert_eq!(names.describe().unwrap(), "PID 42: DOTNET_PerfMapEnabled=1 set in its environment by profcpu");
        names.sources.insert(7, NameSource::AlreadyOn("its environment has DOTNET_PerfMapEnabled=1".into()));
        names.sources.insert(9, NameSource::SwitchedOn);
        assert_eq!(
            names.describe().unwrap(),
            "PID 7: perf map on already (its environment has DOTNET_PerfMapEnabled=1); PID 9: perf map switched on \
             over the .NET diagnostics IPC for the run, off again after; PID 42: DOTNET_PerfMapEnabled=1 set in its \
             environment by profcpu"
        );
        assert_eq!(JitNames::default().describe(), None);
    }

    /// Also when a dead runtime that had the same PID left its diagnostics socket in /tmp (found flaky: /tmp held
    /// hundreds of killed test runtimes' sockets, and this test process's PID was one of theirs).
    #[test]
    fn a_process_that_is_not_dotnet_is_passed_over() {
        let me = std::process::id();
        let names = JitNames::switch_on(&[me], false);
        assert!(names.sources.is_empty(), "{:?}", names.sources);
        let stale = std::path::PathBuf::from(format!("/tmp/dotnet-diagnostic-{me}-1-socket"));
        std::fs::write(&stale, b"").unwrap();
        let names = JitNames::switch_on(&[me], false);
        std::fs::remove_file(&stale).unwrap();
        assert!(names.sources.is_empty(), "a stale socket: {:?}", names.sources);
    }
}
