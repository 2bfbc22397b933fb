#!/usr/bin/env bash
# make gpu-bundle: everything tests/gpu/run.sh installs on a GPU machine without network, in one ignored folder.
#
#   .cache/gpu-bundle/wheels/             pip, ansible-core, nvidia-ml-py, PyYAML, jsonschema, docker and what they
#                                         need, for each Python in GPU_BUNDLE_PYTHONS on GPU_BUNDLE_PLATFORM
#   .cache/gpu-bundle/requirements.txt    what run.sh installs from wheels/
#   .cache/gpu-bundle/gpuhost-nvidia-*.tar.gz   the collection, built from this checkout
#   .cache/gpu-bundle/compose-spec.json   the compose schema (from ../shared/schemas), for compose.schema
#   .cache/gpu-bundle/MANIFEST            what was asked for, and every file with its size
#
# Wheels are downloaded once: while MANIFEST names the same request and every file is there, nothing is downloaded
# (the bundle then builds offline). The collection tarball is rebuilt when a file of the checkout is newer than it.
# The bundle must stay under 30 MB (GPU_BUNDLE_MAX_BYTES); the script fails otherwise.
#
# GPU_BUNDLE              the folder (default .cache/gpu-bundle)
# GPU_BUNDLE_PYTHONS      the target machine's possible Python versions (default "3.10 3.11 3.12 3.13"); ansible-core
#                         2.18+ needs 3.11, so 3.10 gets the newest 2.17: the tier runs only modules, which work on
#                         2.17 (it warns that meta/runtime.yml asks for 2.18; the roles need 2.18 for meta end_role)
# GPU_BUNDLE_ARCH         the target machine's architecture (default x86_64; aarch64 for Grace)
# GPU_BUNDLE_GLIBC        the oldest glibc the wheels may need (default 2.28: RHEL 8, Debian 10, Ubuntu 20.04 and newer)
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bundle="${GPU_BUNDLE:-$repo/.cache/gpu-bundle}"
pythons="${GPU_BUNDLE_PYTHONS:-3.10 3.11 3.12 3.13}"
arch="${GPU_BUNDLE_ARCH:-x86_64}"
glibc="${GPU_BUNDLE_GLIBC:-2.28}"
max_bytes="${GPU_BUNDLE_MAX_BYTES:-30000000}"
python="$repo/.venv/bin/python"
[[ -x "$python" ]] || python=python3

# The pins the tests use (requirements/dev.txt), so the GPU machine runs what the unit tests ran.
pin() { sed -n "s/^\($1\)\([=<>!~].*\)\$/\1\2/Ip" "$repo/requirements/dev.txt" | head -n1; }
core="$(pin ansible-core)"
request=("$core" "$(pin nvidia-ml-py)" "$(pin PyYAML)" "$(pin jsonschema)" "$(pin docker)")
for item in "${request[@]}"; do
    [[ -n "$item" ]] || { echo "bundle.sh: a pin is missing from requirements/dev.txt" >&2; exit 2; }
done
key="request: ${request[*]} | pythons: $pythons | platform: $arch glibc $glibc"
# pip does not widen a --platform to older manylinux tags, so name them all, best first.
platforms=()
for ((minor = ${glibc#*.}; minor >= 17; minor--)); do platforms+=(--platform "manylinux_2_${minor}_${arch}"); done
platforms+=(--platform "manylinux2014_${arch}")

complete() {
    [[ -f "$bundle/MANIFEST" && -f "$bundle/requirements.txt" ]] && grep -qxF "$key" "$bundle/MANIFEST" || return 1
    local name
    while read -r name; do
        [[ -f "$bundle/wheels/$name" ]] || return 1
    done < <(sed -n 's/^wheel: \([^ ]*\) .*/\1/p' "$bundle/MANIFEST")
}

mkdir -p "$bundle"
if complete; then
    echo "bundle.sh: the wheels in $bundle are complete; nothing downloaded"
else
    tmp="$(mktemp -d)"
    trap 'rm -rf "$tmp"' EXIT
    download() {  # download <python version> <requirement>...
        local version="$1"; shift
        "$python" -m pip download --quiet --disable-pip-version-check --dest "$tmp" --only-binary=:all: \
            "${platforms[@]}" --python-version "$version" --implementation cp "$@"
    }
    # pip itself, for the lowest Python: run.sh runs it from its wheel (venv --without-pip works without ensurepip).
    lowest="$(tr ' ' '\n' <<<"$pythons" | sort -V | head -n1)"
    download "$lowest" --no-deps pip
    for version in $pythons; do
        wanted=("${request[@]}")
        if [[ "$(printf '%s\n' "$version" 3.11 | sort -V | head -n1)" != 3.11 ]]; then
            wanted[0]="ansible-core>=2.17,<2.18"  # the newest ansible-core that runs on Python 3.10 (modules only)
        fi
        echo "bundle.sh: downloading for Python $version on $arch (glibc $glibc): ${wanted[*]}"
        download "$version" "${wanted[@]}"
    done
    rm -rf "$bundle/wheels"
    mv "$tmp" "$bundle/wheels"
    trap - EXIT
    chmod 755 "$bundle/wheels"
    printf '%s\n' ansible-core nvidia-ml-py PyYAML jsonschema docker >"$bundle/requirements.txt"
    {
        echo "# tests/gpu/bundle.sh: the wheels tests/gpu/run.sh installs offline. Rebuilt when this request changes."
        echo "$key"
        echo "pythons: $pythons"
        (cd "$bundle/wheels" && for f in *.whl; do echo "wheel: $f $(stat -c %s "$f")"; done)
    } >"$bundle/MANIFEST"
fi

# The collection, rebuilt only when something in the checkout is newer than the tarball.
shopt -s nullglob
tarballs=("$bundle"/gpuhost-nvidia-*.tar.gz)
tarball="${tarballs[0]:-}"
if [[ -z "$tarball" ]] || [[ -n "$(cd "$repo" && find . \( -path ./.git -o -path ./.venv -o -path ./.cache -o -path ./tests/output \
        -o -path ./benchmarks/results -o -name __pycache__ \) -prune -o -type f -newer "$tarball" -print -quit)" ]]; then
    rm -f "$bundle"/gpuhost-nvidia-*.tar.gz
    (cd "$repo" && "$python" -m ansible galaxy collection build --force --output-path "$bundle" . >/dev/null)
    tarballs=("$bundle"/gpuhost-nvidia-*.tar.gz)
    echo "bundle.sh: built $(basename "${tarballs[0]}")"
fi
schema="$repo/../shared/schemas/compose-spec.json"
if [[ -f "$schema" && ! -f "$bundle/compose-spec.json" ]]; then
    cp "$schema" "$bundle/compose-spec.json"
fi

size="$(du -sb "$bundle" | cut -f1)"
echo "bundle.sh: $bundle holds $(find "$bundle" -type f | wc -l) files, $((size / 1000)) kB ($(find "$bundle/wheels" -name '*.whl' | wc -l) wheels)"
if ((size > max_bytes)); then
    echo "bundle.sh: the bundle is over $((max_bytes / 1000000)) MB; drop a Python version (GPU_BUNDLE_PYTHONS) or a package" >&2
    exit 1
fi
