//! perf.data compressed for the archive while it is being recorded (or, for a collection whose stack copies are
//! unwound into it, while that copy is written: see `UnwoundPerfData`). With stack copies a collection writes MBs a
//! second (6 GB in 10 minutes at 999 Hz on two busy CPUs), and compressing that after the end took as long as
//! naming every sample; followed as it grows, only what came last is left when the recording ends.
//!
//! A thread of low priority (nice 10: the target comes first) reads the records the writer's [`WriteProgress`] says
//! are in the file, every 250 ms until it says the file is complete, into a [`SegmentWriter`] with their stack
//! copies' echoes: into a scratch file, or straight into the
//! archive as its [`FarEntry`] when the archive is being made during the recording. perf.data's header and attrs
//! come first in the file but are final only at the end, and the tar header needs the final size: they make the
//! entry's head, known at the end, before the followed segment, which ends with the feature sections written last.

use super::PERF_DATA_FILE;
use crate::archive::deflate::Codec;
use crate::archive::tarball::{self, FarEntry, Segment, SegmentWriter, Tarball};
use crate::fs::{Dir, Limit};
use crate::perf_data::echoes::StackEchoes;
use crate::perf_data::{PerfDataReader, SampleFormats, WriteProgress, Written};
use anyhow::{anyhow, bail, Context, Result};
use flate2::Compression;
use std::fs::File;
use std::io::{Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// How often the thread looks for more records.
const EVERY: Duration = Duration::from_millis(250);

/// The thread following one perf.data.
pub struct PerfDataFollower {
    /// Set when the entry is no longer wanted (the run failed before perf.data was complete).
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Result<FollowedPerfData>>>,
}

/// perf.data's archive entry, made while it was recorded.
pub struct FollowedPerfData {
    /// The tar header and the file's header and attrs.
    head: Vec<u8>,
    /// The records and what follows them.
    rest: Segment,
    /// Where `rest` was written, if into the archive.
    far: Option<FarEntry>,
}

impl FollowedPerfData {
    /// The entry as segments to append (it was compressed into a scratch file).
    pub fn into_segments(self) -> Result<Vec<Segment>> {
        anyhow::ensure!(self.far.is_none(), "perf.data was compressed into the archive");
        Ok(vec![Segment::of_bytes(Codec::Miniz(Compression::fast()), &[&self.head]), self.rest])
    }

    /// Adds the entry to `archive` (which it may already be in).
    pub fn add_to(self, archive: &mut Tarball) -> Result<()> {
        match self.far {
            Some(far) => archive.join_far(far, &self.head, &self.rest),
            None => self.into_segments()?.iter().try_for_each(|s| archive.append(s)),
        }
    }
}

impl PerfDataFollower {
    /// Follows `dir/perf.data`, whose records start at file offset `data_start`, laid out as `formats` say, as far
    /// as its writer's `progress` says; into `far` (an archive's far entry, for a head of [`head_len`] bytes), else a
    /// scratch file in `dir`.
    pub fn start(
        dir: &Dir,
        data_start: u64,
        formats: SampleFormats,
        progress: Arc<WriteProgress>,
        far: Option<FarEntry>,
    ) -> Result<PerfDataFollower> {
        let (file, _) = dir.open_input(PERF_DATA_FILE, Limit::NONE)?;
        let out = match &far {
            Some(entry) => SegmentWriter::far(entry)?,
            None => {
                let spill_name = ".perf.data.deflate";
                let spill = dir
                    .scratch_file(spill_name)
                    .with_context(|| format!("cannot create a scratch file in {}", dir.path().display()))?;
                SegmentWriter::new((spill, &dir.shown(spill_name)))
            }
        };
        let shown = dir.shown(PERF_DATA_FILE);
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::Builder::new().name("archive-perf-data".into()).spawn(move || {
            super::set_nice(0, 10);
            let (head, rest) = follow(file, &shown, data_start, formats, out, &progress, &stopped)?;
            Ok(FollowedPerfData { head, rest, far })
        })?;
        Ok(PerfDataFollower { stop, thread: Some(thread) })
    }

    /// perf.data is complete (its writer has finished it): compresses what is left and returns its entry.
    pub fn finish(mut self) -> Result<FollowedPerfData> {
        let thread = self.thread.take().expect("joined once");
        thread.join().map_err(|_| anyhow!("compressing perf.data panicked"))?
    }
}

impl Drop for PerfDataFollower {
    fn drop(&mut self) {
        if let Some(thread) = self.thread.take() {
            self.stop.store(true, Ordering::Relaxed);
            let _ = thread.join();
        }
    }
}

fn follow(
    mut file: File,
    shown: &Path,
    data_start: u64,
    formats: SampleFormats,
    mut out: SegmentWriter,
    progress: &WriteProgress,
    stop: &AtomicBool,
) -> Result<(Vec<u8>, Segment)> {
    let read_error = || format!("cannot read {}", shown.display());
    let mut echoes = StackEchoes::following(formats, data_start);
    let mut pos = file.seek(SeekFrom::Start(data_start)).with_context(read_error)?;
    loop {
        // Every EVERY (no record is waited for: u64::MAX), unless the writing ends first.
        let in_file = match progress.wait_beyond(u64::MAX, EVERY) {
            _ if stop.load(Ordering::Relaxed) => bail!("perf.data's archive entry is no longer wanted"),
            Err(Written::Abandoned) => bail!("the recording failed"),
            Err(Written::Finished(_)) => break,
            Ok(in_file) => in_file,
        };
        // What the recorder has written so far: whole records, and maybe the start of one (it waits).
        pos = read_to(&mut file, pos, data_start + in_file, &mut out, &mut echoes).with_context(read_error)?;
    }
    // Complete: its header says where the records end.
    let reader = PerfDataReader::from_file(&file, shown)?;
    let records = reader.data_range();
    drop(reader);
    // Bytes read past the records while the recorder was finishing are its feature sections: written once, as
    // final as the records.
    if records.start != data_start {
        bail!("{} was not written as it was followed", shown.display());
    }
    let meta = file.metadata().with_context(read_error)?;
    let len = meta.len();
    tracing::debug!(
        "perf.data: {:.1} of {:.1} MB compressed while recording, the rest now",
        (pos - data_start) as f64 / 1e6,
        len as f64 / 1e6
    );
    // No record crosses the end of the records: what follows them is not scanned as records.
    echoes.records_end(records.end);
    if read_to(&mut file, pos, len, &mut out, &mut echoes).with_context(read_error)? < len {
        bail!("{} became shorter while it was archived", shown.display());
    }
    out.feed(tarball::padding(len));
    let records_and_rest = out.finish()?;
    let mut head = vec![0u8; data_start as usize];
    file.read_exact_at(&mut head, 0).with_context(read_error)?;
    let entry = tarball::tar_header(Path::new(PERF_DATA_FILE), len, tarball::mtime_of(&meta), false)?;
    Ok(([&entry[..], &head].concat(), records_and_rest))
}

/// The bytes of perf.data's entry head, for a recording whose records start at `data_start`.
pub fn head_len(data_start: u64) -> usize {
    tarball::BLOCK + data_start as usize
}

/// Compresses `file` from `pos` (where it stands) up to `len`, or to its end if that comes first; returns where it
/// stopped.
fn read_to(file: &mut File, mut pos: u64, len: u64, out: &mut SegmentWriter, echoes: &mut StackEchoes) -> Result<u64> {
    while pos < len {
        match out.read(file, len - pos, &mut |at, bytes, found| echoes.scan(at, bytes, found))? {
            0 => break,
            n => pos += n as u64,
        }
    }
    Ok(pos)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::archive::deflate::FINAL_BLOCK;
    use crate::archive::tarball::Compressed;
    use crate::perf_data::echoes::tests::{stack_copy_writer, write_stack_copies};
    use std::io::Read;

    /// What a followed perf.data's segments unpack to, in order, and their joined CRC.
    fn unpack(segments: &[Segment]) -> (Vec<u8>, u32) {
        let mut deflated = Vec::new();
        let mut crc = crc32fast::Hasher::new();
        for segment in segments {
            match &segment.compressed {
                Compressed::Memory(bytes) => deflated.extend_from_slice(bytes),
                Compressed::File { file, at, len } => {
                    let mut bytes = vec![0u8; *len as usize];
                    file.read_exact_at(&mut bytes, *at).unwrap();
                    deflated.extend_from_slice(&bytes);
                }
                Compressed::Far(_) => unreachable!("followed into a scratch file"),
            }
            crc.combine(&segment.crc);
        }
        deflated.extend_from_slice(&FINAL_BLOCK);
        let mut out = Vec::new();
        flate2::read::DeflateDecoder::new(&deflated[..]).read_to_end(&mut out).unwrap();
        (out, crc.finalize())
    }

    /// Records read while the file was written (the follower had time to look) and read only once it was complete
    /// (it had not): either way the segments unpack to perf.data's tar entry, the file byte for byte.
    #[test]
    fn the_segments_unpack_to_the_file_however_much_was_read_while_recording() {
        for look_while_recording in [false, true] {
            let tmp = tempfile::tempdir().unwrap();
            let dir = Dir::open(tmp.path()).unwrap();
            let mut w = stack_copy_writer(tmp.path());
            let follower =
                PerfDataFollower::start(&dir, w.data_offset(), w.sample_formats(), w.progress(), None).unwrap();
            write_stack_copies(&mut w, 0..1500);
            if look_while_recording {
                std::thread::sleep(EVERY * 3);
            }
            write_stack_copies(&mut w, 1500..2000);
            w.finish(&Default::default()).unwrap();
            let segments = follower.finish().unwrap().into_segments().unwrap();
            let (unpacked, crc) = unpack(&segments);
            let file = std::fs::read(tmp.path().join(PERF_DATA_FILE)).unwrap();
            let header = tar::Header::from_byte_slice(&unpacked[..tarball::BLOCK]);
            assert_eq!(header.path().unwrap(), Path::new(PERF_DATA_FILE));
            assert_eq!(header.size().unwrap(), file.len() as u64);
            let content = &unpacked[tarball::BLOCK..];
            assert_eq!(content.len(), file.len() + tarball::padding(file.len() as u64).len());
            assert!(content[..file.len()] == file[..], "looked while recording: {look_while_recording}");
            assert_eq!(crc, crc32fast::hash(&unpacked));
            let compressed: u64 = segments.iter().map(|s| s.compressed.size()).sum();
            assert!(compressed * 5 < file.len() as u64, "{compressed} of {} bytes: echoes not found", file.len());
        }
    }
}
