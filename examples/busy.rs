//! A CPU-bound test target with functions whose names and addresses are known, for profcpu's tests and by-hand runs.
//!
//! ```text
//! busy [--seconds S] [--work spin|syscalls] [--late-thread-ms M] [--churn-ms C]
//!      [--jit-map-lines N [--jit-name-bytes B]]
//! ```
//! Spins (or reads /dev/zero, which keeps the CPU in the kernel) on the main thread in `busy_main_loop` /
//! `busy_syscall_loop` for S seconds (default 10) and exits; with `--late-thread-ms`, a thread created M ms after the
//! start spins in `busy_late_thread_loop` until the end; with `--churn-ms`, a new short-lived thread (spinning about
//! 10 ms) is created every C ms, so threads appear while a profiler attaches. The first line on stdout says where everything is:
//! `busy pid=… main=0x… late=0x… syscalls=0x…` (runtime addresses, so a test can match sampled IPs).
//!
//! With `--jit-map-lines N`, it also acts like a JIT runtime: a thread spins in code copied into anonymous
//! executable memory, and `/tmp/perf-PID.map` gets N lines — the first names that code (with a name of B bytes,
//! `--jit-name-bytes`), the others name code that is never run — written before the first line is printed.

use std::hint::black_box;
use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

static STOP: AtomicBool = AtomicBool::new(false);

/// One chunk of pure computation: no calls, so a sample taken here has its IP inside the caller's loop body.
#[inline(always)]
fn churn(mut x: u64) -> u64 {
    for _ in 0..200_000 {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        x ^= x >> 17;
    }
    x
}

#[no_mangle]
#[inline(never)]
pub extern "C" fn busy_main_loop() -> u64 {
    let mut x = 1;
    while !STOP.load(Ordering::Relaxed) {
        x = black_box(churn(x));
    }
    x
}

#[no_mangle]
#[inline(never)]
pub extern "C" fn busy_late_thread_loop() -> u64 {
    let mut x = 7;
    while !STOP.load(Ordering::Relaxed) {
        x = black_box(churn(x));
    }
    x
}

/// Reads /dev/zero in large chunks: the time goes to the kernel's read path (clearing user memory).
#[no_mangle]
#[inline(never)]
pub extern "C" fn busy_syscall_loop() -> u64 {
    let mut zero = std::fs::File::open("/dev/zero").expect("open /dev/zero");
    let mut buf = vec![1u8; 1 << 20];
    let mut total = 0u64;
    while !STOP.load(Ordering::Relaxed) {
        total += zero.read(&mut buf).expect("read /dev/zero") as u64;
        black_box(&buf);
    }
    total
}

/// Spins for about `ms` milliseconds (checking the clock only between chunks of work).
#[no_mangle]
#[inline(never)]
pub extern "C" fn busy_short_thread(ms: u64) -> u64 {
    let end = std::time::Instant::now() + Duration::from_millis(ms);
    let mut x = 3;
    while std::time::Instant::now() < end && !STOP.load(Ordering::Relaxed) {
        x = black_box(churn(x));
    }
    x
}

struct Options {
    seconds: f64,
    syscalls: bool,
    late_thread_ms: Option<u64>,
    churn_ms: Option<u64>,
    jit_map_lines: usize,
    jit_name_bytes: usize,
}

extern "C" {
    fn mmap(addr: *mut u8, len: usize, prot: i32, flags: i32, fd: i32, offset: i64) -> *mut u8;
}

/// An endless loop as machine code: `pause; jmp back` (x86-64) or `b .` (AArch64).
#[cfg(target_arch = "x86_64")]
const SPIN_CODE: &[u8] = &[0xF3, 0x90, 0xEB, 0xFC];
#[cfg(target_arch = "aarch64")]
const SPIN_CODE: &[u8] = &[0x00, 0x00, 0x00, 0x14];

/// Copies the spin loop into fresh anonymous executable memory (where a JIT puts its code) and returns its address.
fn jit_spin_code() -> usize {
    const PROT_RWX: i32 = 1 | 2 | 4;
    const MAP_PRIVATE_ANONYMOUS: i32 = 0x02 | 0x20;
    // SAFETY: a new private anonymous mapping of one page; nothing else refers to it.
    let code = unsafe { mmap(std::ptr::null_mut(), 4096, PROT_RWX, MAP_PRIVATE_ANONYMOUS, -1, 0) };
    assert!(!code.is_null() && code as isize != -1, "mmap of executable memory failed");
    // SAFETY: the mapping is 4096 writable bytes; the loop is a few.
    unsafe { std::ptr::copy_nonoverlapping(SPIN_CODE.as_ptr(), code, SPIN_CODE.len()) };
    code as usize
}

