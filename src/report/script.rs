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
//! Header: `comm pid/tid [cpu] seconds.microseconds: period event:` (the period only with [`Weight::Period`]),
//! comm not padded, as perf prints it for samples with callchains. Then one line per frame, leaf first: tab,
//! address, `label+0x<offset>`, `(module)`. JIT frames carry the module the symbolizer gives them (perf's
//! `/tmp/perf-<pid>.map` for perf-map names). Frames without a symbol are printed with the label
//! `module+0x<offset>` and a `+0x0` symbol offset, so that readers which strip perf's symbol offset keep our label
//! (see [`super::names`]). Any text a reader could misparse is rewritten by [`super::names`].

use super::names;
use super::stacks::{arc_identity, FastHasher, FastMap, KeepAlive};
use super::Weight;
use crate::symbolize::{Frame, ResolvedSample};
use std::hash::Hasher;
use std::io::{self, Write};

/// Options for [`write_perf_script`].
#[derive(Debug, Clone, Default)]
pub struct ScriptOptions {
    /// [`Weight::Period`] prints each sample's period (as perf does), so inferno-collapse-perf weights stacks by
    /// it; [`Weight::Samples`] leaves it out, so every sample counts 1.
    pub weight: Weight,
}

#[derive(PartialEq, Eq, Hash)]
struct FrameKey {
    symbol: (usize, usize),
    module: (usize, usize),
    unnamed_offset: u64,
}

struct FrameText {
    label: Box<str>,
    module: Box<str>,
    named: bool,
    /// [`Span`] keys of the label and module pieces (fixed for a frame text).
    label_key: u64,
    module_key: u64,
}

/// Writes the samples in `perf script` layout. `out` should be buffered (e.g. a `BufWriter`).
pub fn write_perf_script<'a>(
    samples: impl IntoIterator<Item = &'a ResolvedSample>,
    opts: &ScriptOptions,
    out: &mut impl Write,
) -> io::Result<()> {
    let mut writer = ScriptWriter::new(opts);
    let mut text: Vec<u8> = Vec::with_capacity(4096);
    for sample in samples {
        text.clear();
        writer.write_sample(sample, &mut text, None);
        out.write_all(&text)?;
    }
    Ok(())
}

/// How a piece of the text repeats earlier text: the next `len` bytes, and a key that is the same for pieces made of
/// the same bytes (0: no key). Keys are hints, not proof (a compressor still compares the bytes); they let it find
/// the repeats a profile is full of without searching for them. A span with `parts > 0` (a whole frame line) is
/// followed by that many spans that cover the same bytes in smaller pieces, for when the whole does not repeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub len: u32,
    pub parts: u32,
    pub key: u64,
}

/// Writes samples in `perf script` layout one at a time ([`write_perf_script`] in steps), remembering how each
/// distinct frame, thread name and event is spelled.
pub struct ScriptWriter {
    weight: Weight,
    frame_ids: FastMap<FrameKey, u32>,
    frames: Vec<FrameText>,
    comms: FastMap<(usize, usize), Box<str>>,
    events: FastMap<(usize, usize), (u32, Box<str>)>,
    keep: KeepAlive,
}

/// Kinds of [`Span`] keys, mixed into the key so different kinds of pieces never share one.
const KEY_HEADER: u64 = 1;
const KEY_HEADER_END: u64 = 2;
const KEY_ADDRESS: u64 = 3;
const KEY_LABEL: u64 = 4;
const KEY_MODULE: u64 = 5;
const KEY_LINE: u64 = 6;

