# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""gpu_exporter's DCGM package entries, templated from the role's vars as Ansible would: apt on Debian and Ubuntu,
dnf on EL (name-epoch:version-release), the profiling module when the plan asks for it, and removal of every CUDA
major's packages."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

ROLE = Path(__file__).resolve().parents[3] / "roles" / "gpu_exporter"


def _trust(value):
    if isinstance(value, dict):
        return {k: _trust(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_trust(v) for v in value]
    return trust_as_template(value) if isinstance(value, str) else value


def _render(family: str, cuda_major, proprietary: bool, name: str, **given):
    variables = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text(encoding="utf-8"))
    variables.update(yaml.safe_load((ROLE / "vars" / "main.yml").read_text(encoding="utf-8")))
    variables.update({"ansible_facts": {"os_family": family}, "__gpu_exporter_cuda_major": cuda_major,
                      "__gpu_exporter_plan": {"proprietary": proprietary}, **given})
    variables = _trust(variables)
    return Templar(loader=DataLoader(), variables=variables).template(variables[name])


def _dnf_names(entries: list[str]) -> list[str]:
    """The dnf install task's own expression over the entries."""
    task = next(task for task in yaml.safe_load((ROLE / "tasks" / "dcgm.yml").read_text(encoding="utf-8"))
                if "ansible.builtin.dnf" in task)
    variables = _trust({"__gpu_exporter_dcgm_install": entries, "expr": task["ansible.builtin.dnf"]["name"]})
    return Templar(loader=DataLoader(), variables=variables).template(variables["expr"])


@pytest.mark.parametrize("family, proprietary, expected", [
    ("Debian", False, ["datacenter-gpu-manager-4-core=1:4.5.2-1", "datacenter-gpu-manager-4-cuda13=1:4.5.2-1",
                       "datacenter-gpu-manager-exporter=4.8.2-1"]),
    ("RedHat", False, ["datacenter-gpu-manager-4-core=1:4.5.2-1", "datacenter-gpu-manager-4-cuda13=1:4.5.2-1",
                       "datacenter-gpu-manager-exporter=4.8.4.3955-1"]),
    ("RedHat", True, ["datacenter-gpu-manager-4-core=1:4.5.2-1", "datacenter-gpu-manager-4-cuda13=1:4.5.2-1",
                      "datacenter-gpu-manager-4-proprietary=1:4.5.2-1", "datacenter-gpu-manager-4-proprietary-cuda13=1:4.5.2-1",
                      "datacenter-gpu-manager-exporter=4.8.4.3955-1"]),
])
def test_the_pinned_entries_per_family(family, proprietary, expected):
    assert _render(family, 13, proprietary, "__gpu_exporter_dcgm_packages") == expected


def test_a_user_pin_of_the_exporter_wins_on_every_family():
    for family in ("Debian", "RedHat"):
        entries = _render(family, 12, False, "__gpu_exporter_dcgm_packages", gpu_exporter_dcgm_exporter_version="4.6.0-1",
                          gpu_exporter_dcgm_version="4.5.2-1")
        assert entries == ["datacenter-gpu-manager-4-core=4.5.2-1", "datacenter-gpu-manager-4-cuda12=4.5.2-1",
                           "datacenter-gpu-manager-exporter=4.6.0-1"]


def test_dnf_gets_name_version_with_the_epoch():
    entries = _render("RedHat", 13, True, "__gpu_exporter_dcgm_packages")
    assert _dnf_names(entries) == [
        "datacenter-gpu-manager-4-core-1:4.5.2-1", "datacenter-gpu-manager-4-cuda13-1:4.5.2-1",
        "datacenter-gpu-manager-4-proprietary-1:4.5.2-1", "datacenter-gpu-manager-4-proprietary-cuda13-1:4.5.2-1",
        "datacenter-gpu-manager-exporter-4.8.4.3955-1"]


@pytest.mark.parametrize("cuda_major, expected_cuda", [
    (13, ["datacenter-gpu-manager-4-cuda13", "datacenter-gpu-manager-4-proprietary-cuda13"]),
    (None, ["datacenter-gpu-manager-4-cuda12", "datacenter-gpu-manager-4-cuda13",
            "datacenter-gpu-manager-4-proprietary-cuda12", "datacenter-gpu-manager-4-proprietary-cuda13"]),
])
def test_removal_takes_every_package_the_role_may_have_installed(cuda_major, expected_cuda):
    names = _render("RedHat", cuda_major, False, "__gpu_exporter_dcgm_package_names")
    assert names == ["datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-proprietary", *expected_cuda,
                     "datacenter-gpu-manager-exporter"]


@pytest.mark.parametrize("machine, backend, archive", [
    ("x86_64", "exec", "v1.14.0/nvidia_gpu_exporter_1.14.0_linux_x86_64.tar.gz"),
    ("aarch64", "exec", "v1.14.0/nvidia_gpu_exporter_1.14.0_linux_arm64.tar.gz"),
    ("x86_64", "nvml", "v1.14.0/nvidia_gpu_exporter-nvml_1.14.0_linux_x86_64.tar.gz"),
])
def test_the_default_url_is_the_release_archive_for_the_machine_and_backend(machine, backend, archive):
    """The release's archive names (.goreleaser.yml at v1.3.1, v1.13.1 and v1.14.0: x86_64 for amd64, arm64; the -nvml flavour
    from 1.11.0). The plan refuses nvml before 1.11.0 and off x86_64 (test_exporter_plan.py)."""
    url = _render("Debian", None, False, "gpu_exporter_nvidia_gpu_exporter_url", gpu_exporter_nvidia_gpu_exporter_backend=backend,
                  ansible_facts={"os_family": "Debian", "architecture": machine})
    assert " ".join(url.split()) == "https://github.com/utkuozdemir/nvidia_gpu_exporter/releases/download/" + archive
