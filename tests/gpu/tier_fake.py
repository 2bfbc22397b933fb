# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The GPU tier against fakes: one profile seen by the fake NVML, a fake nvidia-smi and a synthetic host tree.

The profiles are the unit tests' (tests/unit/fakes/profiles). :func:`prepare` writes one copy of the profile per
side (``nvml``, ``smi``, ``host``) so that a mutation can make one side lie (``smi:gpus.0.power_limit_mw=65000``),
and ``after-nvml``/``after-smi`` copies that the fakes serve once the tier has run the modules (GPU_TIER_PHASE=after),
to stand for a GPU whose settings changed under the tier.

Run as a script, this file is the fake nvidia-smi: ``-q -x`` (smi_xml's rendering plus the clock sections),
``--help-query-gpu`` and ``--query-gpu=... --format=csv[,nounits]``, from the profile in GPU_TIER_FAKE_SMI.
"""

from __future__ import annotations

import copy
import json
import os
import sys
import typing as t

HERE = os.path.dirname(os.path.abspath(__file__))
FAKES = os.path.normpath(os.path.join(HERE, "..", "unit", "fakes"))
# The fakes need nvidia-ml-py itself (fake_pynvml takes its errors and constants from it), never the tier's guarded shim.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != os.path.join(HERE, "shim")]
if FAKES not in sys.path:
    sys.path.insert(0, FAKES)

import yaml  # noqa: E402  pylint: disable=wrong-import-position

import fake_nvidia_smi  # noqa: E402  pylint: disable=wrong-import-position,import-error
import fake_pynvml  # noqa: E402  pylint: disable=wrong-import-position,import-error
import smi_xml  # noqa: E402  pylint: disable=wrong-import-position,import-error
import sysfs  # noqa: E402  pylint: disable=wrong-import-position,import-error

SIDES = ("nvml", "smi", "host", "after-nvml", "after-smi")

# Synthetic, plausible clock tables (memory clock -> graphics clocks), the same as the settings unit tests'
# (tests/unit/settings/conftest.py CLOCKS). GeForce boards have none: application clocks are not supported there.
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
}

# --query-gpu fields the fake answers: name -> (unit, value of (profile, gpu, index) or None for [N/A]).
_COMPUTE_MODES = {0: "Default", 1: "Exclusive_Thread", 2: "Prohibited", 3: "Exclusive_Process"}


def _pair(gpu: dict[str, t.Any], key: str, index: int) -> str | None:
    pair = gpu.get(key)
    if not pair:
        return None
    return "Enabled" if pair[index] else "Disabled"


def _watts(milliwatts: t.Any) -> str | None:
    return None if milliwatts is None else "%.2f" % (milliwatts / 1000.0)


def _clock(gpu: dict[str, t.Any], key: str, which: str) -> str | None:
    if not gpu.get("supported_clocks"):
        return None
    clocks = gpu.get(key) or gpu.get("default_applications_clocks")
    return None if not clocks else str(clocks[which])


def _max_clock(gpu: dict[str, t.Any], which: str) -> str | None:
    table = gpu.get("supported_clocks")
    if not table:
        return None
    return str(max(table) if which == "memory" else max(max(v) for v in table.values()))


def _bus_id(gpu: dict[str, t.Any]) -> str:
    domain, rest = gpu["pci_bus_id"].split(":", 1)
    return ("%08x:%s" % (int(domain, 16), rest)).upper()


FIELDS: dict[str, tuple[str, t.Callable[[dict[str, t.Any], dict[str, t.Any], int], str | None]]] = {
    "index": ("", lambda p, g, i: str(i)),
    "uuid": ("", lambda p, g, i: g["uuid"]),
    "name": ("", lambda p, g, i: g["name"]),
    "pci.bus_id": ("", lambda p, g, i: _bus_id(g)),
    "driver_version": ("", lambda p, g, i: p["nvml"]["driver_version"]),
    "memory.total": ("MiB", lambda p, g, i: str(g["memory_total_mib"])),
    "persistence_mode": ("", lambda p, g, i: "Enabled" if g.get("persistence_mode") else "Disabled"),
    "compute_mode": ("", lambda p, g, i: _COMPUTE_MODES[g.get("compute_mode", 0)]),
    "power.limit": ("W", lambda p, g, i: _watts(g.get("power_limit_mw"))),
    "power.default_limit": ("W", lambda p, g, i: _watts(g.get("power_default_limit_mw", g.get("power_limit_mw")))),
    "power.min_limit": ("W", lambda p, g, i: _watts((g.get("power_limit_constraints_mw") or [None, None])[0])),
    "power.max_limit": ("W", lambda p, g, i: _watts((g.get("power_limit_constraints_mw") or [None, None])[1])),
    "ecc.mode.current": ("", lambda p, g, i: _pair(g, "ecc", 0)),
    "ecc.mode.pending": ("", lambda p, g, i: _pair(g, "ecc", 1)),
    "mig.mode.current": ("", lambda p, g, i: _pair(g, "mig", 0)),
    "mig.mode.pending": ("", lambda p, g, i: _pair(g, "mig", 1)),
    "clocks.applications.graphics": ("MHz", lambda p, g, i: _clock(g, "applications_clocks", "graphics_mhz")),
    "clocks.applications.memory": ("MHz", lambda p, g, i: _clock(g, "applications_clocks", "memory_mhz")),
    "clocks.default_applications.graphics": ("MHz", lambda p, g, i: _clock(g, "default_applications_clocks", "graphics_mhz")),
    "clocks.default_applications.memory": ("MHz", lambda p, g, i: _clock(g, "default_applications_clocks", "memory_mhz")),
    "clocks.max.graphics": ("MHz", lambda p, g, i: _max_clock(g, "graphics")),
    "clocks.max.memory": ("MHz", lambda p, g, i: _max_clock(g, "memory")),
}


# -- profiles -------------------------------------------------------------------------------------------------
def load(name: str) -> dict[str, t.Any]:
    """A unit-test profile plus its clock table (when the GPU has one)."""
    profile = fake_pynvml.load_profile(name)
    for gpu in profile.get("gpus") or []:
        for key, value in CLOCKS.get(name, {}).items():
            gpu.setdefault(key, copy.deepcopy(value))
    return profile


def parse_mutation(spec: str) -> tuple[str, list[str], t.Any]:
    """``smi:gpus.0.power_limit_mw=65000`` -> ("smi", ["gpus", "0", "power_limit_mw"], 65000); the value is YAML."""
    side, sep, rest = spec.partition(":")
    path, eq, value = rest.partition("=")
    if not sep or not eq or side not in SIDES or not path:
        raise ValueError("a mutation is SIDE:PATH=VALUE with SIDE one of %s, not %r" % (", ".join(SIDES), spec))
    return side, path.split("."), yaml.safe_load(value)


def mutate(profile: dict[str, t.Any], path: list[str], value: t.Any) -> None:
    node: t.Any = profile
    for key in path[:-1]:
        node = node[int(key)] if isinstance(node, list) else node[key]
    last = path[-1]
    if isinstance(node, list):
        node[int(last)] = value
    elif isinstance(node, dict):
        node[last] = value
    else:
        raise ValueError("%s does not lead to a mapping or a list" % ".".join(path))


def prepare(work: str, name: str, mutations: t.Iterable[str]) -> dict[str, t.Any]:
    """Write the per-side profiles and the host tree under ``work``; return the environment and the root."""
    base = load(name)
    sides = {side: copy.deepcopy(base) for side in ("nvml", "smi", "host")}
    parsed = [parse_mutation(spec) for spec in mutations]
    for side, path, value in parsed:
        if side in sides:
            mutate(sides[side], path, value)
    for side in ("nvml", "smi"):
        after = copy.deepcopy(sides[side])
        for mutation_side, path, value in parsed:
            if mutation_side == "after-" + side:
                mutate(after, path, value)
        sides["after-" + side] = after
    os.makedirs(work, exist_ok=True)
    paths = {}
    for side, profile in sides.items():
        paths[side] = os.path.join(work, "profile-%s.yaml" % side)
        with open(paths[side], "w", encoding="utf-8") as handle:
            yaml.safe_dump(profile, handle)
    root = os.path.join(work, "root")
    os.makedirs(root, exist_ok=True)
    sysfs.build(root, sides["host"])
    env = {
        "GPU_TIER_FAKE_NVML": paths["nvml"],
        "GPU_TIER_FAKE_NVML_AFTER": paths["after-nvml"],
        "GPU_TIER_FAKE_SMI": paths["smi"],
        "GPU_TIER_FAKE_SMI_AFTER": paths["after-smi"],
    }
    return {"env": env, "root": root, "smi": os.path.abspath(__file__)}


def _phase_profile(env_key: str) -> dict[str, t.Any]:
    path = os.environ[env_key]
    if os.environ.get("GPU_TIER_PHASE") == "after" and os.environ.get(env_key + "_AFTER"):
        path = os.environ[env_key + "_AFTER"]
    with open(path, "r", encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def _visible(profile: dict[str, t.Any]) -> list[dict[str, t.Any]]:
    return [g for g in profile.get("gpus") or [] if g.get("nvml_visible", g.get("driver") == "nvidia")]


# -- the fake NVML ----------------------------------------------------------------------------------------------
class TierFakeNVML(fake_pynvml.FakeNVML):
    """The unit tests' fake NVML plus the clock getters and the default power limit that the tier reads."""

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

    def nvmlDeviceGetMaxClockInfo(self, handle: t.Any, clock_type: int) -> int:
        self._check("nvmlDeviceGetMaxClockInfo", handle)
        value = _max_clock(handle.gpu, "memory" if clock_type == fake_pynvml.real.NVML_CLOCK_MEM else "graphics")
        if value is None:
            raise fake_pynvml.error("NotSupported")
        return int(value)

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

    def nvmlDeviceGetPowerManagementDefaultLimit(self, handle: t.Any) -> int:
        self._check("nvmlDeviceGetPowerManagementDefaultLimit", handle)
        return int(handle.gpu.get("power_default_limit_mw") or self._value(handle, "power_limit_mw"))


def nvml_module() -> t.Any:
    """The fake pynvml module for the profile in GPU_TIER_FAKE_NVML (its _AFTER copy once GPU_TIER_PHASE=after)."""
    return TierFakeNVML(_phase_profile("GPU_TIER_FAKE_NVML")).module


# -- the fake nvidia-smi ----------------------------------------------------------------------------------------
def _clock_xml(gpu: dict[str, t.Any]) -> str:
    def pair(tag: str, key: str) -> str:
        graphics, memory = _clock(gpu, key, "graphics_mhz"), _clock(gpu, key, "memory_mhz")
        if graphics is None or memory is None:
            return "\t\t<%s>\n\t\t\t<graphics_clock>N/A</graphics_clock>\n\t\t\t<mem_clock>N/A</mem_clock>\n\t\t</%s>\n" % (tag, tag)
        return "\t\t<%s>\n\t\t\t<graphics_clock>%s MHz</graphics_clock>\n\t\t\t<mem_clock>%s MHz</mem_clock>\n\t\t</%s>\n" % (
            tag, graphics, memory, tag)

    text = pair("applications_clocks", "applications_clocks") + pair("default_applications_clocks", "default_applications_clocks")
    table = gpu.get("supported_clocks")
    if not table:
        return text + "\t\t<max_clocks>\n\t\t\t<graphics_clock>N/A</graphics_clock>\n\t\t\t<mem_clock>N/A</mem_clock>\n" \
            "\t\t</max_clocks>\n\t\t<supported_clocks>N/A</supported_clocks>\n"
    text += "\t\t<max_clocks>\n\t\t\t<graphics_clock>%s MHz</graphics_clock>\n\t\t\t<sm_clock>%s MHz</sm_clock>\n" \
        "\t\t\t<mem_clock>%s MHz</mem_clock>\n\t\t</max_clocks>\n" % (
            _max_clock(gpu, "graphics"), _max_clock(gpu, "graphics"), _max_clock(gpu, "memory"))
    text += "\t\t<supported_clocks>\n"
    for memory in sorted(table, reverse=True):
        text += "\t\t\t<supported_mem_clock>\n\t\t\t\t<value>%d MHz</value>\n" % memory
        text += "".join("\t\t\t\t<supported_graphics_clock>%d MHz</supported_graphics_clock>\n" % g for g in table[memory])
        text += "\t\t\t</supported_mem_clock>\n"
    return text + "\t\t</supported_clocks>\n"


def _mig_xml(gpu: dict[str, t.Any]) -> str:
    """``<mig_devices>`` as the driver prints it while MIG is on: one ``<mig_device>`` per compute instance."""
    devices = [(gi, ci) for gi in sorted(gpu.get("gpu_instances") or [], key=lambda g: g["id"])
               for ci in sorted(gi.get("compute_instances") or [], key=lambda c: c["id"])]
    if not (gpu.get("mig") or [0])[0] or not devices:
        return "\t\t<mig_devices>\n\t\t\tNone\n\t\t</mig_devices>\n"
    text = "\t\t<mig_devices>\n"
    for index, (gi, ci) in enumerate(devices):
        text += ("\t\t\t<mig_device>\n\t\t\t\t<index>%d</index>\n\t\t\t\t<gpu_instance_id>%d</gpu_instance_id>\n"
                 "\t\t\t\t<compute_instance_id>%d</compute_instance_id>\n\t\t\t\t<fb_memory_usage>\n"
                 "\t\t\t\t\t<total>%d MiB</total>\n\t\t\t\t</fb_memory_usage>\n\t\t\t</mig_device>\n") % (
            index, gi["id"], ci["id"], gi["memory_mib"])
    return text + "\t\t</mig_devices>\n"


def render_xml(profile: dict[str, t.Any]) -> str:
    """smi_xml's ``nvidia-smi -q -x`` with each GPU's clock sections and, while MIG is on, its MIG devices added."""
    text = smi_xml.render(profile)
    chunks = text.split('\t<gpu id="')
    for position, gpu in enumerate(_visible(profile), start=1):
        chunk = chunks[position].replace("\t\t<mig_devices>\n\t\t\tNone\n\t\t</mig_devices>\n", _mig_xml(gpu), 1)
        chunks[position] = chunk.replace("\t\t<processes>", _clock_xml(gpu) + "\t\t<processes>", 1)
    return '\t<gpu id="'.join(chunks)


def help_query_gpu() -> str:
    lines = ['List of valid properties to query for the switch "--query-gpu=":', ""]
    for name in FIELDS:
        lines += ['"%s"' % name, "A property of the fake GPU.", ""]
    return "\n".join(lines) + "\n"


def query_gpu(profile: dict[str, t.Any], fields: list[str], fmt: str) -> tuple[int, str]:
    options = fmt.split(",")
    unknown = [f for f in fields if f not in FIELDS]
    if unknown or options[0] != "csv":
        return 2, 'Field "%s" is not a valid field to query.\n\n' % (unknown[0] if unknown else fmt)
    nounits = "nounits" in options
    lines = []
    if "noheader" not in options:
        lines.append(", ".join("%s [%s]" % (f, FIELDS[f][0]) if FIELDS[f][0] else f for f in fields))
    for index, gpu in enumerate(_visible(profile)):
        values = []
        for name in fields:
            unit, get = FIELDS[name]
            value = get(profile, gpu, index)
            values.append("[N/A]" if value is None else value if nounits or not unit else "%s %s" % (value, unit))
        lines.append(", ".join(values))
    return 0, "\n".join(lines) + "\n"


# NVML's init error in a profile -> what the real nvidia-smi prints and exits with then (fake_nvidia_smi.SCENARIOS).
_INIT_SCENARIOS = {
    "DriverNotLoaded": "driver_not_loaded",
    "LibraryNotFound": "library_not_found",
    "NoPermission": "no_permission",
    "LibRmVersionMismatch": "version_mismatch",
}


def smi_main(args: list[str]) -> int:
    profile = _phase_profile("GPU_TIER_FAKE_SMI")
    init_error = (profile.get("nvml") or {}).get("init_error")
    if init_error:
        rc, out, err = fake_nvidia_smi.SCENARIOS[_INIT_SCENARIOS.get(init_error, "unknown_error")]
        sys.stdout.write(out)
        sys.stderr.write(err)
        return rc
    if args == ["-q", "-x"]:
        sys.stdout.write(render_xml(profile))
        return 0
    if args == ["--help-query-gpu"]:
        sys.stdout.write(help_query_gpu())
        return 0
    if len(args) == 2 and args[0].startswith("--query-gpu=") and args[1].startswith("--format="):
        rc, out = query_gpu(profile, args[0].split("=", 1)[1].split(","), args[1].split("=", 1)[1])
        sys.stdout.write(out)
        return rc
    sys.stderr.write("fake nvidia-smi: %s is not implemented\n" % json.dumps(args))
    return 2


if __name__ == "__main__":
    sys.exit(smi_main(sys.argv[1:]))
