# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Load one of the project's scripts (a file outside any package) as a module, for the unit tests."""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path


def load(name: str, path: Path) -> types.ModuleType:
    """The file at ``path`` as module ``name``, loaded without writing bytecode beside it: tests/hosts/build.sh keys
    the test images by every file in an image's directory, so a __pycache__ written there while `make test` runs
    changes the key and rebuilds the image and every image built on it."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    written, sys.dont_write_bytecode = sys.dont_write_bytecode, True
    try:
        spec.loader.exec_module(module)
    finally:
        sys.dont_write_bytecode = written
    return module
