//! Each named sample, as the symbolizer hands it over, goes through the report stage ([`ProfileBuilder`]) and its
//! perf script text into chunks for the writer thread (no sample is kept).

use crate::repeats::{RepeatedLine, Span};
use crate::report::profile::{Profile, ProfileBuilder, ReportOptions};
use crate::report::script::{RenderedStack, StackText};
use crate::symbolize::ResolvedSample;
use anyhow::{bail, Result};
use rustc_hash::FxHashMap;
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::Arc;

/// Rendered script text: samples' header lines, each followed by its stack's text: its own, in the same buffer, or
/// a stack's shared by its samples (not copied).
#[derive(Default)]
pub struct Chunk {
    /// The header lines and the stacks' own texts, one after the other, and the spans that describe the headers
    /// and the lines of the own texts.
    text: Vec<u8>,
    header_spans: Vec<Span>,
    own_lines: Vec<RepeatedLine>,
    /// Per sample: its header's length in bytes and in spans, and its stack's text.
    samples: Vec<(u32, u32, StackAt)>,
    /// The shared stack texts of the chunk's samples, each once (one reference per chunk, not per sample).
    stacks: Vec<Arc<StackText>>,
    /// Where each stack text is in `stacks`, by its address.
    stack_index: FxHashMap<usize, u32>,
    /// Bytes of text in all.
    pub len: usize,
    /// Bytes of stack text (own or shared) in `text` and `stacks`: what the chunk keeps in memory.
    stack_bytes: usize,
    /// Bytes of own stack text (stacks the symbolizer did not share).
    own_stack_bytes: usize,
}

/// Where a sample's stack text is in its [`Chunk`].
#[derive(Clone, Copy)]
enum StackAt {
    /// An index in `stacks`.
    Shared(u32),
    /// This many bytes after the header in `text`, and this many lines in `own_lines`.
    Own(u32, u32),
}

/// A sample's text in a [`Chunk`]: its header line and its stack's lines.
pub struct SampleText<'a> {
    pub header: &'a [u8],
    pub header_spans: &'a [Span],
    pub stack: &'a [u8],
    pub stack_lines: &'a [RepeatedLine],
}

impl Chunk {
    fn clear(&mut self) {
        self.text.clear();
        self.header_spans.clear();
        self.own_lines.clear();
        self.samples.clear();
        self.stacks.clear();
        self.stack_index.clear();
        self.len = 0;
        self.stack_bytes = 0;
        self.own_stack_bytes = 0;
    }

    /// Whether most of its text is stacks the symbolizer did not share: stacks that seldom repeat whole.
    pub fn mostly_unshared_stacks(&self) -> bool {
        self.own_stack_bytes * 2 > self.len
    }

    /// How far its text, spans and own lines go: where the next sample's begin.
    fn mark(&self) -> (usize, usize, usize) {
        (self.text.len(), self.header_spans.len(), self.own_lines.len())
    }

    /// Appends a sample whose text, spans and own lines were just appended after `before` (a [`mark`](Self::mark)),
    /// and whose stack text is `stack`.
    fn push(&mut self, before: (usize, usize, usize), stack: RenderedStack) {
        let (len, header_spans) = (self.text.len() - before.0, self.header_spans.len() - before.1);
        let own_lines = self.own_lines.len() - before.2;
        let (header_len, at) = match stack {
            RenderedStack::Appended(own) => {
                self.stack_bytes += own;
                self.own_stack_bytes += own;
                (len - own, StackAt::Own(own as u32, own_lines as u32))
            }
            RenderedStack::Shared(stack) => {
                let key = Arc::as_ptr(stack) as usize;
                let index = match self.stack_index.get(&key) {
                    Some(&i) => i,
                    None => {
                        let i = self.stacks.len() as u32;
                        self.stack_bytes += stack.text.len();
                        self.stacks.push(stack.clone());
                        self.stack_index.insert(key, i);
                        i
                    }
                };
                self.len += stack.text.len();
                (len, StackAt::Shared(index))
            }
        };
        self.len += len;
        self.samples.push((header_len as u32, header_spans as u32, at));
    }

