# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The GPU tier (tests/gpu/run.sh) end to end against the fakes, and proof that each of its comparisons can fail.

* run.sh --no-bundle --fake t4 passes, in seven files;
* the same run with fields of the fake nvidia-smi, the fake NVML and the host tree changed, and one setting changed
  between the reads before and after the modules, fails exactly the comparisons those fields feed;
* every check of a clean run fails when the one value it compares is changed in the capture (tier_compare.evaluate
  is a pure function of the capture, so this needs no second run);
* the guards let through only nvidia-smi's query forms and NVML's getters;
* a capture imports into a fixture directory and replays through the parser and the planner.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import typing as t

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
TIER = os.path.join(REPO, "tests", "gpu")
if TIER not in sys.path:
    sys.path.insert(0, TIER)

import gpu_tier  # noqa: E402  pylint: disable=wrong-import-position,import-error
import tier_compare as tc  # noqa: E402  pylint: disable=wrong-import-position,import-error
import tier_guard  # noqa: E402  pylint: disable=wrong-import-position,import-error

from test_captured_replay import replay  # noqa: E402  pylint: disable=wrong-import-position,import-error

MUTATIONS = [
    "smi:gpus.0.power_limit_mw=65000",  # the fake nvidia-smi reports 65 W, NVML 70 W
    "nvml:gpus.0.uuid=GPU-00000000-1111-4222-8333-444444444444",  # NVML reports another UUID than nvidia-smi
    "after-smi:gpus.0.persistence_mode=0",  # persistence reads off once the modules have run
    "host:host.libraries.version=535.0.0",  # libnvidia-ml.so.1 is not the driver nvidia-smi reports
    "smi:gpus.0.minor_number=5",  # nvidia-smi names /dev/nvidia5, which the host does not have
]


def run_tier(out: str, *extra: str, profile: str = "t4") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "GPU_TIER_"))}
    command = [os.path.join(TIER, "run.sh"), "--no-bundle", "--python", sys.executable, "--fake", profile]
    for spec in extra:
        command += ["--mutate", spec]
    return subprocess.run(command + [out], env=env, capture_output=True, text=True, check=False, timeout=300)


def statuses(out: str) -> dict[str, str]:
    with open(os.path.join(out, gpu_tier.OUTPUTS["summary"]), "r", encoding="utf-8") as handle:
        return tc.parse_summary(handle.read())


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> str:
    out = str(tmp_path_factory.mktemp("tier") / "out")
    proc = run_tier(out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


# compose-spec.json lives beside the repository (../shared/schemas), or in a GPU bundle; a fresh clone has neither.
SCHEMA_MISSING = gpu_tier.load_schema(None) is None
NO_SCHEMA = "compose-spec.json is not in reach (../shared/schemas is absent beside this checkout, no .cache/gpu-bundle)"


# -- end to end ------------------------------------------------------------------------------------------------------
def test_the_tier_passes_against_the_fakes_in_seven_files(clean):
    found = statuses(clean)
    assert [name for name, status in found.items() if status == tc.FAIL] == []
    # Without the schema the tier itself skips its schema check (and says so); the rest of the run is the same.
    assert {name for name, status in found.items() if status == tc.SKIP} == {"container.check"} | ({"compose.schema"} if SCHEMA_MISSING else set())
    assert sorted(os.listdir(clean)) == sorted(gpu_tier.OUTPUTS.values())
    assert sum(os.path.getsize(os.path.join(clean, n)) for n in os.listdir(clean)) < gpu_tier.MAX_BYTES
    # Every GPU setting the comparisons need was read by every source.
    for name in ("facts.power_limit_w", "facts.uuid", "clocks.applications", "backends.power_limit_w", "settings.change_plan"):
        assert found[name] == tc.PASS


@pytest.mark.skipif(SCHEMA_MISSING, reason=NO_SCHEMA)
def test_the_compose_document_passes_the_compose_schema(clean):
    assert statuses(clean)["compose.schema"] == tc.PASS


def test_the_tier_passes_on_a_gpu_with_mig_on(tmp_path):
    out = str(tmp_path / "out")
    proc = run_tier(out, profile="a100_mig")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    found = statuses(out)
    assert found["backends.mig_devices"] == found["compose.uuids"] == found["compose.vm_mode"] == tc.PASS
    assert found["settings.mig_on_non_mig_gpu"] == tc.SKIP  # the only GPU supports MIG


def test_a_mutated_fake_fails_exactly_the_comparisons_it_feeds(tmp_path):
    out = str(tmp_path / "out")
    proc = run_tier(out, *MUTATIONS)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    found = statuses(out)
    failed = {name for name, status in found.items() if status == tc.FAIL}
    assert failed == {
        "facts.power_limit_w", "backends.power_limit_w", "settings.change_plan",  # 65 W from nvidia-smi, 70 W from NVML
        "facts.uuid", "backends.uuid", "compose.uuids",  # NVML's UUID differs from nvidia-smi's
        "read_only.settings_unchanged",  # persistence changed between the reads before and after
        "host.library_paths", "host.device_nodes",
    }
    with open(os.path.join(out, gpu_tier.OUTPUTS["summary"]), "r", encoding="utf-8") as handle:
        summary = handle.read()
    assert "facts=70.0 xml=65.0 csv=65.0 nvml=70.0" in summary
    assert "persistence_mode: Enabled -> Disabled" in summary
    assert "missing /dev/nvidia5" in summary and "resolves to libnvidia-ml.so.535.0.0" in summary


# -- every comparison can fail ------------------------------------------------------------------------------------------
def _other(value: t.Any) -> t.Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, dict):
        return {k: _other(v) if v is not None else True for k, v in value.items()}
    return "%s-changed" % value


