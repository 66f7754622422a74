#!/usr/bin/env python3
"""Off-CPU recording overhead: a context-switch-heavy workload run alone and under each recorder in the same session.

Workload: two threads ping-ponging a counter through one mutex and condition variable (every turn switches both
threads: several hundred thousand switches/s alone), built with gcc's defaults (no frame pointers, as distribution
code is). It waits for a line on stdin before it starts, so every recorder is attached first.

  alone | perf record -e sched:sched_switch -g -p PID | profcpu collect -mode offcpu -pid PID [-call-graph MODE]...

Each is run --repeat times, interleaved so that drift in machine load hits all alike. Per way: the workload's wall
time and slowdown against the median alone, switches per second, the recorder's own CPU time while recording
(user+sys, from /proc when the workload ends), lost records (perf: `perf report --stats`; profcpu: its summary
line), perf.data size; then ratios. Usage:

  scripts/bench-offcpu.py [--rounds 300000] [--repeat 3] [--profcpu target/release/profcpu] [--call-graph auto fp]
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
#include <time.h>
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t turned = PTHREAD_COND_INITIALIZER;
static long turn, rounds, work;
static volatile long sink;
static void *player(void *arg) {
    long me = (long)arg;
    pthread_mutex_lock(&lock);
    for (;;) {
        while (turn % 2 != me && turn < rounds) pthread_cond_wait(&turned, &lock);
        if (turn >= rounds) break;
        for (long i = 0; i < work; i++) sink += i;
        turn++;
        pthread_cond_broadcast(&turned);
    }
    pthread_mutex_unlock(&lock);
    return 0;
}
int main(int argc, char **argv) {
    rounds = argc > 1 ? atol(argv[1]) : 300000;
    work = argc > 2 ? atol(argv[2]) : 0;
    printf("ready\n"); fflush(stdout);
    if (getchar() == EOF) return 1;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    pthread_t t[2];
    for (long i = 0; i < 2; i++) pthread_create(&t[i], 0, player, (void *)i);
    for (int i = 0; i < 2; i++) pthread_join(t[i], 0);
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("%.6f\n", (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9);
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


def run_once(exe, rounds, name, cmd, tmp):
    """Returns (workload seconds, switches/s, recorder cpu s, lost, perf.data bytes)."""
    work = subprocess.Popen([exe, str(rounds), str(args_work)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert work.stdout.readline().strip() == "ready"
    prof, out = None, os.path.join(tmp, f"{name}-{work.pid}")
    if cmd:
        cmd = [c.replace("{pid}", str(work.pid)).replace("{out}", out) for c in cmd]
        prof = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(1.5)  # both recorders have opened their events well within this
        if prof.poll() is not None:
            sys.exit(f"recorder exited early: {' '.join(cmd)}\n{prof.stderr.read()}")
    # The workload's threads are created after "go"; count its switches by sampling /proc just before it ends.
    work.stdin.write("go\n")
    work.stdin.flush()
    last, seconds = 0, None
    while work.poll() is None:
        last = max(last, switches_of(work.pid))
        time.sleep(0.05)
    seconds = float(work.stdout.read().split()[-1])
    lost, size = 0, 0
    cpu = None
    if prof:
        # The recorder's CPU time while it recorded (not what it does after: profcpu then writes its outputs).
        cpu = cpu_seconds(prof.pid)
        prof.send_signal(signal.SIGINT)
        os.wait4(prof.pid, 0)
        stdout, stderr = prof.stdout.read(), prof.stderr.read()
        if name == "perf":
            data = out
            stats = subprocess.run(["perf", "report", "-i", data, "--stats"], capture_output=True, text=True).stdout
            m = re.search(r"LOST events:\s+(\d+)", stats)
            lost = int(m.group(1)) if m else 0
            m = re.search(r"LOST_SAMPLES events:\s+(\d+)", stats)
            lost += int(m.group(1)) if m else 0
        else:
            m = re.search(r"\((\d+) lost\)", stderr)
            if not m:
                sys.exit(f"no summary line from profcpu:\n{stderr}")
            lost = int(m.group(1))
            data = os.path.join(stdout.strip().splitlines()[-1], "perf.data")
        size = os.path.getsize(data)
        shutil.rmtree(out, ignore_errors=True) if os.path.isdir(out) else os.remove(out)
    return seconds, last / seconds, cpu, lost, size


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=300000)
    ap.add_argument("--work", type=int, default=0, help="loop iterations per turn (lowers the switch rate)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--profcpu", default="target/release/profcpu")
    ap.add_argument("--call-graph", nargs="+", default=["auto"], help="profcpu -call-graph modes to run")
    args = ap.parse_args()
    global args_work
    args_work = args.work
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
    with tempfile.TemporaryDirectory() as tmp:
        exe = build_workload(tmp)
        results = {k: [] for k in ways}
        for _ in range(args.repeat):
            for name, cmd in ways.items():
                results[name].append(run_once(exe, args.rounds, name.split()[0], cmd, tmp))

    base = statistics.median(r[0] for r in results["alone"])
    print(f"workload: 2 threads ping-ponging {args.rounds} rounds ({args.work} loop iterations a turn), {args.repeat} "
          "runs each, medians")
    print(f"{'way':<14} {'wall s':>7} {'slowdown':>9} {'switches/s':>11} {'recorder cpu s':>15} {'lost':>8} "
          f"{'perf.data MB':>13}   (each run's wall s)")
    summary = {}
    for name, runs in results.items():
        wall = statistics.median(r[0] for r in runs)
        rate = statistics.median(r[1] for r in runs)
        cpus = [r[2] for r in runs if r[2] is not None]
        cpu = statistics.median(cpus) if cpus else None
        lost = max(r[3] for r in runs)
        size = statistics.median(r[4] for r in runs) / 1e6
        slow = (wall / base - 1) * 100
        summary[name] = (slow, cpu, lost, size)
        cpu_text = "-" if cpu is None else f"{cpu:.2f}"
        runs_text = " ".join(f"{r[0]:.2f}" for r in runs)
        print(f"{name:<14} {wall:7.3f} {slow:8.1f}% {rate:11.0f} {cpu_text:>15} {lost:8d} {size:13.1f}   {runs_text}")
    p_slow, p_cpu, p_lost, p_size = summary["perf"]
    for name in [n for n in ways if n.startswith("profcpu")]:
        q_slow, q_cpu, q_lost, q_size = summary[name]
        print(f"{name} vs perf -g: slowdown {q_slow:.1f}% vs {p_slow:.1f}% (ratio {(100 + q_slow) / (100 + p_slow):.2f}),"
              f" recorder cpu ratio {q_cpu / p_cpu:.2f}, lost {q_lost} vs {p_lost}, perf.data {q_size / p_size:.2f}x")


if __name__ == "__main__":
    main()
