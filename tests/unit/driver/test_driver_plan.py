# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The nvidia_driver role's pure decisions: source, branch, flavour, preflight errors and their messages."""

from __future__ import annotations

import copy
import re

import pytest

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _driver

DEBIAN = {
    "supported": True,
    "versions": ["12"],
    "sources": {
        # NVIDIA's repository: no static branch list, the repository itself is checked once configured.
        "nvidia": {"available": True, "branches": [], "default_branch": 580, "flavours": ["open", "proprietary"],
                   "dkms": True, "fabric_manager": True, "foreign_packages": ["nvidia-open-kernel-dkms"]},
        "distro": {"available": True, "branches": [535], "default_branch": 535, "flavours": ["open", "proprietary"], "dkms": True,
                   "fabric_manager": False, "foreign_packages": ["nvidia-kernel-open-dkms", "cuda-drivers"],
                   "note": "Debian 12 contrib/non-free ships the 535 branch"},
    },
}
UBUNTU = {
    "supported": True,
    "versions": ["22.04", "24.04"],
    "sources": {
        "nvidia": {"available": True, "branches": [535, 550, 570, 580], "default_branch": 580, "dkms": True, "fabric_manager": True},
        "distro": {"available": True, "branches": [535, 550, 570, 580], "default_branch": 580, "dkms": False, "signed_modules": True,
                   "fabric_manager": True},
    },
}
ARCH = {
    "supported": True,
    "versions": [],
    "sources": {
        "nvidia": {"available": False, "note": "NVIDIA publishes no Arch Linux repository"},
        "distro": {"available": True, "branches": [], "default_branch": None, "flavours": ["open"], "dkms": True,
                   "flavour_note": "Arch ships only the open modules"},
    },
}
UNSUPPORTED = {"supported": False, "supported_list": "Debian 12, Ubuntu 22.04 and 24.04, EL 8-10, Fedora, Arch Linux"}
HOST = {"distribution": "Debian", "distribution_version": "12.8", "distribution_major_version": "12", "kernel": "6.1.0-28-amd64",
        "connection": "ssh", "secure_boot": False, "headers_present": True, "runfile_install": [], "installed_packages": [],
        "foreign_repo_files": []}


def gpu(bus, device, bound=None):
    return {"pci_bus_id": bus, "pci_device_id": device, "bound_driver": bound}


H100 = gpu("0000:65:00.0", "10de:2330")
V100 = gpu("0000:3b:00.0", "10de:1db6")
B200 = gpu("0000:1a:00.0", "10de:2901")
K80 = gpu("0000:04:00.0", "10de:102d")
RTX5090 = gpu("0000:01:00.0", "10de:2b85")


def facts(*gpus, nvswitch=0):
    return {"present": bool(gpus), "gpus": list(gpus), "pci_functions": [], "nvswitch_count": nvswitch}


def plan(request=None, gpus=(H100,), host=None, caps=None, nvswitch=0):
    req = {"source": "auto", "flavour": "auto", "branch": "", "version": "", "reboot": "never", "require_headers": True}
    req.update(request or {})
    h = dict(HOST)
    h.update(host or {})
    return _driver.plan(req, facts(*gpus, nvswitch=nvswitch), h, copy.deepcopy(caps or DEBIAN))


def test_debian_defaults_to_nvidia_repository_580_open_for_hopper():
    p = plan()
    assert p["errors"] == []
    assert (p["act"], p["source"], p["branch"], p["flavour"], p["dkms"]) == (True, "nvidia", 580, "open", True)
    assert p["architectures"] == ["Hopper"] and p["gpus"] == ["0000:65:00.0"]
    assert (p["fabric_manager"], p["nvlsm"]) == (False, False)


def test_debian_distro_source_takes_its_only_branch():
    p = plan({"source": "distro"})
    assert p["errors"] == [] and (p["source"], p["branch"]) == ("distro", 535)


