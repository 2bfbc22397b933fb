# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Pure planner for nvidia_smi_settings: desired settings vs the current state of each GPU -> per-GPU changes.

Private to this collection: no compatibility promise outside gpuhost.nvidia.

Nothing here talks to NVML or runs a command. The module reads each GPU into a *current view* (see
:func:`current_view`), asks :func:`select` which GPUs a request means, :func:`validate` whether the request fits
them, and :func:`plan_gpu` what to change.

Every check of a request lives here: :func:`check_params` (everything no GPU is needed to see, run before the
module looks for GPUs) and :func:`plan_host` (selection, what the source can do, each GPU's limits, and what only
the plan shows), so the module's ``main`` only wires options, backends and results. ECC and MIG mode changes are *pending* until a GPU reset or a reboot,
so they are compared with the pending value, and a pending change is never planned twice.
"""

from __future__ import annotations

import fnmatch
import re
import typing as t
from collections.abc import Mapping

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.errors import UnsupportedError

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _gpu_schema, _validate
from ansible_collections.gpuhost.nvidia.plugins.module_utils._gpu_schema import (
    STATE_DRIVER_NOT_LOADED,
    STATE_NO_GPU,
    STATE_OK,
    STATE_VERSION_MISMATCH,
    describe_unknown,
    onoff,
    process_view,
)
from ansible_collections.gpuhost.nvidia.plugins.module_utils._ids import normalize_bus_id

# The facts schema's compute modes as the module's option spells them (nvidia-smi -c takes the same words).
COMPUTE_MODES = tuple(mode.upper() for mode in _gpu_schema.SETTABLE_COMPUTE_MODES)
# NVML's nvmlComputeMode_t values; EXCLUSIVE_THREAD (1) is deprecated and can only be read.
COMPUTE_MODE_VALUES = {mode.upper(): value for mode, value in _gpu_schema.COMPUTE_MODE_VALUES.items()}

# The order in which settings are applied. Persistence first (it keeps the driver loaded for the rest),
# MIG layout last (it needs MIG mode on).
SETTINGS = (
    "persistence_mode",
    "compute_mode",
    "power_limit",
    "applications_clocks",
    "locked_clocks",
    "ecc",
    "mig",
)
PENDING_SETTINGS = ("ecc", "mig")

# NVML compute instance profile index (NVML_COMPUTE_INSTANCE_PROFILE_<n>_SLICE) by slice count.
CI_PROFILE_BY_SLICES = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}
SLICES_BY_CI_PROFILE = {v: k for k, v in CI_PROFILE_BY_SLICES.items()}

_GI_PROFILE_RE = re.compile(r"^(\d+)g\.(\d+)gb(\+[a-z]+)?$")
_CI_PROFILE_RE = re.compile(r"^(?:(\d+)c\.)?(\d+g\.\d+gb(?:\+[a-z]+)?)$")
_LIST_LIMIT = 16


class SettingsError(Exception):
    """A request that cannot be applied; raised before anything changes."""


# -- the options, checked before any GPU is looked for -----------------------------------------------------------
# Limits beyond every GPU made so far, so that a typo (1e12 W, a negative clock) is refused everywhere, also on a
# host without GPUs. What a particular GPU allows is checked against that GPU afterwards.
MAX_GPUS = 64
MAX_POWER_W = 5000.0
MAX_CLOCK_MHZ = 50000
MAX_GPU_INSTANCES = 7  # the most MIG GPU instances (and compute instances) any MIG-capable GPU offers
_NUMBER_RE = re.compile(r"^[+-]?\d+$")


class GpuSelector(_validate.Text):
    """One item of ``gpus``: all, an index, a GPU UUID, a PCI bus id, or a model name (shell wildcards allowed)."""

    def __init__(self) -> None:
        super().__init__(max_length=128, space=True, what="all, a GPU index, a GPU UUID, a PCI bus id or a model name")

    def check(self, option: str, value: t.Any) -> None:
        super().check(option, value)
        if value.lower() == "all":
            return
        if _NUMBER_RE.fullmatch(value):
            if not value.isdigit() or int(value) >= MAX_GPUS:
                raise _validate.InputError(option, value, "is not a GPU index (0 to %d)" % (MAX_GPUS - 1))
        elif value.upper().startswith("MIG-"):
            raise _validate.InputError(option, value, "is a MIG device; MIG devices have no settings of their own: select their GPU")
        elif value.upper().startswith("GPU-"):
            if not _validate.GPU_UUID_RE.fullmatch("GPU-" + value[4:]):
                raise _validate.InputError(option, value, "is not a GPU UUID such as GPU-5c6d7e8f-1111-4222-8333-444455556666")
        elif ":" in value and normalize_bus_id(value) is None:
            raise _validate.InputError(option, value, "is not a PCI bus id such as 0000:07:00.0")


_CLOCK = _validate.Integer(1, MAX_CLOCK_MHZ, "no GPU clock is that fast")
_PROFILE = _validate.Text(max_length=32, space=True, what="a MIG profile name such as 1g.5gb")
RULES: dict[str, _validate.Rule] = {
    "gpus": _validate.ListOf(GpuSelector(), min_items=1, max_items=MAX_GPUS),
    "power_limit": _validate.Number(above=0, maximum=MAX_POWER_W, why="no GPU draws that much"),
    "applications_clocks": _validate.Fields({"memory_mhz": _CLOCK, "graphics_mhz": _CLOCK}),
    "locked_clocks": _validate.Fields({"min_mhz": _CLOCK, "max_mhz": _CLOCK}),
    "mig_layout": _validate.ListOf(
        _validate.Fields({
            "profile": _PROFILE,
            "count": _validate.Integer(0, MAX_GPU_INSTANCES, "a GPU holds at most %d MIG GPU instances" % MAX_GPU_INSTANCES),
            "compute_instances": _validate.ListOf(_PROFILE, max_items=MAX_GPU_INSTANCES),
        }),
        max_items=MAX_GPU_INSTANCES,
    ),
    "state_path": _validate.Path(),
}


def settings_options() -> dict[str, t.Any]:
    """nvidia_smi_settings' options for the settings themselves: its argument_spec less ``reset_gpus`` and
    ``state_path``. gpu_settings checks its gpu_settings_spec against the same options (:func:`spec_errors`)."""
    return dict(
        gpus=dict(type="list", elements="str", default=["all"]),
        persistence_mode=dict(type="bool"),
        compute_mode=dict(type="str", choices=list(COMPUTE_MODES)),
        power_limit=dict(type="float"),
        applications_clocks=dict(
            type="dict",
            options=dict(memory_mhz=dict(type="int"), graphics_mhz=dict(type="int"), reset=dict(type="bool")),
            required_together=[["memory_mhz", "graphics_mhz"]],
            required_one_of=[["memory_mhz", "reset"]],
            mutually_exclusive=[["memory_mhz", "reset"], ["graphics_mhz", "reset"]],
        ),
        locked_clocks=dict(
            type="dict",
            options=dict(min_mhz=dict(type="int"), max_mhz=dict(type="int"), reset=dict(type="bool")),
            required_together=[["min_mhz", "max_mhz"]],
            required_one_of=[["min_mhz", "reset"]],
            mutually_exclusive=[["min_mhz", "reset"], ["max_mhz", "reset"]],
        ),
        ecc=dict(type="bool"),
        mig=dict(type="bool"),
        mig_layout=dict(
            type="list",
            elements="dict",
            options=dict(
                profile=dict(type="str", required=True),
                count=dict(type="int", default=1),
                compute_instances=dict(type="list", elements="str"),
            ),
        ),
    )


def check_options(params: t.Mapping[str, t.Any]) -> list[str]:
    """Everything wrong with the options that no GPU is needed to see."""
    errors = _validate.check(params, RULES)
    if not errors:
        total = sum(int(e.get("count") if e.get("count") is not None else 1) for e in params.get("mig_layout") or [])
        if total > MAX_GPU_INSTANCES:
            errors.append("mig_layout: declares %d GPU instances; a GPU holds at most %d" % (total, MAX_GPU_INSTANCES))
    return errors


_CLOCK_PAIRS = (("applications_clocks", ("memory_mhz", "graphics_mhz")), ("locked_clocks", ("min_mhz", "max_mhz")))


def _clock_pair_errors(params: t.Mapping[str, t.Any]) -> list[str]:
    errors = []
    for key, pair in _CLOCK_PAIRS:
        value = params.get(key)
        if value is not None and not value.get("reset") and value.get(pair[0]) is None:
            errors.append("%s needs %s and %s, or reset: true" % (key, pair[0], pair[1]))
    return errors


def check_params(params: t.Mapping[str, t.Any]) -> list[str]:
    """Everything wrong with the module's parameters that no GPU is needed to see, so a bad value fails on every host.

    Three stages, and the first that finds something reports it: each option's rules (:func:`check_options`), the
    clock pairs (both clocks or ``reset``), then the request as a whole (:func:`check_request`).
    """
    errors = check_options(params)
    if not errors:
        errors = _clock_pair_errors(params)
    if not errors:
        errors = check_request(desired_from_params(params))
    return errors


def spec_errors(spec: t.Any) -> list[str]:
    """Everything wrong with a settings spec (gpu_settings' gpu_settings_spec: options of the module) that the module
    would refuse on any host: Ansible's own check of the options the module declares (types, choices, the clock pairs),
    then :func:`check_params`. The role runs it on the controller before it changes anything; empty when all is well."""
    if not isinstance(spec, Mapping):
        return ["must be a dict of nvidia_smi_settings options, got %s" % type(spec).__name__]
    checked = ArgumentSpecValidator(settings_options()).validate(dict(spec))
    if checked.error_messages:
        # As the module words an unknown option ("Unsupported parameters for ... module: foo. Supported ...").
        return [("unsupported option " if isinstance(error, UnsupportedError) else "") + error.msg for error in checked.errors]
    return check_params(dict(checked.validated_parameters))


# Host states where there is nothing to configure yet: the module reports them and is skipped, never a failure.
QUIET_STATES = (STATE_DRIVER_NOT_LOADED, STATE_NO_GPU, STATE_VERSION_MISMATCH)


def empty_result(state: str, msg: str, source: str | None, messages: list[str]) -> dict[str, t.Any]:
    """The module's result keys for a run that looked at no GPU and changed nothing."""
    return dict(
        changed=False,
        state=state,
        msg=msg,
        source=source,
        messages=messages,
        gpus=[],
        reboot_required=False,
        reset_required=False,
        reasons=[],
        applied=[],
        diff={"before": {}, "after": {}},
    )


def idle_result(facts: t.Any) -> dict[str, t.Any] | None:
    """The module's result on a host whose GPU facts (``ansible_facts.nvidia_gpu``, read on that host in the same run)
    leave nothing to apply, without calling the module; None when only the module can tell.

    Two states, each one the module reaches too (tests/unit/settings/test_settings_idle.py): no NVIDIA GPU on the PCI
    bus (``no_gpu``, ``present`` false), and GPUs with no nvidia kernel module loaded (``driver_not_loaded``). NVML and
    nvidia-smi need the module, so neither could read a GPU's settings, let alone change one."""
    if not isinstance(facts, Mapping):
        return None
    state = facts.get("state")
    driver = facts.get("driver") if isinstance(facts.get("driver"), Mapping) else {}
    if state == STATE_NO_GPU and facts.get("present") is False:
        why = "no NVIDIA GPU on the PCI bus"
    elif state == STATE_DRIVER_NOT_LOADED and driver.get("kernel_module_loaded") is False:
        why = "the nvidia kernel module is not loaded"
    else:
        return None
    messages = [m for m in facts.get("messages") or [] if isinstance(m, str) and m]
    note = "the GPU facts of this run: %s; nothing to apply (the settings module was not called)" % why
    return dict(empty_result(state, note, None, messages), skipped=True)


# -- naming ---------------------------------------------------------------------------------------------------
def gpu_label(gpu: t.Mapping[str, t.Any]) -> str:
    """``GPU 0 (0000:07:00.0, NVIDIA A100-SXM4-40GB)``."""
    details = [str(v) for v in (gpu.get("pci_bus_id"), gpu.get("name")) if v]
    return "GPU %s (%s)" % (gpu.get("index"), ", ".join(details)) if details else "GPU %s" % gpu.get("index")


def diff_key(gpu: t.Mapping[str, t.Any]) -> str:
    return "GPU %s %s" % (gpu.get("index"), gpu.get("uuid") or gpu.get("pci_bus_id") or "")


def _values(values: t.Iterable[t.Any], unit: str = "") -> str:
    items = list(values)
    if not items:
        return "none"
    suffix = " %s" % unit if unit else ""
    if len(items) <= _LIST_LIMIT:
        return ", ".join(str(v) for v in items) + suffix
    return "%s%s to %s%s (%d values)" % (min(items), suffix, max(items), suffix, len(items))


def _watts(value: float | int | None) -> str:
    if value is None:
        return "unknown"
    return ("%.2f" % value).rstrip("0").rstrip(".")


# -- MIG profile names ----------------------------------------------------------------------------------------
def normalize_gi_profile(name: str) -> str:
    """``MIG 3g.20gb`` / ``3G.20GB`` -> ``3g.20gb``."""
    text = str(name).strip().lower()
    if text.startswith("mig "):
        text = text[4:].strip()
    return text


def parse_ci_profile(name: str, gi_profile: str) -> tuple[int | None, str]:
    """``1c.3g.20gb`` -> (1, ``3g.20gb``); ``3g.20gb`` -> (None, ``3g.20gb``) meaning the whole GPU instance."""
    text = normalize_gi_profile(name)
    match = _CI_PROFILE_RE.fullmatch(text)
    if not match:
        raise ValueError(name)
    return (int(match.group(1)) if match.group(1) else None), match.group(2)


def gi_slices_from_name(name: str) -> int | None:
    match = _GI_PROFILE_RE.fullmatch(normalize_gi_profile(name))
    return int(match.group(1)) if match else None


def ci_profile_name(slices: int, gi_profile: str, gi_slices: int) -> str:
    return gi_profile if slices == gi_slices else "%dc.%s" % (slices, gi_profile)


# -- the request ----------------------------------------------------------------------------------------------
def desired_from_params(params: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """The module's options -> a normalized desired-state dict (None: leave that setting alone)."""
    desired: dict[str, t.Any] = {
        "persistence_mode": params.get("persistence_mode"),
        "compute_mode": params.get("compute_mode"),
        "power_limit": params.get("power_limit"),
        "applications_clocks": None,
        "locked_clocks": None,
        "ecc": params.get("ecc"),
        "mig": params.get("mig"),
        "mig_layout": None,
    }
    apps = params.get("applications_clocks")
    if apps is not None:
        desired["applications_clocks"] = (
            {"reset": True} if apps.get("reset") else {"memory_mhz": apps["memory_mhz"], "graphics_mhz": apps["graphics_mhz"]}
        )
    locked = params.get("locked_clocks")
    if locked is not None:
        desired["locked_clocks"] = {"reset": True} if locked.get("reset") else {"min_mhz": locked["min_mhz"], "max_mhz": locked["max_mhz"]}
    layout = params.get("mig_layout")
    if layout is not None:
        desired["mig_layout"] = expand_layout(layout)
    return desired


def expand_layout(layout: t.Iterable[t.Mapping[str, t.Any]]) -> list[dict[str, t.Any]]:
    """``[{profile: 1g.5gb, count: 2}]`` -> one entry per GPU instance with its compute instance profiles."""
    expanded = []
    for entry in layout:
        profile = normalize_gi_profile(entry["profile"])
        cis = entry.get("compute_instances")
        ci_names = [normalize_gi_profile(c) for c in cis] if cis else [profile]
        for dummy in range(int(entry.get("count", 1) if entry.get("count") is not None else 1)):
            expanded.append({"profile": profile, "compute_instances": list(ci_names)})
    return expanded


def check_request(desired: t.Mapping[str, t.Any]) -> list[str]:
    """Errors in the request itself, independent of the GPUs."""
    errors = []
    if desired["power_limit"] is not None and desired["power_limit"] <= 0:
        errors.append("power_limit must be a positive number of watts, got %s" % _watts(desired["power_limit"]))
    locked = desired["locked_clocks"]
    if locked and not locked.get("reset") and locked["min_mhz"] > locked["max_mhz"]:
        errors.append("locked_clocks: min_mhz %d is above max_mhz %d" % (locked["min_mhz"], locked["max_mhz"]))
    if desired["mig_layout"] and desired["mig"] is False:
        errors.append("mig_layout declares MIG instances but mig is false; set mig: true or drop mig_layout")
    for entry in desired["mig_layout"] or []:
        if gi_slices_from_name(entry["profile"]) is None:
            errors.append("mig_layout: %r is not a GPU instance profile name such as 1g.5gb or 3g.20gb" % entry["profile"])
            continue
        for ci in entry["compute_instances"]:
            try:
                _count, gi = parse_ci_profile(ci, entry["profile"])
            except ValueError:
                errors.append("mig_layout: %r is not a compute instance profile name such as 1c.3g.20gb" % ci)
                continue
            if gi != entry["profile"]:
                errors.append("mig_layout: compute instance %r does not belong to GPU instance profile %s" % (ci, entry["profile"]))
    return errors


def managed(desired: t.Mapping[str, t.Any]) -> list[str]:
    return [key for key in SETTINGS + ("mig_layout",) if desired.get(key) is not None]


# -- selection ------------------------------------------------------------------------------------------------
def _describe_gpus(gpus: t.Sequence[t.Mapping[str, t.Any]]) -> str:
    if not gpus:
        return "none"
    return "; ".join("%s %s %s %s" % (g.get("index"), g.get("uuid"), g.get("pci_bus_id"), g.get("name")) for g in gpus)


def select(gpus: t.Sequence[t.Mapping[str, t.Any]], selectors: t.Sequence[str]) -> list[t.Mapping[str, t.Any]]:
    """GPUs matched by ``all``, an index, a UUID, a PCI bus id or a model name (shell-style wildcards allowed).

    Raises SettingsError naming every selector that matches nothing and listing the GPUs there are.
    """
    chosen: dict[int, t.Mapping[str, t.Any]] = {}
    unmatched = []
    for raw in selectors:
        selector = str(raw).strip()
        matches: list[t.Mapping[str, t.Any]]
        if selector.lower() == "all":
            matches = list(gpus)
        elif selector.isdigit():
            matches = [g for g in gpus if g.get("index") == int(selector)]
        elif selector.upper().startswith(("GPU-", "MIG-")):
            matches = [g for g in gpus if (g.get("uuid") or "").lower() == selector.lower()]
        elif normalize_bus_id(selector) is not None:
            bus = normalize_bus_id(selector)
            matches = [g for g in gpus if g.get("pci_bus_id") == bus]
        else:
            pattern = selector.lower()
            matches = [g for g in gpus if g.get("name") and fnmatch.fnmatchcase(g["name"].lower(), pattern)]
        if not matches and selector.lower() != "all":
            unmatched.append(selector)
        for gpu in matches:
            chosen[id(gpu)] = gpu
    if unmatched:
        raise SettingsError(
            "gpus: no GPU matches %s. GPUs on this host (index, UUID, PCI bus id, name): %s"
            % (", ".join(repr(s) for s in unmatched), _describe_gpus(gpus))
        )
    return sorted(chosen.values(), key=lambda g: g.get("index") if g.get("index") is not None else -1)


# -- the current view -----------------------------------------------------------------------------------------
def processes_error_of(record: t.Mapping[str, t.Any]) -> str | None:
    """Why a facts GPU record's processes cannot be known (the facts' own reading), or None when they were read."""
    unknown = process_view({"present": True, "gpus": [record]})["unknown"]
    return describe_unknown(unknown) if unknown else None


def current_view(record: t.Mapping[str, t.Any], extra: t.Mapping[str, t.Any] | None = None) -> dict[str, t.Any]:
    """A facts GPU record (from _nvml/_smi) plus the extra reads the settings need -> the planner's view."""
    extra = extra or {}
    mode = record.get("compute_mode")
    view = {
        "index": record.get("index"),
        "uuid": record.get("uuid"),
        "name": record.get("name"),
        "pci_bus_id": record.get("pci_bus_id"),
        "state": record.get("state", "ok"),
        "message": record.get("message"),
        "persistence_mode": record.get("persistence_mode"),
        "compute_mode": mode.upper() if isinstance(mode, str) else None,
        "power_limit": record.get("power_limit_w"),
        "power_limit_min": record.get("power_limit_min_w"),
        "power_limit_max": record.get("power_limit_max_w"),
        "ecc": dict(record.get("ecc") or {"current": None, "pending": None}),
        "mig": dict(record.get("mig") or {"current": None, "pending": None}),
        "processes": list(record["processes"]) if isinstance(record.get("processes"), list) else [],
        # Why the processes are unknown (null, or not read): a reset or a destroyed MIG instance is then refused too.
        "processes_error": processes_error_of(record),
        "applications_clocks": extra.get("applications_clocks"),
        "default_applications_clocks": extra.get("default_applications_clocks"),
        "supported_clocks": extra.get("supported_clocks"),
        "locked_clocks": extra.get("locked_clocks"),
        "mig_profiles": extra.get("mig_profiles"),
        "mig_instances": extra.get("mig_instances"),
    }
    return view


# -- validation -----------------------------------------------------------------------------------------------
def _not_supported(gpu: t.Mapping[str, t.Any], option: str, what: str) -> str:
    return "%s: %s: the driver reports %s as not supported on this GPU" % (gpu_label(gpu), option, what)


def validate(desired: t.Mapping[str, t.Any], gpu: t.Mapping[str, t.Any], capable: t.Mapping[str, list[str]] | None = None) -> list[str]:
    """Everything wrong with applying ``desired`` to one GPU, as messages that name the GPU and the allowed values."""
    errors: list[str] = []
    label = gpu_label(gpu)
    if desired["persistence_mode"] is not None and gpu["persistence_mode"] is None:
        errors.append(_not_supported(gpu, "persistence_mode", "persistence mode"))
    if desired["compute_mode"] is not None and gpu["compute_mode"] is None:
        errors.append(_not_supported(gpu, "compute_mode", "the compute mode"))
    power = desired["power_limit"]
    if power is not None:
        low, high = gpu["power_limit_min"], gpu["power_limit_max"]
        if low is None or high is None:
            errors.append(_not_supported(gpu, "power_limit", "power management limits"))
        elif not low <= power <= high:
            errors.append(
                "%s: power_limit %s W is outside the range this GPU allows: %s to %s W" % (label, _watts(power), _watts(low), _watts(high))
            )
    errors.extend(_validate_clocks(desired, gpu))
    if desired["ecc"] is not None and gpu["ecc"].get("current") is None:
        errors.append(_not_supported(gpu, "ecc", "ECC mode"))
    if (desired["mig"] is not None or desired["mig_layout"] is not None) and gpu["mig"].get("current") is None:
        others = (capable or {}).get("mig") or []
        errors.append(
            "%s: mig: this GPU does not support MIG (the driver reports MIG mode as not supported); MIG-capable GPUs on this host: %s"
            % (label, ", ".join(others) if others else "none")
        )
    elif desired["mig_layout"]:
        errors.extend(_validate_layout(desired, gpu))
    return errors


def _validate_clocks(desired: t.Mapping[str, t.Any], gpu: t.Mapping[str, t.Any]) -> list[str]:
    errors = []
    label = gpu_label(gpu)
    supported = gpu.get("supported_clocks")
    apps = desired["applications_clocks"]
    if apps is not None:
        if not supported or gpu.get("applications_clocks") is None:
            errors.append(_not_supported(gpu, "applications_clocks", "application clocks"))
        elif not apps.get("reset"):
            memory = apps["memory_mhz"]
            if memory not in supported:
                errors.append(
                    "%s: applications_clocks: memory_mhz %d is not a supported memory clock; supported: %s"
                    % (label, memory, _values(sorted(supported, reverse=True), "MHz"))
                )
            elif apps["graphics_mhz"] not in supported[memory]:
                errors.append(
                    "%s: applications_clocks: graphics_mhz %d is not supported with memory_mhz %d; supported: %s"
                    % (label, apps["graphics_mhz"], memory, _values(sorted(supported[memory], reverse=True), "MHz"))
                )
    locked = desired["locked_clocks"]
    if locked is not None:
        graphics = sorted({clock for clocks in (supported or {}).values() for clock in clocks})
        if not graphics:
            errors.append(_not_supported(gpu, "locked_clocks", "the supported graphics clocks needed to lock them"))
        elif not locked.get("reset"):
            low, high = graphics[0], graphics[-1]
            for key in ("min_mhz", "max_mhz"):
                if not low <= locked[key] <= high:
                    errors.append(
                        "%s: locked_clocks: %s %d is outside the supported graphics clocks, %d to %d MHz" % (label, key, locked[key], low, high)
                    )
    return errors


def _validate_layout(desired: t.Mapping[str, t.Any], gpu: t.Mapping[str, t.Any]) -> list[str]:
    errors = []
    label = gpu_label(gpu)
    profiles = gpu.get("mig_profiles") or {}
    if not profiles:
        return ["%s: mig_layout: the driver lists no GPU instance profiles for this GPU" % label]
    allowed = ", ".join(sorted(profiles, key=lambda p: (profiles[p]["slices"], p)))
    total_slices = max(p["slices"] for p in profiles.values())
    used = 0
    for entry in desired["mig_layout"]:
        profile = profiles.get(entry["profile"])
        if profile is None:
            errors.append("%s: mig_layout: GPU instance profile %s is not available; available profiles: %s" % (label, entry["profile"], allowed))
            continue
        used += profile["slices"]
        ci_used = 0
        for ci in entry["compute_instances"]:
            count, _gi = parse_ci_profile(ci, entry["profile"])
            slices = profile["slices"] if count is None else count
            allowed_ci = [ci_profile_name(s, entry["profile"], profile["slices"]) for s in sorted(CI_PROFILE_BY_SLICES) if s <= profile["slices"]]
            if slices not in CI_PROFILE_BY_SLICES or slices > profile["slices"]:
                errors.append(
                    "%s: mig_layout: compute instance profile %s does not fit GPU instance %s; allowed: %s"
                    % (label, ci, entry["profile"], ", ".join(allowed_ci))
                )
            ci_used += slices
        if ci_used > profile["slices"]:
            errors.append(
                "%s: mig_layout: the compute instances %s need %d slices but a %s GPU instance has %d"
                % (label, ", ".join(entry["compute_instances"]), ci_used, entry["profile"], profile["slices"])
            )
    if used > total_slices:
        errors.append(
            "%s: mig_layout needs %d slices but the GPU has %d (profiles: %s)"
            % (label, used, total_slices, ", ".join("%s=%d" % (p, profiles[p]["slices"]) for p in sorted(profiles)))
        )
    return errors


# -- planning -------------------------------------------------------------------------------------------------
def _clocks_equal(current: t.Any, desired: t.Mapping[str, t.Any], default: t.Any) -> bool:
    if desired.get("reset"):
        return current == default
    return current == {k: v for k, v in desired.items() if k != "reset"}


def _pending_value(pair: t.Mapping[str, t.Any]) -> t.Any:
    return pair.get("pending") if pair.get("pending") is not None else pair.get("current")


def plan_gpu(desired: t.Mapping[str, t.Any], gpu: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """Per-GPU plan: ``changes`` (ordered operations), ``before``/``after`` of each managed setting, notes."""
    changes: list[dict[str, t.Any]] = []
    before: dict[str, t.Any] = {}
    after: dict[str, t.Any] = {}
    notes: list[str] = []

    def change(setting: str, old: t.Any, new: t.Any, op: str, **args: t.Any) -> None:
        changes.append({"setting": setting, "op": op, "before": old, "after": new, "args": args})

    for key in ("persistence_mode", "compute_mode"):
        if desired[key] is None:
            continue
        before[key] = gpu[key]
        after[key] = desired[key]
        if gpu[key] != desired[key]:
            change(key, gpu[key], desired[key], key, value=desired[key])

    if desired["power_limit"] is not None:
        want_mw = int(round(desired["power_limit"] * 1000))
        have_mw = None if gpu["power_limit"] is None else int(round(gpu["power_limit"] * 1000))
        before["power_limit"] = gpu["power_limit"]
        after["power_limit"] = want_mw / 1000.0
        if have_mw != want_mw:
            change("power_limit", gpu["power_limit"], want_mw / 1000.0, "power_limit", milliwatts=want_mw)

    apps = desired["applications_clocks"]
    if apps is not None:
        current = gpu.get("applications_clocks")
        default = gpu.get("default_applications_clocks")
        target = default if apps.get("reset") else {"memory_mhz": apps["memory_mhz"], "graphics_mhz": apps["graphics_mhz"]}
        before["applications_clocks"] = current
        after["applications_clocks"] = target
        if not _clocks_equal(current, apps, default):
            if apps.get("reset"):
                change("applications_clocks", current, target, "applications_clocks_reset")
            else:
                change("applications_clocks", current, target, "applications_clocks", memory_mhz=apps["memory_mhz"], graphics_mhz=apps["graphics_mhz"])

    locked = desired["locked_clocks"]
    if locked is not None:
        current = gpu.get("locked_clocks")
        target = "reset" if locked.get("reset") else {"min_mhz": locked["min_mhz"], "max_mhz": locked["max_mhz"]}
        before["locked_clocks"] = current
        after["locked_clocks"] = target
        if current != target:
            if locked.get("reset"):
                change("locked_clocks", current, target, "locked_clocks_reset")
            else:
                change("locked_clocks", current, target, "locked_clocks", min_mhz=locked["min_mhz"], max_mhz=locked["max_mhz"])

    planned_pairs: dict[str, dict[str, t.Any]] = {}
    for key in PENDING_SETTINGS:
        pair = dict(gpu[key])
        planned_pairs[key] = pair
        if desired[key] is None:
            continue
        before[key] = dict(gpu[key])
        if _pending_value(gpu[key]) != desired[key]:
            change(key, dict(gpu[key]), {"current": pair["current"], "pending": desired[key]}, key, value=desired[key])
            pair["pending"] = desired[key]
        after[key] = dict(pair)

    mig_ops: list[dict[str, t.Any]] = []
    if desired["mig_layout"] is not None:
        current_layout = layout_of(gpu.get("mig_instances") or [])
        before["mig_layout"] = current_layout
        if gpu["mig"].get("current") and planned_pairs["mig"].get("pending") is not False:
            mig_ops, kept = plan_layout(desired["mig_layout"], gpu)
            after["mig_layout"] = sorted(kept + [{"profile": e["profile"], "compute_instances": sorted(e["compute_instances"])} for e in _created(mig_ops)],
                                         key=_layout_key)
            if mig_ops:
                changes.append(
                    {
                        "setting": "mig_layout",
                        "op": "mig_layout",
                        "before": current_layout,
                        "after": after["mig_layout"],
                        "args": {"operations": mig_ops},
                    }
                )
        else:
            after["mig_layout"] = current_layout
            notes.append(
                "%s: mig_layout is applied once MIG mode is active; it is %s now (pending: %s)"
                % (gpu_label(gpu), onoff(gpu["mig"].get("current")), onoff(planned_pairs["mig"].get("pending")))
            )

    return {
        "index": gpu["index"],
        "uuid": gpu["uuid"],
        "name": gpu["name"],
        "pci_bus_id": gpu["pci_bus_id"],
        "changes": changes,
        "before": before,
        "after": after,
        "pending": pending_of(planned_pairs),
        "notes": notes,
    }


def pending_of(pairs: t.Mapping[str, t.Mapping[str, t.Any]]) -> list[dict[str, t.Any]]:
    """Settings whose pending value differs from the current one."""
    pending = []
    for key in PENDING_SETTINGS:
        pair = pairs.get(key) or {}
        if pair.get("current") is not None and pair.get("pending") is not None and pair["current"] != pair["pending"]:
            pending.append({"setting": key, "current": pair["current"], "pending": pair["pending"]})
    return pending


def _layout_key(entry: t.Mapping[str, t.Any]) -> tuple[t.Any, ...]:
    return (-(gi_slices_from_name(entry["profile"]) or 0), entry["profile"], tuple(entry["compute_instances"]))


def layout_of(instances: t.Iterable[t.Mapping[str, t.Any]]) -> list[dict[str, t.Any]]:
    """The current instances as a layout (GPU instance profile + sorted compute instance profiles), sorted."""
    return sorted(
        ({"profile": gi["profile"], "compute_instances": sorted(ci["profile"] for ci in gi["compute_instances"])} for gi in instances),
        key=_layout_key,
    )


def _created(ops: t.Iterable[t.Mapping[str, t.Any]]) -> list[dict[str, t.Any]]:
    return [{"profile": op["profile"], "compute_instances": op["compute_instances"]} for op in ops if op["op"] == "create_gi"]


def plan_layout(layout: t.Sequence[t.Mapping[str, t.Any]], gpu: t.Mapping[str, t.Any]) -> tuple[list[dict[str, t.Any]], list[dict[str, t.Any]]]:
    """Operations that turn the GPU's instances into ``layout``: destroy what is not wanted, then create.

    GPU instances whose profile and compute instances already match are kept untouched. Returns (operations, kept).
    """
    profiles = gpu.get("mig_profiles") or {}
    wanted: list[tuple[str, tuple[str, ...]]] = [(e["profile"], tuple(sorted(e["compute_instances"]))) for e in layout]
    ops: list[dict[str, t.Any]] = []
    kept: list[dict[str, t.Any]] = []
    for gi in sorted(gpu.get("mig_instances") or [], key=lambda g: g["gi"]):
        signature = (gi["profile"], tuple(sorted(ci["profile"] for ci in gi["compute_instances"])))
        if signature in wanted:
            wanted.remove(signature)
            kept.append({"profile": signature[0], "compute_instances": list(signature[1])})
            continue
        for ci in sorted(gi["compute_instances"], key=lambda c: c["ci"]):
            ops.append({"op": "destroy_ci", "gi": gi["gi"], "ci": ci["ci"], "profile": ci["profile"]})
        ops.append({"op": "destroy_gi", "gi": gi["gi"], "profile": gi["profile"]})
    for profile, cis in sorted(wanted, key=lambda w: (-(profiles.get(w[0], {}).get("slices") or 0), w[0], w[1])):
        gi_slices = profiles[profile]["slices"]
        ci_ops = []
        for ci in cis:
            count, _gi = parse_ci_profile(ci, profile)
            slices = gi_slices if count is None else count
            ci_ops.append({"profile": ci, "profile_id": CI_PROFILE_BY_SLICES[slices], "slices": slices})
        ops.append({"op": "create_gi", "profile": profile, "profile_id": profiles[profile]["id"], "compute_instances": list(cis), "cis": ci_ops})
    return ops, kept


def blocking_processes(gpu: t.Mapping[str, t.Any], ops: t.Iterable[t.Mapping[str, t.Any]]) -> list[dict[str, t.Any]]:
    """Processes running in a GPU instance that ``ops`` would destroy."""
    doomed = {op["gi"] for op in ops if op["op"] in ("destroy_gi", "destroy_ci")}
    return [p for p in gpu.get("processes") or [] if p.get("gpu_instance_id") in doomed]


def describe_processes(processes: t.Iterable[t.Mapping[str, t.Any]]) -> str:
    parts = []
    for proc in processes:
        where = ""
        if proc.get("gpu_instance_id") is not None:
            where = " in GPU instance %s" % proc["gpu_instance_id"]
        parts.append("%s (%s)%s" % (proc.get("pid"), proc.get("name") or "name unknown", where))
    return ", ".join(parts)


def check_plan(plan: t.Mapping[str, t.Any], gpu: t.Mapping[str, t.Any], reset: bool) -> list[str]:
    """Errors that only the plan shows: instances in use, a requested reset that processes block."""
    errors = []
    for item in plan["changes"]:
        if item["op"] == "mig_layout":
            blocking = blocking_processes(gpu, item["args"]["operations"])
            if blocking:
                errors.append(
                    "%s: mig_layout would destroy MIG instances that processes are using: %s; stop them first"
                    % (gpu_label(gpu), describe_processes(blocking))
                )
    unknown = gpu.get("processes_error")
    for item in plan["changes"]:
        if item["op"] == "mig_layout" and unknown and any(op["op"] in ("destroy_gi", "destroy_ci") for op in item["args"]["operations"]):
            errors.append(
                "%s: mig_layout would destroy MIG instances, but the GPU's processes cannot be read (%s), so they may be in "
                "use; make them readable (run as root, a working driver) and run again" % (gpu_label(gpu), unknown)
            )
    if reset and plan["pending"] and gpu.get("processes"):
        errors.append(
            "%s: reset_gpus: the GPU needs a reset for %s but processes are running on it: %s; it is never reset while in use"
            % (gpu_label(gpu), " and ".join(p["setting"].upper() for p in plan["pending"]), describe_processes(gpu["processes"]))
        )
    elif reset and plan["pending"] and unknown:
        errors.append(
            "%s: reset_gpus: the GPU needs a reset for %s but its processes cannot be read (%s); it is never reset without "
            "knowing that it is idle: make them readable, or set reset_gpus: false and reboot"
            % (gpu_label(gpu), " and ".join(p["setting"].upper() for p in plan["pending"]), unknown)
        )
    return errors


def pending_reasons(gpu: t.Mapping[str, t.Any], pending: t.Iterable[t.Mapping[str, t.Any]]) -> list[str]:
    """One sentence per pending change, naming the processes that keep the GPU from being reset."""
    reasons = []
    processes = gpu.get("processes") or []
    for item in pending:
        label = {"ecc": "ECC mode", "mig": "MIG mode"}[item["setting"]]
        text = "%s: %s change pending (%s -> %s); it takes effect after a GPU reset or a reboot" % (
            gpu_label(gpu),
            label,
            onoff(item["current"]),
            onoff(item["pending"]),
        )
        if processes:
            text += "; a reset is blocked by running processes %s" % describe_processes(processes)
        elif gpu.get("processes_error"):
            text += "; a reset is blocked: the GPU's processes cannot be read (%s)" % gpu["processes_error"]
        reasons.append(text)
    return reasons


def summarize(plans: t.Sequence[t.Mapping[str, t.Any]]) -> dict[str, t.Any]:
    """The module's diff: ``before``/``after`` keyed by GPU."""
    return {
        "before": {diff_key(p): p["before"] for p in plans},
        "after": {diff_key(p): p["after"] for p in plans},
    }


# -- one host: every check against the GPUs, then the plans, then what the module reports ---------------------
def plan_host(
    desired: t.Mapping[str, t.Any],
    views: t.Sequence[t.Mapping[str, t.Any]],
    params: t.Mapping[str, t.Any],
    source: str | None,
    messages: t.Sequence[str],
    can_reset: bool,
) -> dict[str, t.Any]:
    """Select the GPUs, check the request against them and plan each.

    Returns {skip, errors, selected, plans, to_reset, changed}. ``skip`` is a message when there is nothing to
    configure (no GPU listed and every selector is ``all``); ``errors`` stops the run before anything changes: a
    selector that matches nothing, a MIG layout without NVML, a GPU that cannot be configured or whose limits the
    request breaks, a reset without nvidia-smi, and what only the plans show (busy MIG instances, a busy GPU to reset).
    ``can_reset``: the nvidia-smi binary is there; ``messages``: why a richer source was not used.
    """
    result: dict[str, t.Any] = {"skip": None, "errors": [], "selected": [], "plans": [], "to_reset": [], "changed": False}
    if not views and all(str(s).strip().lower() == "all" for s in params["gpus"]):
        result["skip"] = "the driver lists no GPU; nothing to configure"
        return result
    try:
        selected = select(views, params["gpus"])
    except SettingsError as exc:
        result["errors"] = [str(exc)]
        return result
    if source == "nvidia-smi" and desired["mig_layout"] is not None:
        result["errors"] = ["mig_layout needs NVML (nvidia-ml-py), which could not be used here: %s" % "; ".join(messages)]
        return result
    capable = {"mig": [gpu_label(g) for g in views if g["mig"].get("current") is not None]}
    errors = []
    for gpu in selected:
        if gpu["state"] != STATE_OK:
            errors.append("%s: cannot be configured: %s" % (gpu_label(gpu), gpu.get("message") or gpu["state"]))
            continue
        errors.extend(validate(desired, gpu, capable))
    if params["reset_gpus"] and not can_reset:
        errors.append("reset_gpus needs the nvidia-smi binary, which is not in PATH")
    plans = []
    if not errors:
        for gpu in selected:
            plan = plan_gpu(desired, gpu)
            errors.extend(check_plan(plan, gpu, params["reset_gpus"]))
            plans.append(plan)
    if errors:
        result["errors"] = errors
        return result
    to_reset = [gpu for gpu, plan in zip(selected, plans) if params["reset_gpus"] and plan["pending"]]
    result.update(selected=selected, plans=plans, to_reset=to_reset, changed=bool(to_reset) or any(plan["changes"] for plan in plans))
    return result


def report(host: t.Mapping[str, t.Any], after: t.Mapping[t.Any, t.Mapping[str, t.Any]] | None, check_mode: bool) -> dict[str, t.Any]:
    """The module's msg, gpus, reboot_required, reset_required, reasons and notes for a :func:`plan_host` result.

    ``after``: the views read after the changes were applied, by GPU index (None when nothing was applied). A GPU
    that is (in check mode, would be) reset has no pending change left.
    """
    gpus_out = []
    reasons: list[str] = []
    reboot_required = reset_required = False
    plans = host["plans"]
    for gpu, plan in zip(host["selected"], plans):
        after_view = (after or {}).get(gpu["index"], gpu)
        if gpu in host["to_reset"]:
            pending = []
        elif after is not None:
            pending = pending_of({key: after_view[key] for key in PENDING_SETTINGS})
        else:
            pending = plan["pending"]
        gpu_reasons = pending_reasons(after_view, pending)
        reasons.extend(gpu_reasons)
        if pending:
            reboot_required = True
            reset_required = reset_required or not (after_view.get("processes") or after_view.get("processes_error"))
        gpus_out.append(
            {
                "index": gpu["index"],
                "uuid": gpu["uuid"],
                "pci_bus_id": gpu["pci_bus_id"],
                "name": gpu["name"],
                "changes": [{"setting": c["setting"], "before": c["before"], "after": c["after"]} for c in plan["changes"]],
                "settings": plan["after"],
                "pending": pending,
                "processes": after_view.get("processes") or [],
                "processes_error": after_view.get("processes_error"),
            }
        )
    count = sum(len(p["changes"]) for p in plans)
    touched = sum(1 for p in plans if p["changes"])
    if check_mode and host["changed"]:
        msg = "%d setting(s) would change on %d GPU(s)" % (count, touched)
    elif host["changed"]:
        msg = "%d setting(s) changed on %d GPU(s)" % (count, touched)
    else:
        msg = "%d GPU(s) already as requested" % len(plans)
    if host["to_reset"]:
        msg += "; %d GPU(s) %sreset" % (len(host["to_reset"]), "would be " if check_mode else "")
    return {
        "msg": msg,
        "gpus": gpus_out,
        "reboot_required": reboot_required,
        "reset_required": reset_required,
        "reasons": reasons,
        "notes": [note for plan in plans for note in plan["notes"]],
    }


# -- the nvidia-smi fallback ----------------------------------------------------------------------------------
def smi_argv(binary: str, gpu: t.Mapping[str, t.Any], change: t.Mapping[str, t.Any]) -> list[list[str]]:
    """The nvidia-smi argument lists that apply one planned change to one GPU (selected by PCI bus id)."""
    target = ["-i", gpu["pci_bus_id"] or str(gpu["index"])]
    op = change["op"]
    args = change["args"]
    if op == "persistence_mode":
        return [[binary] + target + ["-pm", "1" if args["value"] else "0"]]
    if op == "compute_mode":
        return [[binary] + target + ["-c", args["value"]]]
    if op == "power_limit":
        return [[binary] + target + ["-pl", _watts(args["milliwatts"] / 1000.0)]]
    if op == "applications_clocks":
        return [[binary] + target + ["-ac", "%d,%d" % (args["memory_mhz"], args["graphics_mhz"])]]
    if op == "applications_clocks_reset":
        return [[binary] + target + ["-rac"]]
    if op == "locked_clocks":
        return [[binary] + target + ["-lgc", "%d,%d" % (args["min_mhz"], args["max_mhz"])]]
    if op == "locked_clocks_reset":
        return [[binary] + target + ["-rgc"]]
    if op == "ecc":
        return [[binary] + target + ["-e", "1" if args["value"] else "0"]]
    if op == "mig":
        return [[binary] + target + ["-mig", "1" if args["value"] else "0"]]
    raise SettingsError("%s: %s cannot be applied through nvidia-smi by this module; it needs NVML (nvidia-ml-py)" % (gpu_label(gpu), op))


def reset_argv(binary: str, gpu: t.Mapping[str, t.Any]) -> list[str]:
    return [binary, "--gpu-reset", "-i", gpu["pci_bus_id"] or str(gpu["index"])]
