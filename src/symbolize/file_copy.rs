//! A file copied into memory page by page, as a parser reaches each part: how naming reads the files a target owns
//! (symbol tables, call frame information) without reading all of them or mapping them.
//!
//! Mapping the file would let whoever owns it (a container) kill profcpu with SIGBUS by truncating it during the
//! read; reading through a cache of small blocks costs one system call per symbol name; copying all of it costs a
//! page of fresh memory per 4 KB, most of it never looked at (libcoreclr's 690 KB `.eh_frame`, of which a profile
//! reads a few dozen entries). The copy is as long as the file, in anonymous memory: pages not yet filled read as
//! zeros and cost nothing.

use anyhow::{Context, Result};
use std::fs::File;
use std::os::unix::fs::FileExt;

pub struct FileCopy {
    file: File,
    /// `len` bytes (at least one page: a zero-length anonymous mapping is refused).
    bytes: memmap2::MmapMut,
    len: usize,
    /// One bit per page of `bytes`: whether it holds the file's bytes yet.
    filled: Vec<u64>,
    page: usize,
}

impl FileCopy {
    /// An empty copy of the first `len` bytes of `file` (nothing is read yet).
    pub fn new(file: File, len: u64) -> Result<FileCopy> {
        let len = usize::try_from(len).context("too large to copy")?;
        let bytes = memmap2::MmapMut::map_anon(len.max(1)).context("out of memory")?;
        let page = crate::prefault::page_size();
        let filled = vec![0; len.div_ceil(page).div_ceil(64)];
        Ok(FileCopy { file, bytes, len, filled, page })
    }

    /// The file copied.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// The file, as far as it is filled (zeros elsewhere).
    pub fn bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }

    /// Fills the pages holding `offset..offset + len` (clamped to the copy's length) that are not filled yet, each
    /// run of missing pages with one read. Fails when the file has become shorter than the copy.
    pub fn fill(&mut self, offset: u64, len: u64) -> Result<()> {
        let end = offset.saturating_add(len).min(self.len as u64) as usize;
        let offset = offset.min(end as u64) as usize;
        if offset == end {
            return Ok(());
        }
        let (first, last) = (offset / self.page, (end - 1) / self.page);
        let mut page = first;
        while page <= last {
            if self.is_filled(page) {
                page += 1;
                continue;
            }
            let run_end = (page..=last).find(|&p| self.is_filled(p)).unwrap_or(last + 1);
            let (from, to) = (page * self.page, (run_end * self.page).min(self.len));
            crate::prefault::for_writing(&mut self.bytes[from..to]);
            self.file.read_exact_at(&mut self.bytes[from..to], from as u64).context("cannot read the file")?;
            (page..run_end).for_each(|p| self.filled[p / 64] |= 1 << (p % 64));
            page = run_end;
        }
        Ok(())
    }

    /// Whether page `page` holds the file's bytes yet.
    pub(super) fn is_filled(&self, page: usize) -> bool {
        self.filled[page / 64] & (1 << (page % 64)) != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filled_pages_hold_the_file_and_the_rest_zeros() {
        let page = crate::prefault::page_size();
        let data: Vec<u8> = (0..page * 10 + 123).map(|i| (i % 251) as u8 + 1).collect();
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), &data).unwrap();
        let mut copy = FileCopy::new(std::fs::File::open(file.path()).unwrap(), data.len() as u64).unwrap();
        copy.fill(page as u64 * 2 + 5, 10).unwrap();
        copy.fill(page as u64 * 4 - 1, 2).unwrap();
        copy.fill(data.len() as u64 - 1, 1000).unwrap();
        copy.fill(u64::MAX - 1, 10).unwrap();
        let filled = [2, 3, 4, 10];
        for (i, chunk) in copy.bytes().chunks(page).enumerate() {
            let expected: &[u8] =
                if filled.contains(&i) { &data[i * page..][..chunk.len()] } else { &[0; 4096][..chunk.len()] };
            assert_eq!(chunk, expected, "page {i}");
            assert_eq!(copy.is_filled(i), filled.contains(&i));
        }
        assert_eq!(copy.bytes().len(), data.len());
    }

    #[test]
    fn a_file_cut_short_is_an_error() {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), [1u8; 10_000]).unwrap();
        let mut copy = FileCopy::new(std::fs::File::open(file.path()).unwrap(), 10_000).unwrap();
        std::fs::write(file.path(), [1u8; 100]).unwrap();
        assert!(copy.fill(0, 10).is_err());
    }
}
