# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""gpu_exporter: the stub exporters' metrics (checked by Debian's real promtool), the dashboards, the auto choice."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
ROLE = ROOT / "roles" / "gpu_exporter"
GPUS = {"hostname": "h1", "driver_version": "580.65.06", "cuda_version": "13.0", "gpus": [
    {"index": 0, "uuid": "GPU-5c3b9d2e-0f4a-4b1e-9c6d-7a8b9c0d1e2f", "name": "NVIDIA H100 80GB HBM3", "pci_bus_id": "0000:18:00.0",
     "memory_total_mib": 81559},
    {"index": 1, "uuid": "GPU-8e7d6c5b-4a39-4281-b7f6-e5d4c3b2a190", "name": "NVIDIA H100 80GB HBM3", "pci_bus_id": "0000:2a:00.0",
     "memory_total_mib": 81559}]}
_SPEC = importlib.util.spec_from_file_location("gpuhost_repos_build", ROOT / "tests" / "repos" / "build.py")
BUILD = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(BUILD)
DEFAULTS = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text(encoding="utf-8"))
VARS = yaml.safe_load((ROLE / "vars" / "main.yml").read_text(encoding="utf-8"))


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def render(tmp_path: Path, stub: str) -> Path:
    """The stub exporter as the test repositories package it (tests/repos/build.py: the vocabulary embedded)."""
    path = tmp_path / f"{stub}.stub"
    path.write_text(BUILD.stub_text(stub, "1.0.0-1"), encoding="utf-8")
    return path


def start(tmp_path: Path, stub: str, *args: str) -> tuple[subprocess.Popen, int]:
    (tmp_path / "gpus.json").write_text(json.dumps(GPUS), encoding="utf-8")
    port = _port()
    flag = ["-a", f"127.0.0.1:{port}"] if stub == "dcgm-exporter" else [f"--web.listen-address=127.0.0.1:{port}"]
    env = {"GPUHOST_STUB_GPUS": str(tmp_path / "gpus.json"), "PATH": "/usr/bin:/bin"}
    return subprocess.Popen(["sh", str(render(tmp_path, stub)), *flag, *args], env=env, stderr=subprocess.PIPE, text=True), port


