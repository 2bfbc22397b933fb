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

import grp
import os
import pwd
import typing as t

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_bytes

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _apply, _apt, _converged, _files, _validate

C_ENV = {"LC_ALL": "C", "LANGUAGE": "C"}
# mode is raw so that an unquoted YAML mode (a number) is seen, and refused, rather than turned into its decimal digits.
ATTRS = dict(owner=dict(type="str"), group=dict(type="str"), mode=dict(type="raw"))


class Applier:
    """The host side: reads, writes and systemctl calls; every decision is _apply's."""

    def __init__(self, module: AnsibleModule):
        self.module = module
        self.check = module.check_mode
        self.changed_files: list[str] = []
        self.removed: list[str] = []
        self.diffs: list[dict[str, t.Any]] = []
        self.backups: dict[str, str] = {}
        self.created: set[str] = set()  # directories created (or, in check mode, that would be)

    def fail(self, msg: str, **kwargs: t.Any) -> t.NoReturn:
        self.module.fail_json(msg=msg, changed_files=self.changed_files, removed=self.removed, **kwargs)
        raise AssertionError("fail_json returned")  # pragma: no cover

    def attrs(self, path: str, item: t.Mapping[str, t.Any], changed: bool) -> bool:
        args = {"path": path, "owner": item.get("owner"), "group": item.get("group"), "mode": item.get("mode"),
                "attributes": None, "secontext": [None, None, None]}
        return self.module.set_fs_attributes_if_different(args, changed, diff=None, expand=False)

    def directory(self, item: t.Mapping[str, t.Any]) -> None:
        path = item["path"]
        if _files.check_directory(path, "directories"):
            changed = self.attrs(path, item, path in self.created)
        elif path in self.created:  # check mode: a parent of an earlier entry, which would be created
            changed = False
        else:
            changed = True
            parent = path
            while not os.path.isdir(parent):
                self.created.add(parent)
                parent = os.path.dirname(parent)
            if not self.check:
                _files.make_dirs(path, "directories", int(item["mode"], 8) if item.get("mode") else 0o755)
                self.attrs(path, item, True)
        if changed:
            self.changed_files.append(path)

    def file(self, item: t.Mapping[str, t.Any]) -> bool:
        path = item["path"]
        content = to_bytes(item["content"], errors="surrogate_or_strict")
        directory = os.path.dirname(path)
        # Check mode: a directory this call would create, or one an earlier task of the run only pretended to create
        # (another role's, gpuhost_ensured_dirs), is not there yet; the real run writes the file (and fails on a
        # directory that is really missing).
        if self.check and (directory in self.created or not _files.check_directory(directory, "files")):
            result = _files.WriteResult(changed=True, content_changed=True, existed=False, diff=_files.make_diff(path, None, content))
        else:
            result = _files.write_file(self.module, path, content, backup=bool(item.get("backup")), what="files", file_args=False)
            if result.existed or not self.check:
                result.changed = self.attrs(path, item, result.changed)
        if result.changed:
            self.changed_files.append(path)
            if result.content_changed:
                self.diffs.append(result.diff)
        if result.backup_file:
            self.backups[path] = result.backup_file
        return result.content_changed

    def remove(self, path: str) -> None:
        if os.path.isdir(path) and not os.path.islink(path):
            left = set(os.listdir(path)) - {os.path.basename(p) for p in self.removed if os.path.dirname(p) == path}
            if left:
                return
            if not self.check:
                try:
                    os.rmdir(path)
                except OSError as exc:
                    self.fail("absent: directory %r cannot be removed: %s" % (path, exc.strerror or exc))
            self.removed.append(path)
            return
        before = _files.read_bytes(path, "absent") if os.path.lexists(path) else None
        if before is None:
            return
        if not self.check:
            _files.remove(path, "absent")
        self.removed.append(path)
        self.diffs.append({"before": before.decode("utf-8", errors="replace"), "after": "",
                           "before_header": path, "after_header": "%s (absent)" % path})

    def systemctl(self, *args: str) -> str:
        return self.command([self.module.get_bin_path("systemctl", required=True)] + list(args), "systemctl " + " ".join(args))

    def command(self, argv: list[str], label: str, environ: dict[str, str] | None = None, ok: tuple[int, ...] = (0,)) -> str:
        """Run ``argv``; fail naming ``label`` and what the command said unless its exit status is in ``ok``."""
        rc, out, err = self.module.run_command(argv, environ_update=environ or C_ENV)
        if rc not in ok:
            self.fail("%s failed: %s" % (label, (err or out).strip()), rc=rc, cmd=argv)
        return out

    def package_status(self, names: list[str]) -> dict[str, str]:
        argv = [self.module.get_bin_path("dpkg-query", required=True)] + _apt.status_argv(names)[1:]
        # rc 1 only says that some name is not installed: those print no line.
        return _apt.parse_status(self.command(argv, "dpkg-query", _apt.APT_ENV, ok=(0, 1)))

    def install(self, request: t.Mapping[str, t.Any]) -> tuple[dict[str, t.Any], str | None]:
        """The apt transaction of the specs the host does not satisfy (none: no apt-get); the result, and why it failed."""
        specs = request["install"]
        names = list(dict.fromkeys(_apt.split_spec(spec)[0] for spec in specs))
        # No names: nothing to ask (a dpkg-query without names would list every package).
        before = self.package_status(names) if names else {}
        left = _apt.specs_left(specs, before)
        result: dict[str, t.Any] = {"installed": left, "changed": bool(left), "before": {name: before.get(name) for name in names}}
        result["after"] = dict(result["before"])
        if not left:
            return result, None
        argv = [self.module.get_bin_path("apt-get", required=True)] + _apt.install_argv(left, request["allow_downgrade"], self.check)[1:]
        rc, out, err = self.module.run_command(argv, environ_update=_apt.APT_ENV)
        if rc != 0:
            lines = (err.strip() or out.strip()).splitlines()
            result.update(changed=False, rc=rc, stdout=out, stderr=err)
            return result, "apt-get install of %s failed (rc %d): %s" % (" ".join(left), rc, " ".join(lines[-5:]))
        if not self.check:
            after = self.package_status(names)
            result["after"] = {name: after.get(name) for name in names}
        return result, None

    def unit_states(self, names: list[str]) -> dict[str, dict[str, str]]:
        if not names:
            return {}
        argv = _converged.unit_command(names)
        return _converged.parse_units(names, self.systemctl(*argv[1:]))


