# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""nvidia_driver's preflight stops (tasks/preflight.yml): one assert, before any change, for the plan and the names.

The role's set_vars.yml and preflight.yml run on the controller (localhost, check mode; the host read only reads), with
the GPU facts of a fake PCI tree holding one H100. The plan's reasons fail the check naming them; a plan that acts but
whose package names need a value it does not set fails naming the package; a good request passes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "tests" / "unit" / "fakes"))

import sysfs  # noqa: E402  pylint: disable=wrong-import-position

ROLE = "gpuhost.nvidia.nvidia_driver"
STOP = ROLE + " : Stop before any change when the request cannot work here"
NOTES = ROLE + " : Say why this host is skipped, and show the notes of the plan"


def _preflight(tmp_path: Path, extra: dict, table: dict | None = None) -> dict:
    root = tmp_path / "root"
    sysfs.add_function(str(root), {"pci_bus_id": "0000:01:00.0", "device_id": 0x2330, "class": 0x030200})
    tasks = [{"name": "Load the role's variables", "ansible.builtin.include_role": {"name": ROLE, "tasks_from": "set_vars.yml", "public": True}},
             {"name": "Gather the GPU facts of the fake tree", "gpuhost.nvidia.nvidia_gpu_facts": {"root": str(root), "backends": ["pci"]}}]
    if table is not None:
        tasks.append({"name": "Override the package table", "ansible.builtin.set_fact": {"__nvidia_driver_packages": table}})
    tasks += [{"name": "Run the preflight", "ansible.builtin.include_role": {"name": ROLE, "tasks_from": "preflight.yml"}},
              {"name": "Reached after the checks", "ansible.builtin.debug": {"msg": "passed"}}]
    play = tmp_path / "play.json"
    play.write_text(json.dumps([{"hosts": "localhost", "gather_facts": True, "gather_subset": ["min"],
                                 "vars": dict({"nvidia_driver_facts_root": str(root), "nvidia_driver_source": "nvidia"}, **extra),
                                 "tasks": tasks}]))
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json", ANSIBLE_NOCOLOR="1", ANSIBLE_LOCALHOST_WARNING="0")
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local", "--check",
                           "-e", "ansible_python_interpreter=" + sys.executable, str(play)],
                          env=env, capture_output=True, text=True, check=False, timeout=180)
    try:
        result = json.loads(proc.stdout)
    except json.JSONDecodeError as exc:
        raise AssertionError(f"no JSON (rc {proc.returncode}):\n{proc.stdout}\n{proc.stderr}") from exc
    return {t["task"]["name"]: t["hosts"]["localhost"] for t in result["plays"][0]["tasks"]}


def test_the_plans_reasons_stop_the_role_before_any_change(tmp_path: Path) -> None:
    # A repository URL that would break out of its line in the repository file, and a CUDA requirement that is not one.
    tasks = _preflight(tmp_path, {"nvidia_driver_require_headers": False, "nvidia_driver_repo_url": "https://example.invalid/repo\nX-Evil: 1",
                                  "nvidia_driver_cuda_version": "twelve"})
    stop = tasks[STOP]
    assert stop["failed"], stop
    assert stop["msg"].startswith("nvidia_driver cannot install the driver on this host: ")
    assert "nvidia_driver_repo_url" in stop["msg"] and "CUDA twelve" in stop["msg"] and " | " in stop["msg"], stop["msg"]
    assert "cannot name the packages" not in stop["msg"] and "\n" not in stop["msg"]
    assert "Reached after the checks" not in tasks


def test_a_package_name_the_plan_cannot_fill_in_stops_the_role(tmp_path: Path) -> None:
    table = {"nvidia": {"module": {"open": ["nvidia-kernel-open-dkms"], "proprietary": ["nvidia-kernel-dkms"]},
                        "userspace": ["nvidia-driver-cuda"], "desktop": {"open": [], "proprietary": []}, "fabric_manager": [],
                        "nscq": [], "nvlsm": [], "settings": ["nvidia-smi-{kernel_flavour}"], "pin": []}}
    tasks = _preflight(tmp_path, {"nvidia_driver_require_headers": False, "nvidia_driver_branch": "580"}, table)
    stop = tasks[STOP]
    assert stop["failed"], stop
    assert stop["msg"] == ("nvidia_driver cannot name the packages: package name 'nvidia-smi-{kernel_flavour}' needs {kernel_flavour}, "
                           "which the plan does not set; set nvidia_driver_branch")
    assert "Reached after the checks" not in tasks


def test_a_request_that_works_passes(tmp_path: Path) -> None:
    tasks = _preflight(tmp_path, {"nvidia_driver_require_headers": False, "nvidia_driver_branch": "580"})
    assert not tasks[STOP].get("failed"), tasks[STOP]
    assert "Reached after the checks" in tasks
    # The plan acts: no skip reason; its notes, if any (headers missing on this machine), are shown before the check.
    notes = tasks[NOTES]
    assert notes.get("skipped") or all("skip" not in note for note in notes["msg"]), notes
