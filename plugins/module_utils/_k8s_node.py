# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The host side of a Kubernetes GPU worker (role gpuhost.nvidia.k8s_gpu_node): one pure plan from the request and
what the host showed (which Kubernetes distribution runs, whether Kubespray owns the files), every error at once.

Private to this collection: no compatibility promise outside gpuhost.nvidia.

- ``detect``: the distribution from the paths each one keeps (docs/sources.md, "Kubernetes distributions"): k3s keeps
  its agent under ``/var/lib/rancher/k3s``, RKE2 under ``/var/lib/rancher/rke2``; Kubespray's kubelet unit reads
  ``/etc/kubernetes/kubelet.env`` (kubeadm's reads ``/etc/default/kubelet`` or ``/etc/sysconfig/kubelet``).
- ``accelerator_model``: the short model of the ``accelerator=nvidia-tesla-<model>`` convention (``a100`` from
  ``NVIDIA A100-SXM4-80GB``), from a GPU's name.
- ``plan``: per step (runtime, registration), whether the role does it and why not, the registration labels and taints,
  and the kubelet environment file.
"""

from __future__ import annotations

import re
import typing as t
from collections.abc import Mapping

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _labels

DISTRIBUTIONS = ("auto", "kubeadm", "eks", "k3s", "rke2")
RUNTIMES = ("containerd", "crio")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
ACCELERATOR_PREFIX = "nvidia-tesla-"

# Words of a GPU's name that are the vendor or the brand, not the model.
_VENDOR_WORDS = ("nvidia", "tesla", "geforce", "quadro")
# The first word of a GPU's name that is no longer the model: memory size, form factor, memory type, NVLink variant.
_STOP_RE = re.compile(r"(?:[0-9]+gb|sxm[0-9]*|pcie|hbm[0-9]*e?|nvl[0-9]*|mig|[0-9]+c)$")
# A model as the convention writes it: lower-case letters, digits and "-", alphanumeric at both ends.
MODEL_RE = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,46}[a-z0-9])?")


class PlanError(ValueError):
    """A request that cannot be planned; ``problems`` lists every one."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


def accelerator_model(name: t.Any) -> str | None:
    """``a100`` from ``NVIDIA A100-SXM4-80GB``, ``v100`` from ``Tesla V100-SXM2-16GB``, ``h100`` from
    ``NVIDIA H100 80GB HBM3``, ``rtx-a6000`` from ``NVIDIA RTX A6000``; None when no model word is left."""
    if not isinstance(name, str):
        return None
    words = [w for w in re.split(r"[\s_/-]+", name.strip().lower()) if w]
    model: list[str] = []
    for word in words:
        if word in _VENDOR_WORDS and not model:
            continue
        if _STOP_RE.fullmatch(word):
            break
        cleaned = re.sub(r"[^a-z0-9]", "", word)
        if cleaned:
            model.append(cleaned)
    text = "-".join(model)[:48].strip("-")
    return text if text and MODEL_RE.fullmatch(text) else None


def detect(markers: Mapping[str, t.Any]) -> dict[str, t.Any]:
    """The distribution the markers show (``k3s``, ``rke2``, else ``kubeadm``) and whether Kubespray owns the files."""
    if markers.get("rke2"):
        found = "rke2"
    elif markers.get("k3s"):
        found = "k3s"
    else:
        found = "kubeadm"
    return {"distribution": found, "kubespray": bool(markers.get("kubespray"))}


def _gpu_names(facts: Mapping[str, t.Any]) -> list[str]:
    gpus = facts.get("gpus") if isinstance(facts, Mapping) else None
    if not isinstance(gpus, list):
        return []
    return [g["name"] for g in gpus if isinstance(g, Mapping) and isinstance(g.get("name"), str) and g["name"]]


def request_errors(request: Mapping[str, t.Any]) -> list[str]:
    """Every problem of the request, each naming the variable, the value and the fix."""
    errors: list[str] = []
    distribution = request.get("distribution")
    if distribution not in DISTRIBUTIONS:
        errors.append("k8s_gpu_node_distribution: %r is not one of %s" % (distribution, ", ".join(DISTRIBUTIONS)))
    runtime = request.get("runtime")
    if runtime not in RUNTIMES:
        errors.append("k8s_gpu_node_runtime: %r is not one of %s" % (runtime, ", ".join(RUNTIMES)))
    accelerator = request.get("accelerator") or ""
    if not isinstance(accelerator, str) or (accelerator and not MODEL_RE.fullmatch(accelerator)):
        errors.append("k8s_gpu_node_accelerator: %r is not a model such as a100 or v100 (lower-case letters, digits and -, "
                      "at most 48 characters, alphanumeric at both ends); leave it empty to take it from the GPU's name"
                      % (accelerator,))
    labels = request.get("labels")
    if not isinstance(labels, Mapping):
        errors.append("k8s_gpu_node_register_labels: expected a dict of label names to values, got %s" % type(labels).__name__)
    else:
        for key, value in labels.items():
            if not _labels.valid_label_key(key):
                errors.append("k8s_gpu_node_register_labels: %r is not a valid Kubernetes label name" % (key,))
            if not _labels.valid_label_value(value):
                errors.append("k8s_gpu_node_register_labels: %s=%r is not a valid Kubernetes label value (at most 63 of "
                              "A-Z a-z 0-9 . _ -, alphanumeric at both ends; quote true/false in YAML)" % (key, value))
    effect = request.get("taint_effect")
    if effect not in TAINT_EFFECTS:
        errors.append("k8s_gpu_node_taint_effect: %r is not one of %s" % (effect, ", ".join(TAINT_EFFECTS)))
    for name in ("preset_labels", "taint", "registration", "image_build", "gfd_deployed", "default_runtime"):
        if not isinstance(request.get(name), bool):
            errors.append("k8s_gpu_node_%s: %r is not true or false" % (name, request.get(name)))
    if request.get("image_build") is True and request.get("preset_labels") is True and not accelerator:
        errors.append("k8s_gpu_node_accelerator: a node image built without a GPU needs the target GPU's model (such as "
                      "a100) for the accelerator label; set it, or set k8s_gpu_node_preset_labels: false")
    return errors


def plan(request: Mapping[str, t.Any], markers: Mapping[str, t.Any], facts: Mapping[str, t.Any] | None) -> dict[str, t.Any]:
    """What the role does on this host. Raises PlanError with every problem of the request."""
    errors = request_errors(request)
    if errors:
        raise PlanError(errors)
    found = detect(markers)
    distribution = found["distribution"] if request["distribution"] == "auto" else request["distribution"]
    messages: list[str] = []
    if request["distribution"] not in ("auto", found["distribution"]) and found["distribution"] in ("k3s", "rke2"):
        messages.append("k8s_gpu_node_distribution is %s, but the host has %s's files (/var/lib/rancher/%s); the role "
                        "follows the variable" % (request["distribution"], found["distribution"], found["distribution"]))

    runtime: dict[str, t.Any] = {"configure": True, "engine": request["runtime"], "reason": ""}
    registration: dict[str, t.Any] = {"configure": request["registration"], "reason": ""}
    if found["kubespray"]:
        why = ("Kubespray manages this node (its kubelet reads /etc/kubernetes/kubelet.env, and it rewrites containerd's "
               "config.toml on every run)")
        runtime.update(configure=False, reason="%s: set the nvidia runtime and CDI in Kubespray's inventory instead" % why)
        registration.update(configure=False, reason="%s: set the node labels and taints in Kubespray's inventory instead" % why)
    elif distribution in ("k3s", "rke2"):
        runtime.update(configure=False, reason=(
            "%s renders containerd's config.toml itself at every start, from its base template or from "
            "/var/lib/rancher/%s/agent/etc/containerd/config-v3.toml.tmpl (containerd 2.x) or config.toml.tmpl, and adds "
            "the nvidia runtime itself when it finds nvidia-container-runtime on its PATH: the role leaves config.toml "
            "to it and writes a template (extending the base) only for a runtime %s does not add" % (distribution, distribution, distribution)))
        if request["registration"]:
            registration.update(configure=False, reason=(
                "%s's kubelet takes its labels and taints from %s's node-label and node-taint settings, not from "
                "KUBELET_EXTRA_ARGS: set them in its config.yaml" % (distribution, distribution)))
    elif distribution == "eks" and request["registration"]:
        registration.update(configure=False, reason=(
            "EKS nodes register with the labels and taints of their bootstrap (the launch template's "
            "--kubelet-extra-args or nodeadm's NodeConfig): set them there"))
    if not registration["configure"] and request["registration"] and registration["reason"]:
        messages.append("registration labels and taints not written: " + registration["reason"])
    if not runtime["configure"]:
        messages.append("container runtime not configured: " + runtime["reason"])

    names = _gpu_names(facts or {})
    model = request["accelerator"] or None
    if not model and request["preset_labels"]:
        models = sorted({m for m in (accelerator_model(n) for n in names) if m})
        if len(models) > 1:
            messages.append("the GPUs are of several models (%s); the accelerator label names the first GPU's" % ", ".join(models))
        model = accelerator_model(names[0]) if names else None
        if model is None:
            raise PlanError(["k8s_gpu_node_accelerator: no GPU name in the facts to take the model from (%s); set it to the "
                             "model, such as a100" % (", ".join(names) or "no GPU found")])
    labels: dict[str, str] = {}
    if request["preset_labels"]:
        labels["nvidia.com/gpu"] = "true"
        labels["accelerator"] = ACCELERATOR_PREFIX + str(model)
    labels.update({str(k): str(v) for k, v in request["labels"].items()})
    problems = ["accelerator=%s is not a valid label value" % v for k, v in labels.items()
                if k == "accelerator" and not _labels.valid_label_value(v)]
    if problems:
        raise PlanError(problems)
    taints = [{"key": "nvidia.com/gpu", "value": "true", "effect": request["taint_effect"]}] if request["taint"] else []
    return {"distribution": distribution, "detected": found["distribution"], "kubespray": found["kubespray"],
            "runtime": runtime, "registration": dict(registration, labels=labels, taints=taints),
            "messages": messages}
