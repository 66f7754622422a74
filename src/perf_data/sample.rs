//! Samples and the `sample_id` trailer of other records: their fields and their codec, whose layout follows the
//! attr's `sample_type`/`read_format`/`sample_id_all` (`include/uapi/linux/perf_event.h`, `PERF_RECORD_SAMPLE`).

use super::abi::{CONTEXT_USER, REGS_ABI_NONE};
use super::abi::{FORMAT_GROUP, FORMAT_ID, FORMAT_LOST, FORMAT_TOTAL_TIME_ENABLED, FORMAT_TOTAL_TIME_RUNNING};
use super::abi::{SAMPLE_ADDR, SAMPLE_CALLCHAIN, SAMPLE_CPU, SAMPLE_ID, SAMPLE_IDENTIFIER, SAMPLE_IP};
use super::abi::{SAMPLE_BRANCH_STACK, SAMPLE_RAW, SAMPLE_REGS_USER, SAMPLE_STACK_USER};
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

#[derive(Debug, Clone, PartialEq, Eq, Default)]
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
    /// The event's own data (`PERF_SAMPLE_RAW`): a tracepoint's fields, laid out as its `format` file says (see
    /// [`super::tracing`]); empty when the attr did not ask for it. Kept as the kernel padded it (its length plus
    /// the 4-byte size is a multiple of 8).
    pub raw: Vec<u8>,
    /// The user registers and stack copy, when the attr asked for them (`PERF_SAMPLE_REGS_USER`/`STACK_USER`) and
    /// the sample has a user context.
    pub user: Option<UserContext>,
}

/// What a sample carries for unwinding its user stack offline: the user-mode registers at the sample (at the system
/// call or interrupt for a sample taken in the kernel) and a copy of the stack from the user stack pointer up.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UserContext {
    /// `PERF_SAMPLE_REGS_ABI_*` (never `NONE` here: then the sample has no user context).
    pub abi: u64,
    /// The attr's `sample_regs_user`: bit N set means register N is in `regs`, in ascending bit order.
    pub mask: u64,
    pub regs: Vec<u64>,
    /// The valid part of the stack copy (`dyn_size` bytes), starting at the user stack pointer.
    pub stack: Vec<u8>,
}

impl UserContext {
    /// Register number `reg` (`PERF_REG_*` of the architecture), if the mask selected it.
    pub fn reg(&self, reg: u32) -> Option<u64> {
        let bit = 1u64.checked_shl(reg)?;
        if self.mask & bit == 0 {
            return None;
        }
        self.regs.get((self.mask & (bit - 1)).count_ones() as usize).copied()
    }
}

/// A sample's fields as they lie in its record ([`SampleFormat::sample_fields`]): what [`Sample`] holds, nothing
/// copied or decoded beyond the fixed-size fields.
#[derive(Debug, Clone, Copy, Default)]
pub struct SampleFields<'a> {
    pub id: Option<u64>,
    pub ip: u64,
    pub pid: u32,
    pub tid: u32,
    pub time: u64,
    pub cpu: u32,
    pub period: u64,
    /// The callchain's entries, native-endian u64s.
    pub callchain: &'a [u8],
    /// `PERF_SAMPLE_RAW`'s data.
    pub raw: &'a [u8],
    /// With `PERF_SAMPLE_REGS_USER`/`STACK_USER` (`abi` is `REGS_ABI_NONE` when the sample has no user context).
    pub user: Option<UserFields<'a>>,
}

/// A sample's user context as it lies in the record (see [`UserContext`]).
#[derive(Debug, Clone, Copy)]
pub struct UserFields<'a> {
    pub abi: u64,
    /// Native-endian u64s, one per bit of the attr's `sample_regs_user`.
    pub regs: &'a [u8],
    /// The valid part of the stack copy.
    pub stack: &'a [u8],
    /// The rest of the copy (where profcpu stashes the user part of the callchain).
    pub slack: &'a [u8],
}

impl UserFields<'_> {
    /// Register number `reg`, as [`UserContext::reg`].
    pub fn reg(&self, mask: u64, reg: u32) -> Option<u64> {
        let bit = 1u64.checked_shl(reg)?;
        if mask & bit == 0 {
            return None;
        }
        let i = (mask & (bit - 1)).count_ones() as usize * 8;
        Some(u64::from_ne_bytes(self.regs.get(i..i + 8)?.try_into().unwrap()))
    }
}

