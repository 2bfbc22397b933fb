#!/usr/bin/env bash
# Run Molecule scenarios (create -> converge -> idempotence -> check -> verify -> destroy)
# and print one line per scenario with its result, testinfra counts and wall time.
#   tests/molecule/run.sh [SCENARIO] [DISTRO]
# SCENARIO: a directory under molecule/ (default: all of them). DISTRO: a platform group
# (debian12 for now); it is passed to the scenarios as GPUHOST_DISTRO.
# MOLECULE_JOBS (default 2) scenarios run at once; each logs to tests/output/molecule/<name>.log.
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo" || exit 2
want="${1:-}"
export GPUHOST_DISTRO="${2:-}"
jobs="${MOLECULE_JOBS:-2}"
out="$repo/tests/output/molecule"
mkdir -p "$out"

scenarios=()
for dir in molecule/*/; do
    name=$(basename "$dir")
    [[ -f "$dir/molecule.yml" ]] || continue
    [[ -z "$want" || "$want" == "$name" ]] && scenarios+=("$name")
done
if [[ ${#scenarios[@]} -eq 0 ]]; then
    echo "no Molecule scenario matches '${want}' (have: $(find molecule -mindepth 2 -maxdepth 2 -name molecule.yml -printf '%h ' | sed 's|molecule/||g'))" >&2
    exit 2
fi

run_one() {
    local name="$1" start rc
    start=$SECONDS
    molecule test -s "$name" >"$out/$name.log" 2>&1
    rc=$?
    echo "$rc $((SECONDS - start))" >"$out/$name.result"
}

running=0
for name in "${scenarios[@]}"; do
    run_one "$name" &
    running=$((running + 1))
    if ((running >= jobs)); then
        wait -n
        running=$((running - 1))
    fi
done
wait

failed=0
passed_tests=0
for name in "${scenarios[@]}"; do
    read -r rc secs <"$out/$name.result"
    clean=$(sed 's/\x1b\[[0-9;]*m//g' "$out/$name.log")
    tests=$(grep -Eo '(PASSED|FAILED|ERROR) +\[' <<<"$clean" | grep -c PASSED || true)
    bad=$(grep -Eo '(FAILED|ERROR) +\[' <<<"$clean" | wc -l)
    if [[ "$rc" == 0 ]]; then
        status=PASS
    else
        status=FAIL
        failed=$((failed + 1))
        echo "----- molecule/$name failed; the end of its log:"
        tail -n 60 <<<"$clean"
    fi
    passed_tests=$((passed_tests + tests))
    printf 'molecule %-28s %s  %3d s  testinfra: %d passed, %d failed\n' "$name" "$status" "$secs" "$tests" "$bad"
done
printf 'molecule: %d passed, %d failed\n' "$((${#scenarios[@]} - failed))" "$failed"
[[ $failed -eq 0 ]]
