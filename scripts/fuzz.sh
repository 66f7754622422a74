#!/usr/bin/env bash
# Fuzzes every parser of untrusted input (the libFuzzer targets in fuzz/, built with cargo-fuzz) for a bounded time
# each, starting from the committed seeds in fuzz/seeds/<target>/; fails on any crash, timeout or out-of-memory and
# prints how to reproduce it. CI (scripts/test.sh) runs it with the default time.
#
# Usage: scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
#   scripts/fuzz.sh                 # CI: every target, sharing what the build leaves of 4 minutes
#                                   # (PROFCPU_FUZZ_BUDGET seconds, default 240), at least 3 s each; a fresh
#                                   # build alone takes ~3.5 minutes on 2 CPUs, so a slower machine runs over
#   scripts/fuzz.sh 600             # every target 10 minutes: what to run after changing a parser
#   scripts/fuzz.sh 3600 unwind     # one target, an hour
# Targets run side by side, one per CPU (PROFCPU_FUZZ_JOBS to change). What a run learns is kept in
# fuzz/corpus/<target>/ (git-ignored), so a longer run goes on from the last. PROFCPU_FUZZ_SANITIZER=address builds
# with AddressSanitizer (slower to build and run; the default, none, still has overflow checks and debug assertions).
#
# cargo-fuzz wants a nightly toolchain for its flags; the stable one accepts them with RUSTC_BOOTSTRAP=1, which is
# set for this build only (its own target folder, fuzz/target).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

seconds=${1:-}
shift || true
budget=${PROFCPU_FUZZ_BUDGET:-240}
all_targets=(perf_data perf_record perf_map jitdump elf unwind jit_frames tar_extract metadata_txt r2r r2rmap kallsyms symbols_dir
    dotnet_ipc demangle procfs postprocess)
targets=("${@:-${all_targets[@]}}")
jobs=${PROFCPU_FUZZ_JOBS:-$(nproc)}
sanitizer=${PROFCPU_FUZZ_SANITIZER:-none}

cache=${PROFCPU_CACHE:-$HOME/.cache/profcpu}
cargo_fuzz_version=0.13.2
if ! cargo install --list --root "$cache/cargo-fuzz" 2>/dev/null | grep -q "^cargo-fuzz v$cargo_fuzz_version:"; then
    echo "fuzz: installing cargo-fuzz $cargo_fuzz_version into $cache/cargo-fuzz (once, ~1 min)" >&2
    cargo install --quiet --locked cargo-fuzz --version "$cargo_fuzz_version" --root "$cache/cargo-fuzz"
fi
export PATH=$cache/cargo-fuzz/bin:$PATH

# Its own target folder (scripts/test.sh moves the root's out of /tmp with CARGO_TARGET_DIR; this one follows).
target_dir=${CARGO_TARGET_DIR:+$CARGO_TARGET_DIR/fuzz}
target_dir=${target_dir:-fuzz/target}
bins=$target_dir/x86_64-unknown-linux-gnu/release

