# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Shared by the role tests that render a role's own task and vars YAML with ansible's Templar."""

from __future__ import annotations

import pathlib
import re
import typing as t

from ansible.template import trust_as_template

# The roles' tests import it from here.
from trusted_vars import trusted  # noqa: F401  pylint: disable=unused-import


LOOKUP = re.compile(r"lookup\('ansible\.builtin\.(template|file)', '([^']+)'(?:, rstrip=false)?\)")


def inline_lookups(value: t.Any, role: pathlib.Path) -> tuple[t.Any, dict[str, t.Any]]:
    """A role task's arguments with each template/file lookup of a role file replaced by a variable holding it.

    Rendered with a bare Templar (no plugin loader: initialising it would change how the other tests import the
    collection), the variables stand in for the lookups: a template is a trusted string, rendered where it is used; a
    file is its text as it is.
    """
    found: dict[str, t.Any] = {}

    def swap(match: re.Match) -> str:
        kind, name = match.groups()
        path = role / ("templates" if kind == "template" else "files") / name
        text = path.read_text(encoding="utf-8")
        var = "__lookup_%s_%d" % (kind, len(found))
        found[var] = trust_as_template(text) if kind == "template" else text
        return var

    def walk(item: t.Any) -> t.Any:
        if isinstance(item, str):
            return LOOKUP.sub(swap, item)
        if isinstance(item, dict):
            return {key: walk(sub) for key, sub in item.items()}
        if isinstance(item, list):
            return [walk(sub) for sub in item]
        return item

    return walk(value), found
