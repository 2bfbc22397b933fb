# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What the plan and the transaction hand the role's tasks, decided once in Python instead of lazy role variables.

The plan's packages: ``versionlock_wanted``, ``pin_glob``, ``headers`` (the running kernel's, those that follow
kernel updates, dnf's kernel-devel of the other installed kernels) and ``apt_query``; the transaction's ``pin_method``
(the report's words). Each case is what the role's vars/main.yml computed before, for the same inputs.
"""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuhost.nvidia.plugins.filter import driver as driver_filters
from ansible_collections.gpuhost.nvidia.plugins.module_utils import _driver

EL = {"module": {"open": ["kmod-nvidia-open-dkms"]}, "userspace": ["nvidia-driver"], "settings": ["nvidia-persistenced"]}
DEB = {"module": {"open": ["nvidia-open-kernel-dkms"]}, "userspace": ["nvidia-driver"], "pinning": "nvidia-driver-pinning-{branch}"}
KERNELS = [{"release": "5.14.0-570.el9.x86_64"}, {"release": "5.14.0-503.el9.x86_64"}]


def _plan(branch=580, version=None, dkms=True):
    return {"act": True, "source": "nvidia", "flavour": "open", "branch": branch, "version": version, "dkms": dkms,
            "fabric_manager": False, "nvlsm": False, "errors": []}


def _packages(plan, table=None, pkg_mgr="dnf", host=None, **role):
    return _driver.plan_packages(plan, {"nvidia": table or EL}, dict({"installed_packages": []}, **(host or {})),
                                 dict({"pkg_mgr": pkg_mgr, "pin": True}, **role))


@pytest.mark.parametrize("pin, dnf_modules, version, wanted", [
    (True, False, None, True),  # EL 10, Fedora: versionlock holds the branch
    (True, True, None, False),  # EL 8/9: the module stream holds it alone
    (True, True, "580.65.06", True),  # ... unless an exact version is asked for
    (False, False, None, False),  # nothing is pinned
])
def test_versionlock_is_wanted_where_nothing_else_holds_the_branch(pin, dnf_modules, version, wanted):
    packages = _packages(_plan(version=version), pin=pin, dnf_modules=dnf_modules)
    assert packages["versionlock_wanted"] is wanted
    assert bool(packages["versionlock"]["dnf4"]) is wanted


@pytest.mark.parametrize("branch, version, glob", [(580, None, "580.*"), (580, "580.65.06", "580.65.06-*"), (None, None, "None.*")])
def test_the_pin_glob_is_the_branch_or_the_exact_version(branch, version, glob):
    # A plan without a branch gives what the role's Jinja gave ("None.*"); the role reads it only with a branch or version.
    assert _packages(_plan(branch, version), DEB, "apt")["pin_glob"] == glob


def test_the_running_kernels_headers_are_installed_only_when_missing_and_offered():
    headers = {"install": True, "running": ["kernel-devel-6.1", "kernel-headers-6.1"], "installed": False, "offered": True}
    assert _packages(_plan(), headers=headers)["headers"]["running"] == headers["running"]
    for change in ({"installed": True}, {"offered": False}, {"install": False}):
        assert _packages(_plan(), headers=dict(headers, **change))["headers"]["running"] == [], change
    # Precompiled modules (no DKMS) need no headers.
    assert _packages(_plan(dkms=False), headers=headers)["headers"]["running"] == []


def test_dnf_adds_kernel_devel_for_every_other_installed_kernel():
    host = {"kernel": "5.14.0-570.el9.x86_64", "kernels_installed": KERNELS}
    headers = {"install": True}
    assert _packages(_plan(), host=host, headers=headers)["headers"]["kernel_devel"] == ["kernel-devel-5.14.0-503.el9.x86_64"]
    assert _packages(_plan(), pkg_mgr="apt", host=host, headers=headers)["headers"]["kernel_devel"] == []
    assert _packages(_plan(dkms=False), host=host, headers=headers)["headers"]["kernel_devel"] == []
    assert _packages(_plan(), host=host, headers={"install": False})["headers"]["kernel_devel"] == []


def test_apts_question_names_the_candidate_the_pinning_package_and_the_headers_that_follow():
    headers = {"install": True, "follow": ["linux-headers-cloud-amd64", "linux-headers-"]}
    packages = _packages(_plan(), DEB, "apt", headers=headers)
    # A bare linux-headers- (a kernel flavour that is not known) follows nothing.
    assert packages["headers"]["follow"] == ["linux-headers-cloud-amd64"]
    assert packages["apt_query"] == {"repository": ["nvidia-open-kernel-dkms", "nvidia-driver-pinning-580"],
                                     "headers": ["linux-headers-cloud-amd64"]}
    unpinned = _packages(_plan(), DEB, "apt", headers=headers, pin=False)
    assert unpinned["apt_query"]["repository"] == ["nvidia-open-kernel-dkms"]
    assert _packages(_plan(), DEB, "apt", headers=dict(headers, install=False))["apt_query"]["headers"] == []


@pytest.mark.parametrize("pkg_mgr, use_pinning, dnf_modules, exact, method", [
    ("apt", True, False, False, "the pinning package nvidia-driver-pinning-580"),
    ("apt", False, False, False, "apt preferences (3 packages by name)"),
    ("dnf", False, True, False, "the nvidia-driver module stream"),
    ("dnf", False, True, True, "the nvidia-driver module stream and dnf versionlock"),
    ("dnf", False, False, False, "dnf versionlock"),
    ("pacman", False, False, False, "pacman IgnorePkg"),
])
def test_the_pin_method_names_what_holds_the_branch(pkg_mgr, use_pinning, dnf_modules, exact, method):
    assert _driver.pin_method(pkg_mgr, use_pinning, "nvidia-driver-pinning-580", ["a", "b", "c"], dnf_modules, exact) == method


def test_the_transaction_reports_the_pin_method():
    plan = _plan()
    plan["packages"] = _packages(plan, dnf_modules=True)
    role = {"pkg_mgr": "dnf", "candidate_package": "kmod-nvidia-open-dkms", "install": plan["packages"]["install"], "pin": True,
            "dnf_modules": True, "request": {}}
    txn = driver_filters.nvidia_driver_transaction(plan, {"installed": {}, "offered": ""}, role)
    assert txn["pin_method"] == "the nvidia-driver module stream"
    with pytest.raises(AnsibleFilterError, match="role.dnf_modules must be true or false"):
        driver_filters.nvidia_driver_transaction(plan, {"installed": {}, "offered": ""}, dict(role, dnf_modules="yes"))


FACTS = {"present": True, "gpus": [{"pci_bus_id": "0000:01:00.0", "pci_device_id": "10de:2330"}]}
HOST = {"distribution": "Rocky", "distribution_version": "9.6", "distribution_major_version": "9", "headers_present": True,
        "secure_boot": False, "kernel": "5.14.0-570.el9.x86_64"}
CAPS = {"supported": True, "sources": {"nvidia": {"available": True, "branches": [580], "flavours": ["open"], "dkms": True}}}


def _filter_plan(headers, facts=None):
    settings = {"tables": {"nvidia": EL}, "pkg_mgr": "dnf", "pin": True, "headers": headers}
    return driver_filters.nvidia_driver_plan({"source": "nvidia", "flavour": "open", "branch": "580", "reboot": "never"},
                                             facts or FACTS, HOST, CAPS, settings)


def test_the_plan_filter_reads_the_installed_kernels_from_the_gpu_facts():
    plan = _filter_plan({"install": True}, dict(FACTS, kernels={"installed": KERNELS}))
    assert plan["errors"] == [] and plan["packages"]["headers"]["kernel_devel"] == ["kernel-devel-5.14.0-503.el9.x86_64"]


@pytest.mark.parametrize("headers, message", [
    ({"install": "yes"}, "packages.headers.install must be true or false, got 'yes'"),
    ({"offered": 1}, "packages.headers.offered must be true or false"),
    ({"running": "kernel-devel"}, "packages.headers.running must be a list"),
    ({"follow": [["linux-headers-amd64"]]}, "packages.headers.follow must be a list of package names"),
    ("headers", "nvidia_driver_plan packages.headers"),
])
def test_the_plan_filter_refuses_headers_settings_of_the_wrong_type(headers, message):
    with pytest.raises(AnsibleFilterError, match=message):
        _filter_plan(headers)


def test_fabric_manager_and_nscq_are_pinned_with_the_driver_where_anything_is_pinned():
    table = dict(EL, fabric_manager=["nvidia-fabricmanager"], nscq=["libnvidia-nscq"])
    plan = dict(_plan(), fabric_manager=True)
    # install_dnf.yml installs dnf's versionlock plugin for this hold too, where the module stream holds the branch.
    assert _packages(plan, table, dnf_modules=True)["lockstep_pinned"] is True
    assert _packages(plan, table, dnf_modules=True)["versionlock_wanted"] is False
    assert _packages(plan, table, pin=False)["lockstep_pinned"] is False
    assert _packages(_plan(), table)["lockstep_pinned"] is False  # no Fabric Manager, no NSCQ installed
