# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Paths and helpers shared by the GPU facts tests (imported by tests/unit/conftest.py and by test modules).

Kept out of conftest.py so that test modules can import them by a unique name.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import typing as t

import pytest

FAKES = os.path.dirname(os.path.abspath(__file__))
UNIT = os.path.dirname(FAKES)
FIXTURES = os.path.join(UNIT, "fixtures")
OWN_XML = os.path.join(FIXTURES, "nvidia-smi-xml")
# Public real-world captures live next to the repository (<repo>/../shared/fixtures), never inside it.
SHARED_FIXTURES = os.path.normpath(os.path.join(UNIT, "..", "..", "..", "shared", "fixtures"))


class FakeSmi:
    """Drives ``tests/unit/fakes/fake_nvidia_smi.py`` through a ``nvidia-smi`` wrapper in a temporary bin dir."""

    def __init__(self, bin_dir: str, monkeypatch: pytest.MonkeyPatch):
        self.bin_dir = bin_dir
        self.path = os.path.join(bin_dir, "nvidia-smi")
        self.log = os.path.join(bin_dir, "calls.jsonl")
        self.monkeypatch = monkeypatch
        with open(self.path, "w", encoding="utf-8") as handle:
            handle.write('#!/bin/sh\nexec "%s" "%s" "$@"\n' % (sys.executable, os.path.join(FAKES, "fake_nvidia_smi.py")))
        os.chmod(self.path, os.stat(self.path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        monkeypatch.setenv("FAKE_NVIDIA_SMI_LOG", self.log)
        for name in ("FAKE_NVIDIA_SMI_SCENARIO", "FAKE_NVIDIA_SMI_STDOUT", "FAKE_NVIDIA_SMI_STDERR", "FAKE_NVIDIA_SMI_RC"):
            monkeypatch.delenv(name, raising=False)

    def replay(self, stdout: str | None = None, rc: int = 0, stderr: str | None = None, scenario: str | None = None) -> "FakeSmi":
        if scenario:
            self.monkeypatch.setenv("FAKE_NVIDIA_SMI_SCENARIO", scenario)
        if stdout:
            self.monkeypatch.setenv("FAKE_NVIDIA_SMI_STDOUT", stdout)
        if stderr:
            self.monkeypatch.setenv("FAKE_NVIDIA_SMI_STDERR", stderr)
        self.monkeypatch.setenv("FAKE_NVIDIA_SMI_RC", str(rc))
        return self

    @property
    def calls(self) -> list[dict[str, t.Any]]:
        if not os.path.exists(self.log):
            return []
        with open(self.log, "r", encoding="utf-8") as handle:
            return [json.loads(line) for line in handle]


def canned_runner(table: dict[tuple[str, ...], tuple[int, str, str]]) -> t.Callable[[list[str]], tuple[int, str, str]]:
    """A run_command stand-in answering from a table of ``argv tuple -> (rc, stdout, stderr)``; records the calls."""
    calls: list[list[str]] = []

    def run(args: list[str]) -> tuple[int, str, str]:
        calls.append(list(args))
        return table[tuple(args)]

    run.calls = calls  # type: ignore[attr-defined]
    return run
