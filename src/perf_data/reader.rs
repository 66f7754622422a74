//! perf.data reader for files written by profcpu or by `perf record`.

use super::abi::{RECORD_SAMPLE, SAMPLE_IDENTIFIER};
use super::attr::Attr;
use super::bytes::ByteReader;
use super::header::{EventDesc, Features, FileHeader, FILE_HEADER_SIZE};
use super::records::{Record, HEADER_SIZE};
use super::sample::{Sample, SampleFormat};
use super::writer::{WriteProgress, Written};
use anyhow::{bail, Context, Result};
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub struct PerfDataReader {
    bytes: memmap2::Mmap,
    header: FileHeader,
    events: Vec<EventDesc>,
    features: Features,
    formats: SampleFormats,
    data_start: usize,
    /// Where the records present end; it moves only while a file being written is followed.
    data_end: AtomicUsize,
    /// A file still being written: walks wait at the end of its records until its writer has finished it.
    following: Option<Arc<WriteProgress>>,
    warnings: Vec<String>,
}

/// How much of the address space a followed recording maps (the file grows into it; only bytes the writer says are
/// in the file are read). A recording larger than this is read up to it.
const FOLLOWED_MAP_LEN: usize = 1 << 42;

/// How long a walk of a followed recording waits for more records before it looks again.
const FOLLOW_WAIT: Duration = Duration::from_millis(100);

/// A record as [`PerfDataReader::skim_records`] hands it over.
pub enum Skimmed {
    /// A sample, not decoded yet: its time, its event (an index in [`PerfDataReader::events`]) and its thread.
    Sample {
        time: u64,
        event: usize,
        tid: u32,
    },
    Record(Record),
}

/// What reading the data section skipped, for a "partially readable" warning.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ReadStats {
    pub records: u64,
    pub undecodable: u64,
    /// Bytes at the end of the data section that were not read: a record cut off by the end of the file, or
    /// everything from a corrupt record on (see `corrupt_at`).
    pub truncated_bytes: u64,
    /// Offset in the data section of a record header with an impossible size, where reading stopped.
    pub corrupt_at: Option<u64>,
}

impl ReadStats {
    /// `n` records that were located and counted as read did not decode when read again (a skimmed sample's body).
    pub fn undecodable_after_all(&mut self, n: u64) {
        self.records -= n;
        self.undecodable += n;
    }

    /// What was skipped, one sentence per problem (empty when every byte of the data section was read).
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.undecodable > 0 {
            out.push(format!(
                "{} of {} records could not be decoded and were skipped",
                self.undecodable,
                self.records + self.undecodable
            ));
        }
        match self.corrupt_at {
            Some(at) => out.push(format!(
                "a corrupt record at byte {at} of the data section stopped reading: its last {} bytes were skipped \
                 ({} records before it were read)",
                self.truncated_bytes,
                self.records + self.undecodable
            )),
            None if self.truncated_bytes > 0 => out.push(format!(
                "the data ends inside a record: its last {} bytes were skipped (truncated file)",
                self.truncated_bytes
            )),
            None => {}
        }
        out
    }
}

impl PerfDataReader {
    /// Reads a recording already opened (`shown` names it in messages).
    pub fn from_file(file: &std::fs::File, shown: &Path) -> Result<Self> {
        let path = shown;
        // SAFETY: the file is only read; a concurrent truncation by someone else could fault, which is the same
        // contract perf itself has with its input.
        let bytes = unsafe { memmap2::Mmap::map(file) }.with_context(|| format!("cannot map {}", path.display()))?;
        Self::from_mmap(bytes).with_context(|| format!("{} is not a readable perf.data", path.display()))
    }

