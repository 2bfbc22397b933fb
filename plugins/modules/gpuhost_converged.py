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

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _converged_host, _validate


def main() -> None:
    module = _validate.ansible_module(
        # A record's options (RECORD_SPEC, as O(records) takes them), with the module's own state and path.
        argument_spec=dict(
            _converged_host.RECORD_SPEC,
            state=dict(type="str", choices=["probe", "record", "absent", "observe", "flush"], default="probe"),
            path=dict(type="path"),
            inputs=dict(type="dict", default={}),
            defer=dict(type="bool", default=False),
            gpu_facts=dict(type="bool", default=False),
            gpu_facts_root=dict(type="path", default="/"),
            host_facts=dict(type="bool", default=False),
            records=dict(type="list", elements="dict", default=[], options=_converged_host.RECORD_SPEC,
                         required_if=[("state", "record", ["inputs_digest"])]),
        ),
        required_if=[("state", "probe", ["inputs_digest"]), ("state", "record", ["inputs_digest"])],
        supports_check_mode=True,
    )
    module.exit_json(**_converged_host.run(module))


if __name__ == "__main__":
    main()
