//! The `symbols/` directory a [`Capture`](super::capture::Capture) writes next to `perf.data`, so that
//! `postprocess` can name every frame later, on a machine without the target or its files. Plain text, one record
//! per line, `#` starts a comment:
//!
//! | file              | contents                                                                          |
//! |-------------------|-----------------------------------------------------------------------------------|
//! | `processes.txt`   | `HOSTPID NSPID UID` per captured process                                          |
//! | `perf-HOSTPID.map`| byte copy of the process's perf map (`/tmp/perf-NSPID.map` in its namespace)      |
//! | `jit-HOSTPID.dump`| the jitdump the process mapped, each CODE_LOAD's code cut after its first 32 bytes (the prologue; `code_size` still gives the range) and debug/unwinding-info records left out (see `jitdump::trimmed`) |
//! | `jitframes-HOSTPID.txt` | per JIT method of the process that frame pointers do not unwind, read from its prologue while the process lived: `START SIZE sp CFA [RBPSLOT]` (no frame pointer: the caller's stack pointer is CFA bytes above the stack pointer; rbp saved RBPSLOT bytes below that, if the method pushed it) or `START SIZE bp CFA RBPSLOT` (rbp set up CFA bytes below the caller's stack pointer, not where it saved the caller's rbp); hex, see `unwind::JitFrame` |
//! | `dsos.txt`        | `SYMFILE MAJ:MIN:INO BUILDID PATH` per mapped file with samples; `SYMFILE` is `-` for a file without symbols (neither ELF nor ReadyToRun, unreadable), `BUILDID` is hex or `-`, `PATH` (as the target saw it) runs to the end of the line with `%`, CR and LF percent-escaped |
//! | `dso-N.syms`      | `OFFSET SIZE NAME` per symbol (hex; OFFSET is a *file offset*, so no load address is needed), names demangled; `OFFSET SIZE` alone is a function without a name (from `.eh_frame`), shown as one frame; when there are such, `# load OFFSET VADDR FILESZ` lines give the file's PT_LOAD segments, so a debug file fetched later (`postprocess -symbol-server`) can name them |
//! | `r2r-N.syms`      | the same for a ReadyToRun image: `.NET` method names as the runtime spells them, `OFFSET SIZE` alone for an unnamed code block; its frames are managed code |
//! | `kernel.syms`     | `START SIZE MODULE NAME` per kernel symbol; a line `# hidden` when kallsyms was hidden |
//! | `unwind.txt`      | `CFIFILE MAJ:MIN:INO BUILDID PATH` (as `dsos.txt`) per mapped file that stack copies were unwound through |
//! | `unwind-N.cfi`    | its unwind info: text header lines (`load`, `text`, `got`, `section NAME SVMA SIZE`), a `data` line, then the bytes of its `.eh_frame_hdr`, `.eh_frame` and/or `.debug_frame` (see `unwind::ModuleCfi::encode`); where the walks looked rows up through `.eh_frame_hdr`, only the entries they used are there (the rest of `.eh_frame` zeroed, the header's table cut to them: `unwind::ModuleCfi::keeping`) |
//!
//! Only the symbols that samples hit are saved: exact for this recording and tiny (a few KB instead of a
//! libcoreclr symbol table of megabytes).

use super::address_space::FileId;
use super::dso::{DsoSymbols, FileHit};
use super::elf::LoadSegment;
use super::kallsyms::KernelSymbols;
use super::name_limit;
use super::perf_map::{parse_hex, parse_line};
use super::ranges::{Range, RangeTable};
use super::symbol_table::{SymbolTable, SymbolTableBuilder};
use super::unwind::{JitFrames, ModuleCfi};
use crate::fs::{Dir, Limit};
use anyhow::{Context, Result};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

pub const PROCESSES_FILE: &str = "processes.txt";
pub const DSOS_FILE: &str = "dsos.txt";
pub const KERNEL_FILE: &str = "kernel.syms";

pub fn perf_map_name(pid: u32) -> String {
    format!("perf-{pid}.map")
}

pub fn jitdump_name(pid: u32) -> String {
    format!("jit-{pid}.dump")
}

