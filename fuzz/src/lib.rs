//! What the fuzz targets share: an input as a file (production reads files, not slices), a scratch folder per
//! fuzzing process for targets that read or write folders, and inputs that stand for several files.

use profcpu::fs::Dir;
use std::fs::File;
use std::io::Write;
use std::os::fd::FromRawFd;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// `bytes` as an anonymous in-memory file (`memfd_create`), positioned at its start: what production opens is a
/// file, and some readers map it or read it by position.
pub fn memfd(bytes: &[u8]) -> File {
    // SAFETY: a NUL-terminated name and valid flags; the result is checked before it is owned.
    let fd = unsafe { libc::memfd_create(c"profcpu-fuzz".as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
    // SAFETY: a fresh descriptor that nothing else owns.
    let mut file = unsafe { File::from_raw_fd(fd) };
    file.write_all(bytes).expect("writing the memfd");
    std::io::Seek::rewind(&mut file).expect("rewinding the memfd");
    file
}

/// This process's scratch folder, `profcpu-fuzz-<pid>` in /dev/shm (memory: per-input folders stay cheap) or the
/// temporary folder; folders of fuzzing processes that are gone are removed when it is first made.
pub fn scratch() -> &'static Dir {
    static SCRATCH: OnceLock<Dir> = OnceLock::new();
    SCRATCH.get_or_init(|| {
        let base = match Path::new("/dev/shm") {
            shm if shm.is_dir() => shm.to_path_buf(),
            _ => std::env::temp_dir(),
        };
        for entry in std::fs::read_dir(&base).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(pid) = name.strip_prefix("profcpu-fuzz-").and_then(|p| p.parse::<u32>().ok()) {
                if !Path::new(&format!("/proc/{pid}")).exists() {
                    let _ = std::fs::remove_dir_all(entry.path());
                }
            }
        }
        let path = base.join(format!("profcpu-fuzz-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        Dir::create_all(&path).expect("creating the scratch folder")
    })
}

/// A fresh empty folder in [`scratch`] for one input; removed with everything in it when dropped.
pub struct Workdir {
    pub dir: Dir,
    name: String,
}

impl Workdir {
    pub fn new() -> Workdir {
        let name = "input".to_string();
        let root = scratch();
        let _ = root.remove_tree(&name);
        let dir = root.create_dir(&name).expect("creating a folder for the input");
        Workdir { dir, name }
    }

    pub fn path(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }
}

impl Default for Workdir {
    fn default() -> Self {
        Workdir::new()
    }
}

impl Drop for Workdir {
    fn drop(&mut self) {
        let _ = scratch().remove_tree(&self.name);
    }
}

/// Starts each part after the first in an input that stands for several files: `PART_MARK NAME\n CONTENT`.
/// `fuzz/make-seeds.sh` writes inputs this way; the mark is also in each target's dictionary.
pub const PART_MARK: &[u8] = b"\0\0profcpu-fuzz-part ";

/// The parts of an input: the bytes before the first mark (named ""), then each marked part by its name.
pub fn parts(data: &[u8]) -> Vec<(String, &[u8])> {
    let mut out = Vec::new();
    let mut rest = data;
    let mut name = String::new();
    loop {
        let next = rest.windows(PART_MARK.len()).position(|w| w == PART_MARK);
        let (content, after) = match next {
            Some(at) => (&rest[..at], Some(&rest[at + PART_MARK.len()..])),
            None => (rest, None),
        };
        out.push((std::mem::take(&mut name), content));
        let Some(after) = after else { return out };
        let end = after.iter().position(|&b| b == b'\n').unwrap_or(after.len());
        name = String::from_utf8_lossy(&after[..end]).into_owned();
        rest = after.get(end + 1..).unwrap_or(&[]);
    }
}

/// A part's name as one plain file name (no folders, nothing hidden, not empty), or `None`.
pub fn plain_name(name: &str) -> Option<&str> {
    let ok = !name.is_empty() && name.len() <= 200 && !name.contains(['/', '\0']) && !name.starts_with('.');
    ok.then_some(name)
}

/// Reads little-endian integers off the front of an input (zero once it runs out), for targets whose first bytes
/// choose how the rest is used.
pub struct Take<'a>(pub &'a [u8]);

impl<'a> Take<'a> {
    pub fn bytes(&mut self, n: usize) -> &'a [u8] {
        let n = n.min(self.0.len());
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        head
    }

    pub fn u64(&mut self) -> u64 {
        let mut word = [0u8; 8];
        let head = self.bytes(8);
        word[..head.len()].copy_from_slice(head);
        u64::from_le_bytes(word)
    }

    pub fn u32(&mut self) -> u32 {
        self.u64_of(4) as u32
    }

    pub fn u16(&mut self) -> u16 {
        self.u64_of(2) as u16
    }

    pub fn u8(&mut self) -> u8 {
        self.u64_of(1) as u8
    }

    fn u64_of(&mut self, n: usize) -> u64 {
        let mut word = [0u8; 8];
        let head = self.bytes(n);
        word[..head.len()].copy_from_slice(head);
        u64::from_le_bytes(word)
    }

    pub fn rest(self) -> &'a [u8] {
        self.0
    }
}
