//! The perf.data file header, attr section and feature sections.
//!
//! Layout: `tools/perf/Documentation/perf.data-file-format.txt` and `tools/perf/util/header.{h,c}`.
//! profcpu writes `header | attrs | data | feature index | feature bodies | attr ids`; readers follow the offsets in
//! the header, except that the feature index must start right after the data section (perf looks for it at
//! `data.offset + data.size`). The data streams out before its size (and the ids) are known; the attrs come first
//! so that a copy cut short still says how to decode the records it has.

use super::attr::Attr;
use super::bytes::{ByteReader, Encoder};
use super::tracing::TracingData;
use anyhow::{bail, Context, Result};

pub const MAGIC: &[u8; 8] = b"PERFILE2";
pub const FILE_HEADER_SIZE: u64 = 104;
/// perf pads header strings to this many bytes (`NAME_ALIGN`).
const NAME_ALIGN: usize = 64;

pub const HEADER_TRACING_DATA: u32 = 1;
pub const HEADER_BUILD_ID: u32 = 2;
pub const HEADER_HOSTNAME: u32 = 3;
pub const HEADER_OSRELEASE: u32 = 4;
pub const HEADER_VERSION: u32 = 5;
pub const HEADER_ARCH: u32 = 6;
pub const HEADER_NRCPUS: u32 = 7;
pub const HEADER_CMDLINE: u32 = 11;
pub const HEADER_EVENT_DESC: u32 = 12;

/// perf sets this in a build-id record's misc when `size` holds the build-id length (else it is 20 bytes).
const PERF_RECORD_MISC_BUILD_ID_SIZE: u16 = 1 << 15;
/// `HOST_KERNEL_ID`: perf's pid for build-ids of the host machine.
pub const HOST_PID: i32 = -1;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Section {
    pub offset: u64,
    pub size: u64,
}

/// One event: its attr, the name perf shows, and the sample ids the kernel assigned to its file descriptors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventDesc {
    pub attr: Attr,
    pub name: String,
    pub ids: Vec<u64>,
}

impl EventDesc {
    /// The same event, its samples without user registers and stack copies ([`Attr::without_stack_copies`]).
    pub fn without_stack_copies(&self) -> EventDesc {
        EventDesc { attr: self.attr.without_stack_copies(), ..self.clone() }
    }
}

/// A DSO's build-id as stored in the BUILD_ID feature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildIdEntry {
    pub pid: i32,
    pub is_kernel: bool,
    pub build_id: Vec<u8>,
    pub filename: String,
}

/// The metadata feature sections profcpu writes and reads. Unknown features are skipped when reading.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Features {
    pub hostname: Option<String>,
    pub osrelease: Option<String>,
    pub version: Option<String>,
    pub arch: Option<String>,
    /// (available, online)
    pub nr_cpus: Option<(u32, u32)>,
    pub cmdline: Option<Vec<String>>,
    pub build_ids: Vec<BuildIdEntry>,
    /// The formats of the recorded tracepoints (`HEADER_TRACING_DATA`).
    pub tracing: Option<TracingData>,
    /// Each event's name and sample ids as the recorder described them (`HEADER_EVENT_DESC`, read only: the
    /// writer describes the events it is given).
    pub event_desc: Vec<(String, Vec<u64>)>,
}

fn put_string(e: &mut Encoder, s: &str) {
    let padded = (s.len() + 1).div_ceil(NAME_ALIGN) * NAME_ALIGN;
    e.u32(padded as u32);
    e.cstr_aligned(s, NAME_ALIGN);
}

fn get_string(c: &mut ByteReader) -> Result<String> {
    let len = c.u32()? as usize;
    let raw = c.bytes(len)?;
    let n = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
    Ok(String::from_utf8_lossy(&raw[..n]).into_owned())
}

