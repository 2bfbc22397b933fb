# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Directories and files that two roles share, and check mode's prediction of them (docs/design-notes.md).

On a fresh host, check mode creates nothing: when two roles of one run ensure the same directory, both directory tasks
predict "changed", but in the real run the second finds the directory the first made. The contract: a role that
ensures a directory another role may share skips it when the host fact ``gpuhost_ensured_dirs`` (path ->
"owner:group:mode") says an earlier role of the run already ensured it with the same attributes, and adds what it
ensured (also in check mode). The tests read every role's directory and file tasks with the paths resolved from the
role's defaults and vars, so a new shared path shows up here: it must follow the contract, and two roles may never
write one file, nor may one role's directory hold another's (its implicit creation would be predicted twice too).
"""

from __future__ import annotations

import itertools
import pathlib
import typing as t

import pytest
import yaml

from ansible.errors import AnsibleError
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from role_templates import inline_lookups, trusted

ROLES = pathlib.Path(__file__).resolve().parents[3] / "roles"
# gpuhost.nvidia.gpuhost_apply: a role's directories and files in one call.
APPLY = "gpuhost.nvidia.gpuhost_apply"
# Modules that write a whole file (lineinfile and blockinfile edit a part: two roles may keep their own blocks in one file,
# pacman.conf's, which exists before any role runs).
FILE_WRITERS = {"ansible.builtin.template": "dest", "ansible.builtin.copy": "dest"}


def _role_vars(role: str) -> dict[str, t.Any]:
    variables: dict[str, t.Any] = {}
    for path in (ROLES / role / "defaults" / "main.yml", ROLES / role / "vars" / "main.yml"):
        if path.exists():
            variables.update(yaml.safe_load(path.read_text(encoding="utf-8")) or {})
    return {**trusted(variables), "role_path": str(ROLES / role), "ansible_managed": "Ansible managed"}


def _apply_entries(templar: Templar, task: dict, key: str, extra: dict[str, t.Any] | None = None) -> list[dict[str, t.Any]]:
    """The ``directories`` or ``files`` entries of a gpuhost_apply task, rendered; [] when they cannot be (host facts).

    The role's vars/default.yml (its values for a distribution without a vars file of its own) fill in what the file
    contents are rendered from.
    """
    role_path = pathlib.Path(templar.available_variables["role_path"])
    fallback = role_path / "vars" / "default.yml"
    distro = trusted(yaml.safe_load(fallback.read_text(encoding="utf-8")) or {}) if fallback.exists() else {}
    (value, task_vars), lookups = inline_lookups([task[APPLY].get(key) or [], task.get("vars") or {}], role_path)
    scoped = templar.copy_with_new_env(available_variables={**distro, **templar.available_variables, **lookups, **trusted(task_vars),
                                                            **(extra or {})})
    try:
        return list(scoped.template(trusted(value)))
    except (AnsibleError, KeyError, TypeError):
        return []


def _walk(tasks: list[dict]) -> t.Iterator[dict]:
    for task in tasks or []:
        yield task
        for key in ("block", "rescue", "always"):
            yield from _walk(task.get(key) or [])


def _tasks(role: str) -> t.Iterator[tuple[str, dict]]:
    for path in sorted((ROLES / role / "tasks").glob("*.yml")):
        for task in _walk(yaml.safe_load(path.read_text(encoding="utf-8")) or []):
            yield path.name, task


def _paths(templar: Templar, task: dict, key: str) -> list[str]:
    """The paths a task's ``key`` names, for each loop item; unresolvable ones (host facts, results) are left out."""
    args = task[next(name for name in task if name in FILE_WRITERS or name == "ansible.builtin.file")]
    try:
        items = templar.template(trust_as_template(task["loop"])) if isinstance(task.get("loop"), str) else task.get("loop")
        result = []
        for item in items if items is not None else [None]:
            scoped = templar.copy_with_new_env(available_variables={**templar.available_variables, "item": trusted(item)})
            result.append(str(scoped.template(trust_as_template(args[key]))))
        return [path for path in result if path]
    except (AnsibleError, KeyError, TypeError):
        return []


