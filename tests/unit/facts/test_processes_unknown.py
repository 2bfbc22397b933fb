# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Busy-GPU detection fails closed: every NVML fault on every call the process read makes, under both guards.

The facts are gathered for real (_facts.gather_facts: the fake NVML over a synthetic sysfs tree), then judged by the
two guards the way their callers do: the engine restart plan under ``if_idle`` (restart / pending) and the rolling
upgrade's guard (gpu_busy_processes + gpu_busy_unknown: go / refuse). Control cases prove that an idle GPU still
restarts and goes, and a busy one still defers and refuses.
"""

from __future__ import annotations

import copy
import time

import fake_pynvml
import pytest
import sysfs
from smi_xml import render

from ansible.module_utils import basic

from ansible_collections.gpuhost.nvidia.plugins.filter import upgrade
from ansible_collections.gpuhost.nvidia.plugins.module_utils import _engine_restart as er
from ansible_collections.gpuhost.nvidia.plugins.module_utils import _facts, _gpu_schema, _nvml, _smi

ERRORS = ["NoPermission", "NotSupported", "Unknown", "Uninitialized", "GpuIsLost", "Timeout", "InsufficientSize",
          "Memory", "DriverNotLoaded", "ArgumentVersionMismatch", "Hang"]
# The calls the process read of a GPU without MIG makes, with the errors that mean "not known" there.
PLAIN_CALLS = ["nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses", "nvmlDeviceGetMigMode",
               "nvmlDeviceGetHandleByIndex", "*"]
# And with MIG on: the MIG devices' handles, and the processes through each of them.
MIG_CALLS = ["nvmlDeviceGetMigMode", "nvmlDeviceGetMaxMigDeviceCount", "nvmlDeviceGetMigDeviceHandleByIndex",
             "nvmlDeviceGetComputeRunningProcesses@mig", "nvmlDeviceGetGraphicsRunningProcesses@mig",
             "nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"]
TIMEOUT = 0.3


def profile(name: str, busy: bool, **gpu_changes) -> dict:
    data = copy.deepcopy(fake_pynvml.load_profile(name))
    for gpu in data["gpus"]:
        if not busy:
            gpu["processes"] = []
        gpu.update(gpu_changes)
    return data


@pytest.fixture
def gather(tmp_path):
    fakes = []

    def run(data: dict, backends=("nvml", "pci")) -> dict:
        fake = fake_pynvml.make_fake(data)
        fakes.append(fake)
        root = tmp_path / ("root%d" % len(fakes))
        root.mkdir()
        return _facts.gather_facts(backends=list(backends), gather=["processes"], root=sysfs.build(str(root), data),
                                   nv=fake.module, nvml_timeout=TIMEOUT)

    yield run
    for fake in fakes:
        fake.release()


def restart_decision(facts) -> str:
    """The engine restart plan under if_idle, with every GPU process in a Docker container."""
    processes, unknown = er.gpu_processes(facts)
    containers = [{"engine": "docker", "id": "a" * 64, "pid": p["pid"], "name": p["name"], "gpu": p["gpu"]} for p in processes]
    engine = {"name": "docker", "unit": "docker.service", "active": True, "changed": True, "newest": None, "started": None}
    result = er.plan("if_idle", [engine], containers, unknown, False)
    if result["restart"]:
        return "restart"
    assert result["pending"] == ["docker.service"] and result["messages"]
    return "pending"


def upgrade_decision(facts) -> str:
    busy, unknown = upgrade.gpu_busy_processes(facts), upgrade.gpu_busy_unknown(facts)
    return "go" if not busy and not unknown else "refuse"


def both(facts) -> tuple[str, str]:
    return restart_decision(facts), upgrade_decision(facts)


# -- controls ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["rtx3090", "a100_mig", "h100_sxm_8x_nvswitch", "t4"])
def test_idle_gpus_restart_and_go(gather, name):
    facts = gather(profile(name, busy=False))
    assert all(g["processes"] == [] and g["processes_error"] is None for g in facts["gpus"] if g["bound_driver"] == "nvidia")
    assert both(facts) == ("restart", "go")


@pytest.mark.parametrize("name", ["rtx3090", "a100_mig"])
def test_busy_gpus_defer_and_refuse(gather, name):
    facts = gather(profile(name, busy=True))
    assert facts["gpus"][0]["processes"] and facts["gpus"][0]["processes_error"] is None
    assert both(facts) == ("pending", "refuse")
    assert not upgrade.gpu_busy_unknown(facts)


@pytest.mark.parametrize("call, fault", [
    ("nvmlDeviceGetPowerUsage", "Unknown"), ("nvmlDeviceGetName", "NoPermission"), ("nvmlDeviceGetEccMode", "Unknown"),
    ("nvmlDeviceGetMigMode", "NotSupported"),  # a GPU without MIG: nothing more to read
])
def test_faults_outside_the_process_read_leave_an_idle_gpu_idle(gather, call, fault):
    facts = gather(profile("rtx3090", busy=False, errors={call: fault}))
    assert facts["gpus"][0]["processes"] == [] and both(facts) == ("restart", "go")


def test_an_unreadable_process_name_is_still_a_busy_gpu(gather):
    data = profile("rtx3090", busy=True)
    data["nvml"]["errors"] = {"nvmlSystemGetProcessName": "NoPermission"}
    facts = gather(data)
    assert [p["name"] for p in facts["gpus"][0]["processes"]] == [None, None, None]
    assert both(facts) == ("pending", "refuse")


# -- every fault on every call ----------------------------------------------------------------------------------
def _assert_unknown(facts, fault):
    gpu = facts["gpus"][0]
    assert gpu["processes"] is None and gpu["processes_error"], gpu
    if fault not in ("GpuIsLost", "Hang"):
        assert fault in gpu["processes_error"] or fault in (gpu["message"] or "")
    assert both(facts) == ("pending", "refuse")
    unknown = upgrade.gpu_busy_unknown(facts)
    assert unknown and unknown[0].startswith("GPU "), unknown
    assert "cannot be read" in er.gpu_processes(facts)[1]


@pytest.mark.parametrize("fault", ERRORS)
@pytest.mark.parametrize("call", PLAIN_CALLS)
def test_fault_on_a_process_call_is_unknown_not_idle(gather, call, fault):
    if call == "nvmlDeviceGetMigMode" and fault == "NotSupported":
        pytest.skip("NotSupported there means the GPU has no MIG (a control case above)")
    facts = gather(profile("rtx3090", busy=False, errors={call: fault}))
    _assert_unknown(facts, fault)


@pytest.mark.parametrize("fault", ERRORS)
@pytest.mark.parametrize("call", MIG_CALLS)
def test_fault_on_a_mig_process_call_is_unknown_not_idle(gather, call, fault):
    if call == "nvmlDeviceGetMigMode" and fault == "NotSupported":
        pytest.skip("NotSupported there: the MIG devices are probed (test_mig_mode_not_supported_still_finds_mig_processes)")
    facts = gather(profile("a100_mig", busy=False, errors={call: fault}))
    _assert_unknown(facts, fault)


def test_mig_processes_are_read_through_the_mig_devices(gather):
    """With MIG on, NVML lists an unprivileged caller's processes only on the MIG device handles."""
    facts = gather(profile("a100_mig", busy=True, mig_parent_lists_processes=False))
    procs = facts["gpus"][0]["processes"]
    assert [(p["pid"], p["gpu_instance_id"], p["compute_instance_id"]) for p in procs] == [(5150, 1, 0), (5151, 7, 0)]
    assert both(facts) == ("pending", "refuse")


