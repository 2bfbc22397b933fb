# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Container toolkit filters: nvidia_container_toolkit_errors, nvidia_container_toolkit_version, nvidia_node_labels.

Their documentation is in the sidecar .yml files. The decisions live in module_utils/_toolkit.py.
"""

from __future__ import annotations

import typing as t

from ansible_collections.gpuhost.nvidia.plugins.plugin_utils._filter_args import gpu_facts, mapping
from ansible_collections.gpuhost.nvidia.plugins.plugin_utils._lazy import module_utils

# Imported when a filter of this file first runs, not when Ansible loads the file (plugin_utils/_lazy.py).
_toolkit = module_utils("_toolkit")


def nvidia_container_toolkit_errors(request: t.Any) -> list[str]:
    """Everything wrong with the toolkit request before the host is asked anything."""
    return _toolkit.request_errors(mapping(request, "nvidia_container_toolkit_errors"))


def nvidia_container_toolkit_version(offered: t.Any, request: t.Any, source: str = "the repository") -> dict[str, t.Any]:
    """The offered version to install for the request, and every reason it cannot be installed."""
    request_map = mapping(request, "nvidia_container_toolkit_version request")
    if isinstance(offered, str):
        offered = offered.split()
    version, errors = _toolkit.pick_version(list(offered or []), str(request_map.get("version") or ""), source)
    if version is not None:
        errors = errors + _toolkit.candidate_errors(version, request_map)
    return {"version": version, "upstream": _toolkit.upstream(version) if version else None, "errors": errors}


def nvidia_node_labels(facts: t.Any, toolkit_version: t.Any = None) -> dict[str, str]:
    """Kubernetes-style node labels from the GPU facts."""
    return _toolkit.node_labels(gpu_facts(facts, "nvidia_node_labels"), str(toolkit_version) if toolkit_version else None)


class FilterModule:
    def filters(self) -> dict[str, t.Callable[..., t.Any]]:
        return {
            "nvidia_container_toolkit_errors": nvidia_container_toolkit_errors,
            "nvidia_container_toolkit_version": nvidia_container_toolkit_version,
            "nvidia_node_labels": nvidia_node_labels,
        }
