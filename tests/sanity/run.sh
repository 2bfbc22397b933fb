#!/usr/bin/env bash
# ansible-test sanity, run from a correct ansible_collections/gpuhost/nvidia path.
# The collection is staged (git-tracked and untracked-not-ignored files) outside this
# checkout, because ansible-test lists a collection's files through the enclosing git repo.
#   tests/sanity/run.sh [extra ansible-test sanity args]
# GPUHOST_VENV=.cache/venv-core218 runs it with that venv's ansible-test (make venv218; tests/use_venv.sh).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck source=tests/use_venv.sh
source "$repo/tests/use_venv.sh"
stage="${GPUHOST_SANITY_STAGE:-${TMPDIR:-/tmp}/gpuhost-sanity}"
dest="$stage/ansible_collections/gpuhost/nvidia"

rm -rf "$stage"
mkdir -p "$dest"
(cd "$repo" && git ls-files -co --exclude-standard -z | tar --null -T - -cf -) | tar -C "$dest" -xf -

# ansible-test bootstraps pip in each sanity venv from a host CI cannot reach: give it the
# local stand-in under the cache name it looks for (see get_pip_bootstrap.py).
pip_version=$(python -c 'import re, ansible_test._internal.python_requirements as m, inspect; print(re.search(r"pip=.([0-9.]+).", inspect.getsource(m)).group(1))')
cache="$HOME/.ansible/test/cache"
mkdir -p "$cache"
cp "$repo/tests/sanity/get_pip_bootstrap.py" "$cache/get_pip_${pip_version//./_}.py"

# ansible-test's 'Running sanity test "pylint"' lines with the seconds since the tests began in front, and at the end
# one line with the seconds each test took, longest first, so that a slow sanity tier shows which test grew.
stamp_tests() {
    local start="$1" line name="" began=0
    local -a times=()
    while IFS= read -r line; do
        if [[ "$line" =~ ^Running\ sanity\ test\ \"([^\"]+)\" ]]; then
            [[ -n "$name" ]] && times+=("$((SECONDS - began)) $name")
            name="${BASH_REMATCH[1]}"
            began=$SECONDS
            line="[+$((SECONDS - start))s] $line"
        fi
        printf '%s\n' "$line"
    done
    [[ -n "$name" ]] && times+=("$((SECONDS - began)) $name")
    if ((${#times[@]})); then
        printf 'sanity seconds per test: %s\n' "$(printf '%s\n' "${times[@]}" | sort -k1,1nr -k2 | awk '{printf "%s%s %s", (NR > 1 ? ", " : ""), $2, $1}')"
    fi
}

cd "$dest"
rc=0
ansible-test sanity --python 3.11 --requirements --color no "$@" 2>&1 | stamp_tests "$SECONDS" || rc=$?
exit "$rc"
