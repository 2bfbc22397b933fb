# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""NVML backend for the GPU facts, through nvidia-ml-py (module ``pynvml``).

Private to this collection: no compatibility promise outside gpuhost.nvidia.

One NVML session is a :class:`Session` (``nvmlInit`` on entering, ``nvmlShutdown`` on leaving). The facts read
through :meth:`Session.collect`; another backend (the settings, in _settings_apply) reads more about each GPU in the
same pass through its ``extend`` hook and :class:`Reader`, and calls NVML setters in the same session.

``pynvml`` is imported inside :func:`load_pynvml`, so a host without nvidia-ml-py is a state the facts report,
and tests can put a fake module in ``sys.modules['pynvml']``. NVML errors map to states:
LibraryNotFound -> library_not_found, DriverNotLoaded -> driver_not_loaded, NoPermission -> no_permission,
LibRmVersionMismatch -> driver_version_mismatch, GpuIsLost -> that GPU's state gpu_lost. A field the GPU does not
support (NotSupported) is None.

The processes are the exception to "None when not given": a guard reads them to decide whether a GPU is idle, so
any failure to read them (NoPermission, NotSupported, Unknown, Uninitialized, a missing function) makes ``processes``
None and ``processes_error`` the reason, never an empty list. With MIG on, NVML lists a process on the MIG device
handle it runs on (the GPU handle only gives the aggregate to a privileged caller), so the processes of every MIG
device are read too.

A wedged driver can block an NVML call for minutes. After ``nvmlInit``, the system reads (driver version, device
count), each GPU's reads and the topology each run in a daemon thread given ``timeout`` seconds (the nvidia_gpu_facts
option ``nvml_timeout``). A GPU whose reads do not finish in time is reported with state ``error`` and unknown
processes; the GPUs after it are not asked (each would wait as long again), nor is ``nvmlShutdown``.
"""

from __future__ import annotations

import functools
import re
import sys
import threading
import traceback
import types
import typing as t

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _catalog
from ansible_collections.gpuhost.nvidia.plugins.module_utils._gpu_schema import compute_mode_name, empty_gpu_record, processes_unknown
from ansible_collections.gpuhost.nvidia.plugins.module_utils._common import (
    STATE_DRIVER_NOT_LOADED,
    STATE_ERROR,
    STATE_GPU_LOST,
    STATE_LIBRARY_NOT_FOUND,
    STATE_NO_PERMISSION,
    STATE_OK,
    STATE_VERSION_MISMATCH,
    cuda_version_from_int,
    device_id_from_nvml,
    normalize_bus_id,
    to_text,
)

GATHER_CHOICES = ("processes", "utilization", "topology", "health")

# nvmlClocksEventReason* / nvmlClocksThrottleReason* bits -> names in the facts (``health.throttle_reasons``).
THROTTLE_REASONS = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
)

MIB = 1024 * 1024

# Error class name (as nvidia-ml-py builds it) -> facts state.
_INIT_ERROR_STATES = (
    ("NVMLError_LibraryNotFound", STATE_LIBRARY_NOT_FOUND),
    ("NVMLError_FunctionNotFound", STATE_LIBRARY_NOT_FOUND),
    ("NVMLError_DriverNotLoaded", STATE_DRIVER_NOT_LOADED),
    ("NVMLError_NoPermission", STATE_NO_PERMISSION),
    ("NVMLError_LibRmVersionMismatch", STATE_VERSION_MISMATCH),
    ("NVMLError_GpuIsLost", STATE_GPU_LOST),
)

# Field-level errors that just mean "this GPU/driver does not give that value".
_FIELD_NULL_ERRORS = (
    "NVMLError_NotSupported",
    "NVMLError_NotFound",
    "NVMLError_FunctionNotFound",
    "NVMLError_InvalidArgument",
    "NVMLError_NoPermission",
    "NVMLError_NoData",
    "NVMLError_Deprecated",
    "NVMLError_NotReady",
)

# nvidia-smi topo -m legend names for NVML's common-ancestor levels.
_TOPOLOGY_LEVELS = {
    0: "SELF",
    10: "PIX",
    20: "PXB",
    30: "PHB",
    40: "NODE",
    50: "SYS",
}

_NA_32 = 0xFFFFFFFF

# Seconds the reads of one GPU (or the system reads, or the topology) may take before they count as hung. NVML answers
# in milliseconds once initialised; the nvidia_gpu_facts option nvml_timeout overrides it.
DEFAULT_TIMEOUT = 10.0
# nvmlInit, and nvidia-smi's whole query, wake every GPU: without persistence mode that legitimately takes seconds per
# GPU. They get this many times the bound of one step (60 s by default), still a bound.
WHOLE_HOST_FACTOR = 6


# What :meth:`Reader.strict` returns for an error that means "there is none".
ABSENT = object()


class ProcessesUnknown(Exception):
    """Raised inside a GPU's process read when one of its queries fails: the processes cannot be known."""


