#!/usr/bin/env bash
# Regenerates the fuzz targets' seed inputs, fuzz/seeds/<target>/ (committed: a few KB each; scripts/fuzz.sh grows
# corpora from them in fuzz/corpus/, which is not). Seeds are real where that is cheap: recordings of a small C
# program made by `perf record` and by profcpu (with its symbols/ folder), the program's ELF files, small ReadyToRun
# images of the .NET 8 runtime; the rest is written by fuzz/make_seeds.py from the formats' documentation.
#
# Usage: fuzz/make-seeds.sh [PROFCPU_BINARY]   (default: target/release/profcpu, `cargo build --release`)
# Needs (scripts/setup-deps.sh installs them): gcc, objcopy, perf, python3, and scripts/dotnet-runtime.sh's .NET 8.
# Run as root (perf_event_open on the workload). Recordings differ from run to run: review the diff, keep it small.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
profcpu=${1:-$repo/target/release/profcpu}
[[ -x $profcpu ]] || { echo "make-seeds: error: $profcpu is not built (cargo build --release)" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/profcpu-seeds.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"

# The workload: its hot path in libc's qsort with a comparator, built without frame pointers (as distributions
# build), so stack copies and CFI matter; a stripped copy with a split debug file; a stripped shared library.
cat >tiny.c <<'EOF'
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static int cmp(const void *a, const void *b) {
    long x = *(const long *)a, y = *(const long *)b;
    return (x > y) - (x < y);
}
__attribute__((noinline)) long work(long *v, int n, double secs) {
    struct timespec t0, t;
    long sum = 0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
        for (int i = 0; i < n; i++) v[i] = (v[i] * 1103515245 + 12345) & 0xffff;
        qsort(v, n, sizeof *v, cmp);
        sum += v[n / 2];
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while (t.tv_sec - t0.tv_sec + (t.tv_nsec - t0.tv_nsec) / 1e9 < secs);
    return sum;
}
int main(int argc, char **argv) {
    static long v[512];
    printf("%ld\n", work(v, 512, argc > 1 ? atof(argv[1]) : 0.1));
    return 0;
}
EOF
cat >lib.c <<'EOF'
static long helper(long x) { return x * 3 + 1; }
long exported(long x) { long s = 0; for (long i = 0; i < x; i++) s += helper(i) ^ s; return s; }
EOF
gcc -O2 -fomit-frame-pointer -Wl,--build-id -Wl,-z,noseparate-code -o tiny tiny.c
objcopy --only-keep-debug tiny tiny.debug
objcopy --strip-all --add-gnu-debuglink=tiny.debug tiny tiny.stripped
gcc -O2 -shared -fPIC -Wl,--build-id -Wl,-z,noseparate-code -o libtiny.so lib.c
strip libtiny.so

perf record -q -o fp.data -g -F 200 -- ./tiny 0.2 >/dev/null 2>&1
perf record -q -o dwarf.data --call-graph dwarf,256 -F 100 -- ./tiny 0.3 >/dev/null 2>&1
"$profcpu" collect -freq 49 -duration 5 -call-graph fp -output fp -- ./tiny 0.5 >/dev/null 2>&1
# Stack copies unwound at capture: symbols/ gets the unwind info of the workload (and of libc, left out: 180 KB).
"$profcpu" collect -freq 10 -duration 5 -call-graph auto -output auto -- ./tiny 2 >/dev/null 2>&1

dotnet=$(bash "$repo/scripts/dotnet-runtime.sh" 8)
python3 "$here/make_seeds.py" "$work" "$dotnet/shared/Microsoft.NETCore.App/8.0.4" "$here/seeds"
du -sh "$here/seeds" >&2
