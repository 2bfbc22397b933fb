# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""site.yml's facts play gathers ansible_facts.nvidia_gpu exactly once per host (issue 21): in the observation's call
(gpuhost_converged state=observe with gpu_facts) where the observation runs, else with gpuhost.nvidia.nvidia_gpu_facts,
from the same root. The conditions are site.yml's own, evaluated as Ansible does; the observation's result in check
mode is the real action plugin's (it skips without calling the module)."""

from __future__ import annotations

import pathlib
import types

import pytest
import yaml

from ansible import constants as C
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from ansible_collections.gpuhost.nvidia.plugins.action import gpuhost_converged as action_plugin
from ansible_collections.gpuhost.nvidia.plugins.modules import gpuhost_converged, nvidia_gpu_facts

ROOT = pathlib.Path(__file__).resolve().parents[3]
OBSERVE = "gpuhost.nvidia.gpuhost_converged"
FACTS = "gpuhost.nvidia.nvidia_gpu_facts"
# What Ansible registers for a task whose `when` is false.
SKIPPED = {"changed": False, "skipped": True, "skip_reason": "Conditional result was False"}


def facts_play() -> dict:
    play = yaml.safe_load((ROOT / "playbooks" / "site.yml").read_text(encoding="utf-8"))[0]
    assert play["name"] == "Gather NVIDIA GPU facts"
    return play


def default(module: types.ModuleType, option: str) -> str:
    return yaml.safe_load(module.DOCUMENTATION)["options"][option]["default"]


def when(templar: Templar, task: dict) -> bool:
    conditions = task.get("when", [])
    return all(templar.evaluate_conditional(trust_as_template(c)) for c in ([conditions] if isinstance(conditions, str) else conditions))


def observe(args: dict, check_mode: bool) -> dict:
    """The action plugin run as the task; its module call answers as the module does with gpu_facts."""
    calls = []
    task = types.SimpleNamespace(args=args, async_val=0, check_mode=check_mode, action=OBSERVE,
                                 get_play=lambda: types.SimpleNamespace(get_path=lambda: str(ROOT / "playbooks" / "site.yml") + ":23"))
    connection = types.SimpleNamespace(_shell=types.SimpleNamespace(tmpdir="/tmp/ansible-tmp"))
    plugin = action_plugin.ActionModule(task, connection, types.SimpleNamespace(check_mode=check_mode), None, None)

    def execute_module(module_name, module_args, task_vars):
        calls.append(module_args)
        facts = {"nvidia_gpu": {"root": module_args.get("gpu_facts_root", default(gpuhost_converged, "gpu_facts_root"))}}
        return {"changed": False, "path": module_args["path"], "records": {}, **({"ansible_facts": facts} if module_args.get("gpu_facts") else {})}

    plugin._execute_module = execute_module
    result = plugin.run(task_vars={"ansible_facts": {"pkg_mgr": "apt"}})
    assert len(calls) == (0 if result.get("skipped") else 1)
    return result


