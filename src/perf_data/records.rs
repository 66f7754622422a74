//! The records of a perf.data data section, decoded into plain structs.
//!
//! Layouts follow `include/uapi/linux/perf_event.h` (`enum perf_event_type`) and, for the user-space record types
//! (>= 64), `tools/perf/util/event.h`. Every record starts with `struct perf_event_header { u32 type; u16 misc;
//! u16 size; }`. Non-sample records end with a `sample_id` trailer when the attr has `sample_id_all`.

use super::abi::{MISC_COMM_EXEC, MISC_MMAP_BUILD_ID, RECORD_COMM, RECORD_EXIT, RECORD_FINISHED_ROUND, RECORD_FORK};
use super::abi::{MISC_SWITCH_OUT, MISC_SWITCH_OUT_PREEMPT, RECORD_SWITCH, RECORD_SWITCH_CPU_WIDE};
use super::abi::{RECORD_LOST, RECORD_LOST_SAMPLES, RECORD_MMAP, RECORD_MMAP2, RECORD_SAMPLE};
use super::bytes::{ByteReader, Encoder};
pub use super::sample::{Sample, SampleFormat, SampleId};
use anyhow::{bail, Result};

pub const HEADER_SIZE: usize = 8;

/// A code mapping: MMAP and MMAP2 are both decoded into this.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Mmap {
    pub misc: u16,
    pub pid: u32,
    pub tid: u32,
    pub addr: u64,
    pub len: u64,
    pub pgoff: u64,
    pub maj: u32,
    pub min: u32,
    pub ino: u64,
    pub ino_generation: u64,
    /// Set when the kernel put the build-id in the record instead of device/inode (`MISC_MMAP_BUILD_ID`).
    pub build_id: Option<Vec<u8>>,
    pub prot: u32,
    pub flags: u32,
    pub filename: String,
    pub sample_id: SampleId,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Comm {
    pub misc: u16,
    pub pid: u32,
    pub tid: u32,
    pub comm: String,
    pub sample_id: SampleId,
}

impl Comm {
    /// True when the name changed because the task called exec (its address space was replaced).
    pub fn is_exec(&self) -> bool {
        self.misc & MISC_COMM_EXEC != 0
    }
}

/// FORK and EXIT share one layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Task {
    pub pid: u32,
    pub ppid: u32,
    pub tid: u32,
    pub ptid: u32,
    pub time: u64,
    pub sample_id: SampleId,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lost {
    pub id: u64,
    pub lost: u64,
    pub sample_id: SampleId,
}

/// A task arriving on or leaving a CPU: PERF_RECORD_SWITCH (an event of that task asked for `context_switch`) or
/// PERF_RECORD_SWITCH_CPU_WIDE (a CPU-wide event did, and the record names the other task too). The task is the
/// one in `sample_id`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Switch {
    /// Leaving the CPU (else arriving).
    pub out: bool,
    /// Left while still runnable: preempted, not blocked (`MISC_SWITCH_OUT_PREEMPT`, Linux 4.17+).
    pub preempt: bool,
    /// CPU-wide records only: `(pid, tid)` of the task switched to (when leaving) or from (when arriving).
    pub next_prev: Option<(u32, u32)>,
    pub sample_id: SampleId,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    Sample(Sample),
    Mmap(Mmap),
    Comm(Comm),
    Fork(Task),
    Exit(Task),
    Lost(Lost),
    /// RECORD_LOST_SAMPLES: samples the kernel dropped (e.g. after throttling), counted without an id.
    LostSamples {
        lost: u64,
        sample_id: SampleId,
    },
    Switch(Switch),
    FinishedRound,
    /// Any other record, kept as raw bytes (header included) so it can be copied through.
    Other {
        kind: u32,
        misc: u16,
        bytes: Vec<u8>,
    },
}

impl Record {
    /// The time the record carries (sample time, or the `sample_id` trailer's), if any.
    pub fn time(&self) -> Option<u64> {
        match self {
            Record::Sample(s) => Some(s.time),
            Record::Mmap(m) => m.sample_id.time,
            Record::Comm(c) => c.sample_id.time,
            Record::Fork(t) | Record::Exit(t) => Some(t.time),
            Record::Lost(l) => l.sample_id.time,
            Record::LostSamples { sample_id, .. } => sample_id.time,
            Record::Switch(w) => w.sample_id.time,
            Record::FinishedRound | Record::Other { .. } => None,
        }
    }

