"""`state: absent` removes the exporter (#22), predicted by check mode; a second removal changes nothing.

Runs last (pytest takes the files in name order: test_gpu_exporter.py, test_version_change.py, this one).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from gpuhost_testinfra import changed_tasks, run_playbook_json

PROJECT = Path(os.environ.get("MOLECULE_PROJECT_DIRECTORY", Path(__file__).resolve().parents[3]))
PLAYBOOK = PROJECT / "playbooks" / "exporter.yml"


@pytest.fixture(scope="module")
def removed():
    """`state: absent` in check mode, then for real, then again; the results."""
    runs = [run_playbook_json(str(PLAYBOOK), "-e", "gpu_exporter_state=absent", *extra) for extra in (["--check"], [], [])]
    for result in runs:
        failures = {h: s for h, s in result["stats"].items() if s.get("failures") or s.get("unreachable")}
        assert not failures, failures
    return runs


def test_state_absent_removes_the_exporter_and_predicts_it(host, gpuhost_instance, removed):
    check, first, second = (changed_tasks(result, gpuhost_instance) for result in removed)
    assert first and check == first, (check, first)
    assert second == [], second
    assert not host.file("/etc/systemd/system/gpuhost-gpu-exporter.service").exists
    assert not host.file("/etc/gpuhost-gpu-exporter").exists and not host.file("/opt/gpuhost-gpu-exporter").exists
    assert not host.file("/usr/local/bin/nvidia_gpu_exporter").exists
    assert host.run("systemctl is-active gpuhost-gpu-exporter.service").stdout.strip() != "active"
    if gpuhost_instance.endswith("-dcgm"):
        for package in ("datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-cuda13", "datacenter-gpu-manager-exporter"):
            assert not host.package(package).is_installed, package
