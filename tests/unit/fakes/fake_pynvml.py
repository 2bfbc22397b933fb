# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""A stand-in for nvidia-ml-py's ``pynvml`` module that serves GPUs described in a YAML profile.

The NVMLError class hierarchy and every ``NVML_*`` constant are the real ones from the installed nvidia-ml-py
(importing ``pynvml`` needs no GPU; only ``nvmlInit`` loads the library), so
``fake.NVMLError_DriverNotLoaded is pynvml.NVMLError_DriverNotLoaded`` and errors carry the same ``.value``.

Getters cover what the facts backend reads. Setters (persistence, compute mode, power limit, clocks, ECC, MIG, GPU
and compute instances) mutate the profile state the way the driver does: ECC and MIG changes become *pending*.
Every call is appended to ``fake.calls`` as ``(function name, gpu index or None, args...)``. ``init_calls`` counts
every ``nvmlInit`` (also one that fails), ``init_count`` the ones that worked, ``shutdown_count`` the shutdowns.

Profile keys are documented in ``profiles/README.md``.

Faults: a GPU's ``errors`` maps an NVML function name (or ``*``) to an error suffix raised on every call of it on
that GPU's handles; ``<name>@mig`` raises on its MIG device handles only; ``nvml.errors`` does the same for calls
that take no device handle (``nvmlSystemGetProcessName``). The suffix ``Hang`` blocks the call until
:meth:`FakeNVML.release` (tests release it on teardown), and ``hung`` lists the calls that blocked. With MIG on,
a GPU's ``mig_parent_lists_processes: false`` makes the GPU handle list no process, as NVML does for an unprivileged
caller; a MIG device handle lists the processes of its own GPU and compute instance.
"""

from __future__ import annotations

import copy
import os
import threading
import types
import typing as t
import uuid as uuid_mod

import pynvml as real
import yaml

PROFILE_DIR = os.path.join(os.path.dirname(__file__), "profiles")
MIB = 1024 * 1024
NA_32 = 0xFFFFFFFF

SETTERS = (
    "nvmlDeviceSetPersistenceMode",
    "nvmlDeviceSetComputeMode",
    "nvmlDeviceSetPowerManagementLimit",
    "nvmlDeviceSetApplicationsClocks",
    "nvmlDeviceResetApplicationsClocks",
    "nvmlDeviceSetGpuLockedClocks",
    "nvmlDeviceResetGpuLockedClocks",
    "nvmlDeviceSetEccMode",
    "nvmlDeviceSetMigMode",
    "nvmlDeviceCreateGpuInstance",
    "nvmlGpuInstanceDestroy",
    "nvmlGpuInstanceCreateComputeInstance",
    "nvmlComputeInstanceDestroy",
)

# NVML compute instance profile index -> slices (NVML_COMPUTE_INSTANCE_PROFILE_*).
CI_PROFILE_SLICES = {0: 1, 1: 2, 2: 3, 3: 4, 4: 7, 5: 8, 6: 6}


def load_profile(name: str) -> dict[str, t.Any]:
    with open(os.path.join(PROFILE_DIR, "%s.yaml" % name), "r", encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def profile_names() -> list[str]:
    return sorted(f[:-5] for f in os.listdir(PROFILE_DIR) if f.endswith(".yaml"))


def error(name: str) -> BaseException:
    """A real nvidia-ml-py error by class suffix: ``error('NotSupported')`` -> NVMLError_NotSupported()."""
    cls = getattr(real, "NVMLError_%s" % name)
    return cls()


class _Obj:
    """Attribute bag, like the friendly objects nvidia-ml-py returns."""

    def __init__(self, **fields: t.Any):
        self.__dict__.update(fields)

    def __repr__(self) -> str:
        return "_Obj(%r)" % self.__dict__


class Device:
    def __init__(self, fake: "FakeNVML", gpu: dict[str, t.Any], index: int):
        self.fake = fake
        self.gpu = gpu
        self.index = index


class GpuInstance:
    def __init__(self, device: Device, gi: dict[str, t.Any]):
        self.device = device
        self.gi = gi


class ComputeInstance:
    def __init__(self, instance: GpuInstance, ci: dict[str, t.Any]):
        self.instance = instance
        self.ci = ci


class MigDevice:
    def __init__(self, device: Device, gi: dict[str, t.Any], ci: dict[str, t.Any]):
        self.device = device
        self.gi = gi
        self.ci = ci


def _bus_id_nvml(bus_id: str) -> str:
    """``0000:18:00.0`` -> ``00000000:18:00.0`` (NVML's 8-digit domain, upper case)."""
    domain, rest = bus_id.split(":", 1)
    return ("%08x:%s" % (int(domain, 16), rest)).upper()


class FakeNVML:
    """The state behind the fake module; ``module`` is what goes into ``sys.modules['pynvml']``."""

    def __init__(self, profile: dict[str, t.Any]):
        self.profile = copy.deepcopy(profile)
        self.nvml = self.profile.setdefault("nvml", {}) or {}
        self.calls: list[tuple[t.Any, ...]] = []
        self.init_calls = 0
        self.init_count = 0
        self.shutdown_count = 0
        self.initialised = 0
        self.hung: list[tuple[t.Any, ...]] = []
        self._released = threading.Event()
        for gpu in self.profile.get("gpus", []) or []:
            gpu.setdefault("errors", {})
            gpu.setdefault("gpu_instances", [])
        self.module = self._build_module()

    # -- helpers ---------------------------------------------------------------------------------------------
    @property
    def visible_gpus(self) -> list[dict[str, t.Any]]:
        return [g for g in self.profile.get("gpus", []) or [] if g.get("nvml_visible", g.get("driver") == "nvidia")]

    def gpu(self, index: int) -> dict[str, t.Any]:
        """The mutable state of the GPU at NVML index ``index``."""
        return self.visible_gpus[index]

    @property
    def setter_calls(self) -> list[tuple[t.Any, ...]]:
        return [c for c in self.calls if c[0] in SETTERS]

    def _record(self, name: str, handle: t.Any, *args: t.Any) -> None:
        index = None
        if isinstance(handle, Device):
            index = handle.index
        elif isinstance(handle, (GpuInstance, MigDevice)):
            index = handle.device.index
        elif isinstance(handle, ComputeInstance):
            index = handle.instance.device.index
        self.calls.append((name, index) + args)

    def release(self) -> None:
        """Let every call that a ``Hang`` fault blocked return (as the call would have)."""
        self._released.set()

    def _fail(self, failure: str | None, name: str, handle: t.Any) -> None:
        if not failure:
            return
        if failure == "Hang":
            self.hung.append((name, handle))
            self._released.wait(120)
            return
        raise error(failure)

    def _check(self, name: str, handle: t.Any = None, *args: t.Any) -> None:
        """Record the call, then raise what the driver would: Uninitialized, or an error injected by the profile."""
        self._record(name, handle, *args)
        if not self.initialised:
            raise error("Uninitialized")
        device = handle
        if isinstance(handle, (GpuInstance, MigDevice)):
            device = handle.device
        elif isinstance(handle, ComputeInstance):
            device = handle.instance.device
        if isinstance(device, Device):
            errors = device.gpu["errors"]
            if isinstance(handle, MigDevice) and errors.get(name + "@mig"):
                self._fail(errors[name + "@mig"], name, handle)
            self._fail(errors.get(name) or errors.get("*"), name, handle)
        elif handle is None:
            self._fail((self.nvml.get("errors") or {}).get(name), name, handle)

    def _value(self, device: Device, key: str) -> t.Any:
        value = device.gpu.get(key)
        if value is None:
            raise error("NotSupported")
        return value

    def _mig_devices(self, device: Device) -> list[MigDevice]:
        devices = []
        for gi in sorted(device.gpu["gpu_instances"], key=lambda g: g["id"]):
            for ci in sorted(gi.get("compute_instances", []), key=lambda c: c["id"]):
                devices.append(MigDevice(device, gi, ci))
        return devices

    def _mig_enabled(self, device: Device) -> bool:
        mig = device.gpu.get("mig")
        return bool(mig and mig[0])

    # -- the module ----------------------------------------------------------------------------------------
    def _build_module(self) -> types.ModuleType:
        module = types.ModuleType("pynvml")
        module.__file__ = __file__
        for name in dir(real):
            if name.startswith("NVML_") or name.startswith("NVMLError"):
                setattr(module, name, getattr(real, name))
        module.NVMLError = real.NVMLError
        module.fake = self
        for name in dir(self):
            if name.startswith("nvml"):
                setattr(module, name, getattr(self, name))
        return module

    # init / system
    def nvmlInit(self) -> None:
        self.calls.append(("nvmlInit", None))
        self.init_calls += 1
        if self.nvml.get("init_error") == "Hang":
            self.hung.append(("nvmlInit", None))
            self._released.wait(120)
        elif self.nvml.get("init_error"):
            raise error(self.nvml["init_error"])
        self.init_count += 1
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self.calls.append(("nvmlShutdown", None))
        if not self.initialised:
            raise error("Uninitialized")
        self.shutdown_count += 1
        self.initialised -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._check("nvmlSystemGetDriverVersion")
        return self.nvml["driver_version"]

    def nvmlSystemGetNVMLVersion(self) -> str:
        self._check("nvmlSystemGetNVMLVersion")
        return self.nvml["nvml_version"]

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._check("nvmlSystemGetCudaDriverVersion")
        return self.nvml["cuda_driver_version"]

    def nvmlSystemGetProcessName(self, pid: int) -> str:
        self._check("nvmlSystemGetProcessName")
        for gpu in self.visible_gpus:
            for proc in gpu.get("processes", []) or []:
                if proc["pid"] == pid:
                    if proc.get("name") is None:
                        raise error("NoPermission")
                    return proc["name"]
        raise error("NotFound")

    def nvmlDeviceGetCount(self) -> int:
        self._check("nvmlDeviceGetCount")
        self._fail(self.nvml.get("count_error"), "nvmlDeviceGetCount", None)
        return len(self.visible_gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Device:
        self._check("nvmlDeviceGetHandleByIndex", None, index)
        gpus = self.visible_gpus
        if not 0 <= index < len(gpus):
            raise error("InvalidArgument")
        device = Device(self, gpus[index], index)
        self._fail(gpus[index]["errors"].get("nvmlDeviceGetHandleByIndex"), "nvmlDeviceGetHandleByIndex", index)
        return device

    # device getters
    def nvmlDeviceGetPciInfo(self, handle: Device) -> _Obj:
        self._check("nvmlDeviceGetPciInfo", handle)
        gpu = handle.gpu
        bus = _bus_id_nvml(gpu["pci_bus_id"])
        return _Obj(
            busIdLegacy=bus[4:].encode(),
            busId=bus.encode(),
            domain=int(gpu["pci_bus_id"].split(":")[0], 16),
            bus=int(gpu["pci_bus_id"].split(":")[1], 16),
            device=int(gpu["pci_bus_id"].split(":")[2].split(".")[0], 16),
            pciDeviceId=(gpu["device_id"] << 16) | 0x10DE,
            pciSubSystemId=0,
        )

    def nvmlDeviceGetUUID(self, handle: t.Any) -> str:
        if isinstance(handle, MigDevice):
            self._check("nvmlDeviceGetUUID", handle)
            return handle.ci["uuid"]
        self._check("nvmlDeviceGetUUID", handle)
        return handle.gpu["uuid"]

    def nvmlDeviceGetName(self, handle: t.Any) -> str:
        self._check("nvmlDeviceGetName", handle)
        if isinstance(handle, MigDevice):
            return "%s MIG %s" % (handle.device.gpu["name"], self._ci_profile_name(handle.gi, handle.ci))
        return handle.gpu["name"]

    def nvmlDeviceGetCudaComputeCapability(self, handle: Device) -> tuple[int, int]:
        self._check("nvmlDeviceGetCudaComputeCapability", handle)
        major, minor = self._value(handle, "compute_capability")
        return (major, minor)

    def nvmlDeviceGetMemoryInfo(self, handle: t.Any, version: t.Any = None) -> _Obj:
        self._check("nvmlDeviceGetMemoryInfo", handle)
        if isinstance(handle, MigDevice):
            total = handle.gi["memory_mib"] * MIB
        else:
            total = self._value(handle, "memory_total_mib") * MIB
        return _Obj(total=total, free=total, used=0)

    def nvmlDeviceGetPersistenceMode(self, handle: Device) -> int:
        self._check("nvmlDeviceGetPersistenceMode", handle)
        return self._value(handle, "persistence_mode")

    def nvmlDeviceGetComputeMode(self, handle: Device) -> int:
        self._check("nvmlDeviceGetComputeMode", handle)
        return self._value(handle, "compute_mode")

    def nvmlDeviceGetPowerManagementLimit(self, handle: Device) -> int:
        self._check("nvmlDeviceGetPowerManagementLimit", handle)
        return self._value(handle, "power_limit_mw")

    def nvmlDeviceGetPowerManagementLimitConstraints(self, handle: Device) -> list[int]:
        self._check("nvmlDeviceGetPowerManagementLimitConstraints", handle)
        return list(self._value(handle, "power_limit_constraints_mw"))

    def nvmlDeviceGetEccMode(self, handle: Device) -> list[int]:
        self._check("nvmlDeviceGetEccMode", handle)
        return list(self._value(handle, "ecc"))

    def nvmlDeviceGetMigMode(self, handle: Device) -> list[int]:
        self._check("nvmlDeviceGetMigMode", handle)
        return list(self._value(handle, "mig"))

    # health (gather: [health]); profile key ``health``, absent or null values raise NotSupported
    def _health(self, device: Device, *path: str) -> t.Any:
        value: t.Any = device.gpu.get("health")
        for key in path:
            value = None if value is None else value.get(key)
        if value is None:
            raise error("NotSupported")
        return value

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: Device) -> int:
        self._check("nvmlDeviceGetCurrentClocksThrottleReasons", handle)
        return int(self._health(handle, "throttle_reasons_mask"))

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: Device) -> int:
        self._check("nvmlDeviceGetCurrPcieLinkGeneration", handle)
        return self._health(handle, "pcie", "gen_current")

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: Device) -> int:
        self._check("nvmlDeviceGetMaxPcieLinkGeneration", handle)
        return self._health(handle, "pcie", "gen_max")

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: Device) -> int:
        self._check("nvmlDeviceGetCurrPcieLinkWidth", handle)
        return self._health(handle, "pcie", "width_current")

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: Device) -> int:
        self._check("nvmlDeviceGetMaxPcieLinkWidth", handle)
        return self._health(handle, "pcie", "width_max")

    def nvmlDeviceGetTotalEccErrors(self, handle: Device, error_type: int, counter_type: int) -> int:
        self._check("nvmlDeviceGetTotalEccErrors", handle, error_type, counter_type)
        key = "%s_%s" % (("corrected", "uncorrected")[error_type], ("volatile", "aggregate")[counter_type])
        return self._health(handle, "ecc_errors", key)

    def nvmlDeviceGetRetiredPages(self, handle: Device, cause: int) -> list[int]:
        self._check("nvmlDeviceGetRetiredPages", handle, cause)
        return list(self._health(handle, "retired_pages", ("single_bit", "double_bit")[cause]))

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: Device) -> int:
        self._check("nvmlDeviceGetRetiredPagesPendingStatus", handle)
        return int(self._health(handle, "retired_pages", "pending"))

    def nvmlDeviceGetRemappedRows(self, handle: Device) -> tuple[int, int, int, int]:
        self._check("nvmlDeviceGetRemappedRows", handle)
        rows = self._health(handle, "remapped_rows")
        return (rows[0], rows[1], rows[2], rows[3])

    def nvmlDeviceGetUtilizationRates(self, handle: Device) -> _Obj:
        self._check("nvmlDeviceGetUtilizationRates", handle)
        if self._mig_enabled(handle):
            raise error("NotSupported")
        rates = self._value(handle, "utilization")
        return _Obj(gpu=rates["gpu"], memory=rates["memory"])

    def nvmlDeviceGetTemperature(self, handle: Device, sensor: int) -> int:
        self._check("nvmlDeviceGetTemperature", handle)
        return self._value(handle, "temperature_c")

    def nvmlDeviceGetPowerUsage(self, handle: Device) -> int:
        self._check("nvmlDeviceGetPowerUsage", handle)
        return self._value(handle, "power_usage_mw")

    def _processes(self, handle: Device | MigDevice, kinds: tuple[str, ...]) -> list[_Obj]:
        procs = []
        gpu = handle.device.gpu if isinstance(handle, MigDevice) else handle.gpu
        mig_on = self._mig_enabled(handle.device if isinstance(handle, MigDevice) else handle)
        if isinstance(handle, Device) and mig_on and gpu.get("mig_parent_lists_processes") is False:
            return procs
        for proc in gpu.get("processes", []) or []:
            if proc.get("type", "C") not in kinds:
                continue
            if isinstance(handle, MigDevice) and (proc.get("gi"), proc.get("ci")) != (handle.gi["id"], handle.ci["id"]):
                continue
            used = proc.get("used_mib")
            procs.append(
                _Obj(
                    pid=proc["pid"],
                    usedGpuMemory=None if used is None else used * MIB,
                    gpuInstanceId=proc.get("gi", NA_32),
                    computeInstanceId=proc.get("ci", NA_32),
                )
            )
        return procs

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Device) -> list[_Obj]:
        self._check("nvmlDeviceGetComputeRunningProcesses", handle)
        return self._processes(handle, ("C", "C+G"))

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: Device) -> list[_Obj]:
        self._check("nvmlDeviceGetGraphicsRunningProcesses", handle)
        return self._processes(handle, ("G", "C+G"))

    def nvmlDeviceGetMinorNumber(self, handle: Device) -> int:
        self._check("nvmlDeviceGetMinorNumber", handle)
        return self._value(handle, "minor_number")

    # topology
    def nvmlDeviceGetNvLinkState(self, handle: Device, link: int) -> int:
        self._check("nvmlDeviceGetNvLinkState", handle)
        nvlink = handle.gpu.get("nvlink")
        if not nvlink:
            raise error("NotSupported")
        if link >= nvlink["links"]:
            raise error("InvalidArgument")
        return 1

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: Device, link: int) -> _Obj:
        self._check("nvmlDeviceGetNvLinkRemotePciInfo", handle)
        nvlink = handle.gpu.get("nvlink")
        if not nvlink or link >= nvlink["links"]:
            raise error("InvalidArgument")
        remotes = nvlink["remotes"]
        return _Obj(busId=_bus_id_nvml(remotes[link % len(remotes)]).encode())

    def nvmlDeviceGetP2PStatus(self, handle1: Device, handle2: Device, caps: int) -> int:
        self._check("nvmlDeviceGetP2PStatus", handle1)
        if caps == real.NVML_P2P_CAPS_INDEX_NVLINK:
            both = handle1.gpu.get("nvlink") and handle2.gpu.get("nvlink")
            return real.NVML_P2P_STATUS_OK if both else real.NVML_P2P_STATUS_NOT_SUPPORTED
        return real.NVML_P2P_STATUS_OK

    def nvmlDeviceGetTopologyCommonAncestor(self, handle1: Device, handle2: Device) -> int:
        self._check("nvmlDeviceGetTopologyCommonAncestor", handle1)
        if handle1.gpu.get("numa_node") == handle2.gpu.get("numa_node"):
            return real.NVML_TOPOLOGY_NODE
        return real.NVML_TOPOLOGY_SYSTEM

    # MIG devices
    def nvmlDeviceGetMaxMigDeviceCount(self, handle: Device) -> int:
        self._check("nvmlDeviceGetMaxMigDeviceCount", handle)
        if not self._mig_enabled(handle):
            raise error("NotSupported")
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Device, index: int) -> MigDevice:
        self._check("nvmlDeviceGetMigDeviceHandleByIndex", handle)
        devices = self._mig_devices(handle)
        if not self._mig_enabled(handle) or index >= len(devices):
            raise error("NotFound")
        return devices[index]

    def nvmlDeviceIsMigDeviceHandle(self, handle: t.Any) -> bool:
        self._check("nvmlDeviceIsMigDeviceHandle")
        return isinstance(handle, MigDevice)

    def nvmlDeviceGetGpuInstanceId(self, handle: MigDevice) -> int:
        self._check("nvmlDeviceGetGpuInstanceId", handle)
        return handle.gi["id"]

    def nvmlDeviceGetComputeInstanceId(self, handle: MigDevice) -> int:
        self._check("nvmlDeviceGetComputeInstanceId", handle)
        return handle.ci["id"]

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, handle: MigDevice) -> Device:
        self._check("nvmlDeviceGetDeviceHandleFromMigDeviceHandle", handle)
        return handle.device

    def _ci_profile_name(self, gi: dict[str, t.Any], ci: dict[str, t.Any]) -> str:
        gi_profile = gi["profile"]
        ci_slices = ci.get("slices", gi["slices"])
        if ci_slices == gi["slices"]:
            return gi_profile
        return "%dc.%s" % (ci_slices, gi_profile)

    # setters
    def _set(self, name: str, handle: Device, *args: t.Any) -> None:
        self._check(name, handle, *args)

    def nvmlDeviceSetPersistenceMode(self, handle: Device, mode: int) -> None:
        self._set("nvmlDeviceSetPersistenceMode", handle, mode)
        self._value(handle, "persistence_mode")
        handle.gpu["persistence_mode"] = int(mode)

    def nvmlDeviceSetComputeMode(self, handle: Device, mode: int) -> None:
        self._set("nvmlDeviceSetComputeMode", handle, mode)
        if mode not in (0, 2, 3):
            raise error("NotSupported" if mode == 1 else "InvalidArgument")
        handle.gpu["compute_mode"] = int(mode)

    def nvmlDeviceSetPowerManagementLimit(self, handle: Device, limit: int) -> None:
        self._set("nvmlDeviceSetPowerManagementLimit", handle, limit)
        low, high = self._value(handle, "power_limit_constraints_mw")
        if not low <= limit <= high:
            raise error("InvalidArgument")
        handle.gpu["power_limit_mw"] = int(limit)

    def nvmlDeviceSetApplicationsClocks(self, handle: Device, mem_mhz: int, graphics_mhz: int) -> None:
        self._set("nvmlDeviceSetApplicationsClocks", handle, mem_mhz, graphics_mhz)
        handle.gpu["applications_clocks"] = {"memory_mhz": mem_mhz, "graphics_mhz": graphics_mhz}

    def nvmlDeviceResetApplicationsClocks(self, handle: Device) -> None:
        self._set("nvmlDeviceResetApplicationsClocks", handle)
        handle.gpu["applications_clocks"] = None

    def nvmlDeviceSetGpuLockedClocks(self, handle: Device, min_mhz: int, max_mhz: int) -> None:
        self._set("nvmlDeviceSetGpuLockedClocks", handle, min_mhz, max_mhz)
        if min_mhz > max_mhz:
            raise error("InvalidArgument")
        handle.gpu["locked_clocks"] = {"min_mhz": min_mhz, "max_mhz": max_mhz}

    def nvmlDeviceResetGpuLockedClocks(self, handle: Device) -> None:
        self._set("nvmlDeviceResetGpuLockedClocks", handle)
        handle.gpu["locked_clocks"] = None

    def nvmlDeviceSetEccMode(self, handle: Device, mode: int) -> None:
        self._set("nvmlDeviceSetEccMode", handle, mode)
        ecc = self._value(handle, "ecc")
        handle.gpu["ecc"] = [ecc[0], int(mode)]

    def nvmlDeviceSetMigMode(self, handle: Device, mode: int) -> int:
        self._set("nvmlDeviceSetMigMode", handle, mode)
        mig = self._value(handle, "mig")
        handle.gpu["mig"] = [mig[0], int(mode)]
        # Activation needs a GPU reset: the driver reports the change as pending.
        return real.NVML_ERROR_IN_USE if mig[0] != int(mode) else real.NVML_SUCCESS

    def nvmlDeviceGetGpuInstanceProfileInfo(self, handle: Device, profile: int, version: int = 2) -> _Obj:
        self._check("nvmlDeviceGetGpuInstanceProfileInfo", handle)
        profiles = handle.gpu.get("mig_profiles") or {}
        if profile not in profiles:
            raise error("NotSupported")
        entry = profiles[profile]
        return _Obj(
            id=entry.get("id", profile),
            sliceCount=entry["slices"],
            memorySizeMB=entry["memory_mib"],
            name="MIG %s" % entry["name"],
            instanceCount=7 // entry["slices"],
        )

    def _gi_profile(self, handle: Device, profile_id: int) -> tuple[int, dict[str, t.Any]]:
        for key, entry in (handle.gpu.get("mig_profiles") or {}).items():
            if entry.get("id", key) == profile_id:
                return key, entry
        raise error("InvalidArgument")

    def nvmlDeviceCreateGpuInstance(self, handle: Device, profile_id: int) -> GpuInstance:
        self._set("nvmlDeviceCreateGpuInstance", handle, profile_id)
        if not self._mig_enabled(handle):
            raise error("NotSupported")
        _key, entry = self._gi_profile(handle, profile_id)
        used = sum(gi["slices"] for gi in handle.gpu["gpu_instances"])
        if used + entry["slices"] > 7:
            raise error("InsufficientResources")
        new_id = max([gi["id"] for gi in handle.gpu["gpu_instances"]] + [0]) + 1
        gi = {
            "id": new_id,
            "profile": entry["name"],
            "profile_id": profile_id,
            "slices": entry["slices"],
            "memory_mib": entry["memory_mib"],
            "compute_instances": [],
        }
        handle.gpu["gpu_instances"].append(gi)
        return GpuInstance(handle, gi)

    def nvmlDeviceGetGpuInstanceById(self, handle: Device, gi_id: int) -> GpuInstance:
        self._check("nvmlDeviceGetGpuInstanceById", handle)
        for gi in handle.gpu["gpu_instances"]:
            if gi["id"] == gi_id:
                return GpuInstance(handle, gi)
        raise error("NotFound")

    def nvmlGpuInstanceGetInfo(self, instance: GpuInstance) -> _Obj:
        self._check("nvmlGpuInstanceGetInfo", instance)
        return _Obj(id=instance.gi["id"], profileId=instance.gi.get("profile_id"), device=instance.device)

    def nvmlGpuInstanceDestroy(self, instance: GpuInstance) -> int:
        self._set("nvmlGpuInstanceDestroy", instance.device, instance.gi["id"])
        if instance.gi.get("compute_instances"):
            raise error("InUse")
        instance.device.gpu["gpu_instances"] = [g for g in instance.device.gpu["gpu_instances"] if g["id"] != instance.gi["id"]]
        return real.NVML_SUCCESS

    def nvmlGpuInstanceCreateComputeInstance(self, instance: GpuInstance, profile_id: int) -> ComputeInstance:
        self._set("nvmlGpuInstanceCreateComputeInstance", instance.device, instance.gi["id"], profile_id)
        slices = CI_PROFILE_SLICES.get(profile_id)
        used = sum(ci.get("slices", instance.gi["slices"]) for ci in instance.gi["compute_instances"])
        if slices is None or used + slices > instance.gi["slices"]:
            raise error("InsufficientResources")
        new_id = max([ci["id"] for ci in instance.gi["compute_instances"]] + [-1]) + 1
        seed = "%s/%d/%d" % (instance.device.gpu["uuid"], instance.gi["id"], new_id)
        ci = {"id": new_id, "slices": slices, "profile_id": profile_id, "uuid": "MIG-%s" % uuid_mod.uuid5(uuid_mod.NAMESPACE_OID, seed)}
        instance.gi["compute_instances"].append(ci)
        return ComputeInstance(instance, ci)

    def nvmlGpuInstanceGetComputeInstanceById(self, instance: GpuInstance, ci_id: int) -> ComputeInstance:
        self._check("nvmlGpuInstanceGetComputeInstanceById", instance)
        for ci in instance.gi["compute_instances"]:
            if ci["id"] == ci_id:
                return ComputeInstance(instance, ci)
        raise error("NotFound")

    def nvmlComputeInstanceGetInfo(self, instance: ComputeInstance) -> _Obj:
        self._check("nvmlComputeInstanceGetInfo", instance)
        return _Obj(id=instance.ci["id"], profileId=instance.ci.get("profile_id"), gpuInstance=instance.instance)

    def nvmlComputeInstanceDestroy(self, instance: ComputeInstance) -> int:
        gi = instance.instance.gi
        self._set("nvmlComputeInstanceDestroy", instance.instance.device, gi["id"], instance.ci["id"])
        gi["compute_instances"] = [c for c in gi["compute_instances"] if c["id"] != instance.ci["id"]]
        return real.NVML_SUCCESS


def make_fake(profile: str | dict[str, t.Any]) -> FakeNVML:
    """A FakeNVML for a profile name (``profiles/<name>.yaml``) or a profile dict."""
    return FakeNVML(load_profile(profile) if isinstance(profile, str) else profile)
