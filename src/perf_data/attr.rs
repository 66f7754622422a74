//! `struct perf_event_attr` as stored in perf.data, and the sample layout it implies.
//!
//! The attr is kept as the raw bytes the kernel ABI defines (so whatever size perf or the kernel used round-trips);
//! the few fields the rest of profcpu needs are read at their ABI offsets (`include/uapi/linux/perf_event.h`).

use super::bytes::{Cursor, Encoder};
use super::records::{Sample, SampleId};
use anyhow::{bail, Result};

pub const PERF_SAMPLE_IP: u64 = 1 << 0;
pub const PERF_SAMPLE_TID: u64 = 1 << 1;
pub const PERF_SAMPLE_TIME: u64 = 1 << 2;
pub const PERF_SAMPLE_ADDR: u64 = 1 << 3;
pub const PERF_SAMPLE_READ: u64 = 1 << 4;
pub const PERF_SAMPLE_CALLCHAIN: u64 = 1 << 5;
pub const PERF_SAMPLE_ID: u64 = 1 << 6;
pub const PERF_SAMPLE_CPU: u64 = 1 << 7;
pub const PERF_SAMPLE_PERIOD: u64 = 1 << 8;
pub const PERF_SAMPLE_STREAM_ID: u64 = 1 << 9;
pub const PERF_SAMPLE_IDENTIFIER: u64 = 1 << 16;

const PERF_FORMAT_TOTAL_TIME_ENABLED: u64 = 1 << 0;
const PERF_FORMAT_TOTAL_TIME_RUNNING: u64 = 1 << 1;
const PERF_FORMAT_ID: u64 = 1 << 2;
const PERF_FORMAT_GROUP: u64 = 1 << 3;
const PERF_FORMAT_LOST: u64 = 1 << 4;

pub const PERF_TYPE_HARDWARE: u32 = 0;
pub const PERF_TYPE_SOFTWARE: u32 = 1;
pub const PERF_COUNT_HW_CPU_CYCLES: u64 = 0;
pub const PERF_COUNT_SW_CPU_CLOCK: u64 = 0;
pub const PERF_COUNT_SW_TASK_CLOCK: u64 = 1;

const FLAG_FREQ: u64 = 1 << 10;
const FLAG_SAMPLE_ID_ALL: u64 = 1 << 18;
const FLAG_EXCLUDE_CALLCHAIN_KERNEL: u64 = 1 << 21;
const FLAG_USE_CLOCKID: u64 = 1 << 25;

/// The smallest attr perf understands (`PERF_ATTR_SIZE_VER0`).
const ATTR_SIZE_VER0: usize = 64;

/// One event's attr as raw ABI bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attr {
    bytes: Vec<u8>,
}

impl Attr {
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self> {
        if bytes.len() < ATTR_SIZE_VER0 {
            bail!("perf_event_attr of {} bytes is shorter than the smallest known ({ATTR_SIZE_VER0})", bytes.len());
        }
        Ok(Attr { bytes })
    }

    /// Takes the bytes of the kernel struct the recorder passed to `perf_event_open`: the first `attr.size` bytes,
    /// not the whole binding struct. perf refuses a file whose attrs are larger than the struct it was built with
    /// ("more recent and unsupported ABI"), so the size the recorder chose must be what lands in the file.
    pub fn from_kernel(attr: &perf_event_open_sys::bindings::perf_event_attr) -> Self {
        let full = std::mem::size_of_val(attr);
        let size = match attr.size as usize {
            0 => ATTR_SIZE_VER0,
            n => n.clamp(ATTR_SIZE_VER0, full),
        };
        // SAFETY: perf_event_attr is a plain-old-data C struct without padding holes the kernel cares about;
        // viewing it as bytes is how it crosses the syscall boundary too.
        let bytes = unsafe { std::slice::from_raw_parts(attr as *const _ as *const u8, size) }.to_vec();
        Attr { bytes }
    }

    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    fn u32_at(&self, off: usize) -> u32 {
        self.bytes.get(off..off + 4).map_or(0, |b| u32::from_ne_bytes(b.try_into().unwrap()))
    }