def holds(unit: t.Mapping[str, t.Any], key: str, exists: t.Mapping[str, bool]) -> bool:
    """Whether the unit's ``start_if_exists`` or ``switch_if_exists`` condition holds (no condition holds)."""
    return not unit.get(key) or exists[unit[key]]


def check(module: AnsibleModule) -> list[str]:
    """Refuse the whole request, every problem at once, before anything is written: first what the request says
    (nothing read), then what the host says about each path, parent, owner and group (read only). Returns the notes
    of check mode (a directory that is missing now but that an earlier task of the run only pretended to create)."""
    params = module.params
    problems = _apply.check_request(params["directories"], params["files"], params["absent"], params["units"], params["packages"],
                                    params["regenerate"])
    if params["gpu_facts"] != "never":
        problems += _facts().root_errors(params["gpu_facts_root"], "gpu_facts_root")
    # The host is asked about the items the request check passed, so that every problem is reported in one go.
    found, notes = preflight(params, module.check_mode)
    problems += found
    if problems:
        module.fail_json(msg="gpuhost_apply: %s" % "; ".join(problems), problems=problems, changed_files=[], removed=[])
    return notes


def _account_problem(where: str, key: str, name: str | None) -> str | None:
    """Why the owner or group ``name`` cannot be set on this host; None when it can (or is not asked for)."""
    if name is None or name.isdigit():
        return None
    try:
        (pwd.getpwnam if key == "owner" else grp.getgrnam)(name)
    except KeyError:
        return "%s: %s %r is not a %s on this host: create it first, or give its numeric id" % (
            where, key, name, "user" if key == "owner" else "group")
    return None


