//! [`RepeatDeflater`]: perf_script.out's encoder, which takes its matches from the writer's repeat hints
//! ([`crate::repeats`]) instead of searching for them (see the module docs of [`super`]).

use super::fixed::{equal, put_literals, put_match, sync_flush, tables, BitWriter, Tables, MIN_MATCH, WINDOW};
use crate::repeats::{RepeatedLine, Span};
use crc32fast::Hasher as Crc;
use std::collections::VecDeque;

/// Slots of the tables of span keys and piece ids (a few hundred are live at a time: those within the window).
const SLOT_BITS: u32 = 13;

/// Where earlier text can be looked up while encoding: span keys' last positions and the bytes themselves.
trait History {
    fn recall(&self, key: u64) -> Option<u64>;
    fn remember(&mut self, key: u64, pos: u64);
    /// Whether the bytes at stream position `at` are known and equal `bytes`.
    fn same(&self, at: u64, bytes: &[u8]) -> bool;
}

/// Encodes `text` (which starts at stream position `start`) as literals and matches, checking the candidates
/// that `spans` and `history` point to.
fn encode(bits: &mut BitWriter, text: &[u8], spans: &[Span], start: u64, history: &mut impl History) {
    let t = tables();
    // The current match: (distance, length so far).
    let mut pending: Option<(u32, usize)> = None;
    let mut at = 0usize;
    let mut i = 0usize;
    while i < spans.len() {
        let span = spans[i];
        let len = span.len as usize;
        let bytes = &text[at..at + len];
        let pos = start + at as u64;
        let parts = &spans[i + 1..(i + 1 + span.parts as usize).min(spans.len())];
        // Keep going where the text repeats at the same distance (whole lines, whole stacks).
        let extended = match pending {
            Some((d, ref mut matched)) if d as usize >= len && history.same(pos - d as u64, bytes) => {
                *matched += len;
                true
            }
            _ => false,
        };
        if !extended {
            if let Some((d, matched)) = pending.take() {
                put_match(bits, t, d, matched);
            }
            if let Some(prev) = history.recall(span.key) {
                let d = pos - prev;
                if len >= MIN_MATCH && d as usize <= WINDOW && d as usize >= len && history.same(prev, bytes) {
                    pending = Some((d as u32, len));
                }
            }
        }
        history.remember(span.key, pos);
        if pending.is_some() {
            // Matched whole: its parts are only remembered.
            let mut part_pos = pos;
            for part in parts {
                history.remember(part.key, part_pos);
                part_pos += part.len as u64;
            }
            i += 1 + parts.len();
            at += len;
        } else if !parts.is_empty() {
            // Not a repeat as a whole: try its pieces.
            i += 1;
        } else {
            put_literals(bits, t, bytes);
            i += 1;
            at += len;
        }
    }
    debug_assert_eq!(at, text.len(), "spans must cover the text");
    if let Some((d, matched)) = pending {
        put_match(bits, t, d, matched);
    }
}

/// The text fed piece by piece ([`RepeatDeflater::feed`]), for matches into it: the last [`WINDOW`] bytes of the
/// stream that were fed that way. Shared texts are not kept (they are matched as wholes).
struct OwnText {
    bytes: Vec<u8>,
    /// Own-text offset of `bytes[0]`.
    start: u64,
    /// (stream position, own-text offset, length) of each run fed, oldest first; a run never crosses a shared
    /// text.
    runs: VecDeque<(u64, u64, u64)>,
    /// Span key → stream position of its last occurrence, direct-mapped: a slot holds the last key that hashed to
    /// it (a clash only loses a hint).
    last: Vec<(u64, u64)>,
}

