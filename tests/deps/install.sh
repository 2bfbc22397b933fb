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
    sed -e 's/#.*//' "$repo/bindep.txt" | awk 'NF && /platform:dpkg/ && !/trixie-extract/ {print $1}'
}

# bindep lines with the trixie-extract profile: newer tools than the machine's release has (Debian 13's Compose v2 on a
# Debian 12 machine). They are downloaded from Debian 13 with a private apt configuration, which leaves the machine's
# apt state alone, and unpacked (dpkg-deb -x, nothing installed, no maintainer scripts) under .cache/tools/trixie,
# where the tests that use them look.
extract_packages() {
    sed -e 's/#.*//' "$repo/bindep.txt" | awk 'NF && /trixie-extract/ {print $1}'
}

extract_trixie() {
    local want dest apt opts deb
    mapfile -t want < <(extract_packages)
    ((${#want[@]} > 0)) || return 0
    dest="$repo/.cache/tools/trixie"
    if [[ -f "$dest/.packages" && "$(cat "$dest/.packages")" == "${want[*]}" ]]; then
        return 0
    fi
    apt="$repo/.cache/apt-trixie"
    mkdir -p "$apt/lists/partial" "$apt/archives/partial"
    printf 'deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main\n' \
        >"$apt/sources.list"
    opts=(-o "Dir::Etc::SourceList=$apt/sources.list" -o Dir::Etc::SourceParts=/dev/null -o "Dir::State::Lists=$apt/lists"
          -o "Dir::Cache=$apt" -o "Dir::Cache::archives=$apt/archives" -o APT::Sandbox::User=root)
    echo "[deps] Debian 13 packages, unpacked under .cache/tools/trixie: ${want[*]}"
    apt-get "${opts[@]}" update -qq
    rm -f "$apt"/archives/*.deb
    (cd "$apt/archives" && apt-get "${opts[@]}" download "${want[@]}" >/dev/null)
    rm -rf "$dest"
    mkdir -p "$dest"
    for deb in "$apt"/archives/*.deb; do
        dpkg-deb -x "$deb" "$dest"
    done
    echo "${want[*]}" >"$dest/.packages"
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
        unpacked=$(extract_packages | xargs)
        if [[ -n "$unpacked" && "$(cat "$repo/.cache/tools/trixie/.packages" 2>/dev/null)" != "$unpacked" ]]; then
            echo "not unpacked (bindep.txt, trixie-extract): $unpacked; run tests/deps/install.sh" >&2
            exit 1
        fi
        exit 0 ;;
    "") ;;
    *) echo "usage: tests/deps/install.sh [--list|--check]" >&2; exit 2 ;;
esac

mapfile -t need < <(missing)
if ((${#need[@]} == 0)); then
    echo "[deps] all $(packages | wc -l) packages of bindep.txt are installed"
    extract_trixie
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
extract_trixie
