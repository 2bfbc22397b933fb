"""gpu_exporter's DCGM by dnf on the Rocky 9 host, changed: the pin moved and back, drift repaired, and state absent.
Runs after test_gpu_exporter_el.py (file names sort so); every test here takes the host, so they keep this order.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from gpuhost_drift import UNCONFIRMED, named, probe, read_record, sh
from gpuhost_testinfra import changed_tasks, instances, run_playbook_json

SCENARIO = Path(__file__).resolve().parents[1]
PROJECT = Path(os.environ.get("MOLECULE_PROJECT_DIRECTORY", SCENARIO.parents[1]))
PLAYBOOK = PROJECT / "playbooks" / "exporter.yml"
DCGM = ("datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-cuda13", "datacenter-gpu-manager-4-proprietary",
        "datacenter-gpu-manager-4-proprietary-cuda13")
UNIT = "gpuhost-gpu-exporter.service"
RPM_Q = "rpm -q --qf '%{EPOCH}:%{VERSION}-%{RELEASE}' "


def test_a_moved_pin_moves_dcgm_by_dnf(host, tmp_path):
    """4.6.0-1 without the epoch: dnf matches name-version-release of the epoch-1 packages."""
    before = host.check_output(f"systemctl show -p MainPID --value {UNIT}").strip()
    extra = tmp_path / "versions.json"
    extra.write_text(json.dumps({"gpu_exporter_dcgm_version": "4.6.0-1"}), encoding="utf-8")
    result = run_playbook_json(str(PLAYBOOK), "-e", f"@{extra}")
    assert not [h for h, s in result["stats"].items() if s.get("failures") or s.get("unreachable")], result["stats"]
    name = instances()[0]
    changed = changed_tasks(result, name)
    assert "gpuhost.nvidia.gpu_exporter : Install DCGM and the DCGM exporter, version-pinned (dnf)" in changed, changed
    for package in DCGM:
        assert host.check_output(RPM_Q + package) == "1:4.6.0-1", package
    after = host.check_output(f"systemctl show -p MainPID --value {UNIT}").strip()
    assert after not in ("", "0", before), "the exporter was not restarted"
    # Back to the default pin (a downgrade, allow_downgrade) for the drift and removal tests.
    back = run_playbook_json(str(PLAYBOOK))
    assert not [h for h, s in back["stats"].items() if s.get("failures") or s.get("unreachable")], back["stats"]
    assert host.check_output(RPM_Q + "datacenter-gpu-manager-4-core") == "1:4.5.2-1"


def test_the_probe_sees_a_removed_rpm_and_one_run_repairs_it(host, tmp_path):
    name = instances()[0]
    record = {name: read_record(name, "gpu_exporter")}
    converged = probe("gpu_exporter", record, tmp_path)[name]
    assert (converged["converged"], converged["drift"]) == (True, []), converged
    sh(name, 'rpm -e "$1"', "datacenter-gpu-manager-4-cuda13")
    drifted = probe("gpu_exporter", record, tmp_path)[name]
    assert drifted["converged"] is False
    assert named(drifted["drift"], ["package datacenter-gpu-manager-4-cuda13 is not installed"]) == [], drifted["drift"]
    repair = run_playbook_json(str(PLAYBOOK))
    assert not repair["stats"][name].get("failures"), repair["stats"]
    assert "gpuhost.nvidia.gpu_exporter : Install DCGM and the DCGM exporter, version-pinned (dnf)" in changed_tasks(repair, name)
    assert host.check_output(RPM_Q + "datacenter-gpu-manager-4-cuda13") == "1:4.5.2-1"
    again = probe("gpu_exporter", {name: read_record(name, "gpu_exporter")}, tmp_path)[name]
    assert again["drift"] in ([], [UNCONFIRMED]), again


def test_state_absent_removes_everything_and_check_mode_predicts_it(host):
    name = instances()[0]
    runs = [run_playbook_json(str(PLAYBOOK), "-e", "gpu_exporter_state=absent", *extra) for extra in (["--check"], [], [])]
    for result in runs:
        assert not [h for h, s in result["stats"].items() if s.get("failures") or s.get("unreachable")], result["stats"]
    check, first, second = (changed_tasks(result, name) for result in runs)
    assert first and check == first, (check, first)
    assert second == [], second
    assert "gpuhost.nvidia.gpu_exporter : Remove the DCGM packages (EL)" in first, first
    for package in (*DCGM, "datacenter-gpu-manager-exporter"):
        assert host.run("rpm -q " + package).rc != 0, package
    assert not host.file(f"/etc/systemd/system/{UNIT}").exists and not host.file("/etc/gpuhost-gpu-exporter").exists
    assert host.run(f"systemctl is-active {UNIT}").stdout.strip() != "active"
    assert re.fullmatch(r"inactive|unknown|failed", host.run("systemctl is-active nvidia-dcgm.service").stdout.strip() or "unknown")
