# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Driver filters: nvidia_driver_plan, nvidia_driver_candidate_errors, gpg_primary_fingerprints.

Their documentation is in the sidecar .yml files. The decisions live in module_utils/_driver.py.
"""

from __future__ import annotations

import typing as t
from collections.abc import Mapping

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _driver
from ansible_collections.gpuhost.nvidia.plugins.plugin_utils._filter_args import gpu_facts, mapping


def nvidia_driver_plan(request: t.Any, facts: t.Any = None, host: t.Any = None, capabilities: t.Any = None) -> dict[str, t.Any]:
    """What the nvidia_driver role installs, and every reason it must stop (``errors``)."""
    facts_map = gpu_facts(facts, "nvidia_driver_plan facts")
    return _driver.plan(
        mapping(request, "nvidia_driver_plan request"),
        facts_map,
        mapping(host, "nvidia_driver_plan host"),
        mapping(capabilities, "nvidia_driver_plan capabilities"),
    )


def nvidia_driver_candidate_errors(plan: t.Any, candidate: t.Any, request: t.Any = None, source_label: str = "") -> list[str]:
    """Why the version the package manager offers does not fit the plan (empty when it does)."""
    return _driver.check_candidate(mapping(plan, "nvidia_driver_candidate_errors plan"), candidate, mapping(request, "request"), source_label)


def gpg_primary_fingerprints(colons: t.Any) -> list[str]:
    """Primary key fingerprints from ``gpg --with-colons`` output."""
    if isinstance(colons, Mapping):
        colons = colons.get("stdout", "")
    return _driver.gpg_primary_fingerprints(colons)


class FilterModule:
    def filters(self) -> dict[str, t.Callable[..., t.Any]]:
        return {
            "nvidia_driver_plan": nvidia_driver_plan,
            "nvidia_driver_candidate_errors": nvidia_driver_candidate_errors,
            "gpg_primary_fingerprints": gpg_primary_fingerprints,
        }