def test_auto_flavour_is_proprietary_with_a_pre_turing_gpu():
    p = plan({"source": "distro"}, gpus=(V100,))
    assert p["errors"] == [] and p["flavour"] == "proprietary"


def test_auto_flavour_fails_when_gpus_need_both_flavours():
    p = plan({"branch": "580"}, gpus=(V100, B200))
    assert p["flavour"] is None
    assert any("no kernel module flavour drives all GPUs: Blackwell GPUs (0000:1a:00.0) need the open modules, "
               "Volta GPUs (0000:3b:00.0) are not supported by them" in e for e in p["errors"])


def test_forced_host_without_gpus_gets_open_modules():
    p = plan({"force": True}, gpus=())
    assert p["errors"] == [] and p["act"] and p["flavour"] == "open" and p["architectures"] == []


def test_host_without_gpu_is_skipped_unless_forced():
    p = plan(gpus=())
    assert p["act"] is False and p["errors"] == []
    assert "no NVIDIA GPU on this host" in p["skip_reason"] and "nvidia_driver_force: true" in p["skip_reason"]


@pytest.mark.parametrize("branch, message", [
    ("123", "unknown driver branch 123: the catalog knows 470, "),
    ("latest", "nvidia_driver_branch must be a driver branch number such as 580, got 'latest'"),
])
def test_bad_branches_fail_with_their_reason(branch, message):
    p = plan({"branch": branch})
    assert any(message in e for e in p["errors"]), p["errors"]


def test_a_branch_the_distro_archive_lacks():
    p = plan({"branch": "545", "source": "distro"})
    message = "driver branch 545 is not offered by the distro source on Debian 12.8 (offered: 535)"
    assert any(message in e for e in p["errors"]), p["errors"]


def test_debian_distro_source_refuses_another_branch():
    p = plan({"source": "distro", "branch": "580"})
    assert "driver branch 580 is not offered by the distro source on Debian 12.8 (offered: 535)" in p["errors"]


def test_exact_version_sets_the_branch_and_must_match_it():
    assert plan({"version": "550.127.08"})["branch"] == 550
    p = plan({"version": "550.127.08", "branch": "580"})
    assert "nvidia_driver_version 550.127.08 is not on nvidia_driver_branch 580" in p["errors"]
    assert "nvidia_driver_version must be a full driver version such as 580.65.06, got 'r550'" in plan({"version": "r550"})["errors"]


@pytest.mark.parametrize("branch, cuda, ok", [
    ("535", "12.2", True), ("535", "12.8", False), ("580", "13.0", True), ("570", "12.8", True), ("550", "12.4", True), ("550", "12.6", False),
])
def test_cuda_requirement_against_the_branch(branch, cuda, ok):
    p = plan({"branch": branch, "cuda_version": cuda})
    assert (p["errors"] == []) is ok, p["errors"]


def test_impossible_cuda_requirement_names_the_branch_and_the_minimum():
    p = plan({"source": "distro", "cuda_version": "12.8"})
    assert p["errors"] == [
        "driver branch 535 cannot run CUDA 12.8: it supports CUDA up to 12.2; CUDA 12.8 needs driver 570.26 or newer (branch 570+)"
    ]


def test_seed_rules_for_cuda_11_and_12():
    assert _driver.check_cuda("525.60.13", "12.0") == []
    assert _driver.check_cuda("525.60.12", "12.0") != []
    assert _driver.check_cuda("470.57.02", "11.4.1") == []
    assert _driver.check_cuda("470.42.01", "11.4.1") != []


def test_unknown_cuda_version_is_an_error_not_a_guess():
    assert "the CUDA version is unknown to the catalog" in plan({"cuda_version": "twelve"})["errors"][0]
    assert plan({"cuda_version": "99.1"})["errors"] == ["driver branch 580 cannot run CUDA 99.1: it supports CUDA up to 13.0"]


