//! Where names may come from, as a caller of the symbolizer chooses: a capture's saved files, the live system,
//! extra debug-file folders.

use super::symbol_server::SymbolServers;
use crate::fs::Dir;
use std::path::PathBuf;
use std::sync::Arc;

/// Where names may come from.
#[derive(Debug, Clone, Default)]
pub struct SymbolizeOptions {
    /// A `symbols/` directory written by a capture, opened once; its copies are preferred over anything live.
    pub captured_dir: Option<Dir>,
    /// Whether the running system may be read: `/proc/<pid>/…`, the mapped files, `/proc/kallsyms`. Off for a
    /// fully offline run (then only `captured_dir` names frames).
    pub live: bool,
    /// Extra roots searched for split debug files like `/usr/lib/debug` (`-symbols DIR`).
    pub debug_roots: Vec<PathBuf>,
    /// Trust perf maps and jitdumps whatever their owner.
    pub force_maps: bool,
    /// Symbol servers to fetch missing debug files from by build-id (`-symbol-server`); `None`: nothing is fetched.
    pub symbol_servers: Option<Arc<SymbolServers>>,
    /// Use only the kernel's frame-pointer callchains, not the stack copies samples may carry (to compare the two).
    pub ignore_stack_copies: bool,
}

impl SymbolizeOptions {
    /// Names from the running system (and `captured_dir` when given).
    pub fn live() -> Self {
        SymbolizeOptions { live: true, ..Default::default() }
    }

    /// Names only from a capture's `symbols/` directory.
    pub fn offline(captured_dir: Dir) -> Self {
        SymbolizeOptions { captured_dir: Some(captured_dir), live: false, ..Default::default() }
    }
}
