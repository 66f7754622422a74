//! Folded stacks (`folded_stacks.out`): one line per distinct stack, `root;frame;…;leaf count`, the thread name as
//! the root frame, sorted bytewise, as `perf script | inferno-collapse-perf` would produce from our
//! perf_script.out (see [`super::names`] for the naming rules and [`Weight`] for what the count counts).

use super::stacks::{FastMap, StackNamer};
use super::{names, Weight};
use crate::symbolize::{FrameKind, ResolvedSample};
use std::collections::HashMap;
use std::io::{self, Write};

/// Options for [`fold`].
#[derive(Debug, Clone, Default)]
pub struct FoldOptions {
    /// Fold only samples of this event (compared up to its first `:`). `None`: the first sample's event, which is
    /// what inferno-collapse-perf does so that different events never add up in one graph.
    pub event: Option<String>,
    /// What a sample adds to its stack's count. Must match the [`super::script::ScriptOptions::weight`] the
    /// perf_script.out was written with for the two files to agree.
    pub weight: Weight,
}

/// The folded stacks of a set of samples.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Folded {
    /// `(stack, count)`, stack = frame names joined by `;`, root first; sorted by stack, bytewise.
    stacks: Vec<(String, u64)>,
    kinds: HashMap<String, FrameKind>,
    total: u64,
    samples: u64,
    event: Option<String>,
}

impl Folded {
    /// The distinct stacks with their counts, sorted.
    pub fn stacks(&self) -> &[(String, u64)] {
        &self.stacks
    }

    /// The sum of all counts.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// How many samples went into the stacks.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// The event whose samples were folded (up to its first `:`), `None` when there were no samples.
    pub fn event(&self) -> Option<&str> {
        self.event.as_deref()
    }

    pub fn is_empty(&self) -> bool {
        self.stacks.is_empty()
    }

    /// The kind of code a frame name stands for; `None` for thread (root) names and unknown names.
    pub fn kind_of(&self, name: &str) -> Option<FrameKind> {
        self.kinds.get(name).copied()
    }

    /// Every frame name with the kind of code it stands for (thread names are not included).
    pub fn kinds(&self) -> impl Iterator<Item = (&str, FrameKind)> {
        self.kinds.iter().map(|(name, kind)| (name.as_str(), *kind))
    }

    /// Writes the folded file: `stack count` lines.
    pub fn write(&self, out: &mut impl Write) -> io::Result<()> {
        for (stack, count) in &self.stacks {
            writeln!(out, "{stack} {count}")?;
        }
        Ok(())
    }
}

/// Folds samples (any order; the result does not depend on it except for which event is "first").
pub fn fold<'a>(samples: impl IntoIterator<Item = &'a ResolvedSample>, opts: &FoldOptions) -> Folded {
    let mut namer = StackNamer::new();
    let mut counts: FastMap<Box<[u32]>, u64> = FastMap::default();
    let mut stack = Vec::with_capacity(64);
    let mut event: Option<String> =
        opts.event.as_deref().map(|e| names::event_key(&names::script_event(e)).to_string());
    let mut event_matches: FastMap<(usize, usize), bool> = FastMap::default();
    let mut folded_samples = 0u64;

    for sample in samples {
        let event_key = super::stacks::arc_identity(&sample.event);
        let matches = match event_matches.get(&event_key) {
            Some(&m) => m,
            None => {
                let printed = names::script_event(&sample.event);
                let key = names::event_key(&printed);
                let wanted = event.get_or_insert_with(|| key.to_string());
                let m = wanted == key;
                event_matches.insert(event_key, m);
                m
            }
        };
        if !matches || !namer.stack(sample, &mut stack) {
            continue;
        }
        let weight = match opts.weight {
            Weight::Period => sample.period,
            Weight::Samples => 1,
        };
        folded_samples += 1;
        match counts.get_mut(stack.as_slice()) {
            Some(count) => *count += weight,
            None => {
                counts.insert(stack.clone().into_boxed_slice(), weight);
            }
        }
    }

    let mut total = 0u64;
    let mut used = vec![false; namer.name_count()];
    let mut stacks: Vec<(String, u64)> = counts
        .into_iter()
        .map(|(ids, count)| {
            total += count;
            let mut line = String::with_capacity(ids.len() * 24);
            for (i, &id) in ids.iter().enumerate() {
                if i > 0 {
                    line.push(';');
                }
                line.push_str(namer.name(id));
                used[id as usize] = true;
            }
            (line, count)
        })
        .collect();
    stacks.sort_unstable_by(|a, b| a.0.cmp(&b.0));

    let kinds = (0..namer.name_count() as u32)
        .filter(|&id| used[id as usize])
        .filter_map(|id| namer.kind(id).map(|kind| (namer.name(id).to_string(), kind)))
        .collect();
    Folded { stacks, kinds, total, samples: folded_samples, event }
}
