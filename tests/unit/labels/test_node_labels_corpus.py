# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Every GPU of the public nvidia-smi corpus (../shared/fixtures) through the facts module (its nvidia-smi backend,
replayed by the fake nvidia-smi over a host tree with the capture's PCI functions) and then the label builder: every
name and value is valid, and each label says what GFD's rule makes of the capture."""

from __future__ import annotations

import glob
import os
import re
import xml.etree.ElementTree as ET

import pytest
from gpufacts_support import SHARED_FIXTURES

from ansible_collections.gpuhost.nvidia.plugins.filter.toolkit import nvidia_node_labels, nvidia_node_labels_file
from ansible_collections.gpuhost.nvidia.plugins.module_utils import _labels, _smi
from ansible_collections.gpuhost.nvidia.plugins.modules import nvidia_gpu_facts

PUBLIC_XML = sorted(glob.glob(os.path.join(SHARED_FIXTURES, "nvidia-smi-xml", "*.xml")))
needs_corpus = pytest.mark.skipif(not PUBLIC_XML, reason="public fixture corpus %s is absent" % SHARED_FIXTURES)
G = _labels.GFD_PREFIX
VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")


def _read(path):
    with open(path, "r", encoding="utf-8", errors="surrogateescape") as handle:
        return handle.read()


def _tree_profile(parsed, index):
    """A host tree with the capture's GPUs on the PCI bus, bound to nvidia, the driver loaded; GPUs alternate between
    the 3D and the VGA class so that both modes (and the mixed unknown) are exercised."""
    gpus = []
    for position, gpu in enumerate(parsed["gpus"]):
        bus = gpu["pci_bus_id"] or "0000:%02x:00.0" % (position + 1)
        # A capture whose PCI id was cut (000000DE) gets an id the catalog does not know: no compute capability is
        # invented for it.
        device = int((gpu["pci_device_id"] or "10de:fffe").split(":")[1], 16)
        gpus.append({"pci_bus_id": bus, "device_id": device, "class": 0x030000 if (index + position) % 3 == 2 else 0x030200,
                     "driver": "nvidia", "minor_number": position})
    version = parsed["driver"]["version"] or "535.104.05"
    return {"host": {"kernel_module": {"loaded": True, "type": "proprietary", "version": version}, "libraries": {"version": version}},
            "gpus": gpus}


@needs_corpus
@pytest.mark.parametrize("path", PUBLIC_XML, ids=os.path.basename)
def test_public_capture_through_facts_to_labels(path, no_pynvml, fake_smi, host_tree, run_module):
    text = _read(path)
    parsed = _smi.parse(text)
    root = host_tree(_tree_profile(parsed, PUBLIC_XML.index(path)))
    fake_smi.replay(stdout=path)
    result = run_module(nvidia_gpu_facts, {"root": root, "backends": ["nvidia-smi"]}, smi=fake_smi)
    assert not result.get("failed"), result
    facts = result["ansible_facts"]["nvidia_gpu"]

    labels = nvidia_node_labels(facts, "1.17.8-1", machine="Corpus Host (test)")
    file_text = nvidia_node_labels_file(labels, "# corpus")
    assert len(file_text.splitlines()) == len(labels) + 1
    for key, value in labels.items():
        assert _labels.valid_label_key(key) and key.startswith((G, _labels.OWN_PREFIX)), key
        assert VALUE.fullmatch(value) and len(value) <= 63, (key, value)

    listed = [g for g in facts["gpus"] if g["index"] is not None and g["source"] == "nvidia-smi"]
    if facts["source"] != "nvidia-smi" or not listed or any(g["state"] != "ok" or not g["name"] for g in listed):
        assert not [k for k in labels if k.startswith(G)]
        return

    tree = ET.fromstring(text[text.find("<"):])
    elems = tree.findall("gpu")
    names = [e.findtext("product_name").strip() for e in elems]
    # One model, its count (the captures are single-model hosts but for the lowest-index rule, checked anyway).
    first = sorted(listed, key=lambda g: g["index"])[0]["name"]
    assert labels[G + "gpu.product"] == _labels.sanitise(first)
    assert labels[G + "gpu.count"] == str(names.count(first))
    assert (labels[G + "gpu.replicas"], labels[G + "gpu.sharing-strategy"], labels[G + "mps.capable"]) in (
        ("1", "none", "false"), ("0", "none", "false"))
    # GFD's newGPULabelers keeps the last device of a model (a map assignment per device): its memory is the label's.
    last = len(names) - 1 - names[::-1].index(first)
    memory = (elems[last].findtext("fb_memory_usage/total") or "").strip()
    if memory.endswith("MiB") and int(memory.split()[0]) > 0:
        assert labels[G + "gpu.memory"] == memory.split()[0]
    # The family from the compute capability by GFD's table, agreeing with nvidia-smi's own architecture name.
    arch = (elems[last].findtext("product_architecture") or "").strip()
    if G + "gpu.family" in labels and arch:
        assert labels[G + "gpu.family"] == arch.lower().replace(" ", "-"), (arch, labels[G + "gpu.family"])
    mig_modes = [(e.findtext("mig_mode/current_mig") or "").strip() for e in elems]
    assert labels[G + "mig.capable"] == ("true" if any(m in ("Enabled", "Disabled") for m in mig_modes) else "false")
    assert labels[G + "gpu.mode"] in ("compute", "graphics", "unknown")
    driver = (tree.findtext("driver_version") or "").strip()
    if driver:
        assert labels[G + "cuda.driver-version.full"] == driver
        assert ".".join(filter(None, (labels[G + "cuda.driver-version.major"], labels[G + "cuda.driver-version.minor"],
                                      labels[G + "cuda.driver-version.revision"]))) == driver
    cuda = (tree.findtext("cuda_version") or "").strip()
    if re.fullmatch(r"[0-9]+\.[0-9]+", cuda):
        assert labels[G + "cuda.runtime-version.full"] == cuda
    assert labels[G + "gpu.machine"] == "Corpus-Host-test"


@needs_corpus
def test_the_corpus_labels_every_family_it_holds():
    """Across the corpus, the families the captures' compute capabilities give (a check that the parametrized test
    above exercised the family table, not only a few rows)."""
    families = set()
    for path in PUBLIC_XML:
        parsed = _smi.parse(_read(path))
        for gpu in parsed["gpus"]:
            if gpu["compute_capability"]:
                major, minor = (int(p) for p in gpu["compute_capability"].split("."))
                families.add(_labels.arch_family(major, minor))
    assert {"kepler", "pascal", "volta", "turing", "ampere", "ada-lovelace"} <= families