/// Tags the user part of a callchain that profcpu keeps after the valid bytes of a stack copy (`"PCUCHAIN"`).
const USER_CHAIN_TAG: u64 = u64::from_le_bytes(*b"PCUCHAIN");

/// The callchain entries stashed in the slack of a stack copy (after its valid bytes): `entries[n], n, tag`.
fn stashed_user_chain(slack: &[u8]) -> Vec<u64> {
    // The slack is most of a copy (KBs): only its last two words are read unless they are the tag.
    let word = |i: usize| u64::from_ne_bytes(slack[i * 8..i * 8 + 8].try_into().unwrap());
    let words = slack.len() / 8;
    match words.checked_sub(2) {
        Some(entries) if word(words - 1) == USER_CHAIN_TAG && word(words - 2) == entries as u64 => {
            (0..entries).map(word).collect()
        }
        _ => Vec::new(),
    }
}

/// What a sample record and a `sample_id` trailer contain, from `sample_type`/`read_format`/`sample_id_all`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SampleFormat {
    pub sample_type: u64,
    pub read_format: u64,
    pub sample_id_all: bool,
    /// The attr's `sample_regs_user`: which registers a `PERF_SAMPLE_REGS_USER` sample carries.
    pub regs_user_mask: u64,
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

    /// Decodes a PERF_RECORD_SAMPLE body up to the user registers and stack copy; later fields (weight, data source,
    /// …) are not needed by profcpu and are ignored.
    pub fn parse_sample(&self, misc: u16, body: &[u8]) -> Result<Sample> {
        let mut sample = Sample::default();
        self.parse_sample_into(misc, body, &mut sample)?;
        Ok(sample)
    }

    /// [`parse_sample`](Self::parse_sample) into `out`, reusing its buffers: a replay of tens of thousands of
    /// samples with stack copies of several KB each allocates nothing per sample. On an error `out` is unchanged.
    pub fn parse_sample_into(&self, misc: u16, body: &[u8], out: &mut Sample) -> Result<()> {
        let stack = self.parse_sample_but_stack(misc, body, out)?;
        if let Some(user) = &mut out.user {
            user.stack.extend_from_slice(stack);
        }
        Ok(())
    }

    /// [`parse_sample_into`](Self::parse_sample_into) but for the user stack copy, which is returned where it
    /// lies in `body` (empty without one) and not copied: `out.user.stack` is left empty. A replay reads a few
    /// words of each copy, which are KBs.
    pub fn parse_sample_but_stack<'a>(&self, misc: u16, body: &'a [u8], out: &mut Sample) -> Result<&'a [u8]> {
        let f = self.sample_fields(body)?;
        let words = |raw: &[u8], into: &mut Vec<u64>| {
            into.extend(raw.chunks_exact(8).map(|b| u64::from_ne_bytes(b.try_into().unwrap())));
        };
        out.callchain.clear();
        words(f.callchain, &mut out.callchain);
        if let Some(u) = &f.user {
            out.callchain.extend(stashed_user_chain(u.slack));
        }
        let mut stack: &[u8] = &[];
        match f.user.filter(|u| u.abi != REGS_ABI_NONE) {
            Some(u) => {
                let user = out.user.get_or_insert_with(UserContext::default);
                (user.abi, user.mask) = (u.abi, self.regs_user_mask);
                user.regs.clear();
                words(u.regs, &mut user.regs);
                user.stack.clear();
                stack = u.stack;
            }
            None => out.user = None,
        }
        out.raw.clear();
        out.raw.extend_from_slice(f.raw);
        (out.misc, out.id, out.ip, out.pid, out.tid) = (misc, f.id, f.ip, f.pid, f.tid);
        (out.time, out.cpu, out.period) = (f.time, f.cpu, f.period);
        Ok(stack)
    }

    /// A sample's fields where they lie in its body, nothing copied: up to the user registers and stack copy
    /// (later fields — weight, data source, … — are not needed by profcpu).
    pub fn sample_fields<'a>(&self, body: &'a [u8]) -> Result<SampleFields<'a>> {
        let mut c = ByteReader::new(body);
        let mut s = SampleFields { period: 1, ..SampleFields::default() };
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
                // A huge count (a corrupt sample) must not wrap into a small skip (found by fuzzing).
                nr.saturating_mul(per_value).saturating_add(times)
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
            s.callchain = c.bytes(nr * 8)?;
        }
        if self.has(SAMPLE_RAW) {
            let size = c.u32()? as usize;
            s.raw = c.bytes(size)?;
        }
        if self.has(SAMPLE_REGS_USER) || self.has(SAMPLE_STACK_USER) {
            s.user = self.user_fields(&mut c)?;
        }
        Ok(s)
    }

    /// The fields after the raw data, up to the stack copy: `{u64 nr; …}` branch stack, `{u64 abi; u64
    /// regs[weight(mask)]}` user registers, `{u64 size; char data[size]; u64 dyn_size}` user stack (`dyn_size` only
    /// when `size` is not 0).
    fn user_fields<'a>(&self, c: &mut ByteReader<'a>) -> Result<Option<UserFields<'a>>> {
        if self.has(SAMPLE_BRANCH_STACK) {
            // Its entry size depends on the attr's branch_sample_type, which profcpu does not keep: what follows
            // cannot be located.
            return Ok(None);
        }
        let mut user = UserFields { abi: REGS_ABI_NONE, regs: &[], stack: &[], slack: &[] };
        if self.has(SAMPLE_REGS_USER) {
            user.abi = c.u64()?;
            if user.abi != REGS_ABI_NONE {
                user.regs = c.bytes(self.regs_user_mask.count_ones() as usize * 8)?;
            }
        }
        if self.has(SAMPLE_STACK_USER) {
            let size = c.u64()? as usize;
            if size != 0 {
                if size > c.remaining() {
                    bail!("a user stack copy of {size} bytes does not fit in the sample");
                }
                let data = c.bytes(size)?;
                let valid = (c.u64()? as usize).min(size);
                user.stack = &data[..valid];
                user.slack = &data[valid.next_multiple_of(8).min(size)..];
            }
        }
        Ok(Some(user))
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

    /// A sample's thread without decoding the rest (0 when samples carry no thread); `None` when the body is too
    /// short to hold it.
    pub fn sample_tid(&self, body: &[u8]) -> Option<u32> {
        if !self.has(SAMPLE_TID) {
            return Some(0);
        }
        let at = 8 * (self.has(SAMPLE_IDENTIFIER) as usize + self.has(SAMPLE_IP) as usize) + 4;
        Some(u32::from_ne_bytes(body.get(at..at + 4)?.try_into().unwrap()))
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
        // With a stack copy, the user part of the callchain is stashed after it (see below).
        let stash_from = match self.has(SAMPLE_STACK_USER) {
            true => s.callchain.iter().position(|&a| a == CONTEXT_USER).unwrap_or(s.callchain.len()),
            false => s.callchain.len(),
        };
        let (callchain, user_chain) = s.callchain.split_at(stash_from);
        if self.has(SAMPLE_CALLCHAIN) {
            e.u64(callchain.len() as u64);
            for &a in callchain {
                e.u64(a);
            }
        }
        if self.has(SAMPLE_RAW) {
            // The kernel pads the data so that it ends 8-byte aligned after its 4-byte size.
            let padded = (s.raw.len() + 4).next_multiple_of(8) - 4;
            e.u32(padded as u32);
            e.bytes(&s.raw);
            e.bytes(&[0; 8][..padded - s.raw.len()]);
        }
        let no_user = UserContext::default();
        let user = s.user.as_ref().unwrap_or(&no_user);
        if self.has(SAMPLE_REGS_USER) {
            e.u64(user.abi);
            if user.abi != REGS_ABI_NONE {
                for i in 0..self.regs_user_mask.count_ones() as usize {
                    e.u64(user.regs.get(i).copied().unwrap_or(0));
                }
            }
        }
        if self.has(SAMPLE_STACK_USER) {
            // `size` bytes follow, of which `dyn_size` are the valid stack copy; readers (perf, the kernel's
            // documentation) ignore the rest. The user part of the callchain goes there — `perf script` would print
            // it before the frames it unwinds from the copy itself, as `perf record --call-graph dwarf` files never
            // have one — followed by its length and a tag.
            let valid = user.stack.len().next_multiple_of(8);
            let stash = if user_chain.is_empty() { 0 } else { 8 * user_chain.len() + 16 };
            e.u64((valid + stash) as u64);
            if valid + stash != 0 {
                e.bytes(&user.stack);
                e.bytes(&vec![0; valid - user.stack.len()]);
                if stash != 0 {
                    for &a in user_chain {
                        e.u64(a);
                    }
                    e.u64(user_chain.len() as u64);
                    e.u64(USER_CHAIN_TAG);
                }
                e.u64(user.stack.len() as u64);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf_data::abi::{CONTEXT_KERNEL, REGS_ABI_64};

    const MASK: u64 = 0xff_0fff;

    fn format() -> SampleFormat {
        SampleFormat {
            sample_type: SAMPLE_IDENTIFIER
                | SAMPLE_IP
                | SAMPLE_TID
                | SAMPLE_TIME
                | SAMPLE_CPU
                | SAMPLE_PERIOD
                | SAMPLE_CALLCHAIN
                | SAMPLE_REGS_USER
                | SAMPLE_STACK_USER,
            read_format: 0,
            sample_id_all: true,
            regs_user_mask: MASK,
        }
    }

    fn sample(callchain: Vec<u64>, stack_len: u8) -> Sample {
        Sample {
            misc: 1,
            id: Some(7),
            ip: 0x40_1000,
            pid: 1,
            tid: 2,
            time: 3,
            cpu: 1,
            period: 9,
            callchain,
            raw: vec![],
            user: Some(UserContext {
                abi: REGS_ABI_64,
                mask: MASK,
                regs: (0..20).collect(),
                stack: (0..stack_len).collect(),
            }),
        }
    }

    fn encode(f: &SampleFormat, s: &Sample) -> Vec<u8> {
        let mut e = Encoder::new();
        f.write_sample(&mut e, s);
        e.into_inner()
    }

    #[test]
    fn registers_stack_and_user_callchain_round_trip() {
        let f = format();
        let s = sample(vec![CONTEXT_KERNEL, 0xffff_ffff_8100_0000, CONTEXT_USER, 0x40_1000, 0x40_2000], 100);
        let bytes = encode(&f, &s);
        let back = f.parse_sample(1, &bytes).unwrap();
        assert_eq!(back, s);
        let user = back.user.unwrap();
        // Register N is at its rank among the mask's bits: IP (8) is the 9th, R8 (16) the 13th, DS (12) is absent.
        assert_eq!((user.reg(8), user.reg(16), user.reg(12), user.reg(64)), (Some(8), Some(12), None, None));
        // What perf reads: a callchain of the kernel part only, then the registers, then a copy whose `dyn_size`
        // covers exactly the stack bytes.
        let words = |at: usize| u64::from_ne_bytes(bytes[at..at + 8].try_into().unwrap());
        assert_eq!(words(48), 2, "callchain length on disk");
        let stack_at = 48 + 8 + 2 * 8 + 8 + 20 * 8;
        let size = words(stack_at) as usize;
        assert_eq!(words(stack_at + 8 + size), 100, "dyn_size");
        assert_eq!(bytes.len(), stack_at + 8 + size + 8);
    }

    /// Decoding into a sample that held another (longer stack, user context, raw data) gives what a fresh decode
    /// gives: nothing of the earlier one stays behind.
    #[test]
    fn decoding_into_a_used_sample_leaves_nothing_of_it() {
        let f = format();
        let mut reused = sample(vec![CONTEXT_USER, 1, 2, 3, 4, 5], 200);
        reused.raw = vec![1; 12];
        for s in [sample(vec![CONTEXT_USER, 0x40_1000], 8), Sample { user: None, ..sample(vec![], 0) }] {
            let bytes = encode(&f, &s);
            f.parse_sample_into(1, &bytes, &mut reused).unwrap();
            let fresh = f.parse_sample(1, &bytes).unwrap();
            assert_eq!(reused, fresh);
            // The same without copying the stack: it is handed back where it lies in the body.
            let stack = f.parse_sample_but_stack(1, &bytes, &mut reused).unwrap();
            assert_eq!(stack, fresh.user.as_ref().map_or(&[][..], |u| &u.stack[..]));
            if let Some(user) = &mut reused.user {
                assert!(user.stack.is_empty());
                user.stack = stack.to_vec();
            }
            assert_eq!(reused, fresh);
        }
        // A body that does not decode leaves the sample as it was.
        let before = reused.clone();
        assert!(f.parse_sample_into(1, &[0; 5], &mut reused).is_err());
        assert_eq!(reused, before);
    }

    #[test]
    fn a_kernel_written_copy_keeps_only_its_valid_bytes() {
        // As the kernel writes a sample (perf_event.h order): 64 bytes copied, 40 of them valid, no stash.
        let mut e = Encoder::new();
        for v in [7, 0x40_1000] {
            e.u64(v); // identifier, ip
        }
        e.u32(1); // pid, tid
        e.u32(2);
        e.u64(3); // time
        e.u32(1); // cpu, res
        e.u32(0);
        e.u64(9); // period
        for v in [2, CONTEXT_USER, 0x40_1000] {
            e.u64(v); // callchain
        }
        e.u64(REGS_ABI_64);
        for r in 0..20 {
            e.u64(r);
        }
        e.u64(64);
        e.bytes(&[0xab; 64]);
        e.u64(40);
        let back = format().parse_sample(1, &e.into_inner()).unwrap();
        assert_eq!(back.callchain, vec![CONTEXT_USER, 0x40_1000], "a callchain the stash did not hold is kept");
        assert_eq!(back.user.unwrap().stack, vec![0xab; 40]);
    }

    #[test]
    fn raw_data_round_trips_padded_as_the_kernel_pads_it() {
        let f = SampleFormat { sample_type: format().sample_type | SAMPLE_RAW, ..format() };
        // A tracepoint's 68 bytes of fields: the kernel's size word says 68, the record 4 + 68 = 72 bytes.
        let mut s = sample(vec![CONTEXT_KERNEL, 0xffff_ffff_8100_0000, CONTEXT_USER, 0x40_1000], 16);
        s.raw = (0..68).collect();
        let bytes = encode(&f, &s);
        assert_eq!(f.parse_sample(1, &bytes).unwrap(), s);
        assert_eq!(f.sample_tid(&bytes), Some(2));
        // Data that does not fill its last word comes back padded with zeros.
        s.raw = vec![7; 5];
        let back = f.parse_sample(1, &encode(&f, &s)).unwrap();
        assert_eq!(back.raw, [7, 7, 7, 7, 7, 0, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn damaged_samples_are_errors_not_panics() {
        let f = format();
        let bytes = encode(&f, &sample(vec![CONTEXT_USER, 1, 2, 3], 200));
        for cut in 0..bytes.len() {
            let _ = f.parse_sample(1, &bytes[..cut]);
        }
        // Every word of the sample replaced by values that make sizes and counts absurd.
        for at in (0..bytes.len()).step_by(8) {
            for value in [0, 1, 0xfff8, u32::MAX as u64, u64::MAX] {
                let mut damaged = bytes.clone();
                let end = (at + 8).min(damaged.len());
                damaged[at..end].copy_from_slice(&value.to_ne_bytes()[..end - at]);
                let _ = f.parse_sample(1, &damaged);
            }
        }
    }

    /// Found by the perf_data and perf_record fuzz targets: a group read of 2^64-1 values with the times enabled
    /// wrapped to a skip of 0 bytes, and the rest of the sample was read from the wrong place.
    #[test]
    fn a_huge_read_group_is_an_error() {
        use super::super::abi::{FORMAT_GROUP, FORMAT_TOTAL_TIME_ENABLED, SAMPLE_READ};
        let f = SampleFormat {
            sample_type: SAMPLE_IP | SAMPLE_READ | SAMPLE_CALLCHAIN,
            read_format: FORMAT_GROUP | FORMAT_TOTAL_TIME_ENABLED,
            ..SampleFormat::default()
        };
        let words: Vec<u8> = [0x40_1000, u64::MAX, 1, 0x40_2000].iter().flat_map(|w: &u64| w.to_ne_bytes()).collect();
        assert!(f.parse_sample(1, &words).is_err());
    }
}
