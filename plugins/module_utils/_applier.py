# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The host side of gpuhost_apply: the preflight, the Applier that writes, removes, switches and installs, and the
order of one call.

Private to this collection: no compatibility promise outside gpuhost.nvidia.

The module file holds the documentation and the argument spec; :func:`apply` does the rest. What to do is decided by
the pure functions of _apply; this file asks the host (through _files, systemctl, dpkg and apt) and acts.
"""

from __future__ import annotations

import grp
import os
import pwd
import typing as t

from ansible.module_utils.common.text.converters import to_bytes

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _apply, _apt, _converged, _files

if t.TYPE_CHECKING:  # pragma: no cover
    from ansible.module_utils.basic import AnsibleModule

C_ENV = {"LC_ALL": "C", "LANGUAGE": "C"}


class Applier:
    """The host side: reads, writes and systemctl calls; every decision is _apply's."""

    def __init__(self, module: AnsibleModule):
        self.module = module
        self.check = module.check_mode
        self.changed_files: list[str] = []
        self.removed: list[str] = []
        self.diffs: list[dict[str, t.Any]] = []
        self.backups: dict[str, str] = {}
        self.created: set[str] = set()  # directories created (or, in check mode, that would be)

    def fail(self, msg: str, **kwargs: t.Any) -> t.NoReturn:
        self.module.fail_json(msg=msg, changed_files=self.changed_files, removed=self.removed, **kwargs)
        raise AssertionError("fail_json returned")  # pragma: no cover

    def attrs(self, path: str, item: t.Mapping[str, t.Any], changed: bool) -> bool:
        args = {"path": path, "owner": item.get("owner"), "group": item.get("group"), "mode": item.get("mode"),
                "attributes": None, "secontext": [None, None, None]}
        return self.module.set_fs_attributes_if_different(args, changed, diff=None, expand=False)

    def directory(self, item: t.Mapping[str, t.Any]) -> None:
        path = item["path"]
        if _files.check_directory(path, "directories"):
            changed = self.attrs(path, item, path in self.created)
        elif path in self.created:  # check mode: a parent of an earlier entry, which would be created
            changed = False
        else:
            changed = True
            parent = path
            while not os.path.isdir(parent):
                self.created.add(parent)
                parent = os.path.dirname(parent)
            if not self.check:
                _files.make_dirs(path, "directories", int(item["mode"], 8) if item.get("mode") else 0o755)
                self.attrs(path, item, True)
        if changed:
            self.changed_files.append(path)

    def file(self, item: t.Mapping[str, t.Any]) -> bool:
        path = item["path"]
        content = to_bytes(item["content"], errors="surrogate_or_strict")
        directory = os.path.dirname(path)
        # Check mode: a directory this call would create, or one an earlier task of the run only pretended to create
        # (another role's, gpuhost_ensured_dirs), is not there yet; the real run writes the file (and fails on a
        # directory that is really missing).
        if self.check and (directory in self.created or not _files.check_directory(directory, "files")):
            result = _files.WriteResult(changed=True, content_changed=True, existed=False, diff=_files.make_diff(path, None, content))
        else:
            result = _files.write_file(self.module, path, content, backup=bool(item.get("backup")), what="files", file_args=False)
            if result.existed or not self.check:
                result.changed = self.attrs(path, item, result.changed)
        if result.changed:
            self.changed_files.append(path)
            if result.content_changed:
                self.diffs.append(result.diff)
        if result.backup_file:
            self.backups[path] = result.backup_file
        return result.content_changed

    def remove(self, path: str) -> None:
        if os.path.isdir(path) and not os.path.islink(path):
            left = set(os.listdir(path)) - {os.path.basename(p) for p in self.removed if os.path.dirname(p) == path}
            if left:
                return
            if not self.check:
                try:
                    os.rmdir(path)
                except OSError as exc:
                    self.fail("absent: directory %r cannot be removed: %s" % (path, exc.strerror or exc))
            self.removed.append(path)
            return
        before = _files.read_bytes(path, "absent") if os.path.lexists(path) else None
        if before is None:
            return
        if not self.check:
            _files.remove(path, "absent")
        self.removed.append(path)
        self.diffs.append({"before": before.decode("utf-8", errors="replace"), "after": "",
                           "before_header": path, "after_header": "%s (absent)" % path})

    def systemctl(self, *args: str) -> str:
        return self.command([self.module.get_bin_path("systemctl", required=True)] + list(args), "systemctl " + " ".join(args))

    def command(self, argv: list[str], label: str, environ: dict[str, str] | None = None, ok: tuple[int, ...] = (0,)) -> str:
        """Run ``argv``; fail naming ``label`` and what the command said unless its exit status is in ``ok``."""
        rc, out, err = self.module.run_command(argv, environ_update=environ or C_ENV)
        if rc not in ok:
            self.fail("%s failed: %s" % (label, (err or out).strip()), rc=rc, cmd=argv)
        return out

    def package_status(self, names: list[str]) -> dict[str, str]:
        argv = [self.module.get_bin_path("dpkg-query", required=True)] + _apt.status_argv(names)[1:]
        # rc 1 only says that some name is not installed: those print no line.
        return _apt.parse_status(self.command(argv, "dpkg-query", _apt.APT_ENV, ok=(0, 1)))

    def install(self, request: t.Mapping[str, t.Any]) -> tuple[dict[str, t.Any], str | None]:
        """The apt transaction of the specs the host does not satisfy (none: no apt-get); the result, and why it failed."""
        specs = request["install"]
        names = list(dict.fromkeys(_apt.split_spec(spec)[0] for spec in specs))
        # No names: nothing to ask (a dpkg-query without names would list every package).
        before = self.package_status(names) if names else {}
        left = _apt.specs_left(specs, before)
        result: dict[str, t.Any] = {"installed": left, "changed": bool(left), "before": {name: before.get(name) for name in names}}
        result["after"] = dict(result["before"])
        if not left:
            return result, None
        argv = [self.module.get_bin_path("apt-get", required=True)] + _apt.install_argv(left, request["allow_downgrade"], self.check)[1:]
        rc, out, err = self.module.run_command(argv, environ_update=_apt.APT_ENV)
        if rc != 0:
            lines = (err.strip() or out.strip()).splitlines()
            result.update(changed=False, rc=rc, stdout=out, stderr=err)
            return result, "apt-get install of %s failed (rc %d): %s" % (" ".join(left), rc, " ".join(lines[-5:]))
        if not self.check:
            after = self.package_status(names)
            result["after"] = {name: after.get(name) for name in names}
        return result, None

    def unit_states(self, names: list[str]) -> dict[str, dict[str, str]]:
        if not names:
            return {}
        argv = _converged.unit_command(names)
        return _converged.parse_units(names, self.systemctl(*argv[1:]))


