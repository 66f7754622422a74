//! Events that fire on every execution of one instruction (or access to one memory word) instead of sampling:
//! what `profcpu probe` counts calls with.
//!
//! - **uprobes** (tracepoints defined in tracefs, see [`super::uprobe_events`] for why not the `uprobe` PMU):
//!   file-backed code — ELF functions, ReadyToRun methods of a mapped .dll. The kernel puts a breakpoint
//!   instruction into the mappings of that file offset, only in the address spaces of the tasks the event belongs
//!   to, and takes it out when the last event closes.
//! - **hardware breakpoints** (`PERF_TYPE_BREAKPOINT`): code in anonymous or double-mapped memory, where a uprobe
//!   cannot go (JIT code): `HW_BREAKPOINT_X` on an instruction, or `HW_BREAKPOINT_RW` on an 8-byte word (a .NET
//!   method's entry stub reads its target from one, see [`crate::record::dotnet_stubs`]). They use the CPU's debug
//!   registers, switched per task: x86-64 has [`DEBUG_REGISTERS`], so a task can carry at most that many.
//!
//! Both are per-task events like every `-pid` event of the engine (one per thread and CPU, inherited by threads
//! created later). A breakpoint event can be pointed at another address while it is open
//! ([`EventControl::retarget`](super::EventControl::retarget)), which is how new code of a method is followed
//! without opening events for every thread again.

use super::explain::{self, OpenTarget};
use anyhow::anyhow;
use perf_event_open_sys as sys;
use perf_event_open_sys::bindings::{self as abi, perf_event_attr};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// Hardware breakpoints a task can carry on x86-64 (debug registers DR0–DR3).
pub const DEBUG_REGISTERS: usize = 4;

/// What fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbePoint {
    /// The uprobe with tracepoint id `id` (defined by [`super::uprobe_events::UprobeEvents`]) at file offset
    /// `offset`.
    Uprobe { id: u64, offset: u64 },
    /// A hardware breakpoint on executing the instruction at `addr`.
    Execute { addr: u64 },
    /// A hardware breakpoint on reading or writing the 8-byte word at `addr` (8-aligned).
    Access { addr: u64 },
}

impl ProbePoint {
    /// Whether it takes a debug register.
    pub fn is_breakpoint(&self) -> bool {
        !matches!(self, ProbePoint::Uprobe { .. })
    }

    /// `uprobe PATH+0xOFFSET`, `breakpoint 0xADDR`, `watchpoint 0xADDR`.
    pub fn describe(&self) -> String {
        match self {
            ProbePoint::Uprobe { id, offset } => format!("uprobe at file offset {offset:#x} (tracepoint {id})"),
            ProbePoint::Execute { addr } => format!("breakpoint {addr:#x} (execute)"),
            ProbePoint::Access { addr } => format!("watchpoint {addr:#x} (read/write, 8 bytes)"),
        }
    }

    /// Fills the attr fields that say what fires.
    pub(super) fn apply(&self, attr: &mut perf_event_attr) {
        match *self {
            ProbePoint::Uprobe { id, .. } => {
                attr.type_ = abi::PERF_TYPE_TRACEPOINT;
                attr.config = id;
            }
            ProbePoint::Execute { addr } => {
                attr.type_ = abi::PERF_TYPE_BREAKPOINT;
                attr.bp_type = abi::HW_BREAKPOINT_X;
                attr.__bindgen_anon_3.bp_addr = addr;
                // The kernel takes only sizeof(long) for an execute breakpoint on x86.
                attr.__bindgen_anon_4.bp_len = std::mem::size_of::<libc::c_long>() as u64;
            }
            ProbePoint::Access { addr } => {
                attr.type_ = abi::PERF_TYPE_BREAKPOINT;
                attr.bp_type = abi::HW_BREAKPOINT_RW;
                attr.__bindgen_anon_3.bp_addr = addr;
                attr.__bindgen_anon_4.bp_len = abi::HW_BREAKPOINT_LEN_8 as u64;
            }
        }
    }
}