# What a role's call renders from besides its vars (a plan the role computes on the host): the widest case, so that every
# directory and file the role may write is seen.
SCAN_CONTEXT = {"vfio_passthrough": {"__vfio_passthrough_plan": {"mode": "addresses", "functions": ["0000:01:00.0"], "ids": []},
                                     "__vfio_passthrough_early_modules": ["vfio_pci"]}}


def _managed() -> tuple[dict[str, list[tuple[str, str, dict]]], dict[str, list[tuple[str, str]]]]:
    """Every directory a file task ensures (path -> [(role, task file, task)]) and every file a role writes."""
    dirs: dict[str, list[tuple[str, str, dict]]] = {}
    files: dict[str, list[tuple[str, str]]] = {}
    for role in sorted(path.name for path in ROLES.iterdir() if (path / "tasks").is_dir()):
        templar = Templar(loader=DataLoader(), variables={**_role_vars(role), **SCAN_CONTEXT.get(role, {})})
        for name, task in _tasks(role):
            if task.get("delegate_to") in ("localhost", "127.0.0.1"):
                continue  # the controller's files (the doctor's report directory)
            file_args = task.get("ansible.builtin.file")
            if isinstance(file_args, dict) and file_args.get("state") == "directory":
                for path in _paths(templar, task, "path"):
                    dirs.setdefault(path, []).append((role, name, task))
            if isinstance(task.get(APPLY), dict):
                for entry in _apply_entries(templar, task, "directories"):
                    dirs.setdefault(entry["path"], []).append((role, name, task))
                for entry in _apply_entries(templar, task, "files"):
                    files.setdefault(entry["path"], []).append((role, task["name"]))
            for module, key in FILE_WRITERS.items():
                if isinstance(task.get(module), dict) and key in task[module]:
                    for path in _paths(templar, task, key):
                        files.setdefault(path, []).append((role, task["name"]))
    return dirs, files


DIRS, FILES = _managed()
SHARED = {path: owners for path, owners in DIRS.items() if len({role for role, _name, _task in owners}) > 1}


def test_the_scan_sees_the_roles_directories_and_files() -> None:
    assert {"/etc/gpuhost", "/usr/local/libexec/gpuhost", "/etc/gpuhost-gpu-exporter"} <= set(DIRS)
    assert {"/usr/local/libexec/gpuhost/gpu-settings", "/usr/local/libexec/gpuhost/vfio-pci-override"} <= set(FILES)


def test_the_shared_directory_today() -> None:
    assert {path: sorted({role for role, _name, _task in owners}) for path, owners in SHARED.items()} == {
        "/usr/local/libexec/gpuhost": ["gpu_settings", "vfio_passthrough"]}


@pytest.mark.parametrize("path", sorted(SHARED))
def test_every_task_on_a_shared_directory_follows_the_contract(path: str) -> None:
    for role, name, task in SHARED[path]:
        if APPLY in task:
            # gpuhost_apply: the entry is left out when an earlier role ensured it with the same attributes, and only then
            templar = Templar(loader=DataLoader(), variables={**_role_vars(role), **SCAN_CONTEXT.get(role, {})})
            entry = next(item for item in _apply_entries(templar, task, "directories") if item["path"] == path)
            attrs = f"{entry['owner']}:{entry['group']}:{entry['mode']}"
            ensured = [item["path"] for item in _apply_entries(templar, task, "directories", {"gpuhost_ensured_dirs": {path: attrs}})]
            other = [item["path"] for item in _apply_entries(templar, task, "directories", {"gpuhost_ensured_dirs": {path: attrs + "0"}})]
            assert path not in ensured and path in other, (role, name)
        else:
            args = task["ansible.builtin.file"]
            attrs = f"{args['owner']}:{args['group']}:{args['mode']}"
            when = task.get("when")
            conditions = when if isinstance(when, list) else [when]
            assert any("gpuhost_ensured_dirs" in str(condition) and f"!= '{attrs}'" in str(condition) for condition in conditions), (role, name)
        publish = [other for file, other in _tasks(role)
                   if "gpuhost_ensured_dirs" in (other.get("ansible.builtin.set_fact") or {}) and file != "absent.yml"]
        assert publish, f"{role} never adds what it ensured to gpuhost_ensured_dirs"
        added = {}
        for other in publish:
            templar = Templar(loader=DataLoader(), variables={**_role_vars(role), **trusted(other.get("vars") or {}),
                                                              "vfio_passthrough_state": "present", "__vfio_passthrough_plan": {"mode": "addresses"}})
            added.update(templar.template(trust_as_template(other["ansible.builtin.set_fact"]["gpuhost_ensured_dirs"])))
        assert added.get(path) == attrs, (role, added)


