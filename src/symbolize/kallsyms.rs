//! Kernel symbols from `/proc/kallsyms` (`ADDRESS TYPE NAME [MODULE]` per line). Only code symbols are kept; a
//! symbol ends where the next one starts. Under `kernel.kptr_restrict` (or without privilege) every address reads
//! as zero: the table is then "hidden" and kernel frames can only be shown as `[kernel]`.

use super::perf_map::parse_hex;
use super::ranges::{Range, RangeTable};
use std::sync::Arc;

/// Size given to the last symbol, which has no successor to end it (perf uses a page as well).
const LAST_SYMBOL_SIZE: u64 = 4096;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelSymbol {
    pub name: Arc<str>,
    /// `[kernel.kallsyms]` for the kernel image, `[module]` for module code, as perf prints them.
    pub module: Arc<str>,
}

#[derive(Debug, Default)]
pub struct KernelSymbols {
    pub table: RangeTable<KernelSymbol>,
    /// True when the file listed symbols but every address was zero.
    pub hidden: bool,
}

pub const KERNEL_MODULE: &str = "[kernel.kallsyms]";

impl KernelSymbols {
    pub fn parse(text: &str) -> KernelSymbols {
        let kernel: Arc<str> = Arc::from(KERNEL_MODULE);
        let mut modules: std::collections::HashMap<&str, Arc<str>> = Default::default();
        let mut listed = 0usize;
        let mut any_nonzero = false;
        let mut entries: Vec<(u64, KernelSymbol)> = Vec::new();
        for line in text.lines() {
            let mut fields = line.split_whitespace();
            let (Some(addr), Some(kind), Some(name)) = (fields.next(), fields.next(), fields.next()) else {
                continue;
            };
            let Some(addr) = parse_hex(addr) else { continue };
            listed += 1;
            any_nonzero |= addr != 0;
            // Text symbols only (t/T, weak w/W): data symbols would swallow code addresses between them.
            if !matches!(kind, "t" | "T" | "w" | "W") || addr == 0 {
                continue;
            }
            let module = match fields.next() {
                Some(m) if m.starts_with('[') && m.ends_with(']') => {
                    modules.entry(m).or_insert_with(|| super::name_limit::cap_arc(m)).clone()
                }
                _ => kernel.clone(),
            };
            entries.push((addr, KernelSymbol { name: super::name_limit::cap_arc(name), module }));
        }
        let hidden = listed > 0 && !any_nonzero;
        // Aliases share a start address (`_stext`/`_text`): keep the first listed.
        entries.sort_by_key(|(a, _)| *a);
        entries.dedup_by_key(|(a, _)| *a);
        let mut ranges = Vec::with_capacity(entries.len());
        for i in 0..entries.len() {
            let start = entries[i].0;
            let end = entries.get(i + 1).map_or(start.saturating_add(LAST_SYMBOL_SIZE), |next| next.0);
            ranges.push(Range { start, end, value: entries[i].1.clone() });
        }
        KernelSymbols { table: RangeTable::from_unsorted(ranges), hidden }
    }

    pub fn read_live() -> std::io::Result<KernelSymbols> {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut crate::procfs::kallsyms()?, &mut text)?;
        Ok(Self::parse(&text))
    }

    /// The copy of kallsyms that `perf record` saved in perf's build-id cache for the kernel with this build-id
    /// (`$PERF_BUILDID_DIR`, else `~/.debug`: `[kernel.kallsyms]/<build-id>/kallsyms`), as `perf script` uses it.
    /// Reading a file is many times cheaper than `/proc/kallsyms`, which the kernel formats line by line on every
    /// read. Only a regular file of the current user or root is believed.
    pub fn from_perf_cache(build_id: &[u8]) -> Option<KernelSymbols> {
        use std::io::Read;
        use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
        const MAX_LEN: u64 = 256 << 20;
        let base = match std::env::var_os("PERF_BUILDID_DIR") {
            Some(dir) if !dir.is_empty() => std::path::PathBuf::from(dir),
            _ => std::path::PathBuf::from(std::env::var_os("HOME")?).join(".debug"),
        };
        let hex: String = build_id.iter().map(|b| format!("{b:02x}")).collect();
        let path = base.join(KERNEL_MODULE).join(hex).join("kallsyms");
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(&path)
            .ok()?;
        let meta = file.metadata().ok()?;
        let owner_ok = meta.uid() == 0 || meta.uid() == nix::unistd::geteuid().as_raw();
        if !meta.is_file() || !owner_ok || meta.len() > MAX_LEN {
            return None;
        }
        let mut text = String::new();
        file.take(MAX_LEN).read_to_string(&mut text).ok()?;
        let symbols = Self::parse(&text);
        (!symbols.hidden && !symbols.table.is_empty()).then_some(symbols)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
ffffffff81000000 T _stext
ffffffff81000000 T _text
ffffffff81001000 t do_one_initcall
ffffffff81002000 D some_data
ffffffff81003000 T __x64_sys_read
ffffffffc0100000 t ext4_readdir\t[ext4]
ffffffffc0100200 t ext4_release_dir\t[ext4]
";

    #[test]
    fn lookups_name_kernel_and_module_code() {
        let k = KernelSymbols::parse(SAMPLE);
        assert!(!k.hidden);
        let at = |a: u64| k.table.lookup(a).map(|r| (r.value.name.to_string(), r.value.module.to_string()));
        assert_eq!(at(0xffffffff81000010).unwrap().0, "_stext");
        assert_eq!(at(0xffffffff81001fff).unwrap().0, "do_one_initcall");
        // The data symbol is not code: the preceding function extends over it up to the next function.
        assert_eq!(at(0xffffffff81002500).unwrap().0, "do_one_initcall");
        assert_eq!(at(0xffffffff81003001).unwrap(), ("__x64_sys_read".into(), "[kernel.kallsyms]".into()));
        assert_eq!(at(0xffffffffc0100010).unwrap(), ("ext4_readdir".into(), "[ext4]".into()));
        assert_eq!(at(0xffffffffc0100200 + 4095).unwrap().0, "ext4_release_dir");
        assert!(at(0xffffffffc0100200 + 4096).is_none());
        assert!(at(0x1000).is_none());
    }

    #[test]
    fn all_zero_addresses_mean_hidden() {
        let k = KernelSymbols::parse("0000000000000000 T _stext\n0000000000000000 t foo [mod]\n");
        assert!(k.hidden);
        assert!(k.table.is_empty());
        assert!(!KernelSymbols::parse("").hidden);
    }

    #[test]
    fn garbage_lines_are_ignored() {
        let k = KernelSymbols::parse("zzz T x\nffffffff81000000\n\nffffffff81000000 T ok\n\u{0} \u{1}\n");
        assert_eq!(k.table.len(), 1);
        assert!(!k.hidden);
    }

    #[test]
    fn live_kallsyms_parses() {
        let k = KernelSymbols::read_live().unwrap();
        assert!(k.hidden || k.table.len() > 1000, "only {} kernel symbols", k.table.len());
    }

    #[test]
    fn random_and_mutated_input_never_panics() {
        let mut rng = crate::symbolize::random_inputs::Rng::new(0x5eed_0003);
        for input in rng.inputs(&[SAMPLE.as_bytes()], 3000) {
            let k = KernelSymbols::parse(&String::from_utf8_lossy(&input));
            for r in k.table.iter() {
                assert!(r.start < r.end);
            }
        }
    }
}