    /// Decodes one record (`bytes` holds the whole record, header included).
    pub fn decode(bytes: &[u8], format: &SampleFormat) -> Result<Record> {
        let mut c = ByteReader::new(bytes);
        let kind = c.u32()?;
        let misc = c.u16()?;
        let size = c.u16()? as usize;
        if size < HEADER_SIZE || size > bytes.len() {
            bail!("record of type {kind} has invalid size {size}");
        }
        let body = &bytes[HEADER_SIZE..size];
        // The trailer has a fixed size, so it is read from the end: no need to know how long the padded name was.
        let trailer = || format.sample_id_at_end(body);
        let mut c = ByteReader::new(body);
        Ok(match kind {
            RECORD_SAMPLE => Record::Sample(format.parse_sample(misc, body)?),
            RECORD_MMAP | RECORD_MMAP2 => {
                let mut m = Mmap {
                    misc,
                    pid: c.u32()?,
                    tid: c.u32()?,
                    addr: c.u64()?,
                    len: c.u64()?,
                    pgoff: c.u64()?,
                    ..Default::default()
                };
                // `build_id` carries this flag (`encode` sets it again, so records round-trip unchanged); in an MMAP
                // record, which has no build-id, the bit means nothing and is dropped too.
                m.misc &= !MISC_MMAP_BUILD_ID;
                if kind == RECORD_MMAP2 {
                    if misc & MISC_MMAP_BUILD_ID != 0 {
                        let n = (c.u8()? as usize).min(20);
                        c.skip(3)?;
                        let id = c.bytes(20)?;
                        m.build_id = Some(id[..n].to_vec());
                    } else {
                        m.maj = c.u32()?;
                        m.min = c.u32()?;
                        m.ino = c.u64()?;
                        m.ino_generation = c.u64()?;
                    }
                    m.prot = c.u32()?;
                    m.flags = c.u32()?;
                }
                m.filename = c.cstr()?;
                m.sample_id = trailer();
                Record::Mmap(m)
            }
            RECORD_COMM => {
                let pid = c.u32()?;
                let tid = c.u32()?;
                let comm = c.cstr()?;
                Record::Comm(Comm { misc, pid, tid, comm, sample_id: trailer() })
            }
            RECORD_FORK | RECORD_EXIT => {
                let t = Task {
                    pid: c.u32()?,
                    ppid: c.u32()?,
                    tid: c.u32()?,
                    ptid: c.u32()?,
                    time: c.u64()?,
                    sample_id: trailer(),
                };
                if kind == RECORD_FORK {
                    Record::Fork(t)
                } else {
                    Record::Exit(t)
                }
            }
            RECORD_LOST => Record::Lost(Lost { id: c.u64()?, lost: c.u64()?, sample_id: trailer() }),
            RECORD_LOST_SAMPLES => Record::LostSamples { lost: c.u64()?, sample_id: trailer() },
            RECORD_SWITCH | RECORD_SWITCH_CPU_WIDE => Record::Switch(Switch {
                out: misc & MISC_SWITCH_OUT != 0,
                preempt: misc & MISC_SWITCH_OUT_PREEMPT != 0,
                next_prev: match kind {
                    RECORD_SWITCH_CPU_WIDE => Some((c.u32()?, c.u32()?)),
                    _ => None,
                },
                sample_id: trailer(),
            }),
            RECORD_FINISHED_ROUND => Record::FinishedRound,
            _ => Record::Other { kind, misc, bytes: bytes[..size].to_vec() },
        })
    }

    /// A sample as [`encode`](Self::encode) writes it, without wrapping (and copying) it in a record.
    pub fn encode_sample(sample: &Sample, format: &SampleFormat) -> Vec<u8> {
        let mut out = Vec::new();
        Record::encode_sample_into(sample, format, &mut out);
        out
    }

    /// [`encode_sample`](Record::encode_sample) into `out`, replacing what it held (a writer of many samples reuses
    /// one buffer).
    pub fn encode_sample_into(sample: &Sample, format: &SampleFormat, out: &mut Vec<u8>) {
        let mut e = Encoder::over(std::mem::take(out));
        e.bytes(&[0; HEADER_SIZE]);
        format.write_sample(&mut e, sample);
        *out = with_header(e.into_inner(), RECORD_SAMPLE, sample.misc);
    }

