# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""nvidia_smi_settings driven through the fake NVML: change, idempotence, check mode, pending, bad input, no driver."""

from __future__ import annotations

import json
import os
import typing as t

import pytest

import fake_pynvml

from conftest import ClockedFakeNVML, settings_profile  # pylint: disable=import-error
from ansible_collections.gpuhost.nvidia.plugins.modules import nvidia_smi_settings as module

HERE = os.path.dirname(os.path.abspath(__file__))
OWN_XML = os.path.normpath(os.path.join(HERE, "..", "fixtures", "nvidia-smi-xml"))


@pytest.fixture
def state_path(tmp_path: t.Any) -> str:
    return str(tmp_path / "run" / "gpuhost" / "nvidia_smi_settings.json")


@pytest.fixture
def settle(run_module: t.Any, state_path: str) -> t.Callable[..., dict[str, dict[str, t.Any]]]:
    """check mode, real run, check mode again, real run again (as community.docker's integration tests do)."""

    def run(fake: ClockedFakeNVML, args: dict[str, t.Any]) -> dict[str, dict[str, t.Any]]:
        args = dict(args, state_path=state_path)
        out = {}
        before = len(fake.setter_calls)
        out["check"] = run_module(module, args, check_mode=True)
        assert fake.setter_calls[before:] == [], "check mode called an NVML setter"
        out["first"] = run_module(module, args)
        setters_after_first = len(fake.setter_calls)
        out["check_again"] = run_module(module, args, check_mode=True)
        out["second"] = run_module(module, args)
        assert len(fake.setter_calls) == setters_after_first, "the second run called a setter: %s" % fake.setter_calls[setters_after_first:]
        for key in out:
            assert not out[key].get("failed"), out[key]
        return out

    return run


def _gpu(fake: ClockedFakeNVML, index: int = 0) -> dict[str, t.Any]:
    return fake.gpu(index)


# -- each setting changes, a second run reports no change, check mode calls no setter -------------------------
CASES = [
    # profile, args, NVML setter, expected state in the fake profile (key, value)
    ("t4", {"persistence_mode": False}, "nvmlDeviceSetPersistenceMode", ("persistence_mode", 0)),
    ("rtx3090", {"persistence_mode": True}, "nvmlDeviceSetPersistenceMode", ("persistence_mode", 1)),
    ("t4", {"compute_mode": "DEFAULT"}, "nvmlDeviceSetComputeMode", ("compute_mode", 0)),
    ("a100_mig", {"compute_mode": "PROHIBITED"}, "nvmlDeviceSetComputeMode", ("compute_mode", 2)),
    ("h100_sxm_8x_nvswitch", {"compute_mode": "EXCLUSIVE_PROCESS"}, "nvmlDeviceSetComputeMode", ("compute_mode", 3)),
    ("t4", {"power_limit": 65}, "nvmlDeviceSetPowerManagementLimit", ("power_limit_mw", 65000)),
    ("rtx3090", {"power_limit": 280.5}, "nvmlDeviceSetPowerManagementLimit", ("power_limit_mw", 280500)),
    ("h100_sxm_8x_nvswitch", {"power_limit": 500}, "nvmlDeviceSetPowerManagementLimit", ("power_limit_mw", 500000)),
    (
        "t4",
        {"applications_clocks": {"memory_mhz": 5001, "graphics_mhz": 1590}},
        "nvmlDeviceSetApplicationsClocks",
        ("applications_clocks", {"memory_mhz": 5001, "graphics_mhz": 1590}),
    ),
    (
        "a100_mig",
        {"applications_clocks": {"memory_mhz": 1215, "graphics_mhz": 1410}},
        "nvmlDeviceSetApplicationsClocks",
        ("applications_clocks", {"memory_mhz": 1215, "graphics_mhz": 1410}),
    ),
    ("t4", {"locked_clocks": {"min_mhz": 1200, "max_mhz": 1500}}, "nvmlDeviceSetGpuLockedClocks", ("locked_clocks", {"min_mhz": 1200, "max_mhz": 1500})),
    ("h100_sxm_8x_nvswitch", {"locked_clocks": {"reset": True}}, "nvmlDeviceResetGpuLockedClocks", ("locked_clocks", None)),
]


@pytest.mark.parametrize("profile, args, setter, expected", CASES, ids=["%s-%s" % (c[0], next(iter(c[1]))) for c in CASES])
def test_setting_changes_then_is_idempotent(settings_nvml, settle, profile, args, setter, expected):
    fake = settings_nvml(profile)
    out = settle(fake, args)
    count = len(fake.visible_gpus)
    assert out["check"]["changed"] is True
    assert out["first"]["changed"] is True
    assert out["check_again"]["changed"] is False
    assert out["second"]["changed"] is False
    assert [c[0] for c in fake.setter_calls] == [setter] * count
    key, value = expected
    assert all(fake.gpu(i).get(key) == value for i in range(count))
    # Check mode reports exactly what the real run did.
    assert out["check"]["gpus"] == out["first"]["gpus"] or [g["changes"] for g in out["check"]["gpus"]] == [
        g["changes"] for g in out["first"]["gpus"]
    ]
    assert out["check"]["diff"] == out["first"]["diff"]
    assert out["check"]["applied"] == []
    assert len(out["first"]["applied"]) == count
    assert out["second"]["msg"] == "%d GPU(s) already as requested" % count


