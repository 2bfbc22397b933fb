# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The collection's module_utils for its filters, imported on first use. Private to this collection: not a public API.

A template that names any of the collection's filters makes Ansible's filter loader import every file under
plugins/filter, to find which one defines it, and it does so again in each task's forked worker, compiling each file
from source (the collection loader keeps no bytecode). With the module_utils imported at the top of those files, a task
that only calls ``packages_ensured`` compiled ``_driver``, ``_vfio``, ``_catalog``, ``_pci``, ``_gpg``, ``_validate``,
``_report`` and ``_toolkit`` too: about 0.1 s a task, 2.6 s in a first converge of site.yml
(docs/design-notes.md). A filter file names its module_utils through :func:`module_utils`, and only a filter that
runs imports them.
"""

from __future__ import annotations

import importlib
import types
import typing as t

PACKAGE = "ansible_collections.gpuhost.nvidia.plugins.module_utils"


class LazyModule:
    """Stands for ``PACKAGE.<name>`` and imports it on the first attribute read."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._module: types.ModuleType | None = None

    def __getattr__(self, attribute: str) -> t.Any:
        if self._module is None:
            self._module = importlib.import_module("%s.%s" % (PACKAGE, self._name))
        return getattr(self._module, attribute)


def module_utils(name: str) -> t.Any:
    """The collection's module_utils ``name`` (``"_driver"``), imported when a filter first uses it."""
    return LazyModule(name)
