//! Every named piece of code of a live process, named as profcpu names frames: JIT-compiled methods (from the
//! process's perf map, else its jitdump), ReadyToRun methods of the .NET images it maps, and the function symbols of
//! the ELF files it maps (with split debug files). `probe` matches method patterns against it; `offsets` lists its
//! file-backed part.
//!
//! File-backed code comes with its *file offset*, what a uprobe (or `perf probe -x FILE 0xOFFSET`) takes: the offset
//! of the method's first instruction in the file. For an ELF file that is the symbol's address through its
//! PT_LOADs; for a ReadyToRun image it is the method's RVA through the PE section table — CoreCLR maps each section
//! from the file at `base + align_down(VirtualAddress)`, so the same file offset is what executes (see
//! [`r2r::rva_of`](super::r2r::rva_of) for the evidence). JIT code lives in anonymous or W^X double-mapped memory,
//! which uprobes cannot attach to: it comes with its address only.
//!
//! [`JitFeed`] reads what the runtime appends to its perf map (or jitdump) afterwards: new methods and new tiers of
//! known ones.

use super::address_space::{classify, FileId, MapKind, Mapping, Processes};
use super::dso::DsoSymbols;
use super::jit_files;
use super::jitdump::JitDump;
use super::options::SymbolizeOptions;
use super::perf_map;
use super::proc_info::ProcessInfo;
use super::r2r::CodePart;
use super::r2r_symbols::R2rSymbols;
use super::sources::Sources;
use crate::fs::{input, Limit};
use crate::procfs::{MapsEntry, Process};
use anyhow::{Context, Result};
use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One JIT-compiled code body: a method at one tier (or a stub).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JitCode {
    pub start: u64,
    pub size: u64,
    /// When it was reported, relative to the other codes of the same source (perf map line, jitdump timestamp):
    /// a method's newest code has the largest.
    pub order: u64,
    /// As the runtime names it, tier tag included: `int64 [App] Books::Reconcile(int32)[QuickJitted]`.
    pub name: Arc<str>,
}

/// The kind of a file-backed image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageFormat {
    Elf,
    /// A .NET ReadyToRun image (precompiled code in a PE file).
    ReadyToRun,
}

/// A method (or function) in a file, at its file offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileMethod {
    pub name: Arc<str>,
    /// File offset of its first instruction.
    pub offset: u64,
    pub size: u64,
    /// For a .NET method: whether it is virtual; `None` when unknown or not .NET.
    pub is_virtual: Option<bool>,
}

/// A file the process maps executable code from.
#[derive(Debug, Clone)]
pub struct Image {
    /// The path as the target sees it.
    pub path: Arc<str>,
    pub format: ImageFormat,
    /// Its executable mappings in the process (none for a program that does not run yet).
    pub mappings: Vec<MapsEntry>,
    /// A path that reaches the very file from here, whatever mount namespace the target lives in: for a running
    /// process `/proc/<pid>/map_files/<range>` (a link to the mapped inode, also when it was deleted or replaced).
    pub reachable: PathBuf,
    /// Sorted by offset.
    pub methods: Vec<FileMethod>,
}

impl Image {
    /// The address the code at file offset `offset` runs at (through the executable mapping holding it).
    pub fn address_of(&self, offset: u64) -> Option<u64> {
        self.mappings
            .iter()
            .find(|m| offset >= m.offset && offset - m.offset < m.end - m.start)
            .map(|m| m.start + (offset - m.offset))
    }
}

/// Named code of one live process.
pub struct CodeIndex {
    pub pid: u32,
    /// The JIT code there is now (later perf map lines win where code was replaced), sorted by start.
    pub jit: Vec<JitCode>,
    /// Where the JIT names came from (`/tmp/perf-1234.map`), if anywhere.
    pub jit_source: Option<String>,
    pub images: Vec<Image>,
    /// What the process's .NET assemblies declare, by assembly name (read when first asked).
    declared: HashMap<String, Option<HashMap<String, bool>>>,
}

/// Which images to read.
pub enum ImageFilter<'a> {
    All,
    /// Only files whose path ends with, or whose file name contains, this text.
    Named(&'a str),
}