def preflight(params: t.Mapping[str, t.Any], check_mode: bool) -> tuple[list[str], list[str]]:
    """Every path, parent, owner and group of the request checked against the host; nothing is written.

    A path where something else is (a directory where a file goes, a FIFO, a socket or a device, a dangling link, a
    path under a file) is refused by _files before anything opens it. A file's directory must exist or be in
    ``directories`` (or be a parent one of them creates); in check mode a missing one is a note instead, since an
    earlier task of the same run may only have pretended to create it.
    """
    problems: list[str] = []
    notes: list[str] = []
    made: set[str] = set()  # directories this call creates, with their missing parents
    for index, item in enumerate(params["directories"]):
        where = "directories[%d]" % index
        if _apply.path_problem(item["path"]) is not None:
            continue
        try:
            if not _files.check_directory(item["path"], where):
                path = item["path"]
                while path not in made and not os.path.isdir(path):
                    made.add(path)
                    path = os.path.dirname(path)
        except _files.FileError as exc:
            problems.append(str(exc))
    for index, item in enumerate(params["files"]):
        where = "files[%d]" % index
        if _apply.path_problem(item["path"]) is not None:
            continue
        directory = os.path.dirname(item["path"])
        try:
            _files.check_file(item["path"], where)
            if directory not in made and not _files.check_directory(directory, where):
                message = "%s: path %r: its directory %r does not exist and is not in directories" % (where, item["path"], directory)
                if check_mode:
                    notes.append("check mode: %s; the real run fails unless an earlier task creates it" % message)
                else:
                    problems.append(message + ": add it to directories")
        except _files.FileError as exc:
            problems.append(str(exc))
    for index, path in enumerate(params["absent"]):
        where = "absent[%d]" % index
        if _apply.path_problem(path) is not None:
            continue
        try:
            if not os.path.isdir(path) or os.path.islink(path):
                _files.check_file(path, where)  # a file, or a link to one; a FIFO, socket or device is refused
        except _files.FileError as exc:
            problems.append(str(exc))
    for kind in ("directories", "files"):
        for index, item in enumerate(params[kind]):
            for key in ("owner", "group"):
                problem = None if _apply.account_problem(item.get(key)) else _account_problem("%s[%d]" % (kind, index), key, item.get(key))
                if problem is not None:
                    problems.append(problem)
    return problems, notes


def _facts() -> t.Any:
    """The GPU facts code, imported only by a call that gathers them: the others do not compile it on the host."""
    from ansible_collections.gpuhost.nvidia.plugins.module_utils import _facts  # pylint: disable=import-outside-toplevel

    return _facts


