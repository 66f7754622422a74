#!/usr/bin/env bash
# Provides a real .NET Core 3.1.23 runtime (no SDK) for the example workloads.
#
# The runtime comes from the PyPI wheel dotnetcore2==3.1.23, which ships the
# linux-x64 shared framework under dotnetcore2/bin/. PyPI is one of the few
# registries reachable here, which is why we do not use Microsoft's installer.
#
# Usage: scripts/dotnet-runtime.sh
# Stdout: exactly one line, the absolute path of the directory holding the
#         `dotnet` host executable. Progress and errors go to stderr.
# Cache:  ${PROFCPU_CACHE:-$HOME/.cache/profcpu}/dotnet  (second run: no network)
set -euo pipefail

version=3.1.23
cache_root=${PROFCPU_CACHE:-$HOME/.cache/profcpu}
dest=$cache_root/dotnet
bin_dir=$dest/dotnetcore2-$version/dotnetcore2/bin

log() { echo "dotnet-runtime: $*" >&2; }
die() { echo "dotnet-runtime: error: $*" >&2; exit 1; }

# The stamp is written last, so an interrupted download or unzip is redone
# instead of leaving a half-extracted runtime that looks complete.
stamp=$dest/.complete-$version
if [[ -f "$stamp" && -x "$bin_dir/dotnet" ]]; then
    echo "$bin_dir"
    exit 0
fi

mkdir -p "$dest"
# The caller's working directory may be hidden (e.g. under a /tmp that a mount
# namespace replaced), and pyenv shims refuse to run from there.
cd "$dest"

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
wheel=$(find "$wheel_dir" -maxdepth 1 -name "dotnetcore2-$version-*linux*x86_64*.whl" -print -quit)
if [[ -z "$wheel" ]]; then
    log "downloading dotnetcore2==$version from PyPI (~30 MB)"
    # The wheel is platform specific; pin the platform so pip does not pick an
    # sdist or another OS's wheel when run on a host whose tags differ.
    if ! "${PIP[@]}" download --no-deps --only-binary=:all: \
            --platform manylinux1_x86_64 --python-version 3 --implementation py \
            --disable-pip-version-check --no-input --timeout 60 \
            -d "$wheel_dir" "dotnetcore2==$version" >"$dest/pip.log" 2>&1; then
        tail -n 2 "$dest/pip.log" >&2 || true
        die "could not download dotnetcore2==$version from PyPI (registry unreachable? see $dest/pip.log)"
    fi
    wheel=$(find "$wheel_dir" -maxdepth 1 -name "dotnetcore2-$version-*.whl" -print -quit)
    [[ -n "$wheel" ]] || die "pip reported success but no dotnetcore2 wheel is in $wheel_dir"
fi

extract=$dest/dotnetcore2-$version
tmp_extract=$extract.partial.$$
rm -rf "$tmp_extract"
trap 'rm -rf "$tmp_extract"' EXIT
log "unpacking $(basename "$wheel")"
if command -v unzip >/dev/null 2>&1; then
    unzip -q "$wheel" -d "$tmp_extract"
else
    python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "$wheel" "$tmp_extract"
fi
# Wheels do not record Unix modes reliably; the host and any native helper
# must be executable or the runtime fails with a bare "Permission denied".
chmod +x "$tmp_extract/dotnetcore2/bin/dotnet"
find "$tmp_extract/dotnetcore2/bin" -name '*.so' -exec chmod +x {} +
[[ -x "$tmp_extract/dotnetcore2/bin/dotnet" ]] || die "wheel has no dotnetcore2/bin/dotnet"

rm -rf "$extract"
mv "$tmp_extract" "$extract"
touch "$stamp"
echo "$bin_dir"
