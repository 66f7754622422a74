//! Debug files split off real binaries the way distributions and Microsoft ship them, and an HTTP server on
//! 127.0.0.1 that serves them in a symbol server's layout (or misbehaves as one may): for the symbol server tests,
//! of the library and through the `profcpu` binary.

use object::{Object, ObjectSymbol};
use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?} (scripts/setup-deps.sh installs it): {e}"));
    assert!(out.status.success(), "{cmd:?} failed:\n{}", String::from_utf8_lossy(&out.stderr));
}

/// A binary split the way distributions and Microsoft ship it: the stripped binary and its debug file.
pub struct Split {
    pub stripped: PathBuf,
    pub debug: PathBuf,
    pub build_id: Vec<u8>,
}

pub fn build_id_of(path: &Path) -> Vec<u8> {
    let data = std::fs::read(path).unwrap();
    let file = object::File::parse(&*data).unwrap();
    file.build_id().unwrap().unwrap_or_else(|| panic!("{} has no build-id", path.display())).to_vec()
}

pub fn function_names(path: &Path) -> Vec<String> {
    let data = std::fs::read(path).unwrap();
    let file = object::File::parse(&*data).unwrap();
    file.symbols()
        .filter(|s| s.kind() == object::SymbolKind::Text)
        .filter_map(|s| s.name().ok().map(String::from))
        .collect()
}

pub fn split(binary: &Path, dir: &Path) -> Split {
    let name = binary.file_name().unwrap().to_str().unwrap();
    let (stripped, debug) = (dir.join(name), dir.join(format!("{name}.dbg")));
    if binary != stripped {
        std::fs::copy(binary, &stripped).unwrap();
    }
    run(Command::new("objcopy").arg("--only-keep-debug").arg(&stripped).arg(&debug));
    run(Command::new("strip").arg("--strip-all").arg(&stripped));
    let build_id = build_id_of(&stripped);
    assert_eq!(build_id_of(&debug), build_id);
    assert!(function_names(&stripped).is_empty(), "strip left symbols in {}", stripped.display());
    Split { stripped, debug, build_id }
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Places `debug` in `tree` where a server of `layout` serves the debug file for `build_id`.
pub fn publish(tree: &Path, layout: &str, build_id: &[u8], debug: &Path) {
    let relative = match layout {
        "ssqp" => {
            let mut padded = build_id.to_vec();
            padded.resize(padded.len().max(20), 0);
            format!("_.debug/elf-buildid-sym-{}/_.debug", hex(&padded))
        }
        "debuginfod" => format!("buildid/{}/debuginfo", hex(build_id)),
        other => panic!("unknown layout {other}"),
    };
    let path = tree.join(relative);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::copy(debug, path).unwrap();
}

#[derive(Clone)]
pub enum Serve {
    /// Files under a directory; 404 for anything else.
    Tree(PathBuf),
    /// `bytes` bytes of body for every request, announced in Content-Length or not.
    Huge { bytes: u64, announce: bool },
    /// Accepts, never answers.
    Silent,
    /// 302 to the same path on another server.
    Redirect(String),
}

/// An HTTP/1.1 server on 127.0.0.1 (one connection at a time, `Connection: close`), logging request paths.
pub struct Server {
    pub url: String,
    requests: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    pub fn start(serve: Serve) -> Server {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        listener.set_nonblocking(true).unwrap();
        let url = format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port());
        let (requests, stop) = (Arc::new(Mutex::new(Vec::new())), Arc::new(AtomicBool::new(false)));
        let (requests2, stop2) = (requests.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut held = Vec::new();
            while !stop2.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        stream.set_nonblocking(false).unwrap();
                        if let Some(stream) = respond(stream, &serve, &requests2) {
                            held.push(stream);
                        }
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Server { url, requests, stop, thread: Some(thread) }
    }

    pub fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn respond(mut stream: TcpStream, serve: &Serve, log: &Mutex<Vec<String>>) -> Option<TcpStream> {
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    // Tells a TLS ClientHello (record type 0x16) from HTTP without waiting for a line that may never come.
    let mut first = [0u8; 1];
    stream.read_exact(&mut first).ok()?;
    if first[0] != b'G' {
        log.lock().unwrap().push(format!("non-HTTP first byte {:#04x}", first[0]));
        return None;
    }
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut request_line = String::from("G");
    reader.read_line(&mut request_line).ok()?;
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).ok()? == 0 || header == "\r\n" {
            break;
        }
    }
    let path = request_line.split_whitespace().nth(1).unwrap_or("/").to_string();
    log.lock().unwrap().push(path.clone());
    match serve {
        Serve::Silent => return Some(stream),
        Serve::Tree(root) => {
            let file = root.join(path.trim_start_matches('/'));
            match (path.contains(".."), std::fs::read(&file)) {
                (false, Ok(body)) => {
                    let head =
                        format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len());
                    let _ = stream.write_all(head.as_bytes()).and_then(|_| stream.write_all(&body));
                }
                _ => {
                    let _ =
                        stream.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
                }
            }
        }
        Serve::Huge { bytes, announce } => {
            let length = if *announce { format!("Content-Length: {bytes}\r\n") } else { String::new() };
            let head = format!("HTTP/1.1 200 OK\r\n{length}Connection: close\r\n\r\n");
            if stream.write_all(head.as_bytes()).is_ok() {
                // An ELF magic first, so only the size can be the reason for refusing it.
                let mut chunk = vec![0u8; 64 << 10];
                chunk[..4].copy_from_slice(b"\x7fELF");
                let mut sent = 0;
                while sent < *bytes {
                    let n = chunk.len().min((*bytes - sent) as usize);
                    if stream.write_all(&chunk[..n]).is_err() {
                        break;
                    }
                    sent += n as u64;
                    chunk[..4].fill(0);
                }
            }
        }
        Serve::Redirect(to) => {
            let head =
                format!("HTTP/1.1 302 Found\r\nLocation: {to}{path}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
            let _ = stream.write_all(head.as_bytes());
        }
    }
    let _ = stream.flush();
    let _ = stream.shutdown(std::net::Shutdown::Write);
    // Drain what the client still sends so the close is orderly.
    let _ = stream.read(&mut [0u8; 16]);
    None
}