def _facts(capture: dict[str, t.Any], which: str) -> dict[str, t.Any]:
    return capture["results"][which]["result"]["ansible_facts"]["nvidia_gpu"]


def _gpu_field(which: str, field: str) -> t.Callable[[dict[str, t.Any]], None]:
    def mutate(capture: dict[str, t.Any]) -> None:
        gpu = _facts(capture, which)["gpus"][0]
        gpu[field] = _other(gpu[field])

    return mutate


def _driver_field(which: str, field: str) -> t.Callable[[dict[str, t.Any]], None]:
    def mutate(capture: dict[str, t.Any]) -> None:
        driver = _facts(capture, which)["driver"]
        driver[field] = _other(driver[field])

    return mutate


def _nvml_field(field: str, value: t.Any, phase: str = "before") -> t.Callable[[dict[str, t.Any]], None]:
    def mutate(capture: dict[str, t.Any]) -> None:
        capture["nvml"][phase]["gpus"][0][field] = value

    return mutate


def _result(name: str, change: t.Callable[[dict[str, t.Any]], None]) -> t.Callable[[dict[str, t.Any]], None]:
    def mutate(capture: dict[str, t.Any]) -> None:
        change(capture["results"][name])

    return mutate


def _settings_read(result: dict[str, t.Any]) -> None:
    for before in result["result"]["diff"]["before"].values():
        before["applications_clocks"] = {"memory_mhz": 405, "graphics_mhz": 300}


def _first_change(result: dict[str, t.Any]) -> None:
    change = result["result"]["gpus"][0]["changes"][0]
    change["before"] = _other(change["before"])


def _doctor_driver(result: dict[str, t.Any]) -> None:
    for item in result["result"]["checks"]:
        if item["id"] == "driver_loaded":
            item["status"] = "fail"


def _compose_device(result: dict[str, t.Any]) -> None:
    result["result"]["document"]["services"]["gpu-all"]["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"] = ["0"]


def _missing_library(capture: dict[str, t.Any]) -> None:
    capture["host"]["libraries"] = {path: "libnvidia-ml.so.999.1" for path in capture["host"]["libraries"]}


def _missing_path(capture: dict[str, t.Any]) -> None:
    first = sorted(capture["host"]["paths"])[0]
    capture["host"]["paths"][first] = False


def _xml(capture: dict[str, t.Any]) -> None:
    capture["xml"] = tc.safe_parse_xml("")