def test_application_clocks_reset(settings_nvml, settle):
    fake = settings_nvml("t4")
    fake.gpu(0)["applications_clocks"] = {"memory_mhz": 5001, "graphics_mhz": 1590}
    out = settle(fake, {"applications_clocks": {"reset": True}})
    assert out["first"]["changed"] and not out["second"]["changed"]
    assert [c[0] for c in fake.setter_calls] == ["nvmlDeviceResetApplicationsClocks"]
    change = out["first"]["gpus"][0]["changes"][0]
    assert change == {
        "setting": "applications_clocks",
        "before": {"memory_mhz": 5001, "graphics_mhz": 1590},
        "after": {"memory_mhz": 5001, "graphics_mhz": 585},
    }


def test_application_clocks_already_default_is_no_change(settings_nvml, run_module, state_path):
    fake = settings_nvml("t4")
    result = run_module(module, {"applications_clocks": {"reset": True}, "state_path": state_path})
    assert result["changed"] is False and fake.setter_calls == []


def test_locked_clocks_are_recorded_and_compared_with_the_record(settings_nvml, settle, state_path):
    fake = settings_nvml("t4")
    out = settle(fake, {"locked_clocks": {"min_mhz": 1200, "max_mhz": 1500}})
    assert out["check"]["gpus"][0]["changes"][0]["before"] is None
    with open(state_path, encoding="utf-8") as handle:
        assert json.load(handle) == {"GPU-3e4f5a6b-3333-4444-8555-666677778888": {"min_mhz": 1200, "max_mhz": 1500}}
    # A new range is a change again; unlocking too.
    out = settle(fake, {"locked_clocks": {"min_mhz": 1300, "max_mhz": 1500}})
    assert out["first"]["gpus"][0]["changes"][0]["before"] == {"min_mhz": 1200, "max_mhz": 1500}
    out = settle(fake, {"locked_clocks": {"reset": True}})
    assert out["first"]["changed"] and not out["second"]["changed"]
    assert fake.gpu(0)["locked_clocks"] is None


def test_check_mode_writes_no_record(settings_nvml, run_module, state_path):
    settings_nvml("t4")
    result = run_module(module, {"locked_clocks": {"min_mhz": 1200, "max_mhz": 1500}, "state_path": state_path}, check_mode=True)
    assert result["changed"] is True
    assert not os.path.exists(state_path)
    assert not os.path.exists(os.path.dirname(state_path))


def test_several_settings_in_one_run(settings_nvml, settle):
    fake = settings_nvml("h100_sxm_8x_nvswitch")
    out = settle(
        fake,
        {
            "gpus": ["1", "2"],
            "persistence_mode": False,
            "compute_mode": "EXCLUSIVE_PROCESS",
            "power_limit": 450,
            "applications_clocks": {"memory_mhz": 2619, "graphics_mhz": 1980},
        },
    )
    assert [(c[0], c[1]) for c in fake.setter_calls] == [
        ("nvmlDeviceSetPersistenceMode", 1),
        ("nvmlDeviceSetComputeMode", 1),
        ("nvmlDeviceSetPowerManagementLimit", 1),
        ("nvmlDeviceSetApplicationsClocks", 1),
        ("nvmlDeviceSetPersistenceMode", 2),
        ("nvmlDeviceSetComputeMode", 2),
        ("nvmlDeviceSetPowerManagementLimit", 2),
        ("nvmlDeviceSetApplicationsClocks", 2),
    ]
    assert out["first"]["msg"] == "8 setting(s) changed on 2 GPU(s)"
    assert [g["index"] for g in out["first"]["gpus"]] == [1, 2]
    assert fake.gpu(0)["power_limit_mw"] == 700000
    diff = out["first"]["diff"]
    key = "GPU 1 GPU-0a1b2c3d-0000-4000-8000-000000000001"
    assert diff["before"][key]["power_limit"] == 700.0 and diff["after"][key]["power_limit"] == 450.0


@pytest.mark.parametrize(
    "selector, indexes",
    [
        (["all"], list(range(8))),
        (["3"], [3]),
        (["GPU-0a1b2c3d-0000-4000-8000-000000000005"], [5]),
        (["gpu-0a1b2c3d-0000-4000-8000-000000000005"], [5]),
        (["0000:9A:00.0"], [4]),
        (["00000000:9a:00.0"], [4]),
        (["9a:00.0"], [4]),
        (["NVIDIA H100 80GB HBM3"], list(range(8))),
        (["*h100*"], list(range(8))),
        (["0", "GPU-0a1b2c3d-0000-4000-8000-000000000000", "0000:18:00.0"], [0]),
    ],
)
def test_gpu_selection(settings_nvml, run_module, state_path, selector, indexes):
    fake = settings_nvml("h100_sxm_8x_nvswitch")
    result = run_module(module, {"gpus": selector, "power_limit": 600, "state_path": state_path})
    assert [g["index"] for g in result["gpus"]] == indexes
    assert sorted(c[1] for c in fake.setter_calls) == indexes


