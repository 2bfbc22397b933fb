# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The k8s_gpu_node role's planner (module_utils/_k8s_node.py) and the kubelet as a restart-policy engine.

The GPU names are the ones of the nvidia-smi corpus in ../shared/fixtures (tests/unit/fixtures), and the accelerator
convention is the documents' (``accelerator=nvidia-tesla-v100`` / ``nvidia-tesla-a100``)."""

from __future__ import annotations

import typing as t

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuhost.nvidia.plugins.filter import k8s as k8s_filters
from ansible_collections.gpuhost.nvidia.plugins.module_utils import _engine_restart as er
from ansible_collections.gpuhost.nvidia.plugins.module_utils import _k8s_node as kn
from ansible_collections.gpuhost.nvidia.plugins.module_utils import _labels

NO_MARKERS = {"k3s": False, "rke2": False, "kubespray": False}


def request(**changes: t.Any) -> dict[str, t.Any]:
    base = {"distribution": "auto", "runtime": "containerd", "accelerator": "", "labels": {}, "taint_effect": "NoSchedule",
            "preset_labels": True, "taint": True, "registration": True, "image_build": False, "gfd_deployed": False,
            "default_runtime": False}
    base.update(changes)
    return base


def facts(*names: str) -> dict[str, t.Any]:
    return {"present": bool(names), "gpus": [{"index": i, "name": n} for i, n in enumerate(names)]}


@pytest.mark.parametrize("name, model", [
    ("NVIDIA A100-SXM4-80GB", "a100"),
    ("NVIDIA A100 80GB PCIe", "a100"),
    ("Tesla V100-SXM2-16GB", "v100"),
    ("Tesla T4", "t4"),
    ("NVIDIA H100 80GB HBM3", "h100"),
    ("NVIDIA H100 NVL", "h100"),
    ("NVIDIA L40S", "l40s"),
    ("NVIDIA RTX A6000", "rtx-a6000"),
    ("NVIDIA GeForce RTX 4090", "rtx-4090"),
    ("Quadro RTX 8000", "rtx-8000"),
    ("NVIDIA H200", "h200"),
    ("", None),
    ("NVIDIA", None),
    (None, None),
    (42, None),
])
def test_accelerator_model(name, model):
    assert kn.accelerator_model(name) == model
    if model:
        assert _labels.valid_label_value(kn.ACCELERATOR_PREFIX + model)


def test_kubeadm_host_gets_runtime_presets_and_taint():
    plan = kn.plan(request(), NO_MARKERS, facts("NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB"))
    assert plan["distribution"] == "kubeadm" and plan["runtime"] == {"configure": True, "engine": "containerd", "reason": ""}
    assert plan["registration"]["configure"] is True
    assert plan["registration"]["labels"] == {"nvidia.com/gpu": "true", "accelerator": "nvidia-tesla-a100"}
    assert plan["registration"]["taints"] == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]
    assert plan["messages"] == []


def test_declared_model_wins_and_user_labels_merge():
    plan = kn.plan(request(accelerator="v100", labels={"example.com/pool": "train"}, taint=False), NO_MARKERS,
                   facts("NVIDIA A100-SXM4-80GB"))
    assert plan["registration"]["labels"] == {"nvidia.com/gpu": "true", "accelerator": "nvidia-tesla-v100", "example.com/pool": "train"}
    assert plan["registration"]["taints"] == []


def test_mixed_models_name_the_first_and_say_so():
    plan = kn.plan(request(), NO_MARKERS, facts("Tesla T4", "NVIDIA A100-SXM4-80GB"))
    assert plan["registration"]["labels"]["accelerator"] == "nvidia-tesla-t4"
    assert any("several models (a100, t4)" in m for m in plan["messages"])


def test_no_gpu_without_a_declared_model_fails_naming_the_variable():
    with pytest.raises(kn.PlanError, match="k8s_gpu_node_accelerator"):
        kn.plan(request(), NO_MARKERS, facts())
    # Without the presets, no model is needed.
    assert kn.plan(request(preset_labels=False), NO_MARKERS, facts())["registration"]["labels"] == {}


def test_node_image_needs_the_declared_model():
    assert any("node image" in e for e in kn.request_errors(request(image_build=True)))
    plan = kn.plan(request(image_build=True, accelerator="a100"), NO_MARKERS, facts())
    assert plan["registration"]["labels"]["accelerator"] == "nvidia-tesla-a100"


@pytest.mark.parametrize("dist", ["k3s", "rke2"])
def test_k3s_and_rke2_are_detected_and_left_their_own_files(dist):
    markers = dict(NO_MARKERS, **{dist: True})
    plan = kn.plan(request(), markers, facts("Tesla T4"))
    assert plan["distribution"] == dist and plan["detected"] == dist
    assert plan["runtime"]["configure"] is False and "/var/lib/rancher/%s/agent/etc/containerd" % dist in plan["runtime"]["reason"]
    assert plan["registration"]["configure"] is False and "node-label" in plan["registration"]["reason"]
    assert len(plan["messages"]) == 2