    /// Reads the recording `file` while its writer is writing it: records start at file offset `data_start`, the
    /// events are `events` (the attrs in the file are final only at the end), and `progress` says how many bytes of
    /// records are in the file. Walks return once the writer has finished it (an error if the recording was
    /// abandoned); the header and features stay empty.
    pub fn following(
        file: &std::fs::File,
        shown: &Path,
        data_start: u64,
        events: Vec<EventDesc>,
        progress: Arc<WriteProgress>,
    ) -> Result<Self> {
        if events.is_empty() {
            bail!("{} describes no events", shown.display());
        }
        // SAFETY: as in `from_file`; pages past the end of the file are never touched (reads stop at what the
        // writer reports as written).
        let bytes = unsafe { memmap2::MmapOptions::new().len(FOLLOWED_MAP_LEN).map(file) }
            .with_context(|| format!("cannot map {}", shown.display()))?;
        let data_start = usize::try_from(data_start).ok().filter(|&s| s >= FILE_HEADER_SIZE as usize);
        let Some(data_start) = data_start else { bail!("{}: records inside the header", shown.display()) };
        let mut header = FileHeader::default();
        header.data.offset = data_start as u64;
        Ok(PerfDataReader {
            bytes,
            header,
            formats: SampleFormats::of(&events),
            events,
            features: Features::default(),
            data_start,
            data_end: AtomicUsize::new(data_start),
            following: Some(progress),
            warnings: Vec::new(),
        })
    }

    /// The writer's progress of a file read while it is written ([`following`](Self::following)).
    pub fn following_progress(&self) -> Option<&Arc<WriteProgress>> {
        self.following.as_ref()
    }

    /// The records present: of a followed file, those its writer has put in it so far.
    fn data(&self) -> &[u8] {
        &self.bytes[self.data_start..self.data_end.load(Ordering::Acquire)]
    }

    /// A followed file: waits until records beyond the first `seen` bytes of the data section are in the file,
    /// and returns whether the walk goes on (false: the file is complete and `seen` is its end).
    fn wait_for_records(&self, seen: usize) -> Result<bool> {
        let Some(progress) = &self.following else { return Ok(false) };
        loop {
            let (present, last) = match progress.wait_beyond(seen as u64, FOLLOW_WAIT) {
                Ok(present) => (present, false),
                Err(Written::Finished(size)) => (size, true),
                Err(Written::Abandoned) => bail!("the recording was abandoned"),
            };
            let present = usize::try_from(present).unwrap_or(usize::MAX).min(FOLLOWED_MAP_LEN - self.data_start);
            if present > seen {
                self.data_end.store(self.data_start + present, Ordering::Release);
                return Ok(true);
            }
            if last {
                return Ok(false);
            }
        }
    }

