"""gpu_exporter's DCGM by dnf on an emulated Rocky 9 host (one A100), as converged: the pinned rpms with their epoch, the
profiling module, a real Prometheus scrape, and a rogue key refused with nothing changed. Runs before
test_gpu_exporter_el_changes.py (file names sort so), which changes the host.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from gpuhost_prometheus import prometheus as run_prometheus
from gpuhost_prometheus import query
from gpuhost_testinfra import run_playbook_json
from gpuhost_testinfra import test_check_after_converge_changes_nothing, test_check_mode_predicted_converge  # noqa: F401  pylint: disable=unused-import

SCENARIO = Path(__file__).resolve().parents[1]
PROJECT = Path(os.environ.get("MOLECULE_PROJECT_DIRECTORY", SCENARIO.parents[1]))
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


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    """Debian's prometheus on the controller, loading the file_sd and rules playbooks/exporter.yml wrote."""
    def ready(base: str) -> bool:
        return bool(query(base, "up == 1") and query(base, "DCGM_FI_DEV_GPU_UTIL"))

    with run_prometheus(tmp_path_factory.mktemp("prometheus"), RULES, FILE_SD, ready, "the host") as base:
        yield base


def test_prometheus_scrapes_the_el_host_and_the_dashboard_has_data(prometheus):
    series = query(prometheus, "DCGM_FI_DEV_GPU_UTIL")
    assert [(s["metric"]["UUID"], s["metric"]["modelName"], s["metric"]["gpuhost_exporter"]) for s in series] == [
        (UUID, "NVIDIA A100-SXM4-80GB", "dcgm")]
    board = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    exprs = [target["expr"] for panel in board["panels"] for target in panel["targets"]]
    assert [e for e in exprs if not query(prometheus, e.replace("$host", ".*"))] == []


def test_a_rogue_key_fails_before_any_change(host):
    result = run_playbook_json(str(SCENARIO / "bad_inputs.yml"))
    changed = [(h, task["task"]["name"]) for play in result["plays"] for task in play["tasks"]
               for h, outcome in task["hosts"].items() if outcome.get("changed")]
    assert changed == []
    errors = [outcome.get("__gpuhost_key_error") for play in result["plays"] for task in play["tasks"]
              if task["task"]["name"] == "Report the failure" for outcome in task["hosts"].values()]
    assert errors and "does not hold exactly the pinned key" in errors[0] and "Nothing was installed" in errors[0], errors
    assert host.check_output(RPM_Q + "datacenter-gpu-manager-4-core") == "1:4.5.2-1"
