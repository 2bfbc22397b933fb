#!/usr/bin/env bash
# `make demo`: start a fresh Debian 12 systemd container playing a GPU host, converge
# playbooks/site.yml on it, and print the summary the playbook wrote, then which packages the run
# installed and where each came from.
#   tests/demo/run.sh            hermetic: NVIDIA's repositories are replaced by the local signed
#                                mirror of marked stand-in packages (.cache/repos/current, built by
#                                `make repos`); Debian's packages come from Debian's archive. No host
#                                but the package registries is reached.
#   UPSTREAM=1 tests/demo/run.sh NVIDIA's real repositories (needs internet access).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"
name=gpuhost-demo
image=localhost/gpuhost-debian12:latest
out="$repo/tests/output/demo"
repos="$repo/.cache/repos/current"
upstream="${UPSTREAM:-0}"
rm -rf "$out" && mkdir -p "$out"

run_args=(-d --name "$name" --hostname "$name" --systemd=always)
play_args=(-i tests/demo/inventory.yml playbooks/site.yml -e "gpuhost_summary_dir=$out")
if [[ "$upstream" == 1 ]]; then
    echo "== UPSTREAM=1: NVIDIA's real repositories"
else
    [[ -f "$repos/key/fingerprint" ]] || { echo "the local mirror is missing: run 'make repos' (make demo does)" >&2; exit 2; }
    echo "== hermetic: NVIDIA's repositories replaced by the local signed mirror $repos (stand-in packages)"
    run_args+=(-v "$(readlink -f "$repos"):/srv/gpuhost-repos:ro")
    play_args+=(-e "@tests/demo/local-mirror.yml" -e "gpuhost_demo_repos=$repos")
fi

echo "== starting $name from $image"
podman rm -f "$name" >/dev/null 2>&1 || true
podman run "${run_args[@]}" "$image" /sbin/init >/dev/null
for _ in $(seq 60); do  # systemd's bus appears a moment after the container starts
    state=$(podman exec "$name" systemctl is-system-running 2>/dev/null || true)
    [[ "$state" == running || "$state" == degraded ]] && break
    sleep 1
done

podman exec "$name" sh -c 'mkdir -p /srv/demo-app && printf "services:\n  trainer:\n    image: localhost/trainer:latest\n" > /srv/demo-app/docker-compose.yml'
installed() { podman exec "$name" dpkg-query -W -f '${db:Status-Status} ${Package} ${Version}\n' | awk '$1 == "installed" {print $2, $3}' | sort; }
installed >"$out/packages.before"

echo "== ansible-playbook playbooks/site.yml (log: tests/output/demo/site.log)"
if ! ansible-playbook "${play_args[@]}" >"$out/site.log" 2>&1; then
    tail -n 40 "$out/site.log"
    echo "site.yml failed on $name; the container is left running for a look: podman exec -it $name bash" >&2
    exit 1
fi
grep -A3 '^PLAY RECAP' "$out/site.log" | sed 's/^/   /'
echo
cat "$out/$name.txt"

# Where each package the run installed came from: apt's own record of the origin of the installed version.
installed >"$out/packages.after"
comm -13 "$out/packages.before" "$out/packages.after" >"$out/packages.new"
echo
echo "packages this run installed ($(wc -l <"$out/packages.new")):"
while read -r pkg version; do
    # apt-cache policy: the installed version's line, then its sources, each "   <priority> <uri> <suite> ..."
    origin=$(podman exec "$name" apt-cache policy "$pkg" | awk -v v="$version" '
        {line = $0; sub(/^ +(\*\*\* )?/, "", line); split(line, f, " ")}
        /^ +(\*\*\* )?[^ ]+ [0-9]+$/ {found = (f[1] == v); next}
        found && f[2] != "" && f[2] != "/var/lib/dpkg/status" {print f[2]; exit}')
    case "$origin" in
        file:/srv/gpuhost-repos/*) where="local mirror: STAND-IN (marked stub, no NVIDIA software)" ;;
        "") where="unknown origin" ;;
        *) where="real: $origin" ;;
    esac
    printf '  %-36s %-28s %s\n' "$pkg" "$version" "$where"
done <"$out/packages.new" | tee "$out/packages.origin"
echo
echo "The container stays up for a look: podman exec -it $name bash   (remove it: podman rm -f $name)"
