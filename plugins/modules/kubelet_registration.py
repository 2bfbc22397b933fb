#!/usr/bin/python
# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: kubelet_registration
short_description: Merge the node labels and taints a kubelet registers with into its environment file or drop-in directory
version_added: 0.1.0
description:
  - Adds O(labels) to the kubelet's C(--node-labels) and O(taints) to its C(--register-with-taints), in the variable
    O(variable) of the systemd environment file O(env_file) (kubeadm's C(/etc/default/kubelet) on Debian and Ubuntu,
    C(/etc/sysconfig/kubelet) on RHEL). Every other word of the variable, and every other line of the file, stays as
    it is. With O(config_dir) (the kubelet's C(--config-dir)), the taints go into a C(KubeletConfiguration) drop-in
    there (C(registerWithTaints)) instead.
  - Labels and taints registered by the kubelet apply when the node registers. A node that is already registered
    keeps its labels and taints; change those from the cluster side (the Kubernetes API, C(kubectl label)).
  - Refuses, before anything is read, a label key or value Kubernetes would refuse, and a label the kubelet may not set
    on its own Node (by the NodeRestriction admission plugin's and the kubelet's rule, no C(node-restriction.kubernetes.io)
    labels, and of the C(kubernetes.io)/C(k8s.io) labels only the kubelet's own).
  - Refuses a file it cannot read with certainty (a value with quotes, backslashes or C($), the flag given twice or as
    two words) and leaves it as it is.
  - The module does not restart the kubelet; RV(files) names the files that changed.
  - O(state=absent) takes out what the module added, giving a label or taint it replaced its original value back (from
    the record O(record)), and removes the drop-in. Without a record entry for O(env_file) nothing there is taken out,
    as a label of the same key is then the user's own.
author:
  - gpuhost.nvidia developers (@gpuhost)
requirements:
  - PyYAML on the managed host when O(config_file) or the drop-ins before O(dropin_name) are YAML.
attributes:
  check_mode:
    support: full
    description: Reads the files and the record and says what would change, writing nothing.
  diff_mode:
    support: full
    description: Shows each file before and after.
  safe_file_operations:
    support: full
    description: Writes each file to a temporary file beside it and moves it into place atomically.
  platform:
    support: full
    platforms: posix
    description: Linux hosts with a kubelet.
options:
  labels:
    description:
      - Node labels, key to value. Keys are qualified names (V(example.com/gpu-pool)), values empty or at most 63
        characters of letters, digits, C(-), C(_) and C(.) with an alphanumeric first and last character.
    type: dict
    default: {}
  taints:
    description: Taints the node registers with.
    type: list
    elements: dict
    default: []
    suboptions:
      key:
        description: The taint's key, a qualified name (V(nvidia.com/gpu)).
        type: str
        required: true
      value:
        description: The taint's value, a label value; may be left out.
        type: str
      effect:
        description: The taint's effect.
        type: str
        required: true
        choices: [NoSchedule, PreferNoSchedule, NoExecute]
  env_file:
    description: The kubelet's systemd environment file. It is created when missing.
    type: path
    default: /etc/default/kubelet
  variable:
    description: The variable of O(env_file) the kubelet's unit passes on its command line.
    type: str
    default: KUBELET_EXTRA_ARGS
  config_dir:
    description:
      - The kubelet's C(--config-dir) drop-in directory. When set, the taints go into O(dropin_name) there, with the
        taints O(config_file) and the drop-ins sorting before it configure (a drop-in replaces a list whole).
      - The directory must exist.
    type: path
  config_file:
    description: The kubelet's main configuration file (C(--config)), read for its C(registerWithTaints).
    type: path
  dropin_name:
    description: The drop-in's file name in O(config_dir); the kubelet reads only names that end with C(.conf).
    type: str
    default: 90-gpuhost-nvidia.conf
  record:
    description: Where the module keeps the original registration of the files it changed, for O(state=absent).
    type: path
    default: /var/lib/gpuhost/kubelet_registration.json
  state:
    description: V(present) merges; V(absent) takes out what the module added.
    type: str
    choices: [present, absent]
    default: present
"""

EXAMPLES = r"""
- name: Register GPU nodes as the EKS and kubeadm documents do
  gpuhost.nvidia.kubelet_registration:
    labels:
      nvidia.com/gpu: "true"
      accelerator: nvidia-tesla-a100
    taints:
      - key: nvidia.com/gpu
        value: "true"
        effect: NoSchedule
  register: kubelet_registration

- name: Taints through the kubelet's drop-in directory (RHEL)
  gpuhost.nvidia.kubelet_registration:
    env_file: /etc/sysconfig/kubelet
    config_dir: /etc/kubernetes/kubelet.conf.d
    config_file: /var/lib/kubelet/config.yaml
    taints:
      - {key: nvidia.com/gpu, value: "true", effect: NoSchedule}
"""

RETURN = r"""
labels:
  description: The labels the kubelet registers with after the change (all of them, not only this module's).
  returned: always
  type: dict
  sample: {"nvidia.com/gpu": "true"}
taints:
  description: The taints the kubelet registers with after the change, from O(env_file) or the drop-in.
  returned: always
  type: list
  elements: str
  sample: ["nvidia.com/gpu=true:NoSchedule"]
files:
  description: The files the module changed (or would change, in check mode).
  returned: always
  type: list
  elements: str
  sample: [/etc/default/kubelet]
"""

import json
import os
import typing as t

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _files, _kubelet, _validate

RULES = {
    "env_file": _validate.Path(),
    "config_dir": _validate.Path(),
    "config_file": _validate.Path(),
    "record": _validate.Path(),
    "dropin_name": _validate.FileName((".conf",)),
    "variable": _validate.Identifier(_validate.SHELL_VARIABLE_RE, "a shell variable name such as KUBELET_EXTRA_ARGS"),
}


def request_errors(params: t.Mapping[str, t.Any]) -> list[str]:
    errors = _validate.check(params, RULES)
    errors += _kubelet.check_labels(params["labels"])
    errors += _kubelet.check_taints([{k: v for k, v in x.items() if v is not None} for x in params["taints"]])
    return errors


def _read_text(path: str, what: str) -> str | None:
    data = _files.read_bytes(path, what)
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise _kubelet.KubeletError("%s %s is not UTF-8 text; fix it by hand, then run again" % (what, path)) from None


def _load_config(path: str, what: str) -> t.Any:
    text = _read_text(path, what)
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        import yaml  # pylint: disable=import-outside-toplevel
    except ImportError:
        raise _kubelet.KubeletError("%s %s is YAML, and PyYAML is not installed on the host (python3-yaml)" % (what, path)) from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise _kubelet.KubeletError("%s %s is not valid YAML: %s" % (what, path, exc)) from None


def earlier_taints(params: t.Mapping[str, t.Any]) -> list[dict[str, t.Any]]:
    """The taints the main config and the drop-ins sorting before ours configure (the last one that sets them wins)."""
    taints: list[dict[str, t.Any]] = []
    sources = [params["config_file"]] if params["config_file"] else []
    directory = params["config_dir"]
    sources += [os.path.join(directory, n) for n in sorted(os.listdir(directory)) if n.endswith(".conf") and n < params["dropin_name"]]
    for path in sources:
        document = _load_config(path, "kubelet configuration")
        if isinstance(document, dict) and "registerWithTaints" in document:
            taints = _kubelet.config_taints(document, path)
    return taints


def plan(params: t.Mapping[str, t.Any], record: dict[str, t.Any]) -> tuple[dict[str, str | None], dict[str, t.Any], dict[str, t.Any]]:
    """The new content of each file (None: remove it), the new record, and what the kubelet registers with after."""
    env_path = os.path.abspath(params["env_file"])
    taints = [{k: v for k, v in x.items() if v is not None} for x in params["taints"]]
    absent = params["state"] == "absent"
    text = _read_text(env_path, "env_file")
    env = _kubelet.parse_env_file(text, params["variable"], env_path)
    current = _kubelet.read_registration(env.words, env_path)
    new_record = dict(record)
    entry = record.get(env_path)
    if not absent and entry is None:
        entry = new_record[env_path] = {"original": text}
    original = None
    if entry is not None and isinstance(entry.get("original"), str):
        original_env = _kubelet.parse_env_file(entry["original"], params["variable"], env_path + " (recorded original)")
        original = _kubelet.read_registration(original_env.words, env_path + " (recorded original)")
    env_taints = [] if params["config_dir"] else taints
    if absent:
        # Only what the record says this module added goes: without a record entry (never applied, or already
        # removed) a label of the same key is the user's own and stays.
        recorded = (entry or {}).get("ours") or {}
        wanted = _kubelet.remove_registration(current, original, recorded.get("labels", []), recorded.get("taints", []))
        new_record.pop(env_path, None)
    else:
        # What an earlier run added and this one no longer asks for goes first (back to its original value).
        before = (entry or {}).get("ours") or {}
        ids = {(x["key"], x["effect"]) for x in env_taints}
        dropped = _kubelet.remove_registration(current, original, [k for k in before.get("labels", []) if k not in params["labels"]],
                                               [x for x in before.get("taints", []) if (x["key"], x["effect"]) not in ids])
        wanted = _kubelet.merge_registration(dropped, params["labels"], env_taints)
        new_record[env_path] = {"original": entry.get("original") if entry else text,
                                "ours": {"labels": sorted(params["labels"]), "taints": env_taints}}
    contents: dict[str, str | None] = {}
    if wanted != current or (text is None and not absent):
        words = _kubelet.render_words(env.words, wanted, env_path)
        new_text = _kubelet.render_env_file(env, params["variable"], words)
        if absent and entry is not None and entry.get("original") is None and not words:
            new_text = None
        if new_text != text:
            contents[env_path] = new_text
    registered_taints = wanted[1]
    if params["config_dir"]:
        dropin = os.path.join(os.path.abspath(params["config_dir"]), params["dropin_name"])
        before = _read_text(dropin, "dropin")
        if absent:
            if before is not None:
                contents[dropin] = None
            registered_taints = earlier_taints(params)
        else:
            document = _kubelet.dropin_document(taints, earlier_taints(params))
            after = _kubelet.dropin_text(document)
            if after != before:
                contents[dropin] = after
            registered_taints = document["registerWithTaints"]
    return contents, new_record, {"labels": wanted[0], "taints": [_kubelet.taint_text(x) for x in registered_taints]}


def main() -> None:
    module = _validate.ansible_module(
        argument_spec=dict(
            labels=dict(type="dict", default={}),
            taints=dict(type="list", elements="dict", default=[], options=dict(
                key=dict(type="str", required=True, no_log=False),
                value=dict(type="str"),
                effect=dict(type="str", required=True, choices=list(_kubelet.TAINT_EFFECTS)),
            )),
            env_file=dict(type="path", default="/etc/default/kubelet"),
            variable=dict(type="str", default="KUBELET_EXTRA_ARGS"),
            config_dir=dict(type="path"),
            config_file=dict(type="path"),
            dropin_name=dict(type="str", default="90-gpuhost-nvidia.conf"),
            record=dict(type="path", default="/var/lib/gpuhost/kubelet_registration.json"),
            state=dict(type="str", choices=["present", "absent"], default="present"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    errors = request_errors(params)
    if errors:
        module.fail_json(msg="; ".join(errors), errors=errors)
    record_path = os.path.abspath(params["record"])
    try:
        if params["config_dir"] and not _files.check_directory(os.path.abspath(params["config_dir"]), "config_dir"):
            module.fail_json(msg="config_dir %s does not exist; give the kubelet's --config-dir" % params["config_dir"])
        record = _files.read_json_record(record_path, "record").data
        contents, new_record, registered = plan(params, record)
        directory = os.path.dirname(os.path.abspath(params["env_file"]))
        if os.path.abspath(params["env_file"]) in contents and not _files.check_directory(directory, "env_file"):
            module.fail_json(msg="env_file %s: its directory %s does not exist" % (params["env_file"], directory))
    except (_kubelet.KubeletError, _files.FileError) as exc:
        module.fail_json(msg="%s. Nothing was changed." % exc)
    result: dict[str, t.Any] = dict(changed=bool(contents), files=sorted(contents), **registered)
    diffs = []
    try:
        # The record first: it must hold the originals before they are replaced.
        if new_record != record:
            _files.write_json_record(module, record_path, new_record, "record")
        for path, content in contents.items():
            what = "env_file" if path == os.path.abspath(params["env_file"]) else "dropin"
            if content is None:
                before = _files.read_bytes(path, what)
                diffs.append({"before": (before or b"").decode("utf-8", "replace"), "after": "",
                              "before_header": path, "after_header": "%s (absent)" % path})
                if not module.check_mode:
                    _files.remove(path, what)
            else:
                diffs.append(_files.write_file(module, path, content.encode(), what=what, file_args=False).diff)
    except _files.FileError as exc:
        module.fail_json(msg=str(exc), **result)
    if module._diff:  # pylint: disable=protected-access
        result["diff"] = diffs
    module.exit_json(**result)


if __name__ == "__main__":
    main()
