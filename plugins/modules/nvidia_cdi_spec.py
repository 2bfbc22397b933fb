#!/usr/bin/python
# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: nvidia_cdi_spec
short_description: Generate the NVIDIA CDI spec with nvidia-ctk when the GPUs or the driver change
version_added: 0.1.0
description:
  - Generates the Container Device Interface (CDI) spec for the host's NVIDIA GPUs with C(nvidia-ctk cdi generate)
    into one directory, and returns the device names it holds (V(nvidia.com/gpu=0), ..., V(nvidia.com/gpu=all)).
  - Keeps a record (O(record)) of what the spec was generated for, taken from the GPU facts (driver version and
    state, GPU UUIDs, MIG mode and MIG devices), the device-name strategy and the toolkit version. The spec is
    generated again only when one of them changed, when it is missing, or when it moved; otherwise nothing runs.
  - Specs named C(nvidia.yaml) or C(nvidia.json) in O(other_dirs) would define the same devices twice; they are
    removed or reported, as O(duplicates) says.
  - When C(nvidia-ctk) fails and the facts say the driver is not running, the failure is recorded and returned as
    RV(error) instead of failing the task (O(allow_missing_driver)); generation is tried again once the facts change.
author:
  - gpuhost.nvidia developers (@gpuhost)
requirements:
  - C(nvidia-ctk) from C(nvidia-container-toolkit-base).
  - PyYAML on the managed host to read a YAML spec (a C(.json) O(filename) needs nothing).
extends_documentation_fragment:
  - gpuhost.nvidia.facts
attributes:
  check_mode:
    support: full
    description: Decides whether the spec would be generated and which duplicates would go, without running nvidia-ctk.
  diff_mode:
    support: full
    description: Shows the spec and the record before and after.
  safe_file_operations:
    support: full
    description: Generates into a temporary directory and moves the spec into place atomically.
  platform:
    support: full
    platforms: posix
    description: Linux hosts.
