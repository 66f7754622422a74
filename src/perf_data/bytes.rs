//! Reading and writing the native-endian structs of the perf ABI without `unsafe`: [`ByteReader`] walks a byte
//! slice (every read bounds-checked, an error instead of a panic), [`Encoder`] appends to a buffer.

use anyhow::{bail, Result};

pub struct ByteReader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> ByteReader<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        ByteReader { bytes, pos: 0 }
    }

    pub fn position(&self) -> usize {
        self.pos
    }

    pub fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.remaining() < n {
            bail!("record truncated: needed {n} more bytes at offset {}, {} left", self.pos, self.remaining());
        }
        let out = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    pub fn skip(&mut self, n: usize) -> Result<()> {
        self.bytes(n).map(|_| ())
    }

    pub fn u8(&mut self) -> Result<u8> {
        Ok(self.bytes(1)?[0])
    }

    pub fn u16(&mut self) -> Result<u16> {
        Ok(u16::from_ne_bytes(self.bytes(2)?.try_into().unwrap()))
    }

    pub fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_ne_bytes(self.bytes(4)?.try_into().unwrap()))
    }

    pub fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_ne_bytes(self.bytes(8)?.try_into().unwrap()))
    }

    /// A NUL-terminated string; reads to the end of the buffer if no NUL is found. Invalid UTF-8 is replaced.
    pub fn cstr(&mut self) -> Result<String> {
        let rest = &self.bytes[self.pos..];
        let n = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
        let s = String::from_utf8_lossy(&rest[..n]).into_owned();
        self.pos += (n + 1).min(rest.len());
        Ok(s)
    }
}

#[derive(Default)]
pub struct Encoder {
    buf: Vec<u8>,
}

impl Encoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// An encoder writing into `buf`, emptied first (its memory reused).
    pub fn over(mut buf: Vec<u8>) -> Self {
        buf.clear();
        Encoder { buf }
    }

    pub fn into_inner(self) -> Vec<u8> {
        self.buf
    }

    pub fn bytes(&mut self, b: &[u8]) {
        self.buf.extend_from_slice(b);
    }

    pub fn u8(&mut self, v: u8) {
        self.buf.push(v);
    }

    pub fn u16(&mut self, v: u16) {
        self.bytes(&v.to_ne_bytes());
    }

    pub fn u32(&mut self, v: u32) {
        self.bytes(&v.to_ne_bytes());
    }

    pub fn u64(&mut self, v: u64) {
        self.bytes(&v.to_ne_bytes());
    }

    /// A string, NUL-terminated and zero-padded to a multiple of `align` bytes (8 in records, 64 in perf's
    /// header strings).
    pub fn cstr_aligned(&mut self, s: &str, align: usize) {
        let n = (s.len() + 1).div_ceil(align) * align;
        self.bytes(s.as_bytes());
        self.buf.resize(self.buf.len() + n - s.len(), 0);
    }

    pub fn cstr_padded(&mut self, s: &str) {
        self.cstr_aligned(s, 8);
    }
}
