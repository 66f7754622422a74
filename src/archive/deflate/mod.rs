//! Deflate (RFC 1951) for the archive, in segments that are compressed independently and joined: each segment
//! starts on a byte boundary and ends with a sync flush (an empty stored block), no segment refers back into
//! another, and one final empty block ends the stream, so segments can be made on different threads, in any order,
//! and written one after the other. The gzip member's CRC-32 is joined from the segments' (`crc32fast::Hasher::combine`).
//!
//! The encoders:
//! - [`RepeatDeflater`] for perf_script.out: that text is mostly repeats (the same stacks sample after sample), and
//!   its writer already knows what repeats. Stack texts come with ids for their lines, tails and pieces, which
//!   always stand for the same bytes ([`crate::repeats::RepeatedText`]), so a recurrence within the window becomes a match without
//!   comparing; the header lines come with [`crate::repeats::Span`] keys, which are only hints (a byte comparison checks them).
//!   Matches are extended while the text keeps repeating at the same distance, and written as fixed-Huffman
//!   codes: no searching and no Huffman tables, many times faster than zlib's fastest level on such text, for an
//!   output about as large.
//! - [`EchoDeflater`] for perf.data, with the repeats of its stack copies as hints (see its module); for the folded
//!   stacks, with each line's repeat of the line before it (sorted lines begin alike); and without hints
//!   ([`Codec::Probe`]) for what names the frames (jitdumps, perf maps, unwind info).
//! - miniz at its fastest level ([`Codec::Miniz`]) for the small text files.

mod echo;
mod fixed;
mod repeat;

pub use echo::EchoDeflater;
pub use repeat::RepeatDeflater;

use crc32fast::Hasher as Crc;
use flate2::{Compress, Compression, FlushCompress};

/// A table of `n` zeros whose pages are made writable at once. Memory allocated zeroed is the kernel's zero page
/// until written, and an encoder reads its tables before it writes them: each page's first write is then a
/// copy-on-write fault that flushes the TLBs of the other CPUs running this process's threads, an interrupt to each
/// (many µs in a virtual machine: a third of compressing perf_script.out for a 2 MB recording).
fn writable_zeros<T: Copy + Default>(n: usize) -> Vec<T> {
    let mut table = vec![T::default(); n];
    crate::prefault::for_writing(&mut table);
    table
}

/// A stored block: `bytes` (≤ 65535) as they are. Starts and ends on a byte boundary, so it can be replaced in
/// place later by another of the same length (the archive's first tar header is written before its size is known).
pub fn stored_block(bytes: &[u8]) -> Vec<u8> {
    let len = u16::try_from(bytes.len()).expect("a stored block holds at most 65535 bytes");
    let mut out = Vec::with_capacity(bytes.len() + 5);
    // BFINAL=0, BTYPE=00, padded to the byte.
    out.push(0);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&(!len).to_le_bytes());
    out.extend_from_slice(bytes);
    out
}

/// The last block of the stream: empty, fixed Huffman, BFINAL=1.
pub const FINAL_BLOCK: [u8; 2] = [0x03, 0x00];

/// A whole deflate stream from one segment, decoded (tests of the segment encoders and their callers).
#[cfg(test)]
pub fn inflate_segment(segment: &[u8]) -> Vec<u8> {
    use std::io::Read;
    let mut stream = segment.to_vec();
    stream.extend_from_slice(&FINAL_BLOCK);
    let mut out = Vec::new();
    flate2::read::DeflateDecoder::new(&stream[..]).read_to_end(&mut out).expect("a valid deflate stream");
    out
}

/// How a segment is compressed.
#[derive(Debug, Clone, Copy)]
pub enum Codec {
    /// miniz at a level: smallest output for its time on text that repeats far apart.
    Miniz(Compression),
    /// [`EchoDeflater`] without hints (one hash probe per position, fixed codes): about twice miniz's fastest level
    /// on what a capture saves (jitdumps, perf maps, unwind info), for an output 10-20 % larger.
    Probe,
}

/// A segment compressed by `codec`, ending with a sync flush; returns it with the CRC of its input.
pub fn deflate_segment<'a>(codec: Codec, parts: impl IntoIterator<Item = &'a [u8]>) -> (Vec<u8>, Crc) {
    match codec {
        Codec::Miniz(level) => {
            let mut d = Deflater::new(level);
            for part in parts {
                d.feed(part);
            }
            d.finish()
        }
        Codec::Probe => {
            let mut d = EchoDeflater::new();
            for part in parts {
                d.feed(part);
            }
            d.finish()
        }
    }
}

/// miniz fed piece by piece ([`Codec::Miniz`]).
struct Deflater {
    compress: Compress,
    crc: Crc,
    /// Initialized up to its length; the compressed bytes are `out[..written]`. flate2's `compress_vec` with the
    /// miniz backend zeroes all spare capacity on every call (30 % of the work on a 3 MB segment), so the buffer
    /// is zeroed once as it grows and written through `compress`.
    out: Vec<u8>,
    written: usize,
}

impl Deflater {
    pub fn new(level: Compression) -> Self {
        Deflater { compress: Compress::new(level, false), crc: Crc::new(), out: vec![0; 1 << 16], written: 0 }
    }

    pub fn feed(&mut self, part: &[u8]) {
        self.crc.update(part);
        let mut input = part;
        while !input.is_empty() {
            self.make_room(input.len() / 2 + 1024);
            let before = self.compress.total_in();
            self.compress_into(input, FlushCompress::None);
            input = &input[(self.compress.total_in() - before) as usize..];
        }
    }

    pub fn finish(mut self) -> (Vec<u8>, Crc) {
        loop {
            self.make_room(1024);
            let before = self.compress.total_out();
            self.compress_into(&[], FlushCompress::Sync);
            // Done when a flush call had room left over.
            if self.compress.total_out() == before || self.written < self.out.len() {
                break;
            }
        }
        self.out.truncate(self.written);
        (self.out, self.crc)
    }

    fn make_room(&mut self, at_least: usize) {
        if self.out.len() - self.written < at_least {
            let len = (self.written + at_least).max(self.out.len() * 2);
            self.out.resize(len, 0);
        }
    }

    fn compress_into(&mut self, input: &[u8], flush: FlushCompress) {
        let before = self.compress.total_out();
        self.compress.compress(input, &mut self.out[self.written..], flush).expect("deflate cannot fail on memory");
        self.written += (self.compress.total_out() - before) as usize;
    }
}