impl CodeIndex {
    /// Reads the named code of process `pid` (a host PID) as it is now.
    pub fn read(pid: u32, opts: &SymbolizeOptions, images: ImageFilter) -> Result<CodeIndex> {
        let process = Process::open(pid).with_context(|| format!("no process with PID {pid}"))?;
        let maps = process.maps().with_context(|| format!("cannot read /proc/{pid}/maps"))?;
        let info = ProcessInfo::read(pid).with_context(|| format!("cannot read /proc/{pid}/status"))?;
        let (jit, jit_source) = match read_jit_code(&info, &maps, opts.force_maps) {
            Ok(found) => found.map_or((Vec::new(), None), |(codes, shown)| (codes, Some(shown))),
            Err(e) => {
                // Files that cannot be read or named are said once per run (the same as the symbolizer's).
                super::sources::log_once(&e);
                (Vec::new(), None)
            }
        };
        let images = read_images(pid, &maps, opts, &images)?;
        Ok(CodeIndex { pid, jit, jit_source, images, declared: HashMap::new() })
    }

    /// Whether the .NET method named `name` (without a tier tag) is virtual, from its assembly's metadata: the
    /// ReadyToRun image's, else the assembly file the process maps (an IL-only assembly, whose methods are JIT
    /// compiled). `None` when it is not .NET or its assembly cannot be read.
    pub fn dotnet_is_virtual(&mut self, name: &str) -> Option<bool> {
        let known = self
            .images
            .iter()
            .flat_map(|i| &i.methods)
            .find(|m| m.is_virtual.is_some() && m.name.strip_suffix("[PreJIT]").unwrap_or(&m.name) == name);
        if let Some(m) = known {
            return m.is_virtual;
        }
        let assembly = name.split_once(" [").or_else(|| name.strip_prefix('[').map(|n| ("", n)))?.1;
        let assembly = assembly.split_once("] ")?.0.to_string();
        if !self.declared.contains_key(&assembly) {
            let declared = self.read_declared(&assembly);
            self.declared.insert(assembly.clone(), declared);
        }
        self.declared.get(&assembly)?.as_ref()?.get(name).copied()
    }

    /// The methods assembly `assembly` declares, read from the file of that name the process maps.
    fn read_declared(&self, assembly: &str) -> Option<HashMap<String, bool>> {
        let maps = Process::open(self.pid).ok()?.maps().ok()?;
        let path = maps.iter().map(|m| m.path.as_str()).find(|p| {
            let file = p.rsplit('/').next().unwrap_or(p);
            let stem = file.strip_suffix(".dll").or_else(|| file.strip_suffix(".exe"));
            // An assembly is named after its file, with or without the extension (as the compiler was told).
            stem.is_some_and(|s| s.eq_ignore_ascii_case(assembly)) || file.eq_ignore_ascii_case(assembly)
        })?;
        let root = ProcessInfo::read(self.pid)?.root().ok()?;
        let mut file = root.open_file(Path::new(path), crate::fs::Last::Follow).ok()?;
        let size = input::check(&file, super::r2r_symbols::MAX_IMAGE_LEN).ok()?;
        let bytes = input::read_all(&mut file, size, super::r2r_symbols::MAX_IMAGE_LEN).ok()?;
        match super::r2r::declared_methods(&bytes) {
            Ok(methods) => Some(methods.into_iter().collect()),
            Err(e) => {
                tracing::debug!("{path}: no .NET metadata ({e:#})");
                None
            }
        }
    }

    /// The named code of a program that does not run yet (what `-- COMMAND` starts): the ELF symbols of the
    /// executable file `path`, at file offsets, without addresses.
    pub fn of_program(path: &Path, opts: &SymbolizeOptions) -> Result<CodeIndex> {
        let file = crate::fs::Root::host()
            .and_then(|root| root.open_file(path, crate::fs::Last::Follow))
            .with_context(|| format!("cannot open {}", path.display()))?;
        let roots = super::debug_search::SearchRoots {
            target_root: None,
            host: true,
            extra: opts.debug_roots.clone(),
            servers: None,
        };
        let shown = path.to_string_lossy();
        let mut images = Vec::new();
        if let DsoSymbols::Elf { table, .. } = super::dso::load(file, &shown, &roots, None) {
            let methods = table
                .iter()
                .map(|(start, end, name)| FileMethod { name, offset: start, size: end - start, is_virtual: None })
                .collect();
            images.push(Image {
                path: Arc::from(&*shown),
                format: ImageFormat::Elf,
                mappings: Vec::new(),
                reachable: path.to_path_buf(),
                methods,
            });
        }
        Ok(CodeIndex { pid: 0, jit: Vec::new(), jit_source: None, images, declared: HashMap::new() })
    }
}

