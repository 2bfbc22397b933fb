# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Hostile input (#16) for the nvidia_driver role's planner: the values it writes into repository files, an apt pin
and a modprobe.d comment are refused when they could break out of their field, naming the variable and the value."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _driver

DEBIAN = {
    "supported": True,
    "versions": ["12"],
    "sources": {
        "nvidia": {"available": True, "branches": [], "default_branch": 580, "flavours": ["open", "proprietary"], "dkms": True,
                   "fabric_manager": True},
        "distro": {"available": True, "branches": [535], "default_branch": 535, "flavours": ["open", "proprietary"], "dkms": True},
    },
}
ARCH = {
    "supported": True,
    "versions": [],
    "sources": {"distro": {"available": True, "branches": [], "default_branch": None, "flavours": ["open"], "dkms": True}},
}
HOST = {"distribution": "Debian", "distribution_version": "12.8", "distribution_major_version": "12", "kernel": "6.1.0-28-amd64",
        "connection": "ssh", "secure_boot": False, "headers_present": True, "runfile_install": [], "installed_packages": [],
        "foreign_repo_files": []}


def gpu(bus, device, bound=None):
    return {"pci_bus_id": bus, "pci_device_id": device, "bound_driver": bound}


H100 = gpu("0000:65:00.0", "10de:2330")
FPR = "C95B 321B 61E8 8C18 09C4  F759 DDCA E044 F796 ECB0"
ROLE = Path(__file__).resolve().parents[3] / "roles" / "nvidia_driver"


def plan(request, gpus=(H100,), caps=None, host=None):
    facts = {"present": bool(gpus), "gpus": list(gpus), "nvswitch_count": 0}
    return _driver.plan({"force": True, **request}, facts, {**HOST, **(host or {})}, copy.deepcopy(caps or DEBIAN))


# Each hostile value, the variable it is given as, and what the message must say.
URLS = ["nvidia_driver_repo_url", "nvidia_driver_repo_key_url", "nvidia_driver_epel_repo_url", "nvidia_driver_epel_repo_key_url"]
HOSTILE_URLS = [
    ("file:///srv/repo\nSigLevel = Never", "holds the control character '\\n' (U+000A)"),
    ("https://mirror.example/nvidia\r\nSigned-By: /tmp/evil.asc", "holds the control character '\\r' (U+000D)"),
    ("https://mirror.example/a b", "holds whitespace"),
    ("https://mirror.example/\u202envidia", "holds the non-ASCII character"),
    ("ftp://mirror.example/nvidia", "is not an http(s):// or file:// URL"),
    ("file:srv/repo", "is not an http(s):// or file:// URL"),
    ("/srv/gpuhost-repos/apt", "is not an http(s):// or file:// URL"),
    ("https://" + "a" * 2100, "is longer than 2048 characters"),
    ([], "is a list, not a string"),
]


@pytest.mark.parametrize("option", URLS)
@pytest.mark.parametrize("value,problem", HOSTILE_URLS)
def test_urls_that_could_break_out_of_their_field_are_refused(option, value, problem):
    p = plan({option.replace("nvidia_driver_", ""): value})
    assert [e for e in p["errors"] if e.startswith(option + ":")] == [
        e for e in p["errors"] if e.startswith(option + ": ") and problem in e
    ] != []


@pytest.mark.parametrize("value", ["https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/",
                                   "file:///srv/gpuhost-repos/pacman", "file:/srv/gpuhost-repos/apt/",
                                   "https://mirror.example/$repo/os/$arch"])
def test_real_urls_pass(value):
    assert plan({"repo_url": value, "repo_key_url": "file:///srv/key.asc"})["errors"] == []


@pytest.mark.parametrize("option", ["nvidia_driver_repo_key_fingerprint", "nvidia_driver_epel_repo_key_fingerprint"])
@pytest.mark.parametrize("value,problem", [
    (FPR + "\nSigned-By: /tmp/evil.asc", "holds the control character '\\n'"),
    ("C95B321B61E88C1809C4F759DDCAE044F796ECB", "is not a key fingerprint of 40 or 64 hex digits"),
    ("C95B321B61E88C1809C4F759DDCAE044F796ECBZ", "is not a key fingerprint of 40 or 64 hex digits"),
    ("0x" + FPR.replace(" ", "") + "Z", "is not a key fingerprint of 40 or 64 hex digits"),
    ("C95B 321B 61E8 8C18 09C4   F759 DDCA E044 F796 ECB0", "is not a key fingerprint of 40 or 64 hex digits"),
])
def test_fingerprints_must_be_hex_digits(option, value, problem):
    errors = plan({option.replace("nvidia_driver_", ""): value})["errors"]
    assert len([e for e in errors if e.startswith(option + ": ")]) == 1
    assert problem in next(e for e in errors if e.startswith(option + ": "))


def test_spaced_and_plain_fingerprints_pass():
    assert plan({"repo_key_fingerprint": FPR})["errors"] == []
    assert plan({"repo_key_fingerprint": FPR.replace(" ", "")})["errors"] == []
    # A 0x prefix and lower case are accepted too (#19): the key module normalises them (module_utils/_gpg.py).
    assert plan({"repo_key_fingerprint": "0x" + FPR.replace(" ", "").lower()})["errors"] == []


