# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""module_utils/_upgrade_k8s.py against recorded API responses (fixtures/upgrade/*.json, shaped as
kubernetes.core.k8s_info returns a Node or Pod list), and an interrupted roll resumed at each of its steps.

The GPU Operator's behaviour these cases mirror: k8s-operator-libs pkg/upgrade/upgrade_inplace.go (maxUnavailable
scaled from the GPU nodes with intstr.GetScaledValueFromIntOrPercent, rounding up; nodes labelled
nvidia.com/gpu-driver-upgrade.skip=true are left out) and gpu-operator cmd/gpu-operator/main.go gpuPodSpecFilter (only
Running and Pending pods that ask for an NVIDIA resource are deleted).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _labels
from ansible_collections.gpuhost.nvidia.plugins.module_utils import _upgrade_k8s as k8s

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "upgrade"
TARGETS = {"driver_version": "580.95.05", "driver_branch": "580", "toolkit_version": "1.18.0"}
TARGET = "d580.95.05_t1.18.0"


def load(name):
    return json.loads((FIXTURES / name).read_text())


def node(name):
    return copy.deepcopy(next(n for n in load("nodes.json")["resources"] if n["metadata"]["name"] == name))


def merge_patch(obj, patch):
    """What the API server does with a JSON merge patch (RFC 7386): null removes a key."""
    for key, value in patch.items():
        if value is None:
            obj.pop(key, None)
        elif isinstance(value, dict):
            merge_patch(obj.setdefault(key, {}), value)
        else:
            obj[key] = value
    return obj


@pytest.mark.parametrize("value, total, expected", [
    (1, 7, 1), ("2", 7, 2), ("25%", 7, 2), ("25%", 8, 2), ("25%", 9, 3), ("10%", 7, 1), ("1%", 1000, 10),
    ("100%", 7, 7), (50, 7, 7), ("1%", 3, 1), ("25%", 0, 1),
])
def test_max_unavailable_rounds_up_as_the_operator(value, total, expected):
    assert k8s.max_unavailable(value, total) == (expected, [])


@pytest.mark.parametrize("value, needle", [
    (0, "at least 1"), ("0", "at least 1"), ("0%", "from 1% to 100%"), ("101%", "from 1% to 100%"), (-1, "at least 1"),
    (True, "got bool"), (1.5, "got float"), ("25 %", "count or a percentage"), ("1e3", "count or a percentage"),
    ("25%\n", "count or a percentage"), ("", "count or a percentage"), (None, "got NoneType"), ("١٢", "count or a percentage"),
])
def test_max_unavailable_refuses_what_is_no_count(value, needle):
    count, errors = k8s.max_unavailable(value, 7)
    assert count == 0 and len(errors) == 1
    assert needle in errors[0] and "gpuhost_upgrade_max_unavailable" in errors[0] and "25%" in errors[0]


def test_target_id_is_a_label_value():
    assert k8s.target_id(TARGETS) == TARGET
    assert k8s.target_id({"driver_branch": "580"}) == "d580_tany"
    odd = k8s.target_id({"driver_version": "580.95.05", "toolkit_version": "1.18.0-1~rc.1+b2"})
    assert odd.startswith("sha-") and len(odd) == 16 and _labels.valid_label_value(odd)
    assert odd != k8s.target_id({"driver_version": "580.95.05", "toolkit_version": "1.18.0-1~rc.1+b3"})


ROLL = [{"host": "gpu01", "node": "gpu-node-1"}, {"host": "gpu02", "node": "gpu-node-2"}, {"host": "gpu03", "node": "gpu-node-3"},
        {"host": "gpu04", "node": "gpu-node-4"}, {"host": "gpu06", "node": "gpu-node-6"}, {"host": "gpu07", "node": "gpu-node-7"},
        {"host": "bare01", "node": ""}]


