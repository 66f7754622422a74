//! The descriptive feature sections of perf.data (host, kernel, CPUs, command line, build-ids), as `perf report
//! --header` shows them.

use super::buildid;
use super::dsos::HitDso;
use crate::perf_data::header::HOST_PID;
use crate::perf_data::tracing::TracingData;
use crate::perf_data::{BuildIdEntry, Features};

/// `tracing`: the formats of the recorded tracepoints, if any.
pub fn features(hit: &[HitDso], kernel_hit: bool, tracing: Option<TracingData>) -> Features {
    let uts = nix::sys::utsname::uname().ok();
    let field = |f: fn(&nix::sys::utsname::UtsName) -> &std::ffi::OsStr| {
        uts.as_ref().map(|u| f(u).to_string_lossy().into_owned())
    };
    let online = super::target::online_cpus().map(|c| c.len() as u32).unwrap_or(1);
    Features {
        hostname: nix::unistd::gethostname().ok().map(|h| h.to_string_lossy().into_owned()),
        osrelease: field(|u| u.release()),
        version: Some(format!("profcpu {}", env!("CARGO_PKG_VERSION"))),
        arch: field(|u| u.machine()),
        nr_cpus: Some((super::target::possible_cpus().max(online), online)),
        // perf records its own command line; so does profcpu.
        cmdline: Some(std::env::args().collect()),
        build_ids: build_ids(hit, kernel_hit),
        tracing,
        event_desc: Vec::new(),
    }
}

fn build_ids(hit: &[HitDso], kernel_hit: bool) -> Vec<BuildIdEntry> {
    let mut out = Vec::new();
    if kernel_hit {
        if let Some(id) = buildid::kernel_build_id() {
            out.push(BuildIdEntry {
                pid: HOST_PID,
                is_kernel: true,
                build_id: id,
                filename: "[kernel.kallsyms]".into(),
            });
        }
    }
    for dso in hit {
        match buildid::build_id_of(dso.pid, &dso.path) {
            // perf keys every DSO of the recording machine by its HOST_KERNEL_ID pid; other pids mean guests.
            Some(id) => {
                out.push(BuildIdEntry { pid: HOST_PID, is_kernel: false, build_id: id, filename: dso.path.clone() })
            }
            None => tracing::debug!("no build-id for {} (pid {})", dso.path, dso.pid),
        }
    }
    out
}