class GpuLost(Exception):
    """Raised inside a GPU's collection when NVML reports the GPU as lost."""


def load_pynvml() -> tuple[types.ModuleType | None, str | None]:
    """Import pynvml; return (module, None) or (None, traceback text)."""
    try:
        import pynvml  # pylint: disable=import-outside-toplevel
    except ImportError:
        return None, traceback.format_exc()
    return pynvml, None


def _is(nv: t.Any, exc: BaseException, *names: str) -> bool:
    for name in names:
        cls = getattr(nv, name, None)
        if isinstance(cls, type) and isinstance(exc, cls):
            return True
    return False


def nvml_error(nv: t.Any) -> type[BaseException]:
    """The library's NVMLError base class (Exception when the module has none)."""
    cls = getattr(nv, "NVMLError", None)
    return cls if isinstance(cls, type) and issubclass(cls, BaseException) else Exception


def error_state(nv: t.Any, exc: BaseException) -> str:
    """The facts state an NVML error means (library_not_found, driver_not_loaded, ...; error otherwise)."""
    for name, state in _INIT_ERROR_STATES:
        if _is(nv, exc, name):
            return state
    return STATE_ERROR


def describe(exc: BaseException) -> str:
    """``Driver Not Loaded (NVMLError_DriverNotLoaded)``: an NVML error with its class name."""
    try:
        text = str(exc)
    except Exception:  # pylint: disable=broad-exception-caught
        text = ""
    name = type(exc).__name__
    return "%s (%s)" % (text, name) if text and text != name else name