# -- ECC and MIG: pending until reset or reboot ---------------------------------------------------------------
def test_ecc_change_is_pending_and_not_reported_again(settings_nvml, settle):
    fake = settings_nvml("h100_sxm_8x_nvswitch")
    out = settle(fake, {"gpus": ["1"], "ecc": False})
    first, second = out["first"], out["second"]
    assert first["changed"] and not second["changed"]
    assert fake.gpu(1)["ecc"] == [1, 0]
    for result in (out["check"], first, out["check_again"], second):
        assert result["gpus"][0]["pending"] == [{"setting": "ecc", "current": True, "pending": False}]
        assert result["reboot_required"] is True
        assert result["reset_required"] is True
        assert result["reasons"] == [
            "GPU 1 (0000:2a:00.0, NVIDIA H100 80GB HBM3): ECC mode change pending (enabled -> disabled); it takes effect after a GPU reset or a reboot"
        ]
    assert [c[0] for c in fake.setter_calls] == ["nvmlDeviceSetEccMode"]


def test_pending_ecc_set_back_is_a_change_that_clears_the_pending_state(settings_nvml, settle):
    fake = settings_nvml("t4")  # ECC on, pending off
    out = settle(fake, {"ecc": True})
    assert out["first"]["changed"] and not out["second"]["changed"]
    assert fake.gpu(0)["ecc"] == [1, 1]
    assert out["first"]["gpus"][0]["pending"] == [] and out["first"]["reboot_required"] is False


def test_pending_ecc_already_requested_is_no_change(settings_nvml, run_module, state_path):
    fake = settings_nvml("t4")  # ECC on, pending off
    result = run_module(module, {"ecc": False, "state_path": state_path})
    assert result["changed"] is False and fake.setter_calls == []
    assert result["reboot_required"] is True and result["reset_required"] is True
    assert "ECC mode change pending (enabled -> disabled)" in result["reasons"][0]


def test_mig_enable_is_pending(settings_nvml, settle):
    fake = settings_nvml("h100_sxm_8x_nvswitch")
    out = settle(fake, {"gpus": ["2"], "mig": True})
    assert out["first"]["changed"] and not out["second"]["changed"]
    assert fake.gpu(2)["mig"] == [0, 1]
    assert out["second"]["gpus"][0]["pending"] == [{"setting": "mig", "current": False, "pending": True}]
    assert out["second"]["reboot_required"] is True


def test_busy_gpu_pending_change_names_the_processes_and_is_not_resettable(settings_nvml, run_module, state_path):
    fake = settings_nvml("h100_sxm_8x_nvswitch")  # GPU 0 runs pid 4242 (python3)
    result = run_module(module, {"gpus": ["0"], "ecc": False, "state_path": state_path})
    assert result["changed"] is True
    assert result["reboot_required"] is True
    assert result["reset_required"] is False
    assert result["reasons"][0].endswith("a reset is blocked by running processes 4242 (python3)")
    assert [c[0] for c in fake.setter_calls] == ["nvmlDeviceSetEccMode"]


def test_reset_gpus_makes_the_pending_change_current(settings_nvml, run_module, state_path, smi_reset, fake_smi):
    fake = settings_nvml("h100_sxm_8x_nvswitch")
    calls = smi_reset(fake)
    args = {"gpus": ["1"], "ecc": False, "reset_gpus": True, "state_path": state_path}
    check = run_module(module, args, smi=fake_smi, check_mode=True)
    assert check["changed"] is True and calls == [] and fake.setter_calls == []
    assert check["msg"].endswith("1 GPU(s) would be reset")
    result = run_module(module, args, smi=fake_smi)
    assert calls == [[fake_smi.path, "--gpu-reset", "-i", "0000:2a:00.0"]]
    assert fake.gpu(1)["ecc"] == [0, 0]
    assert result["gpus"][0]["pending"] == [] and result["reboot_required"] is False and result["reset_required"] is False
    assert result["applied"][-1] == "GPU 1 (0000:2a:00.0, NVIDIA H100 80GB HBM3): GPU reset"
    again = run_module(module, args, smi=fake_smi)
    assert again["changed"] is False and len(calls) == 1


