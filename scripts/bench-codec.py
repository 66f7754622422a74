#!/usr/bin/env python3
"""What profcpu's purpose-built encoders buy against a general one, on the same files.

profcpu compresses the two large entries of prof.tar.gz with encoders of its own (src/archive/deflate/):
perf_script.out with RepeatDeflater (matches from the repeat hints of the report stage, no search) where its chunks
are of shared stacks and with EchoDeflater (one hash probe per position) where they are not, and perf.data with
EchoDeflater (matches from the stack-copy echoes perf_data::echoes finds, one hash probe elsewhere). This runs
`profcpu -vv postprocess -dir DIR` RUNS times (each after removing DIR/prof.tar.gz, which the run writes again, so
that perf.data is compressed anew and not copied from it) and takes, for each of the two, the compressed size and the least thread
CPU time of its encoder thread (for perf.data that includes reading the file); then compresses the same two files with
flate2 on its zlib-rs backend at level 1 (scripts/codec-compare, built on first use; in memory, reading not counted)
and prints both side by side.

Usage: scripts/bench-codec.py DIR [--runs 5] [--profcpu target/release/profcpu]
       (DIR: a collect folder, or any folder postprocess has written perf_script.out into)
"""
import argparse
import os
import re
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMPARE = os.path.join(REPO, "scripts", "codec-compare")

LINE = re.compile(r"(perf\.data|perf_script\.out) compressed to ([0-9.]+) MB in .*thread CPU: ([0-9.]+) ms")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--profcpu", default=os.path.join(REPO, "target/release/profcpu"))
    args = ap.parse_args()
    subprocess.run(["cargo", "build", "--quiet", "--release", "--manifest-path", os.path.join(COMPARE, "Cargo.toml")],
                   check=True)
    compare = os.path.join(COMPARE, "target", "release", "codec-compare")

    ours = {}
    for _ in range(args.runs):
        # Without the earlier archive, perf.data's entry is compressed anew rather than copied from it.
        archive = os.path.join(args.dir, "prof.tar.gz")
        if os.path.exists(archive):
            os.unlink(archive)
        out = subprocess.run([args.profcpu, "-vv", "postprocess", "-dir", args.dir], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True, check=True).stderr
        for m in LINE.finditer(out):
            name, mb, cpu = m.group(1), float(m.group(2)), float(m.group(3))
            best = ours.get(name, (mb, float("inf")))
            ours[name] = (mb, min(best[1], cpu))
    if set(ours) != {"perf.data", "perf_script.out"}:
        sys.exit(f"bench: error: profcpu -vv did not report both encoders (is it a release build of this tree?)")

    files = [os.path.join(args.dir, "perf_script.out"), os.path.join(args.dir, "perf.data")]
    theirs = {}
    out = subprocess.run([compare, "1", str(args.runs), *files], stdout=subprocess.PIPE, text=True, check=True).stdout
    for line in out.splitlines():
        path, size, compressed, cpu = line.rsplit(" ", 3)
        theirs[os.path.basename(path)] = (int(size), int(compressed) / 1e6, float(cpu))

    print(f"| file | size | profcpu encoder: MB, CPU ms | flate2 zlib-rs level 1: MB, CPU ms | CPU ratio |")
    print("|---|---|---|---|---|")
    for name, encoder in [("perf_script.out", "Repeat/EchoDeflater"), ("perf.data", "EchoDeflater")]:
        size, z_mb, z_ms = theirs[name]
        mb, ms = ours[name]
        print(f"| {name} | {size / 1e6:.1f} MB | {encoder}: {mb:.2f} MB, {ms:.1f} ms | {z_mb:.2f} MB, {z_ms:.1f} ms "
              f"| {z_ms / max(ms, 0.1):.1f}x |")


if __name__ == "__main__":
    main()
