# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The GPU tier's checks, as pure functions of what it captured (so a capture can be checked again offline).

``evaluate(capture)`` compares what nvidia-smi printed (``-q -x`` and ``--query-gpu`` CSV), what NVML returned
directly, what the host tree holds, and what the collection's modules reported from the same GPUs. Each check is
``{"name", "status": PASS|FAIL|SKIP, "detail"}``. The XML and CSV are parsed here with the standard library alone,
independently of the collection's own nvidia-smi parser, which is one of the things under test.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import typing as t
import xml.etree.ElementTree as ET

PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"

# The --query-gpu fields the tier asks for (those the driver lists in --help-query-gpu).
QUERY_FIELDS = (
    "index", "uuid", "name", "pci.bus_id", "driver_version", "memory.total", "persistence_mode", "compute_mode",
    "power.limit", "power.default_limit", "power.min_limit", "power.max_limit", "ecc.mode.current", "ecc.mode.pending",
    "mig.mode.current", "mig.mode.pending", "clocks.applications.graphics", "clocks.applications.memory",
    "clocks.default_applications.graphics", "clocks.default_applications.memory", "clocks.max.graphics", "clocks.max.memory",
)
# The fields that are GPU settings: read before and after the modules ran, and compared.
SETTINGS_FIELDS = (
    "persistence_mode", "compute_mode", "power.limit", "ecc.mode.current", "ecc.mode.pending", "mig.mode.current",
    "mig.mode.pending", "clocks.applications.graphics", "clocks.applications.memory",
)
NVML_SETTINGS = ("persistence_mode", "compute_mode", "power_limit_w", "ecc", "mig", "applications_clocks")

ABSENT = object()  # a source that does not carry a field at all (not the same as N/A, which is None)
_NO_VALUE = ("n/a", "not supported", "not available", "unknown error", "requested functionality has been deprecated", "")
_WATT_TOLERANCE = 0.005
_LD_ARCH = {"x86_64": "x86-64", "aarch64": "AArch64"}  # ldconfig -p's flag for the machine's own libraries


# -- small parsers ------------------------------------------------------------------------------------------------
def clean(value: str | None) -> str | None:
    """nvidia-smi's no-value markers (``N/A``, ``[N/A]``, ``[Not Supported]``, ``[Requested ... deprecated]``) -> None."""
    if value is None:
        return None
    text = value.strip()
    if text.startswith("[") and text.endswith("]"):
        return None
    return None if text.lower() in _NO_VALUE else text


def number(value: str | None) -> float | None:
    match = re.match(r"^\s*(-?\d+(?:\.\d+)?)", clean(value) or "")
    return float(match.group(1)) if match else None


def integer(value: str | None) -> int | None:
    found = number(value)
    return None if found is None else int(found)


def enabled(value: str | None) -> bool | None:
    text = (clean(value) or "").lower()
    return True if text == "enabled" else False if text == "disabled" else None


def mode(value: str | None) -> str | None:
    """``Exclusive_Process`` / ``EXCLUSIVE_PROCESS`` / ``exclusive_process`` -> ``exclusive_process``."""
    text = clean(value)
    return text.lower().replace(" ", "_") if text else None


def bus_id(value: str | None) -> str | None:
    """``00000000:18:00.0`` (NVML, nvidia-smi) and ``0000:18:00.0`` (sysfs, facts) -> ``0000:18:00.0``."""
    text = clean(value) if isinstance(value, str) else None
    match = re.match(r"^([0-9a-fA-F]+):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$", text or "")
    if not match:
        return None
    return "%04x:%s:%s.%s" % (int(match.group(1), 16), match.group(2).lower(), match.group(3).lower(), match.group(4))


def _clock_pair(elem: ET.Element | None, graphics: str = "graphics_clock", memory: str = "mem_clock") -> dict[str, int] | None:
    if elem is None:
        return None
    g, m = integer(elem.findtext(graphics)), integer(elem.findtext(memory))
    return None if g is None or m is None else {"memory_mhz": m, "graphics_mhz": g}


def parse_xml(text: str) -> dict[str, t.Any]:
    """``nvidia-smi -q -x`` -> {driver_version, cuda_version, gpus: [...]} in document (= NVML index) order."""
    start = text.find("<nvidia_smi_log")
    if start < 0:
        raise ValueError("no <nvidia_smi_log> in the nvidia-smi -q -x output")
    root = ET.fromstring(text[start:])
    gpus = []
    for elem in root.findall("gpu"):
        power = next((p for p in (elem.find("gpu_power_readings"), elem.find("power_readings")) if p is not None), None)

        def watts(*tags: str, _power: ET.Element | None = power) -> float | None:
            for tag in tags:
                value = number(_power.findtext(tag)) if _power is not None else None
                if value is not None:
                    return value
            return None

        table: dict[int, list[int]] = {}
        for entry in elem.findall("supported_clocks/supported_mem_clock"):
            memory = integer(entry.findtext("value"))
            if memory is not None:
                table[memory] = sorted((c for c in (integer(g.text) for g in entry.findall("supported_graphics_clock")) if c is not None),
                                       reverse=True)
        gpus.append(
            {
                "bus_id": bus_id(elem.get("id")) or bus_id(elem.findtext("pci/pci_bus_id")),
                "uuid": clean(elem.findtext("uuid")),
                "name": clean(elem.findtext("product_name")),
                "minor_number": integer(elem.findtext("minor_number")),
                "memory_total_mib": integer(elem.findtext("fb_memory_usage/total")),
                "persistence_mode": enabled(elem.findtext("persistence_mode")),
                "compute_mode": mode(elem.findtext("compute_mode")),
                "power_limit_w": watts("current_power_limit", "power_limit"),
                "power_limit_min_w": watts("min_power_limit"),
                "power_limit_max_w": watts("max_power_limit"),
                "power_default_limit_w": watts("default_power_limit"),
                "ecc": {"current": enabled(elem.findtext("ecc_mode/current_ecc")), "pending": enabled(elem.findtext("ecc_mode/pending_ecc"))},
                "mig": {"current": enabled(elem.findtext("mig_mode/current_mig")), "pending": enabled(elem.findtext("mig_mode/pending_mig"))},
                "mig_devices": [
                    (integer(m.findtext("gpu_instance_id")), integer(m.findtext("compute_instance_id")))
                    for m in elem.findall("mig_devices/mig_device")
                ],
                "applications_clocks": _clock_pair(elem.find("applications_clocks")),
                "default_applications_clocks": _clock_pair(elem.find("default_applications_clocks")),
                "max_clocks": _clock_pair(elem.find("max_clocks")),
                "supported_clocks": table or None,
            }
        )
    return {"driver_version": clean(root.findtext("driver_version")), "cuda_version": clean(root.findtext("cuda_version")), "gpus": gpus}


