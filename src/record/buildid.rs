//! Build-ids of the files samples fell into, for perf.data's BUILD_ID feature.
//!
//! A file is read as the sampled process sees it: through `/proc/<pid>/root` when that process lives in another mount
//! namespace (a container), resolved by [`crate::fs::in_root`] so that no symlink inside the container leads out of
//! its root.

use crate::fs::{Last, Root};
use std::fs::File;
use std::io;
use std::path::Path;

/// The GNU build-id of the ELF file at `path` as process `pid` sees it, if the file can be read and has one.
pub fn build_id_of(pid: u32, path: &str) -> Option<Vec<u8>> {
    let file = open_as_seen_by(pid, path).ok()?;
    elf_build_id(&file)
}

/// The running kernel's build-id, from the notes it exports in `/sys/kernel/notes`.
pub fn kernel_build_id() -> Option<Vec<u8>> {
    let notes = std::fs::read("/sys/kernel/notes").ok()?;
    gnu_build_id_note(&notes)
}

fn elf_build_id(file: &File) -> Option<Vec<u8>> {
    use object::Object;
    if !file.metadata().ok()?.is_file() {
        return None;
    }
    // SAFETY: read-only mapping; a file truncated under us could fault, the same contract perf has.
    let map = unsafe { memmap2::Mmap::map(file) }.ok()?;
    if !map.starts_with(b"\x7fELF") {
        return None;
    }
    let elf = object::File::parse(&*map).ok()?;
    elf.build_id().ok()?.map(<[u8]>::to_vec)
}

/// Walks a sequence of ELF notes (`namesz, descsz, type, name, desc`, 4-byte aligned) for `NT_GNU_BUILD_ID`.
fn gnu_build_id_note(mut notes: &[u8]) -> Option<Vec<u8>> {
    const NT_GNU_BUILD_ID: u32 = 3;
    let word = |b: &[u8], i: usize| Some(u32::from_ne_bytes(b.get(i * 4..i * 4 + 4)?.try_into().ok()?) as usize);
    while notes.len() >= 12 {
        let (namesz, descsz, kind) = (word(notes, 0)?, word(notes, 1)?, word(notes, 2)? as u32);
        let name_end = 12 + namesz.div_ceil(4) * 4;
        let desc_end = name_end + descsz.div_ceil(4) * 4;
        let name = notes.get(12..12 + namesz)?;
        if kind == NT_GNU_BUILD_ID && name.starts_with(b"GNU") {
            return Some(notes.get(name_end..name_end + descsz)?.to_vec());
        }
        notes = notes.get(desc_end..)?;
    }
    None
}

/// Opens `path` as process `pid` sees it: directly when it shares our mount namespace (or is gone), else resolved
/// inside its root without leaving it (see [`crate::fs::in_root`]).
fn open_as_seen_by(pid: u32, path: &str) -> io::Result<File> {
    let root = match crate::procfs::Process::open(pid) {
        Ok(process) if !process.shares_our_mounts() => process.root()?,
        _ => Root::host()?,
    };
    root.open_file(Path::new(path), Last::Follow)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_build_id_of_this_test_binary_and_the_kernel() {
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let id = build_id_of(std::process::id(), exe.to_str().unwrap()).expect("rustc links with a build-id");
        assert!(id.len() == 20 || id.len() == 16 || id.len() == 8, "{id:?}");
        assert!(build_id_of(std::process::id(), "/nonexistent").is_none());
        if std::path::Path::new("/sys/kernel/notes").exists() {
            assert_eq!(kernel_build_id().map(|k| k.len()), Some(20));
        }
    }
}
