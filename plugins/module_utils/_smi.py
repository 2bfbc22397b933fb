# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""nvidia-smi backend for the GPU facts: parses ``nvidia-smi -q -x`` into the same records as the NVML backend.

Private to this collection: no compatibility promise outside gpuhost.nvidia.

Used when NVML cannot be loaded from Python but the nvidia-smi binary works. Handles the XML of drivers 352 to 595
(DTD v7 to v13): files without prolog or DOCTYPE, ``N/A``, ``[N/A]``, ``[Not Supported]``, legacy and new power
readings, MIG devices. Exit code 9 is driver_not_loaded.
"""

from __future__ import annotations

import re
import typing as t
import xml.etree.ElementTree as ET

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _catalog
from ansible_collections.gpuhost.nvidia.plugins.module_utils._common import (
    STATE_DRIVER_NOT_LOADED,
    STATE_ERROR,
    STATE_GPU_LOST,
    STATE_LIBRARY_NOT_FOUND,
    STATE_NO_PERMISSION,
    STATE_OK,
    STATE_VERSION_MISMATCH,
    device_id_from_nvml,
    normalize_bus_id,
)
from ansible_collections.gpuhost.nvidia.plugins.module_utils._gpu_schema import compute_mode_name, empty_gpu_record, processes_unknown

# nvidia-smi(1) "RETURN VALUE" section.
EXIT_CODE_STATES = {
    4: STATE_NO_PERMISSION,
    9: STATE_DRIVER_NOT_LOADED,
    12: STATE_LIBRARY_NOT_FOUND,
    13: STATE_LIBRARY_NOT_FOUND,
    15: STATE_GPU_LOST,
    18: STATE_VERSION_MISMATCH,
}

_TEXT_STATES = (
    ("version mismatch", STATE_VERSION_MISMATCH),
    ("couldn't communicate with the nvidia driver", STATE_DRIVER_NOT_LOADED),
    ("driver not loaded", STATE_DRIVER_NOT_LOADED),
    ("insufficient permissions", STATE_NO_PERMISSION),
    ("no permission", STATE_NO_PERMISSION),
    ("shared library not found", STATE_LIBRARY_NOT_FOUND),
    ("couldn't find libnvidia-ml.so", STATE_LIBRARY_NOT_FOUND),
)

# Values nvidia-smi writes when it has no value; bracketed forms are handled generically.
_NO_VALUE = {
    "",
    "n/a",
    "not supported",
    "not found",
    "unknown error",
    "requested functionality has been deprecated",
    "insufficient permissions",
    "gpu is lost",
    "redacted",
    "not available",
}

_HANDLE_ERROR_RE = re.compile(r"Unable to determine the device handle for GPU\s*([0-9A-Fa-f:.]+):\s*(.*)")

Runner = t.Callable[[t.List[str]], t.Tuple[int, str, str]]
# ``extend(gpu_element, record)``: another backend's reads from the same parsed <gpu> element (see parse()).
Extension = t.Callable[[ET.Element, t.Dict[str, t.Any]], None]


def clean(value: str | None) -> str | None:
    """Strip and drop nvidia-smi's no-value markers (``N/A``, ``[N/A]``, ``[Not Supported]``...)."""
    if value is None:
        return None
    text = value.strip()
    if text.startswith("[") and text.endswith("]"):
        return None
    if text.lower() in _NO_VALUE:
        return None
    return text


def _text(elem: ET.Element | None, path: str) -> str | None:
    if elem is None:
        return None
    found = elem.find(path)
    if found is None:
        return None
    return clean(found.text)


def _number(text: str | None) -> float | None:
    if text is None:
        return None
    match = re.match(r"^\s*(-?\d+(?:\.\d+)?)", text)
    return float(match.group(1)) if match else None


def _int(elem: ET.Element | None, path: str) -> int | None:
    value = _number(_text(elem, path))
    return None if value is None else int(value)


def _float(elem: ET.Element | None, path: str) -> float | None:
    value = _number(_text(elem, path))
    return None if value is None else round(value, 2)


def _enabled(elem: ET.Element | None, path: str) -> bool | None:
    value = _text(elem, path)
    if value is None:
        return None
    lowered = value.lower()
    if lowered in ("enabled", "enable", "on", "yes"):
        return True
    if lowered in ("disabled", "disable", "off", "no"):
        return False
    return None


def _version_text(elem: ET.Element, path: str) -> str | None:
    value = _text(elem, path)
    return value if value is not None and re.match(r"^\d+\.\d+", value) else None


