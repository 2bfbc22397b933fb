# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What each role loads on Ubuntu 22.04 and 24.04 (#24), and what the driver role makes of it.

Every role's per-distribution vars are layered by the internal common role (its ``vars.yml``: the family's file, then
the distribution's, each holding only what differs), resolved here for Ubuntu's facts by the common role's own rule, so
a new vars file shows up here: no role may load a Debian file whose values do not fit Ubuntu (Debian's driver userland
names, for one) without an Ubuntu file over it. The driver
role's Ubuntu file then goes through the planner as the role templates it: the kernel flavour from the running kernel's
name (HWE included), the signed-module path with Secure Boot on, the package the candidate check reads, the pin.
"""

from __future__ import annotations

import pathlib
import sys
import typing as t

import pytest
import yaml

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _driver, _driver_probe

ROLES = pathlib.Path(__file__).resolve().parents[3] / "roles"
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "driver"))
from test_driver_vars import HOSTS, Host  # noqa: E402  pylint: disable=wrong-import-position
from test_driver_record import absent_plan  # noqa: E402  pylint: disable=wrong-import-position
import os_vars  # noqa: E402  pylint: disable=wrong-import-position  # beside this file

UBUNTU = {
    "ubuntu2204": {"distribution": "Ubuntu", "os_family": "Debian", "distribution_major_version": "22", "distribution_version": "22.04",
                   "pkg_mgr": "apt"},
    "ubuntu2404": {"distribution": "Ubuntu", "os_family": "Debian", "distribution_major_version": "24", "distribution_version": "24.04",
                   "pkg_mgr": "apt"},
}
# The vars files each role loads on both Ubuntu releases, in order (the internal common role layers them).
LOADS = {
    "nvidia_driver": ["Debian.yml", "Ubuntu.yml"],
    "gpu_settings": ["Debian.yml", "Ubuntu.yml"],
    "nvidia_container_toolkit": ["Debian.yml"],
    "gpu_compose": ["Debian.yml"],
    "vfio_passthrough": ["Debian.yml"],
    "gpu_verify": ["Debian.yml"],
}


@pytest.mark.parametrize("release", sorted(UBUNTU))
@pytest.mark.parametrize("role", sorted(LOADS))
def test_each_role_loads_the_debian_family_file_and_its_ubuntu_file_over_it(role: str, release: str) -> None:
    assert os_vars.files(role, UBUNTU[release]) == LOADS[role]


def _debian_driver_names() -> set[str]:
    """The names of Debian's own NVIDIA driver packages (its distro source), which Ubuntu's archive does not have."""
    table = yaml.safe_load((ROLES / "nvidia_driver" / "vars" / "Debian.yml").read_text(encoding="utf-8"))["__nvidia_driver_packages"]
    return set(_driver.resolve_packages({"branch": 535}, table["distro"])["hold"])


@pytest.mark.parametrize("role", sorted(role for role, name in LOADS.items() if name == ["Debian.yml"]))
def test_the_debian_family_files_ubuntu_loads_name_no_debian_driver_package(role: str) -> None:
    values = yaml.safe_load((ROLES / role / "vars" / "Debian.yml").read_text(encoding="utf-8")) or {}
    assert set(_flatten(values)).isdisjoint(_debian_driver_names()), role


def _flatten(value: t.Any) -> list[str]:
    if isinstance(value, dict):
        return [s for v in value.values() for s in _flatten(v)]
    if isinstance(value, list):
        return [s for v in value for s in _flatten(v)]
    return [value] if isinstance(value, str) else []


def test_gpu_settings_ubuntu_userland_is_ubuntus_not_debians() -> None:
    values = yaml.safe_load((ROLES / "gpu_settings" / "vars" / "Ubuntu.yml").read_text(encoding="utf-8"))
    assert values["__gpu_settings_userland"] == ["nvidia-compute-utils{family}", "nvidia-utils{family}"]
    # Ubuntu's unit runs --no-persistence-mode as the nvidia-persistenced user; the drop-in keeps the user, turns it on.
    assert values["__gpu_settings_persistenced_args"][:3] == ["--user", "nvidia-persistenced", "--persistence-mode"]
    assert values["__gpu_settings_bindings"] == []


def test_gpu_settings_knows_ubuntus_persistenced_unit_is_static_and_debians_is_not() -> None:
    """Ubuntu's unit has no [Install] (docs/sources.md): the role neither enables it nor reports it enabled."""
    default = yaml.safe_load((ROLES / "gpu_settings" / "vars" / "main.yml").read_text(encoding="utf-8"))
    ubuntu = yaml.safe_load((ROLES / "gpu_settings" / "vars" / "Ubuntu.yml").read_text(encoding="utf-8"))
    debian = yaml.safe_load((ROLES / "gpu_settings" / "vars" / "Debian.yml").read_text(encoding="utf-8"))
    assert (default["__gpu_settings_persistenced_static"], ubuntu["__gpu_settings_persistenced_static"]) == (False, True)
    assert "__gpu_settings_persistenced_static" not in debian
    # Installing a static unit enables nothing: Ubuntu.yml, layered over Debian.yml, overrides Debian's deb-systemd-helper
    # prediction.
    assert ubuntu["__gpu_settings_persistenced_enabled_on_install"] is False and debian["__gpu_settings_persistenced_enabled_on_install"] is True
    assert default["__gpu_settings_persistenced_enabled_on_install"] is False


