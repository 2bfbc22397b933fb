# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The pure planner, the nvidia-smi argument lists, the clock parser and the boot-time script."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import typing as t

import pytest

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _settings, _settings_apply

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
SHARED_XML = os.path.normpath(os.path.join(REPO, "..", "shared", "fixtures", "nvidia-smi-xml"))
BOOT_SCRIPT = os.path.join(REPO, "roles", "gpu_settings", "files", "gpuhost-gpu-settings")


def _gpu(**overrides: t.Any) -> dict[str, t.Any]:
    gpu = _settings.current_view(
        {
            "index": 0,
            "uuid": "GPU-1",
            "name": "NVIDIA A100-SXM4-40GB",
            "pci_bus_id": "0000:07:00.0",
            "persistence_mode": True,
            "compute_mode": "default",
            "power_limit_w": 400.0,
            "power_limit_min_w": 100.0,
            "power_limit_max_w": 400.0,
            "ecc": {"current": True, "pending": True},
            "mig": {"current": True, "pending": True},
        },
        {
            "mig_profiles": {
                "1g.5gb": {"id": 0, "slices": 1, "memory_mib": 4864},
                "3g.20gb": {"id": 2, "slices": 3, "memory_mib": 19968},
                "7g.40gb": {"id": 4, "slices": 7, "memory_mib": 40192},
            },
            "mig_instances": [],
        },
    )
    gpu.update(overrides)
    return gpu


def _desired(**values: t.Any) -> dict[str, t.Any]:
    params = {key: None for key in ("persistence_mode", "compute_mode", "power_limit", "applications_clocks", "locked_clocks", "ecc", "mig", "mig_layout")}
    params.update(values)
    return _settings.desired_from_params(params)


def test_current_view_uses_the_module_vocabulary():
    gpu = _gpu()
    assert gpu["compute_mode"] == "DEFAULT"
    assert (gpu["power_limit"], gpu["power_limit_min"], gpu["power_limit_max"]) == (400.0, 100.0, 400.0)


def test_plan_compares_watts_at_milliwatt_precision():
    assert _settings.plan_gpu(_desired(power_limit=400.0004), _gpu())["changes"] == []
    change = _settings.plan_gpu(_desired(power_limit=399.5), _gpu())["changes"][0]
    assert change["args"] == {"milliwatts": 399500} and change["after"] == 399.5


def test_pending_settings_compare_with_the_pending_value():
    gpu = _gpu(ecc={"current": True, "pending": False})
    plan = _settings.plan_gpu(_desired(ecc=False), gpu)
    assert plan["changes"] == []
    assert plan["pending"] == [{"setting": "ecc", "current": True, "pending": False}]
    plan = _settings.plan_gpu(_desired(ecc=True), gpu)
    assert [c["after"] for c in plan["changes"]] == [{"current": True, "pending": True}]
    assert plan["pending"] == []


def test_layout_expansion_and_defaults():
    layout = _settings.expand_layout([{"profile": "MIG 3G.20GB", "count": 2}, {"profile": "1g.5gb", "compute_instances": None}])
    assert layout == [
        {"profile": "3g.20gb", "compute_instances": ["3g.20gb"]},
        {"profile": "3g.20gb", "compute_instances": ["3g.20gb"]},
        {"profile": "1g.5gb", "compute_instances": ["1g.5gb"]},
    ]


def test_plan_layout_keeps_matches_destroys_the_rest_and_creates_largest_first():
    gpu = _gpu(
        mig_instances=[
            {"gi": 1, "profile": "3g.20gb", "compute_instances": [{"ci": 0, "profile": "3g.20gb"}]},
            {"gi": 7, "profile": "1g.5gb", "compute_instances": [{"ci": 0, "profile": "1g.5gb"}]},
        ]
    )
    layout = _settings.expand_layout([{"profile": "1g.5gb", "count": 2}, {"profile": "3g.20gb", "compute_instances": ["1c.3g.20gb"] * 3}])
    ops, kept = _settings.plan_layout(layout, gpu)
    assert kept == [{"profile": "1g.5gb", "compute_instances": ["1g.5gb"]}]
    assert [(o["op"], o.get("gi"), o["profile"]) for o in ops] == [
        ("destroy_ci", 1, "3g.20gb"),
        ("destroy_gi", 1, "3g.20gb"),
        ("create_gi", None, "3g.20gb"),
        ("create_gi", None, "1g.5gb"),
    ]
    assert [ci["profile_id"] for ci in ops[2]["cis"]] == [0, 0, 0]


def test_blocking_processes_only_counts_instances_to_destroy():
    gpu = _gpu(processes=[{"pid": 1, "name": "a", "gpu_instance_id": 1}, {"pid": 2, "name": "b", "gpu_instance_id": 7}, {"pid": 3, "name": None}])
    ops = [{"op": "destroy_gi", "gi": 7, "profile": "1g.5gb"}]
    assert [p["pid"] for p in _settings.blocking_processes(gpu, ops)] == [2]
    assert _settings.describe_processes(gpu["processes"]) == "1 (a) in GPU instance 1, 2 (b) in GPU instance 7, 3 (name unknown)"


