#!/usr/bin/env bash
# `make rehearsal`: CI on a brand-new machine. A clean clone of the committed HEAD (with ../shared beside it,
# as CI has it) is run through `.ci/run` inside a bare Debian 12 container: the debootstrap minbase image every
# test image starts from, with nothing the test images add (no python3, no make, no podman). .ci/run must
# install everything itself from bindep.txt and the PyPI pins, then pass `make test`, nested podman included
# (privileged container, vfs storage, runc).
#   tests/rehearsal/run.sh                 every tier, every Molecule scenario (what CI runs)
#   SCENARIOS="repos gpu_compose" tests/rehearsal/run.sh
#                                          every tier, only these Molecule scenarios (quicker; the summary says
#                                          which scenarios it left out)
# Logs: tests/output/rehearsal/ (ci.log: the whole .ci/run output; summary.txt; inside/: the tiers' and
# scenarios' own logs from the clone).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"
# podman with runc and lowered ulimits (as `make` exports it): this machine cannot raise RLIMIT_NOFILE.
export CONTAINERS_CONF="${CONTAINERS_CONF:-$repo/tests/hosts/containers.conf}"
out="$repo/tests/output/rehearsal"
work="${REHEARSAL_WORK:-/var/tmp/gpuhost-rehearsal}"
name=gpuhost-rehearsal
scenarios="${SCENARIOS:-}"
shared="$(cd "$repo/.." && pwd)/shared"
log() { printf '[rehearsal] %s\n' "$*"; }

rm -rf "$out" && mkdir -p "$out/inside"
[[ -z "$(git status --porcelain --untracked-files=no)" ]] || log "note: uncommitted changes are NOT rehearsed (a clean clone of HEAD $(git rev-parse --short HEAD) is)"

base=$(tests/hosts/build.sh --bare)
log "bare machine: $base (debootstrap minbase bookworm)"

podman rm -f "$name" >/dev/null 2>&1 || true
rm -rf "$work" && mkdir -p "$work"
git clone --quiet --no-hardlinks "$repo" "$work/main"
# The commit rehearsed (HEAD may move while the rehearsal runs; the summary names this one).
rehearsed=$(git -C "$work/main" rev-parse --short HEAD)
if [[ -d "$shared" ]]; then
    cp -a "$shared" "$work/shared"
else
    log "no $shared beside the repository: the tests that read it will skip and say so"
fi

# A brand-new machine of this workplace still has the workplace's registry access: its CA certificates (TLS to the
# registries goes through an egress proxy), its pip and apt settings. Carry exactly those, nothing installed.
mkdir -p "$work/machine/ca" "$work/machine/apt.conf.d"
cp /usr/local/share/ca-certificates/*.crt "$work/machine/ca/" 2>/dev/null || true
[[ -f /etc/pip.conf ]] && cp /etc/pip.conf "$work/machine/pip.conf"
for conf in /etc/apt/apt.conf.d/99*; do [[ -f "$conf" ]] && cp "$conf" "$work/machine/apt.conf.d/"; done
env_args=()
for var in PIP_CERT SSL_CERT_FILE SSL_CERT_DIR REQUESTS_CA_BUNDLE CURL_CA_BUNDLE GIT_SSL_CAINFO PIP_DEFAULT_TIMEOUT; do
    [[ -n "${!var:-}" ]] && env_args+=(-e "$var=${!var}")
done

# What the machine's own configuration gives a nested podman: vfs storage (no overlay on overlay) and runc (the
# project's containers.conf selects runc and lowers the ulimits, as on the host).
cat >"$work/storage.conf" <<'CONF'
[storage]
driver = "vfs"
runroot = "/run/containers/storage"
graphroot = "/var/lib/containers/storage"
CONF

inner=$(cat <<'SH'
set -euo pipefail
install -D -m 0644 /rehearsal/storage.conf /etc/containers/storage.conf
mkdir -p /usr/local/share/ca-certificates && cp /rehearsal/machine/ca/. /usr/local/share/ca-certificates/ -r
[ -f /rehearsal/machine/pip.conf ] && cp /rehearsal/machine/pip.conf /etc/pip.conf
cp -r /rehearsal/machine/apt.conf.d/. /etc/apt/apt.conf.d/
# The nested podman's default network on its own subnet: podman's default 10.88.0.0/16 is also the subnet this
# container's own address is on, and nested traffic could not be routed out (DNS failed in the nested builds).
mkdir -p /etc/cni/net.d
cat >/etc/cni/net.d/87-podman-bridge.conflist <<'CNI'
{"cniVersion": "0.4.0", "name": "podman", "plugins": [
  {"type": "bridge", "bridge": "cni-podman0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
   "ipam": {"type": "host-local", "routes": [{"dst": "0.0.0.0/0"}], "ranges": [[{"subnet": "10.89.0.0/16", "gateway": "10.89.0.1"}]]}},
  {"type": "portmap", "capabilities": {"portMappings": true}}, {"type": "firewall"}, {"type": "tuning"}]}
CNI
cd /rehearsal/main
echo "[rehearsal] inside: $(. /etc/os-release; echo "$PRETTY_NAME"); python3: $(command -v python3 || echo none); make: $(command -v make || echo none); podman: $(command -v podman || echo none)"
start=$SECONDS
rc=0
CI=true bash .ci/run || rc=$?
echo "[rehearsal] .ci/run exited $rc after $((SECONDS - start)) s"
exit $rc
SH
)

log "running .ci/run in $name (Molecule scenarios: ${scenarios:-all}); log: tests/output/rehearsal/ci.log"
start=$SECONDS
rc=0
podman run --rm --name "$name" --privileged --hostname "$name" \
    -e CI=true -e MOLECULE_SCENARIOS="$scenarios" "${env_args[@]}" \
    -v "$work:/rehearsal" "$base" bash -c "$inner" >"$out/ci.log" 2>&1 || rc=$?
secs=$((SECONDS - start))

{
    echo "rehearsal of $rehearsed on $base: .ci/run exited $rc in ${secs} s"
    if [[ -n "$scenarios" ]]; then
        all=$(find molecule -mindepth 2 -maxdepth 2 -name molecule.yml -printf '%h\n' | sed 's|molecule/||' | sort | xargs)
        left=$(comm -23 <(tr ' ' '\n' <<<"$all" | sort) <(tr ' ' '\n' <<<"$scenarios" | sort) | xargs)
        echo "Molecule scenarios run: $scenarios; not run in this rehearsal: ${left:-none}"
    fi
    sed -n '/=============== summary ===============/,$p' "$out/ci.log"
} | tee "$out/summary.txt"
if ((rc != 0)); then
    echo "----- the end of ci.log:"
    tail -n 60 "$out/ci.log"
fi
# Keep what the tiers wrote inside (per-tier and per-scenario logs) before the clone goes.
[[ -d "$work/main/tests/output" ]] && cp -a "$work/main/tests/output/." "$out/inside/" 2>/dev/null
rm -rf "$work"
exit "$rc"
