# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A stand-in Kubernetes API for the unit tests of playbooks/k8s_cluster.yml.

Every call is appended to GPUHOST_FAKE_K8S_LOG (the module, its arguments, check mode). The objects, node labels and
taints live in GPUHOST_FAKE_K8S_STORE (JSON), so a second run can show that it changes nothing. This is no API server:
it only answers as kubectl apply, a merge patch and kubectl taint would for the objects the playbook sends.
"""
from __future__ import annotations

import fcntl
import json
import os
import sys

from ansible.module_utils import basic


def _load(path, default):
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except FileNotFoundError:
        return default


def _save(path, data):
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=1, sort_keys=True)


def _failure(name, args):
    """GPUHOST_FAKE_K8S_FAIL="<module>:<state>:<name>": that call fails, as an API error would."""
    wanted = os.environ.get("GPUHOST_FAKE_K8S_FAIL", "")
    if wanted and wanted == "%s:%s:%s" % (name, args.get("state"), args.get("name")):
        return "stand-in API error for %s" % wanted
    return None


def _merge(obj, patch):
    """A JSON merge patch (RFC 7386): null removes a key."""
    changed = False
    for key, value in patch.items():
        if value is None:
            changed |= obj.pop(key, None) is not None
        elif isinstance(value, dict):
            changed |= _merge(obj.setdefault(key, {}), value)
        elif obj.get(key) != value:
            obj[key] = value
            changed = True
    return changed


def _selected(pod, args):
    for selector in args.get("field_selectors") or []:
        key, value = selector.split("=", 1)
        if key == "spec.nodeName" and pod["spec"].get("nodeName") != value:
            return False
    for selector in args.get("label_selectors") or []:
        for term in selector.split(","):
            key, value = term.split("=", 1)
            if pod["metadata"].get("labels", {}).get(key) != value:
                return False
    return not args.get("namespace") or pod["metadata"].get("namespace") == args["namespace"]


def _cluster(name, args, store, check):
    """Nodes and pods kept as objects (store["nodes"], store["pods"]): k8s_info reads them, k8s patches a Node or
    deletes a Pod, k8s_drain cordons, uncordons or drains (every pod of the node but DaemonSet pods)."""
    nodes, pods = store.setdefault("nodes", {}), store.setdefault("pods", [])
    result = {"changed": False}
    if name == "k8s_info":
        if args["kind"] == "Node":
            found = [nodes[args["name"]]] if args.get("name") in nodes else [] if args.get("name") else list(nodes.values())
        else:
            found = [pod for pod in pods if _selected(pod, args)]
        return {"changed": False, "api_found": True, "resources": found}
    if name == "k8s" and args["kind"] == "Node":
        if args["name"] not in nodes:
            return {"failed": True, "msg": "nodes %s not found" % args["name"]}
        result["changed"] = _merge(nodes[args["name"]], args["definition"])
        return result
    if name == "k8s" and args["kind"] == "Pod":
        left = [pod for pod in pods if (pod["metadata"]["namespace"], pod["metadata"]["name"]) != (args["namespace"], args["name"])]
        result["changed"] = len(left) != len(pods)
        store["pods"] = left
        return result
    node = nodes[args["name"]]
    wanted = {"cordon": True, "drain": True, "uncordon": False}[args["state"]]
    result["changed"] = bool(node["spec"].get("unschedulable")) != wanted
    node["spec"]["unschedulable"] = wanted
    if args["state"] == "drain":
        left = [pod for pod in pods if pod["spec"].get("nodeName") != args["name"]
                or "DaemonSet" in [ref.get("kind") for ref in pod["metadata"].get("ownerReferences", [])]]
        result["changed"] |= len(left) != len(pods)
        store["pods"] = left
    result["result"] = "node %s marked %s" % (args["name"], args["state"])
    return result


def run(name):
    params = basic._load_params()  # pylint: disable=protected-access
    check = bool(params.get("_ansible_check_mode"))
    args = {k: v for k, v in params.items() if not k.startswith("_ansible")}
    log, store_path = os.environ["GPUHOST_FAKE_K8S_LOG"], os.environ["GPUHOST_FAKE_K8S_STORE"]
    # Hosts of one batch call at once: one call at a time reads and writes the store, as an API server serialises them.
    lock = open(store_path + ".lock", "a", encoding="utf-8")  # pylint: disable=consider-using-with
    fcntl.flock(lock, fcntl.LOCK_EX)
    with open(log, "a", encoding="utf-8") as handle:
        handle.write(json.dumps({"module": name, "args": args, "check_mode": check}, sort_keys=True) + "\n")
    store = _load(store_path, {"objects": {}, "labels": {}, "taints": {}})
    result = {"changed": False}
    failure = _failure(name, args)
    if failure:
        print(json.dumps({"failed": True, "msg": failure}))
        sys.exit(1)
    if name in ("k8s_info", "k8s_drain") or (name == "k8s" and "nodes" in store and args.get("kind") in ("Node", "Pod")):
        result = _cluster(name, args, store, check)
    elif name == "k8s" and args.get("kind") == "Node":
        labels = store["labels"].setdefault(args["name"], {})
        after = dict(labels)
        for key, value in args["definition"]["metadata"]["labels"].items():
            if value is None:
                after.pop(key, None)
            else:
                after[key] = value
        result["changed"] = after != labels
        store["labels"][args["name"]] = after
    elif name == "k8s":
        body = args["definition"]
        key = "%s/%s/%s" % (body["kind"], body["metadata"].get("namespace", ""), body["metadata"]["name"])
        if args.get("state") == "absent":
            result["changed"] = store["objects"].pop(key, None) is not None
        else:
            result["changed"] = store["objects"].get(key) != body
            store["objects"][key] = body
            result["result"] = body
    elif name == "k8s_taint":
        taints = store["taints"].setdefault(args["name"], [])
        wanted = [dict(t) for t in args["taints"]]
        if args.get("state") == "absent":
            after = [t for t in taints if {k: t[k] for k in ("key", "effect")} not in
                     [{k: w[k] for k in ("key", "effect")} for w in wanted]]
        else:
            after = [t for t in taints if t not in wanted] + wanted
        result["changed"] = after != taints
        store["taints"][args["name"]] = after
    elif name == "k8s_log":
        result["log_lines"] = ["GPU 0: NVIDIA H200 (UUID: GPU-00000000-0000-4000-8000-000000000000)"]
    if not check:
        _save(store_path, store)
    print(json.dumps(result))
    sys.exit(1 if result.get("failed") else 0)
