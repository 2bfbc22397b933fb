# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The converged fast path's planner: every kind of drift is reported, and only an unchanged host is converged."""

from __future__ import annotations

import copy
import json

import pytest

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _converged, _files

DIGEST = _converged.inputs_digest({"role": "nvidia_driver", "variables": {"nvidia_driver_branch": "535"}})
OBSERVED = {
    "files": {"/etc/apt/preferences.d/gpuhost-nvidia-driver.pref": "a" * 64, "/etc/modprobe.d/gpuhost-nouveau.conf": None},
    "packages": {"nvidia-driver": "535.261.03-1", "nvidia-kernel-dkms": "535.261.03-1"},
    "units": {
        "nvidia-persistenced.service": {"load": "loaded", "enabled": "enabled", "active": "active"},
        "gpuhost-gpu-settings.service": {"load": "loaded", "enabled": "enabled", "active": "failed"},
    },
}


def record(confirmed=True):
    return _converged.build_record(DIGEST, copy.deepcopy(OBSERVED), {"nvidia_driver_report": ["nvidia_driver: 535"]}, confirmed)


def drift_after(change):
    observed = copy.deepcopy(OBSERVED)
    digest = change(observed) or DIGEST
    return _converged.compare(record(), digest, observed)


def test_an_unchanged_host_is_converged():
    assert _converged.compare(record(), DIGEST, copy.deepcopy(OBSERVED)) == {"converged": True, "drift": []}


def test_a_record_from_a_run_that_changed_the_host_is_not_converged_yet():
    verdict = _converged.compare(record(confirmed=False), DIGEST, copy.deepcopy(OBSERVED))
    assert verdict == {"converged": False, "drift": [
        "the last full run changed what the role manages: the next full run confirms that it changes nothing"]}


def test_the_digest_ignores_key_order_and_sees_every_value():
    assert _converged.inputs_digest({"a": 1, "b": [1, 2]}) == _converged.inputs_digest({"b": [1, 2], "a": 1})
    assert _converged.inputs_digest({"a": 1}) != _converged.inputs_digest({"a": "1"})
    assert _converged.inputs_digest({"a": [1, 2]}) != _converged.inputs_digest({"a": [2, 1]})


@pytest.mark.parametrize("change, expected", [
    (lambda o: "0" * 64, "the inputs changed since the record"),
    (lambda o: o["files"].update({"/etc/apt/preferences.d/gpuhost-nvidia-driver.pref": "b" * 64}),
     "file /etc/apt/preferences.d/gpuhost-nvidia-driver.pref changed (sha256 bbbbbbbbbbbb, recorded sha256 aaaaaaaaaaaa)"),
    (lambda o: o["files"].update({"/etc/apt/preferences.d/gpuhost-nvidia-driver.pref": None}),
     "file /etc/apt/preferences.d/gpuhost-nvidia-driver.pref is missing (recorded sha256 aaaaaaaaaaaa)"),
    (lambda o: o["files"].update({"/etc/modprobe.d/gpuhost-nouveau.conf": "c" * 64}),
     "file /etc/modprobe.d/gpuhost-nouveau.conf exists now; the record says it was absent"),
    (lambda o: o["packages"].update({"nvidia-driver": None}),
     "package nvidia-driver is not installed (recorded version 535.261.03-1)"),
    (lambda o: o["packages"].update({"nvidia-driver": "535.247.01-1"}),
     "package nvidia-driver is version 535.247.01-1, recorded 535.261.03-1"),
    (lambda o: o["units"]["nvidia-persistenced.service"].update({"enabled": "disabled"}),
     "unit nvidia-persistenced.service is disabled, recorded enabled"),
    (lambda o: o["units"]["nvidia-persistenced.service"].update({"active": "inactive"}),
     "unit nvidia-persistenced.service is inactive, recorded active"),
    (lambda o: o["units"].update({"nvidia-persistenced.service": {"load": "not-found", "enabled": "", "active": "inactive"}}),
     "unit nvidia-persistenced.service is not-found, recorded loaded"),
    (lambda o: o["units"]["nvidia-persistenced.service"].update({"enabled": "masked"}),
     "unit nvidia-persistenced.service is masked, recorded enabled"),
])
def test_each_kind_of_drift_is_named(change, expected):
    verdict = drift_after(change)
    assert verdict["converged"] is False
    assert any(reason.startswith(expected) for reason in verdict["drift"]), verdict["drift"]


def test_a_unit_that_could_not_start_is_not_expected_to_run():
    for active in ("inactive", "failed", "activating"):
        verdict = drift_after(lambda o: o["units"]["gpuhost-gpu-settings.service"].update({"active": active}))
        assert verdict == {"converged": True, "drift": []}