impl Features {
    /// Encodes each present feature as `(feature bit, body)`, in ascending bit order.
    pub fn encode(&self, events: &[EventDesc]) -> Vec<(u32, Vec<u8>)> {
        let mut out = Vec::new();
        if let Some(tracing) = &self.tracing {
            out.push((HEADER_TRACING_DATA, tracing.bytes().to_vec()));
        }
        let string_feature = |bit: u32, v: &Option<String>, out: &mut Vec<(u32, Vec<u8>)>| {
            if let Some(s) = v {
                let mut e = Encoder::new();
                put_string(&mut e, s);
                out.push((bit, e.into_inner()));
            }
        };
        if !self.build_ids.is_empty() {
            let mut e = Encoder::new();
            for b in &self.build_ids {
                let name_len = (b.filename.len() + 1).div_ceil(NAME_ALIGN) * NAME_ALIGN;
                let size = 8 + 4 + 24 + name_len;
                e.u32(0); // header.type is unused for build-id records
                let cpumode = if b.is_kernel { 1 } else { 2 };
                e.u16(cpumode | PERF_RECORD_MISC_BUILD_ID_SIZE);
                e.u16(size as u16);
                e.u32(b.pid as u32);
                let n = b.build_id.len().min(20);
                let mut id = [0u8; 20];
                id[..n].copy_from_slice(&b.build_id[..n]);
                e.bytes(&id);
                e.u8(n as u8);
                e.bytes(&[0; 3]);
                e.cstr_aligned(&b.filename, NAME_ALIGN);
            }
            out.push((HEADER_BUILD_ID, e.into_inner()));
        }
        string_feature(HEADER_HOSTNAME, &self.hostname, &mut out);
        string_feature(HEADER_OSRELEASE, &self.osrelease, &mut out);
        string_feature(HEADER_VERSION, &self.version, &mut out);
        string_feature(HEADER_ARCH, &self.arch, &mut out);
        if let Some((avail, online)) = self.nr_cpus {
            let mut e = Encoder::new();
            e.u32(avail);
            e.u32(online);
            out.push((HEADER_NRCPUS, e.into_inner()));
        }
        if let Some(args) = &self.cmdline {
            let mut e = Encoder::new();
            e.u32(args.len() as u32);
            for a in args {
                put_string(&mut e, a);
            }
            out.push((HEADER_CMDLINE, e.into_inner()));
        }
        if !events.is_empty() {
            let mut e = Encoder::new();
            e.u32(events.len() as u32);
            e.u32(events[0].attr.bytes().len() as u32);
            for ev in events {
                e.bytes(ev.attr.bytes());
                e.u32(ev.ids.len() as u32);
                put_string(&mut e, &ev.name);
                for &id in &ev.ids {
                    e.u64(id);
                }
            }
            out.push((HEADER_EVENT_DESC, e.into_inner()));
        }
        out
    }

