# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Internal filters of the rolling upgrade's Kubernetes side (playbooks/upgrade.yml): gpu_upgrade_k8s_cluster,
gpu_upgrade_k8s_node and gpu_upgrade_k8s_jobs.

Their documentation is in the sidecar .yml files. The planning lives in module_utils/_upgrade_k8s.py.
"""

from __future__ import annotations

import typing as t
from collections.abc import Mapping

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuhost.nvidia.plugins.plugin_utils._filter_args import guarded, mapping, plain, sequence
from ansible_collections.gpuhost.nvidia.plugins.plugin_utils._lazy import module_utils

# Imported when a filter of this file first runs, not when Ansible loads the file (plugin_utils/_lazy.py).
_upgrade_k8s = module_utils("_upgrade_k8s")
_labels = module_utils("_labels")


def _call(name: str, function: t.Callable[..., t.Any], *args: t.Any, **kwargs: t.Any) -> t.Any:
    try:
        return function(*args, **kwargs)
    except ValueError as exc:
        raise AnsibleFilterError("%s: %s: pass what kubernetes.core.k8s_info registered" % (name, exc)) from None


def _flag(value: t.Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise AnsibleFilterError("%s must be true or false, got %r" % (name, value))
    return value


def _node_name(value: t.Any, name: str) -> str:
    if not isinstance(value, str) or not value or len(value) > 253 or not _upgrade_k8s.NODE_NAME_RE.fullmatch(value):
        raise AnsibleFilterError("%s must be a Kubernetes node name (a DNS subdomain such as gpu-node-1), got %r" % (name, value))
    return value


def gpu_upgrade_k8s_cluster(nodes: t.Any, roll: t.Any, targets: t.Any, max_unavailable: t.Any = None, serial: t.Any = 1) -> dict[str, t.Any]:
    """The roll over the cluster (module_utils/_upgrade_k8s.py cluster_plan)."""
    if not isinstance(roll, Mapping):
        roll = sequence(roll, "gpu_upgrade_k8s_cluster: roll", "give one {host, node} per host of the roll, or a dict host: node")
    targets = mapping(targets, "gpu_upgrade_k8s_cluster: targets")
    return _call("gpu_upgrade_k8s_cluster", _upgrade_k8s.cluster_plan, plain(nodes), plain(roll), plain(dict(targets)),
                 max_unavailable, serial)


def gpu_upgrade_k8s_node(node: t.Any, pods: t.Any, target: t.Any, drain: t.Any = False) -> dict[str, t.Any]:
    """One node at its turn (module_utils/_upgrade_k8s.py node_plan)."""
    if isinstance(target, Mapping):
        target = _upgrade_k8s.target_id(plain(dict(target)))
    if not isinstance(target, str) or not target or not _labels.valid_label_value(target):
        raise AnsibleFilterError("gpu_upgrade_k8s_node: target must be the roll's targets (gpu_upgrade_targets) or the cluster "
                                 "plan's target, got %r" % (target,))
    return _call("gpu_upgrade_k8s_node", _upgrade_k8s.node_plan, plain(node), plain(pods), target,
                 _flag(drain, "gpu_upgrade_k8s_node: drain"))


def gpu_upgrade_k8s_jobs(pods: t.Any, node: t.Any) -> list[str]:
    """The named jobs' pods on the node that have not finished (module_utils/_upgrade_k8s.py jobs_running)."""
    return _call("gpu_upgrade_k8s_jobs", _upgrade_k8s.jobs_running, plain(pods), _node_name(node, "gpu_upgrade_k8s_jobs: node"))


class FilterModule:
    def filters(self) -> dict[str, t.Callable[..., t.Any]]:
        return guarded({
            "gpu_upgrade_k8s_cluster": gpu_upgrade_k8s_cluster,
            "gpu_upgrade_k8s_node": gpu_upgrade_k8s_node,
            "gpu_upgrade_k8s_jobs": gpu_upgrade_k8s_jobs,
        })
