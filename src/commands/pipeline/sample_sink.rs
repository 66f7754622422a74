//! Each named sample, as the symbolizer hands it over, goes through the report stage ([`ProfileBuilder`]) and its
//! perf script text into chunks for the writer thread (no sample is kept).

use crate::repeats::Span;
use crate::report::profile::{Profile, ProfileBuilder, ReportOptions};
use crate::report::script::StackText;
use crate::symbolize::ResolvedSample;
use anyhow::{bail, Result};
use rustc_hash::FxHashMap;
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
    /// Bytes of the stack texts in `stacks`: what the chunk keeps in memory.
    stack_bytes: usize,
}

impl Chunk {
    fn clear(&mut self) {
        self.headers.clear();
        self.header_spans.clear();
        self.samples.clear();
        self.stacks.clear();
        self.stack_index.clear();
        self.len = 0;
        self.stack_bytes = 0;
    }

    /// Appends a sample whose header (`header_len` bytes, `header_spans` spans) was just appended.
    fn push(&mut self, header_len: usize, header_spans: usize, stack: &Arc<StackText>) {
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
        let (before, spans_before) = (chunk.headers.len(), chunk.header_spans.len());
        let Some(stack) = self.profile.add(sample, &mut chunk.headers, Some(&mut chunk.header_spans)) else {
            return Ok(());
        };
        chunk.push(chunk.headers.len() - before, chunk.header_spans.len() - spans_before, stack);
        if chunk.len >= CHUNK_BYTES || chunk.stack_bytes >= CHUNK_STACK_BYTES {
            self.send()?;
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
    pub fn finish(mut self) -> Result<Profile> {
        if !self.chunk.samples.is_empty() {
            self.send()?;
        }
        Ok(self.profile.finish())
    }
}