impl OwnText {
    fn slot(key: u64) -> usize {
        (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - SLOT_BITS)) as usize
    }

    fn push(&mut self, pos: u64, text: &[u8]) {
        let own = self.start + self.bytes.len() as u64;
        self.bytes.extend_from_slice(text);
        match self.runs.back_mut() {
            Some((p, o, len)) if *p + *len == pos && *o + *len == own => *len += text.len() as u64,
            _ => self.runs.push_back((pos, own, text.len() as u64)),
        }
    }

    /// Forgets what lies before stream position `from`.
    fn forget_before(&mut self, from: u64) {
        while self.runs.front().is_some_and(|&(p, _, len)| p + len <= from) {
            self.runs.pop_front();
        }
        let needed = self.runs.front().map_or(self.start + self.bytes.len() as u64, |r| r.1);
        // Moved once what is no longer needed is half the buffer and at least 64 KB, so that each byte is moved about
        // once and the buffer stays small (at least 1 MB grew it to 2 MB: ~150 fresh pages to fault in, of the ~1,900
        // of a `perf record` folder's postprocess).
        let unneeded = (needed - self.start) as usize;
        if unneeded >= (64 << 10).max(self.bytes.len() / 2) {
            self.bytes.drain(..unneeded);
            self.start = needed;
        }
    }
}

impl History for OwnText {
    fn recall(&self, key: u64) -> Option<u64> {
        let (k, pos) = self.last[Self::slot(key)];
        (key != 0 && k == key).then_some(pos)
    }

    fn remember(&mut self, key: u64, pos: u64) {
        if key != 0 {
            self.last[Self::slot(key)] = (key, pos);
        }
    }

    fn same(&self, at: u64, bytes: &[u8]) -> bool {
        let Some(&(pos, own, len)) = self.runs.iter().rev().find(|&&(p, _, _)| p <= at) else { return false };
        if at + bytes.len() as u64 > pos + len {
            return false;
        }
        let i = (own + (at - pos) - self.start) as usize;
        equal(&self.bytes[i..i + bytes.len()], bytes)
    }
}

/// Where pieces of stack texts were last placed, by their ids ([`crate::repeats::RepeatedLine`]), direct-mapped: a slot holds the last
/// piece that hashed to it (a clash only loses a repeat). Ids are exact, so a position found here is a repeat
/// without comparing bytes.
struct LastPositions {
    slots: Vec<(u64, u64)>,
}

/// Kinds of pieces, kept apart in [`LastPositions`] (ids of different kinds may be the same number).
const REST: u64 = 1 << 62;
const LINE: u64 = 2 << 62;
/// One kind per slot of [`crate::repeats::RepeatedLine::pieces`].
const PIECE_KINDS: [u64; 2] = [3 << 62, 3 << 62 | 1 << 32];

impl LastPositions {
    fn slot(key: u64) -> usize {
        (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - SLOT_BITS)) as usize
    }

    fn place(&mut self, key: u64, pos: u64) {
        self.slots[Self::slot(key)] = (key, pos);
    }

    /// The distance back to the piece's last placement from `pos`, when a match can reach it.
    fn distance(&self, key: u64, pos: u64) -> Option<u32> {
        let (k, at) = self.slots[Self::slot(key)];
        (k == key && pos - at <= WINDOW as u64).then(|| (pos - at) as u32)
    }
}

/// Consecutive matches at one distance, joined.
#[derive(Default)]
struct PendingMatch(Option<(u32, usize)>);

impl PendingMatch {
    fn add(&mut self, bits: &mut BitWriter, t: &Tables, distance: u32, len: usize) {
        match &mut self.0 {
            Some((d, matched)) if *d == distance => *matched += len,
            _ => {
                self.flush(bits, t);
                self.0 = Some((distance, len));
            }
        }
    }

    fn flush(&mut self, bits: &mut BitWriter, t: &Tables) {
        if let Some((d, len)) = self.0.take() {
            put_match(bits, t, d, len);
        }
    }
}

/// Deflates text described by [`Span`]s (see the module docs) into one segment.
pub struct RepeatDeflater {
    bits: BitWriter,
    /// Stream position of the next byte.
    pos: u64,
    own: OwnText,
    placed: LastPositions,
    crc: Crc,
}

