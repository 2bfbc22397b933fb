# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The Kubernetes side of the rolling upgrade (playbooks/upgrade.yml): pure planning from recorded API responses.

Private to this collection: no compatibility promise outside gpuhost.nvidia.

It decides what the GPU Operator's upgrade controller (NVIDIA/k8s-operator-libs ``pkg/upgrade``) decides for a driver
roll, for hosts whose driver and toolkit this collection owns:

- :func:`max_unavailable`: how many GPU nodes may be unavailable at once, a count or a percentage of the GPU nodes
  rounded up (``intstr.GetScaledValueFromIntOrPercent(..., roundUp=true)`` in ``upgrade_inplace.go``), at least 1;
- :func:`cluster_plan`: from the Node list (``kubernetes.core.k8s_info`` ``resources``), which hosts of the roll are
  skipped (the skip labels), already done for this target, or to resume, in what order, and the batch size;
- :func:`node_plan`: at a host's turn, from a fresh read of its Node and of the pods on it, where its roll starts (the
  state recorded in the node's label), which pods to evict (only the ones that ask for a GPU, unless the whole node
  is drained) and which GPU pods stay (DaemonSet and mirror pods: the busy-GPU guard on the host then sees them);
- :func:`jobs_running`: the pods of the named jobs that have not finished yet.

