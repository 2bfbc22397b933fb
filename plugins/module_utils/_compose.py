# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Pure builder: a GPU request plus ``ansible_facts.nvidia_gpu`` in, a compose override document out.

Private to this collection: no compatibility promise outside gpuhost.nvidia.

Nothing here touches the host. ``build`` validates the whole request, places the services on GPUs, and returns the
service entries; ``merge`` puts them into an existing override document; ``render`` turns the document into YAML.
Every problem is raised as ``ComposeError`` with a message that names the service and the value at fault.
"""

from __future__ import annotations

import os
import math
import re
import traceback
import typing as t
from dataclasses import dataclass, field

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _gpu_schema
from ansible_collections.gpuhost.nvidia.plugins.module_utils._validate import bad_character, show

try:
    import yaml
except ImportError:  # pragma: no cover - exercised through the module's missing_required_lib path
    HAS_YAML = False
    YAML_IMPORT_ERROR: str | None = traceback.format_exc()
else:
    HAS_YAML = True
    YAML_IMPORT_ERROR = None

STRATEGIES = ("explicit", "spread", "pack", "exclusive")
ID_FORMATS = ("uuid", "index")
DRIVERS = ("nvidia", "cdi")
CAPABILITIES = ("gpu", "compute", "utility", "graphics", "video", "display")
# Capabilities that are NVIDIA driver capabilities (NVIDIA_DRIVER_CAPABILITIES); "gpu" only selects the device driver.
DRIVER_CAPABILITIES = ("compute", "utility", "graphics", "video", "display")
DEFAULT_DRIVER_CAPABILITIES = "compute,utility"
DEFAULT_CDI_KIND = "nvidia.com/gpu"
# Where a service's GPU request goes: the long form (deploy.resources.reservations.devices) or the service-level gpus
# attribute of the compose specification; Docker Compose turns either into the same device requests.
REQUEST_FORMS = ("deploy", "gpus")
# What to do about a GPU request a project's own compose file already makes for a managed service. Compose appends
# sequences when it merges files, so a request in the base file survives the override and widens what it grants:
# "refuse" stops before writing, naming it; "replace" writes the override's request with !override and resets the
# other form with !reset (Docker Compose 2.24.4 and later; the tags are not known to Compose v1).
BASE_REQUEST_POLICIES = ("refuse", "replace")
HEADER = "# GPU override written by Ansible (gpuhost.nvidia.gpu_compose_override). Services that the task\n" \
    "# does not manage are kept as they are; managed services are rewritten on every run.\n"

# Well-known variables per framework. Values are strings, as compose passes them on. NVIDIA_DRIVER_CAPABILITIES and
# NVIDIA_VISIBLE_DEVICES in the nvidia preset are filled in from the service's capabilities and devices.
PRESETS: dict[str, dict[str, str]] = {
    "nvidia": {},
    "cuda": {
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "CUDA_CACHE_PATH": "/tmp/cuda-cache",
        "CUDA_CACHE_MAXSIZE": "4294967296",
        "CUDA_MODULE_LOADING": "LAZY",
    },
    "cudnn": {
        "CUDNN_LOGERR_DBG": "1",
        "CUDNN_LOGDEST_DBG": "stderr",
    },
    "pytorch": {
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
        "PYTORCH_NVML_BASED_CUDA_CHECK": "1",
    },
    "tensorflow": {
        "TF_FORCE_GPU_ALLOW_GROWTH": "true",
        "TF_CPP_MIN_LOG_LEVEL": "1",
    },
}

# Where the facts may keep each VM-mode library, newest spelling first. The value is the soname path.
LIBRARY_KEYS: dict[str, tuple[str, ...]] = {
    "libnvidia-ml.so.1": ("nvml", "libnvidia-ml.so.1", "libnvidia-ml.so", "libnvidia-ml"),
    "libcuda.so.1": ("cuda", "libcuda.so.1", "libcuda.so", "libcuda"),
}

_INDEX_RE = re.compile(r"^\d+$")
_MIG_REF_RE = re.compile(r"^(\d+):(\d+)$")
_GPU_UUID_RE = re.compile(r"^GPU-[0-9A-F-]+$", re.IGNORECASE)
_MIG_UUID_RE = re.compile(r"^MIG-[0-9A-Z/-]+$", re.IGNORECASE)
_CDI_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*=[A-Za-z0-9_.:-]+$")
_IPC_RE = re.compile(r"^(host|private|shareable|none|(service|container):[A-Za-z0-9_.-]+)$")
_SIZE_RE = re.compile(r"^\d+(\.\d+)?\s*([bkmgt]|[kmgt]b|[kmgt]ib)?$", re.IGNORECASE)
_ULIMIT_NAME_RE = re.compile(r"^[a-z]+$")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
_SERVICE_NAME_RE = re.compile(r"^[a-zA-Z0-9._-]+$")
_RUNTIME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_DEVICE_NODE_RE = re.compile(r"^/dev/nvidia[A-Za-z0-9_-]*(/[A-Za-z0-9_-][A-Za-z0-9_.-]*)*$")
_VERSION_RE = re.compile(r"^\d+(\.\d+)*$")
# Drivers under which containers on this host cannot use a GPU: defined with the usability rule in _gpu_schema.
NO_CONTAINER_DRIVERS = _gpu_schema.NO_CONTAINER_DRIVERS
# Limits beyond anything real, so that a typo is refused instead of written (compose reads numbers as 64-bit
# integers, and no host has more GPUs, no GPU more memory).
MAX_GPUS = 64
MAX_MEMORY_MIB = 1024 * 1024
MAX_INT64 = 2 ** 63 - 1
MAX_NAME = 128
MAX_ENV_VALUE = 32768


class ComposeError(ValueError):
    """The request cannot be met. The message names the service and the problem."""


@dataclass
class Unit:
    """One placeable device: a whole GPU, or one MIG device of a GPU."""

    gpu_index: int
    uuid: str | None
    index_id: str  # "3" for a GPU, "3:1" for a MIG device
    memory_mib: int | None
    name: str | None = None
    mig: bool = False

    def ident(self, id_format: str) -> str:
        if id_format == "uuid" and self.uuid:
            return self.uuid
        return self.index_id


@dataclass
class Plan:
    """What ``build`` decided: the service entries, the devices per service, and warnings for the result."""

    services: dict[str, dict[str, t.Any]] = field(default_factory=dict)
    assignment: dict[str, list[str]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------------------------------- facts access


def library_paths(facts: dict[str, t.Any]) -> dict[str, t.Any]:
    """The driver library paths, key by key from ``driver.library_paths`` or, where that has none (a missing key or
    null, as nvidia_gpu_facts reports a library it did not find), from a top-level ``library_paths``."""
    driver = facts.get("driver")
    nested = driver.get("library_paths") if isinstance(driver, dict) else None
    top = facts.get("library_paths")
    found = {k: v for k, v in top.items() if v} if isinstance(top, dict) else {}
    if isinstance(nested, dict):
        found.update({k: v for k, v in nested.items() if v})
    return found


# --------------------------------------------------------------------------------------------------- validation


def facts_errors(facts: t.Any) -> list[str]:
    """What the facts must look like for their values to be written: GPU indices are small integers, UUIDs are UUIDs.

    The facts come from nvidia_gpu_facts, but they are an option like any other, and their ids end up in the file.
    """
    if facts is None:
        return []
    if not isinstance(facts, dict):
        return ["facts must be ansible_facts.nvidia_gpu (a mapping), not %s" % show(facts)]
    gpus = facts.get("gpus")
    if gpus is not None and not isinstance(gpus, list):
        return ["facts: gpus must be a list, not %s" % show(gpus)]
    errors = []
    for number, gpu in enumerate(gpus or []):
        if not isinstance(gpu, dict):
            errors.append("facts: gpus[%d] must be a mapping, not %s" % (number, show(gpu)))
            continue
        index = gpu.get("index")
        if index is not None and (isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < MAX_GPUS):
            errors.append("facts: gpus[%d].index %s is not a GPU index (0 to %d)" % (number, show(index), MAX_GPUS - 1))
        uuid = gpu.get("uuid")
        if uuid is not None and (not isinstance(uuid, str) or len(uuid) > 128 or not _GPU_UUID_RE.fullmatch(uuid)):
            errors.append("facts: gpus[%d].uuid %s is not a GPU UUID" % (number, show(uuid)))
        migs = gpu.get("mig_devices")
        if migs is not None and not isinstance(migs, list):
            errors.append("facts: gpus[%d].mig_devices must be a list, not %s" % (number, show(migs)))
            continue
        for pos, mig in enumerate(migs or []):
            muuid = mig.get("uuid") if isinstance(mig, dict) else None
            if muuid is not None and (not isinstance(muuid, str) or len(muuid) > 128 or not _MIG_UUID_RE.fullmatch(muuid)):
                errors.append("facts: gpus[%d].mig_devices[%d].uuid %s is not a MIG UUID" % (number, pos, show(muuid)))
    return errors


def _check_size(value: t.Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return 0 < value <= MAX_INT64
    return isinstance(value, str) and len(value) <= 32 and bool(_SIZE_RE.fullmatch(value))


def _ulimit_value(value: t.Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, str) and re.fullmatch(r"-?\d{1,19}", value):
        value = int(value)
    return isinstance(value, int) and -1 <= value <= MAX_INT64


def _normalise_ulimits(name: str, ulimits: dict[str, t.Any], errors: list[str]) -> dict[str, t.Any]:
    out: dict[str, t.Any] = {}
    for key in sorted(ulimits, key=str):
        value = ulimits[key]
        if not isinstance(key, str) or len(key) > 32 or not _ULIMIT_NAME_RE.fullmatch(key):
            errors.append("service %r: ulimit name %s must be lower-case letters (for example memlock or stack)" % (name, show(key)))
            continue
        if isinstance(value, dict):
            if set(value) != {"soft", "hard"} or not all(_ulimit_value(v) for v in value.values()):
                errors.append("service %r: ulimit %s must be a number or a mapping with exactly soft and hard numbers, not %s"
                              % (name, key, show(value)))
                continue
            soft, hard = int(value["soft"]), int(value["hard"])
            if hard != -1 and (soft == -1 or soft > hard):
                errors.append("service %r: ulimit %s: soft %d is above hard %d" % (name, key, soft, hard))
                continue
            out[key] = {"soft": soft, "hard": hard}
        elif _ulimit_value(value):
            out[key] = int(value)
        else:
            errors.append("service %r: ulimit %s=%s is not a number from -1 (unlimited) to %d" % (name, key, show(value), MAX_INT64))
    return out


def _check_device_id(name: str, raw: t.Any, errors: list[str]) -> None:
    """What any device id must be, facts or not: a small index, or a short printable-ASCII string."""
    if isinstance(raw, bool) or not isinstance(raw, (int, str)):
        errors.append("service %r: device_ids: %s is %s, not a GPU index or a device name" % (name, show(raw), type(raw).__name__))
    elif isinstance(raw, int):
        if not 0 <= raw < MAX_GPUS:
            errors.append("service %r: device_ids: %r is not a GPU index (0 to %d)" % (name, raw, MAX_GPUS - 1))
    elif not raw.strip() or len(raw) > 256 or bad_character(raw) or raw != raw.strip():
        errors.append("service %r: device_ids: %s is not a GPU index, a GPU-/MIG- UUID, a G:M MIG reference or a CDI "
                      "device name" % (name, show(raw)))
    else:
        text = raw.strip()
        mig = _MIG_REF_RE.fullmatch(text)
        if (_INDEX_RE.fullmatch(text) and int(text) >= MAX_GPUS) or (mig and max(int(mig.group(1)), int(mig.group(2))) >= MAX_GPUS):
            errors.append("service %r: device_ids: %r names a GPU or MIG device beyond any host (at most %d)" % (name, raw, MAX_GPUS))


def _check_environment(name: str, environment: t.Any, errors: list[str]) -> None:
    if not isinstance(environment, dict):
        errors.append("service %r: environment must be a mapping of names to values, not %s" % (name, show(environment)))
        return
    for key, value in environment.items():
        if not isinstance(key, str) or len(key) > 256 or not _ENV_NAME_RE.fullmatch(key):
            errors.append("service %r: environment variable name %s is not valid" % (name, show(key)))
            continue
        if isinstance(value, (dict, list, tuple, set)):
            errors.append("service %r: environment %s: the value %s is a %s; give a string, number or boolean"
                          % (name, key, show(value), type(value).__name__))
        elif value is not None and not isinstance(value, (str, int, float, bool)):
            errors.append("service %r: environment %s: the value %s is not a string, number or boolean" % (name, key, show(value)))
        elif isinstance(value, str) and (len(value) > MAX_ENV_VALUE or bad_character(value, ascii_only=False)):
            errors.append("service %r: environment %s: the value %s %s" % (
                name, key, show(value), bad_character(value, ascii_only=False) or "is longer than %d characters" % MAX_ENV_VALUE))
        elif isinstance(value, float) and math.isnan(value):
            errors.append("service %r: environment %s: the value %r is not a number" % (name, key, value))


def _validate_service(svc: dict[str, t.Any], strategy: str, errors: list[str]) -> None:
    name = svc.get("name")
    if not isinstance(name, str) or len(name) > MAX_NAME or not _SERVICE_NAME_RE.fullmatch(name):
        errors.append("service name %s is not a valid compose service name (letters, digits, '.', '_' and '-', at most %d)"
                      % (show(name), MAX_NAME))
        return
    count = svc.get("count")
    ids = svc.get("device_ids")
    if count is not None and ids:
        errors.append("service %r: count and device_ids are mutually exclusive; give one of them" % name)
    if count is not None and not (count == "all" or (isinstance(count, int) and not isinstance(count, bool) and count >= 1)):
        if isinstance(count, str) and _INDEX_RE.fullmatch(count) and int(count) >= 1:
            svc["count"] = count = int(count)
        else:
            errors.append("service %r: count must be a positive number or 'all', not %s" % (name, show(count)))
    if isinstance(count, int) and not isinstance(count, bool) and count > MAX_GPUS:
        errors.append("service %r: count %d is more GPUs than any host has (at most %d)" % (name, count, MAX_GPUS))
    if (svc.get("driver") or "nvidia") == "cdi" and isinstance(count, int) and not isinstance(count, bool) and strategy == "explicit":
        errors.append("service %r: count %d does not go with driver cdi, which names devices: give device_ids, or count 'all'"
                      % (name, count))
    if ids is not None and not isinstance(ids, list):
        errors.append("service %r: device_ids must be a list, not %s" % (name, show(ids)))
    elif ids:
        if len(ids) > MAX_GPUS * 8:
            errors.append("service %r: device_ids has %d items, more than any host has devices" % (name, len(ids)))
        else:
            for raw in ids:
                _check_device_id(name, raw, errors)
    if strategy != "explicit":
        if ids:
            errors.append("service %r: device_ids only go with strategy explicit; strategy %s places by count" % (name, strategy))
        if count == "all":
            errors.append("service %r: count 'all' only goes with strategy explicit, not %s" % (name, strategy))
    if strategy == "pack" and svc.get("memory_mib") is None:
        errors.append("service %r: strategy pack needs memory_mib, the GPU memory the service needs" % name)
    memory = svc.get("memory_mib")
    if memory is not None and (isinstance(memory, bool) or not isinstance(memory, int) or memory < 1):
        errors.append("service %r: memory_mib must be a positive number of MiB, not %s" % (name, show(memory)))
    elif memory is not None and memory > MAX_MEMORY_MIB:
        errors.append("service %r: memory_mib %d is more memory than any GPU has (at most %d)" % (name, memory, MAX_MEMORY_MIB))
    driver = svc.get("driver") or "nvidia"
    if driver not in DRIVERS:
        errors.append("service %r: driver %r is not one of %s" % (name, driver, ", ".join(DRIVERS)))
    for cap in svc.get("capabilities") or []:
        if cap not in CAPABILITIES:
            errors.append("service %r: unknown capability %r (known: %s)" % (name, cap, ", ".join(CAPABILITIES)))
    for preset in svc.get("environment_presets") or []:
        if preset not in PRESETS:
            errors.append("service %r: unknown environment preset %r (known: %s)" % (name, preset, ", ".join(sorted(PRESETS))))
    _check_environment(name, svc.get("environment") or {}, errors)
    ipc = svc.get("ipc")
    if ipc is not None and (not isinstance(ipc, str) or len(ipc) > MAX_NAME or not _IPC_RE.fullmatch(ipc)):
        errors.append("service %r: ipc %s must be host, private, shareable, none, service:NAME or container:NAME" % (name, show(ipc)))
    shm = svc.get("shm_size")
    if shm is not None and not _check_size(shm):
        errors.append("service %r: shm_size %s must be a byte count or a size such as 8g or 512m" % (name, show(shm)))
    ulimits = svc.get("ulimits")
    if ulimits is not None and not isinstance(ulimits, dict):
        errors.append("service %r: ulimits must be a mapping such as {memlock: -1, stack: 67108864}, not %s" % (name, show(ulimits)))
    elif ulimits:
        _normalise_ulimits(name, ulimits, errors)
    runtime = svc.get("runtime")
    if runtime is not None and (not isinstance(runtime, str) or len(runtime) > MAX_NAME or not _RUNTIME_RE.fullmatch(runtime)):
        errors.append("service %r: runtime must be a runtime name such as nvidia (letters, digits, '.', '_' and '-'), not %s"
                      % (name, show(runtime)))


# --------------------------------------------------------------------------------------------------- device ids


class _Resolver:
    """Turns device ids into facts-backed units, naming ids that are not on the host."""

    def __init__(self, facts: dict[str, t.Any] | None, warnings: list[str]):
        self.facts = facts
        self.warnings = warnings
        self.gpus = _gpu_schema.gpus(facts)
        self.by_index = {g["index"]: g for g in self.gpus if g.get("index") is not None}
        self.by_uuid = {str(g["uuid"]).lower(): g for g in self.gpus if g.get("uuid")}
        self.mig_by_uuid: dict[str, tuple[dict[str, t.Any], int]] = {}
        for gpu in self.gpus:
            for pos, mig in enumerate(gpu.get("mig_devices") or []):
                if isinstance(mig, dict) and mig.get("uuid"):
                    self.mig_by_uuid[str(mig["uuid"]).lower()] = (gpu, pos)

    def _gpu_unit(self, gpu: dict[str, t.Any], service: str, raw: t.Any) -> Unit:
        why = _gpu_schema.container_unusable(gpu)
        if why:
            raise ComposeError("service %r: device id %r: %s" % (service, raw, why))
        if _gpu_schema.mig_on(gpu):
            migs = [m for m in gpu.get("mig_devices") or [] if isinstance(m, dict)]
            names = ", ".join("%s:%d%s" % (gpu["index"], pos, " (%s)" % m["uuid"] if m.get("uuid") else "")
                              for pos, m in enumerate(migs))
            raise ComposeError(
                "service %r: device id %r: %s has MIG enabled, and a whole GPU with MIG on is not placed (a container "
                "given it sees no CUDA device); ask for its MIG devices instead: %s"
                % (service, raw, _gpu_schema.gpu_label(gpu), names or "none exist yet, create MIG instances first")
            )
        return Unit(gpu["index"], gpu.get("uuid"), str(gpu["index"]), gpu.get("memory_total_mib"), gpu.get("name"))

    def _mig_unit(self, gpu: dict[str, t.Any], pos: int, service: str, raw: t.Any) -> Unit:
        why = _gpu_schema.container_unusable(gpu)
        if why:
            raise ComposeError("service %r: device id %r: %s" % (service, raw, why))
        if not _gpu_schema.mig_on(gpu):
            raise ComposeError(
                "service %r: device id %r is a MIG device, but %s does not have MIG enabled" % (service, raw, _gpu_schema.gpu_label(gpu))
            )
        migs = gpu.get("mig_devices") or []
        if pos >= len(migs):
            raise ComposeError(
                "service %r: device id %r: %s has %d MIG device(s), so there is no MIG device %d"
                % (service, raw, _gpu_schema.gpu_label(gpu), len(migs), pos)
            )
        mig = migs[pos]
        return Unit(gpu["index"], mig.get("uuid"), "%s:%s" % (gpu["index"], pos), mig.get("memory_mib"), mig.get("profile"), True)

    def resolve(self, service: str, raw: t.Any) -> Unit:
        text = str(raw).strip()
        if isinstance(raw, bool) or not text:
            raise ComposeError("service %r: device id %r is not a GPU index, a GPU-/MIG- UUID or a G:M MIG reference" % (service, raw))
        if isinstance(raw, int) or _INDEX_RE.fullmatch(text):
            index = int(text)
            if index not in self.by_index:
                raise ComposeError(
                    "service %r: device id %s is not on this host (GPU indices here: %s)" % (service, index, self._indices())
                )
            return self._gpu_unit(self.by_index[index], service, raw)
        match = _MIG_REF_RE.fullmatch(text)
        if match:
            index = int(match.group(1))
            if index not in self.by_index:
                raise ComposeError(
                    "service %r: device id %r names GPU %s, which is not on this host (GPU indices here: %s)"
                    % (service, text, index, self._indices())
                )
            return self._mig_unit(self.by_index[index], int(match.group(2)), service, text)
        if _GPU_UUID_RE.fullmatch(text):
            gpu = self.by_uuid.get(text.lower())
            if gpu is None:
                raise ComposeError("service %r: device id %s is not on this host (no GPU has that UUID)" % (service, text))
            return self._gpu_unit(gpu, service, text)
        if _MIG_UUID_RE.fullmatch(text):
            found = self.mig_by_uuid.get(text.lower())
            if found is None:
                raise ComposeError("service %r: device id %s is not on this host (no MIG device has that UUID)" % (service, text))
            return self._mig_unit(found[0], found[1], service, text)
        raise ComposeError("service %r: device id %r is not a GPU index, a GPU-/MIG- UUID or a G:M MIG reference" % (service, raw))

    def _indices(self) -> str:
        return ", ".join(str(i) for i in sorted(self.by_index)) or "none"

    def placeable(self) -> list[Unit]:
        """Whole GPUs that the placement strategies may hand out: usable, and MIG off."""
        units = []
        for index in sorted(self.by_index):
            gpu = self.by_index[index]
            if _gpu_schema.container_unusable(gpu) or _gpu_schema.mig_on(gpu):
                continue
            units.append(Unit(index, gpu.get("uuid"), str(index), gpu.get("memory_total_mib"), gpu.get("name")))
        return units


# --------------------------------------------------------------------------------------------------- placement


def _fits(unit: Unit, need: int | None) -> bool:
    return need is None or (unit.memory_mib is not None and unit.memory_mib >= need)


def _describe(units: list[Unit]) -> str:
    return ", ".join(
        "%s%s" % (u.index_id, " (%s MiB)" % u.memory_mib if u.memory_mib is not None else "") for u in units
    ) or "none"


def place(strategy: str, services: list[dict[str, t.Any]], units: list[Unit]) -> dict[str, list[Unit]]:
    """Assign whole GPUs to services by strategy. Raises ComposeError naming the shortfall."""
    if strategy == "spread":
        return _spread(services, units)
    if strategy == "pack":
        return _pack(services, units)
    if strategy == "exclusive":
        return _exclusive(services, units)
    raise ComposeError("unknown strategy %r" % strategy)


def _count(svc: dict[str, t.Any]) -> int:
    count = svc.get("count")
    return 1 if count is None else int(count)


def _spread(services: list[dict[str, t.Any]], units: list[Unit]) -> dict[str, list[Unit]]:
    out: dict[str, list[Unit]] = {}
    cursor = 0
    for svc in services:
        need, memory = _count(svc), svc.get("memory_mib")
        fitting = [u for u in units if _fits(u, memory)]
        if need > len(fitting):
            raise ComposeError(
                "strategy spread: service %r needs %d GPU(s)%s but the host has %d that fit (%s); short by %d"
                % (svc["name"], need, " with %d MiB" % memory if memory else "", len(fitting), _describe(units), need - len(fitting))
            )
        chosen: list[Unit] = []
        step = 0
        while len(chosen) < need:
            unit = units[(cursor + step) % len(units)]
            step += 1
            if _fits(unit, memory) and unit not in chosen:
                chosen.append(unit)
        cursor = (cursor + step) % len(units)
        out[svc["name"]] = sorted(chosen, key=lambda u: u.gpu_index)
    return out


def _pack(services: list[dict[str, t.Any]], units: list[Unit]) -> dict[str, list[Unit]]:
    free = {u.index_id: u.memory_mib or 0 for u in units}
    out: dict[str, list[Unit]] = {}
    # First fit decreasing: the biggest requests choose first; ties keep the request order.
    order = sorted(range(len(services)), key=lambda i: (-int(services[i]["memory_mib"]), i))
    for i in order:
        svc = services[i]
        need, memory = _count(svc), int(svc["memory_mib"])
        candidates = [u for u in units if free[u.index_id] >= memory]
        if len(candidates) < need:
            raise ComposeError(
                "strategy pack: service %r needs %d GPU(s) with %d MiB free each, but only %d GPU(s) have that much left "
                "(free MiB per GPU after the larger requests: %s); short by %d"
                % (svc["name"], need, memory, len(candidates),
                   ", ".join("%s: %d" % (u.index_id, free[u.index_id]) for u in units) or "none", need - len(candidates))
            )
        # Best fit: the GPU with the least room that still fits, so big GPUs stay free for big requests.
        chosen = sorted(candidates, key=lambda u: (free[u.index_id], u.gpu_index))[:need]
        for unit in chosen:
            free[unit.index_id] -= memory
        out[svc["name"]] = sorted(chosen, key=lambda u: u.gpu_index)
    return {svc["name"]: out[svc["name"]] for svc in services}


def _exclusive(services: list[dict[str, t.Any]], units: list[Unit]) -> dict[str, list[Unit]]:
    total = sum(_count(s) for s in services)
    if total > len(units):
        raise ComposeError(
            "strategy exclusive: services %s need %d GPU(s) of their own, but the host has %d GPU(s) that containers can "
            "use (%s); short by %d"
            % (", ".join(s["name"] for s in services), total, len(units), _describe(units), total - len(units))
        )
    taken: set[str] = set()
    out: dict[str, list[Unit]] = {}
    order = sorted(range(len(services)), key=lambda i: (-(services[i].get("memory_mib") or 0), i))
    for i in order:
        svc = services[i]
        need, memory = _count(svc), svc.get("memory_mib")
        candidates = [u for u in units if u.index_id not in taken and _fits(u, memory)]
        if len(candidates) < need:
            raise ComposeError(
                "strategy exclusive: service %r needs %d GPU(s) of its own%s, but only %d are left that fit (%s); short by %d"
                % (svc["name"], need, " with %d MiB" % memory if memory else "", len(candidates), _describe(candidates),
                   need - len(candidates))
            )
        # With a memory need, the smallest GPU that fits (big GPUs stay free for big needs); without, index order.
        chosen = sorted(candidates, key=lambda u: ((u.memory_mib or 0) if memory else 0, u.gpu_index))[:need]
        taken.update(u.index_id for u in chosen)
        out[svc["name"]] = sorted(chosen, key=lambda u: u.gpu_index)
    return {svc["name"]: out[svc["name"]] for svc in services}


# --------------------------------------------------------------------------------------------------- VM mode


def vm_resources(facts: dict[str, t.Any] | None) -> tuple[list[str], list[dict[str, t.Any]]]:
    """Device mappings and read-only library mounts for VM mode, from the facts only. Raises naming what is missing."""
    if not facts:
        raise ComposeError("vm_mode needs the nvidia_gpu facts (device nodes, driver version, library paths); none were given")
    missing = []
    driver = facts.get("driver") if isinstance(facts.get("driver"), dict) else {}
    version = driver.get("library_version") or driver.get("version")
    if not version:
        missing.append("the driver version (nvidia_gpu.driver.version)")
    elif not isinstance(version, str) or not _VERSION_RE.fullmatch(version):
        missing.append("a driver version such as 580.65.06 (the facts say %s)" % show(version))
    paths = library_paths(facts)
    files = driver.get("library_files")
    libs: dict[str, tuple[str, str | None]] = {}
    for soname, keys in LIBRARY_KEYS.items():
        path = next((paths[k] for k in keys if paths.get(k)), None)
        # The file the soname resolves to, where the facts say (older facts do not): a distribution may link
        # /lib/libcuda.so.1 to a file in another directory, where the versioned name beside the link does not exist.
        real = files.get(keys[0]) if isinstance(files, dict) else None
        if not path:
            missing.append("the path of %s (nvidia_gpu.driver.library_paths.%s)" % (soname, keys[0]))
        elif not _plain_abs_path(path):
            missing.append("an absolute path of %s (the facts say %s)" % (soname, show(path)))
        elif real is not None and not _plain_abs_path(real):
            missing.append("an absolute path of the file %s resolves to (nvidia_gpu.driver.library_files.%s says %s)"
                           % (soname, keys[0], show(real)))
        else:
            libs[soname] = (path, real)
    listed = facts.get("device_nodes") if isinstance(facts.get("device_nodes"), list) else []
    nodes = [n for n in listed if isinstance(n, str) and n.startswith("/dev/nvidia")]
    strange = [n for n in nodes if not _DEVICE_NODE_RE.fullmatch(n) or "/../" in n + "/" or "/./" in n + "/"]
    if strange:
        missing.append("device nodes that are /dev/nvidia* paths (the facts list %s)" % ", ".join(show(n) for n in strange))
    elif not nodes:
        missing.append("the /dev/nvidia* device nodes (nvidia_gpu.device_nodes is empty)")
    if missing:
        raise ComposeError("vm_mode: the facts lack %s; refusing to guess" % "; ".join(missing))
    devices = ["%s:%s" % (n, n) for n in nodes]
    volumes = []
    for soname, (path, real) in libs.items():
        directory = os.path.dirname(path)
        base = soname.rsplit(".so", 1)[0]
        volumes.append({"type": "bind", "source": path, "target": path, "read_only": True})
        # The versioned file goes beside the soname in the container, wherever it is on the host.
        versioned = os.path.join(directory, os.path.basename(real) if real else "%s.so.%s" % (base, version))
        if versioned != path:
            volumes.append({"type": "bind", "source": real or versioned, "target": versioned, "read_only": True})
    return devices, volumes


def _plain_abs_path(path: t.Any) -> bool:
    """An absolute path without control characters, whitespace, ``.`` or ``..`` parts, at most 4096 characters."""
    return (isinstance(path, str) and os.path.isabs(path) and not bad_character(path) and not any(c.isspace() for c in path)
            and not any(part in (".", "..") for part in path.split("/")) and len(path) <= 4096)


# --------------------------------------------------------------------------------------------------- build


def _driver_capabilities(caps: list[str]) -> str:
    wanted = [c for c in DRIVER_CAPABILITIES if c in caps]
    return ",".join(wanted) if wanted else DEFAULT_DRIVER_CAPABILITIES


def _reservation(svc: dict[str, t.Any], caps: list[str], ids: list[str] | None, cdi_kind: str) -> dict[str, t.Any]:
    driver = svc.get("driver") or "nvidia"
    entry: dict[str, t.Any] = {"driver": driver, "capabilities": caps}
    count = svc.get("count")
    if driver == "cdi":
        if ids is None:
            # CDI has no count: all devices, or the explicit list.
            entry["device_ids"] = ["%s=all" % cdi_kind]
        else:
            entry["device_ids"] = [i if _CDI_NAME_RE.fullmatch(i) else "%s=%s" % (cdi_kind, i) for i in ids]
    elif ids is not None:
        entry["device_ids"] = ids
    else:
        entry["count"] = "all" if count in (None, "all") else int(count)
    return entry


def _request_errors(strategy: t.Any, id_format: t.Any, cdi_kind: t.Any, services: list[dict[str, t.Any]],
                    request_form: t.Any = "deploy", base_requests: t.Any = "refuse") -> list[str]:
    """What is wrong with a request before any GPU facts are looked at (``services`` are the caller's copies: a count
    given as digits becomes an integer)."""
    errors: list[str] = []
    if request_form not in REQUEST_FORMS:
        errors.append("request_form %r is not one of %s" % (request_form, ", ".join(REQUEST_FORMS)))
    if base_requests not in BASE_REQUEST_POLICIES:
        errors.append("base_requests %r is not one of %s" % (base_requests, ", ".join(BASE_REQUEST_POLICIES)))
    if strategy not in STRATEGIES:
        errors.append("strategy %r is not one of %s" % (strategy, ", ".join(STRATEGIES)))
    if id_format not in ID_FORMATS:
        errors.append("id_format %r is not one of %s" % (id_format, ", ".join(ID_FORMATS)))
    if not re.fullmatch(r"[a-z0-9][a-z0-9.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*", str(cdi_kind)):
        errors.append("cdi_kind %r is not a CDI kind such as nvidia.com/gpu" % cdi_kind)
    if not services:
        errors.append("no services given")
    elif len(services) > 256:
        errors.append("services: %d services in one override; at most 256" % len(services))
        return errors
    seen: set[str] = set()
    for svc in services:
        _validate_service(svc, str(strategy), errors)
        if svc.get("name") in seen:
            errors.append("service %r is listed twice" % svc["name"])
        seen.add(svc.get("name"))
    return errors


def request_errors(request: t.Mapping[str, t.Any]) -> list[str]:
    """Every problem of a request (``strategy``, ``id_format``, ``cdi_kind``, ``services``) that no GPU facts can
    change, as :func:`build` reports them: the gpu_compose role asks before it installs anything. A service that is not
    a mapping is reported, not raised."""
    services = request.get("services")
    if not isinstance(services, list):
        return ["services must be a list of services, not %s" % show(services)]
    bad = [show(s) for s in services if not isinstance(s, t.Mapping)]
    if bad:
        return ["services: %s is not a service (a mapping with a name)" % bad[0]]
    copies = []
    for svc in services:
        copy = dict(svc)
        # The module's argument spec turns digits into an int (memory_mib: int); so does this check.
        if isinstance(copy.get("memory_mib"), str) and copy["memory_mib"].isdigit() and copy["memory_mib"].isascii():
            copy["memory_mib"] = int(copy["memory_mib"])
        copies.append(copy)
    return _request_errors(request.get("strategy") or "explicit", request.get("id_format") or "uuid",
                           request.get("cdi_kind") or DEFAULT_CDI_KIND, copies,
                           request.get("request_form") or "deploy", request.get("base_requests") or "refuse")


def build(request: dict[str, t.Any], facts: dict[str, t.Any] | None) -> Plan:
    """Validate the request, place the services, and return their compose entries."""
    plan = Plan()
    strategy = request.get("strategy") or "explicit"
    id_format = request.get("id_format") or "uuid"
    vm_mode = bool(request.get("vm_mode"))
    cdi_kind = request.get("cdi_kind") or DEFAULT_CDI_KIND
    form = request.get("request_form") or "deploy"
    replace = (request.get("base_requests") or "refuse") == "replace"
    services = [dict(s) for s in request.get("services") or []]
    facts = facts or None

    errors = _request_errors(strategy, id_format, cdi_kind, services, form, "replace" if replace else "refuse")
    if len(services) > 256:
        raise ComposeError("; ".join(errors))
    if strategy != "explicit" and not facts:
        errors.append("strategy %s places services from the GPU facts, and none were given" % strategy)
    errors.extend(facts_errors(facts))
    if errors:
        raise ComposeError("; ".join(errors))

    vm_devices: list[str] = []
    vm_volumes: list[dict[str, t.Any]] = []
    if vm_mode:
        vm_devices, vm_volumes = vm_resources(facts)

    resolver = _Resolver(facts, plan.warnings)
    selected: dict[str, list[tuple[Unit | None, str]] | None] = {}
    if strategy == "explicit":
        usable = resolver.placeable() if facts else []
        if not facts and any(s.get("device_ids") for s in services):
            plan.warnings.append("no GPU facts were given, so device ids are written as given and not checked against the host")
        for svc in services:
            name = svc["name"]
            ids = svc.get("device_ids") or []
            if not ids:
                count = svc.get("count")
                if facts and isinstance(count, int) and count > len(usable):
                    raise ComposeError(
                        "service %r asks for %d GPU(s) but the host has %d that containers can use (%s); short by %d"
                        % (name, count, len(usable), _describe(usable), count - len(usable))
                    )
                selected[name] = None
                continue
            selected[name] = [_explicit_id(resolver, svc, raw, id_format, cdi_kind, bool(facts)) for raw in ids]
    else:
        placed = place(strategy, services, resolver.placeable())
        selected.update({name: [(u, u.ident(id_format)) for u in units] for name, units in placed.items()})

    for svc in services:
        name = svc["name"]
        pairs = selected.get(name)
        ids: list[str] | None = None
        units: list[Unit] | None = None
        if pairs is not None:
            ids = list(dict.fromkeys(text for _unit, text in pairs))
            units = list({u.index_id: u for u, _text in pairs if u is not None}.values()) if all(u for u, _text in pairs) else None
            for unit, _text in pairs:
                if unit is not None and id_format == "uuid" and not unit.uuid:
                    plan.warnings.append(
                        "service %r: the facts have no UUID for device %s, so it is named by index" % (name, unit.index_id)
                    )
        plan.services[name] = entry = _service_entry(svc, ids, units, vm_mode, vm_devices, vm_volumes, cdi_kind,
                                                     form, replace)
        reserved = {} if vm_mode else gpu_requests(entry)[0]
        if "device_ids" in reserved:
            plan.assignment[name] = list(reserved["device_ids"])  # what the file holds (CDI names for driver cdi)
        else:
            plan.assignment[name] = ids if ids is not None else (["all"] if svc.get("count") in (None, "all") else [])
    return plan


def _explicit_id(
    resolver: _Resolver, svc: dict[str, t.Any], raw: t.Any, id_format: str, cdi_kind: str, have_facts: bool
) -> tuple[Unit | None, str]:
    """One requested device id: the unit it names (when the facts say) and the id to write."""
    name = svc["name"]
    text = str(raw).strip()
    if _CDI_NAME_RE.fullmatch(text):
        if (svc.get("driver") or "nvidia") != "cdi":
            raise ComposeError("service %r: %s is a CDI device name; set driver: cdi to use it" % (name, text))
        return (_cdi_unit(resolver, name, text, cdi_kind) if have_facts else None), text
    if have_facts:
        unit = resolver.resolve(name, raw)
        return unit, unit.ident(id_format)
    if isinstance(raw, bool) or not (_INDEX_RE.fullmatch(text) or _MIG_REF_RE.fullmatch(text) or _GPU_UUID_RE.fullmatch(text)
                                     or _MIG_UUID_RE.fullmatch(text)):
        raise ComposeError("service %r: device id %r is not a GPU index, a GPU-/MIG- UUID or a G:M MIG reference" % (name, raw))
    return None, text


def _cdi_unit(resolver: _Resolver, service: str, raw: str, cdi_kind: str) -> Unit | None:
    """A CDI name of our kind whose device part is an index, UUID or G:M is checked against the facts."""
    kind, _sep, device = raw.partition("=")
    if kind != cdi_kind or device == "all":
        return None
    if _INDEX_RE.fullmatch(device) or _MIG_REF_RE.fullmatch(device) or _GPU_UUID_RE.fullmatch(device) or _MIG_UUID_RE.fullmatch(device):
        return resolver.resolve(service, device)
    return None


def _service_entry(
    svc: dict[str, t.Any],
    ids: list[str] | None,
    units: list[Unit] | None,
    vm_mode: bool,
    vm_devices: list[str],
    vm_volumes: list[dict[str, t.Any]],
    cdi_kind: str,
    form: str = "deploy",
    replace: bool = False,
) -> dict[str, t.Any]:
    caps = list(dict.fromkeys(svc.get("capabilities") or ["gpu"]))
    driver = svc.get("driver") or "nvidia"
    entry: dict[str, t.Any] = {}
    env: dict[str, str] = {}
    for preset in svc.get("environment_presets") or []:
        env.update(PRESETS[preset])
        if preset == "nvidia":
            env["NVIDIA_DRIVER_CAPABILITIES"] = _driver_capabilities(caps)

    # Visible devices, consistent with the reservation. UUIDs mean the same GPU inside and outside the container.
    visible = _visible_devices(svc, ids, units, vm_mode)
    env.update(visible)

    if vm_mode:
        entry["privileged"] = True
        entry["devices"] = list(vm_devices)
        entry["volumes"] = [dict(v) for v in vm_volumes]
        env["NVIDIA_DRIVER_CAPABILITIES"] = "all"
        env["NVIDIA_DISABLE_REQUIRE"] = "1"
    else:
        requested = [_reservation(svc, caps, ids, cdi_kind)]
        ours = Tagged("!override", requested) if replace else requested
        reset = Tagged("!reset", [])
        if form == "gpus":
            entry["gpus"] = ours
            if replace:
                entry["deploy"] = {"resources": {"reservations": {"devices": reset}}}
        else:
            entry["deploy"] = {"resources": {"reservations": {"devices": ours}}}
            if replace:
                entry["gpus"] = reset
        if driver == "cdi":
            env.pop("NVIDIA_VISIBLE_DEVICES", None)

    for key, value in (svc.get("environment") or {}).items():
        env[str(key)] = _env_value(value)
    if env:
        entry["environment"] = dict(sorted(env.items()))
    if svc.get("ipc") is not None:
        entry["ipc"] = str(svc["ipc"])
    if svc.get("shm_size") is not None:
        shm = svc["shm_size"]
        entry["shm_size"] = shm if isinstance(shm, int) else str(shm).strip()
    if svc.get("ulimits"):
        errors: list[str] = []
        entry["ulimits"] = _normalise_ulimits(svc["name"], svc["ulimits"], errors)
        if errors:
            raise ComposeError("; ".join(errors))
    if svc.get("runtime"):
        entry["runtime"] = svc["runtime"].strip()
    return entry


def _untagged(value: t.Any) -> t.Any:
    """What a merge tag leaves of a value: a reset is nothing, an override its value."""
    if isinstance(value, Tagged):
        return None if value.tag == "!reset" else value.value
    return value


def gpu_requests(entry: t.Any) -> list[t.Any]:
    """The GPU requests a service entry makes, in either form (the service-level gpus attribute as a list; ``all``
    as one request for every GPU); [] for none. A reset (!reset) is none; an !override is read through."""
    entry = _untagged(entry)
    if not isinstance(entry, dict):
        return []
    found: list[t.Any] = []
    gpus = _untagged(entry.get("gpus"))
    if gpus == "all":
        found.append({"count": "all"})
    elif isinstance(gpus, list):
        found.extend(gpus)
    devices = _untagged(entry.get("deploy"))
    for key in ("resources", "reservations", "devices"):
        devices = _untagged(devices.get(key)) if isinstance(devices, dict) else None
    if isinstance(devices, list):
        found.extend(devices)
    return found


def base_request_errors(documents: t.Iterable[tuple[str, t.Any]], names: t.Iterable[str]) -> list[str]:
    """For base_requests=refuse: every managed service that a project's own compose file (``documents``: its path and
    parsed content) already gives GPUs, naming the file, the service, the request and the two ways out."""
    errors = []
    wanted = set(names)
    for source, document in documents:
        services = document.get("services") if isinstance(document, dict) else None
        for name in sorted(wanted & set(services or {})) if isinstance(services, dict) else []:
            requests = gpu_requests(services[name])
            if requests:
                errors.append(
                    "service %r: the project's compose file %s already requests GPUs (%s); Compose appends the "
                    "override's request to it, so the service would get more GPUs than the override grants. Remove "
                    "the request from %s, or set base_requests: replace (written with !override/!reset, which needs "
                    "Docker Compose 2.24.4 or later)" % (name, source, show(plain(requests)), source))
    return errors


def _visible_devices(svc: dict[str, t.Any], ids: list[str] | None, units: list[Unit] | None, vm_mode: bool) -> dict[str, str]:
    count = svc.get("count")
    if ids is None:
        if count in (None, "all"):
            return {"NVIDIA_VISIBLE_DEVICES": "all"}
        # A bare count lets the engine choose the GPUs; it sets NVIDIA_VISIBLE_DEVICES itself.
        return {}
    env = {"NVIDIA_VISIBLE_DEVICES": ",".join(ids)}
    if units and all(u.uuid for u in units) and len(units) == len(ids):
        env["CUDA_VISIBLE_DEVICES"] = ",".join(u.uuid for u in units if u.uuid)
    elif units and len(units) == len(ids):
        if vm_mode:
            # Every GPU is visible in VM mode, so host indices in PCI bus order name the right ones.
            env["CUDA_VISIBLE_DEVICES"] = ",".join(u.index_id for u in units)
            env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
        else:
            # The container only sees its own devices, numbered from 0.
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(len(units)))
    return env


def _env_value(value: t.Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    return str(value)


# --------------------------------------------------------------------------------------------------- document


def merge(existing: t.Any, services: dict[str, dict[str, t.Any]], prune: bool = False, source: str = "") -> dict[str, t.Any]:
    """The new override document: the managed services replaced, everything else kept (unless prune).

    ``source`` names the existing file in errors.
    """
    if existing is None:
        existing = {}
    current = _existing_services(existing, source)
    document = {} if prune else {k: v for k, v in existing.items() if k != "services"}
    merged = {} if prune else {k: v for k, v in current.items() if k not in services}
    merged.update(services)
    document["services"] = dict(sorted(merged.items()))
    return document


def _existing_services(existing: t.Any, source: str) -> dict[str, t.Any]:
    """The services mapping of an existing override document; ComposeError naming the file when it is not one."""
    where = " (%s)" % source if source else ""
    if not isinstance(existing, dict):
        raise ComposeError("the existing override file is not a compose mapping%s: it holds a %s; fix or remove it"
                           % (where, type(existing).__name__))
    current = existing.get("services") or {}
    if not isinstance(current, dict):
        raise ComposeError("the existing override file's services key is not a mapping%s: it holds a %s; fix or remove it"
                           % (where, type(current).__name__))
    return current


def unmanaged(existing: t.Any, services: dict[str, t.Any]) -> list[str]:
    """Services in the existing document that this request does not manage."""
    current = existing.get("services") if isinstance(existing, dict) else None
    return sorted(k for k in (current or {}) if k not in services)


class Tagged(list):
    """A value carrying one of Compose's merge tags (``!override``, ``!reset``): a list for sequences, so code that
    reads requests reads it as one; ``value`` holds a mapping or scalar. Equal only to the same tag and value, so an
    override file that lost or gained a tag is a change."""

    TAGS = ("!override", "!reset")

    def __init__(self, tag: str, value: t.Any) -> None:
        super().__init__(value if isinstance(value, list) else [])
        self.tag = tag
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Tagged) and other.tag == self.tag and other.value == self.value

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return "Tagged(%r, %r)" % (self.tag, self.value)


def plain(value: t.Any) -> t.Any:
    """``value`` without merge tags (a tagged value becomes its value), for results and messages."""
    if isinstance(value, Tagged):
        return plain(value.value)
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


if HAS_YAML:

    class _Dumper(yaml.SafeDumper):  # pylint: disable=too-many-ancestors
        """Block style with indented sequences, as people write compose files."""

        def increase_indent(self, flow: bool = False, indentless: bool = False) -> t.Any:
            return super().increase_indent(flow, False)

    def _represent_tagged(dumper: t.Any, data: Tagged) -> t.Any:
        value = data.value
        if isinstance(value, list):
            return dumper.represent_sequence(data.tag, value)
        if isinstance(value, dict):
            return dumper.represent_mapping(data.tag, value)
        return dumper.represent_scalar(data.tag, "null" if value is None else str(value))

    _Dumper.add_representer(Tagged, _represent_tagged)

    class _Loader(yaml.SafeLoader):  # pylint: disable=too-many-ancestors
        """YAML's safe loader that keeps Compose's merge tags (!override, !reset) on the values they mark."""

    def _construct_tagged(loader: t.Any, node: t.Any) -> Tagged:
        if isinstance(node, yaml.SequenceNode):
            value: t.Any = loader.construct_sequence(node, deep=True)
        elif isinstance(node, yaml.MappingNode):
            value = loader.construct_mapping(node, deep=True)
        else:
            value = yaml.SafeLoader.construct_yaml_null(loader, node) if node.value in ("", "null", "~") \
                else loader.construct_scalar(node)
        return Tagged(node.tag, value)

    for _tag in Tagged.TAGS:
        _Loader.add_constructor(_tag, _construct_tagged)


def parse(text: str, source: str = "") -> t.Any:
    """Load an existing override file (``source`` names it in errors). Raises ComposeError on YAML errors."""
    where = " (%s)" % source if source else ""
    if not HAS_YAML:
        raise ComposeError("PyYAML is needed to read the existing override file%s" % where)
    try:
        return yaml.load(text, Loader=_Loader) if text.strip() else None  # nosec B506: a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise ComposeError("the existing override file is not valid YAML%s: %s" % (where, exc)) from exc
    except RecursionError as exc:
        raise ComposeError("the existing override file nests too deeply to read%s" % where) from exc


def render(document: dict[str, t.Any]) -> str:
    """Deterministic YAML: sorted keys, block style, a fixed header."""
    if not HAS_YAML:
        raise ComposeError("PyYAML is needed to write the override file")
    body = yaml.dump(document, Dumper=_Dumper, default_flow_style=False, sort_keys=True, allow_unicode=True, width=120)
    return HEADER + "---\n" + body


def remove(existing: t.Any, names: t.Iterable[str], source: str = "") -> dict[str, t.Any]:
    """The override document without the services ``names``; every other service and top-level key is kept.

    A ``services`` mapping left empty goes. An empty result ({}) means the file holds nothing any more.
    """
    if existing is None:
        return {}
    current = _existing_services(existing, source)
    gone = set(names)
    document = {k: v for k, v in existing.items() if k != "services"}
    kept = {k: v for k, v in current.items() if k not in gone}
    if kept or ("services" in existing and not current and existing["services"] is not None):
        document["services"] = kept
    return document


def check_service_names(names: t.Iterable[t.Any]) -> list[str]:
    """Errors for names that are not compose service names."""
    return ["service name %r is not a valid compose service name (letters, digits, '.', '_' and '-', at most %d)"
            % (name, MAX_NAME) for name in names
            if not isinstance(name, str) or len(name) > MAX_NAME or not _SERVICE_NAME_RE.fullmatch(name)]


def absent(text: str | None, names: t.Iterable[str], path: str, record: t.Mapping[str, str | None]) -> tuple[t.Any, str | None]:
    """state=absent for one override file: the services ``names`` go, the user's bytes come back where nothing else
    changed.

    ``text`` is the file now (None: missing) and ``record`` the originals record (per file, its text before the
    module's first change). Returns the document left and the text the file must hold: None removes it; ``text``
    itself leaves it as it is; the recorded original, byte for byte, when what is left parses to it. Raises
    ComposeError for a file that is not a compose override.
    """
    existing = parse(text, path) if text is not None else None
    document = remove(existing, names, source=path)
    if text is None:
        return document, None
    original = record.get(path)
    if path in record and original is not None and parse(original, path) == (document or None):
        return document, original
    if not document:
        return document, None
    if document == existing:
        return document, text
    return document, render(document)
