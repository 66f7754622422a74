//! The sampling event: its `perf_event_attr`, `perf_event_open` with the fallbacks perf itself makes (no PMU →
//! cpu-clock, kernel refused → user space only), and the per-fd ioctls.

use super::explain::{self, OpenTarget};
use super::probe::{HitRecord, ProbePoint};
use super::EventKind;
use crate::perf_data::tracing::SCHED_SWITCH;
use anyhow::Result;
use perf_event_open_sys as sys;
use perf_event_open_sys::bindings::{self as abi, perf_event_attr};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// The attr size profcpu passes to the kernel and stores in perf.data. `PERF_ATTR_SIZE_VER7` (Linux 5.13) holds
/// every field profcpu sets, and it is what perf 6.1 (Debian 12) understands: a larger attr in the file makes it
/// refuse the whole file.
pub const ATTR_SIZE: u32 = abi::PERF_ATTR_SIZE_VER7;

/// What each sample record holds (the perf.data sample layout profcpu writes).
pub const SAMPLE_TYPE: u64 = (abi::PERF_SAMPLE_IDENTIFIER
    | abi::PERF_SAMPLE_IP
    | abi::PERF_SAMPLE_TID
    | abi::PERF_SAMPLE_TIME
    | abi::PERF_SAMPLE_CPU
    | abi::PERF_SAMPLE_PERIOD
    | abi::PERF_SAMPLE_CALLCHAIN) as u64;

/// What makes the kernel write a sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// `frequency` samples per second of the event (on-CPU samples).
    Sampling { kind: EventKind, frequency: u64 },
    /// Every switch-out of a monitored task: the `sched:sched_switch` tracepoint of this id, with its raw fields
    /// (`prev_state` tells a preempted task from a blocked one).
    SchedSwitch { id: u64 },
    /// No samples: the side band alone (MMAP2, COMM, FORK/EXIT), for recordings whose other events fire rarely.
    Tracking,
    /// Every hit of a probe (see [`super::probe`]); `armed: false` opens it disabled (a spare breakpoint), `record`
    /// says what a hit leaves.
    Probe { point: ProbePoint, armed: bool, record: HitRecord },
}

/// What to ask the kernel for; `build_attr` turns it into the ABI struct.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventSpec {
    pub trigger: Trigger,
    /// Sample in kernel mode and record kernel frames in callchains (a tracepoint fires in the kernel: always).
    pub kernel: bool,
    /// This event reports the side band — MMAP2, COMM, FORK/EXIT — for the recording (one event per task does).
    pub side_band: bool,
    /// This event reports the monitored tasks' arrivals on and departures from CPUs (PERF_RECORD_SWITCH, or
    /// SWITCH_CPU_WIDE for a CPU-wide event).
    pub context_switch: bool,
    /// Threads and processes the target creates later get the event too (per-task events only).
    pub inherit: bool,
    /// Start disabled and let the kernel enable it when the task calls exec (a launched command).
    pub enable_on_exec: bool,
    /// Wake the reader when this many bytes are waiting in a ring buffer.
    pub wakeup_bytes: u32,
    /// Bytes of user stack to copy into each sample, with the user registers (0: callchain only).
    pub stack_copy_bytes: u32,
}

impl EventSpec {
    pub fn event_name(&self) -> &'static str {
        match self.trigger {
            Trigger::Sampling { kind, .. } => kind.name(),
            Trigger::SchedSwitch { .. } => SCHED_SWITCH,
            Trigger::Tracking => "dummy",
            Trigger::Probe { .. } => "probe",
        }
    }

    /// Samples per second asked for (0 for a tracepoint, which samples every hit).
    pub fn frequency(&self) -> u64 {
        match self.trigger {
            Trigger::Sampling { frequency, .. } => frequency,
            Trigger::SchedSwitch { .. } | Trigger::Tracking | Trigger::Probe { .. } => 0,
        }
    }
}

