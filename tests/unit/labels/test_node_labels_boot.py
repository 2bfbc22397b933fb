# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The k8s_gpu_node role's boot refresh (roles/k8s_gpu_node/files/gpuhost-k8s-node-labels) writes the same feature
file as the role writes from the GPU facts: every capture of the public nvidia-smi corpus (../shared/fixtures),
replayed by the fake nvidia-smi over a host tree with the capture's PCI functions, once through the facts module and
the role's two filters, once through the script (a sample of the corpus, every partial capture in it). A second
run keeps the file; nvidia-smi failing leaves it alone."""

from __future__ import annotations

import glob
import importlib.machinery
import importlib.util
import os

import pytest
from gpufacts_support import SHARED_FIXTURES
from test_node_labels_corpus import _read, _tree_profile

from ansible_collections.gpuhost.nvidia.plugins.filter.toolkit import nvidia_node_labels, nvidia_node_labels_file
from ansible_collections.gpuhost.nvidia.plugins.module_utils import _smi
from ansible_collections.gpuhost.nvidia.plugins.modules import nvidia_gpu_facts

ROLE = os.path.join(os.path.dirname(__file__), "..", "..", "..", "roles", "k8s_gpu_node")
SCRIPT = os.path.join(ROLE, "files", "gpuhost-k8s-node-labels")
PUBLIC_XML = sorted(glob.glob(os.path.join(SHARED_FIXTURES, "nvidia-smi-xml", "*.xml")))
# Every third capture and every partial one (the facts fill in what nvidia-smi left out there): test_node_labels_corpus
# already takes the whole corpus through the labels; here, the script against the role, at CI's cost.
SAMPLE = [p for i, p in enumerate(PUBLIC_XML) if i % 3 == 0 or "partial" in os.path.basename(p)]
needs_corpus = pytest.mark.skipif(not PUBLIC_XML, reason="public fixture corpus %s is absent" % SHARED_FIXTURES)


def _script():
    loader = importlib.machinery.SourceFileLoader("gpuhost_k8s_node_labels", SCRIPT)
    spec = importlib.util.spec_from_loader(loader.name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def _header():
    import yaml  # pylint: disable=import-outside-toplevel

    with open(os.path.join(ROLE, "vars", "main.yml"), encoding="utf-8") as handle:
        return yaml.safe_load(handle)["__k8s_gpu_node_features_header"]


def test_the_script_and_the_role_share_the_header():
    assert _script().HEADER == _header()


@needs_corpus
# SAMPLE[:1]: without the corpus (a clone with no ../shared) the list is empty and the test skips, not fails to collect.
@pytest.mark.parametrize("path, gfd_deployed", [(p, False) for p in SAMPLE] + [(p, True) for p in SAMPLE[:1]],
                         ids=[os.path.basename(p) for p in SAMPLE] + ["gfd-deployed"] * len(SAMPLE[:1]))
def test_boot_refresh_writes_what_the_role_writes(path, gfd_deployed, no_pynvml, fake_smi, host_tree, run_module, tmp_path):
    text = _read(path)
    root = host_tree(_tree_profile(_smi.parse(text), PUBLIC_XML.index(path)))
    fake_smi.replay(stdout=path)
    result = run_module(nvidia_gpu_facts, {"root": root, "backends": ["nvidia-smi"]}, smi=fake_smi)
    facts = result["ansible_facts"]["nvidia_gpu"]
    if facts["state"] != "ok":
        pytest.skip("the capture reads as %s" % facts["state"])
    expected = nvidia_node_labels_file(nvidia_node_labels(facts, gfd_deployed=gfd_deployed), _header())
    out = tmp_path / "features"
    args = ["--lib", str(tmp_path), "--out", str(out), "--nvidia-smi", fake_smi.path, "--root", root]
    script = _script()
    assert script.main(args + (["--gfd-deployed"] if gfd_deployed else [])) == 0
    assert out.read_text(encoding="utf-8") == expected
    before = os.stat(out).st_mtime_ns
    assert script.main(args + (["--gfd-deployed"] if gfd_deployed else [])) == 0
    assert os.stat(out).st_mtime_ns == before


def test_nvidia_smi_failing_leaves_the_file(tmp_path, capsys):
    out = tmp_path / "features"
    out.write_text("# kept\n", encoding="utf-8")
    missing = str(tmp_path / "no-nvidia-smi")
    assert _script().main(["--lib", str(tmp_path), "--out", str(out), "--nvidia-smi", missing]) == 1
    assert out.read_text(encoding="utf-8") == "# kept\n"
    assert "left as it is" in capsys.readouterr().err
