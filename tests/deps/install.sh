#!/usr/bin/env bash
# Install the Debian/Ubuntu packages bindep.txt lists for the test tiers, by package name.
#   tests/deps/install.sh            install what dpkg does not have installed yet (apt-get update first)
#   tests/deps/install.sh --list     print the package names and exit
#   tests/deps/install.sh --check    exit 1 naming the packages that are not installed
# Whether a package is there is asked of dpkg by its name, never by probing for a command: a command can come
# from another package than the one whose files a tool needs (repo-add vs makepkg's util scripts).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"

packages() {
    # bindep lines: "name [platform:dpkg test]"; comments and blank lines skipped; only dpkg-platform entries.
    sed -e 's/#.*//' "$repo/bindep.txt" | awk 'NF && /platform:dpkg/ {print $1}'
}

missing() {
    local pkg status
    for pkg in $(packages); do
        status=$(dpkg-query -W -f '${db:Status-Status}' "$pkg" 2>/dev/null || true)
        [[ "$status" == installed ]] || echo "$pkg"
    done
}

case "${1:-}" in
    --list) packages; exit 0 ;;
    --check)
        need=$(missing | xargs)
        [[ -z "$need" ]] || { echo "not installed (bindep.txt): $need; run tests/deps/install.sh" >&2; exit 1; }
        exit 0 ;;
    "") ;;
    *) echo "usage: tests/deps/install.sh [--list|--check]" >&2; exit 2 ;;
esac

mapfile -t need < <(missing)
if ((${#need[@]} == 0)); then
    echo "[deps] all $(packages | wc -l) packages of bindep.txt are installed"
    exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
    echo "[deps] missing: ${need[*]}; install them as root: apt-get install ${need[*]}" >&2
    exit 1
fi
echo "[deps] apt-get install ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# A configuration file the machine already has (an admin's, or podman's network set up beforehand) is kept.
log=$(mktemp)
if ! apt-get install -y -qq --no-install-recommends -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
        "${need[@]}" >"$log" 2>&1; then
    tail -n 30 "$log" >&2
    rm -f "$log"
    exit 1
fi
rm -f "$log"
echo "[deps] installed ${#need[@]} packages"