pub fn build_attr(spec: &EventSpec) -> perf_event_attr {
    let mut attr = perf_event_attr { size: ATTR_SIZE, ..Default::default() };
    attr.sample_type = SAMPLE_TYPE;
    match spec.trigger {
        Trigger::Sampling { kind, frequency } => {
            let (kind, config) = match kind {
                EventKind::CpuClock => (abi::PERF_TYPE_SOFTWARE, abi::PERF_COUNT_SW_CPU_CLOCK as u64),
                EventKind::TaskClock => (abi::PERF_TYPE_SOFTWARE, abi::PERF_COUNT_SW_TASK_CLOCK as u64),
                EventKind::Cycles => (abi::PERF_TYPE_HARDWARE, abi::PERF_COUNT_HW_CPU_CYCLES as u64),
            };
            attr.type_ = kind;
            attr.config = config;
            attr.__bindgen_anon_1.sample_freq = frequency;
            attr.set_freq(1);
        }
        Trigger::SchedSwitch { id } => {
            attr.type_ = abi::PERF_TYPE_TRACEPOINT;
            attr.config = id;
            attr.__bindgen_anon_1.sample_period = 1;
            attr.sample_type |= abi::PERF_SAMPLE_RAW as u64;
        }
        Trigger::Tracking => {
            attr.type_ = abi::PERF_TYPE_SOFTWARE;
            attr.config = abi::PERF_COUNT_SW_DUMMY as u64;
            attr.__bindgen_anon_1.sample_period = 1;
        }
        Trigger::Probe { point, record, .. } => {
            point.apply(&mut attr);
            match record {
                // A counting event: no sample period.
                HitRecord::Count => {}
                HitRecord::Hit => {
                    attr.__bindgen_anon_1.sample_period = 1;
                    attr.sample_type &= !(abi::PERF_SAMPLE_CALLCHAIN as u64);
                }
                HitRecord::HitWithStack => {
                    attr.__bindgen_anon_1.sample_period = 1;
                    if spec.stack_copy_bytes == 0 {
                        super::probe::ask_for_caller(&mut attr);
                    }
                }
            }
        }
    }
    attr.set_sample_id_all(1);
    // CLOCK_MONOTONIC is the clock the JIT runtimes stamp their jitdump records with.
    attr.set_use_clockid(1);
    attr.clockid = libc::CLOCK_MONOTONIC;
    if spec.side_band {
        // mmap and mmap2 together, as perf sets them: the kernel then emits MMAP2 (with device, inode, prot, flags).
        attr.set_mmap(1);
        attr.set_mmap2(1);
        attr.set_comm(1);
        attr.set_comm_exec(1);
        attr.set_task(1);
    }
    attr.set_context_switch(spec.context_switch as u64);
    attr.set_inherit(spec.inherit as u64);
    let spare = matches!(spec.trigger, Trigger::Probe { armed: false, .. });
    attr.set_disabled((spec.enable_on_exec || spare) as u64);
    attr.set_enable_on_exec((spec.enable_on_exec && !spare) as u64);
    attr.set_watermark(1);
    attr.__bindgen_anon_2.wakeup_watermark = spec.wakeup_bytes.max(1);
    if spec.stack_copy_bytes > 0 {
        attr.sample_type |= (abi::PERF_SAMPLE_REGS_USER | abi::PERF_SAMPLE_STACK_USER) as u64;
        attr.sample_regs_user = super::call_graph::X86_64_USER_REGS;
        attr.sample_stack_user = spec.stack_copy_bytes;
        // Later mappings of files' other segments too (see synthesize::mappings): perf's unwinder needs them.
        attr.set_mmap_data(spec.side_band as u64);
    }
    if !spec.kernel {
        attr.set_exclude_kernel(1);
        attr.set_exclude_hv(1);
        attr.set_exclude_callchain_kernel(1);
    }
    attr
}

