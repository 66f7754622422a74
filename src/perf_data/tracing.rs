//! Tracepoints in perf.data: the `HEADER_TRACING_DATA` feature — the tracefs format files of the recorded
//! tracepoints, stored the way perf stores them so that `perf script` prints their fields — and a tracepoint
//! sample's raw data decoded by the field offsets of its own format file, never by offsets assumed for one kernel.
//!
//! The feature's layout, as perf writes it (`tools/perf/util/trace-event-info.c`) and reads it
//! (`trace-event-read.c`), every number in the file's byte order:
//!
//! ```text
//! 0x17 0x08 0x44 "tracing"  "0.6\0"  u8 big_endian  u8 sizeof(long)  u32 page_size
//! "header_page\0"  u64 size, text          (events/header_page)
//! "header_event\0" u64 size, text          (events/header_event)
//! u32 n, n × {u64 size, text}              (ftrace's own event formats)
//! u32 systems, each: "system\0" u32 n, n × {u64 size, text}   (events/<system>/<event>/format)
//! u32 size, text                           (kallsyms: perf writes none)
//! u32 size, text                           (printk formats)
//! u64 size, text                           (saved cmdlines, version 0.6)
//! ```
//!
//! A format file (`events/sched/sched_switch/format`) names the event, its id (the attr's `config`) and one line
//! per field, tab-separated: `field:pid_t prev_pid; offset:24; size:4; signed:1;`.

use super::bytes::{ByteReader, Encoder};
use anyhow::{bail, Context, Result};

/// The scheduler's switch tracepoint, as perf names it.
pub const SCHED_SWITCH: &str = "sched:sched_switch";

const MAGIC: [u8; 10] = [0x17, 0x08, 0x44, b't', b'r', b'a', b'c', b'i', b'n', b'g'];
const VERSION: &str = "0.6";

/// One field of a tracepoint's raw data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    pub name: String,
    pub offset: usize,
    pub size: usize,
    pub signed: bool,
}

impl Field {
    /// The field as an integer (1, 2, 4 or 8 bytes, sign-extended when signed); `None` when the data is too short
    /// or the field is not an integer of those sizes.
    pub fn int(&self, raw: &[u8]) -> Option<i64> {
        let bytes = raw.get(self.offset..self.offset.checked_add(self.size)?)?;
        let mut word = [0u8; 8];
        if !matches!(self.size, 1 | 2 | 4 | 8) {
            return None;
        }
        word[..self.size].copy_from_slice(bytes);
        let value = u64::from_ne_bytes(word);
        let bits = self.size as u32 * 8;
        Some(match (self.signed, bits) {
            (_, 64) => value as i64,
            (true, _) => ((value << (64 - bits)) as i64) >> (64 - bits),
            (false, _) => value as i64,
        })
    }
}

/// A tracepoint's format file, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventFormat {
    /// The subsystem (`sched`), which the file itself does not name: it is the folder it came from.
    pub system: String,
    pub name: String,
    /// The tracepoint id: a `PERF_TYPE_TRACEPOINT` attr's `config`.
    pub id: u64,
    pub fields: Vec<Field>,
    /// The file as tracefs gave it (stored in perf.data as it is).
    pub text: String,
}

impl EventFormat {
    pub fn parse(system: &str, text: &str) -> Result<EventFormat> {
        let mut name = None;
        let mut id = None;
        let mut fields = Vec::new();
        for line in text.lines() {
            let line = line.trim();
            if let Some(n) = line.strip_prefix("name:") {
                name = Some(n.trim().to_string());
            } else if let Some(n) = line.strip_prefix("ID:") {
                id = Some(n.trim().parse::<u64>().with_context(|| format!("bad tracepoint id {:?}", n.trim()))?);
            } else if line.starts_with("field:") {
                fields.push(parse_field(line).with_context(|| format!("bad field line {line:?}"))?);
            }
        }
        let (Some(name), Some(id)) = (name, id) else { bail!("a tracepoint format without a name or an ID line") };
        Ok(EventFormat { system: system.to_string(), name, id, fields, text: text.to_string() })
    }