    /// The chunk's text in order, in as few pieces as it is kept in: each run of header lines and own stack texts
    /// is one, each shared stack text another.
    pub fn pieces<'a>(&'a self, out: &mut Vec<std::io::IoSlice<'a>>) {
        let (mut run, mut at) = (0usize, 0usize);
        for &(len, _, stack) in &self.samples {
            at += len as usize;
            match stack {
                StackAt::Own(len, _) => at += len as usize,
                StackAt::Shared(i) => {
                    out.push(std::io::IoSlice::new(&self.text[run..at]));
                    out.push(std::io::IoSlice::new(&self.stacks[i as usize].text));
                    run = at;
                }
            }
        }
        if run < at {
            out.push(std::io::IoSlice::new(&self.text[run..at]));
        }
    }

    /// Each sample's text, in order.
    pub fn samples(&self) -> impl Iterator<Item = SampleText<'_>> {
        let (mut at, mut span_at, mut line_at) = (0usize, 0usize, 0usize);
        self.samples.iter().map(move |&(len, spans, stack)| {
            let (len, spans) = (len as usize, spans as usize);
            let header = &self.text[at..at + len];
            let header_spans = &self.header_spans[span_at..span_at + spans];
            at += len;
            span_at += spans;
            let (stack, stack_lines) = match stack {
                StackAt::Shared(i) => {
                    let stack = &*self.stacks[i as usize];
                    (&stack.text[..], &stack.lines[..])
                }
                StackAt::Own(len, lines) => {
                    let (len, lines) = (len as usize, lines as usize);
                    let own = (&self.text[at..at + len], &self.own_lines[line_at..line_at + lines]);
                    at += len;
                    line_at += lines;
                    own
                }
            };
            SampleText { header, header_spans, stack, stack_lines }
        })
    }
}

/// Big enough that writing and compressing a chunk costs far more than handing it over (256 KB chunks of a profile
/// of repeated stacks took a quarter longer).
const CHUNK_BYTES: usize = 1 << 20;

/// The most bytes of stack text a chunk keeps: where nearly every stack is distinct, each sample's text is its own,
/// and up to nine chunks are in flight.
const CHUNK_STACK_BYTES: usize = 128 << 10;

pub struct SampleSink {
    profile: ProfileBuilder,
    chunk: Chunk,
    to_writer: SyncSender<Chunk>,
    /// Chunks the writer is done with, to be filled again (saves allocating and faulting in fresh buffers).
    recycled: Receiver<Chunk>,
}

impl SampleSink {
    pub fn new(opts: &ReportOptions, to_writer: SyncSender<Chunk>, recycled: Receiver<Chunk>) -> Self {
        SampleSink { profile: ProfileBuilder::new(opts), chunk: Chunk::default(), to_writer, recycled }
    }

    pub fn take(&mut self, sample: &mut ResolvedSample) -> Result<()> {
        let chunk = &mut self.chunk;
        let before = chunk.mark();
        let Some(stack) =
            self.profile.add(sample, &mut chunk.text, Some(&mut chunk.header_spans), &mut chunk.own_lines)
        else {
            return Ok(());
        };
        chunk.push(before, stack);
        if chunk.len >= CHUNK_BYTES || chunk.stack_bytes >= CHUNK_STACK_BYTES {
            self.send()?;
        }
        Ok(())
    }

    fn send(&mut self) -> Result<()> {
        let mut next = self.recycled.try_recv().unwrap_or_default();
        next.clear();
        let full = std::mem::replace(&mut self.chunk, next);
        if super::handoff::send(&self.to_writer, full).is_err() {
            // The writer stopped on an error; it reports it when joined.
            bail!("the perf script writer stopped");
        }
        Ok(())
    }

    /// Hands over the last chunk; the writer ends when the sender is dropped here.
    pub fn finish(mut self) -> Result<Profile> {
        if !self.chunk.samples.is_empty() {
            self.send()?;
        }
        Ok(self.profile.finish())
    }
}
