# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Each role's "Ensure the facts used by the role are present" runs ``setup`` only when a required fact is missing.

The condition is evaluated with Ansible's own templar against the role's required-facts list, with the facts in
another order than the list (as ``setup`` returns them): an order-sensitive test made ``setup`` run again on every
run (issue #21).
"""

from __future__ import annotations

import pathlib

import pytest
import yaml

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

ROLES = pathlib.Path(__file__).resolve().parents[3] / "roles"
TASK = "Ensure the facts used by the role are present"
ROLES_WITH_THE_TASK = sorted(
    path.parents[1].name for path in ROLES.glob("*/tasks/set_vars.yml")
    if any(task.get("name") == TASK for task in yaml.safe_load(path.read_text(encoding="utf-8")) or [])
)


def condition_and_required(role: str) -> tuple[str, list[str]]:
    tasks = yaml.safe_load((ROLES / role / "tasks" / "set_vars.yml").read_text(encoding="utf-8"))
    task = next(task for task in tasks if task.get("name") == TASK)
    required = yaml.safe_load((ROLES / role / "vars" / "main.yml").read_text(encoding="utf-8"))["__%s_required_facts" % role]
    return task["when"], required


def needs_setup(role: str, facts: dict[str, object]) -> bool:
    condition, required = condition_and_required(role)
    templar = Templar(loader=DataLoader(), variables={"__%s_required_facts" % role: required, "ansible_facts": facts})
    return bool(templar.evaluate_conditional(trust_as_template(condition)))


def test_every_role_that_uses_host_facts_has_the_task() -> None:
    assert ROLES_WITH_THE_TASK == ["gpu_settings", "nvidia_container_toolkit", "nvidia_driver", "vfio_passthrough"]


@pytest.mark.parametrize("role", ROLES_WITH_THE_TASK)
def test_present_facts_in_any_order_skip_setup(role: str) -> None:
    _condition, required = condition_and_required(role)
    assert len(required) > 1
    # setup's order, reversed from the list, plus facts the role does not need
    facts = {"nvidia_gpu": {}, **{name: "x" for name in reversed(required)}, "hostname": "h"}
    assert not needs_setup(role, facts)


@pytest.mark.parametrize("role", ROLES_WITH_THE_TASK)
def test_any_missing_fact_runs_setup(role: str) -> None:
    _condition, required = condition_and_required(role)
    for missing in required:
        facts = {name: "x" for name in required if name != missing}
        assert needs_setup(role, facts), missing
    assert needs_setup(role, {})
