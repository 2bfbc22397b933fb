# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Pure planning for rootless Docker and rootless Podman users of the NVIDIA Container Toolkit.

Private to this collection: no compatibility promise outside gpuhost.nvidia.

Nothing here touches the host. The role reads the account database (getent passwd) and /etc/subuid and /etc/subgid,
and this planner turns the request and those reads into the per-user work, with every error at once:

- rootless Docker: the runtime merged into the user's own ``~/.config/docker/daemon.json`` (the file NVIDIA's
  install guide names for ``nvidia-ctk runtime configure --config``), written as that user, and
  ``nvidia-container-cli.no-cgroups = true`` in the host-wide /etc/nvidia-container-runtime/config.toml, which the
  legacy hook of a rootless dockerd needs because it cannot write device cgroups. The switch is host-wide: every
  rootful container started through the same runtime then gets no device cgroup rules from the hook either, so a host
  that also configures rootful engines is refused unless the request says that is understood (shared_no_cgroups).
- rootless Podman: CDI only (``podman run --device nvidia.com/gpu=...``). Podman reads the specs from /etc/cdi and
  /var/run/cdi itself, so no per-user file is needed and no-cgroups is not: the user must only be able to read the
  spec and its directory, which the role makes so.
"""

from __future__ import annotations

import os
import re
import typing as t

ENGINES = ("docker", "podman")
STATES = ("present", "absent")
USER_KEYS = ("name", "engines", "state")
# Debian's adduser NAME_REGEX (lower-case letters, digits, '_' and '-', not starting with a digit or '-'), at most
# 32 characters (useradd's limit): a name that reaches a path (the home's files) and a become_user.
USER_NAME_RE = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
# Relative to the user's home: where a rootless dockerd reads its daemon.json ($XDG_CONFIG_HOME/docker, with
# XDG_CONFIG_HOME unset: ~/.config), and where the runtime module keeps its record of the file's original bytes.
DOCKER_DAEMON_JSON = ".config/docker/daemon.json"
RUNTIME_RECORD = ".local/state/gpuhost/nvidia_container_runtime.json"
# Docker's rootless prerequisites ask for at least 65,536 subordinate IDs per user; podman and Debian's useradd
# allocate that many.
MIN_SUBIDS = 65536
SUBID_FIX = "usermod --add-subuids 100000-165535 --add-subgids 100000-165535 %s"


def subid_counts(text: str | None) -> dict[str, int]:
    """The number of subordinate IDs per owner (a name or a numeric uid) in /etc/subuid or /etc/subgid text."""
    counts: dict[str, int] = {}
    for line in (text or "").splitlines():
        fields = line.strip().split(":")
        if len(fields) != 3 or not fields[0] or line.lstrip().startswith("#"):
            continue
        if not (fields[1].isdigit() and fields[2].isdigit()):
            continue
        counts[fields[0]] = counts.get(fields[0], 0) + int(fields[2])
    return counts


def _account(passwd: t.Mapping[str, t.Any], name: str) -> tuple[dict[str, t.Any] | None, str | None]:
    """(uid, gid, home) of ``name`` from getent's passwd facts ({name: [password, uid, gid, gecos, home, shell]})."""
    entry = passwd.get(name)
    if entry is None:
        return None, None
    if not isinstance(entry, (list, tuple)) or len(entry) < 5:
        return None, "its passwd entry %r is not getent's [password, uid, gid, gecos, home, shell]" % (entry,)
    uid, gid, home = str(entry[1]), str(entry[2]), str(entry[4])
    if not (uid.isdigit() and gid.isdigit()):
        return None, "its passwd entry has uid %r and gid %r, not numbers" % (uid, gid)
    if not home.startswith("/") or os.path.normpath(home) != home.rstrip("/") or home.rstrip("/") == "" or any(
            c in home for c in "\n\r\t\x00"):
        return None, ("its home directory %r is not a clean absolute path other than /: give the user a home "
                      "(usermod -d /home/%s -m %s)" % (home, name, name))
    return {"uid": int(uid), "gid": int(gid), "home": home.rstrip("/")}, None


