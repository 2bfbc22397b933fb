#!/usr/bin/python
# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: gpuhost_converged
short_description: The roles' converged fast path - probe whether a role's last full run still holds, or record it
version_added: 0.1.0
description:
  - Every role of this collection that changes a host ends a successful full run with O(state=record) - a JSON record of
    the digest of what the role planned from, the sha256 of each file it manages, the installed version of each package
    it manages (pins and locks are files), the state of each unit it manages, and the variables it reports.
  - The next run starts with O(state=probe) - one read of those files, one package-manager query and one
    C(systemctl show). When the record is confirmed (the full run that wrote it changed nothing the record tracks), the
    inputs digest is the same and every observed item matches, RV(converged) is true and the role ends there;
    otherwise RV(drift) lists, as sentences, what differs, and the role's full path runs and repairs it. So a host
    takes the fast path from the run after the first full run that found nothing to change.
  - The action plugin of the same name computes O(inputs_digest) on the controller when it is not given - over the
    role's name, the role's files and the collection's plugins, every variable of the role's argument specification as
    resolved, the distribution, its version, the kernel release, the package manager, and the GPU facts that do not
    change by themselves (no utilisation, temperatures or processes). Run outside a role, pass O(inputs_digest) and
    O(path) yourself.
  - O(state=absent) removes the record (a role's own O(state=absent) path does this).
  - O(state=observe) reads every record in the directory O(path) (default C(/var/lib/gpuhost/converged)) and observes
    the union of what they list in one call - the files' hashes, one package query, one C(systemctl show). Registered
    as C(gpuhost_converged_observation) (C(playbooks/site.yml) does this once per host, before the roles), it lets the
    probes that follow in the same playbook answer on the controller, without a remote call, with the result the live
    probe would give - while it still holds. The host fact C(gpuhost_converged_observed) says what holds. Each record
    answers once. A role without a usable record answers "no record" until it records or removes its own record. Any
    other answer comes from the observation only while no role has taken its full path since (a probe that did not
    find the host converged, a record or a removal); after that the probes ask the host. In check mode the action does
    not observe and the probes always ask the host. A registered variable lives for one run only, so a fact cache
    cannot hand a later run an old observation.
  - O(gpu_facts=true) on O(state=observe) also gathers the GPU facts, through the collector of
    M(gpuhost.nvidia.nvidia_gpu_facts) with its default backends and gather groups, and returns them as
    RV(ansible_facts.nvidia_gpu) - C(playbooks/site.yml)'s facts play makes one remote call for both. Where the
    observation does not run (in check mode the action plugin skips it) run M(gpuhost.nvidia.nvidia_gpu_facts) instead,
    as C(playbooks/site.yml) does when C(gpuhost_converged_observation is skipped).
  - O(defer=true) on a record or removal makes no remote call - the action plugin computes everything that needs the
    role (the record path, the inputs digest) and keeps the complete call in the host fact C(gpuhost_converged_deferred)
    (a later call for the same record replaces it), and the task reports no change. O(state=flush) at the end of the
    run (C(playbooks/site.yml)'s last play, which turns O(defer) on for every role with the variable
    C(gpuhost_converged_defer)) then writes all of them in one call, after one observation of everything they list
    - each record exactly as its own call would have written it, reporting a change when any of them does (so check
    mode predicts it and a second run reports none), and clears the fact. A host that failed before the flush keeps
    the records it had; its next run's probes compare the host with those. A call that reads a record (a probe,
    record or removal of a record with a deferred call, an observation) writes the deferred calls of that record
    (observation - all) first, in the same remote call. Without a flush at the end of the play the deferred records
    are never written, so leave O(defer) off in a playbook without one.
author:
  - gpuhost.nvidia developers (@gpuhost)
attributes:
  check_mode:
    support: full
    description: The probe reads only; the record is computed and diffed but not written.
  diff_mode:
    support: full
    description: Shows the record before and after.
  safe_file_operations:
    support: full
    description: Writes the record through a temporary file and an atomic move.
  platform:
    support: full
    platforms: posix
    description: Linux hosts with systemd and dpkg, rpm or pacman.
