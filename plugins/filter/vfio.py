# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""vfio_passthrough_plan: the pure decision behind the vfio_passthrough role.

Its documentation is in the sidecar .yml file. The decisions live in module_utils/_vfio.py.
"""

from __future__ import annotations

import typing as t

from ansible_collections.gpuhost.nvidia.plugins.plugin_utils._filter_args import gpu_facts, guarded, mapping
from ansible_collections.gpuhost.nvidia.plugins.plugin_utils._lazy import module_utils

# Imported when a filter of this file first runs, not when Ansible loads the file (plugin_utils/_lazy.py).
_vfio = module_utils("_vfio")


def vfio_passthrough_plan(request: t.Any, facts: t.Any = None, host: t.Any = None) -> dict[str, t.Any]:
    """The functions to pass through, the kernel arguments, and every reason to stop (``errors``)."""
    # Not checked here: the planner lists facts of the wrong type among its errors, as it never fails on bad input.
    facts_map = gpu_facts(facts, "vfio_passthrough_plan facts", check=False)
    return _vfio.plan(mapping(request, "vfio_passthrough_plan request"), facts_map, mapping(host, "vfio_passthrough_plan host"))


class FilterModule:
    def filters(self) -> dict[str, t.Callable[..., t.Any]]:
        return guarded({"vfio_passthrough_plan": vfio_passthrough_plan})
