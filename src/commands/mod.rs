//! One function per subcommand, wiring the stages together: record → perf_data → symbolize → report → archive.

pub mod collect;
pub mod offsets;
pub mod pipeline;
pub mod postprocess;
pub mod probe;

use crate::cli::{Cli, Command};
use anyhow::Result;

pub fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Collect(args) => collect::run(args),
        Command::Postprocess(args) => postprocess::run(args),
        Command::Probe(args) => probe::run(args),
        Command::Offsets(args) => offsets::run(args),
    }
}
