//! `symbolize::symbol_server` against HTTP servers run by the test on 127.0.0.1: debug files split off real
//! binaries with `objcopy --only-keep-debug` / `strip` (a C program compiled here, and .NET Core 3.1's
//! libcoreclr.so, which still has its symbols) served in the SSQP and debuginfod layouts; wrong build-ids, 404s,
//! oversized bodies, redirects and a server that never answers.

mod support;

use profcpu::symbolize::symbol_server::SymbolServers;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};
use support::symbol_server::{build_id_of, function_names, hex, publish, run, split, Serve, Server, Split};

const TIMEOUT: Duration = Duration::from_secs(2);

/// This run's directory under cargo's tmp dir; directories of earlier runs whose process is gone are removed.
fn work_root() -> PathBuf {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    ROOT.get_or_init(|| {
        let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
        for entry in std::fs::read_dir(&base).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(pid) = name.strip_prefix("symbol-server-").and_then(|p| p.parse::<u32>().ok()) {
                if !Path::new(&format!("/proc/{pid}")).exists() {
                    let _ = std::fs::remove_dir_all(entry.path());
                }
            }
        }
        base.join(format!("symbol-server-{}", std::process::id()))
    })
    .clone()
}

/// A fresh directory for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = work_root().join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A C program compiled here (`variant` changes its code and so its build-id), split.
fn c_program(variant: u32) -> &'static Split {
    static BUILT: OnceLock<Mutex<Vec<(u32, &'static Split)>>> = OnceLock::new();
    let mut built = BUILT.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, split)) = built.iter().find(|(v, _)| *v == variant) {
        return split;
    }
    let dir = work_root().join(format!("program-{variant}"));
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
        let fetched = symbols.fetch_debug_file(&program.build_id, "probe").unwrap().expect("not fetched");
        assert_eq!(fetched, cache.join(format!("{}.debug", hex(&program.build_id))));
        assert_eq!(build_id_of(&fetched), program.build_id);
        assert!(
            function_names(&fetched).iter().any(|n| n == "profcpu_symbol_server_probe"),
            "the fetched debug file does not name the program's function"
        );
        assert!(symbols.take_notices().is_empty());
        // An explicit URL is asked in the SSQP layout first, then in the debuginfod one.
        let requests = server.requests();
        let expected_first = format!("/_.debug/elf-buildid-sym-{}/_.debug", hex(&program.build_id));
        assert_eq!(requests[0], expected_first);
        assert_eq!(requests.len(), if layout == "ssqp" { 1 } else { 2 }, "{requests:?}");
        assert_eq!(cache_entries(&cache), [format!("{}.debug", hex(&program.build_id))], "temporary files left");

        // A second process (a new SymbolServers) uses the cache without any server.
        drop(server);
        let again = servers(&["http://127.0.0.1:9"], &cache);
        assert_eq!(again.fetch_debug_file(&program.build_id, "probe").unwrap(), Some(fetched));
        assert!(again.take_notices().is_empty());
    }
}

#[test]
fn real_libcoreclr_debug_file_in_the_dotnet_symbol_layout() {
    // .NET Core 3.1's libcoreclr.so still has its symbol table: split it like the libcoreclr.so.dbg of .NET 8.
    let out = Command::new("bash")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/dotnet-runtime.sh"))
        .arg("3.1")
        .output()
        .expect("cannot run scripts/dotnet-runtime.sh");
    assert!(out.status.success(), "dotnet-runtime.sh 3.1 failed: {}", String::from_utf8_lossy(&out.stderr));
    let coreclr = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
        .join("shared/Microsoft.NETCore.App/3.1.23/libcoreclr.so");
    let dir = scratch("coreclr");
    let libcoreclr = split(&coreclr, &dir);
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
    // The server claims to have `wanted` but serves the other program's debug file (and, in the other layout, a
    // text file).
    publish(&dir.join("tree"), "ssqp", &wanted.build_id, &other.debug);
    let text = dir.join("not-elf");
    std::fs::write(&text, "<html>hello</html>").unwrap();
    publish(&dir.join("tree"), "debuginfod", &wanted.build_id, &text);
    let server = Server::start(Serve::Tree(dir.join("tree")));
    let cache = dir.join("cache");
    let symbols = servers(&[&server.url], &cache);
    assert_eq!(symbols.fetch_debug_file(&wanted.build_id, "probe").unwrap(), None);
    let notices = symbols.take_notices();
    eprintln!("{notices:#?}");
    assert_eq!(notices.len(), 2, "{notices:?}");
    assert!(notices[0].contains(&server.url) && notices[0].contains(&hex(&other.build_id)), "{notices:?}");
    assert!(notices[1].contains("not an ELF file"), "{notices:?}");
    assert!(cache_entries(&cache).is_empty(), "refused files left in the cache: {:?}", cache_entries(&cache));
}

#[test]
fn missing_files_are_none_and_not_asked_again() {
    let program = c_program(3);
    let dir = scratch("missing");
    std::fs::create_dir_all(dir.join("tree")).unwrap();
    let server = Server::start(Serve::Tree(dir.join("tree")));
    let symbols = servers(&[&server.url], &dir.join("cache"));
    assert_eq!(symbols.fetch_debug_file(&program.build_id, "probe").unwrap(), None);
    // The user asked for it: one line says that no server has it.
    let notices = symbols.take_notices();
    assert!(
        notices.len() == 1 && notices[0].contains(&hex(&program.build_id)) && notices[0].contains(&server.url),
        "{notices:?}"
    );
    assert_eq!(server.requests().len(), 2);
    assert_eq!(symbols.fetch_debug_file(&program.build_id, "probe").unwrap(), None);
    assert_eq!(server.requests().len(), 2, "a known miss was asked for again");
    assert!(symbols.take_notices().is_empty(), "a known miss was reported again");
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
    let cap = 1 << 20;
    for announce in [false, true] {
        let dir = scratch(&format!("huge-{announce}"));
        let server = Server::start(Serve::Huge { bytes: cap + (256 << 10), announce });
        let cache = dir.join("cache");
        let symbols = servers(&[&server.url], &cache).with_max_size(cap);
        assert_eq!(symbols.fetch_debug_file(&program.build_id, "probe").unwrap(), None);
        let notices = symbols.take_notices();
        eprintln!("{notices:#?}");
        assert!(!notices.is_empty() && notices.iter().all(|n| n.contains("byte limit")), "{notices:?}");
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
    let fetched = symbols.fetch_debug_file(&program.build_id, "probe").unwrap();
    let elapsed = started.elapsed();
    assert!(fetched.is_some(), "the second server was not asked");
    assert!(elapsed >= TIMEOUT && elapsed < TIMEOUT + Duration::from_millis(1500), "took {elapsed:?}");
    let notices = symbols.take_notices();
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
    assert_eq!(symbols.fetch_debug_file(&program.build_id, "probe").unwrap(), Some(entry.clone()));
    assert_eq!(build_id_of(&entry), program.build_id);
    assert_eq!(symbols.take_notices().len(), 1, "the bad cache entry was not reported");
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
    assert_eq!(symbols.fetch_debug_file(&program.build_id, "probe").unwrap(), None);
    let notices = symbols.take_notices();
    assert!(!notices.is_empty() && notices[0].contains(&url), "{notices:?}");
    eprintln!("TLS to a plain server: {}", notices[0]);
    assert_eq!(server.requests(), ["non-HTTP first byte 0x16"], "no TLS handshake reached the server");
}