    pub fn field(&self, name: &str) -> Option<&Field> {
        self.fields.iter().find(|f| f.name == name)
    }

    /// `system:name`, as perf names the event.
    pub fn full_name(&self) -> String {
        format!("{}:{}", self.system, self.name)
    }
}

/// `field:<declaration>;<tab>offset:N;<tab>size:N;<tab>signed:N;` — the name is the declaration's last word, without an
/// array suffix (`char prev_comm[16]`, `__data_loc char[] name`).
fn parse_field(line: &str) -> Result<Field> {
    let mut decl = None;
    let (mut offset, mut size, mut signed) = (None, None, false);
    for part in line.split(';').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((key, value)) = part.split_once(':') else { continue };
        match key.trim() {
            "field" => decl = Some(value.trim()),
            "offset" => offset = Some(value.trim().parse::<usize>()?),
            "size" => size = Some(value.trim().parse::<usize>()?),
            "signed" => signed = value.trim() == "1",
            _ => {}
        }
    }
    let decl = decl.context("no declaration")?;
    let without_array = decl.split('[').next().unwrap_or(decl).trim();
    let name = without_array.rsplit(|c: char| c.is_whitespace() || c == '*').next().unwrap_or("").to_string();
    if name.is_empty() {
        bail!("no field name");
    }
    Ok(Field { name, offset: offset.context("no offset")?, size: size.context("no size")?, signed })
}

/// What tracefs gives for the `HEADER_TRACING_DATA` feature.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TracingSource {
    pub page_size: u32,
    /// `events/header_page`, `events/header_event`.
    pub header_page: String,
    pub header_event: String,
}

/// The `HEADER_TRACING_DATA` feature: the formats of the recorded tracepoints.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TracingData {
    pub events: Vec<EventFormat>,
    /// The feature's bytes as read or built.
    bytes: Vec<u8>,
}

impl TracingData {
    /// The feature for these tracepoints (their system is each format's).
    pub fn new(source: &TracingSource, events: Vec<EventFormat>) -> TracingData {
        let mut e = Encoder::new();
        e.bytes(&MAGIC);
        e.cstr_aligned(VERSION, 1);
        e.u8(cfg!(target_endian = "big") as u8);
        e.u8(std::mem::size_of::<libc::c_long>() as u8);
        e.u32(source.page_size);
        e.cstr_aligned("header_page", 1);
        e.u64(source.header_page.len() as u64);
        e.bytes(source.header_page.as_bytes());
        e.cstr_aligned("header_event", 1);
        e.u64(source.header_event.len() as u64);
        e.bytes(source.header_event.as_bytes());
        e.u32(0); // no ftrace formats
        let mut systems: Vec<&str> = events.iter().map(|f| f.system.as_str()).collect();
        systems.dedup();
        e.u32(systems.len() as u32);
        for system in &systems {
            e.cstr_aligned(system, 1);
            let of_system: Vec<&EventFormat> = events.iter().filter(|f| f.system == *system).collect();
            e.u32(of_system.len() as u32);
            for format in of_system {
                e.u64(format.text.len() as u64);
                e.bytes(format.text.as_bytes());
            }
        }
        e.u32(0); // kallsyms: perf's symbol tables are elsewhere
        e.u32(0); // printk formats
        e.u64(0); // saved cmdlines
        TracingData { events, bytes: e.into_inner() }
    }

    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Reads the feature's event formats (what follows them is not needed).
    pub fn decode(bytes: &[u8]) -> Result<TracingData> {
        let mut c = ByteReader::new(bytes);
        if c.bytes(MAGIC.len())? != MAGIC {
            bail!("not tracing data (no magic)");
        }
        let _version = c.cstr()?;
        if c.u8()? != cfg!(target_endian = "big") as u8 {
            bail!("tracing data of the other byte order");
        }
        let _long_size = c.u8()?;
        let _page_size = c.u32()?;
        for header in ["header_page", "header_event"] {
            if c.cstr()? != header {
                bail!("tracing data without its {header}");
            }
            let size = c.u64()?;
            c.skip(usize::try_from(size)?)?;
        }
        for _ in 0..c.u32()? {
            let size = c.u64()?;
            c.skip(usize::try_from(size)?)?;
        }
        let mut events = Vec::new();
        for _ in 0..c.u32()? {
            let system = c.cstr()?;
            for _ in 0..c.u32()? {
                let size = usize::try_from(c.u64()?)?;
                let text = String::from_utf8_lossy(c.bytes(size)?);
                // One unreadable format does not hide the others.
                if let Ok(format) = EventFormat::parse(&system, &text) {
                    events.push(format);
                }
            }
        }
        Ok(TracingData { events, bytes: bytes.to_vec() })
    }

