# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Helpers of the GPU facts backends (NVML, nvidia-smi, the PCI scan, their merge): text, CUDA versions, failure states.

Private to this collection: no compatibility promise outside gpuhost.nvidia.
"""

from __future__ import annotations

import typing as t

# The states live with the schema (_gpu_schema) and the identifiers in _ids; the backends import them from here too,
# so these names stay importable from _common.
from ansible_collections.gpuhost.nvidia.plugins.module_utils._gpu_schema import (  # noqa: F401  pylint: disable=unused-import
    STATE_DRIVER_NOT_LOADED,
    STATE_ERROR,
    STATE_GPU_LOST,
    STATE_LIBRARY_NOT_FOUND,
    STATE_NO_GPU,
    STATE_NO_PERMISSION,
    STATE_OK,
    STATE_PCI_ONLY,
    STATE_VERSION_MISMATCH,
)
from ansible_collections.gpuhost.nvidia.plugins.module_utils._ids import (  # noqa: F401  pylint: disable=unused-import
    device_id_from_nvml,
    driver_branch,
    format_device_id,
    normalize_bus_id,
    version_tuple,
)

# Which failure explains the host best when several backends failed (lower wins).
STATE_PRIORITY = (
    STATE_VERSION_MISMATCH,
    STATE_DRIVER_NOT_LOADED,
    STATE_NO_PERMISSION,
    STATE_LIBRARY_NOT_FOUND,
    STATE_ERROR,
)


def cuda_version_from_int(value: t.Any) -> str | None:
    """NVML's ``nvmlSystemGetCudaDriverVersion`` gives 12020 for 12.2."""
    if not isinstance(value, int) or value <= 0:
        return None
    return "%d.%d" % (value // 1000, (value % 1000) // 10)


def to_text(value: t.Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def best_failure_state(states: t.Iterable[str]) -> str | None:
    """Pick the failure state that explains the host best (see STATE_PRIORITY)."""
    present = [s for s in states if s in STATE_PRIORITY]
    if not present:
        return None
    return min(present, key=STATE_PRIORITY.index)
