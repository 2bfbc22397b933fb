#!/usr/bin/env bash
# The GPU tier: check the collection on this machine's NVIDIA GPUs, read-only, and keep what it saw in OUTDIR.
#
#   tests/gpu/run.sh OUTDIR                    on a GPU machine, from the bundle `make gpu-bundle` prepared (no network)
#   tests/gpu/run.sh --no-bundle OUTDIR        with an existing Python environment and this checkout as the collection
#   tests/gpu/run.sh --no-bundle --fake t4 OUTDIR
#                                              against the unit tests' fake NVML, nvidia-smi and host tree
#   tests/gpu/run.sh --no-bundle --fake t4 --mutate smi:gpus.0.power_limit_mw=65000 OUTDIR
#                                              ... with one field of the fake nvidia-smi changed: the tier must fail
#
# Options: --bundle DIR (default .cache/gpu-bundle, or $GPU_BUNDLE), --python PY (the interpreter: with --no-bundle the
# default is .venv/bin/python, else python3; or $GPU_TIER_PYTHON), --fake PROFILE ($GPU_TIER_FAKE), --mutate SPEC
# (repeatable; $GPU_TIER_MUTATE holds specs separated by ';'), --keep-work. Exit status: 0 when every check passed
# or was skipped, 1 when one failed, 2 when the tier could not start.
#
# Read-only by construction (see tests/gpu/README.md): nvidia-smi only through tier_guard.py's allow-list of query
# forms, NVML only through a pynvml whose setters refuse, the settings module only in check mode.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"

bundle="${GPU_BUNDLE:-$repo/.cache/gpu-bundle}"
python="${GPU_TIER_PYTHON:-}"
use_bundle=1
fake="${GPU_TIER_FAKE:-}"
keep=()
mutate=()
if [[ -n "${GPU_TIER_MUTATE:-}" ]]; then
    IFS=';' read -r -a specs <<<"$GPU_TIER_MUTATE"
    for spec in "${specs[@]}"; do [[ -n "$spec" ]] && mutate+=(--mutate "$spec"); done
fi
out=""
usage() { sed -n '2,17p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 2; }
while (($#)); do
    case "$1" in
        --bundle) bundle="$2"; shift 2 ;;
        --no-bundle) use_bundle=0; shift ;;
        --python) python="$2"; shift 2 ;;
        --fake) fake="$2"; shift 2 ;;
        --mutate) mutate+=(--mutate "$2"); shift 2 ;;
        --keep-work) keep=(--keep-work); shift ;;
        -h|--help) usage ;;
        -*) echo "run.sh: unknown option $1" >&2; usage ;;
        *) [[ -z "$out" ]] || usage; out="$1"; shift ;;
    esac
done
[[ -n "$out" ]] || usage

work="$(mktemp -d "${TMPDIR:-/tmp}/gpu-tier-env.XXXXXX")"
trap 'rm -rf "$work"' EXIT
collections="$work/collections"
start=$SECONDS

if ((use_bundle)); then
    if [[ ! -f "$bundle/MANIFEST" ]]; then
        echo "run.sh: no complete bundle at $bundle; run 'make gpu-bundle' where there is network, then copy it here" >&2
        exit 2
    fi
    base="${python:-python3}"
    # --without-pip: Debian and Ubuntu ship venv without ensurepip unless python3-venv is installed. pip runs from its
    # wheel instead, in isolated mode (no pip.conf, no PIP_* variables), from the bundle only.
    "$base" -m venv --without-pip "$work/venv"
    python="$work/venv/bin/python"
    pip_wheels=("$bundle"/wheels/pip-*.whl)
    if ! "$python" "${pip_wheels[0]}/pip" --isolated install --quiet --disable-pip-version-check --no-index --no-cache-dir \
        --find-links "$bundle/wheels" -r "$bundle/requirements.txt"; then
        echo "run.sh: the bundle has no wheels for $("$python" -V 2>&1) on $(uname -m) (it was built for: $(sed -n 's/^pythons: //p' "$bundle/MANIFEST"))" >&2
        exit 2
    fi
    ANSIBLE_HOME="$work/ansible" ANSIBLE_COLLECTIONS_PATH="$collections" \
        "$python" -m ansible galaxy collection install --offline --no-deps --force -p "$collections" "$bundle"/gpuhost-nvidia-*.tar.gz >/dev/null
    echo "run.sh: environment from $bundle in $((SECONDS - start)) s"
else
    if [[ -z "$python" ]]; then
        python="$repo/.venv/bin/python"
        [[ -x "$python" ]] || python=python3
    fi
    mkdir -p "$collections/ansible_collections/gpuhost"
    ln -s "$repo" "$collections/ansible_collections/gpuhost/nvidia"
fi

fake_args=()
[[ -z "$fake" ]] || fake_args=(--fake "$fake")
schema=()
[[ ! -f "$bundle/compose-spec.json" ]] || schema=(--schema "$bundle/compose-spec.json")
rc=0
"$python" "$here/gpu_tier.py" run --out "$out" --collections "$collections" "${fake_args[@]}" "${mutate[@]}" "${schema[@]}" "${keep[@]}" || rc=$?
echo "run.sh: the GPU tier took $((SECONDS - start)) s"
exit "$rc"