def test_cluster_plan_from_the_node_list():
    plan = k8s.cluster_plan(load("nodes.json"), ROLL, TARGETS, "25%")
    assert plan["errors"] == [] and plan["target"] == TARGET
    # Seven nodes offer nvidia.com/gpu; the CPU node does not count.
    assert plan["gpu_nodes"] == ["gpu-node-%d" % i for i in range(1, 8)]
    # 25 % of 7, rounded up, is 2; gpu-node-5 (not Ready, outside the roll) uses one.
    assert plan["max_unavailable"] == 2 and plan["unavailable"] == ["gpu-node-5"] and plan["batch"] == 1
    actions = {host: (entry["action"], entry["state"]) for host, entry in plan["hosts"].items()}
    assert actions == {"gpu01": ("upgrade", ""), "gpu02": ("skip", ""), "gpu03": ("resume", "pod-eviction-required"),
                       "gpu04": ("done", "upgrade-done"), "gpu06": ("upgrade", ""), "gpu07": ("upgrade", ""), "bare01": ("upgrade", "")}
    assert "nvidia.com/gpu-driver-upgrade.skip=true" in plan["hosts"]["gpu02"]["reason"]
    # The interrupted node goes first; the others keep the inventory's order.
    assert plan["order"] == ["gpu03", "gpu01", "gpu02", "gpu04", "gpu06", "gpu07", "bare01"]


def test_cluster_plan_our_own_skip_label_and_a_new_target():
    nodes = load("nodes.json")
    for item in nodes["resources"]:
        if item["metadata"]["name"] == "gpu-node-1":
            item["metadata"]["labels"]["gpuhost.nvidia/upgrade.skip"] = "true"
    plan = k8s.cluster_plan(nodes, ROLL, dict(TARGETS, toolkit_version="1.18.1"))
    assert plan["hosts"]["gpu01"]["action"] == "skip" and "gpuhost.nvidia/upgrade.skip=true" in plan["hosts"]["gpu01"]["reason"]
    # Done for another target: upgraded again.
    assert plan["hosts"]["gpu04"]["action"] == "upgrade"
    assert plan["max_unavailable"] is None and plan["batch"] == 1


def test_cluster_plan_fails_closed():
    plan = k8s.cluster_plan(load("nodes.json"), ROLL + [{"host": "gpu09", "node": "gpu-node-9"}, {"host": "gpu10", "node": "GPU_10"}],
                            TARGETS, "1")
    assert any("gpu09: the node gpu-node-9 is not in the cluster's node list" in e for e in plan["errors"])
    assert any("gpu10: gpuhost_upgrade_k8s_node must be a Kubernetes node name" in e for e in plan["errors"])
    # One may be unavailable and gpu-node-5 already is: nothing may start.
    assert any("allows 1 unavailable GPU node(s) and 1 already are (gpu-node-5)" in e for e in plan["errors"])
    nodes = load("nodes.json")
    nodes["resources"][0]["metadata"]["labels"]["gpuhost.nvidia/upgrade-state"] = "rebooting"
    assert any("a state this roll does not know" in e for e in k8s.cluster_plan(nodes, ROLL, TARGETS)["errors"])
    with pytest.raises(ValueError, match="k8s_info result has resources"):
        k8s.cluster_plan({"failed": True, "msg": "Unauthorized"}, ROLL, TARGETS)


