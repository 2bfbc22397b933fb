#!/usr/bin/env python
# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The collection's structure, measured from the code: what docs/design.md's "Structure" table records before and
after a refactor.

    python3 benchmarks/structure.py [--repo DIR] [--json]

- plugins/: files ("rooms") and lines; import arrows between them (``ansible_collections.gpuhost.nvidia.plugins...``
  imports, read with ast); floors (the longest chain of arrows below a file, so a file's floor is one above the
  highest it imports); arrows that close a cycle;
- the longest files and functions of plugins/;
- roles/: tasks per role (task entries in tasks/*.yml and handlers, blocks' inner tasks counted, the block not), and
  the lines of vars/ and defaults/;
- YAML -> Python hops: the collection's own filters named in each role's tasks and vars (``gpuhost.nvidia.<filter>``),
  each name once per role: the places where a role's YAML hands data to the collection's Python.

Nothing is imported or run; it reads text.
"""

from __future__ import annotations

import argparse
import ast
import json
import pathlib
import re
import sys

import yaml

PREFIX = "ansible_collections.gpuhost.nvidia.plugins."


def _module_name(repo: pathlib.Path, path: pathlib.Path) -> str:
    return ".".join(path.relative_to(repo / "plugins").with_suffix("").parts)


def plugin_graph(repo: pathlib.Path) -> tuple[dict[str, int], dict[str, set[str]], list[tuple[str, str, int]]]:
    """(lines per file, arrows per file, functions with their lengths) for every .py file of plugins/."""
    lines: dict[str, int] = {}
    arrows: dict[str, set[str]] = {}
    functions: list[tuple[str, str, int]] = []
    for path in sorted((repo / "plugins").rglob("*.py")):
        if path.name == "__init__.py":
            continue
        name = _module_name(repo, path)
        text = path.read_text(encoding="utf-8")
        lines[name] = len(text.splitlines())
        tree = ast.parse(text)
        targets: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(PREFIX.rstrip(".")):
                base = node.module[len(PREFIX):] if node.module.startswith(PREFIX) else ""
                for alias in node.names:
                    full = "%s.%s" % (base, alias.name) if base else alias.name
                    # "from ...module_utils import _x" names a file; "from ...module_utils._x import y" names _x
                    targets.add(full if (repo / "plugins" / (full.replace(".", "/") + ".py")).exists() else base)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith(PREFIX):
                        targets.add(alias.name[len(PREFIX):])
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                functions.append((name, node.name, (node.end_lineno or node.lineno) - node.lineno + 1))
        arrows[name] = {t for t in targets if t and t != name}
    return lines, arrows, functions


def floors(arrows: dict[str, set[str]]) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Each file's floor (0: imports none of the others) and the arrows that close a cycle."""
    floor: dict[str, int] = {}
    back: list[tuple[str, str]] = []
    visiting: set[str] = set()

    def visit(name: str) -> int:
        if name in floor:
            return floor[name]
        visiting.add(name)
        best = 0
        for target in sorted(arrows.get(name, ())):
            if target not in arrows:
                continue
            if target in visiting:
                back.append((name, target))
                continue
            best = max(best, visit(target) + 1)
        visiting.discard(name)
        floor[name] = best
        return best

    for name in sorted(arrows):
        visit(name)
    return floor, back


def _count_tasks(items: object) -> int:
    if not isinstance(items, list):
        return 0
    total = 0
    for item in items:
        if not isinstance(item, dict):
            continue
        inner = [item.get(k) for k in ("block", "rescue", "always") if isinstance(item.get(k), list)]
        if inner:
            total += sum(_count_tasks(i) for i in inner)
        else:
            total += 1
    return total


def roles(repo: pathlib.Path) -> dict[str, dict[str, object]]:
    found: dict[str, dict[str, object]] = {}
    for role in sorted(p for p in (repo / "roles").iterdir() if p.is_dir()):
        tasks = 0
        files = 0
        for sub in ("tasks", "handlers"):
            for path in sorted((role / sub).glob("*.yml")) if (role / sub).is_dir() else []:
                files += sub == "tasks"
                tasks += _count_tasks(yaml.safe_load(path.read_text(encoding="utf-8")))
        var_lines = sum(len(p.read_text(encoding="utf-8").splitlines())
                        for sub in ("vars", "defaults") if (role / sub).is_dir() for p in (role / sub).glob("*.yml"))
        filters = set()
        for sub in ("tasks", "vars", "handlers"):
            for path in (role / sub).glob("*.yml") if (role / sub).is_dir() else []:
                filters.update(re.findall(r"\|\s*gpuhost\.nvidia\.([a-z0-9_]+)", path.read_text(encoding="utf-8")))
        found[role.name] = {"task_files": files, "tasks": tasks, "vars_lines": var_lines, "filters": sorted(filters)}
    return found


def measure(repo: pathlib.Path) -> dict[str, object]:
    lines, arrows, functions = plugin_graph(repo)
    floor, back = floors(arrows)
    return {
        "rooms": len(lines),
        "lines": sum(lines.values()),
        "arrows": sum(len(v & set(lines)) for v in arrows.values()),
        "floors": (max(floor.values()) + 1) if floor else 0,
        "arrows_closing_a_cycle": back,
        "longest_files": sorted(lines.items(), key=lambda kv: -kv[1])[:8],
        "longest_functions": [("%s:%s" % (m, f), n) for m, f, n in sorted(functions, key=lambda x: -x[2])[:8]],
        "roles": roles(repo),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--repo", default=str(pathlib.Path(__file__).resolve().parent.parent))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = measure(pathlib.Path(args.repo))
    if args.json:
        json.dump(result, sys.stdout, indent=1)
        print()
        return 0
    print("plugins/: %(rooms)d files, %(lines)d lines, %(arrows)d import arrows, %(floors)d floors" % result)
    print("arrows closing a cycle: %s" % (result["arrows_closing_a_cycle"] or "none"))
    print("longest files: " + ", ".join("%s %d" % kv for kv in result["longest_files"]))
    print("longest functions: " + ", ".join("%s %d" % kv for kv in result["longest_functions"]))
    print("%-26s %6s %6s %10s %8s" % ("role", "files", "tasks", "vars+def", "filters"))
    for name, role in result["roles"].items():
        print("%-26s %6d %6d %10d %8d" % (name, role["task_files"], role["tasks"], role["vars_lines"], len(role["filters"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
