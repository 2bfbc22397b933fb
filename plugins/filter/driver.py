# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Driver filters: nvidia_driver_plan, nvidia_driver_transaction, nvidia_driver_candidate_errors, nvidia_driver_packages, nvidia_driver_versionlock,
nvidia_driver_move, nvidia_driver_package_specs, nvidia_driver_lockstep, nvidia_driver_lockstep_hold, nvidia_driver_dnf_versions,
nvidia_driver_dkms_lines, nvidia_driver_module_params_file, nvidia_driver_absent_plan.

The key fingerprint filters are in gpg.py.

Their documentation is in the sidecar .yml files. The decisions live in module_utils/_driver.py. The role makes two
calls per run: nvidia_driver_plan (with its package tables) before any change, and nvidia_driver_transaction once the
repositories answered; the other filters are the single steps of these two, kept for playbooks that call them.
State absent makes one: nvidia_driver_absent_plan.
"""

from __future__ import annotations

import typing as t

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuhost.nvidia.plugins.plugin_utils._filter_args import gpu_facts, guarded, mapping, sequence
from ansible_collections.gpuhost.nvidia.plugins.plugin_utils._lazy import module_utils

# Imported when a filter of this file first runs, not when Ansible loads the file (plugin_utils/_lazy.py).
_driver = module_utils("_driver")
_packages = None
_kernels = module_utils("_kernels")
_nvreg = module_utils("_nvreg")


PLAN_FIX = "pass the result of gpuhost.nvidia.nvidia_driver_plan"


def _plan(plan: t.Any, name: str) -> t.Mapping[str, t.Any]:
    """A driver plan, as nvidia_driver_plan returns it: its branch (three digits) and version (580.65.06) checked, since
    every decision after it compares them as numbers."""
    plan_map = mapping(plan, "%s plan" % name)
    branch = plan_map.get("branch")
    if branch is not None and (isinstance(branch, (bool, float)) or _driver.parse_branch(branch) is None
                               or str(_driver.parse_branch(branch)) != str(branch).strip()):
        raise AnsibleFilterError("%s: plan.branch must be a driver branch such as 580, got %r: %s" % (name, branch, PLAN_FIX))
    version = plan_map.get("version")
    if version not in (None, "") and (not isinstance(version, str) or not _driver.is_driver_version(version)):
        raise AnsibleFilterError("%s: plan.version must be a driver version such as 580.65.06, got %r: %s" % (name, version, PLAN_FIX))
    return plan_map


def nvidia_driver_plan(request: t.Any, facts: t.Any = None, host: t.Any = None, capabilities: t.Any = None, packages: t.Any = None) -> dict[str, t.Any]:
    """What the nvidia_driver role installs, and every reason it must stop (``errors``); with ``packages`` (the role's
    package tables and settings), a plan that acts also names its packages (``packages``)."""
    facts_map = gpu_facts(facts, "nvidia_driver_plan facts")
    host_map = mapping(host, "nvidia_driver_plan host")
    result = _driver.plan(
        mapping(request, "nvidia_driver_plan request"),
        facts_map,
        host_map,
        mapping(capabilities, "nvidia_driver_plan capabilities"),
    )
    if packages is None or not result["act"] or result["errors"]:
        return result
    settings = dict(mapping(packages, "nvidia_driver_plan packages"))
    tables = mapping(settings.get("tables"), "nvidia_driver_plan packages.tables")
    settings["headers"] = _headers_settings(settings.get("headers"))
    kernels = facts_map.get("kernels") or {}
    host_packages = {**host_map, "kernel_flavour": settings.get("kernel_flavour"),
                     "kernels_installed": kernels.get("installed") if isinstance(kernels, t.Mapping) else None}
    try:
        result["packages"] = _driver.plan_packages(result, tables, host_packages, settings)
    except ValueError as exc:
        raise AnsibleFilterError("nvidia_driver_plan: %s" % exc) from None
    return result


def _headers_settings(value: t.Any) -> dict[str, t.Any]:
    """The plan's headers settings (``packages.headers``), each checked: flags are true or false, packages are lists of
    package names."""
    headers = dict(mapping(value, "nvidia_driver_plan packages.headers"))
    for key in ("install", "installed", "offered"):
        if headers.get(key) is not None and not isinstance(headers[key], bool):
            raise AnsibleFilterError("nvidia_driver_plan: packages.headers.%s must be true or false, got %r" % (key, headers[key]))
    for key in ("running", "follow"):
        items = sequence(headers.get(key), "nvidia_driver_plan: packages.headers.%s" % key, "pass a list of package names")
        bad = [item for item in items if not isinstance(item, str)]
        if bad:
            raise AnsibleFilterError("nvidia_driver_plan: packages.headers.%s must be a list of package names, got %r: pass a list of "
                                     "package names" % (key, bad[0]))
        headers[key] = items
    return headers


TXN = "nvidia_driver_transaction"
NAMES_FIX = "pass a list of package names"


def _names(value: t.Any, what: str) -> list[str]:
    """A list of package names (None: empty), each a string; anything else fails naming the argument."""
    items = sequence(value, "%s: %s" % (TXN, what), NAMES_FIX)
    bad = [item for item in items if not isinstance(item, str)]
    if bad:
        raise AnsibleFilterError("%s: %s must be a list of package names, got %r: %s" % (TXN, what, bad[0], NAMES_FIX))
    return items


def _flag(value: t.Any, what: str) -> bool:
    if value is not None and not isinstance(value, bool):
        raise AnsibleFilterError("%s: %s must be true or false, got %r" % (TXN, what, value))
    return bool(value)


def _text(value: t.Any, what: str) -> str:
    if value is not None and not isinstance(value, str):
        raise AnsibleFilterError("%s: %s must be a string, got %r" % (TXN, what, value))
    return value or ""


def _answers(host: t.Mapping[str, t.Any], pkg_mgr: str) -> dict[str, t.Any]:
    """The host's answers, each checked: the installed packages in package_facts' form, the repositories' answer."""
    installed = mapping(host.get("installed"), "%s host.installed" % TXN)
    for name, entries in installed.items():
        for entry in sequence(entries, "%s: host.installed[%r]" % (TXN, name), "pass the packages of gpuhost.nvidia.nvidia_driver_host"):
            if not isinstance(entry, t.Mapping) or not isinstance(entry.get("version", ""), str):
                raise AnsibleFilterError("%s: host.installed[%r] must be a list of {name, version} entries, got %r: pass the packages of "
                                         "gpuhost.nvidia.nvidia_driver_host" % (TXN, name, entry))
    offered = host.get("offered")
    if isinstance(offered, (list, tuple)) and pkg_mgr == "apt":
        for row in offered:
            if not isinstance(row, (list, tuple)) or not all(isinstance(field, str) for field in row):
                raise AnsibleFilterError("%s: host.offered rows must be [name, version, source] strings, got %r" % (TXN, row))
    else:
        offered = _text(offered, "host.offered")
    return {"installed": installed, "offered": offered, "asked": _names(host.get("asked"), "host.asked"),
            "repo_pending": _flag(host.get("repo_pending"), "host.repo_pending"),
            "hold_pending": _flag(host.get("hold_pending"), "host.hold_pending"), "check_mode": _flag(host.get("check_mode"), "host.check_mode")}


