# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""GPU filters: select_gpus, gpu_arch, cuda_supported. Their documentation is in the sidecar .yml files."""

from __future__ import annotations

import typing as t
from collections.abc import Mapping, Sequence

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuhost.nvidia.plugins.plugin_utils._lazy import module_utils

# Imported when a filter of this file first runs, not when Ansible loads the file (plugin_utils/_lazy.py).
_catalog = module_utils("_catalog")
_driver = module_utils("_driver")

PREFER = ("lowest_utilization", "lowest_index", "most_memory")


def _gpus_of(facts: t.Any) -> list[Mapping[str, t.Any]]:
    if isinstance(facts, Mapping):
        if "nvidia_gpu" in facts and isinstance(facts["nvidia_gpu"], Mapping):
            facts = facts["nvidia_gpu"]
        gpus = facts.get("gpus")
        if gpus is None:
            raise AnsibleFilterError("select_gpus: expected ansible_facts.nvidia_gpu (a dict with 'gpus'), got a dict without 'gpus'")
        facts = gpus
    if isinstance(facts, (str, bytes)) or not isinstance(facts, Sequence):
        raise AnsibleFilterError("select_gpus: expected ansible_facts.nvidia_gpu or its 'gpus' list, got %s" % type(facts).__name__)
    return [g for g in facts if isinstance(g, Mapping)]


def _utilization(gpu: Mapping[str, t.Any]) -> float:
    util = gpu.get("utilization")
    if isinstance(util, Mapping) and util.get("gpu") is not None:
        return float(util["gpu"])
    return float("inf")


def select_gpus(
    facts: t.Any,
    min_memory_mib: int = 0,
    models: Sequence[str] | None = None,
    count: int | None = None,
    prefer: str = "lowest_utilization",
    allow_mig: bool = False,
) -> list[str]:
    """UUIDs of the usable GPUs (or MIG devices) that match, best first."""
    if prefer not in PREFER:
        raise AnsibleFilterError("select_gpus: prefer must be one of %s, got %r" % (", ".join(PREFER), prefer))
    if isinstance(models, str):
        models = [models]
    wanted = [m.lower() for m in (models or [])]
    try:
        min_memory = int(min_memory_mib or 0)
        wanted_count = None if count is None else int(count)
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError("select_gpus: min_memory_mib and count must be integers: %s" % exc) from exc
    if wanted_count is not None and wanted_count < 0:
        raise AnsibleFilterError("select_gpus: count must not be negative, got %d" % wanted_count)

    candidates: list[tuple[tuple[t.Any, ...], str]] = []
    for gpu in _gpus_of(facts):
        if gpu.get("state") != "ok" or not gpu.get("uuid"):
            continue
        name = str(gpu.get("name") or "").lower()
        if wanted and not any(w in name for w in wanted):
            continue
        index = gpu.get("index") if gpu.get("index") is not None else 1 << 30
        mig_on = bool((gpu.get("mig") or {}).get("current"))
        if mig_on:
            if not allow_mig:
                continue
            units = [(m.get("uuid"), m.get("memory_mib"), (m.get("gi") or 0, m.get("ci") or 0)) for m in gpu.get("mig_devices") or []]
        else:
            units = [(gpu.get("uuid"), gpu.get("memory_total_mib"), (0, 0))]
        for uuid, memory, sub in units:
            if not uuid or memory is None or memory < min_memory:
                continue
            if prefer == "lowest_utilization":
                key: tuple[t.Any, ...] = (_utilization(gpu), index, sub)
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
        return _driver.gpu_architecture(value)
    if isinstance(value, float):
        value = "%.1f" % value
    return _catalog.architecture(value)


def cuda_supported(driver: t.Any, cuda_version: t.Any, minor_version_compatibility: bool = False) -> bool:
    """Whether a driver version or branch (or the facts) runs a CUDA toolkit release."""
    if isinstance(driver, Mapping):
        if "nvidia_gpu" in driver:
            driver = driver["nvidia_gpu"]
        if "driver" in driver and isinstance(driver["driver"], Mapping):
            driver = driver["driver"]
        driver = driver.get("version") or driver.get("branch")
    if isinstance(driver, int):
        driver = str(driver)
    if isinstance(cuda_version, float):
        cuda_version = repr(cuda_version)
    result = _catalog.cuda_supported(driver, cuda_version, bool(minor_version_compatibility))
    if result is None:
        raise AnsibleFilterError("cuda_supported: cannot tell whether driver %r supports CUDA %r" % (driver, cuda_version))
    return result


class FilterModule:
    def filters(self) -> dict[str, t.Callable[..., t.Any]]:
        return {
            "select_gpus": select_gpus,
            "gpu_arch": gpu_arch,
            "cuda_supported": cuda_supported,
        }
