//! Folded stacks (`folded_stacks.out`): one line per distinct stack, `root;frame;…;leaf count`, the thread name as
//! the root frame, sorted bytewise, as `perf script | inferno-collapse-perf` would produce from our
//! perf_script.out (see [`super::names`] for the naming rules and [`Weight`] for what the count counts).

use super::script::{push_decimal, Pad};
use super::stacks::{EventFilter, PerStack, Root, StackNamer, STACK_FRAMES_KEPT};
use super::Weight;
use crate::repeats::Echo;
use crate::symbolize::{Frame, FrameKind, OffCpuState, ResolvedSample};
use rustc_hash::{FxBuildHasher, FxHashMap};
use std::collections::{HashMap, HashSet};
use std::hash::BuildHasher;

/// Options for [`Folder`].
#[derive(Debug, Clone, Default)]
pub struct FoldOptions {
    /// Fold only samples of this event (compared up to its first `:`). `None`: the first sample's event, which is
    /// what inferno-collapse-perf does so that different events never add up in one graph.
    pub event: Option<String>,
    /// Fold every event (a wall-clock profile adds on-CPU samples and switch-outs, both weighted in time).
    pub all_events: bool,
    /// What a sample adds to its stack's count. Must match the [`super::script::ScriptOptions::weight`] the
    /// perf_script.out was written with for the two files to agree.
    pub weight: Weight,
}

/// The folded stacks of a set of samples.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Folded {
    /// Every name a stack may use, by id.
    names: Vec<Box<str>>,
    /// Each distinct stack, sorted by its text (the names joined by `;`) bytewise, and its count. Kept in that
    /// order, one after the other, so that what goes through them in it (the folded file, the flame graph) reads
    /// memory in order: in the order they were added, nearly every stack of a large profile was a wait for memory.
    stacks: StackList,
    counts: Vec<u64>,
    kinds: HashMap<String, FrameKind>,
    total: u64,
    samples: u64,
    /// Every sample given to the [`Folder`], including those of other events and without a stack.
    input_samples: u64,
    /// Samples per leaf frame name (for the top table).
    leaves: Vec<(String, u64)>,
    /// With [`Weight::Time`]: the time by where it went (for the top table).
    time_by_frame: Vec<TimeByFrame>,
    /// With [`Weight::Time`]: the frame names whose time is mostly off the CPU (drawn in cold colours).
    off_cpu_names: HashSet<String>,
}

/// One of [`Folded`]'s stacks: its names, root first.
#[derive(Clone, Copy)]
pub struct FoldedStack<'a> {
    names: &'a [Box<str>],
    ids: &'a [u32],
}

impl<'a> FoldedStack<'a> {
    /// Each frame's name id, root first (the same id is the same name).
    pub fn ids(&self) -> &'a [u32] {
        self.ids
    }

    pub fn name(&self, id: u32) -> &'a str {
        &self.names[id as usize]
    }
}

/// Its text: the names joined by `;`.
impl std::fmt::Display for FoldedStack<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, &id) in self.ids.iter().enumerate() {
            if i > 0 {
                f.write_str(";")?;
            }
            f.write_str(self.name(id))?;
        }
        Ok(())
    }
}

/// Appends a folded line's count: a space and the number.
pub(super) fn push_count(out: &mut Vec<u8>, count: u64) {
    out.push(b' ');
    push_decimal(out, count, 0, Pad::After);
}

/// Each name's place in the order of the texts a stack's frame can show: the name alone (the stack ends with it)
/// and the name followed by `;` (the stack goes on). Names hold no `;` ([`super::names`] turns it into `:`), so two
/// stacks' texts are in the order of these places at the first frame where the stacks differ, a name that begins
/// another (`f1`, `f12`) included: the order of the texts is found on numbers, without making the texts.
struct TextPlaces {
    /// By name id: its place (from 1) where its stack ends, and where it goes on; 0 is a stack that has ended.
    places: Vec<[u64; 2]>,
    /// Bits per place, and how many places fit in a `u64`.
    bits: u32,
    depth: usize,
}

