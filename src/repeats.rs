//! What a stage knows about the repeats in a file it makes or reads, handed to a compressor so that it can emit
//! matches without searching for them. The report stage writes perf_script.out, whose text is mostly repeats (the
//! same stacks, sample after sample); perf_data knows where a perf.data's stack copies repeat; the archive stage
//! compresses both. Neither needs to know the other: this is the whole vocabulary between them.
//!
//! Three kinds of hints:
//! - [`Span`]s cut a piece of text (a sample's header line) into parts with *keys*: parts with the same key are
//!   probably the same bytes. Keys are hints, not proof: the compressor still compares the bytes.
//! - A [`RepeatedText`] (a stack's frame lines) comes with *ids*: within one producer an id always stands for the
//!   same bytes and is never reused, so the compressor may point back at an earlier occurrence without comparing.
//! - An [`Echo`] says where a stretch of a file probably repeats an earlier stretch of it (perf.data: a thread's
//!   stack copy repeats most of its previous one). Only a guess: the compressor compares.

/// The next `len` bytes of a text and a key that is the same for parts made of the same bytes (0: no key). A span
/// with `parts > 0` is followed by that many spans that cover the same bytes in smaller pieces, for when the whole
/// does not repeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub len: u32,
    pub parts: u32,
    pub key: u64,
}

/// A block of lines that recurs whole or in part, and ids for its lines, its tails and pieces of its lines.
#[derive(Debug)]
pub struct RepeatedText {
    pub text: Box<[u8]>,
    /// The lines of `text`, in order. Bytes after the last line (e.g. a blank line) carry no ids.
    pub lines: Box<[RepeatedLine]>,
}

/// One line of a [`RepeatedText`]. Ids are 0 when there is none.
#[derive(Debug, Clone, Copy, Default)]
pub struct RepeatedLine {
    /// This line and everything after it in the block.
    pub rest: u64,
    /// This line.
    pub line: u64,
    pub len: u32,
    /// Parts of the line that also occur in other lines (e.g. a frame's name), in order and not overlapping.
    /// Pieces in the same slot with the same id are the same bytes; ids of different slots are unrelated.
    pub pieces: [Piece; 2],
}

/// `len` bytes at offset `at` of a line, identified by `id` within its slot of [`RepeatedLine::pieces`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Piece {
    pub at: u32,
    pub len: u32,
    pub id: u32,
}

/// A guess that the `len` bytes at stream position `at` repeat those at the earlier position `from` (positions count
/// the bytes given to one compressor from its first on).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Echo {
    pub at: u64,
    pub from: u64,
    pub len: u32,
}