    fn u64_at(&self, off: usize) -> u64 {
        self.bytes.get(off..off + 8).map_or(0, |b| u64::from_ne_bytes(b.try_into().unwrap()))
    }

    pub fn kind(&self) -> u32 {
        self.u32_at(0)
    }

    pub fn config(&self) -> u64 {
        self.u64_at(8)
    }

    /// Sampling frequency in Hz when `freq` is set, else the fixed period.
    pub fn sample_freq_or_period(&self) -> u64 {
        self.u64_at(16)
    }

    pub fn sample_type(&self) -> u64 {
        self.u64_at(24)
    }

    pub fn read_format(&self) -> u64 {
        self.u64_at(32)
    }

    fn flags(&self) -> u64 {
        self.u64_at(40)
    }

    pub fn is_freq(&self) -> bool {
        self.flags() & FLAG_FREQ != 0
    }

    pub fn sample_id_all(&self) -> bool {
        self.flags() & FLAG_SAMPLE_ID_ALL != 0
    }

    pub fn excludes_kernel_callchain(&self) -> bool {
        self.flags() & FLAG_EXCLUDE_CALLCHAIN_KERNEL != 0
    }

    /// The clock of sample times: `Some(clockid)` with `use_clockid`, else `None` (perf_clock).
    pub fn clockid(&self) -> Option<i32> {
        (self.flags() & FLAG_USE_CLOCKID != 0).then(|| self.u32_at(92) as i32)
    }

    /// The event's name as `perf` prints it.
    pub fn event_name(&self) -> String {
        match (self.kind(), self.config()) {
            (PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK) => "cpu-clock".into(),
            (PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK) => "task-clock".into(),
            (PERF_TYPE_SOFTWARE, 9) => "dummy".into(),
            (PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES) => "cycles".into(),
            (PERF_TYPE_HARDWARE, 1) => "instructions".into(),
            (kind, config) => format!("event-{kind}:{config:#x}"),
        }
    }