def _user_request(index: int, item: t.Any, errors: list[str]) -> dict[str, t.Any] | None:
    """One entry of the users list, checked: its name, engines and state."""
    where = "nvidia_container_toolkit_rootless_users[%d]" % index
    if not isinstance(item, t.Mapping):
        errors.append("%s: %r is not a mapping; give {name: alice, engines: [podman]}" % (where, item))
        return None
    unknown = sorted(str(k) for k in item if k not in USER_KEYS)
    if unknown:
        errors.append("%s: unknown keys %s; the keys are %s" % (where, ", ".join(unknown), ", ".join(USER_KEYS)))
    name = item.get("name")
    if not isinstance(name, str) or not USER_NAME_RE.fullmatch(name):
        errors.append("%s.name: %r is not a user name this role accepts: lower-case letters, digits, '_' and '-', "
                      "starting with a letter or '_', at most 32 characters (Debian's adduser rule)" % (where, name))
        return None
    if name == "root":
        errors.append("%s.name: root is not a rootless user; configure root's engines with nvidia_container_toolkit_runtimes"
                      % where)
        return None
    engines = item.get("engines", ["podman"])
    if isinstance(engines, str) or not isinstance(engines, (list, tuple)) or not engines:
        errors.append("%s.engines: %r must be a non-empty list of %s" % (where, engines, ", ".join(ENGINES)))
        return None
    if any(e not in ENGINES for e in engines) or len(set(engines)) != len(engines):
        errors.append("%s.engines: %r: each of %s at most once" % (where, list(engines), ", ".join(ENGINES)))
        return None
    state = item.get("state", "present")
    if state not in STATES:
        errors.append("%s.state: %r must be present or absent" % (where, state))
        return None
    return {"name": name, "engines": [e for e in ENGINES if e in engines], "state": state}