def test_unsupported_distribution_fails_first():
    p = plan(host={"distribution": "Gentoo", "distribution_version": "2.17"}, caps=UNSUPPORTED)
    assert p["errors"] == ["unsupported distribution Gentoo 2.17: this role supports Debian 12, Ubuntu 22.04 and 24.04, EL 8-10, Fedora, Arch Linux"]


def test_unsupported_release_of_a_supported_distribution():
    p = plan(host={"distribution_version": "11.11", "distribution_major_version": "11"})
    assert p["errors"] == ["unsupported Debian release 11.11: this role supports Debian 12"]


def test_unavailable_source_names_why():
    p = plan({"source": "nvidia"}, host={"distribution": "Archlinux", "distribution_version": "", "distribution_major_version": ""}, caps=ARCH)
    assert p["errors"] == ["driver source 'nvidia' is not available on Archlinux: NVIDIA publishes no Arch Linux repository"]


def test_arch_auto_source_is_distro_and_proprietary_is_refused():
    host = {"distribution": "Archlinux", "distribution_version": "", "distribution_major_version": ""}
    assert plan({}, host=host, caps=ARCH)["source"] == "distro"
    p = plan({"flavour": "proprietary"}, host=host, caps=ARCH)
    assert "the proprietary kernel modules are not offered by the distro source on Archlinux: Arch ships only the open modules" in p["errors"]


def test_proprietary_on_blackwell_fails():
    p = plan({"flavour": "proprietary"}, gpus=(RTX5090,))
    assert p["errors"] == [
        "Blackwell GPUs (0000:01:00.0) require the open kernel modules; the proprietary modules cannot drive them: "
        "use nvidia_driver_flavour: open (or auto)"
    ]


def test_open_on_pre_turing_fails():
    p = plan({"flavour": "open", "source": "distro"}, gpus=(V100,))
    assert p["errors"] == ["the open kernel modules do not support Volta GPUs (0000:3b:00.0): use nvidia_driver_flavour: proprietary (or auto)"]


def test_branch_against_gpu_generations():
    assert plan({"source": "distro"}, gpus=(K80,))["errors"] == [
        "driver branch 535 no longer supports Kepler GPU 0000:04:00.0: its last branch is 470; branch 535 is the default of the distro "
        "source on Debian 12.8: set nvidia_driver_branch: 470 where a source offers it"
    ]
    assert "driver branch 550 predates Blackwell GPU 0000:1a:00.0: it needs branch 570 or newer" in plan({"branch": "550"}, gpus=(B200,))["errors"]


def test_secure_boot_without_signing_path_fails():
    p = plan({"source": "distro"}, host={"secure_boot": True})
    assert len(p["errors"]) == 1
    assert p["errors"][0].startswith("Secure Boot is enabled and the distro source on Debian 12.8 builds unsigned DKMS modules that would not load")
    assert "nvidia_driver_secure_boot_mok: true" in p["errors"][0]


def test_secure_boot_with_mok_signing_or_signed_modules():
    assert plan({"source": "distro", "secure_boot_mok": True}, host={"secure_boot": True})["secure_boot"] == {
        "enabled": True, "detected": True, "stated": None, "path": "mok"}
    ubuntu = {"distribution": "Ubuntu", "distribution_version": "24.04", "distribution_major_version": "24"}
    p = plan({"source": "distro"}, host=dict(ubuntu, secure_boot=True), caps=UBUNTU)
    assert p["errors"] == [] and p["secure_boot"]["path"] == "signed"
    p = plan({"source": "nvidia"}, host=dict(ubuntu, secure_boot=True), caps=UBUNTU)
    assert "(here: nvidia_driver_source: distro)" in p["errors"][0]


UNKNOWN_ERROR = "the Secure Boot state of this host is unknown ("


