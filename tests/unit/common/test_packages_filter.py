# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The shared-prerequisite filters (plugins/filter/packages.py): gpuhost_ensured_packages, subtracted and added to."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuhost.nvidia.plugins.filter import packages


def test_filters_are_exposed():
    assert set(packages.FilterModule().filters()) == {"packages_to_ensure", "packages_ensured", "package_plan"}


def test_nothing_ensured_keeps_every_entry_in_order_without_repeats():
    assert packages.packages_to_ensure(["python3-yaml", "nvidia-smi", "python3-yaml"]) == ["python3-yaml", "nvidia-smi"]
    assert packages.packages_to_ensure(["python3-yaml"], None) == ["python3-yaml"]
    assert packages.packages_to_ensure(None, ["python3-yaml"]) == []
    assert packages.packages_to_ensure("python3-yaml", []) == ["python3-yaml"]


def test_ensured_bare_names_are_left_out():
    ensured = ["nvidia-smi", "python3-yaml", "python3-dnf-plugin-versionlock"]
    assert packages.packages_to_ensure(["python3-yaml"], ensured) == []
    assert packages.packages_to_ensure(["nvidia-persistenced", "nvidia-smi", "python3-pynvml"], ensured) == [
        "nvidia-persistenced", "python3-pynvml"]


def test_an_entry_with_a_version_always_stays():
    ensured = ["nvidia-container-toolkit", "nvidia-smi", "datacenter-gpu-manager-4-core"]
    wanted = ["nvidia-container-toolkit=1.17.8-1", "nvidia-smi=535.*", "datacenter-gpu-manager-4-core=1:4.2.3-1",
              "nvidia-container-toolkit-1.17.8"]
    assert packages.packages_to_ensure(wanted, ensured) == wanted


def test_ensured_adds_names_and_versioned_entries_and_keeps_the_earlier_ones_first():
    assert packages.packages_ensured(None, ["python3-yaml"]) == ["python3-yaml"]
    assert packages.packages_ensured(["nvidia-smi"], ["nvidia-smi=535.*", "python3-yaml", "python3-yaml"]) == [
        "nvidia-smi", "nvidia-smi=535.*", "python3-yaml"]
    assert packages.packages_ensured(["a"], []) == ["a"]


def test_what_one_role_adds_the_next_one_leaves_out():
    ensured = packages.packages_ensured([], ["nvidia-container-toolkit=1.17.8-1", "python3-yaml"])
    assert ensured == ["nvidia-container-toolkit", "nvidia-container-toolkit=1.17.8-1", "python3-yaml"]
    assert packages.packages_to_ensure(["python3-yaml"], ensured) == []
    # The same role again at another version (upgrade.yml): its versioned entries are not skipped.
    assert packages.packages_to_ensure(["nvidia-container-toolkit=1.18.0-1"], ensured) == ["nvidia-container-toolkit=1.18.0-1"]
    assert packages.packages_to_ensure(["nvidia-container-toolkit"], ensured) == []


def test_a_versioned_entry_ensured_as_such_is_left_out_and_no_other_version():
    # The driver's transaction installed gpu_settings' userland at the driver's branch (#21, one transaction).
    ensured = packages.packages_ensured(["nvidia-driver"], ["nvidia-persistenced=580.*", "nvidia-smi=580.*", "python3-pynvml"])
    assert packages.packages_to_ensure(["nvidia-persistenced=580.*", "nvidia-smi=580.*", "python3-pynvml"], ensured) == []
    assert packages.packages_to_ensure(["nvidia-smi=590.*", "nvidia-smi=580.1*"], ensured) == ["nvidia-smi=590.*", "nvidia-smi=580.1*"]


def test_not_a_list_is_refused():
    with pytest.raises(AnsibleFilterError, match="expected a list of package names, got dict"):
        packages.packages_to_ensure({"python3-yaml": True})
    with pytest.raises(AnsibleFilterError, match="packages_ensured: expected a list"):
        packages.packages_ensured(5, ["a"])


def test_the_plan_takes_each_request_in_order_with_the_userland_for_those_that_ask():
    plan = [{"role": "gpuhost.nvidia.nvidia_container_toolkit", "packages": ["nvidia-container-toolkit=1.17.8-1", "python3-yaml"],
             "pending": False, "first_install": ["nvidia-container-toolkit"]},
            {"role": "gpuhost.nvidia.gpu_settings", "userland": True, "packages": ["python3-pynvml", "python3-yaml"]}]
    taken = packages.package_plan(plan, ["nvidia-persistenced=580.*", "nvidia-smi=580.*"], ["nvidia-driver"])
    assert taken == {"install": ["nvidia-container-toolkit=1.17.8-1", "python3-yaml", "nvidia-persistenced=580.*", "nvidia-smi=580.*",
                                 "python3-pynvml"],
                     "predicted": [], "roles": ["gpuhost.nvidia.nvidia_container_toolkit", "gpuhost.nvidia.gpu_settings"],
                     "files": [], "absent": []}
    assert packages.package_plan(None) == packages.package_plan([]) == {"install": [], "predicted": [], "roles": [], "files": [], "absent": []}


HOLD = {"path": "/etc/apt/preferences.d/gpuhost-nvidia-container-toolkit.pref",
        "content": "# Ansible managed (gpuhost.nvidia.nvidia_container_toolkit)\nExplanation: hold the NVIDIA Container Toolkit at 1.17.8\n"
                   "Package: nvidia-container-toolkit nvidia-container-toolkit-base libnvidia-container-tools libnvidia-container1\n"
                   "Pin: version 1.17.8-*\nPin-Priority: 1001\n"}


