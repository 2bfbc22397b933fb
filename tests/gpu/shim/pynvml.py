# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The GPU tier's ``pynvml``: nvidia-ml-py with every NVML function but the getters refused.

run.sh puts this directory first in PYTHONPATH for the tier and for every module Ansible starts, so ``import pynvml``
lands here. This module imports the real nvidia-ml-py (or, when GPU_TIER_FAKE_NVML names a profile, the tier's fake
NVML), wraps it with tier_guard.guard_module and puts the wrapped module in ``sys.modules['pynvml']``, which is what
the importer receives.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_TIER = os.path.dirname(_HERE)


def _load(name: str) -> object:
    spec = importlib.util.spec_from_file_location("gpu_tier_%s" % name, os.path.join(_TIER, "%s.py" % name))
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def _real_pynvml() -> object:
    """nvidia-ml-py, imported with this directory out of sys.path."""
    saved = list(sys.path)
    sys.modules.pop("pynvml", None)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    try:
        return importlib.import_module("pynvml")
    finally:
        sys.path[:] = saved


def _install() -> None:
    target = _real_pynvml()
    if os.environ.get("GPU_TIER_FAKE_NVML"):
        target = _load("tier_fake").nvml_module()  # type: ignore[attr-defined]
    guard = _load("tier_guard")
    sys.modules["pynvml"] = guard.guard_module(target, os.environ.get("GPU_TIER_NVML_LOG"))  # type: ignore[attr-defined]


_install()
