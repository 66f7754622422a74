//! What the integration tests share, one home per job. A test file brings it in with `mod support;`.
//!
//! | module | job |
//! |---|---|
//! | [`scratch`] | per-test folders (kept when the test fails), the run's folder for what lasts the whole run |
//! | [`profcpu`] | running the binary (`collect`, `trap`, `postprocess`) and reading what it wrote |
//! | [`golden`] | the committed golden collection |
//! | [`fixtures`] | a hand-built awkward profile for the report stage |
//! | [`report`] | samples through the report stage as the pipeline streams them |
//! | [`symbolize`] | a recording named as the pipeline names it |
//! | [`recording`] | a perf.data read back with our reader |
//! | [`inferno`] | inferno as library and as the CLI users run (missing CLI = failure) |
//! | [`perf`] | Debian's perf (record, script) as the independent oracle |
//! | [`busy`] | the recording tests' workload (`examples/busy.rs`) |
//! | [`running_app`] | a program that says when it is ready; the CPU lock; killing a process tree; its /tmp leftovers |
//! | [`dotnet`] | real .NET runtimes (8 and 3.1) and C# programs compiled for them |
//! | [`webapi`] | the sample web API as a target, on the host or in namespaces |
//! | [`podman`] | real containers (podman + runc) from local images, the static binary inside them |
//! | [`symbol_server`] | binaries split into stripped file + debug file, served over HTTP in a symbol server's layout |
//! | [`hostile`] | a hostile user (`nobody`) and container: planted links, swapped folders, renames in a race |
//! | [`chromium`] | headless Chromium for the flame graph |
//! | [`unwind`] | the C workload inside libc, how far stacks reach, perf script text by sample |
//! | [`offcpu`] | time-weighted folded stacks, the C program with a known split of blocked time |
#![allow(dead_code)]

pub mod busy;
pub mod chromium;
pub mod dotnet;
pub mod fixtures;
pub mod golden;
pub mod hostile;
pub mod inferno;
pub mod offcpu;
pub mod perf;
pub mod podman;
pub mod profcpu;
pub mod recording;
pub mod report;
pub mod running_app;
pub mod scratch;
pub mod symbol_server;
pub mod symbolize;
pub mod unwind;
pub mod webapi;

/// The binary under test, as cargo built it for the test run.
pub const PROFCPU: &str = env!("CARGO_BIN_EXE_profcpu");

/// Whether `path` was written since `since` (with 3 s of slack): a file the test's own process wrote, not one a
/// killed runtime with the same PID left in /tmp (PIDs come round on a busy test machine, and profcpu ignores such
/// files as older than the process).
pub fn written_since(path: &std::path::Path, since: std::time::Instant) -> bool {
    let Ok(meta) = std::fs::metadata(path) else { return false };
    let age = meta.modified().ok().and_then(|m| m.elapsed().ok()).unwrap_or_default();
    age <= since.elapsed() + std::time::Duration::from_secs(3)
}

/// How long a real runtime may take to start and say it is ready (a cold start on a busy 2-CPU machine takes a
/// few seconds).
pub const START_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);