@pytest.mark.parametrize("busy, verdict", [(True, ("pending", "refuse")), (False, ("restart", "go"))])
def test_mig_mode_not_supported_still_finds_mig_processes(gather, busy, verdict):
    """NotSupported on the MIG mode with MIG devices present: the processes are read through them all the same."""
    facts = gather(profile("a100_mig", busy=busy, mig_parent_lists_processes=False, errors={"nvmlDeviceGetMigMode": "NotSupported"}))
    assert facts["gpus"][0]["processes_error"] is None
    assert [p["pid"] for p in facts["gpus"][0]["processes"]] == ([5150, 5151] if busy else [])
    assert both(facts) == verdict


def test_mig_process_in_no_readable_instance_is_unknown(gather):
    facts = gather(profile("a100_mig", busy=True, mig_parent_lists_processes=False,
                           errors={"nvmlDeviceGetComputeRunningProcesses@mig": "NoPermission"}))
    _assert_unknown(facts, "NoPermission")


@pytest.mark.parametrize("where", ["init_error", "count_error"])
@pytest.mark.parametrize("fault", ["NoPermission", "Unknown", "Uninitialized", "DriverNotLoaded", "LibraryNotFound"])
def test_nvml_failing_as_a_whole_leaves_gpus_bound_to_nvidia_unknown(gather, where, fault):
    data = profile("rtx3090", busy=False)
    data["nvml"][where] = fault
    facts = gather(data)
    gpu = facts["gpus"][0]
    assert gpu["index"] is None and gpu["bound_driver"] == "nvidia"
    assert gpu["processes"] is None and "no source read its processes" in gpu["processes_error"]
    assert both(facts) == ("pending", "refuse")


