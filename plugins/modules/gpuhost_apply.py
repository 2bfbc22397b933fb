#!/usr/bin/python
# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: gpuhost_apply
short_description: Internal. Apply a role's directories, files, systemd units and apt transaction in one call
version_added: 0.1.0
description:
  - Internal to the collection's roles (each role's files, units and package transaction); no compatibility promise.
  - What a role would do with a chain of C(file), C(template), C(copy), C(stat) and C(systemd_service) tasks - each one
    remote call, two for C(template) and C(copy) - in one call. The roles of this collection use it for the files and
    units they manage.
  - Every path, mode, owner, group and unit name is checked before anything is read; all the problems are reported
    together. Then, still before anything is written, the host is asked about each of them - each path of O(directories),
    O(files) and O(absent) (a FIFO, socket or device, a directory where a file goes, a dangling link or a path under a
    file is refused without being opened), each file's directory (it must exist or be in O(directories)), and each
    owner and group (it must exist on the host, or be a numeric id). One bad item refuses the whole call, in check mode
    too, and nothing is written.
  - "The order: O(directories) (created with their parents, then owner, group and mode set); O(files) (written
    atomically through a temporary file, only when the bytes differ, then owner, group and mode set); one
    C(systemctl daemon-reload) when a written file is a unit file or drop-in (under C(/etc/systemd/),
    C(/usr/lib/systemd/), C(/lib/systemd/) or C(/run/systemd/)); then the O(units) (unmask or mask, enable or disable,
    start or stop); then O(absent) (so that a unit is disabled before its unit file goes, which systemd requires);
    one more C(daemon-reload) when a removed file was a unit file or drop-in; the restarts of running units one
    of whose O(units[].restart_when_changed) paths changed; then the apt transaction of O(packages), which therefore
    resolves under the preferences files written and removed above; last O(regenerate), when one of its paths changed
    (also when the transaction failed, before the call fails: the next run would find the files unchanged)."
  - O(packages) installs only what the host does not have, as M(ansible.builtin.apt) with O(ansible.builtin.apt#module:state=present)
    and O(ansible.builtin.apt#module:install_recommends=false) does - a package installed at any version satisfies a plain name,
    one whose version matches (as a glob) satisfies V(name=version) - with one C(dpkg-query) before and after and one
    C(apt-get install) with Ansible's apt options (no prompt, the old conffile kept, 60 s for dpkg's lock), and no python-apt.
    Check mode runs C(apt-get -s install) instead, which changes nothing and fails where the real install would not resolve.
  - The units' load, enablement and active state are read with one C(systemctl show) up front (and once more after a
    real C(daemon-reload) or C(unmask), which change them).
  - Check mode changes nothing and reports exactly what the real run would - a unit whose unit file this call writes,
    or whose package an earlier task only pretended to install (O(units[].package_default)), is planned from the
    state the real run would find it in, and a directory this call would create is taken as existing for the files
    in it.
author:
  - gpuhost.nvidia developers (@gpuhost)
attributes:
  check_mode:
    support: full
    description: Nothing is created, written, removed, reloaded or switched; the result says what the real run would change.
  diff_mode:
    support: full
    description: One before/after diff per changed file and per removed file.
  safe_file_operations:
    support: full
    description: Files are written through a temporary file in their directory and an atomic move.
  platform:
    support: full
    platforms: posix
    description: Linux hosts; O(units) need systemd.
