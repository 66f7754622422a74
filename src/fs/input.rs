//! Reading a file someone else may have planted: regular files only, never through a symlink, never blocking, never
//! more than a cap that fits the kind of file.
//!
//! A file is opened `O_NOFOLLOW | O_NONBLOCK` (a symlink fails with ELOOP, a FIFO opens at once instead of waiting
//! for a writer), then `fstat` decides: anything but a regular file is refused, and so is one larger than its
//! [`Limit`]. Reading stops at the limit too, since a file can grow after the check (`/dev/zero` behind a link would
//! otherwise fill memory; a FIFO would hang).

use std::fmt;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{openat, OFlag};
use nix::sys::stat::{fstat, Mode, SFlag};

/// The most a kind of input file may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    pub bytes: u64,
}

impl Limit {
    /// `metadata.txt`: a dozen short lines.
    pub const METADATA: Limit = Limit { bytes: 1 << 20 };
    /// The text files of a capture's `symbols/` folder (`processes.txt`, `dsos.txt`, `*.syms`): only the symbols
    /// that samples hit are saved, a few MB even for `-all`.
    pub const CAPTURE_TEXT: Limit = Limit { bytes: 256 << 20 };
    /// A JIT's perf map or jitdump: a long-running app with code bytes in its jitdump reaches hundreds of MB.
    pub const JIT_FILE: Limit = Limit { bytes: 4 << 30 };
    /// No cap on the size (perf.data, read through a mapping, and archives, read as a stream): only the type is
    /// checked.
    pub const NONE: Limit = Limit { bytes: u64::MAX };
}

/// Why an input file was refused. The display is a phrase to follow the file's name.
#[derive(Debug)]
pub enum InputError {
    NotFound,
    Symlink,
    /// What it is instead ("a FIFO", "a directory", …).
    NotRegular(&'static str),
    TooLarge {
        size: u64,
        limit: u64,
    },
    Io(io::Error),
}

impl InputError {
    pub fn is_not_found(&self) -> bool {
        matches!(self, InputError::NotFound)
    }

    /// One line: the file, what is wrong, and what to do.
    pub fn explain(&self, path: &Path) -> String {
        let p = path.display();
        match self {
            InputError::NotFound => format!("{p} does not exist"),
            InputError::Symlink => format!(
                "{p} is a symlink, not a regular file: profcpu does not follow links in the folders it reads (one \
                 could lead to any file); copy the file there instead (cp --remove-destination \"$(readlink -f {p})\" \
                 {p})"
            ),
            InputError::NotRegular(kind) => {
                format!("{p} is {kind}, not a regular file: profcpu reads only regular files; replace it with one")
            }
            InputError::TooLarge { size, limit } => {
                format!(
                    "{p} is {size} bytes, more than the {limit} bytes such a file can be: it is not one profcpu wrote"
                )
            }
            InputError::Io(e) => format!("cannot read {p}: {e}"),
        }
    }
}

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InputError::NotFound => write!(f, "does not exist"),
            InputError::Symlink => write!(f, "is a symlink, not a regular file"),
            InputError::NotRegular(kind) => write!(f, "is {kind}, not a regular file"),
            InputError::TooLarge { size, limit } => write!(f, "is {size} bytes, over the limit of {limit}"),
            InputError::Io(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for InputError {}

impl From<Errno> for InputError {
    fn from(e: Errno) -> InputError {
        match e {
            Errno::ENOENT => InputError::NotFound,
            Errno::ELOOP => InputError::Symlink,
            e => InputError::Io(e.into()),
        }
    }
}

impl From<io::Error> for InputError {
    fn from(e: io::Error) -> InputError {
        match e.raw_os_error() {
            Some(code) => Errno::from_raw(code).into(),
            None => InputError::Io(e),
        }
    }
}

/// An input file with an error that names it, for `?` into `anyhow`.
#[derive(Debug)]
pub struct NamedInputError {
    pub path: PathBuf,
    pub error: InputError,
}

impl fmt::Display for NamedInputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.error.explain(&self.path))
    }
}

impl std::error::Error for NamedInputError {}

/// Opens `name` in directory `dir` for reading, under the rules of this module. Returns the file and its size.
pub fn open_at(dir: BorrowedFd, name: &Path, limit: Limit) -> Result<(File, u64), InputError> {
    let fd =
        openat(dir, name, OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC, Mode::empty())?;
    let file = File::from(fd);
    let size = check(&file, limit)?;
    Ok((file, size))
}

/// Opens the file at `path` (the path itself is followed: the user named it) without blocking, and checks it as
/// [`open_at`] does.
pub fn open_path(path: &Path, limit: Limit) -> Result<(File, u64), InputError> {
    let fd = nix::fcntl::open(path, OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC, Mode::empty())?;
    let file = File::from(fd);
    let size = check(&file, limit)?;
    Ok((file, size))
}

/// Checks an open file: a regular file within `limit`. Returns its size.
pub fn check(file: &File, limit: Limit) -> Result<u64, InputError> {
    let st = fstat(file)?;
    if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT != SFlag::S_IFREG {
        return Err(InputError::NotRegular(super::in_root::describe_kind(&st)));
    }
    let size = st.st_size.max(0) as u64;
    if size > limit.bytes {
        return Err(InputError::TooLarge { size, limit: limit.bytes });
    }
    Ok(size)
}

