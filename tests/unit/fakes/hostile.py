# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Hostile inputs for the modules' unit tests (issue #16), and the checks every refusal must pass.

The classes are the ones the issue names: control characters, shell metacharacters, whitespace, non-ASCII, empty,
huge, negative, wrong type, path traversal, and (on the host) directories, paths under a file, dangling symbolic
links and special files. A refusal must fail the task, name the option and the value, raise no traceback, leave
every file byte for byte as it was, and leave no temporary file behind.
"""

from __future__ import annotations

import os
import typing as t

HUGE = "a" * 100000

# Strings that no option naming a thing (a runtime, a variable, a kernel argument, a file name) accepts.
CONTROL = ["nvidia\n", "a\tb", "x\x00y", "\x1b[31m", "a\rb", "bell\x07", "del\x7f"]
SHELL = ["$(reboot)", "`reboot`", "a;reboot", "a|b", "a&b", "a>b", "a<b", "'q'", '"q"', "a\\b", "${IFS}", "a*", "a?", "!x"]
WHITESPACE = [" ", "a b", " lead", "trail ", "\u00a0nbsp"]
NON_ASCII = ["caf\u00e9", "\u202eevil", "\u2028", "\uff04(x)", "zero\u200bwidth"]
EMPTY = [""]
HUGE_TEXT = [HUGE]


def text_classes(*names: str) -> list[tuple[str, str]]:
    """``[(id, value), ...]`` for the named classes, for pytest.mark.parametrize."""
    table = {"control": CONTROL, "shell": SHELL, "whitespace": WHITESPACE, "non_ascii": NON_ASCII, "empty": EMPTY,
             "huge": HUGE_TEXT}
    return [("%s-%d" % (name, number), value) for name in names for number, value in enumerate(table[name])]


def shown(value: t.Any) -> str:
    """What the message must hold of the value: its repr, cut where the modules cut a long one."""
    text = repr(value)
    return text if len(text) <= 120 else text[:100]


def snapshot(*roots: str) -> dict[str, t.Any]:
    """Every entry under the roots: file bytes, link targets, directories and special files, by path."""
    seen: dict[str, t.Any] = {}
    for root in roots:
        if not os.path.lexists(root):
            continue
        if not os.path.isdir(root) or os.path.islink(root):
            seen[root] = _entry(root)
            continue
        for directory, dirs, files in os.walk(root):
            seen[directory] = "<dir>"
            for name in dirs + files:
                path = os.path.join(directory, name)
                seen[path] = _entry(path)
    return seen


def _entry(path: str) -> t.Any:
    if os.path.islink(path):
        return ("link", os.readlink(path))
    if os.path.isdir(path):
        return "<dir>"
    if os.path.isfile(path):
        with open(path, "rb") as handle:
            return handle.read()
    return ("special", os.lstat(path).st_mode)


def assert_refused(result: dict[str, t.Any], option: str, value: t.Any = None, *, before: dict[str, t.Any] | None = None,
                   roots: t.Sequence[str] = (), show_value: bool = True) -> None:
    """The task failed cleanly, naming the option (and the value), and nothing under ``roots`` changed."""
    assert result.get("failed") is True, result
    msg = str(result.get("msg"))
    assert "Traceback" not in msg and "exception" not in result, result
    assert option in msg, "the message does not name %s: %s" % (option, msg)
    if show_value:
        assert shown(value) in msg, "the message does not show %r: %s" % (value, msg)
    if before is not None:
        after = snapshot(*roots)
        assert after == before, "files changed: %s" % sorted(set(after.items()) ^ set(before.items()), key=str)


def make_special_cases(tmp: str) -> dict[str, str]:
    """Paths that are not usable files, under ``tmp``: a directory, a path under a file, a dangling link, a FIFO,
    a link loop, and a path under a dangling link."""
    os.makedirs(os.path.join(tmp, "a-directory"), exist_ok=True)
    with open(os.path.join(tmp, "a-file"), "w", encoding="ascii") as handle:
        handle.write("plain\n")
    if not os.path.lexists(os.path.join(tmp, "dangling")):
        os.symlink(os.path.join(tmp, "nowhere"), os.path.join(tmp, "dangling"))
        os.symlink(os.path.join(tmp, "loop-b"), os.path.join(tmp, "loop-a"))
        os.symlink(os.path.join(tmp, "loop-a"), os.path.join(tmp, "loop-b"))
        os.mkfifo(os.path.join(tmp, "a-fifo"))
    return {
        "directory": os.path.join(tmp, "a-directory"),
        "under_file": os.path.join(tmp, "a-file", "x.conf"),
        "dangling_link": os.path.join(tmp, "dangling"),
        "fifo": os.path.join(tmp, "a-fifo"),
        "link_loop": os.path.join(tmp, "loop-a"),
        "under_dangling_link": os.path.join(tmp, "dangling", "x.conf"),
    }


SPECIAL_KINDS = ["directory", "under_file", "dangling_link", "fifo", "link_loop", "under_dangling_link"]
