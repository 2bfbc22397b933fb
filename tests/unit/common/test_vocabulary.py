"""One vocabulary (#19 item 5): each name the planners share is defined once, and the names nothing uses are gone."""

from __future__ import annotations

from pathlib import Path

import pytest

from ansible_collections.gpuhost.nvidia.plugins.filter import gpu as gpu_filter
from ansible_collections.gpuhost.nvidia.plugins.module_utils import _catalog, _compose, _doctor, _driver, _pci, _runtime, _toolkit, _vfio

PLUGINS = Path(__file__).resolve().parents[3] / "plugins"


def test_passthrough_drivers_are_defined_once_with_their_two_meanings():
    assert _pci.PASSTHROUGH_DRIVERS == ("vfio-pci", "pci-stub")
    # Containers cannot use a GPU held for a VM, nor one nouveau holds: a second meaning, built on the first.
    assert _compose.NO_CONTAINER_DRIVERS == _pci.PASSTHROUGH_DRIVERS + ("nouveau",)
    assert _vfio.VFIO_DRIVER in _pci.PASSTHROUGH_DRIVERS
    defined = [p.name for p in PLUGINS.rglob("*.py") if "PASSTHROUGH_DRIVERS = " in p.read_text(encoding="utf-8")]
    assert defined == ["_pci.py"]
    spelled = sorted(p.name for p in PLUGINS.rglob("*.py") if '"pci-stub"' in p.read_text(encoding="utf-8"))
    assert spelled == ["_pci.py"]


def test_doctor_reads_containerd_runtime_tables_from_the_runtime_planner():
    assert _doctor.CONTAINERD_RUNTIME_TABLES == (
        ("plugins", "cri", "containerd", "runtimes"),
        ("plugins", "io.containerd.grpc.v1.cri", "containerd", "runtimes"),
        ("plugins", "io.containerd.cri.v1.runtime", "containerd", "runtimes"),
    )
    assert {table[1] for table in _doctor.CONTAINERD_RUNTIME_TABLES} == set(_runtime.CRI_PLUGIN.values())


@pytest.mark.parametrize("gpu", [
    {"architecture": "hopper"}, {"architecture": "Hopper"}, {"compute_capability": "8.9"}, {"pci_device_id": "10de:2330"},
    {"architecture": None, "compute_capability": None, "pci_device_id": "10de:20b0"}, {}, {"pci_device_id": "10de:ffff"},
])
def test_gpu_arch_filter_is_the_planners_gpu_architecture(gpu):
    """The filter, the driver's plan and the exporter's profiling decision read one function: the catalog's."""
    assert gpu_filter.gpu_arch(gpu) == _catalog.gpu_architecture(gpu)


@pytest.mark.parametrize("module, name", [
    (_driver, "TRISTATE"), (_vfio, "EARLY_MODULES"), (_vfio, "PASSTHROUGH_DRIVERS"), (_runtime, "HAS_TOML"), (_toolkit, "FULL_PACKAGES"),
    (_toolkit, "CDI_PACKAGES"), (_toolkit, "CDI_REFRESH_MIN_VERSION"),
])
def test_dead_names_are_gone(module, name):
    """Their live copies are the role's variables (roles/nvidia_container_toolkit/vars/main.yml, tasks/cdi.yml)."""
    assert not hasattr(module, name)
