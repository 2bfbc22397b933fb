# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""tests/molecule/run.sh's step timing: stamp_steps puts the seconds since the scenario began in front of Molecule's
step lines (coloured, as Molecule writes them into the log), and step_times sums them per step for the summary.

The two functions are taken out of run.sh and run by bash on canned lines, with no scenario and no clock: the stamps
are written in by hand for step_times, and stamp_steps is checked for which lines it stamps."""

from __future__ import annotations

import re
from pathlib import Path

from bash_functions import function, run_bash

RUN_SH = Path(__file__).resolve().parents[2] / "molecule" / "run.sh"
ESC = "\x1b"


def _step(scenario: str, step: str, what: str) -> str:
    """One step line as Molecule logs it, with its colours."""
    colour = "32" if what.startswith("Executed") else "36"
    return f"{ESC}[36mINFO    {ESC}[0m {ESC}[32m{scenario}{ESC}[0m ➜ {ESC}[33m{step}{ESC}[0m: {ESC}[{colour}m{what}{ESC}[0m"


def test_only_the_step_lines_are_stamped():
    lines = [_step("absent", "converge", "Executing"), "  │ TASK [Install the driver] ***", "PLAY RECAP",
             _step("absent", "converge", "Executed: Successful"), _step("absent", "discovery", "scenario test matrix: create")]
    out = run_bash(function(RUN_SH, "stamp_steps") + 'stamp_steps "$SECONDS"', "\n".join(lines) + "\n").splitlines()
    assert len(out) == len(lines)
    stamped = [bool(re.match(r"^\[\+\d+s\] ", line)) for line in out]
    assert stamped == [True, False, False, True, False], out
    assert [re.sub(r"^\[\+\d+s\] ", "", line) for line in out] == lines


def test_step_times_sums_each_step_in_the_order_it_first_ran(tmp_path):
    stamped = [(0, "destroy", "Executing"), (3, "destroy", "Executed: Successful"), (3, "create", "Executing"),
               (31, "create", "Executed: Successful"), (31, "check", "Executing"), (80, "check", "Executed: Successful"),
               (80, "converge", "Executing"), (292, "converge", "Executed: Successful"), (292, "check", "Executing"),
               (300, "check", "Executed: Successful"), (300, "verify", "Executing"),
               (301, "verify", "Executing Testinfra tests found in molecule/absent/tests/..."),
               (310, "verify", "Executed: Successful"), (310, "cleanup", "Executing"),
               (310, "cleanup", "Executed: Missing playbook (Remove from test_sequence to suppress)"),
               (310, "destroy", "Executing"), (330, "destroy", "Executed: Successful")]
    log = tmp_path / "absent.log"
    body = [f"[+{secs}s] {_step('absent', step, what)}" for secs, step, what in stamped]
    # Molecule's closing summary repeats the step lines (without INFO); they are stamped too but add nothing.
    body += ["[+330s] absent ➜ converge: Executed: Successful", "  │ ok: [gpuhost-debian12-absent]"]
    log.write_text("\n".join(body) + "\n", encoding="utf-8")
    assert run_bash(function(RUN_SH, "step_times") + f'step_times "{log}"') == "destroy 23 create 28 check 57 converge 212 verify 10 cleanup 0"
