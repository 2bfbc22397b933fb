# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""nvidia_driver's preflight stops (tasks/preflight.yml): one assert, before any change, for the plan and the names.

The role's set_vars.yml and preflight.yml run on the controller (localhost, check mode; the host read only reads), with
the GPU facts of a fake PCI tree holding one H100. The plan's reasons fail the check naming them; a plan that acts but
whose package names need a value it does not set fails naming the package; a good request passes.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import sysfs  # tests/unit/fakes, on the path by conftest.py

ROLE = "gpuhost.nvidia.nvidia_driver"
STOP = ROLE + " : Stop before any change when the request cannot work here"
NOTES = ROLE + " : Say why this host is skipped, and show the notes of the plan"


def _preflight(role_tasks, tmp_path: Path, extra: dict, table: dict | None = None) -> dict:
    root = tmp_path / "root"
    sysfs.add_function(str(root), {"pci_bus_id": "0000:01:00.0", "device_id": 0x2330, "class": 0x030200})
    # This machine's Secure Boot state is unknown to mokutil (none, or no EFI variables): stated off unless a test says.
    variables = dict({"nvidia_driver_facts_root": str(root), "nvidia_driver_source": "nvidia", "nvidia_driver_secure_boot": "false"}, **extra)
    if table is not None:
        variables["__nvidia_driver_packages"] = table
    gather = {"name": "Gather the GPU facts of the fake tree", "gpuhost.nvidia.nvidia_gpu_facts": {"root": str(root), "backends": ["pci"]}}
    return role_tasks(ROLE, "preflight.yml", variables, before=[gather])


def test_the_plans_reasons_stop_the_role_before_any_change(role_tasks, tmp_path: Path) -> None:
    # A repository URL that would break out of its line in the repository file, and a CUDA requirement that is not one.
    hostile = {"nvidia_driver_require_headers": False, "nvidia_driver_repo_url": "https://example.invalid/repo\nX-Evil: 1",
               "nvidia_driver_cuda_version": "twelve"}
    tasks = _preflight(role_tasks, tmp_path, hostile)
    stop = tasks[STOP]
    assert stop["failed"], stop
    assert stop["msg"].startswith("nvidia_driver cannot install the driver on this host: ")
    assert "nvidia_driver_repo_url" in stop["msg"] and "CUDA twelve" in stop["msg"] and " | " in stop["msg"], stop["msg"]
    assert "cannot name the packages" not in stop["msg"] and "\n" not in stop["msg"]
    assert role_tasks.reached not in tasks


def test_a_package_name_the_plan_cannot_fill_in_stops_the_role(role_tasks, tmp_path: Path) -> None:
    table = {"nvidia": {"module": {"open": ["nvidia-kernel-open-dkms"], "proprietary": ["nvidia-kernel-dkms"]},
                        "userspace": ["nvidia-driver-cuda"], "desktop": {"open": [], "proprietary": []}, "fabric_manager": [],
                        "nscq": [], "nvlsm": [], "settings": ["nvidia-smi-{kernel_flavour}"], "pin": []}}
    tasks = _preflight(role_tasks, tmp_path, {"nvidia_driver_require_headers": False, "nvidia_driver_branch": "580"}, table)
    stop = tasks[STOP]
    assert stop["failed"], stop
    assert stop["msg"] == ("nvidia_driver cannot name the packages: package name 'nvidia-smi-{kernel_flavour}' needs {kernel_flavour}, "
                           "which the plan does not set; set nvidia_driver_branch")
    assert role_tasks.reached not in tasks


def test_a_request_that_works_passes(role_tasks, tmp_path: Path) -> None:
    tasks = _preflight(role_tasks, tmp_path, {"nvidia_driver_require_headers": False, "nvidia_driver_branch": "580"})
    assert not tasks[STOP].get("failed"), tasks[STOP]
    assert role_tasks.reached in tasks
    # The plan acts: no skip reason; its notes, if any (headers missing on this machine), are shown before the check.
    notes = tasks[NOTES]
    assert notes.get("skipped") or all("skip" not in note for note in notes["msg"]), notes


UNKNOWN_HERE = pytest.mark.skipif(os.path.lexists("/usr/bin/mokutil"), reason="this machine has a mokutil, which may know the state")


@UNKNOWN_HERE
def test_an_unknown_secure_boot_state_stops_the_role_naming_the_variable(role_tasks, tmp_path: Path) -> None:
    # No mokutil here: the state is unknown, the nvidia source on Debian builds unsigned DKMS modules, nothing is stated.
    tasks = _preflight(role_tasks, tmp_path, {"nvidia_driver_require_headers": False, "nvidia_driver_branch": "580",
                                              "nvidia_driver_secure_boot": "auto"})
    stop = tasks[STOP]
    assert stop["failed"], stop
    assert "the Secure Boot state of this host is unknown (/usr/bin/mokutil does not exist)" in stop["msg"], stop["msg"]
    assert "set nvidia_driver_secure_boot: false if Secure Boot is off" in stop["msg"]
    assert role_tasks.reached not in tasks


STATED = [("false", True), (False, True), ("true", False), (True, False), ("no", True), ("maybe", False), ("", False), ("auto", False)]
_STATED_RUN: dict[str, dict] = {}


def _stated_run(role_tasks, tmp_path: Path) -> dict[str, dict]:
    """Every stated value at once, one host each, in one playbook run (the first test that asks runs it). The value is
    a host variable: a play variable would take precedence over it."""
    if not _STATED_RUN:
        root = tmp_path / "root"
        sysfs.add_function(str(root), {"pci_bus_id": "0000:01:00.0", "device_id": 0x2330, "class": 0x030200})
        gather = {"name": "Gather the GPU facts of the fake tree", "gpuhost.nvidia.nvidia_gpu_facts": {"root": str(root), "backends": ["pci"]}}
        variables = {"nvidia_driver_facts_root": str(root), "nvidia_driver_source": "nvidia", "nvidia_driver_require_headers": False,
                     "nvidia_driver_branch": "580"}
        _STATED_RUN.update(role_tasks(ROLE, "preflight.yml", variables, before=[gather],
                                      cases={"stated%d" % index: {"nvidia_driver_secure_boot": case[0]} for index, case in enumerate(STATED)}))
    return _STATED_RUN


@UNKNOWN_HERE
@pytest.mark.parametrize("index, stated, passes", [(index, stated, passes) for index, (stated, passes) in enumerate(STATED)])
def test_a_stated_secure_boot_state_stands_in_for_the_unknown_one(role_tasks, tmp_path: Path, index, stated, passes) -> None:
    tasks = _stated_run(role_tasks, tmp_path)["stated%d" % index]
    assert bool(tasks[STOP].get("failed")) is not passes, tasks[STOP]
    if not passes:
        assert "nvidia_driver_secure_boot" in tasks[STOP]["msg"]
    if stated in ("maybe", ""):
        assert "nvidia_driver_secure_boot must be auto, true or false, got %r" % stated in tasks[STOP]["msg"]
