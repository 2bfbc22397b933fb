# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The nvidia_driver role's per-distribution vars, templated as Ansible loads them, through the planner.

Loads defaults/main.yml, vars/main.yml and the per-OS files the internal common role layers (family, family release,
distribution, its release; default.yml when none exists), as tasks/set_vars.yml does, then
checks what a host of each supported release gets: repository, key, branch, packages, pin.
"""

from __future__ import annotations

import os
import sys

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _driver

ROLE = os.path.join(os.path.dirname(__file__), "..", "..", "..", "roles", "nvidia_driver")
VARS = os.path.join(ROLE, "vars")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "roles"))
import os_vars  # noqa: E402  pylint: disable=wrong-import-position


def _trust(value):
    if isinstance(value, dict):
        return {k: _trust(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_trust(v) for v in value]
    if isinstance(value, str):
        return trust_as_template(value)
    return value


def _load(name):
    with open(os.path.join(VARS, name), encoding="utf-8") as handle:
        return yaml.safe_load(handle) or {}


HOSTS = {
    "debian12": {"distribution": "Debian", "os_family": "Debian", "distribution_major_version": "12", "distribution_version": "12.8",
                 "pkg_mgr": "apt"},
    "debian13": {"distribution": "Debian", "os_family": "Debian", "distribution_major_version": "13", "distribution_version": "13.1",
                 "pkg_mgr": "apt"},
    "ubuntu2404": {"distribution": "Ubuntu", "os_family": "Debian", "distribution_major_version": "24", "distribution_version": "24.04",
                   "pkg_mgr": "apt", "kernel": "6.8.0-1015-aws"},
    "rocky9": {"distribution": "Rocky", "os_family": "RedHat", "distribution_major_version": "9", "distribution_version": "9.6",
               "pkg_mgr": "dnf"},
    "rocky10": {"distribution": "Rocky", "os_family": "RedHat", "distribution_major_version": "10", "distribution_version": "10.0",
                "pkg_mgr": "dnf"},
    "rhel8": {"distribution": "RedHat", "os_family": "RedHat", "distribution_major_version": "8", "distribution_version": "8.10",
              "pkg_mgr": "dnf"},
    "fedora42": {"distribution": "Fedora", "os_family": "RedHat", "distribution_major_version": "42", "distribution_version": "42",
                 "pkg_mgr": "dnf5"},
    "ubuntu2604": {"distribution": "Ubuntu", "os_family": "Debian", "distribution_major_version": "26", "distribution_version": "26.04",
                   "pkg_mgr": "apt", "kernel": "7.0.0-31-generic"},
    "fedora43": {"distribution": "Fedora", "os_family": "RedHat", "distribution_major_version": "43", "distribution_version": "43",
                 "pkg_mgr": "dnf5"},
    "fedora44": {"distribution": "Fedora", "os_family": "RedHat", "distribution_major_version": "44", "distribution_version": "44",
                 "pkg_mgr": "dnf5"},
    # Releases no vars file names: they must be refused, not given a neighbour's repository.
    "ubuntu2510": {"distribution": "Ubuntu", "os_family": "Debian", "distribution_major_version": "25", "distribution_version": "25.10",
                   "pkg_mgr": "apt", "kernel": "6.17.0-5-generic"},
    "fedora45": {"distribution": "Fedora", "os_family": "RedHat", "distribution_major_version": "45", "distribution_version": "45",
                 "pkg_mgr": "dnf5"},
    "debian14": {"distribution": "Debian", "os_family": "Debian", "distribution_major_version": "14", "distribution_version": "14.0",
                 "pkg_mgr": "apt"},
    "arch": {"distribution": "Archlinux", "os_family": "Archlinux", "distribution_major_version": "", "distribution_version": "",
             "pkg_mgr": "pacman", "kernel": "6.12.1-arch1-1"},
}


class Host:
    """The role's variables for one host, templated on demand."""

    def __init__(self, name):
        facts = {"architecture": "x86_64", "kernel": "6.1.0-28-amd64", **HOSTS[name]}
        with open(os.path.join(ROLE, "defaults", "main.yml"), encoding="utf-8") as handle:
            variables = yaml.safe_load(handle)
        variables.update(_load("main.yml"))
        # The files the internal common role layers for this host (tests/unit/roles/os_vars.py reads its rule).
        self.files = os_vars.files("nvidia_driver", facts)
        for layer in self.files:
            variables.update(_load(layer))
        self.facts = facts
        self.variables = _trust(variables)
        self.variables["ansible_facts"] = facts

    def __getitem__(self, name):
        return Templar(loader=DataLoader(), variables=self.variables).template(self.variables[name])

    def set_fact(self, tasks_file, name, keys=None, **given):
        """Run one of the role's set_fact tasks (the first whose name starts with ``name``) as Ansible would: its
        ``vars`` over the role's variables, ``given`` over both (a value the test stands in for, such as a template
        lookup this Templar has not), then the facts (``keys``: only those) set for every later read."""
        with open(os.path.join(ROLE, "tasks", tasks_file), encoding="utf-8") as handle:
            task = next(t for t in yaml.safe_load(handle) if t.get("name", "").startswith(name))
        scoped = {**self.variables, **_trust(task.get("vars") or {}), **given}
        templar = Templar(loader=DataLoader(), variables=scoped)
        facts = {key: templar.template(_trust(value)) for key, value in task["ansible.builtin.set_fact"].items()
                 if keys is None or key in keys}
        self.variables.update(facts)
        return facts

    def plan(self, request=None, gpus=("10de:2330",)):
        req = {"source": "auto", "flavour": "auto", "branch": "", "version": "", "reboot": "never"}
        req.update(request or {})
        facts = {"present": True, "gpus": [{"pci_bus_id": "0000:%02x:00.0" % (i + 1), "pci_device_id": d} for i, d in enumerate(gpus)]}
        host = {"distribution": self.facts["distribution"], "distribution_version": self.facts["distribution_version"],
                "distribution_major_version": self.facts["distribution_major_version"], "headers_present": True, "secure_boot": False}
        return _driver.plan(req, facts, host, self["__nvidia_driver_capabilities"])

    def packages(self, plan):
        flavour = self["__nvidia_driver_ubuntu_kernel_flavour"] if "__nvidia_driver_ubuntu_kernel_flavour" in self.variables else ""
        return _driver.resolve_packages(plan, self["__nvidia_driver_packages"][plan["source"]], {"kernel_flavour": flavour})

    def repo(self, source="nvidia"):
        return self["__nvidia_driver_repo_defaults"][source]