def _absent_packages(installed: list[str]) -> list[str]:
    """nvidia_driver's absent package list (the "Remove what the role added" task's __nvidia_driver_absent, as
    tests/unit/driver/test_driver_record.py wires it) on Ubuntu 24.04."""
    host = _ubuntu_host("ubuntu2404", "6.8.0-1031-azure")
    variables = dict(host.variables)
    # tasks/absent.yml's nvidia_driver_host read: the installed packages named by the query or starting with a prefix.
    asked = absent_plan(variables)
    selected = _driver_probe.select_installed({name: [{"version": "1"}] for name in installed}, asked["query"], asked["prefixes"])
    variables["__nvidia_driver_absent_installed"] = {"packages": selected}
    return absent_plan(variables)["packages"]


def test_ubuntu_absent_removes_the_signed_modules_signatures_and_objects_by_prefix() -> None:
    signed = ["linux-modules-nvidia-580-server-open-azure", "linux-modules-nvidia-580-server-open-6.8.0-1031-azure",
              "linux-signatures-nvidia-6.8.0-1031-azure", "linux-objects-nvidia-580-server-open-6.8.0-1031-azure",
              # an older kernel's, left by a kernel update
              "linux-signatures-nvidia-6.8.0-1030-azure", "linux-objects-nvidia-580-server-open-6.8.0-1030-azure"]
    userland = ["nvidia-utils-580-server", "libnvidia-compute-580-server", "nvidia-kernel-common-580-server", "nvidia-compute-utils-580-server"]
    others = ["linux-image-6.8.0-1031-azure", "linux-modules-6.8.0-1031-azure", "nvidia-container-toolkit", "libnvidia-container1"]
    assert _absent_packages(signed + userland + others) == sorted(signed + userland)


def _ubuntu_host(release: str, kernel: str) -> Host:
    """The driver role's variables on an Ubuntu host running ``kernel`` (registered under its own key)."""
    key = "%s/%s" % (release, kernel)
    HOSTS.setdefault(key, {**UBUNTU[release], "kernel": kernel})
    return Host(key)


@pytest.mark.parametrize(("release", "kernel", "flavour"), [
    ("ubuntu2404", "6.8.0-136-generic", "generic"),
    ("ubuntu2404", "6.8.0-1031-azure", "azure"),
    ("ubuntu2404", "6.8.0-1040-aws", "aws"),
    ("ubuntu2404", "6.8.0-1065-gcp", "gcp"),
    ("ubuntu2404", "6.17.0-20-generic", "generic-hwe-24.04"),
    ("ubuntu2404", "6.8.0-136-lowlatency", "lowlatency"),
    ("ubuntu2204", "5.15.0-160-generic", "generic"),
    ("ubuntu2204", "6.8.0-40-generic", "generic-hwe-22.04"),
    ("ubuntu2204", "6.8.0-1031-azure", "azure"),
])
def test_kernel_flavour_from_the_running_kernel(release: str, kernel: str, flavour: str) -> None:
    host = _ubuntu_host(release, kernel)
    assert host["__nvidia_driver_ubuntu_kernel_flavour"] == flavour
    pkgs = host.packages(host.plan({"source": "distro", "flavour": "open"}))
    assert pkgs["module"]["open"] == ["linux-modules-nvidia-580-server-open-" + flavour]


