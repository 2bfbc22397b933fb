#!/usr/bin/python
# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: nvidia_container_toolkit_config
short_description: Set keys of the NVIDIA Container Toolkit's own config.toml, keeping the rest of the file
version_added: 0.1.0
description:
  - Sets the keys of C(/etc/nvidia-container-runtime/config.toml) that are asked for, and only those, the way
    M(gpuhost.nvidia.nvidia_container_runtime) merges C(daemon.json). A key already set has its line's value replaced; a
    key the package left commented out (C(#no-cgroups = false)) gets its line right after the comment; a missing table
    is appended. Every other byte of the file is kept. The result is parsed again and must hold the asked values and
    nothing else changed, or the task fails before writing.
  - An option left unset is not managed. Every value is checked before the host is read; an unknown mode or feature flag
    fails, naming it and the choices.
  - O(state=absent) takes back what O(state=present) set. The module records in O(record) the text the file held before
    its first change and the keys it manages; removal puts each key back to its original value (or deletes it), and
    when the result parses to the original, the original's exact bytes are written back (the file is removed when
    the module created it).
  - Key names are the toolkit's (C(api/config/v1) in NVIDIA/nvidia-container-toolkit; docs/sources.md).
author:
  - gpuhost.nvidia developers (@gpuhost)
attributes:
  check_mode:
    support: full
    description: Computes the new content and the diff without writing.
  diff_mode:
    support: full
    description: Shows the file before and after.
  safe_file_operations:
    support: full
    description: Writes through a temporary file and an atomic move, keeping mode and owner.
  platform:
    support: full
    platforms: posix
    description: Linux hosts.
requirements:
  - Python 3.11+ (C(tomllib)) or the C(tomli) library on the managed host, when the file exists.
options:
  path:
    description: The toolkit's configuration file.
    type: path
    default: /etc/nvidia-container-runtime/config.toml
  state:
    description: V(present) sets the keys; V(absent) restores what V(present) changed (see O(record)).
    type: str
    choices: [present, absent]
    default: present
  runtime_mode:
    description:
      - C(nvidia-container-runtime.mode) (not called C(mode), the name of a file's permissions in Ansible).
        V(auto) lets the runtime choose (V(jit-cdi) on NVML platforms from toolkit 1.18); V(legacy) uses the
        C(nvidia-container-runtime-hook); V(cdi) injects devices from CDI specs only;
        V(csv) is for Tegra; V(jit-cdi) (1.18+) generates a CDI spec per container.
    type: str
    choices: [auto, legacy, cdi, csv, jit-cdi]
  accept_envvar_when_unprivileged:
    description:
      - C(accept-nvidia-visible-devices-envvar-when-unprivileged). V(false) stops unprivileged containers from
        selecting GPUs with C(NVIDIA_VISIBLE_DEVICES), as NVIDIA recommends for hardened multi-tenant hosts; devices
        then come from volume mounts or CDI.
    type: bool
  accept_volume_mounts:
    description: C(accept-nvidia-visible-devices-as-volume-mounts), the Kubernetes device plugin's volume-mount strategy.
    type: bool
  no_cgroups:
    description: C(nvidia-container-cli.no-cgroups); V(true) for rootless engines, which cannot write device cgroups.
    type: bool
  features:
    description:
      - Feature flags, each V(true) or V(false), from C(allow-cuda-compat-libs-from-container),
        C(allow-ldconfig-from-container), C(allow-unknown-oci-spec-fields), C(disable-cuda-compat-lib-hook),
        C(disable-imex-channel-creation), C(ignore-imex-channel-requests), C(no-additional-gids-for-device-nodes).
      - C(disable-cuda-compat-lib-hook=true) is NVIDIA's mitigation of CVE-2025-23266 for toolkits 1.17.5 to 1.17.7
        (1.17.8 fixes it); it turns off the CUDA forward-compatibility hook.
    type: dict
  toolkit_version:
    description:
      - The installed toolkit version. A release from 1.17.5 without the fix of CVE-2025-23266 (1.17.8) gets
        C(features.disable-cuda-compat-lib-hook = true), NVIDIA's mitigation, unless O(features) sets that flag itself.
      - Unset, nothing is added.
    type: str
  record:
    description: A JSON file recording the original text and the managed keys, for O(state=absent).
    type: path
    default: /var/lib/gpuhost/nvidia_container_toolkit_config.json
  backup:
    description: Keep a timestamped copy of the file before replacing it.
    type: bool
    default: true
seealso:
  - module: gpuhost.nvidia.nvidia_container_runtime
"""

EXAMPLES = r"""
- name: Harden the toolkit for a shared host
  gpuhost.nvidia.nvidia_container_toolkit_config:
    accept_envvar_when_unprivileged: false
    runtime_mode: cdi

- name: Mitigate CVE-2025-23266 on a toolkit that cannot be upgraded yet
  gpuhost.nvidia.nvidia_container_toolkit_config:
    features:
      disable-cuda-compat-lib-hook: true

- name: Give the file back as it was
  gpuhost.nvidia.nvidia_container_toolkit_config:
    state: absent
"""

RETURN = r"""
path:
  description: The file managed.
  returned: success
  type: str
  sample: /etc/nvidia-container-runtime/config.toml
managed:
  description: The keys this call manages, as C(table.key) (top-level keys without a table).
  returned: success
  type: list
  elements: str
  sample: [nvidia-container-runtime.mode, features.disable-cuda-compat-lib-hook]
backup_file:
  description: The backup copy made, when one was.
  returned: when a backup was made
  type: str
  sample: /etc/nvidia-container-runtime/config.toml.1234.2025-01-01@10:00:00~
"""

import os
import re
import typing as t

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_bytes, to_text

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _files, _runtime, _toolkit_config, _validate

DEFAULT_RECORD = _files.STATE_DIR + "/nvidia_container_toolkit_config.json"
RULES: dict[str, _validate.Rule] = {
    "path": _validate.Path(),
    "record": _validate.Path(),
    "toolkit_version": _validate.Text(pattern=re.compile(r"^[0-9][0-9A-Za-z.+~:-]{0,63}$"), max_length=64,
                                      what="a toolkit version such as 1.17.8"),
}


def read_text(module: AnsibleModule, path: str) -> str | None:
    data = _files.read_bytes(path, "path")
    if data is None:
        return None
    try:
        return to_text(data, errors="strict")
    except UnicodeDecodeError as exc:
        module.fail_json(msg="%s is not UTF-8 text (%s); it was not changed" % (path, exc), path=path)
    return None  # pragma: no cover


def plan(params: dict[str, t.Any], text: str | None, record: dict[str, t.Any]) -> tuple[str | None, dict[str, t.Any]]:
    """The text the file must hold (None: no file) and the record to keep. Raises ToolkitConfigError."""
    path = params["path"]
    entry = record.get(path) if isinstance(record.get(path), dict) else None
    if params["state"] == "absent":
        if entry is None:
            return text, {k: v for k, v in record.items() if k != path}
        new = _toolkit_config.restore(text, entry.get("original"), entry.get("managed") or [], path)
        return new, {k: v for k, v in record.items() if k != path}
    settings = {k: params[k] for k in ("accept_envvar_when_unprivileged", "accept_volume_mounts", "no_cgroups",
                                       "features") if params[k] is not None}
    if params["runtime_mode"] is not None:
        settings["mode"] = params["runtime_mode"]
    mitigation = _toolkit_config.mitigations(params["toolkit_version"])
    if mitigation:
        settings["features"] = {**mitigation, **(settings.get("features") or {})}
    new = _toolkit_config.merge(text, settings, path)
    new_record = dict(record)
    managed = sorted({tuple(m) for m in (entry or {}).get("managed", [])} | {tuple(m) for m in _toolkit_config.owned_keys(settings)})
    if entry is not None:
        new_record[path] = {"original": entry.get("original"), "managed": [list(m) for m in managed]}
    elif new != text:
        new_record[path] = {"original": text, "managed": [list(m) for m in managed]}
    return new, new_record


def main() -> None:
    module = _validate.ansible_module(
        argument_spec=dict(
            path=dict(type="path", default=_toolkit_config.DEFAULT_PATH),
            state=dict(type="str", choices=["present", "absent"], default="present"),
            runtime_mode=dict(type="str", choices=list(_toolkit_config.MODES)),
            accept_envvar_when_unprivileged=dict(type="bool"),
            accept_volume_mounts=dict(type="bool"),
            no_cgroups=dict(type="bool"),
            features=dict(type="dict"),
            record=dict(type="path", default=DEFAULT_RECORD),
            backup=dict(type="bool", default=True),
            toolkit_version=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    params = dict(module.params)
    errors = _validate.check(params, RULES)
    if params["features"] is not None:
        errors += _toolkit_config.request_errors({"features": params["features"]})
    if errors:
        module.fail_json(msg="; ".join(errors), errors=errors)
    params["path"] = os.path.abspath(params["path"])
    record_path = os.path.abspath(params["record"])
    try:
        record = _files.read_json_record(record_path).data
        text = read_text(module, params["path"])
        new, new_record = plan(params, text, record)
    except _files.FileError as exc:
        module.fail_json(msg=str(exc), path=exc.path)
    except (_toolkit_config.ToolkitConfigError, _runtime.RuntimeConfigError) as exc:
        module.fail_json(msg=str(exc), path=params["path"])

    result: dict[str, t.Any] = {"path": params["path"], "changed": False, "diff": {}}
    entry = new_record.get(params["path"]) or record.get(params["path"]) or {}
    result["managed"] = [".".join(p for p in m if p) for m in entry.get("managed", [])] if params["state"] == "present" else []
    try:
        if params["state"] == "present" and new_record != record and not module.check_mode:
            _files.write_json_record(module, record_path, new_record)  # the original is known before it is replaced
        if new is None and text is not None:
            result["changed"] = True
            result["diff"] = {"before": text, "after": "", "before_header": params["path"], "after_header": "%s (absent)" % params["path"]}
            if not module.check_mode:
                if params["backup"]:
                    result["backup_file"] = module.backup_local(params["path"])
                _files.remove(params["path"], "path")
        elif new is not None and new != text:
            directory = os.path.dirname(params["path"])
            if not _files.check_directory(directory, "path"):
                result["changed"] = True
                result["diff"] = _files.make_diff(params["path"], None, to_bytes(new))
                if not module.check_mode:
                    _files.make_dirs(directory, "path")
            if not module.check_mode or result["changed"] is False:
                outcome = _files.write_file(module, params["path"], to_bytes(new), backup=params["backup"], what="path")
                result["changed"] = result["changed"] or outcome.changed
                result["diff"] = result["diff"] or outcome.diff
                if outcome.backup_file:
                    result["backup_file"] = outcome.backup_file
        if params["state"] == "absent" and new_record != record and not module.check_mode:
            _files.write_json_record(module, record_path, new_record)
    except _files.FileError as exc:
        module.fail_json(msg=str(exc), path=exc.path)
    result["changed"] = result["changed"] or new_record != record
    module.exit_json(**result)


if __name__ == "__main__":
    main()
