//! Fetches split ELF debug files (e.g. the .NET runtime's `libcoreclr.so.dbg`, which `dotnet-symbol` would fetch)
//! from symbol servers by build-id, only when the user names servers.
//!
//! # Layouts
//! - Microsoft's Simple Symbol Query Protocol (dotnet/symstore `docs/specs/SSQP_Key_Conventions.md`, key
//!   "ELF-buildid-sym"): `<server>/_.debug/elf-buildid-sym-<build-id>/_.debug`, the build-id in lower-case hex,
//!   padded with zero bytes to 20 bytes when shorter.
//! - debuginfod (elfutils `debuginfod(8)`): `<server>/buildid/<build-id>/debuginfo`, the build-id in lower-case hex.
//!
//! Which layout a server gets: a URL the user names ([`SymbolServers::new`]) is asked in the SSQP layout first and,
//! when that is not found, in the debuginfod layout, because one URL can be either kind and the user should not
//! have to say which; servers from `DEBUGINFOD_URLS` ([`SymbolServers::with_debuginfod_urls`], space separated, as
//! elfutils reads it) are debuginfod servers and only asked that way.
//!
//! # Trust
//! Whatever comes back is size-capped while it streams into a temporary file in the cache (the `Content-Length`
//! header is only used to refuse early), must be ELF and must carry the requested build-id (NT_GNU_BUILD_ID) —
//! otherwise it is discarded with a warning naming the server. The cache (`$XDG_CACHE_HOME/profcpu/symbols`, else
//! `~/.cache/profcpu/symbols`) holds `<build-id>.debug` files written atomically (an `O_EXCL` temporary file
//! renamed into place) and re-verified whenever they are used.
//!
//! # Network behaviour
//! HTTP and HTTPS (rustls with the Mozilla root certificates of `webpki-roots`; no OpenSSL), proxies from
//! `HTTPS_PROXY`/`HTTP_PROXY`/`ALL_PROXY`, up to 5 redirects (Microsoft's server redirects to blob storage). The
//! timeout limits resolving, connecting, the wait for the response headers and any pause in the body; the whole
//! download is limited separately ([`TOTAL_TIMEOUT`]). A server that cannot be reached or times
//! out is skipped for the rest of the process; a build-id no server has is not asked for again (and said once). A
//! second Ctrl+C (which ends the run as soon as `symbols/` is complete, see [`crate::interrupt`]) stops a download.

use std::collections::HashSet;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{bail, Context};
use object::{Object, ObjectSymbol};

/// The largest debug file accepted (libcoreclr.so.dbg of .NET 8 is far below this).
pub const MAX_SIZE: u64 = 512 << 20;
/// The limit for one whole download.
pub const TOTAL_TIMEOUT: Duration = Duration::from_secs(600);
const MAX_REDIRECTS: u32 = 5;
/// A partial download older than this was left by a run that died (a live one ends within its total timeout).
const STALE_PARTIAL: Duration = Duration::from_secs(24 * 3600);
/// The SSQP key pads shorter build-ids to this many bytes.
const SSQP_BUILD_ID_LEN: usize = 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// `<server>/_.debug/elf-buildid-sym-<id>/_.debug`
    Ssqp,
    /// `<server>/buildid/<id>/debuginfo`
    Debuginfod,
}

impl Layout {
    fn url(self, server: &str, build_id: &[u8]) -> String {
        match self {
            Layout::Ssqp => {
                let mut padded = build_id.to_vec();
                if padded.len() < SSQP_BUILD_ID_LEN {
                    padded.resize(SSQP_BUILD_ID_LEN, 0);
                }
                let id = hex(&padded);
                format!("{server}/_.debug/elf-buildid-sym-{id}/_.debug")
            }
            Layout::Debuginfod => format!("{server}/buildid/{}/debuginfo", hex(build_id)),
        }
    }
}

/// One server: its base URL (no trailing `/`) and the layouts it is asked in, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SymbolServer {
    pub url: String,
    pub layouts: Vec<Layout>,
}

/// The configured servers, the cache and what this process has learned (misses, unreachable servers).
pub struct SymbolServers {
    servers: Vec<SymbolServer>,
    cache_dir: PathBuf,
    agent: ureq::Agent,
    /// Build-ids no server had (hex).
    misses: Mutex<HashSet<String>>,
    /// Indexes of servers that could not be reached or timed out.
    down: Mutex<HashSet<usize>>,
    /// How many warnings were logged: a fetch that logged none says once that no server had the file.
    notices: AtomicUsize,
    cache_ready: AtomicBool,
}

impl std::fmt::Debug for SymbolServers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SymbolServers").field("servers", &self.servers).field("cache_dir", &self.cache_dir).finish()
    }
}

