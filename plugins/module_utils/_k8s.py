# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Pure builders of the cluster side of a Kubernetes GPU worker: the RuntimeClass, NVIDIA's device plugin with its
sharing configurations, and the GPU test job.

Private to this collection: no compatibility promise outside gpuhost.nvidia.

The device plugin's objects are what NVIDIA's own Helm chart renders at the pinned release
(NVIDIA/k8s-device-plugin ``deployments/helm/nvidia-device-plugin/templates``, tag ``v0.20.0``) with the chart's
defaults and a configuration map: the config-manager init container and sidecar pick each node's configuration by the
node label ``nvidia.com/device-plugin.config``, and its ClusterRole lets them read the nodes. Every value of the request
is checked before anything is built; :func:`request_errors` names every problem at once.
"""

from __future__ import annotations

import re
import typing as t

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _kubelet

# NVIDIA/k8s-device-plugin v0.20.0: deployments/static/nvidia-device-plugin.yml and the Helm chart (docs/sources.md).
DEVICE_PLUGIN_IMAGE = "nvcr.io/nvidia/k8s-device-plugin"
DEVICE_PLUGIN_VERSION = "v0.20.0"
CONFIG_NODE_LABEL = "nvidia.com/device-plugin.config"
GPU_RESOURCE = "nvidia.com/gpu"
TEST_IMAGE = "nvidia/cuda:12.4.1-base-ubuntu22.04"

_DNS_LABEL_RE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_VERSION_RE = re.compile(r"v\d+\.\d+\.\d+")
# An image reference: registry host (optional port), path components; the device plugin's image has no tag (the version
# is added), the test image may have a tag and a digest.
_IMAGE_NAME = r"[a-z0-9]+([._-][a-z0-9]+)*(\.[a-z0-9]+([._-][a-z0-9]+)*)*(:\d{1,5})?"
_IMAGE_PATH = r"(/[a-z0-9]+([._-]{1,2}[a-z0-9]+)*)"
_IMAGE_RE = re.compile(_IMAGE_NAME + _IMAGE_PATH + "+")
_TAGGED_IMAGE_RE = re.compile(_IMAGE_NAME + _IMAGE_PATH + "*" + r"(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@sha256:[0-9a-f]{64})?")
_SUBDOMAIN_RE = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
_NAME_RE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
MIG_STRATEGIES = ("none", "single", "mixed")

DEFAULTS: dict[str, t.Any] = {
    "namespace": "kube-system",
    "runtime_class": "nvidia",
    "runtime_handler": "nvidia",
    "runtime_class_node_selector": {},
    "device_plugin_image": DEVICE_PLUGIN_IMAGE,
    "device_plugin_version": DEVICE_PLUGIN_VERSION,
    "device_plugin_runtime_class": "",
    "node_selector": {"nvidia.com/gpu": "true"},
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    "priority_class": "system-node-critical",
    "mig_strategy": "none",
    "sharing": {},
    "default_config": "",
    "test_job": "gpuhost-gpu-test",
    "test_image": TEST_IMAGE,
    "test_gpus": 1,
    "nodes": [],
    "node_labels": {},
    "node_taints": [],
}


def _show(value: t.Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _label_errors(mapping: t.Any, what: str) -> list[str]:
    """Label keys and values by Kubernetes' rules (the one implementation, in _kubelet)."""
    if not isinstance(mapping, dict):
        return ["%s must be a mapping of label keys to values, not %s" % (what, _show(mapping))]
    errors = []
    for key, value in mapping.items():
        problem = _kubelet.qualified_name_error(key, "%s key" % what)
        problem = problem or _kubelet.label_value_error(value, "%s: the value of %s" % (what, key))
        if problem:
            errors.append(problem)
    return errors


def _toleration_errors(tolerations: t.Any) -> list[str]:
    if not isinstance(tolerations, list):
        return ["tolerations must be a list, not %s" % _show(tolerations)]
    errors = []
    for number, item in enumerate(tolerations, 1):
        where = "toleration %d" % number
        if not isinstance(item, dict) or set(item) - {"key", "operator", "value", "effect"}:
            errors.append("%s must be a mapping of key, operator, value and effect, not %s" % (where, _show(item)))
            continue
        operator = item.get("operator", "Equal")
        if operator not in ("Equal", "Exists"):
            errors.append("%s operator %s must be Equal or Exists" % (where, _show(operator)))
        if item.get("effect") not in (None, "") + TAINT_EFFECTS:
            errors.append("%s effect %s must be one of %s" % (where, _show(item.get("effect")), ", ".join(TAINT_EFFECTS)))
        errors += _label_errors({item.get("key", "x"): item.get("value", "") if operator == "Equal" else ""}, where)
    return errors