pub fn jit_frames_name(pid: u32) -> String {
    format!("jitframes-{pid}.txt")
}

/// Prefix of the symbol file of a ReadyToRun image (its frames are managed code; ELF ones are `dso-N.syms`).
const MANAGED_PREFIX: &str = "r2r-";

fn escape_path(p: &str) -> String {
    p.replace('%', "%25").replace('\n', "%0A").replace('\r', "%0D")
}

fn unescape_path(p: &str) -> String {
    p.replace("%0A", "\n").replace("%0D", "\r").replace("%25", "%")
}

fn one_line(name: &str) -> String {
    name.replace(['\n', '\r'], " ")
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CapturedProcess {
    pub nspid: u32,
    pub uid: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapturedDso {
    pub symfile: Option<String>,
    pub maj: u32,
    pub min: u32,
    pub ino: u64,
    pub build_id: Option<Vec<u8>>,
    pub path: String,
}

/// A `symbols/` directory opened for reading (every file in it through the folder's descriptor, regular files
/// only, each within its cap).
#[derive(Debug)]
pub struct CapturedDir {
    pub dir: Dir,
    pub processes: HashMap<u32, CapturedProcess>,
    pub dsos: Vec<CapturedDso>,
}

/// A text file of the capture, `None` when it is missing.
fn read_text(dir: &Dir, name: &str) -> Result<Option<String>> {
    match dir.read_input(name, Limit::CAPTURE_TEXT) {
        Ok(bytes) => {
            String::from_utf8(bytes).map(Some).map_err(|_| anyhow::anyhow!("{} is not text", dir.shown(name).display()))
        }
        Err(e) if e.error.is_not_found() => Ok(None),
        Err(e) => Err(e.into()),
    }
}

fn content_lines(text: &str) -> impl Iterator<Item = &str> {
    text.lines().filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
}

impl CapturedDir {
    pub fn open(dir: &Dir) -> Result<CapturedDir> {
        let mut out = CapturedDir { dir: dir.clone(), processes: HashMap::new(), dsos: Vec::new() };
        if let Some(text) = read_text(dir, PROCESSES_FILE)? {
            for line in content_lines(&text) {
                let f: Vec<&str> = line.split_whitespace().collect();
                if let [pid, nspid, uid] = f[..] {
                    if let (Ok(pid), Ok(nspid), Ok(uid)) = (pid.parse(), nspid.parse(), uid.parse()) {
                        out.processes.insert(pid, CapturedProcess { nspid, uid });
                    }
                }
            }
        }
        if let Some(text) = read_text(dir, DSOS_FILE)? {
            out.dsos = content_lines(&text).filter_map(parse_dso_line).collect();
        }
        Ok(out)
    }

    /// The captured entry for a mapped file: same identity, else same path and build-id, else the only entry with
    /// that path.
    pub fn find_dso(&self, id: &FileId) -> Option<&CapturedDso> {
        find_entry(&self.dsos, id)
    }

    pub fn load_dso_table(&self, symfile: &str) -> Result<CapturedTable> {
        // Only names this directory's own index gave; never a path out of it.
        if symfile.contains('/') || symfile.starts_with('.') {
            anyhow::bail!("bad symbol file name {symfile:?} in {DSOS_FILE}");
        }
        let text = read_text(&self.dir, symfile)?.with_context(|| format!("{symfile} is missing"))?;
        let (mut names, mut functions) = (SymbolTableBuilder::new(false), Vec::new());
        let loads = text.lines().filter_map(|l| parse_load_line(l.strip_prefix(LOAD_PREFIX)?)).collect();
        for line in content_lines(&text) {
            if let Some((start, end, name)) = parse_line(line) {
                names.push(start, end, name);
            } else if let Some((start, end)) = parse_unnamed_line(line) {
                functions.push(Range { start, end, value: () });
            }
        }
        Ok(CapturedTable {
            names: names.build(),
            functions: RangeTable::from_unsorted(functions),
            managed: symfile.starts_with(MANAGED_PREFIX),
            loads,
        })
    }

    /// Whether the capture saved kernel symbols.
    pub fn has_kernel(&self) -> bool {
        self.dir.kind(KERNEL_FILE).is_some()
    }

    pub fn load_kernel(&self) -> Result<Option<KernelSymbols>> {
        let Some(text) = read_text(&self.dir, KERNEL_FILE)? else { return Ok(None) };
        let hidden = text.lines().any(|l| l.trim() == "# hidden");
        let entries = content_lines(&text).filter_map(|line| {
            let mut f = line.splitn(4, ' ');
            let start = parse_hex(f.next()?)?;
            let size = parse_hex(f.next()?)?;
            let module = f.next()?;
            let name = f.next()?.trim();
            Some((start, start.checked_add(size)?, name, module))
        });
        Ok(Some(KernelSymbols::from_entries(entries, hidden)))
    }

    pub fn perf_map(&self, pid: u32) -> String {
        perf_map_name(pid)
    }

    pub fn jitdump(&self, pid: u32) -> String {
        jitdump_name(pid)
    }

    /// Whether the capture saved a file of this name (a perf map or jitdump).
    pub fn has_jit_file(&self, name: &str) -> bool {
        self.dir.kind(name).is_some()
    }

    /// The saved frames of a process's JIT methods (`jitframes-HOSTPID.txt`), with the number of lines refused.
    pub fn jit_frames(&self, pid: u32) -> Result<Option<(JitFrames, usize)>> {
        Ok(read_text(&self.dir, &jit_frames_name(pid))?.map(|text| JitFrames::parse(&text)))
    }

    /// A saved perf map or jitdump, `None` when missing or unusable (a symlink, a FIFO, too large: then warned
    /// about once by the caller's log).
    pub fn read_jit_file(&self, name: &str) -> Option<Vec<u8>> {
        match self.dir.read_input(name, Limit::JIT_FILE) {
            Ok(bytes) => Some(bytes),
            Err(e) if e.error.is_not_found() => None,
            Err(e) => {
                tracing::warn!("{e}");
                None
            }
        }
    }
}

/// A saved symbol table: named ranges, unnamed functions, and whether the file is a ReadyToRun image.
#[derive(Debug)]
pub struct CapturedTable {
    pub names: SymbolTable,
    pub functions: RangeTable<()>,
    pub managed: bool,
    /// The ELF file's PT_LOAD segments, saved when it had unnamed functions.
    pub loads: Vec<LoadSegment>,
}

/// Starts a comment line of a symbol file that gives one PT_LOAD segment: `# load OFFSET VADDR FILESZ` (hex).
const LOAD_PREFIX: &str = "# load ";

fn parse_load_line(rest: &str) -> Option<LoadSegment> {
    let mut f = rest.split_ascii_whitespace().map(parse_hex);
    Some(LoadSegment { offset: f.next()??, vaddr: f.next()??, filesz: f.next()?? })
}

/// `OFFSET SIZE` with nothing after it: an unnamed function.
fn parse_unnamed_line(line: &str) -> Option<(u64, u64)> {
    let mut fields = line.split_ascii_whitespace();
    let (start, size) = (parse_hex(fields.next()?)?, parse_hex(fields.next()?)?);
    if fields.next().is_some() || size == 0 {
        return None;
    }
    Some((start, start.checked_add(size)?))
}

/// The entry of an index (`dsos.txt`, `unwind.txt`) for a mapped file: same identity, else same path and build-id,
/// else the only entry with that path.
pub fn find_entry<'a>(entries: &'a [CapturedDso], id: &FileId) -> Option<&'a CapturedDso> {
    let same_path = || entries.iter().filter(|d| d.path == *id.path);
    same_path()
        .find(|d| {
            d.maj == id.maj && d.min == id.min && d.ino == id.ino && d.build_id.as_deref() == id.build_id.as_deref()
        })
        .or_else(|| id.build_id.as_ref().and_then(|b| same_path().find(|d| d.build_id.as_deref() == Some(&b[..]))))
        .or_else(|| if same_path().count() == 1 { same_path().next() } else { None })
}