/// Why one download attempt gave nothing.
enum Miss {
    /// 404/410: the server does not have it (one line says so once no server has it).
    NotThere,
    /// Anything else; the server is still asked for other files (not for this one in another layout).
    Failed(String),
    /// Connection or timeout trouble: the server is not asked again.
    Unreachable(String),
    /// The user asked the run to end.
    Stopped,
}

impl SymbolServers {
    /// Servers named by the user (`-symbol-server URL`, `http://` or `https://`), each asked in the SSQP layout, then
    /// the debuginfod one. `timeout` limits connecting, waiting for an answer and any stall while downloading.
    pub fn new(urls: &[String], cache_dir: PathBuf, timeout: Duration) -> anyhow::Result<SymbolServers> {
        let mut servers = SymbolServers {
            servers: Vec::new(),
            cache_dir,
            agent: make_agent(timeout, TOTAL_TIMEOUT),
            misses: Mutex::new(HashSet::new()),
            down: Mutex::new(HashSet::new()),
            notices: AtomicUsize::new(0),
            cache_ready: AtomicBool::new(false),
        };
        for url in urls {
            servers.add(url, vec![Layout::Ssqp, Layout::Debuginfod])?;
        }
        Ok(servers)
    }

    /// Adds the debuginfod servers of a `DEBUGINFOD_URLS` value (space-separated URLs; pass
    /// `std::env::var("DEBUGINFOD_URLS")` when the user asks for it). Entries that are not http(s) URLs (elfutils
    /// also accepts `file://` and bare paths) are skipped with a notice.
    pub fn with_debuginfod_urls(mut self, value: &str) -> SymbolServers {
        for url in value.split_whitespace() {
            if let Err(e) = self.add(url, vec![Layout::Debuginfod]) {
                self.notice(format!("DEBUGINFOD_URLS: {e}; skipped"));
            }
        }
        self
    }

    /// `$XDG_CACHE_HOME/profcpu/symbols`, else `$HOME/.cache/profcpu/symbols`; `None` without either variable.
    pub fn default_cache_dir() -> Option<PathBuf> {
        let absolute = |v: std::ffi::OsString| Some(PathBuf::from(v)).filter(|p| p.is_absolute());
        std::env::var_os("XDG_CACHE_HOME")
            .and_then(absolute)
            .or_else(|| std::env::var_os("HOME").and_then(absolute).map(|home| home.join(".cache")))
            .map(|cache| cache.join("profcpu/symbols"))
    }

    #[cfg(test)]
    pub fn servers(&self) -> &[SymbolServer] {
        &self.servers
    }

    /// The debug file with `build_id`, from the cache or else from the first server that has it; `file_name` (the
    /// binary it is for, e.g. `libcoreclr.so`) only names it in messages. `Ok(None)` when no server has it (or
    /// every answer was refused); `Err` only for local trouble (the cache cannot be written).
    pub fn fetch_debug_file(&self, build_id: &[u8], file_name: &str) -> anyhow::Result<Option<PathBuf>> {
        if build_id.is_empty() {
            bail!("{file_name}: an empty build-id cannot be looked up on a symbol server");
        }
        let id = hex(build_id);
        let cached = self.cache_dir.join(format!("{id}.debug"));
        match verify(&cached, build_id) {
            Ok(()) => return Ok(Some(cached)),
            Err(Rejected::Missing) => {}
            Err(Rejected::Bad(why)) => {
                self.notice(format!("cached debug file {} for {file_name}: {why}; removed", cached.display()));
                let _ = std::fs::remove_file(&cached);
            }
        }
        if self.misses.lock().unwrap_or_else(|e| e.into_inner()).contains(&id) {
            return Ok(None);
        }
        self.ensure_cache_dir()?;
        let notices_before = self.notices.load(Ordering::Relaxed);
        for (index, server) in self.servers.iter().enumerate() {
            for &layout in &server.layouts {
                if self.down.lock().unwrap_or_else(|e| e.into_inner()).contains(&index) {
                    break;
                }
                let url = layout.url(&server.url, build_id);
                let mut partial = tempfile::Builder::new()
                    .prefix(&format!(".{id}."))
                    .suffix(".partial")
                    .tempfile_in(&self.cache_dir)
                    .with_context(|| format!("cannot create a file in {}", self.cache_dir.display()))?;
                match self.download(&url, partial.as_file_mut()) {
                    Ok(bytes) => match verify(partial.path(), build_id) {
                        Ok(()) => {
                            partial.persist(&cached).with_context(|| format!("cannot write {}", cached.display()))?;
                            tracing::info!("fetched {file_name} debug file ({bytes} bytes) from {url}");
                            return Ok(Some(cached));
                        }
                        Err(rejected) => {
                            let why = match rejected {
                                Rejected::Bad(why) => why,
                                Rejected::Missing => "it vanished while being checked".into(),
                            };
                            self.notice(format!(
                                "{} answered {url} for {file_name} (build-id {id}) with a file that was discarded: {why}",
                                server.url
                            ));
                            // A server that serves a wrong file is not asked again for this one in another layout.
                            break;
                        }
                    },
                    Err(Miss::NotThere) => {
                        tracing::debug!("{file_name} (build-id {id}) is not on {} ({url})", server.url)
                    }
                    Err(Miss::Failed(why)) => {
                        self.notice(format!("{url} for {file_name}: {why}"));
                        break;
                    }
                    Err(Miss::Unreachable(why)) => {
                        self.notice(format!("{}: {why}; not asking it again in this run", server.url));
                        self.down.lock().unwrap_or_else(|e| e.into_inner()).insert(index);
                    }
                    Err(Miss::Stopped) => return Ok(None),
                }
            }
        }
        // Servers that simply did not have it (404) said nothing yet: one line for the user, who asked for it.
        if self.notices.load(Ordering::Relaxed) == notices_before && !self.servers.is_empty() {
            let asked: Vec<&str> = self.servers.iter().map(|s| s.url.as_str()).collect();
            self.notice(format!("no debug file for {file_name} (build-id {id}) on {}", asked.join(", ")));
        }
        self.misses.lock().unwrap_or_else(|e| e.into_inner()).insert(id);
        Ok(None)
    }

