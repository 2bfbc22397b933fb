# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""nvidia_gpu_doctor without ``facts`` (issue #21, one remote call for gpu_doctor): it gathers the facts in the same
call exactly as nvidia_gpu_facts with gather=[health] would, returns them, and checks the same as when handed them."""

from __future__ import annotations

import pytest

import sysfs

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _pci
from ansible_collections.gpuhost.nvidia.plugins.modules import nvidia_gpu_doctor, nvidia_gpu_facts

PROFILES = ["h100_sxm_8x_nvswitch", "a100_mig", "t4", "vfio_bound", "no_gpu", "driver_not_loaded"]


@pytest.fixture(autouse=True)
def fixed_kernel_release(monkeypatch):
    """The synthetic trees build modules for sysfs.KERNEL_RELEASE, not for the kernel running the tests."""
    real = _pci.installed_module_type
    monkeypatch.setattr(_pci, "installed_module_type", lambda root="/", kernel_release=None: real(root, sysfs.KERNEL_RELEASE))


@pytest.mark.parametrize("profile", PROFILES)
def test_gathers_as_the_facts_module_and_checks_the_same(profile, fake_nvml, host_tree, run_module):
    fake_nvml(profile)
    root = host_tree(profile)
    facts = run_module(nvidia_gpu_facts, {"gather": ["health"], "root": root})
    assert facts.get("failed") is not True, facts
    handed = run_module(nvidia_gpu_doctor, {"facts": facts["ansible_facts"]["nvidia_gpu"], "root": root})
    gathered = run_module(nvidia_gpu_doctor, {"root": root})
    assert gathered.get("failed") is not True, gathered
    assert gathered["changed"] is False
    assert gathered["ansible_facts"]["nvidia_gpu"] == facts["ansible_facts"]["nvidia_gpu"]
    assert gathered["ansible_facts"]["nvidia_gpu"]["state"] == ("ok" if profile not in ("no_gpu", "driver_not_loaded") else profile)
    assert gathered["checks"] == handed["checks"]
    assert gathered["status"] == handed["status"]
    # Handed the facts, it gathers nothing and returns no facts (the play's own stay as they are).
    assert not handed.get("ansible_facts")


def test_health_group_is_gathered(fake_nvml, host_tree, run_module):
    fake_nvml("h100_sxm_8x_nvswitch")
    root = host_tree("h100_sxm_8x_nvswitch")
    without_health = run_module(nvidia_gpu_facts, {"root": root})["ansible_facts"]["nvidia_gpu"]
    gathered = run_module(nvidia_gpu_doctor, {"root": root})["ansible_facts"]["nvidia_gpu"]
    assert gathered != without_health
    assert all("health" in gpu for gpu in gathered["gpus"]), [sorted(gpu) for gpu in gathered["gpus"]]


def test_a_bad_root_fails_before_gathering(fake_nvml, tmp_path, run_module):
    fake_nvml("t4")
    result = run_module(nvidia_gpu_doctor, {"root": str(tmp_path / "missing")})
    assert result["failed"] is True
    assert "root" in result["msg"] and "missing" in result["msg"]
    assert "ansible_facts" not in result