CUDA = "https://developer.download.nvidia.com/compute/cuda/repos/"
PASCAL = "10de:1b81"


def test_release_files_layer_on_the_distribution():
    assert Host("debian12").files == ["Debian.yml"]
    assert Host("debian13").files == ["Debian.yml", "Debian_13.yml"]
    assert Host("rocky9").files == ["RedHat.yml"]
    assert Host("rocky10").files == ["RedHat.yml", "RedHat_10.yml"]
    assert Host("fedora42").files == ["RedHat.yml", "Fedora.yml"]
    assert Host("ubuntu2404").files == ["Debian.yml", "Ubuntu.yml"]


def test_debian12_defaults_to_nvidia_580_with_nvidias_apt_key():
    host = Host("debian12")
    plan = host.plan()
    assert (plan["errors"], plan["source"], plan["branch"]) == ([], "nvidia", 580)
    assert host.repo() == {"url": CUDA + "debian12/x86_64/", "key_url": CUDA + "debian12/x86_64/3bf863cc.pub",
                           "key_fingerprint": "EB693B3035CD5710E231E123A4B469963BF863CC"}
    pkgs = host.packages(plan)
    expected = (["nvidia-kernel-open-dkms"], ["nvidia-driver-cuda"], "nvidia-driver-pinning-580")
    assert (pkgs["module"]["open"], pkgs["userspace"], pkgs["pinning"]) == expected


def test_debian12_distro_source_holds_debians_535_by_exact_name():
    host = Host("debian12")
    plan = host.plan({"source": "distro"}, gpus=("10de:1db6",))
    pkgs = host.packages(plan)
    assert (plan["errors"], plan["branch"], plan["flavour"]) == ([], 535, "proprietary")
    assert {"nvidia-kernel-dkms", "nvidia-open-kernel-dkms", "nvidia-smi", "libcuda1", "nvidia-persistenced", "firmware-nvidia-gsp"} <= set(pkgs["hold"])
    assert all("*" not in name and "?" not in name for name in pkgs["hold"])
    assert pkgs["pinning"] == ""


