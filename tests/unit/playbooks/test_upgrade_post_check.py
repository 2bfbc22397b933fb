# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The rolling upgrade's targets and post-check (module_utils/_upgrade.py, filters gpu_upgrade_targets and
gpu_upgrade_post_check): what the host really has against the targets, failing closed on whatever it cannot see."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuhost.nvidia.plugins.filter import upgrade
from ansible_collections.gpuhost.nvidia.plugins.module_utils import _upgrade

B = "580.159.04"
NAMES = ["nvidia-persistenced", "nvidia-smi"]


def _db(version: str, names=None, **extra) -> dict:
    """package_facts' layout: name -> [{name, version, ...}]."""
    db = {name: [{"name": name, "version": version, "source": "apt"}] for name in (NAMES if names is None else names)}
    db.update(extra)
    return db


def _facts(loaded: str | None = B, library: str | None = None, present: bool = True, state: str = "ok") -> dict:
    return {"present": present, "state": state, "driver": {
        "version": loaded or library, "kernel_module_loaded": loaded is not None, "kernel_module_version": loaded,
        "library_version": library}}


def _targets(version="", branch="", toolkit="") -> dict:
    wanted, errors = _upgrade.targets(version, branch, toolkit)
    assert not errors, errors
    return wanted


# -- targets --------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("version, branch, toolkit, expected", [
    ("580.159.04", "", "1.18.0", {"driver_version": B, "driver_branch": "580", "toolkit_version": "1.18.0"}),
    ("", "580", "", {"driver_version": "", "driver_branch": "580", "toolkit_version": ""}),
    ("", 580, None, {"driver_version": "", "driver_branch": "580", "toolkit_version": ""}),
    # The driver role takes an exact version in nvidia_driver_branch too.
    ("", "580.159.04", "", {"driver_version": B, "driver_branch": "580", "toolkit_version": ""}),
    ("580.159.04", "580.159.04", "", {"driver_version": B, "driver_branch": "580", "toolkit_version": ""}),
    ("580.159.04", "580", "1.18.0-1", {"driver_version": B, "driver_branch": "580", "toolkit_version": "1.18.0-1"}),
    ("580.65", None, "", {"driver_version": "580.65", "driver_branch": "580", "toolkit_version": ""}),
    (None, None, None, {"driver_version": "", "driver_branch": "", "toolkit_version": ""}),
    (" 580.159.04", "", "", {"driver_version": B, "driver_branch": "580", "toolkit_version": ""}),
])
def test_targets_accepted(version, branch, toolkit, expected):
    assert _upgrade.targets(version, branch, toolkit) == (expected, [])


@pytest.mark.parametrize("version, branch, toolkit, needle", [
    ("580.159.04\n", "", "", "nvidia_driver_version must be a full driver version"),
    ("580.159.04; rm -rf /", "", "", "nvidia_driver_version must be a full driver version"),
    ("580.*", "", "", "nvidia_driver_version must be a full driver version"),
    ("latest", "", "", "nvidia_driver_version must be a full driver version"),
    ("58O.159.04", "", "", "nvidia_driver_version must be a full driver version"),
    ("580.159.04.1", "", "", "nvidia_driver_version must be a full driver version"),
    ("٥٨٠.159.04", "", "", "nvidia_driver_version must be a full driver version"),  # Arabic-Indic digits
    ("580", "", "", "nvidia_driver_version must be a full driver version"),
    (580.6, "", "", "nvidia_driver_version must be a version string"),
    (True, "", "", "nvidia_driver_version must be a version string"),
    (["580.159.04"], "", "", "nvidia_driver_version must be a version string"),
    ("", "58", "", "nvidia_driver_branch must be a branch such as 580"),
    ("", "580\n", "", "nvidia_driver_branch must be a branch such as 580"),
    ("", "580.x", "", "nvidia_driver_branch must be a branch such as 580"),
    ("", "branch-580", "", "nvidia_driver_branch must be a branch such as 580"),
    ("", True, "", "nvidia_driver_branch must be a branch or version string"),
    ("", 580.0, "", "nvidia_driver_branch must be a branch or version string"),
    ("", {"580": 1}, "", "nvidia_driver_branch must be a branch or version string"),
    ("580.159.04", "570", "", "nvidia_driver_version 580.159.04 is not on nvidia_driver_branch 570"),
    ("580.159.04", "580.126.20", "", "name two different drivers"),
    ("", "", "1.18", None),
    ("", "", "1.18.0\n", "nvidia_container_toolkit_version must be a version such as 1.18.0"),
    ("", "", "1.18.0 ", None),
    ("", "", "latest", "nvidia_container_toolkit_version must be a version such as 1.18.0"),
    ("", "", "1.18.0-1;reboot", "nvidia_container_toolkit_version must be a version such as 1.18.0"),
    ("", "", 1.18, "nvidia_container_toolkit_version must be a version string"),
])
def test_targets_refused_naming_the_variable_and_value(version, branch, toolkit, needle):
    wanted, errors = _upgrade.targets(version, branch, toolkit)
    if needle is None:
        assert errors == [], errors
        return
    assert len(errors) == 1 and needle in errors[0], errors
    bad = [v for v in (version, branch, toolkit) if v not in ("", None)]
    assert any(repr(v) in errors[0] or str(v) in errors[0] for v in bad), errors


