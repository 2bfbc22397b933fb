# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import copy
import os

import pytest
import yaml

import fake_pynvml
import sysfs
from gpufacts_support import OWN_XML

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _facts, _nvml, _pci
from ansible_collections.gpuhost.nvidia.plugins.modules import nvidia_gpu_facts

ALL = ["processes", "utilization", "topology", "health"]


@pytest.fixture(autouse=True)
def fixed_kernel_release(monkeypatch):
    """The synthetic trees build modules for sysfs.KERNEL_RELEASE, not for the kernel running the tests."""
    real = _pci.installed_module_type
    monkeypatch.setattr(_pci, "installed_module_type", lambda root="/", kernel_release=None: real(root, sysfs.KERNEL_RELEASE))


def facts_of(result):
    assert result.get("failed") is not True, result
    assert result["changed"] is False
    return result["ansible_facts"]["nvidia_gpu"]


# -- every profile through the module, NVML first -----------------------------------------------------------------
EXPECTED = {
    # profile: (state, source, present, gpu count, [(index, uuid, pci_bus_id, bound_driver, state)], nvswitch_count)
    "h100_sxm_8x_nvswitch": ("ok", "nvml", True, 8, None, 4),
    "a100_mig": ("ok", "nvml", True, 1, [(0, "GPU-5c6d7e8f-1111-4222-8333-444455556666", "0000:07:00.0", "nvidia", "ok")], 0),
    "rtx3090": ("ok", "nvml", True, 1, [(0, "GPU-9f8e7d6c-2222-4333-8444-555566667777", "0000:01:00.0", "nvidia", "ok")], 0),
    "t4": ("ok", "nvml", True, 1, [(0, "GPU-3e4f5a6b-3333-4444-8555-666677778888", "0000:00:1e.0", "nvidia", "ok")], 0),
    "vfio_bound": ("ok", "nvml", True, 1, [(None, None, "0000:41:00.0", "vfio-pci", "pci_only")], 0),
    "no_gpu": ("no_gpu", "pci", False, 0, [], 0),
    "driver_not_loaded": ("driver_not_loaded", "pci", True, 1, [(None, None, "0000:01:00.0", None, "pci_only")], 0),
}


@pytest.mark.parametrize("profile", sorted(EXPECTED))
def test_every_profile(profile, fake_nvml, host_tree, run_module):
    fake = fake_nvml(profile)
    root = host_tree(profile)
    facts = facts_of(run_module(nvidia_gpu_facts, {"root": root}))
    state, source, present, count, gpus, switches = EXPECTED[profile]
    assert (facts["state"], facts["source"], facts["present"], len(facts["gpus"]), facts["nvswitch_count"]) == (
        state, source, present, count, switches)
    if gpus is not None:
        assert [(g["index"], g["uuid"], g["pci_bus_id"], g["bound_driver"], g["state"]) for g in facts["gpus"]] == gpus
    assert fake.setter_calls == []  # facts never change anything
    assert fake.initialised == 0  # nvmlShutdown after every successful nvmlInit
    if state != "ok":
        assert facts["messages"]
    assert facts["reboot_required"] is bool(facts["reboot_reasons"])


