# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The public surface is written down three times and must agree.

README.md's "Public API" lists the public modules, filters, roles and playbooks; meta/runtime.yml's action group holds
the public modules; every module and filter not listed says "Internal." in its short description and promises nothing.
"""

from __future__ import annotations

import ast
import os
import re
import typing as t

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
MODULES = os.path.join(ROOT, "plugins", "modules")
FILTERS = os.path.join(ROOT, "plugins", "filter")
INTERNAL_RE = re.compile(r"^Internal\. ")
# Internal modules whose documentation is still to be marked: each must be unmarked and outside the group, and is removed
# from here once it is marked (none are left).
PENDING: set[str] = set()


def _readme_lists() -> dict[str, list[str]]:
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as handle:
        text = handle.read()
    match = re.search(r"^## Public API\n(.*?)^## ", text, re.M | re.S)
    assert match, "README.md has no '## Public API' section"
    lists: dict[str, list[str]] = {}
    for item in re.split(r"^- ", match.group(1), flags=re.M)[1:]:
        kind, _colon, names = item.partition(":")
        names = re.sub(r"\(.*?\)", "", names, flags=re.S)
        lists[kind.strip().lower()] = re.findall(r"`([^`]+)`", names)
    assert sorted(lists) == ["filters", "modules", "playbooks", "roles"], sorted(lists)
    return lists


def _module_docs() -> dict[str, dict[str, t.Any]]:
    docs = {}
    for name in sorted(os.listdir(MODULES)):
        if not name.endswith(".py"):
            continue
        with open(os.path.join(MODULES, name), encoding="utf-8") as handle:
            tree = ast.parse(handle.read())
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(getattr(target, "id", None) == "DOCUMENTATION" for target in node.targets):
                docs[name[:-3]] = yaml.safe_load(node.value.value)
    return docs


def _filter_docs() -> dict[str, dict[str, t.Any]]:
    docs = {}
    for name in sorted(os.listdir(FILTERS)):
        if name.endswith(".yml"):
            with open(os.path.join(FILTERS, name), encoding="utf-8") as handle:
                docs[name[:-4]] = yaml.safe_load(handle)["DOCUMENTATION"]
    return docs


def _action_group() -> list[str]:
    with open(os.path.join(ROOT, "meta", "runtime.yml"), encoding="utf-8") as handle:
        runtime = yaml.safe_load(handle)
    return runtime["action_groups"]["nvidia"]


def _split(docs: dict[str, dict[str, t.Any]]) -> tuple[set[str], set[str]]:
    internal = {name for name, doc in docs.items() if INTERNAL_RE.match(doc["short_description"])}
    return internal, set(docs) - internal


def test_action_group_is_the_readme_public_modules() -> None:
    group = _action_group()
    assert group == sorted(set(group)), "keep meta/runtime.yml's group sorted and without repeats"
    assert sorted(_readme_lists()["modules"]) == group


@pytest.mark.parametrize("kind, docs", [("modules", _module_docs), ("filters", _filter_docs)])
def test_every_plugin_is_public_or_says_internal(kind: str, docs: t.Callable[[], dict[str, dict[str, t.Any]]]) -> None:
    found = docs()
    internal, unmarked = _split(found)
    public = set(_readme_lists()[kind])
    assert public <= set(found), "README names %s that do not exist: %s" % (kind, sorted(public - set(found)))
    assert not public & internal, "public %s marked Internal: %s" % (kind, sorted(public & internal))
    pending = PENDING if kind == "modules" else set()
    assert unmarked - pending == public, "neither public nor Internal: %s; public but missing: %s" % (
        sorted(unmarked - pending - public), sorted(public - unmarked))
    assert pending <= unmarked, "marked Internal now, drop from PENDING: %s" % sorted(pending - unmarked)
    for name in sorted(internal):
        assert "no compatibility promise" in " ".join(found[name]["description"]), name


def test_about_ten_public_filters() -> None:
    assert 8 <= len(_readme_lists()["filters"]) <= 14


def test_public_roles_and_playbooks_are_all_there() -> None:
    lists = _readme_lists()
    roles = sorted(name for name in os.listdir(os.path.join(ROOT, "roles")) if not name.startswith("internal_"))
    assert sorted(lists["roles"]) == roles
    playbooks = sorted(name for name in os.listdir(os.path.join(ROOT, "playbooks")) if name.endswith(".yml"))
    assert sorted(lists["playbooks"]) == playbooks