@pytest.mark.parametrize(
    "op, args, argv",
    [
        ("persistence_mode", {"value": True}, ["-pm", "1"]),
        ("persistence_mode", {"value": False}, ["-pm", "0"]),
        ("compute_mode", {"value": "PROHIBITED"}, ["-c", "PROHIBITED"]),
        ("power_limit", {"milliwatts": 250500}, ["-pl", "250.5"]),
        ("power_limit", {"milliwatts": 300000}, ["-pl", "300"]),
        ("applications_clocks", {"memory_mhz": 877, "graphics_mhz": 1380}, ["-ac", "877,1380"]),
        ("applications_clocks_reset", {}, ["-rac"]),
        ("locked_clocks", {"min_mhz": 1200, "max_mhz": 1400}, ["-lgc", "1200,1400"]),
        ("locked_clocks_reset", {}, ["-rgc"]),
        ("ecc", {"value": False}, ["-e", "0"]),
        ("mig", {"value": True}, ["-mig", "1"]),
    ],
)
def test_smi_argument_lists(op, args, argv):
    change = {"setting": op, "op": op, "args": args, "before": None, "after": None}
    assert _settings.smi_argv("/usr/bin/nvidia-smi", _gpu(), change) == [["/usr/bin/nvidia-smi", "-i", "0000:07:00.0"] + argv]


def test_smi_argument_list_refuses_mig_layout():
    with pytest.raises(_settings.SettingsError, match="needs NVML"):
        _settings.smi_argv("nvidia-smi", _gpu(), {"op": "mig_layout", "args": {}})


def test_reset_argument_list():
    assert _settings.reset_argv("/usr/bin/nvidia-smi", _gpu()) == ["/usr/bin/nvidia-smi", "--gpu-reset", "-i", "0000:07:00.0"]


@pytest.mark.skipif(not os.path.isdir(SHARED_XML), reason="the shared nvidia-smi corpus is not next to the repository")
def test_clocks_from_a_real_nvidia_smi_capture():
    with open(os.path.join(SHARED_XML, "datakit_tesla-v100-pcie-32gb_460.39.xml"), encoding="utf-8") as handle:
        extras = _settings_apply.smi_clock_extras(handle.read())
    assert len(extras) == 1
    assert extras[0]["applications_clocks"] == {"memory_mhz": 877, "graphics_mhz": 1230}
    assert extras[0]["default_applications_clocks"] == {"memory_mhz": 877, "graphics_mhz": 1230}
    table = extras[0]["supported_clocks"]
    assert list(table) == [877] and len(table[877]) == 167 and (table[877][0], table[877][-1]) == (1380, 135)


def test_clocks_missing_from_xml_are_none():
    assert _settings_apply.smi_clock_extras("<nvidia_smi_log><gpu id='0'/></nvidia_smi_log>") == [
        {"mig_profiles": None, "mig_instances": None, "applications_clocks": None, "default_applications_clocks": None, "supported_clocks": None}
    ]
    assert _settings_apply.smi_clock_extras("not xml") == []