@pytest.mark.parametrize("root", [None, "/opt/gpuhost-fakeroot"], ids=["root-unset", "root-set"])
@pytest.mark.parametrize("check_mode", [False, True], ids=["run", "check"])
@pytest.mark.parametrize("fast_path", [None, True, False, "false"], ids=["fast-path-unset", "true", "false", "false-string"])
def test_exactly_one_of_the_two_gathers(fast_path, check_mode, root):
    # Less the controller-only question which roles' records hold (state probe with roles: no module call, no facts).
    tasks = [task for task in facts_play()["tasks"] if any(key.startswith("gpuhost.") for key in task) and "roles" not in task.get(OBSERVE, {})]
    # The observation first: the facts module's condition reads what it registered.
    assert [next(key for key in task if key.startswith("gpuhost.")) for task in tasks] == [OBSERVE, FACTS]
    observe_task, facts_task = tasks
    variables = {"ansible_check_mode": check_mode}
    if fast_path is not None:
        variables["gpuhost_fast_path"] = fast_path
    if root is not None:
        variables["gpuhost_facts_root"] = root
    templar = Templar(loader=DataLoader(), variables=variables)

    observe_args = templar.template({key: trust_as_template(value) if isinstance(value, str) else value
                                     for key, value in observe_task[OBSERVE].items()})
    observed = observe(observe_args, check_mode) if when(templar, observe_task) else dict(SKIPPED)
    templar = Templar(loader=DataLoader(), variables=dict(variables, **{observe_task["register"]: observed}))
    gathered_by = ["observation"] if "nvidia_gpu" in observed.get("ansible_facts", {}) else []
    if when(templar, facts_task):
        gathered_by.append("nvidia_gpu_facts")
    runs_observation = fast_path not in (False, "false") and not check_mode
    assert gathered_by == (["observation"] if runs_observation else ["nvidia_gpu_facts"])

    # The same root either way (omitted: each module's default, /), and nvidia_gpu_facts' defaults for the rest.
    facts_args = templar.template({key: trust_as_template(value) if isinstance(value, str) else value
                                   for key, value in facts_task[FACTS].items()})
    assert set(facts_args) <= {"root"} and set(observe_args) <= {"state", "gpu_facts", "gpu_facts_root", "host_facts"}
    # The play gathers no facts itself: the observation returns the host facts too, and where it is skipped setup runs
    # with the same subsets, exactly then (test_facts_subset.py checks the subsets).
    assert observe_args["host_facts"] is True
    setup_task = next(task for task in facts_play()["tasks"] if "ansible.builtin.setup" in task)
    assert when(templar, setup_task) is (not runs_observation)
    want = root or "/"
    assert facts_args.get("root", default(nvidia_gpu_facts, "root")) == want
    if runs_observation:
        assert observed["ansible_facts"]["nvidia_gpu"] == {"root": want}


@pytest.mark.parametrize("modules, gathers", [
    (None, False),  # FACTS_MODULES' default, smart: setup, which the play replaces
    (["smart"], False),
    (["ansible.builtin.setup"], False),
    (["ansible.builtin.setup", "gpuhost_test_kernel"], True),  # the ubuntu scenario's test kernel release
    (["example.site.cmdb_facts"], True),
])
def test_fact_modules_the_inventory_names_besides_setup_still_run(modules, gathers):
    """No setup call of its own, but a play that names other fact modules (ansible_facts_modules) gets them, after the
    one call, as gather_facts would run them."""
    task = next(task for task in facts_play()["tasks"] if "ansible.builtin.gather_facts" in task)
    # The last gather of the play: only the controller's question which roles' records hold (no module call) and the
    # roles' first checks (tasks/check.yml, which read no host) follow it.
    after = facts_play()["tasks"][facts_play()["tasks"].index(task) + 1:]
    assert all(t.get("ansible.builtin.include_role", {}).get("tasks_from") == "check.yml" or "roles" in t.get(OBSERVE, {}) for t in after), after
    # The configuration's value (ANSIBLE_FACTS_MODULES, ansible.cfg) where no variable names them: the lookup is asked
    # for Ansible's own setting, whose default is smart; the unit tier has no plugin loader, so its answer is put in.
    config = "lookup('ansible.builtin.config', 'FACTS_MODULES')"
    assert config in task["when"] and C.config.get_config_value("FACTS_MODULES") == ["smart"]
    task = dict(task, when=task["when"].replace(config, "facts_modules_configured"))
    variables = {"facts_modules_configured": C.config.get_config_value("FACTS_MODULES")}
    templar = Templar(loader=DataLoader(), variables=variables if modules is None else dict(variables, ansible_facts_modules=modules))
    assert when(templar, task) is gathers
    assert task["ansible.builtin.gather_facts"] == {"gather_subset": ["min"]}
