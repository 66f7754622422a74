//! An earlier run's output beside the one this run makes. A run mostly makes what the run before made (the same
//! recording named from the same files), and comparing cached pages costs less than writing them: no page dirtied,
//! nothing to write to disk later, and no old file whose pages must be freed.
//!
//! - [`EarlierBytes`] compares an earlier file with the bytes made now, a mapped window at a time.
//! - [`SameOrNew`] makes an output in the staging folder only where it differs from the earlier file under its
//!   name, which otherwise stays in place (the folded stacks: as large as the recording when nearly every stack is
//!   distinct). perf_script.out is written over instead ([`super::script_file`]).

use crate::fs::{Dir, Staging};
use anyhow::{bail, Context, Result};
use std::fs::File;
use std::io::{IoSlice, Read, Write};
use std::path::Path;

/// An earlier file's bytes, mapped a window at a time to be compared.
pub(super) struct EarlierBytes {
    /// Its length when this run took it.
    len: u64,
    /// The part of it mapped, and where that part starts.
    window: Option<(u64, memmap2::Mmap)>,
}

/// How much of the earlier file is mapped at a time. Unmapping interrupts every other core that runs one of this
/// process's threads (a TLB shootdown), so not a mapping per chunk (chunks of distinct stacks are small); reading
/// the bytes into a buffer instead cost a third more than writing them anew. A mapped window counts towards the
/// peak RSS.
pub(super) const WINDOW_BYTES: u64 = 2 << 20;

impl EarlierBytes {
    /// `file` must be one only this user can change (see [`Staging::earlier_output`]): it is mapped.
    pub(super) fn of(file: &File) -> EarlierBytes {
        EarlierBytes { len: file.metadata().map_or(0, |m| m.len()), window: None }
    }

    pub(super) fn len(&self) -> u64 {
        self.len
    }

    /// Whether `file` holds `slices` from `at` on: false where they reach beyond its length.
    pub(super) fn holds(&mut self, file: &File, at: u64, slices: &[IoSlice]) -> std::io::Result<bool> {
        let chunk_len: u64 = slices.iter().map(|s| s.len() as u64).sum();
        if at + chunk_len > self.len {
            return Ok(false);
        }
        let mut at = at;
        for slice in slices {
            let mut rest: &[u8] = slice;
            while !rest.is_empty() {
                let held = self.mapped_from(file, at)?;
                let n = held.len().min(rest.len());
                if held[..n] != rest[..n] {
                    return Ok(false);
                }
                rest = &rest[n..];
                at += n as u64;
            }
        }
        Ok(true)
    }

    /// Unmaps what is mapped (before the file is written to).
    pub(super) fn unmap(&mut self) {
        self.window = None;
    }

    /// The file's bytes from `at` (within its length) to the end of the window that holds them, mapped first if
    /// the window does not.
    fn mapped_from(&mut self, file: &File, at: u64) -> std::io::Result<&[u8]> {
        let held = |w: &(u64, memmap2::Mmap)| at >= w.0 && at - w.0 < w.1.len() as u64;
        if !self.window.as_ref().is_some_and(held) {
            // One window at a time: the one before is unmapped first.
            self.window = None;
            let page = crate::prefault::page_size() as u64;
            let start = at - at % page;
            let len = WINDOW_BYTES.min(self.len - start) as usize;
            // SAFETY: only this user can change the file (`Staging::earlier_output`, `SetAside::write_over`): only
            // root or this user truncating it while it is compared could end the run (SIGBUS, as for perf.data:
            // docs/SECURITY.md). The window lies within the length it had when taken.
            let map = unsafe { memmap2::MmapOptions::new().offset(start).len(len).populate().map(file)? };
            self.window = Some((start, map));
        }
        let (start, map) = self.window.as_ref().expect("mapped above");
        Ok(&map[(at - start) as usize..])
    }
}

/// An output made piece by piece: into a new file in the staging folder, unless the earlier output under its name
/// holds exactly the same bytes, which then stays where it is.
pub(super) struct SameOrNew<'a> {
    staging: &'a Dir,
    name: &'a Path,
    /// The earlier file, while every byte so far is the same as its.
    earlier: Option<(File, EarlierBytes)>,
    /// The new file, from the first byte that differs on.
    new: Option<File>,
    len: u64,
}

/// What [`SameOrNew`] left: the earlier file (same bytes; to be dated now once the other outputs are in place) or a
/// new file in the staging folder, to be published.
pub(super) enum Made {
    Kept(File),
    New,
}

impl<'a> SameOrNew<'a> {
    /// For output `name` of `len` bytes: an earlier file of another length is not compared.
    pub(super) fn start(staging: &'a Staging, name: &'a Path, len: u64) -> Result<SameOrNew<'a>> {
        let earlier = name
            .to_str()
            .and_then(|name| staging.earlier_output(name))
            .map(|file| {
                let bytes = EarlierBytes::of(&file);
                (file, bytes)
            })
            .filter(|(_, bytes)| bytes.len() == len && len > 0);
        let mut made = SameOrNew { staging: staging.dir(), name, earlier: None, new: None, len: 0 };
        match earlier {
            Some(earlier) => made.earlier = Some(earlier),
            None => made.new = Some(made.create()?),
        }
        Ok(made)
    }

    fn create(&self) -> Result<File> {
        let shown = self.staging.shown(self.name);
        self.staging.create_file(self.name).with_context(|| format!("cannot create {}", shown.display()))
    }

    pub(super) fn write(&mut self, bytes: &[u8]) -> Result<()> {
        if let Some((file, earlier)) = &mut self.earlier {
            if earlier.holds(file, self.len, &[IoSlice::new(bytes)]).unwrap_or(false) {
                self.len += bytes.len() as u64;
                return Ok(());
            }
            self.part_ways()?;
        }
        let new = self.new.as_mut().expect("made when the earlier file is not the same");
        new.write_all(bytes).with_context(|| format!("cannot write {}", self.staging.shown(self.name).display()))?;
        self.len += bytes.len() as u64;
        Ok(())
    }

    /// From here on the bytes differ from the earlier file's: a new file, which starts with those that were the same.
    fn part_ways(&mut self) -> Result<()> {
        let Some((mut file, mut earlier)) = self.earlier.take() else { return Ok(()) };
        earlier.unmap();
        let mut new = self.create()?;
        let shown = self.staging.shown(self.name);
        let copied = std::io::copy(&mut (&mut file).take(self.len), &mut new);
        if copied.with_context(|| format!("cannot write {}", shown.display()))? != self.len {
            bail!("the earlier {} became shorter while it was compared", self.name.display());
        }
        self.new = Some(new);
        Ok(())
    }

    pub(super) fn finish(mut self) -> Result<Made> {
        if self.earlier.as_ref().is_some_and(|(_, earlier)| earlier.len() != self.len) {
            // Fewer bytes than it said: the earlier file is longer.
            self.part_ways()?;
        }
        Ok(match self.earlier {
            Some((file, _)) => Made::Kept(file),
            None => Made::New,
        })
    }
}
