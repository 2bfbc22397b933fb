"""gpu_doctor and gpu_verify on a GPU-less Debian 12 host, with a real podman engine behind the Docker API."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from gpuhost_testinfra import test_check_after_converge_changes_nothing, test_check_mode_predicted_converge  # noqa: F401  pylint: disable=unused-import

REPORTS = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/nonexistent")) / "doctor"


def test_doctor_json_report(gpuhost_instance):
    report = json.loads((REPORTS / f"{gpuhost_instance}.json").read_text(encoding="utf-8"))
    statuses = {c["id"]: c["status"] for c in report["checks"]}
    assert report["host"] == gpuhost_instance and report["status"] == "fail"
    # A container has no EFI variables: Secure Boot is unknown (warn), as the doctor fails closed; nor a kernel log it
    # may read (no kernel messages in its journal, dmesg refused): the Xids are unknown (warn).
    assert {k for k, v in statuses.items() if v != "ok"} == {"driver_loaded", "device_nodes", "secure_boot", "xid"}
    assert statuses["secure_boot"] == statuses["xid"] == "warn"
    assert statuses["driver_loaded"] == statuses["device_nodes"] == "fail"
    assert len(statuses) == 22
    checks = {c["id"]: c for c in report["checks"]}
    assert checks["driver_loaded"]["evidence"].startswith("the nvidia kernel module is not loaded (/sys/module/nvidia absent); no NVIDIA GPU on the PCI bus")
    assert checks["device_nodes"]["evidence"] == "missing /dev/nvidiactl, /dev/nvidia-uvm (present: none)"
    assert checks["docker_runtime"]["evidence"] == "runtimes.nvidia -> nvidia-container-runtime"
    assert checks["cdi_spec"]["evidence"].startswith("/etc/cdi/nvidia.yaml (no driver library to compare its age with")
    assert all(c["fix"] for c in report["checks"] if c["status"] != "ok")


def test_doctor_markdown_report(gpuhost_instance):
    text = (REPORTS / f"{gpuhost_instance}.md").read_text(encoding="utf-8")
    assert text.startswith(f"# GPU doctor: {gpuhost_instance}\n")
    assert "| fail | nvidia kernel module loaded |" in text


def test_host_is_as_converge_left_it(host):
    daemon = json.loads(host.file("/etc/docker/daemon.json").content_string)
    assert daemon["runtimes"]["nvidia"]["path"] == "nvidia-container-runtime"
    assert host.exists("nvidia-smi") is False  # no driver on the host: the facts say no_gpu
    assert host.package("python3-docker").is_installed


def test_no_check_container_left_behind():
    """The module removes its container; the engine (controller podman) holds none labelled by it."""
    out = subprocess.run(["podman", "ps", "-a", "--filter", "label=io.gpuhost.nvidia.check", "--format", "{{.ID}}"],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == ""
