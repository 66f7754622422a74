//! `struct perf_event_attr` as stored in perf.data.
//!
//! The attr is kept as the raw bytes the kernel ABI defines (so whatever size perf or the kernel used round-trips);
//! its fields are read through the kernel struct of `perf-event-open-sys` (`include/uapi/linux/perf_event.h`), into
//! which the stored bytes are copied (a shorter, older attr leaves the newer fields zero, as the kernel reads it).

use super::abi::{COUNT_HW_CPU_CYCLES, COUNT_HW_INSTRUCTIONS, COUNT_SW_CPU_CLOCK, COUNT_SW_DUMMY};
use super::abi::{COUNT_SW_TASK_CLOCK, TYPE_HARDWARE, TYPE_SOFTWARE, TYPE_TRACEPOINT};
use super::abi::{SAMPLE_REGS_USER, SAMPLE_STACK_USER};
use super::sample::SampleFormat;
use anyhow::{bail, Result};
use perf_event_open_sys::bindings::perf_event_attr;

/// The smallest attr perf understands (`PERF_ATTR_SIZE_VER0`).
const ATTR_SIZE_VER0: usize = 64;

/// One event's attr as raw ABI bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attr {
    bytes: Vec<u8>,
    /// The same bytes as the kernel struct (zero-extended or cut to its size).
    fields: Fields,
}

/// `perf_event_attr` has no `PartialEq`/`Debug`; the bytes stand for it.
#[derive(Clone)]
struct Fields(perf_event_attr);

impl PartialEq for Fields {
    fn eq(&self, _: &Fields) -> bool {
        true
    }
}

impl Eq for Fields {}

impl std::fmt::Debug for Fields {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("perf_event_attr")
    }
}

impl Attr {
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self> {
        if bytes.len() < ATTR_SIZE_VER0 {
            bail!("perf_event_attr of {} bytes is shorter than the smallest known ({ATTR_SIZE_VER0})", bytes.len());
        }
        let mut fields = perf_event_attr::default();
        let n = bytes.len().min(std::mem::size_of::<perf_event_attr>());
        // SAFETY: perf_event_attr is plain old data (integers, unions of integers and bitfield bytes), so every byte
        // pattern is a valid value; at most its size is written.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), &mut fields as *mut _ as *mut u8, n) };
        Ok(Attr { bytes, fields: Fields(fields) })
    }

    /// Takes the bytes of the kernel struct the recorder passed to `perf_event_open`: the first `attr.size` bytes,
    /// not the whole binding struct. perf refuses a file whose attrs are larger than the struct it was built with
    /// ("more recent and unsupported ABI"), so the size the recorder chose must be what lands in the file.
    pub fn from_kernel(attr: &perf_event_attr) -> Self {
        let full = std::mem::size_of_val(attr);
        let size = match attr.size as usize {
            0 => ATTR_SIZE_VER0,
            n => n.clamp(ATTR_SIZE_VER0, full),
        };
        // SAFETY: perf_event_attr is a plain-old-data C struct without padding holes the kernel cares about;
        // viewing it as bytes is how it crosses the syscall boundary too.
        let bytes = unsafe { std::slice::from_raw_parts(attr as *const _ as *const u8, size) }.to_vec();
        Attr { bytes, fields: Fields(*attr) }
    }

    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    pub fn kind(&self) -> u32 {
        self.fields.0.type_
    }

    pub fn config(&self) -> u64 {
        self.fields.0.config
    }

    /// Sampling frequency in Hz when `freq` is set, else the fixed period.
    pub fn sample_freq_or_period(&self) -> u64 {
        // SAFETY: both members of the union are u64.
        unsafe { self.fields.0.__bindgen_anon_1.sample_freq }
    }

    pub fn sample_type(&self) -> u64 {
        self.fields.0.sample_type
    }

    /// Whether its samples carry user registers and a user stack copy (to be unwound offline).
    pub fn has_stack_copies(&self) -> bool {
        self.sample_type() & SAMPLE_STACK_USER != 0
    }

    /// The same event with samples that carry neither user registers nor a stack copy: the layout of a recording
    /// whose copies were unwound into its callchains. The stored size stays as it is.
    pub fn without_stack_copies(&self) -> Attr {
        let mut fields = self.fields.0;
        fields.sample_type &= !(SAMPLE_REGS_USER | SAMPLE_STACK_USER);
        fields.sample_regs_user = 0;
        fields.sample_stack_user = 0;
        let mut bytes = self.bytes.clone();
        let n = bytes.len().min(std::mem::size_of::<perf_event_attr>());
        // SAFETY: perf_event_attr is plain old data; its first `n` bytes (at most its size) are read as bytes.
        let changed = unsafe { std::slice::from_raw_parts(&fields as *const _ as *const u8, n) };
        bytes[..n].copy_from_slice(changed);
        Attr { bytes, fields: Fields(fields) }
    }

    pub fn read_format(&self) -> u64 {
        self.fields.0.read_format
    }

    pub fn is_freq(&self) -> bool {
        self.fields.0.freq() != 0
    }

    /// Whether the event left kernel code out (`exclude_kernel`): then no sample has kernel frames.
    pub fn excludes_kernel(&self) -> bool {
        self.fields.0.exclude_kernel() != 0
    }

    pub fn sample_id_all(&self) -> bool {
        self.fields.0.sample_id_all() != 0
    }

    /// The clock of sample times: `Some(clockid)` with `use_clockid`, else `None` (perf_clock).
    #[cfg(test)]
    pub fn clockid(&self) -> Option<i32> {
        (self.fields.0.use_clockid() != 0).then_some(self.fields.0.clockid)
    }

    pub fn is_tracepoint(&self) -> bool {
        self.kind() == TYPE_TRACEPOINT
    }

    /// A hardware breakpoint (`PERF_TYPE_BREAKPOINT`, what `perf record -e mem:ADDR` makes).
    pub fn is_breakpoint(&self) -> bool {
        self.kind() == super::abi::TYPE_BREAKPOINT
    }

    /// Whether the event asked for PERF_RECORD_SWITCH records (the task's arrivals on and departures from CPUs).
    pub fn context_switch(&self) -> bool {
        self.fields.0.context_switch() != 0
    }

    /// The event's name as `perf` prints it, as far as the attr alone tells (a tracepoint is named by the file's
    /// tracing data, see [`PerfDataReader::events`](super::PerfDataReader::events)).
    pub fn event_name(&self) -> String {
        match (self.kind(), self.config()) {
            (TYPE_TRACEPOINT, id) => format!("tracepoint-{id}"),
            (TYPE_SOFTWARE, COUNT_SW_CPU_CLOCK) => "cpu-clock".into(),
            (TYPE_SOFTWARE, COUNT_SW_TASK_CLOCK) => "task-clock".into(),
            (TYPE_SOFTWARE, COUNT_SW_DUMMY) => "dummy".into(),
            (TYPE_HARDWARE, COUNT_HW_CPU_CYCLES) => "cycles".into(),
            (TYPE_HARDWARE, COUNT_HW_INSTRUCTIONS) => "instructions".into(),
            (kind, config) => format!("event-{kind}:{config:#x}"),
        }
    }

    pub fn sample_format(&self) -> SampleFormat {
        SampleFormat {
            sample_type: self.sample_type(),
            read_format: self.read_format(),
            sample_id_all: self.sample_id_all(),
            regs_user_mask: self.fields.0.sample_regs_user,
        }
    }
}
