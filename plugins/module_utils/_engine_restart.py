# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Whether a container engine whose configuration changed may restart now: restarts that don't surprise (issue 20).

Private to this collection: no compatibility promise outside gpuhost.nvidia.

Pure functions, and one host read both modules share: ``engine_states`` (the units' state from one ``systemctl show``,
and the newest mtime of each engine's configuration files), through the module that calls it. ``nvidia_container_runtime``
returns its engine's state with the merge (the role's plan is then a filter, no remote call of its own);
``nvidia_container_restart_plan`` reads the states and the GPU containers for ``if_idle``.

- ``container_of(cgroup_text)``: the container a process runs in, from ``/proc/<pid>/cgroup``. The path shapes are the
  ones the engines create (docs/sources.md, "Container cgroup paths"): Docker ``docker-<id>.scope`` (systemd cgroup
  driver, also under ``kubepods.slice`` with dockershim) or ``/docker/<id>`` (cgroupfs driver); containerd's CRI
  ``cri-containerd-<id>.scope`` (or ``<slice>:cri-containerd:<id>`` in a cgroup v1 hierarchy); CRI-O ``crio-<id>.scope``
  or ``.../pod<uid>/crio-<id>`` (``crio-conmon-<id>`` is CRI-O's monitor, not a container); podman ``libpod-<id>.scope``;
  and the kubelet's cgroupfs layout ``/kubepods[/<qos>]/pod<uid>/<id>``, which does not name the engine.
- ``parse_systemctl_show``: the units' state and start time from one ``systemctl show`` call.
- ``plan``: per engine, restart now, restart pending (``if_idle`` while containers it would stop use a GPU), restart
  needed (``never``), or nothing (not running, or its configuration is not newer than the running process).
"""

from __future__ import annotations

import json
import os
import re
import time
import typing as t

from ansible_collections.gpuhost.nvidia.plugins.module_utils._gpu_schema import describe_unknown, process_view

ENGINES = {"docker": "docker.service", "containerd": "containerd.service", "crio": "crio.service", "kubelet": "kubelet.service",
           # k3s and RKE2 run the kubelet and their own containerd in one service (server or agent), which renders
           # containerd's configuration from its template when it starts.
           "k3s": "k3s.service", "k3s-agent": "k3s-agent.service", "rke2-server": "rke2-server.service",
           "rke2-agent": "rke2-agent.service"}
POLICIES = ("if_idle", "always", "never")
# What systemctl show is asked for each unit.
PROPERTIES = "Id,ActiveState,ExecMainStartTimestampMonotonic,ActiveEnterTimestampMonotonic"
# The keys of one engine's state (engine_states), which plan() reads.
STATE_KEYS = ("name", "unit", "active", "changed", "newest", "started")

_ID = r"([0-9a-f]{64})"
_END = r"(?:\.scope)?(?:/|$)"
# (pattern, engine), first match wins. Each pattern is searched in a cgroup path.
_SHAPES: tuple[tuple[t.Pattern[str], str], ...] = (
    (re.compile(r"(?:^|/)docker-" + _ID + r"\.scope(?:/|$)"), "docker"),
    (re.compile(r"^/docker/" + _ID + r"(?:/|$)"), "docker"),
    (re.compile(r"(?:^|/)cri-containerd-" + _ID + _END), "containerd"),
    (re.compile(r":cri-containerd:" + _ID + r"(?:/|$)"), "containerd"),
    (re.compile(r"(?:^|/)crio-" + _ID + _END), "crio"),
    (re.compile(r"(?:^|/)libpod-" + _ID + r"\.scope(?:/|$)"), "podman"),
    (re.compile(r"^/kubepods(?:/[a-z]+)?/pod[0-9a-f_-]+/" + _ID + r"(?:/|$)"), "kubernetes"),
)

# Which containers a restart of an engine would stop. Docker stops its own containers when dockerd stops, unless
# live-restore is on. containerd and CRI-O: their own containers, and the kubelet's cgroupfs containers, which do not
# say which of the two runs them. Podman has no daemon to restart.
# The kubelet's pods keep running while it restarts, but it re-admits them and re-registers the device plugin when it
# comes back: it is treated as one of their engines, so that it never restarts under a GPU pod (or unknown GPU work).
_STOPS = {"docker": ("docker",), "containerd": ("containerd", "kubernetes"), "crio": ("crio", "kubernetes"),
          "kubelet": ("containerd", "crio", "kubernetes")}
_STOPS.update({name: ("containerd", "kubernetes") for name in ("k3s", "k3s-agent", "rke2-server", "rke2-agent")})


def container_of(cgroup_text: str) -> dict[str, str] | None:
    """The container a process runs in, from the text of ``/proc/<pid>/cgroup``: {engine, id, cgroup}, or None.

    The cgroup v2 line (``0::<path>``) is read first, then the v1 hierarchies in file order.
    """
    paths = []
    for line in (cgroup_text or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            paths.insert(0, parts[2].strip())
        else:
            paths.append(parts[2].strip())
    for path in paths:
        for pattern, engine in _SHAPES:
            match = pattern.search(path)
            if match:
                return {"engine": engine, "id": match.group(1), "cgroup": path}
    return None


def gpu_processes(facts: t.Any) -> tuple[list[dict[str, t.Any]], str | None]:
    """The GPU processes the facts list, and why they cannot all be known (None when they can).

    The facts' own reading (_gpu_schema.process_view): unknown when the facts are missing or malformed, were gathered
    without ``processes``, or a GPU's processes could not be read (null, ``processes_error``), its state is not ok, or
    it is bound to nvidia but unlisted. Never raises, whatever ``facts`` holds.
    """
    view = process_view(facts)
    found = [{"pid": proc["pid"], "name": proc.get("name") if isinstance(proc.get("name"), str) else None, "gpu": proc["gpu"]}
             for proc in view["processes"]]
    if view["unknown"]:
        return found, "the GPU processes cannot be read (%s)" % describe_unknown(view["unknown"])
    return found, None


def describe(container: dict[str, t.Any]) -> str:
    """``containerd container c74b0f5062f0 (nvidia-smi, pid 4242, GPU 0)``."""
    return "%s container %s (%s, pid %s, GPU %s)" % (container["engine"], container["id"][:12], container.get("name") or "?",
                                                     container["pid"], container.get("gpu"))


def parse_systemctl_show(text: str) -> dict[str, dict[str, str]]:
    """``systemctl show --property=Id,... unit...``: one block of KEY=VALUE lines per unit, blank lines between."""
    units: dict[str, dict[str, str]] = {}
    block: dict[str, str] = {}
    for line in (text or "").splitlines() + [""]:
        if not line.strip():
            if block.get("Id"):
                units[block["Id"]] = block
            block = {}
            continue
        key, sep, value = line.partition("=")
        if sep:
            block[key.strip()] = value.strip()
    return units


def start_time(unit: dict[str, str], now_real: float, now_monotonic: float) -> float | None:
    """When the unit's main process started, as a wall-clock time, from systemd's monotonic timestamp (microseconds
    since boot; 0 when it has no main process). None when unknown."""
    for key in ("ExecMainStartTimestampMonotonic", "ActiveEnterTimestampMonotonic"):
        try:
            value = int(unit.get(key) or 0)
        except ValueError:
            continue
        if value > 0:
            return now_real - (now_monotonic - value / 1e6)
    return None


def plan(policy: str, engines: list[dict[str, t.Any]], containers: list[dict[str, t.Any]], unknown: str | None,
         live_restore: bool) -> dict[str, t.Any]:
    """What to do with each engine.

    ``engines``: {name, unit, active, changed (this run changed its configuration), newest (mtime of its newest
    configuration file, or None), started (wall-clock start of its main process, or None)}. An engine is due a restart
    when it runs and its configuration changed in this run or is newer than its main process (a restart deferred by an
    earlier run, or skipped, or a change made by hand). ``containers``: the GPU processes in containers
    ({engine, id, pid, name, gpu}); ``unknown``: why the GPU processes are not known, or None.
    """
    result: dict[str, t.Any] = {"engines": [], "restart": [], "pending": [], "messages": []}
    for engine in engines:
        name, unit = engine["name"], engine["unit"]
        entry = {"name": name, "unit": unit, "active": bool(engine.get("active")), "due": False, "action": "none",
                 "reason": "", "containers": [], "live_restore": bool(live_restore) if name == "docker" else None}
        result["engines"].append(entry)
        newer = engine.get("newest") is not None and engine.get("started") is not None and engine["newest"] > engine["started"]
        if not (engine.get("changed") or newer):
            entry["reason"] = "its configuration did not change since it started"
            continue
        if not entry["active"]:
            entry["reason"] = "not running; it reads the new configuration when it starts"
            continue
        entry["due"] = True
        why = "its configuration changed in this run" if engine.get("changed") else "its configuration changed after it started"
        stops = () if name == "docker" and live_restore else _STOPS.get(name, ())
        blocking = [c for c in containers if c["engine"] in stops]
        entry["containers"] = [describe(c) for c in blocking]
        if policy == "never":
            entry["action"] = "needed"
            entry["reason"] = why
            result["pending"].append(unit)
            result["messages"].append(
                "%s restart needed: %s, and the restart policy is never, so it was not restarted. The nvidia runtime "
                "settings take effect when it restarts (systemctl restart %s)." % (unit, why, unit))
        elif policy == "if_idle" and (blocking or unknown):
            entry["action"] = "pending"
            because = ("containers it would stop use the GPUs: %s" % "; ".join(entry["containers"]) if blocking
                       else "it cannot tell whether containers use the GPUs: %s" % unknown)
            entry["reason"] = "%s, but %s" % (why, because)
            result["pending"].append(unit)
            result["messages"].append(
                "%s restart pending (restart policy if_idle): %s, but %s. It was not restarted; the next run restarts "
                "it once %s, or restart it yourself (systemctl restart %s), or set the restart policy to always."
                % (unit, why, because, "they have stopped" if blocking else "the GPU processes can be read and none blocks it", unit))
        else:
            entry["action"] = "restart"
            entry["reason"] = why + (" (live-restore keeps its containers running)" if entry["live_restore"] else "")
            result["restart"].append(unit)
    return result


def live_restore(text: str | None) -> bool:
    """Whether Docker's daemon.json text turns live-restore on; False for a missing, unreadable or non-object file."""
    try:
        data = json.loads(text) if text else {}
    except ValueError:
        return False
    return isinstance(data, dict) and data.get("live-restore") is True


def newest_mtime(files: list[str]) -> float | None:
    """The newest modification time of ``files``; missing files are skipped; None when none exists."""
    times = []
    for path in files:
        try:
            times.append(os.stat(path).st_mtime)
        except OSError:
            continue
    return max(times) if times else None


def engine_states(module: t.Any, engines: list[dict[str, t.Any]]) -> tuple[list[dict[str, t.Any]], str | None]:
    """Each engine of ``engines`` ({name, changed, files}) with its unit's state, as plan() reads it ({name, unit,
    active, changed, newest, started}), from one ``systemctl show`` through ``module``; and why the units could not be
    read (no systemctl, or it failed: then no engine counts as running), or None."""
    units = [ENGINES[engine["name"]] for engine in engines]
    states: dict[str, dict[str, str]] = {}
    problem = None
    if units:
        systemctl = module.get_bin_path("systemctl")
        if not systemctl:
            problem = "systemctl was not found, so no container engine counts as running and none is restarted."
        else:
            rc, out, err = module.run_command([systemctl, "show", "--property=" + PROPERTIES] + units,
                                              environ_update={"LC_ALL": "C", "LANGUAGE": "C"})
            if rc != 0:
                problem = ("systemctl show %s failed (rc %s: %s), so no container engine counts as running and none is restarted."
                           % (" ".join(units), rc, (err or out).strip()[:300]))
            else:
                states = parse_systemctl_show(out)
    now_real, now_monotonic = time.time(), time.monotonic()
    result = []
    for engine, unit in zip(engines, units):
        state = states.get(unit, {})
        result.append({"name": engine["name"], "unit": unit, "active": state.get("ActiveState") == "active",
                       "changed": bool(engine.get("changed")), "newest": newest_mtime(list(engine.get("files") or [])),
                       "started": start_time(state, now_real, now_monotonic)})
    return result, problem
