//! uprobes defined through tracefs (`uprobe_events`), for the duration of one run.
//!
//! Why not the `uprobe` PMU of `perf_event_open` (`config1` = path, `config2` = offset), which needs no tracefs and
//! leaves nothing behind when its descriptors close: an *inherited* copy of such an event is set up again in the
//! thread that creates a new thread, and the kernel then reads the path string at the `config1` address of *that*
//! process's memory. It finds no string there, the inherited event cannot be made, and the target's thread creation
//! fails: a .NET runtime aborts with "Out of memory." at its next new thread (reproduced on Linux 6.18). A tracefs
//! uprobe is a tracepoint, and an inherited tracepoint event needs nothing from the target's memory.
//!
//! Each run defines its probes in a group of its own, `profcpu_<pid>`, and removes them when [`UprobeEvents`] is
//! dropped — after the recording closed its events, also after SIGINT/SIGTERM or when the target crashed. A run
//! killed outright (SIGKILL) leaves its definitions, which are inert: a uprobe is placed into code only while an
//! event of it is open, and that event died with the run. The next run removes such leftovers
//! ([`remove_stale`]).

use super::tracepoint::{self, tracefs_with};
use crate::perf_data::tracing::TracingData;
use anyhow::{anyhow, Result};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

const GROUP_PREFIX: &str = "profcpu_";

/// The uprobes of one run; removed when dropped.
pub struct UprobeEvents {
    tracefs: PathBuf,
    group: String,
    names: Vec<String>,
}

impl UprobeEvents {
    /// Defines one uprobe per `(path, offset)` — `path` as this process reaches the file — and returns their
    /// tracepoint ids (the attr `config` of `PERF_TYPE_TRACEPOINT` events), in order.
    pub fn define(points: &[(PathBuf, u64)]) -> Result<(UprobeEvents, Vec<u64>)> {
        let tracefs = tracefs_with("uprobe_events").map_err(|e| no_uprobes(&e))?;
        remove_stale(&tracefs);
        let mut events =
            UprobeEvents { tracefs, group: format!("{GROUP_PREFIX}{}", std::process::id()), names: Vec::new() };
        let mut ids = Vec::new();
        for (i, (path, offset)) in points.iter().enumerate() {
            let name = format!("p{i}");
            let path_text = path.to_str().filter(|p| !p.contains(char::is_whitespace)).ok_or_else(|| {
                anyhow!("cannot place a uprobe on {}: tracefs takes no path with spaces", path.display())
            })?;
            let line = format!("p:{}/{name} {path_text}:{offset:#x}\n", events.group);
            events.write(&line).map_err(|e| refused(path, *offset, &e))?;
            events.names.push(name.clone());
            let id_file = events.tracefs.join("events").join(&events.group).join(&name).join("id");
            let id =
                crate::procfs::read_setting(&id_file.to_string_lossy()).ok().and_then(|t| t.parse().ok()).ok_or_else(
                    || anyhow!("the uprobe {}/{name} has no readable id ({})", events.group, id_file.display()),
                )?;
            ids.push(id);
        }
        Ok((events, ids))
    }

    /// What perf needs to read a recording of these uprobes (their tracefs formats).
    pub fn tracing_data(&self) -> Result<TracingData> {
        let events: Vec<(&str, &str)> = self.names.iter().map(|n| (self.group.as_str(), n.as_str())).collect();
        tracepoint::tracing_data(&self.tracefs, &events)
    }

    fn write(&self, line: &str) -> io::Result<()> {
        // Appended: other tools' uprobes stay as they are.
        let mut file = std::fs::OpenOptions::new().append(true).open(self.tracefs.join("uprobe_events"))?;
        file.write_all(line.as_bytes())
    }
}

impl Drop for UprobeEvents {
    fn drop(&mut self) {
        for name in &self.names {
            if let Err(e) = self.write(&format!("-:{}/{name}\n", self.group)) {
                tracing::warn!(
                    "could not remove the uprobe {}/{name} from {} ({e}); it is inert, the next run removes it",
                    self.group,
                    self.tracefs.join("uprobe_events").display()
                );
            }
        }
    }
}

/// Removes the uprobes of earlier runs that are gone (killed before they could remove their own).
pub fn remove_stale(tracefs: &Path) {
    let Ok(text) = std::fs::read_to_string(tracefs.join("uprobe_events")) else { return };
    for line in text.lines() {
        // `p:profcpu_1234/p0 /path:0x…`
        let Some(event) = line.split_whitespace().next().and_then(|w| w.split_once(':')).map(|(_, e)| e) else {
            continue;
        };
        let Some(pid) = event.strip_prefix(GROUP_PREFIX).and_then(|r| r.split('/').next()) else { continue };
        let Ok(pid) = pid.parse::<u32>() else { continue };
        if pid == std::process::id() || crate::procfs::exists(pid) {
            continue;
        }
        let removed = std::fs::OpenOptions::new()
            .append(true)
            .open(tracefs.join("uprobe_events"))
            .and_then(|mut f| f.write_all(format!("-:{event}\n").as_bytes()));
        match removed {
            Ok(()) => tracing::debug!("removed the leftover uprobe {event} of an earlier run"),
            Err(e) => tracing::debug!("cannot remove the leftover uprobe {event}: {e}"),
        }
    }
}

fn no_uprobes(e: &anyhow::Error) -> anyhow::Error {
    anyhow!(
        "this kernel offers no uprobes here ({e:#}; they need CONFIG_UPROBE_EVENTS and tracefs): file-backed code \
         (native functions, ReadyToRun methods) cannot be probed"
    )
}

fn refused(path: &Path, offset: u64, e: &io::Error) -> anyhow::Error {
    let errno = super::explain::errno_name(e.raw_os_error().unwrap_or(0));
    match e.raw_os_error() {
        Some(libc::EACCES | libc::EPERM) => {
            anyhow!("cannot define a uprobe ({errno} writing tracefs uprobe_events): uprobes need root (CAP_SYS_ADMIN)")
        }
        _ => anyhow!(
            "the kernel refused a uprobe on {}+{offset:#x} ({errno}): the offset is not inside the file, or the \
             instruction there cannot be probed",
            path.display()
        ),
    }
}