/// One index line: `FILE MAJ:MIN:INO BUILDID PATH`.
pub fn parse_dso_line(line: &str) -> Option<CapturedDso> {
    let mut f = line.splitn(4, ' ');
    let symfile = f.next()?;
    let (maj, rest) = f.next()?.split_once(':')?;
    let (min, ino) = rest.split_once(':')?;
    let build_id = f.next()?;
    let path = f.next()?;
    Some(CapturedDso {
        symfile: (symfile != "-").then(|| symfile.to_string()),
        maj: maj.parse().ok()?,
        min: min.parse().ok()?,
        ino: ino.parse().ok()?,
        build_id: if build_id == "-" { None } else { Some(unhex(build_id)?) },
        path: name_limit::cap_string(unescape_path(path)),
    })
}

/// One line of an index (`dsos.txt`, `unwind.txt`): the inverse of [`parse_dso_line`].
pub fn index_line(file: &str, id: &FileId) -> String {
    let build_id = id.build_id.as_deref().map_or("-".to_string(), hex);
    format!("{file} {}:{}:{} {build_id} {}\n", id.maj, id.min, id.ino, escape_path(&id.path))
}

/// Ranges of one file that were hit, by start (file offsets): `(end, name)`, no name for an unnamed function.
pub type HitRanges = BTreeMap<u64, (u64, Option<Arc<str>>)>;