    fn from_mmap(bytes: memmap2::Mmap) -> Result<Self> {
        let header = FileHeader::decode(&bytes)?;
        let len = bytes.len() as u64;
        let mut warnings = Vec::new();

        let mut events = Vec::new();
        if header.attr_size > 16 && header.attrs.size > 0 {
            let attrs = slice(&bytes, header.attrs.offset, header.attrs.size)
                .context("its event descriptions (attr section) lie outside the file: it is cut short or corrupt")?;
            let mut ids_missing = false;
            for chunk in attrs.chunks_exact(header.attr_size as usize) {
                let attr_len = header.attr_size as usize - 16;
                let mut c = ByteReader::new(&chunk[attr_len..]);
                let (off, size) = (c.u64()?, c.u64()?);
                let ids = match slice(&bytes, off, size) {
                    Some(raw) => raw.chunks_exact(8).map(|b| u64::from_ne_bytes(b.try_into().unwrap())).collect(),
                    None => {
                        ids_missing = true;
                        vec![]
                    }
                };
                let attr = Attr::from_bytes(chunk[..attr_len].to_vec())?;
                events.push(EventDesc { name: attr.event_name(), attr, ids });
            }
            // With one event every sample is its own; with more, the ids tell them apart.
            if ids_missing && events.len() > 1 {
                warnings.push(
                    "the file is cut short: the events' sample id lists are missing, so every sample counts as the \
                     first event's"
                        .to_string(),
                );
            }
        }
        if events.is_empty() {
            bail!("it describes no events (empty attr section): the recording was not finished");
        }

        // perf writes the data size last: 0 means `perf record` was stopped before it could finish the file (perf
        // then reads to the end of the file, and so do we). There is no feature index to look for then.
        let unfinished = header.data.size == 0 && len > header.data.offset;
        let mut features = Features::default();
        let mut index_pos = header.data.offset.saturating_add(header.data.size);
        let mut features_missing = Vec::new();
        for bit in (0..256u32).filter(|&bit| header.has_feature(bit) && !unfinished) {
            let Some(entry) = slice(&bytes, index_pos, 16) else {
                features_missing.push(bit);
                continue;
            };
            index_pos += 16;
            let mut c = ByteReader::new(entry);
            let (off, size) = (c.u64()?, c.u64()?);
            match slice(&bytes, off, size) {
                Some(body) => {
                    if let Err(e) = features.decode(bit, body) {
                        warnings.push(format!("feature {bit} unreadable: {e}"));
                    }
                }
                None => features_missing.push(bit),
            }
        }
        if !features_missing.is_empty() {
            let listed: Vec<String> = features_missing.iter().map(u32::to_string).collect();
            warnings.push(format!(
                "the file is cut short: {} header feature section(s) are missing (feature bits {}); host name, \
                 kernel release and build-ids may be unknown",
                features_missing.len(),
                listed.join(", ")
            ));
        }
        let data_start = header.data.offset.min(len) as usize;
        let mut data_end = header.data.offset.saturating_add(header.data.size);
        if unfinished {
            warnings.push(format!(
                "the header gives no data size (the recording was not finished): reading the {} bytes after the \
                 header as records",
                len - header.data.offset
            ));
            data_end = len;
        } else if data_end > len {
            let present = len.saturating_sub(header.data.offset);
            warnings.push(format!(
                "the file is cut short: its data section should hold {} bytes but only {present} are there ({} bytes \
                 of records missing); reading what is there",
                header.data.size,
                header.data.size - present
            ));
            data_end = len;
        }
        if data_start < FILE_HEADER_SIZE as usize {
            bail!("data section overlaps the header");
        }

        // A tracepoint's attr holds only its id, a breakpoint's only its address: their names are in the recorder's
        // description of the events (EVENT_DESC), else (a tracepoint) in the file's tracing data — the order perf
        // takes them in.
        for (i, ev) in
            events.iter_mut().enumerate().filter(|(_, ev)| ev.attr.is_tracepoint() || ev.attr.is_breakpoint())
        {
            let traced = features.tracing.as_ref().and_then(|t| t.event(ev.attr.config())).map(|f| f.full_name());
            let traced = traced.filter(|_| ev.attr.is_tracepoint());
            let described = features.event_desc.get(i).map(|(name, _)| name.clone()).filter(|n| !n.is_empty());
            if let Some(name) = described.or(traced) {
                ev.name = name;
            }
        }
        let formats = SampleFormats::of(&events);
        Ok(PerfDataReader {
            bytes,
            header,
            events,
            features,
            formats,
            data_start,
            data_end: AtomicUsize::new(data_end as usize),
            following: None,
            warnings,
        })
    }

    pub fn header(&self) -> &FileHeader {
        &self.header
    }

    pub fn events(&self) -> &[EventDesc] {
        &self.events
    }

    pub fn features(&self) -> &Features {
        &self.features
    }

    /// Problems found while opening (truncation, sections out of bounds).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// How each sample is laid out.
    pub fn sample_formats(&self) -> &SampleFormats {
        &self.formats
    }

    /// Where the records are: the file offsets of the data section's bytes that are present.
    pub fn data_range(&self) -> std::ops::Range<u64> {
        self.data_start as u64..self.data_end.load(Ordering::Acquire) as u64
    }

    fn format_for_sample(&self, body: &[u8]) -> SampleFormat {
        self.formats.for_sample(body)
    }

    /// Calls `f` for every record of the data section, in file order. Records that cannot be decoded are counted and
    /// skipped; a record whose size is impossible ends the walk (nothing after it can be trusted).
    pub fn for_each_record(&self, mut f: impl FnMut(Record) -> Result<()>) -> Result<ReadStats> {
        self.for_each_record_at(|_, r| f(r))
    }

