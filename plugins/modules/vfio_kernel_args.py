#!/usr/bin/python
# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: vfio_kernel_args
short_description: Add kernel arguments to a bootloader's command-line file, and take exactly those away again
version_added: 0.1.0
description:
  - Ensures kernel arguments in C(GRUB_CMDLINE_LINUX) of C(/etc/default/grub) (any shell variable of a defaults file),
    or in a file that is the command line itself (C(/etc/kernel/cmdline), read by kernel-install and systemd-boot).
  - Adds only the arguments that are missing, never duplicates one, and keeps every other argument and its spacing.
    An argument with the same key and another value that the user wrote (C(iommu=soft) against C(iommu=pt)) is a
    conflict, and the module fails without changing anything.
  - Records the arguments it added in O(record), per file. O(state=absent) removes exactly those, so the file comes
    back byte for byte as it was; arguments that were there before are left alone. An argument of ours that is no
    longer asked for (a changed C(vfio-pci.ids=)) is replaced.
  - It edits the file only. Regenerating the bootloader's configuration (C(update-grub), C(grub2-mkconfig), grubby,
    C(kernel-install)) is the caller's job; RV(added) and RV(removed) say what to pass on.
author:
  - gpuhost.nvidia developers (@gpuhost)
attributes:
  check_mode:
    support: full
    description: Computes the new file and the diff without writing anything.
  diff_mode:
    support: full
    description: Shows the command-line file before and after.
  safe_file_operations:
    support: full
    description: Writes through a temporary file and an atomic move; the record likewise.
  platform:
    support: full
    platforms: posix
    description: Linux hosts.
options:
  path:
    description:
      - The file that holds the kernel command line. An absolute path of printable ASCII, without C(.) or C(..)
        components; a directory, a special file, a symbolic link to nothing or a path under a file is refused.
    type: path
    required: true
  variable:
    description:
      - The shell variable in O(path) that holds the command line. The last assignment is edited; it is appended when
        the file has none. A shell variable name (letters, digits and C(_), not starting with a digit).
      - The file must be certain to parse. Every quote and command substitution in it is closed, and each line that
        names the variable outside a comment is C(VARIABLE="..."), C(VARIABLE='...') or C(VARIABLE=word), maybe with
        C(export) and a trailing comment, or C(export VARIABLE). The value may not hold expansions, backslash escapes
        or characters outside printable ASCII. Any other file is refused and left as it is.
      - Empty for a file that is the command line itself, such as C(/etc/kernel/cmdline).
    type: str
    default: GRUB_CMDLINE_LINUX
  args:
    description:
      - The arguments to ensure (O(state=present)), each a whole token such as V(intel_iommu=on).
      - Each argument is printable ASCII of letters, digits, C(_), C(.), C(,), C(:), C(/), C(=), C(+), C(@), C(%) and
        C(-) only, starts with a parameter name and is at most 1024 characters long. Whitespace, quotes, C($), backticks, backslashes, C(;) and every
        other shell metacharacter are refused, naming the argument, because grub-mkconfig runs the file as shell.
        Give two arguments as two list items.
    type: list
    elements: str
    default: []
  state:
    description: V(present) ensures O(args); V(absent) removes the arguments that O(record) says this module added.
    type: str
    choices: [present, absent]
    default: present
  record:
    description: A JSON file recording, per O(path), the arguments this module added. Removed when it becomes empty.
    type: path
    default: /var/lib/gpuhost/vfio_kernel_args.json
  backup:
    description: Keep a timestamped copy of O(path) before changing it.
    type: bool
    default: true
seealso:
  - name: Kernel parameters (kernel.org)
    description: The IOMMU and vfio-pci parameters.
    link: https://www.kernel.org/doc/html/latest/admin-guide/kernel-parameters.html
  - module: gpuhost.nvidia.nvidia_gpu_facts
"""

EXAMPLES = r"""
- name: Turn the IOMMU on for the next boot
  gpuhost.nvidia.vfio_kernel_args:
    path: /etc/default/grub
    args: [intel_iommu=on, iommu=pt]
  register: kernel_args

- name: Regenerate the GRUB configuration when it changed
  ansible.builtin.command:
    argv: [update-grub]
  when: kernel_args is changed
  changed_when: true

