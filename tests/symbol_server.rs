//! `symbolize::symbol_server` against HTTP servers run by the test on 127.0.0.1: debug files split off real
//! binaries with `objcopy --only-keep-debug` / `strip` (a C program compiled here, and .NET Core 3.1's
//! libcoreclr.so, which still has its symbols) served in the SSQP and debuginfod layouts; wrong build-ids, 404s,
//! oversized bodies, redirects and a server that never answers. Then through the `profcpu` binary: `collect
//! -symbol-server` on a stripped program, and the same bad servers costing one line each.

mod support;

use profcpu::symbolize::symbol_server::{SymbolServers, MAX_SIZE};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use support::dotnet::Dotnet;
use support::profcpu::{finish_collect, Collected};
use support::scratch::{run_dir, Scratch};
use support::symbol_server::{
    build_id_of, file_offset, function_names, function_starts, hex, publish, run, split, symbol_address, Serve, Server,
    Split,
};
use support::webapi::{parse_perf_script, OUTPUT_FILES};

const TIMEOUT: Duration = Duration::from_secs(2);

/// A fresh directory for one test.
fn scratch(name: &str) -> Scratch {
    Scratch::new(&format!("symbol-server-{name}"))
}

/// A C program compiled here (`variant` changes its code and so its build-id), split.
fn c_program(variant: u32) -> &'static Split {
    static BUILT: OnceLock<Mutex<Vec<(u32, &'static Split)>>> = OnceLock::new();
    let mut built = BUILT.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, split)) = built.iter().find(|(v, _)| *v == variant) {
        return split;
    }
    let dir = run_dir("symbol-server").join(format!("program-{variant}"));
    std::fs::create_dir_all(&dir).unwrap();
    let source = dir.join("probe.c");
    std::fs::write(
        &source,
        format!(
            "#include <stdio.h>\n__attribute__((noinline)) int profcpu_symbol_server_probe(int x) {{ return x * {variant} + 1; }}\n\
             int main(int argc, char **argv) {{ printf(\"%d\\n\", profcpu_symbol_server_probe(argc)); return 0; }}\n"
        ),
    )
    .unwrap();
    let binary = dir.join("probe");
    run(Command::new("gcc").args(["-g", "-O1", "-Wl,--build-id=sha1", "-o"]).arg(&binary).arg(&source));
    let split: &'static Split = Box::leak(Box::new(split(&binary, &dir)));
    built.push((variant, split));
    split
}

fn servers(urls: &[&str], cache: &Path) -> SymbolServers {
    let urls: Vec<String> = urls.iter().map(|u| u.to_string()).collect();
    SymbolServers::new(&urls, cache.to_path_buf(), TIMEOUT).unwrap()
}

/// `fetch_debug_file` of the test program's debug file, and the warnings it logged: the notices users see
/// (`profcpu: warning: symbol server: …`), one per line, without that prefix.
fn fetch(symbols: &SymbolServers, build_id: &[u8]) -> (Option<PathBuf>, Vec<String>) {
    let log = Arc::new(Mutex::new(Vec::new()));
    let sink = log.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .without_time()
        .with_level(false)
        .with_target(false)
        .with_ansi(false)
        .with_writer(move || Log(sink.clone()))
        .finish();
    let fetched =
        tracing::subscriber::with_default(subscriber, || symbols.fetch_debug_file(build_id, "probe").unwrap());
    let text = String::from_utf8(log.lock().unwrap().clone()).unwrap();
    (fetched, text.lines().map(|l| l.trim_start_matches("symbol server: ").to_string()).collect())
}