def _sharing_errors(sharing: t.Any, default: t.Any) -> list[str]:
    if not isinstance(sharing, dict):
        return ["sharing must be a mapping of configuration names to a time_slicing setting, not %s" % _show(sharing)]
    errors = []
    for name, config in sharing.items():
        where = "sharing config %s" % _show(name)
        if not isinstance(name, str) or not _NAME_RE.fullmatch(name) or len(name) > 63:
            errors.append("%s: the name must be a label value (it is what nodes name in %s)" % (where, CONFIG_NODE_LABEL))
            continue
        if not isinstance(config, dict) or set(config) - {"time_slicing", "mps"}:
            errors.append("%s must be a mapping with time_slicing, not %s" % (where, _show(config)))
            continue
        if "mps" in config:
            errors.append("%s: MPS sharing needs NVIDIA's MPS control daemon, which this collection does not deploy; "
                          "use time_slicing, or NVIDIA's Helm chart for MPS" % where)
            continue
        slicing = config.get("time_slicing")
        if not isinstance(slicing, dict) or set(slicing) - {"replicas", "rename_by_default", "fail_requests_greater_than_one"}:
            errors.append("%s time_slicing must be a mapping of replicas, rename_by_default and "
                          "fail_requests_greater_than_one, not %s" % (where, _show(slicing)))
            continue
        replicas = slicing.get("replicas")
        if isinstance(replicas, bool) or not isinstance(replicas, int) or not 2 <= replicas <= 1024:
            errors.append("%s: replicas %s must be a whole number from 2 to 1024" % (where, _show(replicas)))
        for flag in ("rename_by_default", "fail_requests_greater_than_one"):
            if flag in slicing and not isinstance(slicing[flag], bool):
                errors.append("%s: %s %s must be true or false" % (where, flag, _show(slicing[flag])))
    if isinstance(default, str) and default and default not in sharing:
        errors.append("default_config %s names no sharing config (%s)" % (_show(default), ", ".join(map(str, sharing)) or "none"))
    return errors


def request_errors(request: t.Mapping[str, t.Any]) -> list[str]:
    """Every problem of a cluster request (the keys of DEFAULTS); an unknown key is one."""
    if not isinstance(request, dict):
        return ["the request must be a mapping, not %s" % _show(request)]
    errors = ["unknown key %s (known: %s)" % (_show(k), ", ".join(DEFAULTS)) for k in request if k not in DEFAULTS]
    r = dict(DEFAULTS, **{k: v for k, v in request.items() if k in DEFAULTS})
    for key in ("namespace", "runtime_class", "runtime_handler", "test_job"):
        if not isinstance(r[key], str) or not _DNS_LABEL_RE.fullmatch(r[key]):
            errors.append("%s %s must be a DNS label (lower-case letters, digits and '-', at most 63)" % (key, _show(r[key])))
    for key in ("device_plugin_runtime_class", "priority_class", "default_config"):
        if not isinstance(r[key], str) or (r[key] and not _SUBDOMAIN_RE.fullmatch(r[key])):
            errors.append("%s %s must be empty or a DNS subdomain" % (key, _show(r[key])))
    if not isinstance(r["device_plugin_image"], str) or not _IMAGE_RE.fullmatch(r["device_plugin_image"]):
        errors.append("device_plugin_image %s must be an image name without tag, such as %s" % (_show(r["device_plugin_image"]), DEVICE_PLUGIN_IMAGE))
    if not isinstance(r["device_plugin_version"], str) or not _VERSION_RE.fullmatch(r["device_plugin_version"]):
        errors.append("device_plugin_version %s must be a release tag such as %s" % (_show(r["device_plugin_version"]), DEVICE_PLUGIN_VERSION))
    if not isinstance(r["test_image"], str) or not _TAGGED_IMAGE_RE.fullmatch(r["test_image"]):
        errors.append("test_image %s must be an image reference such as %s" % (_show(r["test_image"]), TEST_IMAGE))
    if r["mig_strategy"] not in MIG_STRATEGIES:
        errors.append("mig_strategy %s must be one of %s" % (_show(r["mig_strategy"]), ", ".join(MIG_STRATEGIES)))
    if isinstance(r["test_gpus"], bool) or not isinstance(r["test_gpus"], int) or not 1 <= r["test_gpus"] <= 64:
        errors.append("test_gpus %s must be a whole number from 1 to 64" % _show(r["test_gpus"]))
    errors += _label_errors(r["node_selector"], "node_selector")
    errors += _label_errors(r["runtime_class_node_selector"], "runtime_class_node_selector")
    errors += _toleration_errors(r["tolerations"])
    errors += _sharing_errors(r["sharing"], r["default_config"])
    if not isinstance(r["nodes"], list) or not all(isinstance(n, str) and _SUBDOMAIN_RE.fullmatch(n) for n in r["nodes"]):
        errors.append("nodes %s must be a list of node names (DNS subdomains)" % _show(r["nodes"]))
    errors += _label_errors(r["node_labels"], "node_labels")
    errors += ["node_taints: %s" % e for e in _kubelet.check_taints(r["node_taints"])]
    return errors


