# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""playbooks/k8s_cluster.yml: what each kubernetes.core call is asked to do, in check mode and for real, and that a
second run changes nothing.

No Kubernetes API server can run on the test machines. A stand-in kubernetes.core (fake_k8s/) records every call and
keeps the objects, labels and taints it was given, answering as kubectl apply, a merge patch and kubectl taint would.
What a real API server does with these requests (admission, defaulting) is not tested here; the objects themselves
are validated against Kubernetes' schemas in test_k8s_manifests.py.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml
from k8s_play import run_playbook

REPO = Path(__file__).resolve().parents[3]
PLAYBOOK = REPO / "playbooks" / "k8s_cluster.yml"
REQUEST = {
    "sharing": {"ts-4": {"time_slicing": {"replicas": 4}}}, "default_config": "ts-4",
    "nodes": ["gpu-node-1", "gpu-node-2"],
    "node_labels": {"accelerator": "nvidia-tesla-a100", "nvidia.com/gpu": "true", "nvidia.com/device-plugin.config": "ts-4"},
    "node_taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}],
}


def _player(tmp_path: Path):
    log, store = tmp_path / "calls.jsonl", tmp_path / "store.json"

    def run(*extra: str, request=None) -> tuple[int, dict, list[dict]]:
        (tmp_path / "vars.yml").write_text(yaml.safe_dump({"gpuhost_k8s": REQUEST if request is None else request}))
        return run_playbook(["-i", "localhost,", "-e", "ansible_connection=local", "-e", "ansible_python_interpreter=%s" % sys.executable,
                             "-e", "@%s" % (tmp_path / "vars.yml"), str(PLAYBOOK), *extra], log, store)

    run.store = store
    return run


@pytest.fixture
def play(tmp_path):
    return _player(tmp_path)


@pytest.fixture(scope="module")
def lifecycle(tmp_path_factory):
    """One stand-in cluster through check mode, apply, apply again, absent and absent again: each step's calls and
    result, and the store after each run that writes."""
    run = _player(tmp_path_factory.mktemp("lifecycle"))
    steps = {}
    steps["check"] = run("--check")
    steps["check_store_exists"] = run.store.exists()
    steps["apply"] = run()
    steps["again"] = run()
    steps["absent"] = run("-e", "gpuhost_k8s_state=absent")
    steps["absent_store"] = json.loads(run.store.read_text())
    steps["absent_again"] = run("-e", "gpuhost_k8s_state=absent")
    return steps


def changed(result):
    return result["stats"]["localhost"]["changed"]


def test_check_mode_then_apply_then_nothing_changes(lifecycle):
    rc, result, calls = lifecycle["check"]
    assert rc == 0 and changed(result) > 0
    assert all(c["check_mode"] for c in calls) and not lifecycle["check_store_exists"]
    predicted = [(c["module"], c["args"].get("state"), c["args"].get("kind") or c["args"].get("definition", {}).get("kind")) for c in calls]

    rc, result, calls = lifecycle["apply"]
    assert rc == 0 and changed(result) == 3  # the apply, label and taint tasks; every item changed the store
    assert len(calls) == 6 + 2 + 2
    assert [(c["module"], c["args"].get("state"), c["args"].get("kind") or c["args"].get("definition", {}).get("kind")) for c in calls] == predicted
    applied = [c["args"] for c in calls if c["module"] == "k8s" and c["args"]["state"] == "present"]
    assert all(a["apply"] is True for a in applied)
    assert [a["definition"]["kind"] for a in applied] == ["RuntimeClass", "ConfigMap", "ServiceAccount", "ClusterRole",
                                                          "ClusterRoleBinding", "DaemonSet"]
    patches = [c["args"] for c in calls if c["module"] == "k8s" and c["args"]["state"] == "patched"]
    assert [(p["kind"], p["name"], p["merge_type"]) for p in patches] == [("Node", "gpu-node-1", "merge"), ("Node", "gpu-node-2", "merge")]
    assert patches[0]["definition"] == {"metadata": {"labels": REQUEST["node_labels"]}}
    taints = [c["args"] for c in calls if c["module"] == "k8s_taint"]
    assert [(t["name"], t["state"], t["taints"]) for t in taints] == [
        ("gpu-node-1", "present", REQUEST["node_taints"]), ("gpu-node-2", "present", REQUEST["node_taints"])]
    assert not [c for c in calls if c["module"] == "k8s_log"]  # no test job unless asked

    rc, result, calls = lifecycle["again"]
    assert rc == 0 and changed(result) == 0 and calls


def test_absent_deletes_and_untaints(lifecycle):
    rc, result, calls = lifecycle["absent"]
    assert rc == 0 and changed(result) > 0
    store = lifecycle["absent_store"]
    assert store["objects"] == {} and store["labels"] == {"gpu-node-1": {}, "gpu-node-2": {}}
    assert store["taints"] == {"gpu-node-1": [], "gpu-node-2": []}
    patches = [c["args"] for c in calls if c["args"].get("kind") == "Node"]
    assert patches[0]["definition"]["metadata"]["labels"] == dict.fromkeys(REQUEST["node_labels"])
    deleted = [c["args"]["definition"]["kind"] for c in calls if c["module"] == "k8s" and c["args"]["state"] == "absent"]
    assert deleted == ["DaemonSet", "ClusterRoleBinding", "ClusterRole", "ServiceAccount", "ConfigMap", "RuntimeClass", "Job"]
    assert changed(lifecycle["absent_again"][1]) == 0


def test_the_test_job_runs_only_when_asked_and_reports(play):
    rc, result, calls = play("-e", "gpuhost_k8s_test=true", "--check")
    assert rc == 0 and not [c for c in calls if c["args"].get("definition", {}).get("kind") == "Job"]
    rc, result, calls = play("-e", "gpuhost_k8s_test=true")
    jobs = [c["args"] for c in calls if c["args"].get("definition", {}).get("kind") == "Job"]
    assert [j["state"] for j in jobs] == ["absent", "present"]
    assert jobs[1]["wait"] is True and jobs[1]["wait_condition"] == {"type": "Complete", "status": "True"}
    spec = jobs[1]["definition"]["spec"]["template"]["spec"]
    assert spec["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": 1}
    logs = [c["args"] for c in calls if c["module"] == "k8s_log"]
    assert logs == [{"namespace": "kube-system", "label_selectors": ["job-name=gpuhost-gpu-test"]}]
    report = [t for p in result["plays"] for t in p["tasks"] if t["task"]["name"] == "Report the GPU test"][0]
    assert "NVIDIA H200" in " ".join(report["hosts"]["localhost"]["msg"])


@pytest.mark.parametrize("request_, needle", [
    ({"node_labels": {"nvidia.com/gpu.family": "ada lovelace"}}, "ada lovelace"),
    ({"node_taints": [{"key": "nvidia.com/gpu", "effect": "Never"}]}, "effect"),
])
def test_a_bad_request_stops_before_any_call(play, request_, needle):
    rc, result, calls = play(request=request_)
    assert rc != 0 and calls == []
    failed = [t for p in result["plays"] for t in p["tasks"] if t["hosts"]["localhost"].get("failed")]
    assert failed[0]["task"]["name"] == "Check the request before anything is sent" and needle in failed[0]["hosts"]["localhost"]["msg"]
