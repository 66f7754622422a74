//! [`EchoDeflater`]: a fast deflate encoder for files whose producer can say where they repeat themselves
//! ([`Echo`]s: perf.data, whose stack copies repeat most of the previous copy of the same thread). An echo's
//! candidate is compared a word at a time and becomes a match as long as the bytes agree; where there is no echo
//! or it fails, one probe of a hash table of 4-byte sequences (the last position of each) finds what repeats
//! nearby. Everything is written with deflate's fixed Huffman codes, in one block: no match search and no code
//! tables, so most of the time goes into comparing and computing the CRC.
//!
//! The encoder owns its input buffer, which keeps the window (the last 32 KB encoded) in front of the bytes still
//! to encode: the caller reads into [`EchoDeflater::space`], looks at what is [`EchoDeflater::waiting`] to find its
//! echoes, and [`EchoDeflater::encode`]s as much of it as it has echoes for (a record cut by the end of a read waits
//! for the next one).

use super::fixed::{put_literals, put_match, sync_flush, tables, BitWriter, Tables, MAX_MATCH, WINDOW};
use crate::repeats::Echo;
use crc32fast::Hasher as Crc;
use std::collections::VecDeque;

/// An echo shorter than this is not worth a match (a match costs about as many bits as 3 literals).
const MIN_ECHO: usize = 4;
/// Entries of the hash table of 4-byte sequences.
const HASH_BITS: u32 = 15;

pub struct EchoDeflater {
    bits: BitWriter,
    crc: Crc,
    /// The last [`WINDOW`] bytes encoded (fewer at the start), then the bytes waiting (`encoded..filled`), then
    /// room for more.
    buf: Vec<u8>,
    /// Stream position of `buf[0]`.
    buf_start: u64,
    encoded: usize,
    filled: usize,
    /// Low 32 bits of the stream position where each 4-byte sequence (by hash) was last seen. A stale or clashing
    /// entry costs a comparison, never a wrong match.
    last_seen: Box<[u32]>,
    /// Echoes given but not used up yet, in stream order.
    echoes: VecDeque<Echo>,
}

impl Default for EchoDeflater {
    fn default() -> Self {
        Self::new()
    }
}

impl EchoDeflater {
    pub fn new() -> Self {
        let mut bits = BitWriter::new();
        // BFINAL=0, BTYPE=01 (fixed Huffman): one block for the whole segment.
        bits.put(0b010, 3);
        EchoDeflater {
            bits,
            crc: Crc::new(),
            buf: Vec::new(),
            buf_start: 0,
            encoded: 0,
            filled: 0,
            last_seen: super::writable_zeros(1 << HASH_BITS).into_boxed_slice(),
            echoes: VecDeque::new(),
        }
    }

    /// Room for at least `want` more bytes after those waiting; mark what was put there with
    /// [`filled`](Self::filled).
    pub fn space(&mut self, want: usize) -> &mut [u8] {
        // Keep the window and what waits; move it to the front once the part before it is worth the copy.
        let keep_from = self.encoded.saturating_sub(WINDOW);
        if keep_from > 0 && self.filled + want > self.buf.len() {
            self.buf.copy_within(keep_from..self.filled, 0);
            self.buf_start += keep_from as u64;
            self.encoded -= keep_from;
            self.filled -= keep_from;
        }
        if self.filled + want > self.buf.len() {
            self.buf.resize(self.filled + want, 0);
        }
        &mut self.buf[self.filled..]
    }

    /// `n` bytes were written to the front of [`space`](Self::space).
    pub fn filled(&mut self, n: usize) {
        assert!(self.filled + n <= self.buf.len(), "filled more than the space given");
        self.filled += n;
    }

    /// The stream position of the first byte not encoded yet, and the bytes waiting from there.
    pub fn waiting(&self) -> (u64, &[u8]) {
        (self.buf_start + self.encoded as u64, &self.buf[self.encoded..self.filled])
    }

    /// Appends bytes and encodes everything waiting (for bytes that have no echoes).
    pub fn feed(&mut self, bytes: &[u8]) {
        self.space(bytes.len())[..bytes.len()].copy_from_slice(bytes);
        self.filled(bytes.len());
        self.encode(self.filled - self.encoded, &[]);
    }

