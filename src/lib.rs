//! profcpu: a CPU profiler for Linux that understands JIT runtimes and containers.
//!
//! The modules follow the data: `cli` parses the command line, `record` samples with `perf_event_open` into
//! `perf_data`, `symbolize` names the sampled addresses, `report` writes perf-script text, folded stacks and the
//! flame graph, `archive` packs the results. `commands` wires them together for each subcommand. `fs` (how files are
//! opened, created and read) and `procfs` (`/proc`) serve them all.

pub mod archive;
pub mod cli;
pub mod commands;
pub mod escape;
pub mod fs;
pub mod interrupt;
pub mod perf_data;
pub mod prefault;
pub mod prefetch;
pub mod procfs;
#[cfg(test)]
pub(crate) mod random_inputs;
pub mod record;
pub mod repeats;
pub mod report;
pub mod symbolize;
