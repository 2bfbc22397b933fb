"""nvidia_gpu_facts against Debian's real NVML library and nvidia-smi, with no kernel driver."""

from __future__ import annotations

import json

import pytest

from gpuhost_testinfra import test_check_after_converge_changes_nothing, test_check_mode_predicted_converge  # noqa: F401  pylint: disable=unused-import


@pytest.fixture(scope="module")
def recorded(host):
    return json.loads(host.file("/root/nvidia_gpu_facts.json").content_string)


@pytest.mark.parametrize("package", ["libnvidia-ml1", "nvidia-smi", "python3-pynvml"])
def test_real_nvidia_userland_is_installed(host, package):
    assert host.package(package).is_installed


# Without a kernel driver, NVML fails in one of two ways, depending on the kernel underneath
# the container: DriverNotLoaded (nvidia-smi exits 9) on a plain Linux kernel, or Unknown Error
# (nvidia-smi exits 255) where the sandbox kernel exposes its own GPU proxy module (as on
# this project's CI machines, /sys/module/nvproxy). The facts module must call both
# driver_not_loaded, because sysfs shows no nvidia kernel module.
NO_DRIVER_NVML = {("NVMLError_DriverNotLoaded", "9"), ("NVMLError_Unknown", "999")}


def test_real_nvidia_smi_fails_without_a_driver(host):
    cmd = host.run("nvidia-smi")
    if cmd.rc == 255:
        assert "Failed to initialize NVML: Unknown Error" in cmd.stdout
    else:
        assert cmd.rc == 9, cmd


def test_real_nvml_fails_without_a_driver(host):
    cmd = host.run("python3 -c 'import pynvml\ntry:\n pynvml.nvmlInit()\nexcept pynvml.NVMLError as e:\n print(type(e).__name__, e.value)'")
    assert tuple(cmd.stdout.split()) in NO_DRIVER_NVML, cmd.stdout


def test_no_nvidia_kernel_module_is_loaded(host):
    assert not host.file("/sys/module/nvidia").exists
    assert not host.file("/proc/driver/nvidia/version").exists


def test_gpu_host_without_driver_reports_driver_not_loaded(recorded):
    facts = recorded["gpu_host"]
    assert facts["present"] is True
    assert facts["state"] == "driver_not_loaded"
    assert facts["source"] == "pci"
    assert facts["driver"]["version"] is None
    [gpu] = facts["gpus"]
    assert gpu["pci_bus_id"] == "0000:65:00.0"
    assert gpu["pci_device_id"] == "10de:2330"
    assert gpu["architecture"] == "Hopper"
    assert gpu["bound_driver"] is None
    assert gpu["iommu_group"] == 42
    assert gpu["numa_node"] == 1
    assert facts["reboot_required"] is False


def test_messages_name_both_richer_backends(recorded):
    text = " ".join(recorded["gpu_host"]["messages"])
    assert "NVML" in text and "nvidia-smi" in text
    assert "not loaded" in text.lower()


def test_container_without_nvidia_pci_function_reports_no_gpu(recorded):
    facts = recorded["plain"]
    assert facts["present"] is False
    assert facts["state"] == "no_gpu"
    assert facts["gpus"] == []
    assert facts["pci_functions"] == []


def test_facts_module_changed_nothing(recorded):
    assert recorded["changed"] == [False, False]
