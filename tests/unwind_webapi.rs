//! The sample web API on .NET 8 under load, recorded once with the default stack copies (kept in perf.data:
//! `-keep-stack-copies`) and named twice: from the stack copies, and from the kernel's frame-pointer chains alone (`postprocess -ignore-stack-copies`). Sample by
//! sample, no stack is shorter with the copies, and more stacks reach their thread's start (libc's `start_thread`,
//! or `__libc_start_main` for the main thread).

mod support;

use std::process::Command;
use std::time::Duration;
use support::running_app::exclusive;
use support::scratch::Scratch;
use support::unwind::UNWIND_STOPPED;
use support::webapi::{collect_args, run_collect, Api, Load, Profile, Sample};
use support::{profcpu::postprocess_ok, PROFCPU};

const SECONDS: u32 = 6;

/// User and kernel frames, without the marker of a walk cut short.
fn depth(s: &Sample) -> usize {
    s.frames.iter().filter(|f| f.symbol != UNWIND_STOPPED).count()
}

/// A frame of libc's thread start (`start_thread`, called by `clone3`) or process start (`__libc_start_main`,
/// called by `_start`): the stack is whole down to where its thread began.
fn reaches_thread_start(s: &Sample) -> bool {
    let starts = ["start_thread", "clone3", "__libc_start_main", "_start"];
    s.frames.iter().any(|f| starts.contains(&f.symbol.as_str()))
}

#[test]
fn stack_copies_never_shorten_a_stack_and_reach_thread_starts_more_often() {
    let _cpu = exclusive();
    let work = Scratch::new("unwind-webapi");
    let api = Api::on_host(&work);
    let _cpu_load = Load::start(&api, "/cpu", 40, 2);
    let _format_load = Load::start(&api, "/format", 40, 2);
    std::thread::sleep(Duration::from_secs(3));
    let mut cmd = Command::new(PROFCPU);
    cmd.args(collect_args(api.host_pid(), SECONDS, &work.join("profilings"))).arg("-keep-stack-copies");
    let run = run_collect(cmd, SECONDS, &work);
    assert!(!run.log.contains("warning"), "{}", run.log);
    let copies = Profile::read(&run.dir);
    assert!(copies.samples.len() >= 300, "only {} samples:\n{}", copies.samples.len(), run.log);

    postprocess_ok(&run.dir, &["-ignore-stack-copies"]);
    let fp = Profile::read(&run.dir);
    assert_eq!(fp.samples.len(), copies.samples.len());

    let mut shorter = Vec::new();
    for (c, f) in copies.samples.iter().zip(&fp.samples) {
        assert_eq!((c.tid, c.comm.as_str()), (f.tid, f.comm.as_str()), "the two namings are not in the same order");
        if depth(c) < depth(f) {
            shorter.push((c, f));
        }
    }
    if let Some((c, f)) = shorter.first() {
        panic!(
            "{} of {} stacks are shorter with stack copies, e.g.\ncopies: {:#?}\nframe pointers: {:#?}",
            shorter.len(),
            copies.samples.len(),
            c.frames,
            f.frames
        );
    }
    let (with, without) = (copies.share(reaches_thread_start), fp.share(reaches_thread_start));
    // Frame pointers end at start_thread (its caller, clone3, keeps none): the root frame shows the difference.
    let rooted = |s: &Sample| s.frames.last().is_some_and(|f| f.symbol == "clone3" || f.symbol == "_start");
    let (rooted_with, rooted_without) = (copies.share(rooted), fp.share(rooted));
    eprintln!(
        "stacks reaching their thread's start: {:.1}% with stack copies, {:.1}% with frame pointers alone; ending at \
         clone3/_start: {:.1}% and {:.1}%",
        with * 100.0,
        without * 100.0,
        rooted_with * 100.0,
        rooted_without * 100.0
    );
    assert!(with >= without && with >= 0.95, "{:.1}% vs {:.1}%", with * 100.0, without * 100.0);
    assert!(rooted_with >= 0.95 && rooted_with > rooted_without, "{rooted_with} vs {rooted_without}");
}
