#!/usr/bin/env bash
# Build the collection tarball, install it into an empty collections path, and prove that
# ansible-doc lists every plugin and role from the installed copy (not the checkout).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cd "$repo"
# Look only at the installed copy, never the checkout linked into the venv.
export ANSIBLE_COLLECTIONS_SCAN_SYS_PATH=false
ansible-galaxy collection build --force --output-path "$work/dist" . >/dev/null
tarball=$(ls "$work"/dist/gpuhost-nvidia-*.tar.gz)
echo "built $(basename "$tarball") ($(du -h "$tarball" | cut -f1))"
# --no-deps: community.general comes from the PyPI `ansible` package, and Galaxy is unreachable.
ANSIBLE_COLLECTIONS_PATH="$work/collections" ansible-galaxy collection install --force --no-deps -p "$work/collections" "$tarball" >/dev/null

installed="$work/collections/ansible_collections/gpuhost/nvidia"
fail=0
check() {  # check <plugin type> <names expected from the checkout>
    local type="$1"; shift
    local listed
    listed=$(ANSIBLE_COLLECTIONS_PATH="$work/collections" ansible-doc -t "$type" -l gpuhost.nvidia --json)
    for name in "$@"; do
        if python3 -c 'import json,sys; sys.exit(0 if sys.argv[1] in json.loads(sys.argv[2]) else 1)' "gpuhost.nvidia.$name" "$listed"; then
            echo "ok: ansible-doc -t $type lists gpuhost.nvidia.$name"
        else
            echo "FAIL: ansible-doc -t $type does not list gpuhost.nvidia.$name from the installed tarball"
            fail=1
        fi
    done
}
names() {  # names <dir> <suffix> [find type]: entries of dir without the suffix, sorted
    [[ -d "$1" ]] || return 0
    find "$1" -mindepth 1 -maxdepth 1 -type "${3:-f}" -name "*$2" -printf '%f\n' | sed "s/$2\$//" | sort
}
mapfile -t modules < <(names "$installed/plugins/modules" .py)
mapfile -t roles < <(names "$installed/roles" "" d)
mapfile -t filters < <(names "$installed/plugins/filter" .yml)
[[ ${#modules[@]} -gt 0 ]] && check module "${modules[@]}"
[[ ${#roles[@]} -gt 0 ]] && check role "${roles[@]}"
[[ ${#filters[@]} -gt 0 ]] && check filter "${filters[@]}"
for f in .venv .ci .git; do
    if [[ -e "$installed/$f" ]]; then echo "FAIL: tarball contains $f"; fail=1; fi
done
exit $fail
