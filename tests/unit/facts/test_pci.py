# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import lzma
import os

import sysfs

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _pci


def test_h100_board_functions(host_tree):
    root = host_tree("h100_sxm_8x_nvswitch")
    result = _pci.scan(root, kernel_release=sysfs.KERNEL_RELEASE)
    assert [f["pci_bus_id"] for f in result["gpus"]] == [
        "0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
        "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0",
    ]
    assert result["nvswitch_count"] == 4
    switch = [f for f in result["functions"] if f["pci_bus_id"] == "0000:05:00.0"][0]
    assert switch == {
        "pci_bus_id": "0000:05:00.0",
        "pci_device_id": "10de:22a3",
        "subsystem_id": "10de:1796",
        "class": "0x068000",
        "type": "nvswitch",
        "bound_driver": "nvidia-nvswitch",
        "iommu_group": 10,
        "numa_node": 0,
    }
    # The Intel host bridge written by the tree builder is not listed.
    assert all(f["pci_device_id"].startswith("10de:") for f in result["functions"])
    assert len(result["functions"]) == 12
    gpu4 = result["gpus"][4]
    assert (gpu4["bound_driver"], gpu4["iommu_group"], gpu4["numa_node"], gpu4["type"]) == ("nvidia", 80, 1, "gpu")


def test_kernel_module_and_libraries(host_tree):
    root = host_tree("h100_sxm_8x_nvswitch")
    result = _pci.scan(root, kernel_release=sysfs.KERNEL_RELEASE)
    assert result["kernel_module"] == {"loaded": True, "version": "550.54.15", "type": "open"}
    assert result["library_paths"] == {
        "nvml": "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
        "cuda": "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
    }
    assert result["library_version"] == "550.54.15"
    assert "/dev/nvidia7" in result["device_nodes"]
    assert "/dev/nvidia-nvswitchctl" in result["device_nodes"]
    assert result["device_nodes"].index("/dev/nvidia2") < result["device_nodes"].index("/dev/nvidia7")


def test_vfio_bound_audio_and_gpu(host_tree):
    root = host_tree("vfio_bound")
    functions = _pci.scan_functions(root)
    assert [(f["pci_bus_id"], f["type"], f["bound_driver"], f["iommu_group"]) for f in functions] == [
        ("0000:41:00.0", "gpu", "vfio-pci", 30),
        ("0000:41:00.1", "audio", "vfio-pci", 30),
    ]


def test_unbound_gpu_and_module_not_loaded(host_tree):
    root = host_tree("driver_not_loaded")
    result = _pci.scan(root, kernel_release=sysfs.KERNEL_RELEASE)
    assert result["gpus"][0]["bound_driver"] is None
    # Not loaded: the type comes from the license tag of the module built for the kernel.
    assert result["kernel_module"] == {"loaded": False, "version": None, "type": "proprietary"}
    assert result["library_version"] == "535.261.03"
    assert result["device_nodes"] == []


def test_no_gpu_host(host_tree):
    root = host_tree("no_gpu")
    result = _pci.scan(root, kernel_release=sysfs.KERNEL_RELEASE)
    assert result["functions"] == [] and result["gpus"] == []
    assert result["kernel_module"] == {"loaded": False, "version": None, "type": None}
    assert result["library_paths"] == {"nvml": None, "cuda": None}
    assert result["library_version"] is None


def test_missing_sysfs_is_empty(tmp_path):
    result = _pci.scan(str(tmp_path), kernel_release="x")
    assert result["functions"] == [] and result["nvswitch_count"] == 0 and result["device_nodes"] == []


def test_libraries_found_without_ld_cache(host_tree):
    root = host_tree("t4", ld_cache=False)
    assert not os.path.exists(os.path.join(root, "etc/ld.so.cache"))
    assert _pci.find_library(root, "libcuda.so.1") == "/usr/lib/x86_64-linux-gnu/libcuda.so.1"


