#!/usr/bin/env bash
# Re-records the golden collection that tests/postprocess_golden.rs postprocesses offline: builds workload.c with
# frame pointers, profiles it with `profcpu collect` at 199 Hz, and replaces golden/ with the run's perf.data,
# symbols/ and metadata.txt. Then re-bless the expected outputs and review the diff:
#   PROFCPU_BLESS=1 cargo test --release --test postprocess_golden
# Usage: tests/data/postprocess/record-golden.sh [PROFCPU_BINARY]   (default: target/release/profcpu)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../../.." && pwd)
profcpu=${1:-$repo/target/release/profcpu}
[[ -x "$profcpu" ]] || { echo "record-golden: error: $profcpu is not built (cargo build --release)" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/profcpu-golden.XXXXXX")
trap 'rm -rf "$work"' EXIT
gcc -O2 -g -fno-omit-frame-pointer -pthread -o "$work/workload" "$here/workload.c"
run_dir=$("$profcpu" collect -freq 199 -duration 10 -output "$work/out" -- "$work/workload" 1.0 | tail -n 1)

rm -rf "$here/golden"
mkdir "$here/golden"
cp -r "$run_dir/perf.data" "$run_dir/metadata.txt" "$run_dir/symbols" "$here/golden/"
du -sh "$here/golden" >&2
echo "record-golden: now run: PROFCPU_BLESS=1 cargo test --release --test postprocess_golden" >&2