class Reader:
    """Reads NVML values by the facts' rules: a value the GPU does not give is None, any other failure is noted in
    :attr:`messages`, a lost GPU raises :class:`GpuLost`. The facts fill their records with it; another backend
    reads its own values with :meth:`call` (see :meth:`Session.collect`)."""

    def __init__(self, nv: t.Any, gather: t.Iterable[str]):
        self.nv = nv
        self.gather = set(gather)
        self.messages: list[str] = []
        self.error_cls = nvml_error(nv)

    def call(self, label: str, func_name: str, *args: t.Any) -> t.Any:
        """Call an NVML function; None for unsupported values; GpuLost on a lost GPU."""
        func = getattr(self.nv, func_name, None)
        if func is None:
            return None
        try:
            return func(*args)
        except self.error_cls as exc:
            if _is(self.nv, exc, "NVMLError_GpuIsLost"):
                raise GpuLost(describe(exc)) from exc
            if not _is(self.nv, exc, *_FIELD_NULL_ERRORS):
                self.messages.append("%s: %s failed: %s" % (label, func_name, describe(exc)))
            return None

    # -- per-GPU -------------------------------------------------------------------------------------------
    def fill_gpu(self, record: dict[str, t.Any], handle: t.Any) -> None:
        """Fill a record in place, so that a GPU lost half-way keeps what was read before."""
        label = "GPU %d" % record["index"]
        pci = self.call(label, "nvmlDeviceGetPciInfo", handle)
        if pci is not None:
            record["pci_bus_id"] = normalize_bus_id(getattr(pci, "busId", None)) or normalize_bus_id(
                getattr(pci, "busIdLegacy", None)
            )
            record["pci_device_id"] = device_id_from_nvml(getattr(pci, "pciDeviceId", None))
        record["uuid"] = to_text(self.call(label, "nvmlDeviceGetUUID", handle))
        record["name"] = to_text(self.call(label, "nvmlDeviceGetName", handle))
        cc = self.call(label, "nvmlDeviceGetCudaComputeCapability", handle)
        if cc is not None and len(cc) == 2:
            record["compute_capability"] = "%d.%d" % (cc[0], cc[1])
        record["architecture"] = _catalog.architecture(record["compute_capability"]) or _catalog.architecture(
            record["pci_device_id"]
        )
        memory = self.call(label, "nvmlDeviceGetMemoryInfo", handle)
        if memory is not None and getattr(memory, "total", None) is not None:
            record["memory_total_mib"] = int(memory.total) // MIB
        persistence = self.call(label, "nvmlDeviceGetPersistenceMode", handle)
        record["persistence_mode"] = None if persistence is None else bool(persistence)
        mode = self.call(label, "nvmlDeviceGetComputeMode", handle)
        record["compute_mode"] = compute_mode_name(mode)
        record["power_limit_w"] = _watts(self.call(label, "nvmlDeviceGetPowerManagementLimit", handle))
        constraints = self.call(label, "nvmlDeviceGetPowerManagementLimitConstraints", handle)
        if constraints is not None and len(constraints) == 2:
            record["power_limit_min_w"] = _watts(constraints[0])
            record["power_limit_max_w"] = _watts(constraints[1])
        record["ecc"] = _pair(self.call(label, "nvmlDeviceGetEccMode", handle))
        record["mig"] = _pair(self.call(label, "nvmlDeviceGetMigMode", handle))
        if record["mig"]["current"]:
            record["mig_devices"] = self.mig_devices(label, handle)
        if "utilization" in self.gather:
            rates = self.call(label, "nvmlDeviceGetUtilizationRates", handle)
            record["utilization"] = {
                "gpu": None if rates is None else int(rates.gpu),
                "memory": None if rates is None else int(rates.memory),
            }
            temperature = self.call(label, "nvmlDeviceGetTemperature", handle, getattr(self.nv, "NVML_TEMPERATURE_GPU", 0))
            record["temperature_c"] = None if temperature is None else int(temperature)
            record["power_draw_w"] = _watts(self.call(label, "nvmlDeviceGetPowerUsage", handle))
        if "processes" in self.gather:
            try:
                record["processes"], record["processes_error"] = self.processes(label, handle)
            except GpuLost:
                raise
            except Exception as exc:  # pylint: disable=broad-exception-caught
                # A value NVML should never return (a pid that is not a number...): unknown, not a traceback.
                record["processes"], record["processes_error"] = None, "reading the processes failed: %s" % describe(exc)
        if "health" in self.gather:
            record["health"] = self.health(label, handle)

    def health(self, label: str, handle: t.Any) -> dict[str, t.Any]:
        """Throttle reasons, PCIe link, ECC error counts, retired pages and remapped rows; None where unsupported."""
        reasons = self.call(label, "nvmlDeviceGetCurrentClocksEventReasons", handle)
        if reasons is None:
            reasons = self.call(label, "nvmlDeviceGetCurrentClocksThrottleReasons", handle)
        ecc = {}
        for error_type, error_name in ((0, "corrected"), (1, "uncorrected")):
            for counter, counter_name in ((0, "volatile"), (1, "aggregate")):
                value = self.call(label, "nvmlDeviceGetTotalEccErrors", handle, error_type, counter)
                ecc["%s_%s" % (error_name, counter_name)] = None if value is None else int(value)
        single = self.call(label, "nvmlDeviceGetRetiredPages", handle, 0)
        double = self.call(label, "nvmlDeviceGetRetiredPages", handle, 1)
        pending = self.call(label, "nvmlDeviceGetRetiredPagesPendingStatus", handle)
        rows = self.call(label, "nvmlDeviceGetRemappedRows", handle)
        return {
            "throttle_reasons": None if reasons is None else [name for bit, name in THROTTLE_REASONS if int(reasons) & bit],
            "pcie": {
                "gen_current": _opt_int(self.call(label, "nvmlDeviceGetCurrPcieLinkGeneration", handle)),
                "gen_max": _opt_int(self.call(label, "nvmlDeviceGetMaxPcieLinkGeneration", handle)),
                "width_current": _opt_int(self.call(label, "nvmlDeviceGetCurrPcieLinkWidth", handle)),
                "width_max": _opt_int(self.call(label, "nvmlDeviceGetMaxPcieLinkWidth", handle)),
            },
            "ecc_errors": ecc,
            "retired_pages": {
                "single_bit": None if single is None else len(single),
                "double_bit": None if double is None else len(double),
                "pending": None if pending is None else bool(pending),
            },
            "remapped_rows": None
            if rows is None or len(rows) != 4
            else {
                "correctable": int(rows[0]),
                "uncorrectable": int(rows[1]),
                "pending": bool(rows[2]),
                "failure": bool(rows[3]),
            },
        }

    def mig_devices(self, label: str, handle: t.Any) -> list[dict[str, t.Any]]:
        count = self.call(label, "nvmlDeviceGetMaxMigDeviceCount", handle) or 0
        devices = []
        for slot in range(count):
            mig = self.call(label, "nvmlDeviceGetMigDeviceHandleByIndex", handle, slot)
            if mig is None:
                continue
            name = to_text(self.call(label, "nvmlDeviceGetName", mig))
            memory = self.call(label, "nvmlDeviceGetMemoryInfo", mig)
            devices.append(
                {
                    "uuid": to_text(self.call(label, "nvmlDeviceGetUUID", mig)),
                    "gi": self.call(label, "nvmlDeviceGetGpuInstanceId", mig),
                    "ci": self.call(label, "nvmlDeviceGetComputeInstanceId", mig),
                    "profile": mig_profile_from_name(name),
                    "memory_mib": None if memory is None else int(memory.total) // MIB,
                }
            )
        devices.sort(key=lambda d: (d["gi"] if d["gi"] is not None else -1, d["ci"] if d["ci"] is not None else -1))
        return devices

    def strict(self, func_name: str, *args: t.Any, absent: tuple[str, ...] = ()) -> t.Any:
        """Call an NVML function whose failure leaves the processes unknown: ProcessesUnknown on any NVML error or a
        function this nvidia-ml-py does not have; GpuLost on a lost GPU. The errors named in ``absent`` mean "there
        is none" and return :data:`ABSENT`."""
        func = getattr(self.nv, func_name, None)
        if func is None:
            raise ProcessesUnknown("this nvidia-ml-py has no %s" % func_name)
        try:
            return func(*args)
        except self.error_cls as exc:
            if _is(self.nv, exc, "NVMLError_GpuIsLost"):
                raise GpuLost(describe(exc)) from exc
            if absent and _is(self.nv, exc, *absent):
                return ABSENT
            raise ProcessesUnknown("%s failed: %s" % (func_name, describe(exc))) from exc

    def processes(self, label: str, handle: t.Any) -> tuple[list[dict[str, t.Any]] | None, str | None]:
        """The GPU's processes and None, or None and why they cannot be known. With MIG on, the processes of each MIG
        device are read through its own handle as well. The process name alone may be unreadable (null)."""
        found: dict[int, dict[str, t.Any]] = {}
        try:
            self._add_processes(found, handle, None)
            for mig, ids in self._mig_handles(handle):
                self._add_processes(found, mig, ids)
        except ProcessesUnknown as exc:
            return None, str(exc)
        for pid, entry in found.items():
            entry["name"] = to_text(self.call(label, "nvmlSystemGetProcessName", pid))
        return [found[pid] for pid in sorted(found)], None

    def _add_processes(self, found: dict[int, dict[str, t.Any]], handle: t.Any, ids: tuple[t.Any, t.Any] | None) -> None:
        for kind, func in (("C", "nvmlDeviceGetComputeRunningProcesses"), ("G", "nvmlDeviceGetGraphicsRunningProcesses")):
            listed = self.strict(func, handle)
            if listed is None:
                listed = []
            if not isinstance(listed, (list, tuple)):
                raise ProcessesUnknown("%s returned %s, not a list" % (func, type(listed).__name__))
            for proc in listed:
                try:
                    pid = int(proc.pid)
                except (AttributeError, TypeError, ValueError) as exc:
                    raise ProcessesUnknown("%s listed a process without a readable pid (%r)" % (func, proc)) from exc
                if pid <= 0:
                    raise ProcessesUnknown("%s listed a process with pid %d" % (func, pid))
                gi = _na32(getattr(proc, "gpuInstanceId", None))
                ci = _na32(getattr(proc, "computeInstanceId", None))
                if ids is not None:
                    gi = ids[0] if gi is None else gi
                    ci = ids[1] if ci is None else ci
                entry = found.get(pid)
                if entry is not None:
                    if entry["type"] != kind and not entry.get("_seen_" + kind):
                        entry["type"] = "C+G"
                    entry["_seen_" + kind] = True
                    if entry["gpu_instance_id"] is None:
                        entry["gpu_instance_id"], entry["compute_instance_id"] = gi, ci
                    continue
                used = getattr(proc, "usedGpuMemory", None)
                found[pid] = {
                    "pid": pid,
                    "type": kind,
                    "name": None,
                    "used_memory_mib": None if used is None else int(used) // MIB,
                    "gpu_instance_id": gi,
                    "compute_instance_id": ci,
                    "_seen_" + kind: True,
                }
        for entry in found.values():
            entry.pop("_seen_C", None)
            entry.pop("_seen_G", None)

    def _mig_handles(self, handle: t.Any) -> list[tuple[t.Any, tuple[t.Any, t.Any]]]:
        """The MIG device handles of a GPU with MIG on, with their (GPU instance, compute instance) ids; none when
        the GPU has MIG off or does not support it. Any other failure leaves the processes unknown."""
        mode = self.strict("nvmlDeviceGetMigMode", handle, absent=("NVMLError_NotSupported",))
        if mode is ABSENT:
            # NotSupported: a GPU without MIG, whose first MIG slot cannot hold a device either. A MIG device there
            # contradicts the mode, and its processes are read all the same.
            probe = self.strict("nvmlDeviceGetMigDeviceHandleByIndex", handle, 0,
                                absent=("NVMLError_NotSupported", "NVMLError_NotFound", "NVMLError_InvalidArgument"))
            if probe is ABSENT:
                return []
            mode = (1, None)
        if mode is None or not isinstance(mode, (list, tuple)) or len(mode) != 2:
            raise ProcessesUnknown("nvmlDeviceGetMigMode returned %r" % (mode,))
        if not mode[0]:
            return []
        count = self.strict("nvmlDeviceGetMaxMigDeviceCount", handle)
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise ProcessesUnknown("nvmlDeviceGetMaxMigDeviceCount returned %r" % (count,))
        handles = []
        for slot in range(count):
            # NotFound: no MIG device in this slot.
            mig = self.strict("nvmlDeviceGetMigDeviceHandleByIndex", handle, slot, absent=("NVMLError_NotFound",))
            if mig is ABSENT:
                continue
            label = "MIG device %d" % slot
            handles.append((mig, (self.call(label, "nvmlDeviceGetGpuInstanceId", mig), self.call(label, "nvmlDeviceGetComputeInstanceId", mig))))
        return handles

    def topology(self, records: list[dict[str, t.Any]], handles: list[t.Any]) -> None:
        max_links = int(getattr(self.nv, "NVML_NVLINK_MAX_LINKS", 18))
        nvlink_caps = getattr(self.nv, "NVML_P2P_CAPS_INDEX_NVLINK", 2)
        p2p_ok = getattr(self.nv, "NVML_P2P_STATUS_OK", 0)
        links: list[list[str | None]] = []
        for record, handle in zip(records, handles):
            label = "GPU %s" % record["index"]
            remotes: list[str | None] = []
            if handle is not None:
                try:
                    for link in range(max_links):
                        state = self.call(label, "nvmlDeviceGetNvLinkState", handle, link)
                        if not state:
                            continue
                        remote = self.call(label, "nvmlDeviceGetNvLinkRemotePciInfo", handle, link)
                        remotes.append(normalize_bus_id(getattr(remote, "busId", None)) if remote is not None else None)
                except GpuLost:
                    remotes = []
            links.append(remotes)
        for i, (record, handle) in enumerate(zip(records, handles)):
            if handle is None:
                continue
            label = "GPU %s" % record["index"]
            peers = []
            for j, (other, other_handle) in enumerate(zip(records, handles)):
                if i == j or other_handle is None:
                    continue
                try:
                    direct = sum(1 for bus in links[i] if bus and bus == other["pci_bus_id"])
                    link_name = None
                    if direct:
                        link_name = "NV%d" % direct
                    elif links[i] and self.call(label, "nvmlDeviceGetP2PStatus", handle, other_handle, nvlink_caps) == p2p_ok:
                        # Reached through NVSwitches: nvidia-smi topo -m shows all of the GPU's active links.
                        link_name = "NV%d" % len(links[i])
                    else:
                        level = self.call(label, "nvmlDeviceGetTopologyCommonAncestor", handle, other_handle)
                        link_name = _TOPOLOGY_LEVELS.get(level) if level is not None else None
                except GpuLost:
                    link_name = None
                peers.append({"index": other["index"], "pci_bus_id": other["pci_bus_id"], "link": link_name})
            record["topology"] = {"nvlink_active_links": len(links[i]), "peers": peers}


