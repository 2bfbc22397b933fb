# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Synthetic PCI sysfs trees for the passthrough planner: GPUs with their audio/USB functions, other vendors' devices
sharing IOMMU groups, bridges and boot VGA flags. The facts come from the real scanner (_facts.gather_facts with the
PCI backend only) reading the tree, so the planner is tested against what nvidia_gpu_facts would report."""

from __future__ import annotations

import os
import typing as t

import pytest
import sysfs

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _facts

GPU = 0x030000
AUDIO = 0x040300
USB = 0x0C0330
SERIAL = 0x0C8000
BRIDGE = 0x060400
VGA_OTHER = 0x030000


def build_tree(root: str, functions: list[dict[str, t.Any]], iommu: bool = True) -> str:
    os.makedirs(os.path.join(root, "sys/bus/pci/devices"), exist_ok=True)
    for function in functions:
        record = dict(function)
        if not iommu:
            record["iommu_group"] = None
        sysfs.add_function(root, record)
        if "boot_vga" in function:
            with open(os.path.join(root, "sys/bus/pci/devices", function["pci_bus_id"], "boot_vga"), "w", encoding="ascii") as handle:
                handle.write("1\n" if function["boot_vga"] else "0\n")
    if iommu:
        for group in sorted({f["iommu_group"] for f in functions if f.get("iommu_group") is not None}):
            os.makedirs(os.path.join(root, "sys/kernel/iommu_groups", str(group), "devices"), exist_ok=True)
    return root


# Two identical RTX 3090s (GPU + HDMI audio), a T4, the BMC's ASPEED VGA (boot console), a root port bridge.
TWO_3090 = [
    {"pci_bus_id": "0000:00:01.0", "vendor": 0x8086, "device_id": 0x1901, "class": BRIDGE, "driver": "pcieport", "iommu_group": 1},
    {"pci_bus_id": "0000:01:00.0", "device_id": 0x2204, "class": GPU, "driver": "nvidia", "iommu_group": 1, "boot_vga": False},
    {"pci_bus_id": "0000:01:00.1", "device_id": 0x1AEF, "class": AUDIO, "driver": "snd_hda_intel", "iommu_group": 1},
    {"pci_bus_id": "0000:02:00.0", "device_id": 0x2204, "class": GPU, "driver": "nvidia", "iommu_group": 2, "boot_vga": False},
    {"pci_bus_id": "0000:02:00.1", "device_id": 0x1AEF, "class": AUDIO, "driver": "snd_hda_intel", "iommu_group": 2},
    {"pci_bus_id": "0000:03:00.0", "vendor": 0x1A03, "device_id": 0x2000, "class": VGA_OTHER, "driver": "ast", "iommu_group": 3,
     "boot_vga": True},
]


@pytest.fixture
def facts_for(tmp_path) -> t.Callable[..., dict[str, t.Any]]:
    """``facts_for(functions, iommu=True)``: ansible_facts.nvidia_gpu for a synthetic host."""
    counter = {"n": 0}

    def make(functions: list[dict[str, t.Any]], iommu: bool = True) -> dict[str, t.Any]:
        counter["n"] += 1
        root = build_tree(str(tmp_path / ("host%d" % counter["n"])), functions, iommu=iommu)
        return _facts.gather_facts(backends=["pci"], root=root, kernel_release=sysfs.KERNEL_RELEASE)

    return make
