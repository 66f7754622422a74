//! `perf_script.out`: the samples in the text layout of `perf script` (with callchains), which FlameScope,
//! PerfView, speedscope and the stackcollapse tools read:
//!
//! ```text
//! dotnet  1234/1240  [001]   512.000123:   10101010 cpu-clock:
//! \t    7f3a1c2b4d10 int64 [App] App::Fib(int32)[OptimizedTier1]+0x20 (/tmp/perf-1.map)
//! \t    7f3a1b000123 System.Private.CoreLib.dll+0x455d12+0x0 (/usr/share/dotnet/…/System.Private.CoreLib.dll)
//! \tffffffff8a2b3c4d __x64_sys_read+0x1d ([kernel.kallsyms])
//! (blank line)
//! ```
//!
//! Header: `comm pid/tid [cpu] seconds.microseconds: period event:` (the period as [`Weight`] counts it: perf's
//! period, or with [`Weight::Time`] the sample's time in µs; none with [`Weight::Samples`]), comm not padded, as perf prints it for samples with callchains. Then one line per frame, leaf first: tab,
//! address, `label+0x<offset>`, `(module)`. JIT frames carry the module the symbolizer gives them (perf's
//! `/tmp/perf-<pid>.map` for perf-map names). Frames without a symbol are printed with the label
//! `module+0x<offset>` and a `+0x0` symbol offset, so that readers which strip perf's symbol offset keep our label
//! (see [`super::names`]). Any text a reader could misparse is rewritten by [`super::names`].

use super::names;
use super::stacks::{arc_identity, ByFrameId, KeepAlive, NameKey, PerStack};
use super::Weight;
use crate::repeats::{Piece, RepeatedLine, RepeatedText, Span};
use crate::symbolize::{Frame, ResolvedSample};
use rustc_hash::{FxHashMap, FxHasher};
use std::hash::Hasher;
use std::sync::Arc;

/// Options for [`ScriptWriter`].
#[derive(Debug, Clone, Default)]
pub struct ScriptOptions {
    /// [`Weight::Period`] prints each sample's period (as perf does), so inferno-collapse-perf weights stacks by
    /// it; [`Weight::Time`] prints its time in µs instead; [`Weight::Samples`] leaves it out, so every sample counts
    /// 1.
    pub weight: Weight,
}

struct FrameText {
    label: Box<str>,
    module: Box<str>,
    named: bool,
}

/// Writes samples in `perf script` layout one at a time, remembering how each distinct frame, thread name and event
/// is spelled.
pub struct ScriptWriter {
    weight: Weight,
    comms: FxHashMap<(usize, usize), Box<str>>,
    events: FxHashMap<(usize, usize), (u32, Box<str>)>,
    keep: KeepAlive,
    stacks: PerStack<Arc<StackText>>,
    lines: LineWriter,
}

/// Where [`ScriptWriter::render`] put a sample's stack text.
pub enum RenderedStack<'a> {
    /// The stack's own text, shared by its samples (borrowed: cloning the `Arc` for every sample would make threads
    /// that read the text contend for its reference count).
    Shared(&'a Arc<StackText>),
    /// This many bytes after the header, and their lines appended to the lines given: a stack the symbolizer did
    /// not share is rendered for one sample, into the caller's buffers (no allocation of its own).
    Appended(usize),
}

/// Renders frame lines ([`StackText`]s), remembering how each distinct frame is spelled, each distinct line
/// (frame, address and offset) as it was rendered, and which ids lines and rests have.
#[derive(Default)]
struct LineWriter {
    frame_ids: FxHashMap<NameKey, u32>,
    frames: Vec<FrameText>,
    keep: KeepAlive,
    /// Each distinct line rendered (an index in `lines`), by its frame, address and offset; starts over with the
    /// ids.
    line_index: FxHashMap<(NameKey, u64, u64), u32>,
    /// The same by [`Frame::id`](crate::symbolize::Frame::id).
    line_by_id: ByFrameId<u32>,
    lines: Vec<RenderedLine>,
    /// Ids of rests by (line, the rest after it; 0: only the blank line).
    rest_ids: FxHashMap<(u64, u64), u64>,
    /// The last id handed out (0 is never one).
    last_piece_id: u64,
    /// A stack's line indices while its text is put together.
    scratch: Vec<u32>,
}

/// A frame line as it was rendered: its bytes, its id and its pieces.
struct RenderedLine {
    text: Box<[u8]>,
    line: RepeatedLine,
}

/// A stack's lines in perf script text, and the blank line that ends a sample: the same for every sample of the
/// stack (the header line is each sample's own). Its line pieces are the frame's label (`label+0x`) and module
/// (` (module)\n`), identified by the frame.
pub type StackText = RepeatedText;

