#!/usr/bin/python
# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: nvidia_container_runtime
short_description: Merge the NVIDIA container runtime into Docker, containerd or CRI-O configuration
version_added: 0.1.0
description:
  - Adds the NVIDIA runtime to one container engine's configuration without taking over the file, the way
    C(nvidia-ctk runtime configure) does, but with check mode, diff and backups.
  - V(docker) merges C(runtimes.<name>) (and optionally C(default-runtime) and C(features.cdi)) into C(daemon.json);
    every other key is kept, and a file that already holds them is not rewritten.
  - V(containerd) follows the main config's C(version). A config with content but no C(version) line is version 1,
    to containerd and to C(nvidia-ctk) (containerd.io's default config is one). Version 1 has no drop-ins, so the
    runtime is added to the main config in place, under C(plugins.cri), as C(nvidia-ctk) does; the file is rewritten
    (its comments are lost) and gets C(version = 1).
  - For versions 2, 3 and 4, V(containerd) writes a drop-in file and adds the drop-in directory's glob to the top-level
    C(imports) of the main config; no other line of the main config changes. containerd 1.x replaces a plugin's whole
    table with the one an imported file has, so the drop-in carries a copy of the main config's CRI plugin table with
    the runtime added. Version 3 and later use the C(io.containerd.cri.v1.runtime) plugin (containerd 2.x).
  - The new runtime inherits every setting (C(runtime_type), C(options) such as C(SystemdCgroup),
    C(privileged_without_host_devices), C(runtime_engine), C(runtime_root)) of the first runtime of these that the config
    has, in C(nvidia-ctk)'s order, the engine's default runtime (C(default_runtime_name)) unless it is an C(nvidia*)
    runtime, C(runc), then C(crun). An empty C(runtime_type) becomes C(io.containerd.runc.v2).
  - With no runtime to inherit from, the runtime gets C(runtime_type = "io.containerd.runc.v2") and
    C(privileged_without_host_devices = false). C(nvidia-ctk) also writes empty C(runtime_engine) and C(runtime_root);
    this module does not, because containerd 2.x removed them and an empty value means the same as none.
  - O(cdi) sets C(enable_cdi) in the CRI plugin table for V(containerd), as C(nvidia-ctk --cdi.enabled) does.
  - V(crio) writes a drop-in file with C([crio.runtime.runtimes.<name>]). The runtime inherits every setting of the
    first of C(crio.conf)'s default runtime, C(runc) and C(crun) (O(crio_config)), with C(runtime_type = "oci").
  - V(docker) differs from C(nvidia-ctk) on purpose in one place. C(nvidia-ctk) replaces C(runtimes.<name>) with
    a C(path) and an empty C(args) list; this module sets only C(path) and keeps the entry's other keys, such as
    C(runtimeArgs) (the key dockerd reads; dockerd has no C(args) key, so writing one adds nothing).
  - A file that cannot be parsed (invalid JSON or TOML), or whose tables the merge needs hold something else (a CRI
    plugin table that is a string), fails the task before anything is written, naming the file, the key and the
    problem. So does a path that is a directory, a special file, a symbolic link to nothing or sits under a file.
  - O(state=absent) takes out what O(state=present) added. The module records in O(record), per file, the text the
    file held before its first change. Removal then takes out the runtime, puts back the C(default-runtime) /
    C(default_runtime_name), C(features.cdi) or C(enable_cdi) values the file had (or removes them when it had none),
    removes the drop-in file and the glob it added to containerd's C(imports), and removes the tables it created and
    left empty. When the result parses to the recorded original, the original's exact bytes are written back (or the
    file is removed when it did not exist before); keys changed by hand since then are kept, and the file is then
    rewritten from the parsed content.
  - Without a record (a file changed by hand or by C(nvidia-ctk)), O(state=absent) removes the runtime, a default that
    names it, the drop-in and the imports glob, and leaves C(features.cdi) / C(enable_cdi) alone. The glob stays when
    it is containerd's own C(/etc/containerd/conf.d/*.toml) (containerd 2.2 and later write it into their default
    config; other drop-ins may live there) or when the main config was never changed by the module.
  - A containerd main config without a C(version) line that already has C(imports), and no C(plugins) table or short
    plugin names (which only version 1 understands), gets the drop-in and the import, as C(nvidia-ctk)'s
    C(EnsureImports) does; its drop-in has version 2 unless O(config_version) says otherwise.
  - An import that already names the drop-in directory, however it is spelt (C(conf.d/*.toml) relative to the main
    config, C(/etc/containerd//conf.d/*.toml)), counts as present, because containerd resolves both to the same glob;
    no second import is added.
  - For V(crio), the drop-in directory is the one the installed CRI-O reads. It is the default of the C(--config-dir)
    flag that C(crio --help) prints; without a C(crio) binary it is CRI-O's built-in default C(/etc/crio/crio.conf.d).
    C(nvidia-ctk) writes C(/etc/crio/conf.d/99-nvidia.toml), a directory CRI-O reads only when it is started with
    C(--config-dir /etc/crio/conf.d). O(crio_config_dir) or O(path) override the detection.
  - Paths are absolute, printable ASCII, without C(.) or C(..) components.
author:
  - gpuhost.nvidia developers (@gpuhost)
requirements:
  - For V(containerd), Python 3.11+ (C(tomllib)) or the C(tomli) library on the managed host, when the main config exists.
attributes:
  check_mode:
    support: full
    description: Computes and validates the new content and the diff without writing.
  diff_mode:
    support: full
    description: Shows each file before and after.
  safe_file_operations:
    support: full
    description: Writes through a temporary file and an atomic move, keeping mode and owner.
  platform:
    support: full
    platforms: posix
    description: Linux hosts.
options:
  runtime:
    description: The container engine to configure.
    type: str
    required: true
    choices: [docker, containerd, crio]
  path:
    description:
      - The file to merge into. For V(docker) C(daemon.json), for V(containerd) the main config, for V(crio) the
        drop-in file.
      - Defaults to C(/etc/docker/daemon.json), C(/etc/containerd/config.toml) and, for V(crio), C(99-nvidia.conf) in
        the drop-in directory CRI-O reads (see O(crio_config_dir)).
    type: path
  state:
    description:
      - V(present) adds the runtime; V(absent) removes what V(present) added, as O(record) says (see the description).
    type: str
    choices: [present, absent]
    default: present
  record:
    description:
      - A JSON file recording, per configuration file, the text it held before this module first changed it. Written
        with the first change of a file and read by O(state=absent), which drops the file's entry; removed when empty.
    type: path
    default: /var/lib/gpuhost/nvidia_container_runtime.json
  crio_config_dir:
    description:
      - For V(crio) without O(path), the drop-in directory to write C(99-nvidia.conf) into.
      - By default the one the installed CRI-O reads, the C(--config-dir) default that C(crio --help) prints, else
        C(/etc/crio/crio.conf.d). Set it when CRI-O runs with another C(--config-dir) (or C(CONTAINER_CONFIG_DIR)).
    type: path
  dropin:
    description:
      - For V(containerd), the drop-in file. Its directory's C(*.toml) glob is added to the main config's imports,
        so its name must end with C(.toml) and its directory may not hold glob characters.
    type: path
    default: /etc/containerd/conf.d/99-nvidia.toml
  config_version:
    description:
      - For V(containerd), the config version to write when the main config is missing or empty, V(2) (containerd
        1.x), V(3) or V(4) (containerd 2.x). By default V(2).
      - An existing main config's version always wins (containerd refuses a drop-in whose version differs from its
        root config's). A value that contradicts it fails the task, naming both; no file is changed.
    type: int
  name:
    description:
      - The runtime name, also the handler name of a Kubernetes RuntimeClass.
      - A DNS label that every engine accepts, lower-case letters, digits and C(-), at most 63 characters. Docker's
        reserved V(runc) is refused.
    type: str
    default: nvidia
  runtime_path:
    description: The runtime binary.
    type: path
    default: /usr/bin/nvidia-container-runtime
  default_runtime:
    description:
      - Make the runtime the engine's default. V(false) removes a default that names this runtime and leaves any other
        default alone.
    type: bool
    default: false
  cdi:
    description:
      - For V(docker), set C(features.cdi); for V(containerd), set C(enable_cdi) in the CRI plugin. Left as it is when
        not given.
      - For V(crio) there is nothing to set (CRI-O reads CDI specs by default), so the module warns and changes nothing.
    type: bool
  crio_config:
    description:
      - For V(crio), CRI-O's main config, read (never written) for the runtime to inherit settings from. A missing file
        means no settings to inherit.
    type: path
    default: /etc/crio/crio.conf
  backup:
    description: Keep a timestamped copy of each file before replacing it.
    type: bool
    default: true
seealso:
  - name: NVIDIA Container Toolkit, configuring runtimes
    description: What C(nvidia-ctk runtime configure) writes for each engine.
    link: https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/install-guide.html
"""

EXAMPLES = r"""
- name: Add the nvidia runtime to Docker and enable CDI
  gpuhost.nvidia.nvidia_container_runtime:
    runtime: docker
    cdi: true

- name: Add the nvidia runtime to containerd as the default runtime
  gpuhost.nvidia.nvidia_container_runtime:
    runtime: containerd
    default_runtime: true

- name: Take the nvidia runtime out of Docker again; the user's keys stay as they were
  gpuhost.nvidia.nvidia_container_runtime:
    runtime: docker
    state: absent
"""

RETURN = r"""
files:
  description: The files the runtime configuration lives in (each written only when its content changed).
  returned: success
  type: list
  elements: str
  sample: [/etc/containerd/config.toml, /etc/containerd/conf.d/99-nvidia.toml]
changed_files:
  description: The files that were (or in check mode would be) written.
  returned: success
  type: list
  elements: str
  sample: [/etc/containerd/conf.d/99-nvidia.toml]
backup_files:
  description: The backup copies made.
  returned: success
  type: list
  elements: str
  sample: [/etc/docker/daemon.json.1234.2025-01-01@10:00:00~]
removed_files:
  description: The files that were (or in check mode would be) removed by O(state=absent).
  returned: success
  type: list
  elements: str
  sample: [/etc/containerd/conf.d/99-nvidia.toml]
crio_config_dir:
  description: For V(crio), the drop-in directory used, and where it came from.
  returned: when O(runtime=crio)
  type: dict
  sample: {path: /etc/crio/crio.conf.d, source: crio --help}
runtime_name:
  description: The runtime name as configured.
  returned: success
  type: str
  sample: nvidia
engine:
  description:
    - The engine's state after the merge, for the restart decision without a call of its own (the
      C(gpuhost.nvidia.nvidia_container_restart_plan) filter) - its unit, whether the unit is active and when its main
      process started (one C(systemctl show)), whether this call changed its configuration, and the newest
      modification time of RV(files).
    - With V(docker), whether C(live-restore) is on in C(daemon.json) as this call leaves it (in check mode, would leave it).
  returned: success
  type: dict
  contains:
    name:
      description: The engine, O(runtime).
      type: str
      sample: docker
    unit:
      description: Its systemd unit.
      type: str
      sample: docker.service
    active:
      description: Whether the unit is active (false when systemd cannot be asked, see RV(engine.problem)).
      type: bool
      sample: true
    changed:
      description: Whether this call changed (or in check mode would change) the configuration.
      type: bool
      sample: true
    newest:
      description: The newest modification time of RV(files) (seconds since the epoch), or null when none exists.
      type: float
      sample: 1764000000.5
    started:
      description: When the unit's main process started (seconds since the epoch), or null when it does not run.
      type: float
      sample: 1763990000.0
    live_restore:
      description: For V(docker), whether C(live-restore) is V(true) in the merged file; null for the other engines.
      type: bool
      sample: false
    problem:
      description: Why systemd could not be asked about the unit, or null.
      type: str
      sample: null
  sample: {name: docker, unit: docker.service, active: true, changed: true, newest: 1764000000.5, started: 1763990000.0,
           live_restore: false, problem: null}
"""

import os
import typing as t

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_bytes

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _engine_restart, _files, _runtime, _validate

DEFAULT_RECORD = _files.STATE_DIR + "/nvidia_container_runtime.json"
# Checked before the host is read. The name becomes a key in every engine's configuration and a Kubernetes
# RuntimeClass handler; runc is Docker's reserved name for its own runtime.
RULES: dict[str, _validate.Rule] = {
    "path": _validate.Path(),
    "dropin": _validate.Path(),
    "config_version": _validate.Integer(2, 4, "containerd config versions 2 (containerd 1.x), 3 and 4 (containerd 2.x)"),
    "name": _validate.Identifier(_validate.RUNTIME_NAME_RE, "a runtime name that every engine accepts: a DNS label of "
                                 "lower-case letters, digits and '-', at most 63 characters, such as nvidia",
                                 max_length=63, reserved=("runc",)),
    "runtime_path": _validate.Path(space=False),
    "crio_config": _validate.Path(),
    "crio_config_dir": _validate.Path(),
    "record": _validate.Path(),
}


def crio_config_dir(module: AnsibleModule) -> dict[str, str]:
    """The CRI-O drop-in directory: the option, else the --config-dir default the installed crio prints, else
    CRI-O's built-in default."""
    if module.params["crio_config_dir"]:
        return {"path": os.path.abspath(module.params["crio_config_dir"]), "source": "crio_config_dir"}
    crio = module.get_bin_path("crio")
    if crio:
        rc, out, err = module.run_command([crio, "--help"], environ_update={"LC_ALL": "C", "LANGUAGE": "C"})
        found = _runtime.crio_config_dir_from_help(out) if rc == 0 else None
        if found:
            return {"path": found, "source": "crio --help"}
        module.warn("%s --help (rc %s) names no --config-dir default; using CRI-O's built-in %s. Set crio_config_dir "
                    "if CRI-O reads another directory. %s" % (crio, rc, _runtime.CRIO_CONFIG_DIR, (err or "").strip()[:200]))
    return {"path": _runtime.CRIO_CONFIG_DIR, "source": "CRI-O's built-in default"}


def write_planned(module: AnsibleModule, files: list[_runtime.Planned], result: dict[str, list[t.Any]]) -> None:
    """Write or remove each planned file in plan order, adding to the result's lists; nothing in check mode."""
    for file, what, before, content in files:
        if content is None:
            if before is None:
                continue
            result["removed_files"].append(file)
            result["diff"].append({"before": before, "after": "", "before_header": file, "after_header": "%s (absent)" % file})
            if not module.check_mode:
                if module.params["backup"]:
                    result["backup_files"].append(module.backup_local(file))
                _files.remove(file, what)
            continue
        data = to_bytes(content)
        directory = os.path.dirname(file)
        if not _files.check_directory(directory, what):
            result["changed_files"].append(file)
            result["diff"].append(_files.make_diff(file, None, data))
            if module.check_mode:
                continue
            _files.make_dirs(directory, what)
        outcome = _files.write_file(module, file, data, backup=module.params["backup"], what=what)
        if outcome.changed and file not in result["changed_files"]:
            result["changed_files"].append(file)
            result["diff"].append(outcome.diff)
        if outcome.backup_file:
            result["backup_files"].append(outcome.backup_file)


def main() -> None:
    module = _validate.ansible_module(
        argument_spec=dict(
            runtime=dict(type="str", required=True, choices=list(_runtime.RUNTIMES)),
            path=dict(type="path"),
            state=dict(type="str", choices=["present", "absent"], default="present"),
            record=dict(type="path", default=DEFAULT_RECORD),
            dropin=dict(type="path", default=_runtime.DEFAULT_CONTAINERD_DROPIN),
            config_version=dict(type="int"),
            name=dict(type="str", default="nvidia"),
            runtime_path=dict(type="path", default="/usr/bin/nvidia-container-runtime"),
            default_runtime=dict(type="bool", default=False),
            cdi=dict(type="bool"),
            crio_config=dict(type="path", default=_runtime.DEFAULT_CRIO_CONFIG),
            crio_config_dir=dict(type="path"),
            backup=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    params = module.params
    errors = _validate.check(params, RULES) or _runtime.option_errors(params)
    if errors:
        module.fail_json(msg="; ".join(errors), errors=errors)
    runtime = params["runtime"]
    result: dict[str, t.Any] = {}
    if params["path"]:
        path = os.path.abspath(params["path"])
        if runtime == "crio":
            result["crio_config_dir"] = {"path": os.path.dirname(path), "source": "path"}
    elif runtime == "crio":
        result["crio_config_dir"] = crio_config_dir(module)
        path = os.path.join(result["crio_config_dir"]["path"], _runtime.CRIO_DROPIN_NAME)
    else:
        path = _runtime.DEFAULT_PATHS[runtime]
    record_path = os.path.abspath(params["record"])

    # Plan: every file read and parsed, every error raised, before anything is written.
    warnings: list[str] = []
    try:
        record = _files.read_originals(record_path)
        files = _runtime.plan(params, path, record, _files.read_text, _files.check_file, warnings)
    except _files.FileError as exc:
        module.fail_json(msg=str(exc), path=exc.path)
    except _runtime.RuntimeConfigError as exc:
        msg = str(exc) if path in str(exc) else "%s: %s; it was not changed" % (path, exc)
        module.fail_json(msg=msg, path=path)
    for warning in warnings:
        module.warn(warning)
    new_record = _files.note_originals(record, [(file, before, content) for file, _what, before, content in files], params["state"])

    # Act: the record first (it must know the originals before they are replaced), then the files in plan order.
    done: dict[str, list[t.Any]] = {"changed_files": [], "removed_files": [], "backup_files": [], "diff": []}
    try:
        if params["state"] == "present":
            _files.write_originals(module, record_path, record, new_record)
        write_planned(module, files, done)
        if params["state"] == "absent":
            _files.write_originals(module, record_path, record, new_record)
    except _files.FileError as exc:
        module.fail_json(msg=str(exc), path=exc.path)

    changed = bool(done["changed_files"] or done["removed_files"] or new_record != record)
    module.exit_json(
        changed=changed,
        files=[file for file, _what, _before, _content in files],
        engine=engine_state(module, runtime, changed, files),
        runtime_name=params["name"],
        **done,
        **result,
    )


def engine_state(module: AnsibleModule, runtime: str, changed: bool, files: list[_runtime.Planned]) -> dict[str, t.Any]:
    """The engine's state after the merge (RV(engine)): what the restart decision reads, without a call of its own.
    Docker's live-restore comes from daemon.json as this call leaves it (or, in check mode, would leave it)."""
    states, problem = _engine_restart.engine_states(module, [{"name": runtime, "changed": changed, "files": [f[0] for f in files]}])
    live_restore = _engine_restart.live_restore(files[0][3] if files else None) if runtime == "docker" else None
    return dict(states[0], live_restore=live_restore, problem=problem)


if __name__ == "__main__":
    main()