    /// Encodes the first `len` waiting bytes. `echoes` are in stream order and point back at most [`WINDOW`]
    /// bytes; those reaching past `len` are kept for the next call.
    pub fn encode(&mut self, len: usize, echoes: &[Echo]) {
        let end = self.encoded + len;
        assert!(end <= self.filled, "encoding more than is waiting");
        let EchoDeflater { bits, crc, buf, buf_start, encoded, last_seen, echoes: pending, .. } = self;
        pending.extend(echoes);
        let (data, buf_start) = (&buf[..end], *buf_start);
        crc.update(&data[*encoded..]);
        let t = tables();
        let mut i = *encoded;
        while i < end {
            let pos = buf_start + i as u64;
            while pending.front().is_some_and(|e| e.at + e.len as u64 <= pos) {
                pending.pop_front();
            }
            if let Some(e) = pending.front().filter(|e| e.at <= pos) {
                let from = e.from + (pos - e.at);
                if from < pos && pos - from <= WINDOW as u64 && from >= buf_start {
                    let n = common_len(data, (from - buf_start) as usize, i);
                    if n >= MIN_ECHO {
                        put_match(bits, t, (pos - from) as u32, n);
                        i += n;
                        continue;
                    }
                }
            }
            i += probe(bits, t, last_seen, buf_start, data, i);
        }
        *encoded = end;
    }

    /// Compressed bytes ready so far (for writing out while encoding goes on).
    pub fn take_output(&mut self) -> Vec<u8> {
        self.bits.take_bytes()
    }

    /// Encodes whatever still waits, ends the segment (byte-aligned) and returns the remaining compressed bytes
    /// and the CRC of everything fed.
    pub fn finish(mut self) -> (Vec<u8>, Crc) {
        self.encode(self.filled - self.encoded, &[]);
        let eob = tables().end_of_block;
        self.bits.put(eob.bits, eob.len);
        sync_flush(&mut self.bits);
        (self.bits.take_bytes(), self.crc)
    }
}

/// Encodes what lies at `data[i]` without an echo (`data[0]` is at stream position `start`): a match found through
/// the hash table, else one literal. Returns the bytes encoded.
#[inline]
fn probe(bits: &mut BitWriter, t: &Tables, last_seen: &mut [u32], start: u64, data: &[u8], i: usize) -> usize {
    if i + 4 <= data.len() {
        let seq = u32::from_le_bytes(data[i..i + 4].try_into().unwrap());
        let slot = (seq.wrapping_mul(0x9e37_79b1) >> (32 - HASH_BITS)) as usize;
        let pos = (start + i as u64) as u32;
        let distance = pos.wrapping_sub(last_seen[slot]) as usize;
        last_seen[slot] = pos;
        if (1..=WINDOW).contains(&distance) && distance <= i {
            let j = i - distance;
            if data[j..j + 4] == data[i..i + 4] {
                let n = 4 + common_len(data, j + 4, i + 4);
                put_match(bits, t, distance as u32, n);
                return n;
            }
        }
    }
    put_literals(bits, t, &data[i..i + 1]);
    1
}

