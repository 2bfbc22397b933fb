"""The removals on the converged hosts, after test_ubuntu.py's state tests (pytest collects this module after that one):
remove.yml predicts them in check mode, removes, and removes again, both hosts at once.

* ubuntu2404, the driver (#24): Canonical's signed modules come with packages that are never installed by name
  (linux-signatures-nvidia-<kernel>, linux-objects-nvidia-...-<kernel>, dependencies of the module package at its exact
  version): none may stay.
* ubuntu2204, gpu_settings: site.yml masked Ubuntu's static nvidia-persistenced unit (asked off); the removal unmasks
  what the role masked, so the unit is static again, as its package shipped it.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from gpuhost_testinfra import run_playbook_json

SCENARIO = Path(os.environ.get("MOLECULE_SCENARIO_DIRECTORY", Path(__file__).resolve().parent.parent))
HOST = "gpuhost-ubuntu2404-ubuntu"
SETTINGS_HOST = "gpuhost-ubuntu2204-ubuntu"
# What site.yml installed there from the archive stub (test_ubuntu.py checks it before this module runs).
SIGNED = ["linux-modules-nvidia-580-server-open-azure", "linux-modules-nvidia-580-server-open-6.8.0-1031-azure",
          "linux-signatures-nvidia-6.8.0-1031-azure", "linux-objects-nvidia-580-server-open-6.8.0-1031-azure"]
USERLAND = ["nvidia-utils-580-server", "libnvidia-compute-580-server", "nvidia-kernel-common-580-server", "nvidia-compute-utils-580-server"]


def _name(task: dict) -> str:
    """The task's name without its role prefix (the JSON callback writes "gpuhost.nvidia.nvidia_driver : <name>")."""
    return task["task"]["name"].split(" : ", 1)[-1]


def _changed(play: dict, host: str = HOST) -> list[str]:
    return [_name(task) for task in play["tasks"] if task["hosts"].get(host, {}).get("changed")]


@pytest.fixture(scope="module")
def removals() -> dict:
    """remove.yml's JSON result: three plays (check mode, removal, second removal) and the stats of both hosts."""
    return run_playbook_json(str(SCENARIO / "remove.yml"))


@pytest.fixture(scope="module")
def removal(removals):
    """The driver's removal on ubuntu2404: the three plays and its stats."""
    return removals["plays"], removals["stats"][HOST]


def _installed() -> set[str]:
    out = subprocess.run(["podman", "exec", HOST, "dpkg-query", "-W", "-f=${db:Status-Status} ${Package}\\n"],
                         capture_output=True, text=True, check=True).stdout
    return {name for status, name in (line.split() for line in out.splitlines()) if status == "installed"}


def test_check_mode_predicts_the_removal_and_the_second_removal_changes_nothing(removal):
    (check, real, again), stats = removal
    assert stats["failures"] == 0 and stats["unreachable"] == 0, stats
    assert "Remove the driver packages (apt)" in _changed(real), _changed(real)
    assert _changed(check) == _changed(real)
    assert _changed(again) == []


def test_the_signed_modules_and_what_they_pulled_in_are_gone(removal):
    installed = _installed()
    assert [name for name in SIGNED + USERLAND if name in installed] == []
    left = {name for name in installed if "nvidia" in name and not name.startswith(("libnvidia-container", "nvidia-container"))}
    assert left == set()


def test_the_report_names_the_signatures_and_objects(removal):
    (_check, real, _again), _stats = removal
    reports = [task["hosts"][HOST]["ansible_facts"]["nvidia_driver_report"] for task in real["tasks"]
               if _name(task) == "Report what the role removed, for the site summary" and HOST in task["hosts"]]
    assert len(reports) == 1, reports
    assert "linux-signatures-nvidia-6.8.0-1031-azure" in reports[0][0] and "linux-objects-nvidia-580-server-open-6.8.0-1031-azure" in reports[0][0]


def test_gpu_settings_removal_unmasks_what_it_masked_and_check_mode_predicts_it(removals):
    (check, real, again), stats = removals["plays"], removals["stats"][SETTINGS_HOST]
    assert stats["failures"] == 0 and stats["unreachable"] == 0, stats
    changed = _changed(real, SETTINGS_HOST)
    removal_task = "Remove the boot unit, its script, its spec and the nvidia-persistenced drop-in"  # one gpuhost_apply call
    assert removal_task in changed, changed
    assert _changed(check, SETTINGS_HOST) == changed

    def units(play: dict) -> dict:
        return next(task["hosts"][SETTINGS_HOST]["changed_units"] for task in play["tasks"]
                    if _name(task) == removal_task and SETTINGS_HOST in task["hosts"])
    # the boot unit disabled and the mask the role recorded undone, in check mode as in the real run
    assert units(real) == units(check) == {"gpuhost-gpu-settings.service": "disabled", "nvidia-persistenced.service": "unmasked"}
    assert _changed(again, SETTINGS_HOST) == []
    # the unit as its package shipped it: static, not masked; no mask and no record of one left
    run = ["podman", "exec", SETTINGS_HOST]
    state = subprocess.run([*run, "systemctl", "is-enabled", "nvidia-persistenced.service"], capture_output=True, text=True, check=False)
    assert state.stdout.strip() == "static", state
    left = subprocess.run([*run, "ls", "/etc/systemd/system/nvidia-persistenced.service", "/var/lib/gpuhost/gpu_settings_masked_units"],
                          capture_output=True, text=True, check=False)
    assert left.stdout == "" and left.returncode != 0, left
