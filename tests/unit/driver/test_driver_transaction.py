# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The driver's transaction (tasks/transaction.yml): one filter call meets the plan with the host's answers.

Each case is the answer a package manager gives (dnf 4's repoquery, dnf 5's list, pacman -Si) and what the role did
with it one filter at a time before: the same move, candidate errors, specs and lockstep come out of the one call.
"""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuhost.nvidia.plugins.filter import driver as driver_filters
from ansible_collections.gpuhost.nvidia.plugins.module_utils import _driver

EL_TABLE = {"module": {"open": ["kmod-nvidia-open-dkms"], "proprietary": ["kmod-nvidia-latest-dkms"]}, "userspace": ["nvidia-driver"],
            "fabric_manager": ["nvidia-fabricmanager"], "nscq": ["libnvidia-nscq"], "settings": ["nvidia-persistenced"]}
REPOQUERY = "nvidia-driver.x86_64 3:580.95.05-1.el9\nnvidia-driver.x86_64 3:580.65.06-1.el9\nnvidia-driver.x86_64 3:570.172.08-1.el9\n"


def _plan(branch=580, version=None, fabric_manager=True, pkg_mgr="dnf"):
    plan = {"act": True, "source": "nvidia", "flavour": "open", "branch": branch, "version": version, "fabric_manager": fabric_manager,
            "nvlsm": False, "errors": []}
    plan["packages"] = _driver.plan_packages(plan, {"nvidia": EL_TABLE}, {"installed_packages": []}, {"pkg_mgr": pkg_mgr, "pin": True})
    return plan


def _role(plan, pkg_mgr="dnf", **extra):
    return dict({"pkg_mgr": pkg_mgr, "candidate_package": plan["packages"]["candidate"], "install": plan["packages"]["install"],
                 "pin": True, "request": {}}, **extra)


def test_dnf_moves_the_driver_to_the_newest_release_of_the_branch_with_fabric_manager_in_lockstep():
    plan = _plan()
    installed = {"kmod-nvidia-open-dkms": [{"version": "570.172.08", "epoch": 3}], "nvidia-fabricmanager": [{"version": "570.172.08"}]}
    txn = driver_filters.nvidia_driver_transaction(plan, {"installed": installed, "offered": REPOQUERY}, _role(plan))
    # What nvidia_driver_dnf_versions, nvidia_driver_move and nvidia_driver_candidate_errors return one by one.
    versions = _driver.dnf_versions(REPOQUERY, "nvidia-driver")
    assert txn["offered_versions"] == versions
    assert txn["move"] == _driver.plan_move(plan, "570.172.08", versions)
    assert (txn["move"]["action"], txn["move"]["to"], txn["downgrade"]) == ("upgrade", "580.95.05", False)
    assert txn["candidate_errors"] == []
    assert txn["install_specs"] == ["kmod-nvidia-open-dkms-580.95.05", "nvidia-driver-580.95.05"]
    assert txn["specs"] == txn["install_specs"] and txn["takes_requests"] is False
    lockstep = txn["lockstep"]
    assert (lockstep["install"], lockstep["remove"], lockstep["wanted"], lockstep["in_place"]) == (["nvidia-fabricmanager-580.95.05"], [], True, False)
    assert lockstep["held"] == _driver.lockstep_hold(["nvidia-fabricmanager"], "580.95.05")
    assert txn["use_pinning_package"] is False and txn["apt_headers"] == []


def test_fabric_manager_already_at_the_drivers_version_is_left_in_place():
    plan = _plan()
    installed = {"kmod-nvidia-open-dkms": [{"version": "580.95.05"}], "nvidia-fabricmanager": [{"version": "3:580.95.05-1"}]}
    txn = driver_filters.nvidia_driver_transaction(plan, {"installed": installed, "offered": REPOQUERY}, _role(plan))
    assert txn["move"]["action"] == "keep" and txn["lockstep"]["in_place"] is True
    assert txn["install_specs"] == ["kmod-nvidia-open-dkms", "nvidia-driver"]


def test_an_offer_off_the_branch_fails_the_candidate_check_unless_the_repository_is_pending():
    plan = _plan(branch=590)
    txn = driver_filters.nvidia_driver_transaction(plan, {"installed": {}, "offered": REPOQUERY}, _role(plan))
    assert txn["candidate_errors"] == _driver.check_candidate(plan, _driver.dnf_versions(REPOQUERY, "nvidia-driver"), {}, "nvidia-driver (nvidia source)")
    assert "driver branch 590 was requested" in txn["candidate_errors"][0]
    pending = driver_filters.nvidia_driver_transaction(plan, {"installed": {}, "offered": "", "repo_pending": True, "check_mode": True}, _role(plan))
    assert pending["candidate_errors"] == [] and pending["predict_only"] is True


@pytest.mark.parametrize("hold_pending, action, predict", [(True, "install", True), (False, "install", False), (True, "keep", False)])
def test_dnf_predicts_the_install_while_check_mode_left_the_hold_unwritten(hold_pending, action, predict):
    plan = _plan()
    installed = {"kmod-nvidia-open-dkms": [{"version": "580.65.06"}]} if action == "keep" else {}
    txn = driver_filters.nvidia_driver_transaction(plan, {"installed": installed, "offered": REPOQUERY, "hold_pending": hold_pending},
                                                   _role(plan))
    assert (txn["move"]["action"], txn["predict_only"]) == (action, predict)


def test_pacman_reads_the_version_line_and_installs_names_only():
    plan = _plan(branch=None, fabric_manager=False, pkg_mgr="pacman")
    answer = "Repository      : extra\nName            : nvidia-utils\nVersion         : 580.95.05-1\n"
    role = _role(plan, "pacman", candidate_package="nvidia-utils", install=["nvidia-open", "nvidia-utils"])
    plan["packages"] = dict(plan["packages"], userspace=["nvidia-utils"])
    txn = driver_filters.nvidia_driver_transaction(plan, {"installed": {"nvidia-utils": [{"version": "575.64.05-2"}]}, "offered": answer}, role)
    assert txn["offered_versions"] == ["580.95.05-1"]
    # No branch asked for: the installed driver stays; pacman's list is the names (it has no version selection).
    assert txn["move"]["action"] == "keep" and txn["specs"] == ["nvidia-open", "nvidia-utils"]


def test_hostile_or_missing_inputs_fail_naming_the_fix():
    plan = _plan()
    with pytest.raises(AnsibleFilterError, match="role.pkg_mgr must be apt, dnf or pacman"):
        driver_filters.nvidia_driver_transaction(plan, {"installed": {}}, _role(plan, "zypper"))
    with pytest.raises(AnsibleFilterError, match="names no packages"):
        driver_filters.nvidia_driver_transaction(dict(plan, packages=None), {"installed": {}}, _role(plan))
    with pytest.raises(AnsibleFilterError, match="plan.branch must be a driver branch"):
        driver_filters.nvidia_driver_transaction(dict(plan, branch="58x"), {"installed": {}}, _role(plan))
    # dnf pins a plan without a branch or version: the plan stops, as the versionlock filter did.
    with pytest.raises(ValueError, match="not a driver branch"):
        _plan(branch=None)
    with pytest.raises(ValueError, match="no source 'distro'"):
        _driver.plan_packages({"source": "distro", "flavour": "open", "branch": 580}, {"nvidia": EL_TABLE}, {}, {})