def test_h100_exact(fake_nvml, host_tree, run_module):
    fake_nvml("h100_sxm_8x_nvswitch")
    facts = facts_of(run_module(nvidia_gpu_facts, {"root": host_tree("h100_sxm_8x_nvswitch")}))
    assert facts["driver"] == {
        "version": "550.54.15",
        "branch": "550",
        "cuda_version": "12.4",
        "kernel_module_type": "open",
        "kernel_module_loaded": True,
        "kernel_module_version": "550.54.15",
        "nvml_version": "12.550.54.15",
        "library_version": "550.54.15",
        "library_paths": {"nvml": "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", "cuda": "/usr/lib/x86_64-linux-gnu/libcuda.so.1"},
        "library_files": {"nvml": "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.15", "cuda": "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15"},
    }
    assert [(g["index"], g["pci_bus_id"], g["numa_node"], g["iommu_group"]) for g in facts["gpus"]] == [
        (0, "0000:18:00.0", 0, 40), (1, "0000:2a:00.0", 0, 41), (2, "0000:3a:00.0", 0, 42), (3, "0000:5d:00.0", 0, 43),
        (4, "0000:9a:00.0", 1, 80), (5, "0000:ab:00.0", 1, 81), (6, "0000:ba:00.0", 1, 82), (7, "0000:db:00.0", 1, 83),
    ]
    gpu = facts["gpus"][5]
    assert gpu == {
        "index": 5,
        "uuid": "GPU-0a1b2c3d-0000-4000-8000-000000000005",
        "name": "NVIDIA H100 80GB HBM3",
        "pci_bus_id": "0000:ab:00.0",
        "pci_device_id": "10de:2330",
        "architecture": "Hopper",
        "compute_capability": "9.0",
        "memory_total_mib": 81559,
        "persistence_mode": True,
        "compute_mode": "default",
        "power_limit_w": 700.0,
        "power_limit_min_w": 200.0,
        "power_limit_max_w": 700.0,
        "ecc": {"current": True, "pending": True},
        "mig": {"current": False, "pending": False},
        "mig_devices": [],
        "bound_driver": "nvidia",
        "iommu_group": 81,
        "numa_node": 1,
        "state": "ok",
        "message": None,
        "source": "nvml",
    }
    assert [f["type"] for f in facts["pci_functions"]] == ["nvswitch"] * 4 + ["gpu"] * 8
    assert facts["device_nodes"][:8] == ["/dev/nvidia%d" % i for i in range(8)]
    assert (facts["messages"], facts["reboot_required"], facts["reboot_reasons"]) == ([], False, [])


def test_gather_everything(fake_nvml, host_tree, run_module):
    fake_nvml("h100_sxm_8x_nvswitch")
    facts = facts_of(run_module(nvidia_gpu_facts, {"root": host_tree("h100_sxm_8x_nvswitch"), "gather": ALL}))
    gpu = facts["gpus"][0]
    assert gpu["utilization"] == {"gpu": 97, "memory": 61}
    assert (gpu["temperature_c"], gpu["power_draw_w"]) == (58, 612.34)
    assert gpu["processes"] == [
        {"pid": 4242, "type": "C", "name": "python3", "used_memory_mib": 40960, "gpu_instance_id": None, "compute_instance_id": None}
    ]
    assert gpu["topology"]["nvlink_active_links"] == 18
    assert {p["link"] for p in gpu["topology"]["peers"]} == {"NV18"}


def test_check_mode_gives_the_same_facts(fake_nvml, host_tree, run_module):
    fake_nvml("a100_mig")
    root = host_tree("a100_mig")
    normal = facts_of(run_module(nvidia_gpu_facts, {"root": root}))
    checked = facts_of(run_module(nvidia_gpu_facts, {"root": root}, check_mode=True))
    assert normal == checked


def test_a100_mig_exact(fake_nvml, host_tree, run_module):
    fake_nvml("a100_mig")
    gpu = facts_of(run_module(nvidia_gpu_facts, {"root": host_tree("a100_mig")}))["gpus"][0]
    assert gpu["mig"] == {"current": True, "pending": True}
    assert [(m["gi"], m["ci"], m["profile"], m["memory_mib"]) for m in gpu["mig_devices"]] == [
        (1, 0, "1c.3g.20gb", 19968), (1, 1, "2c.3g.20gb", 19968), (7, 0, "1g.5gb", 4864), (8, 0, "1g.5gb", 4864)]


def test_t4_pending_ecc_needs_reboot(fake_nvml, host_tree, run_module):
    fake_nvml("t4")
    facts = facts_of(run_module(nvidia_gpu_facts, {"root": host_tree("t4")}))
    gpu = facts["gpus"][0]
    assert (gpu["compute_mode"], gpu["iommu_group"], gpu["numa_node"]) == ("exclusive_process", None, None)
    assert facts["reboot_required"] is True
    assert facts["reboot_reasons"] == [
        "GPU 0 (0000:00:1e.0): ECC mode change pending (enabled -> disabled); it takes effect after a GPU reset or reboot"]


