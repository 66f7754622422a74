//! The records of a perf.data data section, decoded into plain structs.
//!
//! Layouts follow `include/uapi/linux/perf_event.h` (`enum perf_event_type`) and, for the user-space record types
//! (>= 64), `tools/perf/util/event.h`. Every record starts with `struct perf_event_header { u32 type; u16 misc;
//! u16 size; }`. Non-sample records end with a `sample_id` trailer when the attr has `sample_id_all`.

use super::attr::SampleFormat;
use super::bytes::{Cursor, Encoder};
use anyhow::{bail, Result};

pub const PERF_RECORD_MMAP: u32 = 1;
pub const PERF_RECORD_LOST: u32 = 2;
pub const PERF_RECORD_COMM: u32 = 3;
pub const PERF_RECORD_EXIT: u32 = 4;
pub const PERF_RECORD_THROTTLE: u32 = 5;
pub const PERF_RECORD_UNTHROTTLE: u32 = 6;
pub const PERF_RECORD_FORK: u32 = 7;
pub const PERF_RECORD_SAMPLE: u32 = 9;
pub const PERF_RECORD_MMAP2: u32 = 10;
pub const PERF_RECORD_LOST_SAMPLES: u32 = 13;
pub const PERF_RECORD_FINISHED_ROUND: u32 = 68;

pub const PERF_RECORD_MISC_CPUMODE_MASK: u16 = 0x7;
pub const PERF_RECORD_MISC_KERNEL: u16 = 1;
pub const PERF_RECORD_MISC_USER: u16 = 2;
pub const PERF_RECORD_MISC_MMAP_DATA: u16 = 1 << 13;
pub const PERF_RECORD_MISC_COMM_EXEC: u16 = 1 << 13;
pub const PERF_RECORD_MISC_MMAP_BUILD_ID: u16 = 1 << 14;

/// Callchain entries at or above this value are context markers (`PERF_CONTEXT_KERNEL`, `PERF_CONTEXT_USER`, …),
/// not addresses.
pub const PERF_CONTEXT_MAX: u64 = -4095i64 as u64;
pub const PERF_CONTEXT_KERNEL: u64 = -128i64 as u64;
pub const PERF_CONTEXT_USER: u64 = -512i64 as u64;

pub const HEADER_SIZE: usize = 8;

