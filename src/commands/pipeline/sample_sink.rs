//! What happens to each named sample, as the symbolizer hands it over (no sample is kept): the view selects and
//! trims it, the perf script text is rendered into chunks for the writer thread, and the stacks are folded (for
//! the whole recording and, with `-per-thread`, per thread). Also notes the facts metadata.txt and the error for an
//! empty selection need.

use crate::repeats::Span;
use crate::report::folded::{FoldOptions, Folded, Folder};
use crate::report::script::{ScriptOptions, ScriptWriter, StackText};
use crate::report::view::Viewer;
use crate::symbolize::ResolvedSample;
use anyhow::{bail, Result};
use rustc_hash::FxHashMap;
use std::collections::BTreeMap;
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::Arc;

/// Rendered script text: samples' header lines, each followed by its stack's text (shared between the samples of
/// a stack, not copied).
#[derive(Default)]
pub struct Chunk {
    /// The header lines, one after the other, and the spans that describe them.
    pub headers: Vec<u8>,
    pub header_spans: Vec<Span>,
    /// Per sample: its header's length in bytes and in spans, and its stack's text (an index in `stacks`).
    pub samples: Vec<(u32, u32, u32)>,
    /// The stack texts of the chunk's samples, each once (one reference per chunk, not per sample).
    pub stacks: Vec<Arc<StackText>>,
    /// Where each stack text is in `stacks`, by its address.
    stack_index: FxHashMap<usize, u32>,
    /// Bytes of text in all.
    pub len: usize,
}

impl Chunk {
    fn clear(&mut self) {
        self.headers.clear();
        self.header_spans.clear();
        self.samples.clear();
        self.stacks.clear();
        self.stack_index.clear();
        self.len = 0;
    }

    /// Appends a sample whose header (`header_len` bytes, `header_spans` spans) was just appended.
    fn push(&mut self, header_len: usize, header_spans: usize, stack: &Arc<StackText>) {
        let key = Arc::as_ptr(stack) as usize;
        let index = match self.stack_index.get(&key) {
            Some(&i) => i,
            None => {
                let i = self.stacks.len() as u32;
                self.stacks.push(stack.clone());
                self.stack_index.insert(key, i);
                i
            }
        };
        self.len += header_len + stack.text.len();
        self.samples.push((header_len as u32, header_spans as u32, index));
    }

    /// Each sample's header (with its spans) and stack text, in order.
    pub fn samples(&self) -> impl Iterator<Item = (&[u8], &[Span], &StackText)> {
        let (mut at, mut span_at) = (0usize, 0usize);
        self.samples.iter().map(move |(len, spans, stack)| {
            let (len, spans) = (*len as usize, *spans as usize);
            let header = (&self.headers[at..at + len], &self.header_spans[span_at..span_at + spans]);
            at += len;
            span_at += spans;
            (header.0, header.1, &*self.stacks[*stack as usize])
        })
    }
}

/// Big enough that writing and compressing a chunk costs far more than handing it over.
const CHUNK_BYTES: usize = 1 << 20;

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

pub struct SampleSink {
    viewer: Viewer,
    script: ScriptWriter,
    chunk: Chunk,
    to_writer: SyncSender<Chunk>,
    /// Chunks the writer is done with, to be filled again (saves allocating and faulting in fresh buffers).
    recycled: Receiver<Chunk>,
    folder: Folder,
    fold_opts: FoldOptions,
    /// `-per-thread`: a folder and the first command name per thread.
    threads: Option<BTreeMap<u32, (Folder, Arc<str>)>>,
    pub facts: RecordingFacts,
    pub shown: u64,
}

/// What the stream produced once every sample went through.
pub struct Streamed {
    pub folded: Folded,
    pub threads: Vec<(u32, Arc<str>, Folded)>,
    pub facts: RecordingFacts,
    pub shown: u64,
}

impl SampleSink {
    pub fn new(
        viewer: Viewer,
        script: &ScriptOptions,
        fold: &FoldOptions,
        per_thread: bool,
        to_writer: SyncSender<Chunk>,
        recycled: Receiver<Chunk>,
    ) -> Self {
        SampleSink {
            viewer,
            script: ScriptWriter::new(script),
            chunk: Chunk::default(),
            to_writer,
            recycled,
            folder: Folder::new(fold),
            fold_opts: fold.clone(),
            threads: per_thread.then(BTreeMap::new),
            facts: RecordingFacts::default(),
            shown: 0,
        }
    }

    pub fn take(&mut self, sample: ResolvedSample) -> Result<()> {
        self.facts.note(&sample);
        let Some(sample) = self.viewer.apply(sample) else { return Ok(()) };
        self.shown += 1;
        let chunk = &mut self.chunk;
        let (before, spans_before) = (chunk.headers.len(), chunk.header_spans.len());
        let stack = self.script.render(&sample, &mut chunk.headers, Some(&mut chunk.header_spans));
        chunk.push(chunk.headers.len() - before, chunk.header_spans.len() - spans_before, stack);
        if chunk.len >= CHUNK_BYTES {
            self.send()?;
        }
        self.folder.add(&sample);
        if let Some(threads) = &mut self.threads {
            let (folder, _) = threads.entry(sample.tid).or_insert_with(|| {
                // Every thread's graph shows the event of the whole graph.
                let opts = FoldOptions { event: self.folder.event().map(str::to_string), ..self.fold_opts.clone() };
                (Folder::new(&opts), sample.comm.clone())
            });
            folder.add(&sample);
        }
        Ok(())
    }

    fn send(&mut self) -> Result<()> {
        let mut next = self.recycled.try_recv().unwrap_or_default();
        next.clear();
        let full = std::mem::replace(&mut self.chunk, next);
        if self.to_writer.send(full).is_err() {
            // The writer stopped on an error; it reports it when joined.
            bail!("the perf script writer stopped");
        }
        Ok(())
    }

    /// Hands over the last chunk; the writer ends when the sender is dropped here.
    pub fn finish(mut self) -> Result<Streamed> {
        if !self.chunk.samples.is_empty() {
            self.send()?;
        }
        let threads = self
            .threads
            .take()
            .unwrap_or_default()
            .into_iter()
            .map(|(tid, (folder, comm))| (tid, comm, folder.finish()))
            .collect();
        Ok(Streamed { folded: self.folder.finish(), threads, facts: self.facts, shown: self.shown })
    }
}
