#!/usr/bin/env bash
# `make demo`: start a fresh Debian 12 systemd container playing a GPU host, converge
# playbooks/site.yml on it, and print the summary the playbook wrote.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"
name=gpuhost-demo
image=localhost/gpuhost-debian12:latest
out="$repo/tests/output/demo"
rm -rf "$out" && mkdir -p "$out"

echo "== starting $name from $image"
podman rm -f "$name" >/dev/null 2>&1 || true
podman run -d --name "$name" --hostname "$name" --systemd=always "$image" /sbin/init >/dev/null
for _ in $(seq 60); do  # systemd's bus appears a moment after the container starts
    state=$(podman exec "$name" systemctl is-system-running 2>/dev/null || true)
    [[ "$state" == running || "$state" == degraded ]] && break
    sleep 1
done

podman exec "$name" sh -c 'mkdir -p /srv/demo-app && printf "services:\n  trainer:\n    image: localhost/trainer:latest\n" > /srv/demo-app/docker-compose.yml'

echo "== ansible-playbook playbooks/site.yml (log: tests/output/demo/site.log)"
if ! ansible-playbook -i tests/demo/inventory.yml playbooks/site.yml -e "gpuhost_summary_dir=$out" >"$out/site.log" 2>&1; then
    tail -n 40 "$out/site.log"
    echo "site.yml failed on $name; the container is left running for a look: podman exec -it $name bash" >&2
    exit 1
fi
grep -A3 '^PLAY RECAP' "$out/site.log" | sed 's/^/   /'
echo
cat "$out/$name.txt"
echo
echo "The container stays up for a look: podman exec -it $name bash   (remove it: podman rm -f $name)"
