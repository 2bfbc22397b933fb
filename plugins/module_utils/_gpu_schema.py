# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The facts schema: the per-GPU record of ``ansible_facts.nvidia_gpu.gpus[]`` and the words its values use.

Private to this collection: no compatibility promise outside gpuhost.nvidia.

Every reader (NVML in _nvml, ``nvidia-smi -q -x`` in _smi, the PCI scan through _facts) starts from
:func:`empty_gpu_record`, so a GPU has every key whichever source saw it. The compute mode names and the on/off
words are defined here once: the facts, the settings planner and the boot script's tests read them from here.
The nvidia_gpu_facts module's RETURN block documents each key.
"""

from __future__ import annotations

import typing as t

from ansible_collections.gpuhost.nvidia.plugins.module_utils._common import STATE_OK

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
