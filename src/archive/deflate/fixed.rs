//! What every encoder of this module shares: the bit writer, deflate's fixed Huffman codes (RFC 1951 3.2.6), and
//! matches and literals written with them.

/// Farthest a match may point back.
pub const WINDOW: usize = 32 * 1024;
pub const MIN_MATCH: usize = 3;
pub const MAX_MATCH: usize = 258;

/// Little-endian bit packing, as deflate stores everything but Huffman codes (those are given here already
/// bit-reversed).
pub struct BitWriter {
    pub out: Vec<u8>,
    acc: u64,
    bits: u32,
}

impl BitWriter {
    pub fn new() -> Self {
        BitWriter { out: Vec::with_capacity(1 << 16), acc: 0, bits: 0 }
    }

    /// Appends the low `count` (≤ 32) bits of `value`.
    #[inline]
    pub fn put(&mut self, value: u32, count: u32) {
        self.acc |= (value as u64) << self.bits;
        self.bits += count;
        if self.bits >= 32 {
            self.out.extend_from_slice(&(self.acc as u32).to_le_bytes());
            self.acc >>= 32;
            self.bits -= 32;
        }
    }

    /// Pads with zero bits to the next byte boundary.
    pub fn align(&mut self) {
        while self.bits > 0 {
            self.out.push(self.acc as u8);
            self.acc >>= 8;
            self.bits = self.bits.saturating_sub(8);
        }
        self.acc = 0;
    }

    /// The whole bytes written so far (the bits of an unfinished byte stay).
    pub fn take_bytes(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.out)
    }
}

/// A sync flush: the end of the current block and an empty stored block, which leaves the stream on a byte
/// boundary.
pub fn sync_flush(bits: &mut BitWriter) {
    bits.put(0, 3);
    bits.align();
    bits.out.extend_from_slice(&[0x00, 0x00, 0xff, 0xff]);
}

/// One fixed-Huffman code, bit-reversed for the little-endian writer, with its length.
#[derive(Clone, Copy, Default)]
pub struct Code {
    pub bits: u32,
    pub len: u32,
}

pub fn reversed(code: u32, len: u32) -> Code {
    Code { bits: code.reverse_bits() >> (32 - len), len }
}

/// The fixed literal/length code (RFC 1951 3.2.6).
pub fn fixed_literal_code(symbol: u32) -> Code {
    match symbol {
        0..=143 => reversed(0x30 + symbol, 8),
        144..=255 => reversed(0x190 + symbol - 144, 9),
        256..=279 => reversed(symbol - 256, 7),
        _ => reversed(0xc0 + symbol - 280, 8),
    }
}

const LENGTH_BASE: [u32; 29] =
    [3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258];
const LENGTH_EXTRA: [u32; 29] = [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0];

/// Codes for literals and for every match length and distance, code and extra bits joined.
pub struct Tables {
    pub literal: [Code; 256],
    pub end_of_block: Code,
    /// Index: match length (3..=258).
    pub length: Vec<Code>,
}

pub fn tables() -> &'static Tables {
    static TABLES: std::sync::OnceLock<Tables> = std::sync::OnceLock::new();
    TABLES.get_or_init(|| {
        let mut literal = [Code::default(); 256];
        for (b, code) in literal.iter_mut().enumerate() {
            *code = fixed_literal_code(b as u32);
        }
        let mut length = vec![Code::default(); MAX_MATCH + 1];
        for (i, (&base, &extra)) in LENGTH_BASE.iter().zip(&LENGTH_EXTRA).enumerate() {
            let code = fixed_literal_code(257 + i as u32);
            for len in base..base + (1 << extra) {
                if len as usize > MAX_MATCH || (len == 258 && i != 28) {
                    break;
                }
                length[len as usize] = Code { bits: code.bits | (len - base) << code.len, len: code.len + extra };
            }
        }
        Tables { literal, end_of_block: fixed_literal_code(256), length }
    })
}

/// The distance code (5 bits, reversed) with its extra bits, for 1 ≤ `d` ≤ 32768.
#[inline]
pub fn distance_code(d: u32) -> Code {
    let (code, extra, extra_value) = if d <= 4 {
        (d - 1, 0, 0)
    } else {
        let d1 = d - 1;
        let top = 31 - d1.leading_zeros(); // ≥ 2
        let extra = top - 1;
        (2 * top + ((d1 >> extra) & 1), extra, d1 & ((1 << extra) - 1))
    };
    let c = reversed(code, 5);
    Code { bits: c.bits | extra_value << 5, len: 5 + extra }
}

/// Byte equality of short slices of the same length, eight bytes at a time (a library `memcmp` call costs more
/// than the comparison for the few dozen bytes of a span).
#[inline]
pub fn equal(a: &[u8], b: &[u8]) -> bool {
    debug_assert_eq!(a.len(), b.len());
    let mut ca = a.chunks_exact(8);
    let mut cb = b.chunks_exact(8);
    for (x, y) in (&mut ca).zip(&mut cb) {
        if u64::from_ne_bytes(x.try_into().unwrap()) != u64::from_ne_bytes(y.try_into().unwrap()) {
            return false;
        }
    }
    ca.remainder().iter().zip(cb.remainder()).all(|(x, y)| x == y)
}

#[inline]
pub fn put_literals(bits: &mut BitWriter, t: &Tables, bytes: &[u8]) {
    for &b in bytes {
        let c = t.literal[b as usize];
        bits.put(c.bits, c.len);
    }
}

/// A match of any length ≥ 3, as several deflate matches of at most 258 bytes.
pub fn put_match(bits: &mut BitWriter, t: &Tables, distance: u32, mut len: usize) {
    let d = distance_code(distance);
    // A length code is at most 13 bits and a distance code 18: each pair goes out as one write.
    let pair = |l: Code| (l.bits | d.bits << l.len, l.len + d.len);
    if len > MAX_MATCH {
        let (longest, longest_len) = pair(t.length[MAX_MATCH]);
        // Never leave a tail shorter than a match can be.
        while len > MAX_MATCH + MIN_MATCH - 1 {
            bits.put(longest, longest_len);
            len -= MAX_MATCH;
        }
        if len > MAX_MATCH {
            let (code, code_len) = pair(t.length[len - MIN_MATCH]);
            bits.put(code, code_len);
            len = MIN_MATCH;
        }
    }
    let (code, code_len) = pair(t.length[len]);
    bits.put(code, code_len);
}
