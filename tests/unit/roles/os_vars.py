# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The per-OS variable files a role loads, resolved as the internal common role's ``tasks/vars.yml`` resolves them.

The candidate names and the rule (every candidate that exists, in order; ``default.yml`` only when none does) are read
from the common role's own ``vars/main.yml`` and templated with Ansible's templar, so a changed layering shows up here.
"""

from __future__ import annotations

import pathlib
import typing as t

import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

ROLES = pathlib.Path(__file__).resolve().parents[3] / "roles"
COMMON = ROLES / "internal_common"

# The facts of each supported distribution (and of two that no role names, which get default.yml).
HOSTS: dict[str, dict[str, str]] = {
    "debian12": {"distribution": "Debian", "os_family": "Debian", "distribution_major_version": "12", "distribution_version": "12.8"},
    "debian13": {"distribution": "Debian", "os_family": "Debian", "distribution_major_version": "13", "distribution_version": "13.1"},
    "ubuntu2204": {"distribution": "Ubuntu", "os_family": "Debian", "distribution_major_version": "22", "distribution_version": "22.04"},
    "ubuntu2404": {"distribution": "Ubuntu", "os_family": "Debian", "distribution_major_version": "24", "distribution_version": "24.04"},
    "rocky8": {"distribution": "Rocky", "os_family": "RedHat", "distribution_major_version": "8", "distribution_version": "8.10"},
    "rocky9": {"distribution": "Rocky", "os_family": "RedHat", "distribution_major_version": "9", "distribution_version": "9.6"},
    "rocky10": {"distribution": "Rocky", "os_family": "RedHat", "distribution_major_version": "10", "distribution_version": "10.0"},
    "rhel8": {"distribution": "RedHat", "os_family": "RedHat", "distribution_major_version": "8", "distribution_version": "8.10"},
    "rhel9": {"distribution": "RedHat", "os_family": "RedHat", "distribution_major_version": "9", "distribution_version": "9.6"},
    "rhel10": {"distribution": "RedHat", "os_family": "RedHat", "distribution_major_version": "10", "distribution_version": "10.0"},
    "alma9": {"distribution": "AlmaLinux", "os_family": "RedHat", "distribution_major_version": "9", "distribution_version": "9.6"},
    "fedora41": {"distribution": "Fedora", "os_family": "RedHat", "distribution_major_version": "41", "distribution_version": "41"},
    "fedora42": {"distribution": "Fedora", "os_family": "RedHat", "distribution_major_version": "42", "distribution_version": "42"},
    "arch": {"distribution": "Archlinux", "os_family": "Archlinux", "distribution_major_version": "", "distribution_version": ""},
    "arch_na": {"distribution": "Archlinux", "os_family": "Archlinux", "distribution_major_version": "NA", "distribution_version": "NA"},
    "sles15": {"distribution": "SLES", "os_family": "Suse", "distribution_major_version": "15", "distribution_version": "15.6"},
    "gentoo": {"distribution": "Gentoo", "os_family": "Gentoo", "distribution_major_version": "2", "distribution_version": "2.17"},
}


def common_vars() -> dict[str, t.Any]:
    """The common role's vars/main.yml, its strings trusted as templates (as Ansible trusts a role's own files)."""
    values = yaml.safe_load((COMMON / "vars" / "main.yml").read_text(encoding="utf-8"))
    return {name: trust_as_template(value) if isinstance(value, str) else value for name, value in values.items()}


def files(role: str, facts: dict[str, str]) -> list[str]:
    """The vars files the common role loads for ``role`` on a host with ``facts``, in load order (names only)."""
    variables = dict(common_vars(), ansible_facts=facts, ansible_parent_role_paths=[str(ROLES / role)],
                     ansible_parent_role_names=["gpuhost.nvidia." + role])
    templar = Templar(loader=DataLoader(), variables=variables)
    paths = templar.template(trust_as_template("{{ __internal_common_vars_files }}"))
    return [pathlib.Path(path).name for path in paths]


def resolve(role: str, facts: dict[str, str]) -> dict[str, t.Any]:
    """The variables those files set: each file in turn, a later file's top-level key replacing an earlier one's."""
    merged: dict[str, t.Any] = {}
    for name in files(role, facts):
        merged.update(yaml.safe_load((ROLES / role / "vars" / name).read_text(encoding="utf-8")) or {})
    return merged
