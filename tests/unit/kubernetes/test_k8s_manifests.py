# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The cluster side's objects: built from a checked request, and valid for Kubernetes' own schemas (strict)."""

from __future__ import annotations

import copy

import pytest
import yaml

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuhost.nvidia.plugins.filter import k8s as k8s_filter
from ansible_collections.gpuhost.nvidia.plugins.module_utils import _k8s

kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate (requirements/dev.txt) is not installed")

# The oldest and newest Kubernetes this collection's manifests are checked against, and one between.
K8S_VERSIONS = ["1.29.0", "1.33.0", "1.37.0"]

REQUESTS = {
    "defaults": {},
    "sharing": {"sharing": {"ts-4": {"time_slicing": {"replicas": 4}},
                            "ts-10-renamed": {"time_slicing": {"replicas": 10, "rename_by_default": True,
                                                               "fail_requests_greater_than_one": True}}},
                "default_config": "ts-4", "mig_strategy": "mixed"},
    "eks": {"namespace": "nvidia-device-plugin", "node_selector": {"nvidia.com/gpu": "true"},
            "runtime_class_node_selector": {"nvidia.com/gpu": "true"}, "device_plugin_runtime_class": "nvidia",
            "test_gpus": 2, "test_image": "nvcr.io/nvidia/cuda:12.9.1-base-ubuntu24.04"},
    "no_selector": {"node_selector": {}, "tolerations": [], "priority_class": ""},
}


def objects(request):
    built = _k8s.manifests(request)
    return [built["runtime_class"], *built["device_plugin"], built["test_job"]]


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("name", sorted(REQUESTS))
def test_every_object_is_valid_for_kubernetes_strict(name, version):
    for body in objects(REQUESTS[name]):
        # Through YAML and back, as the playbook hands them to the API.
        body = yaml.safe_load(yaml.safe_dump(body))
        kubernetes_validate.validate(body, version, strict=True)


def test_the_validator_refuses_a_misspelt_field():
    # The check above can fail: a field Kubernetes does not know is refused in strict mode.
    body = copy.deepcopy(_k8s.runtime_class({}))
    body["handlr"] = body.pop("handler")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(body, K8S_VERSIONS[-1], strict=True)


def test_defaults_follow_nvidias_static_deployment():
    # NVIDIA/k8s-device-plugin v0.20.0 deployments/static/nvidia-device-plugin.yml: the image, the GPU taint's
    # toleration, system-node-critical, the kubelet's device-plugins directory.
    daemonset = _k8s.device_plugin({})[-1]
    pod = daemonset["spec"]["template"]["spec"]
    assert [c["image"] for c in pod["containers"]] == ["nvcr.io/nvidia/k8s-device-plugin:v0.20.0"]
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert pod["priorityClassName"] == "system-node-critical"
    assert pod["volumes"] == [{"name": "kubelet-device-plugins-dir",
                               "hostPath": {"path": "/var/lib/kubelet/device-plugins", "type": "Directory"}}]
    assert pod["nodeSelector"] == {"nvidia.com/gpu": "true"}
    assert "initContainers" not in pod and "serviceAccountName" not in pod


def test_sharing_configs_and_the_config_manager():
    built = _k8s.device_plugin(REQUESTS["sharing"])
    kinds = [o["kind"] for o in built]
    assert kinds == ["ConfigMap", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "DaemonSet"]
    config = yaml.safe_load(built[0]["data"]["ts-10-renamed"])
    # The device plugin README's time-slicing form.
    assert config == {"version": "v1", "flags": {"migStrategy": "mixed"}, "sharing": {"timeSlicing": {
        "renameByDefault": True, "failRequestsGreaterThanOne": True, "resources": [{"name": "nvidia.com/gpu", "replicas": 10}]}}}
    pod = built[-1]["spec"]["template"]["spec"]
    init, sidecar, plugin = pod["initContainers"][0], pod["containers"][0], pod["containers"][1]
    env = {e["name"]: e.get("value") for e in sidecar["env"]}
    assert env["NODE_LABEL"] == "nvidia.com/device-plugin.config" and env["DEFAULT_CONFIG"] == "ts-4"
    assert env["SEND_SIGNAL"] == "true" and env["PROCESS_TO_SIGNAL"] == "nvidia-device-plugin"
    assert {e["name"]: e.get("value") for e in init["env"]}["ONESHOT"] == "true"
    assert {e["name"]: e.get("value") for e in plugin["env"]}["CONFIG_FILE"] == "/config/config.yaml"
    assert pod["shareProcessNamespace"] is True and pod["serviceAccountName"] == "nvidia-device-plugin-service-account"
    assert built[2]["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}]


def test_test_job_asks_for_gpus_and_tolerates_the_taint():
    job = _k8s.test_job(REQUESTS["eks"])
    spec = job["spec"]["template"]["spec"]
    assert spec["containers"][0]["command"] == ["nvidia-smi"]
    assert spec["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": 2}}
    assert spec["tolerations"][0]["key"] == "nvidia.com/gpu" and spec["runtimeClassName"] == "nvidia"
    assert job["metadata"]["namespace"] == "nvidia-device-plugin" and spec["restartPolicy"] == "Never"


