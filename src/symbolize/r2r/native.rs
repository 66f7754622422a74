//! The ReadyToRun "native format" (spec: dotnet/runtime `src/coreclr/vm/nativeformatreader.h`, documented in
//! `docs/design/coreclr/botr/readytorun-format.md`): variable-length unsigned/signed integers, NativeArray (a sparse
//! array: a block index every 16 elements, then a small binary tree per block) and NativeHashtable (buckets of
//! `{low hash byte, relative offset}` entries).
//!
//! Every offset here is a file offset into the whole image. The data comes from a file we do not trust: every read
//! is bounds-checked and every walk is bounded, so hostile input yields `None` or fewer entries, never a panic or a
//! loop without end.

/// Reads the native format out of an image's bytes.
#[derive(Clone, Copy)]
pub struct NativeReader<'a> {
    bytes: &'a [u8],
}

impl<'a> NativeReader<'a> {
    pub fn new(bytes: &'a [u8]) -> NativeReader<'a> {
        NativeReader { bytes }
    }

    pub fn u8(&self, at: u32) -> Option<u8> {
        self.bytes.get(at as usize).copied()
    }

    pub fn u16(&self, at: u32) -> Option<u16> {
        let at = at as usize;
        Some(u16::from_le_bytes(self.bytes.get(at..at.checked_add(2)?)?.try_into().ok()?))
    }

    pub fn u32(&self, at: u32) -> Option<u32> {
        let at = at as usize;
        Some(u32::from_le_bytes(self.bytes.get(at..at.checked_add(4)?)?.try_into().ok()?))
    }

    /// `(value, offset after it)`. The length is in the low bits of the first byte: `xxxxxxx0` one byte,
    /// `xxxxxx01` two, `xxxxx011` three, `xxxx0111` four, `xxxx1111` a full u32 follows.
    pub fn unsigned(&self, at: u32) -> Option<(u32, u32)> {
        let b0 = self.u8(at)? as u32;
        let byte = |i: u32| self.u8(at.checked_add(i)?).map(u32::from);
        Some(if b0 & 1 == 0 {
            (b0 >> 1, at.checked_add(1)?)
        } else if b0 & 2 == 0 {
            ((b0 >> 2) | (byte(1)? << 6), at.checked_add(2)?)
        } else if b0 & 4 == 0 {
            ((b0 >> 3) | (byte(1)? << 5) | (byte(2)? << 13), at.checked_add(3)?)
        } else if b0 & 8 == 0 {
            ((b0 >> 4) | (byte(1)? << 4) | (byte(2)? << 12) | (byte(3)? << 20), at.checked_add(4)?)
        } else if b0 & 16 == 0 {
            (self.u32(at.checked_add(1)?)?, at.checked_add(5)?)
        } else {
            return None;
        })
    }

    /// Like [`unsigned`](Self::unsigned), sign-extended from the encoded width.
    pub fn signed(&self, at: u32) -> Option<(i32, u32)> {
        let (raw, next) = self.unsigned(at)?;
        let bits = match next - at {
            1 => 7,
            2 => 14,
            3 => 21,
            4 => 28,
            _ => return Some((raw as i32, next)),
        };
        let shift = 32 - bits;
        Some((((raw << shift) as i32) >> shift, next))
    }
}

/// A NativeArray: element `i` is the offset of its data, or absent.
pub struct NativeArray {
    base: u32,
    count: u32,
    entry_index_size: u8,
}

const BLOCK_SIZE: u32 = 16;

impl NativeArray {
    /// The array whose header (`count << 2 | index entry size`) is at `at`.
    pub fn new(reader: &NativeReader, at: u32) -> Option<NativeArray> {
        let (header, base) = reader.unsigned(at)?;
        let entry_index_size = (header & 3) as u8;
        if entry_index_size > 2 {
            return None;
        }
        Some(NativeArray { base, count: header >> 2, entry_index_size })
    }

    pub fn len(&self) -> u32 {
        self.count
    }