def test_an_item_missing_from_the_observation_counts_as_absent():
    verdict = _converged.compare(record(), DIGEST, {"files": {}, "packages": {}, "units": {}})
    assert not verdict["converged"]
    assert len(verdict["drift"]) == 1 + 2 + 2  # one file was absent already; two packages; two units not loaded


def test_no_record_or_an_unusable_one_means_a_full_run():
    assert _converged.compare(None, DIGEST, OBSERVED)["drift"] == ["no usable record (none written yet): the next run is a full run"]
    for text, problem in [("{", "not valid JSON"), ("[]", "not a JSON object"), ('{"format": 99}', "format 99"),
                          (json.dumps(dict(record(), units=[])), "no units mapping"),
                          (json.dumps(dict(record(), inputs_digest=None)), "no inputs digest"),
                          (json.dumps(dict(record(), confirmed="yes")), "whether a full run confirmed it")]:
        parsed, why = _converged.parse_record(text)
        assert parsed is None and problem in why
        assert problem in _converged.compare(parsed, DIGEST, OBSERVED, why)["drift"][0]


def test_the_record_round_trips_and_lists_what_to_observe():
    text = _files.record_bytes(record()).decode("utf-8")
    parsed, problem = _converged.parse_record(text)
    assert problem is None and parsed == record() and text.endswith("}\n")
    assert _converged.wanted(parsed) == {
        "files": ["/etc/apt/preferences.d/gpuhost-nvidia-driver.pref", "/etc/modprobe.d/gpuhost-nouveau.conf"],
        "packages": ["nvidia-driver", "nvidia-kernel-dkms"],
        "units": ["gpuhost-gpu-settings.service", "nvidia-persistenced.service"],
    }


def test_dpkg_query_output():
    argv = _converged.package_command("apt", ["nvidia-driver", "gone", "removed"])
    assert argv[:2] == ["dpkg-query", "-W"] and argv[-4:] == ["--", "nvidia-driver", "gone", "removed"]
    out = "nvidia-driver\tii \t535.261.03-1\nremoved\trc \t1.0-1\n"
    assert _converged.parse_packages("apt", ["nvidia-driver", "gone", "removed"], out) == {
        "nvidia-driver": "535.261.03-1", "gone": None, "removed": None}


def test_rpm_output_keeps_every_installed_version():
    argv = _converged.package_command("dnf", ["kmod-nvidia", "nvidia-driver", "gone"])
    assert argv[:3] == ["rpm", "-q", "--qf"]
    out = "kmod-nvidia\t0:580.1-1\nkmod-nvidia\t0:575.2-1\nnvidia-driver\t3:580.1-1.el9\npackage gone is not installed\n"
    assert _converged.parse_packages("dnf", ["kmod-nvidia", "nvidia-driver", "gone"], out) == {
        "kmod-nvidia": "0:575.2-1,0:580.1-1", "nvidia-driver": "3:580.1-1.el9", "gone": None}


def test_pacman_output():
    assert _converged.package_command("pacman", ["nvidia-utils"]) == ["pacman", "-Q", "--", "nvidia-utils"]
    assert _converged.parse_packages("pacman", ["nvidia-utils", "gone"], "nvidia-utils 580.1-1\n") == {
        "nvidia-utils": "580.1-1", "gone": None}
    with pytest.raises(ValueError):
        _converged.package_command("zypper", ["x"])


def test_systemctl_show_blocks_follow_the_order_of_the_units():
    units = ["nvidia-persistenced.service", "nope.service"]
    assert _converged.unit_command(units) == [
        "systemctl", "show", "--property=LoadState,UnitFileState,ActiveState", "--"] + units
    out = "LoadState=loaded\nUnitFileState=enabled\nActiveState=failed\n\nLoadState=not-found\nUnitFileState=\nActiveState=inactive\n"
    assert _converged.parse_units(units, out) == {
        "nvidia-persistenced.service": {"load": "loaded", "enabled": "enabled", "active": "failed"},
        "nope.service": {"load": "not-found", "enabled": "", "active": "inactive"},
    }
    assert _converged.parse_units(["x.service"], "")["x.service"]["load"] == "not-found"


@pytest.mark.parametrize("spec, name", [("nvidia-smi", "nvidia-smi"), ("nvidia-smi=535.*", "nvidia-smi"),
                                        ("nvidia-container-toolkit>=1.17", "nvidia-container-toolkit"), (" x ", "x")])
def test_a_version_request_counts_as_its_package_name(spec, name):
    assert _converged.package_name(spec) == name