options:
  directories:
    description:
      - Directories to ensure, with their missing parents (created with the same mode).
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: An absolute path without C(.) or C(..) components.
        type: str
        required: true
      owner:
        description: A user name or id.
        type: str
      group:
        description: A group name or id.
        type: str
      mode:
        description:
          - An octal mode string such as V('0755'). A number is refused, with the fix - YAML reads an unquoted V(0755) as
            the number 493 and an unquoted V(755) as 755, and the two are different modes; quote the mode.
        type: raw
  files:
    description:
      - Files to write. The content is rendered on the controller, for example with
        C(lookup('ansible.builtin.template', ...)) or C(lookup('ansible.builtin.file', ...)).
      - The file's directory must exist, or be in O(directories); otherwise the call fails before it writes anything. In
        check mode a missing directory is taken as made by an earlier task of the run that only pretended, the file is
        reported as written, and RV(notes) says that the real run fails unless that task creates it.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: An absolute path without C(.) or C(..) components.
        type: str
        required: true
      content:
        description: The whole content of the file, as text (written as UTF-8).
        type: str
        required: true
      owner:
        description: A user name or id.
        type: str
      group:
        description: A group name or id.
        type: str
      mode:
        description:
          - An octal mode string such as V('0644'). A number is refused, with the fix - YAML reads an unquoted V(0644) as
            the number 420 and an unquoted V(644) as 644, and the two are different modes; quote the mode.
        type: raw
      backup:
        description: Keep a timestamped copy of the file before it is replaced (RV(backups)).
        type: bool
        default: false
  absent:
    description:
      - Paths to remove. A file (or a link) is removed; a directory only when it is empty once the earlier entries of
        this list are gone (a directory another role still uses stays, and is not an error).
    type: list
    elements: str
    default: []
  units:
    description:
      - systemd units to switch. An option left out leaves that part of the unit alone.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: The unit's name, with its suffix (V(nvidia-persistenced.service)).
        type: str
        required: true
      enabled:
        description:
          - Enable or disable the unit. A unit without enablement (static, indirect, generated) is left alone and
            RV(notes) says so.
        type: bool
      masked:
        description: Mask or unmask the unit.
        type: bool
      state:
        description: V(started) or V(stopped).
        type: str
        choices: [started, stopped]
      start_if_exists:
        description:
          - Start (O(units[].state=started)) or restart (O(units[].restart_when_changed)) the unit only when this path exists
            when the call starts (a daemon that needs a loaded driver, C(/proc/driver/nvidia/version)). Without it the
            unit is neither started nor restarted, and RV(notes) says why.
        type: str
      switch_if_exists:
        description:
          - Mask, unmask, enable or disable the unit only when this path exists when the call starts (a record of a mask
            the role made, which the removal path (C(state=absent)) of a role undoes and nothing else).
        type: str
      restart_when_changed:
        description:
          - Paths of O(files) or O(absent); when one of them changed, the unit is restarted if it runs (and not just
            started by this call).
        type: list
        elements: str
        default: []
      package_default:
        description:
          - Check mode only - the unit's enablement right after its package installs it (V(enabled), V(disabled) or
            V(static)), used when systemd does not know the unit because an earlier task only pretended to install the
            package. Without it such a unit is reported in RV(missing_units) and counts as a change, since the real run
            would install it. Outside check mode a unit that is not installed but asked to be enabled or started fails
            the task.
        type: str
        choices: [enabled, disabled, static]
  packages:
    description:
      - An apt transaction, after everything else but O(regenerate).
      - The units of packages it installs cannot be switched by the same call (O(units) come first).
    type: dict
    suboptions:
      manager:
        description: The package manager. Only V(apt).
        type: str
        default: apt
        choices: [apt]
      install:
        description:
          - Package names, or V(name=version) where the version may be a glob (V(nvidia-smi=580.*)). Each name once.
        type: list
        elements: str
        default: []
      allow_downgrade:
        description: Let apt-get install an older version than the installed one (C(--allow-downgrades)).
        type: bool
        default: false
  regenerate:
    description:
      - A command that rebuilds what some of the O(files) feed (C(update-initramfs -u -k all) after modprobe.d files),
        run last, once, when one of O(regenerate.when_changed) was written or removed by this call.
    type: dict
    suboptions:
      argv:
        description: The command and its arguments, run without a shell. The command is a name looked up in C(PATH) or an absolute path.
        type: list
        elements: str
        required: true
      when_changed:
        description: Paths of O(files) or O(absent).
        type: list
        elements: str
        required: true
      if_exists:
        description: Run only when this path exists when the command is due (the tool's path; a host without it has nothing to rebuild).
        type: str
  gpu_facts:
    description:
      - Gather C(ansible_facts.nvidia_gpu) last, after everything else this call does, as M(gpuhost.nvidia.nvidia_gpu_facts)
        gathers them (its default backends and groups, under O(gpu_facts_root)), and return them, so that the tasks after
        this one see the host as the call left it without a call of their own.
      - V(installed) - only when the O(packages) step installed something (in check mode - would install).
        V(always) - every time. V(never) - not at all.
      - Read-only, so check mode gathers too (the host as it is - nothing was installed).
    type: str
    choices: [never, installed, always]
    default: never
  gpu_facts_root:
    description:
      - As M(gpuhost.nvidia.nvidia_gpu_facts)'s O(gpuhost.nvidia.nvidia_gpu_facts#module:root) - sysfs, C(/proc) and
        C(/dev) under another root. Checked before anything is changed.
    type: path
    default: /
seealso:
  - module: gpuhost.nvidia.gpuhost_converged
  - module: gpuhost.nvidia.nvidia_gpu_facts
notes:
  - Unit files and drop-ins are recognised by their directory; a unit file of a unit listed in O(units) that this call
    writes for the first time is loaded by the C(daemon-reload) before the unit is switched.
"""

EXAMPLES = r"""
- name: Install the boot-time settings unit, its script and spec, and switch the units, in one call
  gpuhost.nvidia.gpuhost_apply:
    directories:
      - {path: /usr/local/libexec/gpuhost, owner: root, group: root, mode: "0755"}
      - {path: /etc/systemd/system/nvidia-persistenced.service.d, owner: root, group: root, mode: "0755"}
    files:
      - path: /usr/local/libexec/gpuhost/gpu-settings
        content: "{{ lookup('ansible.builtin.file', 'gpuhost-gpu-settings') }}"
        owner: root
        group: root
        mode: "0644"
      - path: /etc/systemd/system/nvidia-persistenced.service.d/gpuhost-persistence-mode.conf
        content: "{{ lookup('ansible.builtin.template', 'nvidia-persistenced-dropin.conf.j2') }}"
        owner: root
        group: root
        mode: "0644"
    units:
      - name: nvidia-persistenced.service
        masked: false
        enabled: true
        state: started
        start_if_exists: /proc/driver/nvidia/version
        restart_when_changed: [/etc/systemd/system/nvidia-persistenced.service.d/gpuhost-persistence-mode.conf]
  register: __applied

- name: Write the driver's apt preferences and the modprobe.d files, install the driver, regenerate the initramfs (one call)
  gpuhost.nvidia.gpuhost_apply:
    files:
      - {path: /etc/apt/preferences.d/gpuhost-nvidia-driver.pref, content: "{{ pin }}", owner: root, group: root, mode: "0644"}
      - {path: /etc/modprobe.d/gpuhost-blacklist-nouveau.conf, content: "blacklist nouveau\n", owner: root, group: root, mode: "0644"}
    packages:
      install: [nvidia-open-kernel-dkms, nvidia-smi=535.261.03-1]
    regenerate:
      argv: [update-initramfs, -u, -k, all]
      when_changed: [/etc/modprobe.d/gpuhost-blacklist-nouveau.conf]
      if_exists: /usr/sbin/update-initramfs

- name: Remove them again; the directory goes when nothing else is in it
  gpuhost.nvidia.gpuhost_apply:
    units:
      - {name: gpuhost-gpu-settings.service, enabled: false}
    absent:
      - /etc/systemd/system/gpuhost-gpu-settings.service
      - /usr/local/libexec/gpuhost/gpu-settings
      - /usr/local/libexec/gpuhost
"""

RETURN = r"""
changed_files:
  description: The directories and files created, rewritten, or given another owner, group or mode.
  returned: always
  type: list
  elements: str
  sample: [/etc/systemd/system/gpuhost-gpu-settings.service]
removed:
  description: The paths of O(absent) that were removed.
  returned: always
  type: list
  elements: str
  sample: [/usr/local/libexec/gpuhost/gpu-settings]
changed_units:
  description: What changed per unit, as past participles in the order done.
  returned: always
  type: dict
  sample: {"nvidia-persistenced.service": "unmasked, enabled", "gpuhost-gpu-settings.service": "enabled"}
units:
  description:
    - Each unit's state before the switches - C(load) (systemd's LoadState), C(enabled) (UnitFileState) and C(active)
      (ActiveState) - as systemd reports it after this call's C(daemon-reload), or in check mode as predicted.
  returned: always
  type: dict
  sample: {"nvidia-persistenced.service": {"load": "loaded", "enabled": "static", "active": "inactive"}}