/// Bytes of rendered stack text kept for reuse.
const STACK_TEXT_KEPT: usize = 8 << 20;

/// Line and rest ids kept before their tables start over.
const PIECE_IDS_KEPT: usize = 1 << 16;

/// Kinds of [`Span`] keys, mixed into the key so different kinds of pieces never share one.
const KEY_HEADER: u64 = 1;
const KEY_HEADER_END: u64 = 2;

fn span_key(kind: u64, values: &[u64]) -> u64 {
    let mut h = FxHasher::default();
    h.write_u64(kind);
    for &v in values {
        h.write_u64(v);
    }
    // 0 means "no key".
    h.finish() | 1
}

impl ScriptWriter {
    pub fn new(opts: &ScriptOptions) -> Self {
        ScriptWriter {
            weight: opts.weight,
            comms: FxHashMap::default(),
            events: FxHashMap::default(),
            keep: KeepAlive::default(),
            stacks: PerStack::new(STACK_TEXT_KEPT),
            lines: LineWriter::default(),
        }
    }

    /// Appends the sample's header line to `out` (and its spans to `spans`), then the rest of its text: the frame
    /// lines and the blank line, rendered once per shared stack, else appended to `out` (and its lines to `lines`).
    pub fn render(
        &mut self,
        sample: &ResolvedSample,
        out: &mut Vec<u8>,
        spans: Option<&mut Vec<Span>>,
        lines: &mut Vec<RepeatedLine>,
    ) -> RenderedStack<'_> {
        self.write_header(sample, out, spans);
        let id = sample.frames.id();
        if id == 0 {
            let before = out.len();
            self.lines.append_stack(&sample.frames, out, lines);
            return RenderedStack::Appended(out.len() - before);
        }
        let lines = &mut self.lines;
        let make = || {
            let stack = lines.stack_text(&sample.frames);
            let cost = stack.text.len() + stack.lines.len() * std::mem::size_of::<RepeatedLine>();
            (Arc::new(stack), cost)
        };
        RenderedStack::Shared(self.stacks.get_or_insert_with(id, make).expect("a shared stack has an id"))
    }

    fn write_header(&mut self, sample: &ResolvedSample, out: &mut Vec<u8>, spans: Option<&mut Vec<Span>>) {
        let mut cuts = Cuts { spans, mark: out.len() };
        let unnamed_comm;
        let id = arc_identity(&sample.comm);
        let (comm, comm_key): (&str, u64) = if let Some(comm) = self.comms.get(&id) {
            (comm, id.0 as u64)
        } else if sample.comm.trim().is_empty() {
            // Spelled after the tid, so not cacheable by the (shared) empty name.
            unnamed_comm = names::script_comm(&sample.comm, sample.tid).into_owned();
            (&unnamed_comm, 0)
        } else {
            let key = self.keep.identity(&sample.comm);
            self.comms.insert(key, names::script_comm(&sample.comm, 0).into());
            (&self.comms[&id], id.0 as u64)
        };
        let id = arc_identity(&sample.event);
        if !self.events.contains_key(&id) {
            let key = self.keep.identity(&sample.event);
            let n = self.events.len() as u32;
            self.events.insert(key, (n, names::script_event(&sample.event).into()));
        }
        let (event_id, event) = &self.events[&id];
        let secs = sample.time / 1_000_000_000;
        let micros = sample.time % 1_000_000_000 / 1_000;
        // `{comm} {pid:>5}/{tid:<5} [{cpu:03}] {secs:>5}.{micros:06}: {period:>10} {event}:`, hand-formatted
        // (`write!` costs more than the rest of a sample's handling).
        push_short(out, comm.as_bytes());
        out.push(b' ');
        push_decimal(out, sample.pid as u64, 5, Pad::Before(b' '));
        out.push(b'/');
        push_decimal(out, sample.tid as u64, 5, Pad::After);
        out.extend_from_slice(b" [");
        push_decimal(out, sample.cpu as u64, 3, Pad::Before(b'0'));
        out.extend_from_slice(b"] ");
        push_decimal(out, secs, 5, Pad::Before(b' '));
        out.push(b'.');
        let ids = [comm_key, sample.pid as u64, sample.tid as u64, sample.cpu as u64, secs];
        cuts.cut(out, if comm_key == 0 { 0 } else { span_key(KEY_HEADER, &ids) });
        push_decimal(out, micros, 6, Pad::Before(b'0'));
        cuts.cut(out, 0);
        out.extend_from_slice(b": ");
        if self.weight != Weight::Samples {
            push_decimal(out, self.weight.of(sample), 10, Pad::Before(b' '));
            out.push(b' ');
        }
        push_short(out, event.as_bytes());
        out.extend_from_slice(b":\n");
        cuts.cut(out, span_key(KEY_HEADER_END, &[*event_id as u64, self.weight.of(sample)]));
    }
}