impl Default for RepeatDeflater {
    fn default() -> Self {
        Self::new()
    }
}

impl RepeatDeflater {
    pub fn new() -> Self {
        let mut bits = BitWriter::new();
        // BFINAL=0, BTYPE=01 (fixed Huffman): one block for the whole segment.
        bits.put(0b010, 3);
        let own =
            OwnText { bytes: Vec::new(), start: 0, runs: VecDeque::new(), last: super::writable_zeros(1 << SLOT_BITS) };
        let placed = LastPositions { slots: super::writable_zeros(1 << SLOT_BITS) };
        RepeatDeflater { bits, pos: 0, own, placed, crc: Crc::new() }
    }

    /// Encodes the next piece of text; `spans` cover it exactly (a span with parts counts once).
    pub fn feed(&mut self, text: &[u8], spans: &[Span]) {
        self.crc.update(text);
        self.own.push(self.pos, text);
        encode(&mut self.bits, text, spans, self.pos, &mut self.own);
        self.pos += text.len() as u64;
        self.own.forget_before(self.pos.saturating_sub(WINDOW as u64));
    }

    /// Encodes a stack's text. The longest tail of it placed within the window becomes one match; the lines
    /// before it become matches where the line (or its label or module piece) is within the window, else literals.
    pub fn feed_stack(&mut self, text: &[u8], lines: &[RepeatedLine]) {
        let t = tables();
        self.crc.update(text);
        let start = self.pos;
        let mut pending = PendingMatch::default();
        let mut at = 0usize;
        for line in lines {
            let pos = start + at as u64;
            let rest = (line.rest != 0).then(|| self.placed.distance(REST | line.rest, pos)).flatten();
            if let Some(d) = rest {
                if text.len() - at >= MIN_MATCH {
                    pending.add(&mut self.bits, t, d, text.len() - at);
                    at = text.len();
                    break;
                }
            }
            let len = line.len as usize;
            match self.placed.distance(LINE | line.line, pos) {
                Some(d) => pending.add(&mut self.bits, t, d, len),
                None => {
                    pending.flush(&mut self.bits, t);
                    let bytes = &text[at..at + len];
                    let mut done = 0;
                    for (piece, kind) in line.pieces.iter().zip(PIECE_KINDS) {
                        let (from, to) = (piece.at as usize, piece.at as usize + piece.len as usize);
                        if piece.len == 0 || from < done || to > len {
                            continue;
                        }
                        put_literals(&mut self.bits, t, &bytes[done..from]);
                        self.put_piece(kind | piece.id as u64, pos + from as u64, &bytes[from..to]);
                        done = to;
                    }
                    put_literals(&mut self.bits, t, &bytes[done..]);
                }
            }
            at += len;
        }
        if at < text.len() {
            // The blank line after the last frame line.
            pending.flush(&mut self.bits, t);
            put_literals(&mut self.bits, t, &text[at..]);
        }
        pending.flush(&mut self.bits, t);
        // Where each line and tail now is (also those inside a match: the nearest copy reaches farthest).
        let mut at = start;
        for line in lines {
            if line.rest != 0 {
                self.placed.place(REST | line.rest, at);
            }
            self.placed.place(LINE | line.line, at);
            at += line.len as u64;
        }
        self.pos += text.len() as u64;
        self.own.forget_before(self.pos.saturating_sub(WINDOW as u64));
    }

    /// A piece at stream position `pos`: a match when placed within the window before, else literals.
    fn put_piece(&mut self, key: u64, pos: u64, bytes: &[u8]) {
        match self.placed.distance(key, pos) {
            Some(d) if bytes.len() >= MIN_MATCH => put_match(&mut self.bits, tables(), d, bytes.len()),
            _ => put_literals(&mut self.bits, tables(), bytes),
        }
        self.placed.place(key, pos);
    }

    /// Compressed bytes ready so far (for writing out while encoding goes on).
    pub fn take_output(&mut self) -> Vec<u8> {
        self.bits.take_bytes()
    }

