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
    description: The file that holds the kernel command line.
    type: path
    required: true
  variable:
    description:
      - The shell variable in O(path) that holds the command line. The last assignment is edited; it is appended when
        the file has none.
      - Empty for a file that is the command line itself, such as C(/etc/kernel/cmdline).
    type: str
    default: GRUB_CMDLINE_LINUX
  args:
    description: The arguments to ensure (O(state=present)), each a whole token such as V(intel_iommu=on).
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

import json
import os
import typing as t

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_bytes, to_text

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _files, _vfio


def _load_record(module: AnsibleModule, path: str) -> dict[str, list[str]]:
    data = _files.read_bytes(path)
    if data is None:
        return {}
    try:
        record = json.loads(to_text(data))
    except ValueError as exc:
        module.fail_json(msg="%s is not valid JSON (%s): fix or remove it" % (path, exc), record=path)
    if not isinstance(record, dict):
        module.fail_json(msg="%s does not hold a JSON object: fix or remove it" % path, record=path)
    return {str(k): [str(a) for a in v] for k, v in record.items() if isinstance(v, list)}


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            variable=dict(type="str", default="GRUB_CMDLINE_LINUX"),
            args=dict(type="list", elements="str", default=[]),
            state=dict(type="str", choices=["present", "absent"], default="present"),
            record=dict(type="path", default="/var/lib/gpuhost/vfio_kernel_args.json"),
            backup=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    params = module.params
    path = os.path.abspath(params["path"])
    record_path = os.path.abspath(params["record"])

    # Plan.
    record = _load_record(module, record_path)
    before = _files.read_bytes(path)
    content = to_text(before) if before is not None else None
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
        outcome = _files.write_file(module, path, to_bytes(planned["content"]), backup=params["backup"])
        result["changed"] = outcome.changed
        result["diff"] = outcome.diff
        if outcome.backup_file:
            result["backup_file"] = outcome.backup_file
    if new_record != record:
        result["changed"] = True
        if not module.check_mode:
            if new_record:
                os.makedirs(os.path.dirname(record_path), mode=0o755, exist_ok=True)
                _files.write_file(module, record_path, to_bytes(json.dumps(new_record, indent=2, sort_keys=True) + "\n"))
            elif os.path.exists(record_path):
                os.unlink(record_path)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
