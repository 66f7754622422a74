//! Where each file's unwind info comes from: a capture's saved copy (`symbols/unwind.txt` and `unwind-N.cfi`, see
//! [`symbols_dir`](super::super::symbols_dir)) first, else the live file; loaded once per file and kept.

use super::cfi::{CfiSection, ModuleCfi};
use crate::fs::{Dir, Limit};
use crate::symbolize::address_space::FileId;
use crate::symbolize::symbols_dir::{self, CapturedDso};
use anyhow::{Context, Result};
use std::collections::HashMap;
use std::fs::File;
use std::sync::Arc;

pub const UNWIND_INDEX: &str = "unwind.txt";

/// A captured unwind info file is at most this large (the sections it holds are capped at 64 MB each).
const MAX_SAVED_BYTES: u64 = 200 << 20;

/// The live file behind a mapping, for unwind info that no capture saved.
pub trait LiveFile {
    /// The file itself (`None` when live lookups are off or it cannot be opened).
    fn open(&mut self) -> Option<File>;
    /// The `.debug_frame` of its split debug file, if any.
    fn debug_frame(&mut self) -> Option<Vec<u8>>;
}

/// Each file's unwind info, loaded on first use.
#[derive(Default)]
pub struct CfiFiles {
    /// A capture's directory and its `unwind.txt` entries.
    captured: Option<(Dir, Vec<CapturedDso>)>,
    loaded: HashMap<Arc<FileId>, Option<Arc<ModuleCfi>>>,
    /// Files whose unwind info came from the live system, in loading order (what a capture saves).
    live_loaded: Vec<(Arc<FileId>, Arc<ModuleCfi>)>,
    pub warnings: Vec<String>,
}

impl CfiFiles {
    /// Reads the index of `captured_dir` if it has one (a capture made without stack copies has none).
    pub fn new(captured_dir: Option<&Dir>) -> CfiFiles {
        let mut files = CfiFiles::default();
        if let Some(dir) = captured_dir {
            match read_capped(dir, UNWIND_INDEX, 16 << 20) {
                Ok(Some(bytes)) => {
                    let text = String::from_utf8_lossy(&bytes);
                    let entries = text
                        .lines()
                        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
                        .filter_map(symbols_dir::parse_dso_line)
                        .collect();
                    files.captured = Some((dir.clone(), entries));
                }
                Ok(None) => {}
                Err(e) => files.warnings.push(format!("captured unwind info unreadable: {e:#}")),
            }
        }
        files
    }

    /// The unwind info of `file`: the captured copy, else the live file's, with the `.debug_frame` of its debug file
    /// when the file itself has no CFI; `None` when there is none (its frames are then unwound by frame pointer).
    pub fn get(&mut self, file: &Arc<FileId>, live: &mut impl LiveFile) -> Option<Arc<ModuleCfi>> {
        if let Some(known) = self.loaded.get(file) {
            return known.clone();
        }
        let loaded = match self.load_captured(file) {
            Some(found) => found,
            None => {
                let live = live.open().and_then(|f| self.read_live(&f, file, || live.debug_frame()));
                if let Some(cfi) = &live {
                    self.live_loaded.push((file.clone(), cfi.clone()));
                }
                live
            }
        };
        self.loaded.insert(file.clone(), loaded.clone());
        loaded
    }

    /// `Some(None)` when the capture lists the file without usable info, `None` when it does not list it.
    fn load_captured(&mut self, file: &FileId) -> Option<Option<Arc<ModuleCfi>>> {
        let (dir, entries) = self.captured.as_ref()?;
        let entry = symbols_dir::find_entry(entries, file)?;
        let name = entry.symfile.as_deref()?;
        // Only names this directory's own index gave; never a path out of it.
        if name.contains('/') || name.starts_with('.') {
            self.warnings.push(format!("bad unwind info file name {name:?} in {UNWIND_INDEX}"));
            return Some(None);
        }
        let decoded = read_capped(dir, name, MAX_SAVED_BYTES)
            .and_then(|bytes| ModuleCfi::decode(&bytes.with_context(|| format!("{name} is missing"))?));
        match decoded {
            Ok(cfi) => Some(self.keep_safe(cfi, file).map(Arc::new)),
            Err(e) => {
                self.warnings.push(format!("captured unwind info {name} of {} unreadable: {e:#}", file.path));
                Some(None)
            }
        }
    }

    fn read_live(
        &mut self,
        f: &File,
        file: &FileId,
        debug_frame: impl FnOnce() -> Option<Vec<u8>>,
    ) -> Option<Arc<ModuleCfi>> {
        match ModuleCfi::read(f, file.build_id.as_deref()) {
            Ok(Some(mut cfi)) => {
                if !cfi.has_cfi() {
                    // The address of .debug_frame plays no part in reading it.
                    cfi.debug_frame = debug_frame().map(|data| CfiSection { svma: 0, data: Arc::from(data) });
                }
                self.keep_safe(cfi, file).map(Arc::new)
            }
            Ok(None) => None,
            Err(e) => {
                self.warnings.push(format!("no unwind info from {}: {e:#}", file.path));
                None
            }
        }
    }

    /// `cfi` without what could make unwinding loop (a warning each), if any CFI is left.
    fn keep_safe(&mut self, cfi: ModuleCfi, file: &FileId) -> Option<ModuleCfi> {
        let (cfi, problems) = cfi.checked();
        for p in problems {
            self.warnings.push(format!("unwind info of {}: {p}", file.path));
        }
        cfi.has_cfi().then_some(cfi)
    }

    /// Files whose unwind info was read from the live system, for a capture to save.
    pub fn live_loaded(&self) -> Vec<(Arc<FileId>, Arc<ModuleCfi>)> {
        self.live_loaded.clone()
    }
}

/// Writes `unwind.txt` and one `unwind-N.cfi` per file (nothing when there is none); returns the bytes written.
pub fn write_saved(dir: &Dir, files: &[(Arc<FileId>, Arc<ModuleCfi>)]) -> Result<u64> {
    if files.is_empty() {
        return Ok(0);
    }
    let mut sorted: Vec<_> = files.iter().collect();
    sorted.sort_by(|a, b| a.0.path.cmp(&b.0.path).then(a.0.ino.cmp(&b.0.ino)));
    let mut index = String::from("# profcpu captured unwind info: CFIFILE MAJ:MIN:INO BUILDID PATH\n");
    let mut written = 0u64;
    for (n, (id, cfi)) in sorted.into_iter().enumerate() {
        let name = format!("unwind-{n}.cfi");
        let bytes = cfi.encode();
        written += bytes.len() as u64;
        dir.write_file(&name, &bytes)?;
        index.push_str(&symbols_dir::index_line(&name, id));
    }
    written += index.len() as u64;
    dir.write_file(UNWIND_INDEX, index.as_bytes())?;
    Ok(written)
}

/// A captured file's bytes (`None` when absent), refusing symlinks and files over `max` bytes.
fn read_capped(dir: &Dir, name: &str, max: u64) -> Result<Option<Vec<u8>>> {
    match dir.read_input(name, Limit { bytes: max }) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.error.is_not_found() => Ok(None),
        Err(e) => Err(e.into()),
    }
}
