//! Which samples and frames the outputs show: `-pid`/`-tid` filters, `-no-kernel`, `-strip-tiers`, and the
//! per-thread grouping of `-per-thread`.

use super::stacks::{PerStack, STACK_FRAMES_KEPT};
use crate::symbolize::{Frame, FrameKind, FrameName, ResolvedSample, Stack};
use rustc_hash::FxHashMap;
use std::sync::Arc;

/// A selection of samples and frames. The default shows everything unchanged.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct View {
    /// Keep only samples of this process (as recorded).
    pub pid: Option<u32>,
    /// Keep only samples of this thread.
    pub tid: Option<u32>,
    /// Drop kernel frames; a sample left without frames (it ran only in the kernel) is dropped too.
    pub no_kernel: bool,
    /// Drop a trailing JIT tier tag such as `[OptimizedTier1]` from symbols (see [`strip_tier`]), so the tiers of
    /// one method merge in perf_script.out and the top table. (Folded names already lose it when the name has an
    /// argument list, as stackcollapse-perf cuts everything from the `(`.)
    pub strip_tiers: bool,
}

impl View {
    /// Whether a sample passes the pid/tid filters.
    pub fn selects(&self, sample: &ResolvedSample) -> bool {
        self.pid.map_or(true, |pid| sample.pid == pid) && self.tid.map_or(true, |tid| sample.tid == tid)
    }
}

/// A [`View`] applied to samples one at a time (samples are streamed, not kept).
pub struct Viewer {
    view: View,
    /// Tier-stripped names by the address of the original, which is kept with them so that the address stays its
    /// own (`None`: nothing to strip). Frames named alike share their stripped name too: a sample's stack is
    /// stripped for every sample where it is not shared.
    stripped: FxHashMap<usize, (Arc<FrameName>, Option<Arc<FrameName>>)>,
    /// Shared stacks as the view shows them, by the id of the original (`None`: no frame left).
    stacks: PerStack<Option<Stack>>,
}

impl Viewer {
    pub fn new(view: View) -> Self {
        Viewer { view, stripped: FxHashMap::default(), stacks: PerStack::new(STACK_FRAMES_KEPT) }
    }

    /// Shows the sample as the view does (its frames as the view leaves them); false when the view leaves it out.
    pub fn apply(&mut self, sample: &mut ResolvedSample) -> bool {
        if !self.view.selects(sample) {
            return false;
        }
        if !self.view.no_kernel && !self.view.strip_tiers {
            return true;
        }
        let id = sample.frames.id();
        let shown = match self.stacks.get(id) {
            Some(shown) => shown.clone(),
            None => {
                let shown = self.frames(&sample.frames).map(|frames| match id {
                    0 => Stack::from(frames),
                    _ => Stack::shared(frames),
                });
                self.stacks.insert(id, shown.clone(), shown.as_ref().map_or(1, |s| s.len()));
                shown
            }
        };
        match shown {
            Some(frames) => {
                sample.frames = frames;
                true
            }
            None => false,
        }
    }

    /// The frames as the view shows them; `None` when none is left.
    fn frames(&mut self, frames: &[Frame]) -> Option<Vec<Frame>> {
        let mut frames = frames.to_vec();
        if self.view.no_kernel {
            frames.retain(|f| f.kind() != FrameKind::Kernel);
            if frames.is_empty() {
                return None;
            }
        }
        if self.view.strip_tiers {
            for frame in &mut frames {
                let name = frame.name();
                let (_, stripped) = self.stripped.entry(Arc::as_ptr(name) as usize).or_insert_with(|| {
                    let stripped = name.symbol.as_deref().and_then(|symbol| {
                        let bare = strip_tier(symbol);
                        let renamed = || FrameName { symbol: Some(bare.into()), ..FrameName::clone(name) };
                        (bare.len() != symbol.len()).then(|| Arc::new(renamed()))
                    });
                    (name.clone(), stripped)
                });
                if let Some(stripped) = stripped {
                    *frame = Frame::in_range(frame.addr, stripped, frame.id);
                }
            }
        }
        Some(frames)
    }
}

/// Tier tags the .NET runtime appends to perf-map names (`PerfMapShowOptimizationTiers`, on by default).
const TIERS: [&str; 9] = [
    "QuickJitted",
    "Optimized",
    "OptimizedTier1",
    "OptimizedTier1OSR",
    "MinOptJitted",
    "ReadyToRun",
    "PreJIT",
    // The cold part of a precompiled (ReadyToRun) method split by hot/cold splitting (.NET 8+).
    "PreJit-cold",
    "Unknown",
];

/// The name without a trailing `[Tier]` tag (`…::Fib(int32)[OptimizedTier1]` → `…::Fib(int32)`). Only one
/// trailing group of a known tier is removed (any `Instrumented…` tier counts); other brackets stay.
pub fn strip_tier(name: &str) -> &str {
    let Some(inner) = name.strip_suffix(']') else { return name };
    let Some(open) = inner.rfind('[') else { return name };
    let tier = &inner[open + 1..];
    let instrumented = tier.starts_with("Instrumented") && tier.bytes().all(|b| b.is_ascii_alphanumeric());
    let known = TIERS.contains(&tier) || instrumented;
    if known && open > 0 {
        &name[..open]
    } else {
        name
    }
}