FAIL_WHEN = {
    "capture.nvidia_smi_xml": _xml,
    "capture.nvidia_smi_csv": lambda c: c.__setitem__("csv", []),
    "capture.nvml": lambda c: c["nvml"]["before"].__setitem__("available", False),
    "ansible.playbook": lambda c: c["record"].__setitem__("playbook", {"rc": 2, "tail": ["ERROR! boom"]}),
    "facts.backend_nvml": lambda c: _facts(c, "facts_nvml").__setitem__("source", "pci"),
    "facts.gpus": _nvml_field("bus_id", "00000000:99:00.0"),
    "facts.driver_version": _driver_field("facts_nvml", "version"),
    "facts.cuda_version": _driver_field("facts_nvml", "cuda_version"),
    "clocks.applications": _nvml_field("applications_clocks", {"memory_mhz": 405, "graphics_mhz": 300}),
    "clocks.default_applications": _nvml_field("default_applications_clocks", {"memory_mhz": 405, "graphics_mhz": 300}),
    "clocks.max": _nvml_field("max_clocks", {"memory_mhz": 5001, "graphics_mhz": 1500}),
    "clocks.supported": _nvml_field("supported_clocks", {"5001": [1590]}),
    "clocks.settings_read": _result("settings_change", _settings_read),
    "host.kernel_module_type": _driver_field("facts_nvml", "kernel_module_type"),
    "host.kernel_module_version": _driver_field("facts_nvml", "kernel_module_version"),
    "host.device_nodes": lambda c: _facts(c, "facts_nvml").__setitem__("device_nodes", ["/dev/nvidiactl"]),
    "host.library_paths": _missing_library,
    "backends.nvidia_smi": lambda c: _facts(c, "facts_smi").__setitem__("source", "pci"),
    "backends.gpus": lambda c: _facts(c, "facts_smi")["gpus"][0].__setitem__("pci_bus_id", "0000:99:00.0"),
    "backends.mig_devices": lambda c: _facts(c, "facts_smi")["gpus"][0].__setitem__("mig_devices", [{"gi": 1, "ci": 0}]),
    "settings.change_plan": _result("settings_change", _first_change),
    "settings.power_out_of_range": _result("settings_power_out_of_range", lambda r: r.__setitem__("status", "ok")),
    "settings.clock_not_in_table": _result("settings_clock_not_in_table", lambda r: r["result"].__setitem__("msg", "some other error")),
    "settings.mig_on_non_mig_gpu": _result("settings_mig_on_non_mig_gpu", lambda r: r["result"].__setitem__("changed", True)),
    "read_only.settings_unchanged": _nvml_field("power_limit_w", 65.0, phase="after"),
    "read_only.nvidia_smi_calls": lambda c: c["record"]["nvidia_smi_calls"].append({"argv": ["-pm", "0"], "allowed": False}),
    "read_only.nvml_setters": lambda c: c["record"].__setitem__("nvml_refused", [{"function": "nvmlDeviceSetPersistenceMode"}]),
    "doctor.report": _result("doctor", _doctor_driver),
    "compose.uuids": _result("compose", _compose_device),
    "compose.vm_mode": _missing_path,
    "compose.schema": _result("compose", lambda r: r["result"]["document"]["services"]["gpu-all"].__setitem__("bogus_key", 1)),
    "container.check": lambda c: c["record"].update(container_engine="unix:///var/run/docker.sock"),
}
for _field in tc.FACT_FIELDS:
    FAIL_WHEN["facts.%s" % _field] = _gpu_field("facts_nvml", _field)
for _field in tc.BACKEND_FIELDS:
    FAIL_WHEN["backends.%s" % _field] = _gpu_field("facts_smi", _field)
for _field in ("version", "cuda_version", "kernel_module_type", "library_version"):
    FAIL_WHEN["backends.driver_%s" % _field] = _driver_field("facts_smi", _field)


@pytest.fixture(scope="module")
def clean_capture(clean: str) -> dict[str, t.Any]:
    return gpu_tier.load_capture(clean)


@pytest.fixture(scope="module")
def schema() -> dict[str, t.Any] | None:
    return gpu_tier.load_schema(None)


def test_every_check_has_a_way_to_fail(clean):
    assert set(statuses(clean)) - {"outputs.limits"} == set(FAIL_WHEN)


