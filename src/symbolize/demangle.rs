//! Symbol names as a reader expects them: C++ (Itanium ABI, `_Z…`) and Rust (`_R…`, legacy `_ZN…17h<hash>E`) names
//! demangled the way `perf report` shows them by default — without parameter lists and return types, so overloads
//! of one function merge in a flame graph the same way they do in perf.
//!
//! Demangling is lazy (a [`super::symbol_table::SymbolTable`] demangles a name when a lookup first finds it): a DSO
//! like libcoreclr has tens of thousands of symbols and a profile hits a few hundred.

/// Names longer than this are left mangled: no real symbol is that long and the demangler's work grows with it.
pub const MAX_MANGLED_LEN: usize = 8192;
/// How deep the C++ demangler may nest (cpp_demangle's own default). Its parser backtracks, and with more depth a
/// crafted name of 190 bytes took 3 s to be refused (found by the demangle fuzz target): a planted library could
/// stall naming with one such symbol per sampled function. Real names nest far less: every C++ symbol of .NET 8's
/// libcoreclr and Debian's libstdc++ demangles the same at 64 as at 256.
const RECURSION_LIMIT: u32 = 96;

pub fn demangle(raw: &str) -> Option<String> {
    if raw.len() > MAX_MANGLED_LEN {
        return None;
    }
    if raw.starts_with("_R") || (raw.starts_with("_ZN") && looks_like_rust_legacy(raw)) {
        if let Ok(d) = rustc_demangle::try_demangle(raw) {
            return Some(format!("{d:#}"));
        }
    }
    if raw.starts_with("_Z") {
        let parse = cpp_demangle::ParseOptions::default().recursion_limit(RECURSION_LIMIT);
        let sym = cpp_demangle::Symbol::new_with_options(raw, &parse).ok()?;
        let opts = cpp_demangle::DemangleOptions::new().no_params().no_return_type().recursion_limit(RECURSION_LIMIT);
        return sym.demangle_with_options(&opts).ok().filter(|s| !s.is_empty());
    }
    None
}

/// Legacy Rust symbols are valid C++ manglings too; the trailing `17h<16 hex digits>E` hash tells them apart.
fn looks_like_rust_legacy(raw: &str) -> bool {
    let core = raw.split('.').next().unwrap_or(raw);
    let Some(body) = core.strip_suffix('E').map(str::as_bytes) else { return false };
    body.len() > 20
        && body[body.len() - 19..].starts_with(b"17h")
        && body[body.len() - 16..].iter().all(|b| b.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpp_names_lose_parameters_like_perf_shows_them() {
        assert_eq!(
            demangle("_ZN18MethodDescCallSite16CallTargetWorkerEPKmPmi").unwrap(),
            "MethodDescCallSite::CallTargetWorker"
        );
        assert_eq!(demangle("_ZN3WKS7gc_heap18mark_object_simpleEPPh").unwrap(), "WKS::gc_heap::mark_object_simple");
        assert_eq!(
            demangle("_ZNSt6vectorIiSaIiEE9push_backERKi").unwrap(),
            "std::vector<int, std::allocator<int> >::push_back"
        );
    }

    #[test]
    fn rust_names_lose_the_hash() {
        assert_eq!(demangle("_ZN4core3fmt5write17h0123456789abcdefE").unwrap(), "core::fmt::write");
        assert_eq!(demangle("_RNvCs1234_7mycrate3foo").unwrap(), "mycrate::foo");
    }

    /// The demangle fuzz target's slow input (backtracking through 128+ levels of nesting): refused at once.
    #[test]
    fn deeply_nested_garbage_is_refused_without_backtracking_for_seconds() {
        let name =
            "_ZZ1orSiIaSiIaIrSiiaSiIaSiIaSiIaSiIaIrSiIaSiIorSiIaIrSiiaSiIaSiaSiIaSiIaIrSiIaSiIorSiIaIrSiiaSiIaSiIaIrS\
                    iIaSiIaIrSiIaSaIrSiIaSYQQ@QQQQQQQQQ__iNIhiIaIrSiIaSiIaIrSiIaSaIrSiIaSYQQ@QQQQQQQQQ__iNIh";
        let started = std::time::Instant::now();
        assert_eq!(demangle(name), None);
        // 20 µs now; 3 s with a limit of 256 (a bound far from both, so that load cannot flake it).
        assert!(started.elapsed() < std::time::Duration::from_secs(1), "{:?}", started.elapsed());
    }

    #[test]
    fn plain_and_broken_names_stay_as_they_are() {
        assert_eq!(demangle("main"), None);
        assert_eq!(demangle("_Z"), None);
        assert_eq!(demangle("_ZN"), None);
        // Hostile nesting must neither panic nor overflow the stack (the test process would die).
        for hostile in [format!("_Z{}", "N1a".repeat(2000)), format!("_Z1fI{}E", "PFv".repeat(3000)), "_Z".repeat(5000)]
        {
            let _ = demangle(&hostile);
        }
    }

    #[test]
    fn random_and_mutated_names_never_panic() {
        let seeds: [&[u8]; 3] = [
            b"_ZN3WKS7gc_heap18mark_object_simpleEPPh",
            b"_ZN4core3fmt5write17h0123456789abcdefE",
            b"_RNvCs1234_7mycrate3foo",
        ];
        let mut rng = crate::random_inputs::Rng::new(0x5eed_0005);
        for input in rng.inputs(&seeds, 5000) {
            let _ = demangle(&String::from_utf8_lossy(&input));
        }
    }
}