impl TextPlaces {
    fn new(names: &[Box<str>]) -> Self {
        debug_assert!(!names.iter().any(|name| name.contains(';')), "folded names hold no ';'");
        let text = |&(id, goes_on): &(u32, bool)| names[id as usize].bytes().chain(goes_on.then_some(b';'));
        let mut texts: Vec<(u32, bool)> = (0..names.len() as u32).flat_map(|id| [(id, false), (id, true)]).collect();
        texts.sort_unstable_by(|a, b| text(a).cmp(text(b)));
        let mut places = vec![[0u64; 2]; names.len()];
        for (at, &(id, goes_on)) in texts.iter().enumerate() {
            places[id as usize][goes_on as usize] = at as u64 + 1;
        }
        let bits = u64::BITS - (texts.len() as u64 + 1).leading_zeros();
        TextPlaces { places, bits, depth: (u64::BITS / bits) as usize }
    }

    /// The places of a stack's frames `from` on, as many as fit, packed: stacks whose numbers differ are in the
    /// order of their numbers.
    fn key(&self, ids: &[u32], from: usize) -> u64 {
        (from..from + self.depth).fold(0u64, |key, d| {
            let place = ids.get(d).map_or(0, |&id| self.places[id as usize][usize::from(d + 1 < ids.len())]);
            key << self.bits | place
        })
    }
}

/// Time spent at one frame: on the CPU with it as the leaf, or off the CPU waiting in it (see [`waiting_frame`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimeByFrame {
    pub name: String,
    /// `None` on the CPU.
    pub state: Option<OffCpuState>,
    pub samples: u64,
    /// In the folded counts' unit.
    pub weight: u64,
}

/// The frame a switch-out's thread waited in, as the top table names the wait: the innermost frame of managed
/// (JIT or precompiled) code or of the program itself — not the kernel, libc's futex wrappers or a runtime library —
/// else the innermost user frame; for a kernel thread, the innermost kernel frame outside the scheduler.
pub fn waiting_frame(frames: &[Frame]) -> Option<&Frame> {
    let real = |f: &&Frame| f.addr != 0;
    let own_code = |f: &&Frame| match f.kind() {
        FrameKind::Jit => true,
        FrameKind::Native => !is_shared_library(f.module()),
        _ => false,
    };
    let scheduler = |f: &&Frame| {
        let name = f.symbol().unwrap_or("");
        ["schedule", "__schedule", "preempt_schedule", "io_schedule", "finish_task_switch"]
            .iter()
            .any(|s| name.starts_with(s))
    };
    frames
        .iter()
        .filter(real)
        .find(own_code)
        .or_else(|| frames.iter().filter(real).find(|f| f.kind() != FrameKind::Kernel))
        .or_else(|| frames.iter().filter(real).find(|f| !scheduler(f)))
        .or_else(|| frames.iter().find(real))
}

/// A shared library, or code the kernel maps into every process (`[vdso]`): not the program's own code.
fn is_shared_library(module: &str) -> bool {
    let name = module.rsplit('/').next().unwrap_or(module);
    name.ends_with(".so") || name.contains(".so.") || name.starts_with('[')
}

