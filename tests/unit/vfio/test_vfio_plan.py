# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The passthrough planner over synthetic sysfs trees: selection, IOMMU groups, console, processes, conflicts."""

from __future__ import annotations

import copy

import pytest
from conftest import AUDIO, BRIDGE, GPU, SERIAL, TWO_3090, USB

from ansible_collections.gpuhost.nvidia.plugins.filter.vfio import vfio_passthrough_plan
from ansible_collections.gpuhost.nvidia.plugins.module_utils import _vfio

INTEL = {"processor": ["0", "GenuineIntel", "Intel(R) Xeon(R)"], "proc_cmdline": "BOOT_IMAGE=/vmlinuz ro quiet"}
AMD = {"processor": ["0", "AuthenticAMD", "AMD EPYC 7763"], "proc_cmdline": "ro"}


def test_scanner_reports_groups_of_any_vendor_and_display_functions(facts_for):
    facts = facts_for(TWO_3090)
    assert facts["iommu"]["enabled"] is True
    group1 = facts["iommu"]["groups"][0]
    assert group1["group"] == 1
    assert [(f["pci_bus_id"], f["type"], f["bound_driver"]) for f in group1["functions"]] == [
        ("0000:00:01.0", "bridge", "pcieport"), ("0000:01:00.0", "gpu", "nvidia"), ("0000:01:00.1", "audio", "snd_hda_intel")]
    # Group 3 holds no NVIDIA function: not listed.
    assert [g["group"] for g in facts["iommu"]["groups"]] == [1, 2]
    assert [(d["pci_bus_id"], d["pci_device_id"], d["boot_vga"]) for d in facts["display_functions"]] == [
        ("0000:01:00.0", "10de:2204", False), ("0000:02:00.0", "10de:2204", False), ("0000:03:00.0", "1a03:2000", True)]


def test_scanner_without_iommu(facts_for):
    facts = facts_for(TWO_3090, iommu=False)
    assert facts["iommu"] == {"enabled": False, "groups": []}


def test_address_keeps_the_identical_twin_with_the_host(facts_for):
    plan = _vfio.plan({"pci_addresses": ["01:00.0"]}, facts_for(TWO_3090), INTEL)
    assert plan["errors"] == []
    assert plan["mode"] == "addresses"
    assert plan["gpus"] == ["0000:01:00.0"]
    assert plan["functions"] == ["0000:01:00.0", "0000:01:00.1"]  # the HDMI audio goes with it
    assert plan["ids"] == []  # no ids= option: it would take the twin too
    assert plan["kernel_args"] == ["intel_iommu=on", "iommu=pt"]
    assert plan["iommu_groups"] == [1]
    assert plan["unbound"] == ["0000:01:00.0 (nvidia)", "0000:01:00.1 (snd_hda_intel)"]
    assert plan["proxmox_hostpci"] == ["hostpci0: 01:00,pcie=1,rombar=1,x-vga=0"]


def test_id_selects_every_matching_gpu_with_companions(facts_for):
    plan = _vfio.plan({"device_ids": ["10DE:2204"], "kernel_ids": True}, facts_for(TWO_3090), AMD)
    assert plan["errors"] == []
    assert plan["mode"] == "ids"
    assert plan["gpus"] == ["0000:01:00.0", "0000:02:00.0"]
    assert plan["functions"] == ["0000:01:00.0", "0000:01:00.1", "0000:02:00.0", "0000:02:00.1"]
    assert plan["ids"] == ["10de:1aef", "10de:2204"]
    assert plan["kernel_args"] == ["amd_iommu=on", "iommu=pt", "vfio-pci.ids=10de:1aef,10de:2204"]


def test_ids_that_would_claim_a_host_device_fail(facts_for):
    functions = copy.deepcopy(TWO_3090) + [
        {"pci_bus_id": "0000:04:00.0", "device_id": 0x1EB8, "class": GPU, "driver": "nvidia", "iommu_group": 4},
        {"pci_bus_id": "0000:04:00.1", "device_id": 0x1AEF, "class": AUDIO, "driver": "snd_hda_intel", "iommu_group": 4},
    ]
    plan = _vfio.plan({"device_ids": ["10de:2204"]}, facts_for(functions), INTEL)
    assert plan["errors"] == [
        "vfio-pci ids=10de:1aef would also claim 0000:04:00.1 (10de:1aef, audio, driver snd_hda_intel), which is not selected; "
        "choose the GPUs by vfio_passthrough_pci_addresses instead of vfio_passthrough_device_ids"]