missing_units:
  description: Units systemd does not know, that were asked to be enabled or started (check mode only; the real run fails).
  returned: always
  type: list
  elements: str
  sample: []
notes:
  description: What was left alone and why (a static unit's enablement, a start without its O(units[].start_if_exists) path).
  returned: always
  type: list
  elements: str
  sample: ["nvidia-persistenced.service is not started: /proc/driver/nvidia/version does not exist"]
daemon_reloaded:
  description: Whether C(systemctl daemon-reload) ran (in check mode - would run).
  returned: always
  type: bool
  sample: true
packages:
  description:
    - The apt transaction (empty without O(packages)) - C(installed), the specs the host did not satisfy, which apt-get
      installed (in check mode, would install); C(changed); C(before) and C(after), each package's installed version (null when
      not installed). On failure also C(rc), C(stdout) and C(stderr).
  returned: always
  type: dict
  sample: {"installed": ["nvidia-smi=535.261.03-1"], "changed": true, "before": {"nvidia-smi": null}, "after": {"nvidia-smi": "535.261.03-1"}}
regenerated:
  description: Whether O(regenerate) ran (in check mode - would run).
  returned: always
  type: bool
  sample: true
gpu_facts_gathered:
  description: Whether this call gathered the GPU facts (O(gpu_facts)).
  returned: always
  type: bool
  sample: true
