# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import pynvml as real_pynvml
import pytest

import fake_pynvml

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _nvml


def test_fake_reuses_the_real_error_classes():
    fake = fake_pynvml.make_fake("no_gpu").module
    assert fake.NVMLError_DriverNotLoaded is real_pynvml.NVMLError_DriverNotLoaded
    assert fake.NVMLError is real_pynvml.NVMLError
    err = fake_pynvml.error("DriverNotLoaded")
    assert err.value == real_pynvml.NVML_ERROR_DRIVER_NOT_LOADED == 9
    assert str(err) == "Driver Not Loaded"
    # nvidia-ml-py maps a bare NVMLError(value) onto the subclass; the fake's errors are the same objects.
    assert real_pynvml.NVMLError(12).__class__ is fake.NVMLError_LibraryNotFound


def test_real_library_missing_is_library_not_found():
    # On this machine nvidia-ml-py is installed but libnvidia-ml.so is not; with a GPU host it would initialise.
    try:
        real_pynvml.nvmlInit()
    except real_pynvml.NVMLError_LibraryNotFound:
        result = _nvml.collect(nv=real_pynvml)
        assert (result["state"], result["available"]) == ("library_not_found", False)
    else:
        real_pynvml.nvmlShutdown()
        pytest.skip("a real NVML library is present")


def test_missing_python_library(no_pynvml):
    result = _nvml.collect()
    assert result["state"] == "library_not_found"
    assert "nvidia-ml-py" in result["message"]


@pytest.mark.parametrize(
    "error, state",
    [
        ("DriverNotLoaded", "driver_not_loaded"),
        ("LibraryNotFound", "library_not_found"),
        ("NoPermission", "no_permission"),
        ("LibRmVersionMismatch", "driver_version_mismatch"),
        ("Unknown", "error"),
    ],
)
def test_init_errors_map_to_states(error, state):
    profile = fake_pynvml.load_profile("t4")
    profile["nvml"]["init_error"] = error
    fake = fake_pynvml.make_fake(profile)
    result = _nvml.collect(nv=fake.module)
    assert (result["state"], result["available"], result["gpus"]) == (state, False, [])
    assert result["message"].startswith("NVML: nvmlInit failed: ")
    assert fake.shutdown_count == 0  # nothing to shut down when init failed


def test_shutdown_always_runs():
    fake = fake_pynvml.make_fake("h100_sxm_8x_nvswitch")
    _nvml.collect(nv=fake.module)
    assert (fake.init_count, fake.shutdown_count, fake.initialised) == (1, 1, 0)
    fake.nvml["count_error"] = "Unknown"
    result = _nvml.collect(nv=fake.module)
    assert result["state"] == "error" and "nvmlDeviceGetCount" in result["message"]
    assert (fake.init_count, fake.shutdown_count) == (2, 2)


def test_default_gather_is_cheap():
    fake = fake_pynvml.make_fake("h100_sxm_8x_nvswitch")
    result = _nvml.collect(nv=fake.module)
    called = {c[0] for c in fake.calls}
    assert {"nvmlInit", "nvmlDeviceGetCount", "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetEccMode", "nvmlShutdown"} <= called
    assert [c[2] for c in fake.calls if c[0] == "nvmlDeviceGetHandleByIndex"] == list(range(8))
    for expensive in ("nvmlDeviceGetUtilizationRates", "nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetNvLinkState",
                      "nvmlDeviceGetTopologyCommonAncestor", "nvmlDeviceGetPowerUsage", "nvmlDeviceGetTemperature"):
        assert expensive not in called
    assert "utilization" not in result["gpus"][0] and "processes" not in result["gpus"][0]
    assert fake.setter_calls == []


def test_not_supported_fields_are_null():
    fake = fake_pynvml.make_fake("rtx3090")
    gpu = _nvml.collect(nv=fake.module)["gpus"][0]
    assert gpu["ecc"] == {"current": None, "pending": None}
    assert gpu["mig"] == {"current": None, "pending": None}
    assert gpu["state"] == "ok"


def test_injected_field_error_is_null_not_crash():
    profile = fake_pynvml.load_profile("t4")
    profile["gpus"][0]["errors"] = {"nvmlDeviceGetPowerManagementLimit": "NotSupported", "nvmlDeviceGetPersistenceMode": "Unknown"}
    result = _nvml.collect(nv=fake_pynvml.make_fake(profile).module)
    gpu = result["gpus"][0]
    assert gpu["power_limit_w"] is None and gpu["persistence_mode"] is None
    assert gpu["power_limit_max_w"] == 70.0
    # NotSupported is silent; an unexpected error is named.
    assert result["messages"] == ["GPU 0: nvmlDeviceGetPersistenceMode failed: Unknown Error (NVMLError_Unknown)"]