    /// Decodes one feature body into `self`; features profcpu does not use are ignored.
    pub fn decode(&mut self, bit: u32, body: &[u8]) -> Result<()> {
        let mut c = ByteReader::new(body);
        match bit {
            HEADER_BUILD_ID => {
                while c.remaining() >= 8 {
                    let start = c.position();
                    c.u32()?;
                    let misc = c.u16()?;
                    let size = c.u16()? as usize;
                    if size < 8 + 4 + 24 || start + size > body.len() {
                        bail!("build-id entry with invalid size {size}");
                    }
                    let pid = c.u32()? as i32;
                    let raw = c.bytes(20)?.to_vec();
                    let n = c.u8()? as usize;
                    c.skip(3)?;
                    let n = if misc & PERF_RECORD_MISC_BUILD_ID_SIZE != 0 && n <= 20 { n } else { 20 };
                    let name_bytes = &body[c.position()..start + size];
                    let end = name_bytes.iter().position(|&b| b == 0).unwrap_or(name_bytes.len());
                    self.build_ids.push(BuildIdEntry {
                        pid,
                        is_kernel: misc & 0x7 == 1,
                        build_id: raw[..n].to_vec(),
                        filename: String::from_utf8_lossy(&name_bytes[..end]).into_owned(),
                    });
                    c = ByteReader::new(body);
                    c.skip(start + size)?;
                }
            }
            HEADER_TRACING_DATA => self.tracing = Some(TracingData::decode(body)?),
            HEADER_EVENT_DESC => {
                let n = c.u32()? as usize;
                let attr_size = c.u32()? as usize;
                for _ in 0..n.min(4096) {
                    c.skip(attr_size)?;
                    let ids = c.u32()? as usize;
                    let name = get_string(&mut c)?;
                    if ids > c.remaining() / 8 {
                        bail!("event description with {ids} ids does not fit");
                    }
                    let ids = (0..ids).map(|_| c.u64()).collect::<Result<_>>()?;
                    self.event_desc.push((name, ids));
                }
            }
            HEADER_HOSTNAME => self.hostname = Some(get_string(&mut c)?),
            HEADER_OSRELEASE => self.osrelease = Some(get_string(&mut c)?),
            HEADER_VERSION => self.version = Some(get_string(&mut c)?),
            HEADER_ARCH => self.arch = Some(get_string(&mut c)?),
            HEADER_NRCPUS => self.nr_cpus = Some((c.u32()?, c.u32()?)),
            HEADER_CMDLINE => {
                let n = c.u32()? as usize;
                let args = (0..n.min(4096)).map(|_| get_string(&mut c)).collect::<Result<_>>()?;
                self.cmdline = Some(args);
            }
            _ => {}
        }
        Ok(())
    }
}

/// The fixed 104-byte file header.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileHeader {
    pub attr_size: u64,
    pub attrs: Section,
    pub data: Section,
    pub features: [u64; 4],
}

impl FileHeader {
    pub fn encode(&self) -> Vec<u8> {
        let mut e = Encoder::new();
        e.bytes(MAGIC);
        e.u64(FILE_HEADER_SIZE);
        e.u64(self.attr_size);
        for s in [self.attrs, self.data, Section::default()] {
            e.u64(s.offset);
            e.u64(s.size);
        }
        for w in self.features {
            e.u64(w);
        }
        e.into_inner()
    }

    pub fn decode(bytes: &[u8]) -> Result<Self> {
        if bytes.len() < 16 {
            bail!("file is too short to be a perf.data ({} bytes)", bytes.len());
        }
        if &bytes[..8] != MAGIC {
            if bytes[..8].iter().rev().eq(MAGIC.iter()) {
                bail!("perf.data was written on a machine of the other byte order; that is not supported");
            }
            if &bytes[..8] == b"PERFFILE" {
                bail!("perf.data is in perf's old version-1 format; re-record it with a newer perf");
            }
            bail!("not a perf.data file (no PERFILE2 magic)");
        }
        let mut c = ByteReader::new(bytes);
        c.skip(8)?;
        let size = c.u64().context("perf.data header is truncated")?;
        if size == 16 {
            bail!("perf.data is in pipe mode (perf record -o -); record to a file instead");
        }
        if size < FILE_HEADER_SIZE || bytes.len() < FILE_HEADER_SIZE as usize {
            bail!("perf.data header is truncated");
        }
        let attr_size = c.u64()?;
        let mut section = || -> Result<Section> { Ok(Section { offset: c.u64()?, size: c.u64()? }) };
        let attrs = section()?;
        let data = section()?;
        let _event_types = section()?;
        let mut features = [0u64; 4];
        for w in &mut features {
            *w = c.u64()?;
        }
        Ok(FileHeader { attr_size, attrs, data, features })
    }

    pub fn has_feature(&self, bit: u32) -> bool {
        bit < 256 && self.features[(bit / 64) as usize] & (1 << (bit % 64)) != 0
    }

    pub fn set_feature(&mut self, bit: u32) {
        self.features[(bit / 64) as usize] |= 1 << (bit % 64);
    }
}