# Every way the host read can hand the state on (a real boolean, None, what a template makes of them, garbage), against
# every statement: the plan's path, and whether it stops. Unknown is never off: only a real False (or its text) or the
# user's false lets unsigned DKMS modules through.
@pytest.mark.parametrize("detected, detected_as", [
    (True, True), ("True", True), ("true", True), (False, False), ("False", False), (" false ", False),
    (None, None), ("None", None), ("", None), ("unknown", None), ("0", None), ("no", None), (0, None), (1, None), ([], None),
    ({"enabled": False}, None), ("SecureBoot disabled", None),
])
@pytest.mark.parametrize("stated, mok", [("auto", False), ("false", False), ("true", False), ("auto", True), ("false", True),
                                         (False, False), (True, True), ("off", False), ("yes", False)])
def test_secure_boot_states_and_statements(detected, detected_as, stated, mok):
    p = plan({"source": "distro", "secure_boot": stated, "secure_boot_mok": mok}, host={"secure_boot": detected, "secure_boot_unknown": "why"})
    stated_as = {"auto": None, "false": False, "off": False, False: False, "true": True, "yes": True, True: True}[stated]
    state = detected_as if detected_as is not None else stated_as
    assert (p["secure_boot"]["detected"], p["secure_boot"]["enabled"]) == (detected_as, state)
    if state is False:
        expected_path = "off"
    elif mok:
        expected_path = "mok"
    else:
        expected_path = None
    assert p["secure_boot"]["path"] == expected_path
    assert bool(p["errors"]) is (expected_path is None), p["errors"]
    if state is None and not mok:
        assert p["errors"] == [
            UNKNOWN_ERROR + "why), and the distro source on Debian 12.8 builds unsigned DKMS modules, which do not load when Secure Boot "
            "is on: set nvidia_driver_secure_boot: false if Secure Boot is off on this host (true if it is on), or "
            "nvidia_driver_secure_boot_mok: true to sign the modules either way"]
    if state is True and not mok:
        assert p["errors"][0].startswith("Secure Boot is %s and the distro source" % (
            "enabled" if detected_as else "stated on (nvidia_driver_secure_boot: true)"))
    # A statement that disagrees with what mokutil reported is noted, and the report wins.
    disagrees = detected_as is not None and stated_as is not None and detected_as != stated_as
    assert any("the role goes by what the host reports" in note for note in p["notes"]) is disagrees


@pytest.mark.parametrize("stated", ["maybe", "", "enabled", "1", "$(reboot)", ["true"], {"a": 1}, 2])
def test_a_secure_boot_statement_that_is_not_one_is_refused(stated):
    p = plan({"source": "distro", "secure_boot": stated}, host={"secure_boot": None})
    assert p["errors"] == ["nvidia_driver_secure_boot must be auto, true or false, got %r: state whether Secure Boot is on where the "
                           "host cannot tell (auto: what mokutil reports)" % (stated,)]


def test_an_unknown_state_with_signed_modules_needs_no_statement():
    ubuntu = {"distribution": "Ubuntu", "distribution_version": "24.04", "distribution_major_version": "24", "secure_boot": None}
    p = plan({"source": "distro"}, host=ubuntu, caps=UBUNTU)
    assert (p["errors"], p["secure_boot"]) == ([], {"enabled": None, "detected": None, "stated": None, "path": "signed"})
    # NVIDIA's DKMS packages on the same host do need one, and the message names the signed source.
    p = plan({"source": "nvidia"}, host=ubuntu, caps=UBUNTU)
    assert p["errors"][0].startswith(UNKNOWN_ERROR + "mokutil could not tell)") and "(here: nvidia_driver_source: distro)" in p["errors"][0]


def test_missing_headers_fail_unless_not_required():
    p = plan(host={"headers_present": False})
    assert p["errors"][0].startswith("no kernel headers for the running kernel 6.1.0-28-amd64")
    assert "nvidia_driver_require_headers: false" in p["errors"][0]
    p = plan({"require_headers": False}, host={"headers_present": False})
    assert p["errors"] == [] and "installing anyway" in p["notes"][0]
    ubuntu = {"distribution": "Ubuntu", "distribution_version": "24.04", "headers_present": False}
    assert plan({"source": "distro"}, host=ubuntu, caps=UBUNTU)["errors"] == []  # precompiled modules need no headers


