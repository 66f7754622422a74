//! Samples and the `sample_id` trailer of other records: their fields and their codec, whose layout follows the
//! attr's `sample_type`/`read_format`/`sample_id_all` (`include/uapi/linux/perf_event.h`, `PERF_RECORD_SAMPLE`).

use super::abi::{FORMAT_GROUP, FORMAT_ID, FORMAT_LOST, FORMAT_TOTAL_TIME_ENABLED, FORMAT_TOTAL_TIME_RUNNING};
use super::abi::{SAMPLE_ADDR, SAMPLE_CALLCHAIN, SAMPLE_CPU, SAMPLE_ID, SAMPLE_IDENTIFIER, SAMPLE_IP};
use super::abi::{SAMPLE_PERIOD, SAMPLE_READ, SAMPLE_STREAM_ID, SAMPLE_TID, SAMPLE_TIME};
use super::bytes::{ByteReader, Encoder};
use anyhow::{bail, Result};

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

/// What a sample record and a `sample_id` trailer contain, from `sample_type`/`read_format`/`sample_id_all`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SampleFormat {
    pub sample_type: u64,
    pub read_format: u64,
    pub sample_id_all: bool,
}

impl SampleFormat {
    fn has(&self, bit: u64) -> bool {
        self.sample_type & bit != 0
    }

    /// Size in bytes of the `sample_id` trailer of non-sample records.
    pub fn sample_id_size(&self) -> usize {
        if !self.sample_id_all {
            return 0;
        }
        [SAMPLE_TID, SAMPLE_TIME, SAMPLE_ID, SAMPLE_STREAM_ID, SAMPLE_CPU, SAMPLE_IDENTIFIER]
            .iter()
            .filter(|&&b| self.has(b))
            .count()
            * 8
    }

    /// Reads the `sample_id` trailer from the end of a record body. Order per perf_event.h: `{pid, tid}`, time,
    /// id, stream_id, `{cpu, res}`, identifier.
    pub fn sample_id_at_end(&self, body: &[u8]) -> SampleId {
        let size = self.sample_id_size();
        if size == 0 || body.len() < size {
            return SampleId::default();
        }
        let mut c = ByteReader::new(&body[body.len() - size..]);
        let mut s = SampleId::default();
        // The slice is exactly `size` bytes, so the reads below cannot fail.
        if self.has(SAMPLE_TID) {
            s.pid = c.u32().ok();
            s.tid = c.u32().ok();
        }
        if self.has(SAMPLE_TIME) {
            s.time = c.u64().ok();
        }
        if self.has(SAMPLE_ID) {
            s.id = c.u64().ok();
        }
        if self.has(SAMPLE_STREAM_ID) {
            let _ = c.u64();
        }
        if self.has(SAMPLE_CPU) {
            s.cpu = c.u32().ok();
            let _ = c.u32();
        }
        if self.has(SAMPLE_IDENTIFIER) {
            s.id = c.u64().ok();
        }
        s
    }

    pub fn write_sample_id(&self, e: &mut Encoder, s: &SampleId) {
        if !self.sample_id_all {
            return;
        }
        if self.has(SAMPLE_TID) {
            e.u32(s.pid.unwrap_or(0));
            e.u32(s.tid.unwrap_or(0));
        }
        if self.has(SAMPLE_TIME) {
            e.u64(s.time.unwrap_or(0));
        }
        if self.has(SAMPLE_ID) {
            e.u64(s.id.unwrap_or(0));
        }
        if self.has(SAMPLE_STREAM_ID) {
            e.u64(s.id.unwrap_or(0));
        }
        if self.has(SAMPLE_CPU) {
            e.u32(s.cpu.unwrap_or(0));
            e.u32(0);
        }
        if self.has(SAMPLE_IDENTIFIER) {
            e.u64(s.id.unwrap_or(0));
        }
    }