# -- the boot-time script -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def boot() -> t.Any:
    loader = importlib.machinery.SourceFileLoader("gpuhost_gpu_settings", BOOT_SCRIPT)
    spec = importlib.util.spec_from_loader("gpuhost_gpu_settings", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


QUERY_OUT = (
    "0, GPU-aaaa, 00000000:07:00.0, NVIDIA A100-SXM4-40GB, Enabled\n"
    "1, GPU-bbbb, 00000000:0F:00.0, NVIDIA A100-SXM4-40GB, Disabled\n"
    "2, GPU-cccc, 00000000:9A:00.0, Tesla T4, [N/A]\n"
)


def _runner(table: dict[tuple[str, ...], tuple[int, str, str]]) -> t.Any:
    calls: list[list[str]] = []

    def run(argv: list[str]) -> tuple[int, str, str]:
        calls.append(argv)
        for key, answer in table.items():
            if tuple(argv[-len(key):]) == key:
                return answer
        return 0, "", ""

    run.calls = calls  # type: ignore[attr-defined]
    return run


def _spec(tmp_path: t.Any, **spec: t.Any) -> str:
    path = tmp_path / "gpu_settings.json"
    path.write_text(json.dumps(spec), encoding="utf-8")
    return str(path)


def test_boot_script_runs_the_same_settings_for_the_selected_gpus(boot, tmp_path):
    spec = _spec(
        tmp_path,
        gpus=["Tesla*", "0000:0f:00.0"],
        persistence_mode=True,
        compute_mode="EXCLUSIVE_PROCESS",
        power_limit=65.5,
        applications_clocks={"memory_mhz": 5001, "graphics_mhz": 1590},
        locked_clocks={"reset": True},
        nvidia_smi="/opt/smi",
    )
    run = _runner({tuple(boot.QUERY): (0, QUERY_OUT, "")})
    logged: list[str] = []
    assert boot.main(["--spec", spec, "--driver-check", spec], runner=run, log=logged.append) == 0
    assert run.calls == [["/opt/smi"] + boot.QUERY] + [
        ["/opt/smi", "-i", bus] + argv
        for bus in ("0000:0f:00.0", "0000:9a:00.0")
        for argv in (["-pm", "1"], ["-c", "EXCLUSIVE_PROCESS"], ["-pl", "65.5"], ["-ac", "5001,1590"], ["-rgc"])
    ]


def test_boot_script_recreates_mig_instances_only_when_there_are_none(boot, tmp_path):
    layout = [{"profile": "1g.5gb", "count": 2}, {"profile": "3g.20gb", "compute_instances": ["1c.3g.20gb", "2c.3g.20gb"]}]
    spec = _spec(tmp_path, gpus=["all"], mig_layout=layout)
    run = _runner(
        {
            tuple(boot.QUERY): (0, QUERY_OUT, ""),
            ("-lgi",): (6, "No GPU instances found: Not Found\n", ""),
            ("-cgi", "3g.20gb"): (0, "Successfully created GPU instance ID  2 on GPU  0 using profile MIG 3g.20gb (ID  9)\n", ""),
            ("-cgi", "1g.5gb"): (0, "Successfully created GPU instance ID 13 on GPU  0 using profile MIG 1g.5gb (ID 19)\n", ""),
        }
    )
    assert boot.main(["--spec", spec, "--nvidia-smi", "smi", "--driver-check", spec], runner=run, log=lambda text: None) == 0
    assert [c[1:] for c in run.calls[1:]] == [
        ["mig", "-i", "0000:07:00.0", "-lgi"],
        ["mig", "-i", "0000:07:00.0", "-cgi", "3g.20gb"],
        ["mig", "-i", "0000:07:00.0", "-gi", "2", "-cci", "1c.3g.20gb"],
        ["mig", "-i", "0000:07:00.0", "-gi", "2", "-cci", "2c.3g.20gb"],
        ["mig", "-i", "0000:07:00.0", "-cgi", "1g.5gb"],
        ["mig", "-i", "0000:07:00.0", "-gi", "13", "-cci", "1g.5gb"],
        ["mig", "-i", "0000:07:00.0", "-cgi", "1g.5gb"],
        ["mig", "-i", "0000:07:00.0", "-gi", "13", "-cci", "1g.5gb"],
    ]
    run = _runner({tuple(boot.QUERY): (0, QUERY_OUT, ""), ("-lgi",): (0, "| GPU instances: ... |\n", "")})
    logged: list[str] = []
    assert boot.main(["--spec", spec, "--driver-check", spec], runner=run, log=logged.append) == 0
    assert [c[1:] for c in run.calls[1:]] == [["mig", "-i", "0000:07:00.0", "-lgi"]]
    assert logged == ["GPU 0: MIG instances exist; left alone"]


def test_boot_script_dry_run_changes_nothing(boot, tmp_path):
    spec = _spec(tmp_path, gpus=["1"], power_limit=300)
    run = _runner({tuple(boot.QUERY): (0, QUERY_OUT, "")})
    logged: list[str] = []
    assert boot.main(["--spec", spec, "--dry-run", "--driver-check", spec], runner=run, log=logged.append) == 0
    assert len(run.calls) == 1
    assert logged == ["run: /usr/bin/nvidia-smi -i 0000:0f:00.0 -pl 300"]


def test_boot_script_failures(boot, tmp_path):
    spec = _spec(tmp_path, gpus=["7"], power_limit=300)
    logged: list[str] = []
    assert boot.main(["--spec", spec, "--driver-check", str(tmp_path / "missing")], runner=_runner({}), log=logged.append) == 0
    assert "nothing to apply" in logged[0]
    run = _runner({tuple(boot.QUERY): (0, QUERY_OUT, "")})
    assert boot.main(["--spec", spec, "--driver-check", spec], runner=run, log=logged.append) == 1
    assert logged[-1] == "no GPU matches 7"
    run = _runner({tuple(boot.QUERY): (255, "Failed to initialize NVML: Unknown Error\n", "")})
    assert boot.main(["--spec", spec, "--driver-check", spec], runner=run, log=logged.append) == 1
    spec = _spec(tmp_path, gpus=["0"], power_limit=300)
    run = _runner({tuple(boot.QUERY): (0, QUERY_OUT, ""), ("-pl", "300"): (4, "", "Insufficient Permissions\n")})
    assert boot.main(["--spec", spec, "--driver-check", spec], runner=run, log=logged.append) == 1
    assert logged[-1] == "failed (4): Insufficient Permissions"
