//! Build-ids of the files samples fell into, for perf.data's BUILD_ID feature.
//!
//! A file is read as the sampled process sees it: through `/proc/<pid>/root` when that process lives in another mount
//! namespace (a container), opened with `openat2(RESOLVE_IN_ROOT)` so that no symlink inside the container leads out
//! of its root. (Full namespace-aware file resolution lives with the symbolizer; this is the small part recording
//! needs.)

use std::fs::File;
use std::io;
use std::os::fd::FromRawFd;

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

fn mount_namespace(pid: &str) -> Option<std::path::PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/ns/mnt")).ok()
}

/// Opens `path` in the mount namespace of `pid`: directly when that is ours (or the process is gone), else resolved
/// inside `/proc/<pid>/root` without leaving it.
fn open_as_seen_by(pid: u32, path: &str) -> io::Result<File> {
    let theirs = mount_namespace(&pid.to_string());
    if theirs.is_none() || theirs == mount_namespace("self") {
        return File::open(path);
    }
    let root = File::open(format!("/proc/{pid}/root"))?;
    open_in_root(&root, path)
}

fn open_in_root(root: &File, path: &str) -> io::Result<File> {
    use std::os::fd::AsRawFd;
    let c_path = std::ffi::CString::new(path.trim_start_matches('/')).map_err(io::Error::other)?;
    // SAFETY: open_how is plain data; zero is the default for every field.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (libc::O_RDONLY | libc::O_CLOEXEC) as u64;
    // Symlinks and ".." resolve as if the root were "/", and /proc magic links cannot jump elsewhere.
    how.resolve = libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS;
    // SAFETY: openat2 reads `how` (of the size given) and the NUL-terminated path.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            root.as_raw_fd(),
            c_path.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor the kernel just gave us.
    Ok(unsafe { File::from_raw_fd(fd as i32) })
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

    #[test]
    fn symlinks_do_not_leave_the_root() {
        let dir = std::env::temp_dir().join(format!("profcpu-buildid-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("etc")).unwrap();
        std::fs::write(dir.join("etc/inside"), b"in").unwrap();
        // An absolute symlink must resolve inside the root, not to the host's /etc.
        std::os::unix::fs::symlink("/etc/inside", dir.join("link")).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", dir.join("escape")).unwrap();
        let root = File::open(&dir).unwrap();
        let mut s = String::new();
        io::Read::read_to_string(&mut open_in_root(&root, "/link").unwrap(), &mut s).unwrap();
        assert_eq!(s, "in");
        assert!(open_in_root(&root, "/escape").is_err(), "a symlink led out of the root");
        assert!(open_in_root(&root, "/../../etc/hostname").is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
