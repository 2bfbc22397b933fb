#!/usr/bin/python
# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: gpuhost_converged
short_description: Internal. The roles' converged fast path; probe whether a role's last full run still holds, or record it
version_added: 0.1.0
description:
  - B(Internal) - plumbing of this collection's roles and playbooks. It makes no compatibility promise; its options,
    its records and its results change with the roles that call it. C(docs/design-notes.md) (the converged fast path)
    describes how the roles and C(playbooks/site.yml) use it.
  - Every role of this collection that changes a host ends a successful full run with O(state=record) - a JSON record of
    the digest of what the role planned from, the sha256 of each file it manages, the installed version of each package
    it manages (pins and locks are files), the state of each unit it manages, and the variables it reports.
  - The next run starts with O(state=probe) - one read of those files, one package-manager query and one
    C(systemctl show). When the record holds, the inputs digest is the same and every observed item matches,
    RV(converged) is true and the role ends there, handing back RV(outputs); otherwise RV(drift) lists, as sentences,
    what differs, and the role's full path runs and repairs it.
  - A record holds when the full run that wrote it changed nothing the record tracks (it is confirmed), or, for a run
    that changed the host, in the boot that run changed it in (the record names the run's boot id and time). The
    outputs of such a run describe its changes, so each line of its C(<role>_report) variables comes back marked as
    that run's; its other variables (reboot reasons among them) are states that hold until the host boots.
  - The variable C(gpuhost_converged_full_run) (true) makes a role's probe answer "not converged" without reading the
    host, so every role takes its full path and records; a probe outside a role still reads the host.
  - The action plugin of the same name computes O(inputs_digest) on the controller when it is not given - over the
    role's name, the role's files and the collection's plugins, every variable of the role's argument specification as
    resolved, the distribution, its version, the kernel release, the package manager, and the GPU facts that do not
    change by themselves (no utilisation, temperatures or processes). Run outside a role, pass O(inputs_digest) and
    O(path) yourself.
  - O(state=absent) removes the record (a role's own O(state=absent) path does this).
  - O(state=observe) reads every record in the directory O(path) (default C(/var/lib/gpuhost/converged)) and observes
    the union of what they list in one call. Registered under the variable name the action plugin reads, it lets the
    probes that follow in the same playbook answer on the controller, without a remote call, with the result the live
    probe would give, while it still holds (the host fact C(gpuhost_converged_observed) says what holds). In check
    mode the action does not observe and the probes always ask the host.
  - O(gpu_facts=true) on O(state=observe) also gathers the GPU facts, through the collector of
    M(gpuhost.nvidia.nvidia_gpu_facts) with its default backends and gather groups, and returns them as
    RV(ansible_facts.nvidia_gpu). Where the observation does not run (check mode), run
    M(gpuhost.nvidia.nvidia_gpu_facts) instead.
  - O(defer=true) on a record or removal makes no remote call - the action plugin computes everything that needs the
    role and keeps the complete call in the host fact C(gpuhost_converged_deferred), and the task reports no change.
    O(state=flush) at the end of the run writes all of them in one call, after one observation of everything they
    list, each record exactly as its own call would have written it, reporting a change when any of them does, and
    clears the fact. Without a flush at the end of the run the deferred records are never written.
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
        In a role, the action plugin reads it from the role's own C(__<role>_converged_inputs) variable when this is
        not given.
    type: dict
    default: {}
  role:
    description:
      - O(state=probe) outside the role, in a task of the role's play before the role (playbooks/site.yml) - the role of
        this collection whose record to probe. The action plugin computes the role's inputs digest exactly as the role's
        own probe does (the role's defaults, vars and per-OS files, which Ansible has not loaded there) and answers from
        this run's observation (O(state=observe)) on the controller. It never asks the host - where the observation
        cannot answer, or in check mode, the answer is C(converged=false) and the role probes for itself.
      - O(path) is then the records' directory, by default C(/var/lib/gpuhost/converged).
    type: str
  roles:
    description:
      - O(state=probe) outside the roles - as O(role) for each of these roles, returning only RV(converged_roles), and
        leaving the observation unused (the roles' own probes still answer from it).
    type: list
    elements: str
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
        collectors, so the play needs no C(gather_facts) call. Ignored by the other states; in check mode the action
        plugin does not observe (run setup with those subsets instead).
      - The observation then asks the package manager of those facts for the recorded packages.
    type: bool
    default: false
  defer:
    description:
      - O(state=record) or O(state=absent) - keep the call, complete, in the host fact C(gpuhost_converged_deferred)
        for the O(state=flush) at the end of the run instead of making it (no remote call; the task reports no change).
      - Ignored by the other states.
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
# In a role of this collection (the action plugin computes the record path and the inputs digest).
- name: Probe whether the host is as the role's last full run left it
  gpuhost.nvidia.gpuhost_converged:
    state: probe
  register: __converged

- name: End the role on a converged host (check mode always runs the full path)
  ansible.builtin.meta: end_role
  when: __converged.converged and not ansible_check_mode

- name: Record what the full run left
  gpuhost.nvidia.gpuhost_converged:
    state: record
    files: [/etc/apt/preferences.d/gpuhost-nvidia-driver.pref]
    packages: [nvidia-driver]
    units: [nvidia-persistenced.service]
    outputs:
      nvidia_driver_report: "{{ nvidia_driver_report }}"

# Before the roles: every record observed, and the GPU facts gathered, in one call; the probes that follow answer from
# it (the action plugin reads it under this variable name).
- name: Gather the GPU facts and observe every role's record, in one call
  gpuhost.nvidia.gpuhost_converged:
    state: observe
    gpu_facts: true
  register: gpuhost_converged_observation

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
converged_roles:
  description: O(state=probe) with O(roles) - the roles whose record this run's observation finds holding.
  returned: state is probe with roles
  type: list
  elements: str
  sample: [nvidia_driver, nvidia_container_toolkit, gpu_compose]
role:
  description: O(state=probe) with O(role) - the role asked for.
  returned: state is probe with role
  type: str
  sample: nvidia_driver
inputs_digest:
  description: O(state=probe) with O(role) - the role's inputs digest as computed on the controller; null where it was not
    computed (check mode, a full run) or its inputs could not be resolved before the role.
  returned: state is probe with role
  type: str
  sample: 4f2a0c9d1e7b...
records:
  description:
    - O(state=observe) - per record file, what a probe of it needs besides the inputs digest - C(problem) (why there is
      no usable record), C(live) (an item could not be observed - the probe asks the host), or the record's
      C(confirmed), C(inputs_digest) and C(outputs) with C(drift), the recorded files, packages and units the host no
      longer has as recorded (sentences), and C(changed_run) (the boot id and time of the run that changed the host)
      for a record that is not confirmed.
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
boot_id:
  description: O(state=observe) - the host's boot id (C(/proc/sys/kernel/random/boot_id)); null when it cannot be read.
  returned: state is observe
  type: str
  sample: 78c496aa-acb3-4580-8a15-81579981bcb8
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
  description:
    - The variables the role reported at its last full run, from the record; empty when not converged.
    - For a record of a run that changed the host, each line of a C(<role>_report) list is marked as that run's.
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
            role=dict(type="str"),
            roles=dict(type="list", elements="str"),
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