def test_rtx3090_audio_function(fake_nvml, host_tree, run_module):
    fake_nvml("rtx3090")
    facts = facts_of(run_module(nvidia_gpu_facts, {"root": host_tree("rtx3090")}))
    assert facts["pci_functions"][1] == {
        "pci_bus_id": "0000:01:00.1", "pci_device_id": "10de:1aef", "subsystem_id": "1043:87b3", "class": "0x040300",
        "type": "audio", "bound_driver": "snd_hda_intel", "iommu_group": 14, "numa_node": None,
    }
    assert facts["gpus"][0]["ecc"] == {"current": None, "pending": None}


# -- the non-error states --------------------------------------------------------------------------------------------
def test_no_gpu(fake_nvml, host_tree, run_module):
    fake_nvml("no_gpu")
    facts = facts_of(run_module(nvidia_gpu_facts, {"root": host_tree("no_gpu")}))
    assert (facts["state"], facts["present"], facts["gpus"], facts["pci_functions"]) == ("no_gpu", False, [], [])
    assert facts["driver"]["version"] is None and facts["driver"]["library_paths"] == {"nvml": None, "cuda": None}
    assert any("NVML Shared Library Not Found" in m for m in facts["messages"])


def test_driver_not_loaded_via_nvml(fake_nvml, host_tree, run_module):
    fake_nvml("driver_not_loaded")
    facts = facts_of(run_module(nvidia_gpu_facts, {"root": host_tree("driver_not_loaded")}))
    assert facts["state"] == "driver_not_loaded"
    assert "NVML: nvmlInit failed: Driver Not Loaded (NVMLError_DriverNotLoaded)" in facts["messages"]
    assert facts["driver"] == {
        "version": "535.261.03", "branch": "535", "cuda_version": "12.2", "kernel_module_type": "proprietary",
        "kernel_module_loaded": False, "kernel_module_version": None, "nvml_version": None, "library_version": "535.261.03",
        "library_paths": {"nvml": "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1", "cuda": "/usr/lib/x86_64-linux-gnu/libcuda.so.1"},
        "library_files": {"nvml": "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.535.261.03", "cuda": "/usr/lib/x86_64-linux-gnu/libcuda.so.535.261.03"},
    }
    assert facts["gpus"][0]["architecture"] == "Hopper" and facts["gpus"][0]["message"] == "seen on the PCI bus only (no driver bound)"


def test_driver_not_loaded_via_nvidia_smi_exit_9(no_pynvml, fake_smi, host_tree, run_module):
    fake_smi.replay(scenario="driver_not_loaded")
    result = run_module(nvidia_gpu_facts, {"root": host_tree("driver_not_loaded")}, smi=fake_smi)
    facts = facts_of(result)
    assert (facts["state"], facts["source"]) == ("driver_not_loaded", "pci")
    assert any(m.startswith("nvidia-smi -q -x exited with 9: NVIDIA-SMI has failed because it couldn't communicate") for m in facts["messages"])
    assert any("nvidia-ml-py" in m for m in facts["messages"])
    assert fake_smi.calls == [{"argv": ["-q", "-x"], "LC_ALL": "C"}]
    assert result["_bin_lookups"] == ["nvidia-smi"]


def test_library_not_found(no_pynvml, host_tree, run_module):
    # Kernel module loaded, but no nvidia-ml-py and no nvidia-smi.
    facts = facts_of(run_module(nvidia_gpu_facts, {"root": host_tree("t4")}))
    assert (facts["state"], facts["source"]) == ("library_not_found", "pci")
    assert "nvidia-smi: not found in PATH, not used" in facts["messages"]
    gpu = facts["gpus"][0]
    assert (gpu["state"], gpu["bound_driver"], gpu["architecture"], gpu["compute_capability"]) == ("pci_only", "nvidia", "Turing", "7.5")
    # The driver is still described from the kernel module and the library.
    assert (facts["driver"]["version"], facts["driver"]["cuda_version"], facts["driver"]["nvml_version"]) == ("535.183.01", "12.2", None)


