# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""playbooks/upgrade.yml's Kubernetes steps: what each kubernetes.core call is asked to do, against a stand-in API
(fake_k8s/) seeded with the recorded node and pod lists of fixtures/upgrade/.

Two rolls over one stand-in cluster. The first: gpu03's node was interrupted at pod-eviction-required by an earlier
roll and resumes there, first; gpu01's node is cordoned, its named jobs are looked at, and only its GPU pods are
deleted; gpu02's node carries the GPU Operator's skip label; gpu04's node is upgrade-done for this target; gpu07's node
runs a named job that does not finish in time, so the host fails closed, labelled upgrade-failed, before any eviction.
The second roll, after that job finished: only gpu07 runs, from the start, and is uncordoned at the end (its record
says it was schedulable before the first roll).

The roles are switched off and the guard reads synthetic facts, as in tests/unit/playbooks/test_upgrade_playbook.py;
what a real API server does with these requests is not tested here.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml
from k8s_play import run_playbook

REPO = Path(__file__).resolve().parents[3]
PLAYBOOK = REPO / "playbooks" / "upgrade.yml"
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "upgrade"
TARGET = "d580.95.05_t1.18.0"
IDLE = {
    "present": True, "source": "nvml", "state": "ok", "messages": [],
    "driver": {"version": "580.95.05", "branch": "580", "kernel_module_loaded": True, "kernel_module_type": "open"},
    "gpus": [{"index": 0, "uuid": "GPU-3f1c2a51-0a6e-4b6b-9a55-2d4ac6f0e001", "pci_bus_id": "0000:17:00.0", "processes": []}],
    "device_nodes": ["/dev/nvidia0", "/dev/nvidia-uvm", "/dev/nvidiactl"],
}
HOSTS = {"gpu01": "gpu-node-1", "gpu02": "gpu-node-2", "gpu03": "gpu-node-3", "gpu04": "gpu-node-4", "gpu07": "gpu-node-7"}
STATE = "gpuhost.nvidia/upgrade-state"


def _seed(store: Path) -> None:
    nodes = json.loads((FIXTURES / "nodes.json").read_text())["resources"]
    pods = json.loads((FIXTURES / "pods-gpu-node-1.json").read_text())["resources"]
    pods += [p for p in json.loads((FIXTURES / "jobs-gpu-node-1.json").read_text())["resources"] if p["metadata"]["name"].startswith("etl-")]
    store.write_text(json.dumps({"objects": {}, "labels": {}, "taints": {}, "pods": pods,
                                 "nodes": {n["metadata"]["name"]: n for n in nodes}}))


def _root(tmp_path: Path, name: str) -> str:
    root = tmp_path / ("root-" + name)
    (root / "sys/module/nvidia").mkdir(parents=True, exist_ok=True)
    (root / "sys/module/nvidia/version").write_text("580.95.05\n")
    lib = root / "usr/lib/x86_64-linux-gnu"
    lib.mkdir(parents=True, exist_ok=True)
    (lib / "libnvidia-ml.so.580.95.05").write_text("stand-in\n")
    if not (lib / "libnvidia-ml.so.1").is_symlink():
        (lib / "libnvidia-ml.so.1").symlink_to("libnvidia-ml.so.580.95.05")
    return str(root)


def _roll(tmp_path: Path, log: Path, store: Path) -> tuple[int, dict, list[dict]]:
    hosts = {host: {"gpuhost_upgrade_facts": IDLE, "gpuhost_upgrade_facts_root": _root(tmp_path, host), "gpuhost_upgrade_k8s_node": node}
             for host, node in HOSTS.items()}
    inventory = {"all": {"hosts": hosts, "vars": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "gpuhost_upgrade_driver": False, "gpuhost_upgrade_toolkit": False, "gpuhost_upgrade_doctor": False,
        "nvidia_driver_version": "580.95.05", "nvidia_container_toolkit_version": "1.18.0",
        "gpuhost_upgrade_check_loaded": True, "gpuhost_upgrade_summary_dir": str(tmp_path),
        "gpuhost_upgrade_kubeconfig": str(tmp_path / "kubeconfig"), "gpuhost_upgrade_max_unavailable": "50%",
        "gpuhost_upgrade_max_fail_percentage": 100,
        "gpuhost_upgrade_k8s_wait_selector": "gpuhost.example/wait=true", "gpuhost_upgrade_k8s_wait_timeout": 2,
        "gpuhost_upgrade_k8s_wait_delay": 1,
    }}}
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
    return run_playbook(["-i", str(tmp_path / "inventory.yml"), str(PLAYBOOK)], log, store, timeout=600)