def holds(unit: t.Mapping[str, t.Any], key: str, exists: t.Mapping[str, bool]) -> bool:
    """Whether the unit's ``start_if_exists`` or ``switch_if_exists`` condition holds (no condition holds)."""
    return not unit.get(key) or exists[unit[key]]


def check(module: AnsibleModule) -> list[str]:
    """Refuse the whole request, every problem at once, before anything is written: first what the request says
    (nothing read), then what the host says about each path, parent, owner and group (read only). Returns the notes
    of check mode (a directory that is missing now but that an earlier task of the run only pretended to create)."""
    params = module.params
    problems = _apply.check_request(params["directories"], params["files"], params["absent"], params["units"], params["packages"],
                                    params["regenerate"])
    if params["gpu_facts"] != "never":
        problems += _facts().root_errors(params["gpu_facts_root"], "gpu_facts_root")
    # The host is asked about the items the request check passed, so that every problem is reported in one go.
    found, notes = preflight(params, module.check_mode)
    problems += found
    if problems:
        module.fail_json(msg="gpuhost_apply: %s" % "; ".join(problems), problems=problems, changed_files=[], removed=[])
    return notes


def _account_problem(where: str, key: str, name: str | None) -> str | None:
    """Why the owner or group ``name`` cannot be set on this host; None when it can (or is not asked for)."""
    if name is None or name.isdigit():
        return None
    try:
        (pwd.getpwnam if key == "owner" else grp.getgrnam)(name)
    except KeyError:
        return "%s: %s %r is not a %s on this host: create it first, or give its numeric id" % (
            where, key, name, "user" if key == "owner" else "group")
    return None