/// The fields every record can carry about where and when it happened (from a sample, or from the `sample_id`
/// trailer of other records). Absent fields are `None` when the attr did not ask for them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SampleId {
    pub pid: Option<u32>,
    pub tid: Option<u32>,
    pub time: Option<u64>,
    pub id: Option<u64>,
    pub cpu: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    pub misc: u16,
    pub id: Option<u64>,
    pub ip: u64,
    pub pid: u32,
    pub tid: u32,
    pub time: u64,
    pub cpu: u32,
    pub period: u64,
    /// As the kernel wrote it: context markers (`PERF_CONTEXT_*`) interleaved with addresses, leaf first.
    pub callchain: Vec<u64>,
}

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
    /// Set when the kernel put the build-id in the record instead of device/inode (`PERF_RECORD_MISC_MMAP_BUILD_ID`).
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
        self.misc & PERF_RECORD_MISC_COMM_EXEC != 0
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

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    Sample(Sample),
    Mmap(Mmap),
    Comm(Comm),
    Fork(Task),
    Exit(Task),
    Lost(Lost),
    /// PERF_RECORD_LOST_SAMPLES: samples the kernel dropped (e.g. after throttling), counted without an id.
    LostSamples {
        lost: u64,
        sample_id: SampleId,
    },
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
            Record::FinishedRound | Record::Other { .. } => None,
        }
    }

    /// Decodes one record (`bytes` holds the whole record, header included).
    pub fn decode(bytes: &[u8], format: &SampleFormat) -> Result<Record> {
        let mut c = Cursor::new(bytes);
        let kind = c.u32()?;
        let misc = c.u16()?;
        let size = c.u16()? as usize;
        if size < HEADER_SIZE || size > bytes.len() {
            bail!("record of type {kind} has invalid size {size}");
        }
        let body = &bytes[HEADER_SIZE..size];
        // The trailer has a fixed size, so it is read from the end: no need to know how long the padded name was.
        let trailer = || format.sample_id_at_end(body);
        let mut c = Cursor::new(body);
        Ok(match kind {
            PERF_RECORD_SAMPLE => Record::Sample(format.parse_sample(misc, body)?),
            PERF_RECORD_MMAP | PERF_RECORD_MMAP2 => {
                let mut m = Mmap {
                    misc,
                    pid: c.u32()?,
                    tid: c.u32()?,
                    addr: c.u64()?,
                    len: c.u64()?,
                    pgoff: c.u64()?,
                    ..Default::default()
                };
                if kind == PERF_RECORD_MMAP2 {
                    if misc & PERF_RECORD_MISC_MMAP_BUILD_ID != 0 {
                        let n = (c.u8()? as usize).min(20);
                        c.skip(3)?;
                        let id = c.bytes(20)?;
                        m.build_id = Some(id[..n].to_vec());
                        // `build_id` carries this flag; `encode` sets it again, so records round-trip unchanged.
                        m.misc &= !PERF_RECORD_MISC_MMAP_BUILD_ID;
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
            PERF_RECORD_COMM => {
                let pid = c.u32()?;
                let tid = c.u32()?;
                let comm = c.cstr()?;
                Record::Comm(Comm { misc, pid, tid, comm, sample_id: trailer() })
            }
            PERF_RECORD_FORK | PERF_RECORD_EXIT => {
                let t = Task {
                    pid: c.u32()?,
                    ppid: c.u32()?,
                    tid: c.u32()?,
                    ptid: c.u32()?,
                    time: c.u64()?,
                    sample_id: trailer(),
                };
                if kind == PERF_RECORD_FORK {
                    Record::Fork(t)
                } else {
                    Record::Exit(t)
                }
            }
            PERF_RECORD_LOST => Record::Lost(Lost { id: c.u64()?, lost: c.u64()?, sample_id: trailer() }),
            PERF_RECORD_LOST_SAMPLES => Record::LostSamples { lost: c.u64()?, sample_id: trailer() },
            PERF_RECORD_FINISHED_ROUND => Record::FinishedRound,
            _ => Record::Other { kind, misc, bytes: bytes[..size].to_vec() },
        })
    }

    /// Encodes the record as the kernel would have written it with the given sample format (the `sample_id`
    /// trailer is appended to non-sample records when the format has `sample_id_all`).
    pub fn encode(&self, format: &SampleFormat) -> Vec<u8> {
        let mut e = Encoder::new();
        let (kind, misc) = match self {
            Record::Sample(s) => {
                format.write_sample(&mut e, s);
                (PERF_RECORD_SAMPLE, s.misc)
            }
            Record::Mmap(m) => {
                e.u32(m.pid);
                e.u32(m.tid);
                e.u64(m.addr);
                e.u64(m.len);
                e.u64(m.pgoff);
                let mut misc = m.misc & !PERF_RECORD_MISC_MMAP_BUILD_ID;
                if let Some(id) = &m.build_id {
                    misc |= PERF_RECORD_MISC_MMAP_BUILD_ID;
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
                (PERF_RECORD_MMAP2, misc)
            }
            Record::Comm(c) => {
                e.u32(c.pid);
                e.u32(c.tid);
                e.cstr_padded(&c.comm);
                format.write_sample_id(&mut e, &c.sample_id);
                (PERF_RECORD_COMM, c.misc)
            }
            Record::Fork(t) | Record::Exit(t) => {
                e.u32(t.pid);
                e.u32(t.ppid);
                e.u32(t.tid);
                e.u32(t.ptid);
                e.u64(t.time);
                format.write_sample_id(&mut e, &t.sample_id);
                let kind = if matches!(self, Record::Fork(_)) { PERF_RECORD_FORK } else { PERF_RECORD_EXIT };
                (kind, 0)
            }
            Record::Lost(l) => {
                e.u64(l.id);
                e.u64(l.lost);
                format.write_sample_id(&mut e, &l.sample_id);
                (PERF_RECORD_LOST, 0)
            }
            Record::LostSamples { lost, sample_id } => {
                e.u64(*lost);
                format.write_sample_id(&mut e, sample_id);
                (PERF_RECORD_LOST_SAMPLES, 0)
            }
            Record::FinishedRound => (PERF_RECORD_FINISHED_ROUND, 0),
            Record::Other { bytes, .. } => return bytes.clone(),
        };
        let body = e.into_inner();
        let mut out = Vec::with_capacity(HEADER_SIZE + body.len());
        out.extend_from_slice(&kind.to_ne_bytes());
        out.extend_from_slice(&misc.to_ne_bytes());
        out.extend_from_slice(&((HEADER_SIZE + body.len()) as u16).to_ne_bytes());
        out.extend_from_slice(&body);
        out
    }
}