@pytest.mark.parametrize("name", sorted(FAIL_WHEN))
def test_each_check_fails_when_its_value_changes(clean_capture, schema, name):
    if name == "compose.schema" and schema is None:
        pytest.skip(NO_SCHEMA)
    before = {c["name"]: c["status"] for c in tc.evaluate(clean_capture, schema)}
    assert before[name] in (tc.PASS, tc.SKIP)
    capture = copy.deepcopy(clean_capture)
    FAIL_WHEN[name](capture)
    after = {c["name"]: c for c in tc.evaluate(capture, schema)}
    assert after[name]["status"] == tc.FAIL, after[name]


def test_library_paths_must_be_the_machines_own_architecture(clean_capture, schema):
    capture = copy.deepcopy(clean_capture)
    facts = _facts(capture, "facts_nvml")["driver"]["library_paths"]
    capture["host"]["machine"] = "x86_64"
    capture["host"]["ldconfig"] = {
        "libnvidia-ml.so.1": [[facts["nvml"], "libc6,x86-64"], ["/usr/lib/i386-linux-gnu/libnvidia-ml.so.1", "libc6"]],
        "libcuda.so.1": [[facts["cuda"], "libc6,x86-64"]],
    }
    found = {c["name"]: c for c in tc.evaluate(capture, schema)}
    assert found["host.library_paths"]["status"] == tc.PASS
    capture["host"]["ldconfig"]["libnvidia-ml.so.1"][0][1] = "libc6"  # the facts named the i386 copy
    found = {c["name"]: c for c in tc.evaluate(capture, schema)}
    assert found["host.library_paths"]["status"] == tc.FAIL
    assert "not the x86_64 one" in found["host.library_paths"]["detail"]


def test_output_limits(tmp_path):
    for name in list(gpu_tier.OUTPUTS.values())[:-1]:
        (tmp_path / name).write_text("x")
    assert gpu_tier.limits_check(str(tmp_path))["status"] == tc.PASS
    (tmp_path / "extra file.txt").write_text("x")
    result = gpu_tier.limits_check(str(tmp_path))
    assert result["status"] == tc.FAIL and "8 files" in result["detail"] and "extra file.txt" in result["detail"]


# -- the guards -----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "args, allowed",
    [
        (["-q", "-x"], True),
        (["--help-query-gpu"], True),
        (["--query-gpu=index,uuid,power.limit", "--format=csv,nounits"], True),
        (["--query-gpu=index", "--format=csv"], True),
        (["-pm", "1"], False),
        (["-pl", "300"], False),
        (["-c", "EXCLUSIVE_PROCESS"], False),
        (["-ac", "5001,1590"], False),
        (["-lgc", "1410,1410"], False),
        (["-e", "0"], False),
        (["-mig", "1"], False),
        (["-r", "-i", "0"], False),
        (["--gpu-reset", "-i", "0000:18:00.0"], False),
        (["-q", "-x", "-i", "0"], False),
        (["-q"], False),
        (["--query-gpu=index;reboot", "--format=csv"], False),
        (["--query-gpu=index", "--format=csv,noheader"], False),
        (["--query-gpu=index", "--format=csv", "-pm", "1"], False),
        ([], False),
    ],
)
def test_nvidia_smi_allow_list(args, allowed):
    assert tier_guard.smi_allowed(args) is allowed


def test_the_guard_never_starts_nvidia_smi_for_a_refused_call(tmp_path):
    marker = tmp_path / "ran"
    target = tmp_path / "nvidia-smi"
    target.write_text("#!/bin/sh\necho \"$@\" >> %s\n" % marker)
    target.chmod(0o755)
    log = tmp_path / "calls.jsonl"
    env = dict(os.environ, GPU_TIER_SMI_TARGET=str(target), GPU_TIER_SMI_LOG=str(log))
    guard = [sys.executable, os.path.join(TIER, "tier_guard.py"), "nvidia-smi"]
    refused = subprocess.run(guard + ["-pm", "1"], env=env, capture_output=True, text=True, check=False)
    assert refused.returncode == 64 and "refused" in refused.stderr
    assert not marker.exists()
    allowed = subprocess.run(guard + ["-q", "-x"], env=env, capture_output=True, text=True, check=False)
    assert allowed.returncode == 0 and marker.read_text() == "-q -x\n"
    assert [(c["argv"], c["allowed"]) for c in tier_guard.read_log(str(log))] == [(["-pm", "1"], False), (["-q", "-x"], True)]


