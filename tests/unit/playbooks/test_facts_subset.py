# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The playbooks gather a subset of Ansible's facts (issue 21): it must hold every fact the roles and templates read.

Which facts a subset gives is taken from Ansible's own fact collectors (the classes ``setup`` picks for the subset on
Linux, with their fact names) and ``setup``'s minimal subset, not from a list written here. Each role's "Ensure the
facts used by the role are present" must then not run ``setup`` again, or the subset made the run slower.
"""

from __future__ import annotations

import ast
import inspect
import pathlib
import re

import typing as t

import pytest
import yaml

from ansible.module_utils.facts import collector, default_collectors
from ansible.modules import setup
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from ansible_collections.gpuhost.nvidia.plugins.module_utils import _hostfacts

ROOT = pathlib.Path(__file__).resolve().parents[3]
TASK = "Ensure the facts used by the role are present"
# Not setup's: the GPU facts module's, package_facts', getent's (the toolkit's rootless users), and the dict method.
NOT_SETUP = {"nvidia_gpu", "packages", "getent_passwd", "keys"}
# What a role reads only when it gathers it itself (vfio_passthrough's set_vars, with vfio_passthrough_cpu_vendor: auto).
GATHERED_BY_THE_ROLE = {"processor"}
# Read by Ansible's own action plugins rather than by our expressions: ansible.builtin.package and ansible.builtin.dnf
# choose the package manager from it (and run setup themselves without it).
READ_BY_ANSIBLE = {"pkg_mgr"}


def setup_minimal_subset() -> frozenset[str]:
    tree = ast.parse(inspect.getsource(setup))
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "minimal_gather_subset")
    return frozenset(ast.literal_eval(node.value.args[0]))


def subset_facts(subset: list[str]) -> set[str]:
    classes = collector.collector_classes_from_gather_subset(
        all_collector_classes=default_collectors.collectors, minimal_gather_subset=setup_minimal_subset(), gather_subset=subset,
        platform_info={"system": "Linux"})
    return set().union(*({cls.name} | set(cls._fact_ids) for cls in classes))


def exact_subset_facts(subset: t.Iterable[str]) -> set[str]:
    """The facts of exactly these setup subsets, without setup's minimal subset (what _hostfacts collects)."""
    return subset_facts(["!all", "!min"] + list(subset))


def site_facts() -> set[str]:
    """What site.yml's facts play gives the later plays: setup's subset when it gathers facts, else the host facts of
    its one call (host_facts: Ansible's collectors for _hostfacts.SUBSET), or of setup with the same subsets where that
    call is skipped (test_site_facts_play.py: exactly then); the smaller of the two."""
    first = plays("site.yml")[0]
    if first.get("gather_facts", True):
        return subset_facts(first["gather_subset"])
    observe = next(task["gpuhost.nvidia.gpuhost_converged"] for task in first["tasks"] if "gpuhost.nvidia.gpuhost_converged" in task)
    setup_args = next(task["ansible.builtin.setup"] for task in first["tasks"] if "ansible.builtin.setup" in task)
    assert observe["state"] == "observe" and observe.get("host_facts") is True
    return exact_subset_facts(_hostfacts.SUBSET) & subset_facts(setup_args["gather_subset"])


def plays(playbook: str) -> list[dict]:
    return yaml.safe_load((ROOT / "playbooks" / playbook).read_text(encoding="utf-8"))


def facts_read() -> set[str]:
    """Every ``ansible_facts.X`` / ``ansible_facts['X']`` the roles, playbooks and templates name."""
    names: set[str] = set()
    pattern = re.compile(r"ansible_facts(?:\[['\"](\w+)['\"]\]|\.(\w+))")
    for folder in ("roles", "playbooks"):
        for path in (ROOT / folder).rglob("*"):
            if path.suffix in (".yml", ".yaml", ".j2") and path.is_file():
                for match in pattern.finditer(path.read_text(encoding="utf-8")):
                    names.add(match.group(1) or match.group(2))
    return names - NOT_SETUP


def needs_setup(role: str, facts: set[str], **variables) -> bool:
    tasks = yaml.safe_load((ROOT / "roles" / role / "tasks" / "set_vars.yml").read_text(encoding="utf-8"))
    condition = next(task for task in tasks if task.get("name") == TASK)["when"]
    required = yaml.safe_load((ROOT / "roles" / role / "vars" / "main.yml").read_text(encoding="utf-8"))["__%s_required_facts" % role]
    templar = Templar(loader=DataLoader(), variables=dict(variables, **{"__%s_required_facts" % role: required,
                                                                        "ansible_facts": {name: "x" for name in facts}}))
    return bool(templar.evaluate_conditional(trust_as_template(condition)))


def test_the_collectors_know_the_facts_of_each_subset() -> None:
    # A guard on the helper: the minimal subset gives the distribution and the platform, hardware the CPU, network the
    # addresses; all of them together everything the roles read.
    assert {"distribution", "os_family", "kernel", "architecture", "pkg_mgr"} <= subset_facts(["min"])
    assert "processor" not in subset_facts(["min"]) and "processor" in subset_facts(["min", "hardware"])
    assert "default_ipv4" in subset_facts(["min", "network"])
    assert facts_read() | READ_BY_ANSIBLE <= subset_facts(["all"])


def test_site_gathers_every_fact_the_roles_and_the_summary_read() -> None:
    # No setup call at all (#21): the facts play's one call returns the host facts.
    assert plays("site.yml")[0]["gather_facts"] is False
    assert all(not play.get("gather_facts", True) for play in plays("site.yml")[1:])
    read = facts_read()
    assert {"distribution", "distribution_version", "os_family", "kernel"} <= read  # the summary template's
    assert (read | READ_BY_ANSIBLE) - GATHERED_BY_THE_ROLE <= site_facts()
    # and no more than those subsets: not the hardware, network or virtual facts
    assert "processor" not in site_facts() and "default_ipv4" not in site_facts() and "lsb" not in site_facts()


@pytest.mark.parametrize("playbook, roles_read", [
    ("verify.yml", set()),
    ("vfio.yml", GATHERED_BY_THE_ROLE),
    ("exporter.yml", set()),
])
def test_the_other_playbooks_gather_what_their_roles_read(playbook: str, roles_read: set[str]) -> None:
    play = plays(playbook)[0]
    assert play["gather_facts"] is True
    assert ((facts_read() | READ_BY_ANSIBLE) - GATHERED_BY_THE_ROLE) | roles_read <= subset_facts(play["gather_subset"])


@pytest.mark.parametrize("role", ["gpu_settings", "nvidia_container_toolkit", "nvidia_driver"])
def test_no_role_gathers_again_after_sites_subset(role: str) -> None:
    assert not needs_setup(role, site_facts())


@pytest.mark.parametrize("vendor, again", [("intel", False), ("amd", False), ("none", False), ("auto", True)])
def test_vfio_passthrough_gathers_the_cpu_only_when_it_decides_the_vendor(vendor: str, again: bool) -> None:
    site = site_facts()
    assert needs_setup("vfio_passthrough", site, vfio_passthrough_cpu_vendor=vendor) is again
    assert not needs_setup("vfio_passthrough", subset_facts(plays("vfio.yml")[0]["gather_subset"]), vfio_passthrough_cpu_vendor=vendor)
    # without its defaults (the required-facts test evaluates the bare condition): auto
    assert needs_setup("vfio_passthrough", site) is True