def test_conflicting_earlier_installs():
    p = plan({"source": "distro"}, host={"runfile_install": ["/usr/bin/nvidia-uninstall"], "installed_packages": ["cuda-drivers", "bash"],
                                         "foreign_repo_files": ["/etc/apt/sources.list.d/cuda-debian12-x86_64.list"]})
    assert p["errors"] == [
        "a driver installed with NVIDIA's .run installer is present (/usr/bin/nvidia-uninstall): remove it with nvidia-uninstall before installing packages",
        "packages from another NVIDIA driver source are installed (cuda-drivers): remove them before installing from the distro source",
        "another NVIDIA driver repository is configured (/etc/apt/sources.list.d/cuda-debian12-x86_64.list): remove it, or choose nvidia_driver_source: nvidia",
    ]


def test_passthrough_gpus_fail_by_default():
    p = plan(gpus=(H100, gpu("0000:b3:00.0", "10de:2330", bound="vfio-pci")))
    assert p["errors"] == [
        "GPUs meant for passthrough are on this host: 0000:b3:00.0 (bound to vfio-pci). The nvidia driver would claim them; "
        "set nvidia_driver_passthrough_policy: exclude to keep them on vfio-pci"
    ]


def test_passthrough_gpus_excluded_when_bound_to_vfio():
    p = plan({"passthrough_policy": "exclude", "passthrough_pci_addresses": ["b3:00.0"]},
             gpus=(H100, gpu("0000:b3:00.0", "10de:2330", bound="vfio-pci")))
    assert p["errors"] == [] and p["gpus"] == ["0000:65:00.0"] and p["excluded_gpus"] == ["0000:b3:00.0"]


def test_listed_passthrough_gpu_not_on_vfio_yet_fails_even_when_excluding():
    p = plan({"passthrough_policy": "exclude", "passthrough_pci_addresses": ["0000:b3:00.0"]}, gpus=(H100, gpu("0000:b3:00.0", "10de:2330")))
    assert p["errors"] == ["passthrough GPUs 0000:b3:00.0 are not bound to vfio-pci yet: bind them first (gpuhost.nvidia.vfio_passthrough), "
                           "or the nvidia driver claims them at the next boot"]
    assert "is not a PCI address" in plan({"passthrough_pci_addresses": ["gpu0"]})["errors"][0]


def test_host_whose_gpus_are_all_for_passthrough_is_skipped():
    p = plan({"passthrough_policy": "exclude"}, gpus=(gpu("0000:b3:00.0", "10de:2330", bound="vfio-pci"),))
    assert (p["act"], p["errors"]) == (False, []) and "meant for passthrough" in p["skip_reason"]


def test_fabric_manager_and_nvlsm_follow_nvswitches_branch_and_architecture():
    assert (plan(nvswitch=4)["fabric_manager"], plan(nvswitch=4)["nvlsm"]) == (True, False)
    p = plan({"branch": "570"}, gpus=(B200,), nvswitch=2)
    assert (p["fabric_manager"], p["nvlsm"], p["errors"]) == (True, True, [])
    assert plan({"branch": "570"}, gpus=(B200,), nvswitch=0)["fabric_manager"] is False
    assert plan({"fabric_manager": "false"}, nvswitch=4)["fabric_manager"] is False


def test_fabric_manager_unavailable_from_the_source_fails():
    p = plan({"source": "distro"}, nvswitch=4)
    assert p["errors"] == ["this host has 4 NVSwitch(es) and needs NVIDIA Fabric Manager, which the distro source on Debian 12.8 "
                           "does not ship: use nvidia_driver_source: nvidia"]