def test_a_gpu_bound_to_nvidia_that_nvml_does_not_list_is_unknown(gather):
    data = profile("h100_sxm_8x_nvswitch", busy=False)
    data["gpus"][3]["nvml_visible"] = False
    facts = gather(data)
    hidden = [g for g in facts["gpus"] if g["index"] is None]
    assert len(hidden) == 1 and hidden[0]["processes"] is None
    assert both(facts) == ("pending", "refuse")
    assert upgrade.gpu_busy_unknown(facts) == ["GPU %s: %s" % (hidden[0]["pci_bus_id"], hidden[0]["processes_error"])]


def test_gpus_no_process_can_use_are_idle(gather):
    """vfio-pci: NVML lists none, and none of NVIDIA's processes can run there."""
    facts = gather(profile("vfio_bound", busy=False))
    assert facts["gpus"] and facts["gpus"][0]["bound_driver"] == "vfio-pci"
    assert both(facts) == ("restart", "go")
    facts = gather(profile("driver_not_loaded", busy=False))
    assert facts["gpus"] and both(facts) == ("restart", "go")


def test_a_hung_query_is_bounded_and_stops_the_process_reads(gather):
    data = profile("h100_sxm_8x_nvswitch", busy=False)
    data["gpus"][2]["errors"] = {"nvmlDeviceGetComputeRunningProcesses": "Hang"}
    started = time.monotonic()
    facts = gather(data)
    assert time.monotonic() - started < 10 * TIMEOUT
    gpus = [g for g in facts["gpus"] if g["index"] is not None]
    assert [g["processes"] for g in gpus[:2]] == [[], []]
    assert gpus[2]["state"] == "error" and "did not answer within 0.3 s while reading GPU 2" in gpus[2]["processes_error"]
    assert all(g["processes"] is None and "did not answer within 0.3 s for GPU 2" in g["processes_error"] for g in gpus[3:])
    assert both(facts) == ("pending", "refuse")


def test_a_hung_nvml_init_is_bounded_and_the_processes_are_unknown(gather):
    data = profile("rtx3090", busy=True)
    data.setdefault("nvml", {})["init_error"] = "Hang"
    started = time.monotonic()
    facts = gather(data)
    # nvmlInit wakes every GPU: its bound is six steps' (0.3 s here).
    assert time.monotonic() - started < 10 * TIMEOUT * _nvml.WHOLE_HOST_FACTOR
    assert facts["source"] == "pci"
    assert any("nvmlInit did not return within %s s (6 x nvml_timeout)" % (TIMEOUT * 6) in m for m in facts["messages"]), facts["messages"]
    assert all(g["processes"] is None for g in facts["gpus"])
    assert both(facts) == ("pending", "refuse")


