# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Shared prerequisites, installed once per host: packages_to_ensure, packages_ensured, package_plan.

The host fact ``gpuhost_ensured_packages`` lists the package names that an earlier role of the run already ensured
(installed, or predicted in check mode). A role subtracts it from what it would install (packages_to_ensure), skips
its install task when nothing is left, and adds what it ensured (packages_ensured). The host fact
``gpuhost_package_plan`` lists what later roles ask the driver's install transaction to install (package_plan). Their
documentation is in the sidecar .yml files.
"""

from __future__ import annotations

import re
import typing as t

from ansible.errors import AnsibleFilterError

# apt's and pacman's name=version (or a version glob): the part before the first "=" is the package name. A dnf
# name-version cannot be told from a name with dashes, so it stays whole (and never matches a recorded name).
_VERSIONED = re.compile(r"^([^=<>\s]+)=")
# What may reach a package manager's command line from a plan: a Debian/RPM/Arch package name, optionally with apt's or
# pacman's =version (a glob allowed).
_ENTRY = re.compile(r"[a-z0-9][a-z0-9+._-]{0,127}(=[0-9A-Za-z.+~:*-]{1,64})?\Z")
_REQUEST_KEYS = {"role", "userland", "packages", "pending", "first_install"}


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


def _plan_names(request: dict[str, t.Any], key: str, where: str) -> list[str]:
    value = request.get(key) or []
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise AnsibleFilterError(f"{where}.{key}: expected a list of package names, got {value!r}")
    bad = [item for item in value if not isinstance(item, str) or not _ENTRY.match(item)]
    if bad:
        raise AnsibleFilterError(f"{where}.{key}: not package names (name or name=version): {', '.join(map(repr, bad))}")
    return list(value)


def package_plan(plan: t.Any, userland: t.Any = None, installed: t.Any = None) -> dict[str, list[str]]:
    """What the driver's transaction takes from gpuhost_package_plan: checked, then split into install and predicted.

    Each request is a mapping: ``role`` (who asks), ``packages`` (entries), ``userland`` (also the driver's userland
    entries, ``userland``), ``pending`` (check mode: the entries' repository exists only in the prediction, so they are
    reported, not given to the package manager) and ``first_install`` (names: the request is left to its role when one
    of them is ``installed`` already, so that a version move stays with the role that holds the version).
    """
    if plan is None:
        plan = []
    if not isinstance(plan, (list, tuple)):
        raise AnsibleFilterError(f"gpuhost_package_plan: expected a list of requests, got {plan!r}")
    userland_entries = _entries(userland, "package_plan userland")
    present = set(_entries(installed, "package_plan installed"))
    result: dict[str, list[str]] = {"install": [], "predicted": [], "roles": []}
    for index, request in enumerate(plan):
        where = f"gpuhost_package_plan[{index}]"
        if not isinstance(request, dict):
            raise AnsibleFilterError(f"{where}: expected a mapping (role, packages, userland, pending, first_install), got {request!r}")
        unknown = sorted(set(map(str, request)) - _REQUEST_KEYS)
        if unknown:
            raise AnsibleFilterError(f"{where}: unknown keys {', '.join(unknown)} (known: {', '.join(sorted(_REQUEST_KEYS))})")
        entries = _plan_names(request, "packages", where)
        first_install = _plan_names(request, "first_install", where)
        if any(name in present for name in first_install):
            continue
        if request.get("userland"):
            entries = userland_entries + entries
        target = result["predicted"] if request.get("pending") else result["install"]
        for entry in entries:
            if entry not in result["install"] and entry not in result["predicted"]:
                target.append(entry)
        result["roles"].append(str(request.get("role") or where))
    return result


class FilterModule:
    def filters(self) -> dict[str, t.Callable[..., t.Any]]:
        return {
            "packages_to_ensure": packages_to_ensure,
            "packages_ensured": packages_ensured,
            "package_plan": package_plan,
        }