- name: Take the arguments away again
  gpuhost.nvidia.vfio_kernel_args:
    path: /etc/kernel/cmdline
    variable: ""
    state: absent
"""

RETURN = r"""
cmdline:
  description: The command line in O(path) after the change (null with O(state=absent) or when O(path) is missing).
  returned: always
  type: str
  sample: quiet intel_iommu=on iommu=pt
added:
  description: The arguments this run added.
  returned: always
  type: list
  elements: str
  sample: [intel_iommu=on, iommu=pt]
removed:
  description: The arguments this run removed (ours only).
  returned: always
  type: list
  elements: str
  sample: []
ours:
  description: The arguments in O(path) that this module added, now and in earlier runs (what O(state=absent) removes).
  returned: always
  type: list
  elements: str
  sample: [intel_iommu=on, iommu=pt]
backup_file:
  description: The backup of O(path), when one was made.
  returned: changed and O(backup=true)
  type: str
  sample: /etc/default/grub.12345.2026-11-23@10:00:00~
"""

import os
import typing as t

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_bytes, to_text

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _files, _validate, _vfio

# Checked before the host is read. The arguments and the variable end up in a file that grub-mkconfig runs as shell.
RULES: dict[str, _validate.Rule] = {
    "path": _validate.Path(),
    "variable": _validate.Identifier(_validate.SHELL_VARIABLE_RE, "a shell variable name such as GRUB_CMDLINE_LINUX"),
    "args": _validate.ListOf(_validate.KernelArgument(), max_items=64),
    "record": _validate.Path(),
}


def check_options(params: dict[str, t.Any]) -> list[str]:
    """Everything wrong with the options, before anything is read from the host."""
    errors = _validate.check({k: v for k, v in params.items() if not (k == "variable" and v == "")}, RULES)
    if not errors and params["path"] == params["record"]:
        errors.append("record: %r is the command-line file itself; choose another file" % params["record"])
    return errors


def _added(value: t.Any) -> t.Any:
    """One file's entry of the record: the arguments the module added (a list), else skipped."""
    return [str(arg) for arg in value] if isinstance(value, list) else _files.SKIP


def load_record(path: str) -> dict[str, list[str]]:
    """The record, by command-line file. Raises FileError for a record that is not a JSON object."""
    return _files.read_file_record(path, _added)


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            variable=dict(type="str", default="GRUB_CMDLINE_LINUX"),
            args=dict(type="list", elements="str", default=[]),
            state=dict(type="str", choices=["present", "absent"], default="present"),
            record=dict(type="path", default=_files.STATE_DIR + "/vfio_kernel_args.json"),
            backup=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    params = module.params
    errors = check_options(params)
    if errors:
        module.fail_json(msg="; ".join(errors), errors=errors)
    path = os.path.abspath(params["path"])
    record_path = os.path.abspath(params["record"])

    # Plan.
    try:
        _files.check_file(path, "path")
        record = load_record(record_path)
        before = _files.read_bytes(path, "path")
    except _files.FileError as exc:
        module.fail_json(msg=str(exc), path=exc.path)
    content = to_text(before, errors="surrogate_or_strict") if before is not None else None
    planned = _vfio.plan_cmdline_file(content, params["variable"], params["args"], params["state"], record.get(path, []))
    if planned["errors"]:
        module.fail_json(msg="%s: %s" % (path, "; ".join(planned["errors"])), path=path, errors=planned["errors"])

    new_record = dict(record)
    if planned["ours"]:
        new_record[path] = planned["ours"]
    else:
        new_record.pop(path, None)

    result: dict[str, t.Any] = dict(changed=False, cmdline=planned["after"], added=planned["added"], removed=planned["removed"],
                                    ours=planned["ours"], diff={"before": "", "after": ""})
    # Act: the command-line file, then the record (check mode writes neither).
    if content is not None and planned["content"] != content:
        outcome = _files.write_file(module, path, to_bytes(planned["content"], errors="surrogate_or_strict"),
                                    backup=params["backup"], what="path")
        result["changed"] = outcome.changed
        result["diff"] = outcome.diff
        if outcome.backup_file:
            result["backup_file"] = outcome.backup_file
    try:
        if _files.write_file_record(module, record_path, record, new_record):
            result["changed"] = True
    except _files.FileError as exc:
        module.fail_json(msg=str(exc), path=exc.path)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