impl LineWriter {
    /// A shared stack's text: the frame lines, leaf first, and the blank line that ends a sample, each line with the
    /// id of the rest of the stack from it on. (Only in a shared stack, rendered once for many samples: for one
    /// rendered per sample, looking its rests up costs more than it saves.)
    fn stack_text(&mut self, frames: &[Frame]) -> StackText {
        let (mut text, mut lines) = (Vec::new(), Vec::new());
        self.append_stack(frames, &mut text, &mut lines);
        let mut rest = 0;
        for line in lines.iter_mut().rev() {
            let last = &mut self.last_piece_id;
            rest = *self.rest_ids.entry((line.line, rest)).or_insert_with(|| {
                *last += 1;
                *last
            });
            line.rest = rest;
        }
        RepeatedText { text: text.into(), lines: lines.into() }
    }

    /// Appends the frame lines, leaf first, and the blank line that ends a sample to `text`, and the lines (without
    /// rest ids) to `lines`.
    fn append_stack(&mut self, frames: &[Frame], text: &mut Vec<u8>, lines: &mut Vec<RepeatedLine>) {
        if self.line_index.len() + self.rest_ids.len() > PIECE_IDS_KEPT {
            // Ids already handed out stay valid: new ones are never the same numbers.
            self.line_index.clear();
            self.line_by_id.clear();
            self.lines.clear();
            self.rest_ids.clear();
        }
        // The lines first, then the text: room for it all at once (a new stack text's at its exact length).
        let mut indices = std::mem::take(&mut self.scratch);
        indices.clear();
        let mut len = 1;
        for frame in frames {
            // (Id 0 is never a key.)
            let index = match self.line_by_id.get(frame.id) {
                Some(i) => i,
                None => {
                    let i = self.line(frame);
                    if frame.id != 0 {
                        self.line_by_id.insert(frame.id, i);
                    }
                    i
                }
            };
            len += self.lines[index as usize].text.len();
            indices.push(index);
        }
        text.reserve(len);
        lines.reserve(frames.len());
        for &index in &indices {
            let line = &self.lines[index as usize];
            text.extend_from_slice(&line.text);
            lines.push(line.line);
        }
        self.scratch = indices;
        text.push(b'\n');
    }

    /// The index of a frame's line, rendered on first sight.
    fn line(&mut self, frame: &Frame) -> u32 {
        let key = (NameKey::of(frame), frame.addr, frame.offset());
        if let Some(&i) = self.line_index.get(&key) {
            return i;
        }
        let line = self.render_line(frame, key.0);
        self.lines.push(line);
        let i = self.lines.len() as u32 - 1;
        self.line_index.insert(key, i);
        i
    }

    /// A frame's line, seen for the first time since the ids started over.
    fn render_line(&mut self, frame: &Frame, key: NameKey) -> RenderedLine {
        let index = match self.frame_ids.get(&key) {
            Some(&i) => i,
            None => {
                if let Some(symbol) = frame.shared_symbol() {
                    self.keep.identity(symbol);
                }
                self.keep.identity(frame.shared_module());
                let i = self.frames.len() as u32;
                self.frames.push(frame_text(frame));
                self.frame_ids.insert(key, i);
                i
            }
        };
        let ft = &self.frames[index as usize];
        let offset = if ft.named { frame.offset() } else { 0 };
        let mut text = Vec::with_capacity(ft.label.len() + ft.module.len() + 48);
        text.push(b'\t');
        push_address(&mut text, frame.addr);
        text.push(b' ');
        let label_start = text.len();
        text.extend_from_slice(ft.label.as_bytes());
        text.extend_from_slice(b"+0x");
        let label_len = text.len() - label_start;
        push_hex(&mut text, offset);
        let module_start = text.len();
        text.extend_from_slice(b" (");
        text.extend_from_slice(ft.module.as_bytes());
        text.extend_from_slice(b")\n");
        let (len, module_len) = (text.len(), text.len() - module_start);
        self.last_piece_id += 1;
        let line = RepeatedLine {
            rest: 0,
            line: self.last_piece_id,
            len: len as u32,
            pieces: [
                Piece { at: label_start as u32, len: label_len as u32, id: index },
                Piece { at: (len - module_len) as u32, len: module_len as u32, id: index },
            ],
        };
        RenderedLine { text: text.into(), line }
    }
}

