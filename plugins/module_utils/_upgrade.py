# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The rolling upgrade's targets and driver post-check (playbooks/upgrade.yml): pure functions.

Private to this collection: no compatibility promise outside gpuhost.nvidia.

:func:`targets` checks the roll's targets (the roles' own variables) before the roll touches a host. :func:`check_driver`
compares what the host really has after the upgrade with the target: the versions of the driver's packages in the
package manager's database, the version of the installed ``libnvidia-ml.so.<version>`` and the loaded kernel module's
version (the GPU facts gathered after the upgrade). Whatever it cannot see counts against the host: a post-check that
passes because it read nothing would let a broken host back into service.
"""

from __future__ import annotations

import re
import typing as t
from collections.abc import Mapping, Sequence

# ASCII digits only (\d takes any script's digits); matched with fullmatch only ("$" matches before a trailing newline).
DRIVER_VERSION_RE = re.compile(r"([0-9]{3})\.[0-9]{1,3}(?:\.[0-9]{1,3})?")
BRANCH_RE = re.compile(r"[0-9]{3}")
TOOLKIT_VERSION_RE = re.compile(r"[0-9]{1,4}(?:\.[0-9]{1,4}){1,3}(?:-[0-9A-Za-z.~+]{1,32})?")
# An installed package's version as apt, dnf/rpm and pacman print it: an optional epoch, the upstream version, then a
# revision or distribution suffix (-1, -1~deb12u1, -0ubuntu0.24.04.2, ~rc1).
PACKAGE_VERSION_RE = re.compile(r"(?:[0-9]{1,9}:)?([0-9]{1,9}(?:\.[0-9]{1,9}){0,3})(?:[-~+][0-9A-Za-z.~+:-]{0,64})?")
# A package name as apt, rpm and pacman allow it.
PACKAGE_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9+._@-]{0,127}")
# The collection's role variables these targets come from, for the messages.
DRIVER_VERSION_VAR = "nvidia_driver_version"
DRIVER_BRANCH_VAR = "nvidia_driver_branch"
TOOLKIT_VERSION_VAR = "nvidia_container_toolkit_version"


def _text(value: t.Any, name: str, errors: list[str], numbers: bool = False) -> str:
    """``value`` as a stripped string ('' for none); a type that is no version at all is an error naming ``name``."""
    if value is None:
        return ""
    if isinstance(value, bool) or not isinstance(value, (str, int) if numbers else str):
        errors.append(
            "%s must be a %s string such as %s, got %s %r: quote it in YAML"
            % (name, "branch or version" if numbers else "version", "580" if numbers else "580.95.05", type(value).__name__, value)
        )
        return ""
    # The role strips the same variables before it reads them: agree with it.
    return str(value).strip(" \t")


def targets(driver_version: t.Any, driver_branch: t.Any, toolkit_version: t.Any) -> tuple[dict[str, str], list[str]]:
    """The roll's targets, checked: ``{driver_version, driver_branch, toolkit_version}`` ('' where none is set), and
    every error at once, each naming the variable, the value and what it should look like.

    ``nvidia_driver_branch`` may hold an exact version (580.95.05), as the driver role allows; the branch of an exact
    version is its first number.
    """
    errors: list[str] = []
    version = _text(driver_version, DRIVER_VERSION_VAR, errors)
    branch = _text(driver_branch, DRIVER_BRANCH_VAR, errors, numbers=True)
    toolkit = _text(toolkit_version, TOOLKIT_VERSION_VAR, errors)
    if version and not DRIVER_VERSION_RE.fullmatch(version):
        errors.append("%s must be a full driver version such as 580.95.05, got %r" % (DRIVER_VERSION_VAR, version))
        version = ""
    if branch and "." in branch:
        if not DRIVER_VERSION_RE.fullmatch(branch):
            errors.append("%s must be a branch such as 580 or a full version such as 580.95.05, got %r" % (DRIVER_BRANCH_VAR, branch))
        elif version and version != branch:
            errors.append("%s %s and %s %s name two different drivers: set one" % (DRIVER_VERSION_VAR, version, DRIVER_BRANCH_VAR, branch))
        else:
            version = branch
        branch = ""
    elif branch and not BRANCH_RE.fullmatch(branch):
        errors.append("%s must be a branch such as 580 or a full version such as 580.95.05, got %r" % (DRIVER_BRANCH_VAR, branch))
        branch = ""
    if version:
        if branch and version.split(".", maxsplit=1)[0] != branch:
            errors.append("%s %s is not on %s %s" % (DRIVER_VERSION_VAR, version, DRIVER_BRANCH_VAR, branch))
        branch = version.split(".", maxsplit=1)[0]
    if toolkit and not TOOLKIT_VERSION_RE.fullmatch(toolkit):
        errors.append("%s must be a version such as 1.18.0, got %r" % (TOOLKIT_VERSION_VAR, toolkit))
        toolkit = ""
    return {"driver_version": version, "driver_branch": branch, "toolkit_version": toolkit}, errors


def upstream(version: t.Any) -> str | None:
    """The upstream part of an installed package's version (``3:580.65.06`` -> ``580.65.06``, ``580.159.04-1`` ->
    ``580.159.04``, ``535.261.03-1~deb12u1`` -> ``535.261.03``); None when it is not a version."""
    if not isinstance(version, str):
        return None
    match = PACKAGE_VERSION_RE.fullmatch(version)
    return match.group(1) if match else None


def _matches(found: str, driver_version: str, driver_branch: str) -> bool:
    if driver_version:
        return found == driver_version
    if driver_branch:
        return found.split(".", maxsplit=1)[0] == driver_branch
    return True


def _target_text(driver_version: str, driver_branch: str) -> str:
    return driver_version or ("branch " + driver_branch if driver_branch else "")


def installed_versions(packages: Mapping[str, t.Any], names: Sequence[str]) -> tuple[list[tuple[str, str, str]], list[str]]:
    """``(name, as installed, upstream)`` for every installed version of the named packages (package_facts' layout:
    a list of ``{version: ...}`` per name), and the problems: a package that is not installed, a version that is none."""
    found: list[tuple[str, str, str]] = []
    problems: list[str] = []
    for name in names:
        entries = packages.get(name)
        if not entries:
            problems.append("the driver's package %s is not installed" % name)
            continue
        if isinstance(entries, Mapping) or not isinstance(entries, Sequence) or isinstance(entries, str):
            entries = [entries]
        for entry in entries:
            raw = entry.get("version") if isinstance(entry, Mapping) else None
            version = upstream(raw)
            if version is None:
                problems.append("the driver's package %s has the version %r, which is no version" % (name, raw))
                continue
            found.append((name, raw, version))
    return found, problems


def check_driver(
    facts: Mapping[str, t.Any],
    packages: Mapping[str, t.Any],
    names: Sequence[str],
    wanted: Mapping[str, str],
    check_loaded: bool = True,
    packages_before: Mapping[str, t.Any] | None = None,
    facts_before: Mapping[str, t.Any] | None = None,
) -> dict[str, t.Any]:
    """The driver post-check of one host.

    ``facts`` are the GPU facts gathered after the upgrade, ``packages`` the package database read after it
    (``ansible_facts.packages``), ``names`` the packages that carry the driver (the driver role's
    ``nvidia_driver_userland.packages``; empty when the role did not run here), ``wanted`` the checked targets
    (:func:`targets`). With ``check_loaded`` the loaded kernel module must be the target (and the installed driver)
    too; without it (a container, where no module can load) only what is installed is compared.

    Returns ``{ok, installed, loaded, before, seen, errors}``: ``installed`` the one version the driver's packages and
    library show (None when they disagree or show nothing), ``loaded`` the loaded module's version, ``before`` the
    installed version before the upgrade (``packages_before``, else the earlier facts' driver version), ``seen`` what
    was compared, one line each.
    """
    driver_version = wanted.get("driver_version") or ""
    driver_branch = wanted.get("driver_branch") or ""
    target = _target_text(driver_version, driver_branch)
    errors: list[str] = []
    driver = facts.get("driver") if isinstance(facts.get("driver"), Mapping) else {}

    found, problems = installed_versions(packages, names)
    errors.extend(problems)
    seen = ["package %s %s" % (name, raw) for name, raw, _version in found]
    library = driver.get("library_version")
    if library not in (None, ""):
        version = upstream(library)
        if version is None:
            errors.append("the installed libnvidia-ml.so has the version %r, which is no version" % (library,))
        else:
            found.append(("libnvidia-ml.so", library, version))
            seen.append("libnvidia-ml.so.%s" % library)
    if not found and not problems:
        errors.append(
            "no installed driver to compare with the target: no package of the driver is known here (the nvidia_driver "
            "role did not run on this host, or it skipped it) and no libnvidia-ml.so.<version> was found"
        )
    versions = sorted({version for _name, _raw, version in found})
    installed = versions[0] if len(versions) == 1 and not problems else None
    if target:
        wrong = ["%s %s" % (name, raw) for name, raw, version in found if not _matches(version, driver_version, driver_branch)]
        if wrong:
            errors.append("the installed driver is not the target %s: %s" % (target, ", ".join(wrong)))
    elif len(versions) > 1:
        errors.append("the installed driver is not one version: %s" % ", ".join("%s %s" % (name, raw) for name, raw, _v in found))

    loaded = None
    if check_loaded:
        loaded, loaded_errors = _check_loaded(facts, driver, driver_version, driver_branch, installed)
        errors.extend(loaded_errors)
        if loaded:
            seen.append("loaded module %s" % loaded)

    return {
        "ok": not errors,
        "installed": installed,
        "loaded": loaded,
        "before": _before(packages_before, names, facts_before),
        "seen": seen,
        "errors": errors,
    }


def _check_loaded(
    facts: Mapping[str, t.Any], driver: Mapping[str, t.Any], driver_version: str, driver_branch: str, installed: str | None
) -> tuple[str | None, list[str]]:
    target = _target_text(driver_version, driver_branch)
    state = facts.get("state") or "unknown"
    if driver.get("kernel_module_loaded") is not True:
        seen = "no NVIDIA GPU on the PCI bus" if facts.get("present") is False else "the GPU facts state %s" % state
        return None, [
            "the nvidia kernel module is not loaded (%s), so the running driver cannot be compared with the %s; load it "
            "(gpuhost_upgrade_reboot: if_needed reboots when the driver moved), or set gpuhost_upgrade_check_loaded: false "
            "only where no kernel module can load (a container)" % (seen, "target " + target if target else "installed driver")
        ]
    raw = driver.get("kernel_module_version")
    loaded = raw.strip() if isinstance(raw, str) else None
    if not loaded or not DRIVER_VERSION_RE.fullmatch(loaded):
        return None, ["the nvidia kernel module is loaded but its version cannot be read (%r): nothing shows it is the target" % (raw,)]
    errors = []
    if target and not _matches(loaded, driver_version, driver_branch):
        errors.append("the loaded nvidia kernel module is %s, not the target %s: the new module loads at the next boot" % (loaded, target))
    elif installed and loaded != installed:
        errors.append("the loaded nvidia kernel module is %s but the installed driver is %s: the new module loads at the next boot"
                      % (loaded, installed))
    return loaded, errors


def _before(packages_before: Mapping[str, t.Any] | None, names: Sequence[str], facts_before: Mapping[str, t.Any] | None) -> str | None:
    """The installed driver before the upgrade, for the roll's table: the packages' versions, else the facts'."""
    if packages_before:
        found, _problems = installed_versions(packages_before, names)
        versions = sorted({version for _name, _raw, version in found})
        if versions:
            return " / ".join(versions)
    driver = (facts_before or {}).get("driver")
    version = driver.get("version") if isinstance(driver, Mapping) else None
    return version if isinstance(version, str) and version else None


def check_toolkit(packages: Mapping[str, t.Any], toolkit_version: str, name: str = "nvidia-container-toolkit") -> tuple[str | None, list[str]]:
    """The toolkit package's installed version (as installed, None when not one) and why it is not ``toolkit_version``:
    that version exactly, or that version with any package revision (1.18.0 is 1.18.0-1)."""
    entries = packages.get(name)
    if not entries:
        return None, ["%s is not installed, not the target %s" % (name, toolkit_version)]
    if isinstance(entries, Mapping) or not isinstance(entries, Sequence) or isinstance(entries, str):
        entries = [entries]
    raws = [entry.get("version") if isinstance(entry, Mapping) else None for entry in entries]
    wrong = [raw for raw in raws if not isinstance(raw, str) or not (raw == toolkit_version or raw.startswith(toolkit_version + "-"))]
    installed = raws[0] if len(set(map(str, raws))) == 1 and isinstance(raws[0], str) else None
    if wrong:
        return installed, ["%s is %s, not the target %s" % (name, ", ".join(repr(r) if not isinstance(r, str) else r for r in wrong), toolkit_version)]
    return installed, []


def post_check(
    facts: Mapping[str, t.Any],
    packages: Mapping[str, t.Any],
    wanted: Mapping[str, str],
    driver: bool = True,
    toolkit: bool = True,
    names: Sequence[str] = (),
    check_loaded: bool = True,
    packages_before: Mapping[str, t.Any] | None = None,
    facts_before: Mapping[str, t.Any] | None = None,
) -> dict[str, t.Any]:
    """The whole post-check of one host: the driver (:func:`check_driver`) when ``driver``, the toolkit package when
    ``toolkit`` and a toolkit target is set. ``{ok, errors, driver_before, driver_after, loaded, toolkit_after, seen}``."""
    result: dict[str, t.Any] = {"errors": [], "seen": [], "driver_before": None, "driver_after": None, "loaded": None,
                                "toolkit_after": None}
    if driver:
        checked = check_driver(facts, packages, names, wanted, check_loaded, packages_before, facts_before)
        result.update(driver_before=checked["before"], driver_after=checked["installed"], loaded=checked["loaded"],
                      seen=checked["seen"])
        result["errors"].extend(checked["errors"])
    if toolkit and wanted.get("toolkit_version"):
        result["toolkit_after"], toolkit_errors = check_toolkit(packages, wanted["toolkit_version"])
        result["errors"].extend(toolkit_errors)
    result["ok"] = not result["errors"]
    return result


def check_packages_arguments(packages: t.Any, names: t.Any) -> list[str]:
    """What is wrong with the package database and the package names handed to :func:`check_driver`."""
    errors = []
    if packages is not None and not isinstance(packages, Mapping):
        errors.append("packages must be the package database (ansible_facts.packages, a dict), got %s" % type(packages).__name__)
    if names is None:
        return errors
    if isinstance(names, (str, bytes, Mapping)) or not isinstance(names, Sequence):
        errors.append("names must be a list of package names, got %s" % type(names).__name__)
        return errors
    for name in names:
        if not isinstance(name, str) or not PACKAGE_NAME_RE.fullmatch(name):
            errors.append("names: %r is not a package name" % (name,))
    return errors