def switch_units(run: Applier, units: list[dict[str, t.Any]], states: dict[str, dict[str, str]], written: dict[str, str],
                 exists: dict[str, bool]) -> tuple[dict[str, list[str]], dict[str, dict[str, str]], list[str], list[str]]:
    """Plan and switch each unit; the verbs done, the state each was left in, the notes, the missing units."""
    done: dict[str, list[str]] = {}
    after: dict[str, dict[str, str]] = {}
    notes: list[str] = []
    missing: list[str] = []
    for unit in units:
        name = unit["name"]
        state = states[name]
        if state.get("load") == "not-found" and _apply.needs_unit(unit):
            predicted = _apply.predicted_state(name, state, written, unit.get("package_default")) if run.check else None
            if predicted is None:
                if not run.check:
                    run.fail("unit %s is not installed: it cannot be enabled or started" % name, units=states)
                missing.append(name)
                done[name] = ["installed"]  # the real run must install it (or fails)
                continue
            state = states[name] = predicted
        start_ok = holds(unit, "start_if_exists", exists)
        switch_ok = holds(unit, "switch_if_exists", exists)
        verbs, left, unit_notes = _apply.plan_unit(unit, state, start_ok, switch_ok)
        if verbs[:1] == ["unmask"] and not run.check:
            run.systemctl("unmask", "--", name)
            left = run.unit_states([name])[name]  # the enablement the unmask uncovered
            rest, left, unit_notes = _apply.plan_unit(dict(unit, masked=None), left, start_ok, switch_ok)
            verbs = ["unmask"] + rest
            for verb in rest:
                run.systemctl(verb, "--", name)
        elif not run.check:
            for verb in verbs:
                run.systemctl(verb, "--", name)
        notes += unit_notes
        after[name] = left
        if verbs:
            done[name] = verbs
    return done, after, notes, missing


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
    check_notes = check(module)
    params = module.params
    run = Applier(module)
    units = params["units"]
    # Read before anything changes: a start or switch condition is about the host as the call found it.
    conditions = {unit[key] for unit in units for key in ("start_if_exists", "switch_if_exists") if unit.get(key)}
    exists = {path: os.path.exists(path) for path in conditions}
    try:
        for item in params["directories"]:
            run.directory(item)
        written = {}
        content_changed = []
        for item in params["files"]:
            if run.file(item):
                content_changed.append(item["path"])
            written[item["path"]] = item["content"]
        names = [unit["name"] for unit in units]
        states = run.unit_states(names)
        reloaded = any(_apply.is_unit_file(path) for path in content_changed)
        if reloaded and not run.check:
            run.systemctl("daemon-reload")
            states = run.unit_states(names)
        done, after, notes, missing = switch_units(run, units, states, {p: written[p] for p in content_changed}, exists)
        for path in params["absent"]:
            run.remove(path)
        if any(_apply.is_unit_file(path) for path in run.removed):
            reloaded = True
            if not run.check:
                run.systemctl("daemon-reload")
        changed_paths = set(run.changed_files) | set(run.removed)
        for unit in units:
            if unit["name"] in after and _apply.needs_restart(unit, done.get(unit["name"], []), after[unit["name"]], changed_paths,
                                                              holds(unit, "start_if_exists", exists)):
                if not run.check:
                    run.systemctl("restart", "--", unit["name"])
                done.setdefault(unit["name"], []).append("restart")
        packages, failure = run.install(params["packages"]) if params["packages"] else (None, None)
        regenerate = params["regenerate"]
        regenerated = _apply.regenerate_due(regenerate, changed_paths, bool(regenerate) and (
            not regenerate.get("if_exists") or os.path.exists(regenerate["if_exists"])))
        # Also when the install failed: the files it depends on changed, and the next run would find them unchanged.
        if regenerated and not run.check:
            run.command(list(regenerate["argv"]), " ".join(regenerate["argv"]))
        if failure is not None:
            run.fail(failure, packages=packages, regenerated=regenerated, changed_units=done)
    except _files.FileError as exc:
        run.fail(str(exc), path=exc.path)
    changed_units = {name: _apply.describe(verbs) for name, verbs in done.items()}
    changed = bool(run.changed_files or run.removed or changed_units or regenerated or (packages or {}).get("changed"))
    gathered = _apply.gpu_facts_due(params["gpu_facts"], packages)
    result: dict[str, t.Any] = dict(changed=changed, changed_files=run.changed_files, removed=run.removed, changed_units=changed_units,
                                    units=states, missing_units=missing, notes=check_notes + notes, daemon_reloaded=reloaded, backups=run.backups,
                                    packages=packages or {}, regenerated=regenerated, gpu_facts_gathered=gathered, diff=run.diffs)
    if gathered:
        # Last: the host as this call left it (the packages installed, the initramfs regenerated).
        result["ansible_facts"] = {"nvidia_gpu": _facts().gather_on_host(module, root=params["gpu_facts_root"])}
    module.exit_json(**result)


if __name__ == "__main__":
    main()
