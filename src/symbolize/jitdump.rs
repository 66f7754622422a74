//! The jitdump a JIT writes to `jit-<pid>.dump` (spec: linux `tools/perf/Documentation/jitdump-specification.txt`):
//! a file header, then records `{u32 id, u32 total_size, u64 timestamp}` + body. CODE_LOAD names a code range from
//! its timestamp on; CODE_MOVE moves one. Because every record is timestamped (CLOCK_MONOTONIC, like a
//! `use_clockid` recording), a sample is named by the code that occupied its address *at the sample's time*, which
//! a perf map cannot do when a JIT reuses memory.
//!
//! The file is written by the process we profile, so it is parsed defensively: a truncated or corrupt file yields
//! whatever complete records precede the damage, plus a warning.

use super::unwind::{method_frame, JitFrame, PROLOGUE_BYTES};
use crate::fs::input::{InputError, Limit, Pieces};
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::ops::ControlFlow;
use std::sync::Arc;

const MAGIC: u32 = 0x4A69_5444;
const MAGIC_SWAPPED: u32 = 0x4454_694A;
const FILE_HEADER_SIZE: usize = 40;
const RECORD_HEADER_SIZE: usize = 16;
const JIT_CODE_LOAD: u32 = 0;
const JIT_CODE_MOVE: u32 = 1;
const JIT_CODE_CLOSE: u32 = 3;
/// Header flag: timestamps are raw TSC values, not CLOCK_MONOTONIC.
const FLAG_ARCH_TIMESTAMP: u64 = 1;
/// No JIT emits a single method this large; a bigger size means a corrupt record.
const MAX_CODE_SIZE: u64 = 1 << 30;

/// One method's code at one place for a span of time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JitCode {
    pub start: u64,
    pub end: u64,
    /// Timestamp from which the code is at this address.
    pub from: u64,
    /// Timestamp at which other code replaced it (or it moved); `u64::MAX` while still there.
    pub until: u64,
    pub name: Arc<str>,
    /// How its frames are unwound where frame pointers go astray, from the prologue in the record's code bytes.
    pub frame: Option<JitFrame>,
}

#[derive(Debug, Default)]
pub struct JitDump {
    /// Sorted by start; may overlap (different times).
    codes: Vec<JitCode>,
    max_size: u64,
    pub pid: u32,
    pub loads: usize,
    pub moves: usize,
    /// False when the timestamps cannot be compared with sample times (TSC flag): the latest code wins.
    pub timed: bool,
    /// Bytes of a last record that is incomplete: the file was cut short, or read while the JIT was writing it.
    pub incomplete_tail: Option<usize>,
    /// Corruption and unusable records.
    pub warnings: Vec<String>,
}

struct Reader<'a> {
    bytes: &'a [u8],
    swapped: bool,
}

impl Reader<'_> {
    fn u32(&self, at: usize) -> Option<u32> {
        let v = u32::from_ne_bytes(self.bytes.get(at..at.checked_add(4)?)?.try_into().ok()?);
        Some(if self.swapped { v.swap_bytes() } else { v })
    }

    fn u64(&self, at: usize) -> Option<u64> {
        let v = u64::from_ne_bytes(self.bytes.get(at..at.checked_add(8)?)?.try_into().ok()?);
        Some(if self.swapped { v.swap_bytes() } else { v })
    }
}

// Cloned by a test only, to replay the same events two ways.
#[cfg_attr(test, derive(Clone))]
enum Event {
    Load { start: u64, size: u64, name: Arc<str>, frame: Option<JitFrame> },
    Move { old: u64, new: u64, size: u64 },
}

impl JitDump {
    pub fn parse(bytes: &[u8]) -> JitDump {
        let Ok(dump) = Self::parse_from(&mut { bytes });
        dump
    }

    /// Reads the jitdump `file` (up to `limit` bytes) a piece at a time: a JIT's file holds the code of every
    /// method, MBs of which naming reads a few dozen bytes each; only a piece is ever in memory.
    pub fn read(file: &std::fs::File, limit: Limit) -> Result<JitDump, InputError> {
        Self::parse_from(&mut Pieces::new(file, limit))
    }

