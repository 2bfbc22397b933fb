# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""nvidia_smi_settings against hostile input (issue #16): a bad value is bad everywhere, so every option that can be
checked without a GPU is refused on a GPU-less host, a host without a driver and a host with GPUs alike, before
any GPU is looked for, naming the option and the value."""

from __future__ import annotations

import os
import typing as t

import pytest

import hostile

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _settings
from ansible_collections.gpuhost.nvidia.plugins.modules import nvidia_smi_settings as module


@pytest.fixture(params=["no_gpu", "driver_not_loaded", "t4"])
def anywhere(request: t.Any, settings_nvml: t.Any, monkeypatch: pytest.MonkeyPatch, tmp_path: t.Any) -> dict[str, t.Any]:
    """Each host kind, with a record of the GPU reads the module made (none may happen before a refusal)."""
    if request.param == "t4":
        fake = settings_nvml("t4")
    else:
        fake = settings_nvml(request.param)
        request.getfixturevalue("no_pci_gpu" if request.param == "no_gpu" else "pci_gpu_no_module")
    reads: list[str] = []
    original = module._settings_apply.read_state  # pylint: disable=protected-access

    def read_state(*args: t.Any, **kwargs: t.Any) -> t.Any:
        reads.append("read_state")
        return original(*args, **kwargs)

    monkeypatch.setattr(module._settings_apply, "read_state", read_state)  # pylint: disable=protected-access
    root = tmp_path / "run"
    root.mkdir()
    return {"fake": fake, "reads": reads, "root": str(root), "state_path": str(root / "gpuhost" / "settings.json")}


def run(run_module: t.Any, host: dict[str, t.Any], **args: t.Any) -> dict[str, t.Any]:
    full: dict[str, t.Any] = {"state_path": host["state_path"], "persistence_mode": True}
    full.update(args)
    return run_module(module, full)


def refused(result: dict[str, t.Any], host: dict[str, t.Any], before: dict[str, t.Any], option: str, value: t.Any = None,
            show_value: bool = True) -> None:
    hostile.assert_refused(result, option, value, before=before, roots=[host["root"]], show_value=show_value)
    assert host["reads"] == [], "the module looked for GPUs before it refused the request"
    assert host["fake"].setter_calls == []
    assert result.get("skipped") is not True


SELECTOR_CASES = hostile.text_classes("control", "non_ascii", "empty", "huge") + [
    ("only-space", " "), ("leading-space", " 0"),
    ("negative", "-1"), ("beyond-any-host", "64"), ("huge-index", "99999999999999999999"),
    ("uuid-too-short", "GPU-1234"), ("uuid-not-hex", "GPU-zzzzzzzz-1111-4222-8333-444455556666"),
    ("uuid-with-tail", "GPU-5c6d7e8f-1111-4222-8333-444455556666;x"), ("mig-uuid", "MIG-5c6d7e8f-1111-4222-8333-444455556666"),
    ("bus-id-bad-function", "0000:07:00.9"), ("bus-id-too-long", "0000:007:00.0"), ("bus-id-junk", "0000:07:00.0:1"),
    ("colon-alone", ":"),
]


@pytest.mark.parametrize("value", [v for _i, v in SELECTOR_CASES], ids=[i for i, _v in SELECTOR_CASES])
def test_gpu_selectors_refused_on_every_host(run_module, anywhere, value):
    before = hostile.snapshot(anywhere["root"])
    refused(run(run_module, anywhere, gpus=["all", value]), anywhere, before, "gpus[1]", value)


def test_empty_selector_list_refused(run_module, anywhere):
    before = hostile.snapshot(anywhere["root"])
    refused(run(run_module, anywhere, gpus=[]), anywhere, before, "gpus", [])


POWER_CASES = [("zero", 0), ("negative", -50), ("absurd", 1e12), ("infinite", "inf"), ("nan", "nan"), ("negative-zero", -0.0),
               ("above-any-gpu", 5000.5)]


@pytest.mark.parametrize("value", [v for _i, v in POWER_CASES], ids=[i for i, _v in POWER_CASES])
def test_power_limit_refused_on_every_host(run_module, anywhere, value):
    before = hostile.snapshot(anywhere["root"])
    result = run(run_module, anywhere, power_limit=value)
    refused(result, anywhere, before, "power_limit", float(value))


def test_power_limit_of_the_wrong_type(run_module, anywhere):
    before = hostile.snapshot(anywhere["root"])
    refused(run(run_module, anywhere, power_limit="lots"), anywhere, before, "power_limit", show_value=False)


CLOCK_CASES = [("negative", -1), ("zero", 0), ("huge", 10 ** 9)]


@pytest.mark.parametrize("option, keys", [("applications_clocks", ("memory_mhz", "graphics_mhz")), ("locked_clocks", ("min_mhz", "max_mhz"))])
@pytest.mark.parametrize("position", [0, 1])
@pytest.mark.parametrize("value", [v for _i, v in CLOCK_CASES], ids=[i for i, _v in CLOCK_CASES])
def test_clocks_refused_on_every_host(run_module, anywhere, option, keys, position, value):
    clocks = {keys[0]: 1000, keys[1]: 1000}
    clocks[keys[position]] = value
    before = hostile.snapshot(anywhere["root"])
    refused(run(run_module, anywhere, **{option: clocks}), anywhere, before, "%s.%s" % (option, keys[position]), value)


MIG_COUNT_CASES = [("negative", -1), ("beyond-any-gpu", 8), ("huge", 10 ** 9)]


@pytest.mark.parametrize("value", [v for _i, v in MIG_COUNT_CASES], ids=[i for i, _v in MIG_COUNT_CASES])
def test_mig_counts_refused_on_every_host(run_module, anywhere, value):
    before = hostile.snapshot(anywhere["root"])
    refused(run(run_module, anywhere, mig=True, mig_layout=[{"profile": "1g.5gb", "count": value}]), anywhere, before,
            "mig_layout[0].count", value)


def test_too_many_instances_in_the_whole_layout_refused(run_module, anywhere):
    before = hostile.snapshot(anywhere["root"])
    layout = [{"profile": "1g.5gb", "count": 4}, {"profile": "1g.10gb", "count": 4}]
    refused(run(run_module, anywhere, mig=True, mig_layout=layout), anywhere, before, "mig_layout", show_value=False)


PROFILE_CASES = hostile.text_classes("control", "non_ascii", "empty", "huge") + [("shell", "1g.5gb;reboot"), ("words", "three slices")]


@pytest.mark.parametrize("field", ["profile", "compute_instances"])
@pytest.mark.parametrize("value", [v for _i, v in PROFILE_CASES], ids=[i for i, _v in PROFILE_CASES])
def test_mig_profile_names_refused_on_every_host(run_module, anywhere, field, value):
    entry: dict[str, t.Any] = {"profile": "3g.20gb"}
    if field == "profile":
        entry["profile"] = value
    else:
        entry["compute_instances"] = [value]
    before = hostile.snapshot(anywhere["root"])
    refused(run(run_module, anywhere, mig=True, mig_layout=[entry]), anywhere, before, "mig_layout", value)


PATH_CASES = hostile.text_classes("control", "non_ascii", "empty", "huge") + [
    ("relative", "run/gpuhost/settings.json"), ("traversal", "/run/gpuhost/../../etc/settings.json"),
    ("trailing-slash", "/run/gpuhost/"),
]


@pytest.mark.parametrize("value", [v for _i, v in PATH_CASES], ids=[i for i, _v in PATH_CASES])
def test_state_path_refused_on_every_host(run_module, anywhere, value):
    before = hostile.snapshot(anywhere["root"])
    refused(run(run_module, anywhere, state_path=value), anywhere, before, "state_path", value)


@pytest.mark.parametrize("kind", hostile.SPECIAL_KINDS)
def test_unusable_state_path_refused_before_any_gpu_is_read(run_module, anywhere, kind):
    value = hostile.make_special_cases(anywhere["root"])[kind]
    before = hostile.snapshot(anywhere["root"])
    refused(run(run_module, anywhere, state_path=value), anywhere, before, "state_path", value)


def test_valid_request_on_a_gpu_less_host_is_still_skipped(run_module, settings_nvml, no_pci_gpu, tmp_path):
    settings_nvml("no_gpu")
    result = run_module(module, {"gpus": ["GPU-5c6d7e8f-1111-4222-8333-444455556666", "0000:07:00.0", "0", "*A100*"],
                                 "power_limit": 300, "locked_clocks": {"min_mhz": 1000, "max_mhz": 1400},
                                 "mig": True, "mig_layout": [{"profile": "1g.5gb", "count": 7}],
                                 "state_path": str(tmp_path / "s.json")})
    assert result["skipped"] is True and result["state"] == "no_gpu" and "failed" not in result


@pytest.mark.parametrize("value", ["gpu-5c6d7e8f-1111-4222-8333-444455556666", "07:00.0", "NVIDIA A100-SXM4-40GB", "*", "all", "ALL", "7"])
def test_good_selectors_pass_the_static_check(value):
    assert _settings.check_options({"gpus": [value], "state_path": "/run/x.json"}) == []


def test_state_path_directory_is_refused_when_a_record_is_written(run_module, settings_nvml, tmp_path):
    settings_nvml("t4")
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    result = run_module(module, {"locked_clocks": {"min_mhz": 1200, "max_mhz": 1500}, "state_path": str(state_dir)})
    assert result["failed"] and "state_path %r is a directory" % str(state_dir) in result["msg"]
    assert os.listdir(state_dir) == []
