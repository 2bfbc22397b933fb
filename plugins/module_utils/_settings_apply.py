# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The settings backends: read each GPU and apply a plan from _settings, through NVML or with nvidia-smi.

Private to this collection: no compatibility promise outside gpuhost.nvidia.

Two backends, each a read/apply pair: :class:`NvmlBackend` works in one NVML session (``_nvml.Session``: one
``nvmlInit`` for the read, the changes and the read after them) and :class:`SmiBackend` runs ``nvidia-smi``
argument lists. Each reads the facts records through its facts backend (_nvml, _smi) and, in the same pass, what
only the settings need (application clocks and the supported clock table, MIG profiles and instances) through that
backend's ``extend`` hook: one NVML pass, one parse of each ``nvidia-smi -q -x`` output. The locked clocks this
collection applied, which NVML cannot read back, come from the record. Command runners have the signature
``run(argv) -> (rc, out, err)``.
"""

from __future__ import annotations

import json
import re
import typing as t
import xml.etree.ElementTree as ET

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _nvml, _pci, _settings, _smi
from ansible_collections.gpuhost.nvidia.plugins.module_utils._common import (
    STATE_DRIVER_NOT_LOADED,
    STATE_ERROR,
    STATE_LIBRARY_NOT_FOUND,
    STATE_NO_GPU,
    STATE_OK,
    best_failure_state,
    to_text,
)

Runner = t.Callable[[t.List[str]], t.Tuple[int, str, str]]
Session = _nvml.Session

# GPU and compute instance ids are small: NVML hands out GPU instance ids below 16 and compute instance ids
# below 8 on every MIG-capable GPU so far. Both are probed by id, which the fake NVML and the real one share.
_MAX_GI_ID = 32
_MAX_CI_ID = 8


class ApplyError(Exception):
    """Applying one operation failed; ``done`` lists what was applied before it."""

    def __init__(self, message: str, done: list[str]):
        super().__init__(message)
        self.done = done


# -- reading --------------------------------------------------------------------------------------------------
def _clock_pair(collector: t.Any, label: str, func: str, handle: t.Any, nv: t.Any) -> dict[str, int] | None:
    memory = collector.call(label, func, handle, getattr(nv, "NVML_CLOCK_MEM", 2))
    graphics = collector.call(label, func, handle, getattr(nv, "NVML_CLOCK_GRAPHICS", 0))
    if memory is None or graphics is None:
        return None
    return {"memory_mhz": int(memory), "graphics_mhz": int(graphics)}


def _supported_clocks(collector: t.Any, label: str, handle: t.Any) -> dict[int, list[int]] | None:
    memories = collector.call(label, "nvmlDeviceGetSupportedMemoryClocks", handle)
    if not memories:
        return None
    table = {}
    for memory in memories:
        graphics = collector.call(label, "nvmlDeviceGetSupportedGraphicsClocks", handle, memory)
        table[int(memory)] = sorted((int(g) for g in graphics or []), reverse=True)
    return table


def _profile_name(info: t.Any) -> str | None:
    name = to_text(getattr(info, "name", None))
    if name:
        name = name.split("\x00", 1)[0]
    if name:
        return _settings.normalize_gi_profile(name)
    slices = getattr(info, "sliceCount", None)
    memory = getattr(info, "memorySizeMB", None)
    if slices is None or memory is None:
        return None
    return "%dg.%dgb" % (int(slices), int(round(int(memory) / 1024.0)))


def _mig_profiles(collector: t.Any, label: str, handle: t.Any, nv: t.Any) -> dict[str, dict[str, int]]:
    profiles: dict[str, dict[str, int]] = {}
    for index in range(int(getattr(nv, "NVML_GPU_INSTANCE_PROFILE_COUNT", 18))):
        info = collector.call(label, "nvmlDeviceGetGpuInstanceProfileInfo", handle, index)
        if info is None:
            continue
        name = _profile_name(info)
        if name and name not in profiles:
            profiles[name] = {
                "id": int(getattr(info, "id", index)),
                "slices": int(info.sliceCount),
                "memory_mib": int(getattr(info, "memorySizeMB", 0) or 0),
            }
    return profiles


def _mig_instances(
    collector: t.Any, label: str, handle: t.Any, profiles: t.Mapping[str, t.Mapping[str, int]], record: t.Mapping[str, t.Any]
) -> list[dict[str, t.Any]]:
    by_id = {p["id"]: (name, p["slices"]) for name, p in profiles.items()}
    device_names = {(d.get("gi"), d.get("ci")): d.get("profile") for d in record.get("mig_devices") or []}
    instances = []
    for gi_id in range(_MAX_GI_ID):
        gi = collector.call(label, "nvmlDeviceGetGpuInstanceById", handle, gi_id)
        if gi is None:
            continue
        info = collector.call(label, "nvmlGpuInstanceGetInfo", gi)
        gi_profile, gi_slices = by_id.get(getattr(info, "profileId", None), (None, None))
        cis = []
        for ci_id in range(_MAX_CI_ID):
            ci = collector.call(label, "nvmlGpuInstanceGetComputeInstanceById", gi, ci_id)
            if ci is None:
                continue
            ci_info = collector.call(label, "nvmlComputeInstanceGetInfo", ci)
            slices = _settings.SLICES_BY_CI_PROFILE.get(getattr(ci_info, "profileId", None))
            name = device_names.get((gi_id, ci_id))
            if slices is not None and gi_profile and gi_slices:
                name = _settings.ci_profile_name(slices, gi_profile, gi_slices)
            if gi_profile is None and name:
                gi_profile = parse_gi_from_ci(name)
            cis.append({"ci": ci_id, "profile": name})
        instances.append({"gi": gi_id, "profile": gi_profile, "compute_instances": cis})
    return instances


def parse_gi_from_ci(name: str) -> str | None:
    try:
        return _settings.parse_ci_profile(name, "")[1]
    except ValueError:
        return None


def _nvml_extra(nv: t.Any, handle: t.Any, record: t.Mapping[str, t.Any], reader: _nvml.Reader) -> dict[str, t.Any]:
    label = "GPU %s" % record["index"]
    extra: dict[str, t.Any] = {
        "applications_clocks": _clock_pair(reader, label, "nvmlDeviceGetApplicationsClock", handle, nv),
        "default_applications_clocks": _clock_pair(reader, label, "nvmlDeviceGetDefaultApplicationsClock", handle, nv),
        "supported_clocks": _supported_clocks(reader, label, handle),
        "mig_profiles": None,
        "mig_instances": None,
    }
    if (record.get("mig") or {}).get("current") is not None:
        extra["mig_profiles"] = _mig_profiles(reader, label, handle, nv)
        if record["mig"]["current"]:
            extra["mig_instances"] = _mig_instances(reader, label, handle, extra["mig_profiles"], record)
    return extra


def _mhz(elem: ET.Element | None, path: str) -> int | None:
    if elem is None:
        return None
    found = elem.find(path)
    if found is None or found.text is None:
        return None
    match = re.match(r"^\s*(\d+)", found.text)
    return int(match.group(1)) if match else None


def smi_gpu_extra(gpu: ET.Element) -> dict[str, t.Any]:
    """Application clocks, default application clocks and the supported clock table of one parsed ``<gpu>``."""
    extra: dict[str, t.Any] = {"mig_profiles": None, "mig_instances": None}
    for key in ("applications_clocks", "default_applications_clocks"):
        memory, graphics = _mhz(gpu, "%s/mem_clock" % key), _mhz(gpu, "%s/graphics_clock" % key)
        extra[key] = None if memory is None or graphics is None else {"memory_mhz": memory, "graphics_mhz": graphics}
    table: dict[int, list[int]] = {}
    for entry in gpu.findall("supported_clocks/supported_mem_clock"):
        memory = _mhz(entry, "value")
        if memory is None:
            continue
        table[memory] = sorted(
            (int(m.group(1)) for m in (re.match(r"^\s*(\d+)", g.text or "") for g in entry.findall("supported_graphics_clock")) if m),
            reverse=True,
        )
    extra["supported_clocks"] = table or None
    return extra


def smi_clock_extras(xml_text: str) -> list[dict[str, t.Any]]:
    """:func:`smi_gpu_extra` of each <gpu> of a saved ``nvidia-smi -q -x`` output, in order ([] when it does not parse).

    For captures read offline; a settings run reads the clocks in the facts parser's pass (:class:`SmiBackend`).
    """
    text = xml_text[xml_text.find("<"):] if "<" in xml_text else ""
    try:
        root = ET.fromstring(text)
    except ET.ParseError:
        return []
    return [smi_gpu_extra(gpu) for gpu in root.findall("gpu")]


def _views(result: dict[str, t.Any], extras: t.Callable[[int, t.Mapping[str, t.Any]], dict[str, t.Any]],
           record: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    result["views"] = []
    if result["available"]:
        for position, gpu in enumerate(result["gpus"]):
            extra = extras(position, gpu)
            extra["locked_clocks"] = record.get(gpu["uuid"] or "")
            result["views"].append(_settings.current_view(gpu, extra))
    return result


class NvmlBackend:
    """Reads and applies through one NVML session (``_nvml.Session``, opened and closed by the caller)."""

    source = "nvml"

    def __init__(self, session: _nvml.Session):
        self.session = session
        self.nv = session.nv
        self.error_cls = session.error_cls
        self.done: list[str] = []

    def read(self, record: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
        """The facts of every GPU (with processes) as planner views, with the settings' reads in the same pass."""
        extras: dict[int, dict[str, t.Any]] = {}

        def extend(gpu: dict[str, t.Any], handle: t.Any, reader: _nvml.Reader) -> None:
            extras[gpu["index"]] = _nvml_extra(self.nv, handle, gpu, reader)

        result = self.session.collect(("processes",), extend)
        return _views(result, lambda position, gpu: dict(extras.get(gpu["index"], {})) if gpu["state"] == STATE_OK else {}, record)

    def apply(self, gpu: t.Mapping[str, t.Any], change: t.Mapping[str, t.Any]) -> None:
        nv = self.nv
        try:
            handle = nv.nvmlDeviceGetHandleByIndex(gpu["index"])
            args = change["args"]
            op = change["op"]
            if op == "persistence_mode":
                nv.nvmlDeviceSetPersistenceMode(handle, nv.NVML_FEATURE_ENABLED if args["value"] else nv.NVML_FEATURE_DISABLED)
            elif op == "compute_mode":
                nv.nvmlDeviceSetComputeMode(handle, _settings.COMPUTE_MODE_VALUES[args["value"]])
            elif op == "power_limit":
                nv.nvmlDeviceSetPowerManagementLimit(handle, args["milliwatts"])
            elif op == "applications_clocks":
                nv.nvmlDeviceSetApplicationsClocks(handle, args["memory_mhz"], args["graphics_mhz"])
            elif op == "applications_clocks_reset":
                nv.nvmlDeviceResetApplicationsClocks(handle)
            elif op == "locked_clocks":
                nv.nvmlDeviceSetGpuLockedClocks(handle, args["min_mhz"], args["max_mhz"])
            elif op == "locked_clocks_reset":
                nv.nvmlDeviceResetGpuLockedClocks(handle)
            elif op == "ecc":
                nv.nvmlDeviceSetEccMode(handle, nv.NVML_FEATURE_ENABLED if args["value"] else nv.NVML_FEATURE_DISABLED)
            elif op == "mig":
                nv.nvmlDeviceSetMigMode(handle, nv.NVML_DEVICE_MIG_ENABLE if args["value"] else nv.NVML_DEVICE_MIG_DISABLE)
            elif op == "mig_layout":
                self._layout(gpu, handle, args["operations"])
            else:  # pragma: no cover - the planner only makes the operations above
                raise ApplyError("unknown operation %s" % op, self.done)
        except self.error_cls as exc:
            raise ApplyError("%s failed: %s" % (_describe_change(gpu, change), exc), self.done) from exc
        self.done.append(_describe_change(gpu, change))

    def _layout(self, gpu: t.Mapping[str, t.Any], handle: t.Any, operations: t.Iterable[t.Mapping[str, t.Any]]) -> None:
        nv = self.nv
        label = _settings.gpu_label(gpu)
        for op in operations:
            try:
                if op["op"] == "destroy_ci":
                    instance = nv.nvmlDeviceGetGpuInstanceById(handle, op["gi"])
                    nv.nvmlComputeInstanceDestroy(nv.nvmlGpuInstanceGetComputeInstanceById(instance, op["ci"]))
                    self.done.append("%s: destroyed compute instance %s (%s) of GPU instance %s" % (label, op["ci"], op["profile"], op["gi"]))
                elif op["op"] == "destroy_gi":
                    nv.nvmlGpuInstanceDestroy(nv.nvmlDeviceGetGpuInstanceById(handle, op["gi"]))
                    self.done.append("%s: destroyed GPU instance %s (%s)" % (label, op["gi"], op["profile"]))
                elif op["op"] == "create_gi":
                    instance = nv.nvmlDeviceCreateGpuInstance(handle, op["profile_id"])
                    self.done.append("%s: created a %s GPU instance" % (label, op["profile"]))
                    for ci in op["cis"]:
                        nv.nvmlGpuInstanceCreateComputeInstance(instance, ci["profile_id"])
                        self.done.append("%s: created a %s compute instance" % (label, ci["profile"]))
            except self.error_cls as exc:
                raise ApplyError("%s: mig_layout: %s %s failed: %s" % (label, op["op"], op["profile"], exc), self.done) from exc