def test_reset_gpus_never_resets_a_gpu_with_processes(settings_nvml, run_module, state_path, smi_reset, fake_smi):
    fake = settings_nvml("h100_sxm_8x_nvswitch")
    calls = smi_reset(fake)
    result = run_module(module, {"gpus": ["0", "1"], "ecc": False, "reset_gpus": True, "state_path": state_path}, smi=fake_smi)
    assert result["failed"] is True
    assert result["msg"] == (
        "GPU 0 (0000:18:00.0, NVIDIA H100 80GB HBM3): reset_gpus: the GPU needs a reset for ECC but processes are running on it: "
        "4242 (python3); it is never reset while in use"
    )
    assert fake.setter_calls == [] and calls == []


def test_reset_gpus_needs_nvidia_smi(settings_nvml, run_module, state_path):
    fake = settings_nvml("t4")
    result = run_module(module, {"ecc": False, "reset_gpus": True, "state_path": state_path})
    assert result["failed"] and result["msg"] == "reset_gpus needs the nvidia-smi binary, which is not in PATH"
    assert fake.setter_calls == []


# -- MIG layout -----------------------------------------------------------------------------------------------
A100_LAYOUT = [{"profile": "3g.20gb", "compute_instances": ["1c.3g.20gb", "2c.3g.20gb"]}, {"profile": "1g.5gb", "count": 2}]


def test_mig_layout_matching_the_gpu_is_no_change(settings_nvml, run_module, state_path):
    fake = settings_nvml("a100_mig")
    result = run_module(module, {"mig": True, "mig_layout": A100_LAYOUT, "state_path": state_path})
    assert result["changed"] is False and fake.setter_calls == []
    assert result["gpus"][0]["settings"]["mig_layout"] == [
        {"profile": "3g.20gb", "compute_instances": ["1c.3g.20gb", "2c.3g.20gb"]},
        {"profile": "1g.5gb", "compute_instances": ["1g.5gb"]},
        {"profile": "1g.5gb", "compute_instances": ["1g.5gb"]},
    ]


def test_mig_layout_adds_instances(settings_nvml, settle):
    fake = settings_nvml("a100_mig")
    fake.gpu(0)["processes"] = []
    out = settle(fake, {"mig_layout": A100_LAYOUT + [{"profile": "2g.10gb", "compute_instances": []}]})
    assert out["first"]["changed"] and not out["second"]["changed"]
    # GPU instance ids 1, 7 and 8 exist: the new one is 9; profile 1 is 2 slices for both kinds.
    assert [c[:4] for c in fake.setter_calls] == [
        ("nvmlDeviceCreateGpuInstance", 0, 1),
        ("nvmlGpuInstanceCreateComputeInstance", 0, 9, 1),
    ]
    assert sorted(gi["profile"] for gi in fake.gpu(0)["gpu_instances"]) == ["1g.5gb", "1g.5gb", "2g.10gb", "3g.20gb"]
    assert out["check"]["diff"] == out["first"]["diff"]


def test_mig_layout_replaces_instances_that_do_not_match(settings_nvml, settle):
    fake = settings_nvml("a100_mig")
    fake.gpu(0)["processes"] = []
    out = settle(fake, {"mig_layout": [{"profile": "3g.20gb"}, {"profile": "4g.20gb", "compute_instances": ["2c.4g.20gb", "2c.4g.20gb"]}]})
    assert [c[:4] for c in fake.setter_calls] == [
        ("nvmlComputeInstanceDestroy", 0, 1, 0),
        ("nvmlComputeInstanceDestroy", 0, 1, 1),
        ("nvmlGpuInstanceDestroy", 0, 1),
        ("nvmlComputeInstanceDestroy", 0, 7, 0),
        ("nvmlGpuInstanceDestroy", 0, 7),
        ("nvmlComputeInstanceDestroy", 0, 8, 0),
        ("nvmlGpuInstanceDestroy", 0, 8),
        # The larger GPU instance first; its id is 1 again, the next one 2.
        ("nvmlDeviceCreateGpuInstance", 0, 3),
        ("nvmlGpuInstanceCreateComputeInstance", 0, 1, 1),
        ("nvmlGpuInstanceCreateComputeInstance", 0, 1, 1),
        ("nvmlDeviceCreateGpuInstance", 0, 2),
        ("nvmlGpuInstanceCreateComputeInstance", 0, 2, 2),
    ]
    assert not out["second"]["changed"]
    assert out["first"]["gpus"][0]["settings"]["mig_layout"] == [
        {"profile": "4g.20gb", "compute_instances": ["2c.4g.20gb", "2c.4g.20gb"]},
        {"profile": "3g.20gb", "compute_instances": ["3g.20gb"]},
    ]


def test_mig_layout_empty_destroys_everything(settings_nvml, settle):
    fake = settings_nvml("a100_mig")
    fake.gpu(0)["processes"] = []
    out = settle(fake, {"mig_layout": []})
    assert fake.gpu(0)["gpu_instances"] == []
    assert out["first"]["gpus"][0]["settings"]["mig_layout"] == []