    /// [`for_each_record`](Self::for_each_record) with each record's offset in the data section.
    pub fn for_each_record_at(&self, mut f: impl FnMut(u64, Record) -> Result<()>) -> Result<ReadStats> {
        self.walk(false, |offset, entry| match entry {
            Skimmed::Record(r) => f(offset, r),
            Skimmed::Sample { .. } => unreachable!("samples are decoded in a full walk"),
        })
    }

    /// Like [`for_each_record_at`](Self::for_each_record_at), but samples are only located and timed, not
    /// decoded (a first pass that orders records by time; [`sample_at`](Self::sample_at) decodes a sample when it
    /// is needed). Samples too short to hold a time count as undecodable.
    pub fn skim_records(&self, f: impl FnMut(u64, Skimmed) -> Result<()>) -> Result<ReadStats> {
        self.walk(true, f)
    }

    fn walk(&self, skim: bool, mut f: impl FnMut(u64, Skimmed) -> Result<()>) -> Result<ReadStats> {
        let mut stats = ReadStats::default();
        let mut pos = 0usize;
        let base_format = self.events[0].attr.sample_format();
        // A followed file: each time the records present are read, wait for more until it is complete.
        loop {
            let data = self.data();
            while pos + HEADER_SIZE <= data.len() {
                let kind = u32::from_ne_bytes(data[pos..pos + 4].try_into().unwrap());
                let size = u16::from_ne_bytes(data[pos + 6..pos + 8].try_into().unwrap()) as usize;
                if size < HEADER_SIZE {
                    stats.corrupt_at = Some(pos as u64);
                    stats.truncated_bytes = (data.len() - pos) as u64;
                    return Ok(stats);
                }
                if pos + size > data.len() {
                    break;
                }
                let rec = &data[pos..pos + size];
                let event = if kind == RECORD_SAMPLE { self.formats.sample_event(&rec[HEADER_SIZE..]) } else { 0 };
                let format = if kind == RECORD_SAMPLE { self.formats.formats[event] } else { base_format };
                let decoded = if skim && kind == RECORD_SAMPLE {
                    let body = &rec[HEADER_SIZE..];
                    match (format.sample_time(body), format.sample_tid(body)) {
                        (Some(time), Some(tid)) => Some(Skimmed::Sample { time, event, tid }),
                        _ => None,
                    }
                } else {
                    Record::decode(rec, &format).ok().map(Skimmed::Record)
                };
                match decoded {
                    Some(b) => {
                        stats.records += 1;
                        f(pos as u64, b)?;
                    }
                    None => stats.undecodable += 1,
                }
                pos += size;
            }
            if !self.wait_for_records(data.len())? {
                stats.truncated_bytes = (data.len() - pos) as u64;
                return Ok(stats);
            }
        }
    }
}

impl PerfDataReader {
    /// The sample at `offset` in the data section (as [`skim_records`](Self::skim_records) located it), decoded into
    /// `out` (its buffers reused) but for its user stack copy, which is returned as it lies in the file (see
    /// [`SampleFormat::parse_sample_but_stack`]); an error if no sample record is there.
    pub fn sample_at(&self, offset: u64, out: &mut Sample) -> Result<&[u8]> {
        let rec = self.whole_record_at(offset)?;
        if u32::from_ne_bytes(rec[..4].try_into().unwrap()) != RECORD_SAMPLE {
            bail!("no sample at offset {offset} of the data section");
        }
        let misc = u16::from_ne_bytes(rec[4..6].try_into().unwrap());
        let body = &rec[HEADER_SIZE..];
        self.format_for_sample(body).parse_sample_but_stack(misc, body, out)
    }

    /// Asks the CPU to fetch the header of the record at `offset` into its caches.
    pub fn prefetch_header(&self, offset: u64) {
        if let Some(line) = self.data().get(offset as usize..) {
            crate::prefetch::at(line.as_ptr());
        }
    }

