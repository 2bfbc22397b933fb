# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Candidate versions from apt/dnf/pacman against a plan, gpg fingerprints, and the filter plugin wiring."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuhost.nvidia.plugins.filter import driver as driver_filters
from ansible_collections.gpuhost.nvidia.plugins.module_utils import _driver

PLAN_535 = {"branch": 535, "version": None}


@pytest.mark.parametrize("offered", [["535.261.03-1"], ["535.261.03-1~deb12u1"], "535.261.03-1", ["3:535.261.03-1.el9"]])
def test_offered_version_on_the_branch_fits(offered):
    assert _driver.check_candidate(PLAN_535, offered, {}) == []


def test_other_branch_only():
    assert _driver.check_candidate(PLAN_535, ["3:580.65.06-1.el9", "3:570.172.08-1.el9"], {}, "nvidia-driver (nvidia source)") == [
        "driver branch 535 was requested but the package manager offers only 580.65.06, 570.172.08 from nvidia-driver (nvidia source)"
    ]


def test_exact_version_and_cuda_on_the_newest_fitting_version():
    plan = {"branch": 580, "version": "580.65.06"}
    assert _driver.check_candidate(plan, ["580.76.05-1", "580.65.06-1"], {}) == []
    assert _driver.check_candidate({"branch": 580, "version": "580.82.07"}, ["580.76.05-1"], {}) == [
        "driver 580.82.07 was requested but the package manager offers only 580.76.05"
    ]
    assert _driver.check_candidate(PLAN_535, ["535.261.03-1"], {"cuda_version": "12.2.2"}) == []
    assert _driver.check_candidate(PLAN_535, ["535.261.03-1"], {"cuda_version": "12.4"})[0].startswith("driver 535.261.03 cannot run CUDA 12.4")


def test_nothing_offered():
    assert _driver.check_candidate({"branch": None}, [], {}, "nvidia-utils") == [
        "no installable NVIDIA driver package from nvidia-utils: is the repository configured and enabled?"
    ]
    assert _driver.check_candidate({"branch": None}, ["(none)"], {}) != []


# The key fingerprint helpers moved to module_utils/_gpg.py: tests/unit/repository/test_gpg.py.


def test_filter_plugin_exposes_the_filters_and_accepts_ansible_facts():
    filters = driver_filters.FilterModule().filters()
    assert set(filters) == {"nvidia_driver_plan", "nvidia_driver_candidate_errors", "nvidia_driver_packages", "nvidia_driver_versionlock",
                            "nvidia_driver_move", "nvidia_driver_transaction", "nvidia_driver_package_specs", "nvidia_driver_lockstep",
                            "nvidia_driver_lockstep_hold", "nvidia_driver_dnf_versions", "nvidia_driver_dkms_lines",
                            "nvidia_driver_module_params_file", "nvidia_driver_absent_plan"}
    caps = {"supported": True, "sources": {"distro": {"available": True, "branches": [535], "default_branch": 535}}}
    facts = {"nvidia_gpu": {"present": True, "gpus": [{"pci_bus_id": "0000:01:00.0", "pci_device_id": "10de:2330"}]}}
    host = {"distribution": "Debian", "distribution_major_version": "12", "secure_boot": False}
    plan = filters["nvidia_driver_plan"]({"source": "distro"}, facts, host, caps)
    assert (plan["flavour"], plan["branch"], plan["errors"]) == ("open", 535, [])
    assert filters["nvidia_driver_candidate_errors"](plan, "535.261.03-1") == []
    with pytest.raises(AnsibleFilterError, match="expected a dict"):
        filters["nvidia_driver_plan"]("open")


def test_parse_branch():
    assert [_driver.parse_branch(v) for v in (580, "580", "580.65.06", "", None, "r580", True)] == [580, 580, 580, None, None, None, None]
