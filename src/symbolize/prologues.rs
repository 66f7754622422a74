//! Reading the prologues of a live process's JIT methods, for the walk to step out of the frames frame pointers do
//! not unwind (see [`JitFrame`]). The methods are those of its perf map, as the capture mirrors it: each time the
//! copy grows, the methods of its new lines have the first [`PROLOGUE_BYTES`] of their code read from the process
//! (`process_vm_readv`) and classified, and those with a rule are appended to `symbols/jitframes-HOSTPID.txt` — while
//! the process lives, since its code goes with it. At most [`MAX_METHODS`] methods are read per process.

use super::perf_map::{self, parse_line};
use super::symbols_dir::jit_frames_name;
use super::unwind::{jit_frame_line, method_frame, PROLOGUE_BYTES};
use crate::fs::Dir;
use anyhow::{Context, Result};
use std::collections::HashSet;
use std::fs::File;
use std::os::unix::fs::FileExt;

/// The most methods whose code is read in one process (a large app JIT-compiles tens of thousands).
pub const MAX_METHODS: usize = 1 << 20;

/// Perf map text read per step (complete lines; the rest waits for the next).
const CHUNK: usize = 1 << 20;

/// One process's prologue reading: where its perf map copy has been read to, what has been saved.
pub struct Prologues {
    pid: u32,
    out: File,
    written: u64,
    /// Bytes of the perf map read (up to the end of its last complete line).
    map_read: u64,
    /// Method starts whose code was read.
    read: HashSet<u64>,
    /// Methods with a rule saved.
    pub saved: usize,
    /// The process's memory cannot be read (gone, or not permitted): nothing more is tried.
    unreadable: bool,
}

impl Prologues {
    /// Starts the saved table of host process `pid` in the capture folder.
    pub fn new(dir: &Dir, pid: u32) -> Result<Prologues> {
        let name = jit_frames_name(pid);
        let out = dir.create_file(&name).with_context(|| format!("cannot create {}", dir.shown(&name).display()))?;
        let header = b"# profcpu JIT frames: START SIZE sp CFA [RBPSLOT] | START SIZE bp CFA RBPSLOT\n";
        out.write_all_at(header, 0)?;
        Ok(Prologues {
            pid,
            out,
            written: header.len() as u64,
            map_read: 0,
            read: HashSet::new(),
            saved: 0,
            unreadable: false,
        })
    }

    /// Reads the methods of the lines `map` (the perf map, `len` bytes now) gained since the last call.
    pub fn follow(&mut self, map: &File, len: u64) -> Result<()> {
        if len < self.map_read {
            // Rewritten from the start: methods already read are not read again.
            self.map_read = 0;
        }
        let mut buf = vec![0u8; CHUNK];
        while self.map_read < len && !self.unreadable && self.read.len() < MAX_METHODS {
            let want = ((len - self.map_read) as usize).min(CHUNK);
            let n = map.read_at(&mut buf[..want], self.map_read)?;
            let Some(end) = buf[..n].iter().rposition(perf_map::is_line_end).map(|i| i + 1) else {
                // No complete line: a line longer than a chunk is skipped whole, else it is still being written.
                if n == CHUNK {
                    self.map_read += n as u64;
                    continue;
                }
                break;
            };
            let mut lines = String::new();
            for line in perf_map::lines(&buf[..end]) {
                if let Some((start, end, name)) = parse_line(&line) {
                    if self.read.len() >= MAX_METHODS || !self.read.insert(start) {
                        continue;
                    }
                    let mut code = [0u8; PROLOGUE_BYTES];
                    let Some(got) = read_memory(self.pid, start, &mut code) else {
                        self.unreadable = true;
                        break;
                    };
                    if let Some(frame) = method_frame(name, &code[..got]) {
                        lines.push_str(&jit_frame_line(start, end - start, frame));
                        self.saved += 1;
                    }
                }
            }
            self.out.write_all_at(lines.as_bytes(), self.written)?;
            self.written += lines.len() as u64;
            self.map_read += end as u64;
        }
        Ok(())
    }
}

