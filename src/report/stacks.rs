//! Turns samples into stacks of interned folded-name ids (root first), the shared core of folding and the top
//! table. A profile repeats the same few thousand frames hundreds of thousands of times, so each distinct frame is
//! named once (keyed by the identity of its `Arc<str>` symbol and module, which the symbolizer shares between
//! frames) and every later occurrence costs one hash lookup. The namer keeps a reference to every `Arc` it keyed
//! on, so an identity cannot be reused by another string while it is in use, even when samples are streamed and
//! dropped one by one.

use super::names;
use crate::symbolize::{Frame, FrameKind, ResolvedSample};
use rustc_hash::FxHashMap;
use std::sync::Arc;

/// How much per-stack work a stage keeps, in frames of the stacks it is kept for (at most several MB).
pub(crate) const STACK_FRAMES_KEPT: usize = 1 << 17;

/// Results worked out once per shared stack ([`crate::symbolize::Stack::id`]), within a budget: when full it
/// starts over, so a profile of few distinct stacks stays cached whole and one of many costs no more than the
/// budget. Unshared stacks (id 0) are never cached.
pub(crate) struct PerStack<V> {
    map: FxHashMap<u64, V>,
    used: usize,
    budget: usize,
}

impl<V> PerStack<V> {
    /// `budget` in the units of the costs given to [`insert`](Self::insert).
    pub(crate) fn new(budget: usize) -> Self {
        PerStack { map: FxHashMap::default(), used: 0, budget }
    }

    pub(crate) fn get(&self, id: u64) -> Option<&V> {
        if id == 0 {
            return None;
        }
        self.map.get(&id)
    }

    pub(crate) fn insert(&mut self, id: u64, value: V, cost: usize) {
        if id == 0 {
            return;
        }
        self.start_over_when_full();
        self.used += cost;
        self.map.insert(id, value);
    }

    /// The value for `id`, made by `make` (with its cost) on first sight, in one lookup; `None` for id 0.
    pub(crate) fn get_or_insert_with(&mut self, id: u64, make: impl FnOnce() -> (V, usize)) -> Option<&V> {
        if id == 0 {
            return None;
        }
        self.start_over_when_full();
        match self.map.entry(id) {
            std::collections::hash_map::Entry::Occupied(e) => Some(e.into_mut()),
            std::collections::hash_map::Entry::Vacant(e) => {
                let (value, cost) = make();
                self.used += cost;
                Some(e.insert(value))
            }
        }
    }

    fn start_over_when_full(&mut self) {
        if self.used >= self.budget {
            self.map.clear();
            self.used = 0;
        }
    }
}

/// How many ids a [`ByFrameId`] table spans before it starts over: ids go to every address the symbolizer names
/// (two each, as leaf and as caller), tens of thousands in a large program; at most a few MB, allocated only as far
/// as the ids seen reach.
const FRAME_IDS_KEPT: usize = 1 << 18;

/// Values by [`Frame::id`], in front of a map by the frame's names: the symbolizer hands ids out one after the
/// other, so an id is an index in a table, not a key to hash (a lookup for every frame of every sample). In a long
/// collection ids are new each time the symbolizer names frames afresh (the JIT's files loaded again), so the table
/// starts over at the id it cannot hold: older ids are then looked up by names again.
pub(crate) struct ByFrameId<V> {
    first: u64,
    slots: Vec<Option<V>>,
}

impl<V> Default for ByFrameId<V> {
    fn default() -> Self {
        ByFrameId { first: 1, slots: Vec::new() }
    }
}

impl<V: Copy> ByFrameId<V> {
    /// The value for `id`; `None` for id 0 (no id).
    pub(crate) fn get(&self, id: u64) -> Option<V> {
        let index = usize::try_from(id.checked_sub(self.first)?).ok()?;
        *self.slots.get(index)?
    }

    pub(crate) fn insert(&mut self, id: u64, value: V) {
        if id < self.first {
            return;
        }
        let mut index = (id - self.first) as usize;
        if index >= FRAME_IDS_KEPT {
            self.slots.clear();
            self.first = id;
            index = 0;
        }
        if index >= self.slots.len() {
            self.slots.resize(index + 1, None);
        }
        self.slots[index] = Some(value);
    }

