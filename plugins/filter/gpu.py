# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""GPU filters: select_gpus, gpu_arch, cuda_supported. Their documentation is in the sidecar .yml files."""

from __future__ import annotations

import math
import typing as t
from collections.abc import Mapping, Sequence

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuhost.nvidia.plugins.plugin_utils._filter_args import gpu_facts, guarded, sequence, whole
from ansible_collections.gpuhost.nvidia.plugins.plugin_utils._lazy import module_utils

# Imported when a filter of this file first runs, not when Ansible loads the file (plugin_utils/_lazy.py).
_catalog = module_utils("_catalog")
_gpu_schema = module_utils("_gpu_schema")

PREFER = ("lowest_utilization", "lowest_index", "most_memory")


FACTS_FIX = "pass ansible_facts.nvidia_gpu as gpuhost.nvidia.nvidia_gpu_facts returns it"


def _gpus_of(facts: t.Any) -> list[Mapping[str, t.Any]]:
    if isinstance(facts, Mapping):
        if "nvidia_gpu" in facts and isinstance(facts["nvidia_gpu"], Mapping):
            facts = facts["nvidia_gpu"]
        gpus = facts.get("gpus")
        if gpus is None:
            raise AnsibleFilterError("select_gpus: expected ansible_facts.nvidia_gpu (a dict with 'gpus'), got a dict without 'gpus'")
        return _entries(gpus, "select_gpus: facts gpus")
    if isinstance(facts, (str, bytes)) or not isinstance(facts, Sequence):
        raise AnsibleFilterError("select_gpus: expected ansible_facts.nvidia_gpu or its 'gpus' list, got %s" % type(facts).__name__)
    return _entries(facts, "select_gpus: facts gpus")


def _entries(value: t.Any, name: str) -> list[Mapping[str, t.Any]]:
    """A list of dicts of the facts; anything else in it fails, naming where (a GPU that cannot be read is not skipped)."""
    entries = sequence(value, name, FACTS_FIX)
    for index, entry in enumerate(entries):
        if not isinstance(entry, Mapping):
            raise AnsibleFilterError("%s[%d] must be a dict, got %s %r: %s" % (name, index, type(entry).__name__, entry, FACTS_FIX))
    return entries


def _utilization(gpu: Mapping[str, t.Any], where: str) -> float:
    util = gpu.get("utilization")
    if util is None:
        return float("inf")
    if not isinstance(util, Mapping):
        raise AnsibleFilterError("%s.utilization must be a dict, got %r: %s" % (where, util, FACTS_FIX))
    if util.get("gpu") is None:
        return float("inf")
    return float(whole(util["gpu"], where + ".utilization.gpu", FACTS_FIX))


def _models(models: t.Any) -> list[str]:
    if isinstance(models, str):
        models = [models]
    wanted = sequence(models, "select_gpus: models", "give model names such as ['H100']")
    bad = [m for m in wanted if not isinstance(m, str)]
    if bad:
        raise AnsibleFilterError("select_gpus: models must be strings such as 'H100', got %r" % (bad[0],))
    return [m.lower() for m in wanted]