class SmiBackend:
    """Reads with one ``nvidia-smi -q -x`` run (parsed once) and applies with nvidia-smi argument lists."""

    source = "nvidia-smi"

    def __init__(self, run: Runner, binary: str):
        self.run = run
        self.binary = binary
        self.done: list[str] = []

    def read(self, record: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
        """``nvidia-smi -q -x`` parsed by the facts backend, with the clocks read from the same parse, as planner views."""
        extras: list[dict[str, t.Any]] = []

        def extend(gpu: ET.Element, _record: dict[str, t.Any]) -> None:
            extras.append(smi_gpu_extra(gpu))

        result = _smi.collect(self.run, self.binary, ("processes",), extend)
        # GPUs nvidia-smi could not open come after the parsed ones, without an index and without clocks.
        return _views(result, lambda position, gpu: dict(extras[position]) if position < len(extras) and gpu["index"] is not None else {}, record)

    def apply(self, gpu: t.Mapping[str, t.Any], change: t.Mapping[str, t.Any]) -> None:
        for argv in _settings.smi_argv(self.binary, gpu, change):
            rc, out, err = self.run(argv)
            if rc != 0:
                detail = (err or out or "").strip().splitlines()
                raise ApplyError(
                    "%s failed: %s exited with %d: %s" % (_describe_change(gpu, change), " ".join(argv), rc, detail[0] if detail else "no output"),
                    self.done,
                )
        self.done.append(_describe_change(gpu, change))


Backend = t.Union[NvmlBackend, SmiBackend]


def read_state(session: _nvml.Session, run: Runner | None, binary: str | None, record: t.Mapping[str, t.Any], root: str = "/") -> dict[str, t.Any]:
    """Best source first: NVML (in ``session``, entered by the caller), then nvidia-smi.

    Returns {source, state, message, messages, views, backend}: ``backend`` reads again and applies through the source
    that worked (None when none did). An NVML session that read nothing is closed before nvidia-smi runs.
    """
    failures: list[str] = []
    messages: list[str] = []
    nvml = NvmlBackend(session)
    result = nvml.read(record)
    if result["available"]:
        return {"source": "nvml", "state": STATE_OK, "message": None, "messages": result["messages"], "views": result["views"], "backend": nvml}
    session.close()
    failures.append(result["state"])
    messages.append(result["message"])
    if binary and run is not None:
        smi = SmiBackend(run, binary)
        result = smi.read(record)
        if result["available"]:
            messages.extend(result["messages"])
            return {"source": "nvidia-smi", "state": STATE_OK, "message": None, "messages": messages, "views": result["views"], "backend": smi}
        failures.append(result["state"])
        messages.append(result["message"])
    else:
        messages.append("nvidia-smi: not found in PATH")
        failures.append(STATE_LIBRARY_NOT_FOUND)
    state = best_failure_state(failures) or STATE_ERROR
    if state in (STATE_ERROR, STATE_LIBRARY_NOT_FOUND):
        # Neither source could say why. The PCI scan can: no NVIDIA GPU at all, or no nvidia kernel module (in a
        # container without /dev/nvidia*, NVML and nvidia-smi say "Unknown Error" instead of "Driver Not Loaded").
        pci = _pci.scan(root)
        if not pci["gpus"]:
            state = STATE_NO_GPU
            messages.append("no NVIDIA GPU on the PCI bus")
        elif not pci["kernel_module"]["loaded"]:
            state = STATE_DRIVER_NOT_LOADED
            messages.append("the nvidia kernel module is not loaded")
    return {"source": None, "state": state, "message": "; ".join(m for m in messages if m), "messages": messages, "views": [], "backend": None}


def apply_plans(backend: Backend, gpus: t.Sequence[t.Mapping[str, t.Any]], plans: t.Sequence[t.Mapping[str, t.Any]],
                record: dict[str, t.Any]) -> None:
    """Apply every planned change in order; the locked clocks applied go into ``record`` as they succeed.

    Raises ApplyError at the first failure (``record`` then holds what was applied before it)."""
    for gpu, plan in zip(gpus, plans):
        for item in plan["changes"]:
            backend.apply(gpu, item)
            if item["setting"] == "locked_clocks" and gpu["uuid"]:
                record[gpu["uuid"]] = item["after"]


# -- applying -------------------------------------------------------------------------------------------------
def _describe_change(gpu: t.Mapping[str, t.Any], change: t.Mapping[str, t.Any], detail: str = "") -> str:
    text = "%s: %s %s -> %s" % (_settings.gpu_label(gpu), change["setting"], _short(change["before"]), _short(change["after"]))
    return text + (" (%s)" % detail if detail else "")


def _short(value: t.Any) -> str:
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True)
    return str(value)


def reset_gpu(run: Runner, binary: str, gpu: t.Mapping[str, t.Any]) -> None:
    argv = _settings.reset_argv(binary, gpu)
    rc, out, err = run(argv)
    if rc != 0:
        detail = (err or out or "").strip().splitlines()
        raise ApplyError(
            "%s: GPU reset failed: %s exited with %d: %s" % (_settings.gpu_label(gpu), " ".join(argv), rc, detail[0] if detail else "no output"), []
        )
