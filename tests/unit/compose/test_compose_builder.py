# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The pure builder: every option, every strategy, VM mode, and the requests that must fail."""

from __future__ import annotations

import typing as t

import pytest
import yaml

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _compose as c

H0 = "GPU-3f1c2a51-0a6e-4b6b-9a55-2d4ac6f0e001"
H1 = "GPU-8b0e6c1d-51f4-4a54-8d2e-0c9f3e7b4002"
A100_MIG1 = "MIG-a1000000-0000-4000-8000-0000000000a1"
A100_MIG2 = "MIG-a1000000-0000-4000-8000-0000000000a2"
A40 = "GPU-a1400000-0000-4000-8000-000000000001"
L4 = "GPU-14000000-0000-4000-8000-000000000002"
P80A, P80B = "GPU-00000000-0000-4000-8000-000000000080", "GPU-00000000-0000-4000-8000-000000000081"
P24A, P24B = "GPU-00000000-0000-4000-8000-000000000024", "GPU-00000000-0000-4000-8000-000000000025"


def build(facts: dict[str, t.Any] | None, *services: dict[str, t.Any], **request: t.Any) -> c.Plan:
    return c.build({"services": list(services), **request}, facts)


def devices(plan: c.Plan, name: str) -> list[dict[str, t.Any]]:
    return plan.services[name]["deploy"]["resources"]["reservations"]["devices"]


def env(plan: c.Plan, name: str) -> dict[str, str]:
    return plan.services[name].get("environment", {})


# ------------------------------------------------------------------------------------------- devices: count / ids