/// Reads all of an open file, at most `limit` bytes (more is an error: the file grew past its cap while read).
pub fn read_all(file: &mut File, size_hint: u64, limit: Limit) -> Result<Vec<u8>, InputError> {
    // From the start, by position: a handle may share its file offset with a duplicate another reader moved.
    // Into memory that is not zeroed first (the read overwrites it): zeroing a 10 MB symbol file first costs as
    // much as reading it.
    let mut bytes: Vec<u8> = Vec::with_capacity(size_hint.min(limit.bytes).min(64 << 20) as usize);
    loop {
        if bytes.len() == bytes.capacity() {
            // Full: a small read tells the end of the file from more to come before anything grows.
            let mut probe = [0u8; 256];
            let n = pread_retrying(file, &mut probe, bytes.len() as u64)?;
            if n == 0 {
                break;
            }
            if (bytes.len() + n) as u64 > limit.bytes {
                return Err(InputError::TooLarge { size: (bytes.len() + n) as u64, limit: limit.bytes });
            }
            bytes.extend_from_slice(&probe[..n]);
            bytes.reserve(bytes.len().max(64 << 10));
            continue;
        }
        let spare = bytes.spare_capacity_mut();
        crate::prefault::for_writing(spare);
        // SAFETY: pread writes at most `spare.len()` bytes to the spare capacity and says how many; only those
        // become part of the vector.
        let n = unsafe {
            libc::pread(file.as_raw_fd(), spare.as_mut_ptr().cast(), spare.len(), bytes.len() as libc::off_t)
        };
        match n {
            0 => break,
            n if n > 0 => unsafe { bytes.set_len(bytes.len() + n as usize) },
            _ => {
                let e = std::io::Error::last_os_error();
                if e.kind() != std::io::ErrorKind::Interrupted {
                    return Err(e.into());
                }
            }
        }
    }
    if bytes.len() as u64 > limit.bytes {
        return Err(InputError::TooLarge { size: bytes.len() as u64, limit: limit.bytes });
    }
    Ok(bytes)
}

/// A regular input file read a piece at a time by a reader that goes through it once, in order: only one piece is
/// in memory (a jitdump holds MBs of code that its reader reads a few bytes of), and nothing past `limit` is read.
pub struct Pieces<'f> {
    file: &'f File,
    limit: Limit,
    piece: Vec<u8>,
    /// Where in the file the piece starts, and how many of its bytes were read.
    at: u64,
    filled: usize,
}

impl<'f> Pieces<'f> {
    /// Bytes read at a time: well within a core's cache, well above a record's size.
    const PIECE: usize = 128 << 10;

    pub fn new(file: &'f File, limit: Limit) -> Pieces<'f> {
        Pieces { file, limit, piece: Vec::new(), at: 0, filled: 0 }
    }

    /// The file's bytes from offset `at` on: at least `want` of them, fewer only where the file ends.
    pub fn from(&mut self, at: u64, want: usize) -> Result<&[u8], InputError> {
        let end = at.saturating_add(want as u64);
        if at < self.at || end > self.at + self.filled as u64 {
            let len = want.max(Self::PIECE);
            (self.at, self.filled) = (at, 0);
            while self.filled < len {
                // Grown only as far as the file has bytes: what a record says its size is may be anything.
                if self.filled == self.piece.len() {
                    self.piece.resize(len.min((2 * self.piece.len()).max(Self::PIECE)), 0);
                }
                let room = self.piece.len().min(len);
                let n = pread_retrying(self.file, &mut self.piece[self.filled..room], at + self.filled as u64)?;
                if n == 0 {
                    break;
                }
                self.filled += n;
            }
            let size = at + self.filled as u64;
            if size > self.limit.bytes {
                return Err(InputError::TooLarge { size, limit: self.limit.bytes });
            }
        }
        Ok(&self.piece[(at - self.at) as usize..self.filled])
    }
}

/// One `pread`, retried when a signal interrupts it.
fn pread_retrying(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
    use std::os::unix::fs::FileExt;
    loop {
        match file.read_at(buf, offset) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            result => return result,
        }
    }
}

/// [`open_at`] then [`read_all`].
pub fn read_at(dir: BorrowedFd, name: &Path, limit: Limit) -> Result<Vec<u8>, InputError> {
    let (mut file, size) = open_at(dir, name, limit)?;
    read_all(&mut file, size, limit)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn only_regular_files_within_their_cap_are_read() {
        let dir = std::env::temp_dir().join(format!("profcpu-input-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("small"), b"hello").unwrap();
        std::os::unix::fs::symlink(dir.join("small"), dir.join("link")).unwrap();
        std::os::unix::fs::symlink("/dev/zero", dir.join("zero")).unwrap();
        nix::unistd::mkfifo(&dir.join("fifo"), Mode::from_bits_truncate(0o600)).unwrap();
        std::fs::create_dir(dir.join("sub")).unwrap();
        let d = File::open(&dir).unwrap();
        let read = |name: &str, limit| read_at(d.as_fd(), Path::new(name), limit);
        assert_eq!(read("small", Limit::METADATA).unwrap(), b"hello");
        assert!(matches!(read("small", Limit { bytes: 4 }), Err(InputError::TooLarge { size: 5, limit: 4 })));
        assert!(matches!(read("link", Limit::METADATA), Err(InputError::Symlink)));
        assert!(matches!(read("zero", Limit::METADATA), Err(InputError::Symlink)));
        assert!(matches!(read("fifo", Limit::METADATA), Err(InputError::NotRegular("a FIFO"))));
        assert!(matches!(read("sub", Limit::METADATA), Err(InputError::NotRegular("a directory"))));
        assert!(read("missing", Limit::METADATA).unwrap_err().is_not_found());
        assert!(matches!(open_path(Path::new("/dev/zero"), Limit::NONE), Err(InputError::NotRegular(_))));
        assert!(matches!(open_path(&dir.join("fifo"), Limit::NONE), Err(InputError::NotRegular("a FIFO"))));
        let line = InputError::Symlink.explain(&dir.join("perf.data"));
        assert!(line.contains("is a symlink, not a regular file") && line.contains("cp --remove-destination"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