def test_gpu_lost_mid_way_keeps_what_was_read():
    profile = fake_pynvml.load_profile("h100_sxm_8x_nvswitch")
    profile["gpus"][3]["errors"] = {"nvmlDeviceGetMemoryInfo": "GpuIsLost"}
    fake = fake_pynvml.make_fake(profile)
    result = _nvml.collect(nv=fake.module)
    assert result["state"] == "ok" and len(result["gpus"]) == 8
    lost = result["gpus"][3]
    assert lost["state"] == "gpu_lost"
    assert lost["pci_bus_id"] == "0000:5d:00.0" and lost["uuid"] == "GPU-0a1b2c3d-0000-4000-8000-000000000003"
    assert lost["memory_total_mib"] is None
    assert "lost" in lost["message"]
    assert [g["state"] for g in result["gpus"]].count("ok") == 7
    assert fake.shutdown_count == 1


def test_handle_errors_per_gpu():
    profile = fake_pynvml.load_profile("h100_sxm_8x_nvswitch")
    profile["gpus"][0]["errors"] = {"nvmlDeviceGetHandleByIndex": "NoPermission"}
    profile["gpus"][1]["errors"] = {"nvmlDeviceGetHandleByIndex": "GpuIsLost"}
    result = _nvml.collect(gather=("topology",), nv=fake_pynvml.make_fake(profile).module)
    assert [g["state"] for g in result["gpus"][:3]] == ["no_permission", "gpu_lost", "ok"]
    assert result["gpus"][0]["uuid"] is None
    # Topology skips the GPUs without a handle.
    assert [p["index"] for p in result["gpus"][2]["topology"]["peers"]] == [3, 4, 5, 6, 7]


def test_topology_nvswitch_board():
    result = _nvml.collect(gather=("topology",), nv=fake_pynvml.make_fake("h100_sxm_8x_nvswitch").module)
    topo = result["gpus"][0]["topology"]
    assert topo["nvlink_active_links"] == 18
    assert [p["link"] for p in topo["peers"]] == ["NV18"] * 7
    assert topo["peers"][0] == {"index": 1, "pci_bus_id": "0000:2a:00.0", "link": "NV18"}


def test_topology_without_nvlink_uses_pcie_levels():
    profile = fake_pynvml.load_profile("h100_sxm_8x_nvswitch")
    for gpu in profile["gpus"]:
        gpu["nvlink"] = None
    result = _nvml.collect(gather=("topology",), nv=fake_pynvml.make_fake(profile).module)
    peers = result["gpus"][0]["topology"]["peers"]
    # GPUs 1-3 share NUMA node 0 with GPU 0; 4-7 are on node 1.
    assert [p["link"] for p in peers] == ["NODE", "NODE", "NODE", "SYS", "SYS", "SYS", "SYS"]
    assert result["gpus"][0]["topology"]["nvlink_active_links"] == 0


def test_mig_devices_and_processes():
    fake = fake_pynvml.make_fake("a100_mig")
    gpu = _nvml.collect(gather=("processes", "utilization"), nv=fake.module)["gpus"][0]
    assert gpu["mig_devices"] == [
        {"uuid": "MIG-11111111-aaaa-5bbb-8ccc-000000000001", "gi": 1, "ci": 0, "profile": "1c.3g.20gb", "memory_mib": 19968},
        {"uuid": "MIG-11111111-aaaa-5bbb-8ccc-000000000002", "gi": 1, "ci": 1, "profile": "2c.3g.20gb", "memory_mib": 19968},
        {"uuid": "MIG-11111111-aaaa-5bbb-8ccc-000000000007", "gi": 7, "ci": 0, "profile": "1g.5gb", "memory_mib": 4864},
        {"uuid": "MIG-11111111-aaaa-5bbb-8ccc-000000000008", "gi": 8, "ci": 0, "profile": "1g.5gb", "memory_mib": 4864},
    ]
    assert gpu["utilization"] == {"gpu": None, "memory": None}  # not supported under MIG
    assert gpu["power_draw_w"] == 58.12
    assert gpu["processes"] == [
        {"pid": 5150, "type": "C", "name": "trainer", "used_memory_mib": 9000, "gpu_instance_id": 1, "compute_instance_id": 0},
        {"pid": 5151, "type": "C", "name": "notebook", "used_memory_mib": 2000, "gpu_instance_id": 7, "compute_instance_id": 0},
    ]