def test_node_plan_evicts_only_gpu_pods():
    plan = k8s.node_plan(node("gpu-node-1"), load("pods-gpu-node-1.json"), TARGET)
    assert plan["action"] == "upgrade" and plan["errors"] == [] and plan["start"] == "cordon-required"
    assert plan["steps"] == ["cordon-required", "wait-for-jobs-required", "pod-eviction-required", "host-upgrade-required",
                             "validation-required", "uncordon-required"]
    # A limit, a request and limit, an init container's request, a MIG slice, a time-sliced renamed resource.
    assert plan["evict"] == [{"namespace": "ml", "name": "train-resnet-7xk2p"}, {"namespace": "serving", "name": "infer-llm-6d9f8-2jq4w"},
                             {"namespace": "research", "name": "notebook-ana"}, {"namespace": "research", "name": "mig-small-0"},
                             {"namespace": "serving", "name": "shared-ts-5c7b9-x1x2y"}]
    # Not evicted but named: the GPU-using DaemonSet pod and the static pod's mirror.
    assert plan["kept"] == ["monitoring/gpu-burn-ds-9wz4c: a DaemonSet pod, which would come back at once",
                            "kube-system/static-gpu-check-gpu-node-1: a static pod's mirror, which cannot be evicted"]
    assert "research/mig-small-0 (nvidia.com/mig-1g.10gb)" in plan["found"] and len(plan["found"]) == 7
    # The CPU pod, the finished GPU pods and the pod of another node are left alone.
    assert not {"web-frontend-58d6b-abcde", "eval-done-xk2aa", "eval-failed-xk2ab", "train-other-node-p9k2z"} & {
        e["name"] for e in plan["evict"]}
    # The node was schedulable: it is uncordoned at the end, and the first patch records that.
    assert plan["initial_unschedulable"] is False and plan["uncordon"] is True
    assert plan["patches"]["cordon-required"] == {"metadata": {
        "labels": {"gpuhost.nvidia/upgrade-state": "cordon-required", "gpuhost.nvidia/upgrade-target": TARGET},
        "annotations": {"gpuhost.nvidia/upgrade-initial-unschedulable": "false"}}}
    assert plan["patches"]["upgrade-done"] == {"metadata": {"labels": {
        "gpuhost.nvidia/upgrade-state": "upgrade-done", "gpuhost.nvidia/upgrade-target": TARGET}}}


def test_node_plan_full_drain_lists_no_eviction():
    plan = k8s.node_plan({"resources": [node("gpu-node-1")]}, load("pods-gpu-node-1.json"), TARGET, drain=True)
    assert plan["evict"] == [] and len(plan["found"]) == 7


def test_node_cordoned_before_the_roll_stays_cordoned():
    plan = k8s.node_plan(node("gpu-node-6"), load("pods-empty.json"), TARGET)
    assert plan["initial_unschedulable"] is True and plan["uncordon"] is False
    assert plan["patches"]["cordon-required"]["metadata"]["annotations"] == {"gpuhost.nvidia/upgrade-initial-unschedulable": "true"}


def test_skip_and_done_plan_nothing():
    skip = k8s.node_plan(node("gpu-node-2"), load("pods-empty.json"), TARGET)
    assert skip["action"] == "skip" and skip["steps"] == [] and skip["evict"] == []
    done = k8s.node_plan(node("gpu-node-4"), load("pods-gpu-node-1.json"), TARGET)
    assert done["action"] == "done" and done["evict"] == [] and "upgrade-done for %s" % TARGET in done["reason"]


def test_interrupted_roll_resumes_where_it_stopped():
    """Walk gpu-node-1 through its steps, applying each state's patch as the API server would; stop after each one,
    as a killed ansible-playbook would, and plan again from the node as it is then."""
    steps = k8s.node_plan(node("gpu-node-1"), load("pods-empty.json"), TARGET)["steps"]
    for stop in range(len(steps)):
        current = node("gpu-node-1")
        plan = k8s.node_plan(current, load("pods-empty.json"), TARGET)
        for step in steps[:stop + 1]:
            merge_patch(current, plan["patches"][step])
            if step == "cordon-required":
                current["spec"]["unschedulable"] = True  # the cordon itself
        resumed = k8s.node_plan(current, load("pods-gpu-node-1.json"), TARGET)
        assert resumed["start"] == steps[stop], (stop, resumed)
        assert resumed["steps"] == steps[stop:]
        # It was schedulable before the roll: the record says so, although the node is cordoned now.
        assert resumed["initial_unschedulable"] is False and resumed["uncordon"] is True
        # A resumed first step records no new initial state (that record is the one from before the roll).
        assert "annotations" not in resumed["patches"][steps[stop]]["metadata"] or steps[stop] == "cordon-required"
    merge_patch(current, plan["patches"]["upgrade-done"])
    current["spec"]["unschedulable"] = False
    assert k8s.node_plan(current, load("pods-empty.json"), TARGET)["action"] == "done"
    # A new target starts the node over.
    again = k8s.node_plan(current, load("pods-empty.json"), "d580.105.08_t1.18.0")
    assert again["start"] == "cordon-required" and again["initial_unschedulable"] is False