@pytest.mark.parametrize("script, control", [("sleep 30", False), ("cat %s", True)])
def test_a_hung_nvidia_smi_is_killed_and_the_processes_are_unknown(tmp_path, script, control):
    """NVML unusable (nvmlInit fails), so the facts fall back to nvidia-smi, which hangs: killed after the bound. The
    control: the same stand-in printing a busy GPU's XML in time is read, and the guards defer."""
    data = profile("rtx3090", busy=True)
    data.setdefault("nvml", {})["init_error"] = "DriverNotLoaded"
    xml = tmp_path / "smi.xml"
    xml.write_text(render(data))
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\n" + (script % xml if control else script) + "\n")
    smi.chmod(0o755)
    root = tmp_path / "root"
    root.mkdir()
    started = time.monotonic()
    facts = _facts.gather_facts(backends=["nvml", "nvidia-smi", "pci"], gather=["processes"], root=sysfs.build(str(root), data),
                                nv=fake_pynvml.make_fake(data).module, smi_binary=str(smi),
                                smi_run=lambda args: _facts.run_bounded(args, TIMEOUT if not control else 30), nvml_timeout=TIMEOUT)
    if control:
        assert facts["source"] == "nvidia-smi" and [p["pid"] for p in facts["gpus"][0]["processes"]] == [1234, 4242, 5555]
    else:
        assert time.monotonic() - started < 10
        assert facts["source"] == "pci"
        assert any("exited with 124" in m and "did not answer within 0.3 s (6 x nvml_timeout) and was killed" in m for m in facts["messages"])
        assert all(g["processes"] is None for g in facts["gpus"])
    assert both(facts) == ("pending", "refuse")


def test_no_timeout_reads_in_the_calling_thread():
    fake = fake_pynvml.make_fake(profile("rtx3090", busy=True))
    result = _nvml.collect(("processes",), fake.module, timeout=None)
    assert [p["pid"] for p in result["gpus"][0]["processes"]] == [1234, 4242, 5555]


# -- nvidia-smi -------------------------------------------------------------------------------------------------
IDLE_XML = render(profile("rtx3090", busy=False))
EMPTY = "\t\t<processes>\n\t\t</processes>"


@pytest.mark.parametrize("replacement, reason", [
    ("", "no <processes> element"),
    ("\t\t<processes>N/A</processes>", "'N/A'"),
    ("\t\t<processes>[Not Supported]</processes>", "Not Supported"),
    ("\t\t<processes><foo/></processes>", "'foo'"),
    ("\t\t<processes><process_info><pid>N/A</pid></process_info></processes>", "without a readable pid"),
    ("\t\t<processes><process_info><pid>-3</pid></process_info></processes>", "without a readable pid"),
    ("\t\t<processes><process_info><type>C</type></process_info></processes>", "without a readable pid"),
])
def test_nvidia_smi_processes_that_cannot_be_read(replacement, reason):
    assert EMPTY in IDLE_XML
    parsed = _smi.parse(IDLE_XML.replace(EMPTY, replacement), gather=("processes",))
    gpu = parsed["gpus"][0]
    assert gpu["processes"] is None and reason in gpu["processes_error"]
    facts = {"present": True, "state": "ok", "driver": {"kernel_module_loaded": True}, "gpus": [gpu]}
    assert both(facts) == ("pending", "refuse")


def test_nvidia_smi_empty_processes_are_idle_and_listed_ones_busy():
    gpu = _smi.parse(IDLE_XML, gather=("processes",))["gpus"][0]
    facts = {"present": True, "state": "ok", "driver": {"kernel_module_loaded": True}, "gpus": [gpu]}
    assert gpu["processes"] == [] and gpu["processes_error"] is None and both(facts) == ("restart", "go")
    busy = _smi.parse(render(profile("rtx3090", busy=True)), gather=("processes",))["gpus"][0]
    assert [p["pid"] for p in busy["processes"]] == [1234, 4242, 5555]
    assert both(dict(facts, gpus=[busy])) == ("pending", "refuse")