    /// The format of tracepoint `id` (an attr's `config`).
    pub fn event(&self, id: u64) -> Option<&EventFormat> {
        self.events.iter().find(|f| f.id == id)
    }
}

/// Where `sched:sched_switch` keeps the fields profcpu reads, from its format file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchedSwitchLayout {
    prev_pid: Field,
    prev_state: Field,
    next_pid: Field,
}

/// One `sched:sched_switch` sample's fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchedSwitch {
    pub prev_pid: i64,
    pub prev_state: i64,
    pub next_pid: i64,
}

impl SchedSwitch {
    /// The task left the CPU runnable (preempted or yielding), not blocked. In `prev_state` the blocked states
    /// S D T t X Z P I are the low bits (`TASK_REPORT` since Linux 4.14, the same bits of the raw `TASK_*` values
    /// before); a runnable task reports 0, or a bit above them when preempted (`R+`: `TASK_REPORT_MAX`, or
    /// `TASK_STATE_MAX` on old kernels).
    pub fn runnable(&self) -> bool {
        self.prev_state & 0xff == 0
    }
}

impl SchedSwitchLayout {
    pub fn new(format: &EventFormat) -> Result<SchedSwitchLayout> {
        let field = |name: &str| {
            format.field(name).cloned().with_context(|| format!("{} has no {name} field", format.full_name()))
        };
        Ok(SchedSwitchLayout {
            prev_pid: field("prev_pid")?,
            prev_state: field("prev_state")?,
            next_pid: field("next_pid")?,
        })
    }

