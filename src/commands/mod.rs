//! One function per subcommand, wiring the stages together: record → perf_data → symbolize → report → archive.

pub mod collect;
pub mod offsets;
pub mod pipeline;
pub mod postprocess;
pub mod probe;
pub mod trap;

use crate::cli::{Cli, Command, SymbolArgs};
use crate::symbolize::symbol_server::SymbolServers;
use anyhow::{Context, Result};
use std::sync::Arc;
use std::time::Duration;

pub fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Collect(args) => collect::run(args),
        Command::Postprocess(args) => postprocess::run(args),
        Command::Trap(args) => trap::run(args),
        Command::Probe(args) => probe::run(args),
        Command::Offsets(args) => offsets::run(args),
    }
}

/// The symbol servers the user named (`-symbol-server`, and with `-debuginfod` those of `DEBUGINFOD_URLS`), or
/// `None`: then nothing is fetched. Fails on a URL that is not http(s) or when there is no cache folder.
fn symbol_servers(args: &SymbolArgs) -> Result<Option<Arc<SymbolServers>>> {
    let debuginfod_urls = match args.debuginfod {
        true => std::env::var("DEBUGINFOD_URLS").unwrap_or_default(),
        false => String::new(),
    };
    if args.debuginfod && debuginfod_urls.trim().is_empty() {
        tracing::warn!(
            "-debuginfod: DEBUGINFOD_URLS is not set, so no debuginfod server is asked; set it to the servers' URLs              (space separated) or name a server with -symbol-server URL"
        );
    }
    if args.symbol_servers.is_empty() && debuginfod_urls.trim().is_empty() {
        return Ok(None);
    }
    let cache = SymbolServers::default_cache_dir()
        .context("symbol servers need a cache folder: set XDG_CACHE_HOME or HOME to an absolute path")?;
    let timeout = Duration::from_secs_f64(args.symbol_timeout);
    let servers = SymbolServers::new(&args.symbol_servers, cache, timeout)?.with_debuginfod_urls(&debuginfod_urls);
    Ok(Some(Arc::new(servers)))
}
