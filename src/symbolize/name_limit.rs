//! One length limit for every name that enters profcpu from outside: symbol names from perf maps, jitdumps, ELF
//! files, kallsyms, ReadyToRun images and captured `symbols/` tables, command (comm) names, module paths and event
//! names from a recording. Each parser passes its names through [`cap`] (or [`cap_string`]).
//!
//! Why: a name is repeated in every frame line of every sample that hits it, and gzip only finds repeats within
//! 32 KB, so one 1 MB name in a perf map made a 194 MB perf_script.out and a 194 MB prof.tar.gz out of 185 samples.
//! perf bounds names in its own ways (the kernel's KSYM_NAME_LEN of 512 for kallsyms, PATH_MAX of 4096 for paths,
//! 16 bytes for comm); the longest real names — C++ templates, .NET generic instantiations — stay below 4 KiB.

use std::borrow::Cow;
use std::sync::Arc;

/// The most bytes of a name profcpu keeps; a longer one is cut at a character boundary and ends in [`ELLIPSIS`].
pub const MAX_NAME_BYTES: usize = 4096;
/// Marks a name that was cut.
pub const ELLIPSIS: char = '…';

/// `name`, or its first bytes and an ellipsis when it is longer than [`MAX_NAME_BYTES`] (the result is at most
/// that long).
pub fn cap(name: &str) -> Cow<'_, str> {
    if name.len() <= MAX_NAME_BYTES {
        return Cow::Borrowed(name);
    }
    let mut cut = MAX_NAME_BYTES - ELLIPSIS.len_utf8();
    while !name.is_char_boundary(cut) {
        cut -= 1;
    }
    let mut capped = String::with_capacity(MAX_NAME_BYTES);
    capped.push_str(&name[..cut]);
    capped.push(ELLIPSIS);
    Cow::Owned(capped)
}

/// [`cap`] for a name that is already owned.
pub fn cap_string(name: String) -> String {
    match cap(&name) {
        Cow::Borrowed(_) => name,
        Cow::Owned(capped) => capped,
    }
}

/// [`cap`] into the shared string the tables hold.
pub fn cap_arc(name: &str) -> Arc<str> {
    Arc::from(cap(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_names_pass_and_long_ones_end_in_an_ellipsis() {
        assert!(matches!(cap("int64 [App] Ns.Type::Method(int32)[OptimizedTier1]"), Cow::Borrowed(_)));
        let exact = "x".repeat(MAX_NAME_BYTES);
        assert_eq!(cap(&exact), exact.as_str());
        let long = "y".repeat(1 << 20);
        let capped = cap(&long);
        assert_eq!(capped.len(), MAX_NAME_BYTES);
        assert!(capped.ends_with(ELLIPSIS) && capped.starts_with("yyyy"));
        assert_eq!(cap_string(long.clone()), capped);
        assert_eq!(&*cap_arc(&long), &*capped);
    }

    #[test]
    fn a_cut_never_splits_a_character() {
        for pad in 0..4 {
            let name = format!("{}{}", "a".repeat(pad), "名".repeat(MAX_NAME_BYTES));
            let capped = cap(&name);
            assert!(capped.len() <= MAX_NAME_BYTES && capped.ends_with(ELLIPSIS), "{pad}");
        }
    }
}
