# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""gpu_k8s_manifests and gpu_k8s_manifest_errors: the cluster side of a Kubernetes GPU worker.

Their documentation is in the sidecar .yml files. The builders live in module_utils/_k8s.py.
"""

from __future__ import annotations

import typing as t

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuhost.nvidia.plugins.plugin_utils._filter_args import guarded, mapping, plain
from ansible_collections.gpuhost.nvidia.plugins.plugin_utils._lazy import module_utils

# Imported when a filter of this file first runs, not when Ansible loads the file (plugin_utils/_lazy.py).
_k8s = module_utils("_k8s")


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


class FilterModule:
    def filters(self) -> dict[str, t.Callable[..., t.Any]]:
        return guarded({"gpu_k8s_manifests": gpu_k8s_manifests, "gpu_k8s_manifest_errors": gpu_k8s_manifest_errors})