/// The current JIT code from the perf map, else the jitdump; `Ok(None)` when the process writes neither.
fn read_jit_code(
    info: &ProcessInfo,
    maps: &[MapsEntry],
    force: bool,
) -> Result<Option<(Vec<JitCode>, String)>, String> {
    let perf_map = format!("/tmp/perf-{}.map", info.nspid);
    if let Some(bytes) = read_trusted(info, Path::new(&perf_map), force)? {
        return Ok(Some((current_perf_map_code(&bytes), perf_map)));
    }
    let dump = maps.iter().map(|m| m.path.as_str()).find(|p| super::address_space::is_jitdump_path(p));
    let Some(dump) = dump else { return Ok(None) };
    let Some(bytes) = read_trusted(info, Path::new(dump), force)? else { return Ok(None) };
    let codes = JitDump::parse(&bytes)
        .codes()
        .iter()
        .filter(|c| c.until == u64::MAX)
        .map(|c| JitCode { start: c.start, size: c.end - c.start, order: c.from, name: c.name.clone() })
        .collect();
    Ok(Some((codes, dump.to_string())))
}

/// A perf map or jitdump of the process, read through its root with the checks of [`jit_files::open_trusted`];
/// `Ok(None)` when it does not exist.
fn read_trusted(info: &ProcessInfo, path: &Path, force: bool) -> Result<Option<Vec<u8>>, String> {
    let root = info.root().map_err(|e| format!("cannot open /proc/{}/root: {e}", info.pid))?;
    match jit_files::open_trusted(&root, path, &[info.uid], force, info.started_at) {
        Ok((mut file, size)) => input::read_all(&mut file, size, Limit::JIT_FILE)
            .map(Some)
            .map_err(|e| format!("cannot read {} of PID {}: {e}", path.display(), info.pid)),
        Err(e) => match jit_files::refusal(path, info.pid, &e) {
            Some(why) => Err(why),
            None => Ok(None),
        },
    }
}

/// The code a perf map says is there now: each line's range, unless a later line took over any of it (memory
/// reused for other code). Stubs (`stub<N> …`) are left out: they are not methods.
fn current_perf_map_code(bytes: &[u8]) -> Vec<JitCode> {
    let mut lines: Vec<(u64, u64, Arc<str>)> = Vec::new();
    for line in perf_map::lines(bytes) {
        if let Some((start, end, name)) = perf_map::parse_line(line.trim_end_matches('\r')) {
            lines.push((start, end, super::name_limit::cap_arc(name)));
        }
    }
    // Walk from the last line back: a line survives when no later (already kept) line overlaps it.
    let mut kept: BTreeMap<u64, (u64, u64, Arc<str>)> = BTreeMap::new();
    for (order, (start, end, name)) in lines.into_iter().enumerate().rev() {
        let overlaps_before = kept.range(..start).next_back().is_some_and(|(_, (e, _, _))| *e > start);
        let overlaps_after = kept.range(start..end).next().is_some();
        if !overlaps_before && !overlaps_after {
            kept.insert(start, (end, order as u64, name));
        }
    }
    kept.into_iter()
        .filter(|(_, (_, _, name))| !name.starts_with("stub<"))
        .map(|(start, (end, order, name))| JitCode { start, size: end - start, order, name })
        .collect()
}

