# shellcheck shell=bash
# Sourced by tests/sanity/run.sh and tests/molecule/run.sh: with GPUHOST_VENV set (a venv directory, relative to the
# repository root or absolute; `make venv218` builds .cache/venv-core218), that venv's tools come first on PATH and
# its collections (the `ansible` package's, plus this checkout linked by the Makefile) are the collection path, so a
# tier runs on that venv's ansible-core. Unset: the caller's PATH and collection path stay as they are.
if [[ -n "${GPUHOST_VENV:-}" ]]; then
    gpuhost_venv="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && cd "$GPUHOST_VENV" 2>/dev/null && pwd)" || {
        echo "GPUHOST_VENV=$GPUHOST_VENV is not a directory (relative to the repository root or absolute): build it, e.g. make venv218" >&2
        exit 2
    }
    gpuhost_site=("$gpuhost_venv"/lib/python3*/site-packages)
    if [[ ! -x "$gpuhost_venv/bin/ansible-playbook" || ! -e "${gpuhost_site[0]}/ansible_collections/gpuhost/nvidia" ]]; then
        echo "GPUHOST_VENV=$GPUHOST_VENV has no ansible-playbook or no gpuhost.nvidia link: build it with make venv218" >&2
        exit 2
    fi
    export PATH="$gpuhost_venv/bin:$PATH"
    export ANSIBLE_COLLECTIONS_PATH="${gpuhost_site[0]}"
    export VIRTUAL_ENV="$gpuhost_venv"
    echo "GPUHOST_VENV: ansible [core $("$gpuhost_venv/bin/python" -c 'from ansible.release import __version__; print(__version__)')] from $gpuhost_venv" >&2
fi
