//! The scheduler tracepoint the off-CPU modes record, `sched:sched_switch`: its id (the attr's `config`) and its
//! format file, read from tracefs — which is mounted first if it is not (as `perf` does) — and the format kept for
//! the recording's `HEADER_TRACING_DATA`, so that `perf script` prints the switch and postprocess finds the fields
//! of its raw data offline.

use super::explain::{self, Environment};
use crate::perf_data::tracing::{EventFormat, TracingData, TracingSource, SCHED_SWITCH};
use anyhow::{bail, Result};
use std::io::{self, Read};
use std::path::{Path, PathBuf};

/// Where tracefs usually is: its own mount point (Linux 4.1+), and inside debugfs on older set-ups.
const TRACEFS_DIRS: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

/// The tracepoint as profcpu records it.
#[derive(Debug, Clone)]
pub struct SchedSwitchEvent {
    pub id: u64,
    /// The `HEADER_TRACING_DATA` feature describing it.
    pub tracing: TracingData,
    /// Said to the user: profcpu mounted tracefs.
    pub notice: Option<String>,
}

/// Reads `sched:sched_switch` from tracefs. `mode` names the mode that needs it in the one-line error.
pub fn sched_switch(mode: &str) -> Result<SchedSwitchEvent> {
    let (dir, notice) = tracefs(mode)?;
    let event_dir = dir.join("events/sched/sched_switch");
    let format_text = read_text(&event_dir.join("format")).map_err(|e| unreadable(mode, &event_dir, &e))?;
    let format = EventFormat::parse("sched", &format_text)
        .map_err(|e| anyhow::anyhow!("cannot parse {}: {e:#}", event_dir.join("format").display()))?;
    // The fields the off-CPU report reads must be there, or the recording would be useless.
    crate::perf_data::tracing::SchedSwitchLayout::new(&format)
        .map_err(|e| anyhow::anyhow!("{}: {e:#}", event_dir.join("format").display()))?;
    let source = TracingSource {
        page_size: crate::prefault::page_size() as u32,
        // Optional for perf's reader of the feature; an empty text where tracefs has none.
        header_page: read_text(&dir.join("events/header_page")).unwrap_or_default(),
        header_event: read_text(&dir.join("events/header_event")).unwrap_or_default(),
    };
    tracing::debug!("{SCHED_SWITCH} is tracepoint {} ({})", format.id, event_dir.display());
    Ok(SchedSwitchEvent { id: format.id, tracing: TracingData::new(&source, vec![format]), notice })
}

/// A tracefs folder holding the tracepoint, mounting tracefs at its usual place when none is mounted.
fn tracefs(mode: &str) -> Result<(PathBuf, Option<String>)> {
    let mut candidates = crate::procfs::mount_points("tracefs");
    candidates.extend(TRACEFS_DIRS.iter().map(PathBuf::from));
    let id_of = |dir: &Path| dir.join("events/sched/sched_switch/id");
    let mut refused = None;
    for dir in &candidates {
        match std::fs::metadata(id_of(dir)) {
            Ok(_) => return Ok((dir.clone(), None)),
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => refused = Some((dir.clone(), e)),
            Err(_) => {}
        }
    }
    if let Some((dir, e)) = refused {
        return Err(unreadable(mode, &dir, &e));
    }
    let mounted_somewhere = candidates.iter().any(|d| d.join("events").is_dir());
    if mounted_somewhere {
        bail!(
            "this kernel has no scheduler tracepoint sched:sched_switch (tracefs has no events/sched/sched_switch): \
             -mode {mode} cannot be recorded here; use -mode cpu"
        );
    }
    let target = Path::new(TRACEFS_DIRS[0]);
    match mount_tracefs(target) {
        Ok(()) if id_of(target).exists() => {
            let notice = format!("tracefs was not mounted: mounted it at {} (as perf does)", target.display());
            tracing::warn!("{notice}");
            Ok((target.to_path_buf(), Some(notice)))
        }
        Ok(()) => bail!(
            "this kernel has no scheduler tracepoint sched:sched_switch (tracefs has no events/sched/sched_switch): \
             -mode {mode} cannot be recorded here; use -mode cpu"
        ),
        Err(e) => bail!("{}", not_mounted(mode, &e)),
    }
}