def test_reboot_over_a_local_connection_fails():
    p = plan({"reboot": "if_needed"}, host={"connection": "local"})
    assert p["errors"] == ["nvidia_driver_reboot is if_needed but this host is managed over a local connection: rebooting would kill "
                           "this run. Use nvidia_driver_reboot: never and reboot yourself"]
    assert plan({"reboot": "never"}, host={"connection": "local"})["errors"] == []


def test_every_error_is_reported_at_once():
    p = plan({"source": "distro", "flavour": "proprietary", "cuda_version": "13.0"}, gpus=(RTX5090,), host={"secure_boot": True})
    assert len(p["errors"]) == 4


def test_bad_enumerations():
    p = plan({"flavour": "closed", "source": "elsewhere", "passthrough_policy": "ignore"})
    assert "nvidia_driver_flavour must be one of auto, open, proprietary, got 'closed'" in p["errors"]
    assert "nvidia_driver_source must be one of auto, nvidia, distro, got 'elsewhere'" in p["errors"]
    assert "nvidia_driver_passthrough_policy must be one of fail, exclude, got 'ignore'" in p["errors"]


def test_pci_functions_without_a_richer_source_count_as_gpus():
    functions = [{"pci_bus_id": "0000:3b:00.0", "pci_device_id": "10de:1db6", "type": "gpu"},
                 {"pci_bus_id": "0000:3b:00.1", "pci_device_id": "10de:10f2", "type": "audio"}]
    f = {"present": True, "gpus": [], "pci_functions": functions}
    p = _driver.plan({"source": "distro"}, f, HOST, DEBIAN)
    assert p["gpus"] == ["0000:3b:00.0"] and p["flavour"] == "proprietary"


GTX1070 = gpu("0000:02:00.0", "10de:1b81")  # Pascal


@pytest.mark.parametrize("branch", ["590", "595", "610", "620"])
def test_590_or_later_on_pascal_fails_early_and_names_580(branch):
    p = plan({"branch": branch}, gpus=(GTX1070,))
    assert p["errors"] == [
        "driver branch %s no longer supports Pascal GPU 0000:02:00.0: its last branch is 580; set nvidia_driver_branch: 580" % branch
    ]
    assert plan({"branch": "580"}, gpus=(GTX1070,))["errors"] == []


def test_a_source_default_past_580_names_580_for_pascal():
    caps = copy.deepcopy(DEBIAN)
    caps["sources"]["nvidia"].update(default_branch=595, default_branch_note="its repository has no 580 branch")
    p = plan({}, gpus=(GTX1070,), caps=caps)
    assert p["errors"] == [
        "driver branch 595 no longer supports Pascal GPU 0000:02:00.0: its last branch is 580; branch 595 is the default of the nvidia source "
        "on Debian 12.8 (its repository has no 580 branch): set nvidia_driver_branch: 580 where a source offers it"
    ]


def test_a_repository_that_starts_at_a_branch_refuses_older_ones():
    caps = copy.deepcopy(DEBIAN)
    caps["sources"]["nvidia"].update(min_branch=590, min_branch_note="NVIDIA's debian13 repository begins with 590")
    assert plan({"branch": "580"}, caps=caps)["errors"] == [
        "driver branch 580 is not offered by the nvidia source on Debian 12.8: its repository starts at branch 590: NVIDIA's debian13 "
        "repository begins with 590"
    ]


def test_cuda_13_on_pascal_names_the_last_toolkit():
    p = plan({"branch": "580", "cuda_version": "13.0"}, gpus=(GTX1070,))
    assert p["errors"] == ["Pascal GPU 0000:02:00.0 cannot run CUDA 13.0: CUDA 12.x is the last toolkit for Pascal"]
    assert plan({"branch": "580", "cuda_version": "12.8"}, gpus=(GTX1070,))["errors"] == []


def test_plan_carries_the_branch_lifecycle():
    assert plan()["lifecycle"] == {"designation": "Long Term Support Branch", "end_of_life": "2028-06"}
    assert plan({"branch": "620"})["lifecycle"] is None  # single-sourced: not reported


