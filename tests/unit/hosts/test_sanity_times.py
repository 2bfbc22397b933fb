# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""tests/sanity/run.sh's per-test timing: stamp_tests puts the seconds since the tests began in front of ansible-test's
'Running sanity test' lines and ends with one line of seconds per test, which tests/run_tiers.sh's summary reads.

The function is taken out of run.sh and run by bash on canned lines, with no ansible-test and no clock: only which
lines are stamped and which tests the closing line names are checked, never the seconds."""

from __future__ import annotations

import re
from pathlib import Path

from bash_functions import function, run_bash

TESTS = Path(__file__).resolve().parents[2]
RUN_SH = TESTS / "sanity" / "run.sh"
RUN_TIERS = TESTS / "run_tiers.sh"
STAMP = re.compile(r"^\[\+\d+s\] ")


LINES = ['WARNING: Using locale "C.UTF-8" instead of "en_US.UTF-8".', 'Running sanity test "action-plugin-docs"',
         "Installing requirements for Python 3.11 [venv]", 'Running sanity test "compile" on Python 3.11',
         'Running sanity test "pylint"', "ERROR: Found 1 pylint issue(s) which need to be resolved:",
         "ERROR: plugins/filter/x.py:1:1: unused-import: Unused import os"]


def test_only_the_test_lines_are_stamped_and_the_end_names_each_test_once():
    out = run_bash(function(RUN_SH, "stamp_tests") + 'stamp_tests "$SECONDS"', "\n".join(LINES) + "\n").splitlines()
    assert len(out) == len(LINES) + 1
    assert [bool(STAMP.match(line)) for line in out[:-1]] == [False, True, False, True, True, False, False], out
    assert [STAMP.sub("", line) for line in out[:-1]] == LINES
    closing = re.fullmatch(r"sanity seconds per test: (.*)", out[-1])
    assert closing, out[-1]
    entries = [re.fullmatch(r"([a-z-]+) (\d+)", entry) for entry in closing.group(1).split(", ")]
    assert all(entries), closing.group(1)
    assert sorted(entry.group(1) for entry in entries) == ["action-plugin-docs", "compile", "pylint"]
    seconds = [int(entry.group(2)) for entry in entries]
    assert seconds == sorted(seconds, reverse=True)


def test_no_test_line_adds_no_closing_line():
    lines = ["ERROR: Command 'ansible-test' not found", "usage: ansible-test sanity [-h]"]
    out = run_bash(function(RUN_SH, "stamp_tests") + 'stamp_tests "$SECONDS"', "\n".join(lines) + "\n").splitlines()
    assert out == lines


def test_the_tier_summary_counts_the_stamped_lines_and_quotes_the_slowest_five(tmp_path):
    logs = tmp_path / "tiers"
    logs.mkdir()
    names = ["pylint", "validate-modules", "import", "ansible-doc", "yamllint", "compile", "pep8"]
    body = [f'[+{n}s] Running sanity test "{name}"' for n, name in enumerate(names)]
    body.append("sanity seconds per test: " + ", ".join(f"{name} {100 - n}" for n, name in enumerate(names)))
    (logs / "sanity.log").write_text("\n".join(body) + "\n", encoding="utf-8")
    out = run_bash(f'logs="{logs}"\n' + function(RUN_TIERS, "executed") + "executed sanity")
    assert out.strip() == "7 sanity tests; slowest (s): pylint 100, validate-modules 99, import 98, ansible-doc 97, yamllint 96"
