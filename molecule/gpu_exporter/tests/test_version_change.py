"""A changed pinned version moves the installed exporter (#22): run after test_gpu_exporter.py (file names sort so).

DCGM goes up from the converged 1:4.5.2-1 to 1:4.6.0-1 (both in the debian13 CUDA repository stand-in);
nvidia_gpu_exporter moves from the converged 1.14.0 tarball to 1.13.1's (its own checksum). Each exporter is
restarted on the new version and the role's own scrape of every GPU passes again.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import testinfra
from gpuhost_testinfra import changed_tasks, instances, run_playbook_json

PROJECT = Path(os.environ.get("MOLECULE_PROJECT_DIRECTORY", Path(__file__).resolve().parents[3]))
PLAYBOOK = PROJECT / "playbooks" / "exporter.yml"
CHECKSUMS = PROJECT / ".cache" / "repos" / "current" / "tarballs" / "checksums.txt"
TARBALL = "nvidia_gpu_exporter_1.13.1_linux_x86_64.tar.gz"


def main_pid(host) -> str:
    return host.check_output("systemctl show -p MainPID --value gpuhost-gpu-exporter.service").strip()


@pytest.fixture(scope="module")
def moved(tmp_path_factory):
    """The exporter play once more on both hosts with the other versions; the main PIDs before and after."""
    hosts = {name: testinfra.get_host(f"podman://{name}") for name in instances()}
    before = {name: main_pid(h) for name, h in hosts.items()}
    sha = re.search(rf"^([0-9a-f]{{64}})  {re.escape(TARBALL)}$", CHECKSUMS.read_text(encoding="utf-8"), re.M)
    assert sha, f"{TARBALL} is not in {CHECKSUMS}"
    extra = tmp_path_factory.mktemp("versions") / "versions.json"
    extra.write_text(json.dumps({
        "gpu_exporter_dcgm_version": "1:4.6.0-1",
        "gpu_exporter_nvidia_gpu_exporter_version": "1.13.1",
        "gpu_exporter_nvidia_gpu_exporter_url": f"file:///srv/gpuhost-repos/tarballs/{TARBALL}",
        "gpu_exporter_nvidia_gpu_exporter_sha256": sha.group(1),
    }), encoding="utf-8")
    result = run_playbook_json(str(PLAYBOOK), "-e", f"@{extra}")
    failures = {h: s for h, s in result["stats"].items() if s.get("failures") or s.get("unreachable")}
    assert not failures, failures
    return result, before, {name: main_pid(h) for name, h in hosts.items()}


def test_changed_version_moves_the_exporter(host, gpuhost_instance, moved):
    result, before, after = moved
    changed = changed_tasks(result, gpuhost_instance)
    assert after[gpuhost_instance] not in ("", "0", before[gpuhost_instance]), "the exporter was not restarted"
    assert host.service("gpuhost-gpu-exporter.service").is_running
    if gpuhost_instance.endswith("-dcgm"):
        assert "gpuhost.nvidia.gpu_exporter : Install DCGM and the DCGM exporter, version-pinned (apt)" in changed, changed
        assert host.package("datacenter-gpu-manager-4-core").version == "1:4.6.0-1"
        assert host.package("datacenter-gpu-manager-4-cuda13").version == "1:4.6.0-1"
        assert host.package("datacenter-gpu-manager-exporter").version == "4.8.2-1"
    else:
        link = host.file("/usr/local/bin/nvidia_gpu_exporter")
        assert link.linked_to == "/opt/gpuhost-gpu-exporter/1.13.1/nvidia_gpu_exporter", changed
