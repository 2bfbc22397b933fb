"""gpu_exporter's DCGM by dnf on an emulated Rocky 9 host (one A100): the pinned rpms with their epoch, the profiling
module, a real Prometheus scrape, a rogue key refused, the pin moved, drift repaired, and state absent.

The tests run in this file's order on the one converged host (idempotence and the check after it ran before).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from gpuhost_drift import UNCONFIRMED, named, probe, read_record, sh
from gpuhost_testinfra import changed_tasks, instances, run_playbook_json
from gpuhost_testinfra import test_check_after_converge_changes_nothing, test_check_mode_predicted_converge  # noqa: F401  pylint: disable=unused-import

SCENARIO = Path(__file__).resolve().parents[1]
PROJECT = Path(os.environ.get("MOLECULE_PROJECT_DIRECTORY", SCENARIO.parents[1]))
PLAYBOOK = PROJECT / "playbooks" / "exporter.yml"
DASHBOARD = PROJECT / "roles" / "gpu_exporter" / "files" / "dashboards" / "dcgm.json"
EPHEMERAL = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/nonexistent"))
FILE_SD = EPHEMERAL / "prometheus" / "gpu_exporters.json"
RULES = EPHEMERAL / "prometheus" / "gpuhost-gpu.rules.yml"
UUID = "GPU-3f1e2d4c-6b5a-4978-8e1d-2c3b4a5f6e7d"
DCGM = ("datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-cuda13", "datacenter-gpu-manager-4-proprietary",
        "datacenter-gpu-manager-4-proprietary-cuda13")
UNIT = "gpuhost-gpu-exporter.service"
RPM_Q = "rpm -q --qf '%{EPOCH}:%{VERSION}-%{RELEASE}' "


def test_dcgm_by_dnf_at_the_default_pins_with_the_profiling_module(host):
    unit = host.service(UNIT)
    assert unit.is_enabled and unit.is_running
    assert host.service("nvidia-dcgm.service").is_enabled and host.service("nvidia-dcgm.service").is_running
    # dnf installed name-1:4.5.2-1 (the role's default, epoch included); the A100 and the default collectors' profiling
    # fields brought the -proprietary pair.
    for package in DCGM:
        assert host.check_output(RPM_Q + package) == "1:4.5.2-1", package
    assert host.check_output("rpm -q --qf '%{VERSION}-%{RELEASE}' datacenter-gpu-manager-exporter") == "4.8.4.3955-1"
    assert host.file("/usr/share/gpuhost-stub/datacenter-gpu-manager-exporter/STUB").exists
    exec_start = host.check_output(f"systemctl show -p ExecStart --value {UNIT}")
    assert "/usr/bin/dcgm-exporter" in exec_start and "-r localhost:5555" in exec_start
    # Nothing of apt's path: the keyring checked was the armoured key dnf imports.
    assert not host.file("/etc/apt/keyrings/gpuhost-nvidia-cuda.gpg").exists


def test_the_report_says_why_the_profiling_module_came():
    entries = json.loads(FILE_SD.read_text(encoding="utf-8"))
    assert [(e["labels"]["gpuhost_exporter"], e["labels"]["gpuhost_gpu_model"]) for e in entries] == [("dcgm", "NVIDIA A100-SXM4-80GB")]
    assert entries[0]["targets"][0].endswith(":9400")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _query(base: str, expr: str) -> list[dict]:
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as resp:  # noqa: S310 - localhost
        data = json.loads(resp.read())
    assert data["status"] == "success", data
    return data["data"]["result"]


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    """Debian's prometheus on the controller, loading the file_sd and rules playbooks/exporter.yml wrote."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("prometheus is not installed (bindep.txt; tests/deps/install.sh)")
    work = tmp_path_factory.mktemp("prometheus")
    (work / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s}\n"
        f"rule_files: ['{RULES}']\n"
        f"scrape_configs:\n  - job_name: gpu\n    file_sd_configs: [{{files: ['{FILE_SD}'], refresh_interval: 1s}}]\n",
        encoding="utf-8")
    port = _free_port()
    proc = subprocess.Popen([binary, f"--config.file={work / 'prometheus.yml'}", f"--storage.tsdb.path={work / 'data'}",
                             f"--web.listen-address=127.0.0.1:{port}"], stdout=subprocess.DEVNULL,
                            stderr=(work / "log").open("w"))
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if _query(base, "up == 1") and _query(base, "DCGM_FI_DEV_GPU_UTIL"):
                    break
            except OSError:
                pass
            assert proc.poll() is None, (work / "log").read_text()
            assert time.monotonic() < deadline, f"Prometheus did not scrape the host: {_query(base, 'up')}"
            time.sleep(0.5)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_prometheus_scrapes_the_el_host_and_the_dashboard_has_data(prometheus):
    series = _query(prometheus, "DCGM_FI_DEV_GPU_UTIL")
    assert [(s["metric"]["UUID"], s["metric"]["modelName"], s["metric"]["gpuhost_exporter"]) for s in series] == [
        (UUID, "NVIDIA A100-SXM4-80GB", "dcgm")]
    board = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    exprs = [target["expr"] for panel in board["panels"] for target in panel["targets"]]
    assert [e for e in exprs if not _query(prometheus, e.replace("$host", ".*"))] == []


def test_a_rogue_key_fails_before_any_change(host):
    result = run_playbook_json(str(SCENARIO / "bad_inputs.yml"))
    changed = [(h, task["task"]["name"]) for play in result["plays"] for task in play["tasks"]
               for h, outcome in task["hosts"].items() if outcome.get("changed")]
    assert changed == []
    errors = [outcome.get("__gpuhost_key_error") for play in result["plays"] for task in play["tasks"]
              if task["task"]["name"] == "Report the failure" for outcome in task["hosts"].values()]
    assert errors and "does not hold exactly the pinned key" in errors[0] and "Nothing was installed" in errors[0], errors
    assert host.check_output(RPM_Q + "datacenter-gpu-manager-4-core") == "1:4.5.2-1"


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