def test_unconfirmed_cuda_minor_is_an_error_not_a_guess():
    p = plan({"branch": "620", "cuda_version": "13.5"})
    assert p["errors"] == [
        "cannot tell whether driver 620 runs CUDA 13.5: no public source the catalog records says so (docs/sources.md); choose a branch "
        "the catalog knows to run it, or leave nvidia_driver_cuda_version empty"
    ]
    assert plan({"branch": "620", "cuda_version": "13.4"})["errors"] == []  # 615 runs 13.4, and 620 is newer


UBUNTU_NVIDIA_TABLE = {
    "module": {"open": ["nvidia-dkms-{branch}-open"], "proprietary": ["nvidia-dkms-{branch}"]},
    "userspace": ["libnvidia-compute-{branch}", "nvidia-utils-{branch}"],
    "desktop": {"open": ["nvidia-driver-{branch}-open"], "proprietary": ["cuda-drivers-{branch}"]},
    "fabric_manager": ["nvidia-fabricmanager-{branch}"],
    "nvlsm": ["nvlsm"],
    "settings": ["nvidia-compute-utils-{branch}", "nvidia-utils-{branch}"],
    "pinning": "",
    "by_branch": {
        580: {"fabric_manager": ["nvidia-fabricmanager"]},
        590: {
            "module": {"open": ["nvidia-dkms-open"], "proprietary": ["nvidia-dkms"]},
            "userspace": ["libnvidia-compute", "nvidia-utils"],
            "desktop": {"open": ["nvidia-open"], "proprietary": ["cuda-drivers"]},
            "settings": ["nvidia-compute-utils", "nvidia-utils"],
            "pinning": "nvidia-driver-pinning-{pin}",
        },
    },
}


def test_packages_follow_the_branch():
    p580 = _driver.resolve_packages({"branch": 580, "version": None, "flavour": "open"}, UBUNTU_NVIDIA_TABLE)
    assert p580["module"] == {"open": ["nvidia-dkms-580-open"], "proprietary": ["nvidia-dkms-580"]}
    assert (p580["fabric_manager"], p580["pinning"], p580["errors"]) == (["nvidia-fabricmanager"], "", [])
    assert p580["hold"] == sorted(["nvidia-dkms-580-open", "nvidia-dkms-580", "libnvidia-compute-580", "nvidia-utils-580", "nvidia-driver-580-open",
                                   "cuda-drivers-580", "nvidia-fabricmanager", "nvidia-compute-utils-580"])  # not nvlsm
    p595 = _driver.resolve_packages({"branch": 595, "version": None}, UBUNTU_NVIDIA_TABLE)
    expected = (["nvidia-dkms-open"], ["libnvidia-compute", "nvidia-utils"], "nvidia-driver-pinning-595")
    assert (p595["module"]["open"], p595["userspace"], p595["pinning"]) == expected
    exact = _driver.resolve_packages({"branch": 595, "version": "595.71.05"}, UBUNTU_NVIDIA_TABLE)
    assert exact["pinning"] == "nvidia-driver-pinning-595.71.05"
    p535 = _driver.resolve_packages({"branch": 535, "version": None}, UBUNTU_NVIDIA_TABLE)
    assert p535["fabric_manager"] == ["nvidia-fabricmanager-535"]


def test_packages_without_a_branch_report_the_placeholder():
    assert _driver.resolve_packages({"branch": None}, UBUNTU_NVIDIA_TABLE)["errors"][0].startswith("package name 'cuda-drivers-{branch}' needs {branch}")
    flavour = _driver.resolve_packages({"branch": 580}, {"module": {"open": ["linux-modules-nvidia-{branch}-server-open-{kernel_flavour}"]}},
                                       {"kernel_flavour": "aws"})
    assert flavour["module"]["open"] == ["linux-modules-nvidia-580-server-open-aws"]