options:
  state:
    description:
      - V(probe) compares the host with the record (read-only); V(record) writes the record; V(absent) removes it;
        V(observe) reads every record and observes what they list, for the probes that follow (read-only); V(flush)
        writes the records and removals deferred with O(defer) in this run.
    type: str
    choices: [probe, record, absent, observe, flush]
    default: probe
  path:
    description:
      - The record file. In a role the action plugin makes it C(/var/lib/gpuhost/converged/<role>.json); outside a role
        it is required.
      - O(state=observe) - the directory of the records; the action plugin makes it C(/var/lib/gpuhost/converged).
    type: path
  inputs:
    description:
      - More data the role plans from, folded into the inputs digest by the action plugin (the module itself ignores it).
    type: dict
    default: {}
  inputs_digest:
    description:
      - The sha256 of everything the role plans from. Required for V(probe) and V(record).
    type: str
  files:
    description:
      - O(state=record) - the files the role manages; a missing file is recorded as absent.
    type: list
    elements: path
    default: []
  packages:
    description:
      - O(state=record) - the packages the role manages; one not installed is recorded as absent. A version request
        (C(name=1.2*), C(name>=1.2)) counts as its name.
    type: list
    elements: str
    default: []
  units:
    description:
      - O(state=record) - the systemd units the role manages.
    type: list
    elements: str
    default: []
  package_manager:
    description:
      - How to ask for the installed versions - an Ansible C(pkg_mgr) value (the action plugin passes the host's).
    type: str
    choices: [apt, dnf, yum, dnf5, pacman]
    default: apt
  outputs:
    description:
      - O(state=record) - the variables the role reports to the rest of the play, handed back by a converged probe.
        A null value (a variable the run left undefined) is left out.
    type: dict
    default: {}
  pending:
    description:
      - O(state=record) in check mode - whether an earlier task of this run would change a file, package or unit the
        record lists (a package moved to another version, a pin rewritten). Check mode made no change, so the host
        still looks as recorded; with V(true) the task reports the change the real run's record makes, so check mode
        predicts it. Ignored outside check mode, where the record is compared with what the run really left.
    type: bool
    default: false
  gpu_facts:
    description:
      - O(state=observe) - also gather the GPU facts, in the same call, and return them as RV(ansible_facts.nvidia_gpu),
        exactly as M(gpuhost.nvidia.nvidia_gpu_facts) does with its default backends and gather groups. Ignored by the
        other states.
      - In check mode the action plugin does not observe, so no facts are gathered either.
    type: bool
    default: false
  gpu_facts_root:
    description:
      - With O(gpu_facts) - the root to read sysfs, C(/proc), C(/dev) and the libraries under, as
        O(gpuhost.nvidia.nvidia_gpu_facts#module:root). Paths in the returned facts are relative to it.
      - An absolute path to an existing directory. Any other value fails the task before anything is read, the records
        included, naming the value.
    type: path
    default: /
  host_facts:
    description:
      - O(state=observe) - also return, in the same call, the host facts of C(ansible.builtin.setup)'s V(platform),
        V(distribution) and V(pkg_mgr) subsets, as setup returns them for those subsets, gathered by Ansible's own fact
        collectors. C(playbooks/site.yml)'s facts play then needs no C(gather_facts) call. Ignored by the other states;
        in check mode the action plugin does not observe (site.yml runs setup with those subsets instead).
      - The observation then asks the package manager of those facts for the recorded packages.
    type: bool
    default: false
  defer:
    description:
      - O(state=record) or O(state=absent) - keep the call, complete, in the host fact C(gpuhost_converged_deferred)
        for the O(state=flush) at the end of the run instead of making it (no remote call; the task reports no change).
      - The roles pass C(gpuhost_converged_defer), which C(playbooks/site.yml) turns on. Ignored by the other states.
    type: bool
    default: false
  records:
    description:
      - The record and removal calls to make before this call's own, one observation for all of them. The action
        plugin fills it from the host fact C(gpuhost_converged_deferred) (O(state=flush) - all of this run's deferred
        calls, O(state=observe) - all, the other states - those of O(path)); you do not set it.
    type: list
    elements: dict
    default: []
    suboptions:
      state:
        description: V(record) or V(absent), as O(state).
        type: str
        choices: [record, absent]
        default: record
      path:
        description: The record file, as O(path).
        type: path
        required: true
      inputs_digest:
        description: As O(inputs_digest); required for V(record).
        type: str
      files:
        description: As O(files).
        type: list
        elements: path
        default: []
      packages:
        description: As O(packages).
        type: list
        elements: str
        default: []
      units:
        description: As O(units).
        type: list
        elements: str
        default: []
      package_manager:
        description: As O(package_manager).
        type: str
        choices: [apt, dnf, yum, dnf5, pacman]
        default: apt
      outputs:
        description: As O(outputs).
        type: dict
        default: {}
      pending:
        description: As O(pending).
        type: bool
        default: false
seealso:
  - module: gpuhost.nvidia.nvidia_gpu_facts
"""

EXAMPLES = r"""
- name: Probe whether the host is as the role's last full run left it
  gpuhost.nvidia.gpuhost_converged:
    state: probe
  register: __converged

- name: End the role on a converged host (check mode always runs the full path)
  ansible.builtin.meta: end_role
  when: __converged.converged and not ansible_check_mode

- name: Observe every role's record in one call, so that the roles' probes that follow answer on the controller
  gpuhost.nvidia.gpuhost_converged:
    state: observe
  register: gpuhost_converged_observation

# playbooks/site.yml - the GPU facts and the observation in one call; the facts module where the observation did not run.
- name: Gather the GPU facts and observe every role's record, in one call
  gpuhost.nvidia.gpuhost_converged:
    state: observe
    gpu_facts: true
  register: gpuhost_converged_observation

- name: Gather ansible_facts.nvidia_gpu where the observation did not (check mode)
  gpuhost.nvidia.nvidia_gpu_facts:
  when: gpuhost_converged_observation is skipped

- name: Record what the full run left
  gpuhost.nvidia.gpuhost_converged:
    state: record
    files: [/etc/apt/preferences.d/gpuhost-nvidia-driver.pref]
    packages: [nvidia-driver]
    units: [nvidia-persistenced.service]
    outputs:
      nvidia_driver_report: "{{ nvidia_driver_report }}"

# playbooks/site.yml - every role defers its record; one call at the end of the run writes them all.
- name: Record what the full run left, at the end of the run
  gpuhost.nvidia.gpuhost_converged:
    state: record
    defer: true
    packages: [nvidia-driver]

- name: Write the records the roles deferred, in one call
  gpuhost.nvidia.gpuhost_converged:
    state: flush
"""

RETURN = r"""
converged:
  description: Whether the record exists, the inputs digest is the same and every recorded item is as recorded.
  returned: state is probe or record
  type: bool
  sample: true
records:
  description:
    - O(state=observe) - per record file, what a probe of it needs besides the inputs digest - C(problem) (why there is
      no usable record), C(live) (an item could not be observed - the probe asks the host), or the record's
      C(confirmed), C(inputs_digest) and C(outputs) with C(drift), the recorded files, packages and units the host no
      longer has as recorded (sentences).
    - A record file that does not exist is not listed (its probe answers that there is no record).
  returned: state is observe
  type: dict
  sample:
    /var/lib/gpuhost/converged/gpu_compose.json:
      confirmed: true
      inputs_digest: 4f2a0c9d1e7b...
      outputs: {"gpu_compose_report": ["gpu_compose: override /srv/app/compose.gpu.yml (written)"]}
      drift: []
    /var/lib/gpuhost/converged/nvidia_driver.json:
      problem: the record is not valid JSON (Expecting value - line 1 column 1 (char 0))
id:
  description: O(state=observe) - the observation's identity, which the host fact C(gpuhost_converged_observed) names.
  returned: state is observe, not in check mode
  type: str
  sample: 0f8c2a4e9b7d41c3a5e6f7081920a3b4
playbook:
  description: O(state=observe) - the playbook whose plays' probes may answer from the observation.
  returned: state is observe, not in check mode
  type: str
  sample: /usr/share/ansible/collections/ansible_collections/gpuhost/nvidia/playbooks/site.yml
ansible_facts:
  description: Facts the action plugin sets, and the GPU facts (O(gpu_facts)).
  returned: state is observe; a probe, record, removal or flush after it that changes what still holds; a deferred call
  type: dict
  contains:
    nvidia_gpu:
      description:
        - O(gpu_facts) - the host's NVIDIA GPUs, driver and PCI functions, exactly as M(gpuhost.nvidia.nvidia_gpu_facts)
          returns them (its RETURN documents every key).
      returned: state is observe with gpu_facts, not in check mode
      type: dict
      sample: {"present": false, "source": "pci", "state": "no_gpu", "messages": [], "gpus": []}
    distribution:
      description:
        - O(host_facts) - the host facts of setup's V(platform), V(distribution) and V(pkg_mgr) subsets, keyed as setup
          returns them (C(ansible_distribution), C(ansible_os_family), C(ansible_pkg_mgr), C(ansible_architecture),
          C(ansible_kernel) and the others of those subsets), which Ansible files under C(ansible_facts) without the
          prefix.
      returned: state is observe with host_facts, not in check mode
      type: str
      sample: Debian
    gpuhost_converged_observed:
      description:
        - What of the observation still holds - C(id) (the observation's), C(playbook), C(trusted) (no role has taken
          its full path since) and C(used) (record files already probed, recorded or removed in this run).
      returned: state is observe; a probe, record or removal after it that changes what still holds
      type: dict
      sample: {"id": "0f8c2a4e9b7d41c3a5e6f7081920a3b4", "playbook": "/srv/site.yml", "trusted": true, "used": []}
    gpuhost_converged_deferred:
      description:
        - This run's deferred calls (O(defer)) - C(run) (the controller run that deferred them; a fact of another run,
          kept by a fact cache, holds none) and C(records) (each call's record options, as O(records) takes them).
          Emptied by the call that writes them.
      returned: a deferred call, and the call that writes it
      type: dict
      sample: {"run": "5b0e1f2c3d4a59687f8e9d0c1b2a3948", "records": [{"state": "absent", "path": "/var/lib/gpuhost/converged/gpu_compose.json"}]}
drift:
  description: What differs from the record, as sentences; empty when converged.
  returned: state is probe or record
  type: list
  elements: str
  sample:
    - file /etc/docker/daemon.json changed (sha256 0a1b2c3d4e5f, recorded sha256 9f8e7d6c5b4a)
    - unit nvidia-persistenced.service is disabled, recorded enabled
outputs:
  description: The variables the role reported at its last full run, from the record; empty when not converged.
  returned: state is probe
  type: dict
  sample: {"gpu_compose_report": ["gpu_compose: override /srv/app/compose.gpu.yml (written)"]}
records_written:
  description:
    - The deferred records and removals this call wrote (O(records)) - each one's C(path), C(state) and C(changed), in
      order. The call reports a change when any of them changed.
  returned: state is flush, or a deferred call was written before this one
  type: list
  elements: dict
  sample: [{"path": "/var/lib/gpuhost/converged/nvidia_driver.json", "state": "record", "changed": false}]
deferred:
  description: O(defer) - the call was kept in the host fact C(gpuhost_converged_deferred) for the O(state=flush).
  returned: state is record or absent with defer
  type: bool
  sample: true
path:
  description: The record file (O(state=observe) - the directory of the records).
  returned: state is not flush
  type: str
  sample: /var/lib/gpuhost/converged/nvidia_driver.json
"""

import os
import typing as t

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_text

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _converged, _files, _validate

C_ENV = {"LC_ALL": "C", "LANGUAGE": "C"}


def observe(module: AnsibleModule, files: list[str], packages: list[str], units: list[str], manager: str,
            unobserved: dict[str, str] | None = None) -> dict[str, t.Any]:
    """The observed state: each file's sha256, one package query, one systemctl call.

    With ``unobserved``, a file that cannot be read or a failed systemctl call is noted there (``file:<path>``,
    ``units``) instead of failing the module.
    """
    observed: dict[str, t.Any] = {"files": {}, "packages": {}, "units": {}}
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
        rc, out, err = module.run_command(argv, environ_update=C_ENV)
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


def observe_all(module: AnsibleModule, directory: str, manager: str) -> dict[str, dict[str, t.Any]]:
    """state=observe: every record in ``directory``, and the union of what they list observed in one call."""
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
    return entries


def record(module: AnsibleModule, call: dict[str, t.Any], observed: dict[str, t.Any] | None = None) -> dict[str, t.Any]:
    """Write one record (``call``: the record options) and return its result; ``observed``: an observation that holds
    everything the record lists (the flush's), else the host is observed for this record alone."""
    path = os.path.abspath(call["path"])
    old, problem, before = load(module, path)
    items = _converged.record_items(call["files"], call["packages"], call["units"])
    if observed is None:
        observed = observe(module, items["files"], items["packages"], items["units"], call["package_manager"])
    new = _converged.build_record(call["inputs_digest"], _converged.observed_items(observed, items), call["outputs"])
    verdict = _converged.record_verdict(old, problem, new, observed, call["pending"], module.check_mode)
    changed = not verdict["converged"]
    new["confirmed"] = not changed
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


GPU_FACTS_ROOT_FIX = ("the GPU facts were not gathered and no record was read: give gpu_facts_root (playbooks/site.yml: "
                      "gpuhost_facts_root) as the absolute path of an existing directory to read sys, proc and dev under, "
                      "or leave it unset to read the host's own (/)")


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


def main() -> None:
    module = _validate.ansible_module(
        # A record's options (RECORD_SPEC, as O(records) takes them), with the module's own state and path.
        argument_spec=dict(
            RECORD_SPEC,
            state=dict(type="str", choices=["probe", "record", "absent", "observe", "flush"], default="probe"),
            path=dict(type="path"),
            inputs=dict(type="dict", default={}),
            defer=dict(type="bool", default=False),
            gpu_facts=dict(type="bool", default=False),
            gpu_facts_root=dict(type="path", default="/"),
            host_facts=dict(type="bool", default=False),
            records=dict(type="list", elements="dict", default=[], options=RECORD_SPEC, required_if=[("state", "record", ["inputs_digest"])]),
        ),
        required_if=[("state", "probe", ["inputs_digest"]), ("state", "record", ["inputs_digest"])],
        supports_check_mode=True,
    )
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
        module.exit_json(changed=any_flushed, **done)
    path = os.path.abspath(params["path"])
    if params["state"] == "observe":
        # The platform, distribution and package manager facts the roles read, by Ansible's collectors (#21). Gathered
        # first: on a play without gather_facts the action plugin could not pass the host's package manager, and the
        # collected one is the same host's.
        facts = host_facts_collector().collect(module) if params["host_facts"] else {}
        manager = facts.get("ansible_pkg_mgr") if facts.get("ansible_pkg_mgr") in _converged.PACKAGE_MANAGERS else params["package_manager"]
        result = dict(done, changed=any_flushed, path=path, records=observe_all(module, path, manager))
        if facts_root is not None:
            # nvidia_gpu_facts' default backends and gather groups, as site.yml's facts play always gathered them.
            facts["nvidia_gpu"] = facts_collector().gather_on_host(module, root=facts_root)
        if facts:
            result["ansible_facts"] = facts
        module.exit_json(**result)

    if params["state"] == "absent":
        result = remove(module, path)
    elif params["state"] == "record":
        result = record(module, params)
    else:
        old, problem = load(module, path)[:2]
        want = _converged.wanted(old) if old else {"files": [], "packages": [], "units": []}
        observed = observe(module, want["files"], want["packages"], want["units"], params["package_manager"])
        verdict = _converged.compare(old, params["inputs_digest"], observed, problem)
        result = dict(changed=False, path=path, outputs=old["outputs"] if old and verdict["converged"] else {}, **verdict)
    if flushed:
        result = dict(result, changed=result["changed"] or any_flushed, records_written=done["records_written"],
                      diff=done["diff"] + ([result["diff"]] if result.get("diff") else []))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
