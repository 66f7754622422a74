//! SIGINT/SIGTERM while recording: the first one asks the loop to stop and still write everything; a second one
//! (say, Ctrl+C again because finishing hangs) ends the process at once. Outside a recording the signals act as
//! they would by default.

use anyhow::{Context, Result};
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::low_level;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::OnceLock;

static RECEIVED: AtomicUsize = AtomicUsize::new(0);
static RECORDING: AtomicBool = AtomicBool::new(false);
static INSTALLED: OnceLock<std::result::Result<(), String>> = OnceLock::new();

fn on_signal(sig: i32) {
    if !RECORDING.load(Ordering::SeqCst) || RECEIVED.load(Ordering::SeqCst) != 0 {
        let _ = low_level::emulate_default_handler(sig);
    }
    RECEIVED.store(sig as usize, Ordering::SeqCst);
}

/// Catches SIGINT/SIGTERM for the lifetime of one recording.
pub struct StopSignals(());

impl StopSignals {
    pub fn install() -> Result<Self> {
        let installed = INSTALLED.get_or_init(|| {
            for sig in [SIGINT, SIGTERM] {
                // SAFETY: the action only touches atomics and emulate_default_handler, all async-signal-safe.
                unsafe { low_level::register(sig, move || on_signal(sig)) }.map_err(|e| e.to_string())?;
            }
            Ok(())
        });
        installed.clone().map_err(anyhow::Error::msg).context("cannot install the SIGINT/SIGTERM handlers")?;
        RECEIVED.store(0, Ordering::SeqCst);
        RECORDING.store(true, Ordering::SeqCst);
        Ok(StopSignals(()))
    }

    /// The name of the signal that asked to stop, if one did.
    pub fn received(&self) -> Option<&'static str> {
        match RECEIVED.load(Ordering::SeqCst) {
            0 => None,
            s if s == SIGINT as usize => Some("SIGINT"),
            s if s == SIGTERM as usize => Some("SIGTERM"),
            _ => Some("a signal"),
        }
    }
}

impl Drop for StopSignals {
    fn drop(&mut self) {
        RECORDING.store(false, Ordering::SeqCst);
    }
}
