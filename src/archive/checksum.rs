//! gzip's CRC-32 of pieces made apart (segments compressed on different threads, stack texts that recur), joined
//! without reading the bytes again: the CRC of `A` then `B` follows from the CRCs of `A` and `B` and the length of
//! `B` (multiplication by x^(8·len(B)) modulo the CRC polynomial, as zlib's `crc32_combine` does).

/// The CRC-32 polynomial, bit-reversed (gzip's CRC is the reflected one).
const CRC_POLY: u32 = 0xedb8_8320;

/// The CRC-32 of `bytes` following bytes whose CRC-32 is `crc`.
fn crc_update(crc: u32, bytes: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new_with_initial(crc);
    h.update(bytes);
    h.finalize()
}

/// gzip's CRC-32 of some bytes, and how many there are: enough to join the checksums of consecutive pieces.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Checksum {
    crc: u32,
    len: u64,
}

impl Checksum {
    pub fn of(bytes: &[u8]) -> Checksum {
        Checksum { crc: crc_update(0, bytes), len: bytes.len() as u64 }
    }

    pub fn update(&mut self, bytes: &[u8]) {
        self.crc = crc_update(self.crc, bytes);
        self.len += bytes.len() as u64;
    }

    /// The checksum of these bytes followed by those of `next`.
    pub fn combine(&mut self, next: &Checksum) {
        self.append(next, crc_shift(next.len as usize));
    }

    /// [`combine`](Self::combine) with `next`'s [`crc_shift`] worked out already (for bytes that recur).
    pub fn append(&mut self, next: &Checksum, shift: u32) {
        self.crc = multiply_mod_p(shift, self.crc) ^ next.crc;
        self.len += next.len;
    }

    pub fn value(&self) -> u32 {
        self.crc
    }

    pub fn len(&self) -> u64 {
        self.len
    }
}

/// `a * b` modulo the CRC polynomial (reflected bit order: x^0 is the top bit).
fn multiply_mod_p(a: u32, mut b: u32) -> u32 {
    let mut m = 1u32 << 31;
    let mut product = 0;
    while m != 0 {
        if a & m != 0 {
            product ^= b;
            if a & (m - 1) == 0 {
                break;
            }
        }
        m >>= 1;
        b = if b & 1 != 0 { (b >> 1) ^ CRC_POLY } else { b >> 1 };
    }
    product
}

/// x^(8·len) modulo the CRC polynomial: with it, the CRC-32 of `A` then `B` is
/// `multiply_mod_p(crc_shift(len(B)), crc(A)) ^ crc(B)` (the pre- and post-inversions cancel out).
pub fn crc_shift(len: usize) -> u32 {
    // x^1, squared repeatedly: x^(2^k), from x^8 on (k = 3).
    let mut square = 1u32 << 30;
    for _ in 0..3 {
        square = multiply_mod_p(square, square);
    }
    let (mut power, mut n) = (1u32 << 31, len as u64);
    while n != 0 {
        if n & 1 != 0 {
            power = multiply_mod_p(square, power);
        }
        square = multiply_mod_p(square, square);
        n >>= 1;
    }
    power
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc_of_joined_texts_is_combined_from_their_crcs() {
        let bytes: Vec<u8> = (0..5000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
        for (a, b) in [(0, 0), (0, 7), (3, 0), (1, 1), (100, 2600), (4999, 1), (17, 4983)] {
            let (first, second) = (&bytes[..a], &bytes[a..a + b]);
            let mut joined = Checksum::of(first);
            joined.combine(&Checksum::of(second));
            assert_eq!(joined, Checksum::of(&bytes[..a + b]), "{a} + {b} bytes");
        }
    }
}