def test_ld_cache_path_must_exist(tmp_path):
    # The cache names a library that is not on disk: report nothing rather than a guess.
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/ld.so.cache").write_bytes(b"glibc-ld.so.cache1.1\x00libcuda.so.1\x00/opt/gone/libcuda.so.1\x00")
    assert _pci.find_library(str(tmp_path), "libcuda.so.1") is None
    lib = tmp_path / "opt/gone"
    lib.mkdir(parents=True)
    (lib / "libcuda.so.1").write_bytes(b"")
    assert _pci.find_library(str(tmp_path), "libcuda.so.1") == "/opt/gone/libcuda.so.1"


def test_absolute_library_symlink_resolves_inside_root(tmp_path):
    lib = tmp_path / "usr/lib64"
    lib.mkdir(parents=True)
    (lib / "libnvidia-ml.so.570.86.15").write_bytes(b"")
    os.symlink("/usr/lib64/libnvidia-ml.so.570.86.15", str(lib / "libnvidia-ml.so.1"))
    path = _pci.find_library(str(tmp_path), "libnvidia-ml.so.1")
    assert path == "/usr/lib64/libnvidia-ml.so.1"
    assert _pci.library_version(str(tmp_path), path) == "570.86.15"


def test_parse_proc_version():
    assert _pci.parse_proc_version(
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  560.35.03  Release Build  (dvs-builder@U16)  Fri Aug 16 2024\n"
    ) == {"version": "560.35.03", "type": "open"}
    assert _pci.parse_proc_version("NVRM version: NVIDIA UNIX x86_64 Kernel Module  470.256.02  Thu May  2 14:37:44 UTC 2024\n") == {
        "version": "470.256.02",
        "type": "proprietary",
    }
    assert _pci.parse_proc_version("") == {"version": None, "type": None}


def test_module_license_in_xz_module(tmp_path):
    moddir = tmp_path / "lib/modules/6.1.0-1-amd64/updates/dkms"
    moddir.mkdir(parents=True)
    with lzma.open(str(moddir / "nvidia-current.ko.xz"), "wb") as handle:
        handle.write(b"\x7fELF\x00license=Dual MIT/GPL\x00")
    assert _pci.installed_module_type(str(tmp_path), "6.1.0-1-amd64") == "open"
    assert _pci.installed_module_type(str(tmp_path), "6.1.0-2-amd64") is None


def test_classify():
    assert _pci.classify(0x030000) == "gpu"
    assert _pci.classify(0x030200) == "gpu"
    assert _pci.classify(0x040300) == "audio"
    assert _pci.classify(0x0C0330) == "usb"
    assert _pci.classify(0x0C8000) == "serial_bus"
    assert _pci.classify(0x068000) == "nvswitch"
    assert _pci.classify(0x060400) == "bridge"
    assert _pci.classify(0x120000) == "other"


def test_library_in_another_directory_is_reported_as_its_file(tmp_path):
    # The layout of the H200 capture (tests/unit/fixtures/captured, 580.159.04 on a NixOS-style host):
    # /lib/libnvidia-ml.so.1 is an absolute link into another tree; the versioned name beside it does not exist.
    real = tmp_path / "usr/local/nvidia/lib64"
    real.mkdir(parents=True)
    (tmp_path / "lib").mkdir()
    for soname, versioned in (("libnvidia-ml.so.1", "libnvidia-ml.so.580.159.04"), ("libcuda.so.1", "libcuda.so.580.159.04")):
        (real / versioned).write_bytes(b"")
        os.symlink("/usr/local/nvidia/lib64/" + versioned, str(tmp_path / "lib" / soname))
    result = _pci.scan(str(tmp_path))
    assert result["library_paths"] == {"nvml": "/lib/libnvidia-ml.so.1", "cuda": "/lib/libcuda.so.1"}
    assert result["library_files"] == {
        "nvml": "/usr/local/nvidia/lib64/libnvidia-ml.so.580.159.04",
        "cuda": "/usr/local/nvidia/lib64/libcuda.so.580.159.04",
    }
    assert result["library_version"] == "580.159.04"
    assert not (tmp_path / "lib/libcuda.so.580.159.04").exists()
