# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Loading the collection's playbooks and roles prints no warning on the user's terminal.

ansible-core warns on every run about YAML it accepts with doubts; a duplicate mapping key is one (an explicit key
next to a ``<<`` merge that already brings it, as two role argument specs once had). Every playbook and every role
entry point named in an argument spec is loaded the way a run loads it (``--list-tasks``: the tasks, the role
defaults and vars, the argument specs) and the output must hold no warning.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[3]
PLAYBOOKS = sorted((REPO / "playbooks").glob("*.yml"))
WARNING_MARKS = ("[WARNING]", "[DEPRECATION WARNING]", "[ERROR]")


# Roles without an argument spec, and why; each of their task files is loaded as an entry point instead.
WITHOUT_SPECS = {
    # Validation would template the record's lists on the path that does not record, and add a task to every include
    # on the converged fast path (roles/internal_common/README.md).
    "internal_common": "the internal common role",
}


def _entry_points() -> list[tuple[str, str]]:
    points = []
    for spec in sorted((REPO / "roles").glob("*/meta/argument_specs.yml")):
        role = spec.parent.parent.name
        for entry in yaml.safe_load(spec.read_text(encoding="utf-8"))["argument_specs"]:
            points.append((role, entry))
    for role in sorted(WITHOUT_SPECS):
        assert not (REPO / "roles" / role / "meta" / "argument_specs.yml").exists(), role
        points.extend((role, path.stem) for path in sorted((REPO / "roles" / role / "tasks").glob("*.yml")))
    return points


def _list_tasks(*playbooks: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0")
    return subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "--list-tasks",
                           *(str(playbook) for playbook in playbooks)],
                          env=env, capture_output=True, text=True, check=False, timeout=300)


def _assert_quiet(proc: subprocess.CompletedProcess, what: str) -> None:
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{what} did not load (rc {proc.returncode}):\n{output}"
    noisy = [line for line in output.splitlines() if any(mark in line for mark in WARNING_MARKS)]
    assert not noisy, f"{what} warns when it is loaded:\n{output}"


def _noisy(proc: subprocess.CompletedProcess) -> bool:
    return proc.returncode != 0 or any(mark in proc.stdout + proc.stderr for mark in WARNING_MARKS)


def test_every_playbook_loads_without_warnings():
    """All playbooks in one run (one ansible-playbook start instead of one per playbook); where that run warns or
    fails, each playbook is loaded alone, so that the failure names the playbook that warns."""
    assert len(PLAYBOOKS) > 1, PLAYBOOKS
    together = _list_tasks(*PLAYBOOKS)
    # --list-tasks names each playbook it loaded: all of them were.
    listed = [line.split(":", 1)[1].strip() for line in together.stdout.splitlines() if line.startswith("playbook:")]
    if _noisy(together) or listed != [str(p) for p in PLAYBOOKS]:
        for playbook in PLAYBOOKS:
            _assert_quiet(_list_tasks(playbook), f"playbooks/{playbook.name}")
    _assert_quiet(together, "playbooks/ " + ", ".join(p.name for p in PLAYBOOKS))
    assert listed == [str(p) for p in PLAYBOOKS], together.stdout


def test_every_role_entry_point_loads_without_warnings(tmp_path):
    points = _entry_points()
    assert {role for role, _entry in points} == {p.name for p in (REPO / "roles").iterdir() if (p / "tasks").is_dir()}
    plays = [{"name": f"{role} {entry}", "hosts": "localhost", "gather_facts": False,
              "tasks": [{"name": f"Load {role} {entry}", "ansible.builtin.import_role": {
                  "name": f"gpuhost.nvidia.{role}", "tasks_from": f"{entry}.yml"}}]}
             for role, entry in points]
    playbook = tmp_path / "entry_points.yml"
    playbook.write_text(yaml.safe_dump(plays), encoding="utf-8")
    _assert_quiet(_list_tasks(playbook), "the roles' entry points " + ", ".join(f"{r}:{e}" for r, e in points))
