# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The facts schema: the per-GPU record of ``ansible_facts.nvidia_gpu.gpus[]`` and the words its values use.

Private to this collection: no compatibility promise outside gpuhost.nvidia.

Every reader (NVML in _nvml, ``nvidia-smi -q -x`` in _smi, the PCI scan through _facts) starts from
:func:`empty_gpu_record`, so a GPU has every key whichever source saw it. The compute mode names and the on/off
words are defined here once: the facts, the settings planner and the boot script's tests read them from here.
The nvidia_gpu_facts module's RETURN block documents each key.

The GPU processes are a list when they were read, and null with ``processes_error`` (the reason) when they could not
be: "could not read" is never an empty list. :func:`process_view` is the one reading of them that every guard (the
engine restart plan, the rolling upgrade, vfio, the settings' reset, the doctor) shares: the processes found, and
the GPUs whose processes are unknown, each with why.
"""

from __future__ import annotations

import typing as t
from collections.abc import Mapping

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _pci

# States shared by the backends and the merged facts. Documented in nvidia_gpu_facts RETURN.
STATE_OK = "ok"
STATE_NO_GPU = "no_gpu"
STATE_DRIVER_NOT_LOADED = "driver_not_loaded"
STATE_LIBRARY_NOT_FOUND = "library_not_found"
STATE_NO_PERMISSION = "no_permission"
STATE_GPU_LOST = "gpu_lost"
STATE_VERSION_MISMATCH = "driver_version_mismatch"
STATE_ERROR = "error"
# Per-GPU only: the GPU was seen on the PCI bus but by neither NVML nor nvidia-smi.
STATE_PCI_ONLY = "pci_only"

# NVML's nvmlComputeMode_t values -> the facts' ``compute_mode``. nvidia-smi prints the same names capitalised
# (``Exclusive_Process``; older drivers ``Exclusive Process``).
COMPUTE_MODES = {
    0: "default",
    1: "exclusive_thread",
    2: "prohibited",
    3: "exclusive_process",
}
# The modes a GPU can be set to; EXCLUSIVE_THREAD (1) is deprecated and can only be read.
SETTABLE_COMPUTE_MODES = ("default", "exclusive_process", "prohibited")
COMPUTE_MODE_VALUES = {name: value for value, name in COMPUTE_MODES.items()}


def compute_mode_name(value: t.Any) -> str | None:
    """NVML's integer, or nvidia-smi's text (``Exclusive_Process``, ``Exclusive Process``) -> the facts' name."""
    if value is None:
        return None
    if isinstance(value, int):
        return COMPUTE_MODES.get(value)
    name = str(value).strip().lower().replace(" ", "_")
    return name if name in COMPUTE_MODE_VALUES else None


def onoff(value: t.Any) -> str:
    """A boolean of the schema (persistence, ECC or MIG mode) in a sentence: enabled, disabled, or unknown (null)."""
    if value is None:
        return "unknown"
    return "enabled" if value else "disabled"


def empty_gpu_record(index: int | None) -> dict[str, t.Any]:
    """Every per-GPU key of the facts schema, unset."""
    return {
        "index": index,
        "uuid": None,
        "name": None,
        "pci_bus_id": None,
        "pci_device_id": None,
        "architecture": None,
        "compute_capability": None,
        "memory_total_mib": None,
        "persistence_mode": None,
        "compute_mode": None,
        "power_limit_w": None,
        "power_limit_min_w": None,
        "power_limit_max_w": None,
        "ecc": {"current": None, "pending": None},
        "mig": {"current": None, "pending": None},
        "mig_devices": [],
        "bound_driver": None,
        "iommu_group": None,
        "numa_node": None,
        "state": STATE_OK,
        "message": None,
        "source": None,
    }


# The type of each key of ``ansible_facts.nvidia_gpu`` that a reader computes with, as nvidia_gpu_facts' RETURN block
# documents it (a unit test holds the two together). ``(dict, {...})``: a dict with these keys; ``(list, x)``: a list
# of x. A key that is missing or null is not checked: every reader already treats those as unknown.
_NUMBER = "number"
_COUNT = "count"
_FLAGS = (dict, {"current": bool, "pending": bool})
GPU_SCHEMA: dict[str, t.Any] = {
    "index": _COUNT, "uuid": str, "name": str, "pci_bus_id": str, "pci_device_id": str, "architecture": str,
    "compute_capability": str, "memory_total_mib": _COUNT, "persistence_mode": bool, "compute_mode": str,
    "power_limit_w": _NUMBER, "power_limit_min_w": _NUMBER, "power_limit_max_w": _NUMBER, "ecc": _FLAGS, "mig": _FLAGS,
    "mig_devices": (list, (dict, {"uuid": str, "gi": _COUNT, "ci": _COUNT, "profile": str, "memory_mib": _COUNT})),
    "bound_driver": str, "iommu_group": _COUNT, "numa_node": int, "state": str, "message": str, "source": str,
    "utilization": (dict, {"gpu": _COUNT, "memory": _COUNT}), "temperature_c": int, "power_draw_w": _NUMBER,
    "processes": (list, (dict, {"pid": _COUNT, "type": str, "name": str, "used_memory_mib": _COUNT, "gpu_instance_id": _COUNT,
                                "compute_instance_id": _COUNT})),
    "processes_error": str,
    "topology": (dict, {"nvlink_active_links": _COUNT, "peers": (list, (dict, {"index": _COUNT, "pci_bus_id": str, "link": str}))}),
    "health": (dict, {"throttle_reasons": (list, str), "pcie": (dict, {}), "ecc_errors": (dict, {}), "retired_pages": (dict, {}),
                      "remapped_rows": (dict, {})}),
}
FACTS_SCHEMA: dict[str, t.Any] = {
    "present": bool, "source": str, "state": str, "messages": (list, str),
    "driver": (dict, {"version": str, "branch": str, "cuda_version": str, "kernel_module_type": str, "kernel_module_loaded": bool,
                      "kernel_module_version": str, "nvml_version": str, "library_version": str,
                      "library_paths": (dict, {"nvml": str, "cuda": str}), "library_files": (dict, {"nvml": str, "cuda": str})}),
    "gpus": (list, (dict, GPU_SCHEMA)),
    "pci_functions": (list, (dict, {"pci_bus_id": str, "pci_device_id": str, "subsystem_id": str, "class": str, "type": str,
                                    "bound_driver": str, "iommu_group": _COUNT, "numa_node": int})),
    "nvswitch_count": _COUNT,
    "iommu": (dict, {"enabled": bool, "groups": (list, (dict, {"group": _COUNT, "functions": (list, (dict, {}))}))}),
    "display_functions": (list, (dict, {})),
    "device_nodes": (list, str),
    "kernels": (dict, {"running": str, "boot": str, "boot_source": str, "installed": (list, (dict, {})), "without_module": (list, str),
                       "dkms": (list, (dict, {}))}),
    "reboot_required": bool, "reboot_reasons": (list, str),
}
# Far above any GPU count, MiB of memory, PID or watt reading; a bigger number is not a reading.
MAX_NUMBER = 2 ** 53
_SHOWN = 60


def _shown(value: t.Any) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN else text[:_SHOWN - 3] + "..."


def _problem(value: t.Any, kind: t.Any) -> str | None:
    """Why ``value`` is not of ``kind``, in words; None when it is."""
    if kind is _COUNT or kind is int:
        low = 0 if kind is _COUNT else -1
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= MAX_NUMBER:
            return "must be a whole number from %d to 2**53" % low
    elif kind is _NUMBER:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not -MAX_NUMBER <= value <= MAX_NUMBER:
            return "must be a finite number"  # NaN fails both comparisons
    elif kind is bool:
        if not isinstance(value, bool):
            return "must be true or false"
    elif kind is str:
        if not isinstance(value, str):
            return "must be a string"
    elif isinstance(kind, tuple) and kind[0] is list:
        if not isinstance(value, list):
            return "must be a list"
    elif isinstance(kind, tuple) and kind[0] is dict:
        if not isinstance(value, t.Mapping):
            return "must be a dict"
    return None


def _walk(value: t.Any, kind: t.Any, where: str, problems: list[str]) -> None:
    problem = _problem(value, kind)
    if problem is not None:
        problems.append("%s %s, got %s %s" % (where, problem, type(value).__name__, _shown(value)))
        return
    if isinstance(kind, tuple) and kind[0] is list:
        for index, item in enumerate(value):
            _walk(item, kind[1], "%s[%d]" % (where, index), problems)
    elif isinstance(kind, tuple) and kind[0] is dict:
        for key, sub in kind[1].items():
            if value.get(key) is not None:
                _walk(value[key], sub, "%s.%s" % (where, key), problems)


def facts_problems(facts: t.Any, where: str = "facts") -> list[str]:
    """Every value of the GPU facts whose type is not the schema's, as ``facts.gpus[0].memory_total_mib must be a whole
    number ..., got str 'x'``; empty for facts as nvidia_gpu_facts returns them. Keys the schema does not list, and
    null values, are not checked."""
    problems: list[str] = []
    _walk(facts, (dict, FACTS_SCHEMA), where, problems)
    return problems


def facts_error(facts: t.Any, option: str = "facts") -> str | None:
    """The message a module fails with when its ``option`` (the GPU facts it was given) holds a value of the wrong type;
    None when the facts are usable. Checked before the host is read."""
    problems = facts_problems(facts, option)
    if not problems:
        return None
    shown = "; ".join(problems[:5]) + ("; and %d more" % (len(problems) - 5) if len(problems) > 5 else "")
    return "%s: %s: pass ansible_facts.nvidia_gpu as gpuhost.nvidia.nvidia_gpu_facts returns it" % (option, shown)


def _short(value: t.Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def gpu_where(gpu: t.Any, position: int | None = None) -> str:
    """How a GPU is named in messages: ``GPU 0``, ``GPU 0000:17:00.0`` (no index), or ``gpus[3]``."""
    if isinstance(gpu, Mapping):
        if isinstance(gpu.get("index"), int) and not isinstance(gpu.get("index"), bool):
            return "GPU %d" % gpu["index"]
        if isinstance(gpu.get("pci_bus_id"), str) and gpu["pci_bus_id"]:
            return "GPU %s" % gpu["pci_bus_id"][:40]
    return "gpus[%s]" % ("?" if position is None else position)


# Drivers under which containers on this host cannot use a GPU: the passthrough drivers (a GPU meant for a VM) and
# nouveau (which holds the GPU without NVIDIA's userland, so it is not meant for a VM, just not usable).
NO_CONTAINER_DRIVERS = _pci.PASSTHROUGH_DRIVERS + ("nouveau",)


def gpus(facts: t.Any) -> list[dict[str, t.Any]]:
    """The GPU records of ``ansible_facts.nvidia_gpu`` (or of a dict holding it as ``nvidia_gpu``), dicts only.

    Never raises: missing or malformed facts give no GPUs. A caller that must refuse malformed facts checks them with
    :func:`facts_error` first.
    """
    if isinstance(facts, Mapping) and isinstance(facts.get("nvidia_gpu"), Mapping) and "gpus" not in facts:
        facts = facts["nvidia_gpu"]
    records = facts.get("gpus") if isinstance(facts, Mapping) else None
    if not isinstance(records, (list, tuple)):
        return []
    return [gpu for gpu in records if isinstance(gpu, Mapping)]


def mig_on(gpu: Mapping) -> bool:
    """Whether MIG mode is on now (``mig.current``); a bare boolean, as hand-written facts give it, counts too."""
    mig = gpu.get("mig")
    if isinstance(mig, Mapping):
        return bool(mig.get("current"))
    return bool(mig)


def gpu_label(gpu: Mapping) -> str:
    """A GPU in messages with what identifies it: ``GPU 3 (NVIDIA H100, 0000:b7:00.0)``."""
    where = gpu_where(gpu)
    bits = [str(b) for b in (gpu.get("name"), gpu.get("pci_bus_id")) if b and "GPU %s" % b != where]
    return "%s%s" % (where, " (%s)" % ", ".join(bits) if bits else "")


def container_unusable(gpu: Mapping) -> str | None:
    """Why a container on this host cannot be given this GPU, or None when it can.

    The one rule that the compose planner and the select_gpus filter share: the driver must list the GPU (it has an
    index), its state must be ok (a record without a state, as hand-written facts give, counts as ok), and no
    passthrough driver or nouveau may hold it. MIG is not part of the rule: a GPU with MIG on is usable through its
    MIG devices, not as a whole (:func:`mig_on`).
    """
    label = gpu_label(gpu)
    if gpu.get("index") is None:
        return "%s has no index in the facts (the driver does not see it)" % label
    driver = gpu.get("bound_driver")
    if driver in NO_CONTAINER_DRIVERS:
        return "%s is bound to %s, so containers on this host cannot use it" % (label, driver)
    state = gpu.get("state", STATE_OK)
    if state != STATE_OK:
        message = gpu.get("message")
        return "%s is in state %s%s, so containers cannot be given it" % (label, state, " (%s)" % message if message else "")
    return None


def unknown_reason(record: Mapping) -> str:
    """Why a GPU record that has no process list has none, from its state and binding."""
    state = record.get("state")
    message = record.get("message")
    if state == STATE_PCI_ONLY:
        return "no source read its processes: %s" % (message or "seen on the PCI bus only")
    if state not in (None, STATE_OK):
        return "its state is %s%s" % (state, ": %s" % message if message else "")
    return "the processes were not read"


def processes_unknown(record: dict[str, t.Any], reason: str | None = None) -> None:
    """Mark a GPU record's processes unknown: null, with the reason in ``processes_error``."""
    record["processes"] = None
    record["processes_error"] = reason or unknown_reason(record)


def _excused(gpu: Mapping, module_loaded: t.Any) -> str | None:
    """Why no process NVIDIA's tools list can use this GPU whatever its process list says, or None."""
    bound = gpu.get("bound_driver")
    # No process NVIDIA's tools list can use a GPU held by a passthrough driver.
    if bound in _pci.PASSTHROUGH_DRIVERS:
        return "bound to %s" % bound
    if gpu.get("state") == STATE_PCI_ONLY and bound is None and "bound_driver" in gpu:
        return "no driver bound"
    if module_loaded is False and bound != "nvidia":
        return "the nvidia kernel module is not loaded"
    return None


def process_view(facts: t.Any) -> dict[str, t.Any]:
    """The GPU processes of ``ansible_facts.nvidia_gpu`` as the guards read them: never raises.

    Returns ``{"processes": [...], "unknown": [...]}``. ``processes``: each listed process with the GPU it runs on
    (``gpu``: the index, else the PCI address) and ``where`` (``GPU 0``). ``unknown``: ``{"gpu", "reason"}`` for each
    GPU whose processes cannot be known: the facts are missing or malformed, were gathered without ``processes``,
    the source could not read them (``processes_error``), the GPU's state is not ok, or an entry has no readable pid.
    A GPU bound to vfio-pci or pci-stub, one with no driver bound, and any GPU not bound to nvidia while the nvidia
    module is not loaded are idle: no process NVIDIA's tools list can use them.
    """
    found: list[dict[str, t.Any]] = []
    unknown: list[dict[str, t.Any]] = []
    if not isinstance(facts, Mapping):
        what = "none were given" if facts is None else "they are %s %s, not a dict" % (type(facts).__name__, _short(facts))
        return {"processes": [], "unknown": [{"gpu": None, "reason": "no GPU facts: %s" % what}]}
    gpus = facts.get("gpus")
    driver = facts.get("driver")
    module_loaded = driver.get("kernel_module_loaded") if isinstance(driver, Mapping) else None
    if not isinstance(gpus, list):
        reason = "the GPU facts have no GPU list (gpus is %s)" % ("missing" if "gpus" not in facts else _short(gpus))
        return {"processes": [], "unknown": [{"gpu": None, "reason": reason}]}
    if not gpus and facts.get("present") is True:
        reason = "the GPU facts list no GPU although one is present (state %s)" % _short(facts.get("state"))
        return {"processes": [], "unknown": [{"gpu": None, "reason": reason}]}
    if not gpus and facts.get("present") is not False and facts.get("state") != STATE_NO_GPU and module_loaded is not False:
        reason = "the GPU facts list no GPU and do not say that there is none (present %s, state %s)" % (
            _short(facts.get("present")), _short(facts.get("state")))
        return {"processes": [], "unknown": [{"gpu": None, "reason": reason}]}
    for position, gpu in enumerate(gpus):
        where = gpu_where(gpu, position)
        if not isinstance(gpu, Mapping):
            unknown.append({"gpu": where, "reason": "not a GPU record: %s" % _short(gpu)})
            continue
        if _excused(gpu, module_loaded):
            continue
        ident = gpu.get("index") if isinstance(gpu.get("index"), int) else gpu.get("pci_bus_id")
        procs = gpu.get("processes")
        error = gpu.get("processes_error")
        if "processes" not in gpu:
            reason = "the facts were gathered without the processes (gather: [processes])"
        elif error:
            reason = str(error)
        elif gpu.get("state", STATE_OK) != STATE_OK:
            reason = unknown_reason(gpu)
        elif procs is None:
            reason = "its processes are null, so they were not read"
        elif not isinstance(procs, list):
            reason = "its processes are %s, not a list" % _short(procs)
        else:
            reason = None
            for proc in procs:
                pid = proc.get("pid") if isinstance(proc, Mapping) else None
                if isinstance(pid, str) and pid.isdigit():
                    pid = int(pid)
                if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
                    reason = "a process entry without a readable pid: %s" % _short(proc)
                    break
                found.append(dict(proc, pid=pid, gpu=ident, where=where))
        if reason:
            unknown.append({"gpu": where, "reason": reason})
    return {"processes": found, "unknown": unknown}


def describe_unknown(unknown: t.Iterable[Mapping]) -> str:
    """``GPU 0: <reason>; GPU 1: <reason>``."""
    return "; ".join("%s: %s" % (u["gpu"], u["reason"]) if u.get("gpu") else str(u["reason"]) for u in unknown)