/// File offsets at which the functions of `lib` start, from its `.eh_frame` as binutils reads it (FDE `pc=`
/// ranges, converted from addresses with its load segments).
pub fn function_starts(lib: &Path) -> BTreeSet<u64> {
    readelf(lib, &["--debug-dump=frames"])
        .lines()
        .filter(|l| l.contains(" FDE ") && l.contains("pc="))
        .filter_map(|l| file_offset(lib, parse_hex(l.split("pc=").nth(1)?.split("..").next()?)))
        .collect()
}

/// The file offset of address `vaddr` of `binary`, from the load segments `readelf -l` lists.
pub fn file_offset(binary: &Path, vaddr: u64) -> Option<u64> {
    // LOAD  offset  vaddr  paddr  filesz  memsz  flags  align
    readelf(binary, &["-lW"])
        .lines()
        .filter(|l| l.trim_start().starts_with("LOAD"))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (parse_hex(f[1]), parse_hex(f[2]), parse_hex(f[5]))
        })
        .find(|(_, start, size)| (*start..start + size).contains(&vaddr))
        .map(|(offset, start, _)| vaddr - start + offset)
}

/// The address of the function symbol `name` in an ELF file's symbol table (`nm`).
pub fn symbol_address(file: &Path, name: &str) -> Option<u64> {
    let out = Command::new("nm").arg(file).output().expect("cannot run nm (binutils)");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.len() == 3 && f[2] == name).then(|| parse_hex(f[0]))
    })
}

fn readelf(file: &Path, args: &[&str]) -> String {
    let out = Command::new("readelf").args(args).arg(file).output().expect("cannot run readelf (binutils)");
    assert!(out.status.success(), "readelf {args:?} {} failed", file.display());
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn parse_hex(s: &str) -> u64 {
    u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap_or_else(|_| panic!("not hex: {s:?}"))
}