def test_the_guarded_pynvml_refuses_everything_but_getters(tmp_path):
    pynvml = pytest.importorskip("pynvml")
    log = str(tmp_path / "nvml.jsonl")
    guarded = tier_guard.guard_module(pynvml, log)
    with pytest.raises(pynvml.NVMLError_NoPermission):
        guarded.nvmlDeviceSetPersistenceMode(None, 1)
    with pytest.raises(pynvml.NVMLError_NoPermission):
        guarded.nvmlDeviceResetGpuLockedClocks(None)
    assert [c["function"] for c in tier_guard.read_log(log)] == ["nvmlDeviceSetPersistenceMode", "nvmlDeviceResetGpuLockedClocks"]
    assert guarded.nvmlDeviceGetPowerManagementLimit is pynvml.nvmlDeviceGetPowerManagementLimit
    assert guarded.nvmlInit is pynvml.nvmlInit and guarded.NVMLError is pynvml.NVMLError
    # What the collection's settings call, and other functions that change a GPU or a driver state.
    dangerous = [
        "nvmlDeviceSetPersistenceMode", "nvmlDeviceSetComputeMode", "nvmlDeviceSetPowerManagementLimit", "nvmlDeviceSetApplicationsClocks",
        "nvmlDeviceResetApplicationsClocks", "nvmlDeviceSetGpuLockedClocks", "nvmlDeviceResetGpuLockedClocks", "nvmlDeviceSetEccMode",
        "nvmlDeviceSetMigMode", "nvmlDeviceCreateGpuInstance", "nvmlGpuInstanceDestroy", "nvmlGpuInstanceCreateComputeInstance",
        "nvmlComputeInstanceDestroy", "nvmlDeviceSetMemoryLockedClocks", "nvmlDeviceClearEccErrorCounts", "nvmlDeviceModifyDrainState",
        "nvmlDeviceRemoveGpu", "nvmlDeviceSetDriverModel", "nvmlDeviceSetGpuOperationMode", "nvmlDeviceSetAutoBoostedClocksEnabled",
        "nvmlDeviceResetNvLinkErrorCounters", "nvmlDeviceSetFanSpeed_v2", "nvmlDeviceSetTemperatureThreshold",
        "nvmlDevicePowerSmoothingActivatePresetProfile", "nvmlDeviceReadWritePRM_v1", "nvmlDeviceVgpuForceGspUnload",
    ]
    present = [name for name in dangerous if hasattr(pynvml, name)]
    assert len(present) >= 13  # the collection's own setters are in every nvidia-ml-py it supports
    for name in present:
        assert getattr(guarded, name) is not getattr(pynvml, name), name


# -- captures become fixtures ----------------------------------------------------------------------------------------------
def test_a_capture_imports_masked_and_replays(clean, tmp_path):
    dest = gpu_tier.import_capture(clean, str(tmp_path), None, "the fake t4 profile (tests/unit/gpu)")
    assert os.path.basename(dest) == "tesla-t4_535.183.01"
    assert sorted(os.listdir(dest)) == sorted(["PROVENANCE.md"] + [gpu_tier.OUTPUTS[k] for k in ("xml", "csv", "nvml", "facts", "plans")])
    texts = ""
    for name in os.listdir(dest):
        with open(os.path.join(dest, name), "r", encoding="utf-8") as handle:
            texts += handle.read()
    assert "GPU-3e4f5a6b-3333-4444-8555-666677778888" not in texts
    assert "GPU-00000000-0000-4000-8000-000000000000" in texts
    with open(os.path.join(dest, "PROVENANCE.md"), "r", encoding="utf-8") as handle:
        provenance = handle.read()
    assert "Tier result at capture time: PASS" in provenance and "fake profile t4" in provenance
    replay(dest)
    with pytest.raises(SystemExit):
        gpu_tier.import_capture(clean, str(tmp_path), None, "again")


def test_the_check_command_runs_the_comparisons_again(clean):
    proc = subprocess.run([sys.executable, os.path.join(TIER, "gpu_tier.py"), "check", clean], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with open(os.path.join(clean, gpu_tier.OUTPUTS["plans"]), "r", encoding="utf-8") as handle:
        assert json.load(handle)["record"]["mode"] == "fake profile t4"