def parse_csv(text: str) -> list[dict[str, str | None]]:
    """``--query-gpu=... --format=csv[,nounits]`` -> one dict per GPU, keyed by field name without the unit."""
    rows = list(csv.reader(io.StringIO(text), skipinitialspace=True))
    header = [re.sub(r"\s*\[.*\]$", "", name.strip()) for name in rows[0]] if rows else []
    if not header or not set(header) <= set(QUERY_FIELDS):  # an error message, not the CSV asked for
        return []
    return [{name: clean(value) for name, value in zip(header, row)} for row in rows[1:] if row]


def parse_help_query(text: str) -> list[str]:
    """The field names listed by ``nvidia-smi --help-query-gpu`` (lines that start with a quoted name)."""
    names: list[str] = []
    for line in text.splitlines():
        if line.startswith('"'):
            names.extend(n for n in re.findall(r'"([^"]+)"', line) if n not in names)
    return names


def query_fields(available: t.Iterable[str]) -> list[str]:
    have = set(available)
    return [f for f in QUERY_FIELDS if f in have]


# -- the captured record ---------------------------------------------------------------------------------------------
def nvml_table(table: t.Any) -> dict[int, list[int]] | None:
    if not table:
        return None
    return {int(k): sorted((int(c) for c in v), reverse=True) for k, v in table.items()}


def _csv_gpu(row: dict[str, str | None]) -> dict[str, t.Any]:
    def clocks(prefix: str) -> dict[str, int] | None:
        g, m = integer(row.get(prefix + ".graphics")), integer(row.get(prefix + ".memory"))
        if prefix + ".graphics" not in row:
            return ABSENT  # type: ignore[return-value]
        return None if g is None or m is None else {"memory_mhz": m, "graphics_mhz": g}

    def get(field: str, convert: t.Callable[[str | None], t.Any]) -> t.Any:
        return convert(row[field]) if field in row else ABSENT

    def pair(prefix: str) -> t.Any:
        if prefix + ".current" not in row:
            return ABSENT
        return {"current": enabled(row[prefix + ".current"]), "pending": enabled(row.get(prefix + ".pending"))}

    return {
        "bus_id": get("pci.bus_id", bus_id),
        "uuid": get("uuid", clean),
        "name": get("name", clean),
        "driver_version": get("driver_version", clean),
        "memory_total_mib": get("memory.total", integer),
        "persistence_mode": get("persistence_mode", enabled),
        "compute_mode": get("compute_mode", mode),
        "power_limit_w": get("power.limit", number),
        "power_limit_min_w": get("power.min_limit", number),
        "power_limit_max_w": get("power.max_limit", number),
        "ecc": pair("ecc.mode"),
        "mig": pair("mig.mode"),
        "applications_clocks": clocks("clocks.applications"),
        "default_applications_clocks": clocks("clocks.default_applications"),
        "max_clocks": clocks("clocks.max"),
    }


def _by_bus(gpus: t.Iterable[dict[str, t.Any]], key: str = "bus_id") -> dict[str, dict[str, t.Any]]:
    return {bus_id(g.get(key)) or "?": g for g in gpus}