    /// Decodes a PERF_RECORD_SAMPLE body. Fields after the callchain (raw, branch stack, registers, …) are not
    /// needed by profcpu and are ignored.
    pub fn parse_sample(&self, misc: u16, body: &[u8]) -> Result<Sample> {
        let mut c = ByteReader::new(body);
        let mut s = Sample { misc, id: None, ip: 0, pid: 0, tid: 0, time: 0, cpu: 0, period: 1, callchain: vec![] };
        if self.has(SAMPLE_IDENTIFIER) {
            s.id = Some(c.u64()?);
        }
        if self.has(SAMPLE_IP) {
            s.ip = c.u64()?;
        }
        if self.has(SAMPLE_TID) {
            s.pid = c.u32()?;
            s.tid = c.u32()?;
        }
        if self.has(SAMPLE_TIME) {
            s.time = c.u64()?;
        }
        if self.has(SAMPLE_ADDR) {
            c.u64()?;
        }
        if self.has(SAMPLE_ID) {
            s.id = Some(c.u64()?);
        }
        if self.has(SAMPLE_STREAM_ID) {
            c.u64()?;
        }
        if self.has(SAMPLE_CPU) {
            s.cpu = c.u32()?;
            c.u32()?;
        }
        if self.has(SAMPLE_PERIOD) {
            s.period = c.u64()?;
        }
        if self.has(SAMPLE_READ) {
            let rf = self.read_format;
            let per_value = 1 + (rf & FORMAT_ID != 0) as usize + (rf & FORMAT_LOST != 0) as usize;
            let times = (rf & FORMAT_TOTAL_TIME_ENABLED != 0) as usize + (rf & FORMAT_TOTAL_TIME_RUNNING != 0) as usize;
            let words = if rf & FORMAT_GROUP != 0 {
                let nr = c.u64()? as usize;
                times + nr.saturating_mul(per_value)
            } else {
                times + per_value
            };
            c.skip(words.saturating_mul(8))?;
        }
        if self.has(SAMPLE_CALLCHAIN) {
            let nr = c.u64()? as usize;
            if nr > c.remaining() / 8 {
                bail!("callchain of {nr} entries does not fit in a {}-byte sample", body.len());
            }
            let raw = c.bytes(nr * 8)?;
            s.callchain = raw.chunks_exact(8).map(|b| u64::from_ne_bytes(b.try_into().unwrap())).collect();
        }
        Ok(s)
    }

    /// A sample's time without decoding the rest (0 when samples carry no time, as [`parse_sample`](Self::parse_sample)
    /// gives); `None` when the body is too short to hold it.
    pub fn sample_time(&self, body: &[u8]) -> Option<u64> {
        if !self.has(SAMPLE_TIME) {
            return Some(0);
        }
        let at =
            8 * (self.has(SAMPLE_IDENTIFIER) as usize + self.has(SAMPLE_IP) as usize + self.has(SAMPLE_TID) as usize);
        Some(u64::from_ne_bytes(body.get(at..at + 8)?.try_into().unwrap()))
    }

    /// Encodes a sample (only the fields profcpu decodes; used for synthesized test data and round-trips).
    pub fn write_sample(&self, e: &mut Encoder, s: &Sample) {
        if self.has(SAMPLE_IDENTIFIER) {
            e.u64(s.id.unwrap_or(0));
        }
        if self.has(SAMPLE_IP) {
            e.u64(s.ip);
        }
        if self.has(SAMPLE_TID) {
            e.u32(s.pid);
            e.u32(s.tid);
        }
        if self.has(SAMPLE_TIME) {
            e.u64(s.time);
        }
        if self.has(SAMPLE_ADDR) {
            e.u64(0);
        }
        if self.has(SAMPLE_ID) {
            e.u64(s.id.unwrap_or(0));
        }
        if self.has(SAMPLE_STREAM_ID) {
            e.u64(s.id.unwrap_or(0));
        }
        if self.has(SAMPLE_CPU) {
            e.u32(s.cpu);
            e.u32(0);
        }
        if self.has(SAMPLE_PERIOD) {
            e.u64(s.period);
        }
        if self.has(SAMPLE_CALLCHAIN) {
            e.u64(s.callchain.len() as u64);
            for &a in &s.callchain {
                e.u64(a);
            }
        }
    }
}