def test_the_files_of_a_taken_request_are_returned_for_the_pin_call_root_owned():
    plan = [{"role": "t", "packages": ["nvidia-container-toolkit=1.17.8-1"], "first_install": ["nvidia-container-toolkit"],
             "files": [HOLD], "absent": []},
            {"role": "u", "packages": ["other"], "absent": ["/etc/apt/preferences.d/gpuhost-u.pref"]}]
    taken = packages.package_plan(plan, [], [])
    assert taken["files"] == [dict(HOLD, owner="root", group="root", mode="0644")]
    assert taken["absent"] == ["/etc/apt/preferences.d/gpuhost-u.pref"]
    # Left to its role (a first_install name is installed): its files are not written by the driver either.
    assert packages.package_plan(plan, [], ["nvidia-container-toolkit"])["files"] == []


HOSTILE_FILES = [
    ({"path": "/etc/apt/sources.list.d/evil.list", "content": "deb http://x/ y z\n"}, r"not apt preferences files .*sources\.list\.d"),
    ({"path": "/etc/apt/preferences.d/../apt.conf.d/99x.pref", "content": HOLD["content"]}, r"not apt preferences files"),
    ({"path": "/etc/apt/preferences.d/gpuhost x.pref", "content": HOLD["content"]}, r"not apt preferences files"),
    ({"path": "/etc/apt/preferences.d/gpuhost.conf", "content": HOLD["content"]}, r"not apt preferences files"),
    (dict(HOLD, content=HOLD["content"].replace("Pin: version 1.17.8-*", "Pin: release o=evil")), r"'Pin: release o=evil'"),
    (dict(HOLD, content=HOLD["content"].replace("Package: nvidia-container-toolkit", "Package: nvidia-*")),
     r"not an apt preferences file of exact package names"),
    (dict(HOLD, content=HOLD["content"].replace("Package: nvidia-container-toolkit", "Package: /nvidia/")), r"exact package names"),
    (dict(HOLD, content=HOLD["content"] + "APT::Get::AllowUnauthenticated true;\n"), r"'APT::Get::AllowUnauthenticated true;'"),
    (dict(HOLD, content=HOLD["content"].replace("Pin-Priority: 1001", "Pin-Priority: 1001\r")), r"Pin-Priority"),
    (dict(HOLD, content=HOLD["content"].rstrip("\n")), r"no newline at its end"),
    (dict(HOLD, mode="0777"), r"expected a mapping of path and content"),
    ("/etc/apt/preferences.d/x.pref", r"expected a mapping of path and content"),
]


@pytest.mark.parametrize("item, message", HOSTILE_FILES)
def test_a_request_file_that_is_not_an_apt_preferences_file_is_refused(item, message):
    with pytest.raises(AnsibleFilterError, match=r"gpuhost_package_plan\[0\].*" + message):
        packages.package_plan([{"role": "t", "packages": [], "files": [item]}], [], [])


@pytest.mark.parametrize("absent", [["/etc/apt/apt.conf.d/70debconf"], ["/etc/apt/preferences.d/../../shadow.pref"], "x.pref"])
def test_a_request_removing_anything_but_a_preferences_file_is_refused(absent):
    with pytest.raises(AnsibleFilterError, match=r"gpuhost_package_plan\[0\]"):
        packages.package_plan([{"role": "t", "packages": [], "absent": absent}], [], [])


def test_a_request_whose_first_install_is_installed_is_left_to_its_role():
    plan = [{"role": "t", "packages": ["nvidia-container-toolkit=1.18.0-1"], "first_install": ["nvidia-container-toolkit-base", "nvidia-container-toolkit"]}]
    assert packages.package_plan(plan, [], ["nvidia-container-toolkit"])["install"] == []
    assert packages.package_plan(plan, [], ["libnvidia-container1"])["install"] == ["nvidia-container-toolkit=1.18.0-1"]


def test_a_pending_request_is_predicted_not_installed():
    """Check mode before the toolkit's repository exists: reported and ensured, never given to apt's simulation."""
    plan = [{"role": "t", "packages": ["nvidia-container-toolkit", "python3-yaml"], "pending": True, "first_install": ["nvidia-container-toolkit"]},
            {"role": "g", "userland": True, "packages": ["python3-yaml"]}]
    taken = packages.package_plan(plan, ["nvidia-smi=580.*"])
    assert taken["predicted"] == ["nvidia-container-toolkit", "python3-yaml"]
    assert taken["install"] == ["nvidia-smi=580.*"]


@pytest.mark.parametrize("plan, message", [
    ({"role": "g"}, r"gpuhost_package_plan: expected a list of requests"),
    (["python3-yaml"], r"gpuhost_package_plan\[0\]: expected a mapping"),
    ([{"role": "g", "packages": "python3-yaml"}], r"gpuhost_package_plan\[0\]\.packages: expected a list of package names"),
    ([{"role": "g", "packages": ["ok"]}, {"packages": ["python3-yaml; rm -rf /", "-oAPT::x=1"]}],
     r"gpuhost_package_plan\[1\]\.packages: not package names \(name or name=version\): 'python3-yaml; rm -rf /', '-oAPT::x=1'"),
    ([{"role": "g", "first_install": ["Bad Name"]}], r"gpuhost_package_plan\[0\]\.first_install: not package names"),
    ([{"role": "g", "packages": [], "pakages": []}], r"gpuhost_package_plan\[0\]: unknown keys pakages"),
    ([{"role": "g", "packages": [5]}], r"not package names"),
])
def test_a_bad_plan_is_refused_naming_the_request_and_the_values(plan, message):
    with pytest.raises(AnsibleFilterError, match=message):
        packages.package_plan(plan, [], [])