def _first(elem: ET.Element, paths: t.Iterable[str], convert: t.Callable[[ET.Element, str], t.Any]) -> t.Any:
    for path in paths:
        value = convert(elem, path)
        if value is not None:
            return value
    return None


def parse(xml_text: str, gather: t.Iterable[str] = (), extend: Extension | None = None) -> dict[str, t.Any]:
    """Parse ``nvidia-smi -q -x`` output. Raises ValueError when it is not nvidia-smi XML.

    ``extend(gpu_element, record)`` is called for each ``<gpu>`` after its record is built, so that another backend
    (the settings' clocks) reads what only it needs from the same parse.
    """
    gather = set(gather)
    text = xml_text.lstrip("\ufeff")
    start = text.find("<")
    if start < 0:
        raise ValueError("nvidia-smi -q -x printed no XML")
    try:
        root = ET.fromstring(text[start:])
    except ET.ParseError as exc:
        raise ValueError("nvidia-smi -q -x printed XML that does not parse: %s" % exc) from exc
    if root.tag != "nvidia_smi_log":
        raise ValueError("nvidia-smi -q -x printed <%s>, not <nvidia_smi_log>" % root.tag)
    # From R610 nvidia-smi's header says "KMD Version" and "CUDA UMD Version", and its --version calls the driver
    # version deprecated. No public XML capture of 610 shows whether the XML followed (docs/sources.md): the elements
    # under either name are read, and only a value that is a version counts.
    driver = {
        "version": _first(root, ("driver_version", "kmd_version"), _version_text),
        "cuda_version": _first(root, ("cuda_version", "cuda_umd_version"), _version_text),
        "nvml_version": None,
    }
    gpus = []
    for index, elem in enumerate(root.findall("gpu")):
        gpus.append(_gpu(index, elem, gather))
        if extend is not None:
            extend(elem, gpus[-1])
    messages = []
    if "topology" in gather:
        messages.append("nvidia-smi: GPU topology is not part of nvidia-smi -q -x; topology is null")
    if "health" in gather:
        messages.append("nvidia-smi: the health group is read from NVML only; health is null")
    return {"driver": driver, "gpus": gpus, "messages": messages}


def _gpu(index: int, elem: ET.Element, gather: set[str]) -> dict[str, t.Any]:
    record = empty_gpu_record(index)
    record["source"] = "nvidia-smi"
    record["uuid"] = _text(elem, "uuid")
    record["name"] = _text(elem, "product_name")
    record["pci_bus_id"] = normalize_bus_id(elem.get("id")) or normalize_bus_id(_text(elem, "pci/pci_bus_id"))
    record["pci_device_id"] = device_id_from_nvml(_text(elem, "pci/pci_device_id"))
    record["compute_capability"] = _catalog.compute_capability_from_device_id(record["pci_device_id"])
    record["architecture"] = _catalog.normalize_architecture(_text(elem, "product_architecture")) or _catalog.architecture(
        record["pci_device_id"]
    )
    record["memory_total_mib"] = _int(elem, "fb_memory_usage/total")
    record["persistence_mode"] = _enabled(elem, "persistence_mode")
    record["compute_mode"] = compute_mode_name(_text(elem, "compute_mode"))
    power_paths = ("gpu_power_readings", "power_readings")
    record["power_limit_w"] = _first(elem, ["%s/current_power_limit" % p for p in power_paths] + ["power_readings/power_limit"], _float)
    record["power_limit_min_w"] = _first(elem, ["%s/min_power_limit" % p for p in power_paths], _float)
    record["power_limit_max_w"] = _first(elem, ["%s/max_power_limit" % p for p in power_paths], _float)
    record["ecc"] = {"current": _enabled(elem, "ecc_mode/current_ecc"), "pending": _enabled(elem, "ecc_mode/pending_ecc")}
    record["mig"] = {"current": _enabled(elem, "mig_mode/current_mig"), "pending": _enabled(elem, "mig_mode/pending_mig")}
    record["mig_devices"] = [
        {
            "uuid": _text(mig, "uuid"),
            "gi": _int(mig, "gpu_instance_id"),
            "ci": _int(mig, "compute_instance_id"),
            "profile": None,
            "memory_mib": _int(mig, "fb_memory_usage/total"),
        }
        for mig in elem.findall("mig_devices/mig_device")
    ]
    if "utilization" in gather:
        record["utilization"] = {"gpu": _int(elem, "utilization/gpu_util"), "memory": _int(elem, "utilization/memory_util")}
        record["temperature_c"] = _int(elem, "temperature/gpu_temp")
        record["power_draw_w"] = _first(
            elem,
            ["%s/%s" % (p, key) for p in power_paths for key in ("power_draw", "average_power_draw", "instant_power_draw")],
            _float,
        )
    if "processes" in gather:
        record["processes"], record["processes_error"] = _processes(elem)
    if "topology" in gather:
        record["topology"] = None
    if "health" in gather:
        record["health"] = None
    return record