def test_debian13_nvidia_repository_has_its_own_key_and_starts_past_580():
    host = Host("debian13")
    plan = host.plan()
    assert (plan["errors"], plan["source"], plan["branch"]) == ([], "nvidia", 595)
    assert plan["lifecycle"] == {"designation": "Production Branch", "end_of_life": "2027-03"}
    assert host.repo() == {"url": CUDA + "debian13/x86_64/", "key_url": CUDA + "debian13/x86_64/8793F200.pub",
                           "key_fingerprint": "02182E60104FCDC26EAE1B8597A5D4CB8793F200"}
    assert host.packages(plan)["pinning"] == "nvidia-driver-pinning-595"
    assert "its repository starts at branch 590" in host.plan({"branch": "580"})["errors"][0]


def test_debian13_pascal_fails_early_naming_580_and_debians_own_550_drives_it():
    host = Host("debian13")
    errors = host.plan(gpus=(PASCAL,))["errors"]
    assert len(errors) == 1 and errors[0].startswith("driver branch 595 no longer supports Pascal GPU 0000:01:00.0: its last branch is 580")
    distro = host.plan({"source": "distro"}, gpus=(PASCAL,))
    assert (distro["errors"], distro["branch"], distro["flavour"]) == ([], 550, "proprietary")


def test_ubuntu_names_carry_the_branch_to_580_and_lose_it_from_590():
    host = Host("ubuntu2404")
    p580 = host.packages(host.plan())
    assert (p580["module"]["open"], p580["settings"]) == (["nvidia-dkms-580-open"], ["nvidia-compute-utils-580", "nvidia-utils-580"])
    p595 = host.packages(host.plan({"branch": "595"}))
    assert (p595["module"]["open"], p595["settings"], p595["pinning"]) == (["nvidia-dkms-open"], ["nvidia-compute-utils", "nvidia-utils"],
                                                                           "nvidia-driver-pinning-595")
    distro = host.packages(host.plan({"source": "distro"}))
    assert distro["module"]["open"] == ["linux-modules-nvidia-580-server-open-aws"]
    assert distro["settings"] == ["nvidia-compute-utils-580-server", "nvidia-utils-580-server"]


def test_el9_keeps_module_streams_with_nvidias_rpm_key():
    host = Host("rocky9")
    assert host["__nvidia_driver_dnf_modules"] is True
    assert host.repo()["key_fingerprint"] == "610C7B14E068A878070DA4E99CD0A493D42D0685"
    assert host.repo()["key_url"] == CUDA + "rhel9/x86_64/D42D0685.pub"
    assert host["__nvidia_driver_epel_repo"]["key_fingerprint"] == "FF8AD1344597106ECE813B918A3872BF3228467C"
    assert host["__nvidia_driver_crb_repo"] == "crb"
    assert Host("rhel8")["__nvidia_driver_crb_repo"] == "codeready-builder-for-rhel-8-x86_64-rpms"


def test_el10_has_no_module_streams_and_no_unconfirmed_fingerprint():
    host = Host("rocky10")
    assert host["__nvidia_driver_dnf_modules"] is False
    plan = host.plan()
    assert (plan["errors"], plan["branch"]) == ([], 580)
    repo = host.repo()
    assert repo["key_url"] == CUDA + "rhel10/x86_64/CDF6BA43.pub"
    assert repo["key_fingerprint"] == "" and "nvidia_driver_repo_key_fingerprint" in repo["key_note"]
    assert host["__nvidia_driver_epel_repo"] == {
        "url": "https://dl.fedoraproject.org/pub/epel/10/Everything/x86_64/",
        "key_url": "https://dl.fedoraproject.org/pub/epel/RPM-GPG-KEY-EPEL-10",
        "key_fingerprint": "7D8D15CBFC4E62688591FB2633D98517E37ED158",
    }
    pkgs = host.packages(plan)
    assert _driver.versionlock_dnf4(pkgs["hold"], plan)[0].endswith("-580.*")
    assert {"kmod-nvidia-open-dkms", "nvidia-driver", "nvidia-driver-cuda", "nvidia-persistenced"} <= set(pkgs["hold"])


def test_fedora_uses_dnf5_versionlock_and_nvidias_rpm_key():
    host = Host("fedora42")
    assert host["__nvidia_driver_versionlock_style"] == "dnf5"
    assert host["__nvidia_driver_versionlock_file"] == "/etc/dnf/versionlock.toml"
    assert host.repo()["key_fingerprint"] == "610C7B14E068A878070DA4E99CD0A493D42D0685"
    assert host["__nvidia_driver_versionlock_plugin_packages"] == []
    assert Host("rocky10")["__nvidia_driver_versionlock_plugin_packages"] == ["python3-dnf-plugin-versionlock"]