# -- malformed and partial facts ---------------------------------------------------------------------------------
GOOD = {"index": 0, "state": "ok", "bound_driver": "nvidia", "processes": [], "processes_error": None}
MALFORMED = [
    None, "facts", 5, [], {}, {"gpus": None}, {"gpus": 5}, {"gpus": "GPU 0"}, {"gpus": {"0": GOOD}},
    {"present": True, "gpus": []}, {"gpus": []},
    {"gpus": [5]}, {"gpus": [None]}, {"gpus": ["GPU-0"]},
    {"gpus": [dict(GOOD, processes=None)]},
    {"gpus": [dict(GOOD, processes="none")]},
    {"gpus": [dict(GOOD, processes={})]},
    {"gpus": [dict(GOOD, processes=0)]},
    {"gpus": [{k: v for k, v in GOOD.items() if k != "processes"}]},
    {"gpus": [dict(GOOD, processes_error="NoPermission")]},
    {"gpus": [dict(GOOD, processes_error=["x"])]},
    {"gpus": [dict(GOOD, state="gpu_lost")]},
    {"gpus": [dict(GOOD, state="error")]},
    {"gpus": [dict(GOOD, state="no_permission")]},
    {"gpus": [dict(GOOD, state="pci_only", index=None)]},
    {"gpus": [dict(GOOD, state=None)]},
    {"gpus": [dict(GOOD, processes=[{"pid": None}])]},
    {"gpus": [dict(GOOD, processes=[{"pid": "abc"}])]},
    {"gpus": [dict(GOOD, processes=[{"pid": -1}])]},
    {"gpus": [dict(GOOD, processes=[{"pid": 0}])]},
    {"gpus": [dict(GOOD, processes=[{"pid": True}])]},
    {"gpus": [dict(GOOD, processes=[{"pid": 4.5}])]},
    {"gpus": [dict(GOOD, processes=["4242"])]},
    {"gpus": [dict(GOOD, processes=[None])]},
    {"gpus": [GOOD, dict(GOOD, index=1, processes=None)]},
    {"driver": 5, "gpus": [dict(GOOD, processes=None)]},
    {"driver": {"kernel_module_loaded": False}, "gpus": [dict(GOOD, processes=None)]},  # bound to nvidia: contradiction
]


@pytest.mark.parametrize("facts", MALFORMED)
def test_malformed_facts_are_unknown_under_both_guards_and_never_raise(facts):
    assert restart_decision(facts) == "pending"
    if facts is not None and not isinstance(facts, dict):
        with pytest.raises(upgrade.AnsibleFilterError, match="expects the GPU facts"):
            upgrade.gpu_busy_unknown(facts)
    else:
        assert upgrade_decision(facts) == "refuse"
        assert upgrade.gpu_busy_unknown(facts)


@pytest.mark.parametrize("facts", [
    {"present": False, "state": "no_gpu", "gpus": []},
    {"state": "no_gpu", "gpus": []},
    {"gpus": [GOOD]},
    {"gpus": [GOOD, dict(GOOD, index=1)]},
    {"gpus": [dict(GOOD, bound_driver="vfio-pci", state="pci_only", processes=None, index=None)]},
    {"gpus": [dict(GOOD, bound_driver="pci-stub", state="pci_only", processes=None, index=None)]},
    {"gpus": [dict(GOOD, bound_driver=None, state="pci_only", processes=None, index=None)]},
    {"driver": {"kernel_module_loaded": False}, "gpus": [dict(GOOD, bound_driver=None, processes=None, state="pci_only")]},
])
def test_known_idle_facts_restart_and_go(facts):
    assert both(facts) == ("restart", "go")


def test_busy_with_some_unknown_names_both():
    facts = {"gpus": [dict(GOOD, processes=[{"pid": 4242, "name": "python3"}]), dict(GOOD, index=1, processes=None,
                                                                                     processes_error="NoPermission")]}
    assert upgrade.gpu_busy_processes(facts) == ["python3 (pid 4242) on GPU 0"]
    assert upgrade.gpu_busy_unknown(facts) == ["GPU 1: NoPermission"]
    found, unknown = er.gpu_processes(facts)
    assert [p["pid"] for p in found] == [4242] and "GPU 1: NoPermission" in unknown


