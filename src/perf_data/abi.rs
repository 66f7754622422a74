//! The kernel ABI numbers the codec needs, taken from `perf-event-open-sys`'s bindings of
//! `include/uapi/linux/perf_event.h` and converted once to the widths the records carry them in (the bindings give
//! every enum as `c_uint`). Only perf's user-space record types, which no kernel header defines, are declared here.

use perf_event_open_sys::bindings as b;

pub const SAMPLE_IP: u64 = b::PERF_SAMPLE_IP as u64;
pub const SAMPLE_TID: u64 = b::PERF_SAMPLE_TID as u64;
pub const SAMPLE_TIME: u64 = b::PERF_SAMPLE_TIME as u64;
pub const SAMPLE_ADDR: u64 = b::PERF_SAMPLE_ADDR as u64;
pub const SAMPLE_READ: u64 = b::PERF_SAMPLE_READ as u64;
pub const SAMPLE_CALLCHAIN: u64 = b::PERF_SAMPLE_CALLCHAIN as u64;
pub const SAMPLE_ID: u64 = b::PERF_SAMPLE_ID as u64;
pub const SAMPLE_CPU: u64 = b::PERF_SAMPLE_CPU as u64;
pub const SAMPLE_PERIOD: u64 = b::PERF_SAMPLE_PERIOD as u64;
pub const SAMPLE_STREAM_ID: u64 = b::PERF_SAMPLE_STREAM_ID as u64;
pub const SAMPLE_IDENTIFIER: u64 = b::PERF_SAMPLE_IDENTIFIER as u64;
pub const SAMPLE_RAW: u64 = b::PERF_SAMPLE_RAW as u64;
pub const SAMPLE_BRANCH_STACK: u64 = b::PERF_SAMPLE_BRANCH_STACK as u64;
pub const SAMPLE_REGS_USER: u64 = b::PERF_SAMPLE_REGS_USER as u64;
pub const SAMPLE_STACK_USER: u64 = b::PERF_SAMPLE_STACK_USER as u64;

/// `PERF_SAMPLE_REGS_ABI_NONE`: the sample has no user registers (a kernel thread, or no user context).
pub const REGS_ABI_NONE: u64 = b::PERF_SAMPLE_REGS_ABI_NONE as u64;
/// `PERF_SAMPLE_REGS_ABI_64`: the registers of a 64-bit task.
pub const REGS_ABI_64: u64 = b::PERF_SAMPLE_REGS_ABI_64 as u64;
/// x86-64 register numbers of `sample_regs_user` (`arch/x86/include/uapi/asm/perf_regs.h`).
pub const REG_X86_BP: u32 = b::PERF_REG_X86_BP;
pub const REG_X86_SP: u32 = b::PERF_REG_X86_SP;
pub const REG_X86_IP: u32 = b::PERF_REG_X86_IP;

pub const FORMAT_TOTAL_TIME_ENABLED: u64 = b::PERF_FORMAT_TOTAL_TIME_ENABLED as u64;
pub const FORMAT_TOTAL_TIME_RUNNING: u64 = b::PERF_FORMAT_TOTAL_TIME_RUNNING as u64;
pub const FORMAT_ID: u64 = b::PERF_FORMAT_ID as u64;
pub const FORMAT_GROUP: u64 = b::PERF_FORMAT_GROUP as u64;
pub const FORMAT_LOST: u64 = b::PERF_FORMAT_LOST as u64;

pub const TYPE_HARDWARE: u32 = b::PERF_TYPE_HARDWARE;
pub const TYPE_SOFTWARE: u32 = b::PERF_TYPE_SOFTWARE;
pub const TYPE_TRACEPOINT: u32 = b::PERF_TYPE_TRACEPOINT;
pub const TYPE_BREAKPOINT: u32 = b::PERF_TYPE_BREAKPOINT;
pub const COUNT_HW_CPU_CYCLES: u64 = b::PERF_COUNT_HW_CPU_CYCLES as u64;
pub const COUNT_HW_INSTRUCTIONS: u64 = b::PERF_COUNT_HW_INSTRUCTIONS as u64;
pub const COUNT_SW_CPU_CLOCK: u64 = b::PERF_COUNT_SW_CPU_CLOCK as u64;
pub const COUNT_SW_TASK_CLOCK: u64 = b::PERF_COUNT_SW_TASK_CLOCK as u64;
pub const COUNT_SW_DUMMY: u64 = b::PERF_COUNT_SW_DUMMY as u64;

pub const RECORD_MMAP: u32 = b::PERF_RECORD_MMAP;
pub const RECORD_LOST: u32 = b::PERF_RECORD_LOST;
pub const RECORD_COMM: u32 = b::PERF_RECORD_COMM;
pub const RECORD_EXIT: u32 = b::PERF_RECORD_EXIT;
pub const RECORD_FORK: u32 = b::PERF_RECORD_FORK;
pub const RECORD_SAMPLE: u32 = b::PERF_RECORD_SAMPLE;
pub const RECORD_MMAP2: u32 = b::PERF_RECORD_MMAP2;
pub const RECORD_LOST_SAMPLES: u32 = b::PERF_RECORD_LOST_SAMPLES;
pub const RECORD_SWITCH: u32 = b::PERF_RECORD_SWITCH;
pub const RECORD_SWITCH_CPU_WIDE: u32 = b::PERF_RECORD_SWITCH_CPU_WIDE;
/// perf's own marker that every record before it has been written (`tools/perf/util/event.h`,
/// `PERF_RECORD_FINISHED_ROUND`): readers may sort and flush what they buffered.
pub const RECORD_FINISHED_ROUND: u32 = 68;

pub const MISC_CPUMODE_MASK: u16 = b::PERF_RECORD_MISC_CPUMODE_MASK as u16;
pub const MISC_KERNEL: u16 = b::PERF_RECORD_MISC_KERNEL as u16;
pub const MISC_USER: u16 = b::PERF_RECORD_MISC_USER as u16;
pub const MISC_MMAP_DATA: u16 = b::PERF_RECORD_MISC_MMAP_DATA as u16;
pub const MISC_COMM_EXEC: u16 = b::PERF_RECORD_MISC_COMM_EXEC as u16;
pub const MISC_MMAP_BUILD_ID: u16 = b::PERF_RECORD_MISC_MMAP_BUILD_ID as u16;
/// A SWITCH record of a task leaving the CPU (without it: arriving).
pub const MISC_SWITCH_OUT: u16 = b::PERF_RECORD_MISC_SWITCH_OUT as u16;
/// … that was still runnable (preempted), Linux 4.17 and later.
pub const MISC_SWITCH_OUT_PREEMPT: u16 = b::PERF_RECORD_MISC_SWITCH_OUT_PREEMPT as u16;

/// Callchain entries at or above this value are context markers, not addresses.
pub const CONTEXT_MAX: u64 = b::PERF_CONTEXT_MAX;
pub const CONTEXT_HV: u64 = b::PERF_CONTEXT_HV;
pub const CONTEXT_KERNEL: u64 = b::PERF_CONTEXT_KERNEL;
pub const CONTEXT_USER: u64 = b::PERF_CONTEXT_USER;
pub const CONTEXT_GUEST_KERNEL: u64 = b::PERF_CONTEXT_GUEST_KERNEL;
pub const CONTEXT_GUEST_USER: u64 = b::PERF_CONTEXT_GUEST_USER;