def preflight(params: t.Mapping[str, t.Any], check_mode: bool) -> tuple[list[str], list[str]]:
    """Every path, parent, owner and group of the request checked against the host; nothing is written.

    A path where something else is (a directory where a file goes, a FIFO, a socket or a device, a dangling link, a
    path under a file) is refused by _files before anything opens it. A file's directory must exist or be in
    ``directories`` (or be a parent one of them creates); in check mode a missing one is a note instead, since an
    earlier task of the same run may only have pretended to create it.
    """
    problems: list[str] = []
    notes: list[str] = []
    made: set[str] = set()  # directories this call creates, with their missing parents
    for index, item in enumerate(params["directories"]):
        where = "directories[%d]" % index
        if _apply.path_problem(item["path"]) is not None:
            continue
        try:
            if not _files.check_directory(item["path"], where):
                path = item["path"]
                while path not in made and not os.path.isdir(path):
                    made.add(path)
                    path = os.path.dirname(path)
        except _files.FileError as exc:
            problems.append(str(exc))
    for index, item in enumerate(params["files"]):
        where = "files[%d]" % index
        if _apply.path_problem(item["path"]) is not None:
            continue
        directory = os.path.dirname(item["path"])
        try:
            _files.check_file(item["path"], where)
            if directory not in made and not _files.check_directory(directory, where):
                message = "%s: path %r: its directory %r does not exist and is not in directories" % (where, item["path"], directory)
                if check_mode:
                    notes.append("check mode: %s; the real run fails unless an earlier task creates it" % message)
                else:
                    problems.append(message + ": add it to directories")
        except _files.FileError as exc:
            problems.append(str(exc))
    for index, path in enumerate(params["absent"]):
        where = "absent[%d]" % index
        if _apply.path_problem(path) is not None:
            continue
        try:
            if not os.path.isdir(path) or os.path.islink(path):
                _files.check_file(path, where)  # a file, or a link to one; a FIFO, socket or device is refused
        except _files.FileError as exc:
            problems.append(str(exc))
    for kind in ("directories", "files"):
        for index, item in enumerate(params[kind]):
            for key in ("owner", "group"):
                problem = None if _apply.account_problem(item.get(key)) else _account_problem("%s[%d]" % (kind, index), key, item.get(key))
                if problem is not None:
                    problems.append(problem)
    return problems, notes


def _facts() -> t.Any:
    """The GPU facts code, imported only by a call that gathers them: the others do not compile it on the host."""
    from ansible_collections.gpuhost.nvidia.plugins.module_utils import _facts  # pylint: disable=import-outside-toplevel

    return _facts


def switch_units(run: Applier, units: list[dict[str, t.Any]], states: dict[str, dict[str, str]], written: dict[str, str],
                 exists: dict[str, bool]) -> tuple[dict[str, list[str]], dict[str, dict[str, str]], list[str], list[str]]:
    """Plan and switch each unit; the verbs done, the state each was left in, the notes, the missing units."""
    done: dict[str, list[str]] = {}
    after: dict[str, dict[str, str]] = {}
    notes: list[str] = []
    missing: list[str] = []
    for unit in units:
        name = unit["name"]
        state = states[name]
        if state.get("load") == "not-found" and _apply.needs_unit(unit):
            predicted = _apply.predicted_state(name, state, written, unit.get("package_default")) if run.check else None
            if predicted is None:
                if not run.check:
                    run.fail("unit %s is not installed: it cannot be enabled or started" % name, units=states)
                missing.append(name)
                done[name] = ["installed"]  # the real run must install it (or fails)
                continue
            state = states[name] = predicted
        start_ok = holds(unit, "start_if_exists", exists)
        switch_ok = holds(unit, "switch_if_exists", exists)
        verbs, left, unit_notes = _apply.plan_unit(unit, state, start_ok, switch_ok)
        if verbs[:1] == ["unmask"] and not run.check:
            run.systemctl("unmask", "--", name)
            left = run.unit_states([name])[name]  # the enablement the unmask uncovered
            rest, left, unit_notes = _apply.plan_unit(dict(unit, masked=None), left, start_ok, switch_ok)
            verbs = ["unmask"] + rest
            for verb in rest:
                run.systemctl(verb, "--", name)
        elif not run.check:
            for verb in verbs:
                run.systemctl(verb, "--", name)
        notes += unit_notes
        after[name] = left
        if verbs:
            done[name] = verbs
    return done, after, notes, missing