/// The `HEADER_TRACING_DATA` describing the tracepoints `(system, name)` of the tracefs at `dir` (what perf needs
/// to read a recording of them).
pub(super) fn tracing_data(dir: &Path, events: &[(&str, &str)]) -> Result<TracingData> {
    let mut formats = Vec::new();
    for (system, name) in events {
        let path = dir.join("events").join(system).join(name).join("format");
        let text = read_text(&path).map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
        formats.push(
            EventFormat::parse(system, &text).map_err(|e| anyhow::anyhow!("cannot parse {}: {e:#}", path.display()))?,
        );
    }
    let source = TracingSource {
        page_size: crate::prefault::page_size() as u32,
        header_page: read_text(&dir.join("events/header_page")).unwrap_or_default(),
        header_event: read_text(&dir.join("events/header_event")).unwrap_or_default(),
    };
    Ok(TracingData::new(&source, formats))
}

/// A mounted tracefs folder that has `entry` (e.g. `uprobe_events`), or why there is none.
pub(super) fn tracefs_with(entry: &str) -> Result<PathBuf> {
    let mut candidates = crate::procfs::mount_points("tracefs");
    candidates.extend(TRACEFS_DIRS.iter().map(PathBuf::from));
    match candidates.iter().find(|dir| dir.join(entry).exists()) {
        Some(dir) => Ok(dir.clone()),
        None => bail!("no tracefs with {entry} in {}", TRACEFS_DIRS.join(" or ")),
    }
}

fn mount_tracefs(at: &Path) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let dir = std::ffi::CString::new(at.as_os_str().as_bytes()).map_err(|_| io::ErrorKind::InvalidInput)?;
    // SAFETY: NUL-terminated strings that outlive the call; no mount data.
    let rc = unsafe { libc::mount(c"nodev".as_ptr(), dir.as_ptr(), c"tracefs".as_ptr(), 0, std::ptr::null()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A small tracefs file, capped. Read with a large buffer: some tracefs files (`events/header_page`) end after the
/// first read, whatever its size, and a reader that starts with a small probe read gets them cut short.
fn read_text(path: &Path) -> io::Result<String> {
    const CAP: usize = 1 << 20;
    let mut file = std::fs::File::open(path)?;
    let mut bytes = vec![0u8; 64 << 10];
    let mut len = 0;
    loop {
        if len == bytes.len() {
            if len >= CAP {
                break;
            }
            bytes.resize(len * 2, 0);
        }
        match file.read(&mut bytes[len..])? {
            0 => break,
            n => len += n,
        }
    }
    bytes.truncate(len);
    String::from_utf8(bytes).map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "not text"))
}

/// No tracefs and no way to mount one: what to change, where profcpu runs.
fn not_mounted(mode: &str, err: &io::Error) -> String {
    let errno = explain::errno_name(err.raw_os_error().unwrap_or(0));
    let fix = match explain::environment() {
        Environment::Host => "mount it with `mount -t tracefs nodev /sys/kernel/tracing` (as root)".to_string(),
        Environment::Docker => "run the container with `-v /sys/kernel/tracing:/sys/kernel/tracing` (tracefs mounted \
                                on the host), or run profcpu on the host"
            .to_string(),
        Environment::Kubernetes => "mount the node's /sys/kernel/tracing into the container (a hostPath volume), \
                                    or run profcpu on the node"
            .to_string(),
    };
    format!(
        "-mode {mode} needs the scheduler tracepoint sched:sched_switch, but tracefs is not mounted here ({}) and \
         profcpu cannot mount it ({errno}); {fix}",
        TRACEFS_DIRS.join(", ")
    )
}

fn unreadable(mode: &str, path: &Path, err: &io::Error) -> anyhow::Error {
    let errno = explain::errno_name(err.raw_os_error().unwrap_or(0));
    anyhow::anyhow!(
        "-mode {mode} needs the scheduler tracepoint sched:sched_switch, whose id and format tracefs keeps in {} \
         — unreadable here ({errno}); tracepoints need root (or CAP_PERFMON with tracefs readable): run profcpu as \
         root",
        path.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_one_line_naming_tracefs() {
        let msg = not_mounted("offcpu", &io::Error::from_raw_os_error(libc::EPERM));
        assert!(!msg.contains('\n') && msg.contains("tracefs is not mounted") && msg.contains("EPERM"), "{msg}");
        let msg = unreadable("wall", Path::new("/sys/kernel/tracing"), &io::Error::from_raw_os_error(libc::EACCES));
        assert!(!msg.to_string().contains('\n') && msg.to_string().contains("EACCES"), "{msg}");
    }
}
