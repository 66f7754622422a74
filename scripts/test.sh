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
# The .NET Core runtime (PyPI dotnetcore2) and the sample web API, cached under ${PROFCPU_CACHE:-~/.cache/profcpu}.
PROFCPU_DOTNET_DIR=$(bash scripts/dotnet-runtime.sh)
export PROFCPU_DOTNET_DIR
bash examples/webapi/build.sh >/dev/null

# Several tests put a target in a "container" whose /tmp is a private tmpfs, which hides everything under the host's
# /tmp. A checkout there (CI may clone into /tmp) would lose its own build; build outside /tmp in that case.
if [[ $(pwd -P) == /tmp/* ]]; then
    CARGO_TARGET_DIR=${PROFCPU_CACHE:-$HOME/.cache/profcpu}/target-$(pwd -P | md5sum | cut -c1-12)
    export CARGO_TARGET_DIR
    echo "test: the checkout is under /tmp; building in $CARGO_TARGET_DIR" >&2
fi

# The statically linked profcpu and the local podman images that tests/containers_podman.rs runs (the tests make them
# too; here their build time stays out of the test run). Both are no-ops when up to date.
bash scripts/build-static.sh >/dev/null
bash scripts/container-images.sh >/dev/null

cargo fmt --all -- --check
cargo clippy --release --all-targets --quiet -- -D warnings
# Release build: the end-to-end tests time real workloads and the benchmarks' numbers come from this profile.
cargo test --release --no-fail-fast "$@"
