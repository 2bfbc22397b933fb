# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""roles/gpu_exporter/tasks/verify.yml: every GPU of the facts must be in the scrape, matched by UUID.

The expressions are rendered with Ansible's own Templar over real scrapes of the stub exporters (which emit the
published labels) and over hostile scrapes and facts.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from .test_exporter import GPUS, collectors_csv, scrape

ROLE = Path(__file__).resolve().parents[3] / "roles" / "gpu_exporter"
TASK = next(t for t in yaml.safe_load((ROLE / "tasks" / "verify.yml").read_text(encoding="utf-8"))
            if t["name"].startswith("Require every GPU of the facts in the metrics"))
FACTS = {"present": True, "gpus": copy.deepcopy(GPUS["gpus"])}
UUIDS = ["5c3b9d2e-0f4a-4b1e-9c6d-7a8b9c0d1e2f", "8e7d6c5b-4a39-4281-b7f6-e5d4c3b2a190"]


def missing(content: str, facts: dict) -> list[str]:
    variables = {name: trust_as_template(value) for name, value in TASK["vars"].items()}
    variables.update(__gpu_exporter_scrape={"content": content}, gpu_exporter_facts=facts)
    templar = Templar(loader=DataLoader(), variables=variables)
    assert templar.template(trust_as_template(f"{{{{ {TASK['ansible.builtin.assert']['that']} }}}}")) in (True, False)
    return templar.template(variables["__gpu_exporter_missing"])


@pytest.fixture(scope="module")
def scrapes(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("scrapes")
    return {"dcgm": scrape(tmp, "dcgm-exporter", "-f", str(collectors_csv(tmp))), "nvidia_gpu_exporter": scrape(tmp, "nvidia_gpu_exporter")}


@pytest.mark.parametrize("kind", ["dcgm", "nvidia_gpu_exporter"])
def test_every_gpu_found_in_either_exporters_scrape(scrapes, kind):
    assert missing(scrapes[kind], FACTS) == []


@pytest.mark.parametrize("kind", ["dcgm", "nvidia_gpu_exporter"])
def test_a_gpu_the_exporter_does_not_serve_is_named(scrapes, kind):
    facts = copy.deepcopy(FACTS)
    facts["gpus"].append({"index": 2, "uuid": "GPU-00000000-1111-2222-3333-444444444444", "pci_bus_id": "0000:3b:00.0"})
    assert missing(scrapes[kind], facts) == ["00000000-1111-2222-3333-444444444444"]


@pytest.mark.parametrize("uuid", [None, "", 7, ["GPU-x"]])
def test_a_gpu_without_a_uuid_counts_as_missing(scrapes, uuid):
    """The check cannot see a GPU it has no UUID for: fail closed, naming it by PCI bus id."""
    facts = copy.deepcopy(FACTS)
    facts["gpus"][1]["uuid"] = uuid
    assert missing(scrapes["dcgm"], facts) == ["the GPU at 0000:2a:00.0 (no UUID in the facts)"]


def test_a_gpu_without_uuid_or_bus_id_is_still_missing(scrapes):
    facts = {"gpus": [{"index": 0}]}
    assert missing(scrapes["dcgm"], facts) == ["the GPU at ? (no UUID in the facts)"]


def test_uuids_compare_without_case_and_prefix(scrapes):
    facts = copy.deepcopy(FACTS)
    facts["gpus"][0]["uuid"] = facts["gpus"][0]["uuid"].upper()
    facts["gpus"][1]["uuid"] = facts["gpus"][1]["uuid"].lower()
    assert missing(scrapes["nvidia_gpu_exporter"], facts) == []


@pytest.mark.parametrize("content", [
    "",
    # the labels the old stand-ins had: a bus id is no UUID
    'nvidia_smi_gpu_info{pci_bus_id="00000000:18:00.0"} 1\nnvidia_smi_gpu_info{pci_bus_id="00000000:2A:00.0"} 1\n',
    # a UUID that is only part of another label's name or value
    f'DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL{{nvlink="0",gpu_uuid="GPU-{UUIDS[0]}"}} 1\n',
    f'nvidia_smi_gpu_info{{name="x,uuid=\\"{UUIDS[0]}\\""}} 1\n',
    f'# HELP nvidia_smi_gpu_info uuid="{UUIDS[0]}"\n',
    # not a UUID
    'DCGM_FI_DEV_GPU_UTIL{UUID="GPU-5c3b9d2e"} 1\n',
    "<html>not metrics</html>",
])
def test_a_scrape_without_the_uuids_misses_every_gpu(content):
    assert missing(content, FACTS) == UUIDS


def test_served_list_names_what_the_exporter_serves(scrapes):
    variables = {name: trust_as_template(value) for name, value in TASK["vars"].items()}
    variables.update(__gpu_exporter_scrape={"content": scrapes["dcgm"]}, gpu_exporter_facts=FACTS)
    assert Templar(loader=DataLoader(), variables=variables).template(variables["__gpu_exporter_served"]) == UUIDS
