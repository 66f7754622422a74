#!/usr/bin/env python3
"""Cost per counted call of `profcpu probe`, against `perf` counting the same calls, in one session.

Three workloads, each one long-running process that runs a timed loop of N calls of one function per "go" line on
its stdin (so every prober attaches before a round and detaches after it, and the function is warm):

  native   a C function in the executable (file-backed code)         profcpu: uprobe     perf: perf probe -x BIN FN
  jit      the same code copied into anonymous executable memory,    profcpu: breakpoint perf: mem:ADDR:x
           named in /tmp/perf-PID.map (JIT code as a runtime makes it)
  dotnet   a static .NET 8 method at its final tier                  profcpu: precode    perf: mem:SLOT:rw
           (--dotnet; needs scripts/dotnet-runtime.sh and mcs)             watchpoint

Each round is timed alone, under `profcpu probe -no-stacks`, `profcpu probe` (with the callers' stacks), `perf stat
-e EVENT` (counting) and `perf record -g -e EVENT` (stacks), interleaved, --repeat times. Reported per prober: the
median cost per call ((round time - median round time alone) / N) and whether it counted exactly N. Usage:

  scripts/bench-probe.py [--calls 200000] [--repeat 5] [--dotnet] [--profcpu target/release/profcpu]
"""
import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

