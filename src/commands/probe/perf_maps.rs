//! JIT names for a .NET 8+ process started without perf maps: switched on over its diagnostics socket for the
//! probe, and off again afterwards, as [`crate::record::dotnet_ipc`] prescribes (only what this run switched on is
//! switched off; only the files it created are removed, after they were copied).

use crate::record::dotnet_ipc::{DotnetRuntime, EnabledPerfMaps, Lookup, PerfMapType};

/// Perf maps this run switched on.
pub struct SwitchedOn {
    runtime: DotnetRuntime,
    enabled: EnabledPerfMaps,
}

/// Makes sure process `pid` writes a perf map if it is a .NET runtime: `Some` when this run switched it on (undo
/// with [`SwitchedOn::switch_off`]), `None` when it already writes one, is not .NET, or cannot (then a warning says
/// why its JIT methods stay unnamed).
pub fn switch_on(pid: u32) -> Option<SwitchedOn> {
    match DotnetRuntime::find(pid) {
        Ok(Lookup::Found(runtime)) => switch_on_in(runtime),
        Ok(Lookup::NotDotnet) => None,
        Ok(other) => {
            if let Some(why) = other.explain() {
                tracing::warn!("JIT-compiled methods cannot be named: {why}");
            }
            None
        }
        Err(e) => {
            tracing::warn!("JIT-compiled methods cannot be named: {e:#}");
            None
        }
    }
}

/// What [`switch_on_when_ready`] settled on.
pub enum WhenReady {
    Switched(Box<SwitchedOn>),
    /// The process writes its own perf map, or cannot be asked to (a warning said why).
    LeftAlone,
}

impl WhenReady {
    pub fn into_switched(self) -> Option<SwitchedOn> {
        match self {
            WhenReady::Switched(s) => Some(*s),
            WhenReady::LeftAlone => None,
        }
    }
}

/// [`switch_on`] for a process that is still starting (a launched command): `None` while its runtime has no
/// diagnostics socket yet (or no runtime is loaded yet), so the caller asks again.
pub fn switch_on_when_ready(pid: u32) -> Option<WhenReady> {
    match DotnetRuntime::find(pid) {
        Ok(Lookup::Found(runtime)) => Some(match switch_on_in(runtime) {
            Some(switched) => WhenReady::Switched(Box::new(switched)),
            None => WhenReady::LeftAlone,
        }),
        Ok(disabled @ Lookup::DiagnosticsDisabled { .. }) => {
            if let Some(why) = disabled.explain() {
                tracing::warn!("JIT-compiled methods cannot be named: {why}");
            }
            Some(WhenReady::LeftAlone)
        }
        _ => None,
    }
}

fn switch_on_in(runtime: DotnetRuntime) -> Option<SwitchedOn> {
    let pid = runtime.host_pid();
    match runtime.perf_maps_already_on() {
        Ok(Some(why)) => {
            tracing::debug!("PID {pid} writes perf maps already ({why})");
            return None;
        }
        Ok(None) => {}
        Err(e) => tracing::debug!("cannot tell whether PID {pid} writes perf maps: {e}"),
    }
    // The perf map alone: names and addresses of JIT code, and a line for each new tier as it is compiled.
    match runtime.enable_perf_map(PerfMapType::PerfMap) {
        Ok(enabled) => {
            tracing::info!("switched on the perf map of PID {pid} through its diagnostics socket");
            Some(SwitchedOn { runtime, enabled })
        }
        Err(e) => {
            tracing::warn!("JIT-compiled methods cannot be named: {e}");
            None
        }
    }
}

impl SwitchedOn {
    /// Switches the perf map off again and removes the files switching it on created (call once their contents
    /// were copied or are held open).
    pub fn switch_off(self) {
        if let Err(e) = self.runtime.disable_perf_map() {
            tracing::warn!("could not switch the perf map of PID {} off again: {e}", self.runtime.host_pid());
        }
        match self.enabled.remove_created_files() {
            Ok(removed) => tracing::debug!("removed {}", removed.join(", ")),
            Err(e) => tracing::warn!("{e}"),
        }
    }
}