@pytest.mark.parametrize("request_, message", [
    ({"pci_addresses": ["0000:1:0.0"]}, "'0000:1:0.0' is not a PCI address; write it as dddd:bb:dd.f"),
    ({"pci_addresses": ["01:00"]}, "'01:00' is not a PCI address"),
    ({"pci_addresses": ["0000:09:00.0"]}, "0000:09:00.0 is not an NVIDIA PCI function on this host (NVIDIA GPUs: 0000:01:00.0, 0000:02:00.0)"),
    ({"pci_addresses": ["0000:01:00.1"]}, "0000:01:00.1 is a audio function, not a GPU; name the GPU function (0000:01:00.0)"),
    ({"device_ids": ["10de:ffff"]}, "10de:ffff matches no NVIDIA GPU on this host (GPU ids present: 10de:2204)"),
    ({"device_ids": ["nvidia"]}, "'nvidia' is not a vendor:device id"),
    ({}, "choose the GPUs to pass through"),
    ({"state": "gone"}, "vfio_passthrough_state must be present or absent, got 'gone'"),
    ({"pci_addresses": ["0000:01:00.0"], "cpu_vendor": "arm"}, "vfio_passthrough_cpu_vendor must be auto, intel, amd or none"),
])
def test_bad_requests_are_errors(facts_for, request_, message):
    plan = _vfio.plan(request_, facts_for(TWO_3090), INTEL)
    assert any(message in e for e in plan["errors"]), plan["errors"]


def test_group_shared_with_a_host_device_fails_naming_it(facts_for):
    functions = copy.deepcopy(TWO_3090) + [
        {"pci_bus_id": "0000:00:1f.3", "vendor": 0x8086, "device_id": 0xA348, "class": AUDIO, "driver": "snd_hda_intel", "iommu_group": 1},
        {"pci_bus_id": "0000:00:14.0", "vendor": 0x8086, "device_id": 0xA36D, "class": USB, "driver": "xhci_hcd", "iommu_group": 1},
    ]
    plan = _vfio.plan({"pci_addresses": ["0000:01:00.0"]}, facts_for(functions), INTEL)
    assert len(plan["errors"]) == 1
    error = plan["errors"][0]
    assert error.startswith("IOMMU group 1 of 0000:01:00.0 also holds 0000:00:14.0 (8086:a36d, usb, driver xhci_hcd), "
                            "0000:00:1f.3 (8086:a348, audio, driver snd_hda_intel), which would not go to vfio-pci")
    assert "0000:00:01.0" not in error  # the root port bridge may share the group


def test_group_of_gpu_usb_c_and_serial_bus_passes_as_a_whole(facts_for):
    functions = [
        {"pci_bus_id": "0000:0a:00.0", "device_id": 0x1E87, "class": GPU, "driver": "nvidia", "iommu_group": 7},
        {"pci_bus_id": "0000:0a:00.1", "device_id": 0x10F8, "class": AUDIO, "driver": "snd_hda_intel", "iommu_group": 7},
        {"pci_bus_id": "0000:0a:00.2", "device_id": 0x1AD8, "class": USB, "driver": "xhci_hcd", "iommu_group": 7},
        {"pci_bus_id": "0000:0a:00.3", "device_id": 0x1AD9, "class": SERIAL, "driver": "nvidia-gpu", "iommu_group": 7},
        {"pci_bus_id": "0000:00:03.0", "vendor": 0x8086, "device_id": 0x1905, "class": BRIDGE, "driver": "pcieport", "iommu_group": 7},
        {"pci_bus_id": "0000:05:00.0", "vendor": 0x1A03, "device_id": 0x2000, "class": GPU, "driver": "ast", "iommu_group": 9, "boot_vga": True},
    ]
    plan = _vfio.plan({"device_ids": ["10de:1e87"]}, facts_for(functions), INTEL)
    assert plan["errors"] == []
    assert plan["functions"] == ["0000:0a:00.0", "0000:0a:00.1", "0000:0a:00.2", "0000:0a:00.3"]
    assert plan["ids"] == ["10de:10f8", "10de:1ad8", "10de:1ad9", "10de:1e87"]


def test_iommu_off_is_pending_when_the_argument_is_about_to_be_added(facts_for):
    plan = _vfio.plan({"pci_addresses": ["0000:01:00.0"]}, facts_for(TWO_3090, iommu=False), INTEL)
    assert plan["errors"] == []
    assert plan["iommu_pending"] is True
    assert any("intel_iommu=on takes effect at the next boot" in w for w in plan["warnings"])


