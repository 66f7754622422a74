//! A CPU-bound test target with functions whose names and addresses are known, for profcpu's tests and by-hand runs.
//!
//! ```text
//! busy [--seconds S] [--work spin|syscalls] [--late-thread-ms M] [--churn-ms C]
//! ```
//! Spins (or reads /dev/zero, which keeps the CPU in the kernel) on the main thread in `busy_main_loop` /
//! `busy_syscall_loop` for S seconds (default 10) and exits; with `--late-thread-ms`, a thread created M ms after the
//! start spins in `busy_late_thread_loop` until the end; with `--churn-ms`, a new short-lived thread (spinning about
//! 10 ms) is created every C ms, so threads appear while a profiler attaches. The first line on stdout says where everything is:
//! `busy pid=… main=0x… late=0x… syscalls=0x…` (runtime addresses, so a test can match sampled IPs).

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
}

fn parse_args() -> Result<Options, String> {
    let mut opts = Options { seconds: 10.0, syscalls: false, late_thread_ms: None, churn_ms: None };
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