def test_resume_from_the_recorded_fixture_and_drain_state():
    plan = k8s.node_plan(node("gpu-node-3"), load("pods-empty.json"), TARGET)
    assert plan["start"] == "pod-eviction-required" and plan["uncordon"] is True
    drained = node("gpu-node-3")
    drained["metadata"]["labels"]["gpuhost.nvidia/upgrade-state"] = "drain-required"
    assert k8s.node_plan(drained, load("pods-empty.json"), TARGET)["start"] == "pod-eviction-required"


def test_lost_record_keeps_the_node_cordoned():
    """Interrupted, and someone removed the annotation: the roll cannot know whether the node was cordoned before it,
    so it does not uncordon it."""
    lost = node("gpu-node-3")
    del lost["metadata"]["annotations"]["gpuhost.nvidia/upgrade-initial-unschedulable"]
    plan = k8s.node_plan(lost, load("pods-empty.json"), TARGET)
    assert plan["initial_unschedulable"] is None and plan["uncordon"] is False and "stays cordoned" in plan["reason"]


def test_failed_node_starts_over_and_keeps_its_record():
    failed = node("gpu-node-3")
    failed["metadata"]["labels"]["gpuhost.nvidia/upgrade-state"] = "upgrade-failed"
    plan = k8s.node_plan(failed, load("pods-empty.json"), TARGET)
    # Cordoned by the failed roll; the record from before it says schedulable.
    assert plan["start"] == "cordon-required" and plan["initial_unschedulable"] is False and plan["uncordon"] is True


def test_jobs_running_on_the_node():
    assert k8s.jobs_running(load("jobs-gpu-node-1.json"), "gpu-node-1") == ["ml/train-resnet-7xk2p (Running)"]
    assert k8s.jobs_running(load("pods-empty.json"), "gpu-node-1") == []
    unknown = load("jobs-gpu-node-1.json")
    del unknown["resources"][0]["status"]["phase"]
    assert k8s.jobs_running(unknown, "gpu-node-1") == ["ml/train-resnet-7xk2p (no phase)"]


def test_unknown_state_stops_the_node():
    odd = node("gpu-node-1")
    odd["metadata"]["labels"]["gpuhost.nvidia/upgrade-state"] = "pod-restart-required"
    plan = k8s.node_plan(odd, load("pods-empty.json"), TARGET)
    assert plan["errors"] and "pod-restart-required" in plan["errors"][0] and "upgrade-required" in plan["errors"][0]


def test_operator_driver_pod_stops_the_node():
    pods = load("pods-gpu-node-1.json")
    pods["resources"].append({"metadata": {"name": "nvidia-driver-daemonset-6wd8q", "namespace": "gpu-operator",
                                           "labels": {"app": "nvidia-driver-daemonset"},
                                           "ownerReferences": [{"kind": "DaemonSet", "name": "nvidia-driver-daemonset"}]},
                              "spec": {"nodeName": "gpu-node-1", "containers": [{"name": "nvidia-driver-ctr"}]},
                              "status": {"phase": "Running"}})
    plan = k8s.node_plan(node("gpu-node-1"), pods, TARGET)
    assert len(plan["errors"]) == 1 and plan["errors"][0].startswith("gpu-node-1: the GPU Operator manages this node's NVIDIA driver")
    assert "driver.enabled=false" in plan["errors"][0]