def test_processes_compute_and_graphics_merge():
    gpu = _nvml.collect(gather=("processes",), nv=fake_pynvml.make_fake("rtx3090").module)["gpus"][0]
    assert gpu["processes"] == [
        {"pid": 1234, "type": "G", "name": "/usr/lib/xorg/Xorg", "used_memory_mib": 310, "gpu_instance_id": None, "compute_instance_id": None},
        {"pid": 4242, "type": "C", "name": "python3", "used_memory_mib": 2048, "gpu_instance_id": None, "compute_instance_id": None},
        {"pid": 5555, "type": "C+G", "name": None, "used_memory_mib": None, "gpu_instance_id": None, "compute_instance_id": None},
    ]


@pytest.mark.parametrize(
    "name, profile",
    [("NVIDIA A100-SXM4-40GB MIG 3g.20gb", "3g.20gb"), ("NVIDIA H100 80GB HBM3 MIG 1c.3g.40gb", "1c.3g.40gb"),
     ("NVIDIA H100 80GB HBM3 MIG 1g.10gb+me", "1g.10gb+me"), ("NVIDIA A100-SXM4-40GB", None), (None, None)],
)
def test_mig_profile_from_name(name, profile):
    assert _nvml.mig_profile_from_name(name) == profile


# -- the fake's setters, which nvidia_smi_settings will rely on ---------------------------------------------------
def test_fake_setters_mutate_state_and_record_calls():
    fake = fake_pynvml.make_fake("t4")
    nv = fake.module
    nv.nvmlInit()
    handle = nv.nvmlDeviceGetHandleByIndex(0)
    nv.nvmlDeviceSetPersistenceMode(handle, 0)
    nv.nvmlDeviceSetComputeMode(handle, 0)
    nv.nvmlDeviceSetPowerManagementLimit(handle, 65000)
    nv.nvmlDeviceSetEccMode(handle, 1)
    nv.nvmlDeviceSetGpuLockedClocks(handle, 300, 1590)
    nv.nvmlDeviceResetGpuLockedClocks(handle)
    nv.nvmlDeviceSetApplicationsClocks(handle, 5001, 1590)
    nv.nvmlDeviceResetApplicationsClocks(handle)
    with pytest.raises(nv.NVMLError_InvalidArgument):
        nv.nvmlDeviceSetPowerManagementLimit(handle, 90000)
    with pytest.raises(nv.NVMLError_NotSupported):
        nv.nvmlDeviceSetMigMode(handle, 1)
    assert nv.nvmlDeviceGetPersistenceMode(handle) == 0
    assert nv.nvmlDeviceGetPowerManagementLimit(handle) == 65000
    assert nv.nvmlDeviceGetEccMode(handle) == [1, 1]  # T4 profile starts as [1, 0]: pending is set, current unchanged
    assert fake.setter_calls[:3] == [
        ("nvmlDeviceSetPersistenceMode", 0, 0),
        ("nvmlDeviceSetComputeMode", 0, 0),
        ("nvmlDeviceSetPowerManagementLimit", 0, 65000),
    ]
    assert len(fake.setter_calls) == 10
    nv.nvmlShutdown()