def _watts(milliwatts: t.Any) -> float | None:
    if milliwatts is None:
        return None
    return round(int(milliwatts) / 1000.0, 2)


def _pair(value: t.Any) -> dict[str, bool | None]:
    if value is None or len(value) != 2:
        return {"current": None, "pending": None}
    return {"current": bool(value[0]), "pending": bool(value[1])}


def _opt_int(value: t.Any) -> int | None:
    return None if value is None else int(value)


def _na32(value: t.Any) -> int | None:
    if value is None:
        return None
    value = int(value)
    return None if value in (_NA_32, -1) else value


def mig_profile_from_name(name: str | None) -> str | None:
    """``NVIDIA A100-SXM4-40GB MIG 3g.20gb`` -> ``3g.20gb``; ``... MIG 1c.3g.20gb`` -> ``1c.3g.20gb``."""
    if not name:
        return None
    match = re.search(r"\bMIG\s+((?:\d+c\.)?\d+g\.\d+gb(?:\+\w+)?)\s*$", name)
    return match.group(1) if match else None


def _failed(state: str, message: str | None) -> dict[str, t.Any]:
    return {
        "available": False,
        "state": state,
        "message": message,
        "messages": [],
        "driver": {"version": None, "cuda_version": None, "nvml_version": None},
        "gpus": [],
    }