def test_always_restarts_although_unknown():
    _found, unknown = er.gpu_processes(None)
    engine = {"name": "docker", "unit": "docker.service", "active": True, "changed": True, "newest": None, "started": None}
    assert er.plan("always", [engine], [], unknown, False)["restart"] == ["docker.service"]
    pending = er.plan("if_idle", [engine], [], unknown, False)
    assert "cannot tell whether containers use the GPUs" in pending["messages"][0]
    assert "set the restart policy to always" in pending["messages"][0]


def test_processes_unknown_marks_a_record():
    record = _gpu_schema.empty_gpu_record(0)
    record.update(state="gpu_lost", message="NVML reports GPU 0 as lost")
    _gpu_schema.processes_unknown(record)
    assert record["processes"] is None and record["processes_error"] == "its state is gpu_lost: NVML reports GPU 0 as lost"


# -- the modules -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", [-1, -0.5, float("nan"), float("inf"), 1e9, "abc", "10s", [10], {"a": 1}])
def test_nvml_timeout_hostile_values_fail_naming_the_option(run_module, host_tree, fake_nvml, value):
    from ansible_collections.gpuhost.nvidia.plugins.modules import nvidia_gpu_facts  # pylint: disable=import-outside-toplevel

    fake_nvml(profile("rtx3090", busy=False))
    result = run_module(nvidia_gpu_facts, {"root": host_tree("rtx3090"), "gather": ["processes"], "nvml_timeout": value})
    assert result.get("failed") and "nvml_timeout" in result["msg"], result


@pytest.mark.parametrize("check_mode", [False, True])
def test_the_facts_module_reports_unknown_the_same_in_check_mode(run_module, host_tree, fake_nvml, check_mode):
    from ansible_collections.gpuhost.nvidia.plugins.modules import nvidia_gpu_facts  # pylint: disable=import-outside-toplevel

    data = profile("rtx3090", busy=False, errors={"nvmlDeviceGetComputeRunningProcesses": "NoPermission"})
    fake_nvml(data)
    result = run_module(nvidia_gpu_facts, {"root": host_tree(data), "gather": ["processes"]}, check_mode=check_mode)
    gpu = result["ansible_facts"]["nvidia_gpu"]["gpus"][0]
    assert gpu["processes"] is None and "NVMLError_NoPermission" in gpu["processes_error"]


BAD_GPU_FACTS = [{"gpus": 5}, {"gpus": "x"}, {"gpus": [5]}, {"gpus": [{"index": 0, "processes": "none"}]}, {"driver": 5, "gpus": []},
                 {"gpus": [{"index": 0, "processes": [{"pid": {"x": 1}}]}]}, {}, None]


@pytest.mark.parametrize("gpu_facts", BAD_GPU_FACTS)
@pytest.mark.parametrize("check_mode", [False, True])
def test_restart_plan_module_defers_on_malformed_facts_without_a_traceback(run_module, monkeypatch, tmp_path, gpu_facts, check_mode):
    from ansible_collections.gpuhost.nvidia.plugins.modules import nvidia_container_restart_plan  # pylint: disable=import-outside-toplevel

    def run_command(self, args, **kwargs):
        return 0, "".join("Id=%s\nActiveState=active\nExecMainStartTimestampMonotonic=1\n\n" % unit for unit in args[3:]), ""

    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
    args = {"engines": [{"name": "docker", "changed": True}], "gpu_facts": gpu_facts, "proc_root": str(tmp_path),
            "docker_daemon_json": str(tmp_path / "daemon.json")}
    result = run_module(nvidia_container_restart_plan, args, check_mode=check_mode, bins={"systemctl": "/bin/systemctl"})
    assert not result.get("failed") and result["restart"] == [] and result["pending"] == ["docker.service"], result
    assert "cannot tell whether containers use the GPUs" in result["messages"][0]
    always = run_module(nvidia_container_restart_plan, dict(args, policy="always"), check_mode=check_mode,
                        bins={"systemctl": "/bin/systemctl"})
    assert always["restart"] == ["docker.service"]