/// Where a perf map line ends: at a newline, or at a NUL (.NET 8.0.4 sometimes writes one in place of the newline,
/// gluing two lines together).
/// Every file with executable mappings, with its methods.
fn read_images(pid: u32, maps: &[MapsEntry], opts: &SymbolizeOptions, filter: &ImageFilter) -> Result<Vec<Image>> {
    let mut by_file: BTreeMap<(u32, u32, u64, String), Vec<MapsEntry>> = BTreeMap::new();
    for m in maps {
        if !m.is_executable() || classify(&m.path) != MapKind::File {
            continue;
        }
        let wanted = match filter {
            ImageFilter::All => true,
            ImageFilter::Named(name) => {
                let file_name = m.path.rsplit('/').next().unwrap_or(&m.path);
                m.path.ends_with(name) || file_name.contains(name)
            }
        };
        if wanted {
            by_file.entry((m.maj, m.min, m.inode, m.path.clone())).or_default().push(m.clone());
        }
    }
    let mut sources = Sources::new(&SymbolizeOptions { live: true, captured_dir: None, ..opts.clone() })?;
    let processes = Processes::default();
    let mut images = Vec::new();
    for ((maj, min, ino, path), mappings) in by_file {
        let first = &mappings[0];
        let file = Arc::new(FileId { path: Arc::from(path.as_str()), maj, min, ino, build_id: None });
        let mapping = Mapping {
            start: first.start,
            end: first.end,
            pgoff: first.offset,
            kind: MapKind::File,
            file: file.clone(),
        };
        let symbols = sources.dso(pid, &mapping, &processes);
        let (format, methods) = match &*symbols {
            DsoSymbols::Elf { table, .. } => {
                let methods = table
                    .iter()
                    .map(|(start, end, name)| FileMethod { name, offset: start, size: end - start, is_virtual: None })
                    .collect();
                (ImageFormat::Elf, methods)
            }
            DsoSymbols::R2r(R2rSymbols::Image { image, .. }) => {
                let methods = image
                    .methods()
                    .filter(|m| m.part == CodePart::Body)
                    .filter_map(|m| {
                        Some(FileMethod {
                            offset: image.file_offset_of_rva(m.method_start)?,
                            size: m.method_len.max(m.len) as u64,
                            is_virtual: m.is_virtual,
                            name: Arc::from(m.name),
                        })
                    })
                    .collect();
                (ImageFormat::ReadyToRun, methods)
            }
            DsoSymbols::R2r(R2rSymbols::Captured { .. }) => continue,
            DsoSymbols::Opaque { reason } => {
                if !matches!(filter, ImageFilter::All) || !reason.contains("not an ELF") {
                    tracing::debug!("{path}: no named code ({reason})");
                }
                continue;
            }
        };
        let mut methods: Vec<FileMethod> = methods;
        methods.sort_by_key(|m| m.offset);
        let reachable = PathBuf::from(format!("/proc/{pid}/map_files/{:x}-{:x}", first.start, first.end));
        images.push(Image { path: file.path.clone(), format, mappings, reachable, methods });
    }
    Ok(images)
}

/// Bytes of a perf map or jitdump read per [`JitFeed::read_new`].
const FEED_CHUNK: u64 = 16 << 20;

/// New JIT code as the runtime reports it: what was appended to its perf map (or jitdump) since the last call. The
/// file is opened once (as [`CodeIndex`] reads it: through the target's root, trusted files only) and read on from
/// where the last complete line (record) ended.
pub struct JitFeed {
    file: File,
    at: u64,
    jitdump: bool,
}

impl JitFeed {
    /// Follows the perf map of process `pid` (host PID), else its jitdump, from its current end; `None` when it has
    /// neither.
    pub fn open(pid: u32, force: bool) -> Result<Option<JitFeed>, String> {
        let info = ProcessInfo::read(pid).ok_or_else(|| format!("PID {pid} exited"))?;
        let root = info.root().map_err(|e| format!("cannot open /proc/{pid}/root: {e}"))?;
        let perf_map = format!("/tmp/perf-{}.map", info.nspid);
        let maps = Process::open(pid).and_then(|p| p.maps()).unwrap_or_default();
        let dump = maps.iter().map(|m| m.path.clone()).find(|p| super::address_space::is_jitdump_path(p));
        for (path, jitdump) in [(Some(perf_map), false), (dump, true)] {
            let Some(path) = path else { continue };
            match jit_files::open_trusted(&root, Path::new(&path), &[info.uid], force, info.started_at) {
                Ok((file, size)) => {
                    let at = if jitdump { jitdump_end_of_records(&file, size) } else { size };
                    return Ok(Some(JitFeed { file, at, jitdump }));
                }
                Err(e) => {
                    if let Some(why) = jit_files::refusal(Path::new(&path), pid, &e) {
                        return Err(why);
                    }
                }
            }
        }
        Ok(None)
    }

    /// The open file (to watch it for writes).
    pub fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        std::os::fd::AsFd::as_fd(&self.file)
    }

    /// Code reported since the last call (complete lines or records only).
    pub fn read_new(&mut self) -> Vec<JitCode> {
        let len = self.file.metadata().map(|m| m.len()).unwrap_or(0);
        if len < self.at {
            // Rewritten from the start (perf maps switched off and on again).
            self.at = 0;
        }
        // The rest comes with the next call: a runtime writes a few hundred bytes per method.
        let want = (len - self.at).min(FEED_CHUNK) as usize;
        if want == 0 {
            return Vec::new();
        }
        let mut bytes = vec![0u8; want];
        let n = self.file.read_at(&mut bytes, self.at).unwrap_or(0);
        bytes.truncate(n);
        if self.jitdump {
            let (codes, used) = jitdump_loads(&bytes);
            self.at += used as u64;
            return codes;
        }
        let Some(end) = bytes.iter().rposition(perf_map::is_line_end) else { return Vec::new() };
        self.at += end as u64 + 1;
        let mut codes = Vec::new();
        for line in perf_map::lines(&bytes[..end]) {
            if let Some((start, end, name)) = perf_map::parse_line(line.trim_end_matches('\r')) {
                let order = u64::MAX;
                codes.push(JitCode { start, size: end - start, order, name: super::name_limit::cap_arc(name) });
            }
        }
        codes
    }
}