    /// Asks the CPU to fetch the start of the record at `offset` (header, fields, the top of a stack copy) and its
    /// tail (the user chain profcpu keeps after a stack copy's valid bytes, and the copy's length), reading its
    /// header for its size.
    pub fn prefetch_record(&self, offset: u64) {
        let Ok(rec) = self.whole_record_at(offset) else { return };
        crate::prefetch::all(&rec[..rec.len().min(PREFETCH_LINES * 64)]);
        // A small record (no stack copy) is whole in the lines above; only a longer one's tail is asked for again.
        let tail = rec.len().saturating_sub(PREFETCH_TAIL).max(PREFETCH_LINES * 64);
        if let Some(tail) = rec.get(tail..) {
            crate::prefetch::all(tail);
            crate::prefetch::at(rec[rec.len() - 8..].as_ptr());
        }
    }

    /// The bytes of the record at `offset` in the data section, header included.
    pub fn whole_record_at(&self, offset: u64) -> Result<&[u8]> {
        let data = self.data();
        let start = usize::try_from(offset).ok().filter(|&o| o + HEADER_SIZE <= data.len());
        let Some(start) = start else { bail!("no record at offset {offset} of the data section") };
        let size = u16::from_ne_bytes(data[start + 6..start + 8].try_into().unwrap()) as usize;
        if size < HEADER_SIZE || start + size > data.len() {
            bail!("no whole record at offset {offset} of the data section");
        }
        Ok(&data[start..start + size])
    }

    /// The event (an index in [`events`](Self::events)) and thread of the sample at `offset` in the data section,
    /// without decoding the rest.
    pub fn sample_event_and_tid(&self, offset: u64) -> Option<(usize, u32)> {
        let data = self.data();
        let start = usize::try_from(offset).ok()?;
        let size = u16::from_ne_bytes(data.get(start + 6..start + 8)?.try_into().unwrap()) as usize;
        let body = data.get(start + HEADER_SIZE..start.checked_add(size)?)?;
        let event = self.formats.sample_event(body);
        Some((event, self.formats.formats[event].sample_tid(body)?))
    }

    /// How many bytes of records the data section holds (so far, for a followed recording).
    pub fn data_len(&self) -> usize {
        self.data().len()
    }

    /// Maps the data section's pages from `from` to `to` (offsets in it) ahead of their use, in one call instead of
    /// a page fault every 64 KB (see [`Pager`](super::Pager)).
    pub fn map_data(&self, from: u64, to: u64) {
        let page = crate::prefault::page_size();
        let at = |offset: u64| self.data_start.saturating_add(usize::try_from(offset).unwrap_or(usize::MAX));
        let data_end = self.data_end.load(Ordering::Acquire);
        let (start, end) = (at(from) / page * page, at(to).min(data_end));
        if end > start {
            let _ = self.bytes.advise_range(memmap2::Advice::PopulateRead, start, end - start);
        }
    }

    /// Lets the kernel drop this process's copy of the data section's pages before `offset` (they are read again
    /// from the file if needed): a long recording read once need not stay resident.
    pub fn release_data_before(&self, offset: u64) {
        let page = crate::prefault::page_size();
        let data_end = self.data_end.load(Ordering::Acquire);
        let end = self.data_start.saturating_add(usize::try_from(offset).unwrap_or(usize::MAX)).min(data_end);
        let (start, end) = (self.data_start.div_ceil(page) * page, end / page * page);
        if end > start {
            // SAFETY: a read-only shared mapping of a file: dropped pages come back with the same contents (the
            // file's) on the next access, and nothing here holds a reference into them while the call runs.
            let _ =
                unsafe { self.bytes.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, start, end - start) };
        }
    }
}

/// How many 64-byte lines of a record's start [`PerfDataReader::prefetch_record`] asks for: 8 or 16 named the
/// `collect` benchmark's samples equally fast, 32 slower.
const PREFETCH_LINES: usize = 16;
/// How much of a record's end [`PerfDataReader::prefetch_record`] fetches: a stashed user chain of a .NET thread is
/// 15–25 addresses, its length and tag, then the copy's length. Fetching only the last word left the chain's
/// other lines to wait for (3 ms of the 37 ms spent naming a 36k-sample collection).
const PREFETCH_TAIL: usize = 256;

