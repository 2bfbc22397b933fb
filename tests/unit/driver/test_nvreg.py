# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The nvidia module's NVreg_* parameters (nvidia_driver_module_params): the key table, the values each key accepts,
the modprobe.d file, and kmod's own parser reading that file back."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _nvreg

# One documented value per key (nv-reg.h's "Possible values", the README's examples).
GOOD = {
    "NVreg_ModifyDeviceFiles": 0,
    "NVreg_DeviceFileUID": 0,
    "NVreg_DeviceFileGID": 44,
    "NVreg_DeviceFileMode": "0660",
    "NVreg_InitializeSystemMemoryAllocations": 1,
    "NVreg_UsePageAttributeTable": 1,
    "NVreg_EnableMSI": 1,
    "NVreg_EnablePCIeGen3": 0,
    "NVreg_EnableStreamMemOPs": 1,
    "NVreg_EnableUserNUMAManagement": 1,
    "NVreg_NvLinkDisable": 0,
    "NVreg_RestrictProfilingToAdminUsers": 1,
    "NVreg_PreserveVideoMemoryAllocations": 1,
    "NVreg_TemporaryFilePath": "/var/tmp",
    "NVreg_EnableS0ixPowerManagement": 0,
    "NVreg_S0ixPowerManagementVideoMemoryThreshold": 256,
    "NVreg_DynamicPowerManagement": "0x02",
    "NVreg_DynamicPowerManagementVideoMemoryThreshold": 200,
    "NVreg_RegisterPCIDriver": 1,
    "NVreg_EnablePCIERelaxedOrderingMode": 0,
    "NVreg_EnableResizableBar": 1,
    "NVreg_EnableGpuFirmware": 0,
    "NVreg_EnableGpuFirmwareLogs": 1,
    "NVreg_DmaRemapPeerMmio": 1,
    "NVreg_RmNvlinkBandwidthLinkCount": 4,
    "NVreg_RmNvlinkBandwidth": "HALF",
    "NVreg_EnableNonblockingOpen": 1,
    "NVreg_ImexChannelCount": 2048,
    "NVreg_CreateImexChannel0": 0,
    "NVreg_GrdmaPciTopoCheckOverride": 0,
    "NVreg_ExcludedGpus": "GPU-8e6c1f7a-2b1d-4c3e-9f0a-1b2c3d4e5f60,GPU-00000000-1111-2222-3333-444444444444",
    "NVreg_RegistryDwords": "RMEnableFoo=1;RmBar=0x10",
    "NVreg_RegistryDwordsPerDevice": "pci=0000:3b:00.0;RmFoo=1;pci=86:00;RmBar=0",
    "NVreg_UseKernelSuspendNotifiers": 1,
}


def test_every_key_of_the_table_has_a_documented_sample():
    assert sorted(GOOD) == sorted(_nvreg.PREFIX + k for k in _nvreg.KEYS)


def test_documented_values_pass_and_render_as_the_kernel_reads_them():
    assert _nvreg.errors(GOOD) == []
    text = _nvreg.content(GOOD)
    line = [ln for ln in text.splitlines() if ln.startswith("options ")]
    assert len(line) == 1
    words = line[0].split()
    assert words[:2] == ["options", "nvidia"]
    # sorted keys, one word each; the octal mode stays octal, hex becomes decimal
    assert words[2:] == sorted(words[2:])
    assert "NVreg_DeviceFileMode=0660" in words
    assert "NVreg_DynamicPowerManagement=2" in words
    assert "NVreg_TemporaryFilePath=/var/tmp" in words
    assert len(words) == 2 + len(GOOD)


def test_no_params_write_no_file_content():
    assert _nvreg.errors({}) == [] and _nvreg.errors(None) == []
    assert _nvreg.content({}) == "" and _nvreg.content(None) == ""


def test_the_same_dict_in_another_order_writes_the_same_bytes():
    reordered = dict(reversed(list(GOOD.items())))
    assert _nvreg.content(reordered) == _nvreg.content(GOOD)