def test_fake_mig_mode_and_instances():
    fake = fake_pynvml.make_fake("a100_mig")
    nv = fake.module
    nv.nvmlInit()
    handle = nv.nvmlDeviceGetHandleByIndex(0)
    assert nv.nvmlDeviceSetMigMode(handle, 0) == nv.NVML_ERROR_IN_USE
    assert nv.nvmlDeviceGetMigMode(handle) == [1, 0]  # pending until a GPU reset
    gi = nv.nvmlDeviceGetGpuInstanceById(handle, 7)
    with pytest.raises(nv.NVMLError_InUse):
        nv.nvmlGpuInstanceDestroy(gi)
    nv.nvmlComputeInstanceDestroy(nv.nvmlGpuInstanceGetComputeInstanceById(gi, 0))
    nv.nvmlGpuInstanceDestroy(gi)
    with pytest.raises(nv.NVMLError_NotFound):
        nv.nvmlDeviceGetGpuInstanceById(handle, 7)
    info = nv.nvmlDeviceGetGpuInstanceProfileInfo(handle, nv.NVML_GPU_INSTANCE_PROFILE_2_SLICE)
    assert (info.sliceCount, info.memorySizeMB) == (2, 9856)
    new_gi = nv.nvmlDeviceCreateGpuInstance(handle, info.id)
    assert nv.nvmlGpuInstanceGetInfo(new_gi).id == 9
    ci = nv.nvmlGpuInstanceCreateComputeInstance(new_gi, nv.NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE)
    assert nv.nvmlComputeInstanceGetInfo(ci).id == 0
    with pytest.raises(nv.NVMLError_InsufficientResources):
        nv.nvmlDeviceCreateGpuInstance(handle, 2)  # 3 + 1 + 2 slices used; 3 more do not fit in 7
    names = [nv.nvmlDeviceGetName(nv.nvmlDeviceGetMigDeviceHandleByIndex(handle, i)) for i in range(4)]
    assert names[-1] == "NVIDIA A100-SXM4-40GB MIG 2g.10gb"
    assert [c[0] for c in fake.setter_calls] == [
        "nvmlDeviceSetMigMode", "nvmlGpuInstanceDestroy", "nvmlComputeInstanceDestroy", "nvmlGpuInstanceDestroy",
        "nvmlDeviceCreateGpuInstance", "nvmlGpuInstanceCreateComputeInstance", "nvmlDeviceCreateGpuInstance",
    ]
    nv.nvmlShutdown()


def test_fake_requires_init():
    nv = fake_pynvml.make_fake("t4").module
    with pytest.raises(nv.NVMLError_Uninitialized):
        nv.nvmlDeviceGetCount()


# -- the session and its extension hook (what the settings backend reads through) ------------------------------
def test_session_is_one_init_and_one_shutdown_around_every_read():
    fake = fake_pynvml.make_fake("a100_mig")
    with _nvml.Session(fake.module) as session:
        assert session.active
        first = session.collect(("processes",))
        second = session.collect()
        assert fake.initialised == 1
    assert first["available"] and second["available"] and first["gpus"][0]["uuid"] == second["gpus"][0]["uuid"]
    assert (fake.init_calls, fake.shutdown_count, fake.initialised) == (1, 1, 0)


def test_session_failure_is_reported_like_collect():
    profile = fake_pynvml.load_profile("t4")
    profile["nvml"]["init_error"] = "DriverNotLoaded"
    fake = fake_pynvml.make_fake(profile)
    with _nvml.Session(fake.module) as session:
        assert not session.active
        result = session.collect()
    assert result == _nvml.collect(nv=fake.module)
    assert (result["state"], result["available"]) == ("driver_not_loaded", False)
    assert (fake.init_calls, fake.shutdown_count) == (2, 0)


def test_extend_hook_reads_in_the_same_pass_with_the_same_handle():
    fake = fake_pynvml.make_fake("h100_sxm_8x_nvswitch")
    seen = []

    def extend(record, handle, reader):
        seen.append((record["index"], handle, reader.call("GPU %d" % record["index"], "nvmlDeviceGetMinorNumber", handle)))

    with _nvml.Session(fake.module) as session:
        result = session.collect((), extend)
    assert [index for index, _handle, _minor in seen] == list(range(8))
    assert all(minor is not None for _index, _handle, minor in seen)
    assert [c[2] for c in fake.calls if c[0] == "nvmlDeviceGetHandleByIndex"] == list(range(8))
    assert [g["state"] for g in result["gpus"]] == ["ok"] * 8


def test_extend_hook_that_finds_the_gpu_lost_marks_it_lost():
    fake = fake_pynvml.make_fake("t4")

    def extend(record, handle, reader):
        raise _nvml.GpuLost("fell off the bus")

    with _nvml.Session(fake.module) as session:
        result = session.collect((), extend)
    assert result["gpus"][0]["state"] == "gpu_lost" and "fell off the bus" in result["gpus"][0]["message"]


@pytest.mark.parametrize("value,name", [(0, "default"), (1, "exclusive_thread"), (2, "prohibited"), (3, "exclusive_process"), (9, None)])
def test_compute_modes_come_from_the_facts_schema(value, name):
    profile = fake_pynvml.load_profile("t4")
    profile["gpus"][0]["compute_mode"] = value
    assert _nvml.collect(nv=fake_pynvml.make_fake(profile).module)["gpus"][0]["compute_mode"] == name