    pub fn sample_format(&self) -> SampleFormat {
        SampleFormat {
            sample_type: self.sample_type(),
            read_format: self.read_format(),
            sample_id_all: self.sample_id_all(),
        }
    }
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
        [
            PERF_SAMPLE_TID,
            PERF_SAMPLE_TIME,
            PERF_SAMPLE_ID,
            PERF_SAMPLE_STREAM_ID,
            PERF_SAMPLE_CPU,
            PERF_SAMPLE_IDENTIFIER,
        ]
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
        let mut c = Cursor::new(&body[body.len() - size..]);
        let mut s = SampleId::default();
        // The slice is exactly `size` bytes, so the reads below cannot fail.
        if self.has(PERF_SAMPLE_TID) {
            s.pid = c.u32().ok();
            s.tid = c.u32().ok();
        }
        if self.has(PERF_SAMPLE_TIME) {
            s.time = c.u64().ok();
        }
        if self.has(PERF_SAMPLE_ID) {
            s.id = c.u64().ok();
        }
        if self.has(PERF_SAMPLE_STREAM_ID) {
            let _ = c.u64();
        }
        if self.has(PERF_SAMPLE_CPU) {
            s.cpu = c.u32().ok();
            let _ = c.u32();
        }
        if self.has(PERF_SAMPLE_IDENTIFIER) {
            s.id = c.u64().ok();
        }
        s
    }

    pub fn write_sample_id(&self, e: &mut Encoder, s: &SampleId) {
        if !self.sample_id_all {
            return;
        }
        if self.has(PERF_SAMPLE_TID) {
            e.u32(s.pid.unwrap_or(0));
            e.u32(s.tid.unwrap_or(0));
        }
        if self.has(PERF_SAMPLE_TIME) {
            e.u64(s.time.unwrap_or(0));
        }
        if self.has(PERF_SAMPLE_ID) {
            e.u64(s.id.unwrap_or(0));
        }
        if self.has(PERF_SAMPLE_STREAM_ID) {
            e.u64(s.id.unwrap_or(0));
        }
        if self.has(PERF_SAMPLE_CPU) {
            e.u32(s.cpu.unwrap_or(0));
            e.u32(0);
        }
        if self.has(PERF_SAMPLE_IDENTIFIER) {
            e.u64(s.id.unwrap_or(0));
        }
    }

    /// Decodes a PERF_RECORD_SAMPLE body. Fields after the callchain (raw, branch stack, registers, …) are not
    /// needed by profcpu and are ignored.
    pub fn parse_sample(&self, misc: u16, body: &[u8]) -> Result<Sample> {
        let mut c = Cursor::new(body);
        let mut s = Sample { misc, id: None, ip: 0, pid: 0, tid: 0, time: 0, cpu: 0, period: 1, callchain: vec![] };
        if self.has(PERF_SAMPLE_IDENTIFIER) {
            s.id = Some(c.u64()?);
        }
        if self.has(PERF_SAMPLE_IP) {
            s.ip = c.u64()?;
        }
        if self.has(PERF_SAMPLE_TID) {
            s.pid = c.u32()?;
            s.tid = c.u32()?;
        }
        if self.has(PERF_SAMPLE_TIME) {
            s.time = c.u64()?;
        }
        if self.has(PERF_SAMPLE_ADDR) {
            c.u64()?;
        }
        if self.has(PERF_SAMPLE_ID) {
            s.id = Some(c.u64()?);
        }
        if self.has(PERF_SAMPLE_STREAM_ID) {
            c.u64()?;
        }
        if self.has(PERF_SAMPLE_CPU) {
            s.cpu = c.u32()?;
            c.u32()?;
        }
        if self.has(PERF_SAMPLE_PERIOD) {
            s.period = c.u64()?;
        }
        if self.has(PERF_SAMPLE_READ) {
            let rf = self.read_format;
            let per_value = 1 + (rf & PERF_FORMAT_ID != 0) as usize + (rf & PERF_FORMAT_LOST != 0) as usize;
            let times = (rf & PERF_FORMAT_TOTAL_TIME_ENABLED != 0) as usize
                + (rf & PERF_FORMAT_TOTAL_TIME_RUNNING != 0) as usize;
            let words = if rf & PERF_FORMAT_GROUP != 0 {
                let nr = c.u64()? as usize;
                times + nr.saturating_mul(per_value)
            } else {
                times + per_value
            };
            c.skip(words.saturating_mul(8))?;
        }
        if self.has(PERF_SAMPLE_CALLCHAIN) {
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
        if !self.has(PERF_SAMPLE_TIME) {
            return Some(0);
        }
        let at = 8
            * (self.has(PERF_SAMPLE_IDENTIFIER) as usize
                + self.has(PERF_SAMPLE_IP) as usize
                + self.has(PERF_SAMPLE_TID) as usize);
        Some(u64::from_ne_bytes(body.get(at..at + 8)?.try_into().unwrap()))
    }

    /// Encodes a sample (only the fields profcpu decodes; used for synthesized test data and round-trips).
    pub fn write_sample(&self, e: &mut Encoder, s: &Sample) {
        if self.has(PERF_SAMPLE_IDENTIFIER) {
            e.u64(s.id.unwrap_or(0));
        }
        if self.has(PERF_SAMPLE_IP) {
            e.u64(s.ip);
        }
        if self.has(PERF_SAMPLE_TID) {
            e.u32(s.pid);
            e.u32(s.tid);
        }
        if self.has(PERF_SAMPLE_TIME) {
            e.u64(s.time);
        }
        if self.has(PERF_SAMPLE_ADDR) {
            e.u64(0);
        }
        if self.has(PERF_SAMPLE_ID) {
            e.u64(s.id.unwrap_or(0));
        }
        if self.has(PERF_SAMPLE_STREAM_ID) {
            e.u64(s.id.unwrap_or(0));
        }
        if self.has(PERF_SAMPLE_CPU) {
            e.u32(s.cpu);
            e.u32(0);
        }
        if self.has(PERF_SAMPLE_PERIOD) {
            e.u64(s.period);
        }
        if self.has(PERF_SAMPLE_CALLCHAIN) {
            e.u64(s.callchain.len() as u64);
            for &a in &s.callchain {
                e.u64(a);
            }
        }
    }
}
