#!/usr/bin/env bash
# Drives HTTP load at the example web API on 127.0.0.1 for a bounded time.
#
# Usage: examples/webapi/load.sh ROUTE SECONDS [CONNECTIONS]
#   ROUTE        cpu | sleep | wait | burn | format | health, or a path such as /cpu?items=48
#   SECONDS      1..600, how long to send requests
#   CONNECTIONS  concurrent keep-alive connections (default 4, max 256)
#   Port: $PORT, default 5080. The target is always 127.0.0.1.
#
# Stdout: one line `requests=N errors=E seconds=S latency_ms=L tool=wrk|curl` (L: the mean time a request took,
# as the client measured it).
# Stderr: the load tool's own report.
# Exit status: 0 ok, 1 no request succeeded, 2 bad arguments or wrk failed
# (e.g. nothing listening).
# Uses wrk when installed, else a bash loop of curl requests
# ($WEBAPI_LOAD_TOOL=curl forces the fallback, e.g. to test it).
set -euo pipefail

die() { echo "webapi load: error: $*" >&2; exit 2; }

(($# >= 2 && $# <= 3)) || die "usage: load.sh ROUTE SECONDS [CONNECTIONS]"
route=$1
duration=$2
conns=${3:-4}
port=${PORT:-5080}

in_range() { [[ "$1" =~ ^[0-9]+$ ]] && (($1 >= $2 && $1 <= $3)); }
in_range "$duration" 1 600 || die "SECONDS must be an integer in 1..600, got: $duration"
in_range "$conns" 1 256 || die "CONNECTIONS must be an integer in 1..256, got: $conns"
[[ "$port" =~ ^[0-9]+$ ]] || die "bad PORT: $port"
[[ "$route" == /* ]] || route=/$route
# Only a path may follow the fixed host, so the load cannot be pointed
# anywhere but this machine.
[[ "$route" =~ ^/[A-Za-z0-9._~/?=\&%-]*$ ]] || die "bad route: $route"
url=http://127.0.0.1:$port$route

tool=${WEBAPI_LOAD_TOOL:-auto}
[[ "$tool" == auto || "$tool" == wrk || "$tool" == curl ]] || die "WEBAPI_LOAD_TOOL must be auto, wrk or curl"
if [[ "$tool" == wrk ]] || { [[ "$tool" == auto ]] && command -v wrk >/dev/null 2>&1; }; then
    threads=$((conns < 2 ? conns : 2))
    # `timeout` is a backstop in case wrk hangs on a server that stopped
    # answering; wrk itself stops after -d. Its report is kept in a
    # variable, not a file: a load killed before it ends leaves nothing.
    rc=0
    out=$(timeout --kill-after=5 $((duration + 15)) \
        wrk -t"$threads" -c"$conns" -d"${duration}s" --timeout 10s "$url" 2>&1) || rc=$?
    printf '%s\n' "$out" >&2
    ((rc == 0)) || die "wrk failed (exit $rc)"
    requests=$(sed -n 's/^ *\([0-9][0-9]*\) requests in .*/\1/p' <<<"$out")
    requests=${requests:-0}
    # wrk counts a non-2xx/3xx reply as a request; count it as an error here.
    non2xx=$(sed -n 's/^ *Non-2xx or 3xx responses: *\([0-9][0-9]*\).*/\1/p' <<<"$out")
    sockerr=$(sed -n 's/^ *Socket errors: connect \([0-9]*\), read \([0-9]*\), write \([0-9]*\), timeout \([0-9]*\).*/\1 \2 \3 \4/p' <<<"$out")
    errors=${non2xx:-0}
    for e in $sockerr; do errors=$((errors + e)); done
    ok=$((requests - ${non2xx:-0}))
    # `    Latency   101.23ms    2.34ms ...`: the mean, in us, ms or s.
    latency=$(awk '$1 == "Latency" {v = $2; f = 1; if (v ~ /us$/) f = 0.001; else if (v ~ /ms$/) f = 1; else if (v ~ /s$/) f = 1000; sub(/[a-z]+$/, "", v); printf "%.3f", v * f; exit}' <<<"$out")
    echo "requests=$requests errors=$errors seconds=$duration latency_ms=${latency:-0} tool=wrk"
    ((ok > 0)) || exit 1
    exit 0
fi

command -v curl >/dev/null 2>&1 || die "neither wrk nor curl is installed (scripts/setup-deps.sh)"
[[ "$tool" == curl ]] || echo "webapi load: wrk not found, falling back to curl (lower request rate)" >&2

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# Stopped early: the workers stop too, and the EXIT trap removes their folder.
trap 'kill $(jobs -p) 2>/dev/null; exit 143' TERM INT
# Microsecond clock: $SECONDS is whole seconds and would cut a run short by
# up to one second.
end=$((${EPOCHREALTIME//[!0-9]/} + duration * 1000000))
worker() {
    local n=0 err=0 code took us=0
    while ((${EPOCHREALTIME//[!0-9]/} < end)); do
        read -r code took < <(curl -s -o /dev/null --max-time 10 -w '%{http_code} %{time_total}\n' "$url" || true)
        if [[ "$code" == 2* ]]; then
            n=$((n + 1))
            us=$((us + 10#${took//[!0-9]/}))
        else
            err=$((err + 1))
        fi
    done
    echo "$n $err $us" >"$dir/$1"
}
pids=()
for ((i = 0; i < conns; i++)); do
    worker "$i" &
    pids+=($!)
done
wait "${pids[@]}"
requests=0
errors=0
micros=0
for f in "$dir"/*; do
    read -r n err us <"$f"
    requests=$((requests + n + err))
    errors=$((errors + err))
    micros=$((micros + us))
done
ok=$((requests - errors))
latency=$(awk -v us="$micros" -v n="$ok" 'BEGIN { printf "%.3f", (n > 0 ? us / n / 1000 : 0) }')
echo "curl: $requests requests in ${duration}s, $errors errors" >&2
echo "requests=$requests errors=$errors seconds=$duration latency_ms=$latency tool=curl"
((requests - errors > 0)) || exit 1