/// Reads `buf.len()` bytes of process `pid` at `addr`: the bytes read (fewer at the end of a mapping, 0 where
/// nothing is mapped), `None` when the process cannot be read at all (gone, or not permitted).
fn read_memory(pid: u32, addr: u64, buf: &mut [u8]) -> Option<usize> {
    let local = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    let remote = libc::iovec { iov_base: addr as *mut libc::c_void, iov_len: buf.len() };
    // SAFETY: `local` describes `buf`, writable for its length; the remote range is checked by the kernel.
    let n = unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
    if n >= 0 {
        return Some(n as usize);
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::EFAULT) => Some(0),
        _ => {
            tracing::debug!("cannot read the JIT code of PID {pid}: {}", std::io::Error::last_os_error());
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::symbolize::unwind::{JitFrame, JitFrames};

    /// The rules a capture saved for process `pid` (what [`Prologues`] wrote), for tests.
    fn saved(dir: &Dir, pid: u32) -> JitFrames {
        let bytes = dir.read_input(jit_frames_name(pid), crate::fs::Limit::CAPTURE_TEXT).unwrap();
        let (frames, bad) = JitFrames::parse(&String::from_utf8(bytes).unwrap());
        assert_eq!(bad, 0);
        frames
    }

    /// Code of this process at a known address: a perf map naming it, read back through `process_vm_readv`.
    #[test]
    fn methods_of_new_perf_map_lines_are_read_and_saved() {
        let scratch = std::env::temp_dir().join(format!("profcpu-prologues-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&scratch);
        std::fs::create_dir_all(&scratch).unwrap();
        let dir = Dir::open(&scratch).unwrap();
        let pid = std::process::id();
        let mut p = Prologues::new(&dir, pid).unwrap();
        // Nap at tier 1; a framed method; a method with a body longer than what is read.
        let nap: &[u8] = &[0x50, 0xbf, 0x14, 0, 0, 0, 0xff, 0x15, 0, 0, 0, 0, 0x90, 0x48, 0x83, 0xc4, 8, 0xc3];
        let framed: &[u8] = &[0x55, 0x48, 0x89, 0xe5, 0x48, 0x83, 0xec, 0x10, 0x33, 0xc0, 0xcc, 0xcc, 0xcc, 0xcc];
        let code: Vec<u8> = [nap, framed, nap, &[0xcc; 64]].concat();
        let at = code.as_ptr() as u64;
        let map_path = scratch.join("perf.map");
        let line = |start: u64, size: usize, name: &str| format!("{start:x} {size:x} {name}\n");
        let first = line(at, nap.len(), "void [App] App::Nap()[OptimizedTier1]");
        std::fs::write(&map_path, &first).unwrap();
        let map = File::open(&map_path).unwrap();
        p.follow(&map, first.len() as u64).unwrap();
        // A line still being written is read once complete; OSR code gets no rule; code read before is not read again.
        let more = [
            line(at + nap.len() as u64, framed.len(), "void [App] App::Framed()[Tier0]"),
            line(at + (nap.len() + framed.len()) as u64, nap.len(), "void [App] App::Nap()[OSR]"),
            line(at, nap.len(), "void [App] App::Nap()[OptimizedTier1]"),
        ]
        .concat();
        let partial = format!("{first}{}", &more[..10]);
        std::fs::write(&map_path, &partial).unwrap();
        p.follow(&map, partial.len() as u64).unwrap();
        let all = format!("{first}{more}");
        std::fs::write(&map_path, &all).unwrap();
        p.follow(&map, all.len() as u64).unwrap();
        assert_eq!(p.saved, 1);
        let frames = saved(&dir, pid);
        assert_eq!(frames.len(), 1);
        assert_eq!(frames.lookup(at + 7), Some(JitFrame::StackPointer { cfa: 16, rbp_slot: None }));
        assert_eq!(frames.lookup(at + nap.len() as u64 + 4), None);
        std::hint::black_box(&code);
        std::fs::remove_dir_all(&scratch).unwrap();
    }
}
