#!/usr/bin/env python3
"""Off-CPU recording overhead: a context-switch-heavy workload run alone and under each recorder in the same session.

Workload: two threads ping-ponging a counter through one mutex and condition variable (every turn switches both
threads: several hundred thousand switches/s alone), built with gcc's defaults (no frame pointers, as distribution
code is). It runs from the start; each recorder attaches to the running process, as users attach to a service.

  alone | perf record -e sched:sched_switch -g -p PID | profcpu collect -mode offcpu -pid PID [-call-graph MODE]...

Each way is run --repeat times, interleaved so that drift in machine load hits all alike. A run measures, over a
window of --seconds while recorded: turns per second (slowdown: how much longer a turn takes than alone, medians),
the workload's CPU time per turn (the kernel does the events' work in the switching threads, so this grows by what
recording costs them, and is steadier than throughput on a loaded machine), context switches per second (/proc),
the recorder's own CPU time in the window (/proc/PID/stat: not what profcpu does after it stops, writing its
outputs), lost records (perf: `perf report --stats`; profcpu: its summary line)
and the perf.data size; then ratios against perf. Usage:

  scripts/bench-offcpu.py [--seconds 5] [--repeat 3] [--work 0] [--profcpu target/release/profcpu]
                          [--call-graph auto fp]
"""
import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

WORKLOAD_C = r"""
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t turned = PTHREAD_COND_INITIALIZER;
static volatile long turn;
static long work;
static volatile long sink;
static void *player(void *arg) {
    long me = (long)arg;
    pthread_mutex_lock(&lock);
    for (;;) {
        while (turn % 2 != me) pthread_cond_wait(&turned, &lock);
        for (long i = 0; i < work; i++) sink += i;
        turn++;
        pthread_cond_broadcast(&turned);
    }
    return 0;
}
int main(int argc, char **argv) {
    work = argc > 1 ? atol(argv[1]) : 0;
    pthread_t t[2];
    for (long i = 0; i < 2; i++) pthread_create(&t[i], 0, player, (void *)i);
    printf("ready\n"); fflush(stdout);
    /* Each line on stdin: print the turns so far and the time (the measured window's ends). */
    char line[16];
    while (fgets(line, sizeof line, stdin)) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        printf("%ld %.6f\n", turn, now.tv_sec + now.tv_nsec / 1e9);
        fflush(stdout);
    }
    return 0;
}
"""


def build_workload(tmp):
    src, exe = os.path.join(tmp, "pingpong.c"), os.path.join(tmp, "pingpong")
    with open(src, "w") as f:
        f.write(WORKLOAD_C)
    subprocess.run(["gcc", "-O2", "-pthread", "-o", exe, src], check=True)
    return exe


def switches_of(pid):
    """Context switches of all threads of a process so far (voluntary + involuntary, from /proc)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                for line in f:
                    if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total


def cpu_seconds(pid):
    """User + system CPU time of a process so far (/proc/PID/stat fields 14 and 15)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def mark(work):
    work.stdin.write("m\n")
    work.stdin.flush()
    turns, when = work.stdout.readline().split()
    return int(turns), float(when)