struct Log(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Log {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn cache_entries(cache: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(cache)
        .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    names.sort();
    names
}

#[test]
fn fetches_from_both_layouts_and_caches() {
    let program = c_program(3);
    for layout in ["ssqp", "debuginfod"] {
        let dir = scratch(&format!("layout-{layout}"));
        publish(&dir.join("tree"), layout, &program.build_id, &program.debug);
        let server = Server::start(Serve::Tree(dir.join("tree")));
        let cache = dir.join("cache");
        let symbols = servers(&[&server.url], &cache);
        let (fetched, notices) = fetch(&symbols, &program.build_id);
        let fetched = fetched.expect("not fetched");
        assert_eq!(fetched, cache.join(format!("{}.debug", hex(&program.build_id))));
        assert_eq!(build_id_of(&fetched), program.build_id);
        assert!(
            function_names(&fetched).iter().any(|n| n == "profcpu_symbol_server_probe"),
            "the fetched debug file does not name the program's function"
        );
        assert!(notices.is_empty(), "{notices:?}");
        // An explicit URL is asked in the SSQP layout first, then in the debuginfod one.
        let requests = server.requests();
        let expected_first = format!("/_.debug/elf-buildid-sym-{}/_.debug", hex(&program.build_id));
        assert_eq!(requests[0], expected_first);
        assert_eq!(requests.len(), if layout == "ssqp" { 1 } else { 2 }, "{requests:?}");
        assert_eq!(cache_entries(&cache), [format!("{}.debug", hex(&program.build_id))], "temporary files left");

        // A second process (a new SymbolServers) uses the cache without any server.
        drop(server);
        let again = servers(&["http://127.0.0.1:9"], &cache);
        assert_eq!(fetch(&again, &program.build_id), (Some(fetched), vec![]));
    }
}

#[test]
fn real_libcoreclr_debug_file_in_the_dotnet_symbol_layout() {
    // .NET Core 3.1's libcoreclr.so still has its symbol table: split it like the libcoreclr.so.dbg of .NET 8.
    let coreclr = Dotnet::V3_1.framework_dir(&Dotnet::V3_1.runtime_dir()).join("libcoreclr.so");
    let dir = scratch("coreclr");
    let libcoreclr = split(&coreclr, &dir.path);
    publish(&dir.join("tree"), "ssqp", &libcoreclr.build_id, &libcoreclr.debug);
    let server = Server::start(Serve::Tree(dir.join("tree")));
    let symbols = servers(&[&server.url], &dir.join("cache"));
    let started = Instant::now();
    let fetched = symbols.fetch_debug_file(&libcoreclr.build_id, "libcoreclr.so").unwrap().expect("not fetched");
    eprintln!("fetched {} bytes in {:?}", std::fs::metadata(&fetched).unwrap().len(), started.elapsed());
    let names = function_names(&fetched);
    assert!(names.iter().any(|n| n == "coreclr_initialize"), "{} functions, no coreclr_initialize", names.len());
    assert!(function_names(&libcoreclr.stripped).is_empty());
}

#[test]
fn a_file_with_another_build_id_is_refused() {
    let (wanted, other) = (c_program(3), c_program(5));
    assert_ne!(wanted.build_id, other.build_id);
    let dir = scratch("wrong-id");
    // One server claims to have `wanted` but serves the other program's debug file; another serves a text file.
    publish(&dir.join("wrong"), "ssqp", &wanted.build_id, &other.debug);
    let text = dir.join("not-elf");
    std::fs::write(&text, "<html>hello</html>").unwrap();
    publish(&dir.join("text"), "debuginfod", &wanted.build_id, &text);
    let (wrong, html) = (Server::start(Serve::Tree(dir.join("wrong"))), Server::start(Serve::Tree(dir.join("text"))));
    let cache = dir.join("cache");
    let symbols = servers(&[&wrong.url, &html.url], &cache);
    let (fetched, notices) = fetch(&symbols, &wanted.build_id);
    assert_eq!(fetched, None);
    eprintln!("{notices:#?}");
    assert_eq!(notices.len(), 2, "{notices:?}");
    assert!(notices[0].contains(&wrong.url) && notices[0].contains(&hex(&other.build_id)), "{notices:?}");
    assert!(notices[1].contains("not an ELF file"), "{notices:?}");
    // The server that served a wrong file is not asked in its other layout.
    assert_eq!(wrong.requests().len(), 1, "{:?}", wrong.requests());
    assert!(cache_entries(&cache).is_empty(), "refused files left in the cache: {:?}", cache_entries(&cache));
}

#[test]
fn missing_files_are_none_and_not_asked_again() {
    let program = c_program(3);
    let dir = scratch("missing");
    std::fs::create_dir_all(dir.join("tree")).unwrap();
    let server = Server::start(Serve::Tree(dir.join("tree")));
    let symbols = servers(&[&server.url], &dir.join("cache"));
    let (fetched, notices) = fetch(&symbols, &program.build_id);
    assert_eq!(fetched, None);
    // The user asked for it: one line says that no server has it.
    assert!(
        notices.len() == 1 && notices[0].contains(&hex(&program.build_id)) && notices[0].contains(&server.url),
        "{notices:?}"
    );
    assert_eq!(server.requests().len(), 2);
    let (fetched, notices) = fetch(&symbols, &program.build_id);
    assert_eq!(fetched, None);
    assert_eq!(server.requests().len(), 2, "a known miss was asked for again");
    assert!(notices.is_empty(), "a known miss was reported again: {notices:?}");
}

#[test]
fn debuginfod_urls_use_the_debuginfod_layout_only_and_the_first_server_that_has_it() {
    let program = c_program(3);
    let dir = scratch("debuginfod-urls");
    std::fs::create_dir_all(dir.join("empty")).unwrap();
    let empty = Server::start(Serve::Tree(dir.join("empty")));
    publish(&dir.join("tree"), "debuginfod", &program.build_id, &program.debug);
    publish(&dir.join("tree"), "ssqp", &program.build_id, &program.debug);
    let full = Server::start(Serve::Tree(dir.join("tree")));
    let symbols = SymbolServers::new(&[], dir.join("cache"), TIMEOUT)
        .unwrap()
        .with_debuginfod_urls(&format!("{} {}/", empty.url, full.url));
    let fetched = symbols.fetch_debug_file(&program.build_id, "probe").unwrap().expect("not fetched");
    assert_eq!(build_id_of(&fetched), program.build_id);
    let wanted = format!("/buildid/{}/debuginfo", hex(&program.build_id));
    assert_eq!(empty.requests(), full.requests());
    assert_eq!(full.requests(), [wanted]);
}

#[test]
fn redirects_are_followed() {
    let program = c_program(3);
    let dir = scratch("redirect");
    publish(&dir.join("tree"), "ssqp", &program.build_id, &program.debug);
    let storage = Server::start(Serve::Tree(dir.join("tree")));
    let front = Server::start(Serve::Redirect(storage.url.clone()));
    let symbols = servers(&[&front.url], &dir.join("cache"));
    let fetched = symbols.fetch_debug_file(&program.build_id, "probe").unwrap().expect("not fetched");
    assert_eq!(build_id_of(&fetched), program.build_id);
    assert_eq!(storage.requests().len(), 1);
}

#[test]
fn oversized_bodies_are_refused_without_leftovers() {
    let program = c_program(3);
    for announce in [false, true] {
        let dir = scratch(&format!("huge-{announce}"));
        // Unannounced, the limit's 512 MB go through before the download is stopped (~1 s on 127.0.0.1).
        let server = Server::start(Serve::Huge { bytes: MAX_SIZE + (256 << 10), announce });
        let cache = dir.join("cache");
        let symbols = servers(&[&server.url], &cache);
        let (fetched, notices) = fetch(&symbols, &program.build_id);
        assert_eq!(fetched, None);
        eprintln!("{notices:#?}");
        assert!(notices.len() == 1 && notices[0].contains("byte limit"), "{notices:?}");
        assert!(cache_entries(&cache).is_empty(), "left in the cache: {:?}", cache_entries(&cache));
    }
}

#[test]
fn a_server_that_never_answers_times_out_and_is_skipped() {
    let program = c_program(3);
    let dir = scratch("silent");
    let silent = Server::start(Serve::Silent);
    publish(&dir.join("tree"), "ssqp", &program.build_id, &program.debug);
    let good = Server::start(Serve::Tree(dir.join("tree")));
    let symbols = servers(&[&silent.url, &good.url], &dir.join("cache"));
    let started = Instant::now();
    let (fetched, notices) = fetch(&symbols, &program.build_id);
    let elapsed = started.elapsed();
    assert!(fetched.is_some(), "the second server was not asked");
    assert!(elapsed >= TIMEOUT && elapsed < TIMEOUT + Duration::from_millis(1500), "took {elapsed:?}");
    eprintln!("{notices:#?}");
    assert!(notices.len() == 1 && notices[0].contains(&silent.url) && notices[0].contains("timed out"), "{notices:?}");
    // Not asked again: another build-id goes straight to the next server.
    let other = c_program(5);
    let started = Instant::now();
    assert_eq!(symbols.fetch_debug_file(&other.build_id, "probe").unwrap(), None);
    assert!(started.elapsed() < Duration::from_millis(500), "the silent server was asked again");
    assert_eq!(silent.requests().len(), 1);
}

#[test]
fn a_corrupt_cache_entry_is_replaced() {
    let program = c_program(3);
    let dir = scratch("corrupt");
    let cache = dir.join("cache");
    std::fs::create_dir_all(&cache).unwrap();
    let entry = cache.join(format!("{}.debug", hex(&program.build_id)));
    std::fs::copy(&c_program(5).debug, &entry).unwrap();
    publish(&dir.join("tree"), "ssqp", &program.build_id, &program.debug);
    let server = Server::start(Serve::Tree(dir.join("tree")));
    let symbols = servers(&[&server.url], &cache);
    let (fetched, notices) = fetch(&symbols, &program.build_id);
    assert_eq!(fetched, Some(entry.clone()));
    assert_eq!(build_id_of(&entry), program.build_id);
    assert_eq!(notices.len(), 1, "the bad cache entry was not reported: {notices:?}");
    // A symlink in the cache is not followed either.
    std::fs::remove_file(&entry).unwrap();
    std::os::unix::fs::symlink(&program.debug, &entry).unwrap();
    let offline = servers(&["http://127.0.0.1:9"], &cache);
    assert_eq!(offline.fetch_debug_file(&program.build_id, "probe").unwrap(), None);
    assert!(!entry.exists() && std::fs::symlink_metadata(&entry).is_err(), "the planted symlink stayed");
}

#[test]
fn https_goes_through_rustls() {
    // A plain HTTP server spoken to over TLS: the handshake fails with a clear notice instead of a panic.
    let program = c_program(3);
    let dir = scratch("tls");
    std::fs::create_dir_all(dir.join("tree")).unwrap();
    let server = Server::start(Serve::Tree(dir.join("tree")));
    let url = server.url.replace("http://", "https://");
    let symbols = servers(&[&url], &dir.join("cache"));
    let (fetched, notices) = fetch(&symbols, &program.build_id);
    assert_eq!(fetched, None);
    assert!(!notices.is_empty() && notices[0].contains(&url), "{notices:?}");
    eprintln!("TLS to a plain server: {}", notices[0]);
    assert_eq!(server.requests(), ["non-HTTP first byte 0x16"], "no TLS handshake reached the server");
}

// ---- Through the profcpu binary. ----

/// The function a sample of [`spinning_program`] lands in nearly always.
const SPIN_FUNCTION: &str = "profcpu_symbol_server_spin";

/// A C program that spends ~1.2 s in [`SPIN_FUNCTION`] and exits, split into a stripped binary and its debug file.
fn spinning_program() -> &'static Split {
    static BUILT: OnceLock<Split> = OnceLock::new();
    BUILT.get_or_init(|| {
        let dir = run_dir("symbol-server").join("spinner");
        std::fs::create_dir_all(&dir).unwrap();
        let source = dir.join("spinner.c");
        std::fs::write(
            &source,
            format!(
                "#include <stdio.h>\n#include <time.h>\n\
                 __attribute__((noinline)) unsigned long {SPIN_FUNCTION}(unsigned long n) {{\n\
                 volatile unsigned long s = 0; for (unsigned long i = 0; i < n; i++) s += i ^ (s >> 3); return s; }}\n\
                 int main(void) {{ struct timespec a, b; unsigned long r = 0; clock_gettime(CLOCK_MONOTONIC, &a);\n\
                 do {{ r += {SPIN_FUNCTION}(1000000); clock_gettime(CLOCK_MONOTONIC, &b); }}\n\
                 while ((b.tv_sec - a.tv_sec) * 1000 + (b.tv_nsec - a.tv_nsec) / 1000000 < 1200);\n\
                 printf(\"%lu\\n\", r); return 0; }}\n"
            ),
        )
        .unwrap();
        let binary = dir.join("spinner");
        run(Command::new("gcc").args(["-g", "-O1", "-Wl,--build-id=sha1", "-o"]).arg(&binary).arg(&source));
        let split = split(&binary, &dir);
        // Not beside the binary, where profcpu would find it (as `spinner.dbg`) without any server.
        let debug = run_dir("symbol-server").join("spinner-debug-file");
        std::fs::rename(&split.debug, &debug).unwrap();
        Split { debug, ..split }
    })
}

/// `profcpu collect -duration 20 -freq 499 [extra] -- spinner` with its symbol cache in `cache` and no DEBUGINFOD_URLS.
fn collect_spinner(extra: &[&str], out: &Path, cache: &Path) -> Collected {
    let program = spinning_program();
    let mut cmd = Command::new(support::PROFCPU);
    cmd.args(["collect", "-duration", "20", "-freq", "499", "-output", out.to_str().unwrap()])
        .args(extra)
        .arg("--")
        .arg(&program.stripped)
        .env("XDG_CACHE_HOME", cache)
        .env_remove("DEBUGINFOD_URLS");
    finish_collect(cmd.output().unwrap())
}

/// The labels of the spinner's own frames in a run's perf_script.out: all of them, and the leaves.
fn spinner_frames(c: &Collected) -> (Vec<String>, Vec<String>) {
    let module = spinning_program().stripped.to_str().unwrap().to_string();
    let script = std::fs::read_to_string(c.run_dir.join("perf_script.out")).unwrap();
    let samples = parse_perf_script(&script);
    let ours = |f: &&support::webapi::Frame| f.module == module;
    let all = samples.iter().flat_map(|s| &s.frames).filter(ours).map(|f| f.symbol.clone()).collect();
    let leaves = samples.iter().filter_map(|s| s.frames.first()).filter(ours).map(|f| f.symbol.clone()).collect();
    (all, leaves)
}

fn warnings(c: &Collected) -> Vec<&str> {
    c.stderr.lines().filter(|l| l.starts_with("profcpu: warning:")).collect()
}

#[test]
fn collect_names_a_stripped_program_from_a_symbol_server_only_when_asked() {
    let program = spinning_program();
    let dir = scratch("collect-named");
    publish(&dir.join("tree"), "debuginfod", &program.build_id, &program.debug);
    let server = Server::start(Serve::Tree(dir.join("tree")));
    let cache = dir.join("cache");

    // Not asked: nothing is fetched; the spinner's frames are one per function, at its start.
    let plain = collect_spinner(&[], &dir.join("out"), &cache);
    assert!(server.requests().is_empty(), "fetched without -symbol-server: {:?}", server.requests());
    let spin_offset = file_offset(&program.stripped, symbol_address(&program.debug, SPIN_FUNCTION).unwrap()).unwrap();
    assert!(function_starts(&program.stripped).contains(&spin_offset), "{SPIN_FUNCTION} has no .eh_frame entry");
    let unnamed = format!("spinner+{spin_offset:#x}");
    let (frames, leaves) = spinner_frames(&plain);
    let starts = function_starts(&program.stripped);
    let elsewhere: Vec<&String> = frames
        .iter()
        .filter(|f| {
            f.strip_prefix("spinner+0x")
                .and_then(|o| u64::from_str_radix(o, 16).ok())
                .is_none_or(|o| !starts.contains(&o))
        })
        .collect();
    assert!(elsewhere.is_empty(), "expected every spinner frame at a function start (.eh_frame), not {elsewhere:?}");
    let at_spin = leaves.iter().filter(|f| **f == unnamed).count();
    assert!(
        leaves.len() >= 50 && at_spin * 10 >= leaves.len() * 9,
        "expected >= 90% of the samples in {unnamed} (the start of {SPIN_FUNCTION}), got {at_spin} of {}",
        leaves.len()
    );

    // Asked: named from the fetched file; no warning.
    let named = collect_spinner(&["-symbol-server", &server.url], &dir.join("out"), &cache);
    let (_, leaves) = spinner_frames(&named);
    let by_name = leaves.iter().filter(|f| *f == SPIN_FUNCTION).count();
    assert!(
        leaves.len() >= 50 && by_name * 10 >= leaves.len() * 9,
        "expected >= 90% of the samples named {SPIN_FUNCTION}, got {by_name} of {}:\n{}",
        leaves.len(),
        named.stderr
    );
    assert!(warnings(&named).is_empty(), "{}", named.stderr);
    assert!(cache.join(format!("profcpu/symbols/{}.debug", hex(&program.build_id))).is_file());

    // The run made without it is named afterwards by `postprocess -symbol-server`, from what it saved.
    std::fs::remove_dir_all(&cache).unwrap();
    let out = Command::new(support::PROFCPU)
        .args(["postprocess", "-symbol-server", &server.url, "-dir"])
        .arg(&plain.run_dir)
        .env("XDG_CACHE_HOME", &cache)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let (_, leaves) = spinner_frames(&plain);
    let by_name = leaves.iter().filter(|f| *f == SPIN_FUNCTION).count();
    assert!(
        by_name * 10 >= leaves.len() * 9,
        "expected postprocess -symbol-server to name >= 90% of the samples {SPIN_FUNCTION}, got {by_name} of {}: {}",
        leaves.len(),
        String::from_utf8_lossy(&out.stderr)
    );

    // The names were saved: postprocess needs neither the server nor the cache.
    drop(server);
    std::fs::remove_dir_all(&cache).unwrap();
    let folded = std::fs::read_to_string(named.run_dir.join("folded_stacks.out")).unwrap();
    let out = Command::new(support::PROFCPU).args(["postprocess", "-dir"]).arg(&named.run_dir).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read_to_string(named.run_dir.join("folded_stacks.out")).unwrap(), folded);
}

