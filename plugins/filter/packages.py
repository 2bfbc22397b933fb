# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Shared prerequisites, installed once per host: packages_to_ensure, packages_ensured.

The host fact ``gpuhost_ensured_packages`` lists the package names that an earlier role of the run already ensured
(installed, or predicted in check mode). A role subtracts it from what it would install (packages_to_ensure), skips
its install task when nothing is left, and adds what it ensured (packages_ensured). Their documentation is in the
sidecar .yml files.
"""

from __future__ import annotations

import re
import typing as t

from ansible.errors import AnsibleFilterError

# apt's and pacman's name=version (or a version glob): the part before the first "=" is the package name. A dnf
# name-version cannot be told from a name with dashes, so it stays whole (and never matches a recorded name).
_VERSIONED = re.compile(r"^([^=<>\s]+)=")


def _entries(value: t.Any, what: str) -> list[str]:
    """A list of package entries; None is empty, a single string is one entry."""
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise AnsibleFilterError(f"{what}: expected a list of package names, got {type(value).__name__}")
    return [str(item) for item in value if item is not None and str(item) != ""]


def package_name(entry: str) -> str:
    """The package name of an entry: apt's and pacman's name=version without the version."""
    match = _VERSIONED.match(entry)
    return match.group(1) if match else entry


def packages_to_ensure(packages: t.Any, ensured: t.Any = None) -> list[str]:
    """The entries of packages that no earlier role ensured, in their order, without repeats.

    An entry counts as ensured only when it is itself in the list: a bare name that an earlier role ensured is left
    out; an entry with a version (name=1.2.3, name=535.*) stays unless an earlier role ensured that same entry, version
    and all, so a requested version is never skipped for a package ensured at another version or at none.
    """
    done = set(_entries(ensured, "packages_to_ensure ensured"))
    result: list[str] = []
    for entry in _entries(packages, "packages_to_ensure"):
        if entry not in done and entry not in result:
            result.append(entry)
    return result


def packages_ensured(ensured: t.Any, packages: t.Any) -> list[str]:
    """The new value of gpuhost_ensured_packages: the list so far plus the names of packages, and each versioned entry
    (name=535.*) whole as well, so that a later role asking for the same name at the same version leaves it out."""
    result = _entries(ensured, "packages_ensured")
    for entry in _entries(packages, "packages_ensured packages"):
        for item in dict.fromkeys((package_name(entry), entry)):
            if item not in result:
                result.append(item)
    return result


class FilterModule:
    def filters(self) -> dict[str, t.Callable[..., t.Any]]:
        return {
            "packages_to_ensure": packages_to_ensure,
            "packages_ensured": packages_ensured,
        }