def run_once(exe, args, name, cmd, tmp):
    """Returns (turns/s, switches/s, recorder cpu s in the window, lost, perf.data bytes) of one measured window."""
    work = subprocess.Popen([exe, str(args.work)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert work.stdout.readline().strip() == "ready"
        prof, out = None, os.path.join(tmp, f"{name}-{work.pid}")
        time.sleep(0.5)
        if cmd:
            cmd = [c.replace("{pid}", str(work.pid)).replace("{out}", out) for c in cmd]
            prof = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            time.sleep(2.0)  # both recorders have opened their events well within this
            if prof.poll() is not None:
                sys.exit(f"recorder exited early: {' '.join(cmd)}\n{prof.stderr.read()}")
        (turns0, t0), switches0, work0 = mark(work), switches_of(work.pid), cpu_seconds(work.pid)
        cpu0 = cpu_seconds(prof.pid) if prof else None
        time.sleep(args.seconds)
        (turns1, t1), switches1, work1 = mark(work), switches_of(work.pid), cpu_seconds(work.pid)
        # The recorder's CPU time while it recorded (not what it does after: profcpu then writes its outputs).
        cpu = cpu_seconds(prof.pid) - cpu0 if prof else None
        lost, size = 0, 0
        if prof:
            prof.send_signal(signal.SIGINT)
            os.wait4(prof.pid, 0)
            stdout, stderr = prof.stdout.read(), prof.stderr.read()
            if name == "perf":
                data = out
                stats = subprocess.run(["perf", "report", "-i", data, "--stats"], capture_output=True, text=True)
                for kind in ("LOST", "LOST_SAMPLES"):
                    m = re.search(rf"{kind} events:\s+(\d+)", stats.stdout)
                    lost += int(m.group(1)) if m else 0
            else:
                m = re.search(r"\((\d+) lost\)", stderr)
                if not m:
                    sys.exit(f"no summary line from profcpu:\n{stderr}")
                lost = int(m.group(1))
                data = os.path.join(stdout.strip().splitlines()[-1], "perf.data")
                notices = [l for l in stderr.splitlines() if "warning" in l]
                if notices:
                    print(f"  ({name}: {' / '.join(notices)})")
            size = os.path.getsize(data)
            shutil.rmtree(out, ignore_errors=True) if os.path.isdir(out) else os.remove(out)
        turns = turns1 - turns0
        return turns / (t1 - t0), (switches1 - switches0) / (t1 - t0), cpu, lost, size, (work1 - work0) / turns * 1e6
    finally:
        work.kill()
        work.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=5.0, help="the measured window of each run")
    ap.add_argument("--work", type=int, default=0, help="loop iterations per turn (lowers the switch rate)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--profcpu", default="target/release/profcpu")
    ap.add_argument("--call-graph", nargs="+", default=["auto"], help="profcpu -call-graph modes to run")
    ap.add_argument("--mmap-pages", nargs="+", default=[], help="also run profcpu -call-graph fp with these ring sizes")
    args = ap.parse_args()
    if not shutil.which("perf"):
        sys.exit("perf not found: install Debian's linux-perf (scripts/setup-deps.sh)")
    if not os.access(args.profcpu, os.X_OK):
        sys.exit(f"{args.profcpu} not found: build it with 'cargo build --release'")
    ways = {
        "alone": None,
        "perf": ["perf", "record", "-q", "-e", "sched:sched_switch", "-g", "-o", "{out}", "-p", "{pid}"],
    }
    for mode in args.call_graph:
        ways[f"profcpu {mode}"] = [args.profcpu, "collect", "-mode", "offcpu", "-call-graph", mode, "-pid", "{pid}",
                                   "-duration", "3600", "-output", "{out}"]
    for pages in args.mmap_pages:
        ways[f"profcpu fp/{pages}"] = [args.profcpu, "collect", "-mode", "offcpu", "-call-graph", "fp", "-mmap-pages",
                                       pages, "-pid", "{pid}", "-duration", "3600", "-output", "{out}"]
    with tempfile.TemporaryDirectory() as tmp:
        exe = build_workload(tmp)
        results = {k: [] for k in ways}
        for _ in range(args.repeat):
            for name, cmd in ways.items():
                results[name].append(run_once(exe, args, name.split()[0], cmd, tmp))

    base = statistics.median(r[0] for r in results["alone"])
    print(f"workload: 2 threads ping-ponging ({args.work} loop iterations a turn), {args.seconds:.0f} s measured while "
          f"recorded, {args.repeat} runs each, medians")
    base_cpu = statistics.median(r[5] for r in results["alone"])
    print(f"{'way':<14} {'turns/s':>9} {'slowdown':>9} {'cpu µs/turn':>12} {'cpu cost':>9} {'switches/s':>11} "
          f"{'recorder cpu':>13} {'lost':>8} {'perf.data MB':>13}   (each run's turns/s)")
    summary = {}
    for name, runs in results.items():
        turns = statistics.median(r[0] for r in runs)
        per_turn = statistics.median(r[5] for r in runs)
        # The workload's own CPU time per turn grows by what recording costs inside its switches (the kernel runs the
        # events' work in the switching task): steadier than throughput on a machine others load.
        cost = (per_turn / base_cpu - 1) * 100
        rate = statistics.median(r[1] for r in runs)
        cpus = [r[2] for r in runs if r[2] is not None]
        cpu = statistics.median(cpus) / args.seconds * 100 if cpus else None
        lost = max(r[3] for r in runs)
        size = statistics.median(r[4] for r in runs) / 1e6
        # How much longer a turn takes while recorded.
        slow = (base / turns - 1) * 100
        summary[name] = (slow, cpu, lost, size, cost)
        cpu_text = "-" if cpu is None else f"{cpu:.0f}% of a CPU"
        runs_text = " ".join(f"{r[0]:.0f}" for r in runs)
        print(f"{name:<14} {turns:9.0f} {slow:8.1f}% {per_turn:12.2f} {cost:8.1f}% {rate:11.0f} {cpu_text:>13} "
              f"{lost:8d} {size:13.1f}   {runs_text}")
    p_slow, p_cpu, p_lost, p_size, p_cost = summary["perf"]
    for name in [n for n in ways if n.startswith("profcpu")]:
        q_slow, q_cpu, q_lost, q_size, q_cost = summary[name]
        print(f"{name} vs perf -g: slowdown {q_slow:.1f}% vs {p_slow:.1f}% (ratio {(100 + q_slow) / (100 + p_slow):.2f}),"
              f" cpu cost per turn {q_cost:.1f}% vs {p_cost:.1f}% (ratio {(100 + q_cost) / (100 + p_cost):.2f}),"
              f" recorder cpu ratio {q_cpu / max(p_cpu, 1e-9):.2f}, lost {q_lost} vs {p_lost}, perf.data "
              f"{q_size / p_size:.2f}x")


if __name__ == "__main__":
    main()
