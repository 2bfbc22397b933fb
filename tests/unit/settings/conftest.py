# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Fixtures for the nvidia_smi_settings tests: the shared fake NVML with the clock getters the settings need.

``ClockedFakeNVML`` extends ``tests/unit/fakes/fake_pynvml.FakeNVML`` (owned by the facts work) without editing it:
it adds the application clock getters and the supported clock table, read from extra profile keys that
:func:`settings_profile` adds to the shared profiles, and :func:`reset` does what ``nvidia-smi --gpu-reset`` does
to a GPU (pending ECC/MIG become current, MIG instances and volatile clocks go away).
"""

from __future__ import annotations

import sys
import typing as t

import pytest

import fake_pynvml

from ansible.module_utils import basic

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _settings_apply

# Synthetic, plausible clock tables (not captures): memory clock -> graphics clocks.
CLOCKS: dict[str, dict[str, t.Any]] = {
    "t4": {
        "supported_clocks": {5001: list(range(1590, 299, -15)), 405: [645, 540, 420, 300]},
        "default_applications_clocks": {"memory_mhz": 5001, "graphics_mhz": 585},
    },
    "a100_mig": {
        "supported_clocks": {1215: list(range(1410, 209, -15))},
        "default_applications_clocks": {"memory_mhz": 1215, "graphics_mhz": 1095},
    },
    "h100_sxm_8x_nvswitch": {
        "supported_clocks": {2619: list(range(1980, 344, -15))},
        "default_applications_clocks": {"memory_mhz": 2619, "graphics_mhz": 1755},
    },
    # GeForce boards: application clocks are not supported (no supported_clocks key -> NotSupported).
    "rtx3090": {},
}

H100_MIG_PROFILES = {
    0: {"id": 0, "name": "1g.10gb", "slices": 1, "memory_mib": 9856},
    1: {"id": 1, "name": "2g.20gb", "slices": 2, "memory_mib": 20096},
    2: {"id": 2, "name": "3g.40gb", "slices": 3, "memory_mib": 40320},
    3: {"id": 3, "name": "4g.40gb", "slices": 4, "memory_mib": 40320},
    4: {"id": 4, "name": "7g.80gb", "slices": 7, "memory_mib": 80896},
}


def settings_profile(name: str) -> dict[str, t.Any]:
    """A shared profile plus the clock keys above (and MIG profiles for the H100s)."""
    profile = fake_pynvml.load_profile(name)
    for gpu in profile.get("gpus") or []:
        gpu.update({k: (dict(v) if isinstance(v, dict) else v) for k, v in CLOCKS.get(name, {}).items()})
        if name == "h100_sxm_8x_nvswitch":
            gpu["mig_profiles"] = H100_MIG_PROFILES
    return profile


class ClockedFakeNVML(fake_pynvml.FakeNVML):
    """The shared fake plus the clock getters that nvidia_smi_settings reads."""

    def _app_clocks(self, handle: t.Any, key: str, clock_type: int) -> int:
        if not handle.gpu.get("supported_clocks"):
            raise fake_pynvml.error("NotSupported")
        clocks = handle.gpu.get(key) or handle.gpu["default_applications_clocks"]
        return clocks["memory_mhz"] if clock_type == fake_pynvml.real.NVML_CLOCK_MEM else clocks["graphics_mhz"]

    def nvmlDeviceGetApplicationsClock(self, handle: t.Any, clock_type: int) -> int:
        self._check("nvmlDeviceGetApplicationsClock", handle)
        return self._app_clocks(handle, "applications_clocks", clock_type)

    def nvmlDeviceGetDefaultApplicationsClock(self, handle: t.Any, clock_type: int) -> int:
        self._check("nvmlDeviceGetDefaultApplicationsClock", handle)
        return self._app_clocks(handle, "default_applications_clocks", clock_type)

    def nvmlDeviceGetSupportedMemoryClocks(self, handle: t.Any) -> list[int]:
        self._check("nvmlDeviceGetSupportedMemoryClocks", handle)
        table = handle.gpu.get("supported_clocks")
        if not table:
            raise fake_pynvml.error("NotSupported")
        return sorted(table, reverse=True)

    def nvmlDeviceGetSupportedGraphicsClocks(self, handle: t.Any, memory_mhz: int) -> list[int]:
        self._check("nvmlDeviceGetSupportedGraphicsClocks", handle)
        table = handle.gpu.get("supported_clocks") or {}
        if memory_mhz not in table:
            raise fake_pynvml.error("InvalidArgument")
        return list(table[memory_mhz])

    def nvmlDeviceSetApplicationsClocks(self, handle: t.Any, mem_mhz: int, graphics_mhz: int) -> None:
        super().nvmlDeviceSetApplicationsClocks(handle, mem_mhz, graphics_mhz)
        if graphics_mhz not in (handle.gpu.get("supported_clocks") or {}).get(mem_mhz, []):
            raise fake_pynvml.error("InvalidArgument")

    def reset(self, bus_id: str) -> None:
        """What a GPU reset does: pending ECC/MIG take effect; instances and volatile clocks go."""
        for gpu in self.visible_gpus:
            if gpu["pci_bus_id"] != bus_id:
                continue
            for key in ("ecc", "mig"):
                if gpu.get(key):
                    gpu[key] = [gpu[key][1], gpu[key][1]]
            gpu["gpu_instances"] = []
            gpu["applications_clocks"] = None
            gpu["locked_clocks"] = None


@pytest.fixture
def settings_nvml(monkeypatch: pytest.MonkeyPatch) -> t.Callable[..., ClockedFakeNVML]:
    """``settings_nvml('a100_mig')`` (or a profile dict) installs the extended fake as ``pynvml``."""

    def install(profile: str | dict[str, t.Any]) -> ClockedFakeNVML:
        data = settings_profile(profile) if isinstance(profile, str) else profile
        fake = ClockedFakeNVML(data)
        monkeypatch.setitem(sys.modules, "pynvml", fake.module)
        return fake

    return install


@pytest.fixture
def no_pci_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """The PCI scan sees no NVIDIA GPU (whatever the machine running the tests has)."""
    monkeypatch.setattr(
        _settings_apply._pci,  # pylint: disable=protected-access
        "scan",
        lambda root="/", kernel_release=None: {"gpus": [], "kernel_module": {"loaded": False, "version": None, "type": None}},
    )


@pytest.fixture
def pci_gpu_no_module(monkeypatch: pytest.MonkeyPatch) -> None:
    """The PCI scan sees one NVIDIA GPU and no loaded nvidia kernel module."""
    monkeypatch.setattr(
        _settings_apply._pci,  # pylint: disable=protected-access
        "scan",
        lambda root="/", kernel_release=None: {
            "gpus": [{"pci_bus_id": "0000:01:00.0", "bound_driver": None}],
            "kernel_module": {"loaded": False, "version": None, "type": None},
        },
    )


@pytest.fixture
def smi_reset(monkeypatch: pytest.MonkeyPatch) -> t.Callable[[ClockedFakeNVML], list[list[str]]]:
    """Route the module's run_command to a stand-in that performs ``nvidia-smi --gpu-reset -i <bus id>`` on the fake."""

    def install(fake: ClockedFakeNVML) -> list[list[str]]:
        calls: list[list[str]] = []

        def run_command(self: t.Any, args: list[str], **kwargs: t.Any) -> tuple[int, str, str]:
            calls.append(list(args))
            assert kwargs.get("environ_update", {}).get("LC_ALL") == "C"
            if "--gpu-reset" in args:
                bus = args[args.index("-i") + 1]
                fake.reset(bus)
                return 0, "GPU %s was successfully reset.\n" % bus, ""
            return 1, "", "unexpected command %s\n" % args

        monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
        return calls

    return install
