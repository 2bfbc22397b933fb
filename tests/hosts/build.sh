#!/usr/bin/env bash
# Build (or reuse) the podman test hosts.
#   tests/hosts/build.sh [debian12|debian13|rocky9|rocky10|arch|ubuntu2204|ubuntu2404 ...]
#   tests/hosts/build.sh --bare      the bare debootstrap image only (printed tag)
# Each image is tagged localhost/gpuhost-<name>:<key>, where <key> hashes the builder's files,
# and re-tagged :latest. An image whose key already exists is reused, so a second run costs
# about a second. Needs root; installs bindep.txt's packages with apt when missing (tests/deps/install.sh).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export CONTAINERS_CONF="${CONTAINERS_CONF:-$here/containers.conf}"

log() { printf '[hosts] %s\n' "$*" >&2; }

# The system packages (podman, runc, debootstrap, ...) come from bindep.txt, by package name.
ensure_tools() {
    "$here/../deps/install.sh" >&2
}

# The Debian mirror this machine already uses (air-gapped sites point it at their own).
debian_mirror() {
    if [[ -n "${GPUHOST_DEBIAN_MIRROR:-}" ]]; then
        echo "$GPUHOST_DEBIAN_MIRROR"
        return
    fi
    local uri
    uri=$(grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}' | grep -v -- '-security' | head -n1 || true)
    if [[ -z "$uri" ]]; then
        uri=$(grep -hs '^deb ' /etc/apt/sources.list | awk '{print $2}' | grep -v -- '-security' | head -n1 || true)
    fi
    echo "${uri:-http://deb.debian.org/debian}"
}

# Images built on top of another one (emulated distros on a Debian host; rocky10 needs trixie's dnf versionlock plugin).
declare -A PARENT=([rocky9]=debian12 [rocky10]=debian13 [arch]=debian12 [ubuntu2204]=debian12 [ubuntu2404]=debian12)
# Images that share another image's files without being built on it (debian13 copies debian12's zipimport cache).
declare -A SHARES=([debian13]=debian12)

content_key() {
    # Everything that shapes the image: this script, the image's directory and its parent's.
    local dirs=("$1")
    [[ -n "${PARENT[$1]:-}" ]] && dirs+=("${PARENT[$1]}")
    [[ -n "${SHARES[$1]:-}" ]] && dirs+=("${SHARES[$1]}")
    (cd "$here" && find build.sh "${dirs[@]}" -type f -print0 | sort -z | xargs -0 sha256sum) | sha256sum | cut -c1-12
}

build_base() {
    local tag="$1" mirror="$2" suite="${3:-bookworm}" rootfs
    if podman image exists "$tag"; then
        return
    fi
    rootfs=$(mktemp -d /var/tmp/gpuhost-rootfs.XXXXXX)
    log "debootstrap $suite (minbase) from $mirror"
    debootstrap --variant=minbase "$suite" "$rootfs" "$mirror" >/dev/null
    tar -C "$rootfs" -c . | podman import --quiet - "$tag" >/dev/null
    rm -rf "$rootfs"
}

# The bare Debian 12 (debootstrap minbase) image every test image starts from, and that `make rehearsal` runs
# .ci/run in as a brand-new machine. Keyed by this script alone: only the recipe above shapes it.
bare_tag() {
    echo "localhost/gpuhost-bookworm-base:$(sha256sum "$here/build.sh" | cut -c1-12)"
}

build_debian12() {
    local key="$1" mirror base
    mirror=$(debian_mirror)
    base=$(bare_tag)
    build_base "$base" "$mirror"
    log "building localhost/gpuhost-debian12:$key"
    podman build --quiet --build-arg "BASE=$base" --build-arg "MIRROR=$mirror" \
        -t "localhost/gpuhost-debian12:$key" "$here/debian12" >/dev/null
}

build_debian13() {
    local key="$1" mirror base
    mirror=$(debian_mirror)
    base="localhost/gpuhost-trixie-base:$(sha256sum "$here/build.sh" | cut -c1-12)"
    build_base "$base" "$mirror" trixie
    log "building localhost/gpuhost-debian13:$key"
    podman build --quiet --build-arg "BASE=$base" --build-arg "MIRROR=$mirror" \
        -t "localhost/gpuhost-debian13:$key" -f "$here/debian13/Containerfile" "$here" >/dev/null
}

# rocky9, rocky10, arch, ubuntu2204, ubuntu2404: FROM the parent image built (or reused) for the same checkout.
build_derived() {
    local name="$1" key="$2" parent
    parent=$(build_one "${PARENT[$name]}")
    log "building localhost/gpuhost-$name:$key on $parent"
    podman build --quiet --build-arg "BASE=$parent" -t "localhost/gpuhost-$name:$key" "$here/$name" >/dev/null
}

# Build or reuse one image; print its tag.
build_one() {
    local name="$1" key tag start
    key=$(content_key "$name")
    tag="localhost/gpuhost-$name:$key"
    start=$SECONDS
    if podman image exists "$tag"; then
        log "$name: reusing $tag"
    elif [[ -n "${PARENT[$name]:-}" ]]; then
        build_derived "$name" "$key"
        log "$name: built $tag in $((SECONDS - start)) s"
    else
        "build_$name" "$key"
        log "$name: built $tag in $((SECONDS - start)) s"
    fi
    podman tag "$tag" "localhost/gpuhost-$name:latest"
    # Drop this image's earlier builds (an image still used by a container stays).
    podman images --format '{{.Repository}}:{{.Tag}}' "localhost/gpuhost-$name" \
        | grep -vx -e "$tag" -e "localhost/gpuhost-$name:latest" \
        | xargs -r podman rmi >/dev/null 2>&1 || true
    echo "$tag"
}

main() {
    ensure_tools
    local name
    if [[ "${1:-}" == --bare ]]; then  # build (or reuse) the bare image; print its tag
        build_base "$(bare_tag)" "$(debian_mirror)"
        bare_tag
        return
    fi
    for name in "${@:-debian12}"; do
        [[ -d "$here/$name" && -f "$here/$name/Containerfile" ]] || { log "unknown test host '$name' (have: debian12 debian13 rocky9 rocky10 arch ubuntu2204 ubuntu2404)"; exit 2; }
        build_one "$name"
    done
}

main "$@"