def _processes(elem: ET.Element) -> tuple[list[dict[str, t.Any]] | None, str | None]:
    """The GPU's processes and None, or None and why they cannot be known: no ``<processes>`` element, one that says
    ``N/A`` (or another word) instead of listing, or an entry without a readable pid. An empty element is no process."""
    node = elem.find("processes")
    if node is None:
        return None, "nvidia-smi -q -x has no <processes> element for this GPU"
    entries = node.findall("process_info")
    text = (node.text or "").strip()
    if not entries:
        if text or len(node):
            return None, "nvidia-smi -q -x gives the processes as %r, not a list" % (text or node[0].tag)[:60]
        return [], None
    processes = []
    for proc in entries:
        pid = _int(proc, "pid")
        if pid is None or pid <= 0:
            return None, "nvidia-smi -q -x lists a process without a readable pid (%r)" % (_text(proc, "pid") or "")[:40]
        processes.append(
            {
                "pid": pid,
                "type": _text(proc, "type"),
                "name": _text(proc, "process_name"),
                "used_memory_mib": _int(proc, "used_memory"),
                "gpu_instance_id": _int(proc, "gpu_instance_id"),
                "compute_instance_id": _int(proc, "compute_instance_id"),
            }
        )
    return sorted(processes, key=lambda p: p["pid"]), None


def failure_state(rc: int, output: str) -> str:
    """State for a failed nvidia-smi run, from its exit code, else from what it printed."""
    if rc in EXIT_CODE_STATES:
        return EXIT_CODE_STATES[rc]
    lowered = output.lower()
    for needle, state in _TEXT_STATES:
        if needle in lowered:
            return state
    return STATE_ERROR


def _first_line(*texts: str) -> str:
    for text in texts:
        for line in (text or "").splitlines():
            if line.strip():
                return line.strip()
    return ""


def collect(run: Runner, binary: str, gather: t.Iterable[str] = (), extend: Extension | None = None) -> dict[str, t.Any]:
    """Run ``nvidia-smi -q -x`` through ``run`` and return the same shape as the NVML backend's collect().

    ``extend`` is handed to :func:`parse`: one run and one parse serve the facts and another backend's reads.
    """
    result: dict[str, t.Any] = {
        "available": False,
        "state": STATE_ERROR,
        "message": None,
        "messages": [],
        "driver": {"version": None, "cuda_version": None, "nvml_version": None},
        "gpus": [],
    }
    rc, out, err = run([binary, "-q", "-x"])
    lost = [(normalize_bus_id(m.group(1)), m.group(2).strip()) for m in _HANDLE_ERROR_RE.finditer((out or "") + "\n" + (err or ""))]
    parsed = None
    if "<nvidia_smi_log" in (out or ""):
        try:
            parsed = parse(out, gather, extend)
        except ValueError as exc:
            result["state"] = STATE_ERROR
            result["message"] = "nvidia-smi: %s" % exc
            return result
    if parsed is None:
        result["state"] = failure_state(rc, "%s\n%s" % (out, err)) if rc != 0 else STATE_ERROR
        detail = _first_line(out, err) or "no output"
        result["message"] = "nvidia-smi -q -x exited with %d: %s" % (rc, detail)
        return result
    gpus = parsed["gpus"]
    for bus_id, reason in lost:
        record = empty_gpu_record(None)
        record["source"] = "nvidia-smi"
        record["pci_bus_id"] = bus_id
        record["state"] = STATE_GPU_LOST if "lost" in reason.lower() or rc == 15 else STATE_ERROR
        record["message"] = "nvidia-smi could not open GPU %s: %s" % (bus_id, reason)
        if "processes" in set(gather):
            processes_unknown(record)
        gpus.append(record)
    result.update(
        available=True,
        state=STATE_OK,
        driver=parsed["driver"],
        gpus=gpus,
        messages=parsed["messages"],
    )
    if rc != 0:
        result["messages"].append("nvidia-smi -q -x exited with %d: %s" % (rc, _first_line(err, out.split("<", 1)[0])))
    return result
