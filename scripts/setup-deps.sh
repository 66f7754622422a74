#!/usr/bin/env bash
# Installs the Debian system tools that profcpu's tests and examples rely on.
#
# Idempotent: apt is only touched when a tool is missing, so a second run needs
# no network and finishes in well under a second.
#
# Usage: scripts/setup-deps.sh [--check]
#   --check   only report what is missing (exit 1 if anything is), install nothing
#
# Output: progress on stderr; nothing on stdout.
set -euo pipefail

check_only=0
case "${1:-}" in
    --check) check_only=1 ;;
    "") ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "setup-deps: unknown argument: $1" >&2; exit 2 ;;
esac

log() { echo "setup-deps: $*" >&2; }
die() { echo "setup-deps: error: $*" >&2; exit 1; }

# Each entry is "package:command[,command...]". A command on PATH is trusted
# over dpkg so that a tool installed some other way (e.g. a newer perf) is kept.
# An empty command list means only dpkg's view counts.
requirements=(
    "linux-perf:perf"
    "mono-mcs:mcs"
    "wrk:wrk"
    "chromium:chromium"
    "binutils:objcopy,strip,readelf"
    "gcc:gcc"
    # libc.a and the C start files: tests compile C programs, one of them static (gcc only recommends it).
    "libc6-dev:"
    "util-linux:unshare,nsenter"
    # Real containers (tests/containers_podman.rs): rootful podman on the runc runtime (crun fails on hybrid cgroups
    # here) with --network host, so no uidmap/slirp4netns/netavark; busybox-static is the shell of the local images.
    "podman:podman"
    "runc:runc"
    "busybox-static:"
    # The example scripts fetch the .NET runtime wheel and poll the API.
    "curl:curl"
    "unzip:unzip"
    "ca-certificates:"
)

pkg_installed() {
    [[ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true)" == "install ok installed" ]]
}

missing=()
for req in "${requirements[@]}"; do
    pkg=${req%%:*}
    cmds=${req#*:}
    ok=1
    if [[ -n "$cmds" ]]; then
        IFS=, read -r -a cmd_list <<<"$cmds"
        for c in "${cmd_list[@]}"; do
            command -v "$c" >/dev/null 2>&1 || ok=0
        done
    else
        pkg_installed "$pkg" || ok=0
    fi
    ((ok)) || missing+=("$pkg")
done

# pip is needed by scripts/dotnet-runtime.sh; only fall back to Debian's when
# no interpreter on PATH has one (pyenv or a venv is preferred when present).
if ! python3 -c 'import pip' >/dev/null 2>&1; then
    missing+=("python3-pip")
fi

if ((${#missing[@]} == 0)); then
    log "all tools present"
    exit 0
fi

if ((check_only)); then
    log "missing: ${missing[*]}"
    exit 1
fi

log "installing: ${missing[*]}"

if [[ $(id -u) -ne 0 ]]; then
    if command -v sudo >/dev/null 2>&1; then
        SUDO=(sudo -n)
    else
        die "need root (or sudo) to install: ${missing[*]}"
    fi
else
    SUDO=()
fi

export DEBIAN_FRONTEND=noninteractive
# Another engineer or CI step may be running apt at the same time; wait for the
# dpkg lock instead of failing straight away.
apt_opts=(-o DPkg::Lock::Timeout=300 -q)

# --error-on=any makes a failed download of an index fatal; without it apt-get
# update exits 0 with only a warning when the mirror is unreachable.
# apt's chatter goes to a log that is kept only when something fails.
apt_log=$(mktemp "${TMPDIR:-/tmp}/setup-deps-apt.XXXXXX")

if ! "${SUDO[@]}" apt-get "${apt_opts[@]}" update --error-on=any >"$apt_log" 2>&1 </dev/null; then
    tail -n 3 "$apt_log" >&2 || true
    die "cannot reach the Debian package registry (apt-get update failed; log: $apt_log)"
fi

if ! "${SUDO[@]}" apt-get "${apt_opts[@]}" install -y --no-install-recommends "${missing[@]}" >>"$apt_log" 2>&1 </dev/null; then
    tail -n 15 "$apt_log" >&2 || true
    die "apt-get install failed for: ${missing[*]} (log: $apt_log)"
fi
rm -f "$apt_log"

# Re-check so a package that installed but does not provide the expected
# command (renamed binary, diversion) is reported here rather than in a test.
still=()
for req in "${requirements[@]}"; do
    cmds=${req#*:}
    [[ -n "$cmds" ]] || continue
    IFS=, read -r -a cmd_list <<<"$cmds"
    for c in "${cmd_list[@]}"; do
        command -v "$c" >/dev/null 2>&1 || still+=("$c")
    done
done
((${#still[@]} == 0)) || die "installed packages but these commands are still missing: ${still[*]}"
log "done"