ansible_facts:
  description: C(nvidia_gpu), the GPU facts as M(gpuhost.nvidia.nvidia_gpu_facts) returns them, when RV(gpu_facts_gathered).
  returned: when RV(gpu_facts_gathered)
  type: dict
  contains:
    nvidia_gpu:
      description: The facts schema of M(gpuhost.nvidia.nvidia_gpu_facts).
      type: dict
  sample: {nvidia_gpu: {present: false, state: no_gpu}}
backups:
  description: The backup copy of each replaced file with O(files[].backup=true).
  returned: always
  type: dict
  sample: {"/etc/gpuhost/gpu_settings.json": "/etc/gpuhost/gpu_settings.json.12345.2026-11-24@12:00:00~"}
"""

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _applier, _apply, _validate

# mode is raw so that an unquoted YAML mode (a number) is seen, and refused, rather than turned into its decimal digits.
ATTRS = dict(owner=dict(type="str"), group=dict(type="str"), mode=dict(type="raw"))


def main() -> None:
    module = _validate.ansible_module(
        argument_spec=dict(
            directories=dict(type="list", elements="dict", default=[], options=dict(path=dict(type="str", required=True), **ATTRS)),
            files=dict(type="list", elements="dict", default=[], options=dict(
                path=dict(type="str", required=True), content=dict(type="str", required=True, no_log=False),
                backup=dict(type="bool", default=False), **ATTRS)),
            absent=dict(type="list", elements="str", default=[]),
            units=dict(type="list", elements="dict", default=[], options=dict(
                name=dict(type="str", required=True), enabled=dict(type="bool"), masked=dict(type="bool"),
                state=dict(type="str", choices=list(_apply.UNIT_STATES)), start_if_exists=dict(type="str"),
                switch_if_exists=dict(type="str"), restart_when_changed=dict(type="list", elements="str", default=[]),
                package_default=dict(type="str", choices=["enabled", "disabled", "static"]))),
            packages=dict(type="dict", options=dict(
                manager=dict(type="str", default="apt", choices=["apt"]), install=dict(type="list", elements="str", default=[]),
                allow_downgrade=dict(type="bool", default=False))),
            regenerate=dict(type="dict", options=dict(
                argv=dict(type="list", elements="str", required=True), when_changed=dict(type="list", elements="str", required=True),
                if_exists=dict(type="str"))),
            gpu_facts=dict(type="str", choices=list(_apply.GPU_FACTS_WHEN), default="never"),
            gpu_facts_root=dict(type="path", default="/"),
        ),
        supports_check_mode=True,
    )
    module.exit_json(**_applier.apply(module))


if __name__ == "__main__":
    main()