def scrape(tmp_path: Path, stub: str, *args: str) -> str:
    proc, port = start(tmp_path, stub, *args)
    try:
        for _attempt in range(100):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as resp:  # noqa: S310 - localhost
                    return resp.read().decode()
            except OSError:
                if proc.poll() is not None:
                    raise AssertionError(f"{stub} exited {proc.returncode}: {proc.stderr.read()}") from None
                time.sleep(0.05)
        raise AssertionError(f"{stub} did not serve")
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def promtool_check(text: str) -> None:
    """Debian's promtool parses the exposition; only its naming lint may remain, about names the publishers use
    (DCGM's camelCase labels, its counters without _total, DCGM_FI_DEV_PCIE_REPLAY_COUNTER, nvidia_gpu_exporter's nvidia_smi_count and
    ..._session_count, its nvidia-smi gauges ..._ecc_errors_*_total and ..._remapped_rows_histogram_*)."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("tool missing: promtool (prometheus, bindep.txt; tests/deps/install.sh)")
    proc = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, check=False)
    published_names = ("should be written in 'snake_case'", 'non-histogram and non-summary metrics should not have "_count" suffix',
                       'counter metrics should have "_total" suffix', "metric name should not include type 'counter'",
                       'non-counter metrics should not have "_total" suffix', "metric name should not include type 'histogram'")
    problems = [line for line in (proc.stdout + proc.stderr).splitlines() if line and not any(p in line for p in published_names)]
    assert proc.returncode in (0, 3) and problems == [], proc.stdout + proc.stderr


def collectors_csv(tmp_path: Path) -> Path:
    path = tmp_path / "collectors.csv"
    path.write_text("# DCGM FIELD, Prometheus metric type, help message\n"
                    + "".join(f"{r['field']}, {r['type']}, {r['help']}\n" for r in DEFAULTS["gpu_exporter_dcgm_collectors"]), encoding="utf-8")
    return path


def test_dcgm_stub_serves_every_collector_for_every_gpu_in_dcgm_exporters_format(tmp_path):
    text = scrape(tmp_path, "dcgm-exporter", "-f", str(collectors_csv(tmp_path)))
    promtool_check(text)
    series = re.findall(r"^(DCGM_FI_\w+)\{([^}]*)\} (\S+)$", text, re.M)
    fields = [r["field"] for r in DEFAULTS["gpu_exporter_dcgm_collectors"]]
    assert sorted({entry[0] for entry in series}) == sorted(fields)
    assert len(series) == len(fields) * 2
    labels = dict(re.findall(r'(\w+)="([^"]*)"', series[0][1]))
    # The role's collectors list no `label` row, so there is no DCGM_FI_DRIVER_VERSION label (dcgm-exporter adds it only then).
    assert list(labels) == ["gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname"]
    assert labels["pci_bus_id"] == "00000000:18:00.0" and labels["device"] == "nvidia0" and labels["Hostname"] == "h1"
    assert "# TYPE DCGM_FI_DEV_GPU_UTIL gauge" in text and "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %)." in text


def test_nvidia_gpu_exporter_stub_serves_nvidia_smi_metrics_per_gpu(tmp_path):
    text = scrape(tmp_path, "nvidia_gpu_exporter")
    promtool_check(text)
    info = [dict(re.findall(r'(\w+)="([^"]*)"', i)) for i in re.findall(r"^nvidia_smi_gpu_info\{([^}]*)\} 1$", text, re.M)]
    assert [(i["uuid"], i["name"], i["driver_version"]) for i in info] == [
        ("5c3b9d2e-0f4a-4b1e-9c6d-7a8b9c0d1e2f", "NVIDIA H100 80GB HBM3", "580.65.06"),
        ("8e7d6c5b-4a39-4281-b7f6-e5d4c3b2a190", "NVIDIA H100 80GB HBM3", "580.65.06")]
    assert 'nvidia_smi_utilization_gpu_ratio{uuid="5c3b9d2e-0f4a-4b1e-9c6d-7a8b9c0d1e2f"}' in text  # no GPU- prefix
    # 1.14.0: nvidia-smi's bus id, the index and the driver's CUDA version on gpu_info only, and the collection's health
    assert [(i["pci_bus_id"], i["index"], i["cuda_version"]) for i in info] == [
        ("00000000:18:00.0", "0", "13.0"), ("00000000:2A:00.0", "1", "13.0")]
    assert 'nvidia_smi_utilization_gpu_ratio{uuid="5c3b9d2e-0f4a-4b1e-9c6d-7a8b9c0d1e2f",' not in text  # uuid alone
    assert re.search(r"^nvidia_smi_command_exit_code 0$", text, re.M) and re.search(r"^nvidia_smi_last_collect_success 1$", text, re.M)


@pytest.mark.parametrize("board, stub, args", [("dcgm.json", "dcgm-exporter", True), ("nvidia_gpu_exporter.json", "nvidia_gpu_exporter", False)])
def test_dashboards_query_only_metrics_the_exporter_serves(tmp_path, board, stub, args):
    data = json.loads((ROLE / "files" / "dashboards" / board).read_text(encoding="utf-8"))
    exprs = [t["expr"] for p in data["panels"] for t in p["targets"]]
    served = set(re.findall(r"^([a-zA-Z_]\w*)[{ ]", scrape(tmp_path, stub, *(["-f", str(collectors_csv(tmp_path))] if args else [])), re.M))
    used = {m for e in exprs for m in re.findall(r"\b([A-Za-z_]\w*)\{", e)}
    assert used - {"up"} <= served, used - served
    assert len({p["id"] for p in data["panels"]}) == len(data["panels"]) and data["uid"].startswith("gpuhost-")


@pytest.mark.parametrize("name, consumer", [
    ("NVIDIA GeForce RTX 4090", True), ("NVIDIA TITAN RTX", True), ("Quadro RTX 8000", True), ("NVIDIA RTX 4000 SFF Ada Generation", True),
    ("NVIDIA H100 80GB HBM3", False), ("NVIDIA A100-SXM4-80GB", False), ("NVIDIA L40S", False), ("NVIDIA RTX A6000", False),
    ("NVIDIA RTX 6000 Ada Generation", False), ("Tesla T4", False)])
def test_auto_choice_consumer_names(name, consumer):
    assert bool(re.search(VARS["__gpu_exporter_consumer_re"], name)) is consumer
