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
use super::stacks::{arc_identity, FastMap};
use super::Weight;
use crate::symbolize::{Frame, ResolvedSample};
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
}

/// Writes the samples in `perf script` layout. `out` should be buffered (e.g. a `BufWriter`).
pub fn write_perf_script<'a>(
    samples: impl IntoIterator<Item = &'a ResolvedSample>,
    opts: &ScriptOptions,
    out: &mut impl Write,
) -> io::Result<()> {
    let mut frames: FastMap<FrameKey, FrameText> = FastMap::default();
    let mut comms: FastMap<(usize, usize), Box<str>> = FastMap::default();
    let mut events: FastMap<(usize, usize), Box<str>> = FastMap::default();
    let mut unnamed_comm: String;
    let mut line: Vec<u8> = Vec::with_capacity(4096);
    for sample in samples {
        let comm: &str = if sample.comm.trim().is_empty() {
            // Spelled after the tid, so not cacheable by the (shared) empty name.
            unnamed_comm = names::script_comm(&sample.comm, sample.tid).into_owned();
            &unnamed_comm
        } else {
            comms.entry(arc_identity(&sample.comm)).or_insert_with(|| names::script_comm(&sample.comm, 0).into())
        };
        let event =
            events.entry(arc_identity(&sample.event)).or_insert_with(|| names::script_event(&sample.event).into());
        let secs = sample.time / 1_000_000_000;
        let micros = sample.time % 1_000_000_000 / 1_000;
        line.clear();
        write!(line, "{comm} {:>5}/{:<5} [{:03}] {secs:>5}.{micros:06}: ", sample.pid, sample.tid, sample.cpu)?;
        if opts.weight == Weight::Period {
            write!(line, "{:>10} ", sample.period)?;
        }
        writeln!(line, "{event}:")?;
        for frame in &sample.frames {
            let text = frames.entry(frame_key(frame)).or_insert_with(|| frame_text(frame));
            let offset = if text.named { frame.offset } else { 0 };
            // Hand-formatted: this loop writes most of the bytes of the biggest output.
            line.push(b'\t');
            push_hex(&mut line, frame.addr, 16);
            line.push(b' ');
            line.extend_from_slice(text.label.as_bytes());
            line.extend_from_slice(b"+0x");
            push_hex(&mut line, offset, 0);
            line.extend_from_slice(b" (");
            line.extend_from_slice(text.module.as_bytes());
            line.extend_from_slice(b")\n");
        }
        line.push(b'\n');
        out.write_all(&line)?;
    }
    Ok(())
}

/// Appends `n` in lower-case hex, right-aligned with spaces to `width`.
fn push_hex(out: &mut Vec<u8>, n: u64, width: usize) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut buf = [0u8; 16];
    let mut i = buf.len();
    let mut rest = n;
    loop {
        i -= 1;
        buf[i] = DIGITS[(rest & 0xf) as usize];
        rest >>= 4;
        if rest == 0 {
            break;
        }
    }
    let digits = &buf[i..];
    out.resize(out.len() + width.saturating_sub(digits.len()), b' ');
    out.extend_from_slice(digits);
}

fn frame_key(frame: &Frame) -> FrameKey {
    FrameKey {
        symbol: frame.symbol.as_ref().map(arc_identity).unwrap_or((0, 0)),
        module: arc_identity(&frame.module),
        unnamed_offset: if names::is_named(frame) { 0 } else { frame.offset },
    }
}

fn frame_text(frame: &Frame) -> FrameText {
    FrameText {
        label: names::frame_label(frame).into(),
        module: names::script_module(&frame.module).into(),
        named: names::is_named(frame),
    }
}
