# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The facts' type check (_gpu_schema.facts_problems, issue #37): it passes every fact nvidia_gpu_facts gathers, agrees
with the module's RETURN block, and names each value of the wrong type."""

from __future__ import annotations

import glob
import os
import typing as t

import pytest
import yaml

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _gpu_schema
from ansible_collections.gpuhost.nvidia.plugins.modules import nvidia_gpu_facts

HERE = os.path.dirname(os.path.abspath(__file__))
PROFILES = sorted(os.path.splitext(os.path.basename(p))[0] for p in glob.glob(os.path.join(HERE, "..", "fakes", "profiles", "*.yaml")))
FACT_FILES = sorted(glob.glob(os.path.join(HERE, "..", "compose", "facts", "*.yml")))
ALL = ["processes", "utilization", "topology", "health"]
TYPES = {"str": (str,), "int": ("count", int), "float": ("number",), "bool": (bool,), "dict": (dict,), "list": (list,)}


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("check_mode", [False, True])
def test_gathered_facts_pass(profile, check_mode, fake_nvml, host_tree, run_module):
    fake_nvml(profile)
    result = run_module(nvidia_gpu_facts, {"root": host_tree(profile), "gather": ALL}, check_mode=check_mode)
    facts = result["ansible_facts"]["nvidia_gpu"]
    assert _gpu_schema.facts_problems(facts) == []


@pytest.mark.parametrize("path", FACT_FILES, ids=os.path.basename)
def test_the_test_facts_pass(path):
    with open(path, encoding="utf-8") as handle:
        assert _gpu_schema.facts_problems(yaml.safe_load(handle)) == []


def _documented() -> dict[str, t.Any]:
    text = nvidia_gpu_facts.RETURN
    return yaml.safe_load(text)["ansible_facts"]["contains"]["nvidia_gpu"]["contains"]


def _agree(schema: dict[str, t.Any], documented: dict[str, t.Any], where: str) -> list[str]:
    problems = []
    for key, kind in schema.items():
        doc = documented.get(key)
        if doc is None:
            problems.append("%s.%s is not in RETURN" % (where, key))
            continue
        shape = kind[0] if isinstance(kind, tuple) else kind
        if shape not in TYPES[doc["type"]]:
            problems.append("%s.%s: %r here, %s in RETURN" % (where, key, shape, doc["type"]))
        if isinstance(kind, tuple) and kind[0] is dict and "contains" in doc:
            problems += _agree(kind[1], doc["contains"], "%s.%s" % (where, key))
        if isinstance(kind, tuple) and kind[0] is list:
            element = kind[1]
            if isinstance(element, tuple) and element[0] is dict:
                assert doc.get("elements") == "dict", (where, key)
                problems += _agree(element[1], doc.get("contains") or {}, "%s.%s[]" % (where, key))
            else:
                assert doc.get("elements") == {str: "str"}[element], (where, key)
    return problems


def test_the_schema_agrees_with_return():
    assert _agree(_gpu_schema.FACTS_SCHEMA, _documented(), "nvidia_gpu") == []


GOOD = {"state": "ok", "driver": {"version": "550.54.15"},
        "gpus": [{"index": 0, "memory_total_mib": 81559, "mig": {"current": False}, "mig_devices": [], "numa_node": -1, "power_draw_w": 60.5}]}
BAD = [
    (["x"], "facts must be a dict"),
    ({"gpus": "x"}, "facts.gpus must be a list, got str 'x'"),
    ({"gpus": ["x"]}, "facts.gpus[0] must be a dict, got str 'x'"),
    ({"gpus": [{"memory_total_mib": "80GB"}]}, "facts.gpus[0].memory_total_mib must be a whole number from 0 to 2**53, got str '80GB'"),
    ({"gpus": [{"memory_total_mib": True}]}, "facts.gpus[0].memory_total_mib must be a whole number"),
    ({"gpus": [{"memory_total_mib": -1}]}, "facts.gpus[0].memory_total_mib must be a whole number"),
    ({"gpus": [{"memory_total_mib": 2 ** 200}]}, "facts.gpus[0].memory_total_mib must be a whole number"),
    ({"gpus": [{"memory_total_mib": 1.5}]}, "facts.gpus[0].memory_total_mib must be a whole number"),
    ({"gpus": [{"power_draw_w": float("nan")}]}, "facts.gpus[0].power_draw_w must be a finite number, got float nan"),
    ({"gpus": [{"power_draw_w": float("inf")}]}, "facts.gpus[0].power_draw_w must be a finite number"),
    ({"gpus": [{"mig": "yes"}]}, "facts.gpus[0].mig must be a dict, got str 'yes'"),
    ({"gpus": [{"mig": {"current": "yes"}}]}, "facts.gpus[0].mig.current must be true or false, got str 'yes'"),
    ({"gpus": [{"mig_devices": [{"memory_mib": "x"}]}]}, "facts.gpus[0].mig_devices[0].memory_mib must be a whole number"),
    ({"gpus": [{"uuid": 7}]}, "facts.gpus[0].uuid must be a string, got int 7"),
    ({"driver": "550"}, "facts.driver must be a dict, got str '550'"),
    ({"driver": {"version": 550}}, "facts.driver.version must be a string, got int 550"),
    ({"pci_functions": [{"iommu_group": "12"}]}, "facts.pci_functions[0].iommu_group must be a whole number"),
    ({"device_nodes": ["/dev/nvidia0", None]}, "facts.device_nodes[1] must be a string, got NoneType None"),
    ({"kernels": {"dkms": ["x"]}}, "facts.kernels.dkms[0] must be a dict"),
    ({"gpus": [{"processes": [{"pid": "1"}]}]}, "facts.gpus[0].processes[0].pid must be a whole number"),
    ({"gpus": [{"utilization": {"gpu": "97%"}}]}, "facts.gpus[0].utilization.gpu must be a whole number"),
]


def test_good_facts_pass():
    assert _gpu_schema.facts_problems(GOOD) == []


@pytest.mark.parametrize("facts, expected", BAD, ids=[b[1][:60] for b in BAD])
def test_each_wrong_value_is_named(facts, expected):
    problems = _gpu_schema.facts_problems(facts)
    assert len(problems) == 1 and problems[0].startswith(expected), problems


def test_every_problem_is_reported_at_once():
    problems = _gpu_schema.facts_problems({"gpus": [{"memory_total_mib": "x"}, "y"], "driver": 1})
    assert len(problems) == 3, problems
