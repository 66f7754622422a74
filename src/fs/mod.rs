//! How profcpu opens, creates and reads files, in one place, for a root tool that must not trust what the profiled
//! process's user or container plants:
//!
//! - [`in_root`]: a file as a target process sees it, resolved inside its root by the kernel (`openat2` with
//!   `RESOLVE_IN_ROOT`), or by a walk of `O_PATH` descriptors where the kernel lacks that; never out of the root.
//! - [`dir`]: output (and run) folders opened once; everything beneath them is created, renamed, read and removed
//!   through their descriptors, never by a path someone else could change. The staging folder of the outputs.
//! - [`input`]: reading files others may have planted: regular files only, no symlinks, no blocking on FIFOs, a
//!   size cap per kind of file.
//!
//! `/proc` itself is read by [`crate::procfs`].

pub mod dir;
pub mod in_root;
pub mod input;

pub use dir::{Dir, Kind, Staging};
pub use in_root::{Last, Root};
pub use input::{InputError, Limit, NamedInputError};

/// Raises the soft open-files limit to the hard limit: a recording holds one descriptor per event and CPU, and naming
/// keeps each stripped library it looks up open (its call frame information is read as lookups reach it).
pub fn raise_open_files_limit() {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: plain getrlimit/setrlimit on a local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}
