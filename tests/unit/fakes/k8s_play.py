# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""One ansible-playbook run against the stand-in kubernetes.core (tests/unit/kubernetes/fake_k8s/), shared by the
Kubernetes playbook tests: the JSON callback's result and the calls the stand-in recorded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import typing as t
from pathlib import Path

FAKE = Path(__file__).resolve().parents[1] / "kubernetes" / "fake_k8s"


def collections_path() -> str:
    """The stand-in kubernetes.core first, then the venv's collections (with its link to this checkout)."""
    import ansible_collections.gpuhost.nvidia as collection  # pylint: disable=import-outside-toplevel

    return os.pathsep.join([str(FAKE), str(Path(list(collection.__path__)[0]).parents[2])])


def run_playbook(args: list[str], log: Path, store: Path, timeout: int = 300) -> tuple[int, dict[str, t.Any], list[dict[str, t.Any]]]:
    """ansible-playbook ARGS with the stand-in recording to LOG (emptied first) and keeping its objects in STORE."""
    if log.exists():
        log.unlink()
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json", ANSIBLE_NOCOLOR="1", ANSIBLE_LOCALHOST_WARNING="0",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="0", ANSIBLE_COLLECTIONS_PATH=collections_path(),
               GPUHOST_FAKE_K8S_LOG=str(log), GPUHOST_FAKE_K8S_STORE=str(store))
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), *args],
                          env=env, capture_output=True, text=True, check=False, timeout=timeout)
    try:
        result = json.loads(proc.stdout)
    except json.JSONDecodeError as exc:
        raise AssertionError("no JSON from ansible-playbook (rc %d):\n%s\n%s" % (proc.returncode, proc.stdout, proc.stderr)) from exc
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return proc.returncode, result, calls