RECORD_PATH_KEYS = ("pin", "versionlock", "dnf_module", "repo", "key", "keyring")


def _record_paths(value: t.Any) -> dict[str, t.Any]:
    """The files the converged record may list (``role.record_paths``): each an absolute path or "" (none here), and
    ``modprobe`` a list of absolute paths."""
    paths = dict(mapping(value, "%s role.record_paths" % TXN))
    for key in RECORD_PATH_KEYS:
        path = _text(paths.get(key), "role.record_paths.%s" % key)
        if path and not path.startswith("/"):
            raise AnsibleFilterError("%s: role.record_paths.%s must be an absolute path or \"\", got %r" % (TXN, key, path))
        paths[key] = path
    modprobe = _names(paths.get("modprobe"), "role.record_paths.modprobe")
    relative = [path for path in modprobe if not path.startswith("/")]
    if relative:
        raise AnsibleFilterError("%s: role.record_paths.modprobe must be a list of absolute paths, got %r" % (TXN, relative[0]))
    paths["modprobe"] = modprobe
    return paths


def _transaction_role(role: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    request = mapping(role.get("request"), "%s role.request" % TXN)
    return dict(role, record_paths=_record_paths(role.get("record_paths")), candidate_package=_text(role.get("candidate_package"), "role.candidate_package"),
                install=_names(role.get("install"), "role.install"), pin=_flag(role.get("pin"), "role.pin"),
                dnf_modules=_flag(role.get("dnf_modules"), "role.dnf_modules"),
                request={"cuda_version": _text(request.get("cuda_version"), "role.request.cuda_version"),
                         "cuda_minor_version_compatibility": _flag(request.get("cuda_minor_version_compatibility"),
                                                                   "role.request.cuda_minor_version_compatibility")},
                headers_running=_names(role.get("headers_running"), "role.headers_running"),
                headers_follow=_names(role.get("headers_follow"), "role.headers_follow"),
                userland=_names(role.get("userland"), "role.userland"))


def _resolved(packages: t.Any) -> dict[str, t.Any]:
    resolved = dict(mapping(packages, "%s packages" % TXN))
    for key in ("userspace", "hold", "pin", "settings", "fabric_manager", "nscq", "nvlsm", "install"):
        resolved[key] = _names(resolved.get(key), "packages.%s" % key)
    resolved["pinning"] = _text(resolved.get("pinning"), "packages.pinning")
    return resolved


def nvidia_driver_transaction(plan: t.Any, host: t.Any = None, role: t.Any = None) -> dict[str, t.Any]:
    """The plan met with the host's answers: the move, the candidate errors, the install specs with what the roles after
    this one asked for, Fabric Manager's lockstep and its hold, in one call."""
    plan_map = _plan(plan, "nvidia_driver_transaction")
    host_map = mapping(host, "nvidia_driver_transaction host")
    role_map = mapping(role, "nvidia_driver_transaction role")
    pkg_mgr = role_map.get("pkg_mgr")
    if pkg_mgr not in ("apt", "dnf", "pacman"):
        raise AnsibleFilterError("nvidia_driver_transaction: role.pkg_mgr must be apt, dnf or pacman, got %r" % (pkg_mgr,))
    if not (role_map.get("packages") or plan_map.get("packages")):
        raise AnsibleFilterError("nvidia_driver_transaction: the plan names no packages: pass the plan of gpuhost.nvidia.nvidia_driver_plan "
                                 "called with its packages argument (or role.packages)")
    resolved = _resolved(role_map.get("packages") or plan_map.get("packages"))
    answers = _answers(host_map, pkg_mgr)
    installed = answers["installed"]
    role_map = _transaction_role(role_map)
    try:
        result = _driver.transaction(plan_map, resolved, answers, role_map)
    except ValueError as exc:
        raise AnsibleFilterError("nvidia_driver_transaction: %s" % exc) from None
    # The requests of the roles after this one ride along only on an install at the branch's candidate: a move or an
    # exact version leaves them to their roles, which install them at the version the move settles.
    taken = {"install": [], "predicted": [], "roles": [], "files": [], "absent": []}
    if result["takes_requests"]:
        taken = _package_plan()(role_map.get("requests") or [], role_map.get("userland") or [], list(installed))
    result["taken"] = taken
    result.update(_driver.transaction_specs(result, taken, pkg_mgr, role_map.get("install")))
    return result


def _package_plan() -> t.Callable[..., dict[str, list[t.Any]]]:
    """The package_plan filter (plugins/filter/packages.py), which checks what the roles after this one ask for."""
    global _packages  # pylint: disable=global-statement
    if _packages is None:
        from ansible_collections.gpuhost.nvidia.plugins.filter import packages as _packages_filter  # pylint: disable=import-outside-toplevel
        _packages = _packages_filter
    return _packages.package_plan


def nvidia_driver_candidate_errors(plan: t.Any, candidate: t.Any, request: t.Any = None, source_label: str = "") -> list[str]:
    """Why the version the package manager offers does not fit the plan (empty when it does)."""
    return _driver.check_candidate(_plan(plan, "nvidia_driver_candidate_errors"), candidate,
                                   mapping(request, "nvidia_driver_candidate_errors request"), str(source_label or ""))


def nvidia_driver_packages(plan: t.Any, table: t.Any = None, host: t.Any = None) -> dict[str, t.Any]:
    """The package names of one source's table for the plan's branch, version and flavour (and what the pin holds)."""
    return _driver.resolve_packages(
        mapping(plan, "nvidia_driver_packages plan"), mapping(table, "nvidia_driver_packages table"), mapping(host, "nvidia_driver_packages host")
    )


def nvidia_driver_versionlock(names: t.Any, plan: t.Any = None, style: str = "dnf4") -> list[t.Any]:
    """dnf versionlock entries holding ``names`` at the plan's branch or version: dnf4 lock-list lines or dnf5 entries."""
    plan_map = _plan(plan, "nvidia_driver_versionlock")
    if not plan_map.get("version") and plan_map.get("branch") in (None, ""):
        raise AnsibleFilterError("nvidia_driver_versionlock: the plan has neither a branch nor a version to hold")
    try:
        if style == "dnf4":
            return _driver.versionlock_dnf4(names, plan_map)
        if style == "dnf5":
            return _driver.versionlock_dnf5(names, plan_map)
    except ValueError as exc:
        raise AnsibleFilterError("nvidia_driver_versionlock: %s" % exc) from None
    raise AnsibleFilterError("nvidia_driver_versionlock: style must be dnf4 or dnf5, got %r" % (style,))


def nvidia_driver_move(plan: t.Any, installed: t.Any = None, candidates: t.Any = None) -> dict[str, t.Any]:
    """What happens to the installed driver (kept, installed, moved up or down), with a summary such as "570.172.08 -> 580.65.06"."""
    return _driver.plan_move(_plan(plan, "nvidia_driver_move"), installed, candidates)


def nvidia_driver_package_specs(names: t.Any, version: t.Any = None, pkg_mgr: str = "apt", exact: t.Any = None) -> list[str]:
    """Package specs asking the package manager for ``names`` at one driver version (apt name=V, dnf name-V)."""
    if pkg_mgr not in ("apt", "dnf", "pacman"):
        raise AnsibleFilterError("nvidia_driver_package_specs: pkg_mgr must be apt, dnf or pacman, got %r" % (pkg_mgr,))
    return _driver.package_specs(names, version, pkg_mgr, exact)


def nvidia_driver_lockstep(plan: t.Any, move: t.Any = None, packages: t.Any = None, installed: t.Any = None, pkg_mgr: str = "apt") -> dict[str, t.Any]:
    """Fabric Manager and NSCQ at the driver's exact version, NVLSM beside them, and the other branch's packages to remove."""
    return _driver.plan_lockstep(
        _plan(plan, "nvidia_driver_lockstep"), mapping(move, "nvidia_driver_lockstep move"),
        mapping(packages, "nvidia_driver_lockstep packages"), installed, pkg_mgr,
    )


def nvidia_driver_lockstep_hold(names: t.Any, version: t.Any = None) -> dict[str, t.Any]:
    """Fabric Manager and NSCQ held at the driver's exact version: apt preferences stanzas, dnf4 and dnf5 versionlock entries."""
    try:
        return _driver.lockstep_hold(names, version)
    except ValueError as exc:
        raise AnsibleFilterError("nvidia_driver_lockstep_hold: %s" % exc) from exc


def nvidia_driver_dnf_versions(output: t.Any, name: str = "") -> list[str]:
    """The versions of one package in dnf4 or dnf5 ``list``/``repoquery`` output, as dnf printed them."""
    if not name:
        raise AnsibleFilterError("nvidia_driver_dnf_versions: name the package whose versions to read")
    return _driver.dnf_versions(output, name)


def nvidia_driver_dkms_lines(registrations: t.Any) -> list[str]:
    """One line per DKMS registration of the GPU facts (``kernels.dkms``), as ``dkms status`` sums it up."""
    if registrations is not None and not isinstance(registrations, list):
        raise AnsibleFilterError("nvidia_driver_dkms_lines: expected the list ansible_facts.nvidia_gpu.kernels.dkms, got %s"
                                 % type(registrations).__name__)
    for index, entry in enumerate(registrations or []):
        if not isinstance(entry, t.Mapping):
            raise AnsibleFilterError("nvidia_driver_dkms_lines: registrations[%d] must be a dict {module, version, built, installed}, got %r: "
                                     "pass ansible_facts.nvidia_gpu.kernels.dkms" % (index, entry))
        for key in ("built", "installed"):
            kernels = entry.get(key)
            if kernels is not None and (not isinstance(kernels, list) or not all(isinstance(k, str) for k in kernels)):
                raise AnsibleFilterError("nvidia_driver_dkms_lines: registrations[%d].%s must be a list of kernel releases, got %r: "
                                         "pass ansible_facts.nvidia_gpu.kernels.dkms" % (index, key, kernels))
    return _kernels.dkms_lines(registrations)


def nvidia_driver_module_params_file(params: t.Any) -> str:
    """The modprobe.d file for nvidia_driver_module_params (an ``options nvidia`` line); "" for none. Refuses what
    the role's first check refuses, so nothing unchecked reaches the file."""
    errors = _nvreg.errors(params)
    if errors:
        raise AnsibleFilterError("nvidia_driver_module_params_file: %s" % "; ".join(errors))
    return _nvreg.content(params)


def nvidia_driver_absent_plan(tables: t.Any, installed: t.Any = None, fabric_manager_service: t.Any = "") -> dict[str, t.Any]:
    """What state absent removes: the package names to look for (every name of the package tables), the driver's
    daemons, and with ``installed`` (the host read's packages) the installed ones to remove."""
    tables_map = mapping(tables, "nvidia_driver_absent_plan tables")
    installed_map = None if installed is None else mapping(installed, "nvidia_driver_absent_plan installed")
    if fabric_manager_service is not None and not isinstance(fabric_manager_service, str):
        raise AnsibleFilterError("nvidia_driver_absent_plan: fabric_manager_service must be a unit name, got %r" % (fabric_manager_service,))
    return _driver.absent_plan(tables_map, installed_map, fabric_manager_service or "")


class FilterModule:
    def filters(self) -> dict[str, t.Callable[..., t.Any]]:
        return guarded({
            "nvidia_driver_plan": nvidia_driver_plan,
            "nvidia_driver_transaction": nvidia_driver_transaction,
            "nvidia_driver_candidate_errors": nvidia_driver_candidate_errors,
            "nvidia_driver_packages": nvidia_driver_packages,
            "nvidia_driver_versionlock": nvidia_driver_versionlock,
            "nvidia_driver_move": nvidia_driver_move,
            "nvidia_driver_package_specs": nvidia_driver_package_specs,
            "nvidia_driver_lockstep": nvidia_driver_lockstep,
            "nvidia_driver_lockstep_hold": nvidia_driver_lockstep_hold,
            "nvidia_driver_dnf_versions": nvidia_driver_dnf_versions,
            "nvidia_driver_dkms_lines": nvidia_driver_dkms_lines,
            "nvidia_driver_module_params_file": nvidia_driver_module_params_file,
            "nvidia_driver_absent_plan": nvidia_driver_absent_plan,
        })