    /// Ends the segment (byte-aligned); returns the remaining bytes and the CRC of everything fed.
    pub fn finish(mut self) -> (Vec<u8>, Crc) {
        let eob = tables().end_of_block;
        self.bits.put(eob.bits, eob.len);
        sync_flush(&mut self.bits);
        (self.bits.take_bytes(), self.crc)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{deflate_segment, stored_block, Codec, FINAL_BLOCK};
    use super::*;
    use flate2::Compression;
    use std::io::Read;

    fn inflate(stream: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        flate2::read::DeflateDecoder::new(stream).read_to_end(&mut out).expect("a valid deflate stream");
        out
    }

    /// A whole stream from segments (as the archive joins them).
    fn join(segments: &[Vec<u8>]) -> Vec<u8> {
        let mut stream: Vec<u8> = segments.concat();
        stream.extend_from_slice(&FINAL_BLOCK);
        stream
    }

    /// Text made of repeated "lines" with random keys, some wrong on purpose.
    fn random_text(seed: u64, lines: usize) -> (Vec<u8>, Vec<Span>) {
        let mut rng = crate::random_inputs::Rng::new(seed);
        let mut next = move || rng.next();
        let pool: Vec<Vec<u8>> = (0..40)
            .map(|i| {
                let n = (next() % 120) as usize;
                let mut line: Vec<u8> = (0..n).map(|_| (next() % 256) as u8).collect();
                line.extend_from_slice(format!(" line {i}\n").as_bytes());
                line
            })
            .collect();
        let (mut text, mut spans) = (Vec::new(), Vec::new());
        for _ in 0..lines {
            let i = (next() % pool.len() as u64) as usize;
            text.extend_from_slice(&pool[i]);
            // Mostly the right key; sometimes none, sometimes another line's (must be caught by the comparison).
            let key = match next() % 10 {
                0 => 0,
                1 => 1 + next() % 40,
                _ => 1 + i as u64,
            };
            spans.push(Span { len: pool[i].len() as u32, parts: 0, key });
            if next() % 5 == 0 {
                let n = 1 + (next() % 20) as usize;
                text.extend((0..n).map(|_| b'a' + (next() % 26) as u8));
                spans.push(Span { len: n as u32, parts: 0, key: 0 });
            }
        }
        (text, spans)
    }

    #[test]
    fn span_deflate_round_trips_in_chunks_with_wrong_keys() {
        for seed in 1..20u64 {
            let (text, spans) = random_text(seed * 0x9e37_79b9, 3000);
            let mut d = RepeatDeflater::new();
            let mut out = Vec::new();
            // Feed in chunks of a few spans: matches cross chunk boundaries through the window.
            let (mut at, mut i) = (0usize, 0usize);
            while i < spans.len() {
                let n = 1 + (seed as usize * 7 + i) % 50;
                let chunk = &spans[i..(i + n).min(spans.len())];
                let len: usize = chunk.iter().map(|s| s.len as usize).sum();
                d.feed(&text[at..at + len], chunk);
                out.extend(d.take_output());
                at += len;
                i += n;
            }
            let (tail, crc) = d.finish();
            out.extend(tail);
            let decoded = inflate(&join(std::slice::from_ref(&out)));
            assert!(decoded == text, "seed {seed}: round trip differs");
            assert_eq!(crc.finalize(), crc32fast::hash(&text));
            assert!(out.len() < text.len() / 2, "seed {seed}: {} of {} bytes", out.len(), text.len());
        }
    }

    #[test]
    fn every_match_length_and_distance_decodes() {
        let base: Vec<u8> = (0..40_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
        for distance in [3usize, 4, 5, 6, 8, 9, 100, 257, 1000, 4097, 20000, 32767, 32768] {
            let lengths = (MIN_MATCH..=300).chain([515, 516, 517, 518, 600]).filter(|&l| l <= distance);
            for len in lengths {
                // The first `len` bytes, then the rest of `distance`, then the first `len` again (same key).
                let mut text = base[..distance].to_vec();
                text.extend_from_slice(&base[..len]);
                let spans = [
                    Span { len: len as u32, parts: 0, key: 7 },
                    Span { len: (distance - len) as u32, parts: 0, key: 0 },
                    Span { len: len as u32, parts: 0, key: 7 },
                ];
                let mut d = RepeatDeflater::new();
                d.feed(&text, &spans);
                let (out, _) = d.finish();
                assert!(inflate(&join(std::slice::from_ref(&out))) == text, "distance {distance} length {len}");
                // The repeat became a match (literals would cost about a byte each).
                assert!(out.len() < distance * 9 / 8 + 20, "distance {distance} length {len}: {} bytes", out.len());
            }
        }
    }

    #[test]
    fn lines_with_parts_match_whole_or_by_piece() {
        // Lines "ADDR LABEL+0xOFF (MODULE)": the address varies, label and module repeat.
        let mut text = Vec::new();
        let mut spans = Vec::new();
        for i in 0..2000u64 {
            let addr = format!("\t{:16x} ", 0x7f00_0000 + (i * 7919) % 50);
            let label = format!("Method{}+0x", i % 7);
            let offset = format!("{:x}", (i * 7919) % 50);
            let module = format!(" (/tmp/perf-{}.map)\n", i % 3);
            let pieces = [(&addr, 1 + (i * 7919) % 50), (&label, 100 + i % 7), (&offset, 0), (&module, 200 + i % 3)];
            let whole: u32 = pieces.iter().map(|(p, _)| p.len() as u32).sum();
            // Lines of the same address repeat exactly; a few keys are wrong on purpose.
            let line_key = if i % 13 == 0 { 5 } else { 1000 + (i * 7919) % 50 };
            spans.push(Span { len: whole, parts: 4, key: line_key });
            for (piece, key) in pieces {
                text.extend_from_slice(piece.as_bytes());
                spans.push(Span { len: piece.len() as u32, parts: 0, key });
            }
        }
        let mut d = RepeatDeflater::new();
        d.feed(&text[..], &spans[..]);
        let (out, _) = d.finish();
        assert!(inflate(&join(std::slice::from_ref(&out))) == text);
        assert!(out.len() * 4 < text.len(), "{} of {} bytes", out.len(), text.len());
    }

    #[test]
    fn repeated_lines_become_long_matches() {
        let line =
            b"\t    7f5762a74126 float64 [App] PricingEngine::PriceItem(uint64)[Optimized]+0xa6 (/tmp/perf-1.map)\n";
        let mut text = Vec::new();
        let mut spans = Vec::new();
        for _ in 0..1000 {
            text.extend_from_slice(line);
            spans.push(Span { len: line.len() as u32, parts: 0, key: 42 });
        }
        let mut d = RepeatDeflater::new();
        d.feed(&text, &spans);
        let (out, _) = d.finish();
        assert!(inflate(&join(std::slice::from_ref(&out))) == text);
        // 1000 lines of 100 bytes: one literal line, then matches of 258 bytes (~3.3 bytes each).
        assert!(out.len() < 1800, "{} bytes", out.len());
    }

    #[test]
    fn segments_from_both_encoders_join_into_one_stream() {
        let (text, spans) = random_text(7, 500);
        let mut a = RepeatDeflater::new();
        a.feed(&text, &spans);
        let (first, _) = a.finish();
        let header = stored_block(&[b'h'; 512]);
        let (second, _) = deflate_segment(Codec::Miniz(Compression::fast()), [&text[..1000], &text[1000..]]);
        let (third, _) = deflate_segment(Codec::Miniz(Compression::default()), [&b""[..]]);
        let stream = join(&[header, first, second, third]);
        let mut expected = vec![b'h'; 512];
        expected.extend_from_slice(&text);
        expected.extend_from_slice(&text);
        assert!(inflate(&stream) == expected);
    }
}
