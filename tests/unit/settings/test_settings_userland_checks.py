# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""gpu_settings' userland checks (tasks/userland.yml): names that reach the package manager's command line.

The role's set_vars.yml and userland.yml run on the controller (localhost, check mode): a name that is not a package
name fails naming it, a userland the driver's branch cannot fill in fails telling that (and only that), and the
driver's own choice passes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
CHECK = "gpuhost.nvidia.gpu_settings : Stop when the driver's userland cannot be told, or a name is not a package name"


def _userland(tmp_path: Path, extra: dict) -> dict:
    play = tmp_path / "play.yml"
    role = {"name": "gpuhost.nvidia.gpu_settings"}
    overrides = {k: v for k, v in extra.items() if k.startswith("__")}
    play.write_text(json.dumps([{
        "hosts": "localhost", "gather_facts": True, "gather_subset": ["min"],
        "vars": {k: v for k, v in extra.items() if not k.startswith("__")},
        "tasks": [{"name": "Load the role's variables", "ansible.builtin.include_role": dict(role, tasks_from="set_vars.yml", public=True)}]
        + ([{"name": "Override what the test asks", "ansible.builtin.set_fact": overrides}] if overrides else [])
        + [{"name": "Decide the userland", "ansible.builtin.include_role": dict(role, tasks_from="userland.yml")},
           {"name": "Reached after the checks", "ansible.builtin.debug": {"msg": "passed"}}],
    }]))
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json", ANSIBLE_NOCOLOR="1", ANSIBLE_LOCALHOST_WARNING="0")
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local", "--check",
                           "-e", "ansible_python_interpreter=" + sys.executable, str(play)],
                          env=env, capture_output=True, text=True, check=False, timeout=120)
    try:
        result = json.loads(proc.stdout)
    except json.JSONDecodeError as exc:
        raise AssertionError(f"no JSON (rc {proc.returncode}):\n{proc.stdout}\n{proc.stderr}") from exc
    return {t["task"]["name"]: t["hosts"]["localhost"] for t in result["plays"][0]["tasks"]}


def test_the_drivers_userland_passes(tmp_path: Path) -> None:
    tasks = _userland(tmp_path, {"nvidia_driver_userland": {"branch": "535", "version": "", "source": "distro", "packages": ["nvidia-smi"],
                                                            "version_glob": "535.*", "specs": ["nvidia-smi=535.*"]}})
    assert not tasks[CHECK].get("failed"), tasks[CHECK]
    assert "Reached after the checks" in tasks


@pytest.mark.parametrize("bad", ["nvidia-smi; rm -rf /", "-oAPT::Get::x=1", "Nvidia-smi", "nvidia-smi=535.*\n", "nvidia-smi=$(id)"])
def test_a_name_that_is_not_a_package_name_fails(tmp_path: Path, bad: str) -> None:
    tasks = _userland(tmp_path, {"gpu_settings_packages": ["nvidia-smi", bad]})
    check = tasks[CHECK]
    assert check["failed"], check
    assert check["msg"] == "gpu_settings: not package names: " + json.dumps(bad)
    assert "Reached after the checks" not in tasks


def test_a_userland_the_branch_cannot_fill_in_is_told_once(tmp_path: Path) -> None:
    tasks = _userland(tmp_path, {"__gpu_settings_userland": ["nvidia-utils-{family}"], "__gpu_settings_userland_family_re": "^gpuhost-none-(.*)$"})
    message = tasks[CHECK]["msg"]
    assert message.startswith("gpu_settings cannot tell which driver userland to install (nvidia-utils-{family}): the names follow")
    assert "list the packages in gpu_settings_packages." in message
    assert "not package names" not in message