def test_no_file_is_written_by_two_roles() -> None:
    assert {path: owners for path, owners in FILES.items() if len({role for role, _name in owners}) > 1} == {}


def test_no_roles_directory_holds_a_directory_of_another_role() -> None:
    nested = [(outer, inner) for outer, inner in itertools.permutations(DIRS, 2)
              if inner.startswith(outer.rstrip("/") + "/")
              and {role for role, _n, _t in DIRS[outer]} - {role for role, _n, _t in DIRS[inner]}]
    assert nested == []


def test_a_run_predicts_the_shared_directory_once_whichever_role_comes_first() -> None:
    libexec = "/usr/local/libexec/gpuhost"
    # gpu_settings first (site.yml's order): vfio_passthrough's task is left out
    settings = Templar(loader=DataLoader(), variables=_role_vars("gpu_settings"))
    publish = next(task for _file, task in _tasks("gpu_settings")
                   if task.get("name") == "Report what the role configured, for the site summary")
    ensured = settings.template(trust_as_template(publish["ansible.builtin.set_fact"]["gpuhost_ensured_dirs"]))
    assert ensured == {"/etc/gpuhost": "root:root:0755", libexec: "root:root:0755"}
    vfio = Templar(loader=DataLoader(), variables={**_role_vars("vfio_passthrough"), **SCAN_CONTEXT["vfio_passthrough"]})
    vfio_task = next(task for _file, task in _tasks("vfio_passthrough") if APPLY in task and task[APPLY].get("directories"))

    def vfio_dirs(extra: dict[str, t.Any]) -> list[str]:
        return [entry["path"] for entry in _apply_entries(vfio, vfio_task, "directories", extra)]
    assert vfio_dirs({"gpuhost_ensured_dirs": ensured}) == []
    assert vfio_dirs({}) == [libexec]
    assert vfio_dirs({"__vfio_passthrough_plan": {"mode": "ids", "functions": [], "ids": ["10de:2330"]}}) == []  # no override script
    # vfio_passthrough first: gpu_settings' call leaves that directory out and still creates its spec directory
    apply_task = next(task for _file, task in _tasks("gpu_settings") if APPLY in task and task[APPLY].get("directories"))
    left = [entry["path"] for entry in _apply_entries(settings, apply_task, "directories", {"gpuhost_ensured_dirs": {libexec: "root:root:0755"}})]
    assert libexec not in left and "/etc/gpuhost" in left
    # another owner or mode is no match: the later role fixes it itself
    assert vfio_dirs({"gpuhost_ensured_dirs": {libexec: "root:root:0700"}}) == [libexec]


@pytest.mark.parametrize(("state", "mode", "added"), [("present", "addresses", True), ("present", "ids", False), ("absent", "addresses", False)])
def test_vfio_passthrough_adds_the_directory_only_when_it_ensured_it(state: str, mode: str, added: bool) -> None:
    task = next(task for _file, task in _tasks("vfio_passthrough") if "gpuhost_ensured_dirs" in (task.get("ansible.builtin.set_fact") or {}))
    before = {"/etc/gpuhost": "root:root:0755"}
    templar = Templar(loader=DataLoader(), variables={**_role_vars("vfio_passthrough"), **trusted(task["vars"]), "gpuhost_ensured_dirs": before,
                                                      "vfio_passthrough_state": state, "__vfio_passthrough_plan": {"mode": mode}})
    after = templar.template(trust_as_template(task["ansible.builtin.set_fact"]["gpuhost_ensured_dirs"]))
    assert after == ({**before, "/usr/local/libexec/gpuhost": "root:root:0755"} if added else before)