    /// The fields of one sample's raw data; `None` when it is too short for them.
    pub fn decode(&self, raw: &[u8]) -> Option<SchedSwitch> {
        Some(SchedSwitch {
            prev_pid: self.prev_pid.int(raw)?,
            prev_state: self.prev_state.int(raw)?,
            next_pid: self.next_pid.int(raw)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Linux 6.18's format file (`/sys/kernel/tracing/events/sched/sched_switch/format`), print fmt shortened.
    const SCHED_SWITCH_FORMAT: &str = "name: sched_switch\nID: 372\nformat:\n\
        \tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
        \tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\
        \tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\
        \tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n\
        \tfield:char prev_comm[16];\toffset:8;\tsize:16;\tsigned:0;\n\
        \tfield:pid_t prev_pid;\toffset:24;\tsize:4;\tsigned:1;\n\
        \tfield:int prev_prio;\toffset:28;\tsize:4;\tsigned:1;\n\
        \tfield:long prev_state;\toffset:32;\tsize:8;\tsigned:1;\n\
        \tfield:char next_comm[16];\toffset:40;\tsize:16;\tsigned:0;\n\
        \tfield:pid_t next_pid;\toffset:56;\tsize:4;\tsigned:1;\n\
        \tfield:int next_prio;\toffset:60;\tsize:4;\tsigned:1;\n\n\
        print fmt: \"prev_comm=%s prev_pid=%d\", REC->prev_comm, REC->prev_pid\n";

    /// An older layout (Linux 4.x had a 4-byte `prev_state` at another offset).
    const OLD_FORMAT: &str = "name: sched_switch\nID: 316\nformat:\n\
        \tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
        \tfield:char prev_comm[16];\toffset:8;\tsize:16;\tsigned:1;\n\
        \tfield:pid_t prev_pid;\toffset:24;\tsize:4;\tsigned:1;\n\
        \tfield:int prev_prio;\toffset:28;\tsize:4;\tsigned:1;\n\
        \tfield:int prev_state;\toffset:36;\tsize:4;\tsigned:1;\n\
        \tfield:char next_comm[16];\toffset:40;\tsize:16;\tsigned:1;\n\
        \tfield:pid_t next_pid;\toffset:56;\tsize:4;\tsigned:1;\n";

    fn raw(prev_pid: i32, state_at: usize, state: &[u8], next_pid: i32) -> Vec<u8> {
        let mut raw = vec![0u8; 68];
        raw[24..28].copy_from_slice(&prev_pid.to_ne_bytes());
        raw[state_at..state_at + state.len()].copy_from_slice(state);
        raw[56..60].copy_from_slice(&next_pid.to_ne_bytes());
        raw
    }

    #[test]
    fn fields_come_from_the_format_file() {
        let format = EventFormat::parse("sched", SCHED_SWITCH_FORMAT).unwrap();
        assert_eq!((format.full_name().as_str(), format.id, format.fields.len()), (SCHED_SWITCH, 372, 11));
        assert_eq!(
            format.field("prev_comm").unwrap(),
            &Field { name: "prev_comm".into(), offset: 8, size: 16, signed: false }
        );
        let layout = SchedSwitchLayout::new(&format).unwrap();
        let blocked = layout.decode(&raw(41, 32, &1i64.to_ne_bytes(), 7)).unwrap();
        assert_eq!(blocked, SchedSwitch { prev_pid: 41, prev_state: 1, next_pid: 7 });
        assert!(!blocked.runnable());
        let preempted = layout.decode(&raw(41, 32, &0x100i64.to_ne_bytes(), 0)).unwrap();
        assert!(preempted.runnable() && layout.decode(&raw(41, 32, &[0; 8], 0)).unwrap().runnable());
        assert_eq!(layout.decode(&[0; 40]), None, "too short");

        let old = SchedSwitchLayout::new(&EventFormat::parse("sched", OLD_FORMAT).unwrap()).unwrap();
        let s = old.decode(&raw(9, 36, &2i32.to_ne_bytes(), 3)).unwrap();
        assert_eq!((s.prev_pid, s.prev_state, s.next_pid), (9, 2, 3));
        assert!(!s.runnable());
        // Preempted on a kernel before 4.14: TASK_STATE_MAX (2048).
        assert!(old.decode(&raw(9, 36, &2048i32.to_ne_bytes(), 3)).unwrap().runnable());

        let no_state = SCHED_SWITCH_FORMAT.replace("prev_state", "other");
        let err = SchedSwitchLayout::new(&EventFormat::parse("sched", &no_state).unwrap()).unwrap_err();
        assert!(err.to_string().contains("no prev_state field"), "{err}");
    }

    #[test]
    fn tracing_data_round_trips_and_damage_is_an_error() {
        let source = TracingSource {
            page_size: 4096,
            header_page: "\tfield: u64 timestamp;\toffset:0;\tsize:8;\tsigned:0;\n".into(),
            header_event: "# compressed entry header\n".into(),
        };
        let format = EventFormat::parse("sched", SCHED_SWITCH_FORMAT).unwrap();
        let data = TracingData::new(&source, vec![format.clone()]);
        let back = TracingData::decode(data.bytes()).unwrap();
        assert_eq!(back.event(372), Some(&format));
        assert_eq!(back.event(1), None);
        for cut in 0..data.bytes().len() {
            let _ = TracingData::decode(&data.bytes()[..cut]);
        }
        for at in 0..data.bytes().len() {
            let mut damaged = data.bytes().to_vec();
            damaged[at] ^= 0xff;
            let _ = TracingData::decode(&damaged);
        }
        for bad in ["", "name: x\n", "ID: 3\n", "name: x\nID: y\n"] {
            assert!(EventFormat::parse("s", bad).is_err(), "{bad:?}");
        }
        let f = Field { name: "x".into(), offset: usize::MAX, size: 8, signed: true };
        assert_eq!(f.int(&[0; 16]), None);
        let f = Field { name: "x".into(), offset: 0, size: 3, signed: true };
        assert_eq!(f.int(&[0; 16]), None);
        let f = Field { name: "x".into(), offset: 0, size: 2, signed: true };
        assert_eq!(f.int(&[0xfe, 0xff]), Some(-2));
    }
}