def test_iommu_off_with_the_argument_already_running_is_a_firmware_problem(facts_for):
    host = dict(INTEL, proc_cmdline="ro intel_iommu=on iommu=pt")
    plan = _vfio.plan({"pci_addresses": ["0000:01:00.0"]}, facts_for(TWO_3090, iommu=False), host)
    assert plan["errors"] == ["the IOMMU is off although the running kernel has intel_iommu=on: enable VT-d / AMD-Vi (IOMMU) "
                              "in the firmware setup"]


def test_only_console_gpu_needs_an_override(facts_for):
    functions = [f for f in copy.deepcopy(TWO_3090) if not f["pci_bus_id"].startswith("0000:03")]
    functions[1]["boot_vga"] = True
    facts = facts_for(functions)
    for gpu in facts["gpus"]:
        gpu.update(state="ok", processes=[], processes_error=None)  # read, and idle
    plan = _vfio.plan({"pci_addresses": ["0000:01:00.0"]}, facts, INTEL)
    # The twin GPU is another display device: only a warning.
    assert plan["errors"] == []
    assert plan["warnings"] == ["0000:01:00.0 drives the boot console; after passthrough the console is on 0000:02:00.0 only if "
                                "the firmware picks it"]
    both = _vfio.plan({"device_ids": ["10de:2204"]}, facts, INTEL)
    assert [e for e in both["errors"] if "only display device" in e] == [
        "0000:01:00.0 is the host's only display device and drives the boot console: passing it through leaves the host without "
        "a console. Set vfio_passthrough_allow_console_gpu: true if you have another way in (serial console, BMC)"]
    allowed = _vfio.plan({"device_ids": ["10de:2204"], "allow_console_gpu": True}, facts, INTEL)
    assert allowed["errors"] == []
    assert any("allowed by vfio_passthrough_allow_console_gpu" in w for w in allowed["warnings"])


def test_gpu_in_use_under_nvidia_fails(facts_for):
    facts = facts_for(TWO_3090)
    facts["gpus"][0]["processes"] = [{"pid": 4242, "name": "python3", "used_memory_mib": 1000}]
    plan = _vfio.plan({"pci_addresses": ["0000:01:00.0"]}, facts, INTEL)
    assert plan["errors"] == ["0000:01:00.0 is in use under the nvidia driver by python3 (pid 4242): stop them before passing "
                              "the GPU through"]
    # The twin's processes do not matter.
    assert _vfio.plan({"pci_addresses": ["0000:02:00.0"]}, facts, INTEL)["errors"] == []


UNREADABLE = [
    ({"processes": None, "processes_error": "nvmlDeviceGetComputeRunningProcesses failed: NoPermission"}, "NoPermission"),
    ({"processes": None}, "null"),
    ({"processes": [], "processes_error": "the process query did not return within 10 s"}, "did not return"),
    ({"processes": [], "state": "gpu_lost", "message": "lost"}, "gpu_lost"),
    ({"state": "ok"}, "gathered without the processes"),
    ({"state": "pci_only", "processes": None, "message": "seen on the PCI bus only (bound to nvidia)"}, "no source read its processes"),
]


def test_processes_of_the_wrong_type_stop_the_plan(facts_for):
    """Facts whose processes are not a list are malformed: the plan stops naming the field (the facts' type check)."""
    facts = facts_for(TWO_3090)
    facts["gpus"][0].update(state="ok", source="nvml", index=0, processes="none")
    plan = _vfio.plan({"pci_addresses": ["0000:01:00.0"]}, facts, INTEL)
    assert any("processes" in e for e in plan["errors"]) and not plan["gpus"]


@pytest.mark.parametrize("record, reason", UNREADABLE)
def test_gpu_whose_processes_cannot_be_read_is_named_not_idle(facts_for, record, reason):
    """Unknown is not "not in use": a warning names it (the role changes only the next boot's binding)."""
    facts = facts_for(TWO_3090)
    facts["gpus"][0].pop("processes", None)
    facts["gpus"][0].update(dict({"state": "ok", "source": "nvml", "index": 0}, **record))
    plan = _vfio.plan({"pci_addresses": ["0000:01:00.0"]}, facts, INTEL)
    found = [w for w in plan["warnings"] if "processes cannot be read" in w]
    assert len(found) == 1 and found[0].startswith("0000:01:00.0 ") and reason in found[0]
    # Read and idle: no such warning; the twin's state does not matter.
    facts["gpus"][0].update(state="ok", processes=[], processes_error=None)
    assert not [w for w in _vfio.plan({"pci_addresses": ["0000:01:00.0"]}, facts, INTEL)["warnings"] if "cannot be read" in w]
    # An entry without a pid is still something running: in use, an error.
    facts["gpus"][0]["processes"] = [{"name": "x"}]
    assert _vfio.plan({"pci_addresses": ["0000:01:00.0"]}, facts, INTEL)["errors"] == [
        "0000:01:00.0 is in use under the nvidia driver by x (pid None): stop them before passing the GPU through"]


