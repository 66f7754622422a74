#!/usr/bin/env bash
# Validates Kubernetes manifests offline, strictly (an unknown or misspelt field is an error), against the JSON schemas
# generated from Kubernetes' published OpenAPI definitions, for the oldest and the newest Kubernetes version the
# validator bundles. No cluster is needed. The validator is PyPI's kubernetes-validate (it ships those schemas),
# installed on first use into ${PROFCPU_CACHE:-$HOME/.cache/profcpu}/kubernetes-validate-VERSION (~120 MB).
#
# Usage: scripts/validate-kubernetes.sh [FILE...]      (default: examples/kubernetes/*.yaml)
# Output: the validator's verdict per resource and version. Exit status: 0 all valid, 1 otherwise.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
home=${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}
version=1.37.0
# The bundled schema versions span 1.25.0 .. 1.37.0 for kubernetes-validate 1.37.0.
kubernetes_versions=(1.25.0 1.37.0)

log() { echo "validate-kubernetes: $*" >&2; }
die() { echo "validate-kubernetes: error: $*" >&2; exit 1; }

files=("$@")
if ((${#files[@]} == 0)); then
    files=("$repo"/examples/kubernetes/*.yaml)
fi
for f in "${files[@]}"; do
    [[ -f "$f" ]] || die "no such file: $f"
done

python3 -c 'import pip' >/dev/null 2>&1 || die "python3 has no pip (run scripts/setup-deps.sh, which installs python3-pip)"
# Per Python version: the validator's dependencies include compiled wheels (rpds-py).
python=$(python3 -c 'import sys; print("py%d.%d" % sys.version_info[:2])')
dest=${PROFCPU_CACHE:-$home/.cache/profcpu}/kubernetes-validate-$version-$python

stamp=$dest/.complete
if [[ ! -f "$stamp" ]]; then
    mkdir -p "$(dirname "$dest")"
    exec 9>"$dest.lock"
    flock 9
    if [[ ! -f "$stamp" ]]; then
        log "installing kubernetes-validate==$version from PyPI into $dest"
        rm -rf "$dest"
        if ! python3 -m pip install --disable-pip-version-check --no-input --quiet --target "$dest" \
                "kubernetes-validate==$version" >"$dest.log" 2>&1; then
            tail -n 3 "$dest.log" >&2 || true
            die "could not install kubernetes-validate==$version (registry unreachable? see $dest.log)"
        fi
        rm -f "$dest.log"
        touch "$stamp"
    fi
    exec 9>&-
fi

status=0
for k in "${kubernetes_versions[@]}"; do
    PYTHONPATH=$dest python3 -m kubernetes_validate --strict --kubernetes-version "$k" "${files[@]}" || status=1
done
exit "$status"