    /// Offset of element `index`'s data.
    pub fn get(&self, reader: &NativeReader, index: u32) -> Option<u32> {
        if index >= self.count {
            return None;
        }
        let block = index / BLOCK_SIZE;
        let block_offset = match self.entry_index_size {
            0 => reader.u8(self.base.checked_add(block)?)? as u32,
            1 => reader.u16(self.base.checked_add(block.checked_mul(2)?)?)? as u32,
            _ => reader.u32(self.base.checked_add(block.checked_mul(4)?)?)?,
        };
        let mut offset = self.base.checked_add(block_offset)?;
        // Walk the block's tree: one level per bit of the index within the block (4 levels for 16 elements).
        let mut bit = BLOCK_SIZE >> 1;
        while bit > 0 {
            let (node, after) = reader.unsigned(offset)?;
            if index & bit != 0 {
                if node & 2 != 0 {
                    offset = offset.checked_add(node >> 2)?;
                    bit >>= 1;
                    continue;
                }
            } else if node & 1 != 0 {
                offset = after;
                bit >>= 1;
                continue;
            }
            // A leaf standing for a single element of the block.
            if node & 3 == 0 && (node >> 2) == (index & (BLOCK_SIZE - 1)) {
                return Some(after);
            }
            return None;
        }
        Some(offset)
    }
}

/// A NativeHashtable; only full enumeration is needed here.
pub struct NativeHashtable {
    base: u32,
    bucket_count: u32,
    entry_index_size: u8,
    end: u32,
}

impl NativeHashtable {
    /// The table at `at`, whose section ends at `end`.
    pub fn new(reader: &NativeReader, at: u32, end: u32) -> Option<NativeHashtable> {
        let header = reader.u8(at)? as u32;
        let entry_index_size = (header & 3) as u8;
        let shift = header >> 2;
        if entry_index_size > 2 || shift > 24 {
            return None;
        }
        let base = at.checked_add(1)?;
        let bucket_count = 1u32 << shift;
        // The bucket index (one more entry than buckets: each bucket ends where the next begins) must fit.
        let index_bytes = (bucket_count as u64 + 1) * (1u64 << entry_index_size);
        if base as u64 + index_bytes > end as u64 {
            return None;
        }
        Some(NativeHashtable { base, bucket_count, entry_index_size, end })
    }

    fn bucket_bound(&self, reader: &NativeReader, index: u32) -> Option<u32> {
        let value = match self.entry_index_size {
            0 => reader.u8(self.base + index)? as u32,
            1 => reader.u16(self.base + index * 2)? as u32,
            _ => reader.u32(self.base + index * 4)?,
        };
        self.base.checked_add(value)
    }

    /// Offsets of every entry's data, in bucket order. Each entry takes at least two bytes, so a well-formed table
    /// has at most `size / 2` of them: that also bounds the walk over a corrupt one whose buckets overlap.
    pub fn entries(&self, reader: &NativeReader) -> Vec<u32> {
        let max_entries = ((self.end - self.base) / 2) as usize;
        let mut out = Vec::new();
        for bucket in 0..self.bucket_count {
            let (Some(start), Some(stop)) = (self.bucket_bound(reader, bucket), self.bucket_bound(reader, bucket + 1))
            else {
                break;
            };
            let stop = stop.min(self.end);
            let mut at = start;
            while at < stop {
                if out.len() >= max_entries {
                    return out;
                }
                // {low byte of the hash code, signed offset relative to the offset field}
                let Some((delta, next)) = reader.signed(at + 1) else { break };
                let Some(target) = (at + 1).checked_add_signed(delta) else { break };
                out.push(target);
                at = next;
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsigned_and_signed_widths() {
        let r = NativeReader::new(&[0x08, 0x01, 0x04, 0xFB, 0xFF, 0xFF, 0xFF, 0xFF, 0x0F, 0x78, 0x56, 0x34, 0x12]);
        assert_eq!(r.unsigned(0), Some((4, 1)));
        assert_eq!(r.unsigned(1), Some((256, 3)));
        assert_eq!(r.unsigned(8), Some((0x1234_5678, 13)));
        // The four-byte form (low bits 0111) with all 28 value bits set is -1 after sign extension.
        let s = NativeReader::new(&[0xF7, 0xFF, 0xFF, 0xFF]);
        assert_eq!(s.signed(0), Some((-1, 4)));
        let one_byte_minus_two = NativeReader::new(&[0xFC]);
        assert_eq!(one_byte_minus_two.signed(0), Some((-2, 1)));
        assert_eq!(NativeReader::new(&[0x1F]).unsigned(0), None);
        assert_eq!(NativeReader::new(&[0x01]).unsigned(0), None);
    }
}