    fn parse_from<B: RecordBytes>(bytes: &mut B) -> Result<JitDump, B::Error> {
        let mut dump = JitDump { timed: true, ..Default::default() };
        let Some(file) = FileHeader::read(bytes.from(0, FILE_HEADER_SIZE)?, &mut dump) else { return Ok(dump) };
        let mut events: Vec<(u64, Event)> = Vec::new();
        let end = file.walk(bytes, |pos, id, timestamp, record| {
            let body = Reader { bytes: &record[RECORD_HEADER_SIZE..], swapped: file.swapped };
            match id {
                JIT_CODE_LOAD => match parse_load(&body) {
                    Some(ev) => events.push((timestamp, ev)),
                    None => dump.warnings.push(format!("jitdump: unreadable CODE_LOAD at byte {pos}")),
                },
                JIT_CODE_MOVE => match (body.u64(16), body.u64(24), body.u64(32)) {
                    (Some(old), Some(new), Some(size)) if size > 0 && size <= MAX_CODE_SIZE => {
                        events.push((timestamp, Event::Move { old, new, size }))
                    }
                    _ => dump.warnings.push(format!("jitdump: unreadable CODE_MOVE at byte {pos}")),
                },
                JIT_CODE_CLOSE => return ControlFlow::Break(()),
                _ => {} // debug info, unwinding info, future record types: not needed to name code
            }
            ControlFlow::Continue(())
        })?;
        match end {
            WalkEnd::Closed | WalkEnd::AtEnd => {}
            WalkEnd::Incomplete(_, left) => dump.incomplete_tail = Some(left),
            WalkEnd::Corrupt(pos, size) => {
                dump.warnings.push(format!("jitdump corrupt at byte {pos}: record size {size}"))
            }
        }
        dump.loads = events.iter().filter(|(_, e)| matches!(e, Event::Load { .. })).count();
        dump.moves = events.len() - dump.loads;
        let mut codes = match dump.moves {
            0 => replay_loads(events),
            _ => replay(events),
        };
        codes.sort_by_key(|c| (c.start, c.from));
        dump.max_size = codes.iter().map(|c| c.end - c.start).max().unwrap_or(0);
        dump.codes = codes;
        Ok(dump)
    }

    /// The code at `addr` at time `time` — the code that was there then; failing that (a sample slightly before the
    /// load's timestamp), the code whose time span is nearest — and the times around `time` at which the answer is
    /// the same: between the nearest load or replacement of any code at `addr` before and after `time` (only `time`
    /// itself when no code was there at `time`, as the nearest-in-time choice then depends on the exact time).
    pub fn lookup_steady(&self, addr: u64, time: u64) -> (Option<&JitCode>, std::ops::Range<u64>) {
        let found = self.choose(addr, time);
        let steady = match found {
            _ if !self.timed => 0..u64::MAX,
            None => 0..u64::MAX,
            Some(c) if c.from <= time && time < c.until => {
                let (mut lo, mut hi) = (0, u64::MAX);
                for c in self.covering(addr) {
                    for t in [c.from, c.until] {
                        if t <= time {
                            lo = lo.max(t);
                        } else {
                            hi = hi.min(t);
                        }
                    }
                }
                lo..hi
            }
            Some(_) => time..time.saturating_add(1),
        };
        (found, steady)
    }

    /// Every code that was at `addr` at some time.
    fn covering(&self, addr: u64) -> impl Iterator<Item = &JitCode> {
        let upper = self.codes.partition_point(|c| c.start <= addr);
        let lowest_start = addr.saturating_sub(self.max_size);
        self.codes[..upper].iter().rev().take_while(move |c| c.start >= lowest_start).filter(move |c| addr < c.end)
    }

    fn choose(&self, addr: u64, time: u64) -> Option<&JitCode> {
        let covering = self.covering(addr);
        if !self.timed {
            return covering.max_by_key(|c| c.from);
        }
        let distance = |c: &JitCode| {
            if time < c.from {
                c.from - time
            } else if time >= c.until {
                (time - c.until).saturating_add(1)
            } else {
                0
            }
        };
        covering.min_by_key(|c| (distance(c), std::cmp::Reverse(c.from)))
    }

    pub fn is_empty(&self) -> bool {
        self.codes.is_empty()
    }

    /// Every code span, sorted by start address.
    pub fn codes(&self) -> &[JitCode] {
        &self.codes
    }

    /// The code whose frames frame pointers do not unwind, with their rules (every time span alike).
    pub fn frames(&self) -> impl Iterator<Item = (u64, u64, JitFrame)> + '_ {
        self.codes.iter().filter_map(|c| Some((c.start, c.end, c.frame?)))
    }
}

/// A jitdump's byte order and where its records begin.
#[derive(Clone, Copy)]
struct FileHeader {
    swapped: bool,
    records_at: usize,
}

/// Why a walk over the records stopped.
enum WalkEnd {
    AtEnd,
    /// A CODE_CLOSE record (or the visitor) ended it: nothing after it counts.
    Closed,
    /// The record at this byte runs past the end of the file, which has this many bytes from it.
    Incomplete(usize, usize),
    /// The record at this byte claims a size smaller than a record header.
    Corrupt(usize, usize),
}

