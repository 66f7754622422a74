//! Streaming perf.data writer: records go to disk as they arrive, the header is filled in by `finish`.

use super::abi::RECORD_FINISHED_ROUND;
use super::bytes::Encoder;
use super::header::{EventDesc, Features, FileHeader, Section, FILE_HEADER_SIZE};
use super::records::{Record, Sample};
use super::sample::SampleFormat;
use crate::fs::Dir;
use anyhow::{Context, Result};
use std::fs::File;
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

pub struct PerfDataWriter {
    out: BufWriter<File>,
    path: PathBuf,
    events: Vec<EventDesc>,
    format: SampleFormat,
    /// Where the data section starts: after the header and the attr section.
    data_offset: u64,
    data_size: u64,
    progress: Arc<WriteProgress>,
    /// The last sample encoded: its buffer is reused for the next.
    encoded: Vec<u8>,
}

impl PerfDataWriter {
    /// Creates file `name` in `dir`, which must not exist yet: never writes through a symlink or over another file.
    pub fn create(dir: &Dir, name: &str, events: Vec<EventDesc>) -> Result<Self> {
        let path = dir.shown(name);
        let file = dir.create_file(name).with_context(|| format!("cannot create {}", path.display()))?;
        let format = events.first().map(|e| e.attr.sample_format()).unwrap_or_default();
        let mut out = BufWriter::with_capacity(1 << 20, file);
        // A header with zero sizes until `finish`: a file cut short is recognisable as unfinished.
        out.write_all(&FileHeader::default().encode())?;
        // The attrs go right after the header (their id lists are not known yet; `finish` rewrites them in place):
        // a finished file cut short later (a partial copy) then keeps the sample layout needed to read its data.
        out.write_all(&attr_section(&events, &vec![Section::default(); events.len()]))?;
        let data_offset = FILE_HEADER_SIZE + attr_entry_size(&events) * events.len() as u64;
        let progress = Arc::new(WriteProgress::default());
        Ok(PerfDataWriter { out, path, events, format, data_offset, data_size: 0, progress, encoded: Vec::new() })
    }

    /// Sample ids of file descriptors opened after `create` (e.g. for threads found later).
    pub fn add_ids(&mut self, event: usize, ids: &[u64]) {
        self.events[event].ids.extend_from_slice(ids);
    }

    /// Appends complete records exactly as the kernel wrote them.
    pub fn write_raw(&mut self, records: &[u8]) -> Result<()> {
        self.out.write_all(records).with_context(|| format!("cannot write {}", self.path.display()))?;
        self.data_size += records.len() as u64;
        // What the buffer still holds may include the header and attrs, before any record reaches the file.
        let in_file = (self.data_offset + self.data_size).saturating_sub(self.out.buffer().len() as u64);
        self.progress.in_file.store(in_file.saturating_sub(self.data_offset), Ordering::Release);
        Ok(())
    }

    /// Encodes a record; a sample in the first event's layout (see [`write_sample`](Self::write_sample)).
    pub fn write_record(&mut self, record: &Record) -> Result<()> {
        let bytes = record.encode(&self.format);
        self.write_raw(&bytes)
    }

    /// Encodes a sample of event `event` (an index in the events given to [`create`](Self::create)) in its layout.
    pub fn write_sample(&mut self, sample: &Sample, event: usize) -> Result<()> {
        let format = self.events.get(event).map_or(self.format, |e| e.attr.sample_format());
        let mut bytes = std::mem::take(&mut self.encoded);
        Record::encode_sample_into(sample, &format, &mut bytes);
        let written = self.write_raw(&bytes);
        self.encoded = bytes;
        written
    }

    /// Marks that every record before this point may be sorted by time before any after it (perf's ordering rule).
    pub fn finished_round(&mut self) -> Result<()> {
        let mut e = Encoder::new();
        e.u32(RECORD_FINISHED_ROUND);
        e.u16(0);
        e.u16(8);
        self.write_raw(&e.into_inner())
    }

