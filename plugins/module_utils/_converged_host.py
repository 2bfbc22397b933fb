# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The host side of gpuhost.nvidia.gpuhost_converged: observe, probe, record, remove and flush the roles' records.

Private to this collection: no compatibility promise outside gpuhost.nvidia.

The module file holds the documentation and the argument specification; this file reads the host (the files' hashes,
one package query, one ``systemctl show``, the boot id) and writes the records through ``_files``. What a record holds
and what counts as drift is decided by the pure ``_converged``.
"""

from __future__ import annotations

import datetime
import os
import typing as t

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_text

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _converged, _files

C_ENV = {"LC_ALL": "C", "LANGUAGE": "C"}

RECORD_SPEC = dict(
    state=dict(type="str", choices=["record", "absent"], default="record"),
    path=dict(type="path", required=True),
    inputs_digest=dict(type="str"),
    files=dict(type="list", elements="path", default=[]),
    packages=dict(type="list", elements="str", default=[]),
    units=dict(type="list", elements="str", default=[]),
    package_manager=dict(type="str", choices=list(_converged.PACKAGE_MANAGERS), default="apt"),
    outputs=dict(type="dict", default={}),
    pending=dict(type="bool", default=False),
)
"""A record's options, as O(records) takes them (the module's own state and path differ)."""

GPU_FACTS_ROOT_FIX = ("the GPU facts were not gathered and no record was read: give gpu_facts_root (playbooks/site.yml: "
                      "gpuhost_facts_root) as the absolute path of an existing directory to read sys, proc and dev under, "
                      "or leave it unset to read the host's own (/)")


def boot_id(path: str = _converged.BOOT_ID_PATH) -> str | None:
    """The kernel's id of this boot; None when it cannot be read (a record of a changing run then never matches)."""
    # A procfs file, not one the roles manage: _files' checks of a regular file's kind and size do not apply to it.
    try:
        with open(path, "rb") as handle:
            data = handle.read(64)
    except OSError:
        return None
    text = to_text(data, errors="surrogate_or_strict").strip()
    return text or None


def observe(module: AnsibleModule, files: list[str], packages: list[str], units: list[str], manager: str,
            unobserved: dict[str, str] | None = None) -> dict[str, t.Any]:
    """The observed state: each file's sha256, one package query, one systemctl call, and the boot id.

    With ``unobserved``, a file that cannot be read or a failed systemctl call is noted there (``file:<path>``,
    ``units``) instead of failing the module.
    """
    observed: dict[str, t.Any] = {"files": {}, "packages": {}, "units": {}, "boot_id": boot_id()}
    for path in files:
        try:
            observed["files"][path] = _converged.sha256_bytes(_files.read_bytes(path, "file"))
        except _files.FileError as exc:
            if unobserved is None:
                module.fail_json(msg=str(exc), path=exc.path)
            unobserved["file:" + path] = str(exc)
    if packages:
        argv = _converged.package_command(manager, packages)
        argv[0] = module.get_bin_path(argv[0], required=True)
        # Each of these exits non-zero when a name is not installed; the names it printed are the installed ones.
        out = module.run_command(argv, environ_update=C_ENV)[1]
        observed["packages"] = _converged.parse_packages(manager, packages, out)
    if units:
        argv = _converged.unit_command(units)
        argv[0] = module.get_bin_path(argv[0], required=True)
        rc, out, err = module.run_command(argv, environ_update=C_ENV)
        if rc != 0:
            if unobserved is None:
                module.fail_json(msg="systemctl show failed: %s" % (err.strip() or out.strip()), rc=rc, cmd=argv)
            unobserved["units"] = "systemctl show failed: %s" % (err.strip() or out.strip())
        else:
            observed["units"] = _converged.parse_units(units, out)
    return observed


def read_record(path: str) -> tuple[dict[str, t.Any] | None, str | None, bytes | None]:
    """The record, why it cannot be used, and its bytes. Raises FileError (a directory or special file at ``path``)."""
    data = _files.read_bytes(path, "path")
    if data is None:
        return None, "no record at %s" % path, None
    record, problem = _converged.parse_record(to_text(data, errors="surrogate_or_strict"))
    return record, problem, data