/// How many bytes from `data[b]` on (to the end of `data`, at most [`MAX_MATCH`] × 4096) equal those from `data[a]`
/// on (`a < b`; the two may overlap, as a deflate match may).
#[inline]
fn common_len(data: &[u8], a: usize, b: usize) -> usize {
    let max = (data.len() - b).min(MAX_MATCH << 12);
    let (x, y) = (&data[a..a + max], &data[b..b + max]);
    let word = |s: &[u8], at: usize| u64::from_le_bytes(s[at..at + 8].try_into().unwrap());
    let mut n = 0;
    // Most echoes run for hundreds of bytes: 64 at a time until one differs.
    while n + 64 <= max {
        let (p, q) = (&x[n..n + 64], &y[n..n + 64]);
        let mut diff = 0;
        for k in 0..8 {
            diff |= word(p, 8 * k) ^ word(q, 8 * k);
        }
        if diff != 0 {
            break;
        }
        n += 64;
    }
    while n + 8 <= max {
        let diff = word(x, n) ^ word(y, n);
        if diff != 0 {
            return n + diff.trailing_zeros() as usize / 8;
        }
        n += 8;
    }
    while n < max && x[n] == y[n] {
        n += 1;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::super::inflate_segment as inflate;
    use super::*;

    fn xorshift(seed: u64) -> impl FnMut() -> u64 {
        let mut rng = crate::random_inputs::Rng::new(seed);
        move || rng.next()
    }

    /// Records of a header and a "stack" that mostly repeats the previous record's at a shifted offset, some words
    /// changed; echoes point at the previous record (some wrong on purpose).
    fn records(seed: u64, count: usize) -> (Vec<u8>, Vec<Echo>) {
        let mut next = xorshift(seed);
        let mut stack: Vec<u8> = (0..6000).map(|_| (next() % 7) as u8 * 37).collect();
        let (mut data, mut echoes) = (Vec::new(), Vec::new());
        let mut previous: Option<(u64, usize)> = None;
        for _ in 0..count {
            let header: Vec<u8> = (0..40 + next() % 60).map(|_| next() as u8).collect();
            data.extend_from_slice(&header);
            let shift = (next() % 64) as usize;
            stack.drain(..shift.min(stack.len() - 100));
            for _ in 0..next() % 20 {
                let at = (next() as usize) % stack.len();
                stack[at] = next() as u8;
            }
            stack.extend((0..shift).map(|_| next() as u8));
            let at = data.len() as u64;
            if let Some((from, prev_len)) = previous {
                let len = match next() % 10 {
                    0 => 3,
                    1 => stack.len() as u32 + 20,
                    _ => (stack.len() - shift).min(prev_len) as u32,
                };
                echoes.push(Echo { at, from: from + shift as u64, len });
            }
            data.extend_from_slice(&stack);
            previous = Some((at, stack.len()));
        }
        (data, echoes)
    }

    /// Feeds `data` in reads of the sizes `reads` gives, encoding up to the start of the last echo of each read.
    fn deflate_in_reads(data: &[u8], echoes: &[Echo], mut reads: impl FnMut() -> usize) -> (Vec<u8>, u32) {
        let mut d = EchoDeflater::new();
        let mut out = Vec::new();
        let (mut read, mut given) = (0usize, 0usize);
        while read < data.len() {
            let n = reads().min(data.len() - read);
            d.space(n)[..n].copy_from_slice(&data[read..read + n]);
            d.filled(n);
            read += n;
            let (pos, waiting) = d.waiting();
            // Echoes whose start has been read.
            let upto = echoes[given..].iter().take_while(|e| e.at < read as u64).count();
            let now = &echoes[given..given + upto];
            given += upto;
            // Hold back from the last echo's start now and then, as a caller waiting for a whole record does.
            let hold = now.last().filter(|_| n % 3 == 0).map_or(waiting.len(), |e| (e.at - pos) as usize);
            d.encode(hold, now);
            out.extend(d.take_output());
        }
        let (tail, crc) = d.finish();
        out.extend(tail);
        (out, crc.finalize())
    }

    #[test]
    fn echoes_and_probes_round_trip_in_any_reads() {
        for seed in 1..12u64 {
            let (data, echoes) = records(seed * 0x9e37_79b9, 300);
            let mut next = xorshift(seed);
            let (out, crc) = deflate_in_reads(&data, &echoes, || 1 + (next() % 50_000) as usize);
            assert!(inflate(&out) == data, "seed {seed}: round trip differs");
            assert_eq!(crc, crc32fast::hash(&data));
            assert!(out.len() * 5 < data.len(), "seed {seed}: {} of {} bytes", out.len(), data.len());
        }
    }

    #[test]
    fn common_len_counts_every_equal_byte() {
        let naive =
            |data: &[u8], a: usize, b: usize| (b..data.len()).take_while(|&j| data[j] == data[a + j - b]).count();
        for len in [0usize, 1, 7, 8, 9, 63, 64, 65, 130, 200, 1100] {
            for differ_at in [0, 1, 7, 8, 31, 63, 64, 65, 127, 128, 199, len] {
                let mut data: Vec<u8> = (0..len as u32).map(|i| (i * 7) as u8).collect();
                data.extend_from_slice(&data.clone());
                if differ_at < len {
                    data[len + differ_at] ^= 0x40;
                }
                for cut in [0, 3] {
                    let data = &data[..data.len() - cut.min(len)];
                    assert_eq!(common_len(data, 0, len), naive(data, 0, len), "len {len} differ at {differ_at}");
                }
            }
        }
    }

    #[test]
    fn without_echoes_repeats_are_still_found() {
        let mut next = xorshift(3);
        let words: Vec<[u8; 8]> = (0..50).map(|_| next().to_le_bytes()).collect();
        let data: Vec<u8> = (0..40_000).flat_map(|_| words[(next() % 50) as usize]).collect();
        let (out, _) = deflate_in_reads(&data, &[], || 4096);
        assert!(inflate(&out) == data);
        assert!(out.len() * 2 < data.len(), "{} of {} bytes", out.len(), data.len());
    }

    #[test]
    fn echoes_out_of_reach_or_pointing_forward_are_ignored() {
        let mut next = xorshift(5);
        let data: Vec<u8> = (0..100_000).map(|_| next() as u8).collect();
        let echoes = [
            Echo { at: 10, from: 20, len: 100 },
            Echo { at: 60_000, from: 1_000, len: 5_000 },
            Echo { at: 70_000, from: 70_000, len: 50 },
        ];
        let (out, crc) = deflate_in_reads(&data, &echoes, || 30_000);
        assert!(inflate(&out) == data);
        assert_eq!(crc, crc32fast::hash(&data));
    }

    #[test]
    fn empty_and_tiny_segments_decode() {
        for data in [&b""[..], b"a", b"abcabcabcabc"] {
            let mut d = EchoDeflater::new();
            d.feed(data);
            let (out, _) = d.finish();
            assert_eq!(inflate(&out), data);
        }
    }
}