/// The layout of each event's samples.
#[derive(Debug, Clone)]
pub struct SampleFormats {
    formats: Vec<SampleFormat>,
    id_to_event: HashMap<u64, usize>,
}

impl SampleFormats {
    /// The layouts of `events`' samples.
    pub fn of(events: &[EventDesc]) -> SampleFormats {
        let mut id_to_event = HashMap::new();
        for (i, ev) in events.iter().enumerate() {
            for &id in &ev.ids {
                id_to_event.insert(id, i);
            }
        }
        SampleFormats { formats: events.iter().map(|e| e.attr.sample_format()).collect(), id_to_event }
    }

    /// The index of the event with sample id `id` (the first event when the file has one or ids are absent).
    pub fn event_index(&self, id: Option<u64>) -> usize {
        id.and_then(|id| self.id_to_event.get(&id).copied()).unwrap_or(0)
    }

    /// The index of a sample record's event (found by the leading sample id when there are several).
    pub fn sample_event(&self, body: &[u8]) -> usize {
        if self.formats.len() > 1 && self.formats[0].sample_type & SAMPLE_IDENTIFIER != 0 && body.len() >= 8 {
            let id = u64::from_ne_bytes(body[..8].try_into().unwrap());
            return self.event_index(Some(id));
        }
        0
    }

    /// The format of a sample record's body: its event's.
    pub fn for_sample(&self, body: &[u8]) -> SampleFormat {
        self.formats[self.sample_event(body)]
    }
}

fn slice(bytes: &[u8], offset: u64, size: u64) -> Option<&[u8]> {
    let end = offset.checked_add(size)?;
    if end > bytes.len() as u64 {
        return None;
    }
    Some(&bytes[offset as usize..end as usize])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf_data::echoes::tests::{stack_copy_writer, write_stack_copies};

    /// A reader following a perf.data while it is written reads every record once, in file order, with the same
    /// offsets as a reader of the finished file, and returns when the writer has finished it (the feature sections
    /// written after the records are not read as records); one whose recording is abandoned stops with an error.
    #[test]
    fn a_followed_recording_reads_as_the_finished_file() {
        for abandon in [false, true] {
            let tmp = tempfile::tempdir().unwrap();
            let mut w = stack_copy_writer(tmp.path());
            let path = tmp.path().join("perf.data");
            let file = std::fs::File::open(&path).unwrap();
            let reader =
                PerfDataReader::following(&file, &path, w.data_offset(), w.events().to_vec(), w.progress()).unwrap();
            let progress = w.progress();
            let followed = std::thread::spawn(move || {
                let mut seen = Vec::new();
                let stats = reader.skim_records(|offset, r| {
                    if let Skimmed::Sample { time, .. } = r {
                        seen.push((offset, time));
                    }
                    Ok(())
                });
                stats.map(|s| (s, seen))
            });
            for round in 0..4 {
                // More than the writer buffers, so that records reach the file while the reader waits.
                write_stack_copies(&mut w, round * 300..(round + 1) * 300);
                w.finished_round().unwrap();
                std::thread::sleep(FOLLOW_WAIT);
            }
            if abandon {
                progress.set(Written::Abandoned);
                let err = followed.join().unwrap().unwrap_err().to_string();
                assert!(err.contains("abandoned"), "{err}");
                continue;
            }
            w.finish(&Default::default()).unwrap();
            let (stats, seen) = followed.join().unwrap().unwrap();
            let complete = PerfDataReader::from_file(&std::fs::File::open(&path).unwrap(), &path).unwrap();
            let mut expected = Vec::new();
            let expected_stats = complete
                .skim_records(|offset, r| {
                    if let Skimmed::Sample { time, .. } = r {
                        expected.push((offset, time));
                    }
                    Ok(())
                })
                .unwrap();
            assert_eq!(seen.len(), 1200);
            assert_eq!(seen, expected);
            assert_eq!(stats, expected_stats);
            assert_eq!(stats.truncated_bytes, 0);
        }
    }
}
