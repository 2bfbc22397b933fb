# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The builder reads what nvidia_gpu_facts really returns (its fake NVML and synthetic host tree), not just our YAML."""

from __future__ import annotations

import pytest

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _compose as c

_facts = pytest.importorskip("ansible_collections.gpuhost.nvidia.plugins.module_utils._facts")


@pytest.fixture
def gathered(fake_nvml, host_tree):
    def gather(profile: str):
        fake = fake_nvml(profile)
        return _facts.gather_facts(root=host_tree(profile), nv=fake.module)

    return gather


def test_h100_facts_place_and_translate(gathered):
    facts = gathered("h100_sxm_8x_nvswitch")
    gpus = facts["gpus"]
    assert len(gpus) >= 2
    plan = c.build({"strategy": "exclusive", "services": [{"name": "a"}, {"name": "b", "count": 2}]}, facts)
    assert plan.assignment["a"] == [gpus[0]["uuid"]]
    assert plan.assignment["b"] == [gpus[1]["uuid"], gpus[2]["uuid"]]
    plan = c.build({"services": [{"name": "a", "device_ids": [gpus[-1]["index"]]}]}, facts)
    assert plan.assignment["a"] == [gpus[-1]["uuid"]]
    with pytest.raises(c.ComposeError, match=r"short by 1"):
        c.build({"strategy": "exclusive", "services": [{"name": "s%d" % i} for i in range(len(gpus) + 1)]}, facts)


def test_h100_facts_vm_mode_uses_only_reported_paths(gathered):
    facts = gathered("h100_sxm_8x_nvswitch")
    paths = facts["driver"]["library_paths"]
    plan = c.build({"vm_mode": True, "services": [{"name": "a"}]}, facts)
    sources = [v["source"] for v in plan.services["a"]["volumes"]]
    assert paths["nvml"] in sources and paths["cuda"] in sources
    assert plan.services["a"]["devices"] == ["%s:%s" % (n, n) for n in facts["device_nodes"]]


def test_mig_facts(gathered):
    facts = gathered("a100_mig")
    mig_gpus = [g for g in facts["gpus"] if g["mig"]["current"] and g["mig_devices"]]
    if not mig_gpus:
        pytest.skip("the a100_mig profile has no MIG device in the facts")
    gpu = mig_gpus[0]
    plan = c.build({"services": [{"name": "a", "device_ids": ["%s:0" % gpu["index"]]}]}, facts)
    first = gpu["mig_devices"][0]
    assert plan.assignment["a"] == [first["uuid"] or "%s:0" % gpu["index"]]
    # Whole GPUs with MIG on are not placed.
    placeable = [g for g in facts["gpus"] if not g["mig"]["current"] and g["bound_driver"] not in c.NO_CONTAINER_DRIVERS]
    if not placeable:
        with pytest.raises(c.ComposeError, match=r"short by 1"):
            c.build({"strategy": "exclusive", "services": [{"name": "a"}]}, facts)