impl FileHeader {
    /// The header of `bytes`, noting in `dump` what it says (PID, timestamp kind) or what is wrong with it.
    fn read(bytes: &[u8], dump: &mut JitDump) -> Option<FileHeader> {
        let swapped = match (Reader { bytes, swapped: false }).u32(0) {
            Some(MAGIC) => false,
            Some(MAGIC_SWAPPED) => true,
            Some(_) => {
                dump.warnings.push("not a jitdump (bad magic)".into());
                return None;
            }
            None => {
                dump.warnings.push("jitdump is empty or truncated before its header".into());
                return None;
            }
        };
        let r = Reader { bytes, swapped };
        let (Some(header_size), Some(pid), Some(flags)) = (r.u32(8), r.u32(20), r.u64(32)) else {
            dump.warnings.push("jitdump header is truncated".into());
            return None;
        };
        dump.pid = pid;
        if flags & FLAG_ARCH_TIMESTAMP != 0 {
            dump.timed = false;
            dump.warnings.push(
                "jitdump uses TSC timestamps, which cannot be matched to sample times: reused code addresses may \
                 be named after the latest method"
                    .into(),
            );
        }
        Some(FileHeader { swapped, records_at: (header_size as usize).max(FILE_HEADER_SIZE) })
    }

    /// Hands each whole record (`position, id, timestamp, bytes` with its header) to `visit`, in file order.
    fn walk<B: RecordBytes>(
        &self,
        bytes: &mut B,
        mut visit: impl FnMut(usize, u32, u64, &[u8]) -> ControlFlow<()>,
    ) -> Result<WalkEnd, B::Error> {
        let mut pos = self.records_at;
        loop {
            let head = bytes.from(pos, RECORD_HEADER_SIZE)?;
            if head.is_empty() {
                return Ok(WalkEnd::AtEnd);
            }
            let r = Reader { bytes: head, swapped: self.swapped };
            let (Some(id), Some(size), Some(timestamp)) = (r.u32(0), r.u32(4), r.u64(8)) else {
                return Ok(WalkEnd::Incomplete(pos, head.len()));
            };
            let size = size as usize;
            if size < RECORD_HEADER_SIZE {
                return Ok(WalkEnd::Corrupt(pos, size));
            }
            let rest = bytes.from(pos, size)?;
            let Some(record) = rest.get(..size) else {
                return Ok(WalkEnd::Incomplete(pos, rest.len()));
            };
            if visit(pos, id, timestamp, record).is_break() {
                return Ok(WalkEnd::Closed);
            }
            pos += size;
        }
    }
}

/// Where a walk reads records from: a jitdump in memory, or its file a piece at a time.
trait RecordBytes {
    type Error;
    /// The bytes from position `at` on: at least `want` of them, fewer only where the jitdump ends.
    fn from(&mut self, at: usize, want: usize) -> Result<&[u8], Self::Error>;
}

impl RecordBytes for &[u8] {
    type Error = Infallible;
    fn from(&mut self, at: usize, _: usize) -> Result<&[u8], Infallible> {
        Ok(self.get(at..).unwrap_or_default())
    }
}

impl RecordBytes for Pieces<'_> {
    type Error = InputError;
    fn from(&mut self, at: usize, want: usize) -> Result<&[u8], InputError> {
        Pieces::from(self, at as u64, want)
    }
}

/// `bytes` made smaller for `symbols/`, naming and unwinding exactly as before: a CODE_LOAD keeps its name and the
/// first [`PROLOGUE_BYTES`] of its code (all that [`parse`](JitDump::parse) reads of it, while `code_size` still
/// gives the range), and the records naming ignores (debug and unwinding info) are left out: a .NET 8 web API's
/// 1.46 MB become 0.6 MB. What cannot be read as records (a bad header, a corrupt or incomplete tail) is kept as it
/// is, so the copy warns as the original does. `None` when `bytes` is no jitdump.
pub fn trimmed(bytes: &[u8]) -> Option<Vec<u8>> {
    let file = FileHeader::read(bytes, &mut JitDump::default())?;
    let mut out = Vec::with_capacity(bytes.len() / 4);
    out.extend_from_slice(&bytes[..file.records_at.min(bytes.len())]);
    let Ok(end) = file.walk(&mut { bytes }, |_, id, _, record| {
        match id {
            JIT_CODE_LOAD => trim_load(record, file.swapped, &mut out),
            JIT_CODE_MOVE => out.extend_from_slice(record),
            JIT_CODE_CLOSE => {
                out.extend_from_slice(record);
                return ControlFlow::Break(());
            }
            _ => {}
        }
        ControlFlow::Continue(())
    });
    if let WalkEnd::Incomplete(pos, _) | WalkEnd::Corrupt(pos, _) = end {
        out.extend_from_slice(&bytes[pos..]);
    }
    Some(out)
}

/// Appends a CODE_LOAD `record` with its code cut after the prologue (as it is, when it has no name to cut after).
fn trim_load(record: &[u8], swapped: bool, out: &mut Vec<u8>) {
    const NAME_AT: usize = RECORD_HEADER_SIZE + 40;
    let Some(name_len) = record.get(NAME_AT..).and_then(|rest| memchr::memchr(0, rest)) else {
        out.extend_from_slice(record);
        return;
    };
    let code_at = NAME_AT + name_len + 1;
    let kept = &record[..code_at + (record.len() - code_at).min(PROLOGUE_BYTES)];
    let size = kept.len() as u32;
    out.extend_from_slice(&record[..4]);
    out.extend_from_slice(&if swapped { size.swap_bytes() } else { size }.to_ne_bytes());
    out.extend_from_slice(&kept[8..]);
}