/// One probe event of a recording.
#[derive(Debug, Clone)]
pub struct ProbeEvent {
    /// The event's name in perf.data (`perf script` prints it).
    pub name: String,
    pub point: ProbePoint,
    /// Fires from the start; a spare breakpoint starts disabled until [`EventControl::retarget`](super::EventControl::retarget)
    /// points it somewhere.
    pub armed: bool,
    /// Every hit is a sample; else the kernel only counts hits (read with [`EventControl::counts`](super::EventControl::counts)),
    /// which costs less per hit.
    pub sampled: bool,
}

/// What a probe event records of each hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HitRecord {
    /// Nothing: the kernel counts.
    Count,
    /// A sample of where and when.
    Hit,
    /// A sample with the caller's stack.
    HitWithStack,
}

/// What a recording of probes asks for.
#[derive(Debug, Clone)]
pub struct ProbeRequest {
    pub events: Vec<ProbeEvent>,
    /// Every hit carries the caller's stack (else only where and when it fired).
    pub stacks: bool,
    /// The tracefs formats of the uprobes (perf reads tracepoint events only with them).
    pub tracing: Option<crate::perf_data::tracing::TracingData>,
}

/// The one line for a probe event the kernel refused.
pub fn refused(point: &ProbePoint, err: &io::Error, target: &OpenTarget) -> anyhow::Error {
    let errno = err.raw_os_error().unwrap_or(0);
    let name = explain::errno_name(errno);
    let what = point.describe();
    match (point, errno) {
        (_, libc::EACCES | libc::EPERM | libc::ESRCH) => explain::open_refused(err, target, "probe", 0),
        (ProbePoint::Execute { .. } | ProbePoint::Access { .. }, libc::ENOSPC) => anyhow!(
            "no free hardware breakpoint for the {what} ({name}): x86-64 has {DEBUG_REGISTERS} debug registers per \
             thread and a debugger, another probe or the program itself holds some; probe fewer JIT methods at once"
        ),
        (ProbePoint::Execute { .. } | ProbePoint::Access { .. }, libc::ENOENT | libc::EOPNOTSUPP | libc::ENODEV) => {
            anyhow!(
                "hardware breakpoints are refused here ({name} for a {what}): the kernel lacks \
                 CONFIG_HAVE_HW_BREAKPOINT or the VM gives no debug registers, so JIT code cannot be probed"
            )
        }
        (ProbePoint::Uprobe { .. }, libc::ENOENT | libc::ENOTDIR) => {
            anyhow!("cannot place a {what}: the file is gone ({name})")
        }
        (ProbePoint::Uprobe { .. }, libc::EINVAL) => anyhow!(
            "the kernel refused a {what} ({name}): the offset is not inside the file, or the instruction there \
             cannot be probed"
        ),
        _ => anyhow!("the kernel refused a {what} ({name})"),
    }
}