WORKLOAD_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
__attribute__((noinline)) long count_me(long x) { __asm__ volatile(""); return x * 3 + 1; }
__attribute__((noinline)) void count_me_end(void) {}
int main(int argc, char **argv) {
    long (*volatile f)(long) = count_me;
    long n = atol(argv[2]);
    if (strcmp(argv[1], "jit") == 0) {
        size_t len = (char *)count_me_end - (char *)count_me;
        unsigned char *code = mmap(0, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        memcpy(code, (void *)count_me, len);
        f = (long (*)(long))code;
        char path[64];
        snprintf(path, sizeof path, "/tmp/perf-%d.map", getpid());
        FILE *map = fopen(path, "w");
        fprintf(map, "%lx %zx jit_me\n", (unsigned long)code, len);
        fclose(map);
        printf("addr %lx\n", (unsigned long)code);
    }
    printf("ready\n");
    fflush(stdout);
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
        struct timespec a, b;
        long s = 0;
        clock_gettime(CLOCK_MONOTONIC, &a);
        for (long i = 0; i < n; i++) s += f(i);
        clock_gettime(CLOCK_MONOTONIC, &b);
        printf("%ld %ld\n", (b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec), s);
        fflush(stdout);
    }
    return 0;
}
"""

LOOP_CS = r"""
using System;
using System.Diagnostics;
using System.Runtime.CompilerServices;
public static class Loop {
    [MethodImpl(MethodImplOptions.NoInlining)]
    public static long Hit(long x) { return x * 3 + 1; }
    public static void Main(string[] args) {
        long n = long.Parse(args[0]);
        Console.WriteLine("ready");
        while (Console.ReadLine() != null) {
            var watch = Stopwatch.StartNew();
            long s = 0;
            for (long i = 0; i < n; i++) s += Hit(i);
            Console.WriteLine((long)(watch.Elapsed.TotalMilliseconds * 1e6) + " " + s);
        }
    }
}
"""


class Workload:
    def __init__(self, cmd, env=None):
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        self.addr = None
        while True:
            line = self.proc.stdout.readline()
            if not line:
                sys.exit(f"workload {cmd} ended early")
            if line.startswith("addr "):
                self.addr = int(line.split()[1], 16)
            if line.strip() == "ready":
                break

    def round(self):
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        return int(self.proc.stdout.readline().split()[0])

    def stop(self):
        self.proc.kill()
        self.proc.wait()


def profcpu_round(work, profcpu, method, stacks, out):
    cmd = [profcpu, "probe", "-pid", str(work.proc.pid), "-method", method, "-duration", "600", "-output", out]
    if not stacks:
        cmd.append("-no-stacks")
    prober = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    started = ""
    while True:
        line = prober.stderr.readline()
        if not line:
            sys.exit(f"profcpu probe ended early:\n{started}{prober.stderr.read()}")
        started += line
        if line.startswith("Probing "):
            break
    ns = work.round()
    prober.send_signal(signal.SIGINT)
    # Read on through the same buffered streams (communicate() would skip what readline() buffered already).
    stderr = prober.stderr.read()
    stdout = prober.stdout.read()
    prober.wait()
    lines = stdout.splitlines()
    counted = int(lines[0].split()[0]) if len(lines) > 1 else -1
    mechanism = re.search(r": (uprobe|watchpoint|execute breakpoint)", started + stderr)
    return ns, counted, mechanism.group(1) if mechanism else "?"


def perf_round(work, event, record, out):
    cmd = ["perf"] + (["record", "-q", "-g", "-o", os.path.join(out, "perf.data")] if record else ["stat", "-x,"])
    cmd += ["-e", event, "-p", str(work.proc.pid)]
    prober = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(1.0)  # perf has opened its events well within this
    ns = work.round()
    prober.send_signal(signal.SIGINT)
    _, stderr = prober.communicate()
    counted = -1
    if record:
        script = subprocess.run(["perf", "script", "-F", "event", "-i", os.path.join(out, "perf.data")],
                                capture_output=True, text=True)
        counted = sum(1 for l in script.stdout.splitlines() if l.strip())
    else:
        for line in stderr.splitlines():
            fields = line.split(",")
            if len(fields) > 2 and fields[0].isdigit():
                counted = int(fields[0])
    return ns, counted


def measure(name, work, calls, repeat, probers):
    for _ in range(3):
        work.round()  # warm: code paged in, a JIT at its last tier
    results = {label: [] for label, _ in probers}
    results["alone"] = []
    for r in range(repeat):
        results["alone"].append((work.round(), calls, ""))
        for label, run in probers:
            results[label].append(run())
        print(f"{name}: round {r + 1}/{repeat} done", file=sys.stderr)
    alone = statistics.median(ns for ns, _, _ in results["alone"])
    print(f"\n{name}: {calls} calls per round, {repeat} rounds; median round alone {alone / 1e6:.1f} ms "
          f"({alone / calls:.1f} ns per call)")
    print(f"  {'prober':44} {'cost per call (median, min..max)':36} counted")
    for label, _ in probers:
        costs = [(ns - alone) / calls for ns, _, _ in results[label]]
        counts = sorted({c for _, c, _ in results[label]})
        exact = "exactly" if counts == [calls] else f"{counts}"
        mech = results[label][0][2]
        print(f"  {label + (' [' + mech + ']' if mech else ''):44} "
              f"{statistics.median(costs) / 1000:6.2f} µs  ({min(costs) / 1000:.2f}..{max(costs) / 1000:.2f})"
              f"{'':12} {exact}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=200000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--dotnet", action="store_true")
    ap.add_argument("--profcpu", default="target/release/profcpu")
    args = ap.parse_args()
    profcpu = os.path.abspath(args.profcpu)
    tmp = tempfile.mkdtemp(prefix="profcpu-bench-probe-")
    out = os.path.join(tmp, "runs")
    os.makedirs(out)
    src, exe = os.path.join(tmp, "work.c"), os.path.join(tmp, "benchwork")
    with open(src, "w") as f:
        f.write(WORKLOAD_C)
    subprocess.run(["gcc", "-O2", "-fno-omit-frame-pointer", "-o", exe, src], check=True)
    subprocess.run(["perf", "probe", "-q", "-x", exe, "count_me"], check=True)
    try:
        native = Workload([exe, "native", str(args.calls)])
        uprobe = "probe_benchwork:count_me"
        measure("native function (file-backed)", native, args.calls, args.repeat, [
            ("profcpu probe -no-stacks", lambda: profcpu_round(native, profcpu, "count_me", False, out)),
            ("profcpu probe (stacks)", lambda: profcpu_round(native, profcpu, "count_me", True, out)),
            ("perf stat -e " + uprobe, lambda: (*perf_round(native, uprobe, False, tmp), "")),
            ("perf record -g -e " + uprobe, lambda: (*perf_round(native, uprobe, True, tmp), "")),
        ])
        native.stop()
        jit = Workload([exe, "jit", str(args.calls)])
        bp = f"mem:{jit.addr:#x}:x"
        measure("JIT code (anonymous memory)", jit, args.calls, args.repeat, [
            ("profcpu probe -no-stacks", lambda: profcpu_round(jit, profcpu, "jit_me", False, out)),
            ("profcpu probe (stacks)", lambda: profcpu_round(jit, profcpu, "jit_me", True, out)),
            ("perf stat -e " + bp, lambda: (*perf_round(jit, bp, False, tmp), "")),
            ("perf record -g -e " + bp, lambda: (*perf_round(jit, bp, True, tmp), "")),
        ])
        jit.stop()
        if args.dotnet:
            bench_dotnet(args, profcpu, tmp, out)
    finally:
        subprocess.run(["perf", "probe", "-q", "-d", "probe_benchwork:*"], check=False)


def bench_dotnet(args, profcpu, tmp, out):
    runtime = subprocess.run(["bash", "scripts/dotnet-runtime.sh", "8"], capture_output=True, text=True,
                             check=True).stdout.strip()
    with open(os.path.join(tmp, "Loop.cs"), "w") as f:
        f.write(LOOP_CS)
    dll = os.path.join(tmp, "Loop.dll")
    subprocess.run(["mcs", "-optimize+", f"-out:{dll}", os.path.join(tmp, "Loop.cs")], check=True)
    with open(os.path.join(tmp, "Loop.runtimeconfig.json"), "w") as f:
        f.write('{"runtimeOptions":{"tfm":"net8.0","framework":{"name":"Microsoft.NETCore.App","version":"8.0.0"}}}')
    env = dict(os.environ, DOTNET_SYSTEM_GLOBALIZATION_INVARIANT="1", DOTNET_PerfMapEnabled="1")
    work = Workload([os.path.join(runtime, "dotnet"), dll, str(args.calls)], env)
    for _ in range(10):
        work.round()  # through Tier0 and instrumentation to Tier1
    time.sleep(1)
    # The precode's target slot, as profcpu found it, for perf's own watchpoint on it.
    _, _, _ = profcpu_round(work, profcpu, "Loop::Hit", False, out)
    runs = sorted(os.listdir(out))
    meta = open(os.path.join(out, runs[-1], "metadata.txt")).read()
    slot = re.search(r"target slot (0x[0-9a-f]+)", meta).group(1)
    wp = f"mem:{slot}/8:rw"
    measure(".NET method (precode)", work, args.calls, args.repeat, [
        ("profcpu probe -no-stacks", lambda: profcpu_round(work, profcpu, "Loop::Hit", False, out)),
        ("profcpu probe (stacks)", lambda: profcpu_round(work, profcpu, "Loop::Hit", True, out)),
        ("perf stat -e " + wp, lambda: (*perf_round(work, wp, False, tmp), "")),
    ])
    work.stop()


if __name__ == "__main__":
    main()