    /// Encodes the record as the kernel would have written it with the given sample format (the `sample_id`
    /// trailer is appended to non-sample records when the format has `sample_id_all`).
    pub fn encode(&self, format: &SampleFormat) -> Vec<u8> {
        let mut e = Encoder::new();
        e.bytes(&[0; HEADER_SIZE]);
        let (kind, misc) = match self {
            Record::Sample(s) => return Record::encode_sample(s, format),
            Record::Mmap(m) => {
                e.u32(m.pid);
                e.u32(m.tid);
                e.u64(m.addr);
                e.u64(m.len);
                e.u64(m.pgoff);
                let mut misc = m.misc & !MISC_MMAP_BUILD_ID;
                if let Some(id) = &m.build_id {
                    misc |= MISC_MMAP_BUILD_ID;
                    let n = id.len().min(20);
                    e.u8(n as u8);
                    e.bytes(&[0; 3]);
                    let mut padded = [0u8; 20];
                    padded[..n].copy_from_slice(&id[..n]);
                    e.bytes(&padded);
                } else {
                    e.u32(m.maj);
                    e.u32(m.min);
                    e.u64(m.ino);
                    e.u64(m.ino_generation);
                }
                e.u32(m.prot);
                e.u32(m.flags);
                e.cstr_padded(&m.filename);
                format.write_sample_id(&mut e, &m.sample_id);
                (RECORD_MMAP2, misc)
            }
            Record::Comm(c) => {
                e.u32(c.pid);
                e.u32(c.tid);
                e.cstr_padded(&c.comm);
                format.write_sample_id(&mut e, &c.sample_id);
                (RECORD_COMM, c.misc)
            }
            Record::Fork(t) | Record::Exit(t) => {
                e.u32(t.pid);
                e.u32(t.ppid);
                e.u32(t.tid);
                e.u32(t.ptid);
                e.u64(t.time);
                format.write_sample_id(&mut e, &t.sample_id);
                let kind = if matches!(self, Record::Fork(_)) { RECORD_FORK } else { RECORD_EXIT };
                (kind, 0)
            }
            Record::Lost(l) => {
                e.u64(l.id);
                e.u64(l.lost);
                format.write_sample_id(&mut e, &l.sample_id);
                (RECORD_LOST, 0)
            }
            Record::LostSamples { lost, sample_id } => {
                e.u64(*lost);
                format.write_sample_id(&mut e, sample_id);
                (RECORD_LOST_SAMPLES, 0)
            }
            Record::Switch(w) => {
                if let Some((pid, tid)) = w.next_prev {
                    e.u32(pid);
                    e.u32(tid);
                }
                format.write_sample_id(&mut e, &w.sample_id);
                let kind = if w.next_prev.is_some() { RECORD_SWITCH_CPU_WIDE } else { RECORD_SWITCH };
                let misc = (w.out as u16 * MISC_SWITCH_OUT) | (w.preempt as u16 * MISC_SWITCH_OUT_PREEMPT);
                (kind, misc)
            }
            Record::FinishedRound => (RECORD_FINISHED_ROUND, 0),
            Record::Other { bytes, .. } => return bytes.clone(),
        };
        with_header(e.into_inner(), kind, misc)
    }
}

/// A record encoded after [`HEADER_SIZE`] bytes left for its header, with the header filled in (the body is not
/// copied).
fn with_header(mut record: Vec<u8>, kind: u32, misc: u16) -> Vec<u8> {
    let size = record.len() as u16;
    record[..4].copy_from_slice(&kind.to_ne_bytes());
    record[4..6].copy_from_slice(&misc.to_ne_bytes());
    record[6..8].copy_from_slice(&size.to_ne_bytes());
    record
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf_data::abi::{SAMPLE_CPU, SAMPLE_IDENTIFIER, SAMPLE_TID, SAMPLE_TIME};

    #[test]
    fn switch_records_round_trip() {
        let format = SampleFormat {
            sample_type: SAMPLE_IDENTIFIER | SAMPLE_TID | SAMPLE_TIME | SAMPLE_CPU,
            sample_id_all: true,
            ..SampleFormat::default()
        };
        let sample_id = SampleId { pid: Some(4), tid: Some(5), time: Some(6), id: Some(7), cpu: Some(1) };
        for (out, preempt, next_prev) in [(true, true, None), (false, false, None), (true, false, Some((8, 9)))] {
            let w = Record::Switch(Switch { out, preempt, next_prev, sample_id });
            let bytes = w.encode(&format);
            assert_eq!(Record::decode(&bytes, &format).unwrap(), w);
            assert_eq!(w.time(), Some(6));
        }
        // A CPU-wide record cut before its trailer is an error, not a panic.
        let bytes =
            Record::Switch(Switch { out: true, preempt: false, next_prev: Some((1, 2)), sample_id }).encode(&format);
        for cut in 0..bytes.len() {
            let _ = Record::decode(&bytes[..cut], &format);
        }
    }

    /// Found by the perf_record fuzz target: an MMAP (not MMAP2) record with misc bit 14 set decoded with the bit,
    /// and came back from `encode` (as MMAP2) without it.
    #[test]
    fn an_mmap_record_round_trips_whatever_its_misc_bits() {
        let format = SampleFormat { sample_type: 0, read_format: 0, sample_id_all: false, regs_user_mask: 0 };
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&RECORD_MMAP.to_ne_bytes());
        bytes.extend_from_slice(&(MISC_MMAP_BUILD_ID | 0x0e00).to_ne_bytes());
        bytes.extend_from_slice(&48u16.to_ne_bytes());
        for v in [7u32, 8] {
            bytes.extend_from_slice(&v.to_ne_bytes());
        }
        for v in [0x40_0000u64, 0x1000, 0] {
            bytes.extend_from_slice(&v.to_ne_bytes());
        }
        bytes.extend_from_slice(b"/bin/x\0\0");
        let record = Record::decode(&bytes, &format).unwrap();
        let Record::Mmap(m) = &record else { panic!("{record:?}") };
        assert_eq!((m.misc, m.build_id.as_ref(), m.filename.as_str()), (0x0e00, None, "/bin/x"));
        assert_eq!(Record::decode(&record.encode(&format), &format).unwrap(), record);
    }
}
