# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""gpu_operator_check and module_utils/_gpu_operator.py: a host whose driver or toolkit the GPU Operator runs is
refused, naming what was seen and the Operator setting to change; a host whose driver is its own passes, including the
empty /run/nvidia/driver the Operator's other DaemonSets create on such a host (gpu-operator
assets/state-container-toolkit/0500_daemonset.yaml: hostPath /run/nvidia/driver, type DirectoryOrCreate)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _gpu_operator
from ansible_collections.gpuhost.nvidia.plugins.modules import gpu_operator_check

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "upgrade"


def _host(root: Path, pid=False, driver_root=None, toolkit=False, empty_dirs=True) -> str:
    if empty_dirs:
        (root / "run/nvidia/driver").mkdir(parents=True)      # created by the Operator's other DaemonSets anyway
        (root / "run/nvidia/validations").mkdir(parents=True)
    if pid:
        (root / "run/nvidia").mkdir(parents=True, exist_ok=True)
        (root / "run/nvidia/nvidia-driver.pid").write_text("4242\n")
    for name in driver_root or []:
        (root / "run/nvidia/driver" / name).mkdir(parents=True, exist_ok=True)
    if toolkit:
        (root / "usr/local/nvidia/toolkit").mkdir(parents=True)
        (root / "usr/local/nvidia/toolkit/nvidia-container-runtime").write_text("#!/bin/sh\n")
    return str(root)


def test_host_driver_next_to_the_operator_passes(tmp_path, run_module):
    root = _host(tmp_path)
    assert _gpu_operator.host_evidence(root) == {"driver": [], "toolkit": []}
    result = run_module(gpu_operator_check, {"components": ["driver", "toolkit"], "root": root})
    assert not result.get("failed") and result["changed"] is False and result["refusals"] == []


def test_operator_driver_container_is_refused(tmp_path, run_module):
    root = _host(tmp_path, pid=True, driver_root=["bin", "etc", "lib", "usr", "var", "proc", "sys"])
    result = run_module(gpu_operator_check, {"components": ["driver"], "root": root})
    assert result["failed"]
    evidence = result["evidence"]["driver"]
    assert evidence[0] == "%s/run/nvidia/nvidia-driver.pid exists (the driver container's PID file)" % root
    assert evidence[1] == "%s/run/nvidia/driver holds bin, etc, lib, proc, sys, ... (the driver container's root filesystem)" % root
    assert "driver.enabled=false" in result["msg"] and "nvidia.com/gpu.deploy.driver=false" in result["msg"]
    assert "NVIDIA driver" in result["msg"] and "toolkit.enabled" not in result["msg"]
    # The toolkit role asks about the toolkit only: the Operator's driver is no reason to refuse it.
    assert not run_module(gpu_operator_check, {"components": ["toolkit"], "root": root}).get("failed")


def test_operator_toolkit_is_refused(tmp_path, run_module):
    root = _host(tmp_path, toolkit=True)
    result = run_module(gpu_operator_check, {"components": ["toolkit"], "root": root}, check_mode=True)
    assert result["failed"] and result["evidence"]["toolkit"] == [
        "%s/usr/local/nvidia/toolkit/nvidia-container-runtime exists (the Operator's toolkit)" % root]
    assert "toolkit.enabled=false" in result["msg"] and "nvidia.com/gpu.deploy.container-toolkit=false" in result["msg"]
    assert not run_module(gpu_operator_check, {"components": ["driver"], "root": root}).get("failed")


def test_unreadable_driver_root_fails_closed(tmp_path, run_module, monkeypatch):
    root = _host(tmp_path)
    real = os.listdir

    def listdir(path):
        if str(path).endswith("run/nvidia/driver"):
            raise PermissionError(13, "Permission denied")
        return real(path)

    monkeypatch.setattr(_gpu_operator.os, "listdir", listdir)
    result = run_module(gpu_operator_check, {"components": ["driver"], "root": root})
    assert result["failed"] and "run/nvidia/driver cannot be read (Permission denied)" in result["msg"]


def test_a_driver_root_that_is_a_file_is_no_sign(tmp_path):
    (tmp_path / "run/nvidia").mkdir(parents=True)
    (tmp_path / "run/nvidia/driver").write_text("")
    assert _gpu_operator.host_evidence(str(tmp_path))["driver"] == []


@pytest.mark.parametrize("args, needle", [
    ({"components": ["driver"], "root": "relative/dir"}, "root must be the absolute path"),
    ({"components": ["kernel"]}, "components"),
])
def test_bad_options(tmp_path, run_module, args, needle):
    result = run_module(gpu_operator_check, args)
    assert result["failed"] and needle in result["msg"]


def test_operator_pods_on_the_node():
    pods = json.loads((FIXTURES / "pods-gpu-node-1.json").read_text())
    assert _gpu_operator.pod_evidence(pods, "gpu-node-1") == {"driver": [], "toolkit": []}
    driver_pod = {"metadata": {"name": "nvidia-driver-daemonset-6wd8q", "namespace": "gpu-operator",
                               "labels": {"app": "nvidia-driver-daemonset", "app.kubernetes.io/component": "nvidia-driver"}},
                  "spec": {"nodeName": "gpu-node-1"}, "status": {"phase": "Running"}}
    pods["resources"].append(driver_pod)
    found = _gpu_operator.pod_evidence(pods, "gpu-node-1")
    assert found["driver"] == ["the pod gpu-operator/nvidia-driver-daemonset-6wd8q (app=nvidia-driver-daemonset) runs on the node"]
    assert _gpu_operator.pod_evidence(pods, "gpu-node-7")["driver"] == []
    assert _gpu_operator.pod_evidence("junk", "gpu-node-1") == {"driver": [], "toolkit": []}
    assert "driver.enabled=false" in _gpu_operator.refusals(found, ["driver", "toolkit"])[0]
    assert len(_gpu_operator.refusals(found, ["driver", "toolkit"])) == 1