def test_ubuntu2604_has_its_own_key_and_starts_at_595():
    host = Host("ubuntu2604")
    assert host.files == ["Debian.yml", "Ubuntu.yml", "Ubuntu_26.04.yml"]
    plan = host.plan()
    assert (plan["errors"], plan["source"], plan["branch"]) == ([], "nvidia", 595)
    assert plan["lifecycle"] == {"designation": "Production Branch", "end_of_life": "2027-03"}
    assert host.repo() == {"url": CUDA + "ubuntu2604/x86_64/", "key_url": CUDA + "ubuntu2604/x86_64/60DF8A40.pub",
                           "key_fingerprint": "14BAFBC7562AD710CA04E69905FBB6DA60DF8A40"}
    pkgs = host.packages(plan)
    assert (pkgs["module"]["open"], pkgs["userspace"], pkgs["pinning"]) == (["nvidia-dkms-open"], ["libnvidia-compute", "nvidia-utils"],
                                                                            "nvidia-driver-pinning-595")
    assert "its repository starts at branch 595" in host.plan({"branch": "580"})["errors"][0]


def test_ubuntu2604_pascal_is_sent_to_ubuntus_own_580():
    host = Host("ubuntu2604")
    errors = host.plan(gpus=(PASCAL,))["errors"]
    assert len(errors) == 1 and errors[0].startswith("driver branch 595 no longer supports Pascal GPU 0000:01:00.0: its last branch is 580")
    assert "Ubuntu's own 580" in errors[0]
    distro = host.plan({"source": "distro"}, gpus=(PASCAL,))
    assert (distro["errors"], distro["branch"], distro["flavour"]) == ([], 580, "proprietary")
    assert host.packages(distro)["module"]["proprietary"] == ["linux-modules-nvidia-580-server-generic"]


def test_ubuntu2604_kernel_flavour_knows_its_ga_and_hwe_kernels():
    assert Host("ubuntu2604")["__nvidia_driver_ubuntu_kernel_flavour"] == "generic"
    assert Host("ubuntu2604")["__nvidia_driver_headers_follow_packages"] == ["linux-headers-generic"]
    hwe = Host("ubuntu2604")
    hwe.variables["ansible_facts"] = dict(hwe.facts, kernel="7.2.0-12-generic")
    assert hwe["__nvidia_driver_ubuntu_kernel_flavour"] == "generic-hwe-26.04"


@pytest.mark.parametrize("name, key", [("fedora43", "1940C73E"), ("fedora44", "73CD9B30")])
def test_fedora_43_and_44_have_their_own_keys_and_no_default_branch(name, key):
    host = Host(name)
    release = HOSTS[name]["distribution_major_version"]
    assert host.files == ["RedHat.yml", "Fedora.yml", "Fedora_%s.yml" % release]
    assert host.repo()["key_url"] == CUDA + "fedora%s/x86_64/%s.pub" % (release, key)
    assert host.repo()["url"] == CUDA + "fedora%s/x86_64/" % release
    assert host["__nvidia_driver_versionlock_file"] == "/etc/dnf/versionlock.toml"
    assert host["__nvidia_driver_dnf_modules"] is False
    errors = host.plan()["errors"]
    assert len(errors) == 1
    assert errors[0].startswith("no default driver branch for the nvidia source on Fedora %s: no two public sources agree" % release)
    assert errors[0].endswith("set nvidia_driver_branch (or nvidia_driver_version) to a branch the repository carries")
    chosen = host.plan({"branch": "610"})
    assert (chosen["errors"], chosen["branch"]) == ([], 610)
    by_version = host.plan({"version": "610.43.02"})
    assert (by_version["errors"], by_version["branch"]) == ([], 610)
    assert host.packages(chosen)["module"]["open"] == ["kmod-nvidia-open-dkms"]


def test_fedora44_fingerprint_is_pinned_and_fedora43s_is_left_to_the_user():
    assert Host("fedora44").repo()["key_fingerprint"] == "129994480EC63D2789BC98E490DFED2F73CD9B30"
    repo = Host("fedora43").repo()
    assert repo["key_fingerprint"] == "" and "nvidia_driver_repo_key_fingerprint" in repo["key_note"]
    assert "1940C73E" in repo["key_note"]


@pytest.mark.parametrize("name, message", [
    ("ubuntu2510", "unsupported Ubuntu release 25.10: this role supports Ubuntu 22.04, 24.04"),
    ("fedora45", "unsupported Fedora release 45: this role supports Fedora 41, 42"),
    ("debian14", "unsupported Debian release 14.0: this role supports Debian 12"),
])
def test_a_release_without_its_own_file_is_refused_before_anything_changes(name, message):
    host = Host(name)
    assert not any(layer.startswith(("Ubuntu_", "Fedora_", "Debian_")) for layer in host.files)
    plan = host.plan()
    assert plan["errors"] == [message]
    assert plan["source"] is None and plan["branch"] is None