@pytest.mark.parametrize("request_, needle", [
    ({"namespace": "Kube_System"}, "namespace"),
    ({"runtime_handler": "nvidia\n"}, "runtime_handler"),
    ({"runtime_class": "a" * 64}, "runtime_class"),
    ({"device_plugin_version": "0.20.0"}, "device_plugin_version"),
    ({"device_plugin_version": "v0.20.0\nkind: Pod"}, "device_plugin_version"),
    ({"device_plugin_image": "nvcr.io/nvidia/k8s-device-plugin:v0.20.0"}, "without tag"),
    ({"device_plugin_image": "Evil Image"}, "device_plugin_image"),
    ({"test_image": "nvidia/cuda:12.4.1 --privileged"}, "test_image"),
    ({"node_selector": {"nvidia.com/gpu": "ada lovelace"}}, "node_selector"),
    ({"node_selector": "nvidia.com/gpu=true"}, "node_selector"),
    ({"tolerations": [{"key": "nvidia.com/gpu", "operator": "Maybe"}]}, "operator"),
    ({"tolerations": [{"key": "nvidia.com/gpu", "effect": "NoSchedul"}]}, "effect"),
    ({"tolerations": [{"key": "x", "seconds": 5}]}, "toleration 1"),
    ({"mig_strategy": "all"}, "mig_strategy"),
    ({"sharing": {"ts": {"time_slicing": {"replicas": 1}}}}, "replicas"),
    ({"sharing": {"ts": {"time_slicing": {"replicas": True}}}}, "replicas"),
    ({"sharing": {"ts": {"time_slicing": {"replicas": "4"}}}}, "replicas"),
    ({"sharing": {"ts": {"mps": {"replicas": 4}}}}, "MPS"),
    ({"sharing": {"bad name": {"time_slicing": {"replicas": 4}}}}, "label value"),
    ({"sharing": {"ts": {"time_slicing": {"replicas": 4, "rename_by_default": "yes"}}}}, "rename_by_default"),
    ({"default_config": "ts-4"}, "names no sharing config"),
    ({"test_gpus": 0}, "test_gpus"),
    ({"test_gpus": "1"}, "test_gpus"),
    ({"replicas": 4}, "unknown key"),
])
def test_bad_requests_are_refused_naming_the_value(request_, needle):
    errors = _k8s.request_errors(request_)
    assert errors and needle in " ".join(errors)
    with pytest.raises(AnsibleFilterError, match="gpu_k8s_manifests: "):
        k8s_filter.gpu_k8s_manifests(request_)
    assert k8s_filter.gpu_k8s_manifest_errors(request_) == errors


@pytest.mark.parametrize("request_", [None, {}, {"sharing": {}}])
def test_empty_requests_build_the_defaults(request_):
    assert k8s_filter.gpu_k8s_manifests(request_)["runtime_class"] == {
        "apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "nvidia"}, "handler": "nvidia"}


@pytest.mark.parametrize("request_", ["x", 5, ["a"]])
def test_a_request_that_is_not_a_mapping_is_refused(request_):
    with pytest.raises(AnsibleFilterError, match="expected a dict"):
        k8s_filter.gpu_k8s_manifests(request_)