options:
  dir:
    description:
      - The directory of the spec, V(/etc/cdi) or V(/var/run/cdi). It is created when missing.
      - V(auto) picks V(/var/run/cdi) when one of O(refresh_unit_paths) exists (the toolkit's C(nvidia-cdi-refresh)
        units, 1.18 and later, keep the spec there), else V(/etc/cdi); RV(dir) says which.
      - Every path option is absolute, printable ASCII, without C(.) or C(..) components. A path that is a file
        where a directory belongs (or the other way round), a special file, a symbolic link to nothing or a path
        under a file is refused, naming it, before anything is written.
    type: path
    required: true
  filename:
    description:
      - The spec's file name; its extension (C(.yaml) or C(.json)) selects the format.
      - A plain file name of letters, digits, C(_), C(.) and C(-) that ends with C(.yaml) or C(.json); a name with a
        directory part (V(../evil.yaml)) is refused, so the spec never leaves O(dir).
    type: str
    default: nvidia.yaml
  refresh_unit_paths:
    description:
      - Unit files of the toolkit's C(nvidia-cdi-refresh) units (for example
        V(/usr/lib/systemd/system/nvidia-cdi-refresh.path)); whether one exists is returned as
        RV(refresh_units_installed) and decides O(dir=auto). Looked up in the same call, so that a role needs no
        C(stat) per unit directory.
    type: list
    elements: path
    default: []
  other_dirs:
    description: CDI directories where an NVIDIA spec would be a duplicate (the spec's own directory among them is skipped).
    type: list
    elements: path
    default: []
  duplicates:
    description: What to do with duplicates in O(other_dirs).
    type: str
    choices: [remove, warn]
    default: remove
  device_name_strategy:
    description: How devices are named, by V(index) (V(nvidia.com/gpu=0)) or by V(uuid) (V(nvidia.com/gpu=GPU-...)).
    type: str
    choices: [index, uuid]
    default: index
  facts:
    default: {}
  toolkit_version:
    description: The installed toolkit version (V(1.18.0), V(1.18.0-1)), recorded so that an upgrade regenerates the spec.
    type: str
    default: ""
  record:
    description:
      - The file that records what the spec was generated for (JSON). A record that is not a JSON object fails the
        task, naming the file (fix or remove it).
      - With the default, a record that an earlier release of this collection kept in
        C(/var/lib/gpuhost-nvidia/cdi-nvidia.json) is moved here (written here, the old file removed; a change).
    type: path
    default: /var/lib/gpuhost/nvidia_cdi_spec.json
  nvidia_ctk:
    description:
      - The C(nvidia-ctk) binary. Looked up in C(PATH) when not given.
      - When it is missing (or not an executable file) and the spec must be generated, the task fails, saying so
        and how to install it.
    type: path
  allow_missing_driver:
    description:
      - When C(nvidia-ctk) fails and O(facts) do not say C(state=ok), record and return the error instead of failing.
    type: bool
    default: true
  force:
    description: Generate the spec even when the record says it is current.
    type: bool
    default: false
  engines:
    description:
      - The container engines that will load the spec, a mapping of engine name (V(docker), V(containerd) or
        V(podman)) to its installed version. Unset, the installed ones are read from dpkg's status file or pacman's local database.
      - A generated spec whose C(cdiVersion) one of them cannot load (its vendored CDI library is older; Podman 4.9
        loads 0.6.0 at most) is not written; the task fails naming the engine and the release that loads it. Check mode
        does not generate, so it cannot predict this.
      - V({}) checks nothing.
    type: dict
seealso:
  - module: gpuhost.nvidia.nvidia_gpu_facts
  - name: Support for Container Device Interface
    description: NVIDIA's guide to nvidia-ctk cdi generate.
    link: https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/cdi-support.html
notes:
  - C(nvidia-ctk) runs as an argument list with C(LC_ALL=C).
  - From O(facts) the module reads the driver version and state, the GPU UUIDs, MIG modes and MIG devices.
"""

EXAMPLES = r"""
- name: Generate the CDI spec in /etc/cdi and drop a stale one in /var/run/cdi
  gpuhost.nvidia.nvidia_cdi_spec:
    dir: /etc/cdi
    other_dirs: [/var/run/cdi]
    device_name_strategy: uuid
    facts: "{{ ansible_facts.nvidia_gpu }}"
  register: cdi

- name: Generate it where the toolkit's nvidia-cdi-refresh units keep it, when they are installed
  gpuhost.nvidia.nvidia_cdi_spec:
    dir: auto
    other_dirs: [/etc/cdi, /var/run/cdi]
    refresh_unit_paths: [/usr/lib/systemd/system/nvidia-cdi-refresh.path, /etc/systemd/system/nvidia-cdi-refresh.path]
    facts: "{{ ansible_facts.nvidia_gpu }}"
  register: cdi

- name: Show the device names
  ansible.builtin.debug:
    var: cdi.devices
"""

RETURN = r"""
spec:
  description: The spec file.
  returned: always
  type: str
  sample: /etc/cdi/nvidia.yaml
dir:
  description: The spec's directory (the one O(dir=auto) picked).
  returned: always
  type: str
  sample: /var/run/cdi
refresh_units_installed:
  description: Whether one of O(refresh_unit_paths) exists.
  returned: always
  type: bool
  sample: true
refresh_units:
  description: Whether the refresh units keep the spec (installed, and the spec in V(/var/run/cdi)).
  returned: always
  type: bool
  sample: true
devices:
  description: The fully qualified device names in the spec; empty when there is no spec.
  returned: success
  type: list
  elements: str
  sample: [nvidia.com/gpu=0, nvidia.com/gpu=all]
generated:
  description: Whether nvidia-ctk ran (in check mode, would run).
  returned: success
  type: bool
  sample: true
reason:
  description: Why the spec was (or would be) generated; null when it was current.
  returned: success
  type: str
  sample: "changed since it was generated: the driver version"
generated_for:
  description: What the spec is generated for, as recorded in O(record).
  returned: success
  type: dict
  sample: {driver_version: "580.65.06", state: ok, gpus: [], device_name_strategy: index, toolkit_version: "1.18.0"}
duplicates:
  description: NVIDIA specs found in O(other_dirs) (removed with O(duplicates=remove)).
  returned: success
  type: list
  elements: str
  sample: [/var/run/cdi/nvidia.yaml]
error:
  description: The nvidia-ctk failure recorded with O(allow_missing_driver); null otherwise.
  returned: success
  type: str
  sample: "nvidia-ctk exited 1: failed to initialize NVML: ERROR_LIBRARY_NOT_FOUND"
command:
  description: The nvidia-ctk command that ran, or null.
  returned: success
  type: list
  elements: str
  sample: [/usr/bin/nvidia-ctk, cdi, generate, --output=/tmp/x/nvidia.yaml, --device-name-strategy=index]
"""

import os
import typing as t

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_text

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _cdi_compat, _doctor, _files, _gpu_schema, _toolkit, _validate

ENV_C = {"LC_ALL": "C", "LANGUAGE": "C"}
INSTALL_HINT = (
    "install nvidia-container-toolkit-base from NVIDIA's container toolkit repository (the "
    "gpuhost.nvidia.nvidia_container_toolkit role does), or set nvidia_ctk to the binary's path"
)
# Checked before the host is read. The file name is joined to dir, so it may not name another directory.
RULES: dict[str, _validate.Rule] = {
    "dir": _validate.Path(directory=True),
    "filename": _validate.FileName((".yaml", ".json")),
    "other_dirs": _validate.ListOf(_validate.Path(directory=True), max_items=16),
    "refresh_unit_paths": _validate.ListOf(_validate.Path(), max_items=16),
    "toolkit_version": _validate.Text(empty=True, max_length=64, pattern=_validate.PACKAGE_VERSION_RE,
                                      what="a version such as 1.18.0"),
    "record": _validate.Path(),
    "nvidia_ctk": _validate.Path(),
}
DEFAULT_RECORD = _files.STATE_DIR + "/nvidia_cdi_spec.json"
AUTO = "auto"
# Where the toolkit's nvidia-cdi-refresh units keep the spec.
REFRESH_DIR = "/var/run/cdi"
# Where earlier development builds kept the default record; moved to DEFAULT_RECORD when found.
OLD_RECORDS = ("/var/lib/gpuhost-nvidia/cdi-nvidia.json",)


def devices_of(module: AnsibleModule, path: str, data: bytes | None) -> list[str]:
    if data is None:
        return []
    try:
        return _toolkit.device_names(_toolkit.parse_spec(to_text(data), path))
    except ValueError as exc:
        module.fail_json(msg=str(exc), spec=path)
    return []  # pragma: no cover


def write(module: AnsibleModule, path: str, data: bytes, what: str) -> _files.WriteResult:
    directory = os.path.dirname(path)
    try:
        if not _files.check_directory(directory, what):
            if module.check_mode:
                return _files.WriteResult(changed=True, content_changed=True, existed=False, diff=_files.make_diff(path, None, data))
            _files.make_dirs(directory, what)
    except _files.FileError as exc:
        module.fail_json(msg=str(exc), path=exc.path)
    return _files.write_file(module, path, data, what=what)


def write_record(module: AnsibleModule, path: str, entry: dict[str, t.Any], stale: list[str]) -> _files.WriteResult:
    try:
        return _files.write_json_record(module, path, entry, stale=stale)
    except _files.FileError as exc:
        module.fail_json(msg=str(exc), path=exc.path)
    raise AssertionError("fail_json returned")  # pragma: no cover


def find_ctk(module: AnsibleModule, spec: str) -> str:
    """The nvidia-ctk binary: the given path when it is an executable file, else the one in PATH. Fails saying how to
    install it."""
    given = module.params["nvidia_ctk"]
    if given:
        try:
            exists = _files.check_file(given, "nvidia_ctk")
        except _files.FileError as exc:
            module.fail_json(msg="%s; %s" % (exc, INSTALL_HINT), path=given)
        if not exists:
            module.fail_json(msg="nvidia_ctk %r does not exist, so %s cannot be generated: %s" % (given, spec, INSTALL_HINT))
        if not os.access(given, os.X_OK):
            module.fail_json(msg="nvidia_ctk %r is not executable, so %s cannot be generated: %s" % (given, spec, INSTALL_HINT))
        return given
    found = module.get_bin_path("nvidia-ctk")
    if not found:
        module.fail_json(msg="nvidia-ctk is missing: it is not in PATH, so %s cannot be generated. To install it, %s" % (spec, INSTALL_HINT))
    return t.cast(str, found)


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            dir=dict(type="path", required=True),
            filename=dict(type="str", default="nvidia.yaml"),
            other_dirs=dict(type="list", elements="path", default=[]),
            refresh_unit_paths=dict(type="list", elements="path", default=[]),
            duplicates=dict(type="str", choices=["remove", "warn"], default="remove"),
            device_name_strategy=dict(type="str", choices=list(_toolkit.STRATEGIES), default="index"),
            facts=dict(type="dict", default={}),
            toolkit_version=dict(type="str", default=""),
            record=dict(type="path", default=DEFAULT_RECORD),
            nvidia_ctk=dict(type="path"),
            allow_missing_driver=dict(type="bool", default=True),
            force=dict(type="bool", default=False),
            engines=dict(type="dict"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    errors = _validate.check(p, RULES if p["dir"] != AUTO else {k: v for k, v in RULES.items() if k != "dir"})
    facts_error = _gpu_schema.facts_error(p["facts"]) if p["facts"] is not None else None
    if facts_error:
        errors.append(facts_error)
    if errors:
        module.fail_json(msg="; ".join(errors), errors=errors)
    # Where the spec goes: dir=auto asks whether the toolkit's refresh units are installed (a masked unit, a link to
    # /dev/null, counts: it is there, as stat says).
    units_installed = any(os.path.lexists(path) for path in p["refresh_unit_paths"])
    if p["dir"] == AUTO:
        p["dir"] = _toolkit.cdi_location(AUTO, units_installed)["dir"]
    refresh_units = units_installed and os.path.abspath(p["dir"]) == REFRESH_DIR
    spec = os.path.join(os.path.abspath(p["dir"]), p["filename"])
    record_path = os.path.abspath(p["record"])
    if record_path == spec:
        module.fail_json(msg="record: %r is the spec itself; choose another file" % p["record"])
    facts = p["facts"] or {}
    wanted = _toolkit.generated_for(facts, p["device_name_strategy"], p["toolkit_version"])
    wanted["state"] = facts.get("state")

    # Plan: what the record says, what is on disk, and what must happen. Every path is checked before it is used.
    duplicates = []
    try:
        _files.check_directory(os.path.abspath(p["dir"]), "dir")
        stored = _files.read_json_record(record_path, "record", OLD_RECORDS if record_path == DEFAULT_RECORD else ())
        record = stored.data or None
        spec_bytes = _files.read_bytes(spec, "dir/filename")
        for directory in p["other_dirs"]:
            if os.path.abspath(directory) == os.path.dirname(spec) or not _files.check_directory(directory, "other_dirs"):
                continue
            for name in ("nvidia.yaml", "nvidia.json"):
                candidate = os.path.join(directory, name)
                if os.path.abspath(candidate) != spec and (os.path.lexists(candidate) and _files.check_file(candidate, "other_dirs")):
                    duplicates.append(candidate)
    except _files.FileError as exc:
        module.fail_json(msg=str(exc), path=exc.path)
    previous_error = None
    if record is not None and record.get("spec") != spec:
        reason: str | None = "the spec moved to %s" % spec
    elif record is not None and record.get("generated") is False and record.get("generated_for") == wanted:
        reason, previous_error = None, record.get("error")
    else:
        reason = _toolkit.needs_generate(spec_bytes is not None, (record or {}).get("generated_for"), wanted)
    if p["force"] and reason is None:
        reason = "forced"

    ctk = find_ctk(module, spec) if reason is not None else None

    changed = False
    diffs: list[dict[str, t.Any]] = []
    for duplicate in duplicates:
        if p["duplicates"] == "warn":
            module.warn("%s duplicates the NVIDIA CDI spec %s: remove one, or CDI clients see each device twice" % (duplicate, spec))
            continue
        changed = True
        try:
            before = _files.read_bytes(duplicate, "other_dirs") or b""
            if not module.check_mode:
                _files.remove(duplicate, "other_dirs")
        except _files.FileError as exc:
            module.fail_json(msg=str(exc), path=exc.path)
        diffs.append({"before_header": duplicate, "after_header": "%s (absent)" % duplicate, "before": to_text(before), "after": ""})

    result: dict[str, t.Any] = dict(spec=spec, dir=os.path.dirname(spec), refresh_units_installed=units_installed,
                                    refresh_units=refresh_units,
                                    generated=reason is not None, reason=reason, generated_for=wanted,
                                    duplicates=duplicates, error=previous_error, command=None)
    if reason is None:
        result["devices"] = devices_of(module, spec, spec_bytes)
        if stored.stale:  # a record at an earlier release's path moves to record_path
            outcome = write_record(module, record_path, stored.data, stored.stale)
            changed = True
            diffs.append(outcome.diff)
        module.exit_json(changed=changed, diff=diffs, **result)
    if module.check_mode:
        result["devices"] = devices_of(module, spec, spec_bytes)
        diffs.append(_files.make_diff(spec, spec_bytes, b"(generated by nvidia-ctk cdi generate)\n"))
        module.exit_json(changed=True, diff=diffs, **result)

    # Act: generate into a scratch directory, check it is a CDI spec, then move it into place.
    out = os.path.join(module.tmpdir, p["filename"])
    command = [t.cast(str, ctk), "cdi", "generate", "--output=%s" % out, "--device-name-strategy=%s" % p["device_name_strategy"]]
    try:
        rc, stdout, stderr = module.run_command(command, environ_update=ENV_C)
    except OSError as exc:  # pragma: no cover - find_ctk checked the binary; a race or a broken interpreter line
        module.fail_json(msg="nvidia-ctk %r could not be run (%s): %s" % (ctk, exc, INSTALL_HINT), cmd=command)
    result["command"] = command
    error = None
    generated = None
    try:
        generated = _files.read_bytes(out, "the generated spec") if rc == 0 else None
    except _files.FileError as exc:
        module.fail_json(msg=str(exc), cmd=command)
    if generated is None:
        error = "nvidia-ctk exited %d: %s" % (rc, (stderr or stdout).strip() or "no spec written")
        if not (p["allow_missing_driver"] and facts.get("state") != "ok"):
            module.fail_json(msg="Generating the CDI spec failed. %s" % error, cmd=command, rc=rc, stdout=stdout, stderr=stderr)
        module.warn("The CDI spec was not generated (the GPU facts say %s): %s. It is generated once the facts change."
                    % (facts.get("state") or "no driver state", error))
        result["devices"] = []
    else:
        engines = p["engines"] if p["engines"] is not None else _doctor.read_toolkit_host("/")["engines"]
        cdi_version = _cdi_compat.spec_version(to_text(generated, errors="surrogate_or_replace"))
        refused = _cdi_compat.rejections(cdi_version, engines) if cdi_version else []
        if refused:
            module.fail_json(msg="The generated CDI spec has cdiVersion %s, which an installed engine cannot load: %s. %s was not "
                             "written." % (cdi_version, "; ".join(refused), spec), cmd=command, engines=engines)
        result["devices"] = devices_of(module, spec, generated)
        outcome = write(module, spec, generated, "dir/filename")
        changed = changed or outcome.changed
        if outcome.changed:
            diffs.append(outcome.diff)
    result["error"] = error
    entry = {"spec": spec, "generated": error is None, "error": error, "generated_for": wanted}
    outcome = write_record(module, record_path, entry, stored.stale)
    if outcome.changed:
        changed = True
        diffs.append(outcome.diff)
    module.exit_json(changed=changed, diff=diffs, **result)


if __name__ == "__main__":
    main()
