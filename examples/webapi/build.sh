#!/usr/bin/env bash
# Compiles the example web API with Debian's mono `mcs` for a .NET runtime (there is no .NET SDK on these machines).
# The same IL runs on .NET 8 and .NET Core 3.1; only the runtimeconfig beside it differs.
#
# Usage: examples/webapi/build.sh [8|3.1]     (default: $PROFCPU_DOTNET_VERSION, else 8)
# Stdout: exactly one line, the absolute path of the built App.dll.
# Output: ${PROFCPU_CACHE:-$HOME/.cache/profcpu}/webapi/<tfm>/App.dll (+ App.runtimeconfig.json)
# Rebuilds only when App.cs or this script changed.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# HOME can be unset under `env -i` or some CI runners; fall back to passwd.
home=${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}
die() { echo "webapi build: error: $*" >&2; exit 1; }

version=${1:-${PROFCPU_DOTNET_VERSION:-8}}
case "$version" in
    8|8.0|8.0.4) tfm=net8.0; framework=8.0.0 ;;
    3.1|3.1.23) tfm=netcoreapp3.1; framework=3.1.0 ;;
    *) die "unknown .NET version '$version' (use 8 or 3.1)" ;;
esac
runtime_config="{\"runtimeOptions\":{\"tfm\":\"$tfm\",\"framework\":{\"name\":\"Microsoft.NETCore.App\",\"version\":\"$framework\"}}}"
out_dir=${PROFCPU_CACHE:-$home/.cache/profcpu}/webapi/$tfm
dll=$out_dir/App.dll
config=$out_dir/App.runtimeconfig.json

stamp=$out_dir/.source-hash
# A content hash rather than mtimes: the cache is shared by every work tree of
# the repository, and another tree's App.cs may differ yet look older.
source_hash=$(cat "$here/App.cs" "${BASH_SOURCE[0]}" | sha256sum | cut -d' ' -f1)

up_to_date() {
    [[ -f "$dll" && -f "$config" && -f "$stamp" && "$(cat "$stamp")" == "$source_hash" ]]
}

if up_to_date; then
    echo "$dll"
    exit 0
fi

command -v mcs >/dev/null 2>&1 || die "mcs not found (install mono-mcs: scripts/setup-deps.sh)"
mkdir -p "$out_dir"

# Tests may start several APIs at once; serialise builds so that no process
# ever loads a dll that another build is still writing.
exec 9>"$out_dir/.build.lock"
flock 9
if ! up_to_date; then
    # Build in a scratch dir under the final file name: mcs names the assembly
    # after the output file, and that name shows in every perf-map entry.
    tmp=$(mktemp -d "$out_dir/.build.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    # -noconfig keeps mcs from adding its default desktop references; the
    # netcoreapp runtime resolves mscorlib/System through its own facades.
    mcs -noconfig -nologo -optimize+ -target:exe \
        -r:mscorlib.dll -r:System.dll \
        -out:"$tmp/App.dll" "$here/App.cs" >&2 \
        || die "mcs failed to compile $here/App.cs"
    echo "$runtime_config" >"$config.tmp.$$"
    mv -f "$config.tmp.$$" "$config"
    mv -f "$tmp/App.dll" "$dll"
    echo "$source_hash" >"$stamp"
fi
echo "$dll"