HOSTILE = [
    # (params, what the message must name)
    ({"NVreg_TemporaryFilePath": "/var/tmp\noptions nvidia NVreg_EnableMSI=0"}, "NVreg_TemporaryFilePath"),
    ({"NVreg_TemporaryFilePath": "/var/tmp NVreg_EnableMSI=0"}, "NVreg_TemporaryFilePath"),
    ({"NVreg_TemporaryFilePath": "var/tmp"}, "absolute"),
    ({"NVreg_TemporaryFilePath": "/var/tmp\n"}, "NVreg_TemporaryFilePath"),
    ({"NVreg_RmNvlinkBandwidth": "HALF\n"}, "3QUARTER"),
    ({"NVreg_TemporaryFilePath": "/var/../etc"}, "NVreg_TemporaryFilePath"),
    ({"NVreg_TemporaryFilePath": "/tmp#x"}, "NVreg_TemporaryFilePath"),
    ({"NVreg_TemporaryFilePath": 5}, "NVreg_TemporaryFilePath"),
    ({"NVreg_RegistryDwords": "RmFoo=1 RmBar=2"}, "NVreg_RegistryDwords"),
    ({"NVreg_RegistryDwords": "RmFoo=\"1\""}, "NVreg_RegistryDwords"),
    ({"NVreg_RegistryDwords": "RmFoo=abc"}, "NVreg_RegistryDwords"),
    ({"NVreg_RegistryDwordsPerDevice": "RmFoo=1"}, "pci="),
    ({"NVreg_RegistryDwordsPerDevice": "pci=0000:3b:00.9;RmFoo=1"}, "NVreg_RegistryDwordsPerDevice"),
    ({"NVreg_ExcludedGpus": "GPU-123"}, "GPU UUIDs"),
    ({"NVreg_ExcludedGpus": "GPU-8e6c1f7a-2b1d-4c3e-9f0a-1b2c3d4e5f60;rm -rf /"}, "NVreg_ExcludedGpus"),
    ({"NVreg_RmNvlinkBandwidth": "half"}, "3QUARTER"),
    ({"NVreg_EnableGpuFirmware": 2}, "must be one of 0, 1"),
    ({"NVreg_EnableGpuFirmware": True}, "is not a number"),
    ({"NVreg_EnableGpuFirmware": "yes"}, "is not a number"),
    ({"NVreg_EnableGpuFirmware": "1\n"}, "is not a number"),
    ({"NVreg_EnableGpuFirmware": None}, "is not a number"),
    ({"NVreg_EnableGpuFirmware": 1.0}, "is not a number"),
    ({"NVreg_EnableGpuFirmware": -1}, "must be one of"),
    ({"NVreg_DynamicPowerManagement": 4}, "0, 1, 2, 3"),
    ({"NVreg_DynamicPowerManagementVideoMemoryThreshold": 201}, "0 to 200"),
    ({"NVreg_ImexChannelCount": 2**20 + 1}, "out of range"),
    ({"NVreg_DeviceFileUID": 2**31}, "out of range"),
    ({"NVreg_DeviceFileUID": "0x80000000"}, "out of range"),
    ({"NVreg_DeviceFileMode": "660"}, "octal"),
    ({"NVreg_DeviceFileMode": "0778"}, "octal"),
    ({"NVreg_DeviceFileMode": "01777"}, "out of range"),
    ({"NVreg_EnableMSI": "0x"}, "is not a number"),
    ({"EnableGpuFirmware": 0}, "did you mean NVreg_EnableGpuFirmware"),
    ({"nvidia.NVreg_EnableGpuFirmware": 0}, "not an NVreg_ parameter"),
    ({"NVreg_EnableGpuFirmwar": 0}, "not a known nvidia module parameter"),
    ({"NVreg_enablegpufirmware": 0}, "not a known nvidia module parameter"),
    ({"NVreg_GpuBlacklist": "GPU-8e6c1f7a-2b1d-4c3e-9f0a-1b2c3d4e5f60"}, "use NVreg_ExcludedGpus"),
    ({"NVreg_ResmanDebugLevel": 0}, "debugging"),
    ({"NVreg_MemoryPoolSize": 1}, "ESXi"),
    ({"NVreg_OpenRmEnableUnsupportedGpus": 1}, "ignored"),
    ({1: 0}, "not an NVreg_ parameter"),
]


@pytest.mark.parametrize(("params", "named"), HOSTILE, ids=[repr(case[0])[:60] for case in HOSTILE])
def test_hostile_and_wrong_values_are_refused_naming_the_key_and_the_fix(params, named):
    found = _nvreg.errors(params)
    assert len(found) == 1, found
    assert named in found[0], found
    assert "nvidia_driver_module_params" in found[0]
    key = next(iter(params))
    assert str(key) in found[0] or repr(key) in found[0]


def test_not_a_mapping_is_refused():
    assert "must be a mapping" in _nvreg.errors(["NVreg_EnableMSI=1"])[0]
    assert "must be a mapping" in _nvreg.errors("NVreg_EnableMSI=1")[0]


def test_every_problem_is_named_at_once():
    found = _nvreg.errors({"NVreg_EnableMSI": 3, "NVreg_Typo": 1, "NVreg_TemporaryFilePath": "rel"})
    assert len(found) == 3


def test_refused_keys_are_not_in_the_table():
    assert not set(_nvreg.REFUSED) & set(_nvreg.KEYS)


@pytest.mark.skipif(shutil.which("modprobe", path="/usr/sbin:/sbin:/usr/bin:/bin") is None,
                    reason="kmod's modprobe is not installed (bindep.txt: kmod; tests/deps/install.sh)")
def test_kmod_reads_the_file_back_as_one_options_line_with_our_words(tmp_path):
    modprobe = shutil.which("modprobe", path="/usr/sbin:/sbin:/usr/bin:/bin")
    conf = tmp_path / "modprobe.d"
    conf.mkdir()
    text = _nvreg.content(GOOD)
    (conf / "gpuhost-nvidia-params.conf").write_text(text)
    out = subprocess.run([modprobe, "-C", str(conf), "-c"], capture_output=True, text=True, check=True).stdout
    ours = [ln for ln in out.splitlines() if ln.startswith("options nvidia ")]
    expected = [ln for ln in text.splitlines() if ln.startswith("options ")]
    assert ours == expected
