# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The fleet report (module_utils/_report.py, filter gpu_fleet_report) and the exporters' file_sd."""

from __future__ import annotations

import csv
import io
import json
import re
import time

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuhost.nvidia.plugins.filter.report import gpu_exporter_file_sd, gpu_fleet_report
from ansible_collections.gpuhost.nvidia.plugins.module_utils import _report

from .fleet import fleet

SMALL = [
    {"host": "ok1", "status": "ok", "facts": {"driver": {"version": "580.65.06", "cuda_version": "13.0"}, "reboot_required": False,
                                              "gpus": [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "memory_total_mib": 81559,
                                                        "bound_driver": "nvidia", "mig": {"current": "Disabled", "pending": "Disabled"}}]},
     "doctor": {"status": "ok", "checks": [{"id": "driver_loaded", "status": "ok"}]}},
    {"host": "warn1", "status": "ok", "facts": {"driver": {"version": "535.261.03"}, "reboot_required": True, "gpus": [
        {"index": 1, "name": "NVIDIA L4", "memory_total_mib": 23034, "bound_driver": "vfio-pci"},
        {"index": 0, "name": "NVIDIA L4", "memory_total_mib": 23034, "bound_driver": "nvidia",
         "mig": {"current": "Disabled", "pending": "Enabled"}}]},
     "doctor": {"status": "warn", "checks": [{"id": "persistence_mode", "status": "warn"}]}},
    {"host": "nogpu", "status": "ok", "facts": {"driver": {}, "gpus": []}, "doctor": {"status": "ok", "checks": []}},
    {"host": "down", "status": "unreachable"},
    {"host": "broken", "status": "failed", "error": "nvidia_gpu_facts failed: boom\nsecond line"},
]


def test_rows_one_per_gpu_and_every_host_listed_problems_first():
    report = _report.fleet_report(SMALL, "now")
    assert [(r["host"], r["status"], r["gpu"]) for r in report["rows"]] == [
        ("down", "unreachable", ""), ("broken", "failed", ""), ("warn1", "warn", 0), ("warn1", "warn", 1),
        ("nogpu", "ok", ""), ("ok1", "ok", 0)]
    rows = {(r["host"], r["gpu"]): r for r in report["rows"]}
    assert rows[("warn1", 1)]["health"] == "bound to vfio-pci"
    assert rows[("warn1", 0)]["health"] == "MIG change pending"
    assert rows[("ok1", 0)]["health"] == "ok" and rows[("ok1", 0)]["memory_gib"] == 79.6
    assert rows[("broken", "")]["problems"] == "nvidia_gpu_facts failed: boom"
    assert rows[("down", "")]["problems"] == "host unreachable"
    assert rows[("warn1", 0)]["problems"] == "persistence_mode: warn" and rows[("warn1", 0)]["reboot"] == "yes"
    assert report["counts"] == {"hosts": 5, "gpus": 3, "problem_hosts": 3}
    assert report["charts"]["doctor_status"] == {"unreachable": 1, "failed": 1, "warn": 1, "ok": 2}
    assert report["charts"]["gpus_by_model"] == {"NVIDIA L4": 2, "NVIDIA H100 80GB HBM3": 1}
    assert report["charts"]["reboot"] == {"no reboot needed": 2, "reboot needed": 1, "unknown": 2}


def test_csv_and_json_forms():
    rows = list(csv.reader(io.StringIO(gpu_fleet_report(SMALL, "t", "csv"))))
    assert rows[0] == list(_report.COLUMNS) and len(rows) == 7
    data = json.loads(gpu_fleet_report(SMALL, "t", "json"))
    assert data["generated_at"] == "t" and len(data["rows"]) == 6


def test_html_is_self_contained_and_escaped():
    hostile = [{"host": "<script>alert(1)</script>", "status": "failed", "error": "\"><img src=x onerror=alert(2)>"}]
    page = gpu_fleet_report(SMALL + hostile, "t", "html")
    assert "<script>alert(1)" not in page and "<img src=x" not in page
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page), "the page loads nothing from outside"
    assert "<link" not in page and page.count("<svg") == 4
    assert page.count('data-kind="gpu"') == 3


def test_names_report_hosts_that_left_nothing_as_unreachable():
    report = gpu_fleet_report([SMALL[0], None, {}], names=["ok1", "gone", "gone2"])
    assert [(h["host"], h["status"]) for h in report["hosts"]] == [("gone", "unreachable"), ("gone2", "unreachable"), ("ok1", "ok")]
    with pytest.raises(AnsibleFilterError, match="one inventory name per entry"):
        gpu_fleet_report([None], names=[])
    with pytest.raises(AnsibleFilterError, match="form must be one of"):
        gpu_fleet_report(SMALL, form="pdf")


def test_thousand_hosts_render_in_seconds():
    hosts = fleet(1000)
    start = time.monotonic()
    page = gpu_fleet_report(hosts, "t", "html")
    csv_text = gpu_fleet_report(hosts, "t", "csv")
    elapsed = time.monotonic() - start
    assert elapsed < 5, f"1,000 hosts took {elapsed:.1f} s"
    gpus = sum(len(h.get("facts", {}).get("gpus", [])) for h in hosts)
    assert page.count('data-kind="gpu"') == gpus and csv_text.count("\n") == gpus + 1 + sum(1 for h in hosts if "facts" not in h)
    assert len(page) < 4_000_000


def test_file_sd_labels_from_facts():
    entries = gpu_exporter_file_sd([
        {"host": "b", "address": "10.0.0.2", "port": 9835, "kind": "nvidia_gpu_exporter", "facts": {}},
        {"host": "a", "address": "fd00::1", "port": 9400, "kind": "dcgm", "facts": SMALL[1]["facts"]},
    ])
    assert entries == [
        {"targets": ["[fd00::1]:9400"], "labels": {"gpuhost_host": "a", "gpuhost_exporter": "dcgm", "gpuhost_gpu_model": "NVIDIA L4",
                                                   "gpuhost_gpu_count": "2", "gpuhost_driver_version": "535.261.03"}},
        {"targets": ["10.0.0.2:9835"], "labels": {"gpuhost_host": "b", "gpuhost_exporter": "nvidia_gpu_exporter", "gpuhost_gpu_model": "",
                                                  "gpuhost_gpu_count": "0", "gpuhost_driver_version": ""}},
    ]
    with pytest.raises(AnsibleFilterError):
        gpu_exporter_file_sd([{"host": "x"}])


def test_gpu_without_driver_is_named_by_architecture_and_pci_address():
    """A GPU seen on the PCI bus only (no driver: no index, no name) is still a row a reader can identify."""
    host = {"host": "bare", "status": "ok", "facts": {"driver": {}, "gpus": [
        {"index": None, "name": None, "pci_bus_id": "0000:18:00.0", "pci_device_id": "10de:2330", "architecture": "Hopper"},
        {"index": None, "name": None, "pci_bus_id": "0000:2a:00.0", "pci_device_id": "10de:9999", "architecture": None}]},
        "doctor": {"status": "fail", "checks": [{"id": "driver_loaded", "status": "fail"}]}}
    report = _report.fleet_report([host], "now")
    assert [(row["gpu"], row["model"]) for row in report["rows"]] == [
        ("0000:18:00.0", "Hopper GPU (10de:2330)"), ("0000:2a:00.0", "NVIDIA 10de:9999")]
    assert report["charts"]["gpus_by_model"] == {"Hopper GPU (10de:2330)": 1, "NVIDIA 10de:9999": 1}
    assert "None" not in _report.report_html(report)
