# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Signs on a host, or on its Kubernetes node, that NVIDIA's GPU Operator manages its driver or container toolkit.

Private to this collection: no compatibility promise outside gpuhost.nvidia.

The collection installs the host's driver and toolkit. Where the GPU Operator already runs its own (a driver container,
a toolkit DaemonSet), a second one fights it: two kernel modules, two runtimes in the engine's configuration. The
roles refuse, naming what they saw and the Operator setting to change (docs/kubernetes.md, "GPU Operator").

What counts (docs/sources.md, "GPU Operator"):

- driver, on the host: the driver container's PID file ``/run/nvidia/nvidia-driver.pid``, and its root filesystem
  bind-mounted at ``/run/nvidia/driver`` (a directory that holds files; the Operator's other DaemonSets create it empty
  where the driver is the host's, so an empty directory is no sign);
- toolkit, on the host: the runtime the Operator's toolkit container installs under ``/usr/local/nvidia/toolkit``
  (``toolkit.installDir`` ``/usr/local/nvidia``);
- on the node: a pod of the DaemonSets ``nvidia-driver-daemonset`` or ``nvidia-container-toolkit-daemonset`` (their
  ``app`` label).

The Operator installs no systemd unit on the host, and its node label ``nvidia.com/gpu.deploy.driver=true`` is set on
every GPU node whether or not its driver is enabled: neither is a sign. A path that cannot be read is reported as a
sign (it may be one): a check that cannot see fails closed.
"""

from __future__ import annotations

import os
import typing as t
from collections.abc import Mapping, Sequence

COMPONENTS = ("driver", "toolkit")
DRIVER_PID_FILE = "run/nvidia/nvidia-driver.pid"
DRIVER_ROOT = "run/nvidia/driver"
TOOLKIT_RUNTIME = "usr/local/nvidia/toolkit/nvidia-container-runtime"
# The app label of the Operator's DaemonSets' pods (gpu-operator assets/state-driver, assets/state-container-toolkit).
POD_APPS = {"driver": "nvidia-driver-daemonset", "toolkit": "nvidia-container-toolkit-daemonset"}
# The Operator setting that gives the host's own driver or toolkit the node.
FIX = {
    "driver": ("set the GPU Operator's driver.enabled=false (Helm value; ClusterPolicy spec.driver.enabled), or label "
               "this node nvidia.com/gpu.deploy.driver=false, and let its driver container finish uninstalling"),
    "toolkit": ("set the GPU Operator's toolkit.enabled=false (Helm value; ClusterPolicy spec.toolkit.enabled), or label "
                "this node nvidia.com/gpu.deploy.container-toolkit=false, and remove /usr/local/nvidia/toolkit"),
}


def _path(root: str, relative: str) -> str:
    return os.path.join(root, relative)


def _shown(root: str, relative: str) -> str:
    return "/" + relative if root in ("", "/") else os.path.join(root, relative)


def host_evidence(root: str = "/") -> dict[str, list[str]]:
    """What the host under ``root`` shows of an Operator-managed driver and toolkit, one sentence each."""
    found: dict[str, list[str]] = {name: [] for name in COMPONENTS}
    pid = _path(root, DRIVER_PID_FILE)
    try:
        if os.path.lexists(pid):
            found["driver"].append("%s exists (the driver container's PID file)" % _shown(root, DRIVER_PID_FILE))
    except OSError as exc:  # pragma: no cover - lexists does not raise
        found["driver"].append("%s cannot be read: %s" % (_shown(root, DRIVER_PID_FILE), exc.strerror))
    driver_root = _path(root, DRIVER_ROOT)
    try:
        entries = sorted(os.listdir(driver_root))
    except FileNotFoundError:
        entries = []
    except NotADirectoryError:
        entries = []
    except OSError as exc:
        found["driver"].append("%s cannot be read (%s): it may hold the driver container's root" % (_shown(root, DRIVER_ROOT), exc.strerror))
        entries = []
    if entries:
        shown = ", ".join(entries[:5]) + (", ..." if len(entries) > 5 else "")
        found["driver"].append("%s holds %s (the driver container's root filesystem)" % (_shown(root, DRIVER_ROOT), shown))
    runtime = _path(root, TOOLKIT_RUNTIME)
    if os.path.lexists(runtime):
        found["toolkit"].append("%s exists (the Operator's toolkit)" % _shown(root, TOOLKIT_RUNTIME))
    else:
        parent = os.path.dirname(runtime)
        if os.path.lexists(parent) and not os.access(parent, os.R_OK | os.X_OK):
            found["toolkit"].append("%s cannot be read: it may hold the Operator's toolkit" % _shown(root, os.path.dirname(TOOLKIT_RUNTIME)))
    return found


def pod_evidence(pods: t.Any, node_name: str) -> dict[str, list[str]]:
    """The Operator's driver and toolkit pods on ``node_name`` in a Pod list (k8s_info ``resources``), by component."""
    found: dict[str, list[str]] = {name: [] for name in COMPONENTS}
    items = pods.get("resources", []) if isinstance(pods, Mapping) else pods
    if not isinstance(items, Sequence) or isinstance(items, (str, bytes)):
        return found
    for pod in items:
        meta = pod.get("metadata") if isinstance(pod, Mapping) else None
        spec = pod.get("spec") if isinstance(pod, Mapping) else None
        if not isinstance(meta, Mapping) or not isinstance(spec, Mapping) or spec.get("nodeName") != node_name:
            continue
        labels = meta.get("labels") if isinstance(meta.get("labels"), Mapping) else {}
        for component, app in POD_APPS.items():
            if labels.get("app") == app:
                found[component].append("the pod %s/%s (app=%s) runs on the node" % (meta.get("namespace"), meta.get("name"), app))
    return found


def refusals(evidence: Mapping[str, Sequence[str]], components: Sequence[str]) -> list[str]:
    """One refusal per component asked for that shows signs: what was seen and the Operator setting to change."""
    return ["the GPU Operator manages this node's %s: %s. Installing a second one would fight it: %s"
            % ("NVIDIA driver" if name == "driver" else "NVIDIA container toolkit", "; ".join(evidence.get(name) or []), FIX[name])
            for name in components if evidence.get(name)]
