#!/usr/bin/env bash
# Build the execution environment here, without Galaxy or a container registry (`make ee`).
#   ee/build.sh [TAG]      default localhost/gpuhost-nvidia-ee:latest; prints the tag on its last line
# The base is the debootstrapped Debian 12 of the test hosts (tests/hosts/build.sh --bare), which gets Python and pip
# from the Debian mirror; ansible-core, ansible-runner and the collections' Python requirements come from PyPI;
# the collections come from local tarballs (ee/offline.py). Users build ee/execution-environment.yml as docs/awx.md says.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tag="${1:-localhost/gpuhost-nvidia-ee:latest}"
export CONTAINERS_CONF="${CONTAINERS_CONF:-$repo/tests/hosts/containers.conf}"
export PATH="$repo/.venv/bin:$PATH"
work="$repo/.cache/ee"
log() { printf '[ee] %s\n' "$*" >&2; }

start=$SECONDS
base=$("$repo/tests/hosts/build.sh" --bare | tail -n1)
log "base image $base"
mkdir -p "$work"
python "$repo/ee/offline.py" "$work/definition" "$base" "$tag" | sed "s/^/[ee] /" >&2
# --no-cache would cost minutes of pip on every run; the layers are keyed by the context's files.
ansible-builder build --container-runtime podman -f "$work/definition/execution-environment.yml" \
    --context "$work/context" -t "$tag" -v 3 >"$work/build.log" 2>&1 || {
    tail -n 40 "$work/build.log" >&2
    log "ansible-builder build failed; the whole log is $work/build.log"
    exit 1
}
log "built $tag in $((SECONDS - start)) s"
echo "$tag"
