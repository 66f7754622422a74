//! Streaming perf.data writer: records go to disk as they arrive, the header is filled in by `finish`.

use super::attr::SampleFormat;
use super::bytes::Encoder;
use super::header::{EventDesc, Features, FileHeader, Section, FILE_HEADER_SIZE};
use super::records::{Record, PERF_RECORD_FINISHED_ROUND};
use anyhow::{Context, Result};
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

pub struct PerfDataWriter {
    out: BufWriter<File>,
    path: PathBuf,
    events: Vec<EventDesc>,
    format: SampleFormat,
    data_size: u64,
}

impl PerfDataWriter {
    /// Creates `path`, which must not exist yet: never writes through a symlink or over another file.
    pub fn create(path: &Path, events: Vec<EventDesc>) -> Result<Self> {
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        let format = events.first().map(|e| e.attr.sample_format()).unwrap_or_default();
        let mut out = BufWriter::with_capacity(1 << 20, file);
        // A header with zero sizes until `finish`: a file cut short is recognisable as unfinished.
        out.write_all(&FileHeader::default().encode())?;
        Ok(PerfDataWriter { out, path: path.to_owned(), events, format, data_size: 0 })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The sample layout of the first event; synthesized records use it for their `sample_id` trailer.
    pub fn sample_format(&self) -> SampleFormat {
        self.format
    }

    /// Sample ids of file descriptors opened after `create` (e.g. for threads found later).
    pub fn add_ids(&mut self, event: usize, ids: &[u64]) {
        self.events[event].ids.extend_from_slice(ids);
    }

    /// Appends complete records exactly as the kernel wrote them.
    pub fn write_raw(&mut self, records: &[u8]) -> Result<()> {
        self.out.write_all(records).with_context(|| format!("cannot write {}", self.path.display()))?;
        self.data_size += records.len() as u64;
        Ok(())
    }

    pub fn write_record(&mut self, record: &Record) -> Result<()> {
        let bytes = record.encode(&self.format);
        self.write_raw(&bytes)
    }

    /// Marks that every record before this point may be sorted by time before any after it (perf's ordering rule).
    pub fn finished_round(&mut self) -> Result<()> {
        let mut e = Encoder::new();
        e.u32(PERF_RECORD_FINISHED_ROUND);
        e.u16(0);
        e.u16(8);
        self.write_raw(&e.into_inner())
    }

    /// Bytes of records written so far.
    pub fn data_size(&self) -> u64 {
        self.data_size
    }

    /// Writes attrs, ids and feature sections after the data and then the real header.
    pub fn finish(mut self, features: &Features) -> Result<()> {
        let ctx = || format!("cannot finish {}", self.path.display());
        let mut header =
            FileHeader { data: Section { offset: FILE_HEADER_SIZE, size: self.data_size }, ..Default::default() };
        let mut pos = FILE_HEADER_SIZE + self.data_size;

        // perf (and our reader) find the feature index at data.offset + data.size, so it must follow the data
        // directly; the ids and attrs are located through the header and go last.
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

        let attr_size = self.events.first().map_or(0, |e| e.attr.bytes().len()) + 16;
        header.attr_size = attr_size as u64;
        header.attrs = Section { offset: pos, size: (attr_size * self.events.len()) as u64 };
        for (ev, ids) in self.events.iter().zip(&id_sections) {
            let mut e = Encoder::new();
            e.bytes(ev.attr.bytes());
            e.u64(ids.offset);
            e.u64(ids.size);
            self.out.write_all(&e.into_inner()).with_context(ctx)?;
        }

        self.out.seek(SeekFrom::Start(0)).with_context(ctx)?;
        self.out.write_all(&header.encode()).with_context(ctx)?;
        let file = self.out.into_inner().map_err(|e| e.into_error()).with_context(ctx)?;
        file.sync_all().with_context(ctx)?;
        Ok(())
    }
}