impl JitCode {
    /// `size` bytes of code at `start` from time `from` on, until other code replaces it.
    fn placed(start: u64, size: u64, from: u64, name: Arc<str>, frame: Option<JitFrame>) -> JitCode {
        JitCode { start, end: start.saturating_add(size), from, until: u64::MAX, name, frame }
    }
}

/// Code placed at addresses over time: each placement, and what lives where.
#[derive(Default)]
struct Placements {
    codes: Vec<JitCode>,
    /// The code at each address now: start -> index into `codes`; never overlapping.
    live: BTreeMap<u64, usize>,
}

impl Placements {
    /// Places `code` from its time on, ending the life of the code it is placed over.
    fn place(&mut self, code: JitCode) {
        let (start, end, at) = (code.start, code.end, code.from);
        let codes = &mut self.codes;
        // Code is seldom placed over other code: then the one search tells.
        if self.live.range(..end).next_back().is_some_and(|(_, &i)| codes[i].end > start) {
            let mut ended: Vec<u64> = self.live.range(start..end).map(|(&s, _)| s).collect();
            if let Some((&s, &i)) = self.live.range(..start).next_back() {
                if codes[i].end > start {
                    ended.push(s);
                }
            }
            for s in ended {
                let i = self.live.remove(&s).expect("key just seen");
                codes[i].until = at;
            }
        }
        self.live.insert(start, codes.len());
        codes.push(code);
    }
}

/// Every code `events` place, in no order: each event in time order, code placed over other code ending it, code
/// moved taking its name and frame to its new place.
fn replay(mut events: Vec<(u64, Event)>) -> Vec<JitCode> {
    // Writers on several threads may interleave slightly out of order.
    events.sort_by_key(|(t, _)| *t);
    let mut placed = Placements::default();
    for (t, ev) in events {
        match ev {
            Event::Load { start, size, name, frame } => placed.place(JitCode::placed(start, size, t, name, frame)),
            Event::Move { old, new, size } => {
                let Some(i) = placed.live.remove(&old) else { continue }; // code never seen loaded: no name
                let moved = &mut placed.codes[i];
                moved.until = t;
                let (name, frame) = (moved.name.clone(), moved.frame);
                placed.place(JitCode::placed(new, size, t, name, frame));
            }
        }
    }
    placed.codes
}

/// [`replay`] of loads alone, by place: only code that shares addresses with other code can end it, so each group
/// of codes that overlap is replayed on its own, and a code that overlaps none (nearly all of them) lives from its
/// load on. Reading a .NET service's 1.5 MB dump took 1.8 ms of CPU with the replay of every load, 1.3 ms so.
fn replay_loads(events: Vec<(u64, Event)>) -> Vec<JitCode> {
    // Each with its place in the file, which orders loads of the same time.
    let mut loads: Vec<(usize, JitCode)> = Vec::with_capacity(events.len());
    for (i, (t, event)) in events.into_iter().enumerate() {
        if let Event::Load { start, size, name, frame } = event {
            loads.push((i, JitCode::placed(start, size, t, name, frame)));
        }
    }
    loads.sort_unstable_by_key(|(i, c)| (c.start, *i));
    let mut codes = Vec::with_capacity(loads.len());
    let mut group: Vec<(usize, JitCode)> = Vec::new();
    let mut group_end = 0;
    let mut replay_group = |group: &mut Vec<(usize, JitCode)>| match group.len() {
        0 => {}
        1 => codes.extend(group.drain(..).map(|(_, code)| code)),
        _ => {
            group.sort_unstable_by_key(|(i, c)| (c.from, *i));
            let mut placed = Placements::default();
            group.drain(..).for_each(|(_, code)| placed.place(code));
            codes.append(&mut placed.codes);
        }
    };
    for (i, code) in loads {
        if code.start >= group_end {
            replay_group(&mut group);
        }
        group_end = if group.is_empty() { code.end } else { group_end.max(code.end) };
        group.push((i, code));
    }
    replay_group(&mut group);
    codes
}

fn parse_load(body: &Reader) -> Option<Event> {
    // pid u32, tid u32, vma u64, code_addr u64, code_size u64, code_index u64, name\0, code bytes
    let start = body.u64(16)?;
    let size = body.u64(24)?;
    if size == 0 || size > MAX_CODE_SIZE {
        return None;
    }
    let name_bytes = body.bytes.get(40..)?;
    let n = memchr::memchr(0, name_bytes).unwrap_or(name_bytes.len());
    // Checked whole first: the lossy conversion's own walk is several times slower on the valid names of a
    // runtime's thousands of methods.
    let name = match std::str::from_utf8(&name_bytes[..n]) {
        Ok(name) => std::borrow::Cow::Borrowed(name),
        Err(_) => String::from_utf8_lossy(&name_bytes[..n]),
    };
    let name = name.trim();
    if name.is_empty() {
        return None;
    }
    // The code follows the name.
    let code = name_bytes.get(n + 1..).unwrap_or_default();
    let frame = method_frame(name, &code[..code.len().min(PROLOGUE_BYTES).min(size as usize)]);
    Some(Event::Load { start, size, name: super::name_limit::cap_arc(name), frame })
}