def test_no_permission(fake_nvml, fake_smi, host_tree, run_module):
    profile = fake_pynvml.load_profile("t4")
    profile["nvml"]["init_error"] = "NoPermission"
    fake_nvml(profile)
    fake_smi.replay(scenario="no_permission")
    facts = facts_of(run_module(nvidia_gpu_facts, {"root": host_tree(profile)}, smi=fake_smi))
    assert facts["state"] == "no_permission"
    assert "NVML: nvmlInit failed: Insufficient Permissions (NVMLError_NoPermission)" in facts["messages"]
    assert "nvidia-smi -q -x exited with 4: Failed to initialize NVML: Insufficient Permissions" in facts["messages"]


def test_gpu_lost(fake_nvml, host_tree, run_module):
    profile = fake_pynvml.load_profile("h100_sxm_8x_nvswitch")
    profile["gpus"][2]["errors"] = {"*": "GpuIsLost"}
    fake_nvml(profile)
    facts = facts_of(run_module(nvidia_gpu_facts, {"root": host_tree(profile)}))
    assert facts["state"] == "gpu_lost"
    lost = facts["gpus"][2]
    assert (lost["index"], lost["state"], lost["pci_bus_id"], lost["uuid"]) == (2, "gpu_lost", None, None)
    assert lost["message"] == "NVML reports GPU 2 as lost: GPU is lost (NVMLError_GpuIsLost)"
    # Its PCI function is still listed, as seen on PCI only, bound to nvidia.
    assert [g["pci_bus_id"] for g in facts["gpus"] if g["state"] == "pci_only"] == ["0000:3a:00.0"]
    assert "0000:3a:00.0: bound to nvidia but not listed by nvml" in facts["messages"]


def test_version_mismatch_needs_reboot(fake_nvml, fake_smi, host_tree, run_module):
    profile = fake_pynvml.load_profile("t4")
    profile["nvml"]["init_error"] = "LibRmVersionMismatch"
    profile["host"]["libraries"]["version"] = "535.216.01"  # upgraded user space; the old module is still loaded
    fake_nvml(profile)
    fake_smi.replay(scenario="version_mismatch")
    facts = facts_of(run_module(nvidia_gpu_facts, {"root": host_tree(profile)}, smi=fake_smi))
    assert facts["state"] == "driver_version_mismatch"
    assert facts["driver"]["version"] == "535.183.01"  # the loaded module's
    assert facts["driver"]["library_version"] == "535.216.01"
    assert facts["reboot_reasons"] == ["the loaded nvidia kernel module is 535.183.01 but the installed user-space driver is 535.216.01"]


def test_vfio_with_nvidia_module_not_loaded(fake_nvml, host_tree, run_module):
    profile = fake_pynvml.load_profile("vfio_bound")
    profile["nvml"]["init_error"] = "DriverNotLoaded"
    profile["host"]["kernel_module"] = {"loaded": False}
    fake_nvml(profile)
    facts = facts_of(run_module(nvidia_gpu_facts, {"root": host_tree(profile)}))
    # Passthrough GPUs do not need the nvidia driver: nothing is wrong.
    assert (facts["state"], facts["source"]) == ("ok", "pci")
    assert "every NVIDIA GPU is bound to a passthrough driver (vfio-pci)" in facts["messages"]
    assert [(f["pci_bus_id"], f["bound_driver"], f["iommu_group"]) for f in facts["pci_functions"]] == [
        ("0000:41:00.0", "vfio-pci", 30), ("0000:41:00.1", "vfio-pci", 30)]


# -- nvidia-smi fallback with this collection's recorded outputs -------------------------------------------------------
SMI_CASES = {
    # xml file: (tree profile, expected per-GPU (uuid, name, memory, bound_driver, iommu, power limit), reboot_required)
    "a100_mig_535.104.05.xml": ("a100_mig", [("GPU-5c6d7e8f-1111-4222-8333-444455556666", "NVIDIA A100-SXM4-40GB", 40960, "nvidia", 17, 400.0)], True),
    "t4_470.82.01_legacy.xml": ("t4", [("GPU-3e4f5a6b-3333-4444-8555-666677778888", "Tesla T4", 15109, "nvidia", None, 70.0)], True),
    "rtx3090_595.58.03_v13_no_prolog.xml": (
        "rtx3090", [("GPU-9f8e7d6c-2222-4333-8444-555566667777", "NVIDIA GeForce RTX 3090", 24576, "nvidia", 14, 350.0)], False),
}