def plan(request: t.Mapping[str, t.Any], passwd: t.Mapping[str, t.Any], subuid: str | None,
         subgid: str | None) -> dict[str, t.Any]:
    """The rootless users' work: ``users`` (each with uid, gid, home, engines, state, daemon_json and record),
    ``docker`` and ``podman`` (the users of each engine), ``no_cgroups`` (true, false or None: leave the key alone),
    ``errors`` and ``warnings``.

    ``request``: users (the role's list), state (the role's), runtimes (the rootful engines the role configures),
    mode (full or cdi), cdi (whether the role generates the CDI spec), no_cgroups (the role's settings.no_cgroups, or
    None) and shared_no_cgroups (the user accepts no-cgroups for the rootful engines too)."""
    errors: list[str] = []
    warnings: list[str] = []
    raw = request.get("users") or []
    if isinstance(raw, (str, t.Mapping)) or not isinstance(raw, (list, tuple)):
        return {"errors": ["nvidia_container_toolkit_rootless_users: %r must be a list of {name, engines, state}" % (raw,)],
                "warnings": [], "users": [], "docker": [], "podman": [], "no_cgroups": None}
    role_absent = request.get("state") == "absent"
    uids, gids = subid_counts(subuid), subid_counts(subgid)
    users: list[dict[str, t.Any]] = []
    seen: set[str] = set()
    for index, item in enumerate(raw):
        wanted = _user_request(index, item, errors)
        if wanted is None:
            continue
        name = wanted["name"]
        if name in seen:
            errors.append("nvidia_container_toolkit_rootless_users: %s is listed twice; give each user once" % name)
            continue
        seen.add(name)
        state = "absent" if role_absent else wanted["state"]
        account, problem = _account(passwd, name)
        if account is None:
            if problem is None and state == "absent":
                warnings.append("rootless user %s does not exist (any more): nothing of theirs to take back" % name)
                continue
            missing = ("no such user on this host; create the account first (useradd -m %s) or take it out of "
                       "nvidia_container_toolkit_rootless_users" % name)
            errors.append("rootless user %s: %s" % (name, problem or missing))
            continue
        if account["uid"] == 0:
            errors.append("rootless user %s has uid 0: that is root, not a rootless user" % name)
            continue
        if state == "present":
            for what, counts in (("/etc/subuid", uids), ("/etc/subgid", gids)):
                have = counts.get(name, 0) + counts.get(str(account["uid"]), 0)
                if have == 0:
                    errors.append("rootless user %s has no subordinate IDs in %s, which a rootless engine needs for its "
                                  "user namespace; add them (%s)" % (name, what, SUBID_FIX % name))
                elif have < MIN_SUBIDS:
                    warnings.append("rootless user %s has %d subordinate IDs in %s, fewer than the %d Docker's rootless "
                                    "mode asks for; images with higher IDs will not unpack" % (name, have, what, MIN_SUBIDS))
        home = account["home"]
        users.append(dict(wanted, state=state, uid=account["uid"], gid=account["gid"], home=home,
                          daemon_json=home + "/" + DOCKER_DAEMON_JSON, record=home + "/" + RUNTIME_RECORD,
                          runtime_dir="/run/user/%d" % account["uid"]))

    docker = [u for u in users if "docker" in u["engines"]]
    podman = [u for u in users if "podman" in u["engines"]]
    docker_present = [u["name"] for u in docker if u["state"] == "present"]
    podman_present = [u["name"] for u in podman if u["state"] == "present"]
    no_cgroups: bool | None = None
    if docker_present and not role_absent:
        no_cgroups = True
        if request.get("mode", "full") != "full":
            errors.append("rootless Docker (%s) needs nvidia_container_toolkit_mode: full: a rootless dockerd runs "
                          "containers through nvidia-container-runtime, which mode cdi does not install"
                          % ", ".join(docker_present))
        if request.get("no_cgroups") is False:
            errors.append("rootless Docker (%s) needs nvidia-container-cli.no-cgroups = true, but "
                          "nvidia_container_toolkit_settings.no_cgroups is false; remove that key or set it true"
                          % ", ".join(docker_present))
        rootful = [str(r) for r in request.get("runtimes") or []] if request.get("mode", "full") == "full" else []
        if rootful and not request.get("shared_no_cgroups"):
            errors.append(
                "rootless Docker (%s) needs nvidia-container-cli.no-cgroups = true in /etc/nvidia-container-runtime/"
                "config.toml, which is host-wide: the rootful engines this role configures (%s) would then start GPU "
                "containers through the nvidia runtime's hook without device cgroup rules, and such a container cannot "
                "open the GPUs (NVML: Unknown Error) unless it asks for them through CDI. Set "
                "nvidia_container_toolkit_rootless_shared_no_cgroups: true to accept that (and use CDI, --device "
                "nvidia.com/gpu=all, for the rootful containers), or nvidia_container_toolkit_runtimes: [] on a host "
                "whose GPU containers are all rootless" % (", ".join(docker_present), ", ".join(rootful)))
        elif rootful:
            warnings.append("nvidia-container-cli.no-cgroups = true for rootless Docker (%s) also applies to the rootful "
                            "engines (%s): their GPU containers get no device cgroup rules from the nvidia runtime's "
                            "hook; request GPUs through CDI there (--device nvidia.com/gpu=all)"
                            % (", ".join(docker_present), ", ".join(rootful)))
    elif docker and not role_absent and request.get("no_cgroups") is None:
        # The last rootless Docker user went: the hook sets device cgroups again (the toolkit's default).
        no_cgroups = False
    if podman_present and not role_absent and not (request.get("cdi") or request.get("mode") == "cdi"):
        errors.append("rootless Podman (%s) uses CDI (podman run --device nvidia.com/gpu=all), so the role must generate "
                      "the spec: set nvidia_container_toolkit_cdi: true" % ", ".join(podman_present))
    return {"errors": errors, "warnings": warnings, "users": users, "docker": docker, "podman": podman,
            "no_cgroups": no_cgroups}