/// Writes jitdump files; used by tests to build inputs (the format is simple enough that a writer is the clearest
/// fixture).
#[cfg(test)]
pub(crate) mod testing {
    pub struct JitDumpWriter {
        pub bytes: Vec<u8>,
    }

    impl JitDumpWriter {
        pub fn new(pid: u32, flags: u64) -> Self {
            let mut b = Vec::new();
            b.extend_from_slice(&super::MAGIC.to_ne_bytes());
            b.extend_from_slice(&1u32.to_ne_bytes());
            b.extend_from_slice(&40u32.to_ne_bytes());
            b.extend_from_slice(&62u32.to_ne_bytes()); // EM_X86_64
            b.extend_from_slice(&0u32.to_ne_bytes());
            b.extend_from_slice(&pid.to_ne_bytes());
            b.extend_from_slice(&0u64.to_ne_bytes());
            b.extend_from_slice(&flags.to_ne_bytes());
            JitDumpWriter { bytes: b }
        }

        pub fn record(&mut self, id: u32, time: u64, body: &[u8]) {
            self.bytes.extend_from_slice(&id.to_ne_bytes());
            self.bytes.extend_from_slice(&((16 + body.len()) as u32).to_ne_bytes());
            self.bytes.extend_from_slice(&time.to_ne_bytes());
            self.bytes.extend_from_slice(body);
        }

        pub fn load(&mut self, time: u64, addr: u64, size: u64, name: &str) -> &mut Self {
            self.load_code(time, addr, name, &vec![0xcc; size as usize])
        }

        pub fn load_code(&mut self, time: u64, addr: u64, name: &str, code: &[u8]) -> &mut Self {
            let mut body = Vec::new();
            for v in [7u32, 7u32] {
                body.extend_from_slice(&v.to_ne_bytes());
            }
            for v in [addr, addr, code.len() as u64, 0] {
                body.extend_from_slice(&v.to_ne_bytes());
            }
            body.extend_from_slice(name.as_bytes());
            body.push(0);
            body.extend_from_slice(code);
            self.record(super::JIT_CODE_LOAD, time, &body);
            self
        }

        pub fn moved(&mut self, time: u64, old: u64, new: u64, size: u64) -> &mut Self {
            let mut body = Vec::new();
            for v in [7u32, 7u32] {
                body.extend_from_slice(&v.to_ne_bytes());
            }
            for v in [new, old, new, size, 0] {
                body.extend_from_slice(&v.to_ne_bytes());
            }
            self.record(super::JIT_CODE_MOVE, time, &body);
            self
        }