def test_mig_layout_refuses_to_destroy_instances_in_use(settings_nvml, run_module, state_path):
    fake = settings_nvml("a100_mig")  # pid 5150 in GI 1, pid 5151 in GI 7
    result = run_module(module, {"mig_layout": [{"profile": "7g.40gb"}], "power_limit": 300, "state_path": state_path})
    assert result["failed"] is True
    assert result["msg"] == (
        "GPU 0 (0000:07:00.0, NVIDIA A100-SXM4-40GB): mig_layout would destroy MIG instances that processes are using: "
        "5150 (trainer) in GPU instance 1, 5151 (notebook) in GPU instance 7; stop them first"
    )
    assert fake.setter_calls == []


def test_mig_layout_keeps_busy_instances_it_does_not_need_to_touch(settings_nvml, run_module, state_path):
    fake = settings_nvml("a100_mig")
    fake.gpu(0)["processes"] = [{"pid": 5150, "name": "trainer", "type": "C", "used_mib": 9000, "gi": 1, "ci": 0}]
    layout = [{"profile": "3g.20gb", "compute_instances": ["1c.3g.20gb", "2c.3g.20gb"]}, {"profile": "2g.10gb"}]
    result = run_module(module, {"mig_layout": layout, "state_path": state_path})
    assert result["changed"] is True
    assert [c[:3] for c in fake.setter_calls] == [
        ("nvmlComputeInstanceDestroy", 0, 7),
        ("nvmlGpuInstanceDestroy", 0, 7),
        ("nvmlComputeInstanceDestroy", 0, 8),
        ("nvmlGpuInstanceDestroy", 0, 8),
        ("nvmlDeviceCreateGpuInstance", 0, 1),
        ("nvmlGpuInstanceCreateComputeInstance", 0, 2),
    ]


def test_mig_layout_waits_for_pending_mig_mode(settings_nvml, settle):
    fake = settings_nvml("h100_sxm_8x_nvswitch")
    out = settle(fake, {"gpus": ["3"], "mig": True, "mig_layout": [{"profile": "3g.40gb", "count": 2}]})
    assert [c[0] for c in fake.setter_calls] == ["nvmlDeviceSetMigMode"]
    assert out["second"]["messages"] == [
        "GPU 3 (0000:5d:00.0, NVIDIA H100 80GB HBM3): mig_layout is applied once MIG mode is active; it is disabled now (pending: enabled)"
    ]
    # After the reset (or a reboot) MIG is on and the layout is created.
    fake.reset("0000:5d:00.0")
    out = settle(fake, {"gpus": ["3"], "mig": True, "mig_layout": [{"profile": "3g.40gb", "count": 2}]})
    assert out["first"]["changed"] and not out["second"]["changed"]
    assert [gi["profile"] for gi in fake.gpu(3)["gpu_instances"]] == ["3g.40gb", "3g.40gb"]