def load(module: AnsibleModule, path: str) -> tuple[dict[str, t.Any] | None, str | None, bytes | None]:
    """The record, why it cannot be used, and its bytes; fails the module on a path that is not a file."""
    try:
        return read_record(path)
    except _files.FileError as exc:
        module.fail_json(msg=str(exc), path=exc.path)
        raise  # not reached: fail_json exits


def observe_all(module: AnsibleModule, directory: str, manager: str) -> tuple[dict[str, dict[str, t.Any]], str | None]:
    """state=observe: every record in ``directory``, and the union of what they list observed in one call; the entries
    by record path, and the boot id."""
    names: list[str] = []
    try:
        names = sorted(name for name in os.listdir(directory) if name.endswith(".json"))
    except FileNotFoundError:
        pass  # no role has recorded yet
    except OSError as exc:
        module.fail_json(msg="cannot list the records in %s: %s" % (directory, exc), path=directory)
    loaded: dict[str, tuple[dict[str, t.Any] | None, str | None]] = {}
    unreadable: dict[str, str] = {}
    for name in names:
        path = os.path.join(directory, name)
        try:
            record, problem = read_record(path)[:2]
        except _files.FileError as exc:
            unreadable[path] = str(exc)  # the live probe fails on it as it always did
            continue
        if record is not None or problem != "no record at %s" % path:  # gone since the listing: not listed
            loaded[path] = (record, problem)
    want = _converged.observation_wanted({path: record for path, (record, problem) in loaded.items()})
    unobserved: dict[str, str] = {}
    observed = observe(module, want["files"], want["packages"], want["units"], manager, unobserved)
    entries = _converged.observation_entries(loaded, observed, unobserved)
    entries.update({path: {"live": reason} for path, reason in unreadable.items()})
    return entries, observed["boot_id"]