def test_versionlock_entries():
    names = ["nvidia-driver", "kmod-nvidia-open-dkms", "nvidia-driver"]
    assert _driver.versionlock_dnf4(names, {"branch": 580}) == ["kmod-nvidia-open-dkms-580.*", "nvidia-driver-580.*"]
    assert _driver.versionlock_dnf4(["nvidia-driver"], {"branch": 580, "version": "580.65.06"}) == ["nvidia-driver-580.65.06-*"]
    assert _driver.versionlock_dnf5(["nvidia-driver"], {"branch": 580}) == [
        {"name": "nvidia-driver", "conditions": [{"key": "evr", "comparator": ">=", "value": "3:580"},
                                                 {"key": "evr", "comparator": "<", "value": "3:581"}]}]
    assert _driver.versionlock_dnf5(["nvidia-driver"], {"branch": 580, "version": "580.65.06"})[0]["conditions"][1]["value"] == "3:580.65.06.0"


def test_package_lists_nested_by_yaml_anchors_are_flattened():
    table = {"module": {"open": ["a"]}, "pin": [["b", "c"], "d", None, ""]}
    assert _driver.resolve_packages({"branch": 580}, table)["hold"] == ["a", "b", "c", "d"]


# The versionlock and hold filters build lines of files dnf and apt read: what would add a line, an entry or a glob is
# refused, naming it.
@pytest.mark.parametrize("names, plan_result, problem", [
    (["nvidia-driver\n$(REBOOT)"], {"branch": 580}, "'nvidia-driver\\n$(REBOOT)' is not a package name"),
    (["nvidia-*"], {"branch": 580}, "'nvidia-*' is not a package name"),
    (["nvidia driver"], {"branch": 580}, "is not a package name"),
    (["-nvidia"], {"branch": 580}, "is not a package name"),
    (["nvidia-driver", "a\rb"], {"branch": 580}, "'a\\rb' is not a package name"),
    (["nvidia-driver"], {"version": "580.1\nevil"}, "the plan's version '580.1\\nevil' is not a driver version"),
    (["nvidia-driver"], {"version": "580.*"}, "is not a driver version"),
    (["nvidia-driver"], {"version": 580.65}, "is not a driver version"),
    (["nvidia-driver"], {"branch": "580\nx"}, "the plan's branch '580\\nx' is not a driver branch"),
    (["nvidia-driver"], {"branch": "58*"}, "is not a driver branch"),
    (["nvidia-driver"], {"branch": True}, "is not a driver branch"),
    (["nvidia-driver"], {"branch": None}, "is not a driver branch"),
])
@pytest.mark.parametrize("style", ["dnf4", "dnf5"])
def test_versionlock_refuses_what_would_change_the_files_structure(names, plan_result, problem, style):
    from ansible.errors import AnsibleFilterError
    from ansible_collections.gpuhost.nvidia.plugins.filter import driver as driver_filters
    with pytest.raises(ValueError, match=re.escape(problem)):
        getattr(_driver, "versionlock_" + style)(names, plan_result)
    if plan_result.get("version") or plan_result.get("branch") not in (None, ""):
        with pytest.raises(AnsibleFilterError) as err:
            driver_filters.nvidia_driver_versionlock(names, plan_result, style)
        # The filter checks the plan's shape first (naming plan.version or plan.branch), then the planner's rule.
        text = str(err.value)
        bad = plan_result.get("version") if "version" in plan_result else plan_result.get("branch")
        assert text.startswith("nvidia_driver_versionlock: ")
        assert problem in text or (("plan.version" in text or "plan.branch" in text) and repr(bad) in text), text


@pytest.mark.parametrize("names", [["nvidia-fabricmanager\nPin-Priority: 1001"], ["nvidia-*"], ["a b"]])
def test_lockstep_hold_refuses_names_that_are_not_names(names):
    with pytest.raises(ValueError, match="not package names"):
        _driver.lockstep_hold(names, "580.65.06")