/// Cuts the text appended to a buffer into [`Span`]s (when spans are wanted).
struct Cuts<'s> {
    spans: Option<&'s mut Vec<Span>>,
    /// Where the next span starts in the buffer.
    mark: usize,
}

impl Cuts<'_> {
    /// Ends a span at the buffer's end.
    fn cut(&mut self, out: &[u8], key: u64) {
        if let Some(spans) = self.spans.as_deref_mut() {
            spans.push(Span { len: (out.len() - self.mark) as u32, parts: 0, key });
        }
        self.mark = out.len();
    }
}

/// Appends an address as perf prints it: lower-case hex right-aligned in 16 columns. Built in a fixed-size array
/// and appended in one piece (a library `memcpy` of a few bytes costs more than the digits).
fn push_address(out: &mut Vec<u8>, n: u64) {
    let mut text = [b' '; 16];
    let digits = (16 - n.leading_zeros() as usize / 4).max(1);
    for (i, slot) in text[16 - digits..].iter_mut().enumerate() {
        *slot = DIGITS[(n >> (4 * (digits - 1 - i)) & 0xf) as usize];
    }
    out.extend_from_slice(&text);
}

/// Where [`push_decimal`] pads a number shorter than its width.
#[derive(Clone, Copy)]
pub(super) enum Pad {
    /// Right-aligned, filled with this byte.
    Before(u8),
    /// Left-aligned, filled with spaces.
    After,
}

/// Appends `n` in decimal, padded to at least `width` bytes (`{n:>w$}`, `{n:0w$}`, `{n:<w$}`).
pub(super) fn push_decimal(out: &mut Vec<u8>, mut n: u64, width: usize, pad: Pad) {
    // Two digits a step (six numbers a sample: a digit at a time was a fifth of rendering the text).
    const PAIRS: [u8; 200] = {
        let (mut pairs, mut n) = ([0u8; 200], 0);
        while n < 100 {
            (pairs[2 * n], pairs[2 * n + 1]) = (b'0' + (n / 10) as u8, b'0' + (n % 10) as u8);
            n += 1;
        }
        pairs
    };
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    while n >= 100 {
        let pair = (n % 100) as usize * 2;
        n /= 100;
        at -= 2;
        digits[at..at + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
    }
    if n >= 10 {
        at -= 2;
        digits[at..at + 2].copy_from_slice(&PAIRS[n as usize * 2..n as usize * 2 + 2]);
    } else {
        at -= 1;
        digits[at] = b'0' + n as u8;
    }
    let digits = &digits[at..];
    let fill = width.saturating_sub(digits.len());
    match pad {
        Pad::Before(byte) => {
            out.resize(out.len() + fill, byte);
            push_short(out, digits);
        }
        Pad::After => {
            push_short(out, digits);
            out.resize(out.len() + fill, b' ');
        }
    }
}

/// Appends a few bytes one by one: a library `memcpy` call costs more than that for a handful (see
/// [`push_address`]).
#[inline]
fn push_short(out: &mut Vec<u8>, bytes: &[u8]) {
    if bytes.len() > 32 {
        out.extend_from_slice(bytes);
        return;
    }
    for &b in bytes {
        out.push(b);
    }
}

/// Appends `n` in lower-case hex.
fn push_hex(out: &mut Vec<u8>, n: u64) {
    let digits = (16 - n.leading_zeros() as usize / 4).max(1);
    for i in (0..digits).rev() {
        out.push(DIGITS[(n >> (4 * i) & 0xf) as usize]);
    }
}

const DIGITS: &[u8; 16] = b"0123456789abcdef";

fn frame_text(frame: &Frame) -> FrameText {
    FrameText {
        label: names::frame_label(frame).into(),
        module: names::script_module(frame.module()).into(),
        named: names::is_named(frame),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_are_padded_as_format_pads_them() {
        let mut numbers = vec![12345u64, 123456, 999_999, 4_294_967_295, u64::MAX];
        numbers.extend(0..1000);
        numbers.extend((3..20).map(|e| 10u64.pow(e)).flat_map(|p| [p - 1, p, p + 1]));
        for n in numbers {
            for width in [0, 3, 5, 6, 10, 25] {
                let mut out = Vec::new();
                push_decimal(&mut out, n, width, Pad::Before(b' '));
                assert_eq!(String::from_utf8(out).unwrap(), format!("{n:>width$}"));
                let mut out = Vec::new();
                push_decimal(&mut out, n, width, Pad::Before(b'0'));
                assert_eq!(String::from_utf8(out).unwrap(), format!("{n:0width$}"));
                let mut out = b"x".to_vec();
                push_decimal(&mut out, n, width, Pad::After);
                assert_eq!(String::from_utf8(out).unwrap(), format!("x{n:<width$}"));
            }
        }
    }
}
