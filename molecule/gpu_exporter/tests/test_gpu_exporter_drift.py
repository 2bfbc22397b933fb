"""The converged fast path stays honest for gpu_exporter (issue 21): runs after test_gpu_exporter.py and before
test_version_change.py (file names sort so), on the hosts as converge + idempotence + check left them.

The idempotence run confirmed each host's record, and the check run after it (the full path in check mode) changed
nothing (the shared test_check_after_converge_changes_nothing): so the probe must say converged. Then, behind the
role's back: the exporter's unit file is edited and the unit disabled on both hosts, one DCGM package is removed on
the DCGM host, and the nvidia_gpu_exporter binary is edited on the other. The probe must name each drift, one run of
playbooks/exporter.yml must repair it (the exporter enabled and running again), and the probe must then find every
item as recorded.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from gpuhost_drift import UNCONFIRMED, named, probe, read_record, sh
from gpuhost_testinfra import changed_tasks, instances, run_playbook_json

PROJECT = Path(os.environ.get("MOLECULE_PROJECT_DIRECTORY", Path(__file__).resolve().parents[3]))
ROLE = "gpu_exporter"
UNIT = "gpuhost-gpu-exporter.service"
UNIT_FILE = f"/etc/systemd/system/{UNIT}"
DCGM_PACKAGE = "datacenter-gpu-manager-4-cuda13"
BINARY = "/usr/local/bin/nvidia_gpu_exporter"


@pytest.fixture(scope="module")
def drift(tmp_path_factory):
    """Probe, mutate, probe, repair, probe: once for both hosts."""
    work = tmp_path_factory.mktemp("drift")
    names = instances()
    records = {name: read_record(name, ROLE) for name in names}
    converged = probe(ROLE, records, work)
    expected: dict[str, list[str]] = {}
    for name in names:
        sh(name, 'printf "# gpuhost drift test\\n" >> "$1" && systemctl disable --quiet "$2"', UNIT_FILE, UNIT)
        expected[name] = [f"file {UNIT_FILE} changed", f"unit {UNIT} is disabled, recorded enabled"]
        if name.endswith("-dcgm"):
            sh(name, 'dpkg --remove "$1" >/dev/null', DCGM_PACKAGE)
            expected[name].append(f"package {DCGM_PACKAGE} is not installed")
        else:
            sh(name, 'printf "# gpuhost drift test\\n" >> "$(readlink -f "$1")"', BINARY)
            expected[name].append(f"file {BINARY} changed")
    drifted = probe(ROLE, records, work)
    repair = run_playbook_json(str(PROJECT / "playbooks" / "exporter.yml"))
    after = {name: read_record(name, ROLE) for name in names}
    return {"converged": converged, "expected": expected, "drifted": drifted, "repair": repair, "again": probe(ROLE, after, work)}


def test_probe_sees_each_drift_and_one_run_repairs_it(host, gpuhost_instance, drift):
    assert (drift["converged"][gpuhost_instance]["converged"], drift["converged"][gpuhost_instance]["drift"]) == (True, [])
    drifted = drift["drifted"][gpuhost_instance]
    assert drifted["converged"] is False
    assert named(drifted["drift"], drift["expected"][gpuhost_instance]) == [], drifted["drift"]
    stats = drift["repair"]["stats"][gpuhost_instance]
    assert not stats.get("failures") and not stats.get("unreachable"), drift["repair"]["stats"]
    changed = changed_tasks(drift["repair"], gpuhost_instance)
    assert "gpuhost.nvidia.gpu_exporter : Write the hardened exporter unit" in changed, changed
    # Every item is as the role leaves it again, and the exporter runs (the role's own scrape passed in the run).
    assert "gpuhost drift test" not in host.file(UNIT_FILE).content_string
    assert host.service(UNIT).is_enabled and host.service(UNIT).is_running
    if gpuhost_instance.endswith("-dcgm"):
        assert host.package(DCGM_PACKAGE).is_installed
    else:
        assert "gpuhost drift test" not in host.file(BINARY).content_string
        assert "gpuhost.nvidia.gpu_exporter : Unpack the exporter binary into its version directory" in changed, changed
    # A repair that restored exactly what the confirmed record holds keeps it confirmed; otherwise the next full run
    # confirms it. Either way every item is as recorded.
    again = drift["again"][gpuhost_instance]
    assert again["drift"] in ([], [UNCONFIRMED]), again
