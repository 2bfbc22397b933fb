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

CHECK = "gpuhost.nvidia.gpu_settings : Stop when the driver's userland cannot be told, or a name is not a package name"


def _userland(role_tasks, extra: dict) -> dict:
    return role_tasks("gpuhost.nvidia.gpu_settings", "userland.yml", extra)


def test_the_drivers_userland_passes(role_tasks) -> None:
    userland = {"branch": "535", "version": "", "source": "distro", "packages": ["nvidia-smi"], "version_glob": "535.*",
                "specs": ["nvidia-smi=535.*"]}
    tasks = _userland(role_tasks, {"nvidia_driver_userland": userland})
    assert not tasks[CHECK].get("failed"), tasks[CHECK]
    assert role_tasks.reached in tasks


# Each one a host of one run (role_tasks' cases).
BAD_NAMES = ["nvidia-smi; rm -rf /", "-oAPT::Get::x=1", "Nvidia-smi", "nvidia-smi=535.*\n", "nvidia-smi=$(id)"]


def test_a_name_that_is_not_a_package_name_fails(role_tasks) -> None:
    cases = {"bad%d" % index: {"gpu_settings_packages": ["nvidia-smi", bad]} for index, bad in enumerate(BAD_NAMES)}
    results = role_tasks("gpuhost.nvidia.gpu_settings", "userland.yml", {}, cases=cases)
    for index, bad in enumerate(BAD_NAMES):
        tasks = results["bad%d" % index]
        check = tasks[CHECK]
        assert check.get("failed"), (bad, check)
        assert check["msg"] == "gpu_settings: not package names: " + json.dumps(bad), (bad, check["msg"])
        assert role_tasks.reached not in tasks, bad


def test_a_userland_the_branch_cannot_fill_in_is_told_once(role_tasks) -> None:
    tasks = _userland(role_tasks, {"__gpu_settings_userland": ["nvidia-utils-{family}"], "__gpu_settings_userland_family_re": "^gpuhost-none-(.*)$"})
    # Without the driver's choice the role reads the installed packages (python3-apt on Debian: bindep.txt).
    read = tasks["gpuhost.nvidia.gpu_settings : Read the installed packages, for the installed driver's branch and package names"]
    assert not read.get("failed"), read
    message = tasks[CHECK]["msg"]
    assert message.startswith("gpu_settings cannot tell which driver userland to install (nvidia-utils-{family}): the names follow")
    assert "list the packages in gpu_settings_packages." in message
    assert "not package names" not in message
