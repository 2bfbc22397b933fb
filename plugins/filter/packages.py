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

from ansible_collections.gpuhost.nvidia.plugins.plugin_utils._filter_args import guarded

# apt's and pacman's name=version (or a version glob): the part before the first "=" is the package name. A dnf
# name-version cannot be told from a name with dashes, so it stays whole (and never matches a recorded name).
_VERSIONED = re.compile(r"^([^=<>\s]+)=")
# What may reach a package manager's command line from a plan: a Debian/RPM/Arch package name, optionally with apt's or
# pacman's =version (a glob allowed).
_ENTRY = re.compile(r"[a-z0-9][a-z0-9+._-]{0,127}(=[0-9A-Za-z.+~:*-]{1,64})?\Z")
_REQUEST_KEYS = {"role", "userland", "packages", "pending", "first_install", "files", "absent"}
# A request's apt preferences files (its hold, written by the driver's pin call before the transaction): a file apt reads
# from preferences.d (letters, digits, _ - . and the .pref extension), and only the lines apt_preferences(5) knows - a
# comment, a blank line between entries, and the four fields with values of their kind (exact package names, never globs).
_PREF_PATH = re.compile(r"/etc/apt/preferences\.d/[A-Za-z0-9][A-Za-z0-9_.-]{0,120}\.pref\Z")
_PREF_LINE = re.compile(
    r"(|#[^\x00-\x1f\x7f]{0,500}|Explanation: [^\x00-\x1f\x7f]{1,500}|Package: [a-z0-9][a-z0-9+._-]{0,127}( [a-z0-9][a-z0-9+._-]{0,127}){0,63}"
    r"|Pin: version [0-9A-Za-z.+~:*-]{1,64}|Pin-Priority: -?[0-9]{1,4})\Z")


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


def _plan_files(request: dict[str, t.Any], where: str) -> tuple[list[dict[str, str]], list[str]]:
    """A request's apt preferences files to write (path, content) and to remove (paths), checked."""
    files, absent = request.get("files") or [], request.get("absent") or []
    if not isinstance(files, (list, tuple)) or not isinstance(absent, (list, tuple)):
        raise AnsibleFilterError(f"{where}: files and absent must be lists, got {files!r} and {absent!r}")
    for number, item in enumerate(files):
        if not isinstance(item, dict) or set(item) != {"path", "content"} or not all(isinstance(v, str) for v in item.values()):
            raise AnsibleFilterError(f"{where}.files[{number}]: expected a mapping of path and content (strings), got {item!r}")
    bad_paths = [path for path in [item["path"] for item in files] + list(absent) if not isinstance(path, str) or not _PREF_PATH.match(path)]
    if bad_paths:
        raise AnsibleFilterError(f"{where}: not apt preferences files (/etc/apt/preferences.d/NAME.pref, NAME of letters, "
                                 f"digits, _ - .): {', '.join(map(repr, bad_paths))}")
    for number, item in enumerate(files):
        bad = [line for line in item["content"].split("\n")[:-1] if not _PREF_LINE.match(line)]
        if not item["content"].endswith("\n") or bad:
            raise AnsibleFilterError(
                f"{where}.files[{number}] ({item['path']}): not an apt preferences file of exact package names: "
                + (", ".join(map(repr, bad)) if bad else "no newline at its end")
                + ". Only comments, blank lines and Explanation, Package (names), Pin (version) and Pin-Priority lines are written.")
    return [dict(item, owner="root", group="root", mode="0644") for item in files], list(absent)


def package_plan(plan: t.Any, userland: t.Any = None, installed: t.Any = None) -> dict[str, list[t.Any]]:
    """What the driver's transaction takes from gpuhost_package_plan: checked, then split into install and predicted.

    Each request is a mapping: ``role`` (who asks), ``packages`` (entries), ``userland`` (also the driver's userland
    entries, ``userland``), ``pending`` (check mode: the entries' repository exists only in the prediction, so they are
    reported, not given to the package manager) and ``first_install`` (names: the request is left to its role when one
    of them is ``installed`` already, so that a version move stays with the role that holds the version), and ``files``
    and ``absent`` (apt preferences files to write, path and content, and to remove: the request's hold, written by the
    driver's pin call before the transaction when the request is taken; returned as ``files``, root:root 0644, and
    ``absent``).
    """
    if plan is None:
        plan = []
    if not isinstance(plan, (list, tuple)):
        raise AnsibleFilterError(f"gpuhost_package_plan: expected a list of requests, got {plan!r}")
    userland_entries = _entries(userland, "package_plan userland")
    present = set(_entries(installed, "package_plan installed"))
    result: dict[str, list[t.Any]] = {"install": [], "predicted": [], "roles": [], "files": [], "absent": []}
    for index, request in enumerate(plan):
        where = f"gpuhost_package_plan[{index}]"
        if not isinstance(request, dict):
            raise AnsibleFilterError(f"{where}: expected a mapping (role, packages, userland, pending, first_install, files, absent), got {request!r}")
        unknown = sorted(set(map(str, request)) - _REQUEST_KEYS)
        if unknown:
            raise AnsibleFilterError(f"{where}: unknown keys {', '.join(unknown)} (known: {', '.join(sorted(_REQUEST_KEYS))})")
        entries = _plan_names(request, "packages", where)
        first_install = _plan_names(request, "first_install", where)
        files, absent = _plan_files(request, where)
        if any(name in present for name in first_install):
            continue
        if request.get("userland"):
            entries = userland_entries + entries
        target = result["predicted"] if request.get("pending") else result["install"]
        for entry in entries:
            if entry not in result["install"] and entry not in result["predicted"]:
                target.append(entry)
        result["roles"].append(str(request.get("role") or where))
        result["files"].extend(files)
        result["absent"].extend(absent)
    return result


class FilterModule:
    def filters(self) -> dict[str, t.Callable[..., t.Any]]:
        return guarded({
            "packages_to_ensure": packages_to_ensure,
            "packages_ensured": packages_ensured,
            "package_plan": package_plan,
        })
