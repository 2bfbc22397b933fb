# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The copy of the collection's label code that k8s_gpu_node's boot unit imports without Ansible
(roles/k8s_gpu_node/vars/main.yml ``__k8s_gpu_node_lib_files``) holds every module_utils file those files import at run
time: a file missing from the copy fails the boot script with ModuleNotFoundError (it did, when _ids.py was split
out of _common.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
MODULE_UTILS = ROOT / "plugins" / "module_utils"
PACKAGE = "ansible_collections.gpuhost.nvidia.plugins.module_utils"


def runtime_imports(path: Path) -> set[str]:
    """The module_utils files ``path`` imports, leaving out imports under ``if t.TYPE_CHECKING:``."""
    tree = ast.parse(path.read_text())
    typing_only = {id(node) for block in ast.walk(tree) if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
                   for node in ast.walk(block)}
    found = set()
    for node in ast.walk(tree):
        if id(node) in typing_only or not isinstance(node, ast.ImportFrom) or not node.module:
            continue
        if node.module == PACKAGE:
            found.update(alias.name + ".py" for alias in node.names)
        elif node.module.startswith(PACKAGE + "."):
            found.add(node.module.rsplit(".", 1)[1] + ".py")
    return found


def test_the_copied_library_is_closed_under_its_imports():
    variables = yaml.safe_load((ROOT / "roles" / "k8s_gpu_node" / "vars" / "main.yml").read_text())
    copied = set(variables["__k8s_gpu_node_lib_files"])
    missing = {(name, imported) for name in copied for imported in runtime_imports(MODULE_UTILS / name) - copied}
    assert not missing, "files the copy imports but does not hold: %s" % sorted(missing)
    assert {"_labels.py", "_smi.py", "_ids.py"} <= copied