def test_targets_report_every_error_at_once():
    wanted, errors = _upgrade.targets("x", "y", "z")
    assert wanted == {"driver_version": "", "driver_branch": "", "toolkit_version": ""}
    assert [e.split()[0] for e in errors] == ["nvidia_driver_version", "nvidia_driver_branch", "nvidia_container_toolkit_version"]
    assert upgrade.gpu_upgrade_targets("x", "y", "z")["errors"] == errors


# -- installed versions -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("raw, expected", [
    ("580.159.04-1", B), ("3:580.65.06", "580.65.06"), ("580.65.06", "580.65.06"), ("535.261.03-1~deb12u1", "535.261.03"),
    ("580.95.05-0ubuntu0.24.04.2", "580.95.05"), ("590.48.01-2", "590.48.01"), ("1:4.5.2-1", "4.5.2"),
    ("580.159.04\n", None), ("", None), (None, None), (580, None), ("v580.1", None), ("580.159.04 -1", None),
])
def test_upstream_of_installed_versions(raw, expected):
    assert _upgrade.upstream(raw) == expected


# -- the driver check: (facts, packages, names, targets, check_loaded) -> errors --------------------------------------

CASES = {
    # Everything at the target, loaded too.
    "all at the target": (_facts(), _db(B + "-1"), NAMES, _targets(B), True, []),
    "branch target": (_facts(), _db(B + "-1"), NAMES, _targets(branch="580"), True, []),
    "rpm epoch, no release": (_facts(), _db("580.159.04"), NAMES, _targets(B), True, []),
    "library file agrees": (_facts(library=B), _db(B + "-1"), NAMES, _targets(B), True, []),
    "library only (role did not run)": (_facts(library=B), {}, [], _targets(B), True, []),
    "container: installed only": (_facts(None, present=False, state="no_gpu"), _db(B + "-1"), NAMES, _targets(B), False, []),
    "no target: one version": (_facts(), _db(B + "-1"), NAMES, _targets(), True, []),
    # The packages are not the target: the old version, another branch.
    "packages at the old version": (_facts(), _db("580.126.20-1"), NAMES, _targets(B), True,
                                    ["the installed driver is not the target 580.159.04: nvidia-persistenced 580.126.20-1, nvidia-smi 580.126.20-1",
                                     "the loaded nvidia kernel module is 580.159.04 but"]),
    "other branch": (_facts("590.48.01"), _db("590.48.01-2"), NAMES, _targets(branch="580"), True,
                     ["not the target branch 580: nvidia-persistenced 590.48.01-2", "the loaded nvidia kernel module is 590.48.01, not the target branch 580"]),
    "branch 58 is not 580": (_facts("58.1.2"), _db("58.1.2-1"), NAMES, _targets(branch="580"), False, ["not the target branch 580"]),
    "one package behind": (_facts(), _db(B + "-1", names=["nvidia-smi"], **{"nvidia-persistenced": [{"version": "580.126.20-1"}]}),
                           NAMES, _targets(B), True, ["not the target 580.159.04: nvidia-persistenced 580.126.20-1"]),
    "library behind the packages": (_facts(library="580.126.20"), _db(B + "-1"), NAMES, _targets(B), True,
                                    ["not the target 580.159.04: libnvidia-ml.so 580.126.20"]),
    "two versions installed of one package": (_facts(), _db(B + "-1", **{"nvidia-smi": [{"version": B + "-1"}, {"version": "580.126.20-1"}]}),
                                              NAMES, _targets(B), True, ["nvidia-smi 580.126.20-1"]),
    "no target: packages disagree": (_facts(None), _db(B + "-1", names=["nvidia-smi"], **{"nvidia-persistenced": [{"version": "580.126.20-1"}]}),
                                     NAMES, _targets(), False, ["the installed driver is not one version"]),
    # What it cannot see fails the host.
    "package missing": (_facts(), _db(B + "-1", names=["nvidia-smi"]), NAMES, _targets(B), True,
                        ["the driver's package nvidia-persistenced is not installed"]),
    "package list empty": (_facts(), _db(B + "-1", names=["nvidia-smi"], **{"nvidia-persistenced": []}), NAMES, _targets(B), True,
                           ["nvidia-persistenced is not installed"]),
    "version unreadable": (_facts(), _db(B + "-1", names=["nvidia-smi"], **{"nvidia-persistenced": [{"version": None}]}), NAMES,
                           _targets(B), True, ["nvidia-persistenced has the version None, which is no version"]),
    "entry not a dict": (_facts(), _db(B + "-1", names=["nvidia-smi"], **{"nvidia-persistenced": ["580.159.04-1"]}), NAMES,
                         _targets(B), True, ["which is no version"]),
    "nothing to compare": (_facts(), {}, [], _targets(B), True, ["no installed driver to compare with the target"]),
    "nothing to compare, no target": (_facts(None, present=False, state="no_gpu"), {}, [], _targets(), False,
                                      ["no installed driver to compare"]),
    "library version unreadable": (_facts(library="580.159.04\n"), {}, [], _targets(B), True, ["libnvidia-ml.so has the version"]),
    "module not loaded": (_facts(None, state="driver_not_loaded"), _db(B + "-1"), NAMES, _targets(B), True,
                          ["the nvidia kernel module is not loaded (the GPU facts state driver_not_loaded)",
                           "gpuhost_upgrade_check_loaded: false"]),
    "no GPU seen, loaded check asked": (_facts(None, present=False, state="no_gpu"), _db(B + "-1"), NAMES, _targets(B), True,
                                        ["not loaded (no NVIDIA GPU on the PCI bus)"]),
    "no facts at all": ({}, _db(B + "-1"), NAMES, _targets(B), True, ["not loaded (the GPU facts state unknown)"]),
    "loaded, version unreadable": ({"present": True, "state": "ok", "driver": {"kernel_module_loaded": True, "kernel_module_version": None}},
                                   _db(B + "-1"), NAMES, _targets(B), True, ["loaded but its version cannot be read"]),
    "loaded, version garbage": ({"present": True, "state": "ok", "driver": {"kernel_module_loaded": True, "kernel_module_version": "x; y"}},
                                _db(B + "-1"), NAMES, _targets(B), True, ["loaded but its version cannot be read ('x; y')"]),
    "loaded flag not a bool": ({"present": True, "state": "ok", "driver": {"kernel_module_loaded": "yes", "kernel_module_version": B}},
                               _db(B + "-1"), NAMES, _targets(B), True, ["not loaded"]),
    "old module still loaded": (_facts("580.126.20"), _db(B + "-1"), NAMES, _targets(B), True,
                                ["the loaded nvidia kernel module is 580.126.20, not the target 580.159.04: the new module loads at the next boot"]),
    "no target: old module still loaded": (_facts("580.126.20"), _db(B + "-1"), NAMES, _targets(), True,
                                           ["the loaded nvidia kernel module is 580.126.20 but the installed driver is 580.159.04"]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_driver_check(name):
    facts, packages, names, wanted, check_loaded, needles = CASES[name]
    result = _upgrade.check_driver(facts, packages, names, wanted, check_loaded)
    text = " | ".join(result["errors"])
    assert result["ok"] is (not needles), text
    for needle in needles:
        assert needle in text, text
    if not needles:
        assert result["errors"] == []


def test_driver_check_reports_what_it_saw_and_the_versions():
    result = _upgrade.check_driver(_facts(library=B), _db(B + "-1"), NAMES, _targets(B), True,
                                   packages_before=_db("580.126.20-1"))
    assert result["installed"] == B and result["loaded"] == B and result["before"] == "580.126.20"
    assert result["seen"] == ["package nvidia-persistenced 580.159.04-1", "package nvidia-smi 580.159.04-1",
                              "libnvidia-ml.so.580.159.04", "loaded module 580.159.04"]


@pytest.mark.parametrize("packages_before, facts_before, expected", [
    ({}, None, None),
    ({}, {"driver": {"version": "570.172.08"}}, "570.172.08"),
    (_db("580.126.20-1"), {"driver": {"version": "570.172.08"}}, "580.126.20"),
    (_db("580.126.20-1", names=["nvidia-smi"], **{"nvidia-persistenced": [{"version": "580.95.05-1"}]}), None, "580.126.20 / 580.95.05"),
    ({}, {"driver": {"version": None}}, None),
    ({}, {"driver": "580"}, None),
])
def test_version_before(packages_before, facts_before, expected):
    result = _upgrade.check_driver(_facts(), _db(B + "-1"), NAMES, _targets(B), True, packages_before, facts_before)
    assert result["before"] == expected


def test_disagreeing_packages_have_no_single_installed_version():
    result = _upgrade.check_driver(_facts(None), _db(B + "-1", names=["nvidia-smi"], **{"nvidia-persistenced": [{"version": "580.126.20-1"}]}),
                                   NAMES, _targets(), False)
    assert result["installed"] is None


# -- the toolkit, and the whole post-check through the filter -------------------------------------------------------

@pytest.mark.parametrize("installed, target, ok", [
    ("1.18.0-1", "1.18.0", True), ("1.18.0", "1.18.0", True), ("1.18.0-1", "1.18.0-1", True),
    ("1.17.8-1", "1.18.0", False), ("1.18.01-1", "1.18.0", False), ("1.18.0.1-1", "1.18.0", False), ("1.18.0-2", "1.18.0-1", False),
    (None, "1.18.0", False),
])
def test_toolkit_check(installed, target, ok):
    packages = {"nvidia-container-toolkit": [{"version": installed}]}
    version, errors = _upgrade.check_toolkit(packages, target)
    assert (errors == []) is ok, errors
    if not ok:
        assert "not the target %s" % target in errors[0]


def test_toolkit_not_installed_fails():
    version, errors = _upgrade.check_toolkit({}, "1.18.0")
    assert version is None and errors == ["nvidia-container-toolkit is not installed, not the target 1.18.0"]


def test_post_check_filter_collects_driver_and_toolkit():
    targets = upgrade.gpu_upgrade_targets("580.126.20", None, "1.18.0")
    packages = _db(B + "-1", **{"nvidia-container-toolkit": [{"version": "1.17.8-1"}]})
    result = upgrade.gpu_upgrade_post_check({"nvidia_gpu": _facts(None, present=False, state="no_gpu")}, packages, targets,
                                            names=NAMES, check_loaded=False)
    assert not result["ok"]
    assert result["errors"] == [
        "the installed driver is not the target 580.126.20: nvidia-persistenced 580.159.04-1, nvidia-smi 580.159.04-1",
        "nvidia-container-toolkit is 1.17.8-1, not the target 1.18.0",
    ]
    assert result["driver_after"] == B and result["toolkit_after"] == "1.17.8-1"


def test_post_check_filter_skips_what_is_switched_off():
    targets = upgrade.gpu_upgrade_targets(B, None, "1.18.0")
    result = upgrade.gpu_upgrade_post_check({}, {}, targets, driver=False, toolkit=False)
    assert result["ok"] and result["errors"] == []


@pytest.mark.parametrize("kwargs, needle", [
    ({"packages": ["nvidia-smi"]}, "packages must be the package database"),
    ({"packages": "nvidia-smi"}, "packages must be the package database"),
    ({"names": "nvidia-smi"}, "names must be a list of package names"),
    ({"names": ["nvidia-smi", "x y"]}, "'x y' is not a package name"),
    ({"names": ["nvidia-smi\n"]}, "is not a package name"),
    ({"names": [None]}, "None is not a package name"),
    ({"check_loaded": "false"}, "check_loaded must be true or false"),
    ({"driver": 1}, "driver must be true or false"),
    ({"facts": ["not", "facts"]}, "the GPU facts: expected a dict"),
    ({"targets": "580"}, "targets: expected a dict"),
    ({"targets": {"errors": ["nvidia_driver_version must be ..."]}}, "the targets are wrong: nvidia_driver_version"),
    ({"targets": {"driver_version": 580}}, "targets.driver_version must be a string"),
    ({"packages_before": [1]}, "packages must be the package database"),
])
def test_post_check_filter_refuses_bad_arguments(kwargs, needle):
    args = {"facts": _facts(), "packages": _db(B + "-1"), "targets": upgrade.gpu_upgrade_targets(B), "names": NAMES}
    args.update(kwargs)
    with pytest.raises(AnsibleFilterError) as raised:
        upgrade.gpu_upgrade_post_check(**args)
    assert needle in str(raised.value)
