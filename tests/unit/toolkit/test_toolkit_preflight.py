# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""nvidia_container_toolkit's request checks (tasks/preflight.yml): one task, every problem with its own message.

The role's set_vars.yml and preflight.yml run on the controller (localhost, check mode, no container engine named, so
no module reads a file): the values that reach nvidia-cdi-refresh.env, the refresh unit's ordering and the repository
file fail with the message that names them, several at once, and an unsupported distribution is told alone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
CHECK = "gpuhost.nvidia.nvidia_container_toolkit : Fail on an unsupported distribution or a bad request, before changing anything"
CDI_MESSAGE = "nvidia_container_toolkit_cdi_refresh_after/_before must be unit names"
REPO_MESSAGE = "needs nvidia_container_toolkit_repo_key_url and nvidia_container_toolkit_repo_key_fingerprint"


def _preflight(tmp_path: Path, extra: dict) -> dict:
    play = tmp_path / "play.yml"
    # The role's own variables (set_vars.yml sets them as facts) are overridden by facts set after it.
    overrides = {k: v for k, v in extra.items() if k.startswith("__")}
    role = {"name": "gpuhost.nvidia.nvidia_container_toolkit"}
    play.write_text(json.dumps([{
        "hosts": "localhost", "gather_facts": True, "gather_subset": ["min"],
        "vars": dict({"nvidia_container_toolkit_runtimes": []}, **extra),
        "tasks": [
            {"name": "Load the role's variables", "ansible.builtin.include_role": dict(role, tasks_from="set_vars.yml", public=True)},
        ] + ([{"name": "Override what the test asks", "ansible.builtin.set_fact": overrides}] if overrides else []) + [
            {"name": "Run the checks", "ansible.builtin.include_role": dict(role, tasks_from="preflight.yml")},
            {"name": "Reached after the checks", "ansible.builtin.debug": {"msg": "passed"}},
        ],
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


def test_a_good_request_passes(tmp_path: Path) -> None:
    tasks = _preflight(tmp_path, {"nvidia_container_toolkit_cdi_refresh_env": {"NVIDIA_CTK_DEBUG": "false"},
                                  "nvidia_container_toolkit_cdi_feature_flags": ["disable-nvsandboxutils"],
                                  "nvidia_container_toolkit_cdi_refresh_after": ["docker.service"]})
    assert not tasks[CHECK].get("failed"), tasks[CHECK]
    assert "Reached after the checks" in tasks


@pytest.mark.parametrize("extra", [
    {"nvidia_container_toolkit_cdi_feature_flags": ["Bad Flag"]},
    {"nvidia_container_toolkit_cdi_feature_flags": ["x" * 65]},
    {"nvidia_container_toolkit_cdi_refresh_env": {"PATH": "/tmp"}},
    {"nvidia_container_toolkit_cdi_refresh_env": {"NVIDIA_CTK_DEBUG": "true\nExecStart=/bin/sh"}},
    {"nvidia_container_toolkit_cdi_refresh_env": {"NVIDIA_CTK_DEBUG": "$(reboot)"}},
    {"nvidia_container_toolkit_cdi_refresh_after": ["docker.service; rm -rf /"]},
    {"nvidia_container_toolkit_cdi_refresh_before": ["docker"]},
], ids=["flag-case", "flag-long", "env-name", "env-newline", "env-shell", "unit-shell", "unit-no-suffix"])
def test_cdi_refresh_values_that_would_not_stay_one_line_fail(tmp_path: Path, extra: dict) -> None:
    tasks = _preflight(tmp_path, extra)
    check = tasks[CHECK]
    assert check["failed"], check
    assert CDI_MESSAGE in check["msg"] and check["msg"].endswith("Nothing was changed.")
    assert "\n" not in check["msg"]
    assert "Reached after the checks" not in tasks


def test_every_problem_is_told_at_once(tmp_path: Path) -> None:
    tasks = _preflight(tmp_path, {"nvidia_container_toolkit_mode": "bogus", "nvidia_container_toolkit_cdi_feature_flags": ["Bad"],
                                  "nvidia_container_toolkit_repo_key_url": "",
                                  "__nvidia_container_toolkit_repo": {"url": "https://example.invalid/repo", "key_url": "",
                                                                      "key_fingerprint": ""}})
    message = tasks[CHECK]["msg"]
    assert "nvidia_container_toolkit_mode 'bogus': choose full or cdi" in message
    assert CDI_MESSAGE in message
    assert "the repository https://example.invalid/repo " + REPO_MESSAGE in message
    assert message.count("Nothing was changed.") == 3


def test_an_unsupported_distribution_is_told_alone(tmp_path: Path) -> None:
    tasks = _preflight(tmp_path, {"__nvidia_container_toolkit_pkg_mgr": "none", "nvidia_container_toolkit_mode": "bogus"})
    message = tasks[CHECK]["msg"]
    assert "is not supported (Debian/Ubuntu, RHEL/Rocky/Alma/Fedora and Arch Linux are). Nothing was changed." in message
    assert "bogus" not in message