    fn add(&mut self, url: &str, layouts: Vec<Layout>) -> anyhow::Result<()> {
        let trimmed = url.trim().trim_end_matches('/');
        let lower = trimmed.to_ascii_lowercase();
        let host = lower.strip_prefix("http://").or_else(|| lower.strip_prefix("https://"));
        if !matches!(host, Some(h) if !h.is_empty()) {
            bail!("symbol server {url:?} is not an http:// or https:// URL");
        }
        if !self.servers.iter().any(|s| s.url == trimmed) {
            self.servers.push(SymbolServer { url: trimmed.to_string(), layouts });
        }
        Ok(())
    }

    /// Creates the cache (mode 0700) once, and removes downloads that a killed run left half-written.
    fn ensure_cache_dir(&self) -> anyhow::Result<()> {
        if self.cache_ready.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.cache_dir)
            .with_context(|| format!("cannot create the symbol cache {}", self.cache_dir.display()))?;
        for entry in std::fs::read_dir(&self.cache_dir).into_iter().flatten().flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            let stale = entry
                .metadata()
                .ok()
                .and_then(|m| m.modified().ok())
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age > STALE_PARTIAL);
            if name.starts_with('.') && name.ends_with(".partial") && stale {
                let _ = std::fs::remove_file(entry.path());
            }
        }
        Ok(())
    }

    /// GETs `url` into `out`, at most [`MAX_SIZE`] bytes; returns the size.
    fn download(&self, url: &str, out: &mut File) -> Result<u64, Miss> {
        if crate::interrupt::abort_pending() {
            return Err(Miss::Stopped);
        }
        let response = match self.agent.get(url).call() {
            Ok(response) => response,
            Err(e) => return Err(classify(e)),
        };
        let status = response.status().as_u16();
        if status == 404 || status == 410 {
            return Err(Miss::NotThere);
        }
        if status != 200 {
            return Err(Miss::Failed(format!("HTTP {status}")));
        }
        let body = response.into_body();
        if let Some(length) = body.content_length().filter(|&l| l > MAX_SIZE) {
            return Err(Miss::Failed(format!("announces {length} bytes, more than the {MAX_SIZE} byte limit")));
        }
        let mut reader = body.into_reader();
        let mut buffer = vec![0u8; 256 << 10];
        let mut total: u64 = 0;
        loop {
            let n = match reader.read(&mut buffer) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(classify_io(e)),
            };
            if crate::interrupt::abort_pending() {
                return Err(Miss::Stopped);
            }
            total += n as u64;
            if total > MAX_SIZE {
                return Err(Miss::Failed(format!("sent more than the {MAX_SIZE} byte limit; download stopped")));
            }
            out.write_all(&buffer[..n]).map_err(|e| Miss::Failed(format!("cannot write to the cache: {e}")))?;
        }
        out.flush().map_err(|e| Miss::Failed(format!("cannot write to the cache: {e}")))?;
        Ok(total)
    }

    fn notice(&self, message: String) {
        tracing::warn!("symbol server: {message}");
        self.notices.fetch_add(1, Ordering::Relaxed);
    }
}