def _settings(request: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    errors = request_errors(request)
    if errors:
        raise ValueError("; ".join(errors))
    return dict(DEFAULTS, **request)


def runtime_class(request: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """The RuntimeClass whose handler is the runtime name the host's containerd or CRI-O has."""
    r = _settings(request)
    body: dict[str, t.Any] = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                              "metadata": {"name": r["runtime_class"]}, "handler": r["runtime_handler"]}
    if r["runtime_class_node_selector"]:
        body["scheduling"] = {"nodeSelector": dict(r["runtime_class_node_selector"]),
                              "tolerations": [dict(x) for x in r["tolerations"]]}
    return body


def sharing_config(config: t.Mapping[str, t.Any], mig_strategy: str) -> str:
    """One device plugin configuration file (``version: v1``) as the plugin's README documents it, in YAML."""
    slicing = config["time_slicing"]
    lines = ["version: v1", "flags:", "  migStrategy: %s" % mig_strategy, "sharing:", "  timeSlicing:",
             "    renameByDefault: %s" % str(bool(slicing.get("rename_by_default", False))).lower(),
             "    failRequestsGreaterThanOne: %s" % str(bool(slicing.get("fail_requests_greater_than_one", False))).lower(),
             "    resources:", "    - name: %s" % GPU_RESOURCE, "      replicas: %d" % slicing["replicas"]]
    return "\n".join(lines) + "\n"


def device_plugin(request: t.Mapping[str, t.Any]) -> list[dict[str, t.Any]]:
    """The device plugin's objects: with sharing configs, the ConfigMap, ServiceAccount, ClusterRole and binding that
    the config-manager needs, then the DaemonSet."""
    r = _settings(request)
    ns = r["namespace"]
    name = "nvidia-device-plugin"
    labels = {"app.kubernetes.io/name": name, "app.kubernetes.io/managed-by": "gpuhost.nvidia"}
    image = "%s:%s" % (r["device_plugin_image"], r["device_plugin_version"])
    objects: list[dict[str, t.Any]] = []
    configs = r["sharing"]
    env = [
        {"name": "MIG_STRATEGY", "value": r["mig_strategy"]},
        {"name": "FAIL_ON_INIT_ERROR", "value": "true"},
        {"name": "NVIDIA_MIG_MONITOR_DEVICES", "value": "all"},
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
        {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "compute,utility"},
    ]
    mounts = [{"name": "kubelet-device-plugins-dir", "mountPath": "/var/lib/kubelet/device-plugins"}]
    volumes: list[dict[str, t.Any]] = [
        {"name": "kubelet-device-plugins-dir", "hostPath": {"path": "/var/lib/kubelet/device-plugins", "type": "Directory"}}]
    pod: dict[str, t.Any] = {}
    if configs:
        config_map = "%s-configs" % name
        objects.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": config_map, "namespace": ns, "labels": labels},
                        "data": {key: sharing_config(value, r["mig_strategy"]) for key, value in sorted(configs.items())}})
        account = "%s-service-account" % name
        objects.append({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account, "namespace": ns, "labels": labels}})
        objects.append({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                        "metadata": {"name": "%s-role" % name, "labels": labels},
                        "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}]})
        objects.append({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                        "metadata": {"name": "%s-role-binding" % name, "labels": labels},
                        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": ns}],
                        "roleRef": {"kind": "ClusterRole", "name": "%s-role" % name, "apiGroup": "rbac.authorization.k8s.io"}})
        config_mounts = [{"name": "available-configs", "mountPath": "/available-configs"}, {"name": "config", "mountPath": "/config"}]

        def manager(oneshot: bool) -> dict[str, t.Any]:
            return {"name": "nvidia-device-plugin-init" if oneshot else "nvidia-device-plugin-sidecar", "image": image,
                    "command": ["config-manager"], "volumeMounts": config_mounts,
                    "env": [{"name": "ONESHOT", "value": str(oneshot).lower()}, {"name": "KUBECONFIG", "value": ""},
                            {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                            {"name": "NODE_LABEL", "value": CONFIG_NODE_LABEL},
                            {"name": "CONFIG_FILE_SRCDIR", "value": "/available-configs"},
                            {"name": "CONFIG_FILE_DST", "value": "/config/config.yaml"},
                            {"name": "DEFAULT_CONFIG", "value": r["default_config"]},
                            {"name": "FALLBACK_STRATEGIES", "value": "named,single"},
                            {"name": "SEND_SIGNAL", "value": str(not oneshot).lower()},
                            {"name": "SIGNAL", "value": "" if oneshot else "1"},
                            {"name": "PROCESS_TO_SIGNAL", "value": "" if oneshot else "nvidia-device-plugin"}]}

        pod.update({"serviceAccountName": account, "shareProcessNamespace": True, "initContainers": [manager(True)]})
        env.append({"name": "CONFIG_FILE", "value": "/config/config.yaml"})
        mounts += config_mounts
        volumes += [{"name": "available-configs", "configMap": {"name": config_map}}, {"name": "config", "emptyDir": {}}]
    plugin = {"name": "nvidia-device-plugin-ctr", "image": image, "command": ["nvidia-device-plugin"], "env": env,
              "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
              "volumeMounts": mounts}
    pod["containers"] = ([manager(False)] if configs else []) + [plugin]
    pod["volumes"] = volumes
    pod["tolerations"] = [dict(x) for x in r["tolerations"]]
    if r["node_selector"]:
        pod["nodeSelector"] = dict(r["node_selector"])
    if r["priority_class"]:
        pod["priorityClassName"] = r["priority_class"]
    if r["device_plugin_runtime_class"]:
        pod["runtimeClassName"] = r["device_plugin_runtime_class"]
    selector = {"app.kubernetes.io/name": name}
    objects.append({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name, "namespace": ns, "labels": labels},
                    "spec": {"selector": {"matchLabels": selector}, "updateStrategy": {"type": "RollingUpdate"},
                             "template": {"metadata": {"labels": dict(labels)}, "spec": pod}}})
    return objects


def test_job(request: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """The documents' GPU test: ``nvidia-smi`` in a pod that asks for ``nvidia.com/gpu`` and tolerates the GPU taint."""
    r = _settings(request)
    spec: dict[str, t.Any] = {
        "restartPolicy": "Never",
        "tolerations": [dict(x) for x in r["tolerations"]],
        "containers": [{"name": "nvidia-smi", "image": r["test_image"], "command": ["nvidia-smi"],
                        "resources": {"limits": {GPU_RESOURCE: r["test_gpus"]}}}],
    }
    if r["node_selector"]:
        spec["nodeSelector"] = dict(r["node_selector"])
    if r["device_plugin_runtime_class"]:
        spec["runtimeClassName"] = r["device_plugin_runtime_class"]
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": r["test_job"], "namespace": r["namespace"], "labels": {"app.kubernetes.io/managed-by": "gpuhost.nvidia"}},
            "spec": {"backoffLimit": 0, "ttlSecondsAfterFinished": 3600, "template": {"spec": spec}}}


def manifests(request: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """Everything the cluster side applies, by part: ``runtime_class``, ``device_plugin`` (a list), ``test_job``."""
    return {"runtime_class": runtime_class(request), "device_plugin": device_plugin(request), "test_job": test_job(request)}