/// Writes `/tmp/perf-PID.map` as a JIT would: the spin loop first, then `lines - 1` entries for code never run.
fn write_perf_map(spin: usize, lines: usize, name_bytes: usize) {
    let path = format!("/tmp/perf-{}.map", std::process::id());
    let mut out = std::io::BufWriter::new(std::fs::File::create(&path).expect("create the perf map"));
    let mut name = String::from("[jit] spin_loop");
    while name.len() < name_bytes {
        name.push('x');
    }
    writeln!(out, "{spin:x} {:x} {name}", SPIN_CODE.len()).unwrap();
    for i in 1..lines {
        // Far above the spin loop's page, in 16-byte steps, as a JIT's code heap fills up.
        writeln!(out, "{:x} 10 [jit] Filler::Method{i}(int32)[OptimizedTier1]", 0x6000_0000_0000usize + i * 16)
            .unwrap();
    }
    out.flush().expect("write the perf map");
}

fn parse_args() -> Result<Options, String> {
    let mut opts = Options {
        seconds: 10.0,
        syscalls: false,
        late_thread_ms: None,
        churn_ms: None,
        jit_map_lines: 0,
        jit_name_bytes: 0,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or(format!("{name} needs a value"));
        match arg.as_str() {
            "--seconds" => opts.seconds = value("--seconds")?.parse().map_err(|e| format!("--seconds: {e}"))?,
            "--work" => {
                opts.syscalls = match value("--work")?.as_str() {
                    "spin" => false,
                    "syscalls" => true,
                    other => return Err(format!("--work must be spin or syscalls, not {other}")),
                }
            }
            "--late-thread-ms" => {
                opts.late_thread_ms =
                    Some(value("--late-thread-ms")?.parse().map_err(|e| format!("--late-thread-ms: {e}"))?)
            }
            "--churn-ms" => opts.churn_ms = Some(value("--churn-ms")?.parse().map_err(|e| format!("--churn-ms: {e}"))?),
            "--jit-map-lines" => {
                opts.jit_map_lines = value("--jit-map-lines")?.parse().map_err(|e| format!("--jit-map-lines: {e}"))?
            }
            "--jit-name-bytes" => {
                opts.jit_name_bytes =
                    value("--jit-name-bytes")?.parse().map_err(|e| format!("--jit-name-bytes: {e}"))?
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(opts)
}

fn main() {
    let opts = match parse_args() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("busy: {e}");
            std::process::exit(2);
        }
    };
    if opts.jit_map_lines > 0 {
        let spin = jit_spin_code();
        write_perf_map(spin, opts.jit_map_lines, opts.jit_name_bytes);
        std::thread::Builder::new()
            .name("busy-jit".into())
            .spawn(move || {
                // SAFETY: `spin` holds a complete endless loop; the thread ends with the process.
                let run: extern "C" fn() = unsafe { std::mem::transmute(spin) };
                run()
            })
            .expect("spawn the JIT thread");
    }
    println!(
        "busy pid={} main={:#x} late={:#x} syscalls={:#x}",
        std::process::id(),
        busy_main_loop as *const () as usize,
        busy_late_thread_loop as *const () as usize,
        busy_syscall_loop as *const () as usize
    );
    let _ = std::io::stdout().flush();

    let seconds = opts.seconds;
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs_f64(seconds));
        STOP.store(true, Ordering::Relaxed);
    });
    let late = opts.late_thread_ms.map(|ms| {
        // The spinning thread is created only after the delay, so a profiler attached at the start must pick it
        // up as a new thread.
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(ms));
            if STOP.load(Ordering::Relaxed) {
                return 0;
            }
            std::thread::Builder::new()
                .name("busy-late".into())
                .spawn(|| busy_late_thread_loop())
                .expect("spawn the late thread")
                .join()
                .unwrap_or(0)
        })
    });
    if let Some(every) = opts.churn_ms {
        std::thread::spawn(move || {
            while !STOP.load(Ordering::Relaxed) {
                std::thread::spawn(|| busy_short_thread(10));
                std::thread::sleep(Duration::from_millis(every.max(1)));
            }
        });
    }
    let result = if opts.syscalls { busy_syscall_loop() } else { busy_main_loop() };
    if let Some(late) = late {
        black_box(late.join().unwrap_or(0));
    }
    black_box(result);
}