Extension = t.Callable[[t.Dict[str, t.Any], t.Any, Reader], None]


class Session:
    """One NVML session: the library loaded and ``nvmlInit`` on entering, ``nvmlShutdown`` on leaving.

    ``nv`` overrides the pynvml module (tests). When the library or ``nvmlInit`` fails, :attr:`active` is False and
    :meth:`collect` returns the failure (available false, the state, the message); nothing raises.
    """

    def __init__(self, nv: t.Any = None, timeout: float | None = DEFAULT_TIMEOUT):
        self.nv = nv
        self.timeout = timeout  # seconds nvmlInit may take (None: no bound)
        self.error_cls: type[BaseException] = Exception
        self.active = False
        self.hung = False
        self.failure: tuple[str, str] = (STATE_ERROR, "NVML: the session was not opened")

    def __enter__(self) -> "Session":
        if self.nv is None:
            nv, trace = load_pynvml()
            if nv is None:
                last = (trace or "").strip().splitlines()[-1:] or [""]
                self.failure = (
                    STATE_LIBRARY_NOT_FOUND,
                    "NVML: the Python library nvidia-ml-py (module pynvml) is not installed for %s (%s)" % (sys.executable, last[0]),
                )
                return self
            self.nv = nv
        self.error_cls = nvml_error(self.nv)
        # nvmlInit waits on the driver like any other call: a GPU that hangs the driver hangs it too.
        finished, _value, exc = bounded(self.nv.nvmlInit, self.timeout)
        if not finished:
            self.hung = True
            self.failure = (STATE_ERROR, "NVML: nvmlInit did not return within %s s (6 x nvml_timeout): the driver does not answer, "
                                         "so nothing NVML would say (the GPU processes included) is known" % self.timeout)
            return self
        if isinstance(exc, self.error_cls):
            self.failure = (error_state(self.nv, exc), "NVML: nvmlInit failed: %s" % describe(exc))
            return self
        if exc is not None:
            raise exc
        self.active = True
        return self

    def __exit__(self, *exc: t.Any) -> None:
        self.close()

    def close(self) -> None:
        """nvmlShutdown, once, if nvmlInit worked and no read hung (a shutdown would wait on the same lock)."""
        if not self.active:
            return
        self.active = False
        if self.hung:
            return
        try:
            self.nv.nvmlShutdown()
        except self.error_cls:
            pass

    def reader(self, gather: t.Iterable[str] = ()) -> Reader:
        return Reader(self.nv, gather)

    def collect(self, gather: t.Iterable[str] = (), extend: Extension | None = None,
                timeout: float | None = DEFAULT_TIMEOUT) -> dict[str, t.Any]:
        """The facts: {available, state, message, messages, driver, gpus}; never raises on NVML errors.

        ``extend(record, handle, reader)`` is called for each GPU read without error, after its facts, with the same
        handle and reader: a backend reads what only it needs in the same pass (a :class:`GpuLost` it raises marks
        the GPU lost, as in the facts). ``timeout``: seconds for each bounded step (module docstring); None: no bound.
        """
        if not self.active:
            return _failed(*self.failure)
        return _collect_initialised(self.nv, gather, _failed(STATE_ERROR, None), extend, timeout, self._hang)

    def _hang(self) -> None:
        self.hung = True