# -- bad input fails before any change, naming the GPU and the allowed values ---------------------------------
BAD = [
    (
        "power limit above the maximum",
        "a100_mig",
        {"power_limit": 500, "persistence_mode": False},
        "GPU 0 (0000:07:00.0, NVIDIA A100-SXM4-40GB): power_limit 500 W is outside the range this GPU allows: 100 to 400 W",
    ),
    (
        "power limit below the minimum",
        "t4",
        {"power_limit": 59.5},
        "GPU 0 (0000:00:1e.0, Tesla T4): power_limit 59.5 W is outside the range this GPU allows: 60 to 70 W",
    ),
    (
        "unknown UUID",
        "t4",
        {"gpus": ["GPU-00000000-dead-beef-0000-000000000000"], "persistence_mode": False},
        "gpus: no GPU matches 'GPU-00000000-dead-beef-0000-000000000000'. GPUs on this host (index, UUID, PCI bus id, name): "
        "0 GPU-3e4f5a6b-3333-4444-8555-666677778888 0000:00:1e.0 Tesla T4",
    ),
    (
        "unknown index",
        "t4",
        {"gpus": ["0", "1"], "persistence_mode": False},
        "gpus: no GPU matches '1'. GPUs on this host (index, UUID, PCI bus id, name): 0 GPU-3e4f5a6b-3333-4444-8555-666677778888 0000:00:1e.0 Tesla T4",
    ),
    (
        "unknown PCI bus id and model",
        "t4",
        {"gpus": ["0000:01:00.0", "NVIDIA A100*"], "persistence_mode": False},
        "gpus: no GPU matches '0000:01:00.0', 'NVIDIA A100*'. GPUs on this host (index, UUID, PCI bus id, name): "
        "0 GPU-3e4f5a6b-3333-4444-8555-666677778888 0000:00:1e.0 Tesla T4",
    ),
    (
        "MIG on a GPU without MIG",
        "t4",
        {"mig": True, "persistence_mode": False},
        "GPU 0 (0000:00:1e.0, Tesla T4): mig: this GPU does not support MIG (the driver reports MIG mode as not supported); "
        "MIG-capable GPUs on this host: none",
    ),
    (
        "MIG layout on a GPU without MIG",
        "rtx3090",
        {"mig_layout": [{"profile": "1g.5gb"}]},
        "GPU 0 (0000:01:00.0, NVIDIA GeForce RTX 3090): mig: this GPU does not support MIG (the driver reports MIG mode as not supported); "
        "MIG-capable GPUs on this host: none",
    ),
    (
        "application memory clock not supported",
        "t4",
        {"applications_clocks": {"memory_mhz": 6000, "graphics_mhz": 1590}, "compute_mode": "DEFAULT"},
        "GPU 0 (0000:00:1e.0, Tesla T4): applications_clocks: memory_mhz 6000 is not a supported memory clock; supported: 5001, 405 MHz",
    ),
    (
        "application graphics clock not in the list for that memory clock",
        "t4",
        {"applications_clocks": {"memory_mhz": 405, "graphics_mhz": 1590}},
        "GPU 0 (0000:00:1e.0, Tesla T4): applications_clocks: graphics_mhz 1590 is not supported with memory_mhz 405; "
        "supported: 645, 540, 420, 300 MHz",
    ),
    (
        "application graphics clock off the table (long list shown as a range)",
        "a100_mig",
        {"applications_clocks": {"memory_mhz": 1215, "graphics_mhz": 1400}},
        "GPU 0 (0000:07:00.0, NVIDIA A100-SXM4-40GB): applications_clocks: graphics_mhz 1400 is not supported with memory_mhz 1215; "
        "supported: 210 MHz to 1410 MHz (81 values)",
    ),
    (
        "locked clocks outside the supported graphics clocks",
        "t4",
        {"locked_clocks": {"min_mhz": 100, "max_mhz": 1600}},
        "GPU 0 (0000:00:1e.0, Tesla T4): locked_clocks: min_mhz 100 is outside the supported graphics clocks, 300 to 1590 MHz; "
        "GPU 0 (0000:00:1e.0, Tesla T4): locked_clocks: max_mhz 1600 is outside the supported graphics clocks, 300 to 1590 MHz",
    ),
    (
        "application clocks not supported (GeForce)",
        "rtx3090",
        {"applications_clocks": {"memory_mhz": 9751, "graphics_mhz": 1695}},
        "GPU 0 (0000:01:00.0, NVIDIA GeForce RTX 3090): applications_clocks: the driver reports application clocks as not supported on this GPU",
    ),
    (
        "ECC not supported (GeForce)",
        "rtx3090",
        {"ecc": True, "persistence_mode": True},
        "GPU 0 (0000:01:00.0, NVIDIA GeForce RTX 3090): ecc: the driver reports ECC mode as not supported on this GPU",
    ),
    (
        "MIG profile the GPU does not have",
        "a100_mig",
        {"mig_layout": [{"profile": "1g.10gb"}]},
        "GPU 0 (0000:07:00.0, NVIDIA A100-SXM4-40GB): mig_layout: GPU instance profile 1g.10gb is not available; "
        "available profiles: 1g.5gb, 2g.10gb, 3g.20gb, 4g.20gb, 7g.40gb",
    ),
    (
        "MIG layout larger than the GPU",
        "a100_mig",
        {"mig_layout": [{"profile": "4g.20gb", "count": 2}]},
        "GPU 0 (0000:07:00.0, NVIDIA A100-SXM4-40GB): mig_layout needs 8 slices but the GPU has 7 "
        "(profiles: 1g.5gb=1, 2g.10gb=2, 3g.20gb=3, 4g.20gb=4, 7g.40gb=7)",
    ),
    (
        "compute instances larger than their GPU instance",
        "a100_mig",
        {"mig_layout": [{"profile": "3g.20gb", "compute_instances": ["2c.3g.20gb", "2c.3g.20gb"]}]},
        "GPU 0 (0000:07:00.0, NVIDIA A100-SXM4-40GB): mig_layout: the compute instances 2c.3g.20gb, 2c.3g.20gb need 4 slices "
        "but a 3g.20gb GPU instance has 3",
    ),
    (
        "a MIG layout with MIG turned off",
        "a100_mig",
        {"mig": False, "mig_layout": [{"profile": "7g.40gb"}]},
        "mig_layout declares MIG instances but mig is false; set mig: true or drop mig_layout",
    ),
    (
        "compute instance of another GPU instance profile",
        "a100_mig",
        {"mig_layout": [{"profile": "3g.20gb", "compute_instances": ["1c.4g.20gb"]}]},
        "mig_layout: compute instance '1c.4g.20gb' does not belong to GPU instance profile 3g.20gb",
    ),
    (
        "a malformed profile name",
        "a100_mig",
        {"mig_layout": [{"profile": "three slices"}]},
        "mig_layout: 'three slices' is not a GPU instance profile name such as 1g.5gb or 3g.20gb",
    ),
    ("locked clocks upside down", "t4", {"locked_clocks": {"min_mhz": 1500, "max_mhz": 1200}}, "locked_clocks: min_mhz 1500 is above max_mhz 1200"),
    (
        "application clocks with reset: false and no clocks",
        "t4",
        {"applications_clocks": {"reset": False}},
        "applications_clocks needs memory_mhz and graphics_mhz, or reset: true",
    ),
]