    pub(crate) fn clear(&mut self) {
        self.slots.clear();
    }
}

/// Identity of an `Arc<str>`: its address and length. Only valid while the `Arc` lives: keep a clone next to any
/// map keyed by it (see [`KeepAlive`]).
pub(crate) fn arc_identity(s: &Arc<str>) -> (usize, usize) {
    (Arc::as_ptr(s) as *const u8 as usize, s.len())
}

/// What a frame is called, by the identities of its shared names (valid while a [`KeepAlive`] holds them): frames
/// with the same key are spelled the same in every output.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct NameKey {
    symbol: (usize, usize),
    module: (usize, usize),
    /// Only part of the name for frames without a symbol.
    unnamed_offset: u64,
}

impl NameKey {
    pub(crate) fn of(frame: &Frame) -> NameKey {
        NameKey {
            symbol: frame.shared_symbol().map(arc_identity).unwrap_or((0, 0)),
            module: arc_identity(frame.shared_module()),
            unnamed_offset: if names::is_named(frame) { 0 } else { frame.offset() },
        }
    }
}

#[derive(PartialEq, Eq, Hash)]
struct FrameKey {
    name: NameKey,
    java_thread: bool,
}

/// A sample's root frame (its thread name).
#[derive(Clone, Copy)]
pub(crate) struct Root {
    pub(crate) id: u32,
    java_thread: bool,
}

/// The `Arc<str>`s whose identities are map keys, held so that their addresses stay theirs.
#[derive(Default)]
pub(crate) struct KeepAlive(Vec<Arc<str>>);

impl KeepAlive {
    /// The identity of `s`, which stays valid as long as `self` does.
    pub(crate) fn identity(&mut self, s: &Arc<str>) -> (usize, usize) {
        self.0.push(s.clone());
        arc_identity(s)
    }
}

/// Names samples' stacks.
#[derive(Default)]
pub(crate) struct StackNamer {
    ids: FxHashMap<Box<str>, u32>,
    names: Vec<Box<str>>,
    /// The kind of the frame that first produced each name; `None` for thread (root) names.
    kinds: Vec<Option<FrameKind>>,
    frames: FxHashMap<FrameKey, (u32, u32)>,
    /// The same by [`Frame::id`] (and whether the thread is a Java thread in its lowest bit).
    frames_by_id: ByFrameId<(u32, u32)>,
    frame_ids: Vec<u32>,
    roots: FxHashMap<(usize, usize), Root>,
    keep: KeepAlive,
    scratch: Vec<String>,
}

impl StackNamer {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    pub(crate) fn name(&self, id: u32) -> &str {
        &self.names[id as usize]
    }

    pub(crate) fn kind(&self, id: u32) -> Option<FrameKind> {
        self.kinds[id as usize]
    }

    pub(crate) fn name_count(&self) -> usize {
        self.names.len()
    }

    /// Every name, by id.
    pub(crate) fn names(&self) -> &[Box<str>] {
        &self.names
    }

    pub(crate) fn into_names(self) -> Vec<Box<str>> {
        self.names
    }

    /// Fills `stack` with the sample's folded stack, root (thread name) first. Returns false when no frame is
    /// left (an empty callchain, or only frames stackcollapse-perf drops): such a sample has no folded line.
    pub(crate) fn stack(&mut self, sample: &ResolvedSample, root: Root, stack: &mut Vec<u32>) -> bool {
        stack.clear();
        stack.push(root.id);
        for frame in sample.frames.iter().rev() {
            let (start, len) = self.frame(frame, root.java_thread);
            stack.extend_from_slice(&self.frame_ids[start as usize..(start + len) as usize]);
        }
        stack.len() > 1
    }

    /// The sample's root frame, which [`stack`](Self::stack) starts with.
    pub(crate) fn root(&mut self, sample: &ResolvedSample) -> Root {
        if let Some(root) = self.roots.get(&arc_identity(&sample.comm)) {
            return *root;
        }
        if sample.comm.trim().is_empty() {
            // Spelled after the tid, so not cacheable by the (shared) empty name.
            return self.make_root(&sample.comm, sample.tid);
        }
        let root = self.make_root(&sample.comm, sample.tid);
        let key = self.keep.identity(&sample.comm);
        self.roots.insert(key, root);
        root
    }

