//! Naming parity with the reference pipeline on real data: `tests/data/report/real-perf-6.1.perf_script.txt` is
//! `perf script -F comm,pid,tid,cpu,time,period,event,ip,sym,symoff,dso` output of Debian's perf 6.1 for a
//! system-wide recording on this machine kind (node with `--perf-basic-prof`, a .NET 3.1 app, Rust test
//! binaries, perf itself, kernel threads). Read back into samples the way perf named them, our folded stacks must
//! equal what `inferno-collapse-perf` makes of perf's own text, and of ours.

mod support;

use profcpu::report::Weight;
use profcpu::symbolize::{Frame, FrameKind, ResolvedSample};
use std::collections::HashMap;
use std::sync::Arc;
use support::inferno;
use support::report::render_weighted;

const DATA: &str = include_str!("data/report/real-perf-6.1.perf_script.txt");

/// Reads perf's text into samples, sharing names like the symbolizer does. Frames perf could not name keep its
/// `[unknown]` as their symbol, so they are named as perf names them.
fn parse(text: &str) -> Vec<ResolvedSample> {
    let mut names: HashMap<String, Arc<str>> = HashMap::new();
    let mut intern = |s: &str| names.entry(s.to_string()).or_insert_with(|| Arc::from(s)).clone();
    let mut samples = Vec::new();
    for block in text.split("\n\n").filter(|b| !b.trim().is_empty()) {
        let mut lines = block.lines();
        let header = lines.next().unwrap();
        let (comm, rest) = header.split_once(' ').unwrap();
        let mut fields = rest.split_whitespace();
        let (pid, tid) = fields.next().unwrap().split_once('/').unwrap();
        let cpu = fields.next().unwrap().trim_matches(['[', ']']).parse().unwrap();
        let (secs, micros) = fields.next().unwrap().trim_end_matches(':').split_once('.').unwrap();
        let period = fields.next().unwrap().parse().unwrap();
        let event = fields.next().unwrap().trim_end_matches(':');
        let frames = lines
            .map(|line| {
                let line = line.trim_start();
                let (addr, rest) = line.split_once(' ').unwrap();
                let (symbol, module) = rest.rsplit_once(" (").unwrap();
                let module = module.strip_suffix(')').unwrap();
                let (symbol, offset) = match symbol.rsplit_once("+0x") {
                    Some((s, off)) if symbol != "[unknown]" => (s, u64::from_str_radix(off, 16).unwrap()),
                    _ => (symbol, 0),
                };
                let kind = match module {
                    "[kernel.kallsyms]" => FrameKind::Kernel,
                    "[unknown]" => FrameKind::Unknown,
                    m if m.starts_with("/tmp/perf-") => FrameKind::Jit,
                    _ => FrameKind::Native,
                };
                Frame::new(u64::from_str_radix(addr, 16).unwrap(), Some(intern(symbol)), offset, intern(module), kind)
            })
            .collect();
        samples.push(ResolvedSample {
            pid: pid.parse().unwrap(),
            tid: tid.parse().unwrap(),
            cpu,
            time: secs.parse::<u64>().unwrap() * 1_000_000_000 + micros.parse::<u64>().unwrap() * 1000,
            period,
            off_cpu: None,
            comm: intern(comm),
            event: intern(event),
            frames,
        });
    }
    samples
}

#[test]
fn our_folded_stacks_equal_inferno_on_perfs_own_output() {
    let samples = parse(DATA);
    assert_eq!(samples.len(), 131);
    assert!(samples.iter().any(|s| s.frames.iter().any(|f| f.kind() == FrameKind::Jit)));
    assert!(samples.iter().any(|s| s.frames.iter().any(|f| f.kind() == FrameKind::Kernel)));

    let rendered = render_weighted(&samples, Weight::Period);
    let ours = rendered.folded();
    assert_eq!(ours, inferno::collapse(DATA, 1), "perf script | inferno-collapse-perf differs from ours");
    assert_eq!(inferno::collapse(&rendered.script, 1), ours, "inferno-collapse-perf of our perf_script.out differs");
    assert!(ours.contains(";JS:*fib /tmp/ptest/fib.js:1:13;JS:*fib"), "{ours}");
}