/// What a run used of one mapped file.
#[derive(Debug, Default)]
pub struct HitFile {
    /// A ReadyToRun image (managed code), not an ELF file.
    pub managed: bool,
    pub ranges: HitRanges,
    /// An ELF file's PT_LOAD segments, when it has unnamed functions.
    pub loads: Vec<LoadSegment>,
}

/// What a symbolization run used, so a capture can save exactly that.
#[derive(Debug, Default)]
pub struct Usage {
    /// Per mapped file with samples: `None` when nothing names its code, else the ranges hit.
    pub dsos: HashMap<Arc<FileId>, Option<HitFile>>,
    pub kernel: BTreeMap<u64, (u64, Arc<str>, Arc<str>)>,
    pub kernel_hidden: bool,
    /// The unwind info of every file stack copies were unwound through.
    pub cfi: Vec<(Arc<FileId>, Arc<ModuleCfi>)>,
}

impl Usage {
    /// Notes what named an address of `file` (from `dso`).
    pub fn note_file(&mut self, file: &Arc<FileId>, dso: &DsoSymbols, hit: &FileHit) {
        let entry = self.dsos.entry(file.clone()).or_default();
        if matches!(dso, DsoSymbols::Opaque { .. }) {
            return;
        }
        let used =
            entry.get_or_insert_with(|| HitFile { managed: matches!(dso, DsoSymbols::R2r(_)), ..Default::default() });
        match hit {
            FileHit::Symbol { start, end, name } => {
                used.ranges.insert(*start, (*end, Some(name.clone())));
            }
            FileHit::Function { start, end } => {
                used.ranges.insert(*start, (*end, None));
                if let (true, DsoSymbols::Elf { functions, .. }) = (used.loads.is_empty(), dso) {
                    used.loads = functions.loads().to_vec();
                }
            }
            FileHit::Nothing => {}
        }
    }
}

/// Writes `processes.txt`.
pub fn write_processes(dir: &Dir, processes: &BTreeMap<u32, CapturedProcess>) -> Result<()> {
    let mut text = String::from("# profcpu captured processes: HOSTPID NSPID UID\n");
    for (pid, p) in processes {
        text.push_str(&format!("{pid} {} {}\n", p.nspid, p.uid));
    }
    dir.write_file(PROCESSES_FILE, text.as_bytes())
}

