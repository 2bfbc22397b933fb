# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""One remote call for a role's directories, files and systemd units: request checks and the unit planner.

Private to this collection: no compatibility promise outside gpuhost.nvidia.

``gpuhost_apply`` does what a role used to do with a chain of ``file``, ``template``, ``copy``, ``stat`` and
``systemd_service`` tasks (each one remote call, two for ``template``/``copy``), in one call. Everything here is pure:
the module reads the host (files through ``_files``, units with one ``systemctl show``), asks the functions below
what to do, and acts.

- :func:`check_request` refuses every bad path, mode, owner, group and unit name, all of them at once, before the
  module reads anything.
- :func:`plan_unit` turns a unit request and the unit's state (``_converged.parse_units``' form: ``load``,
  ``enabled`` (systemd's UnitFileState), ``active``) into the systemctl verbs to run, and the state they leave.
- :func:`predicted_state` is what check mode plans against for a unit that is not installed yet: the state its unit
  file (written by the same call) or its package (``package_default``: an earlier task only pretended to install it)
  would give it, so that check mode reports exactly what the real run will do.
"""

from __future__ import annotations

import re
import typing as t

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _apt

# Where unit files and drop-ins live: a change there needs one ``systemctl daemon-reload``.
SYSTEMD_DIRS = ("/etc/systemd/", "/usr/lib/systemd/", "/lib/systemd/", "/run/systemd/")
UNIT_NAME = re.compile(r"[A-Za-z0-9_:.@\\][A-Za-z0-9_:.@\\-]{0,240}\.(?:service|socket|timer|target|path|mount|automount|swap|slice)\Z")
MODE = re.compile(r"0?[0-7]{3,4}\Z")
# A user or group name as useradd takes it (a trailing $ for machine accounts), or a numeric id.
ACCOUNT = re.compile(r"(?:[A-Za-z_][A-Za-z0-9_.-]{0,31}\$?|[0-9]{1,10})\Z")
MAX_PATH = 4096
# A command as regenerate.argv[0] may name it: a name looked up in PATH, or an absolute path.
COMMAND = re.compile(r"(?:/[A-Za-z0-9_.+/-]{1,254}|[A-Za-z0-9_][A-Za-z0-9_.+-]{0,254})\Z")

# systemd's UnitFileState values, by what enable/disable does to them.
ENABLED = ("enabled", "alias")
DISABLE = ("enabled", "enabled-runtime", "linked", "linked-runtime")
# No enablement to switch: no [Install] section (static), or made by something else.
NOT_SWITCHABLE = ("static", "indirect", "generated", "transient")
MASKED = ("masked", "masked-runtime")
RUNNING = ("active", "activating", "reloading", "refreshing")
STOPPABLE = RUNNING + ("deactivating",)
UNIT_STATES = ("started", "stopped")


def path_problem(path: t.Any) -> str | None:
    """Why ``path`` is not a plain absolute path the module may touch; None when it is."""
    if not isinstance(path, str) or not path:
        return "is not a path"
    if "\x00" in path or "\n" in path or "\r" in path:
        return "holds a NUL or line-break character"
    if not path.startswith("/"):
        return "is not an absolute path"
    if len(path) > MAX_PATH:
        return "is longer than %d characters" % MAX_PATH
    if path != "/" and path.endswith("/"):
        return "ends with /"
    if any(part in (".", "..") for part in path.split("/")):
        return "has a . or .. component"
    if "//" in path:
        return "has an empty component (//)"
    if path == "/":
        return "is the root directory"
    return None


def mode_problem(mode: t.Any) -> str | None:
    """Why ``mode`` is not an octal mode string (``'0644'``); None when it is (or is left out).

    A number is refused, not read: YAML reads an unquoted ``0644`` as the number 420 and an unquoted ``644`` as the
    number 644, which are different modes, and nothing here can tell which one the user wrote.
    """
    if mode is None:
        return None
    if isinstance(mode, int) and not isinstance(mode, bool):
        octal = "0%o" % mode if 0 <= mode <= 0o7777 else None
        return ("mode %r is a number, not a quoted octal string: YAML reads an unquoted 0644 as the number 420, and an unquoted 644 "
                "as 644 (octal 1204); quote the mode, as in mode: '0644'%s"
                % (mode, " (the number %d is octal %s)" % (mode, octal) if octal else ""))
    if not isinstance(mode, str) or not MODE.fullmatch(mode):
        return "mode %r is not an octal mode string such as '0644'" % (mode,)
    return None


def _attr_problems(where: str, item: t.Mapping[str, t.Any]) -> list[str]:
    problems = []
    problem = mode_problem(item.get("mode"))
    if problem is not None:
        problems.append("%s: %s" % (where, problem))
    for key in ("owner", "group"):
        value = item.get(key)
        if account_problem(value):
            problems.append("%s: %s %r is not a user or group name" % (where, key, value))
    return problems


def account_problem(value: t.Any) -> bool:
    """Whether ``value`` is not a user or group name (or numeric id) at all; None is no problem (not asked for)."""
    return value is not None and not (isinstance(value, str) and ACCOUNT.fullmatch(value))


def _content_problem(where: str, item: t.Mapping[str, t.Any]) -> list[str]:
    content = item.get("content")
    if not isinstance(content, str):
        return ["%s: content must be text, got %s" % (where, type(content).__name__)]
    try:
        content.encode("utf-8")
    except UnicodeEncodeError as exc:
        return ["%s: content holds %r at character %d, which is not valid UTF-8 (a lone surrogate)" % (where, content[exc.start], exc.start)]
    return []


def _path_problems(where: str, path: t.Any) -> list[str]:
    problem = path_problem(path)
    return [] if problem is None else ["%s: path %r %s" % (where, path, problem)]


def check_request(directories: t.Sequence[t.Mapping[str, t.Any]], files: t.Sequence[t.Mapping[str, t.Any]],
                  absent: t.Sequence[str], units: t.Sequence[t.Mapping[str, t.Any]],
                  packages: t.Mapping[str, t.Any] | None = None, regenerate: t.Mapping[str, t.Any] | None = None) -> list[str]:
    """Every problem of a request, as sentences; nothing on the host is read."""
    problems: list[str] = []
    seen: dict[str, str] = {}

    def claim(path: t.Any, where: str) -> None:
        if path_problem(path) is not None:
            return
        if path in seen:
            problems.append("%s: path %s is also %s" % (where, path, seen[path]))
        else:
            seen[path] = where

    for index, item in enumerate(directories):
        where = "directories[%d]" % index
        problems += _path_problems(where, item.get("path")) + _attr_problems(where, item)
        claim(item.get("path"), where)
    for index, item in enumerate(files):
        where = "files[%d]" % index
        problems += _path_problems(where, item.get("path")) + _attr_problems(where, item) + _content_problem(where, item)
        claim(item.get("path"), where)
    for index, path in enumerate(absent):
        where = "absent[%d]" % index
        problems += _path_problems(where, path)
        claim(path, where)
    file_paths = {item.get("path") for item in files}
    changing = file_paths | set(absent)
    names: set[str] = set()
    for index, unit in enumerate(units):
        name = unit.get("name")
        where = "units[%d]" % index
        if not isinstance(name, str) or not UNIT_NAME.fullmatch(name):
            problems.append("%s: %r is not a systemd unit name (name.service, .socket, .timer, ...)" % (where, name))
        elif name in names:
            problems.append("%s: unit %s is listed twice" % (where, name))
        names.add(str(name))
        if unit.get("state") not in (None,) + UNIT_STATES:
            problems.append("%s: state %r is not one of started, stopped" % (where, unit.get("state")))
        if unit.get("masked") and (unit.get("enabled") or unit.get("state") == "started"):
            problems.append("%s: a masked unit cannot be enabled or started" % where)
        for key in ("start_if_exists", "switch_if_exists"):
            if unit.get(key) is not None:
                problems += _path_problems("%s.%s" % (where, key), unit.get(key))
        for path in unit.get("restart_when_changed") or []:
            if path not in changing:
                problems.append("%s: restart_when_changed names %r, which is not in files or absent" % (where, path))
        default = unit.get("package_default")
        if default is not None and default not in ("enabled", "disabled", "static"):
            problems.append("%s: package_default %r is not one of enabled, disabled, static" % (where, default))
    return problems + _package_problems(packages) + _regenerate_problems(regenerate, changing)


def _package_problems(packages: t.Mapping[str, t.Any] | None) -> list[str]:
    if not packages:
        return []
    problems = []
    names: set[str] = set()
    for index, spec in enumerate(packages.get("install") or []):
        problem = _apt.spec_problem(spec)
        if problem is not None:
            problems.append("packages.install[%d]: %s" % (index, problem))
            continue
        name = _apt.split_spec(spec)[0]
        if name in names:
            problems.append("packages.install[%d]: package %s is listed twice" % (index, name))
        names.add(name)
    return problems


def _regenerate_problems(regenerate: t.Mapping[str, t.Any] | None, changing: t.Collection[t.Any]) -> list[str]:
    if not regenerate:
        return []
    problems = []
    argv = regenerate.get("argv") or []
    if not argv or not isinstance(argv[0], str) or not COMMAND.fullmatch(argv[0]):
        problems.append("regenerate.argv: %r does not start with a command name or absolute path (letters, digits and _ . + / -)"
                        % (argv[:1],))
    for index, arg in enumerate(argv):
        if not isinstance(arg, str) or "\x00" in arg or "\n" in arg or "\r" in arg:
            problems.append("regenerate.argv[%d]: %r is not a single-line argument" % (index, arg))
    if not regenerate.get("when_changed"):
        problems.append("regenerate.when_changed: name at least one path of files or absent")
    for path in regenerate.get("when_changed") or []:
        if path not in changing:
            problems.append("regenerate.when_changed names %r, which is not in files or absent" % (path,))
    if regenerate.get("if_exists") is not None:
        problems += _path_problems("regenerate.if_exists", regenerate["if_exists"])
    return problems


# When gpuhost_apply gathers the GPU facts (its gpu_facts option).
GPU_FACTS_WHEN = ("never", "installed", "always")


def gpu_facts_due(when: str, packages: t.Mapping[str, t.Any] | None) -> bool:
    """Whether to gather the GPU facts last: ``always``, or ``installed`` when the packages step installed something (in
    check mode: would install)."""
    return when == "always" or (when == "installed" and bool((packages or {}).get("installed")))


def regenerate_due(regenerate: t.Mapping[str, t.Any] | None, changed_paths: t.Collection[str], tool_exists: bool) -> bool:
    """Whether to run ``regenerate``: one of its ``when_changed`` paths changed in this call, and its ``if_exists`` path
    exists (``tool_exists``; a host without the tool has nothing to regenerate)."""
    if not regenerate or not set(regenerate.get("when_changed") or []) & set(changed_paths):
        return False
    return tool_exists


def is_unit_file(path: str) -> bool:
    """Whether a change of ``path`` needs ``systemctl daemon-reload`` (a unit file or a drop-in)."""
    return path.startswith(SYSTEMD_DIRS)


def unit_file_state(content: str) -> str:
    """The UnitFileState systemd gives a new unit file: ``disabled`` with an [Install] section, else ``static``."""
    for line in content.splitlines():
        if line.strip() == "[Install]":
            return "disabled"
    return "static"


def predicted_state(name: str, found: t.Mapping[str, str], written: t.Mapping[str, str],
                    package_default: str | None) -> dict[str, str] | None:
    """Check mode: the state a unit that systemd does not know yet would have in the real run; None when unknown.

    ``written`` maps the unit files this call writes (path -> content). A unit file of ``name`` among them: the
    state systemd gives it after the daemon-reload (:func:`unit_file_state`). Else ``package_default``: the state its
    package leaves it in, when an earlier task only pretended to install the package (Debian's packages enable
    their services; Ubuntu's nvidia-persistenced is static).
    """
    if found.get("load") != "not-found":
        return dict(found)
    for path, content in written.items():
        if path.startswith(SYSTEMD_DIRS) and path.rsplit("/", 1)[-1] == name:
            return {"load": "loaded", "enabled": unit_file_state(content), "active": "inactive"}
    if package_default is not None:
        return {"load": "loaded", "enabled": package_default, "active": "inactive"}
    return None


def needs_unit(unit: t.Mapping[str, t.Any]) -> bool:
    """Whether a request asks anything of a unit that only an installed unit can give (enable, unmask, start)."""
    return bool(unit.get("enabled")) or unit.get("state") == "started"


def plan_unit(unit: t.Mapping[str, t.Any], state: t.Mapping[str, str], start_ok: bool = True,
              switch_ok: bool = True) -> tuple[list[str], dict[str, str], list[str]]:
    """The systemctl verbs for ``unit`` in ``state``, the state they leave, and notes on what was left alone.

    Order: unmask or mask, enable or disable, start or stop. ``start_ok``: the unit's ``start_if_exists`` path
    exists (no start without it). ``switch_ok``: its ``switch_if_exists`` path exists (no mask, unmask, enable or
    disable without it). After an unmask the enablement is not known until systemd is asked again (``unknown``):
    the module asks before it goes on; check mode plans with ``unknown``, which still predicts the change.
    """
    verbs: list[str] = []
    notes: list[str] = []
    after = dict(state)
    name = unit.get("name")
    if after.get("load") == "not-found":
        if unit.get("masked") and switch_ok:
            return ["mask"], dict(after, load="masked", enabled="masked"), notes
        notes.append("%s is not installed: nothing to switch" % name)
        return [], after, notes
    masked = after.get("load") == "masked" or after.get("enabled") in MASKED
    if switch_ok and unit.get("masked") is True and not masked:
        verbs.append("mask")
        after.update(load="masked", enabled="masked")
        masked = True
    elif switch_ok and unit.get("masked") is False and masked:
        verbs.append("unmask")
        after.update(load="loaded", enabled="unknown")
        masked = False
    if switch_ok and unit.get("enabled") is not None and not masked:
        if after.get("enabled") in NOT_SWITCHABLE:
            notes.append("%s is %s: it has no enablement to switch" % (name, after.get("enabled")))
        elif unit["enabled"] and after.get("enabled") not in ENABLED:
            verbs.append("enable")
            after["enabled"] = "enabled"
        elif not unit["enabled"] and after.get("enabled") in DISABLE:
            verbs.append("disable")
            after["enabled"] = "disabled"
    if unit.get("state") == "started" and not masked:
        if not start_ok:
            notes.append("%s is not started: %s does not exist" % (name, unit.get("start_if_exists")))
        elif after.get("active") not in RUNNING:
            verbs.append("start")
            after["active"] = "active"
    elif unit.get("state") == "stopped" and after.get("active") in STOPPABLE:
        verbs.append("stop")
        after["active"] = "inactive"
    return verbs, after, notes


def needs_restart(unit: t.Mapping[str, t.Any], verbs: t.Sequence[str], after: t.Mapping[str, str], changed_paths: t.Collection[str],
                  start_ok: bool = True) -> bool:
    """Whether to restart ``unit``: one of its ``restart_when_changed`` paths changed, it runs, was not just started, and its
    ``start_if_exists`` path exists (a daemon that needs the driver is not restarted without it, whatever systemd says)."""
    if not start_ok or not set(unit.get("restart_when_changed") or []) & set(changed_paths):
        return False
    return after.get("active") in RUNNING and "start" not in verbs and after.get("load") != "masked"


def describe(verbs: t.Sequence[str]) -> str:
    """``changed_units`` text: the verbs as past participles (``unmasked, enabled, started``)."""
    words = {"mask": "masked", "unmask": "unmasked", "enable": "enabled", "disable": "disabled", "start": "started",
             "stop": "stopped", "restart": "restarted"}
    return ", ".join(words.get(verb, verb) for verb in verbs)