@pytest.mark.parametrize("xml", sorted(SMI_CASES))
def test_nvidia_smi_fallback(xml, no_pynvml, fake_smi, host_tree, run_module):
    profile, expected, reboot = SMI_CASES[xml]
    fake_smi.replay(stdout=os.path.join(OWN_XML, xml))
    facts = facts_of(run_module(nvidia_gpu_facts, {"root": host_tree(profile)}, smi=fake_smi))
    assert (facts["state"], facts["source"]) == ("ok", "nvidia-smi")
    assert [(g["uuid"], g["name"], g["memory_total_mib"], g["bound_driver"], g["iommu_group"], g["power_limit_w"]) for g in facts["gpus"]] == expected
    assert facts["reboot_required"] is reboot
    assert facts["driver"]["nvml_version"] is None
    assert any("nvidia-ml-py" in m for m in facts["messages"])


def test_nvidia_smi_not_run_when_nvml_works(fake_nvml, fake_smi, host_tree, run_module):
    fake_nvml("t4")
    fake_smi.replay(scenario="unknown_error")
    facts = facts_of(run_module(nvidia_gpu_facts, {"root": host_tree("t4")}, smi=fake_smi))
    assert facts["source"] == "nvml" and fake_smi.calls == []


def test_lost_gpu_through_nvidia_smi(no_pynvml, fake_smi, host_tree, run_module):
    profile = fake_pynvml.load_profile("h100_sxm_8x_nvswitch")
    profile["gpus"] = profile["gpus"][:2]
    fake_smi.replay(stdout=os.path.join(OWN_XML, "two_gpus_one_lost_550.54.15.xml"),
                    stderr=os.path.join(OWN_XML, "two_gpus_one_lost_550.54.15.stderr"), rc=15)
    facts = facts_of(run_module(nvidia_gpu_facts, {"root": host_tree(profile)}, smi=fake_smi))
    assert facts["state"] == "gpu_lost" and facts["source"] == "nvidia-smi"
    assert [(g["pci_bus_id"], g["state"], g["bound_driver"]) for g in facts["gpus"]] == [
        ("0000:18:00.0", "ok", "nvidia"), ("0000:2a:00.0", "gpu_lost", "nvidia")]


def test_nvml_and_nvidia_smi_agree_on_the_8_gpu_board(fake_nvml, no_pynvml, fake_smi, host_tree, run_module, monkeypatch):
    root = host_tree("h100_sxm_8x_nvswitch")
    fake_smi.replay(stdout=os.path.join(OWN_XML, "h100_sxm_8x_nvswitch.xml"))
    args = {"root": root, "gather": ["utilization", "processes"]}
    via_smi = facts_of(run_module(nvidia_gpu_facts, dict(args, backends=["nvidia-smi"]), smi=fake_smi))
    fake_nvml("h100_sxm_8x_nvswitch")
    via_nvml = facts_of(run_module(nvidia_gpu_facts, dict(args, backends=["nvml"])))
    assert (via_smi["source"], via_nvml["source"]) == ("nvidia-smi", "nvml")
    for a, b in zip(via_smi["gpus"], via_nvml["gpus"]):
        a, b = dict(a), dict(b)
        assert (a.pop("source"), b.pop("source")) == ("nvidia-smi", "nvml")
        assert a == b
    assert via_nvml["driver"]["nvml_version"] == "12.550.54.15" and via_smi["driver"]["nvml_version"] is None
    via_smi["driver"]["nvml_version"] = via_nvml["driver"]["nvml_version"]
    assert via_smi["driver"] == via_nvml["driver"]


def test_checked_in_8_gpu_xml_matches_its_renderer():
    import smi_xml  # pylint: disable=import-outside-toplevel

    with open(os.path.join(OWN_XML, "h100_sxm_8x_nvswitch.xml"), "r", encoding="utf-8") as handle:
        assert handle.read() == smi_xml.render(fake_pynvml.load_profile("h100_sxm_8x_nvswitch"))