/// Writes `dsos.txt`, `dso-N.syms` and `kernel.syms` from a run's usage; returns the bytes written.
pub fn write_usage(dir: &Dir, usage: &Usage) -> Result<u64> {
    let mut written = 0u64;
    let mut index = String::from("# profcpu captured files: SYMFILE MAJ:MIN:INO BUILDID PATH\n");
    let mut dsos: Vec<_> = usage.dsos.iter().collect();
    dsos.sort_by(|a, b| a.0.path.cmp(&b.0.path).then(a.0.ino.cmp(&b.0.ino)));
    for (n, (id, used)) in dsos.into_iter().enumerate() {
        let symfile = match used {
            Some(used) => {
                let name = if used.managed { format!("{MANAGED_PREFIX}{n}.syms") } else { format!("dso-{n}.syms") };
                let mut text = format!("# {}: FILEOFFSET SIZE NAME\n", one_line(&id.path));
                for l in &used.loads {
                    text.push_str(&format!("{LOAD_PREFIX}{:x} {:x} {:x}\n", l.offset, l.vaddr, l.filesz));
                }
                for (start, (end, sym)) in &used.ranges {
                    match sym {
                        Some(sym) => text.push_str(&format!("{start:x} {:x} {}\n", end - start, one_line(sym))),
                        None => text.push_str(&format!("{start:x} {:x}\n", end - start)),
                    }
                }
                written += text.len() as u64;
                dir.write_file(&name, text.as_bytes())?;
                name
            }
            None => "-".to_string(),
        };
        index.push_str(&index_line(&symfile, id));
    }
    written += index.len() as u64;
    dir.write_file(DSOS_FILE, index.as_bytes())?;

    let mut text = String::from("# profcpu captured kernel symbols: START SIZE MODULE NAME\n");
    if usage.kernel_hidden {
        text.push_str("# hidden\n");
    }
    for (start, (end, name, module)) in &usage.kernel {
        text.push_str(&format!("{start:x} {:x} {module} {}\n", end - start, one_line(name)));
    }
    written += text.len() as u64;
    dir.write_file(KERNEL_FILE, text.as_bytes())?;
    written += super::unwind::write_saved(dir, &usage.cfi)?;
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::path::PathBuf;

    fn temp_dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("profcpu-captured-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn usage_round_trips_through_the_text_files() {
        let dir = temp_dir("roundtrip");
        let id = Arc::new(FileId {
            path: Arc::from("/odd path/%with\nnewline/libcoreclr.so"),
            maj: 8,
            min: 1,
            ino: 1234,
            build_id: Some(Arc::from(&[0xde, 0xad, 0xbe, 0xef][..])),
        });
        let opaque =
            Arc::new(FileId { path: Arc::from("/app/System.Runtime.dll"), maj: 8, min: 1, ino: 9, build_id: None });
        let r2r = Arc::new(FileId {
            path: Arc::from("/app/System.Private.CoreLib.dll"),
            maj: 8,
            min: 1,
            ino: 10,
            build_id: None,
        });
        let mut usage = Usage::default();
        let mut syms = BTreeMap::new();
        syms.insert(0x1000, (0x1080, Some(Arc::from("WKS::gc_heap::mark_object_simple"))));
        syms.insert(0x2000, (0x2010, Some(Arc::from("name with spaces"))));
        syms.insert(0x3000, (0x3100, None));
        let loads = vec![LoadSegment { offset: 0x1000, vaddr: 0x2000, filesz: 0x5000 }];
        usage.dsos.insert(id.clone(), Some(HitFile { managed: false, ranges: syms, loads: loads.clone() }));
        usage.dsos.insert(opaque.clone(), None);
        let mut methods = BTreeMap::new();
        methods.insert(0x5000, (0x5040, Some(Arc::from("int32 [System.Private.CoreLib] X::Y()[PreJIT]"))));
        methods.insert(0x6000, (0x6010, None));
        usage.dsos.insert(r2r.clone(), Some(HitFile { managed: true, ranges: methods, loads: Vec::new() }));
        usage.kernel.insert(
            0xffffffff81000000,
            (0xffffffff81000100, Arc::from("do_syscall_64"), Arc::from("[kernel.kallsyms]")),
        );
        usage.kernel.insert(0xffffffffc0000000, (0xffffffffc0000010, Arc::from("ext4_readdir"), Arc::from("[ext4]")));
        let out = Dir::open(&dir).unwrap();
        write_usage(&out, &usage).unwrap();
        let mut procs = BTreeMap::new();
        procs.insert(4242, CapturedProcess { nspid: 1, uid: 0 });
        write_processes(&out, &procs).unwrap();

        let c = CapturedDir::open(&out).unwrap();
        assert_eq!(c.processes[&4242], CapturedProcess { nspid: 1, uid: 0 });
        let entry = c.find_dso(&id).unwrap();
        assert_eq!(entry.path, *id.path);
        let table = c.load_dso_table(entry.symfile.as_ref().unwrap()).unwrap();
        assert!(!table.managed);
        let names = &table.names;
        assert_eq!(names.lookup(0x107f).unwrap().2.as_ref(), "WKS::gc_heap::mark_object_simple");
        assert_eq!(names.lookup(0x2000).unwrap().2.as_ref(), "name with spaces");
        assert!(names.lookup(0x1080).is_none());
        assert!(names.lookup(0x3000).is_none());
        assert_eq!(table.functions.lookup(0x30ff).map(|r| (r.start, r.end)), Some((0x3000, 0x3100)));
        assert_eq!(table.loads, loads);
        assert!(c.find_dso(&opaque).unwrap().symfile.is_none());
        let managed = c.find_dso(&r2r).unwrap().symfile.clone().unwrap();
        assert!(managed.starts_with("r2r-"), "{managed}");
        let table = c.load_dso_table(&managed).unwrap();
        assert!(table.managed);
        assert_eq!(table.names.lookup(0x5001).unwrap().2.as_ref(), "int32 [System.Private.CoreLib] X::Y()[PreJIT]");
        assert_eq!(table.functions.lookup(0x600f).map(|r| r.start), Some(0x6000));
        assert!(table.loads.is_empty());
        let k = c.load_kernel().unwrap().unwrap();
        assert!(!k.hidden);
        let ext4 = k.lookup(0xffffffffc0000005).unwrap();
        assert_eq!((ext4.name.as_ref(), ext4.module.as_ref()), ("ext4_readdir", "[ext4]"));
        // Written files are never overwritten.
        assert!(write_usage(&out, &usage).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn lookups_by_build_id_or_unique_path() {
        let c = CapturedDir {
            dir: Dir::open(&std::env::temp_dir()).unwrap(),
            processes: HashMap::new(),
            dsos: vec![
                CapturedDso { symfile: None, maj: 1, min: 2, ino: 3, build_id: Some(vec![1, 2]), path: "/a.so".into() },
                CapturedDso { symfile: None, maj: 1, min: 2, ino: 4, build_id: None, path: "/b.so".into() },
                CapturedDso { symfile: None, maj: 1, min: 2, ino: 5, build_id: None, path: "/b.so".into() },
            ],
        };
        let id = |path: &str, ino, build_id: Option<&[u8]>| FileId {
            path: Arc::from(path),
            maj: 9,
            min: 9,
            ino,
            build_id: build_id.map(Arc::from),
        };
        assert_eq!(c.find_dso(&id("/a.so", 77, Some(&[1, 2]))).unwrap().ino, 3);
        assert_eq!(c.find_dso(&id("/a.so", 77, None)).unwrap().ino, 3);
        assert!(c.find_dso(&id("/b.so", 77, None)).is_none(), "ambiguous path must not guess");
        assert!(c.find_dso(&id("/c.so", 3, None)).is_none());
    }

    #[test]
    fn hostile_index_entries_are_refused() {
        let dir = temp_dir("hostile");
        std::fs::write(dir.join(DSOS_FILE), "../../etc/passwd 1:2:3 - /x\nbad line\n- 1:2 - /y\n").unwrap();
        let c = CapturedDir::open(&Dir::open(&dir).unwrap()).unwrap();
        assert_eq!(c.dsos.len(), 1);
        assert!(c.load_dso_table(c.dsos[0].symfile.as_ref().unwrap()).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn random_and_mutated_index_lines_never_panic() {
        let mut rng = crate::random_inputs::Rng::new(0x5eed_0007);
        for input in rng.inputs(&[b"dso-0.syms 8:1:1234 deadbeef /odd%25path/lib.so", b"- 0:0:0 - x"], 3000) {
            let _ = parse_dso_line(&String::from_utf8_lossy(&input));
        }
    }
}
