#!/usr/bin/env bash
# Builds the local podman images that the container tests and docs/containers.md use, from local files only (no
# registry: there is none here). Each root file system is packed with tar and loaded with `podman import`.
#
#   profcpu-busybox   /bin/busybox (Debian's busybox-static) and its applet links, nothing else: the smallest root a
#                     shell runs in. A sidecar image for the static profcpu, and the proof that it needs no libraries.
#   profcpu-dotnet8   the .NET 8 runtime (scripts/dotnet-runtime.sh 8) in /usr/share/dotnet, the sample web API
#                     (examples/webapi/build.sh 8) in /app, exactly the shared libraries the runtime links (found with
#                     ldd, copied to the paths ldd names, plus the dynamic loader) and busybox for a shell.
#
# Usage: scripts/container-images.sh [busybox|dotnet8|all]...     (default: all)
# Stdout: one line per image, its name (localhost/NAME:latest).
# Stderr: what was built and how long it took, or that it was up to date.
#
# Idempotent: an image carries the hash of its inputs as the label `profcpu.inputs`; it is rebuilt only when that
# differs (a changed runtime, App.cs, busybox, a library, or this script). Scratch files live under
# ${PROFCPU_CACHE:-$HOME/.cache/profcpu}/containers and are removed after each build.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
home=${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}
cache=${PROFCPU_CACHE:-$home/.cache/profcpu}/containers
self_hash=$(sha256sum "${BASH_SOURCE[0]}" | cut -d' ' -f1)

log() { echo "container-images: $*" >&2; }
die() { echo "container-images: error: $*" >&2; exit 1; }

