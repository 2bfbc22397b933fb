#!/usr/bin/env bash
# `make test`: run every tier, keep going past a failure so the summary shows them all,
# then print one line per tier (status, wall time, what it executed) and a closing count.
# Exit 1 if any tier failed.
set -uo pipefail
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
        unit) grep -Eo '[0-9]+ passed' "$log" | tail -n1 | sed 's/$/ pytest tests/' ;;
        changelog-lint) echo "$(find changelogs/fragments -name '*.yml' | wc -l) fragments" ;;
        lint) grep -Eo '[0-9]+ files processed' "$log" | tail -n1 | sed 's/$/ by ansible-lint/' ;;
        sanity) echo "$(grep -c '^Running sanity test' "$log") sanity tests" ;;
        build) echo "$(grep -c '^ok:' "$log") plugins/roles listed from the installed tarball" ;;
        molecule) grep -E '^molecule: ' "$log" | sed 's/^molecule: //; s/$/ scenarios/' ;;
    esac
}

for tier in "${tiers[@]}"; do
    echo
    echo "=============== tier: $tier ==============="
    start=$SECONDS
    if make --no-print-directory "$tier" 2>&1 | tee "$logs/$tier.log"; then status[$tier]=PASS; else status[$tier]=FAIL; failed=$((failed + 1)); fi
    secs[$tier]=$((SECONDS - start))
done
echo
echo "=============== summary ==============="
for tier in "${tiers[@]}"; do
    printf '%-16s %s  %4d s  %s\n' "$tier" "${status[$tier]}" "${secs[$tier]}" "$(executed "$tier")"
done
echo "tiers: $((${#tiers[@]} - failed)) passed, $failed failed"
[[ $failed -eq 0 ]]
