//! Where a perf.data repeats itself, told to its compressor as [`Echo`]s. With stack copies (`-call-graph
//! auto|dwarf`, `perf record --call-graph dwarf`) nearly all of a recording is the copies, and a thread's copy
//! repeats most of its previous one: the frames further out have not changed since. Both copies start at their
//! stack pointer, so the bytes of one stack address lie at `copy start + (address − sp)` in each; the echo pairs the
//! stack addresses both copies hold. (Measured on the .NET web API at 999–9999 Hz: 94–99 % of the copies' bytes
//! repeat the thread's previous copy.)

use super::abi::{RECORD_SAMPLE, REG_X86_SP};
use super::reader::{PerfDataReader, SampleFormats};
use super::records::HEADER_SIZE;
use crate::repeats::Echo;
use rustc_hash::FxHashMap;
use std::ops::Range;

/// Finds the echoes of a perf.data as it is read in order (see [`scan`](Self::scan)).
pub struct StackEchoes {
    formats: SampleFormats,
    /// File offsets of the records (the end is open while the file is being written).
    data: Range<u64>,
    /// Stream position of the first record.
    stream_of_data: u64,
    /// File offset of the next record to look at (`data.end` once there is nothing more to find).
    next: u64,
    /// Each thread's last stack copy.
    last: FxHashMap<u32, StackCopy>,
}

#[derive(Clone, Copy)]
struct StackCopy {
    /// Stream position of its first byte.
    at: u64,
    sp: u64,
    len: u64,
}

/// Shorter overlaps are left to the compressor's own search.
const MIN_ECHO: u64 = 64;

impl StackEchoes {
    /// For the file `reader` reads, given to the compressor from stream position `base` on.
    pub fn new(reader: &PerfDataReader, base: u64) -> StackEchoes {
        let data = reader.data_range();
        StackEchoes {
            formats: reader.sample_formats().clone(),
            next: data.start,
            stream_of_data: base + data.start,
            data,
            last: FxHashMap::default(),
        }
    }

    /// For a perf.data still being written, whose samples are laid out as `formats` say, given to the compressor
    /// from its first record (file offset `data_start`) on, at stream position 0. Every byte given is taken for a
    /// record until [`records_end`](Self::records_end) says where they end.
    pub fn following(formats: SampleFormats, data_start: u64) -> StackEchoes {
        StackEchoes {
            formats,
            data: data_start..u64::MAX,
            stream_of_data: 0,
            next: data_start,
            last: FxHashMap::default(),
        }
    }

    /// The records end at file offset `end` (what follows is perf.data's feature sections).
    pub fn records_end(&mut self, end: u64) {
        self.data.end = end.max(self.data.start);
    }

    /// `bytes` are the stream from position `at` on, the next to compress (they start where the bytes the last
    /// call did not take started). Appends the echoes of the whole records among them, in order, to `out` and
    /// returns how many of the bytes can be compressed now: all of them, or those before a record that continues
    /// past them.
    pub fn scan(&mut self, at: u64, bytes: &[u8], out: &mut Vec<Echo>) -> usize {
        let end = at + bytes.len() as u64;
        while self.next < self.data.end {
            let record_at = self.stream_of_data + (self.next - self.data.start);
            if record_at < at {
                // Not given in order: find nothing more.
                self.next = self.data.end;
                break;
            }
            if record_at >= end {
                break;
            }
            let i = (record_at - at) as usize;
            let Some(header) = bytes.get(i..i + HEADER_SIZE) else { return i };
            let size = u16::from_ne_bytes([header[6], header[7]]) as u64;
            if size < HEADER_SIZE as u64 || self.next + size > self.data.end {
                // A corrupt or cut record: nothing after it can be located.
                self.next = self.data.end;
                break;
            }
            let Some(record) = bytes.get(i..i + size as usize) else { return i };
            if u32::from_ne_bytes(header[..4].try_into().unwrap()) == RECORD_SAMPLE {
                self.sample(record_at, record, out);
            }
            self.next += size;
        }
        bytes.len()
    }