@pytest.mark.parametrize("profile, args, message", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input_fails_before_any_change(settings_nvml, run_module, state_path, profile, args, message):
    fake = settings_nvml(profile)
    result = run_module(module, dict(args, state_path=state_path))
    assert result["failed"] is True
    assert result["msg"] == message
    assert fake.setter_calls == []
    assert not os.path.exists(state_path)


def test_setting_reported_as_not_supported(settings_nvml, run_module, state_path):
    profile = settings_profile("t4")
    profile["gpus"][0]["persistence_mode"] = None
    profile["gpus"][0]["power_limit_constraints_mw"] = None
    fake = settings_nvml(profile)
    result = run_module(module, {"persistence_mode": True, "power_limit": 65, "compute_mode": "DEFAULT", "state_path": state_path})
    assert result["errors"] == [
        "GPU 0 (0000:00:1e.0, Tesla T4): persistence_mode: the driver reports persistence mode as not supported on this GPU",
        "GPU 0 (0000:00:1e.0, Tesla T4): power_limit: the driver reports power management limits as not supported on this GPU",
    ]
    assert fake.setter_calls == []


def test_errors_on_several_gpus_are_all_reported(settings_nvml, run_module, state_path):
    profile = settings_profile("h100_sxm_8x_nvswitch")
    profile["gpus"][2]["power_limit_constraints_mw"] = [200000, 350000]
    profile["gpus"][5]["power_limit_constraints_mw"] = [200000, 350000]
    fake = settings_nvml(profile)
    result = run_module(module, {"power_limit": 400, "state_path": state_path})
    assert [e.split(":", 1)[0] for e in result["errors"]] == ["GPU 2 (0000", "GPU 5 (0000"]
    assert fake.setter_calls == []


def test_mig_capable_gpus_are_named(settings_nvml, run_module, state_path):
    profile = settings_profile("h100_sxm_8x_nvswitch")
    profile["gpus"][7]["mig"] = None
    fake = settings_nvml(profile)
    result = run_module(module, {"gpus": ["7"], "mig": True, "state_path": state_path})
    assert result["msg"].endswith(
        "MIG-capable GPUs on this host: " + ", ".join("GPU %d (%s, NVIDIA H100 80GB HBM3)" % (i, g["pci_bus_id"]) for i, g in enumerate(profile["gpus"][:7]))
    )
    assert fake.setter_calls == []


def test_setter_failure_reports_what_was_applied(settings_nvml, run_module, state_path):
    profile = settings_profile("t4")
    profile["gpus"][0]["errors"] = {"nvmlDeviceSetPowerManagementLimit": "NoPermission"}
    fake = settings_nvml(profile)
    result = run_module(module, {"persistence_mode": False, "power_limit": 65, "state_path": state_path})
    assert result["failed"] and result["changed"] is True
    assert result["msg"] == "GPU 0 (0000:00:1e.0, Tesla T4): power_limit 70.0 -> 65.0 failed: Insufficient Permissions"
    assert result["applied"] == ["GPU 0 (0000:00:1e.0, Tesla T4): persistence_mode True -> False"]
    assert [c[0] for c in fake.setter_calls] == ["nvmlDeviceSetPersistenceMode", "nvmlDeviceSetPowerManagementLimit"]


# -- no driver, no GPU ----------------------------------------------------------------------------------------
def test_driver_not_loaded_is_reported_cleanly(settings_nvml, run_module, state_path, pci_gpu_no_module):
    fake = settings_nvml("driver_not_loaded")
    result = run_module(module, {"gpus": ["GPU-5c6d7e8f-1111-4222-8333-444455556666"], "power_limit": 300, "state_path": state_path})
    assert "failed" not in result
    assert (result["changed"], result["skipped"], result["state"]) == (False, True, "driver_not_loaded")
    assert result["msg"].startswith("NVML: nvmlInit failed: Driver Not Loaded")
    assert result["gpus"] == [] and fake.setter_calls == []


def test_unknown_nvml_error_without_kernel_module_is_driver_not_loaded(settings_nvml, run_module, state_path, pci_gpu_no_module, fake_smi):
    # What a container without /dev/nvidia* shows: NVML and nvidia-smi say "Unknown Error".
    profile = settings_profile("t4")
    profile["nvml"]["init_error"] = "Unknown"
    settings_nvml(profile)
    fake_smi.replay(scenario="unknown_error")
    result = run_module(module, {"persistence_mode": True, "state_path": state_path}, smi=fake_smi)
    assert (result["changed"], result["skipped"], result["state"]) == (False, True, "driver_not_loaded")
    assert "the nvidia kernel module is not loaded" in result["messages"]
    assert [c["argv"] for c in fake_smi.calls] == [["-q", "-x"]]


def test_no_gpu_no_driver_is_reported_cleanly(settings_nvml, run_module, state_path, no_pci_gpu):
    settings_nvml("no_gpu")
    result = run_module(module, {"persistence_mode": True, "state_path": state_path})
    assert (result["changed"], result["skipped"], result["state"]) == (False, True, "no_gpu")


def test_working_driver_without_gpus(settings_nvml, run_module, state_path):
    settings_nvml("vfio_bound")  # NVML works and lists no device
    result = run_module(module, {"persistence_mode": True, "state_path": state_path})
    assert (result["changed"], result["skipped"], result["state"]) == (False, True, "no_gpu")
    result = run_module(module, {"gpus": ["0"], "persistence_mode": True, "state_path": state_path})
    assert result["failed"] and result["msg"].startswith("gpus: no GPU matches '0'. GPUs on this host")


def test_no_permission_fails(settings_nvml, run_module, state_path):
    profile = settings_profile("t4")
    profile["nvml"]["init_error"] = "NoPermission"
    settings_nvml(profile)
    result = run_module(module, {"persistence_mode": True, "state_path": state_path})
    assert result["failed"] is True and result["state"] == "no_permission"


# -- the nvidia-smi fallback ----------------------------------------------------------------------------------
def test_nvidia_smi_fallback_applies_with_argument_lists(no_pynvml, run_module, fake_smi, state_path):
    fake_smi.replay(stdout=os.path.join(OWN_XML, "t4_470.82.01_legacy.xml"))
    args = {"power_limit": 65, "compute_mode": "DEFAULT", "persistence_mode": True, "ecc": False, "state_path": state_path}
    check = run_module(module, args, smi=fake_smi, check_mode=True)
    assert check["source"] == "nvidia-smi" and check["changed"] is True
    assert [c["argv"] for c in fake_smi.calls] == [["-q", "-x"]]
    result = run_module(module, args, smi=fake_smi)
    argv = [c["argv"] for c in fake_smi.calls[1:]]
    assert argv == [
        ["-q", "-x"],
        ["-i", "0000:00:1e.0", "-c", "DEFAULT"],
        ["-i", "0000:00:1e.0", "-pl", "65"],
        ["-q", "-x"],
    ]
    assert all(c["LC_ALL"] == "C" for c in fake_smi.calls)
    # ECC is already pending off in that capture: reported, not changed.
    assert result["reboot_required"] is True and "ECC mode change pending (enabled -> disabled)" in result["reasons"][0]


def test_nvidia_smi_fallback_refuses_mig_layout(no_pynvml, run_module, fake_smi, state_path):
    fake_smi.replay(stdout=os.path.join(OWN_XML, "a100_mig_535.104.05.xml"))
    result = run_module(module, {"mig_layout": [{"profile": "7g.40gb"}], "state_path": state_path}, smi=fake_smi)
    assert result["failed"] is True
    assert result["msg"].startswith("mig_layout needs NVML (nvidia-ml-py), which could not be used here: NVML: the Python library nvidia-ml-py")
    assert [c["argv"] for c in fake_smi.calls] == [["-q", "-x"]]


def test_nvidia_smi_fallback_command_failure(no_pynvml, run_module, fake_smi, state_path, tmp_path):
    xml = os.path.join(OWN_XML, "t4_470.82.01_legacy.xml")
    fake_smi.replay(stdout=xml)
    result = run_module(module, {"power_limit": 65, "state_path": state_path}, smi=fake_smi, check_mode=True)
    assert result["changed"]
    fake_smi.replay(stdout=xml, rc=4)
    result = run_module(module, {"power_limit": 65, "state_path": state_path}, smi=fake_smi)
    # rc 4 on -q -x with XML still parses; the set command then fails with rc 4.
    assert result["failed"] is True
    assert result["msg"].startswith("GPU 0 (0000:00:1e.0, Tesla T4): power_limit 70.0 -> 65.0 failed: %s -i 0000:00:1e.0 -pl 65 exited with 4" % fake_smi.path)


def test_no_library_and_no_nvidia_smi_with_module_loaded_fails(no_pynvml, run_module, state_path, monkeypatch):
    monkeypatch.setattr(
        module._settings_apply._pci,  # pylint: disable=protected-access
        "scan",
        lambda root="/", kernel_release=None: {"gpus": [{"pci_bus_id": "0000:01:00.0"}], "kernel_module": {"loaded": True}},
    )
    result = run_module(module, {"persistence_mode": True, "state_path": state_path})
    assert result["failed"] is True and result["state"] == "library_not_found"
    assert "nvidia-ml-py" in result["msg"] and "nvidia-smi: not found in PATH" in result["msg"]


def test_fake_profiles_are_not_modified_on_disk():
    # The extension reads the shared profiles; it never writes them.
    assert fake_pynvml.load_profile("t4")["gpus"][0]["power_limit_mw"] == 70000