def apply(module: AnsibleModule) -> dict[str, t.Any]:
    """One call: refuse a bad request, then directories, files, units, removals, restarts, packages, regenerate;
    the module's result. Fails the module on the first error after the checks."""
    check_notes = check(module)
    params = module.params
    run = Applier(module)
    units = params["units"]
    # Read before anything changes: a start or switch condition is about the host as the call found it.
    conditions = {unit[key] for unit in units for key in ("start_if_exists", "switch_if_exists") if unit.get(key)}
    exists = {path: os.path.exists(path) for path in conditions}
    try:
        for item in params["directories"]:
            run.directory(item)
        written = {}
        content_changed = []
        for item in params["files"]:
            if run.file(item):
                content_changed.append(item["path"])
            written[item["path"]] = item["content"]
        names = [unit["name"] for unit in units]
        states = run.unit_states(names)
        reloaded = any(_apply.is_unit_file(path) for path in content_changed)
        if reloaded and not run.check:
            run.systemctl("daemon-reload")
            states = run.unit_states(names)
        done, after, notes, missing = switch_units(run, units, states, {p: written[p] for p in content_changed}, exists)
        for path in params["absent"]:
            run.remove(path)
        if any(_apply.is_unit_file(path) for path in run.removed):
            reloaded = True
            if not run.check:
                run.systemctl("daemon-reload")
        changed_paths = set(run.changed_files) | set(run.removed)
        for unit in units:
            if unit["name"] in after and _apply.needs_restart(unit, done.get(unit["name"], []), after[unit["name"]], changed_paths,
                                                              holds(unit, "start_if_exists", exists)):
                if not run.check:
                    run.systemctl("restart", "--", unit["name"])
                done.setdefault(unit["name"], []).append("restart")
        packages, failure = run.install(params["packages"]) if params["packages"] else (None, None)
        regenerate = params["regenerate"]
        regenerated = _apply.regenerate_due(regenerate, changed_paths, bool(regenerate) and (
            not regenerate.get("if_exists") or os.path.exists(regenerate["if_exists"])))
        # Also when the install failed: the files it depends on changed, and the next run would find them unchanged.
        if regenerated and not run.check:
            run.command(list(regenerate["argv"]), " ".join(regenerate["argv"]))
        if failure is not None:
            run.fail(failure, packages=packages, regenerated=regenerated, changed_units=done)
    except _files.FileError as exc:
        run.fail(str(exc), path=exc.path)
    changed_units = {name: _apply.describe(verbs) for name, verbs in done.items()}
    changed = bool(run.changed_files or run.removed or changed_units or regenerated or (packages or {}).get("changed"))
    gathered = _apply.gpu_facts_due(params["gpu_facts"], packages)
    result: dict[str, t.Any] = dict(changed=changed, changed_files=run.changed_files, removed=run.removed, changed_units=changed_units,
                                    units=states, missing_units=missing, notes=check_notes + notes, daemon_reloaded=reloaded, backups=run.backups,
                                    packages=packages or {}, regenerated=regenerated, gpu_facts_gathered=gathered, diff=run.diffs)
    if gathered:
        # Last: the host as this call left it (the packages installed, the initramfs regenerated).
        result["ansible_facts"] = {"nvidia_gpu": _facts().gather_on_host(module, root=params["gpu_facts_root"])}
    return result
