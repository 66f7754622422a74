#!/usr/bin/env bash
# Fails when a public function of src/ is called only by tests, examples or fuzzers — or by nobody — so that what
# the tests check is what users run (issue 9: no test-only second paths).
#
# How: a copy of the crate in which every `pub fn` and `pub use` of src/ is made crate-private, except the entry
# points src/main.rs calls (`cli::parse`, `commands::run`, `interrupt`, `escape`); `cargo check` of that copy's library
# then warns about every function, method, field or type that nothing on the way from main uses. Unit tests do not
# count (they are not compiled by `cargo check --lib`): a helper only they use is `#[cfg(test)]`.
#
# Allowed: `is_empty` beside a used `len` (clippy's len_without_is_empty asks every public `len` for one).
#
# Usage: scripts/check-api-use.sh          (about 40 s the first time, a few seconds after; needs cargo)
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${PROFCPU_CACHE:-$HOME/.cache/profcpu}
work=$(mktemp -d "${TMPDIR:-/tmp}/profcpu-api-use.XXXXXX")
trap 'rm -rf "$work"' EXIT

cp -r "$repo/src" "$repo/Cargo.toml" "$repo/Cargo.lock" "$work/"
find "$work/src" -name '*.rs' -exec sed -i -E \
    's/^(\s*)pub (const |unsafe )?fn /\1pub(crate) \2fn /; s/^(\s*)pub use /\1pub(crate) use /' {} +
# What main.rs calls stays public: the roots of the search.
sed -i -E 's/^pub\(crate\) fn run\(/pub fn run(/' "$work/src/commands/mod.rs"
sed -i -E 's/^pub\(crate\) fn parse/pub fn parse/' "$work/src/cli.rs"
sed -i -E 's/pub\(crate\) fn /pub fn /' "$work/src/interrupt.rs" "$work/src/escape.rs"

log="$work/check.log"
if ! (cd "$work" && CARGO_TARGET_DIR="$cache/api-use-target" cargo check --lib --quiet --message-format short) \
    2>"$log"; then
    cat "$log" >&2
    echo "check-api-use: error: the crate-private copy does not build (a pub item of src/ is re-exported or used" \
        "from main.rs in a way this script does not know)" >&2
    exit 1
fi
unused=$(grep -E 'warning: .*(never used|never read|never constructed)' "$log" |
    grep -vE "method \`is_empty\` is never used" || true)
if [[ -n "$unused" ]]; then
    echo "$unused" | sed "s|^|check-api-use: |" >&2
    echo "check-api-use: error: the items above are public but nothing reached from main.rs uses them: remove them," \
        "make them #[cfg(test)] if only unit tests need them, or make tests go through what users run" >&2
    exit 1
fi
echo "check-api-use: every public function of src/ is used on the way from main.rs" >&2
