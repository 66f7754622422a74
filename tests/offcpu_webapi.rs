//! The experiment that showed `dotnet-trace`'s sampler counting blocked threads, on the sample web API on .NET 8:
//! `/wait` blocks each request 100 ms off the CPU (`Task.Delay(100).Wait()`), `/burn` spends 100 ms of CPU on it,
//! 5 concurrent clients on each, through `examples/webapi/load.sh` (wrk). One API under that load is profiled three
//! ways with the profcpu binary (`-pid`): on the CPU the waiting route is next to nothing; off the CPU its handler's
//! blocking stack — through libc's futex wait to the managed caller, by the stack copies — holds the request
//! threads' blocked time; by the wall clock the two handlers share the request threads' time as the load generator
//! measured their requests' times.

mod support;

use std::process::Command;
use std::time::Duration;
use support::offcpu::{metadata_value, stacks, weight, Stack};
use support::running_app::exclusive;
use support::scratch::Scratch;
use support::webapi::{collect_args, run_collect, Api, Load, Profile};
use support::PROFCPU;

/// Seconds each collection samples.
const SECONDS: u32 = 4;
/// Load runs this long before sampling starts: the runtime compiles the routes' methods at the first requests.
const WARM_UP: Duration = Duration::from_secs(3);
const CONNECTIONS: u32 = 5;
const WAITING: &str = "WaitHandler::Handle";
const BURNING: &str = "BurnHandler::Handle";
/// The web API's request threads.
const REQUEST_THREAD: &str = "http-conn";

fn collect(api: &Api, mode: &str, work: &Scratch) -> Profile {
    let mut args = collect_args(api.host_pid(), SECONDS, &work.join(format!("out-{mode}")));
    args.extend(["-mode".to_string(), mode.to_string()]);
    let mut cmd = Command::new(PROFCPU);
    cmd.args(args);
    let profile = run_collect(cmd, SECONDS, work);
    assert_eq!(metadata_value(&profile.dir, "mode"), mode);
    profile
}

#[test]
fn a_waiting_route_is_off_cpu_and_shares_the_wall_clock_as_measured() {
    let _cpu = exclusive();
    let work = Scratch::new("offcpu-webapi");
    let api = Api::on_host(&work);
    // Three collections and their outputs fit in this.
    let seconds = WARM_UP.as_secs() as u32 + 3 * (SECONDS + 6);
    let waits = Load::start(&api, "wait", seconds, CONNECTIONS);
    let burns = Load::start(&api, "burn", seconds, CONNECTIONS);
    std::thread::sleep(WARM_UP);
    let on_cpu = collect(&api, "cpu", &work);
    let off_cpu = collect(&api, "offcpu", &work);
    let wall = collect(&api, "wall", &work);
    let (waited, burned) = (waits.finish(), burns.finish());
    assert!(waited.requests > 50 && waited.errors == 0, "/wait: {waited:?}");
    assert!(burned.requests > 10 && burned.errors == 0, "/burn: {burned:?}");

    // On the CPU, the waiting route is next to nothing.
    let waiting_share = on_cpu.share(|s| s.has_frame(WAITING));
    let burning_share = on_cpu.share(|s| s.has_frame(BURNING));
    assert!(
        waiting_share < 0.02 && burning_share > 0.5,
        "on-CPU: {WAITING} in {:.2}% of the samples, {BURNING} in {:.1}%; {}",
        waiting_share * 100.0,
        burning_share * 100.0,
        on_cpu.describe()
    );

    // Off the CPU, the request threads' blocked time: the waiting handler's stack is on top, and it reaches from
    // the futex wait in libc through the runtime's wait to the handler and the thread's start.
    let blocked: Vec<Stack> =
        stacks(&off_cpu.folded).into_iter().filter(|s| s.thread() == REQUEST_THREAD && !s.runnable()).collect();
    let total_blocked = weight(&blocked, |_| true);
    let top = blocked.iter().max_by_key(|s| s.weight).expect("no blocked request thread");
    let waiting_blocked = weight(&blocked, |s| s.has_part(WAITING));
    assert!(
        top.has_part(WAITING) && top.has_part("__futex_abstimed_wait") && top.has("clone3"),
        "the request threads' heaviest blocked stack ({} µs of {total_blocked} µs) is not the waiting handler's \
         from the futex to the thread start: {}",
        top.weight,
        top.frames.join(";")
    );
    assert!(
        waiting_blocked as f64 >= 0.5 * total_blocked as f64,
        "{WAITING} holds {waiting_blocked} µs of the request threads' {total_blocked} µs blocked"
    );

    // By the wall clock, the handlers' shares of the request threads' time are those of the requests' times the
    // load generator measured (±10 points).
    let threads: Vec<Stack> = stacks(&wall.folded).into_iter().filter(|s| s.thread() == REQUEST_THREAD).collect();
    let in_waiting = weight(&threads, |s| s.has_part(WAITING)) as f64;
    let in_burning = weight(&threads, |s| s.has_part(BURNING)) as f64;
    let all = weight(&threads, |_| true) as f64;
    let profiled = in_waiting / (in_waiting + in_burning);
    let (wait_time, burn_time) =
        (waited.requests as f64 * waited.latency_ms, burned.requests as f64 * burned.latency_ms);
    let measured = wait_time / (wait_time + burn_time);
    println!(
        "on-CPU: {WAITING} {:.2}%, {BURNING} {:.1}% of samples; off-CPU: {WAITING} {:.1}% of the request threads' \
         blocked time; wall: {WAITING} {:.1}% of the handlers' time ({:.1}% of the request threads'), the load \
         generator {:.1}% ({} × {:.1} ms /wait, {} × {:.1} ms /burn)",
        waiting_share * 100.0,
        burning_share * 100.0,
        waiting_blocked as f64 * 100.0 / total_blocked as f64,
        profiled * 100.0,
        (in_waiting + in_burning) * 100.0 / all,
        measured * 100.0,
        waited.requests,
        waited.latency_ms,
        burned.requests,
        burned.latency_ms
    );
    assert!(
        (profiled - measured).abs() <= 0.10,
        "wall clock: {WAITING} has {:.1}% of the handlers' time, the load generator measured {:.1}% of the request \
         time on /wait",
        profiled * 100.0,
        measured * 100.0
    );
    assert!((in_waiting + in_burning) >= 0.8 * all, "the handlers hold only {in_waiting} + {in_burning} of {all} µs");
}