def _table(tmp_path: Path) -> dict[str, list[str]]:
    lines = (tmp_path / "upgrade.txt").read_text(encoding="utf-8").splitlines()
    return {line.split()[0]: line.split() for line in lines[1:]}


def _about(calls, node):
    """The calls about one node, as (module, what): the state a patch records, a drain state, a pod deletion."""
    found = []
    for call in calls:
        args = call["args"]
        if call["module"] == "k8s" and args.get("kind") == "Node" and args["name"] == node:
            found.append(("patch", args["definition"]["metadata"]["labels"][STATE]))
        elif call["module"] == "k8s_drain" and args["name"] == node:
            found.append(("k8s_drain", args["state"]))
        elif call["module"] == "k8s_info" and args.get("name") == node:
            found.append(("read", "node"))
        elif call["module"] == "k8s_info" and "spec.nodeName=%s" % node in (args.get("field_selectors") or []):
            found.append(("read", "jobs" if args.get("label_selectors") else "pods"))
    return found


@pytest.fixture(scope="module")
def rolls(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("k8sroll")
    log, store = tmp_path / "calls.jsonl", tmp_path / "store.json"
    _seed(store)
    first = _roll(tmp_path, log, store)
    table = _table(tmp_path)
    after_first = json.loads(store.read_text())
    # The named job on gpu-node-7 finished meanwhile.
    for pod in after_first["pods"]:
        if pod["metadata"]["name"] == "etl-nightly-other":
            pod["status"]["phase"] = "Succeeded"
    store.write_text(json.dumps(after_first))
    second = _roll(tmp_path, log, store)
    return {"first": first, "table": table, "after_first": after_first, "second": second, "table2": _table(tmp_path),
            "store": json.loads(store.read_text())}


def test_first_roll_plans_from_the_node_list_and_resumes_first(rolls):
    rc, result, calls = rolls["first"]
    assert rc != 0  # gpu07 failed closed
    assert calls[0] == {"module": "k8s_info", "args": {"kind": "Node", "kubeconfig": calls[0]["args"]["kubeconfig"]}, "check_mode": False}
    # Interrupted gpu-node-3 goes first (the table lists the roll's order).
    assert list(rolls["table"]) == ["gpu03", "gpu01", "gpu02", "gpu04", "gpu07"]
    assert [rolls["table"][h][1] for h in HOSTS] == ["ok", "skipped", "ok", "skipped", "failed"]
    # 50 % of the 7 GPU nodes is 4 (rounded up); gpu-node-5 (not Ready) and gpu-node-6 (cordoned), outside the roll,
    # use two: batches of 2, in the roll's order.
    batches = [sorted({h for t in p["tasks"] for h in t["hosts"]} - {"localhost"}) for p in result["plays"]
               if p["play"]["name"].startswith("Roll")]
    assert batches == [["gpu01", "gpu03"], ["gpu02", "gpu04"], ["gpu07"]], batches


def test_resumed_node_starts_at_its_recorded_step(rolls):
    _rc, _result, calls = rolls["first"]
    assert _about(calls, "gpu-node-3") == [
        ("read", "node"), ("read", "pods"), ("patch", "pod-eviction-required"), ("patch", "host-upgrade-required"),
        ("patch", "validation-required"), ("patch", "uncordon-required"), ("k8s_drain", "uncordon"), ("patch", "upgrade-done")]


def test_only_gpu_pods_are_evicted(rolls):
    _rc, _result, calls = rolls["first"]
    assert _about(calls, "gpu-node-1") == [
        ("read", "node"), ("read", "pods"), ("patch", "cordon-required"), ("k8s_drain", "cordon"), ("patch", "wait-for-jobs-required"),
        ("read", "jobs"), ("patch", "pod-eviction-required"), ("patch", "host-upgrade-required"), ("patch", "validation-required"),
        ("patch", "uncordon-required"), ("k8s_drain", "uncordon"), ("patch", "upgrade-done")]
    first_patch = next(c["args"] for c in calls if c["module"] == "k8s" and c["args"].get("name") == "gpu-node-1")
    assert (first_patch["state"], first_patch["kind"]) == ("patched", "Node")
    assert first_patch["definition"] == {"metadata": {"labels": {STATE: "cordon-required", "gpuhost.nvidia/upgrade-target": TARGET},
                                                      "annotations": {"gpuhost.nvidia/upgrade-initial-unschedulable": "false"}}}
    jobs = next(c["args"] for c in calls if c["module"] == "k8s_info" and c["args"].get("label_selectors"))
    assert jobs["label_selectors"] == ["gpuhost.example/wait=true"] and jobs["field_selectors"] == ["spec.nodeName=gpu-node-1"]
    deleted = [c["args"] for c in calls if c["module"] == "k8s" and c["args"].get("kind") == "Pod"]
    assert [(d["namespace"], d["name"], d["state"], d["wait"]) for d in deleted] == [
        ("ml", "train-resnet-7xk2p", "absent", True), ("serving", "infer-llm-6d9f8-2jq4w", "absent", True),
        ("research", "notebook-ana", "absent", True), ("research", "mig-small-0", "absent", True),
        ("serving", "shared-ts-5c7b9-x1x2y", "absent", True)]
    left = {p["metadata"]["name"] for p in rolls["after_first"]["pods"] if p["spec"]["nodeName"] == "gpu-node-1"}
    assert left == {"web-frontend-58d6b-abcde", "eval-done-xk2aa", "eval-failed-xk2ab", "nvidia-device-plugin-daemonset-4kq7z",
                    "gpu-burn-ds-9wz4c", "static-gpu-check-gpu-node-1", "etl-nightly-28f7q"}
    node = rolls["after_first"]["nodes"]["gpu-node-1"]
    assert node["metadata"]["labels"][STATE] == "upgrade-done" and node["spec"]["unschedulable"] is False


def test_skipped_and_done(rolls):
    _rc, _result, calls = rolls["first"]
    assert _about(calls, "gpu-node-2") == [("read", "node"), ("read", "pods")]
    assert _about(calls, "gpu-node-4") == [("read", "node"), ("read", "pods")]
    assert "nvidia.com/gpu-driver-upgrade.skip=true" in " ".join(rolls["table"]["gpu02"])
    assert rolls["after_first"]["nodes"]["gpu-node-4"] == json.loads((FIXTURES / "nodes.json").read_text())["resources"][3]


def test_a_running_job_fails_the_node_closed(rolls):
    _rc, result, calls = rolls["first"]
    about = _about(calls, "gpu-node-7")
    assert about[:5] == [("read", "node"), ("read", "pods"), ("patch", "cordon-required"), ("k8s_drain", "cordon"),
                         ("patch", "wait-for-jobs-required")]
    assert about[5:-1] == [("read", "jobs")] * 3 and about[-1] == ("patch", "upgrade-failed")
    assert not [c for c in calls if c["module"] == "k8s" and c["args"].get("kind") == "Pod" and c["args"]["name"] == "train-other-node-p9k2z"]
    refusal = [t["hosts"]["gpu07"] for p in result["plays"] for t in p["tasks"]
               if t["task"]["name"] == "Refuse to evict while the named jobs run" and "gpu07" in t["hosts"]][0]
    assert refusal["failed"] and "ml/etl-nightly-other (Running)" in refusal["msg"] and "gpuhost_upgrade_k8s_wait_timeout" in refusal["msg"]
    node = rolls["after_first"]["nodes"]["gpu-node-7"]
    assert node["metadata"]["labels"][STATE] == "upgrade-failed" and node["spec"]["unschedulable"] is True


def test_second_roll_retries_only_the_failed_node(rolls):
    rc, _result, calls = rolls["second"]
    assert rc == 0
    assert [rolls["table2"][h][1] for h in HOSTS] == ["skipped", "skipped", "skipped", "skipped", "ok"]
    writes = [c for c in calls if c["module"] in ("k8s", "k8s_drain")]
    assert {c["args"]["name"] for c in writes} == {"gpu-node-7", "train-other-node-p9k2z"}
    assert ("k8s_drain", "uncordon") in _about(calls, "gpu-node-7")
    node = rolls["store"]["nodes"]["gpu-node-7"]
    assert node["metadata"]["labels"][STATE] == "upgrade-done" and node["spec"]["unschedulable"] is False
