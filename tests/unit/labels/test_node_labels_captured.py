# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""A real GPU's capture (fixtures/h200_580.159.04, see its PROVENANCE.md) through the facts module (its nvidia-smi
backend, over a host tree with the captured PCI class) and the label builder: every label as GFD's rules make it
from the same machine's nvidia-smi CSV answers."""

from __future__ import annotations

import os

from ansible_collections.gpuhost.nvidia.plugins.filter.toolkit import nvidia_node_labels
from ansible_collections.gpuhost.nvidia.plugins.module_utils import _labels
from ansible_collections.gpuhost.nvidia.plugins.modules import nvidia_gpu_facts

CAPTURE = os.path.join(os.path.dirname(__file__), "fixtures", "h200_580.159.04")


def _read(name):
    with open(os.path.join(CAPTURE, name), encoding="utf-8") as handle:
        return handle.read()


def test_h200_capture(no_pynvml, fake_smi, host_tree, run_module):
    index, name, memory, capability, bus, driver = [c.strip() for c in _read("nvidia-smi-query-gpu.csv").split(",")]
    address, pci_class = _read("pci-classes.txt").split()
    profile = {"host": {"kernel_module": {"loaded": True, "type": "open", "version": driver}, "libraries": {"version": driver}},
               "gpus": [{"pci_bus_id": address, "device_id": 0x2335, "class": int(pci_class, 16), "driver": "nvidia", "minor_number": 0}]}
    fake_smi.replay(stdout=os.path.join(CAPTURE, "nvidia-smi-q-x.xml"))
    result = run_module(nvidia_gpu_facts, {"root": host_tree(profile), "backends": ["nvidia-smi"]}, smi=fake_smi)
    facts = result["ansible_facts"]["nvidia_gpu"]
    assert (facts["source"], facts["state"], bus.lower().replace("00000000:", "0000:")) == ("nvidia-smi", "ok", address)

    major, minor = capability.split(".")
    assert (index, name, memory, capability, driver) == ("0", "NVIDIA H200", "143771", "9.0", "580.159.04")
    assert nvidia_node_labels(facts, "1.18.0-1") == {
        "nvidia.com/gpu.product": "NVIDIA-H200", "nvidia.com/gpu.count": "1", "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.sharing-strategy": "none", "nvidia.com/gpu.memory": memory, "nvidia.com/gpu.family": "hopper",
        "nvidia.com/gpu.compute.major": major, "nvidia.com/gpu.compute.minor": minor, "nvidia.com/gpu.mode": "compute",
        "nvidia.com/mig.capable": "true", "nvidia.com/mps.capable": "false",
        "nvidia.com/cuda.driver.major": "580", "nvidia.com/cuda.driver.minor": "159", "nvidia.com/cuda.driver.rev": "04",
        "nvidia.com/cuda.driver-version.major": "580", "nvidia.com/cuda.driver-version.minor": "159",
        "nvidia.com/cuda.driver-version.revision": "04", "nvidia.com/cuda.driver-version.full": driver,
        "nvidia.com/cuda.runtime.major": "13", "nvidia.com/cuda.runtime.minor": "0", "nvidia.com/cuda.runtime-version.major": "13",
        "nvidia.com/cuda.runtime-version.minor": "0", "nvidia.com/cuda.runtime-version.full": "13.0",
        _labels.OWN_PREFIX + "gpu.present": "true", _labels.OWN_PREFIX + "container-toolkit.version": "1.18.0",
    }