def select_gpus(
    facts: t.Any,
    min_memory_mib: int = 0,
    models: Sequence[str] | None = None,
    count: int | None = None,
    prefer: str = "lowest_utilization",
    allow_mig: bool = False,
) -> list[str]:
    """UUIDs of the usable GPUs (or MIG devices) that match, best first."""
    if not isinstance(prefer, str) or prefer not in PREFER:
        raise AnsibleFilterError("select_gpus: prefer must be one of %s, got %r" % (", ".join(PREFER), prefer))
    wanted = _models(models)
    min_memory = whole(min_memory_mib if min_memory_mib is not None else 0, "select_gpus: min_memory_mib", "give MiB such as 80000")
    wanted_count = None if count is None else whole(count, "select_gpus: count", "give how many GPUs, or leave it out for all")

    candidates: list[tuple[tuple[t.Any, ...], str]] = []
    for number, gpu in enumerate(_gpus_of(facts)):
        where = "select_gpus: facts gpus[%d]" % number
        # The compose planner's rule (_gpu_schema.container_unusable); the filter returns UUIDs, so it also needs one.
        if _gpu_schema.container_unusable(gpu) or not gpu.get("uuid"):
            continue
        name = str(gpu.get("name") or "").lower()
        if wanted and not any(w in name for w in wanted):
            continue
        index = whole(gpu["index"], where + ".index", FACTS_FIX) if gpu.get("index") is not None else 1 << 30
        mig = gpu.get("mig") if gpu.get("mig") is not None else {}
        if not isinstance(mig, Mapping):
            raise AnsibleFilterError("%s.mig must be a dict {current, pending}, got %r: %s" % (where, mig, FACTS_FIX))
        if _gpu_schema.mig_on(gpu):
            if not allow_mig:
                continue
            units = []
            for sub, device in enumerate(_entries(gpu.get("mig_devices"), where + ".mig_devices")):
                place = (whole(device.get("gi") or 0, "%s.mig_devices[%d].gi" % (where, sub), FACTS_FIX),
                         whole(device.get("ci") or 0, "%s.mig_devices[%d].ci" % (where, sub), FACTS_FIX))
                units.append((device.get("uuid"), device.get("memory_mib"), place, "%s.mig_devices[%d].memory_mib" % (where, sub)))
        else:
            units = [(gpu.get("uuid"), gpu.get("memory_total_mib"), (0, 0), where + ".memory_total_mib")]
        for uuid, memory, sub, memory_where in units:
            if not uuid or memory is None:
                continue
            if not isinstance(uuid, str):
                raise AnsibleFilterError("%s: uuid must be a string, got %r: %s" % (where, uuid, FACTS_FIX))
            memory = whole(memory, memory_where, FACTS_FIX)
            if memory < min_memory:
                continue
            if prefer == "lowest_utilization":
                key: tuple[t.Any, ...] = (_utilization(gpu, where), index, sub)
            elif prefer == "most_memory":
                key = (-memory, index, sub)
            else:
                key = (index, sub)
            candidates.append((key, uuid))
    candidates.sort(key=lambda c: c[0])
    uuids = [uuid for _key, uuid in candidates]
    if wanted_count is None:
        return uuids
    if len(uuids) < wanted_count:
        raise AnsibleFilterError("select_gpus: %d GPU(s) requested but only %d match" % (wanted_count, len(uuids)))
    return uuids[:wanted_count]


def gpu_arch(value: t.Any) -> str | None:
    """Architecture from a compute capability, a PCI device id, or a GPU entry of the facts."""
    if isinstance(value, Mapping):
        return _catalog.gpu_architecture(value)
    if isinstance(value, float):
        value = "%.1f" % value
    return _catalog.architecture(value)


def cuda_supported(driver: t.Any, cuda_version: t.Any, minor_version_compatibility: bool = False) -> bool:
    """Whether a driver version or branch (or the facts) runs a CUDA toolkit release."""
    if isinstance(driver, Mapping):
        if "nvidia_gpu" in driver or "driver" in driver:
            driver = gpu_facts(driver, "cuda_supported driver").get("driver") or {}
        driver = driver.get("version") or driver.get("branch")
        if driver is None:
            raise AnsibleFilterError("cuda_supported: the GPU facts hold no driver version or branch (is the driver loaded?), "
                                     "so it cannot tell whether the driver runs CUDA %r" % (cuda_version,))
    if isinstance(driver, int) and not isinstance(driver, bool):
        driver = str(driver)
    if isinstance(cuda_version, float) and math.isfinite(cuda_version):
        cuda_version = repr(cuda_version)
    for name, value in (("driver", driver), ("cuda_version", cuda_version)):
        if not isinstance(value, str):
            raise AnsibleFilterError("cuda_supported: %s must be a version string such as '550.54.15' or '12.4' (or the GPU facts), got %s %r"
                                     % (name, type(value).__name__, value))
    result = _catalog.cuda_supported(driver, cuda_version, bool(minor_version_compatibility))
    if result is None:
        raise AnsibleFilterError("cuda_supported: cannot tell whether driver %r supports CUDA %r" % (driver, cuda_version))
    return result


class FilterModule:
    def filters(self) -> dict[str, t.Callable[..., t.Any]]:
        return guarded({
            "select_gpus": select_gpus,
            "gpu_arch": gpu_arch,
            "cuda_supported": cuda_supported,
        })
