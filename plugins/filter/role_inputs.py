# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The roles' first-task checks of the variables that reach files, units and commands (role_input_errors), and the
quoting of one ExecStart= argument (systemd_quote). Their documentation is in the sidecar .yml files; the rules live
in module_utils/_role_inputs.py."""

from __future__ import annotations

import typing as t

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuhost.nvidia.plugins.plugin_utils._filter_args import guarded, mapping, plain
from ansible_collections.gpuhost.nvidia.plugins.plugin_utils._lazy import module_utils

# Imported when a filter of this file first runs, not when Ansible loads the file (plugin_utils/_lazy.py).
_role_inputs = module_utils("_role_inputs")


def role_input_errors(values: t.Any, role: str, package_manager: t.Any = None, kind: t.Any = None) -> list[str]:
    """Every problem of a role's variables that reach a file, a unit or a command."""
    variables = plain(dict(mapping(values, "role_input_errors")))
    context = {"package_manager": str(package_manager) if package_manager else None, "kind": str(kind) if kind else None}
    try:
        return list(_role_inputs.role_errors(str(role), variables, context))
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def systemd_quote(value: t.Any) -> str:
    """One ExecStart= argument, quoted by systemd's rules."""
    try:
        return str(_role_inputs.systemd_quote(value))
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule:
    def filters(self) -> dict[str, t.Callable[..., t.Any]]:
        return guarded({
            "role_input_errors": role_input_errors,
            "systemd_quote": systemd_quote,
        })
