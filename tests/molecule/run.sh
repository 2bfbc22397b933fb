#!/usr/bin/env bash
# Run Molecule scenarios (create -> converge -> idempotence -> check -> verify -> destroy)
# and print one line per scenario with its result, testinfra counts and wall time.
#   tests/molecule/run.sh [SCENARIO] [DISTRO]
# SCENARIO: a directory under molecule/, or several separated by spaces (default: $MOLECULE_SCENARIOS, else all). DISTRO: debian12,
# debian13, rocky9, rocky10, arch, ubuntu2204 or ubuntu2404;
# only that family's platforms run (`molecule test -s S --platform-name P`, once per platform of the
# scenario whose name has the DISTRO as one of its dash-separated parts), and a scenario without such a
# platform is skipped with a message. DISTRO is also exported to the scenarios as GPUHOST_DISTRO.
# MOLECULE_JOBS (default 2: a third job slowed every scenario down on 2 cores) scenarios run at once; each logs to tests/output/molecule/<name>.log.
# GPUHOST_VENV=.cache/venv-core218 runs the scenarios with that venv's molecule and ansible-core (make venv218;
# tests/use_venv.sh), e.g. GPUHOST_VENV=.cache/venv-core218 tests/molecule/run.sh site debian12.
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo" || exit 2
# shellcheck source=tests/use_venv.sh
source "$repo/tests/use_venv.sh"
want="${1:-${MOLECULE_SCENARIOS:-}}"
export GPUHOST_DISTRO="${2:-}"
jobs="${MOLECULE_JOBS:-2}"
out="$repo/tests/output/molecule"
mkdir -p "$out"

# The platform names of a scenario (its molecule.yml, else the shared .config/molecule/config.yml) that
# belong to DISTRO, one per line. ${MOLECULE_SCENARIO_NAME} is filled in as molecule does.
platforms_for() {
    local name="$1"
    python3 - "$name" "$GPUHOST_DISTRO" <<'PY'
import sys
from pathlib import Path

import yaml

name, distro = sys.argv[1], sys.argv[2]
platforms = (yaml.safe_load(Path(f"molecule/{name}/molecule.yml").read_text()) or {}).get("platforms")
if platforms is None:
    platforms = yaml.safe_load(Path(".config/molecule/config.yml").read_text())["platforms"]
for platform in platforms:
    full = platform["name"].replace("${MOLECULE_SCENARIO_NAME}", name)
    if distro in full.split("-"):
        print(full)
PY
}

# Longest first, so that the last scenario to start is a short one and the two lanes finish together (the others
# follow in name order). The order of the CI scenarios follows their times in the last clean-clone rehearsal: site 940 s,
# ubuntu 787, nvidia_container_toolkit 658, vfio_passthrough 504, absent 352, gpu_exporter 332 (two lanes: 1796 s, where
# the order before, absent third, took 1930).
LONGEST_FIRST=(site nvidia_driver ubuntu nvidia_container_toolkit vfio_passthrough absent gpu_exporter gpu_settings gpu_compose gpu_doctor repos nvidia_gpu_facts)
scenarios=()
for name in "${LONGEST_FIRST[@]}" $(find molecule -mindepth 2 -maxdepth 2 -name molecule.yml -printf '%h\n' | sed 's|molecule/||' | sort); do
    [[ -f "molecule/$name/molecule.yml" ]] || continue
    [[ " ${scenarios[*]} " == *" $name "* ]] && continue
    [[ -z "$want" || " $want " == *" $name "* ]] && scenarios+=("$name")
