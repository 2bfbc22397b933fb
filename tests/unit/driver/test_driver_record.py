# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The driver role's converged record (the transaction's ``record``) and state absent's package names
(``nvidia_driver_absent_plan``) are decided in module_utils/_driver.py, no longer in tasks/main.yml's Jinja. The Jinja
expressions main.yml held before are kept here, verbatim, as the reference: on every distribution's package tables and
paths, and on each combination of package manager, Fabric Manager hold, pinning package and other flavour, the Python
decision names the same files and packages, in the same order.
"""

from __future__ import annotations

import itertools
import os
import sys

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

from ansible_collections.gpuhost.nvidia.plugins.filter import driver as driver_filters
from ansible_collections.gpuhost.nvidia.plugins.module_utils import _driver

sys.path.insert(0, os.path.dirname(__file__))
from test_driver_vars import HOSTS, ROLE, Host, _trust  # noqa: E402  pylint: disable=wrong-import-position

# tasks/main.yml before: the absent include's vars.
OLD_TOKENS = "{{ __nvidia_driver_packages | to_json | regex_findall('\"([A-Za-z0-9][A-Za-z0-9+._{}-]*)\"') | unique }}"
OLD_PREFIXES = "{{ __nvidia_driver_absent_tokens | select('search', '[{]') | map('regex_replace', '[{].*$', '') | select | list }}"
OLD_ABSENT_PACKAGES = "{{ __nvidia_driver_absent_installed.packages | default({}) | list | sort }}"
OLD_ABSENT_LOCKSTEP = "{{ __nvidia_driver_absent_packages | select('search', 'fabric.?manager|nscq') | list | length > 0 }}"
# tasks/main.yml before: the record include's vars.
OLD_PACKAGES = """{{ (__nvidia_driver_install_packages + (__nvidia_driver_pkgs.module[__nvidia_driver_other_flavour] | default([]))
   + ([__nvidia_driver_pkgs.pinning] if __nvidia_driver_use_pinning_package | bool else [])) | select | unique | list }}"""
OLD_FILES = [
    "{{ __nvidia_driver_pin_file | default('') }}",
    """{{ __nvidia_driver_pin_file | default('') | regex_replace('[.]pref$', '-lockstep.pref')
       if __nvidia_driver_lockstep.hold | default([]) | length > 0 else '' }}""",
    "{{ __nvidia_driver_versionlock_file if __nvidia_driver_pkg_mgr == 'dnf' else '' }}",
    "{{ '/etc/dnf/modules.d/nvidia-driver.module' if __nvidia_driver_pkg_mgr == 'dnf' else '' }}",
    "{{ __nvidia_driver_repo_file | default('') }}",
    "{{ __nvidia_driver_key_file | default('') }}",
    "{{ __nvidia_driver_keyring | default('') }}",
    "{{ __nvidia_driver_dkms_sign_file }}",
    "{{ __nvidia_driver_blacklist_file }}",
    "{{ __nvidia_driver_passthrough_file }}",
    "{{ __nvidia_driver_params_file }}",
]


def _template(variables: dict, value):
    return Templar(loader=DataLoader(), variables=variables).template(_trust(value))


def _task_vars(tasks_file: str, name: str) -> dict:
    with open(os.path.join(ROLE, "tasks", tasks_file), encoding="utf-8") as handle:
        return next(t for t in yaml.safe_load(handle) if t.get("name") == name)["vars"]


@pytest.mark.parametrize("name", sorted(HOSTS))
def test_absent_looks_for_the_same_names_as_before(name: str) -> None:
    host = Host(name)
    tokens = _template(host.variables, OLD_TOKENS)
    prefixes = _template(dict(host.variables, __nvidia_driver_absent_tokens=tokens), OLD_PREFIXES)
    asked = _driver.absent_plan(host["__nvidia_driver_packages"])
    assert (asked["query"], asked["prefixes"]) == ([t for t in tokens if "{" not in t], prefixes)
    assert asked["query"] and asked["packages"] == [] and asked["lockstep"] is False


@pytest.mark.parametrize("installed", [{}, {"nvidia-driver": [], "libnvidia-nscq-580": [], "firmware-nvidia-gsp": []},
                                       {"nvidia-fabricmanager-580": [], "cuda-drivers": []}, {"nvidia-open": []}])
def test_absent_removes_the_same_packages_as_before(installed: dict) -> None:
    variables = {"__nvidia_driver_absent_installed": {"packages": installed}}
    packages = _template(variables, OLD_ABSENT_PACKAGES)
    lockstep = _template(dict(variables, __nvidia_driver_absent_packages=packages), OLD_ABSENT_LOCKSTEP)
    result = _driver.absent_plan({}, installed, "nvidia-fabricmanager.service")
    assert (result["packages"], result["lockstep"]) == (packages, lockstep)


# What tasks/main.yml hands absent.yml: one variable, the filter over the tables, the host read and the unit name.
ABSENT_WIRING = ("{{ __nvidia_driver_packages | gpuhost.nvidia.nvidia_driver_absent_plan(__nvidia_driver_absent_installed.packages "
                 "| default(none), __nvidia_driver_fabric_manager_service | default('')) }}")


def absent_plan(variables: dict) -> dict:
    """tasks/main.yml's ``__nvidia_driver_absent`` for ``variables``: its arguments templated as Ansible templates them,
    then the filter (this Templar has no collection filters)."""
    absent_vars = _task_vars("main.yml", "Remove what the role added")
    assert list(absent_vars) == ["__nvidia_driver_absent"]
    assert " ".join(absent_vars["__nvidia_driver_absent"].split()) == " ".join(ABSENT_WIRING.split())
    args = _template(variables, ["{{ __nvidia_driver_packages }}", "{{ __nvidia_driver_absent_installed.packages | default(none) }}",
                                 "{{ __nvidia_driver_fabric_manager_service | default('') }}"])
    return driver_filters.FilterModule().filters()["nvidia_driver_absent_plan"](*args)


def test_the_role_wires_the_absent_plan_through_one_variable() -> None:
    host = Host("debian12")
    before_read = absent_plan(dict(host.variables))
    assert before_read["units"] == ["nvidia-persistenced.service", host["__nvidia_driver_fabric_manager_service"]]
    assert before_read["query"] == _driver.absent_plan(host["__nvidia_driver_packages"])["query"]
    after_read = absent_plan(dict(host.variables, __nvidia_driver_absent_installed={"packages": {"nvidia-driver": [{"version": "1"}]}}))
    assert after_read["packages"] == ["nvidia-driver"]


RESOLVED = {"install": ["nvidia-driver", "nvidia-open-kernel-dkms", "nvidia-driver"],
            "module": {"open": ["nvidia-open-kernel-dkms"], "proprietary": ["nvidia-kernel-dkms", ""]},
            "pinning": "nvidia-driver-pinning-580"}
CASES = list(itertools.product(sorted(HOSTS), [[], ["nvidia-fabricmanager-580"]], [False, True], ["proprietary", "open", None]))


@pytest.mark.parametrize(("name", "hold", "use_pinning", "other"), CASES)
def test_the_record_lists_the_same_files_and_packages_as_before(name: str, hold: list, use_pinning: bool, other) -> None:
    host = Host(name)
    pkg_mgr = host["__nvidia_driver_pkg_mgr"]
    resolved = dict(RESOLVED, other_flavour=other)
    before = dict(host.variables, __nvidia_driver_install_packages=RESOLVED["install"], __nvidia_driver_pkgs=resolved,
                  __nvidia_driver_other_flavour=other, __nvidia_driver_use_pinning_package=use_pinning,
                  __nvidia_driver_lockstep={"hold": hold})
    old_files = [f for f in dict.fromkeys(_template(before, expression) for expression in OLD_FILES) if f]
    old_packages = _template(before, OLD_PACKAGES)
    # The record paths as tasks/transaction.yml hands them to the transaction, templated for this host.
    role_paths = _task_vars("transaction.yml", "Decide what the install does to the driver")["__nvidia_driver_txn_role"]["record_paths"]
    paths = _template(host.variables, role_paths)
    record = _driver.converged_record(resolved, RESOLVED["install"], {"hold": hold}, use_pinning, pkg_mgr, paths)
    assert record == {"files": old_files, "packages": old_packages}


def test_main_records_the_transactions_record() -> None:
    record_vars = _task_vars("main.yml", "Record what the full run left for the next run's probe")
    assert "__nvidia_driver_txn.record.files" in record_vars["internal_common_files"]
    assert "__nvidia_driver_txn.record.packages" in record_vars["internal_common_record_packages"]


TXN_PLAN = {"branch": 580, "version": "", "source": "nvidia", "flavour": "open", "fabric_manager": False, "nvlsm": False,
            "packages": {"userspace": ["nvidia-driver"], "install": ["nvidia-driver"], "hold": ["nvidia-driver"], "pin": [],
                         "settings": [], "fabric_manager": [], "nscq": [], "nvlsm": [], "pinning": "",
                         "module": {"open": ["nvidia-open"], "proprietary": ["nvidia-kernel"]}, "other_flavour": "proprietary"}}
TXN_HOST = {"installed": {}, "offered": [["nvidia-driver", "580.95.05-1", "repo"]], "asked": ["nvidia-driver"], "check_mode": False}
PATHS = {"pin": "/etc/apt/preferences.d/gpuhost-nvidia-driver.pref", "versionlock": "", "dnf_module": "/etc/dnf/modules.d/nvidia-driver.module",
         "repo": "/etc/apt/sources.list.d/gpuhost-nvidia-cuda.sources", "key": "", "keyring": "/etc/apt/keyrings/gpuhost-nvidia-cuda.gpg",
         "modprobe": ["/etc/modprobe.d/gpuhost-nvidia-blacklist-nouveau.conf"]}


def _transaction(paths):
    role = {"pkg_mgr": "apt", "candidate_package": "nvidia-driver", "install": ["nvidia-driver"], "pin": True, "record_paths": paths}
    return driver_filters.FilterModule().filters()["nvidia_driver_transaction"](TXN_PLAN, TXN_HOST, role)


def test_the_transaction_filter_returns_the_record() -> None:
    assert _transaction(PATHS)["record"] == {
        "files": ["/etc/apt/preferences.d/gpuhost-nvidia-driver.pref", "/etc/apt/sources.list.d/gpuhost-nvidia-cuda.sources",
                  "/etc/apt/keyrings/gpuhost-nvidia-cuda.gpg", "/etc/modprobe.d/gpuhost-nvidia-blacklist-nouveau.conf"],
        "packages": ["nvidia-driver", "nvidia-kernel"]}


@pytest.mark.parametrize(("paths", "message"), [
    (dict(PATHS, repo="etc/apt/x.sources"), "role.record_paths.repo must be an absolute path"),
    (dict(PATHS, modprobe=["x.conf"]), "role.record_paths.modprobe must be a list of absolute paths"),
    (dict(PATHS, pin=["/x"]), "role.record_paths.pin must be a string"),
    ("/etc", "role.record_paths: expected a dict"),
])
def test_the_transaction_filter_refuses_bad_record_paths(paths, message) -> None:
    with pytest.raises(AnsibleFilterError, match="nvidia_driver_transaction.*" + message.replace(".", "[.]")):
        _transaction(paths)


def test_the_absent_filter_checks_its_arguments() -> None:
    absent = driver_filters.FilterModule().filters()["nvidia_driver_absent_plan"]
    assert absent({"distro": {"fm": "nvidia-fabricmanager-{branch}"}})["prefixes"] == ["nvidia-fabricmanager-"]
    with pytest.raises(AnsibleFilterError, match="nvidia_driver_absent_plan installed: expected a dict"):
        absent({}, ["nvidia-driver"])
    with pytest.raises(AnsibleFilterError, match="nvidia_driver_absent_plan: fabric_manager_service must be a unit name"):
        absent({}, None, 5)
