# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""nvidia_gpu_facts with a root it cannot read (issue #16): refused, naming the root, instead of reporting no_gpu."""

from __future__ import annotations

import os

import pytest

import hostile

from ansible_collections.gpuhost.nvidia.plugins.modules import nvidia_gpu_facts

ROOT_CASES = hostile.text_classes("control", "non_ascii", "empty", "huge") + [
    ("relative", "mnt/image"), ("traversal", "/mnt/image/../../etc"), ("long-component", "/" + "r" * 300),
]


@pytest.mark.parametrize("value", [v for _i, v in ROOT_CASES], ids=[i for i, _v in ROOT_CASES])
def test_root_values_refused(run_module, no_pynvml, value):
    result = run_module(nvidia_gpu_facts, {"root": value, "backends": ["pci"]})
    hostile.assert_refused(result, "root", value)
    assert "ansible_facts" not in result and result["messages"]


# A directory is a valid root (test_root_without_sysfs_says_so): every other kind of path is refused.
@pytest.mark.parametrize("kind", [k for k in hostile.SPECIAL_KINDS if k != "directory"] + ["missing", "file"])
def test_root_that_is_not_a_directory_is_refused(run_module, no_pynvml, tmp_path, kind):
    special = hostile.make_special_cases(str(tmp_path))
    value = {"missing": str(tmp_path / "not-mounted"), "file": str(tmp_path / "a-file")}.get(kind) or special[kind]
    before = hostile.snapshot(str(tmp_path))
    result = run_module(nvidia_gpu_facts, {"root": value, "backends": ["pci"]})
    hostile.assert_refused(result, "root", value, before=before, roots=[str(tmp_path)])
    assert "no_gpu" not in result["msg"]


def test_root_without_sysfs_says_so(run_module, no_pynvml, tmp_path):
    result = run_module(nvidia_gpu_facts, {"root": str(tmp_path), "backends": ["pci"]})
    facts = result["ansible_facts"]["nvidia_gpu"]
    assert facts["state"] == "no_gpu"
    assert any(repr(str(tmp_path)) in m and "sys/bus/pci/devices" in m for m in facts["messages"]), facts["messages"]


def test_root_alias_is_checked_too(run_module, no_pynvml, tmp_path):
    value = str(tmp_path / "gone")
    hostile.assert_refused(run_module(nvidia_gpu_facts, {"sysfs_root": value, "backends": ["pci"]}), "root", value)
    assert not os.path.exists(value)


def test_sysfs_entries_that_are_not_pci_addresses_are_left_out(run_module, no_pynvml, tmp_path):
    import sysfs  # pylint: disable=import-outside-toplevel

    root = str(tmp_path / "root")
    sysfs.add_function(root, {"pci_bus_id": "0000:01:00.0", "device_id": 0x2204, "class": 0x030000, "driver": "vfio-pci", "iommu_group": 1})
    sysfs.add_function(root, {"pci_bus_id": "0000:01:00.1;reboot", "device_id": 0x1AEF, "class": 0x040300, "driver": None, "iommu_group": 1})
    facts = run_module(nvidia_gpu_facts, {"root": root, "backends": ["pci"]})["ansible_facts"]["nvidia_gpu"]
    assert [f["pci_bus_id"] for f in facts["pci_functions"]] == ["0000:01:00.0"]
    assert all(f["pci_bus_id"] == "0000:01:00.0" for g in facts["iommu"]["groups"] for f in g["functions"])
    assert any("'0000:01:00.1;reboot'" in m for m in facts["messages"]), facts["messages"]