fn span_key(kind: u64, values: &[u64]) -> u64 {
    let mut h = FastHasher::default();
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
            frame_ids: FastMap::default(),
            frames: Vec::new(),
            comms: FastMap::default(),
            events: FastMap::default(),
            keep: KeepAlive::default(),
        }
    }

    /// Appends one sample's text (header, frames, blank line) to `out`; with `spans`, also appends spans that
    /// cover exactly the bytes appended.
    pub fn write_sample(&mut self, sample: &ResolvedSample, out: &mut Vec<u8>, spans: Option<&mut Vec<Span>>) {
        let mut cuts = Cuts { spans, mark: out.len() };

        let unnamed_comm;
        let (comm, comm_key): (&str, u64) = if sample.comm.trim().is_empty() {
            // Spelled after the tid, so not cacheable by the (shared) empty name.
            unnamed_comm = names::script_comm(&sample.comm, sample.tid).into_owned();
            (&unnamed_comm, 0)
        } else {
            let id = arc_identity(&sample.comm);
            if !self.comms.contains_key(&id) {
                let key = self.keep.identity(&sample.comm);
                self.comms.insert(key, names::script_comm(&sample.comm, 0).into());
            }
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
        // Formatting into a Vec cannot fail.
        let _ = write!(out, "{comm} {:>5}/{:<5} [{:03}] {secs:>5}.", sample.pid, sample.tid, sample.cpu);
        let ids = [comm_key, sample.pid as u64, sample.tid as u64, sample.cpu as u64, secs];
        cuts.cut(out, if comm_key == 0 { 0 } else { span_key(KEY_HEADER, &ids) });
        let _ = write!(out, "{micros:06}");
        cuts.cut(out, 0);
        out.extend_from_slice(b": ");
        if self.weight == Weight::Period {
            let _ = write!(out, "{:>10} ", sample.period);
        }
        let _ = writeln!(out, "{event}:");
        cuts.cut(out, span_key(KEY_HEADER_END, &[*event_id as u64, sample.period]));

        for frame in &sample.frames {
            let key = frame_key(frame);
            let index = match self.frame_ids.get(&key) {
                Some(&i) => i,
                None => {
                    if let Some(symbol) = &frame.symbol {
                        self.keep.identity(symbol);
                    }
                    self.keep.identity(&frame.module);
                    let i = self.frames.len() as u32;
                    self.frames.push(frame_text(frame, i));
                    self.frame_ids.insert(key, i);
                    i
                }
            };
            let text = &self.frames[index as usize];
            let offset = if text.named { frame.offset } else { 0 };
            // The whole line first (its bytes follow from the frame text and the address), then its pieces.
            let line = cuts.open_line();
            // Hand-formatted: this loop writes most of the bytes of the biggest output.
            out.push(b'\t');
            push_address(out, frame.addr);
            out.push(b' ');
            cuts.cut(out, span_key(KEY_ADDRESS, &[frame.addr]));
            out.extend_from_slice(text.label.as_bytes());
            out.extend_from_slice(b"+0x");
            cuts.cut(out, text.label_key);
            push_hex(out, offset);
            cuts.cut(out, 0);
            out.extend_from_slice(b" (");
            out.extend_from_slice(text.module.as_bytes());
            out.extend_from_slice(b")\n");
            cuts.cut(out, text.module_key);
            cuts.close_line(line, span_key(KEY_LINE, &[index as u64, frame.addr]));
        }
        out.push(b'\n');
        cuts.cut(out, 0);
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

    /// Reserves the span of a whole line, whose pieces follow.
    fn open_line(&mut self) -> Option<usize> {
        let spans = self.spans.as_deref_mut()?;
        spans.push(Span { len: 0, parts: 0, key: 0 });
        Some(spans.len() - 1)
    }

    fn close_line(&mut self, line: Option<usize>, key: u64) {
        if let (Some(at), Some(spans)) = (line, self.spans.as_deref_mut()) {
            let parts = &spans[at + 1..];
            spans[at] = Span { len: parts.iter().map(|p| p.len).sum(), parts: parts.len() as u32, key };
        }
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

/// Appends `n` in lower-case hex.
fn push_hex(out: &mut Vec<u8>, n: u64) {
    let digits = (16 - n.leading_zeros() as usize / 4).max(1);
    for i in (0..digits).rev() {
        out.push(DIGITS[(n >> (4 * i) & 0xf) as usize]);
    }
}

const DIGITS: &[u8; 16] = b"0123456789abcdef";

fn frame_key(frame: &Frame) -> FrameKey {
    FrameKey {
        symbol: frame.symbol.as_ref().map(arc_identity).unwrap_or((0, 0)),
        module: arc_identity(&frame.module),
        unnamed_offset: if names::is_named(frame) { 0 } else { frame.offset },
    }
}

fn frame_text(frame: &Frame, index: u32) -> FrameText {
    FrameText {
        label: names::frame_label(frame).into(),
        module: names::script_module(&frame.module).into(),
        named: names::is_named(frame),
        label_key: span_key(KEY_LABEL, &[index as u64]),
        module_key: span_key(KEY_MODULE, &[index as u64]),
    }
}