    fn sample(&mut self, record_at: u64, record: &[u8], out: &mut Vec<Echo>) {
        let body = &record[HEADER_SIZE..];
        let format = self.formats.for_sample(body);
        let Ok(fields) = format.sample_fields(body) else { return };
        let Some(user) = fields.user.filter(|u| !u.stack.is_empty()) else { return };
        let Some(sp) = user.reg(format.regs_user_mask, REG_X86_SP) else { return };
        let offset = user.stack.as_ptr() as u64 - record.as_ptr() as u64;
        let copy = StackCopy { at: record_at + offset, sp, len: user.stack.len() as u64 };
        let Some(previous) = self.last.insert(fields.tid, copy) else { return };
        // The stack addresses both copies hold.
        let low = copy.sp.max(previous.sp);
        let high = copy.sp.saturating_add(copy.len).min(previous.sp.saturating_add(previous.len));
        // Stack pointers are the recording's: a hostile one lies near 2^64.
        if high.checked_sub(low).is_some_and(|n| n >= MIN_ECHO) {
            let len = u32::try_from(high - low).unwrap_or(u32::MAX);
            out.push(Echo { at: copy.at + (low - copy.sp), from: previous.at + (low - previous.sp), len });
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::perf_data::abi::{REGS_ABI_64, SAMPLE_REGS_USER, SAMPLE_STACK_USER, SAMPLE_TID, SAMPLE_TIME};
    use crate::perf_data::{EventDesc, PerfDataWriter, Record, Sample, UserContext};

    const MASK: u64 = 0xff_0fff;

    /// A perf.data in `dir` for samples with user registers and stack copies.
    pub(crate) fn stack_copy_writer(dir: &std::path::Path) -> PerfDataWriter {
        let mut kernel_attr = perf_event_open_sys::bindings::perf_event_attr {
            size: 128,
            sample_type: (SAMPLE_TID | SAMPLE_TIME | SAMPLE_REGS_USER | SAMPLE_STACK_USER),
            sample_regs_user: MASK,
            ..Default::default()
        };
        kernel_attr.set_sample_id_all(1);
        let attr = crate::perf_data::Attr::from_kernel(&kernel_attr);
        let event = EventDesc { name: attr.event_name(), attr, ids: vec![] };
        let dir = crate::fs::Dir::open(dir).unwrap();
        PerfDataWriter::create(&dir, "perf.data", vec![event]).unwrap()
    }

    /// Writes samples number `numbers` of two threads whose stacks (at fixed addresses) change only near the stack
    /// pointer; returns each one's thread, stack pointer and copy.
    pub(crate) fn write_stack_copies(
        w: &mut PerfDataWriter,
        numbers: std::ops::Range<u64>,
    ) -> Vec<(u32, u64, Vec<u8>)> {
        let mut samples = Vec::new();
        for i in numbers {
            let tid = 100 + (i % 2) as u32;
            let top = 0x7fff_0000u64 + tid as u64 * 0x10000;
            let sp = top - 3000 + (i % 5) * 16;
            // The same bytes at the same address from copy to copy, except for a few near the stack pointer.
            let stack: Vec<u8> =
                (sp..top).map(|a| (a.wrapping_mul(31) >> 3) as u8 ^ if a < sp + 40 { i as u8 } else { 0 }).collect();
            write_copy(w, i * 1000, tid, sp, &stack);
            samples.push((tid, sp, stack));
        }
        samples
    }

    /// Writes one sample of thread `tid` at `time` whose stack pointer is `sp` and stack copy `stack`.
    fn write_copy(w: &mut PerfDataWriter, time: u64, tid: u32, sp: u64, stack: &[u8]) {
        let mut regs = vec![0u64; MASK.count_ones() as usize];
        regs[7] = sp;
        let user = UserContext { abi: REGS_ABI_64, mask: MASK, regs, stack: stack.to_vec() };
        let s = Sample {
            misc: 2,
            id: None,
            ip: 0x401000,
            pid: 100,
            tid,
            time,
            cpu: 0,
            period: 1,
            callchain: vec![],
            raw: vec![],
            user: Some(user),
        };
        w.write_record(&Record::Sample(s)).unwrap();
    }

    /// Found by the postprocess fuzz target: copies whose stack pointer lies near 2^64 overflowed the overlap test.
    #[test]
    fn stack_pointers_near_the_top_of_the_address_space_find_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = stack_copy_writer(dir.path());
        write_copy(&mut w, 1, 100, u64::MAX - 20, &[7; 100]);
        write_copy(&mut w, 2, 100, u64::MAX - 10, &[7; 100]);
        w.finish(&Default::default()).unwrap();
        let path = dir.path().join("perf.data");
        let bytes = std::fs::read(&path).unwrap();
        let reader = PerfDataReader::from_file(&std::fs::File::open(&path).unwrap(), &path).unwrap();
        let mut found = Vec::new();
        assert_eq!(StackEchoes::new(&reader, 0).scan(0, &bytes, &mut found), bytes.len());
        assert!(found.is_empty(), "{found:?}");
    }

    fn recording(dir: &std::path::Path) -> Vec<(u32, u64, Vec<u8>)> {
        let mut w = stack_copy_writer(dir);
        let samples = write_stack_copies(&mut w, 0..40);
        w.finish(&Default::default()).unwrap();
        samples
    }

    #[test]
    fn echoes_pair_the_stack_addresses_of_a_threads_copies_in_any_reads() {
        let dir = tempfile::tempdir().unwrap();
        let samples = recording(dir.path());
        let path = dir.path().join("perf.data");
        let bytes = std::fs::read(&path).unwrap();
        let reader = PerfDataReader::from_file(&std::fs::File::open(&path).unwrap(), &path).unwrap();
        for read_size in [bytes.len(), 4096, 1000, 97] {
            let mut echoes = StackEchoes::new(&reader, 512);
            let mut found = Vec::new();
            let mut done = 0usize;
            let mut read = 0usize;
            while done < bytes.len() {
                read = (read + read_size).min(bytes.len());
                let taken = echoes.scan(512 + done as u64, &bytes[done..read], &mut found);
                done += taken;
            }
            // Every copy after a thread's first echoes its previous one, and the bytes agree.
            assert_eq!(found.len(), samples.len() - 2, "reads of {read_size}");
            for e in &found {
                let (at, from) = ((e.at - 512) as usize, (e.from - 512) as usize);
                let n = e.len as usize;
                assert!(n >= 2900, "{n}");
                let differing = (0..n).filter(|&k| bytes[at + k] != bytes[from + k]).count();
                assert!(differing <= 40, "{differing} of {n} bytes differ");
            }
        }
    }
}