def test_arch_takes_the_prebuilt_module_on_archs_kernel():
    host = Host("arch")
    plan = host.plan()
    assert (plan["errors"], plan["source"], plan["branch"]) == ([], "distro", None)
    assert host.packages(plan)["module"]["open"] == ["nvidia-open"]


@pytest.mark.parametrize("name", sorted(HOSTS))
def test_every_default_fingerprint_is_forty_hex_or_deliberately_empty(name):
    fingerprint = Host(name)["__nvidia_driver_repo_defaults"]["nvidia"].get("key_fingerprint")
    assert fingerprint is None or fingerprint == "" or (len(fingerprint) == 40 and int(fingerprint, 16) >= 0)


def _render(name, host, plan, pkgs):
    """Render one of the role's templates with plain Jinja and the collection's filters under their FQCN."""
    import jinja2

    from ansible_collections.gpuhost.nvidia.plugins.filter import driver as driver_filters

    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.filters.update({"gpuhost.nvidia." + k: v for k, v in driver_filters.FilterModule().filters().items()})
    # The plan's versionlock, as nvidia_driver_plan names it with its packages (no lockstep names here).
    pkgs = dict(pkgs, versionlock={"dnf4": _driver.versionlock_dnf4(pkgs["hold"], plan), "dnf5": _driver.versionlock_dnf5(pkgs["hold"], plan)})
    variables = {"__nvidia_driver_plan": plan, "__nvidia_driver_pkgs": pkgs, "ansible_managed": "managed"}
    with open(os.path.join(ROLE, "templates", name), encoding="utf-8") as handle:
        return env.from_string(handle.read()).render(**variables)


def _render_pin(plan, pkgs):
    """The driver's apt hold as the role writes it: the pin that tasks/install_apt.yml passes, rendered through the
    internal repository role's apt.pref.j2 (one preferences template for every role)."""
    import jinja2
    from jinja2.nativetypes import NativeEnvironment

    with open(os.path.join(ROLE, "tasks", "install_apt.yml"), encoding="utf-8") as handle:
        task = next(t for t in yaml.safe_load(handle) if t.get("ansible.builtin.include_role", {}).get("tasks_from") == "apt_pin_deferred.yml")
    # The plan's pin_glob, as nvidia_driver_plan names it with its packages.
    pkgs = dict(pkgs, pin_glob=_driver.plan_packages(plan, {plan["source"]: {}}, {}, {})["pin_glob"])
    variables = {"__nvidia_driver_plan": plan, "__nvidia_driver_pkgs": pkgs, "nvidia_driver_pin": True,
                 "__nvidia_driver_txn": {"use_pinning_package": False}}
    pin = NativeEnvironment(undefined=jinja2.StrictUndefined).from_string(task["vars"]["internal_repository_pin"].strip()).render(**variables)
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, trim_blocks=True)
    template = os.path.join(ROLE, "..", "internal_repository", "templates", "apt.pref.j2")
    with open(template, encoding="utf-8") as handle:
        return env.from_string(handle.read()).render(internal_repository_pin=pin, internal_repository_owner=task["vars"]["internal_repository_owner"],
                                                     ansible_managed="managed")


def test_apt_preferences_hold_exact_names_at_the_branch():
    host = Host("debian12")
    plan = host.plan({"source": "distro"}, gpus=("10de:1db6",))
    text = _render_pin(plan, host.packages(plan))
    package_line = next(line for line in text.splitlines() if line.startswith("Package: "))
    assert "*" not in package_line and " nvidia-kernel-dkms " in package_line + " "
    assert "Pin: version 535.*" in text and "Pin-Priority: 1001" in text


def test_dnf5_versionlock_file_is_valid_toml_with_an_evr_range():
    import tomllib

    host = Host("fedora42")
    plan = host.plan()
    text = 'version = "1.0"\n' + _render("versionlock-dnf5.toml.j2", host, plan, host.packages(plan))
    data = tomllib.loads(text)
    entry = next(p for p in data["packages"] if p["name"] == "nvidia-driver")
    assert entry["conditions"] == [{"key": "evr", "comparator": ">=", "value": "3:580"}, {"key": "evr", "comparator": "<", "value": "3:581"}]