def whole_host(timeout: float | None) -> float | None:
    """The bound of a step that wakes every GPU (nvmlInit, nvidia-smi -q): :data:`WHOLE_HOST_FACTOR` steps."""
    return timeout * WHOLE_HOST_FACTOR if timeout and timeout > 0 else None


def collect(gather: t.Iterable[str] = (), nv: t.Any = None, timeout: float | None = DEFAULT_TIMEOUT) -> dict[str, t.Any]:
    """Query NVML in a session of its own. Returns {available, state, message, messages, driver, gpus}; never raises
    on NVML errors."""
    with Session(nv, whole_host(timeout)) as session:
        return session.collect(gather, timeout=timeout)


def bounded(func: t.Callable[[], t.Any], timeout: float | None) -> tuple[bool, t.Any, BaseException | None]:
    """Run ``func`` in a daemon thread for at most ``timeout`` seconds (None or 0: in this thread, unbounded).

    Returns (finished, value, exception). A call still blocked when the time is up stays blocked in its thread,
    which the interpreter does not wait for on exit."""
    box: dict[str, t.Any] = {}

    def work() -> None:
        try:
            box["value"] = func()
        except Exception as exc:  # pylint: disable=broad-exception-caught
            box["error"] = exc

    if not timeout or timeout <= 0:
        work()
        return True, box.get("value"), box.get("error")
    worker = threading.Thread(target=work, name="gpuhost-nvml", daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        return False, None, None
    return True, box.get("value"), box.get("error")


def _read_gpu(nv: t.Any, collector: Reader, record: dict[str, t.Any], index: int, extend: Extension | None) -> t.Any:
    """One GPU's reads into ``record`` (in place, so that a GPU lost half-way keeps what was read); its handle."""
    handle = nv.nvmlDeviceGetHandleByIndex(index)
    collector.fill_gpu(record, handle)
    if extend is not None:
        extend(record, handle, collector)
    return handle


def _hung_record(record: dict[str, t.Any], gather: set[str], message: str) -> dict[str, t.Any]:
    record["state"] = STATE_ERROR
    record["message"] = message
    if "processes" in gather:
        processes_unknown(record, "NVML did not answer: %s" % message)
    return record


def _collect_initialised(nv: t.Any, gather: t.Iterable[str], result: dict[str, t.Any], extend: Extension | None = None,
                         timeout: float | None = DEFAULT_TIMEOUT, on_hang: t.Callable[[], None] | None = None) -> dict[str, t.Any]:
    collector = Reader(nv, gather)
    error_cls = collector.error_cls

    def hang() -> None:
        if on_hang is not None:
            on_hang()

    def system() -> tuple[dict[str, t.Any], t.Any]:
        driver: dict[str, t.Any] = {}
        try:
            driver["version"] = to_text(collector.call("driver", "nvmlSystemGetDriverVersion"))
            driver["nvml_version"] = to_text(collector.call("driver", "nvmlSystemGetNVMLVersion"))
            driver["cuda_version"] = cuda_version_from_int(collector.call("driver", "nvmlSystemGetCudaDriverVersion"))
        except GpuLost:
            pass
        return driver, nv.nvmlDeviceGetCount()

    finished, value, exc = bounded(system, timeout)
    if not finished:
        hang()
        result["message"] = "NVML: the driver version and the device count were not read within %s s (nvml_timeout)" % timeout
        return result
    if exc is not None:
        if not isinstance(exc, error_cls):
            raise exc
        result["state"] = error_state(nv, exc)
        result["message"] = "NVML: nvmlDeviceGetCount failed: %s" % describe(exc)
        return result
    driver, count = value
    result["driver"].update(driver)
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        result["message"] = "NVML: nvmlDeviceGetCount returned %r, not a count" % (count,)
        return result
    gather_set = collector.gather
    gpus: list[dict[str, t.Any]] = []
    handles: list[t.Any] = []
    hung: str | None = None
    for index in range(count):
        record = empty_gpu_record(index)
        record["source"] = "nvml"
        if hung is not None:
            gpus.append(_hung_record(record, gather_set, "not read: NVML did not answer within %s s for %s (nvml_timeout)" % (timeout, hung)))
            handles.append(None)
            continue

        finished, handle, exc = bounded(functools.partial(_read_gpu, nv, collector, record, index, extend), timeout)
        if not finished:
            hung = "GPU %d" % index
            hang()
            # The blocked thread still holds the record it was filling: report a fresh one.
            record = empty_gpu_record(index)
            record["source"] = "nvml"
            gpus.append(_hung_record(record, gather_set, "NVML did not answer within %s s while reading GPU %d (nvml_timeout); "
                                                         "the GPUs after it were not read" % (timeout, index)))
            handles.append(None)
            continue
        if isinstance(exc, GpuLost):
            record["state"] = STATE_GPU_LOST
            record["message"] = "NVML reports GPU %d as lost: %s" % (index, exc)
            handle = None
        elif isinstance(exc, error_cls):
            state = error_state(nv, exc)
            if state not in (STATE_GPU_LOST, STATE_NO_PERMISSION):
                state = STATE_ERROR
            record["state"] = state
            record["message"] = "NVML: GPU %d: nvmlDeviceGetHandleByIndex failed: %s" % (index, describe(exc))
            handle = None
        elif exc is not None:
            raise exc
        if "processes" in gather_set and record["state"] != STATE_OK:
            processes_unknown(record)
        gpus.append(record)
        handles.append(handle)
    if "topology" in gather_set:
        if hung is not None:
            result["messages"].append("NVML: the topology was not read: %s did not answer" % hung)
        else:
            finished, _value, exc = bounded(lambda: collector.topology(gpus, handles), timeout)
            if not finished:
                hang()
                for record in gpus:
                    record["topology"] = None
                collector.messages.append("NVML: the topology was not read within %s s (nvml_timeout)" % timeout)
            elif exc is not None:
                raise exc
    result["gpus"] = gpus
    result["messages"] = result["messages"] + collector.messages
    result["available"] = True
    result["state"] = STATE_OK
    return result