wanted=("$@")
((${#wanted[@]})) || wanted=(all)
for w in "${wanted[@]}"; do
    case "$w" in
        busybox|dotnet8|all) ;;
        -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
        *) die "unknown image '$w' (use busybox, dotnet8 or all)" ;;
    esac
done
want() {
    local w
    for w in "${wanted[@]}"; do [[ "$w" == "$1" || "$w" == all ]] && return 0; done
    return 1
}

command -v podman >/dev/null 2>&1 || die "podman not found (scripts/setup-deps.sh installs podman, runc, busybox-static)"
busybox=/bin/busybox
[[ -x "$busybox" ]] || die "$busybox not found (install busybox-static: scripts/setup-deps.sh)"
# Debian's dynamically linked `busybox` package would need libc in every image.
if readelf -lW "$busybox" 2>/dev/null | grep -q 'Requesting program interpreter'; then
    die "$busybox is dynamically linked; install busybox-static instead of busybox"
fi

mkdir -p "$cache"
# Test binaries run in parallel and may all ask for the images; one builds, the others then find it up to date.
exec 9>"$cache/.lock"
flock 9

image_label() {
    podman image inspect --format '{{index .Config.Labels "profcpu.inputs"}}' "localhost/$1:latest" 2>/dev/null || true
}

# A root with busybox and one link per applet in /bin, and the directories a container runtime mounts over.
busybox_root() {
    local root=$1 applet
    mkdir -p "$root/bin" "$root/proc" "$root/sys" "$root/dev" "$root/etc" "$root/tmp" "$root/out"
    chmod 1777 "$root/tmp"
    cp "$busybox" "$root/bin/busybox"
    for applet in $("$busybox" --list); do
        # `busybox --list` names busybox itself; a link there would replace the binary.
        [[ "$applet" == busybox ]] || ln -s busybox "$root/bin/$applet"
    done
    # Tools that resolve user names (ls -l, ps) find root without NSS.
    printf 'root:x:0:0:root:/root:/bin/sh\n' >"$root/etc/passwd"
    printf 'root:x:0:\n' >"$root/etc/group"
}

# Packs ROOT and loads it as NAME, replacing the previous image of that name.
import_root() {
    local root=$1 name=$2 inputs=$3
    shift 3
    local old new
    old=$(podman image inspect --format '{{.Id}}' "localhost/$name:latest" 2>/dev/null || true)
    # Numeric root ownership and no host user names: the image must not depend on this machine's accounts.
    new=$(tar -C "$root" --numeric-owner --owner=0 --group=0 -cf - . |
        podman import --quiet --change "LABEL profcpu.inputs=$inputs" "$@" - "localhost/$name:latest") ||
        die "podman import of $name failed"
    # The replaced image is now untagged; drop it unless a container still uses it.
    if [[ -n "$old" && "$old" != "$new"* && "$new" != "$old"* ]]; then
        podman rmi "$old" >/dev/null 2>&1 || true
    fi
}

build_busybox() {
    local name=profcpu-busybox inputs
    inputs=$(cat <(echo "$self_hash") <(sha256sum <"$busybox") | sha256sum | cut -d' ' -f1)
    if [[ "$(image_label $name)" == "$inputs" ]]; then
        log "$name is up to date"
        echo "localhost/$name:latest"
        return
    fi
    local start=$EPOCHREALTIME root
    root=$(mktemp -d "$cache/$name.XXXXXX")
    busybox_root "$root"
    import_root "$root" "$name" "$inputs" --change "ENV PATH=/usr/local/bin:/bin" --change 'CMD ["/bin/sh"]'
    rm -rf "$root"
    log "built $name in $(elapsed "$start") s ($(du -sh --apparent-size "$busybox" | cut -f1) busybox)"
    echo "localhost/$name:latest"
}

elapsed() {
    local start=${1/./} now=${EPOCHREALTIME/./}
    printf '%d.%01d' $(((now - start) / 1000000)) $(((now - start) % 1000000 / 100000))
}

# The shared libraries that the ELF files of the runtime in RUNTIME need, as ldd resolves them on this machine: one
# path a line, the dynamic loader included, the runtime's own libraries (found through its RUNPATH) left out. A library
# ldd cannot find is only tolerated for the optional LTTng tracing provider.
needed_libraries() {
    local runtime=$1 file line
    shift
    for file in "$@"; do
        while IFS= read -r line; do
            line=${line#"${line%%[![:space:]]*}"}
            case "$line" in
                *"=> not found"*)
                    [[ "$(basename "$file")" == libcoreclrtraceptprovider.so ]] ||
                        die "ldd: $file needs a library this machine lacks: $line"
                    ;;
                *"=> /"*) line=${line#*=> }; echo "${line%% (*}" ;;
                /*) echo "${line%% (*}" ;;
            esac
        done < <(ldd "$file" 2>/dev/null)
    done | sort -u | awk -v own="$runtime/" 'index($0, own) != 1'
}

build_dotnet8() {
    local name=profcpu-dotnet8
    local runtime dll config
    runtime=$(bash "$repo/scripts/dotnet-runtime.sh" 8) || die "scripts/dotnet-runtime.sh 8 failed"
    dll=$(bash "$repo/examples/webapi/build.sh" 8) || die "examples/webapi/build.sh 8 failed"
    config=${dll%.dll}.runtimeconfig.json
    [[ -f "$config" ]] || die "no $config beside $dll"

    # Every ELF file of the runtime. The LTTng provider's liblttng-ust is not installed and is left out: CoreCLR loads
    # the provider only if it can and runs on without it (Microsoft's runtime-deps images lack LTTng too).
    local elves=() f
    while IFS= read -r f; do
        [[ "$(head -c4 "$f" | od -An -c | tr -d ' ')" == '177ELF' ]] && elves+=("$f")
    done < <(find "$runtime" -type f \( -name dotnet -o -name '*.so' -o -name createdump \) | sort)
    ((${#elves[@]} >= 5)) || die "found only ${#elves[@]} ELF files in $runtime"
    local libs_found libs
    libs_found=$(needed_libraries "$runtime" "${elves[@]}") || die "cannot list the runtime's libraries"
    mapfile -t libs <<<"$libs_found"
    [[ -n "$libs_found" ]] || die "ldd found no libraries for the runtime"

    local inputs
    inputs=$( {
        echo "$self_hash"
        sha256sum <"$busybox"
        (cd "$runtime" && find . -type f -printf '%P %s %T@\n' | sort)
        sha256sum <"$dll"
        sha256sum <"$config"
        for f in "${libs[@]}"; do echo "$f $(sha256sum <"$f")"; done
    } | sha256sum | cut -d' ' -f1)
    if [[ "$(image_label $name)" == "$inputs" ]]; then
        log "$name is up to date"
        echo "localhost/$name:latest"
        return
    fi

    local start=$EPOCHREALTIME root
    root=$(mktemp -d "$cache/$name.XXXXXX")
    busybox_root "$root"
    mkdir -p "$root/usr/share" "$root/app"
    cp -a "$runtime" "$root/usr/share/dotnet"
    cp "$dll" "$root/app/App.dll"
    cp "$config" "$root/app/App.runtimeconfig.json"
    # At the path ldd printed (e.g. /lib/x86_64-linux-gnu/libc.so.6 and /lib64/ld-linux-x86-64.so.2): the loader's
    # built-in search path finds them there without an ld.so.cache. -L: the file itself, not the host's symlink.
    for f in "${libs[@]}"; do
        mkdir -p "$root$(dirname "$f")"
        cp -L "$f" "$root$f"
    done
    import_root "$root" "$name" "$inputs" \
        --change "ENV PATH=/usr/local/bin:/bin:/usr/share/dotnet" \
        --change "ENV DOTNET_ROOT=/usr/share/dotnet" \
        --change "ENV DOTNET_SYSTEM_GLOBALIZATION_INVARIANT=1" \
        --change "WORKDIR /app" \
        --change 'CMD ["/usr/share/dotnet/dotnet", "/app/App.dll", "--port", "5080"]'
    local size
    size=$(du -sh "$root" | cut -f1)
    rm -rf "$root"
    log "built $name in $(elapsed "$start") s ($size root; ${#libs[@]} libraries: $(printf '%s ' "${libs[@]##*/}"))"
    echo "localhost/$name:latest"
}

want busybox && build_busybox
want dotnet8 && build_dotnet8
exit 0
