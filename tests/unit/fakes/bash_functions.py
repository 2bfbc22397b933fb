# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""One function of a test tier's bash script, taken out of the script and run on its own: the tiers' own log
handling (tests/molecule/run.sh, tests/sanity/run.sh, tests/run_tiers.sh) is tested without running the tiers."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest


def function(path: Path, name: str) -> str:
    """The text of ``name() { ... }`` in the script at ``path``, from its line to its closing brace's."""
    text = path.read_text(encoding="utf-8")
    found = re.search(r"^%s\(\) \{\n.*?^\}\n" % name, text, re.S | re.M)
    assert found, f"{name}() is not in {path}"
    return found.group(0)


def run_bash(script: str, stdin: str = "") -> str:
    """The standard output of ``script`` run by bash (skipped, saying why, where bash is missing)."""
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("tool missing: bash")
    proc = subprocess.run([bash, "-c", script], input=stdin, capture_output=True, text=True, check=True, timeout=60)
    return proc.stdout
