#!/usr/bin/env python3
"""Recording overhead benchmark: one fixed CPU-bound workload run three ways in the same session.

  alone | under `perf record -F FREQ -g -p PID` | under `profcpu collect -freq FREQ -pid PID`

Prints each run's wall time, the slowdown against the median of the runs alone, the profiler's own CPU time
(user+sys from wait4), and the profcpu/perf ratios. Usage:

  scripts/bench-record.py [--freq 999] [--repeat 3] [--profcpu target/release/profcpu]
"""
import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

# Deterministic work with real call stacks: two threads, recursive Fibonacci plus a hashing loop, frame pointers kept
# so both profilers unwind the same way.
WORKLOAD_C = r"""
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
static uint64_t fib(int n) { return n < 2 ? (uint64_t)n : fib(n - 1) + fib(n - 2); }
static uint64_t mix(uint64_t x, long rounds) {
    for (long i = 0; i < rounds; i++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; }
    return x;
}
static void *worker(void *arg) {
    long reps = (long)arg; uint64_t acc = 0;
    for (long r = 0; r < reps; r++) { acc += fib(27); acc = mix(acc, 2000000); }
    return (void *)(uintptr_t)acc;
}
int main(int argc, char **argv) {
    long reps = argc > 1 ? atol(argv[1]) : 1500;
    int threads = argc > 2 ? atoi(argv[2]) : 2;
    pthread_t t[64];
    /* Signal readiness, then wait for a byte on stdin so the profiler is attached before the timed work starts. */
    printf("ready\n"); fflush(stdout);
    if (getchar() == EOF) return 1;
    for (int i = 0; i < threads; i++) pthread_create(&t[i], 0, worker, (void *)reps);
    for (int i = 0; i < threads; i++) pthread_join(t[i], 0);
    return 0;
}
"""


def build_workload(tmp):
    src = os.path.join(tmp, "work.c")
    exe = os.path.join(tmp, "work")
    with open(src, "w") as f:
        f.write(WORKLOAD_C)
    subprocess.run(["gcc", "-O2", "-fno-omit-frame-pointer", "-pthread", "-o", exe, src], check=True)
    return exe


def run_once(exe, args, profiler_cmd, tmp):
    """Runs the workload; if profiler_cmd is given it is started against the workload's PID first. Returns
    (workload wall seconds, workload cpu seconds, profiler cpu seconds or None)."""
    work = subprocess.Popen([exe, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert work.stdout.readline().strip() == "ready"
    prof = None
    if profiler_cmd:
        cmd = [c.replace("{pid}", str(work.pid)).replace("{tmp}", tmp) for c in profiler_cmd]
        prof = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        time.sleep(1.0)  # both profilers have opened their events well within this
        if prof.poll() is not None:
            sys.exit(f"profiler exited early: {' '.join(cmd)}\n{prof.stderr.read()}")
    start = time.monotonic()
    work.stdin.write("go\n")
    work.stdin.flush()
    _, status, work_usage = os.wait4(work.pid, 0)
    work.returncode = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - start
    # CPU time includes the sampling interrupts, which the kernel charges to the sampled task; unlike wall time it
    # does not grow when something else on the machine takes a core for a while.
    work_cpu = work_usage.ru_utime + work_usage.ru_stime
    cpu = None
    if prof:
        prof.send_signal(signal.SIGINT)
        _, status, usage = os.wait4(prof.pid, 0)
        prof.returncode = os.waitstatus_to_exitcode(status)
        cpu = usage.ru_utime + usage.ru_stime
        err = prof.stderr.read()
        if prof.returncode not in (0, -signal.SIGINT, 130):
            sys.exit(f"profiler failed ({prof.returncode}): {' '.join(cmd)}\n{err}")
    return wall, work_cpu, cpu


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--freq", type=int, default=999)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--reps", default="1500", help="workload repetitions per thread (sets the run length)")
    ap.add_argument("--threads", default="2")
    ap.add_argument("--profcpu", default="target/release/profcpu")
    args = ap.parse_args()
    if not shutil.which("perf"):
        sys.exit("perf not found: install Debian's linux-perf (scripts/setup-deps.sh)")
    if not os.access(args.profcpu, os.X_OK):
        sys.exit(f"{args.profcpu} not found: build it with 'cargo build --release'")

    with tempfile.TemporaryDirectory() as tmp:
        exe = build_workload(tmp)
        wargs = [args.reps, args.threads]
        ways = {
            "alone": None,
            "perf": ["perf", "record", "-q", "-F", str(args.freq), "-g", "-o", "{tmp}/perf-{pid}.data", "-p", "{pid}"],
            "profcpu": [args.profcpu, "collect", "-freq", str(args.freq), "-pid", "{pid}", "-duration", "3600",
                        "-output", "{tmp}/profcpu-{pid}"],
        }
        results = {k: [] for k in ways}
        # Interleave the ways so drift in machine load hits all of them alike.
        for _ in range(args.repeat):
            for name, cmd in ways.items():
                results[name].append(run_once(exe, wargs, cmd, tmp))

    base_wall = statistics.median(w for w, _, _ in results["alone"])
    base_cpu = statistics.median(c for _, c, _ in results["alone"])
    print(f"workload: {args.threads} threads x {args.reps} reps, {args.freq} Hz, {args.repeat} runs each, medians")
    print(f"{'way':<8} {'wall s':>7} {'slowdown':>9} {'work cpu s':>10} {'slowdown':>9} {'profiler cpu s':>15}"
          "   (each run's wall s)")
    summary = {}
    for name, runs in results.items():
        wall = statistics.median(w for w, _, _ in runs)
        work_cpu = statistics.median(c for _, c, _ in runs)
        prof = [p for _, _, p in runs if p is not None]
        prof_cpu = statistics.median(prof) if prof else None
        slow_wall = (wall / base_wall - 1) * 100
        slow_cpu = (work_cpu / base_cpu - 1) * 100
        summary[name] = (slow_wall, slow_cpu, prof_cpu)
        runs_text = " ".join(f"{w:.2f}" for w, _, _ in runs)
        prof_text = "-" if prof_cpu is None else f"{prof_cpu:.3f}"
        print(f"{name:<8} {wall:7.3f} {slow_wall:8.2f}% {work_cpu:10.3f} {slow_cpu:8.2f}% {prof_text:>15}"
              f"   runs: {runs_text}")
    p_wall, p_cpu, p_prof = summary["perf"]
    q_wall, q_cpu, q_prof = summary["profcpu"]
    print(f"profcpu vs perf: workload cpu slowdown {q_cpu:.2f}% vs {p_cpu:.2f}%, wall slowdown {q_wall:.2f}% vs "
          f"{p_wall:.2f}%, profiler's own cpu ratio {q_prof / p_prof:.3f}")


if __name__ == "__main__":
    main()