    fn make_root(&mut self, comm: &str, tid: u32) -> Root {
        let root = names::folded_root(&names::script_comm(comm, tid));
        let java_thread = names::is_java_thread(&root);
        Root { id: self.intern(&root, None), java_thread }
    }

    /// The innermost folded name of one of a sample's frames (a frame can fold into several names).
    pub(crate) fn innermost_name(&mut self, frame: &Frame, root: Root) -> u32 {
        let (start, len) = self.frame(frame, root.java_thread);
        match len {
            0 => root.id,
            _ => self.frame_ids[(start + len - 1) as usize],
        }
    }

    fn frame(&mut self, frame: &Frame, java_thread: bool) -> (u32, u32) {
        if frame.id == 0 {
            return self.frame_by_key(frame, java_thread);
        }
        let by_id = frame.id << 1 | java_thread as u64;
        if let Some(range) = self.frames_by_id.get(by_id) {
            return range;
        }
        let range = self.frame_by_key(frame, java_thread);
        self.frames_by_id.insert(by_id, range);
        range
    }

    fn frame_by_key(&mut self, frame: &Frame, java_thread: bool) -> (u32, u32) {
        let key = FrameKey { name: NameKey::of(frame), java_thread };
        if let Some(range) = self.frames.get(&key) {
            return *range;
        }
        let label = names::frame_label(frame);
        let module = names::script_module(frame.module());
        let mut pieces = std::mem::take(&mut self.scratch);
        pieces.clear();
        names::push_folded_names(&label, &module, java_thread, &mut pieces);
        let start = self.frame_ids.len() as u32;
        for piece in &pieces {
            let id = self.intern(piece, Some(frame.kind()));
            self.frame_ids.push(id);
        }
        self.scratch = pieces;
        let range = (start, self.frame_ids.len() as u32 - start);
        if let Some(symbol) = frame.shared_symbol() {
            self.keep.identity(symbol);
        }
        self.keep.identity(frame.shared_module());
        self.frames.insert(key, range);
        range
    }

    fn intern(&mut self, name: &str, kind: Option<FrameKind>) -> u32 {
        if let Some(&id) = self.ids.get(name) {
            return id;
        }
        let id = self.names.len() as u32;
        self.names.push(name.into());
        self.kinds.push(kind);
        self.ids.insert(name.into(), id);
        id
    }
}

/// Picks the samples of one event the way inferno-collapse-perf does: the given event, else the first sample's
/// (compared up to the first `:` of the printed name).
pub(crate) struct EventFilter {
    wanted: Option<String>,
    seen: FxHashMap<(usize, usize), bool>,
    keep: KeepAlive,
    all: bool,
}

impl EventFilter {
    pub(crate) fn new(event: Option<&str>) -> Self {
        let wanted = event.map(|e| names::event_key(&names::script_event(e)).to_string());
        EventFilter { wanted, seen: FxHashMap::default(), keep: KeepAlive::default(), all: false }
    }

    /// Lets every event through; [`event`](Self::event) is then the first sample's.
    pub(crate) fn all() -> Self {
        EventFilter { all: true, ..EventFilter::new(None) }
    }

    pub(crate) fn matches(&mut self, sample: &ResolvedSample) -> bool {
        if self.all {
            if self.wanted.is_none() {
                self.wanted = Some(names::event_key(&names::script_event(&sample.event)).to_string());
            }
            return true;
        }
        if let Some(&m) = self.seen.get(&arc_identity(&sample.event)) {
            return m;
        }
        let printed = names::script_event(&sample.event);
        let event = names::event_key(&printed);
        let m = self.wanted.get_or_insert_with(|| event.to_string()) == event;
        let key = self.keep.identity(&sample.event);
        self.seen.insert(key, m);
        m
    }

    /// The event kept, once one sample was seen (or one was given).
    pub(crate) fn event_ref(&self) -> Option<&str> {
        self.wanted.as_deref()
    }
}