def _plan(host: Host, request: dict[str, t.Any], secure_boot: bool | None) -> dict[str, t.Any]:
    req = {"source": "auto", "flavour": "auto", "branch": "", "version": "", "reboot": "never", **request}
    facts = {"present": True, "gpus": [{"pci_bus_id": "0000:01:00.0", "pci_device_id": "10de:2330"}]}
    facts_host = {"distribution": "Ubuntu", "distribution_version": host.facts["distribution_version"],
                  "distribution_major_version": host.facts["distribution_major_version"], "headers_present": True,
                  "secure_boot": secure_boot}
    return _driver.plan(req, facts, facts_host, host["__nvidia_driver_capabilities"])


def _candidate(host: Host, plan: dict[str, t.Any]) -> str:
    """The package whose versions are the driver's, as the plan names it with its packages (tasks/preflight.yml)."""
    role = {"pkg_mgr": "apt", "candidate_from_userspace": host["__nvidia_driver_candidate_from_userspace"]}
    return _driver.plan_packages(plan, host["__nvidia_driver_packages"], {"kernel_flavour": host["__nvidia_driver_ubuntu_kernel_flavour"]}, role)["candidate"]


def test_secure_boot_on_the_distro_source_takes_the_signed_azure_modules_and_holds_only_the_userland() -> None:
    host = _ubuntu_host("ubuntu2404", "6.8.0-1031-azure")
    plan = _plan(host, {"source": "distro", "flavour": "open"}, secure_boot=True)
    assert (plan["errors"], plan["branch"], plan["dkms"], plan["secure_boot"]) == (
        [], 580, False, {"enabled": True, "detected": True, "stated": None, "path": "signed"})
    pkgs = host.packages(plan)
    assert pkgs["module"]["open"] == ["linux-modules-nvidia-580-server-open-azure"]
    assert pkgs["userspace"] == ["nvidia-utils-580-server", "libnvidia-compute-580-server", "nvidia-kernel-common-580-server"]
    # Versioned like the kernel (6.8.0-1031.36): a 580.* pin would never match them, so the pin leaves them out.
    assert not [name for name in pkgs["hold"] if name.startswith("linux-modules-")]
    assert {"nvidia-utils-580-server", "nvidia-compute-utils-580-server", "libnvidia-compute-580-server"} <= set(pkgs["hold"])
    # The candidate check reads the userland's versions, not the module package's kernel versions.
    assert _candidate(host, plan) == "nvidia-utils-580-server"
    assert _driver.check_candidate(plan, ["6.8.0-1031.36"], {}) != []
    assert _driver.check_candidate(plan, ["580.95.05-0ubuntu0.24.04.2"], {}) == []


def test_secure_boot_on_with_the_nvidia_source_fails_early_naming_the_signed_one() -> None:
    host = _ubuntu_host("ubuntu2404", "6.8.0-1031-azure")
    errors = _plan(host, {"source": "nvidia"}, secure_boot=True)["errors"]
    assert len(errors) == 1
    assert "Secure Boot is enabled" in errors[0] and "(here: nvidia_driver_source: distro)" in errors[0]


def test_ubuntu2204_nvidia_source_is_dkms_from_the_ubuntu2204_repository_with_fabric_manager() -> None:
    host = _ubuntu_host("ubuntu2204", "5.15.0-160-generic")
    plan = _plan(host, {"source": "nvidia", "branch": "580", "fabric_manager": "true"}, secure_boot=False)
    assert (plan["errors"], plan["dkms"], plan["fabric_manager"]) == ([], True, True)
    assert host.repo()["url"] == "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64/"
    pkgs = host.packages(plan)
    assert (pkgs["module"]["open"], pkgs["fabric_manager"]) == (["nvidia-dkms-580-open"], ["nvidia-fabricmanager-580"])
    assert {"nvidia-dkms-580-open", "libnvidia-compute-580", "nvidia-utils-580"} <= set(pkgs["hold"])
    assert _candidate(host, plan) == "nvidia-dkms-580-open"