done
# Cells that run on demand, not in `make test` (tests/molecule/on-demand.txt: a scenario and why, per line), so that
# the CI run stays within its time budget. Named explicitly (ROLE=, MOLECULE_SCENARIOS=) or with GPUHOST_MOLECULE_ALL=1
# they run like any other; the summary names the ones left out.
on_demand=()
if [[ -z "$want" && "${GPUHOST_MOLECULE_ALL:-0}" != 1 && -f tests/molecule/on-demand.txt ]]; then
    while read -r name reason; do
        [[ -z "$name" || "$name" == \#* ]] && continue
        if [[ " ${scenarios[*]} " == *" $name "* ]]; then
            kept=()  # by whole name: a pattern substitution would also cut "upgrade" out of "upgrade_roll"
            for scenario in "${scenarios[@]}"; do [[ "$scenario" == "$name" ]] || kept+=("$scenario"); done
            scenarios=("${kept[@]}")
            on_demand+=("$name")
            echo "molecule $name: on demand, not run here ($reason); run it with: make molecule ROLE=$name"
        fi
    done <tests/molecule/on-demand.txt
    read -r -a scenarios <<<"${scenarios[*]}"
fi
if [[ ${#scenarios[@]} -eq 0 ]]; then
    echo "no Molecule scenario matches '${want}' (have: $(find molecule -mindepth 2 -maxdepth 2 -name molecule.yml -printf '%h ' | sed 's|molecule/||g'))" >&2
    exit 2
fi
if [[ -n "$GPUHOST_DISTRO" ]]; then
    case "$GPUHOST_DISTRO" in
        debian12 | debian13 | rocky9 | rocky10 | arch | ubuntu2204 | ubuntu2404) ;;
        *) echo "DISTRO must be debian12, debian13, rocky9, rocky10, arch, ubuntu2204 or ubuntu2404, not '$GPUHOST_DISTRO'" >&2; exit 2 ;;
    esac
    with_distro=()
    for name in "${scenarios[@]}"; do
        if [[ -n "$(platforms_for "$name")" ]]; then
            with_distro+=("$name")
        else
            echo "molecule $name: skipped, it has no $GPUHOST_DISTRO platform"
        fi
    done
    if [[ ${#with_distro[@]} -eq 0 ]]; then
        echo "molecule: no scenario matching '${want:-*}' has a $GPUHOST_DISTRO platform; nothing to run"
        exit 0
    fi
    scenarios=("${with_distro[@]}")
fi

# Molecule's step lines ("INFO  site ➜ converge: Executing", "... Executed: Successful") with the seconds since the
# scenario started in front, so that the log shows where the time went (step_times sums them per step).
stamp_steps() {
    local start="$1" line
    while IFS= read -r line; do
        [[ "$line" == *" ➜ "*Execut* ]] && line="[+$((SECONDS - start))s] $line"
        printf '%s\n' "$line"
    done
}

# "create 21 prepare 40 check 95 ..." from a stamped log: seconds per step, in the order the steps first ran (a step
# that runs twice, check or destroy, is summed).
step_times() {
    sed 's/\x1b\[[0-9;]*m//g' "$1" | awk '
        /^\[\+[0-9]+s\] .* ➜ [a-z_]+: Executing$/ { t = substr($1, 3) + 0; sub(/:$/, "", $5); step = $5; began = t }
        /^\[\+[0-9]+s\] .* ➜ [a-z_]+: Executed/ && step != "" { t = substr($1, 3) + 0
            if (!(step in secs)) order[++n] = step; secs[step] += t - began; step = "" }
        END { for (i = 1; i <= n; i++) printf "%s%s %d", (i > 1 ? " " : ""), order[i], secs[order[i]] }'
}

run_one() {
    local name="$1" start rc=0 platform status
    start=$SECONDS
    if [[ -z "$GPUHOST_DISTRO" ]]; then
        molecule test -s "$name" 2>&1 | stamp_steps "$start" >"$out/$name.log"
        rc=${PIPESTATUS[0]}
    else
        : >"$out/$name.log"
        for platform in $(platforms_for "$name"); do
            molecule test -s "$name" --platform-name "$platform" 2>&1 | stamp_steps "$start" >>"$out/$name.log"
            status=${PIPESTATUS[0]}
            ((status == 0)) || rc=$status
        done
    fi
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
    skipped=$(grep -Eo 'SKIPPED +\[' <<<"$clean" | wc -l)
    if [[ "$rc" == 0 ]]; then
        status=PASS
    else
        status=FAIL
        failed=$((failed + 1))
        echo "----- molecule/$name failed; the end of its log:"
        tail -n 60 <<<"$clean"
    fi
    passed_tests=$((passed_tests + tests))
    printf 'molecule %-28s %s  %3d s  testinfra: %d passed, %d failed, %d skipped\n' "$name" "$status" "$secs" "$tests" "$bad" "$skipped"
    printf 'molecule %-28s steps (s): %s\n' "$name" "$(step_times "$out/$name.log")"
done
printf 'molecule: %d passed, %d failed%s\n' "$((${#scenarios[@]} - failed))" "$failed" \
    "$( ((${#on_demand[@]})) && echo "; on demand, not run: ${on_demand[*]}")"
[[ $failed -eq 0 ]]
