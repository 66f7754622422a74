#!/usr/bin/env bash
# Builds profcpu as ONE statically linked executable (glibc, static-pie) that runs in any Linux root file system:
# Alpine, distroless, a busybox-only image or an empty one. Copy it into (or next to) a container and run it.
#
# Usage: scripts/build-static.sh
# Stdout: exactly one line, the absolute path of the binary. Cargo's progress goes to stderr.
# Output: ${CARGO_TARGET_DIR:-target}/static/<host triple>/dist/profcpu
#
# How: `-C target-feature=+crt-static` with an explicit `--target` (the host's own triple). With an explicit target
# RUSTFLAGS reach only what runs on the target, not build scripts and proc-macros (clap's derive, which cannot be
# static); so this cannot live in .cargo/config.toml without breaking the default `cargo build`/`cargo test`. It builds
# in a target directory of its own so that it never waits for (or invalidates) the default build, and so that tests
# may call it while `cargo test` holds the default directory's lock.
#
# The `dist` profile of Cargo.toml: the release profile optimised as one unit across crates (LTO), without DWARF
# (symbol names stay: backtraces and profiles of profcpu itself keep names): ~9 MB. The first build takes ~2 min;
# a second run is cargo's no-op check (well under a second).
#
# glibc caveat: a static glibc cannot load the NSS or iconv modules of the machine it runs on. profcpu resolves no
# user, group or host names: libc's getpwuid_r/getgrgid_r/getaddrinfo objects are pulled into the link (hence glibc's
# link-warning sections) but --gc-sections drops all their code; what stays of NSS is only reachable from fork()'s
# hooks, and `strace -e openat` of a collect shows no nsswitch.conf, locale, gconv or .so file of profcpu's own being
# opened. This script checks that the result has no interpreter and no DT_NEEDED entry, and fails otherwise.
# (`ldd` prints "statically linked" for this static-pie; a non-PIE static build would print "not a dynamic
# executable" but lose address-space randomisation of the binary.)
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
die() { echo "build-static: error: $*" >&2; exit 1; }

command -v cargo >/dev/null 2>&1 || die "cargo not found (install the Rust toolchain)"
command -v readelf >/dev/null 2>&1 || die "readelf not found (install binutils: scripts/setup-deps.sh)"

host=$(rustc -vV | sed -n 's/^host: //p')
case "$host" in
    *-unknown-linux-gnu) ;;
    *) die "host $host is not a glibc Linux target; this script links glibc statically (*-unknown-linux-gnu)" ;;
esac

target_dir=${CARGO_TARGET_DIR:-$repo/target}/static
binary=$target_dir/$host/dist/profcpu

# Appended to the caller's RUSTFLAGS so that e.g. `-C target-cpu` choices still apply.
rustflags="${RUSTFLAGS:+$RUSTFLAGS }-C target-feature=+crt-static"
(
    cd "$repo"
    # Called by a test, this script inherits the variables cargo sets for a package's tests (CARGO_MANIFEST_DIR,
    # CARGO_PKG_*, ...). A build script that reads one (ring's reads CARGO_MANIFEST_DIR) is then rebuilt, and with it
    # everything above it: three minutes of fat LTO, undone again by the next call from a shell. cargo sets what its
    # build needs itself.
    unset "${!CARGO_MANIFEST_@}" "${!CARGO_PKG_@}" "${!CARGO_CRATE_@}" "${!CARGO_BIN_@}" CARGO_TARGET_TMPDIR \
        CARGO_PRIMARY_PACKAGE
    CARGO_TARGET_DIR=$target_dir RUSTFLAGS=$rustflags \
        cargo build --profile dist --locked --quiet --target "$host" --bin profcpu >&2
) || die "cargo build failed"

[[ -x "$binary" ]] || die "cargo succeeded but $binary is missing"
# A static-pie still has a dynamic section (for relocating itself) but no interpreter and no needed libraries.
if readelf -lW "$binary" | grep -q 'Requesting program interpreter'; then
    die "$binary asks for a dynamic loader: it is not statically linked"
fi
if readelf -dW "$binary" | grep -q '(NEEDED)'; then
    die "$binary needs shared libraries: $(readelf -dW "$binary" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')"
fi
echo "$binary"