started=$(date +%s)
# Release code with debug assertions and overflow checks (cargo fuzz's default), coverage instrumentation, 16 codegen
# units (cargo fuzz uses 1, which doubles the build time of the profcpu crate on 2 CPUs). CI's run (no time given)
# optimises at level 1: its build takes 214 s instead of 310 s on 2 CPUs and its targets run at 50-80 % of the speed,
# which a few seconds each from the seeds hardly feel; a run given its time gets level 3 (PROFCPU_FUZZ_OPT_LEVEL).
opt_level=3
[[ -n $seconds ]] || opt_level=1
opt_level=${PROFCPU_FUZZ_OPT_LEVEL:-$opt_level}
build() {
    if ! CARGO_PROFILE_RELEASE_OPT_LEVEL=$opt_level RUSTC_BOOTSTRAP=1 cargo fuzz build --sanitizer "$sanitizer" \
        --codegen-units 16 --target-dir "$target_dir" "$@" 2>"$target_dir/build.log"; then
        grep -v -e '^ *Compiling ' "$target_dir/build.log" >&2
        echo "fuzz: error: building the fuzz targets failed (above)" >&2
        exit 1
    fi
}
mkdir -p "$target_dir"
if [[ $# -eq 0 ]]; then
    build
else
    for t in "${targets[@]}"; do build "$t"; done
fi
built=$(date +%s)
if [[ -z $seconds ]]; then
    # What is left of the budget (less a margin for starting and reporting), shared by the rounds of $jobs targets.
    rounds=$(((${#targets[@]} + jobs - 1) / jobs))
    seconds=$(((budget - (built - started) - 10) / rounds))
    ((seconds >= 3)) || seconds=3
fi
echo "fuzz: built ${#targets[@]} targets (opt-level $opt_level) in $((built - started)) s;" \
    "fuzzing each for $seconds s, $jobs at a time" >&2

logs=$(mktemp -d "${TMPDIR:-/tmp}/profcpu-fuzz-logs.XXXXXX")
trap 'rm -rf "$logs"' EXIT

# Runs one target; its log says how it ended.
fuzz_one() {
    local t=$1 bin=$bins/$1
    mkdir -p "fuzz/corpus/$t" "fuzz/artifacts/$t"
    local options=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
        -artifact_prefix="fuzz/artifacts/$t/" -close_fd_mask=1)
    # Inputs that stand for several files: the mark between parts and the file names (fuzz/src/lib.rs).
    case $t in elf | r2r | symbols_dir | postprocess) options+=(-dict=fuzz/dict/parts.dict) ;; esac
    # postprocess prints each run's summary on stderr, like the command: closed too (a crash still shows in the log
    # as a deadly signal with its artifact; running the artifact again prints the panic).
    [[ $t == postprocess ]] && options+=(-close_fd_mask=3)
    "$bin" "${options[@]}" "fuzz/corpus/$t" "fuzz/seeds/$t" >"$logs/$t.log" 2>&1
}
failed=()
running=0
for t in "${targets[@]}"; do
    fuzz_one "$t" &
    pids[$!]=$t
    running=$((running + 1))
    if ((running >= jobs)); then
        wait -n -p done_pid || failed+=("${pids[$done_pid]}")
        running=$((running - 1))
    fi
done
while ((running > 0)); do
    wait -n -p done_pid || failed+=("${pids[$done_pid]}")
    running=$((running - 1))
done

printf '%-14s %12s %10s %8s\n' target executions exec/s corpus >&2
for t in "${targets[@]}"; do
    log=$logs/$t.log
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
    rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
    corpus=$(find "fuzz/corpus/$t" -type f | wc -l)
    printf '%-14s %12s %10s %8s\n' "$t" "$execs" "$rate" "$corpus" >&2
done
echo "fuzz: done in $(($(date +%s) - started)) s" >&2
# The targets' scratch folders (fuzz/src/lib.rs) of processes that are gone.
for scratch in /dev/shm/profcpu-fuzz-* "${TMPDIR:-/tmp}"/profcpu-fuzz-*; do
    pid=${scratch##*-}
    # Only `profcpu-fuzz-<pid>` (this script's own log folder matches the glob too).
    [[ $pid =~ ^[0-9]+$ && -d $scratch && ! -d /proc/$pid ]] && rm -rf "$scratch"
done

if ((${#failed[@]} > 0)); then
    for t in "${failed[@]}"; do
        echo "fuzz: error: target $t failed; the end of its log:" >&2
        grep -v -e '^#[0-9]' "$logs/$t.log" | tail -n 40 >&2
        artifact=$(grep -o "fuzz/artifacts/$t/[^ ]*" "$logs/$t.log" | tail -n 1 || true)
        if [[ -n $artifact ]]; then
            echo "fuzz: the input is $artifact; reproduce with:" >&2
            echo "  RUSTC_BOOTSTRAP=1 $cache/cargo-fuzz/bin/cargo-fuzz run --sanitizer $sanitizer $t $artifact" >&2
            echo "  (or run $bins/$t $artifact); fix it in src/ and add the" >&2
            echo "  input as a regression test" >&2
        fi
    done
    exit 1
fi
