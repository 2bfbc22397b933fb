#!/usr/bin/env bash
# `make test`: run every tier, keep going past a failure so the summary shows them all,
# then print one line per tier (status, wall time) and a closing count. Exit 1 if any failed.
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
tiers=(unit changelog-lint lint sanity build molecule)
declare -A status secs
failed=0
for tier in "${tiers[@]}"; do
    echo
    echo "=============== tier: $tier ==============="
    start=$SECONDS
    if make --no-print-directory "$tier"; then status[$tier]=PASS; else status[$tier]=FAIL; failed=$((failed + 1)); fi
    secs[$tier]=$((SECONDS - start))
done
echo
echo "=============== summary ==============="
for tier in "${tiers[@]}"; do
    printf '%-16s %s  %4d s\n' "$tier" "${status[$tier]}" "${secs[$tier]}"
done
echo "tiers: $((${#tiers[@]} - failed)) passed, $failed failed"
[[ $failed -eq 0 ]]