def test_conflict_with_the_driver_role(facts_for):
    facts = facts_for(TWO_3090)
    other = {"nvidia_driver": {"passthrough_pci_addresses": [], "passthrough_policy": "fail"}}
    plan = _vfio.plan({"pci_addresses": ["0000:01:00.0"], "other_roles": other}, facts, INTEL)
    assert plan["errors"] == ["nvidia_driver is configured for this host and would drive 0000:01:00.0: add 0000:01:00.0 to "
                              "nvidia_driver_passthrough_pci_addresses and set nvidia_driver_passthrough_policy: exclude"]
    other = {"nvidia_driver": {"passthrough_pci_addresses": ["01:00.0"], "passthrough_policy": "fail"}}
    plan = _vfio.plan({"pci_addresses": ["0000:01:00.0"], "other_roles": other}, facts, INTEL)
    assert plan["errors"] == ["nvidia_driver_passthrough_policy is 'fail': set it to exclude so that the driver role leaves "
                              "0000:01:00.0 to vfio-pci"]
    other = {"nvidia_driver": {"passthrough_pci_addresses": ["0000:01:00.0"], "passthrough_policy": "exclude"}}
    assert _vfio.plan({"pci_addresses": ["0000:01:00.0"], "other_roles": other}, facts, INTEL)["errors"] == []
    # Not configured for the host: nothing to conflict with.
    assert _vfio.plan({"pci_addresses": ["0000:01:00.0"], "other_roles": {"nvidia_driver": None}}, facts, INTEL)["errors"] == []


def test_conflict_with_gpu_settings_selection(facts_for):
    facts = facts_for(TWO_3090)
    for selector in ("0000:01:00.0", "00000000:01:00.0"):
        plan = _vfio.plan({"pci_addresses": ["0000:01:00.0"], "other_roles": {"gpu_settings_gpus": [selector]}}, facts, INTEL)
        assert plan["errors"] == ["gpu_settings_spec.gpus names 0000:01:00.0 (%s), which this play passes through to VMs: "
                                  "remove it there" % selector]
    facts["gpus"][0]["name"] = "NVIDIA GeForce RTX 3090"
    plan = _vfio.plan({"pci_addresses": ["0000:01:00.0"], "other_roles": {"gpu_settings_gpus": ["*RTX 3090"]}}, facts, INTEL)
    assert plan["errors"] == ["gpu_settings_spec.gpus names 0000:01:00.0 (*RTX 3090), which this play passes through to VMs: "
                              "remove it there"]
    # "all" means the GPUs NVML sees, and NVML does not see vfio-pci GPUs.
    assert _vfio.plan({"pci_addresses": ["0000:01:00.0"], "other_roles": {"gpu_settings_gpus": ["all", "0000:02:00.0"]}},
                      facts, INTEL)["errors"] == []


def test_absent_plans_nothing_and_vendor_override(facts_for):
    assert _vfio.plan({"state": "absent"}, facts_for(TWO_3090), INTEL)["errors"] == []
    plan = _vfio.plan({"pci_addresses": ["0000:01:00.0"], "cpu_vendor": "none", "iommu_passthrough_mode": False}, facts_for(TWO_3090), INTEL)
    assert plan["kernel_args"] == []
    unknown = _vfio.plan({"pci_addresses": ["0000:01:00.0"]}, facts_for(TWO_3090), {"processor": ["0", "ARM"]})
    assert unknown["kernel_args"] == ["iommu=pt"]
    assert any("neither Intel nor AMD" in w for w in unknown["warnings"])


def test_filter_accepts_ansible_facts(facts_for):
    facts = facts_for(TWO_3090)
    assert vfio_passthrough_plan({"pci_addresses": ["0000:02:00.0"]}, {"nvidia_gpu": facts}, INTEL)["gpus"] == ["0000:02:00.0"]


def test_proxmox_options():
    assert _vfio.proxmox_hostpci(["0000:01:00.0", "0001:81:00.0"], {"pcie": False, "x_vga": True}) == [
        "hostpci0: 01:00,pcie=0,rombar=1,x-vga=1", "hostpci1: 0001:81:00,pcie=0,rombar=1,x-vga=1"]
