# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""site.yml's facts play ends with every included role's first check (tasks/check.yml), so that a bad value of a later
role stops the run before the first role changes anything: site.yml's first play, as it is, on the controller in check
mode, one host per case."""

from __future__ import annotations

import pathlib

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[3]

CASES = {
    "driver-extra-option": ({"nvidia_driver_packages_extra": ["--allow-unauthenticated"]},
                            "gpuhost.nvidia.nvidia_driver : Check the variables that reach the files and the commands, before changing anything",
                            "nvidia_driver_packages_extra[0]"),
    "toolkit-relative-labels": ({"nvidia_container_toolkit_node_labels_file": "labels.txt"},
                                "gpuhost.nvidia.nvidia_container_toolkit : Fail on an unsupported distribution or a bad request, before changing anything",
                                "nvidia_container_toolkit_node_labels_file"),
    "exporter-port": ({"gpuhost_exporter": True, "gpu_exporter_port": 70000},
                      "gpuhost.nvidia.gpu_exporter : Check the variables that reach the unit, the files and the commands, before changing anything",
                      "gpu_exporter_port"),
    "settings-interpreter": ({"gpu_settings_python_interpreter": "/usr/bin/python3 -c x"},
                             "gpuhost.nvidia.gpu_settings : Check the spec and the values that the boot unit and the package names are built from, "
                             "before changing anything", "gpu_settings_python_interpreter"),
}
# Switched off, its role's variables are not checked (the role does not run).
OFF = {"gpuhost_exporter": False, "gpu_exporter_port": 70000}


def test_a_later_roles_bad_value_stops_the_run_in_the_first_play(local_play, tmp_path) -> None:
    play = yaml.safe_load((ROOT / "playbooks" / "site.yml").read_text(encoding="utf-8"))[0]
    assert play["name"] == "Gather NVIDIA GPU facts"
    play["hosts"] = "all"
    root = tmp_path / "root"
    root.mkdir()
    hosts = {name: dict(variables, gpuhost_facts_root=str(root)) for name, (variables, _task, _name) in CASES.items()}
    hosts["exporter-off"] = dict(OFF, gpuhost_facts_root=str(root))
    results = local_play([play], hosts=hosts)
    for case, (_variables, task, name) in CASES.items():
        tasks = results[case]
        assert task in tasks and tasks[task].get("failed"), (case, sorted(tasks))
        assert name in tasks[task]["msg"], (case, tasks[task]["msg"])
    off = results["exporter-off"]
    assert not any(result.get("failed") for result in off.values()), off
    assert not any("gpu_exporter" in task for task in off), sorted(off)
