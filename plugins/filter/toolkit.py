# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Container toolkit filters: nvidia_container_toolkit_errors, nvidia_container_toolkit_version, nvidia_node_labels,
nvidia_node_labels_file, nvidia_container_restarts, nvidia_container_toolkit_rootless_plan.

Their documentation is in the sidecar .yml files. The decisions live in module_utils/_toolkit.py, (the node labels)
module_utils/_labels.py, (the restarts) module_utils/_engine_restart.py and (the rootless users)
module_utils/_rootless.py.
"""

from __future__ import annotations

import math
import typing as t

from ansible.errors import AnsibleFilterError
from ansible.utils.display import Display

from ansible_collections.gpuhost.nvidia.plugins.plugin_utils._filter_args import gpu_facts, guarded, mapping, sequence
from ansible_collections.gpuhost.nvidia.plugins.plugin_utils._lazy import module_utils

# Imported when a filter of this file first runs, not when Ansible loads the file (plugin_utils/_lazy.py).
_toolkit = module_utils("_toolkit")
_toolkit_config = module_utils("_toolkit_config")
_engine_restart = module_utils("_engine_restart")
_labels = module_utils("_labels")
_rootless = module_utils("_rootless")

display = Display()


def nvidia_container_toolkit_errors(request: t.Any) -> list[str]:
    """Everything wrong with the toolkit request before the host is asked anything."""
    request_map = mapping(request, "nvidia_container_toolkit_errors")
    return _toolkit.request_errors(request_map) + _toolkit_config.role_settings_errors(request_map.get("settings"))


def nvidia_container_toolkit_version(offered: t.Any, request: t.Any, source: str = "the repository") -> dict[str, t.Any]:
    """The offered version to install for the request, and every reason it cannot be installed."""
    request_map = mapping(request, "nvidia_container_toolkit_version request")
    if isinstance(offered, str):
        offered = offered.split()
    offered = sequence(offered, "nvidia_container_toolkit_version offered", "give the versions the repository offers, as a list")
    version, errors = _toolkit.pick_version([str(item) for item in offered if item is not None], str(request_map.get("version") or ""), source)
    if version is not None:
        errors = errors + _toolkit.candidate_errors(version, request_map)
    return {"version": version, "upstream": _toolkit.upstream(version) if version else None, "errors": errors}


def nvidia_node_labels(facts: t.Any, toolkit_version: t.Any = None, gfd_deployed: t.Any = False, machine: t.Any = None) -> dict[str, str]:
    """Kubernetes node labels from the GPU facts: GFD's (unless GFD is deployed) and the collection's own. Every value
    that cannot be a valid label fails the filter, naming it; why labels were left out is a warning."""
    if not isinstance(gfd_deployed, bool):
        raise AnsibleFilterError("nvidia_node_labels: gfd_deployed must be true or false, got %r" % (gfd_deployed,))
    if toolkit_version is not None and not isinstance(toolkit_version, str):
        raise AnsibleFilterError("nvidia_node_labels: toolkit_version must be a version string such as 1.17.8, got %s"
                                 % type(toolkit_version).__name__)
    if machine is not None and not isinstance(machine, str):
        raise AnsibleFilterError("nvidia_node_labels: machine must be the DMI product name (a string), got %s" % type(machine).__name__)
    try:
        labels, notes = _labels.node_labels(gpu_facts(facts, "nvidia_node_labels"), toolkit_version or None, gfd_deployed, machine or None)
    except _labels.LabelError as exc:
        raise AnsibleFilterError("nvidia_node_labels: %s" % exc) from None
    for note in notes:
        display.warning("nvidia_node_labels: %s" % note)
    return labels


def nvidia_node_labels_file(labels: t.Any, header: t.Any = "") -> str:
    """The labels as a Node Feature Discovery feature file (one name=value a line); refuses anything that would add,
    split or change a line."""
    if not isinstance(header, str):
        raise AnsibleFilterError("nvidia_node_labels_file: header must be a string of # comment lines, got %s" % type(header).__name__)
    try:
        return _labels.features_file(mapping(labels, "nvidia_node_labels_file"), header)
    except _labels.LabelError as exc:
        raise AnsibleFilterError("nvidia_node_labels_file: %s" % exc) from None


def nvidia_container_restarts(engines: t.Any, policy: str = "always") -> dict[str, t.Any]:
    """Which engines restart now, are left pending or only need a restart, from the states gpuhost.nvidia's
    nvidia_container_runtime module returned with each merge (its ``engine``): the restart decision without a remote
    call. Each pending or needed restart, and each engine systemd could not be asked about, is also a warning."""
    if policy not in _engine_restart.POLICIES:
        raise AnsibleFilterError("nvidia_container_restarts: policy must be one of %s, got %r" % (", ".join(_engine_restart.POLICIES), policy))
    if not isinstance(engines, (list, tuple)):
        raise AnsibleFilterError("nvidia_container_restarts: expected the list of the runtime merges' engine states, got %s"
                                 % type(engines).__name__)
    states, problems = [], []
    for index, engine in enumerate(engines):
        state = mapping(engine, "nvidia_container_restarts engines[%d]" % index)
        missing = [key for key in _engine_restart.STATE_KEYS if key not in state]
        if missing or not isinstance(state["name"], str) or state["name"] not in _engine_restart.ENGINES:
            raise AnsibleFilterError("nvidia_container_restarts engines[%d]: not an engine state of nvidia_container_runtime "
                                     "(missing %s, or an unknown engine %r)" % (index, ", ".join(missing) or "nothing", state.get("name")))
        for key in ("newest", "started"):
            value = state[key]
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)):
                raise AnsibleFilterError("nvidia_container_restarts engines[%d].%s: a time in seconds or null, as "
                                         "nvidia_container_runtime returns it, not %r" % (index, key, value))
        states.append({key: state[key] for key in _engine_restart.STATE_KEYS})
        if state.get("problem") and state["problem"] not in problems:
            problems.append(state["problem"])
    live_restore = any(state.get("name") == "docker" and state.get("live_restore") is True for state in engines)
    # if_idle needs the GPU containers, which only the nvidia_container_restart_plan module reads: here every due
    # restart is left pending, saying so.
    unknown = "the GPU processes were not read (the nvidia_container_restart_plan module reads them)" if policy == "if_idle" else None
    result = _engine_restart.plan(policy, states, [], unknown, live_restore)
    result["messages"] = problems + result["messages"]
    for message in result["messages"]:
        display.warning(message)
    return result


def nvidia_container_toolkit_rootless_plan(request: t.Any, passwd: t.Any = None, subuid: t.Any = None,
                                           subgid: t.Any = None) -> dict[str, t.Any]:
    """The rootless Docker and Podman users' work, from the request, getent's passwd facts and the text of
    /etc/subuid and /etc/subgid; every problem among its errors. Each warning is also shown."""
    request_map = mapping(request, "nvidia_container_toolkit_rootless_plan request")
    passwd_map = mapping(passwd, "nvidia_container_toolkit_rootless_plan passwd")
    for name, value in (("subuid", subuid), ("subgid", subgid)):
        if value is not None and not isinstance(value, str):
            raise AnsibleFilterError("nvidia_container_toolkit_rootless_plan: %s must be the text of /etc/%s or null (no "
                                     "file), got %s" % (name, name, type(value).__name__))
    runtimes = sequence(request_map.get("runtimes"), "nvidia_container_toolkit_rootless_plan request.runtimes",
                        "give the rootful engines as a list")
    result = _rootless.plan(dict(request_map, runtimes=runtimes), passwd_map, subuid, subgid)
    for warning in result["warnings"]:
        display.warning("nvidia_container_toolkit: %s" % warning)
    return result


class FilterModule:
    def filters(self) -> dict[str, t.Callable[..., t.Any]]:
        return guarded({
            "nvidia_container_toolkit_errors": nvidia_container_toolkit_errors,
            "nvidia_container_toolkit_version": nvidia_container_toolkit_version,
            "nvidia_node_labels": nvidia_node_labels,
            "nvidia_node_labels_file": nvidia_node_labels_file,
            "nvidia_container_restarts": nvidia_container_restarts,
            "nvidia_container_toolkit_rootless_plan": nvidia_container_toolkit_rootless_plan,
        })
