#!/usr/bin/env bash
# The README's "run the main job": on a fresh machine, set everything up, start the sample web API on the real .NET 8
# runtime as users start their apps (no perf map variable), put load on its CPU route, profile it with profcpu for 10 s
# and say where the flame graph is. profcpu switches the app's perf map on over its diagnostics socket for the run and
# off again afterwards.
#
# Usage: examples/webapi/demo.sh [SECONDS]     (default 10)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
seconds=${1:-10}
[[ "$seconds" =~ ^[0-9]+$ ]] && ((seconds > 0 && seconds <= 600)) || {
    echo "demo: error: SECONDS must be a whole number from 1 to 600" >&2
    exit 2
}
cd "$repo"

echo "demo: installing system tools (skipped when present)" >&2
bash scripts/setup-deps.sh
echo "demo: fetching the .NET 8 runtime (cached)" >&2
bash scripts/dotnet-runtime.sh >/dev/null
echo "demo: building profcpu (one statically linked binary: scripts/build-static.sh)" >&2
profcpu=$(bash scripts/build-static.sh)

export PORT=${PORT:-5080}
pid=$(bash "$here/run.sh")
load_pid=
cleanup() {
    [[ -n "$load_pid" ]] && kill "$load_pid" 2>/dev/null || true
    kill "$pid" 2>/dev/null || true
}
trap cleanup EXIT
echo "demo: sample web API running as PID $pid on 127.0.0.1:$PORT (.NET 8, no perf map variable)" >&2

# Load starts first and outlasts the collection, so every sample sees a busy API.
bash "$here/load.sh" cpu $((seconds + 4)) 4 >/dev/null &
load_pid=$!
sleep 2

# profcpu prints the run folder as the last line on stdout; progress and the top-frames table go to stderr.
dir=$("$profcpu" collect -pid "$pid" -duration "$seconds" -output "$repo/profilings" | tail -n 1)
echo
grep '^jit_names:' "$dir/metadata.txt" || true
echo "Flame graph: $dir/flamegraph.svg"
echo "(open it in a browser: the hot C# methods are PricingEngine::ComputeDiscountCurve and PriceItem)"