/// Opens one event for task `pid` (-1: every task) on `cpu`.
pub fn open(attr: &perf_event_attr, pid: i32, cpu: i32) -> io::Result<OwnedFd> {
    // The kernel writes the size it supports back into the struct on E2BIG, so it gets a copy.
    let mut attr = *attr;
    // SAFETY: `attr` is a valid, initialised perf_event_attr whose `size` is not larger than the struct.
    let fd = unsafe { sys::perf_event_open(&mut attr, pid, cpu, -1, abi::PERF_FLAG_FD_CLOEXEC as libc::c_ulong) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor to us; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Opens the first event of a recording, adapting the spec the way perf does when the machine cannot give what was
/// asked: cycles without a hardware PMU become cpu-clock, and kernel sampling refused by `perf_event_paranoid`
/// becomes user-space sampling. Each adaptation is a notice; any other refusal is the one-line explanation.
pub fn open_first(spec: &mut EventSpec, pid: i32, cpu: i32, target: &OpenTarget) -> Result<(OwnedFd, Vec<String>)> {
    let mut notices = Vec::new();
    loop {
        let err = match open(&build_attr(spec), pid, cpu) {
            Ok(fd) => return Ok((fd, notices)),
            Err(e) => e,
        };
        let errno = err.raw_os_error().unwrap_or(0);
        let Trigger::Sampling { kind, frequency } = spec.trigger else {
            // A tracepoint samples only in the kernel: there is nothing to fall back to.
            return Err(refused(spec, &err, target));
        };
        if kind == EventKind::Cycles && matches!(errno, libc::ENOENT | libc::EOPNOTSUPP | libc::ENODEV) {
            notices.push(format!(
                "the cycles event is not supported here ({}: no hardware PMU, usual in VMs and containers); \
                 sampling cpu-clock instead",
                explain::errno_name(errno)
            ));
            spec.trigger = Trigger::Sampling { kind: EventKind::CpuClock, frequency };
            continue;
        }
        if spec.kernel && matches!(errno, libc::EACCES | libc::EPERM) {
            // Refused with kernel sampling: try user space only before explaining, as `perf record` does.
            let mut user_only = *spec;
            user_only.kernel = false;
            if let Ok(fd) = open(&build_attr(&user_only), pid, cpu) {
                notices.push(explain::kernel_frames_hidden(errno));
                *spec = user_only;
                return Ok((fd, notices));
            }
        }
        return Err(refused(spec, &err, target));
    }
}

/// The one line for a refused event of this spec.
pub fn refused(spec: &EventSpec, err: &io::Error, target: &OpenTarget) -> anyhow::Error {
    match spec.trigger {
        Trigger::Sampling { .. } => explain::open_refused(err, target, spec.event_name(), spec.frequency()),
        Trigger::SchedSwitch { .. } => explain::tracepoint_refused(err, target, spec.event_name()),
        Trigger::Tracking => explain::open_refused(err, target, spec.event_name(), 0),
        Trigger::Probe { point, .. } => super::probe::refused(&point, err, target),
    }
}

/// The id the kernel stamps on this fd's records (`PERF_SAMPLE_IDENTIFIER`); perf.data maps ids to events.
pub fn event_id(fd: BorrowedFd) -> io::Result<u64> {
    let mut id = 0u64;
    // SAFETY: PERF_EVENT_IOC_ID writes one u64 through the pointer.
    let rc = unsafe { sys::ioctls::ID(fd.as_raw_fd(), &mut id) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(id)
}

/// Sends `fd`'s records into the ring buffer mapped on `ring_owner` (same CPU): one buffer per CPU however many
/// threads are sampled.
pub fn redirect_output(fd: BorrowedFd, ring_owner: BorrowedFd) -> io::Result<()> {
    // SAFETY: both are perf event descriptors we own.
    let rc = unsafe { sys::ioctls::SET_OUTPUT(fd.as_raw_fd(), ring_owner.as_raw_fd()) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Stops sampling on `fd` and on every event the kernel inherited from it into new threads.
pub fn disable(fd: BorrowedFd) {
    // SAFETY: plain ioctl on a descriptor we own; a failure (task gone) leaves nothing to stop.
    unsafe {
        sys::ioctls::DISABLE(fd.as_raw_fd(), 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf_data::Attr;

    #[test]
    fn attr_has_the_fields_perf_needs() {
        let spec = EventSpec {
            trigger: Trigger::Sampling { kind: EventKind::CpuClock, frequency: 99 },
            kernel: true,
            side_band: true,
            context_switch: false,
            inherit: true,
            enable_on_exec: false,
            wakeup_bytes: 4096,
            stack_copy_bytes: 0,
        };
        let kernel_attr = build_attr(&spec);
        let attr = Attr::from_kernel(&kernel_attr);
        assert_eq!(attr.bytes().len(), 128);
        assert!(attr.is_freq() && attr.sample_id_all() && kernel_attr.exclude_callchain_kernel() == 0);
        assert_eq!(attr.sample_freq_or_period(), 99);
        assert_eq!(attr.clockid(), Some(libc::CLOCK_MONOTONIC));
        assert_eq!(attr.event_name(), "cpu-clock");
        assert_eq!(attr.sample_type(), SAMPLE_TYPE);

        assert_eq!(build_attr(&EventSpec { kernel: false, ..spec }).exclude_callchain_kernel(), 1);

        let copies = Attr::from_kernel(&build_attr(&EventSpec { stack_copy_bytes: 8192, ..spec }));
        let format = copies.sample_format();
        assert_eq!(format.sample_type, SAMPLE_TYPE | (abi::PERF_SAMPLE_REGS_USER | abi::PERF_SAMPLE_STACK_USER) as u64);
        assert_eq!(format.regs_user_mask.count_ones(), 20);

        // The switch-out event of the off-CPU modes: every hit, with its raw fields and the switch records.
        let switches =
            EventSpec { trigger: Trigger::SchedSwitch { id: 372 }, side_band: false, context_switch: true, ..spec };
        let kernel_attr = build_attr(&switches);
        let attr = Attr::from_kernel(&kernel_attr);
        assert!(attr.is_tracepoint() && attr.context_switch() && !attr.is_freq());
        assert_eq!((attr.config(), attr.sample_freq_or_period()), (372, 1));
        assert_eq!(attr.sample_type(), SAMPLE_TYPE | abi::PERF_SAMPLE_RAW as u64);
        assert_eq!((kernel_attr.mmap(), kernel_attr.comm(), kernel_attr.task()), (0, 0, 0));
    }
}
