# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A stand-in Kubernetes API for the unit tests of playbooks/k8s_cluster.yml.

Every call is appended to GPUHOST_FAKE_K8S_LOG (the module, its arguments, check mode). The objects, node labels and
taints live in GPUHOST_FAKE_K8S_STORE (JSON), so a second run can show that it changes nothing. This is no API server:
it only answers as kubectl apply, a merge patch and kubectl taint would for the objects the playbook sends.
"""
from __future__ import annotations

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


def run(name):
    params = basic._load_params()  # pylint: disable=protected-access
    check = bool(params.get("_ansible_check_mode"))
    args = {k: v for k, v in params.items() if not k.startswith("_ansible")}
    log, store_path = os.environ["GPUHOST_FAKE_K8S_LOG"], os.environ["GPUHOST_FAKE_K8S_STORE"]
    with open(log, "a", encoding="utf-8") as handle:
        handle.write(json.dumps({"module": name, "args": args, "check_mode": check}, sort_keys=True) + "\n")
    store = _load(store_path, {"objects": {}, "labels": {}, "taints": {}})
    result = {"changed": False}
    if name == "k8s" and args.get("kind") == "Node":
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
    sys.exit(0)