# -- options -----------------------------------------------------------------------------------------------------------
def test_pci_only_backend_does_not_touch_nvml(fake_nvml, fake_smi, host_tree, run_module):
    fake = fake_nvml("t4")
    result = run_module(nvidia_gpu_facts, {"root": host_tree("t4"), "backends": ["pci"]}, smi=fake_smi)
    facts = facts_of(result)
    assert (facts["state"], facts["source"], fake.calls, fake_smi.calls) == ("ok", "pci", [], [])
    assert result["_bin_lookups"] == []


def test_sysfs_root_alias(fake_nvml, host_tree, run_module):
    fake_nvml("t4")
    facts = facts_of(run_module(nvidia_gpu_facts, {"sysfs_root": host_tree("t4")}))
    assert facts["gpus"][0]["bound_driver"] == "nvidia"


def test_bad_option_fails(run_module):
    result = run_module(nvidia_gpu_facts, {"gather": ["everything"]})
    assert result["failed"] is True and "gather" in result["msg"]


def test_unreadable_host_fails_with_the_defect(fake_nvml, run_module, monkeypatch, tmp_path):
    fake_nvml("t4")

    def broken(*args, **kwargs):
        raise PermissionError(13, "Permission denied", "/sys/bus/pci/devices")

    monkeypatch.setattr(_pci, "scan", broken)
    result = run_module(nvidia_gpu_facts, {"root": str(tmp_path)})
    assert result["failed"] is True
    assert "Permission denied" in result["msg"] and str(tmp_path) in result["msg"]


# -- RETURN documents exactly what the module returns ------------------------------------------------------------------
def _doc_keys(node):
    return {key: _doc_keys(value.get("contains", {})) for key, value in node.items()}


def _value_keys(value, doc):
    if isinstance(value, list):
        merged = {}
        for item in value:
            for key, sub in _value_keys(item, doc).items():
                merged.setdefault(key, {}).update(sub)
        return merged
    if isinstance(value, dict) and doc:
        return {key: _value_keys(sub, doc.get(key, {})) for key, sub in value.items()}
    return {}


def test_return_documentation_matches_output(fake_nvml, host_tree, run_module):
    profile = copy.deepcopy(fake_pynvml.load_profile("a100_mig"))
    fake_nvml(profile)
    facts = facts_of(run_module(nvidia_gpu_facts, {"root": host_tree(profile), "gather": ALL}))
    # a peer for the topology block: one more GPU in the same profile
    doc = yaml.safe_load(nvidia_gpu_facts.RETURN)["ansible_facts"]["contains"]["nvidia_gpu"]["contains"]
    documented = _doc_keys(doc)
    returned = _value_keys(facts, documented)
    assert set(returned) == set(documented)
    gpu_doc = documented["gpus"]
    assert set(returned["gpus"]) == set(gpu_doc)
    assert set(returned["gpus"]["mig_devices"]) == set(gpu_doc["mig_devices"])
    assert set(returned["gpus"]["processes"]) == set(gpu_doc["processes"])
    assert set(returned["driver"]) == set(documented["driver"])
    assert set(returned["pci_functions"]) == set(documented["pci_functions"])


def test_documented_topology_peer_keys(fake_nvml, host_tree, run_module):
    fake_nvml("h100_sxm_8x_nvswitch")
    facts = facts_of(run_module(nvidia_gpu_facts, {"root": host_tree("h100_sxm_8x_nvswitch"), "gather": ["topology"]}))
    doc = yaml.safe_load(nvidia_gpu_facts.RETURN)["ansible_facts"]["contains"]["nvidia_gpu"]["contains"]["gpus"]["contains"]["topology"]
    assert set(facts["gpus"][0]["topology"]) == set(doc["contains"])
    assert set(facts["gpus"][0]["topology"]["peers"][0]) == set(doc["contains"]["peers"]["contains"])


def test_argument_spec_matches_documentation():
    doc = yaml.safe_load(nvidia_gpu_facts.DOCUMENTATION)["options"]
    assert set(doc) == {"backends", "gather", "root", "nvml_timeout"}
    assert doc["nvml_timeout"]["default"] == _nvml.DEFAULT_TIMEOUT
    assert doc["backends"]["default"] == ["nvml", "nvidia-smi", "pci"]
    assert doc["gather"]["choices"] == ["processes", "utilization", "topology", "health"] == list(_facts.GATHER)