def test_rke2_wins_over_k3s_markers():
    assert kn.detect({"k3s": True, "rke2": True})["distribution"] == "rke2"


def test_kubespray_is_not_fought():
    plan = kn.plan(request(), dict(NO_MARKERS, kubespray=True), facts("Tesla T4"))
    assert plan["runtime"]["configure"] is False and plan["registration"]["configure"] is False
    assert all("Kubespray" in m for m in plan["messages"])


def test_eks_leaves_registration_to_the_bootstrap_but_configures_the_runtime():
    plan = kn.plan(request(distribution="eks"), NO_MARKERS, facts("NVIDIA A10G"))
    assert plan["distribution"] == "eks" and plan["runtime"]["configure"] is True
    assert plan["registration"]["configure"] is False and "bootstrap" in plan["registration"]["reason"]


def test_declared_distribution_is_followed_and_a_contradiction_is_said():
    plan = kn.plan(request(distribution="kubeadm"), dict(NO_MARKERS, k3s=True), facts("Tesla T4"))
    assert plan["distribution"] == "kubeadm" and plan["runtime"]["configure"] is True
    assert any("follows the variable" in m for m in plan["messages"])


@pytest.mark.parametrize("changes, fragment", [
    ({"distribution": "openshift"}, "k8s_gpu_node_distribution"),
    ({"runtime": "docker"}, "k8s_gpu_node_runtime"),
    ({"accelerator": "A100"}, "k8s_gpu_node_accelerator"),
    ({"accelerator": "a100 --privileged"}, "k8s_gpu_node_accelerator"),
    ({"accelerator": "a100\n"}, "k8s_gpu_node_accelerator"),
    ({"labels": {"bad key!": "x"}}, "not a valid Kubernetes label name"),
    ({"labels": {"example.com/x": "a,b=c"}}, "not a valid Kubernetes label value"),
    ({"labels": {"example.com/x": True}}, "quote true/false"),
    ({"labels": ["x"]}, "expected a dict"),
    ({"taint_effect": "NoRun"}, "k8s_gpu_node_taint_effect"),
    ({"taint": "yes"}, "k8s_gpu_node_taint"),
])
def test_bad_requests_are_named(changes, fragment):
    errors = kn.request_errors(request(**changes))
    assert any(fragment in e for e in errors), errors
    with pytest.raises(kn.PlanError):
        kn.plan(request(**changes), NO_MARKERS, facts("Tesla T4"))


def test_every_problem_at_once():
    errors = kn.request_errors(request(runtime="docker", taint_effect="x", accelerator="A"))
    assert len(errors) == 3


def test_filters_wrap_the_planner():
    plan = k8s_filters.k8s_gpu_node_plan(request(), NO_MARKERS, {"nvidia_gpu": facts("Tesla V100-SXM2-16GB")})
    assert plan["registration"]["labels"]["accelerator"] == "nvidia-tesla-v100"
    assert k8s_filters.k8s_gpu_node_errors(request()) == []
    with pytest.raises(AnsibleFilterError, match="k8s_gpu_node_plan: .*k8s_gpu_node_runtime"):
        k8s_filters.k8s_gpu_node_plan(request(runtime="docker"), NO_MARKERS, facts("Tesla T4"))
    with pytest.raises(AnsibleFilterError, match="expected a dict"):
        k8s_filters.k8s_gpu_node_plan(request(), ["k3s"], facts("Tesla T4"))


def kubelet(changed=True, active=True):
    return {"name": "kubelet", "unit": "kubelet.service", "active": active, "changed": changed, "newest": None, "started": 100.0}


@pytest.mark.parametrize("engine", ["containerd", "crio", "kubernetes"])
def test_kubelet_restart_waits_for_any_gpu_pod(engine):
    pod = {"engine": engine, "id": "a" * 64, "pid": 7, "name": "python3", "gpu": 0}
    result = er.plan("if_idle", [kubelet()], [pod], None, False)
    assert result["restart"] == [] and result["pending"] == ["kubelet.service"]


def test_kubelet_restart_ignores_docker_and_podman_containers_and_defers_on_unknown():
    others = [{"engine": e, "id": "b" * 64, "pid": 8, "name": "x", "gpu": 0} for e in ("docker", "podman")]
    assert er.plan("if_idle", [kubelet()], others, None, False)["restart"] == ["kubelet.service"]
    unknown = er.plan("if_idle", [kubelet()], [], "GPU 0: nvmlDeviceGetComputeRunningProcesses failed", False)
    assert unknown["pending"] == ["kubelet.service"] and "cannot tell" in unknown["messages"][0]
    assert er.plan("if_idle", [kubelet(active=False)], [], None, False)["restart"] == []