/// A symbol server that misbehaves costs one line naming it and what it did; the collection completes with every
/// output, the program's frames grouped per function as without a server.
#[test]
fn bad_symbol_servers_cost_one_line_and_the_collection_completes() {
    let program = spinning_program();
    let dir = scratch("collect-bad");
    publish(&dir.join("wrong"), "ssqp", &program.build_id, &c_program(5).debug);
    std::fs::create_dir_all(dir.join("empty")).unwrap();
    let cases = [
        ("wrong build-id", Serve::Tree(dir.join("wrong")), "discarded: its build-id is"),
        ("404", Serve::Tree(dir.join("empty")), "no debug file for spinner"),
        ("huge body", Serve::Huge { bytes: 600 << 20, announce: true }, "byte limit"),
        ("no answer", Serve::Silent, "timed out"),
    ];
    for (case, serve, want) in cases {
        let server = Server::start(serve);
        let started = Instant::now();
        let c = collect_spinner(
            &["-symbol-server", &server.url, "-symbol-timeout", "1"],
            &dir.join("out"),
            &dir.join(format!("cache-{}", case.replace(' ', "-"))),
        );
        let lines = warnings(&c);
        assert!(
            lines.len() == 1 && lines[0].contains(want) && lines[0].contains(&server.url),
            "{case}: expected one warning naming {} and {want:?}, got:\n{}",
            server.url,
            c.stderr
        );
        for name in OUTPUT_FILES {
            assert!(c.run_dir.join(name).is_file(), "{case}: no {name}:\n{}", c.stderr);
        }
        assert!(spinner_frames(&c).0.iter().all(|f| f.starts_with("spinner+0x")), "{case}: named from a bad server");
        eprintln!("{case}: {:.1?}: {}", started.elapsed(), lines[0]);
    }
    // An address nothing listens on.
    let c = collect_spinner(&["-symbol-server", "http://127.0.0.1:9"], &dir.join("out"), &dir.join("cache-refused"));
    let lines = warnings(&c);
    assert!(lines.len() == 1 && lines[0].contains("http://127.0.0.1:9"), "{}", c.stderr);
    // A URL that is not one is refused before anything is made.
    let out = Command::new(support::PROFCPU)
        .args(["collect", "-symbol-server", "msdl.microsoft.com", "-output"])
        .arg(dir.join("refused"))
        .args(["--", "true"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.lines().count() == 1 && stderr.contains("http://"), "{stderr}");
    assert!(!dir.join("refused").exists() || std::fs::read_dir(dir.join("refused")).unwrap().next().is_none());
}
