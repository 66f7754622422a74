//! The report stage driven one sample at a time, as the pipeline streams them (no sample is kept): the view selects
//! and trims each sample, its stack is folded (for the whole recording and, with `-per-thread`, per thread) and its
//! perf script text rendered. Facts about every sample, before the view, are noted for metadata.txt and for the
//! error an empty selection gets.

use super::folded::{FoldOptions, Folded, Folder};
use super::script::{RenderedStack, ScriptOptions, ScriptWriter};
use super::view::{View, Viewer};
use super::Weight;
use crate::repeats::{RepeatedLine, Span};
use crate::symbolize::ResolvedSample;
use rustc_hash::FxHashMap;
use std::collections::BTreeMap;
use std::sync::Arc;

/// What the report shows and how it counts.
#[derive(Debug, Clone, Default)]
pub struct ReportOptions {
    pub view: View,
    pub weight: Weight,
    /// Also fold each thread's samples on their own (`folded_stacks.<tid>.out`, `flamegraph.<tid>.svg`).
    pub per_thread: bool,
}

/// Facts about every sample of the recording (before the view), for metadata.txt and error messages.
#[derive(Default)]
pub struct RecordingFacts {
    pub samples: u64,
    pub first_time: Option<u64>,
    pub last_time: u64,
    /// Samples and command name per process (unordered).
    pub per_pid: FxHashMap<u32, (u64, Arc<str>)>,
    /// Samples per (process, thread) (unordered).
    pub per_thread: FxHashMap<(u32, u32), u64>,
}

impl RecordingFacts {
    fn note(&mut self, s: &ResolvedSample) {
        self.samples += 1;
        self.first_time.get_or_insert(s.time);
        self.last_time = s.time;
        match self.per_pid.get_mut(&s.pid) {
            Some(entry) => entry.0 += 1,
            None => {
                self.per_pid.insert(s.pid, (1, s.comm.clone()));
            }
        }
        *self.per_thread.entry((s.pid, s.tid)).or_default() += 1;
    }
}

/// Takes samples one by one; [`finish`](Self::finish) gives the folded stacks.
pub struct ProfileBuilder {
    viewer: Viewer,
    script: ScriptWriter,
    folder: Folder,
    fold_opts: FoldOptions,
    /// `-per-thread`: a folder and the first command name per thread.
    threads: Option<BTreeMap<u32, (Folder, Arc<str>)>>,
    facts: RecordingFacts,
    shown: u64,
}

/// What every sample added up to.
pub struct Profile {
    pub folded: Folded,
    /// Per thread (with `-per-thread`), by thread id: its first command name and its folded stacks.
    pub threads: Vec<(u32, Arc<str>, Folded)>,
    pub facts: RecordingFacts,
    /// Samples the view showed.
    pub shown: u64,
}

impl ProfileBuilder {
    pub fn new(opts: &ReportOptions) -> Self {
        // Time-weighted profiles add their events up in one unit (a wall-clock profile: samples and switch-outs).
        let fold_opts = FoldOptions { event: None, weight: opts.weight, all_events: opts.weight == Weight::Time };
        ProfileBuilder {
            viewer: Viewer::new(opts.view.clone()),
            script: ScriptWriter::new(&ScriptOptions { weight: opts.weight }),
            folder: Folder::new(&fold_opts),
            fold_opts,
            threads: opts.per_thread.then(BTreeMap::new),
            facts: RecordingFacts::default(),
            shown: 0,
        }
    }

    /// Adds a sample. When the view shows it, its perf script text is appended to `text`: its header line
    /// (described by `spans`), then, unless the stack's text is shared by the samples of a stack, its stack's lines
    /// (described by `lines`): see [`RenderedStack`].
    pub fn add(
        &mut self,
        sample: &mut ResolvedSample,
        text: &mut Vec<u8>,
        spans: Option<&mut Vec<Span>>,
        lines: &mut Vec<RepeatedLine>,
    ) -> Option<RenderedStack<'_>> {
        self.facts.note(sample);
        if !self.viewer.apply(sample) {
            return None;
        }
        self.shown += 1;
        self.folder.add(sample);
        if let Some(threads) = &mut self.threads {
            let (folder, _) = threads.entry(sample.tid).or_insert_with(|| {
                // Every thread's graph shows the event of the whole graph.
                let opts = FoldOptions { event: self.folder.event().map(str::to_string), ..self.fold_opts.clone() };
                (Folder::new(&opts), sample.comm.clone())
            });
            folder.add(sample);
        }
        Some(self.script.render(sample, text, spans, lines))
    }

    pub fn finish(self) -> Profile {
        let threads = self
            .threads
            .unwrap_or_default()
            .into_iter()
            .map(|(tid, (folder, comm))| (tid, comm, folder.finish()))
            .collect();
        Profile { folded: self.folder.finish(), threads, facts: self.facts, shown: self.shown }
    }
}
