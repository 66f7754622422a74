#!/usr/bin/env python3
"""What stack copies cost: profcpu's three -call-graph modes against `perf record --call-graph dwarf` + `perf script`,
in the same session, on tests/data/unwind/sorter.c (a loop built -O2 -fomit-frame-pointer that spends its time in
libc's qsort: the case stack copies exist for).

For each frequency it runs the workload alone, then under each profiler (profcpu launches it with `-- CMD`, perf with
`perf record ... -- CMD`; the stack-copy modes with and without -keep-stack-copies: by default the perf.data left
holds the unwound callchains, with it the copies as recorded), and prints per run: samples, bytes per sample,
perf.data size and MB/s, the work the target
got done against the runs alone (slowdown), the share of samples whose stack reaches `main`, and the time to turn the
recording into stacks (`profcpu postprocess`, `perf script`). Usage:

  scripts/bench-unwind.py [--freqs 99,999] [--seconds 8] [--profcpu target/release/profcpu]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def build_sorter(tmp):
    exe = os.path.join(tmp, "sorter")
    src = os.path.join(REPO, "tests/data/unwind/sorter.c")
    subprocess.run(["gcc", "-O2", "-fomit-frame-pointer", "-o", exe, src], check=True)
    return exe


def sorts(text):
    m = re.search(r"^sorts (\d+)$", text, re.M)
    if not m:
        sys.exit(f"the workload printed no `sorts N` line:\n{text}")
    return int(m.group(1))


def timed(cmd, **kw):
    start = time.monotonic()
    out = subprocess.run(cmd, capture_output=True, text=True, **kw)
    elapsed = time.monotonic() - start
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stderr[-3000:]}")
    return out, elapsed


def share_reaching_main(folded):
    total = with_main = 0
    for line in folded.splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        if frames[0] != "sorter":
            continue
        total += int(count)
        with_main += int(count) if "main" in frames[1:] else 0
    return with_main / total if total else 0.0


def script_share_reaching_main(text):
    total = with_main = 0
    for block in text.split("\n\n"):
        lines = block.strip("\n").splitlines()
        if not lines or not lines[0].startswith("sorter "):
            continue
        total += 1
        with_main += any(re.search(r"\smain\+0x", l) for l in lines[1:])
    return with_main / total if total else 0.0


def profcpu_run(args, exe, freq, mode, seconds, tmp, keep=False):
    out_dir = os.path.join(tmp, f"profcpu-{mode}-{freq}-{keep}")
    flags = ["-keep-stack-copies"] if keep else []
    cmd = [args.profcpu, "collect", "-freq", str(freq), "-call-graph", mode, *flags, "-duration", str(seconds + 30),
           "-output", out_dir, "--", exe, str(seconds)]
    out, _ = timed(cmd)
    run_dir = out.stdout.strip().splitlines()[-1]
    samples = int(re.search(r"profcpu: (\d+) samples", out.stderr).group(1))
    data = os.path.getsize(os.path.join(run_dir, "perf.data"))
    symbols = sum(os.path.getsize(os.path.join(run_dir, "symbols", f)) for f in os.listdir(os.path.join(run_dir, "symbols")))
    _, post = timed([args.profcpu, "postprocess", "-dir", run_dir])
    folded = open(os.path.join(run_dir, "folded_stacks.out")).read()
    return dict(who=f"profcpu -call-graph {mode}" + (" -keep-stack-copies" if keep else ""), samples=samples, data=data, extra=symbols, work=sorts(out.stdout),
                reach=share_reaching_main(folded), post=post)


def perf_run(exe, freq, seconds, tmp):
    data_path = os.path.join(tmp, f"perf-dwarf-{freq}.data")
    out, _ = timed(["perf", "record", "-q", "-F", str(freq), "--call-graph", "dwarf", "-o", data_path, "--", exe,
                    str(seconds)])
    work = sorts(out.stdout)
    start = time.monotonic()
    script = subprocess.run(["perf", "script", "-i", data_path], capture_output=True, text=True)
    post = time.monotonic() - start
    samples = sum(1 for block in script.stdout.split("\n\n") if block.strip())
    return dict(who="perf record --call-graph dwarf", samples=samples, data=os.path.getsize(data_path), extra=0,
                work=work, reach=script_share_reaching_main(script.stdout), post=post)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--freqs", default="99,999")
    ap.add_argument("--seconds", type=int, default=8)
    ap.add_argument("--profcpu", default=os.path.join(REPO, "target/release/profcpu"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-unwind-") as tmp:
        exe = build_sorter(tmp)
        alone = statistics.median(sorts(timed([exe, str(args.seconds)])[0].stdout) for _ in range(3))
        print(f"workload alone: {alone:.0f} sorts in {args.seconds} s (median of 3)")
        for freq in [int(f) for f in args.freqs.split(",")]:
            runs = [profcpu_run(args, exe, freq, mode, args.seconds, tmp, keep)
                    for mode, keep in (("fp", False), ("auto", False), ("auto", True), ("dwarf", False), ("dwarf", True))]
            runs.append(perf_run(exe, freq, args.seconds, tmp))
            print(f"\n{freq} Hz, {args.seconds} s:")
            print(f"  {'recorder':51} {'samples':>7} {'B/sample':>8} {'perf.data':>10} {'MB/s':>6} {'symbols/':>9} "
                  f"{'slowdown':>8} {'reach main':>10} {'to stacks':>9}")
            for r in runs:
                per_sample = r["data"] / max(r["samples"], 1)
                print(f"  {r['who']:51} {r['samples']:7d} {per_sample:8.0f} {r['data'] / 1e6:8.2f}MB "
                      f"{r['data'] / 1e6 / args.seconds:6.2f} {r['extra'] / 1e3:7.0f}KB "
                      f"{100 * (1 - r['work'] / alone):7.1f}% {100 * r['reach']:9.1f}% {r['post']:8.2f}s")


if __name__ == "__main__":
    main()
