# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Build a synthetic host tree (sysfs, /proc, /dev, libraries, kernel modules) for a fake GPU profile.

The tree is what the PCI backend reads, so a profile's GPUs appear the same to NVML (fake_pynvml) and to the PCI scan:
same addresses, bound drivers, IOMMU groups and NUMA nodes.
"""

from __future__ import annotations

import os
import typing as t

KERNEL_RELEASE = "6.1.0-99-amd64"
LIB_DIR = "usr/lib/x86_64-linux-gnu"

_PROC_VERSION = {
    "open": "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  %s  Release Build  (dvs-builder@U16-I3-B03-4-3)  "
    "Tue Mar  5 22:15:33 UTC 2024\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n",
    "proprietary": "NVRM version: NVIDIA UNIX x86_64 Kernel Module  %s  Wed Aug  2 01:15:15 UTC 2023\n"
    "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n",
}

_LICENSES = {"open": b"Dual MIT/GPL", "proprietary": b"NVIDIA"}


def _write(path: str, content: str | bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    mode = "wb" if isinstance(content, bytes) else "w"
    with open(path, mode) as handle:  # pylint: disable=unspecified-encoding
        handle.write(content)


def add_function(root: str, function: dict[str, t.Any]) -> None:
    """One PCI function: ``sys/bus/pci/devices/<addr>/`` with vendor, device, class, driver and iommu_group links."""
    base = os.path.join(root, "sys/bus/pci/devices", function["pci_bus_id"])
    os.makedirs(base, exist_ok=True)
    _write(os.path.join(base, "vendor"), "0x%04x\n" % function.get("vendor", 0x10DE))
    _write(os.path.join(base, "device"), "0x%04x\n" % function["device_id"])
    _write(os.path.join(base, "class"), "0x%06x\n" % function["class"])
    sub_vendor, sub_device = (function.get("subsystem") or "10de:0000").split(":")
    _write(os.path.join(base, "subsystem_vendor"), "0x%s\n" % sub_vendor)
    _write(os.path.join(base, "subsystem_device"), "0x%s\n" % sub_device)
    numa = function.get("numa_node")
    _write(os.path.join(base, "numa_node"), "%d\n" % (-1 if numa is None else numa))
    if function.get("driver"):
        os.symlink("../../../../bus/pci/drivers/%s" % function["driver"], os.path.join(base, "driver"))
    if function.get("iommu_group") is not None:
        os.symlink("../../../../kernel/iommu_groups/%d" % function["iommu_group"], os.path.join(base, "iommu_group"))


def build(root: str, profile: dict[str, t.Any], ld_cache: bool = True) -> str:
    """Write the tree for ``profile`` under ``root`` and return root."""
    host = profile.get("host") or {}
    os.makedirs(os.path.join(root, "sys/bus/pci/devices"), exist_ok=True)
    # A non-NVIDIA function, which the scan must skip.
    add_function(root, {"pci_bus_id": "0000:00:00.0", "vendor": 0x8086, "device_id": 0x1237, "class": 0x060000, "driver": None})
    for function in list(profile.get("gpus") or []) + list(profile.get("pci_functions") or []):
        add_function(root, function)

    kernel = host.get("kernel_module") or {}
    if kernel.get("loaded"):
        _write(os.path.join(root, "proc/driver/nvidia/version"), _PROC_VERSION[kernel["type"]] % kernel["version"])
        _write(os.path.join(root, "sys/module/nvidia/version"), "%s\n" % kernel["version"])
    installed = kernel.get("installed_type") or kernel.get("type")
    if installed:
        module = os.path.join(root, "lib/modules", KERNEL_RELEASE, "updates/dkms/nvidia.ko")
        _write(module, b"\x7fELF synthetic\x00alias=pci:v000010DEd*\x00license=" + _LICENSES[installed] + b"\x00depends=\x00")

    os.makedirs(os.path.join(root, "dev"), exist_ok=True)
    for gpu in profile.get("gpus") or []:
        if gpu.get("driver") == "nvidia" and kernel.get("loaded"):
            _write(os.path.join(root, "dev", "nvidia%d" % gpu.get("minor_number", 0)), "")
    for node in host.get("device_nodes") or []:
        _write(os.path.join(root, "dev", node), "")

    libraries = host.get("libraries") or {}
    if libraries.get("version"):
        version = libraries["version"]
        lib_dir = os.path.join(root, LIB_DIR)
        os.makedirs(lib_dir, exist_ok=True)
        for name in ("libnvidia-ml.so", "libcuda.so"):
            _write(os.path.join(lib_dir, "%s.%s" % (name, version)), b"\x7fELF synthetic")
            os.symlink("%s.%s" % (name, version), os.path.join(lib_dir, "%s.1" % name))
        if ld_cache:
            # Synthetic ld.so.cache: the header of the glibc 1.1 format, then a string table naming the libraries.
            strings = b"".join(
                b"%s.1\x00/%s/%s.1\x00" % (name.encode(), LIB_DIR.encode(), name.encode()) for name in ("libnvidia-ml.so", "libcuda.so")
            )
            _write(os.path.join(root, "etc/ld.so.cache"), b"glibc-ld.so.cache1.1" + b"\x00" * 28 + strings)
    return root