impl Folded {
    /// The distinct stacks with their counts, sorted by their text, bytewise.
    pub fn stacks(&self) -> impl ExactSizeIterator<Item = (FoldedStack<'_>, u64)> + '_ {
        self.stacks.iter().zip(&self.counts).map(|(ids, &count)| (FoldedStack { names: &self.names, ids }, count))
    }

    /// Every name a stack may use, by id.
    pub fn names(&self) -> &[Box<str>] {
        &self.names
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

    /// With [`Weight::Time`]: the time by frame and state (unordered).
    pub fn time_by_frame(&self) -> &[TimeByFrame] {
        &self.time_by_frame
    }

    /// Whether most of the time under this frame name was spent off the CPU (always false unless weighted by
    /// time). A flame graph colours by name, so a frame both kinds of stack have (`__schedule` caught on the CPU,
    /// a thread's start) takes the colour of most of its time.
    pub fn is_mostly_off_cpu(&self, name: &str) -> bool {
        self.off_cpu_names.contains(name)
    }

    pub fn is_empty(&self) -> bool {
        self.counts.is_empty()
    }

    /// Every frame name with the kind of code it stands for (thread names are not included).
    pub fn kinds(&self) -> impl Iterator<Item = (&str, FrameKind)> {
        self.kinds.iter().map(|(name, kind)| (name.as_str(), *kind))
    }

    /// The folded file's length in bytes: what [`write_in_pieces`](Self::write_in_pieces) writes.
    pub fn text_len(&self) -> u64 {
        let names: u64 = self.stacks.ids.iter().map(|&id| self.names[id as usize].len() as u64).sum();
        // The `;`s, a space, the count and the newline.
        let rest = |(ids, &count): (&[u32], &u64)| ids.len() as u64 + count.checked_ilog10().unwrap_or(0) as u64 + 2;
        names + self.stacks.iter().zip(&self.counts).map(rest).sum::<u64>()
    }

    /// Writes the folded file (`stack count` lines) in pieces of about `piece` bytes, so that it is never held whole:
    /// with nearly every stack distinct it is as large as the recording. With each piece come the [`Echo`]s of its
    /// lines (positions in the file): a line begins as the line before it does, up to the last frame they share
    /// (the lines are sorted), which a compressor can take as a repeat without looking for it.
    pub fn write_in_pieces<E>(
        &self,
        piece: usize,
        mut write: impl FnMut(&[u8], &[Echo]) -> Result<(), E>,
    ) -> Result<(), E> {
        let lens: Vec<u32> = self.names.iter().map(|name| name.len() as u32).collect();
        let mut out = Vec::with_capacity(piece + 4096);
        let mut echoes = Vec::new();
        // Where `out` starts in the file, and the line before: where it starts and its stack.
        let mut written = 0u64;
        let mut before: Option<(u64, FoldedStack)> = None;
        for (stack, count) in self.stacks() {
            let at = written + out.len() as u64;
            // The names this line shares with the one before, joined: copied from it while it is still in `out`.
            let mut copied = 0;
            if let Some((from, previous)) = before {
                let shared = previous.ids().iter().zip(stack.ids()).take_while(|(a, b)| a == b).count();
                // The names and the `;` after each but the last, and that one too where both lines go on.
                let names: u32 = stack.ids()[..shared].iter().map(|&id| lens[id as usize] + 1).sum();
                let both_go_on = shared < previous.ids().len() && shared < stack.ids().len();
                let len = names - u32::from(!both_go_on);
                if shared > 0 && len > 0 {
                    echoes.push(Echo { at, from, len });
                }
                if shared > 0 && from >= written {
                    let start = (from - written) as usize;
                    out.extend_from_within(start..start + names as usize - 1);
                    copied = shared;
                }
            }
            before = Some((at, stack));
            for (i, &id) in stack.ids().iter().enumerate().skip(copied) {
                if i > 0 {
                    out.push(b';');
                }
                out.extend_from_slice(self.names[id as usize].as_bytes());
            }
            push_count(&mut out, count);
            out.push(b'\n');
            if out.len() >= piece {
                write(&out, &echoes)?;
                written += out.len() as u64;
                out.clear();
                echoes.clear();
            }
        }
        match out.is_empty() {
            true => Ok(()),
            false => write(&out, &echoes),
        }
    }
}

#[cfg(test)]
impl Folded {
    /// A profile of just these stacks (ids of `names`, each stack once), sorted as a [`Folder`] sorts them.
    pub(crate) fn of_stacks(names: Vec<Box<str>>, stacks: Vec<(Box<[u32]>, u64)>) -> Folded {
        let mut slots = StackList::default();
        stacks.iter().for_each(|(stack, _)| slots.push(stack));
        let counts: Vec<u64> = stacks.iter().map(|(_, count)| *count).collect();
        let total = counts.iter().sum();
        let (stacks, counts) = slots.into_text_order(&names, &counts);
        Folded { names, stacks, counts, total, ..Folded::default() }
    }
}

/// How many stacks ahead of the one it copies [`StackList::into_text_order`] fetches a stack into the caches: read
/// in the order of their texts, the stacks are all over memory.
const COPY_PREFETCH_AHEAD: usize = 8;

/// Stacks of name ids one after the other in one array (not an allocation each), by slot: a [`Folder`]'s in the order
/// they were added, a [`Folded`]'s in the order of their texts.
#[derive(Debug, Clone, Default, PartialEq)]
struct StackList {
    ids: Vec<u32>,
    /// Where each slot's ids end (they begin where the slot before ends).
    ends: Vec<usize>,
}

impl StackList {
    fn get(&self, slot: u32) -> &[u32] {
        let slot = slot as usize;
        let start = slot.checked_sub(1).map_or(0, |before| self.ends[before]);
        &self.ids[start..self.ends[slot]]
    }

    fn push(&mut self, stack: &[u32]) {
        self.ids.extend_from_slice(stack);
        self.ends.push(self.ids.len());
    }

    /// Every stack by the order of their texts (names of `names`), in a new list, and `counts` (by slot) in the
    /// same order.
    fn into_text_order(self, names: &[Box<str>], counts: &[u64]) -> (StackList, Vec<u64>) {
        let places = TextPlaces::new(names);
        let mut slots: Vec<u32> = (0..counts.len() as u32).collect();
        let mut keyed = Vec::with_capacity(slots.len());
        self.sort_from(&places, &mut slots, 0, &mut keyed);
        let mut sorted = StackList { ids: Vec::with_capacity(self.ids.len()), ends: Vec::with_capacity(slots.len()) };
        for (i, &slot) in slots.iter().enumerate() {
            if let Some(&ahead) = slots.get(i + COPY_PREFETCH_AHEAD) {
                crate::prefetch::all(self.get(ahead));
            }
            sorted.push(self.get(slot));
        }
        (sorted, slots.iter().map(|&slot| counts[slot as usize]).collect())
    }

    /// Each stack's ids, by slot.
    fn iter(&self) -> impl ExactSizeIterator<Item = &[u32]> {
        (0..self.ends.len() as u32).map(|slot| self.get(slot))
    }

    /// Sorts stacks that are the same before frame `from` by a few frames at a time from there ([`TextPlaces::key`]),
    /// then each run of stacks that are the same there too by the frames after: each sort compares numbers, and a
    /// stack's frames are read once per few frames, however many frames all the stacks share.
    fn sort_from(&self, places: &TextPlaces, slots: &mut [u32], from: usize, keyed: &mut Vec<(u64, u32)>) {
        keyed.clear();
        keyed.extend(slots.iter().map(|&slot| (places.key(self.get(slot), from), slot)));
        keyed.sort_unstable();
        // Runs of more than one stack with the same number: the same frames there, and going on after them (two
        // stacks that end alike are the same stack, which a list does not hold twice).
        let next = from + places.depth;
        let goes_on = |at: usize| self.get(keyed[at].1).len() > next;
        let mut runs = Vec::new();
        let mut start = 0;
        for (i, (key, slot)) in keyed.iter().enumerate() {
            slots[i] = *slot;
            if *key != keyed[start].0 {
                runs.extend((i - start > 1 && goes_on(start)).then_some(start..i));
                start = i;
            }
        }
        runs.extend((keyed.len() - start > 1 && goes_on(start)).then_some(start..keyed.len()));
        for run in runs {
            self.sort_from(places, &mut slots[run], next, keyed);
        }
    }
}

/// Folds samples one at a time (samples are streamed, not kept); the result does not depend on their order,
/// except for which event is "first".
pub struct Folder {
    weight: Weight,
    namer: StackNamer,
    /// Each distinct folded stack's slot (found by the hash of its ids), its ids by slot, and by slot its count and
    /// leaf. The hashes are kept by slot, so that the index grows without hashing every stack again.
    slot_index: hashbrown::HashTable<u32>,
    slot_hashes: Vec<u64>,
    slots: StackList,
    counts: Vec<u64>,
    leaves: Vec<u32>,
    /// The slot of a shared stack under each thread name (root id) it was seen with; `None`: no folded line.
    by_stack: PerStack<Vec<(u32, Option<u32>)>>,
    stack: Vec<u32>,
    filter: EventFilter,
    folded_samples: u64,
    input_samples: u64,
    leaf_samples: Vec<u64>,
    /// With [`Weight::Time`], per slot: the weight of its on-CPU (0) and off-CPU (1) samples, and the name ids of
    /// the frame they are listed under in the top table.
    slot_time: Vec<[u64; 2]>,
    slot_labels: Vec<[Option<u32>; 2]>,
    /// Samples and weight by (name id, state: 0 on CPU, 1 blocked, 2 runnable).
    time_by_label: FxHashMap<(u32, u8), (u64, u64)>,
}

impl Folder {
    pub fn new(opts: &FoldOptions) -> Self {
        Folder {
            weight: opts.weight,
            namer: StackNamer::new(),
            slot_index: hashbrown::HashTable::new(),
            slot_hashes: Vec::new(),
            slots: StackList::default(),
            counts: Vec::new(),
            leaves: Vec::new(),
            by_stack: PerStack::new(STACK_FRAMES_KEPT),
            stack: Vec::with_capacity(64),
            filter: match opts.all_events {
                true => EventFilter::all(),
                false => EventFilter::new(opts.event.as_deref()),
            },
            folded_samples: 0,
            input_samples: 0,
            leaf_samples: Vec::new(),
            slot_time: Vec::new(),
            slot_labels: Vec::new(),
            time_by_label: FxHashMap::default(),
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
            // An unshared stack: nothing to remember it by.
            None if id == 0 => self.slot(sample, root),
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
        let weight = self.weight.of(sample);
        self.counts[slot as usize] = self.counts[slot as usize].saturating_add(weight);
        if self.leaf_samples.len() <= leaf {
            self.leaf_samples.resize(leaf + 1, 0);
        }
        self.leaf_samples[leaf] += 1;
        self.folded_samples += 1;
        if self.weight == Weight::Time {
            self.add_time(sample, root, slot as usize, weight);
        }
    }

    /// Notes where a time-weighted sample's time went: the leaf on the CPU, the waiting frame off it.
    fn add_time(&mut self, sample: &ResolvedSample, root: Root, slot: usize, weight: u64) {
        let off = sample.off_cpu.is_some() as usize;
        self.slot_time[slot][off] = self.slot_time[slot][off].saturating_add(weight);
        let label = match self.slot_labels[slot][off] {
            Some(label) => label,
            None => {
                let label = match sample.off_cpu {
                    None => Some(self.leaves[slot]),
                    Some(_) => waiting_frame(&sample.frames).map(|f| self.namer.innermost_name(f, root)),
                };
                let label = label.unwrap_or(self.leaves[slot]);
                self.slot_labels[slot][off] = Some(label);
                label
            }
        };
        let state = match sample.off_cpu {
            None => 0,
            Some(OffCpuState::Blocked) => 1,
            Some(OffCpuState::Runnable) => 2,
        };
        let entry = self.time_by_label.entry((label, state)).or_default();
        entry.0 += 1;
        entry.1 = entry.1.saturating_add(weight);
    }

    /// The slot of the sample's folded stack (made on first sight); `None` when it has no folded line.
    fn slot(&mut self, sample: &ResolvedSample, root: Root) -> Option<u32> {
        if !self.namer.stack(sample, root, &mut self.stack) {
            return None;
        }
        let stack = self.stack.as_slice();
        let hash = FxBuildHasher.hash_one(stack);
        let slots = &mut self.slots;
        if let Some(&slot) = self.slot_index.find(hash, |&slot| slots.get(slot) == stack) {
            return Some(slot);
        }
        let slot = self.counts.len() as u32;
        slots.push(stack);
        self.slot_hashes.push(hash);
        let hashes = &self.slot_hashes;
        self.slot_index.insert_unique(hash, slot, |&slot| hashes[slot as usize]);
        self.counts.push(0);
        self.leaves.push(*self.stack.last().expect("a stack with frames"));
        if self.weight == Weight::Time {
            self.slot_time.push([0, 0]);
            self.slot_labels.push([None, None]);
        }
        Some(slot)
    }

    /// The event kept so far (the first sample's, unless one was given).
    pub fn event(&self) -> Option<&str> {
        self.filter.event_ref()
    }

    pub fn finish(self) -> Folded {
        let Folder {
            weight,
            namer,
            slots,
            counts,
            filter: _,
            folded_samples,
            input_samples,
            leaf_samples,
            slot_time,
            time_by_label,
            ..
        } = self;
        let mut total = 0u64;
        let mut used = vec![false; namer.name_count()];
        // Per name, its time on and off the CPU (a name counts once per stack).
        let mut name_time = vec![[0u64; 2]; if weight == Weight::Time { namer.name_count() } else { 0 }];
        for (slot, &count) in counts.iter().enumerate() {
            total = total.saturating_add(count);
            let ids = slots.get(slot as u32);
            let time = slot_time.get(slot).copied();
            for (i, &id) in ids.iter().enumerate() {
                used[id as usize] = true;
                if let (Some(time), Some(total)) = (time, name_time.get_mut(id as usize)) {
                    if !ids[..i].contains(&id) {
                        total[0] = total[0].saturating_add(time[0]);
                        total[1] = total[1].saturating_add(time[1]);
                    }
                }
            }
        }
        let (stacks, counts) = slots.into_text_order(namer.names(), &counts);

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
        let time_by_frame = time_by_label
            .into_iter()
            .map(|((name, state), (samples, weight))| TimeByFrame {
                name: namer.name(name).to_string(),
                state: match state {
                    0 => None,
                    1 => Some(OffCpuState::Blocked),
                    _ => Some(OffCpuState::Runnable),
                },
                samples,
                weight,
            })
            .collect();
        let off_cpu_names = (0..name_time.len() as u32)
            .filter(|&id| namer.kind(id).is_some() && name_time[id as usize][1] > name_time[id as usize][0])
            .map(|id| namer.name(id).to_string())
            .collect();
        Folded {
            names: namer.into_names(),
            stacks,
            counts,
            kinds,
            total,
            samples: folded_samples,
            input_samples,
            leaves,
            time_by_frame,
            off_cpu_names,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Folded;

    /// Stacks of names that sort below and above `;`, and names that begin other names (`f1`, `f12`, `f1 2`): the
    /// order found from the ids is the order of the texts.
    #[test]
    fn stacks_are_in_the_order_of_their_texts() {
        let mut rng = crate::random_inputs::Rng::new(0x5eed);
        let chosen = ["f", "f1", "f12", "f1 2", "f(int)", "f.x", "f:x", "f<", "Main", "[k]", "é", "e"];
        for round in 0..400 {
            // Chosen names, then random ones from a few letters, many beginning others (each name once, as a
            // folder interns them).
            let names: Vec<Box<str>> = match round % 3 {
                0 => chosen.iter().map(|&n| n.into()).collect(),
                // None begins another.
                1 => ["a", "bb", "cx", "d(int)", "Main", "[k]", "é", "zz"].iter().map(|&n| n.into()).collect(),
                _ => {
                    let letters = ['f', '1', ' ', ':', '<', 'é'];
                    let random = (0..1 + rng.below(12))
                        .map(|_| (0..1 + rng.below(4)).map(|_| letters[rng.below(letters.len())]).collect::<String>());
                    let unique: std::collections::BTreeSet<String> = random.collect();
                    // Not in sorted order: the ids must not follow the order of the names.
                    unique.into_iter().rev().map(Box::from).collect()
                }
            };
            let mut stacks = std::collections::BTreeSet::new();
            // In half the rounds every stack begins with the same frames.
            let shared: Vec<u32> = (0..rng.below(2) * rng.below(3)).map(|_| rng.below(names.len()) as u32).collect();
            for _ in 0..1 + rng.below(60) {
                let depth = 1 + rng.below(5);
                let own = (0..depth).map(|_| rng.below(names.len()) as u32);
                stacks.insert(shared.iter().copied().chain(own).collect::<Box<[u32]>>());
            }
            let folded = Folded::of_stacks(names, stacks.into_iter().map(|s| (s, 1)).collect());
            let ours: Vec<String> = folded.stacks().map(|(stack, _)| stack.to_string()).collect();
            let mut texts = ours.clone();
            texts.sort();
            assert_eq!(ours, texts);
        }
    }
}
