# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""nvidia_container_toolkit's request checks (tasks/preflight.yml): one task, every problem with its own message.

The role's set_vars.yml and preflight.yml run on the controller (localhost, check mode, no container engine named, so
no module reads a file): the values that reach nvidia-cdi-refresh.env, the refresh unit's ordering and the repository
file fail with the message that names them, several at once, and an unsupported distribution is told alone.
"""

from __future__ import annotations

CHECK = "gpuhost.nvidia.nvidia_container_toolkit : Fail on an unsupported distribution or a bad request, before changing anything"
REPO_MESSAGE = "needs nvidia_container_toolkit_repo_key_url and nvidia_container_toolkit_repo_key_fingerprint"


def _preflight(role_tasks, extra: dict) -> dict:
    # No engine to read: the module's merge checks are skipped.
    return role_tasks("gpuhost.nvidia.nvidia_container_toolkit", "preflight.yml", dict({"nvidia_container_toolkit_runtimes": []}, **extra))


def test_a_good_request_passes(role_tasks) -> None:
    tasks = _preflight(role_tasks, {"nvidia_container_toolkit_cdi_refresh_env": {"NVIDIA_CTK_DEBUG": "false"},
                                    "nvidia_container_toolkit_cdi_feature_flags": ["disable-nvsandboxutils"],
                                    "nvidia_container_toolkit_cdi_refresh_after": ["docker.service"]})
    assert not tasks[CHECK].get("failed"), tasks[CHECK]
    assert role_tasks.reached in tasks


# Each one a host of one run (role_tasks' cases).
HOSTILE = {
    "flag-case": {"nvidia_container_toolkit_cdi_feature_flags": ["Bad Flag"]},
    "flag-long": {"nvidia_container_toolkit_cdi_feature_flags": ["x" * 65]},
    "env-name": {"nvidia_container_toolkit_cdi_refresh_env": {"PATH": "/tmp"}},
    "env-newline": {"nvidia_container_toolkit_cdi_refresh_env": {"NVIDIA_CTK_DEBUG": "true\nExecStart=/bin/sh"}},
    "env-shell": {"nvidia_container_toolkit_cdi_refresh_env": {"NVIDIA_CTK_DEBUG": "$(reboot)"}},
    "unit-shell": {"nvidia_container_toolkit_cdi_refresh_after": ["docker.service; rm -rf /"]},
    "unit-no-suffix": {"nvidia_container_toolkit_cdi_refresh_before": ["docker"]},
}


def test_cdi_refresh_values_that_would_not_stay_one_line_fail(role_tasks) -> None:
    results = role_tasks("gpuhost.nvidia.nvidia_container_toolkit", "preflight.yml", {"nvidia_container_toolkit_runtimes": []}, cases=HOSTILE)
    for case, tasks in results.items():
        check = tasks[CHECK]
        assert check.get("failed"), (case, check)
        # The message names the variable of the case and shows the value; the rules are tested one by one in
        # tests/unit/common/test_role_inputs.py.
        name = next(iter(HOSTILE[case]))
        assert ("nvidia_container_toolkit: " + name) in check["msg"] and check["msg"].endswith("Nothing was changed."), (case, check["msg"])
        assert "\n" not in check["msg"], case
        assert role_tasks.reached not in tasks, case


def test_every_problem_is_told_at_once(role_tasks) -> None:
    tasks = _preflight(role_tasks, {"nvidia_container_toolkit_mode": "bogus", "nvidia_container_toolkit_cdi_feature_flags": ["Bad"],
                                    "nvidia_container_toolkit_repo_key_url": "",
                                    "__nvidia_container_toolkit_repo": {"url": "https://example.invalid/repo", "key_url": "",
                                                                        "key_fingerprint": ""}})
    message = tasks[CHECK]["msg"]
    assert "nvidia_container_toolkit_mode 'bogus': choose full or cdi" in message
    assert "nvidia_container_toolkit_cdi_feature_flags[0]: 'Bad' is not a feature flag such as disable-nvsandboxutils" in message
    assert "the repository https://example.invalid/repo " + REPO_MESSAGE in message
    assert message.count("Nothing was changed.") == 3


def test_an_unsupported_distribution_is_told_alone(role_tasks) -> None:
    tasks = _preflight(role_tasks, {"__nvidia_container_toolkit_pkg_mgr": "none", "nvidia_container_toolkit_mode": "bogus"})
    message = tasks[CHECK]["msg"]
    assert "is not supported (Debian/Ubuntu, RHEL/Rocky/Alma/Fedora and Arch Linux are). Nothing was changed." in message
    assert "bogus" not in message