# -- comparing ---------------------------------------------------------------------------------------------------------
def _same(a: t.Any, b: t.Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return a is not None and b is not None and abs(float(a) - float(b)) <= _WATT_TOLERANCE
    return a == b


def _show(value: t.Any) -> str:
    return json.dumps(value, sort_keys=True, default=str) if isinstance(value, (dict, list, tuple)) else str(value)


def compare(name: str, rows: list[tuple[str, dict[str, t.Any]]], what: str = "") -> dict[str, t.Any]:
    """Every source that carries a value of a row must agree; ``rows`` are (label, {source: value or ABSENT}).

    A row that fewer than two sources carry compares nothing; a check that compares nothing is skipped.
    """
    bad = []
    seen: set[str] = set()
    compared = []
    for label, values in rows:
        present = {k: v for k, v in values.items() if v is not ABSENT}
        if len(present) < 2:
            continue
        compared.append((label, present))
        seen.update(present)
        items = list(present.items())
        if any(not _same(items[0][1], value) for _key, value in items[1:]):
            bad.append("%s: %s" % (label, " ".join("%s=%s" % (k, _show(v)) for k, v in items)))
    if bad:
        return {"name": name, "status": FAIL, "detail": "; ".join(bad)}
    if not compared:
        return {"name": name, "status": SKIP, "detail": "nothing to compare%s" % (" (%s)" % what if what else "")}
    if len(compared) == 1:
        label, present = compared[0]
        return {"name": name, "status": PASS, "detail": "%s: %s in %s" % (label, _show(next(iter(present.values()))), ", ".join(sorted(seen)))}
    return {"name": name, "status": PASS, "detail": "%d GPUs agree in %s" % (len(compared), ", ".join(sorted(seen)))}


def check(name: str, ok: bool | None, detail: str) -> dict[str, t.Any]:
    return {"name": name, "status": SKIP if ok is None else PASS if ok else FAIL, "detail": detail}


def rich_gpus(facts: dict[str, t.Any]) -> list[dict[str, t.Any]]:
    return [g for g in facts.get("gpus") or [] if g.get("source") != "pci"]


def facts_of(result: dict[str, t.Any] | None) -> dict[str, t.Any]:
    return (((result or {}).get("result") or {}).get("ansible_facts") or {}).get("nvidia_gpu") or {}


FACT_FIELDS = (
    "uuid", "name", "memory_total_mib", "persistence_mode", "compute_mode", "power_limit_w", "power_limit_min_w",
    "power_limit_max_w", "ecc", "mig",
)


def _fact_value(gpu: dict[str, t.Any] | None, field: str) -> t.Any:
    if gpu is None:
        return ABSENT
    value = gpu.get(field)
    if field == "compute_mode":
        return mode(value)
    if field in ("ecc", "mig"):
        return {"current": (value or {}).get("current"), "pending": (value or {}).get("pending")}
    return value


def _nvml_value(gpu: dict[str, t.Any] | None, field: str) -> t.Any:
    if gpu is None:
        return ABSENT
    if field == "supported_clocks":
        return nvml_table(gpu.get(field))
    return gpu.get(field, ABSENT)


def field_checks(prefix: str, label: str, records: dict[str, dict[str, t.Any]], capture: dict[str, t.Any]) -> list[dict[str, t.Any]]:
    """<prefix>.<field>: GPU records in the facts' vocabulary (by PCI bus id) against the XML, the CSV and NVML."""
    xml, csv_rows, nvml = capture["xml"], capture["csv"], capture["nvml"]["before"]
    xml_gpus = _by_bus(xml["gpus"])
    csv_gpus = _by_bus([_csv_gpu(r) for r in csv_rows])
    nvml_gpus = _by_bus(nvml.get("gpus") or [])
    checks = [check("%s.gpus" % prefix, sorted(records) == sorted(xml_gpus) == sorted(csv_gpus) == sorted(nvml_gpus) and bool(xml_gpus),
                    "PCI bus ids: %s=%s xml=%s csv=%s nvml=%s" % (label, sorted(records), sorted(xml_gpus), sorted(csv_gpus), sorted(nvml_gpus)))]
    for field in FACT_FIELDS:
        rows = []
        for bus in sorted(xml_gpus):
            rows.append(("GPU %s" % bus, {
                label: _fact_value(records.get(bus), field),
                "xml": xml_gpus[bus].get(field, ABSENT),
                "csv": csv_gpus[bus].get(field, ABSENT) if bus in csv_gpus else ABSENT,
                "nvml": _nvml_value(nvml_gpus.get(bus), field),
            }))
        checks.append(compare("%s.%s" % (prefix, field), rows))
    return checks


def driver_checks(prefix: str, label: str, driver: dict[str, t.Any], capture: dict[str, t.Any]) -> list[dict[str, t.Any]]:
    xml, csv_rows, nvml = capture["xml"], capture["csv"], capture["nvml"]["before"]
    csv_driver = sorted({r.get("driver_version") for r in csv_rows if "driver_version" in r}, key=str)
    return [
        compare("%s.driver_version" % prefix, [("host", {
            label: driver.get("version", ABSENT), "xml": xml["driver_version"],
            "csv": ABSENT if not csv_driver else csv_driver[0] if len(csv_driver) == 1 else csv_driver,
            "nvml": nvml.get("driver_version", ABSENT)})]),
        compare("%s.cuda_version" % prefix, [("host", {
            label: driver.get("cuda_version", ABSENT), "xml": xml["cuda_version"], "nvml": nvml.get("cuda_version", ABSENT)})]),
    ]


def check_sources(capture: dict[str, t.Any]) -> list[dict[str, t.Any]]:
    """facts.*: the facts (NVML backend) against nvidia-smi's XML and CSV and NVML read directly."""
    facts = facts_of(capture["results"].get("facts_nvml"))
    checks = [
        check("facts.backend_nvml", facts.get("source") == "nvml" and facts.get("state") == "ok",
              "nvidia_gpu_facts(backends=[nvml, pci]): source %s, state %s%s" % (
                  facts.get("source"), facts.get("state"), "; " + "; ".join(facts.get("messages") or []) if facts.get("messages") else "")),
    ]
    checks += field_checks("facts", "facts", _by_bus(rich_gpus(facts), "pci_bus_id"), capture)
    checks += driver_checks("facts", "facts", facts.get("driver") or {}, capture)
    return checks


BACKEND_FIELDS = (
    "uuid", "name", "pci_device_id", "architecture", "compute_capability", "memory_total_mib", "persistence_mode",
    "compute_mode", "power_limit_w", "power_limit_min_w", "power_limit_max_w", "ecc", "mig", "bound_driver",
)


def check_backends(capture: dict[str, t.Any]) -> list[dict[str, t.Any]]:
    """backends.*: nvidia_gpu_facts through NVML and through nvidia-smi, field by field."""
    by_nvml = facts_of(capture["results"].get("facts_nvml"))
    by_smi = facts_of(capture["results"].get("facts_smi"))
    checks = [
        check("backends.nvidia_smi", by_smi.get("source") == "nvidia-smi" and by_smi.get("state") == "ok",
              "nvidia_gpu_facts(backends=[nvidia-smi, pci]): source %s, state %s" % (by_smi.get("source"), by_smi.get("state"))),
    ]
    a, b = _by_bus(rich_gpus(by_nvml), "pci_bus_id"), _by_bus(rich_gpus(by_smi), "pci_bus_id")
    checks.append(check("backends.gpus", sorted(a) == sorted(b) and bool(a), "PCI bus ids: nvml=%s nvidia-smi=%s" % (sorted(a), sorted(b))))
    buses = sorted(set(a) & set(b))
    for field in BACKEND_FIELDS:
        checks.append(compare("backends.%s" % field, [("GPU %s" % bus, {"nvml": _fact_value(a[bus], field), "nvidia-smi": _fact_value(b[bus], field)})
                                                      for bus in buses]))
    checks.append(compare("backends.mig_devices", [("GPU %s" % bus, {
        "nvml": sorted((d.get("gi"), d.get("ci")) for d in a[bus].get("mig_devices") or []),
        "nvidia-smi": sorted((d.get("gi"), d.get("ci")) for d in b[bus].get("mig_devices") or [])}) for bus in buses]))
    for key in ("version", "cuda_version", "kernel_module_type", "library_version"):
        checks.append(compare("backends.driver_%s" % key, [("host", {
            "nvml": (by_nvml.get("driver") or {}).get(key, ABSENT), "nvidia-smi": (by_smi.get("driver") or {}).get(key, ABSENT)})]))
    return checks


def _settings_before(result: dict[str, t.Any] | None, bus: str) -> dict[str, t.Any] | None:
    """The settings module's own read of one GPU (its diff's before), or None."""
    if not result or result.get("status") != "ok":
        return None
    before = ((result["result"].get("diff") or {}).get("before")) or {}
    for gpu in result["result"].get("gpus") or []:
        if bus_id(gpu.get("pci_bus_id")) == bus:
            for key, value in before.items():
                if key.startswith("GPU %s " % gpu.get("index")):
                    return value
    return None


def check_clocks(capture: dict[str, t.Any]) -> list[dict[str, t.Any]]:
    """clocks.*: application, default and maximum clocks and the supported table; NVML, XML, CSV and the settings module."""
    xml_gpus = _by_bus(capture["xml"]["gpus"])
    csv_gpus = _by_bus([_csv_gpu(r) for r in capture["csv"]])
    nvml_gpus = _by_bus(capture["nvml"]["before"].get("gpus") or [])
    checks = []
    for field, name in (("applications_clocks", "applications"), ("default_applications_clocks", "default_applications"), ("max_clocks", "max")):
        checks.append(compare("clocks.%s" % name, [("GPU %s" % bus, {
            "xml": gpu[field], "csv": csv_gpus[bus][field] if bus in csv_gpus else ABSENT, "nvml": _nvml_value(nvml_gpus.get(bus), field)})
            for bus, gpu in sorted(xml_gpus.items())]))
    rows = []
    for bus, gpu in sorted(xml_gpus.items()):
        nvml_table_ = _nvml_value(nvml_gpus.get(bus), "supported_clocks")
        rows.append(("GPU %s" % bus, {"xml": gpu["supported_clocks"], "nvml": nvml_table_}))
    result = compare("clocks.supported", rows)
    if result["status"] == FAIL:  # the tables are long: name the first difference only
        result["detail"] = _table_difference(rows)
    elif result["status"] == PASS:
        sizes: dict[str, int] = {}
        for _label, values in rows:
            table = values["xml"]
            size = "%d memory and %d graphics clocks" % (len(table), sum(len(c) for c in table.values())) if table else "no table"
            sizes[size] = sizes.get(size, 0) + 1
        result["detail"] = "xml and nvml list the same tables: %s" % "; ".join("%d GPU(s) with %s" % (n, s) for s, n in sizes.items())
    checks.append(result)
    spec = (capture["plans"].get("specs") or {}).get("change") or {}
    bus = bus_id((spec.get("args") or {}).get("gpus", [None])[0]) if spec else None
    read = _settings_before(capture["results"].get("settings_change"), bus) if bus else None
    if not bus or bus not in xml_gpus or read is None or "applications_clocks" not in read:
        checks.append(check("clocks.settings_read", None, "the change spec sets no application clocks (%s)" % (
            spec.get("note") or "no change spec")))
    else:
        checks.append(compare("clocks.settings_read", [("GPU %s" % bus, {
            "nvidia_smi_settings": read["applications_clocks"], "xml": xml_gpus[bus]["applications_clocks"]})]))
    return checks


def _table_difference(rows: list[tuple[str, dict[str, t.Any]]]) -> str:
    for label, values in rows:
        xml, nvml = values["xml"], values["nvml"]
        if nvml is ABSENT or xml == nvml:
            continue
        if not xml or not nvml:
            return "%s: xml has %s memory clocks, nvml %s" % (label, len(xml or {}), len(nvml or {}))
        for memory in sorted(set(xml) | set(nvml), reverse=True):
            if xml.get(memory) != nvml.get(memory):
                return "%s: memory clock %s MHz: xml lists %s graphics clocks, nvml %s (first: %s vs %s)" % (
                    label, memory, len(xml.get(memory) or []), len(nvml.get(memory) or []),
                    (xml.get(memory) or [None])[0], (nvml.get(memory) or [None])[0])
    return "the tables differ"


def _module_type(proc_version: str | None, license_tag: str | None) -> tuple[t.Any, t.Any]:
    loaded = ABSENT
    if proc_version is not None:
        loaded = "open" if "Open Kernel Module" in proc_version else "proprietary" if "Kernel Module" in proc_version else None
    installed = ABSENT
    if license_tag is not None:
        installed = "open" if "GPL" in license_tag else "proprietary" if license_tag.strip() == "NVIDIA" else None
    return loaded, installed


def check_host(capture: dict[str, t.Any]) -> list[dict[str, t.Any]]:
    """host.*: kernel module, device nodes and library paths in the facts against the host itself and nvidia-smi."""
    facts = facts_of(capture["results"].get("facts_nvml"))
    driver = facts.get("driver") or {}
    host = capture["host"]
    xml = capture["xml"]
    loaded, installed = _module_type(host.get("proc_version"), host.get("module_license"))
    checks = [compare("host.kernel_module_type", [("host", {
        "facts": driver.get("kernel_module_type", ABSENT), "proc_driver_version": loaded, "module_license": installed})])]
    match = re.search(r"Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)", host.get("proc_version") or "")
    checks.append(compare("host.kernel_module_version", [("host", {
        "facts": driver.get("kernel_module_version", ABSENT), "proc_driver_version": match.group(1) if match else None,
        "xml_driver_version": xml["driver_version"]})]))
    nodes = facts.get("device_nodes") or []
    wanted = ["/dev/nvidiactl"] + ["/dev/nvidia%d" % g["minor_number"] for g in xml["gpus"] if g["minor_number"] is not None]
    missing = [n for n in wanted if n not in nodes]
    listed = sorted(host.get("device_nodes") or [])
    ok = not missing and sorted(nodes) == listed
    checks.append(check("host.device_nodes", ok, "facts list %d nodes%s%s" % (
        len(nodes), "; missing %s (nvidiactl and the minor numbers nvidia-smi reports)" % ", ".join(missing) if missing else "",
        "" if sorted(nodes) == listed else "; the host has %s, the facts %s" % (listed, sorted(nodes)))))
    problems = []
    libraries = host.get("libraries") or {}
    for key, soname in (("nvml", "libnvidia-ml.so.1"), ("cuda", "libcuda.so.1")):
        path = (driver.get("library_paths") or {}).get(key)
        if not path:
            problems.append("%s: no path in the facts" % soname)
            continue
        resolved = libraries.get(path)
        version = re.search(r"\.so\.(\d+\.\d+(?:\.\d+)?)$", resolved or "")
        if not resolved:
            problems.append("%s: %s does not exist on the host" % (soname, path))
        elif not version or version.group(1) != xml["driver_version"]:
            problems.append("%s: %s resolves to %s, not the driver %s that nvidia-smi reports" % (
                soname, path, os.path.basename(resolved), xml["driver_version"]))
        ldconfig = (host.get("ldconfig") or {}).get(soname)
        if ldconfig is not None:
            flags = {entry[0]: entry[1] for entry in ldconfig}
            arch = _LD_ARCH.get(host.get("machine") or "")
            if path not in flags:
                problems.append("%s: %s is not among the ld.so cache's %s" % (soname, path, ", ".join(flags) or "(none)"))
            elif arch and arch not in flags[path]:
                problems.append("%s: %s is the %s library, not the %s one (%s)" % (
                    soname, path, flags[path], host.get("machine"), ", ".join(p for p, f in flags.items() if arch in f) or "none listed"))
    checks.append(check("host.library_paths", not problems, "; ".join(problems) or "nvml %s and cuda %s resolve to the %s libraries" % (
        (driver.get("library_paths") or {}).get("nvml"), (driver.get("library_paths") or {}).get("cuda"), xml["driver_version"])))
    return checks


# -- nvidia_smi_settings ----------------------------------------------------------------------------------------------
def settings_specs(xml: dict[str, t.Any]) -> dict[str, t.Any]:
    """The check-mode requests for GPU 0: one that would change something, and three that must fail."""
    specs: dict[str, t.Any] = {}
    if not xml["gpus"]:
        return specs
    gpu = xml["gpus"][0]
    bus = gpu["bus_id"]
    args: dict[str, t.Any] = {"gpus": [bus]}
    expect: dict[str, t.Any] = {}
    notes = []
    if gpu["persistence_mode"] is not None:
        args["persistence_mode"] = not gpu["persistence_mode"]
        expect["persistence_mode"] = [gpu["persistence_mode"], args["persistence_mode"]]
    if gpu["compute_mode"] is not None:
        args["compute_mode"] = "DEFAULT" if gpu["compute_mode"] != "default" else "EXCLUSIVE_PROCESS"
        expect["compute_mode"] = [gpu["compute_mode"].upper(), args["compute_mode"]]
    low, high, current = gpu["power_limit_min_w"], gpu["power_limit_max_w"], gpu["power_limit_w"]
    if None not in (low, high, current):
        target = float(round((low + high) / 2.0))
        if abs(target - current) < 0.5:
            target = low if abs(current - low) >= 0.5 else high
        args["power_limit"] = target
        expect["power_limit"] = [current, target]
    table = gpu["supported_clocks"]
    apps = gpu["applications_clocks"]
    if table and apps:
        memory = apps["memory_mhz"] if apps["memory_mhz"] in table else max(table)
        graphics = next((g for g in table[memory] if {"memory_mhz": memory, "graphics_mhz": g} != apps), None)
        if graphics is not None:
            args["applications_clocks"] = {"memory_mhz": memory, "graphics_mhz": graphics}
            expect["applications_clocks"] = [apps, args["applications_clocks"]]
    elif table:
        top = max(c for clocks in table.values() for c in clocks)
        args["locked_clocks"] = {"min_mhz": top, "max_mhz": top}
        expect["locked_clocks"] = [None, args["locked_clocks"]]
        notes.append("application clocks are not readable on this GPU; locked clocks from its table instead")
    else:
        notes.append("the GPU lists no supported clocks; no clock in the request")
    specs["change"] = {"args": args, "expect": expect, "note": "; ".join(notes)}
    if high is not None:
        specs["power_out_of_range"] = {"args": {"gpus": [bus], "power_limit": high + 50.0}, "expect": "outside the range"}
    if table and apps:
        specs["clock_not_in_table"] = {"args": {"gpus": [bus], "applications_clocks": {"memory_mhz": max(table) + 1, "graphics_mhz": max(table[max(table)])}},
                                       "expect": "is not a supported memory clock"}
    elif table:
        above = max(c for clocks in table.values() for c in clocks) + 1000
        specs["clock_not_in_table"] = {"args": {"gpus": [bus], "locked_clocks": {"min_mhz": above, "max_mhz": above}},
                                       "expect": "outside the supported graphics clocks"}
    else:
        specs["clock_not_in_table"] = {"args": {"gpus": [bus], "applications_clocks": {"memory_mhz": 1, "graphics_mhz": 1}},
                                       "expect": "not supported"}
    non_mig = next((g for g in xml["gpus"] if g["mig"]["current"] is None), None)
    if non_mig is not None:
        specs["mig_on_non_mig_gpu"] = {"args": {"gpus": [non_mig["bus_id"]], "mig": True}, "expect": "does not support MIG"}
    return specs


def change_matches(change: dict[str, t.Any], before: t.Any, after: t.Any) -> bool:
    return _same(change.get("before"), before) and _same(change.get("after"), after)


def check_settings(capture: dict[str, t.Any]) -> list[dict[str, t.Any]]:
    specs = capture["plans"].get("specs") or {}
    results = capture["results"]
    checks = []
    spec = specs.get("change")
    result = results.get("settings_change")
    if not spec:
        checks.append(check("settings.change_plan", None, "nvidia-smi lists no GPU"))
    elif not result or result["status"] != "ok":
        checks.append(check("settings.change_plan", False, "the check-mode run failed: %s" % ((result or {}).get("result") or {}).get("msg")))
    else:
        out = result["result"]
        bus = bus_id(spec["args"]["gpus"][0])
        gpus = [g for g in out.get("gpus") or [] if bus_id(g.get("pci_bus_id")) == bus]
        changes = {c["setting"]: c for c in (gpus[0].get("changes") or [])} if len(gpus) == 1 else {}
        problems = []
        if not out.get("changed") or out.get("applied"):
            problems.append("changed=%s applied=%s (check mode must report the change and apply nothing)" % (out.get("changed"), out.get("applied")))
        if sorted(changes) != sorted(spec["expect"]):
            problems.append("planned %s, expected %s" % (sorted(changes), sorted(spec["expect"])))
        for setting, (before, after) in sorted(spec["expect"].items()):
            if setting in changes and not change_matches(changes[setting], before, after):
                problems.append("%s: planned %s -> %s, expected %s -> %s (the 'before' is what nvidia-smi reports)" % (
                    setting, _show(changes[setting].get("before")), _show(changes[setting].get("after")), _show(before), _show(after)))
        checks.append(check("settings.change_plan", not problems, "; ".join(problems) or "%s: %s%s" % (
            out.get("msg"), ", ".join(sorted(changes)), " (%s)" % spec["note"] if spec.get("note") else "")))
    for name in ("power_out_of_range", "clock_not_in_table", "mig_on_non_mig_gpu"):
        spec = specs.get(name)
        if not spec:
            checks.append(check("settings.%s" % name, None, "every GPU supports MIG" if name == "mig_on_non_mig_gpu" else "no value to test with"))
            continue
        result = results.get("settings_%s" % name) or {}
        out = result.get("result") or {}
        msg = str(out.get("msg") or "")
        ok = result.get("status") == "failed" and spec["expect"] in msg and not out.get("changed") and not out.get("applied")
        checks.append(check("settings.%s" % name, ok, "%s: %s" % ("failed as expected" if ok else "expected a failure naming '%s', got status %s" % (
            spec["expect"], result.get("status")), msg[:300])))
    return checks


def settings_snapshot(csv_rows: list[dict[str, str | None]], nvml: dict[str, t.Any]) -> dict[str, t.Any]:
    snapshot: dict[str, t.Any] = {}
    for row in csv_rows:
        snapshot["csv %s" % bus_id(row.get("pci.bus_id"))] = {f: row[f] for f in SETTINGS_FIELDS if f in row}
    for gpu in nvml.get("gpus") or []:
        snapshot["nvml %s" % bus_id(gpu.get("bus_id"))] = {f: gpu.get(f) for f in NVML_SETTINGS}
    return snapshot


def check_unchanged(capture: dict[str, t.Any]) -> dict[str, t.Any]:
    before = settings_snapshot(capture["csv"], capture["nvml"]["before"])
    after = settings_snapshot(parse_csv(capture["record"].get("csv_after") or ""), capture["nvml"].get("after") or {})
    diffs = []
    for key in sorted(set(before) | set(after)):
        b, a = before.get(key, {}), after.get(key, {})
        for field in sorted(set(b) | set(a)):
            if b.get(field) != a.get(field):
                diffs.append("%s %s: %s -> %s" % (key, field, _show(b.get(field)), _show(a.get(field))))
    if not before:
        return check("read_only.settings_unchanged", False, "no settings were read before the modules ran")
    return check("read_only.settings_unchanged", not diffs, "; ".join(diffs) or "%d settings of %d GPU(s) read before and after the modules, identical" % (
        sum(len(v) for v in before.values()), len(capture["xml"]["gpus"])))


def check_guards(record: dict[str, t.Any]) -> list[dict[str, t.Any]]:
    calls = record.get("nvidia_smi_calls") or []
    refused = [c["argv"] for c in calls if not c.get("allowed")]
    forms: dict[str, int] = {}
    for call in calls:
        form = " ".join(a.split("=", 1)[0] + ("=..." if "=" in a and a.startswith("--query") else "") for a in call["argv"])
        forms[form] = forms.get(form, 0) + 1
    nvml = record.get("nvml_refused") or []
    return [
        check("read_only.nvidia_smi_calls", bool(calls) and not refused, "refused: %s" % refused if refused else "%d calls, all query forms: %s" % (
            len(calls), ", ".join("%s (%d)" % item for item in sorted(forms.items())))),
        check("read_only.nvml_setters", not nvml, "refused NVML calls: %s" % ", ".join(sorted({c["function"] for c in nvml})) if nvml
              else "no NVML function but getters was called"),
    ]


# -- doctor, compose, container ------------------------------------------------------------------------------------------
def check_doctor(capture: dict[str, t.Any]) -> dict[str, t.Any]:
    result = capture["results"].get("doctor") or {}
    out = result.get("result") or {}
    by_id = {c.get("id"): c for c in out.get("checks") or []}
    loaded = by_id.get("driver_loaded") or {}
    ok = result.get("status") == "ok" and bool(by_id) and loaded.get("status") == "ok"
    return check("doctor.report", ok, "status %s, counts %s; driver_loaded: %s %s" % (
        out.get("status"), _show(out.get("counts")), loaded.get("status"), loaded.get("evidence") or out.get("msg") or ""))


def _mig_on(gpu: dict[str, t.Any]) -> bool:
    return bool(gpu["mig"]["current"] and gpu["mig_devices"])


def compose_device_ids(xml: dict[str, t.Any]) -> list[t.Any]:
    """Every GPU by index, or, for a GPU with MIG on (which the override refuses whole), each of its MIG devices."""
    ids: list[t.Any] = []
    for index, gpu in enumerate(xml["gpus"]):
        ids += ["%d:%d" % (index, k) for k in range(len(gpu["mig_devices"]))] if _mig_on(gpu) else [index]
    return ids


def _expected_uuids(xml: dict[str, t.Any], facts: dict[str, t.Any]) -> list[str | None]:
    """nvidia-smi's GPU UUIDs, and for MIG devices (whose UUIDs older nvidia-smi XML lacks) the facts' MIG UUIDs."""
    by_bus = _by_bus(rich_gpus(facts), "pci_bus_id")
    expected: list[str | None] = []
    for gpu in xml["gpus"]:
        if not _mig_on(gpu):
            expected.append(gpu["uuid"])
            continue
        migs = (by_bus.get(gpu["bus_id"]) or {}).get("mig_devices") or []
        if len(migs) == len(gpu["mig_devices"]):
            expected += [m.get("uuid") for m in migs]
        else:
            expected.append("(%d MIG devices in nvidia-smi, %d in the facts)" % (len(gpu["mig_devices"]), len(migs)))
    return expected


def check_compose(capture: dict[str, t.Any], schema: dict[str, t.Any] | None) -> list[dict[str, t.Any]]:
    results = capture["results"]
    facts = facts_of(results.get("facts_nvml"))
    uuids = _expected_uuids(capture["xml"], facts)
    checks = []
    plain = results.get("compose") or {}
    document = (plain.get("result") or {}).get("document") or {}
    service = (document.get("services") or {}).get("gpu-all") or {}
    devices = (((service.get("deploy") or {}).get("resources") or {}).get("reservations") or {}).get("devices") or [{}]
    written = devices[0].get("device_ids")
    checks.append(check("compose.uuids", plain.get("status") == "ok" and written == uuids, "device_ids %s; expected %s%s" % (
        written, uuids, "" if plain.get("status") == "ok" else "; " + str((plain.get("result") or {}).get("msg")))))
    vm = results.get("compose_vm") or {}
    vm_doc = (vm.get("result") or {}).get("document") or {}
    vm_service = (vm_doc.get("services") or {}).get("gpu-vm") or {}
    nodes = facts.get("device_nodes") or []
    paths = capture["host"].get("paths") or {}
    problems = []
    if vm.get("status") != "ok":
        problems.append("the module failed: %s" % (vm.get("result") or {}).get("msg"))
    if vm_service.get("devices") != ["%s:%s" % (n, n) for n in nodes]:
        problems.append("devices %s, facts' device nodes %s" % (vm_service.get("devices"), nodes))
    sources = [v.get("source") for v in vm_service.get("volumes") or []]
    for key, path in sorted(((facts.get("driver") or {}).get("library_paths") or {}).items()):
        if path and path not in sources:
            problems.append("the %s library %s is not mounted" % (key, path))
    missing = [p for p in sources + nodes if not paths.get(p)]
    if missing:
        problems.append("not on the host: %s" % ", ".join(missing))
    checks.append(check("compose.vm_mode", not problems, "; ".join(problems) or "%d device nodes and %d library mounts, all on the host" % (
        len(nodes), len(sources))))
    if schema is None:
        checks.append(check("compose.schema", None, "compose-spec.json not found (make gpu-bundle copies it into the bundle)"))
    else:
        try:
            import jsonschema  # pylint: disable=import-outside-toplevel
        except ImportError:
            checks.append(check("compose.schema", False, "jsonschema is not installed"))
            return checks
        validator = jsonschema.Draft7Validator(schema)
        errors = ["%s: %s at %s" % (name, e.message, "/".join(str(p) for p in e.absolute_path))
                  for name, doc in (("override", document), ("vm override", vm_doc)) for e in validator.iter_errors(doc)]
        empty = [name for name, doc in (("override", document), ("vm override", vm_doc)) if not doc.get("services")]
        checks.append(check("compose.schema", not errors and not empty, "; ".join(errors[:5] + ["%s has no services" % n for n in empty])
                            or "both documents are valid compose files"))
    return checks


def check_container(capture: dict[str, t.Any]) -> dict[str, t.Any]:
    engine = capture["record"].get("container_engine")
    if not engine:
        return check("container.check", None, "no container engine on this host (%s); gpu_container_check not run" % (
            capture["record"].get("container_engine_note") or "no docker or podman socket"))
    result = capture["results"].get("container") or {}
    out = result.get("result") or {}
    reason = str(out.get("reason") or out.get("msg") or "")
    if "pull=never" in reason:
        return check("container.check", None, "engine %s, but %s" % (engine, reason))
    return check("container.check", bool(out.get("passed")), "engine %s: %s" % (engine, reason))


# -- everything -------------------------------------------------------------------------------------------------------
def evaluate(capture: dict[str, t.Any], schema: dict[str, t.Any] | None = None) -> list[dict[str, t.Any]]:
    """All checks for a capture: {xml_text, csv_text, nvml, facts, plans, host, record} as load_capture returns it."""
    record = capture["record"]
    checks = [
        check("capture.nvidia_smi_xml", bool(capture["xml"]["gpus"]), "%d GPU(s), driver %s; %s" % (
            len(capture["xml"]["gpus"]), capture["xml"]["driver_version"], record.get("xml_status", ""))),
        check("capture.nvidia_smi_csv", len(capture["csv"]) == len(capture["xml"]["gpus"]) and bool(capture["csv"]), "%d row(s), %d field(s); %s" % (
            len(capture["csv"]), len(capture["csv"][0]) if capture["csv"] else 0, record.get("csv_status", ""))),
        check("capture.nvml", bool(capture["nvml"]["before"].get("available")), "%d GPU(s); %s" % (
            len(capture["nvml"]["before"].get("gpus") or []), capture["nvml"]["before"].get("error") or "nvmlInit ok")),
    ]
    playbook = record.get("playbook") or {}
    checks.append(check("ansible.playbook", playbook.get("rc") == 0, "ansible-playbook exited %s%s" % (
        playbook.get("rc"), ": " + " | ".join(playbook.get("tail") or []) if playbook.get("tail") else "")))
    checks += check_sources(capture)
    checks += check_clocks(capture)
    checks += check_host(capture)
    checks += check_backends(capture)
    checks += check_settings(capture)
    checks.append(check_unchanged(capture))
    checks += check_guards(record)
    checks.append(check_doctor(capture))
    checks += check_compose(capture, schema)
    checks.append(check_container(capture))
    return checks


def safe_parse_xml(text: str) -> dict[str, t.Any]:
    try:
        return parse_xml(text)
    except (ValueError, ET.ParseError) as exc:
        return {"driver_version": None, "cuda_version": None, "gpus": [], "error": str(exc)}


def build_capture(xml_text: str, csv_text: str, nvml: dict[str, t.Any], facts: dict[str, t.Any], plans: dict[str, t.Any],
                  record: dict[str, t.Any]) -> dict[str, t.Any]:
    results = plans.get("results") or {}
    return {
        "xml": safe_parse_xml(xml_text),
        "csv": parse_csv(csv_text),
        "nvml": nvml,
        "results": dict(results, facts_nvml=facts.get("nvml"), facts_smi=facts.get("nvidia-smi")),
        "plans": plans,
        "host": facts.get("host") or {},
        "record": record,
    }


def summary_text(checks: list[dict[str, t.Any]], header: list[str]) -> str:
    failed = [c for c in checks if c["status"] == FAIL]
    skipped = [c for c in checks if c["status"] == SKIP]
    lines = ["# gpuhost.nvidia GPU tier"] + header + [
        "result: %s (%d checks: %d passed, %d failed, %d skipped)" % (
            "FAIL" if failed else "PASS", len(checks), len(checks) - len(failed) - len(skipped), len(failed), len(skipped)),
        "",
    ]
    width = max(len(c["name"]) for c in checks) if checks else 0
    for item in checks:
        lines.append("%-4s  %-*s  %s" % (item["status"], width, item["name"], " ".join(str(item["detail"]).split())))
    return "\n".join(lines) + "\n"


def parse_summary(text: str) -> dict[str, str]:
    """{check name: PASS|FAIL|SKIP} from summary.txt."""
    found = {}
    for line in text.splitlines():
        match = re.match(r"^(PASS|FAIL|SKIP)\s+(\S+)", line)
        if match:
            found[match.group(2)] = match.group(1)
    return found