@pytest.mark.parametrize("value,problem", [
    ("gpuhost]\nSigLevel = Never\n[x", "holds the control character '\\n'"),
    ("gpuhost test", "holds whitespace"),
    ("gpuhost]", "is not a pacman repository name"),
    ("../core", "is not a pacman repository name"),
    ("options", "is reserved"),
    ("local", "is reserved"),
    ("x" * 65, "is longer than 64 characters"),
])
def test_pacman_repository_names_stay_one_section_header(value, problem):
    errors = plan({"pacman_repo_name": value, "source": "distro"}, caps=ARCH,
                  host={"distribution": "Archlinux", "distribution_major_version": "", "distribution_version": ""})["errors"]
    assert [e for e in errors if e.startswith("nvidia_driver_pacman_repo_name: ")] != []
    assert problem in next(e for e in errors if e.startswith("nvidia_driver_pacman_repo_name: "))


def test_the_role_default_pacman_name_and_empty_values_pass():
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    assert _driver.request_errors({"pacman_repo_name": defaults["nvidia_driver_pacman_repo_name"], "repo_url": "",
                                   "repo_key_url": None, "repo_key_fingerprint": ""}) == []


def test_input_errors_stop_a_host_without_gpus_too():
    p = _driver.plan({"repo_url": "https://x/\n"}, {"present": False}, HOST, copy.deepcopy(DEBIAN))
    assert p["act"] is False
    assert p["errors"] == ["nvidia_driver_repo_url: 'https://x/\\n' holds the control character '\\n' (U+000A)"]


def test_every_repository_variable_of_the_role_reaches_the_check():
    """preflight.yml passes each REQUEST_RULES key from its role variable, so no written value escapes the check."""
    tasks = yaml.safe_load((ROLE / "tasks" / "preflight.yml").read_text())
    decide = next(t for t in tasks if "__nvidia_driver_request" in (t.get("ansible.builtin.set_fact") or {}))
    # The request is the task's variable, set as a fact and checked by the plan filter in the same task.
    assert decide["ansible.builtin.set_fact"]["__nvidia_driver_request"] == "{{ __nvidia_driver_request_now }}"
    assert decide["ansible.builtin.set_fact"]["__nvidia_driver_plan"].strip().startswith("{{ __nvidia_driver_request_now | gpuhost.nvidia.nvidia_driver_plan(")
    request = decide["vars"]["__nvidia_driver_request_now"]
    for key in _driver.REQUEST_RULES:
        assert request[key] == "{{ nvidia_driver_%s }}" % key


@pytest.mark.parametrize("version", ["550.54.15\n", "550.54.15\nPin-Priority: 1001", "550.54.15\n\nPackage: *", "550.54.15 ",
                                     "550.54.15-1", "550.54", "550.54.15.1", "\uff15\uff15\uff10.54.15"])
def test_versions_are_matched_whole(version):
    """A version reaches the apt pin (Pin: version), dnf versionlock lines and package specs: nothing after it may."""
    p = plan({"version": version})
    stripped = version.strip()
    if stripped in ("550.54.15", "550.54"):
        # Surrounding whitespace is dropped before the check; the version used is the stripped one.
        assert p["errors"] == [] and p["version"] == stripped
    else:
        assert p["version"] is None
        assert "nvidia_driver_version must be a full driver version such as 580.65.06, got %r" % stripped in p["errors"]


def test_candidates_with_trailing_text_are_not_versions():
    assert _driver.check_candidate({"branch": 550, "version": None}, ["550.54.15\nx", "550.54.15-1"], {}) == []
    assert _driver.check_candidate({"branch": 550, "version": None}, ["550.54.15\nx"], {}) == [
        "no installable NVIDIA driver package: is the repository configured and enabled?"
    ]


def test_passthrough_gpus_are_written_as_canonical_addresses_only():
    bound = gpu("00000000:3B:00.0", "10de:2330", bound="vfio-pci")
    p = plan({"passthrough_policy": "exclude"}, gpus=(H100, bound))
    assert p["errors"] == []
    assert p["excluded_gpus"] == ["0000:3b:00.0"]


@pytest.mark.parametrize("bus", [None, "", "0000:3b:00.0\n# evil", "0000:3b:00.0 softdep x", "3b:00.0;", "../../x"])
def test_a_passthrough_gpu_without_a_pci_address_is_refused(bus):
    bad = gpu(bus, "10de:2330", bound="vfio-pci")
    p = plan({"passthrough_policy": "exclude"}, gpus=(H100, bad))
    assert p["excluded_gpus"] == []
    assert p["errors"] == [
        "the GPU facts list 1 GPU(s) meant for passthrough without a PCI address (dddd:bb:dd.f) to keep them on vfio-pci "
        "by: gather ansible_facts.nvidia_gpu with gpuhost.nvidia.nvidia_gpu_facts"
    ]
    # Also when every GPU is meant for passthrough (the host is then skipped, not driven).
    p = plan({"passthrough_policy": "exclude", "force": False}, gpus=(bad,))
    assert p["act"] is False and p["excluded_gpus"] == [] and len(p["errors"]) == 1


@pytest.mark.parametrize("address", ["0000:3b:00.0\n", "0000:3b:00.0\nsoftdep", "3b:00.0 ", "0000:3b:00.8", "../3b:00.0"])
def test_passthrough_addresses_must_be_pci_addresses(address):
    p = plan({"passthrough_pci_addresses": [address], "passthrough_policy": "exclude"})
    if address.strip() in ("3b:00.0", "0000:3b:00.0"):
        # Normalised to dddd:bb:dd.f (surrounding whitespace dropped) before anything uses it.
        assert p["errors"] == []
    else:
        assert any(e.startswith("nvidia_driver_passthrough_pci_addresses: ") for e in p["errors"])