fn make_agent(timeout: Duration, total: Duration) -> ureq::Agent {
    ureq::Agent::config_builder()
        .timeout_resolve(Some(timeout))
        .timeout_connect(Some(timeout))
        .timeout_send_request(Some(timeout))
        .timeout_recv_response(Some(timeout))
        .timeout_per_read(Some(timeout))
        .timeout_global(Some(total))
        .max_redirects(MAX_REDIRECTS)
        .http_status_as_error(false)
        .user_agent(concat!("profcpu/", env!("CARGO_PKG_VERSION")))
        .build()
        .new_agent()
}

fn classify(e: ureq::Error) -> Miss {
    match e {
        ureq::Error::Timeout(which) => Miss::Unreachable(format!("timed out ({which})")),
        ureq::Error::HostNotFound => Miss::Unreachable("host not found".into()),
        ureq::Error::ConnectionFailed => Miss::Unreachable("connection failed".into()),
        ureq::Error::Io(io) => classify_io(io),
        other => Miss::Failed(other.to_string()),
    }
}

fn classify_io(e: io::Error) -> Miss {
    match e.kind() {
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => Miss::Unreachable(format!("timed out ({e})")),
        io::ErrorKind::ConnectionRefused | io::ErrorKind::ConnectionReset | io::ErrorKind::NotConnected => {
            Miss::Unreachable(e.to_string())
        }
        _ => Miss::Failed(e.to_string()),
    }
}

enum Rejected {
    Missing,
    Bad(String),
}

/// `path` is a regular file (not followed through a symlink), ELF, with exactly `build_id`.
fn verify(path: &Path, build_id: &[u8]) -> Result<(), Rejected> {
    let file = match std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(Rejected::Missing),
        Err(e) => return Err(Rejected::Bad(format!("cannot open it: {e}"))),
    };
    let meta = file.metadata().map_err(|e| Rejected::Bad(e.to_string()))?;
    if !meta.is_file() {
        return Err(Rejected::Bad("it is not a regular file".into()));
    }
    if meta.len() == 0 {
        return Err(Rejected::Bad("it is empty".into()));
    }
    // SAFETY: the file is private to this cache (mode 0600) and only read; a concurrent truncation could fault,
    // which nothing else in this process does.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| Rejected::Bad(format!("cannot map it: {e}")))?;
    let elf = object::File::parse(&*map).map_err(|_| Rejected::Bad("it is not an ELF file".into()))?;
    if elf.format() != object::BinaryFormat::Elf {
        return Err(Rejected::Bad(format!("it is {:?}, not ELF", elf.format())));
    }
    match elf.build_id() {
        Ok(Some(found)) if found == build_id => {
            tracing::debug!(
                "{}: build-id matches, {} symbols",
                path.display(),
                elf.symbols().filter(|s| s.is_definition()).count()
            );
            Ok(())
        }
        Ok(Some(found)) => Err(Rejected::Bad(format!("its build-id is {}, not the requested one", hex(found)))),
        Ok(None) => Err(Rejected::Bad("it has no build-id note".into())),
        Err(e) => Err(Rejected::Bad(format!("unreadable notes: {e}"))),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_follow_the_specs() {
        let id = [0x18, 0x0a, 0x37, 0x3d, 0x6a, 0xfb, 0xab, 0xf0, 0xeb, 0x1f, 0x09, 0xbe, 0x1b, 0xc4, 0x5b, 0xd7];
        // The SSQP spec's own example of a 16-byte build-id, padded to 20 bytes.
        assert_eq!(
            Layout::Ssqp.url("https://msdl.microsoft.com/download/symbols", &id),
            "https://msdl.microsoft.com/download/symbols/_.debug/elf-buildid-sym-180a373d6afbabf0eb1f09be1bc45bd700000000/_.debug"
        );
        assert_eq!(
            Layout::Debuginfod.url("http://d", &id),
            "http://d/buildid/180a373d6afbabf0eb1f09be1bc45bd7/debuginfo"
        );
    }

    #[test]
    fn server_lists_are_checked_and_deduplicated() {
        let dir = std::env::temp_dir();
        let servers = SymbolServers::new(&["https://a.example/sym/".into()], dir.clone(), Duration::from_secs(1))
            .unwrap()
            .with_debuginfod_urls("  http://b.example  https://a.example/sym file:///x /no/scheme ");
        assert_eq!(
            servers.servers(),
            [
                SymbolServer { url: "https://a.example/sym".into(), layouts: vec![Layout::Ssqp, Layout::Debuginfod] },
                SymbolServer { url: "http://b.example".into(), layouts: vec![Layout::Debuginfod] },
            ]
        );
        assert_eq!(servers.notices.load(Ordering::Relaxed), 2);
        assert!(SymbolServers::new(&["ftp://x".into()], dir.clone(), Duration::from_secs(1)).is_err());
        assert!(SymbolServers::new(&["http://".into()], dir, Duration::from_secs(1)).is_err());
    }
}