    /// Where the records start in the file.
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }

    /// How the events' samples are laid out (with the ids known so far).
    #[cfg(test)]
    pub fn sample_formats(&self) -> super::SampleFormats {
        super::SampleFormats::of(&self.events)
    }

    /// The events, with the ids known so far.
    pub fn events(&self) -> &[EventDesc] {
        &self.events
    }

    /// Bytes of records written so far.
    pub fn data_size(&self) -> u64 {
        self.data_size
    }

    /// How far the records are in the file, for a reader that follows it ([`PerfDataReader::following`]).
    ///
    /// [`PerfDataReader::following`]: super::PerfDataReader::following
    pub fn progress(&self) -> Arc<WriteProgress> {
        self.progress.clone()
    }

    /// Writes the feature sections and ids after the data, fills in the attrs' id lists, then the real header.
    pub fn finish(mut self, features: &Features) -> Result<()> {
        let ctx = || format!("cannot finish {}", self.path.display());
        let mut header =
            FileHeader { data: Section { offset: self.data_offset, size: self.data_size }, ..Default::default() };
        let mut pos = self.data_offset + self.data_size;

        // perf (and our reader) find the feature index at data.offset + data.size, so it must follow the data
        // directly; the ids go last.
        let bodies = features.encode(&self.events);
        let index_size = (bodies.len() * 16) as u64;
        let mut body_pos = pos + index_size;
        let mut index = Encoder::new();
        for (bit, body) in &bodies {
            header.set_feature(*bit);
            index.u64(body_pos);
            index.u64(body.len() as u64);
            body_pos += body.len() as u64;
        }
        self.out.write_all(&index.into_inner()).with_context(ctx)?;
        for (_, body) in &bodies {
            self.out.write_all(body).with_context(ctx)?;
        }
        pos = body_pos;

        let mut id_sections = Vec::new();
        for ev in &self.events {
            let mut e = Encoder::new();
            for &id in &ev.ids {
                e.u64(id);
            }
            let bytes = e.into_inner();
            id_sections.push(Section { offset: pos, size: bytes.len() as u64 });
            pos += bytes.len() as u64;
            self.out.write_all(&bytes).with_context(ctx)?;
        }

        let entry_size = attr_entry_size(&self.events);
        header.attr_size = entry_size;
        header.attrs = Section { offset: FILE_HEADER_SIZE, size: entry_size * self.events.len() as u64 };
        self.out.seek(SeekFrom::Start(FILE_HEADER_SIZE)).with_context(ctx)?;
        self.out.write_all(&attr_section(&self.events, &id_sections)).with_context(ctx)?;

        self.out.seek(SeekFrom::Start(0)).with_context(ctx)?;
        self.out.write_all(&header.encode()).with_context(ctx)?;
        let file = self.out.into_inner().map_err(|e| e.into_error()).with_context(ctx)?;
        file.sync_all().with_context(ctx)?;
        self.progress.set(Written::Finished(self.data_size));
        Ok(())
    }
}

/// Where a perf.data being written stands, shared by its writer and the readers that follow it: the bytes of
/// records already in the file (a reader may map them; what the writer still buffers is not there yet), and
/// whether the file is complete.
#[derive(Default)]
pub struct WriteProgress {
    in_file: AtomicU64,
    state: Mutex<Option<Written>>,
    changed: Condvar,
}

/// How a perf.data's writing ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// Complete, with this many bytes of records.
    Finished(u64),
    /// The recording failed: no more records come, and the file is not complete.
    Abandoned,
}

impl WriteProgress {
    /// Bytes of records in the file so far, or how the writing ended. Waits up to `timeout` for the end when no
    /// record beyond `seen` bytes is there yet (`u64::MAX`: waits the whole `timeout` unless the writing ends).
    pub fn wait_beyond(&self, seen: u64, timeout: Duration) -> Result<u64, Written> {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let state = match *state {
            None if self.in_file.load(Ordering::Acquire) <= seen => {
                self.changed.wait_timeout(state, timeout).unwrap_or_else(|e| e.into_inner()).0
            }
            _ => state,
        };
        match *state {
            Some(end) => Err(end),
            None => Ok(self.in_file.load(Ordering::Acquire)),
        }
    }

    /// The writing ended as `how` says (the first word stands).
    pub fn set(&self, how: Written) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.get_or_insert(how);
        self.changed.notify_all();
    }
}

/// Bytes per attr section entry: the attr and the `{offset, size}` of its id list.
fn attr_entry_size(events: &[EventDesc]) -> u64 {
    events.first().map_or(0, |e| e.attr.bytes().len() as u64 + 16)
}

fn attr_section(events: &[EventDesc], ids: &[Section]) -> Vec<u8> {
    let mut e = Encoder::new();
    for (ev, ids) in events.iter().zip(ids) {
        e.bytes(ev.attr.bytes());
        e.u64(ids.offset);
        e.u64(ids.size);
    }
    e.into_inner()
}
