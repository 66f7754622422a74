//! Folded stacks (`folded_stacks.out`): one line per distinct stack, `root;frame;…;leaf count`, the thread name as
//! the root frame, sorted bytewise, as `perf script | inferno-collapse-perf` would produce from our
//! perf_script.out (see [`super::names`] for the naming rules and [`Weight`] for what the count counts).

use super::stacks::{EventFilter, PerStack, Root, StackNamer, STACK_FRAMES_KEPT};
use super::Weight;
use crate::symbolize::{FrameKind, ResolvedSample};
use rustc_hash::FxHashMap;
use std::collections::HashMap;
use std::io::{self, Write};

/// Options for [`Folder`].
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
    /// Every sample given to the [`Folder`], including those of other events and without a stack.
    input_samples: u64,
    /// Samples per leaf frame name (for the top table).
    leaves: Vec<(String, u64)>,
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

    /// Every sample given to the [`Folder`], folded or not.
    pub fn input_samples(&self) -> u64 {
        self.input_samples
    }

    /// How many folded samples had each frame name as their leaf (unordered).
    pub fn leaf_samples(&self) -> &[(String, u64)] {
        &self.leaves
    }

    /// The event whose samples were folded (up to its first `:`), `None` when there were no samples.
    pub fn event(&self) -> Option<&str> {
        self.event.as_deref()
    }

    pub fn is_empty(&self) -> bool {
        self.stacks.is_empty()
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

/// Folds samples one at a time (samples are streamed, not kept); the result does not depend on their order,
/// except for which event is "first".
pub struct Folder {
    weight: Weight,
    namer: StackNamer,
    /// Each distinct folded stack's slot, and by slot its count and leaf.
    slots: FxHashMap<Box<[u32]>, u32>,
    counts: Vec<u64>,
    leaves: Vec<u32>,
    /// The slot of a shared stack under each thread name (root id) it was seen with; `None`: no folded line.
    by_stack: PerStack<Vec<(u32, Option<u32>)>>,
    stack: Vec<u32>,
    filter: EventFilter,
    folded_samples: u64,
    input_samples: u64,
    leaf_samples: Vec<u64>,
}

impl Folder {
    pub fn new(opts: &FoldOptions) -> Self {
        Folder {
            weight: opts.weight,
            namer: StackNamer::new(),
            slots: FxHashMap::default(),
            counts: Vec::new(),
            leaves: Vec::new(),
            by_stack: PerStack::new(STACK_FRAMES_KEPT),
            stack: Vec::with_capacity(64),
            filter: EventFilter::new(opts.event.as_deref()),
            folded_samples: 0,
            input_samples: 0,
            leaf_samples: Vec::new(),
        }
    }

    pub fn add(&mut self, sample: &ResolvedSample) {
        self.input_samples += 1;
        if !self.filter.matches(sample) {
            return;
        }
        let root = self.namer.root(sample);
        let id = sample.frames.id();
        let known = self.by_stack.get(id).and_then(|roots| roots.iter().find(|(r, _)| *r == root.id));
        let slot = match known {
            Some(&(_, slot)) => slot,
            None => {
                let slot = self.slot(sample, root);
                let mut roots = self.by_stack.get(id).cloned().unwrap_or_default();
                roots.push((root.id, slot));
                self.by_stack.insert(id, roots, sample.frames.len());
                slot
            }
        };
        let Some(slot) = slot else { return };
        let leaf = self.leaves[slot as usize] as usize;
        self.counts[slot as usize] += match self.weight {
            Weight::Period => sample.period,
            Weight::Samples => 1,
        };
        if self.leaf_samples.len() <= leaf {
            self.leaf_samples.resize(leaf + 1, 0);
        }
        self.leaf_samples[leaf] += 1;
        self.folded_samples += 1;
    }

    /// The slot of the sample's folded stack (made on first sight); `None` when it has no folded line.
    fn slot(&mut self, sample: &ResolvedSample, root: Root) -> Option<u32> {
        if !self.namer.stack(sample, root, &mut self.stack) {
            return None;
        }
        if let Some(&slot) = self.slots.get(self.stack.as_slice()) {
            return Some(slot);
        }
        let slot = self.counts.len() as u32;
        self.slots.insert(self.stack.as_slice().into(), slot);
        self.counts.push(0);
        self.leaves.push(*self.stack.last().expect("a stack with frames"));
        Some(slot)
    }

    /// The event kept so far (the first sample's, unless one was given).
    pub fn event(&self) -> Option<&str> {
        self.filter.event_ref()
    }

    pub fn finish(self) -> Folded {
        let Folder { namer, slots, counts, filter, folded_samples, input_samples, leaf_samples, .. } = self;
        let mut total = 0u64;
        let mut used = vec![false; namer.name_count()];
        let mut stacks: Vec<(String, u64)> = slots
            .into_iter()
            .map(|(ids, slot)| {
                let count = counts[slot as usize];
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
        let leaves = leaf_samples
            .iter()
            .enumerate()
            .filter(|(_, &count)| count > 0)
            .map(|(id, &count)| (namer.name(id as u32).to_string(), count))
            .collect();
        Folded { stacks, kinds, total, samples: folded_samples, input_samples, leaves, event: filter.event() }
    }
}
