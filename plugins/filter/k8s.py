# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""gpu_k8s_manifests and gpu_k8s_manifest_errors: the cluster side of a Kubernetes GPU worker; k8s_gpu_node_plan:
its host side (role k8s_gpu_node); k8s_gpu_node_rancher_plan: its containerd template on k3s and RKE2.

Their documentation is in the sidecar .yml files. The builders live in module_utils/_k8s.py, _k8s_node.py and
_k8s_rancher.py.
"""

from __future__ import annotations

import typing as t

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuhost.nvidia.plugins.plugin_utils._filter_args import guarded, mapping, plain
from ansible_collections.gpuhost.nvidia.plugins.plugin_utils._lazy import module_utils

# Imported when a filter of this file first runs, not when Ansible loads the file (plugin_utils/_lazy.py).
_k8s = module_utils("_k8s")
_k8s_node = module_utils("_k8s_node")
_k8s_rancher = module_utils("_k8s_rancher")


def gpu_k8s_manifest_errors(request: t.Any) -> list[str]:
    """Every problem of the request, for a fail task that runs before anything is applied."""
    return _k8s.request_errors(plain(mapping(request, "gpu_k8s_manifest_errors request")))


def gpu_k8s_manifests(request: t.Any) -> dict[str, t.Any]:
    """The RuntimeClass, the device plugin's objects and the test job, as Kubernetes objects."""
    request = plain(mapping(request, "gpu_k8s_manifests request"))
    errors = _k8s.request_errors(request)
    if errors:
        raise AnsibleFilterError("gpu_k8s_manifests: %s" % "; ".join(errors))
    return _k8s.manifests(request)


def k8s_gpu_node_plan(request: t.Any, markers: t.Any = None, facts: t.Any = None) -> dict[str, t.Any]:
    """What the k8s_gpu_node role does on a host: runtime, registration labels and taints, and why a step is skipped."""
    request = plain(mapping(request, "k8s_gpu_node_plan request"))
    markers = plain(mapping(markers, "k8s_gpu_node_plan markers"))
    facts = plain(mapping(facts, "k8s_gpu_node_plan facts"))
    if "nvidia_gpu" in facts:
        facts = plain(mapping(facts["nvidia_gpu"], "k8s_gpu_node_plan facts nvidia_gpu"))
    try:
        return _k8s_node.plan(request, markers, facts)
    except _k8s_node.PlanError as exc:
        raise AnsibleFilterError("k8s_gpu_node_plan: %s" % exc) from None


def k8s_gpu_node_errors(request: t.Any) -> list[str]:
    """Every problem of the k8s_gpu_node role's request, for its first task."""
    return _k8s_node.request_errors(plain(mapping(request, "k8s_gpu_node_errors request")))


def k8s_gpu_node_rancher_plan(request: t.Any) -> dict[str, t.Any]:
    """The containerd template files the k8s_gpu_node role writes or removes on k3s and RKE2, and why it refuses."""
    request = plain(mapping(request, "k8s_gpu_node_rancher_plan request"))
    problems = []
    if request.get("distribution") not in _k8s_rancher.DISTRIBUTIONS:
        problems.append("distribution %r is not one of %s" % (request.get("distribution"), ", ".join(_k8s_rancher.DISTRIBUTIONS)))
    if request.get("state") not in ("present", "absent"):
        problems.append("state %r is not present or absent" % (request.get("state"),))
    for key in ("runtime_name", "runtime_path"):
        if not isinstance(request.get(key), str) or not request.get(key):
            problems.append("%s must be a non-empty string, not %r" % (key, request.get(key)))
    files = request.get("files")
    if not isinstance(files, dict) or not all(isinstance(v, str) or v is None for v in files.values()):
        problems.append("files must map file names to their text or null, not %r" % (files,))
    if problems:
        raise AnsibleFilterError("k8s_gpu_node_rancher_plan: %s" % "; ".join(problems))
    return _k8s_rancher.plan(request)


class FilterModule:
    def filters(self) -> dict[str, t.Callable[..., t.Any]]:
        return guarded({"gpu_k8s_manifests": gpu_k8s_manifests, "gpu_k8s_manifest_errors": gpu_k8s_manifest_errors,
                        "k8s_gpu_node_plan": k8s_gpu_node_plan, "k8s_gpu_node_errors": k8s_gpu_node_errors,
                        "k8s_gpu_node_rancher_plan": k8s_gpu_node_rancher_plan})
