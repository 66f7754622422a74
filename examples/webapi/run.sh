#!/usr/bin/env bash
# Starts the example web API on a real .NET runtime (8 by default, 3.1 as the legacy case). On .NET 8 it is
# started as users start their apps, with no perf map variable: profcpu switches the perf map on for its run over
# the runtime's diagnostics socket. .NET Core 3.1 cannot do that, so there COMPlus_PerfMapEnabled=1 is set (unless
# the caller sets it), so that profilers can name its JIT-compiled methods.
#
# Usage: examples/webapi/run.sh [--runtime 8|3.1] [--port N] [--foreground]
#   --runtime V    the .NET version (default: $PROFCPU_DOTNET_VERSION, else 8)
#   --port N       listen on 127.0.0.1:N (default: $PORT, else 5080)
#   --foreground   exec the runtime in place of this script: the caller's PID
#                  becomes the runtime's PID (for unshare/nsenter set-ups)
#
# Background mode (default): builds if needed, starts the API detached, waits
# until GET /health answers (at most $WEBAPI_START_TIMEOUT s, default 30) and
# prints ONLY the runtime's PID on stdout. The log goes to
# ${PROFCPU_CACHE:-$HOME/.cache/profcpu}/webapi/webapi-PORT.log.
#
# Foreground mode prints the API's own log on stdout/stderr.
#
# The runtime and the dll live in the cache dir, never under /tmp, so this
# works inside a mount namespace with a private, empty /tmp, provided
# scripts/dotnet-runtime.sh and build.sh have been run once on the host.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
home=${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}
export PROFCPU_CACHE=${PROFCPU_CACHE:-$home/.cache/profcpu}

die() { echo "webapi run: error: $*" >&2; exit 1; }

port=${PORT:-5080}
foreground=0
version=${PROFCPU_DOTNET_VERSION:-8}
while (($#)); do
    case "$1" in
        --runtime) [[ $# -ge 2 ]] || die "--runtime needs a value"; version=$2; shift 2 ;;
        --runtime=*) version=${1#--runtime=}; shift ;;
        --port) [[ $# -ge 2 ]] || die "--port needs a value"; port=$2; shift 2 ;;
        --port=*) port=${1#--port=}; shift ;;
        --foreground) foreground=1; shift ;;
        -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
        *) die "unknown argument: $1" ;;
    esac
done
if ! [[ "$port" =~ ^[0-9]+$ ]] || ((port < 1 || port > 65535)); then
    die "bad port: $port"
fi

dotnet_dir=$(bash "$repo/scripts/dotnet-runtime.sh" "$version") || die "no .NET runtime (scripts/dotnet-runtime.sh failed)"
dll=$(bash "$here/build.sh" "$version") || die "build failed"
dotnet=$dotnet_dir/dotnet
[[ -x "$dotnet" ]] || die "not executable: $dotnet"

# Invariant globalization: without it the runtime aborts at start-up when no
# libicu it recognises is installed, as in minimal containers. A perf map
# setting of the caller's (DOTNET_PerfMapEnabled=1 to have one from the start)
# is passed on.
export DOTNET_SYSTEM_GLOBALIZATION_INVARIANT=${DOTNET_SYSTEM_GLOBALIZATION_INVARIANT:-1}
case "$version" in
    3.1*) export COMPlus_PerfMapEnabled=${COMPlus_PerfMapEnabled:-1} ;;
esac

if ((foreground)); then
    exec "$dotnet" "$dll" --port "$port"
fi

health_ok() {
    if command -v curl >/dev/null 2>&1; then
        [[ "$(curl -s --max-time 1 "http://127.0.0.1:$port/health" 2>/dev/null || true)" == "ok" ]]
    else
        # bash's /dev/tcp keeps this usable on a host without curl.
        local reply
        # shellcheck disable=SC2016 # $1 is expanded by the inner bash
        reply=$(timeout 1 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1"; printf "GET /health HTTP/1.0\r\n\r\n" >&3; cat <&3' _ "$port" 2>/dev/null || true)
        [[ "$reply" == *$'\r\n\r\nok' ]]
    fi
}

# Something already answering would make our health check pass while our
# own runtime dies on "address in use".
if health_ok; then
    die "port $port already serves /health (another API running?); use --port or PORT"
fi

log_dir=$PROFCPU_CACHE/webapi
mkdir -p "$log_dir"
log=$log_dir/webapi-$port.log

# Redirect every stream: a background child holding the caller's stdout would
# make `pid=$(run.sh)` hang until the API exits.
"$dotnet" "$dll" --port "$port" >"$log" 2>&1 </dev/null &
pid=$!

timeout_s=${WEBAPI_START_TIMEOUT:-30}
deadline=$((SECONDS + timeout_s))
until health_ok; do
    if ! kill -0 "$pid" 2>/dev/null; then
        echo "webapi run: --- last lines of $log ---" >&2
        tail -n 20 "$log" >&2 || true
        die "the API exited during start-up"
    fi
    if ((SECONDS >= deadline)); then
        echo "webapi run: --- last lines of $log ---" >&2
        tail -n 20 "$log" >&2 || true
        kill "$pid" 2>/dev/null || true
        die "the API did not answer http://127.0.0.1:$port/health within ${timeout_s}s"
    fi
    sleep 0.1
done
echo "$pid" >"$log_dir/webapi-$port.pid"
echo "$pid"
