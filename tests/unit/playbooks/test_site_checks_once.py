# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Each role's check of its variables (tasks/check.yml) runs once per host in site.yml: the first play runs it for every
role the run includes and registers which; the role plays name those roles to the role (__gpuhost_site_checked, a play
variable of site.yml only), whose own check is then skipped. Used on its own, a role still checks first (the variable is
not defined: tests/unit/roles/test_role_input_checks.py). And the per-distribution variables are not loaded before the
fast path's end: only the full path and state absent read them."""

from __future__ import annotations

import pathlib

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[3]
SITE = yaml.safe_load((ROOT / "playbooks" / "site.yml").read_text(encoding="utf-8"))
# The roles that skip their check after site.yml's first play ran it, with site.yml's play that runs each.
SKIPPING = {"nvidia_driver": "Install the NVIDIA driver", "gpu_settings": "Configure GPU settings and the persistence daemon",
            "gpu_compose": "Write docker compose GPU overrides", "gpu_doctor": "Diagnose the GPU hosts",
            "k8s_gpu_node": "Make the Kubernetes GPU workers ready for GPU pods"}
# The role plays' loads of the per-distribution variables (the internal common role's vars.yml, or the role's set_vars.yml).
END = "End the role, nothing drifted"


def _tasks(role: str) -> list[dict]:
    return yaml.safe_load((ROOT / "roles" / role / "tasks" / "main.yml").read_text(encoding="utf-8"))


def _play(name: str) -> dict:
    return next(play for play in SITE if play["name"] == name)


@pytest.mark.parametrize("role", sorted(SKIPPING))
def test_the_role_check_is_first_and_skipped_only_for_the_roles_site_checked(role) -> None:
    first = _tasks(role)[0]
    assert first["ansible.builtin.import_tasks"] == "check.yml", first
    assert first["when"] == "'%s' not in __gpuhost_site_checked | default([])" % role, first
    expression = _play(SKIPPING[role])["vars"]["__gpuhost_site_checked"]
    assert "__gpuhost_first_checks.results" in expression and "'__gpuhost_check.role'" in expression, expression


def test_only_site_yml_s_role_plays_define_the_checked_roles() -> None:
    defining = sorted(play["name"] for play in SITE if "__gpuhost_site_checked" in (play.get("vars") or {}))
    assert defining == sorted(SKIPPING.values()), defining
    checks = SITE[0]["tasks"][-1]
    assert checks["ansible.builtin.include_role"]["tasks_from"] == "check.yml" and checks["register"] == "__gpuhost_first_checks"


def _loads_vars(task: dict) -> bool:
    include = task.get("ansible.builtin.include_role") or {}
    files = (task.get("ansible.builtin.include_tasks"), task.get("ansible.builtin.import_tasks"))
    return include.get("tasks_from") == "vars.yml" or "set_vars.yml" in files


@pytest.mark.parametrize("role", ["nvidia_driver", "gpu_settings", "gpu_compose"])
def test_the_per_distribution_variables_load_after_the_fast_paths_end(role) -> None:
    tasks = _tasks(role)
    end = [task.get("name") for task in tasks].index(END)
    early = [task for task in tasks[:end] if _loads_vars(task)]
    # Before the end, only where the host facts they need are missing (a play without facts): a condition on them.
    assert all("_required_facts | difference(ansible_facts.keys()" in task["when"] for task in early), early
    assert any(_loads_vars(task) for task in tasks[end + 1:]), role
    absent = next(i for i, task in enumerate(tasks) if "absent.yml" == task.get("ansible.builtin.include_tasks"))
    assert absent > end and any(_loads_vars(task) for task in tasks[end + 1:absent]), role


def test_site_names_the_roles_it_checked_for_each_host(local_play, tmp_path) -> None:
    play = dict(SITE[0], hosts="all")
    expression = _play(SKIPPING["gpu_settings"])["vars"]["__gpuhost_site_checked"]
    play["tasks"] = play["tasks"] + [{"name": "Show the checked roles", "ansible.builtin.debug": {"var": "__gpuhost_site_checked"},
                                      "vars": {"__gpuhost_site_checked": expression}}]
    root = tmp_path / "root"
    root.mkdir()
    hosts = {"defaults": {"gpuhost_facts_root": str(root)},
             "compose-no-doctor": {"gpuhost_facts_root": str(root), "gpuhost_doctor": False, "gpuhost_driver": False,
                                   "gpu_compose_projects": [{"path": "/srv/app", "services": [{"name": "app"}]}]}}
    results = local_play([play], hosts=hosts)
    assert results["defaults"]["Show the checked roles"]["__gpuhost_site_checked"] == [
        "nvidia_driver", "nvidia_container_toolkit", "gpu_settings", "gpu_doctor"]
    assert results["compose-no-doctor"]["Show the checked roles"]["__gpuhost_site_checked"] == [
        "nvidia_container_toolkit", "gpu_settings", "gpu_compose"]


@pytest.mark.parametrize("converged", [[], ["nvidia_driver", "gpu_compose"], None], ids=["none", "two", "not-asked"])
def test_the_first_play_leaves_out_the_checks_of_the_roles_whose_records_hold(converged) -> None:
    """The first play's controller-only question (gpuhost_converged roles:) names the roles whose records hold; their
    checks wait for the role, which checks itself if it takes its full path after all (it is then not in
    __gpuhost_site_checked). Every other enabled role is checked."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    tasks = SITE[0]["tasks"]
    question = next(task for task in tasks if "roles" in (task.get("gpuhost.nvidia.gpuhost_converged") or {}))
    checks = tasks[-1]
    assert tasks.index(question) < tasks.index(checks) and question["register"] == "__gpuhost_converged_before"
    asked = question["gpuhost.nvidia.gpuhost_converged"]["roles"]
    # Every recording role is asked about, and no other (the doctor and verify record nothing).
    recording = sorted(path.parent.parent.name for path in (ROOT / "roles").glob("*/tasks/converged.yml"))
    assert sorted(asked) == recording
    registered = {"skipped": True} if converged is None else {"converged_roles": converged}
    checked = []
    for item in checks["loop"]:
        item = dict(item, enabled=True)  # every role switched on (the switches are tested above)
        variables = {"__gpuhost_check": item, "__gpuhost_converged_before": registered, "ansible_run_tags": ["all"],
                     "ansible_skip_tags": [], "group_names": []}
        templar = Templar(loader=DataLoader(), variables=variables)
        if all(templar.evaluate_conditional(trust_as_template(condition)) for condition in checks["when"]):
            checked.append(item["role"])
    roles = [item["role"] for item in checks["loop"]]
    assert checked == [role for role in roles if role not in (converged or [])]