def record(module: AnsibleModule, call: dict[str, t.Any], observed: dict[str, t.Any] | None = None) -> dict[str, t.Any]:
    """Write one record (``call``: the record options) and return its result; ``observed``: an observation that holds
    everything the record lists (the flush's), else the host is observed for this record alone.

    A record that counts as a change (the run changed what it lists, or there was none) says so with the run's boot and
    time (``changed_run``): the fast path trusts it in that boot and hands back its outputs as that run's.
    """
    path = os.path.abspath(call["path"])
    old, problem, before = load(module, path)
    items = _converged.record_items(call["files"], call["packages"], call["units"])
    if observed is None:
        observed = observe(module, items["files"], items["packages"], items["units"], call["package_manager"])
    new = _converged.build_record(call["inputs_digest"], _converged.observed_items(observed, items), call["outputs"])
    verdict = _converged.record_verdict(old, problem, new, observed, call["pending"], module.check_mode)
    changed = not verdict["converged"]
    new["confirmed"] = not changed
    if changed:
        new["changed_run"] = {"boot_id": observed.get("boot_id"),
                              "at": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
    content = _files.record_bytes(new)  # the bytes write_json_record writes
    if content != before:
        try:
            _files.write_json_record(module, path, new, "path")
        except _files.FileError as exc:
            module.fail_json(msg=str(exc), path=exc.path)
    return dict(changed=changed, path=path, diff=_files.make_diff(path, before, content) if changed else {}, **verdict)


def remove(module: AnsibleModule, path: str) -> dict[str, t.Any]:
    """Remove one record (state=absent) and return its result."""
    path = os.path.abspath(path)
    before = load(module, path)[2]
    changed = before is not None
    try:
        _files.write_json_record(module, path, {}, "path")  # an empty record is removed
    except _files.FileError as exc:
        module.fail_json(msg=str(exc), path=exc.path)
    return dict(changed=changed, path=path, diff=_files.make_diff(path, before, b"") if changed else {})


def flush(module: AnsibleModule, calls: list[dict[str, t.Any]]) -> list[dict[str, t.Any]]:
    """Write the deferred records and removals ``calls``, in order, each exactly as its own call would, after one
    observation of everything the records list (one package query and one systemctl call per package manager)."""
    observed: dict[str, dict[str, t.Any]] = {}
    for manager in sorted({call["package_manager"] for call in calls if call["state"] == "record"}):
        union: dict[str, set[str]] = {"files": set(), "packages": set(), "units": set()}
        for call in calls:
            if call["state"] == "record" and call["package_manager"] == manager:
                for key, names in _converged.record_items(call["files"], call["packages"], call["units"]).items():
                    union[key].update(names)
        observed[manager] = observe(module, sorted(union["files"]), sorted(union["packages"]), sorted(union["units"]), manager)
    results = []
    for call in calls:
        result = record(module, call, observed[call["package_manager"]]) if call["state"] == "record" else remove(module, call["path"])
        results.append(dict(result, state=call["state"]))
    return results


def facts_collector() -> t.Any:
    """module_utils/_facts.py, the collector gpuhost.nvidia.nvidia_gpu_facts gathers with. Imported when used, not at the
    top: its NVML, nvidia-smi and PCI readers are compiled on the host by the observation that gathers the GPU facts,
    not by every probe, record and flush (about 40 ms a call; Ansible ships them in every call's payload either way)."""
    from ansible_collections.gpuhost.nvidia.plugins.module_utils import _facts
    return _facts


def host_facts_collector() -> t.Any:
    """module_utils/_hostfacts.py (Ansible's platform, distribution and pkg_mgr collectors), imported on the host only by
    an observation that returns them (O(host_facts)), as facts_collector()."""
    from ansible_collections.gpuhost.nvidia.plugins.module_utils import _hostfacts
    return _hostfacts


def run(module: AnsibleModule) -> dict[str, t.Any]:
    """The module's result for its parameters (fails the module on a host that cannot be read or written)."""
    params = module.params
    if params["state"] != "flush" and not params["path"]:
        module.fail_json(msg="path is required outside a role")
    facts_root = params["gpu_facts_root"] if params["state"] == "observe" and params["gpu_facts"] else None
    if facts_root is not None:
        # Refused before anything is read or written, the deferred records included: a root that is not a directory
        # would report no_gpu.
        errors = facts_collector().root_errors(facts_root, "gpu_facts_root")
        if errors:
            module.fail_json(msg="; ".join(errors) + "; " + GPU_FACTS_ROOT_FIX, errors=errors)
    # Deferred records first (state=flush: only them): a call that reads a record reads the one its run wrote.
    flushed = flush(module, params["records"]) if params["records"] else []
    done: dict[str, t.Any] = {}
    if flushed:
        done = dict(records_written=[{key: result[key] for key in ("path", "state", "changed")} for result in flushed],
                    diff=[result["diff"] for result in flushed if result["diff"]])
    any_flushed = any(result["changed"] for result in flushed)
    if params["state"] == "flush":
        return dict(changed=any_flushed, **done)
    path = os.path.abspath(params["path"])
    if params["state"] == "observe":
        # The platform, distribution and package manager facts the roles read, by Ansible's collectors. Gathered first:
        # on a play without gather_facts the action plugin could not pass the host's package manager, and the collected
        # one is the same host's.
        facts = host_facts_collector().collect(module) if params["host_facts"] else {}
        manager = facts.get("ansible_pkg_mgr") if facts.get("ansible_pkg_mgr") in _converged.PACKAGE_MANAGERS else params["package_manager"]
        entries, boot = observe_all(module, path, manager)
        result = dict(done, changed=any_flushed, path=path, records=entries, boot_id=boot)
        if facts_root is not None:
            # nvidia_gpu_facts' default backends and gather groups, as site.yml's facts play always gathered them.
            facts["nvidia_gpu"] = facts_collector().gather_on_host(module, root=facts_root)
        if facts:
            result["ansible_facts"] = facts
        return result

    if params["state"] == "absent":
        result = remove(module, path)
    elif params["state"] == "record":
        result = record(module, params)
    else:
        old, problem = load(module, path)[:2]
        want = _converged.wanted(old) if old else {"files": [], "packages": [], "units": []}
        observed = observe(module, want["files"], want["packages"], want["units"], params["package_manager"])
        verdict = _converged.compare(old, params["inputs_digest"], observed, problem)
        result = dict(changed=False, path=path, outputs=_converged.fast_path_outputs(old) if old and verdict["converged"] else {}, **verdict)
    if flushed:
        result = dict(result, changed=result["changed"] or any_flushed, records_written=done["records_written"],
                      diff=done["diff"] + ([result["diff"]] if result.get("diff") else []))
    return result