/// Points the breakpoint event `fd` (and every copy the kernel inherited from it into new threads) at `point` and
/// enables it.
pub(super) fn retarget(fd: BorrowedFd, attr: &perf_event_attr, point: &ProbePoint) -> io::Result<()> {
    let mut new = *attr;
    point.apply(&mut new);
    new.set_disabled(0);
    // SAFETY: MODIFY_ATTRIBUTES reads one perf_event_attr of the size it states through the pointer.
    if unsafe { sys::ioctls::MODIFY_ATTRIBUTES(fd.as_raw_fd(), &mut new) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: plain ioctl on a perf event descriptor we own.
    if unsafe { sys::ioctls::ENABLE(fd.as_raw_fd(), 0) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The x86-64 stack pointer's bit in `sample_regs_user` (`PERF_REG_X86_SP`).
const REG_SP: u64 = 1 << 7;

/// A probe fires on a function's first instruction (or, for a precode watchpoint, right after the jump into it),
/// before the function has set up a frame: a frame-pointer callchain then starts at the caller's *caller*, the
/// caller's own return address being on top of the stack. So every probe sample with a stack also copies the top 8
/// bytes of the user stack (with the stack pointer), which [`splice_caller`] turns into the missing frame.
pub(super) fn ask_for_caller(attr: &mut perf_event_attr) {
    attr.sample_type |= (abi::PERF_SAMPLE_REGS_USER | abi::PERF_SAMPLE_STACK_USER) as u64;
    attr.sample_regs_user = REG_SP;
    attr.sample_stack_user = 8;
}

/// The attr as the recording stores it: samples are written with the caller spliced in, without the stack bytes.
pub(super) fn without_caller_copy(attr: &perf_event_attr) -> perf_event_attr {
    let mut stored = *attr;
    stored.sample_type &= !((abi::PERF_SAMPLE_REGS_USER | abi::PERF_SAMPLE_STACK_USER) as u64);
    stored.sample_regs_user = 0;
    stored.sample_stack_user = 0;
    stored
}

/// Puts the return address from the top of the sample's stack copy into its callchain, right after the probed
/// instruction, and drops the copy (see [`ask_for_caller`]).
pub(super) fn splice_caller(sample: &mut crate::perf_data::Sample) {
    let Some(user) = sample.user.take() else { return };
    let Some(ret) = user.stack.get(..8).map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes"))) else { return };
    let Some(at) = sample.callchain.iter().position(|&a| a == crate::perf_data::abi::CONTEXT_USER) else { return };
    if sample.callchain.get(at + 1) == Some(&sample.ip) && sample.callchain.get(at + 2) != Some(&ret) && ret != 0 {
        sample.callchain.insert(at + 2, ret);
    }
}

/// How many times the event `fd` fired, its inherited copies (live or exited) included.
pub(super) fn read_count(fd: BorrowedFd) -> u64 {
    let mut value = 0u64;
    // SAFETY: reading 8 bytes (read_format 0: the bare count) into a u64.
    let n = unsafe { libc::read(fd.as_raw_fd(), &mut value as *mut u64 as *mut libc::c_void, 8) };
    if n == 8 {
        value
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf_data::abi::CONTEXT_USER;
    use crate::perf_data::{Sample, UserContext};

    #[test]
    fn the_caller_on_top_of_the_stack_joins_the_callchain() {
        let ret: u64 = 0x5555_0000_1234;
        let user =
            UserContext { abi: 2, mask: REG_SP, regs: vec![0x7ffc_0000_0000], stack: ret.to_le_bytes().to_vec() };
        let mut sample = Sample {
            misc: 0,
            id: None,
            ip: 0x7f00_0000_1000,
            pid: 1,
            tid: 1,
            time: 0,
            cpu: 0,
            period: 1,
            callchain: vec![CONTEXT_USER, 0x7f00_0000_1000, 0x5555_0000_9999],
            raw: Vec::new(),
            user: Some(user),
        };
        splice_caller(&mut sample);
        assert_eq!(sample.callchain, [CONTEXT_USER, 0x7f00_0000_1000, ret, 0x5555_0000_9999]);
        assert!(sample.user.is_none(), "the stack copy is not written");
        // Already there (a walk that found it): not twice.
        let mut again = sample.clone();
        again.user = Some(UserContext { abi: 2, mask: REG_SP, regs: vec![0], stack: ret.to_le_bytes().to_vec() });
        splice_caller(&mut again);
        assert_eq!(again.callchain, sample.callchain);
    }

    #[test]
    fn the_stored_attr_has_no_stack_copy() {
        let mut attr = perf_event_attr::default();
        ask_for_caller(&mut attr);
        assert_eq!((attr.sample_stack_user, attr.sample_regs_user), (8, REG_SP));
        let stored = without_caller_copy(&attr);
        let copy = (abi::PERF_SAMPLE_REGS_USER | abi::PERF_SAMPLE_STACK_USER) as u64;
        assert_eq!((stored.sample_type & copy, stored.sample_stack_user, stored.sample_regs_user), (0, 0, 0));
    }
}