        pub fn debug_info(&mut self, time: u64) -> &mut Self {
            self.record(2, time, &[0u8; 24]);
            self
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::JitDumpWriter;
    use super::*;

    fn name(d: &JitDump, addr: u64, time: u64) -> Option<String> {
        d.lookup_steady(addr, time).0.map(|c| c.name.to_string())
    }

    /// .NET's records carry the code: a method without frame pointer gets its rule from its prologue there.
    #[test]
    fn frames_come_from_the_code_in_the_records() {
        let nap = [0x50, 0xbf, 0x14, 0, 0, 0, 0xff, 0x15, 0, 0, 0, 0, 0x90, 0x48, 0x83, 0xc4, 8, 0xc3];
        let framed = [0x55, 0x48, 0x8b, 0xec, 0xbf, 0x14, 0, 0, 0, 0xff, 0x15, 0, 0, 0, 0, 0x90, 0x5d, 0xc3];
        let mut w = JitDumpWriter::new(7, 0);
        w.load_code(1, 0x1000, "void [App] App::Nap()[QuickJitted]", &framed)
            .load_code(2, 0x2000, "void [App] App::Nap()[OptimizedTier1]", &nap)
            .load_code(3, 0x3000, "void [App] App::Nap()[OSR]", &nap)
            .load_code(4, 0x4000, "void [App] App::Nap()[OptimizedTier1]", &nap)
            .moved(5, 0x4000, 0x5000, nap.len() as u64);
        let d = JitDump::parse(&w.bytes);
        let rule = JitFrame::StackPointer { cfa: 16, rbp_slot: None };
        let frames: Vec<_> = d.frames().collect();
        assert_eq!(frames, [(0x2000, 0x2012, rule), (0x4000, 0x4012, rule), (0x5000, 0x5012, rule)]);
        // Code cut short in its record: no rule.
        let mut w = JitDumpWriter::new(7, 0);
        w.load_code(1, 0x2000, "void [App] App::Nap()[OptimizedTier1]", &nap[..3]);
        assert_eq!(JitDump::parse(&w.bytes).frames().count(), 0);
    }

    #[test]
    fn reused_address_is_named_by_time() {
        let mut w = JitDumpWriter::new(42, 0);
        w.load(100, 0x1000, 0x40, "First").debug_info(150).load(200, 0x1000, 0x80, "Second");
        let d = JitDump::parse(&w.bytes);
        assert!(d.warnings.is_empty(), "{:?}", d.warnings);
        assert_eq!((d.pid, d.loads), (42, 2));
        assert_eq!(name(&d, 0x1010, 150).unwrap(), "First");
        assert_eq!(name(&d, 0x1010, 250).unwrap(), "Second");
        assert_eq!(name(&d, 0x1050, 250).unwrap(), "Second");
        // Only the second code ever covered 0x1050; a sample there at 150 is nearest to it.
        assert_eq!(name(&d, 0x1050, 150).unwrap(), "Second");
        // Before anything was loaded: the nearest in time.
        assert_eq!(name(&d, 0x1010, 50).unwrap(), "First");
        assert!(name(&d, 0x1080, 250).is_none());
    }

    #[test]
    fn steady_times_end_where_the_code_at_the_address_changes() {
        let mut w = JitDumpWriter::new(42, 0);
        w.load(100, 0x1000, 0x40, "First").load(200, 0x1000, 0x80, "Second").load(300, 0x2000, 0x10, "Elsewhere");
        let d = JitDump::parse(&w.bytes);
        let steady = |addr: u64, time: u64| {
            let (code, times) = d.lookup_steady(addr, time);
            (code.map(|c| c.name.to_string()), times)
        };
        // Valid from its load to its replacement; the unrelated load at 300 does not matter here.
        assert_eq!(steady(0x1010, 150), (Some("First".into()), 100..200));
        assert_eq!(steady(0x1010, 250), (Some("Second".into()), 200..u64::MAX));
        // Before any load the answer is the nearest in time, which depends on the exact time.
        assert_eq!(steady(0x1010, 50), (Some("First".into()), 50..51));
        // Nothing ever there: the same at any time.
        assert_eq!(steady(0x3000, 150), (None, 0..u64::MAX));
        // Every time in a steady range gives the same answer.
        for addr in [0x1000, 0x1010, 0x1050, 0x107f, 0x2008] {
            for time in [0, 50, 99, 100, 101, 150, 199, 200, 201, 299, 300, 301, 1000] {
                let (code, times) = steady(addr, time);
                assert!(times.contains(&time), "{addr:#x}@{time}: {times:?}");
                for t in [times.start, times.end.saturating_sub(1), (times.start / 2).saturating_add(times.end / 2)] {
                    assert_eq!(steady(addr, t).0, code, "{addr:#x}@{time} vs @{t}");
                }
            }
        }
    }

    /// Found by the jitdump fuzz target: code replaced at time 0, looked up at the last time there is, was 2^64
    /// units away: the distance wrapped to 0 (a panic with overflow checks) and the replaced code won.
    #[test]
    fn code_replaced_at_time_zero_is_not_chosen_at_the_end_of_time() {
        let mut w = JitDumpWriter::new(7, 0);
        w.load(0, 0x1000, 0x10, "Old").load(0, 0x1000, 0x10, "New");
        let d = JitDump::parse(&w.bytes);
        assert_eq!(name(&d, 0x1008, u64::MAX).as_deref(), Some("New"));
        assert_eq!(name(&d, 0x1008, 5).as_deref(), Some("New"));
    }

    #[test]
    fn code_move_relocates_the_name_from_its_time() {
        let mut w = JitDumpWriter::new(1, 0);
        w.load(10, 0x1000, 0x20, "Moved").moved(20, 0x1000, 0x5000, 0x20).load(30, 0x1000, 0x20, "Other");
        let d = JitDump::parse(&w.bytes);
        assert_eq!(d.moves, 1);
        assert_eq!(name(&d, 0x1008, 15).unwrap(), "Moved");
        assert_eq!(name(&d, 0x5008, 25).unwrap(), "Moved");
        assert_eq!(name(&d, 0x1008, 35).unwrap(), "Other");
    }

    #[test]
    fn out_of_order_records_are_replayed_by_time() {
        let mut w = JitDumpWriter::new(1, 0);
        w.load(200, 0x1000, 0x10, "Later").load(100, 0x1000, 0x10, "Earlier");
        let d = JitDump::parse(&w.bytes);
        assert_eq!(name(&d, 0x1000, 150).unwrap(), "Earlier");
        assert_eq!(name(&d, 0x1000, 300).unwrap(), "Later");
    }

    #[test]
    fn loads_replayed_by_place_are_the_replay_of_all() {
        let mut rng = crate::random_inputs::Rng::new(0x5eed_0031);
        let sorted = |mut codes: Vec<JitCode>| {
            codes.sort_by_key(|c| (c.start, c.from));
            codes
        };
        let mut overlapping = 0;
        for _ in 0..500 {
            let events: Vec<(u64, Event)> = (0..rng.below(40))
                .map(|i| {
                    let (start, size) = (0x1000 + 0x40 * rng.below(64) as u64, 1 + rng.below(0x60) as u64);
                    let name = format!("M{i}").into();
                    (rng.below(100) as u64, Event::Load { start, size, name, frame: None })
                })
                .collect();
            let again: Vec<(u64, Event)> = events.iter().map(|(t, e)| (*t, e.clone())).collect();
            let by_place = sorted(replay_loads(events));
            overlapping += by_place.iter().any(|c| c.until != u64::MAX) as usize;
            assert_eq!(by_place, sorted(replay(again)));
        }
        assert!(overlapping > 100, "{overlapping} of the dumps had code placed over code");
    }

    #[test]
    fn truncated_file_keeps_complete_records_and_reports_the_tail() {
        let mut w = JitDumpWriter::new(1, 0);
        w.load(1, 0x1000, 0x10, "Kept");
        let complete = w.bytes.len();
        w.load(2, 0x2000, 0x10, "Lost");
        for cut in [complete + 5, w.bytes.len() - 5] {
            let d = JitDump::parse(&w.bytes[..cut]);
            assert_eq!(name(&d, 0x1000, 5).unwrap(), "Kept");
            assert!(name(&d, 0x2000, 5).is_none());
            assert_eq!(d.incomplete_tail, Some(cut - complete));
            assert!(d.warnings.is_empty(), "{:?}", d.warnings);
        }
        assert_eq!(JitDump::parse(&w.bytes).incomplete_tail, None);
    }

    #[test]
    fn corrupt_and_foreign_inputs_give_warnings_not_panics() {
        assert!(!JitDump::parse(b"").warnings.is_empty());
        assert!(!JitDump::parse(b"ELF\x7fxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx").warnings.is_empty());
        let mut w = JitDumpWriter::new(1, 0);
        w.load(1, 0x1000, 0x10, "Ok");
        let mut bad = w.bytes.clone();
        bad.extend_from_slice(&0u32.to_ne_bytes());
        bad.extend_from_slice(&3u32.to_ne_bytes()); // record size smaller than its header
        bad.extend_from_slice(&[0; 8]);
        let d = JitDump::parse(&bad);
        assert_eq!(name(&d, 0x1000, 1).unwrap(), "Ok");
        assert!(d.warnings.iter().any(|w| w.contains("corrupt")));
    }

    #[test]
    fn byte_swapped_files_are_read() {
        let mut w = JitDumpWriter::new(0x01020304, 0);
        w.load(1, 0x1000, 0x10, "Swapped");
        // Swap every header field and record field to simulate the other endianness.
        let mut b = w.bytes.clone();
        let swap32 = |b: &mut Vec<u8>, at: usize| b[at..at + 4].reverse();
        let swap64 = |b: &mut Vec<u8>, at: usize| b[at..at + 8].reverse();
        for at in [0, 4, 8, 12, 16, 20] {
            swap32(&mut b, at);
        }
        swap64(&mut b, 24);
        swap64(&mut b, 32);
        let r = 40;
        swap32(&mut b, r);
        swap32(&mut b, r + 4);
        swap64(&mut b, r + 8);
        swap32(&mut b, r + 16);
        swap32(&mut b, r + 20);
        for k in 0..4 {
            swap64(&mut b, r + 24 + 8 * k);
        }
        let d = JitDump::parse(&b);
        assert_eq!(d.pid, 0x01020304);
        assert_eq!(name(&d, 0x1008, 1).unwrap(), "Swapped");
    }

    #[test]
    fn tsc_timestamps_fall_back_to_latest_code() {
        let mut w = JitDumpWriter::new(1, FLAG_ARCH_TIMESTAMP);
        w.load(1, 0x1000, 0x10, "Old").load(2, 0x1000, 0x10, "New");
        let d = JitDump::parse(&w.bytes);
        assert!(!d.timed);
        assert_eq!(name(&d, 0x1000, 0).unwrap(), "New");
    }

    /// What `symbols/` keeps of a jitdump names and unwinds exactly as the whole file does, damaged files included.
    #[test]
    fn a_trimmed_dump_reads_as_the_original() {
        // push rax; mov edi, 20; call [rip]: a frame without frame pointer, unwound by its prologue.
        let prologue = [0x50, 0xbf, 0x14, 0, 0, 0, 0xff, 0x15, 0, 0, 0, 0];
        let long_code: Vec<u8> = prologue.iter().copied().chain((0..400).map(|i| i as u8)).collect();
        let mut w = JitDumpWriter::new(9, 0);
        w.load_code(1, 0x1000, "int32 [App] C::Long(int32)[Optimized]", &long_code)
            .load(2, 0x2000, 0x8, "Short")
            .moved(3, 0x2000, 0x3000, 0x8)
            .debug_info(4)
            .load_code(5, 0x1000, "int32 [App] C::Long(int32)[OSR]", &long_code[..40]);
        let whole = w.bytes.clone();
        w.record(JIT_CODE_CLOSE, 6, &[]);
        w.load(7, 0x4000, 0x10, "AfterClose");
        let closed = w.bytes.clone();
        let small = trimmed(&whole).unwrap();
        assert!(small.len() < whole.len() / 2, "{} of {} bytes kept", small.len(), whole.len());
        assert!(JitDump::parse(&small).frames().count() > 0, "the prologue was kept");

        let mut rng = crate::random_inputs::Rng::new(0x5eed_0012);
        for input in rng.inputs(&[&whole, &closed], 3000) {
            let (original, Some(copy)) = (JitDump::parse(&input), trimmed(&input)) else { continue };
            let copy = JitDump::parse(&copy);
            assert_eq!(original.codes(), copy.codes());
            assert_eq!(
                (original.pid, original.timed, original.loads, original.moves),
                (copy.pid, copy.timed, copy.loads, copy.moves)
            );
            assert_eq!(original.incomplete_tail, copy.incomplete_tail);
            assert_eq!(original.warnings.len(), copy.warnings.len());
        }
    }

    #[test]
    fn random_and_mutated_dumps_never_panic() {
        let mut w = JitDumpWriter::new(9, 0);
        w.load(1, 0x1000, 0x10, "A").moved(2, 0x1000, 0x3000, 0x10).debug_info(3).load(4, 0x1000, 0x20, "B");
        let mut rng = crate::random_inputs::Rng::new(0x5eed_0002);
        for input in rng.inputs(&[&w.bytes], 3000) {
            let d = JitDump::parse(&input);
            for c in d.codes() {
                let _ = d.lookup_steady(c.start, c.from);
                let _ = d.lookup_steady(c.end.saturating_sub(1), u64::MAX);
            }
        }
    }

    /// Read from its file a piece at a time, a jitdump parses as it does in memory: records across the pieces'
    /// boundaries, one larger than a piece, a move, an incomplete last record, a file over the limit.
    #[test]
    fn a_jitdump_read_in_pieces_is_the_one_in_memory() {
        let mut w = JitDumpWriter::new(7, 0);
        for i in 0..3000u64 {
            let prologue = [0x55, 0x48, 0x89, 0xe5];
            let code: Vec<u8> = prologue.iter().copied().chain((0..(i % 300) as u8).map(|b| b ^ 0x5a)).collect();
            w.load_code(i * 10, 0x10_0000 + (i % 700) * 0x400, &format!("M{i}::method(int32)"), &code);
            if i % 97 == 0 {
                w.moved(i * 10 + 5, 0x10_0000 + (i % 700) * 0x400, 0x90_0000 + i * 0x400, 16);
                w.debug_info(i * 10 + 6);
            }
        }
        w.load_code(40_000, 0x50_0000, "Big::method()", &vec![0x90; 300 << 10]);
        w.load(40_010, 0x60_0000, 64, "After::big()");
        let whole = w.bytes.clone();
        w.load(40_020, 0x70_0000, 64, "Cut::short()");
        let cut = &w.bytes[..w.bytes.len() - 10];
        for bytes in [&whole[..], cut] {
            assert!(bytes.len() > 3 * (128 << 10));
            let mut file = tempfile::tempfile().unwrap();
            std::io::Write::write_all(&mut file, bytes).unwrap();
            let read = JitDump::read(&file, Limit { bytes: 1 << 30 }).unwrap();
            let parsed = JitDump::parse(bytes);
            assert_eq!(format!("{read:?}"), format!("{parsed:?}"));
            assert!(parsed.loads > 3000 && parsed.moves > 30);
            let over = JitDump::read(&file, Limit { bytes: bytes.len() as u64 - 1 });
            assert!(matches!(over, Err(InputError::TooLarge { .. })), "{over:?}");
        }
        assert_eq!(JitDump::parse(cut).incomplete_tail, Some(cut.len() - whole.len()));
    }

    /// A record that claims to be 4 GB long, in a file of a few hundred KB, is an incomplete tail: nothing near its
    /// size is allocated to read it.
    #[test]
    fn a_record_claiming_gigabytes_is_read_as_an_incomplete_tail() {
        let mut w = JitDumpWriter::new(7, 0);
        w.load(10, 0x1000, 64, "Real::method()");
        let mut bytes = w.bytes.clone();
        let at = bytes.len();
        bytes.extend_from_slice(&JIT_CODE_LOAD.to_ne_bytes());
        bytes.extend_from_slice(&u32::MAX.to_ne_bytes());
        // More than a piece follows, so that reading it needs more room.
        bytes.extend_from_slice(&vec![0; 300 << 10]);
        let mut file = tempfile::tempfile().unwrap();
        std::io::Write::write_all(&mut file, &bytes).unwrap();
        let started = std::time::Instant::now();
        let read = JitDump::read(&file, Limit { bytes: 1 << 33 }).unwrap();
        assert!(started.elapsed() < std::time::Duration::from_secs(1), "{:?}", started.elapsed());
        assert_eq!(read.incomplete_tail, Some(bytes.len() - at));
        assert_eq!(read.loads, 1);
    }
}