Whatever it cannot see counts against the node: a node missing from the list, a state label it does not know or a
lost record of whether the node was cordoned before the roll stop the node or keep it cordoned, never the reverse.
"""

from __future__ import annotations

import hashlib
import math
import re
import typing as t
from collections.abc import Mapping, Sequence

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _gpu_operator
from ansible_collections.gpuhost.nvidia.plugins.module_utils._labels import valid_label_value

# The collection's own node labels and annotation (never a made-up nvidia.com/ name: those are NVIDIA's).
PREFIX = "gpuhost.nvidia/"
STATE_LABEL = PREFIX + "upgrade-state"
TARGET_LABEL = PREFIX + "upgrade-target"
SKIP_LABEL = PREFIX + "upgrade.skip"
# The GPU Operator's own skip label (k8s-operator-libs pkg/upgrade/consts.go UpgradeSkipNodeLabelKeyFmt with the
# driver name "gpu" the Operator sets in cmd/gpu-operator/main.go): a node an administrator keeps out of the
# Operator's driver upgrades is kept out of this roll too.
OPERATOR_SKIP_LABEL = "nvidia.com/gpu-driver-upgrade.skip"
SKIP_LABELS = (SKIP_LABEL, OPERATOR_SKIP_LABEL)
# Whether the node was unschedulable before the roll cordoned it (the Operator's
# nvidia.com/gpu-driver-upgrade.node-initial-state.unschedulable): such a node is not uncordoned at the end.
INITIAL_ANNOTATION = PREFIX + "upgrade-initial-unschedulable"

# The states, in the order a node goes through them (the Operator's names where the step is the same; its
# pod-deletion-required evicts as this pod-eviction-required does, its pod-restart-required is the host upgrade here).
UPGRADE_REQUIRED = "upgrade-required"
CORDON = "cordon-required"
WAIT_FOR_JOBS = "wait-for-jobs-required"
EVICTION = "pod-eviction-required"
DRAIN = "drain-required"
HOST_UPGRADE = "host-upgrade-required"
VALIDATION = "validation-required"
UNCORDON = "uncordon-required"
DONE = "upgrade-done"
FAILED = "upgrade-failed"
STEPS = (CORDON, WAIT_FOR_JOBS, EVICTION, HOST_UPGRADE, VALIDATION, UNCORDON, DONE)
STATES = (UPGRADE_REQUIRED,) + STEPS + (DRAIN, FAILED)
# A recorded drain-required resumes as the eviction step does (the roll's own setting picks drain or eviction).
_STEP_OF = {DRAIN: EVICTION}

# The pod phases whose pods the Operator's gpuPodSpecFilter deletes (cmd/gpu-operator/main.go): the others hold no GPU.
ACTIVE_PHASES = ("Running", "Pending")
# A pod asks for a GPU when any container, init container or ephemeral container requests or limits a resource of
# NVIDIA's domain: nvidia.com/gpu, nvidia.com/mig-1g.10gb, nvidia.com/gpu.shared (time-slicing renamed), ...
GPU_RESOURCE_PREFIX = "nvidia.com/"
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"

MAX_UNAVAILABLE_VAR = "gpuhost_upgrade_max_unavailable"
_PERCENT_RE = re.compile(r"([0-9]{1,3})%")
_COUNT_RE = re.compile(r"[0-9]{1,6}")
# A node name is a DNS-1123 subdomain (Kubernetes apimachinery IsDNS1123Subdomain).
NODE_NAME_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _shown(value: t.Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def max_unavailable(value: t.Any, total: int) -> tuple[int, list[str]]:
    """How many of ``total`` GPU nodes may be unavailable at once, and the errors.

    ``value`` is a count (``2``, ``"2"``) or a percentage of the GPU nodes (``"25%"``), rounded up as the Operator
    does; the result is at least 1 and at most ``total`` (at least 1 when there is none). 0, 0 %, more than 100 %,
    a negative, a float or a bool are errors naming the variable and the value.
    """
    errors: list[str] = []
    fix = "set it to a count of nodes such as 1 or a percentage of the GPU nodes such as 25%"
    count: int | None = None
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        errors.append("%s must be a count or a percentage, got %s %s: %s" % (MAX_UNAVAILABLE_VAR, type(value).__name__, _shown(value), fix))
    elif isinstance(value, int) or _COUNT_RE.fullmatch(value):
        count = int(value)
        if not 1 <= count <= 999999:
            errors.append("%s must be at least 1, got %s: %s" % (MAX_UNAVAILABLE_VAR, _shown(value), fix))
            count = None
    elif _PERCENT_RE.fullmatch(value):
        percent = int(value[:-1])
        if not 1 <= percent <= 100:
            errors.append("%s must be a percentage from 1%% to 100%%, got %s: %s" % (MAX_UNAVAILABLE_VAR, _shown(value), fix))
        else:
            count = math.ceil(percent * total / 100)
    else:
        errors.append("%s must be a count or a percentage, got %s: %s" % (MAX_UNAVAILABLE_VAR, _shown(value), fix))
    if count is None:
        return 0, errors
    return max(1, min(count, total)), errors


def target_id(targets: Mapping[str, t.Any]) -> str:
    """The roll's target as a node label value: ``d580.95.05_t1.18.0`` (driver version or branch, toolkit version;
    ``any`` where the roll sets none), or a digest of them (``sha-<12 hex>``) when that is no valid label value."""
    driver = str(targets.get("driver_version") or targets.get("driver_branch") or "any")
    toolkit = str(targets.get("toolkit_version") or "any")
    text = "d%s_t%s" % (driver, toolkit)
    if valid_label_value(text):
        return text
    return "sha-" + hashlib.sha256(("%s\0%s" % (driver, toolkit)).encode()).hexdigest()[:12]


def _meta(obj: t.Any) -> Mapping[str, t.Any]:
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    return meta if isinstance(meta, Mapping) else {}


def _dict(value: t.Any) -> Mapping[str, t.Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: t.Any) -> list[t.Any]:
    return list(value) if isinstance(value, Sequence) and not isinstance(value, (str, bytes)) else []


def _labels(node: Mapping[str, t.Any]) -> Mapping[str, t.Any]:
    return _dict(_meta(node).get("labels"))


def _annotations(obj: Mapping[str, t.Any]) -> Mapping[str, t.Any]:
    return _dict(_meta(obj).get("annotations"))


def resources_of(response: t.Any, what: str) -> list[Mapping[str, t.Any]]:
    """The objects of a ``kubernetes.core.k8s_info`` result (its ``resources``), or of a list of objects. Anything
    else is an error: a read that returned nothing usable must not look like an empty cluster."""
    if isinstance(response, Mapping):
        if "resources" not in response:
            raise ValueError("%s: a kubernetes.core.k8s_info result has resources, got the keys %s" % (what, sorted(response)[:8]))
        response = response["resources"]
    if not isinstance(response, Sequence) or isinstance(response, (str, bytes)):
        raise ValueError("%s: expected the k8s_info result or a list of objects, got %s" % (what, type(response).__name__))
    bad = [i for i, obj in enumerate(response) if not isinstance(obj, Mapping) or not isinstance(_meta(obj).get("name"), str)]
    if bad:
        raise ValueError("%s: item %d is no Kubernetes object with metadata.name" % (what, bad[0]))
    return list(response)


def is_gpu_node(node: Mapping[str, t.Any]) -> bool:
    """Whether the node offers a GPU resource (status.capacity or allocatable of NVIDIA's domain above 0)."""
    status = _dict(node.get("status"))
    for key in ("capacity", "allocatable"):
        for name, amount in _dict(status.get(key)).items():
            if str(name).startswith(GPU_RESOURCE_PREFIX) and str(amount).strip() not in ("", "0"):
                return True
    return False


def is_ready(node: Mapping[str, t.Any]) -> bool:
    for condition in _list(_dict(node.get("status")).get("conditions")):
        if isinstance(condition, Mapping) and condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return False


def is_unschedulable(node: Mapping[str, t.Any]) -> bool:
    return _dict(node.get("spec")).get("unschedulable") is True


def skip_reason(node: Mapping[str, t.Any]) -> str | None:
    """Why the node is kept out of the roll (one of the skip labels is ``true``), or None."""
    labels = _labels(node)
    for key in SKIP_LABELS:
        if str(labels.get(key, "")).lower() == "true":
            return "the node is labelled %s=true" % key
    return None


def recorded_state(node: Mapping[str, t.Any]) -> tuple[str, str]:
    """The node's recorded state and target ('' where none)."""
    labels = _labels(node)
    return str(labels.get(STATE_LABEL) or ""), str(labels.get(TARGET_LABEL) or "")


def gpu_resources(pod: Mapping[str, t.Any]) -> list[str]:
    """The resources of NVIDIA's domain any container of the pod (init and ephemeral containers too) requests or
    limits, sorted."""
    spec = _dict(pod.get("spec"))
    found: set[str] = set()
    for key in ("containers", "initContainers", "ephemeralContainers"):
        for container in _list(spec.get(key)):
            resources = _dict(_dict(container).get("resources"))
            for part in ("requests", "limits"):
                found.update(str(name) for name in _dict(resources.get(part)) if str(name).startswith(GPU_RESOURCE_PREFIX))
    return sorted(found)


def _pod_name(pod: Mapping[str, t.Any]) -> str:
    meta = _meta(pod)
    return "%s/%s" % (meta.get("namespace") or "default", meta.get("name"))


def _owner_kinds(pod: Mapping[str, t.Any]) -> list[str]:
    return [str(_dict(ref).get("kind")) for ref in _list(_meta(pod).get("ownerReferences"))]


def gpu_pods(pods: t.Any, node_name: str) -> dict[str, list[t.Any]]:
    """The pods on ``node_name`` that ask for a GPU and are Running or Pending: ``evict`` (``{namespace, name}``, in
    the list's order) and ``kept`` (``ns/name: why``: DaemonSet pods come back at once on a cordoned node, mirror
    pods of static pods cannot be evicted), with ``found`` listing every one with its resources."""
    evict, kept, found = [], [], []
    for pod in resources_of(pods, "the pods of node %s" % node_name):
        spec, status = _dict(pod.get("spec")), _dict(pod.get("status"))
        if spec.get("nodeName") != node_name or status.get("phase") not in ACTIVE_PHASES:
            continue
        names = gpu_resources(pod)
        if not names:
            continue
        found.append("%s (%s)" % (_pod_name(pod), ", ".join(names)))
        if MIRROR_ANNOTATION in _annotations(pod):
            kept.append("%s: a static pod's mirror, which cannot be evicted" % _pod_name(pod))
        elif "DaemonSet" in _owner_kinds(pod):
            kept.append("%s: a DaemonSet pod, which would come back at once" % _pod_name(pod))
        else:
            evict.append({"namespace": _meta(pod).get("namespace") or "default", "name": _meta(pod)["name"]})
    return {"evict": evict, "kept": kept, "found": found}


def jobs_running(pods: t.Any, node_name: str) -> list[str]:
    """The pods on ``node_name`` (of the k8s_info read by the jobs' label selector) that have not finished: any phase
    but Succeeded and Failed, an unknown phase included."""
    running = []
    for pod in resources_of(pods, "the job pods of node %s" % node_name):
        if _dict(pod.get("spec")).get("nodeName") != node_name:
            continue
        phase = _dict(pod.get("status")).get("phase")
        if phase not in ("Succeeded", "Failed"):
            running.append("%s (%s)" % (_pod_name(pod), phase or "no phase"))
    return running


def state_patch(state: str, target: str, initial_unschedulable: bool | None = None) -> dict[str, t.Any]:
    """The merge patch of a Node that records ``state`` for ``target`` (and, on the first step, whether the node was
    unschedulable before the roll)."""
    if state not in STATES:
        raise ValueError("unknown upgrade state %r" % (state,))
    patch: dict[str, t.Any] = {"metadata": {"labels": {STATE_LABEL: state, TARGET_LABEL: target}}}
    if initial_unschedulable is not None:
        patch["metadata"]["annotations"] = {INITIAL_ANNOTATION: "true" if initial_unschedulable else "false"}
    return patch


def _node_index(nodes: t.Any) -> dict[str, Mapping[str, t.Any]]:
    return {_meta(node)["name"]: node for node in resources_of(nodes, "the nodes")}


def cluster_plan(nodes: t.Any, roll: t.Any, targets: Mapping[str, t.Any], max_unavailable_value: t.Any = None,
                 serial: int = 1) -> dict[str, t.Any]:
    """The roll over the cluster, before the first host.

    ``nodes``: the Node list (k8s_info). ``roll``: the hosts in inventory order, ``{host, node}`` each or a mapping
    host -> node (node '' for a host that is no Kubernetes node). ``targets``: the roll's targets (``_upgrade.targets``). ``max_unavailable_value``: None
    keeps ``serial`` as the batch size.

    Returns ``errors``; ``target`` (:func:`target_id`); ``gpu_nodes`` (the nodes offering a GPU resource, plus the roll's nodes); ``max_unavailable``;
    ``unavailable`` (GPU nodes outside the roll that are cordoned or not Ready: they use up part of max_unavailable);
    ``batch`` (hosts per batch); ``order`` (the hosts to resume first, then the others, in inventory order); and per
    host in ``hosts``: ``node``, ``state``, ``action`` (``upgrade``, ``resume``, ``skip`` or ``done``) and ``reason``.
    """
    errors: list[str] = []
    target = target_id(targets)
    index = _node_index(nodes)
    if isinstance(roll, Mapping):
        roll = [{"host": host, "node": name} for host, name in roll.items()]
    entries = _list(roll)
    hosts: dict[str, dict[str, t.Any]] = {}
    for entry in entries:
        if not isinstance(entry, Mapping) or not isinstance(entry.get("host"), str):
            errors.append("each roll entry must be {host, node}, got %s" % _shown(entry))
            continue
        host, name = entry["host"], entry.get("node") or ""
        if not isinstance(name, str) or (name and (len(name) > 253 or not NODE_NAME_RE.fullmatch(name))):
            errors.append("%s: gpuhost_upgrade_k8s_node must be a Kubernetes node name (a DNS subdomain such as gpu-node-1), got %s"
                          % (host, _shown(name)))
            continue
        hosts[host] = {"node": name, "state": "", "action": "upgrade", "reason": ""}
        if not name:
            continue
        node = index.get(name)
        if node is None:
            errors.append("%s: the node %s is not in the cluster's node list: set gpuhost_upgrade_k8s_node to its Node name"
                          % (host, name))
            continue
        state, recorded_target = recorded_state(node)
        hosts[host]["state"] = state
        reason = skip_reason(node)
        if reason:
            hosts[host].update(action="skip", reason=reason)
        elif state and state not in STATES:
            errors.append("%s: the node %s has %s=%s, a state this roll does not know: set it to %s to start the node over"
                          % (host, name, STATE_LABEL, _shown(state), UPGRADE_REQUIRED))
        elif state == DONE and recorded_target == target:
            hosts[host].update(action="done", reason="the node is %s for %s" % (DONE, target))
        elif state in STEPS[:-1] + (DRAIN,):
            hosts[host].update(action="resume", reason="interrupted at %s (for %s)" % (state, recorded_target or "no target"))
    roll_nodes = {h["node"] for h in hosts.values() if h["node"]}
    gpu_nodes = sorted({name for name, node in index.items() if is_gpu_node(node)} | (roll_nodes & set(index)))
    unavailable = sorted(name for name in gpu_nodes if name not in roll_nodes
                         and (is_unschedulable(index[name]) or not is_ready(index[name])))
    result: dict[str, t.Any] = {"errors": errors, "target": target, "gpu_nodes": gpu_nodes, "unavailable": unavailable, "hosts": hosts,
                                "max_unavailable": None, "batch": serial}
    if max_unavailable_value is not None and max_unavailable_value != "":
        count, problems = max_unavailable(max_unavailable_value, len(gpu_nodes) or len(hosts))
        errors.extend(problems)
        if not problems:
            result["max_unavailable"] = count
            result["batch"] = count - len(unavailable)
            if result["batch"] < 1:
                errors.append("%s allows %d unavailable GPU node(s) and %d already are (%s): bring them back, or raise %s"
                              % (MAX_UNAVAILABLE_VAR, count, len(unavailable), ", ".join(unavailable), MAX_UNAVAILABLE_VAR))
    # The interrupted nodes first: they are cordoned already, and must not wait behind new ones.
    names = list(hosts)
    result["order"] = [h for h in names if hosts[h]["action"] == "resume"] + [h for h in names if hosts[h]["action"] != "resume"]
    return result


def node_plan(node: t.Any, pods: t.Any, target: str, drain: bool = False) -> dict[str, t.Any]:
    """One node at its turn, from a fresh read of its Node (an object, or a k8s_info result with one) and the pods on
    it (k8s_info).

    Returns ``action`` (``skip``, ``done`` or ``upgrade``), ``reason``, ``state`` (recorded), ``start`` (the first step
    to run, one of :data:`STEPS`), ``steps`` (the steps to run, from ``start``), ``initial_unschedulable`` (True,
    False, or None where the record was lost: then the node stays cordoned at the end), ``uncordon`` (whether the
    roll uncordons it at the end), ``patches`` (the Node merge patch that records each state) and, from :func:`gpu_pods`,
    ``evict``, ``kept`` and ``found``. ``errors`` names what stops the node.
    """
    if isinstance(node, Mapping) and "resources" in node:
        objects = resources_of(node, "the node")
        if len(objects) != 1:
            raise ValueError("the node: expected one Node in the k8s_info result, got %d" % len(objects))
        node = objects[0]
    if not isinstance(node, Mapping) or not isinstance(_meta(node).get("name"), str):
        raise ValueError("the node: expected a Node object, got %s" % type(node).__name__)
    name = _meta(node)["name"]
    errors: list[str] = []
    state, recorded_target = recorded_state(node)
    plan: dict[str, t.Any] = {"node": name, "state": state, "action": "upgrade", "reason": "", "errors": errors}
    reason = skip_reason(node)
    if reason:
        plan.update(action="skip", reason=reason, steps=[], start=None, evict=[], kept=[], found=[], uncordon=False,
                    initial_unschedulable=None, patches={})
        return plan
    if state and state not in STATES:
        errors.append("the node %s has %s=%s, a state this roll does not know: set it to %s to start the node over"
                      % (name, STATE_LABEL, _shown(state), UPGRADE_REQUIRED))
    if state == DONE and recorded_target == target:
        plan.update(action="done", reason="the node is %s for %s" % (DONE, target), steps=[], start=None, evict=[], kept=[],
                    found=[], uncordon=False, initial_unschedulable=None, patches={})
        return plan
    resuming = state in STEPS[:-1] + (DRAIN,)
    step = _STEP_OF.get(state, state)
    start = step if resuming and recorded_target == target else CORDON
    annotation = _annotations(node).get(INITIAL_ANNOTATION)
    if resuming or state == FAILED:
        # Cordoned by an earlier roll: only its record says what the node was before it.
        initial = {"true": True, "false": False}.get(str(annotation).lower()) if annotation is not None else None
    else:
        initial = is_unschedulable(node)
    plan["initial_unschedulable"] = initial
    plan["uncordon"] = initial is False
    if initial is None:
        plan["reason"] = ("the record of whether %s was cordoned before the roll (%s) is lost: it stays cordoned at the end"
                          % (name, INITIAL_ANNOTATION))
    plan["start"] = start
    plan["steps"] = list(STEPS[STEPS.index(start):-1])
    # The Node patch of each step; the first one also records whether the node was cordoned before the roll.
    plan["patches"] = {step: state_patch(step, target) for step in STEPS + (DRAIN, FAILED)}
    if start == CORDON and initial is not None:
        plan["patches"][CORDON] = state_patch(CORDON, target, initial)
    plan.update(gpu_pods(pods, name) if not drain else {"evict": [], "kept": [], "found": gpu_pods(pods, name)["found"]})
    # The GPU Operator's driver or toolkit pods on the node: the host's own would fight them.
    errors.extend("%s: %s" % (name, refusal) for refusal in _gpu_operator.refusals(_gpu_operator.pod_evidence(pods, name), _gpu_operator.COMPONENTS))
    return plan