/// Where the complete records of a jitdump end (its header is skipped), from a file of `size` bytes.
fn jitdump_end_of_records(file: &File, size: u64) -> u64 {
    let mut header = [0u8; 12];
    if file.read_exact_at(&mut header, 0).is_err() {
        return 0;
    }
    let header_size = u32::from_ne_bytes(header[8..12].try_into().expect("4 bytes")) as u64;
    let mut at = header_size.max(40);
    let mut record = [0u8; 8];
    while at + 16 <= size && file.read_exact_at(&mut record, at).is_ok() {
        let len = u32::from_ne_bytes(record[4..8].try_into().expect("4 bytes")) as u64;
        if len < 16 || at + len > size {
            break;
        }
        at += len;
    }
    at
}

/// The CODE_LOAD records among complete jitdump records in `bytes` (which start at a record boundary), and how many
/// bytes those complete records take.
fn jitdump_loads(bytes: &[u8]) -> (Vec<JitCode>, usize) {
    let mut codes = Vec::new();
    let mut at = 0;
    while at + 16 <= bytes.len() {
        let id = u32::from_ne_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
        let len = u32::from_ne_bytes(bytes[at + 4..at + 8].try_into().expect("4 bytes")) as usize;
        if len < 16 || at + len > bytes.len() {
            break;
        }
        let body = &bytes[at + 16..at + len];
        // CODE_LOAD: pid u32, tid u32, vma u64, code_addr u64, code_size u64, code_index u64, name\0, code.
        if id == 0 && body.len() > 40 {
            let field = |o: usize| u64::from_ne_bytes(body[o..o + 8].try_into().expect("8 bytes"));
            let (start, size) = (field(16), field(24));
            let name = &body[40..];
            let name = String::from_utf8_lossy(&name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())]);
            let order = u64::from_ne_bytes(bytes[at + 8..at + 16].try_into().expect("8 bytes"));
            if size > 0 && !name.is_empty() {
                codes.push(JitCode { start, size, order, name: super::name_limit::cap_arc(name.trim()) });
            }
        }
        at += len;
    }
    (codes, at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn later_perf_map_lines_take_over_reused_memory_and_stubs_are_left_out() {
        let map = b"1000 100 A::F()[QuickJitted]\n2000 40 stub<1> AllocateTemporaryEntryPoints<PRECODE_FIXUP>\n\
                    3000 80 A::G()[QuickJitted]\n1000 20 A::H()[QuickJitted]\n4000 10 A::F()[OptimizedTier1]\n";
        let codes = current_perf_map_code(map);
        let names: Vec<(u64, &str)> = codes.iter().map(|c| (c.start, &*c.name)).collect();
        assert_eq!(
            names,
            [(0x1000, "A::H()[QuickJitted]"), (0x3000, "A::G()[QuickJitted]"), (0x4000, "A::F()[OptimizedTier1]")]
        );
    }

    #[test]
    fn a_nul_ends_a_perf_map_line() {
        let codes = current_perf_map_code(b"1000 10 A::F()[InstrumentedTier]\x002000 10 B::G()[QuickJitted]\n");
        let names: Vec<&str> = codes.iter().map(|c| &*c.name).collect();
        assert_eq!(names, ["A::F()[InstrumentedTier]", "B::G()[QuickJitted]"]);
    }

    #[test]
    fn jitdump_records_are_read_whole_only() {
        let mut w = super::super::jitdump::testing::JitDumpWriter::new(7, 0);
        w.load(10, 0x5000, 0x30, "M::A()[QuickJitted]").debug_info(11).load(12, 0x6000, 0x10, "M::B()[Tier1]");
        let body = &w.bytes[40..];
        let (codes, used) = jitdump_loads(body);
        assert_eq!(used, body.len());
        assert_eq!(codes.iter().map(|c| (c.start, c.size)).collect::<Vec<_>>(), [(0x5000, 0x30), (0x6000, 0x10)]);
        let (codes, used) = jitdump_loads(&body[..body.len() - 3]);
        assert_eq!((codes.len(), used), (1, body.len() - (0x10 + 16 + 40 + 14)));
    }
}
