# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuhost.nvidia.plugins.filter import gpu as gpu_filters

FILTER_DIR = os.path.dirname(gpu_filters.__file__)


def _gpu(index, uuid, name="NVIDIA H100 80GB HBM3", memory=81559, util=None, state="ok", mig=False, mig_devices=()):
    entry = {
        "index": index,
        "uuid": uuid,
        "name": name,
        "memory_total_mib": memory,
        "state": state,
        "mig": {"current": mig, "pending": mig},
        "mig_devices": list(mig_devices),
    }
    if util is not None:
        entry["utilization"] = {"gpu": util, "memory": 0}
    return entry


FACTS = {
    "gpus": [
        _gpu(0, "GPU-0", util=90),
        _gpu(1, "GPU-1", util=10),
        _gpu(2, "GPU-2", name="NVIDIA A100-SXM4-40GB", memory=40960, util=0),
        _gpu(3, "GPU-3", util=None),
        _gpu(4, "GPU-4", state="gpu_lost", util=0),
        _gpu(None, None, name=None, memory=None, state="pci_only"),
        _gpu(5, "GPU-5", name="NVIDIA A100-SXM4-40GB", memory=40960, mig=True, mig_devices=[
            {"uuid": "MIG-b", "gi": 2, "ci": 0, "profile": "1g.5gb", "memory_mib": 4864},
            {"uuid": "MIG-a", "gi": 1, "ci": 0, "profile": "3g.20gb", "memory_mib": 19968},
        ]),
    ]
}


def test_select_default_order_is_least_busy_first():
    # GPU-3 has no reading and goes last; the lost, PCI-only and MIG GPUs are never picked.
    assert gpu_filters.select_gpus(FACTS) == ["GPU-2", "GPU-1", "GPU-0", "GPU-3"]


def test_select_accepts_wrapped_facts_and_plain_lists():
    assert gpu_filters.select_gpus({"nvidia_gpu": FACTS}, prefer="lowest_index") == ["GPU-0", "GPU-1", "GPU-2", "GPU-3"]
    assert gpu_filters.select_gpus(FACTS["gpus"], prefer="lowest_index", count=1) == ["GPU-0"]


def test_select_by_memory_and_model():
    assert gpu_filters.select_gpus(FACTS, min_memory_mib=80000) == ["GPU-1", "GPU-0", "GPU-3"]
    assert gpu_filters.select_gpus(FACTS, models=["a100"]) == ["GPU-2"]
    assert gpu_filters.select_gpus(FACTS, models="H100", count=2) == ["GPU-1", "GPU-0"]
    assert gpu_filters.select_gpus(FACTS, prefer="most_memory") == ["GPU-0", "GPU-1", "GPU-3", "GPU-2"]


def test_select_mig_devices():
    assert gpu_filters.select_gpus(FACTS, models=["A100"], allow_mig=True, prefer="lowest_index") == ["GPU-2", "MIG-a", "MIG-b"]
    assert gpu_filters.select_gpus(FACTS, allow_mig=True, min_memory_mib=10000, models=["A100"], prefer="most_memory") == ["GPU-2", "MIG-a"]


def test_select_count_errors():
    with pytest.raises(AnsibleFilterError, match="5 GPU.s. requested but only 4 match"):
        gpu_filters.select_gpus(FACTS, count=5)
    with pytest.raises(AnsibleFilterError, match="prefer"):
        gpu_filters.select_gpus(FACTS, prefer="random")
    with pytest.raises(AnsibleFilterError):
        gpu_filters.select_gpus("not facts")
    with pytest.raises(AnsibleFilterError):
        gpu_filters.select_gpus({"state": "ok"})
    assert gpu_filters.select_gpus({"gpus": []}) == []


@pytest.mark.parametrize(
    "value, arch",
    [("9.0", "Hopper"), (8.6, "Ampere"), ("8.9", "Ada Lovelace"), ("10de:2330", "Hopper"), ("0x1eb8", "Turing"),
     ("233010DE", "Hopper"), ({"compute_capability": None, "pci_device_id": "10de:1db6"}, "Volta"),
     ({"architecture": "Blackwell"}, "Blackwell"), ("10de:0001", None)],
)
def test_gpu_arch(value, arch):
    assert gpu_filters.gpu_arch(value) == arch


def test_cuda_supported():
    assert gpu_filters.cuda_supported("535.104.05", "12.2") is True
    assert gpu_filters.cuda_supported(535, "12.4") is False
    assert gpu_filters.cuda_supported({"nvidia_gpu": {"driver": {"version": "550.54.15", "branch": "550"}}}, "12.4") is True
    assert gpu_filters.cuda_supported({"driver": {"version": None, "branch": "470"}}, "11.4") is True
    assert gpu_filters.cuda_supported("535.104.05", "12.6", minor_version_compatibility=True) is True
    assert gpu_filters.cuda_supported("550.54.15", 12.4) is True
    with pytest.raises(AnsibleFilterError, match="cannot tell"):
        gpu_filters.cuda_supported("not-a-driver", "12.2")


def test_filter_map_and_docs_agree():
    names = set(gpu_filters.FilterModule().filters())
    assert names == {"select_gpus", "gpu_arch", "cuda_supported"}
    for name in names:
        with open(os.path.join(FILTER_DIR, "%s.yml" % name), "r", encoding="utf-8") as handle:
            doc = yaml.safe_load(handle)
        assert doc["DOCUMENTATION"]["name"] == name
    with open(os.path.join(FILTER_DIR, "select_gpus.yml"), "r", encoding="utf-8") as handle:
        options = yaml.safe_load(handle)["DOCUMENTATION"]["options"]
    assert options["prefer"]["choices"] == list(gpu_filters.PREFER)
    assert set(options) - {"_input"} == {"min_memory_mib", "models", "count", "prefer", "allow_mig"}


def test_filters_in_a_playbook(fake_nvml, host_tree, tmp_path):
    """The filters load by FQCN in a real ansible-playbook run, on facts the module produced."""
    from ansible_collections.gpuhost.nvidia.plugins.module_utils import _facts  # pylint: disable=import-outside-toplevel

    fake = fake_nvml("h100_sxm_8x_nvswitch")
    facts = _facts.gather_facts(gather=["utilization"], root=host_tree("h100_sxm_8x_nvswitch"), nv=fake.module)
    (tmp_path / "facts.json").write_text(json.dumps({"gpu_facts": facts}))
    (tmp_path / "play.yml").write_text(
        """
- hosts: localhost
  gather_facts: false
  tasks:
    - ansible.builtin.copy:
        dest: "{{ out }}"
        content: "{{ {'picked': gpu_facts | gpuhost.nvidia.select_gpus(count=2),
                      'cuda': gpu_facts | gpuhost.nvidia.cuda_supported('12.4'),
                      'arch': gpu_facts.gpus[0] | gpuhost.nvidia.gpu_arch} | to_json }}"
"""
    )
    out = tmp_path / "out.json"
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0")
    proc = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,", "-c", "local",
         "-e", "ansible_python_interpreter=%s" % sys.executable, "-e", "@%s" % (tmp_path / "facts.json"), "-e", "out=%s" % out,
         str(tmp_path / "play.yml")],
        capture_output=True, text=True, env=env, check=False, timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # GPU 0 is 97% busy; the rest are idle and keep index order.
    assert json.loads(out.read_text()) == {
        "picked": ["GPU-0a1b2c3d-0000-4000-8000-000000000001", "GPU-0a1b2c3d-0000-4000-8000-000000000002"],
        "cuda": True,
        "arch": "Hopper",
    }
