#!/usr/bin/env bash
# The execution-environment tier (on demand and in `make rehearsal`, not in `make test`: it takes minutes):
# build the EE here without Galaxy (ee/build.sh), then converge Debian 12 test hosts with site.yml inside it through
# ansible-navigator (first converge, then a second run with changed=0) and ansible-runner (tests/ee/converge.py).
#   tests/ee/run.sh                 build (layers cached) and run
#   GPUHOST_EE_IMAGE=IMG tests/ee/run.sh   use an EE built before
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"
export CONTAINERS_CONF="${CONTAINERS_CONF:-$repo/tests/hosts/containers.conf}"
start=$SECONDS
tests/hosts/build.sh debian12 >/dev/null
[[ -f .cache/repos/current/key/fingerprint ]] || .venv/bin/python tests/repos/build.py >/dev/null
image="${GPUHOST_EE_IMAGE:-$(ee/build.sh | tail -n1)}"
echo "[ee] image $image ($((SECONDS - start)) s so far)"
.venv/bin/python tests/ee/converge.py --image "$image" "$@"
echo "[ee] passed in $((SECONDS - start)) s"
