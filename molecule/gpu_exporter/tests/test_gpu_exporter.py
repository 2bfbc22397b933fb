"""gpu_exporter on Debian 13 (DCGM exporter) and Debian 12 (nvidia_gpu_exporter), scraped by Debian's real Prometheus."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from gpuhost_prometheus import prometheus as run_prometheus
from gpuhost_prometheus import query
from gpuhost_testinfra import run_playbook_json
from gpuhost_testinfra import test_check_after_converge_changes_nothing, test_check_mode_predicted_converge  # noqa: F401  pylint: disable=unused-import

SCENARIO = Path(__file__).resolve().parents[1]
DASHBOARDS = SCENARIO.parents[1] / "roles" / "gpu_exporter" / "files" / "dashboards"
EPHEMERAL = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/nonexistent"))
FILE_SD = EPHEMERAL / "prometheus" / "gpu_exporters.json"
RULES = EPHEMERAL / "prometheus" / "gpuhost-gpu.rules.yml"
GPUS = {"dcgm": 2, "nvgpu": 1}
FINGERPRINT = (SCENARIO.parents[1] / ".cache" / "repos" / "current" / "key" / "fingerprint").read_text(encoding="utf-8").strip()
# nvidia_driver's pinned key for NVIDIA's CUDA debian13 repository (roles/nvidia_driver/vars/Debian_13.yml, docs/sources.md)
DEBIAN13_CUDA_KEY = "02182E60104FCDC26EAE1B8597A5D4CB8793F200"
KIND = {"dcgm": ("dcgm", 9400), "nvgpu": ("nvidia_gpu_exporter", 9835)}


def role(instance: str) -> str:
    return instance.rsplit("-", 1)[1]


def test_unit_enabled_running_and_hardened(host, gpuhost_instance):
    kind, port = KIND[role(gpuhost_instance)]
    unit = host.service("gpuhost-gpu-exporter.service")
    assert unit.is_enabled and unit.is_running
    lines = [line.split("=", 1) for line in host.check_output(
        "systemctl show gpuhost-gpu-exporter.service -p DynamicUser -p ProtectSystem -p DevicePolicy -p DeviceAllow "
        "-p NoNewPrivileges -p ProtectHome -p CapabilityBoundingSet -p ExecStart").splitlines()]
    props = dict(lines)
    props["DeviceAllow"] = " ".join(value for key, value in lines if key == "DeviceAllow")
    assert props["DynamicUser"] == "yes" and props["ProtectSystem"] == "strict" and props["DevicePolicy"] == "closed"
    assert props["NoNewPrivileges"] == "yes" and props["ProtectHome"] == "yes" and props["CapabilityBoundingSet"] == ""
    assert f":{port}" in props["ExecStart"]
    if kind == "dcgm":
        assert props["DeviceAllow"] == ""
        assert host.service("nvidia-dcgm.service").is_enabled and host.service("nvidia-dcgm.service").is_running
        # The role's default pin (with NVIDIA's epoch) and the CUDA major of driver branch 595 (CUDA 13.2, from the
        # catalog: the facts carry no cuda_version).
        assert host.package("datacenter-gpu-manager-4-core").version == "1:4.5.2-1"
        assert host.package("datacenter-gpu-manager-4-cuda13").version == "1:4.5.2-1"
        assert not host.package("datacenter-gpu-manager-4-cuda12").is_installed
        assert host.package("datacenter-gpu-manager-exporter").version == "4.8.2-1"
        # Installed from the debian13 CUDA repository stand-in, trusted through nvidia_driver's keyring (the role's
        # default), which holds exactly the pinned key.
        policy = host.check_output("apt-cache policy datacenter-gpu-manager-4-cuda13")
        assert "file:/srv/gpuhost-repos/apt-cuda-debian13" in policy, policy
        keyring = host.check_output("gpg --show-keys --with-colons /etc/apt/keyrings/gpuhost-nvidia-cuda.gpg")
        assert [line.split(":")[9] for line in keyring.splitlines() if line.startswith("fpr:")] == [FINGERPRINT]
        # Hopper reads the profiling fields through NVML: no profiling module.
        assert not host.package("datacenter-gpu-manager-4-proprietary").is_installed
        assert host.file("/usr/share/gpuhost-stub/datacenter-gpu-manager-exporter/STUB").exists
        csv = host.file("/etc/gpuhost-gpu-exporter/dcgm-collectors.csv").content_string
        assert "DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %)." in csv
        assert "-r localhost:5555" in props["ExecStart"]
    else:
        assert "char-nvidia-frontend rw" in props["DeviceAllow"]
        assert host.file("/usr/local/bin/nvidia_gpu_exporter").linked_to == "/opt/gpuhost-gpu-exporter/1.14.0/nvidia_gpu_exporter"
    # The exporter runs as a dynamic user, not root.
    user = host.check_output("ps -o user= -p $(systemctl show -p MainPID --value gpuhost-gpu-exporter.service)")
    assert user.strip() not in ("root", "0")


def test_file_sd_lists_every_host_labelled_from_the_facts(gpuhost_instance):
    entries = {e["labels"]["gpuhost_host"]: e for e in json.loads(FILE_SD.read_text(encoding="utf-8"))}
    entry = entries[gpuhost_instance]
    kind, port = KIND[role(gpuhost_instance)]
    assert entry["labels"]["gpuhost_exporter"] == kind and entry["labels"]["gpuhost_gpu_count"] == str(GPUS[role(gpuhost_instance)])
    assert entry["targets"][0].endswith(f":{port}")
    assert entry["labels"]["gpuhost_gpu_model"] == {"dcgm": "NVIDIA H100 80GB HBM3", "nvgpu": "NVIDIA GeForce RTX 4090"}[role(gpuhost_instance)]


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    """Debian's prometheus (bindep.txt) on the controller, loading the generated file_sd and the rules file
    playbooks/exporter.yml wrote next to it."""
    def ready(base: str) -> bool:
        return bool(len(query(base, "up == 1")) == 2 and query(base, "DCGM_FI_DEV_GPU_UTIL") and query(base, "nvidia_smi_gpu_info"))

    with run_prometheus(tmp_path_factory.mktemp("prometheus"), RULES, FILE_SD, ready, "both hosts") as base:
        yield base


def test_the_alert_rules_evaluate_on_the_scraped_series_and_none_fires(prometheus):
    """Prometheus loaded every rule of the written file, evaluates each without error on the stand-ins' series (an
    expression that yields two series of the same labels would be an error here), and the healthy stand-ins fire
    nothing: every GPU persistent, no Xid, nvidia-smi exiting 0."""
    deadline = time.monotonic() + 30
    while True:
        with urllib.request.urlopen(f"{prometheus}/api/v1/rules", timeout=5) as resp:  # noqa: S310 - localhost
            rules = [r for g in json.loads(resp.read())["data"]["groups"] for r in g["rules"]]
        if rules and all(not r.get("lastEvaluation", "0001").startswith("0001") for r in rules):
            break
        assert time.monotonic() < deadline, rules
        time.sleep(0.5)
    assert len(rules) == len(re.findall(r"^      - alert: ", RULES.read_text(encoding="utf-8"), re.M)) >= 15
    assert [(r["name"], r.get("lastError")) for r in rules if r["health"] != "ok"] == []
    # A rule evaluated before the first scrape may go pending (GpuExporterTargetsAbsent: no up series yet); the next
    # evaluations (every second) clear it. Nothing may stay.
    deadline = time.monotonic() + 20
    while True:
        with urllib.request.urlopen(f"{prometheus}/api/v1/alerts", timeout=5) as resp:  # noqa: S310 - localhost
            alerts = json.loads(resp.read())["data"]["alerts"]
        if not alerts:
            break
        assert time.monotonic() < deadline, alerts
        time.sleep(0.5)


def test_prometheus_has_one_series_per_gpu_per_host(prometheus):
    dcgm = query(prometheus, "DCGM_FI_DEV_GPU_UTIL")
    nvgpu = query(prometheus, "nvidia_smi_gpu_info")
    assert sorted((s["metric"]["gpuhost_host"], s["metric"]["UUID"], s["metric"]["modelName"]) for s in dcgm) == [
        ("gpuhost-debian13-gpu_exporter-dcgm", "GPU-5c3b9d2e-0f4a-4b1e-9c6d-7a8b9c0d1e2f", "NVIDIA H100 80GB HBM3"),
        ("gpuhost-debian13-gpu_exporter-dcgm", "GPU-8e7d6c5b-4a39-4281-b7f6-e5d4c3b2a190", "NVIDIA H100 80GB HBM3")]
    assert {s["metric"]["gpu"] for s in dcgm} == {"0", "1"} and {s["metric"]["device"] for s in dcgm} == {"nvidia0", "nvidia1"}
    assert [(s["metric"]["gpuhost_host"], s["metric"]["name"], s["metric"]["uuid"], s["metric"]["driver_version"]) for s in nvgpu] == [
        ("gpuhost-debian12-gpu_exporter-nvgpu", "NVIDIA GeForce RTX 4090", "1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d", "575.64.03")]
    # The exporters' own labels arrive under their own names: no file_sd label took their place.
    assert not [k for s in dcgm + nvgpu for k in s["metric"] if k.startswith("exported_")]
    assert {s["metric"]["gpuhost_driver_version"] for s in nvgpu} == {"575.64.03"}
    per_host = {s["metric"]["gpuhost_host"]: int(s["value"][1]) for s in query(
        prometheus, "count by (gpuhost_host) (DCGM_FI_DEV_GPU_UTIL) or count by (gpuhost_host) (nvidia_smi_gpu_info)")}
    assert per_host == {"gpuhost-debian13-gpu_exporter-dcgm": 2, "gpuhost-debian12-gpu_exporter-nvgpu": 1}


@pytest.mark.parametrize("dashboard", ["dcgm.json", "nvidia_gpu_exporter.json"])
def test_dashboard_queries_return_data(prometheus, dashboard):
    board = json.loads((DASHBOARDS / dashboard).read_text(encoding="utf-8"))
    exprs = [target["expr"] for panel in board["panels"] for target in panel["targets"]]
    assert len(exprs) >= 6
    for var in board["templating"]["list"]:
        if var["type"] == "query":
            match = re.fullmatch(r"label_values\((\w+), (\w+)\)", var["query"]["query"])
            assert match and query(prometheus, match.group(1)), var
    empty = [e for e in exprs if not query(prometheus, e.replace("$host", ".*"))]
    assert empty == []


def test_bad_inputs_fail_before_any_change(host, gpuhost_instance):
    if role(gpuhost_instance) != "dcgm":
        pytest.skip("one bad-input run covers both hosts")
    result = run_playbook_json(str(SCENARIO / "bad_inputs.yml"))
    changed = [(h, task["task"]["name"]) for play in result["plays"] for task in play["tasks"]
               for h, outcome in task["hosts"].items() if outcome.get("changed")]
    assert changed == []
    reports = {h: outcome["__gpuhost_errors"] for play in result["plays"] for task in play["tasks"]
               if task["task"]["name"] == "Report the failures" for h, outcome in task["hosts"].items()}
    assert "does not hold exactly the pinned key" in reports["gpuhost-debian13-gpu_exporter-dcgm"]["key"]
    assert "Nothing was installed" in reports["gpuhost-debian13-gpu_exporter-dcgm"]["key"]
    # Without a fingerprint set, the key is the one nvidia_driver pins for Debian 13 (8793F200, not debian12's
    # 3BF863CC), checked in nvidia_driver's keyring: the test key is not it.
    default_key = reports["gpuhost-debian13-gpu_exporter-dcgm"]["default_key"]
    assert "/etc/apt/keyrings/gpuhost-nvidia-cuda.gpg does not hold exactly the pinned key" in default_key, default_key
    assert f"EXPECTED {DEBIAN13_CUDA_KEY}" in default_key.upper(), default_key
    assert "checksum" in reports["gpuhost-debian12-gpu_exporter-nvgpu"]["checksum"].lower()
    assert host.package("datacenter-gpu-manager-4-core").version == "1:4.5.2-1"


def test_fleet_report_over_the_test_hosts(host, gpuhost_instance, tmp_path):
    """playbooks/report.yml over both hosts and one unreachable host: three forms, nobody dropped, hosts unchanged."""
    if role(gpuhost_instance) != "dcgm":
        pytest.skip("one report run covers every host")
    out = EPHEMERAL / "report"
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json", GPUHOST_RECORD_RUNS="0")
    extra_inventory = str(SCENARIO / "report" / "inventory" / "hosts.yml")
    proc = subprocess.run(["ansible-playbook", "-i", os.environ["MOLECULE_INVENTORY_FILE"], "-i", extra_inventory,
                           str(SCENARIO.parents[1] / "playbooks" / "report.yml"), "-e", f"gpuhost_report_dir={out}",
                           "-e", "ansible_python_interpreter=/usr/bin/python3", "-e", "gpuhost_targets=all:!localhost",
                           "-e", "gpuhost_report_facts_root=/opt/gpuhost-fake-root"],
                          env=env, capture_output=True, text=True, check=False)
    result = json.loads(proc.stdout)
    changed = [(h, t["task"]["name"]) for p in result["plays"] for t in p["tasks"] for h, o in t["hosts"].items()
               if o.get("changed") and h != "localhost"]
    assert changed == []
    assert result["stats"]["gpuhost-offline"]["unreachable"] == 1
    report = json.loads((out / "fleet.json").read_text(encoding="utf-8"))
    assert [(h["host"], h["status"]) for h in report["hosts"]][0] == ("gpuhost-offline", "unreachable")
    assert {h["host"] for h in report["hosts"]} == {"gpuhost-offline", "gpuhost-debian13-gpu_exporter-dcgm",
                                                    "gpuhost-debian12-gpu_exporter-nvgpu"}
    # Every field is quoted (a spreadsheet must not read a host's value as a formula: docs/threat-model.md).
    assert (out / "fleet.csv").read_text(encoding="utf-8").startswith('"host","status","gpu","model",')
    page = (out / "fleet.html").read_text(encoding="utf-8")
    assert 'data-host="gpuhost-offline"' in page and "<svg" in page
    # The page in a real browser (Debian's headless Chromium): one row per GPU of the reachable hosts, the unreachable
    # host on top; the screenshot is kept as a test artifact (docs/report-screenshot.png is one of these).
    chromium = shutil.which("chromium")
    assert chromium, "chromium is not installed (bindep.txt; tests/deps/install.sh)"
    browse = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--virtual-time-budget=5000"]
    dom = subprocess.run([*browse, "--dump-dom", (out / "fleet.html").as_uri()], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    rows = re.findall(r'<tr class="s-[a-z]+" data-kind="(gpu|host)" data-status="([a-z]+)" data-host="([^"]+)"', dom)
    assert sorted(row[2] for row in rows if row[0] == "gpu") == ["gpuhost-debian12-gpu_exporter-nvgpu"] + [
        "gpuhost-debian13-gpu_exporter-dcgm"] * 2
    assert rows[0][1:] == ("unreachable", "gpuhost-offline")
    shot = SCENARIO.parents[1] / "tests" / "output" / "report" / "molecule-fleet.png"
    shot.parent.mkdir(parents=True, exist_ok=True)
    shot.unlink(missing_ok=True)
    subprocess.run([*browse, "--window-size=1280,800", f"--screenshot={shot}", (out / "fleet.html").as_uri()],
                   capture_output=True, timeout=120, check=True)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
