#!/usr/bin/env bash
# `make test`: run every tier, keep going past a failure so the summary shows them all,
# then print one line per tier (status, wall time, what it executed) and a closing count.
# The molecule tier runs in the background alongside the others (see below).
# Exit 1 if any tier failed.
set -uo pipefail
# A test that needs a tool bindep.txt lists fails instead of skipping when the tool is absent (tests/unit/conftest.py).
export GPUHOST_REQUIRE_TOOLS=1
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo" || exit 2
logs="$repo/tests/output/tiers"
mkdir -p "$logs"
tiers=(unit changelog-lint lint sanity build molecule)
declare -A status secs
failed=0

# What each tier executed, read back from its log, so a tier that ran nothing shows it.
executed() {
    local log="$logs/$1.log"
    case "$1" in
        unit)
            grep -Eo '[0-9]+ passed' "$log" | tail -n1 | sed 's/$/ pytest tests/' | tr -d '\n'
            # Skips (files outside the repository, ../shared, that are absent): how many, and why.
            grep -E '^SKIPPED \[[0-9]+\]' "$log" | sed -E 's/^SKIPPED \[([0-9]+)\] [^ ]+: /\1 \t/' \
                | awk -F'\t' '{n[$2] += $1; total += $1} END {if (total) {printf ", %d skipped:", total; for (r in n) printf " [%d] %s;", n[r], r}}'
            echo ;;
        changelog-lint) echo "$(find changelogs/fragments -name '*.yml' | wc -l) fragments" ;;
        lint) grep -Eo '[0-9]+ files processed' "$log" | tail -n1 | sed 's/$/ by ansible-lint/' ;;
        sanity)  # the count, then the slowest five of the log's seconds per test (tests/sanity/run.sh)
            echo "$(grep -c '^\[+[0-9]*s\] Running sanity test' "$log") sanity tests; slowest (s): $(grep -m1 '^sanity seconds per test: ' "$log" \
                | sed 's/^sanity seconds per test: //' | cut -d, -f1-5)" ;;
        build) echo "$(grep -c '^ok:' "$log") plugins/roles listed from the installed tarball" ;;
        molecule) grep -E '^molecule: ' "$log" | sed 's/^molecule: //; s/$/ scenarios/' ;;
    esac
}

run_tier() {
    local tier="$1" start=$SECONDS
    if make --no-print-directory "$tier" >"$logs/$tier.log" 2>&1; then echo PASS; else echo FAIL; fi >"$logs/$tier.status"
    echo $((SECONDS - start)) >"$logs/$tier.secs"
}

# Molecule (which builds the test images and repositories first) is mostly waiting on containers, package
# managers and systemd, so it runs in the background while the static tiers run one after another.
echo "=============== tier: molecule (in the background; its log follows at the end) ==============="
run_tier molecule &
molecule_pid=$!
for tier in "${tiers[@]}"; do
    [[ "$tier" == molecule ]] && continue
    echo
    echo "=============== tier: $tier ==============="
    run_tier "$tier"
    cat "$logs/$tier.log"
done
wait "$molecule_pid"
echo
echo "=============== tier: molecule ==============="
cat "$logs/molecule.log"
for tier in "${tiers[@]}"; do
    status[$tier]=$(cat "$logs/$tier.status")
    secs[$tier]=$(cat "$logs/$tier.secs")
    [[ "${status[$tier]}" == PASS ]] || failed=$((failed + 1))
done
echo
echo "=============== summary ==============="
for tier in "${tiers[@]}"; do
    printf '%-16s %s  %4d s  %s\n' "$tier" "${status[$tier]}" "${secs[$tier]}" "$(executed "$tier")"
done
echo "tiers: $((${#tiers[@]} - failed)) passed, $failed failed"
[[ $failed -eq 0 ]]
