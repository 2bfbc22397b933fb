# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The rolling upgrade's filters (plugins/filter/upgrade.py): the busy-GPU guard's process lines and the roll's table."""

from __future__ import annotations

import os

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuhost.nvidia.plugins.filter import upgrade

FILTER_DIR = os.path.dirname(upgrade.__file__)


def test_filter_map_and_docs_agree():
    names = set(upgrade.FilterModule().filters())
    assert names == {"gpu_busy_processes", "gpu_busy_unknown", "gpu_upgrade_summary", "gpu_upgrade_targets", "gpu_upgrade_post_check"}
    for name in names:
        with open(os.path.join(FILTER_DIR, "%s.yml" % name), "r", encoding="utf-8") as handle:
            assert yaml.safe_load(handle)["DOCUMENTATION"]["name"] == name


def test_busy_processes_name_each_process_and_its_gpu():
    facts = {"gpus": [
        {"index": 0, "processes": [{"pid": 4242, "type": "C", "name": "python3", "used_memory_mib": 20480,
                                    "gpu_instance_id": None, "compute_instance_id": None}]},
        {"index": 1, "processes": []},
        {"index": 2, "processes": None},  # the source could not tell
        {"index": None, "pci_bus_id": "0000:65:00.0"},  # PCI only: no processes key
        {"index": 3, "processes": [{"pid": 7, "type": "C", "name": None, "used_memory_mib": None,
                                    "gpu_instance_id": 1, "compute_instance_id": 0}]},
    ]}
    assert upgrade.gpu_busy_processes(facts) == ["python3 (pid 4242) on GPU 0, 20480 MiB", "? (pid 7) on GPU 3 MIG 1/0"]


@pytest.mark.parametrize("facts", [None, {}, {"gpus": None}, {"state": "no_gpu", "gpus": []}])
def test_busy_processes_of_idle_or_gpu_less_hosts(facts):
    assert upgrade.gpu_busy_processes(facts) == []


def test_busy_processes_refuse_what_is_not_facts():
    with pytest.raises(AnsibleFilterError, match="expects the GPU facts"):
        upgrade.gpu_busy_processes(["not", "facts"])


def test_summary_table_and_failures():
    entries = [
        {"host": "gpu01", "status": "ok", "step": None, "driver_before": "570.172.08", "driver_after": "580.95.05",
         "toolkit_before": "1.17.8-1", "toolkit_after": "1.18.0-1", "rebooted": True, "message": ""},
        {"host": "gpu02", "status": "failed", "step": "guard", "message": "gpu02: 1 process(es) use the GPUs: python3 (pid 1)"},
        {"host": "gpu03", "status": "skipped", "message": "the roll stopped: gpu02 failed or fell out"},
        {"host": "gpu04", "status": "started", "step": "upgrade", "driver_before": "570.172.08"},
        None,
    ]
    summary = upgrade.gpu_upgrade_summary(entries, ["gpu01", "gpu02", "gpu03", "gpu04", "gpu05"])
    table = summary["table"]
    assert table[0].split() == ["HOST", "STATUS", "STEP", "DRIVER", "TOOLKIT", "REBOOTED", "NOTE"]
    assert table[1].split() == ["gpu01", "ok", "-", "570.172.08", "->", "580.95.05", "1.17.8-1", "->", "1.18.0-1", "yes", "-"]
    assert table[2].split()[:3] == ["gpu02", "failed", "guard"]
    assert table[3].split()[:2] == ["gpu03", "skipped"]
    assert "not finished" in table[4] and "unreachable" in table[4]
    assert table[5].startswith("gpu05") and "not reached" in table[5]
    assert len({line.index("STATUS") if i == 0 else None for i, line in enumerate(table)} - {None}) == 1
    assert all(line[table[0].index("STATUS") - 2:table[0].index("STATUS")] == "  " for line in table[1:])
    assert summary["failed"] == ["gpu02", "gpu04", "gpu05"]
    assert summary["reasons"][0] == "gpu02 (guard): gpu02: 1 process(es) use the GPUs: python3 (pid 1)"
    assert summary["reasons"][1].startswith("gpu04 (upgrade): the host fell out")
    assert summary["counts"] == {"failed": 1, "not finished": 1, "not reached": 1, "ok": 1, "skipped": 1}


def test_summary_of_unchanged_versions_shows_one_version():
    entry = {"host": "gpu01", "status": "ok", "driver_before": "580.95.05", "driver_after": "580.95.05"}
    assert upgrade.gpu_upgrade_summary([entry])["table"][1].split()[:4] == ["gpu01", "ok", "-", "580.95.05"]


def test_summary_refuses_mismatched_names():
    with pytest.raises(AnsibleFilterError, match="2 names for 1 entries"):
        upgrade.gpu_upgrade_summary([None], ["a", "b"])
    with pytest.raises(AnsibleFilterError, match="list of per-host entries"):
        upgrade.gpu_upgrade_summary("gpu01")


HOSTILE_NOTES = ["gpu02\r\x1b[2Kall ok", "a\nb\tc", "\x00\x07\x9b31m", "x\u2028y", "\ud800", "n" * 5000, ["list"], {"a": 1}, 3.5]


@pytest.mark.parametrize("value", HOSTILE_NOTES, ids=[f"note{i}" for i in range(len(HOSTILE_NOTES))])
def test_summary_keeps_a_hosts_text_on_one_printable_line(value):
    """A host's error text (and a host name or status of the wrong kind) ends as one printable, cut line."""
    entries = [{"host": value, "status": value, "step": value, "message": value}, {"host": "gpu02", "status": "failed", "message": value}]
    summary = upgrade.gpu_upgrade_summary(entries, ["gpu01", "gpu02"])
    for line in summary["table"] + summary["reasons"]:
        assert line.isprintable() and len(line) < 2000, line[:80]
        line.encode("utf-8")
    assert len(summary["table"]) == 3 and summary["failed"][-1] == "gpu02"
    assert sum(summary["counts"].values()) == 2