def test_default_is_all_gpus(facts):
    plan = build(facts("two_h100"), {"name": "app"})
    assert devices(plan, "app") == [{"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}]
    assert env(plan, "app") == {"NVIDIA_VISIBLE_DEVICES": "all"}
    assert plan.assignment == {"app": ["all"]}


def test_count_number_lets_the_engine_choose(facts):
    plan = build(facts("two_h100"), {"name": "app", "count": 2})
    assert devices(plan, "app") == [{"driver": "nvidia", "count": 2, "capabilities": ["gpu"]}]
    assert "NVIDIA_VISIBLE_DEVICES" not in env(plan, "app") and "CUDA_VISIBLE_DEVICES" not in env(plan, "app")
    assert plan.assignment == {"app": []}


def test_count_given_as_digit_string_is_a_number(facts):
    plan = build(facts("two_h100"), {"name": "app", "count": "1"})
    assert devices(plan, "app")[0]["count"] == 1


def test_count_all_explicit(facts):
    plan = build(facts("two_h100"), {"name": "app", "count": "all"})
    assert devices(plan, "app")[0]["count"] == "all"


def test_device_ids_by_index_are_written_as_uuids(facts):
    plan = build(facts("two_h100"), {"name": "app", "device_ids": [1]})
    assert devices(plan, "app") == [{"driver": "nvidia", "device_ids": [H1], "capabilities": ["gpu"]}]
    assert env(plan, "app") == {"NVIDIA_VISIBLE_DEVICES": H1, "CUDA_VISIBLE_DEVICES": H1}


def test_device_ids_by_uuid_any_case(facts):
    plan = build(facts("two_h100"), {"name": "app", "device_ids": [H0.lower(), "1"]})
    assert devices(plan, "app")[0]["device_ids"] == [H0, H1]


def test_id_format_index(facts):
    plan = build(facts("two_h100"), {"name": "app", "device_ids": [H1, 0]}, id_format="index")
    assert devices(plan, "app")[0]["device_ids"] == ["1", "0"]
    # The container sees only its own GPUs, but CUDA_VISIBLE_DEVICES may name them by UUID, which is unambiguous.
    assert env(plan, "app")["NVIDIA_VISIBLE_DEVICES"] == "1,0"
    assert env(plan, "app")["CUDA_VISIBLE_DEVICES"] == "%s,%s" % (H1, H0)


def test_duplicate_ids_are_written_once(facts):
    plan = build(facts("two_h100"), {"name": "app", "device_ids": [0, H0, "0"]})
    assert devices(plan, "app")[0]["device_ids"] == [H0]


def test_mig_devices_by_reference_and_uuid(facts):
    plan = build(facts("mixed"), {"name": "a", "device_ids": ["0:1"]}, {"name": "b", "device_ids": [A100_MIG1]})
    assert devices(plan, "a")[0]["device_ids"] == [A100_MIG2]
    assert devices(plan, "b")[0]["device_ids"] == [A100_MIG1]
    assert env(plan, "a")["CUDA_VISIBLE_DEVICES"] == A100_MIG2


def test_mig_without_uuid_falls_back_to_reference_with_a_warning(facts):
    f = facts("mixed")
    f["gpus"][0]["mig_devices"][1]["uuid"] = None  # nvidia-smi -q -x does not print MIG UUIDs
    plan = build(f, {"name": "a", "device_ids": ["0:1"]})
    assert devices(plan, "a")[0]["device_ids"] == ["0:1"]
    assert env(plan, "a") == {"NVIDIA_VISIBLE_DEVICES": "0:1", "CUDA_VISIBLE_DEVICES": "0"}
    assert any("no UUID for device 0:1" in w for w in plan.warnings)


def test_whole_gpu_with_mig_on_is_refused_naming_its_mig_devices(facts):
    # Placed whole GPUs never have MIG on; an explicit request for one is refused the same way (issue #16).
    with pytest.raises(c.ComposeError) as err:
        build(facts("mixed"), {"name": "a", "device_ids": [0]})
    assert "has MIG enabled, and a whole GPU with MIG on is not placed" in str(err.value)
    assert "0:0 (%s), 0:1 (%s)" % (A100_MIG1, A100_MIG2) in str(err.value)


def test_without_facts_ids_pass_through_unchecked():
    plan = build(None, {"name": "a", "device_ids": [0, "GPU-1234", "1:0"]})
    assert devices(plan, "a")[0]["device_ids"] == ["0", "GPU-1234", "1:0"]
    assert env(plan, "a") == {"NVIDIA_VISIBLE_DEVICES": "0,GPU-1234,1:0"}
    assert any("not checked" in w for w in plan.warnings)


# ------------------------------------------------------------------------------------------- CDI


def test_cdi_all(facts):
    plan = build(facts("two_h100"), {"name": "a", "driver": "cdi"})
    assert devices(plan, "a") == [{"driver": "cdi", "device_ids": ["nvidia.com/gpu=all"], "capabilities": ["gpu"]}]
    assert "NVIDIA_VISIBLE_DEVICES" not in env(plan, "a")


def test_cdi_indices_become_uuid_names(facts):
    plan = build(facts("two_h100"), {"name": "a", "driver": "cdi", "device_ids": [0]})
    assert devices(plan, "a")[0]["device_ids"] == ["nvidia.com/gpu=" + H0]
    assert env(plan, "a") == {"CUDA_VISIBLE_DEVICES": H0}


def test_cdi_names_are_kept_and_checked(facts):
    plan = build(facts("two_h100"), {"name": "a", "driver": "cdi", "device_ids": ["nvidia.com/gpu=1", "example.com/fpga=x"]})
    assert devices(plan, "a")[0]["device_ids"] == ["nvidia.com/gpu=1", "example.com/fpga=x"]
    with pytest.raises(c.ComposeError, match=r"device id 7 is not on this host"):
        build(facts("two_h100"), {"name": "a", "driver": "cdi", "device_ids": ["nvidia.com/gpu=7"]})


def test_cdi_kind_option(facts):
    plan = build(facts("two_h100"), {"name": "a", "driver": "cdi", "device_ids": [1]}, cdi_kind="nvidia.com/device", id_format="index")
    assert devices(plan, "a")[0]["device_ids"] == ["nvidia.com/device=1"]


def test_cdi_name_needs_cdi_driver(facts):
    with pytest.raises(c.ComposeError, match=r"nvidia.com/gpu=0 is a CDI device name; set driver: cdi"):
        build(facts("two_h100"), {"name": "a", "device_ids": ["nvidia.com/gpu=0"]})


# ------------------------------------------------------------------------------------------- capabilities, env


def test_capabilities_are_kept_in_order_without_duplicates(facts):
    plan = build(facts("two_h100"), {"name": "a", "capabilities": ["gpu", "video", "compute", "video"], "environment_presets": ["nvidia"]})
    assert devices(plan, "a")[0]["capabilities"] == ["gpu", "video", "compute"]
    assert env(plan, "a")["NVIDIA_DRIVER_CAPABILITIES"] == "compute,video"


@pytest.mark.parametrize("cap", c.CAPABILITIES)
def test_every_capability_is_accepted(facts, cap):
    plan = build(facts("two_h100"), {"name": "a", "capabilities": [cap]})
    assert devices(plan, "a")[0]["capabilities"] == [cap]


def test_nvidia_preset_defaults_to_compute_utility(facts):
    plan = build(facts("two_h100"), {"name": "a", "environment_presets": ["nvidia"]})
    assert env(plan, "a")["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility"


@pytest.mark.parametrize("preset", sorted(c.PRESETS))
def test_every_preset(facts, preset):
    plan = build(facts("two_h100"), {"name": "a", "environment_presets": [preset]})
    for key, value in c.PRESETS[preset].items():
        assert env(plan, "a")[key] == value
    assert all(isinstance(v, str) for v in env(plan, "a").values())


def test_framework_presets_carry_the_well_known_variables(facts):
    plan = build(facts("two_h100"), {"name": "a", "environment_presets": ["cuda", "pytorch", "tensorflow", "cudnn"]})
    e = env(plan, "a")
    assert e["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert e["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert e["TF_FORCE_GPU_ALLOW_GROWTH"] == "true"
    assert "CUDA_CACHE_PATH" in e and "CUDNN_LOGERR_DBG" in e


def test_explicit_environment_wins_over_presets_and_computed(facts):
    plan = build(
        facts("two_h100"),
        {"name": "a", "device_ids": [0], "environment_presets": ["cuda"],
         "environment": {"CUDA_DEVICE_ORDER": "FASTEST_FIRST", "CUDA_VISIBLE_DEVICES": "0", "DEBUG": True, "N": 3, "E": None}},
    )
    e = env(plan, "a")
    assert e["CUDA_DEVICE_ORDER"] == "FASTEST_FIRST"
    assert e["CUDA_VISIBLE_DEVICES"] == "0"
    assert (e["DEBUG"], e["N"], e["E"]) == ("true", "3", "")
    assert list(e) == sorted(e)


# ------------------------------------------------------------------------------------------- runtime knobs


def test_runtime_knobs(facts):
    plan = build(
        facts("two_h100"),
        {"name": "a", "ipc": "host", "shm_size": "16g", "ulimits": {"stack": "67108864", "memlock": -1, "nofile": {"soft": 1024, "hard": 4096}},
         "runtime": "nvidia"},
    )
    svc = plan.services["a"]
    assert svc["ipc"] == "host" and svc["shm_size"] == "16g" and svc["runtime"] == "nvidia"
    assert svc["ulimits"] == {"memlock": -1, "nofile": {"soft": 1024, "hard": 4096}, "stack": 67108864}
    assert "privileged" not in svc


@pytest.mark.parametrize("ipc", ["host", "private", "shareable", "none", "service:trainer", "container:abc"])
def test_ipc_values(facts, ipc):
    assert build(facts("two_h100"), {"name": "a", "ipc": ipc}).services["a"]["ipc"] == ipc


def test_shm_size_as_bytes(facts):
    assert build(facts("two_h100"), {"name": "a", "shm_size": 1073741824}).services["a"]["shm_size"] == 1073741824


# ------------------------------------------------------------------------------------------- strategies


def test_spread_round_robin(facts):
    plan = build(facts("four_pack"), *({"name": "s%d" % i} for i in range(6)), strategy="spread")
    assert [plan.assignment["s%d" % i] for i in range(6)] == [[P80A], [P80B], [P24A], [P24B], [P80A], [P80B]]
    assert devices(plan, "s0") == [{"driver": "nvidia", "device_ids": [P80A], "capabilities": ["gpu"]}]


def test_spread_with_counts_wraps_and_respects_memory(facts):
    plan = build(facts("four_pack"), {"name": "a", "count": 3}, {"name": "b", "count": 2, "memory_mib": 40000}, strategy="spread")
    assert plan.assignment["a"] == [P80A, P80B, P24A]
    assert plan.assignment["b"] == [P80A, P80B]


def test_spread_shortfall(facts):
    with pytest.raises(c.ComposeError, match=r"strategy spread: service 'a' needs 5 GPU\(s\) but the host has 4 .*short by 1"):
        build(facts("four_pack"), {"name": "a", "count": 5}, strategy="spread")


def test_pack_fills_by_memory(facts):
    plan = build(
        facts("four_pack"),
        {"name": "small1", "memory_mib": 10000},
        {"name": "big", "memory_mib": 70000},
        {"name": "small2", "memory_mib": 10000},
        {"name": "mid", "memory_mib": 20000},
        strategy="pack",
    )
    # Largest first, each on the fullest GPU that still fits: big (70000) takes GPU 0 and leaves 11559 MiB; mid (20000)
    # fits on GPU 0 no more, so it takes the fullest that fits, an L4 (GPU 2, 3034 left); small1 fits in GPU 0's rest;
    # small2 no longer fits on GPU 0 (1559 left) and takes the fullest that fits, the other L4.
    assert plan.assignment == {"small1": [P80A], "big": [P80A], "small2": [P24B], "mid": [P24A]}


def test_pack_two_gpus_each(facts):
    plan = build(facts("four_pack"), {"name": "a", "count": 2, "memory_mib": 60000}, {"name": "b", "count": 2, "memory_mib": 20000}, strategy="pack")
    # b fits in what a leaves on the 80 GB GPUs (21559 MiB each), so the L4s stay empty.
    assert plan.assignment == {"a": [P80A, P80B], "b": [P80A, P80B]}


def test_pack_shortfall_names_free_memory(facts):
    with pytest.raises(c.ComposeError) as err:
        build(facts("four_pack"), {"name": "a", "memory_mib": 60000}, {"name": "b", "memory_mib": 60000}, {"name": "c", "memory_mib": 60000},
              strategy="pack")
    msg = str(err.value)
    assert "strategy pack: service 'c' needs 1 GPU(s) with 60000 MiB free each" in msg
    assert "0: 21559, 1: 21559, 2: 23034, 3: 23034" in msg and "short by 1" in msg


def test_pack_needs_memory(facts):
    with pytest.raises(c.ComposeError, match=r"service 'a': strategy pack needs memory_mib"):
        build(facts("four_pack"), {"name": "a"}, strategy="pack")


def test_exclusive_gives_each_service_its_own(facts):
    plan = build(facts("two_h100"), {"name": "a"}, {"name": "b"}, strategy="exclusive")
    assert plan.assignment == {"a": [H0], "b": [H1]}


def test_exclusive_prefers_the_smallest_gpu_that_fits(facts):
    plan = build(facts("four_pack"), {"name": "small", "memory_mib": 16000}, {"name": "big", "memory_mib": 40000, "count": 2},
                 strategy="exclusive")
    assert plan.assignment == {"small": [P24A], "big": [P80A, P80B]}


def test_exclusive_three_services_on_two_gpus_names_the_shortfall(facts):
    with pytest.raises(c.ComposeError) as err:
        build(facts("two_h100"), {"name": "a"}, {"name": "b"}, {"name": "c"}, strategy="exclusive")
    assert str(err.value) == (
        "strategy exclusive: services a, b, c need 3 GPU(s) of their own, but the host has 2 GPU(s) that containers can use "
        "(0 (81559 MiB), 1 (81559 MiB)); short by 1"
    )


def test_exclusive_memory_shortfall(facts):
    with pytest.raises(c.ComposeError, match=r"service 'b' needs 1 GPU\(s\) of its own with 50000 MiB, but only 0 are left"):
        build(facts("four_pack"), {"name": "a", "count": 2, "memory_mib": 50000}, {"name": "b", "memory_mib": 50000}, strategy="exclusive")


def test_placement_skips_mig_and_passthrough_gpus(facts):
    plan = build(facts("mixed"), {"name": "a"}, {"name": "b"}, strategy="exclusive")
    assert plan.assignment == {"a": [A40], "b": [L4]}
    with pytest.raises(c.ComposeError, match=r"short by 1"):
        build(facts("mixed"), {"name": "a"}, {"name": "b"}, {"name": "c"}, strategy="exclusive")


def test_placement_index_format(facts):
    plan = build(facts("two_h100"), {"name": "a"}, {"name": "b"}, strategy="spread", id_format="index")
    assert plan.assignment == {"a": ["0"], "b": ["1"]}
    assert env(plan, "b") == {"NVIDIA_VISIBLE_DEVICES": "1", "CUDA_VISIBLE_DEVICES": H1}


def test_placement_without_uuids_counts_container_devices_from_zero(facts):
    f = facts("two_h100")
    for gpu in f["gpus"]:
        gpu["uuid"] = None
    plan = build(f, {"name": "a"}, {"name": "b"}, strategy="exclusive")
    assert plan.assignment == {"a": ["0"], "b": ["1"]}
    assert env(plan, "b") == {"NVIDIA_VISIBLE_DEVICES": "1", "CUDA_VISIBLE_DEVICES": "0"}
    assert sum("no UUID" in w for w in plan.warnings) == 2


@pytest.mark.parametrize("strategy", ["spread", "pack", "exclusive"])
def test_placement_needs_facts(strategy):
    with pytest.raises(c.ComposeError, match=r"strategy %s places services from the GPU facts" % strategy):
        build(None, {"name": "a", "memory_mib": 1}, strategy=strategy)


# ------------------------------------------------------------------------------------------- VM mode


def test_vm_mode(facts):
    plan = build(facts("two_h100"), {"name": "a", "device_ids": [1], "environment_presets": ["nvidia"]}, vm_mode=True)
    svc = plan.services["a"]
    assert svc["privileged"] is True
    assert "deploy" not in svc
    assert svc["devices"] == ["%s:%s" % (n, n) for n in facts("two_h100")["device_nodes"]]
    lib = "/usr/lib/x86_64-linux-gnu/"
    assert svc["volumes"] == [
        {"type": "bind", "source": lib + p, "target": lib + p, "read_only": True}
        for p in ("libnvidia-ml.so.1", "libnvidia-ml.so.550.54.15", "libcuda.so.1", "libcuda.so.550.54.15")
    ]
    assert svc["environment"] == {
        "CUDA_VISIBLE_DEVICES": H1,
        "NVIDIA_DISABLE_REQUIRE": "1",
        "NVIDIA_DRIVER_CAPABILITIES": "all",
        "NVIDIA_VISIBLE_DEVICES": H1,
    }


def test_vm_mode_reads_top_level_soname_keys(facts):
    plan = build(facts("four_pack"), {"name": "a"}, vm_mode=True)
    sources = [v["source"] for v in plan.services["a"]["volumes"]]
    assert "/usr/lib/x86_64-linux-gnu/libcuda.so.550.90.07" in sources
    assert "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1" in sources


def test_vm_mode_by_index_uses_host_indices_in_bus_order(facts):
    f = facts("two_h100")
    f["gpus"][1]["uuid"] = None
    plan = build(f, {"name": "a", "device_ids": [1]}, vm_mode=True, id_format="index")
    assert env(plan, "a")["CUDA_VISIBLE_DEVICES"] == "1"
    assert env(plan, "a")["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"


def test_privileged_only_in_vm_mode(facts):
    for strategy in c.STRATEGIES:
        plan = build(facts("four_pack"), {"name": "a", "memory_mib": 100}, strategy=strategy)
        assert "privileged" not in plan.services["a"] and "devices" not in plan.services["a"]


def test_vm_mode_without_driver_facts_names_each_missing_piece(facts):
    with pytest.raises(c.ComposeError) as err:
        build(facts("driver_not_loaded"), {"name": "a"}, vm_mode=True)
    msg = str(err.value)
    assert msg.startswith("vm_mode: the facts lack ")
    assert "the driver version (nvidia_gpu.driver.version)" in msg
    assert "the path of libcuda.so.1 (nvidia_gpu.driver.library_paths.cuda)" in msg
    assert "libnvidia-ml.so.1" not in msg  # that one the facts have
    assert "the /dev/nvidia* device nodes" in msg
    assert msg.endswith("refusing to guess")


def test_vm_mode_mounts_the_file_the_soname_resolves_to(facts):
    # Seen on a real H200 host (580.159.04): /lib/libcuda.so.1 links into /usr/local/nvidia/lib64, and
    # /lib/libcuda.so.580.159.04 does not exist. The versioned file is mounted from where it is, beside the soname.
    f = facts("two_h100")
    f["driver"]["library_paths"] = {"nvml": "/lib/libnvidia-ml.so.1", "cuda": "/lib/libcuda.so.1"}
    f["driver"]["library_files"] = {"nvml": "/usr/local/nvidia/lib64/libnvidia-ml.so.550.54.15",
                                    "cuda": "/usr/local/nvidia/lib64/libcuda.so.550.54.15"}
    volumes = build(f, {"name": "a"}, vm_mode=True).services["a"]["volumes"]
    assert [(v["source"], v["target"]) for v in volumes] == [
        ("/lib/libnvidia-ml.so.1", "/lib/libnvidia-ml.so.1"),
        ("/usr/local/nvidia/lib64/libnvidia-ml.so.550.54.15", "/lib/libnvidia-ml.so.550.54.15"),
        ("/lib/libcuda.so.1", "/lib/libcuda.so.1"),
        ("/usr/local/nvidia/lib64/libcuda.so.550.54.15", "/lib/libcuda.so.550.54.15"),
    ]
    assert all(v["read_only"] for v in volumes)


@pytest.mark.parametrize("bad", ["relative/libcuda.so.1", "/lib/../etc/shadow", "/lib/libcuda.so.1\n", "/lib/lib cuda", 5, ["/x"]])
def test_vm_mode_refuses_an_odd_library_file(facts, bad):
    f = facts("two_h100")
    f["driver"]["library_files"] = {"nvml": None, "cuda": bad}
    with pytest.raises(c.ComposeError, match=r"the file libcuda.so.1 resolves to \(nvidia_gpu.driver.library_files.cuda says"):
        build(f, {"name": "a"}, vm_mode=True)


def test_vm_mode_without_any_facts():
    with pytest.raises(c.ComposeError, match=r"vm_mode needs the nvidia_gpu facts"):
        build(None, {"name": "a"}, vm_mode=True)


def test_vm_mode_relative_library_path_is_refused(facts):
    f = facts("two_h100")
    f["driver"]["library_paths"]["cuda"] = "libcuda.so.1"
    with pytest.raises(c.ComposeError, match=r"an absolute path of libcuda.so.1"):
        build(f, {"name": "a"}, vm_mode=True)


# ------------------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("service", "message"),
    [
        ({"name": "a", "capabilities": ["gpu", "tensor"]}, "service 'a': unknown capability 'tensor'"),
        ({"name": "a", "device_ids": [2]}, "service 'a': device id 2 is not on this host (GPU indices here: 0, 1)"),
        ({"name": "a", "device_ids": ["GPU-deadbeef"]}, "device id GPU-deadbeef is not on this host (no GPU has that UUID)"),
        ({"name": "a", "device_ids": ["MIG-deadbeef"]}, "device id MIG-deadbeef is not on this host (no MIG device has that UUID)"),
        ({"name": "a", "device_ids": ["5:0"]}, "names GPU 5, which is not on this host"),
        ({"name": "a", "device_ids": ["0:0"]}, "device id '0:0' is a MIG device, but GPU 0 (NVIDIA H100 PCIe, 0000:17:00.0) does not have MIG enabled"),
        ({"name": "a", "device_ids": ["gpu0"]}, "device id 'gpu0' is not a GPU index, a GPU-/MIG- UUID or a G:M MIG reference"),
        ({"name": "a", "count": 2, "device_ids": [0]}, "service 'a': count and device_ids are mutually exclusive"),
        ({"name": "a", "count": 0}, "count must be a positive number or 'all', not 0"),
        ({"name": "a", "count": "many"}, "count must be a positive number or 'all', not 'many'"),
        ({"name": "a", "count": 3}, "service 'a' asks for 3 GPU(s) but the host has 2 that containers can use"),
        ({"name": "a", "driver": "amd"}, "driver 'amd' is not one of nvidia, cdi"),
        ({"name": "a", "environment_presets": ["jax"]}, "unknown environment preset 'jax'"),
        ({"name": "a", "environment": {"BAD NAME": "x"}}, "environment variable name 'BAD NAME' is not valid"),
        ({"name": "a", "ipc": "shared"}, "ipc 'shared' must be host"),
        ({"name": "a", "shm_size": "lots"}, "shm_size 'lots' must be a byte count"),
        ({"name": "a", "shm_size": True}, "shm_size True must be a byte count"),
        ({"name": "a", "ulimits": {"memlock": "unlimited"}}, "ulimit memlock='unlimited' is not a number"),
        ({"name": "a", "ulimits": {"nofile": {"soft": 1}}}, "ulimit nofile must be a number or a mapping with exactly soft and hard"),
        ({"name": "a", "ulimits": {"NOFILE": 1}}, "ulimit name 'NOFILE' must be lower-case letters"),
        ({"name": "a", "ulimits": [1]}, "ulimits must be a mapping"),
        ({"name": "a", "runtime": " "}, "runtime must be a runtime name"),
        ({"name": "a", "memory_mib": -5}, "memory_mib must be a positive number of MiB, not -5"),
        ({"name": "bad name"}, "service name 'bad name' is not a valid compose service name"),
    ],
)
def test_bad_service_input(facts, service, message):
    with pytest.raises(c.ComposeError) as err:
        build(facts("two_h100"), service)
    assert message in str(err.value)


def test_mig_device_id_on_a_gpu_without_mig_by_uuid(facts):
    f = facts("mixed")
    f["gpus"][0]["mig"] = {"current": False, "pending": True}  # the MIG list is stale: MIG is off now
    with pytest.raises(c.ComposeError, match=r"is a MIG device, but GPU 0 \(NVIDIA A100-SXM4-80GB, 0000:07:00.0\) does not have MIG"):
        build(f, {"name": "a", "device_ids": [A100_MIG1]})


def test_mig_index_out_of_range(facts):
    with pytest.raises(c.ComposeError, match=r"has 2 MIG device\(s\), so there is no MIG device 2"):
        build(facts("mixed"), {"name": "a", "device_ids": ["0:2"]})


def test_passthrough_gpu_is_refused(facts):
    with pytest.raises(c.ComposeError, match=r"device id 3: GPU 3 \(0000:b7:00.0\) is bound to vfio-pci, so containers on this host cannot use it"):
        build(facts("mixed"), {"name": "a", "device_ids": [3]})


def test_device_ids_with_a_placement_strategy(facts):
    with pytest.raises(c.ComposeError, match=r"device_ids only go with strategy explicit; strategy spread places by count"):
        build(facts("two_h100"), {"name": "a", "device_ids": [0]}, strategy="spread")


def test_count_all_with_a_placement_strategy(facts):
    with pytest.raises(c.ComposeError, match=r"count 'all' only goes with strategy explicit, not exclusive"):
        build(facts("two_h100"), {"name": "a", "count": "all"}, strategy="exclusive")


def test_errors_are_collected(facts):
    with pytest.raises(c.ComposeError) as err:
        build(facts("two_h100"), {"name": "a", "capabilities": ["x"]}, {"name": "a", "ipc": "y"})
    assert "unknown capability 'x'" in str(err.value) and "ipc 'y'" in str(err.value) and "listed twice" in str(err.value)


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        ({"services": []}, "no services given"),
        ({"services": [{"name": "a"}], "strategy": "random"}, "strategy 'random' is not one of"),
        ({"services": [{"name": "a"}], "id_format": "serial"}, "id_format 'serial' is not one of"),
        ({"services": [{"name": "a"}], "cdi_kind": "gpu"}, "cdi_kind 'gpu' is not a CDI kind"),
    ],
)
def test_bad_request(facts, request_, message):
    with pytest.raises(c.ComposeError, match=message):
        c.build(request_, facts("two_h100"))


# ------------------------------------------------------------------------------------------- merge and render


def test_merge_keeps_unmanaged_services_and_keys():
    existing = {"x-note": "kept", "services": {"sidecar": {"image": "busybox"}, "app": {"image": "old"}}, "volumes": {"v": {}}}
    doc = c.merge(existing, {"app": {"ipc": "host"}})
    assert doc == {"x-note": "kept", "volumes": {"v": {}}, "services": {"app": {"ipc": "host"}, "sidecar": {"image": "busybox"}}}
    assert c.unmanaged(doc, {"app": {}}) == ["sidecar"]


def test_merge_prune_takes_the_file():
    existing = {"x-note": "gone", "services": {"sidecar": {"image": "busybox"}}}
    assert c.merge(existing, {"app": {}}, prune=True) == {"services": {"app": {}}}


@pytest.mark.parametrize("existing", [["a"], {"services": ["a"]}])
def test_merge_refuses_non_mappings(existing):
    with pytest.raises(c.ComposeError, match=r"not a (compose )?mapping"):
        c.merge(existing, {})


def test_parse():
    assert c.parse("") is None
    assert c.parse("services: {a: {}}\n") == {"services": {"a": {}}}
    with pytest.raises(c.ComposeError, match=r"not valid YAML"):
        c.parse("services: [\n")


def test_render_is_stable_and_round_trips(facts):
    plan = build(facts("two_h100"), {"name": "b", "device_ids": [1]}, {"name": "a", "environment_presets": ["cuda"]})
    text = c.render(c.merge(None, plan.services))
    assert text.startswith(c.HEADER + "---\nservices:\n  a:\n")
    assert yaml.safe_load(text) == {"services": plan.services}
    again = build(facts("two_h100"), {"name": "a", "environment_presets": ["cuda"]}, {"name": "b", "device_ids": [1]})
    assert c.render(c.merge(yaml.safe_load(text), again.services)) == text
    assert "          - capabilities:\n" in text  # sequences are indented, as people write compose files
