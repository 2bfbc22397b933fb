# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Every filter of the collection against hostile input (issue #37): no traceback, whatever the shape.

The battery finds the filters itself (every FilterModule in plugins/filter), so a new filter without a good call in
GOOD fails here. For each filter it starts from one good call and replaces one thing at a time: each argument as a
whole, then every value nested in a dict or list argument (a GPU's memory, the facts' driver, a request's option), by
each value of HOSTILE. A filter must either return (a tolerant result: the errors list of a planner that never fails
is one) or raise AnsibleFilterError naming the filter. Any other exception is a traceback for the user; so is an
AnsibleFilterError raised by the catch-all of plugin_utils/_filter_args.guard, which only a filter that does not
check its own input reaches.
"""

from __future__ import annotations

import copy
import glob
import importlib
import os
import typing as t

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuhost.nvidia.plugins.plugin_utils import _filter_args

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

# One value of each shape a template can hand a filter by mistake.
HOSTILE: list[t.Any] = [
    None, "", "x", "yes", "12.4", "-1", "nan", "\x00\n\x1b[31m", "caf\u00e9 \u202e", "a" * 5000,
    0, -1, 2 ** 200, -(2 ** 200), float("nan"), float("inf"), -0.5, 1.5, True, False,
    [], ["x"], [None], [1, "x"], [{}], [[]], {}, {"x": 1}, {"x": None}, {"gpus": "x"}, {"gpus": ["x"]}, b"\xff\xfe",
]

GPU = {
    "index": 0, "uuid": "GPU-3f1c2a51-0a6e-4b6b-9a55-2d4ac6f0e001", "name": "NVIDIA H100 PCIe", "state": "ok",
    "pci_bus_id": "0000:17:00.0", "pci_device_id": "10de:2331", "architecture": "hopper", "compute_capability": "9.0",
    "memory_total_mib": 81559, "persistence_mode": True, "compute_mode": "Default", "power_limit_w": 350,
    "power_limit_min_w": 200, "power_limit_max_w": 350, "ecc": {"current": True, "pending": True},
    "mig": {"current": False, "pending": False}, "mig_devices": [], "bound_driver": "nvidia", "iommu_group": 12,
    "numa_node": 0, "utilization": {"gpu": 3, "memory": 1}, "temperature_c": 40, "power_draw_w": 60.5,
    "processes": [{"pid": 4242, "name": "python3", "used_memory_mib": 1024}],
}
MIG_GPU = dict(GPU, index=1, uuid="GPU-8b0e6c1d-51f4-4a54-8d2e-0c9f3e7b4002", pci_bus_id="0000:65:00.0", mig={"current": True, "pending": True},
               mig_devices=[{"uuid": "MIG-1b2c", "gi": 1, "ci": 0, "profile": "1g.10gb", "memory_mib": 9856}], processes=[])
FACTS = {
    "present": True, "source": "nvml", "state": "ok", "messages": [],
    "driver": {"version": "550.54.15", "branch": "550", "cuda_version": "12.4", "kernel_module_type": "open",
               "kernel_module_loaded": True, "nvml_version": "12.550.54.15"},
    "gpus": [GPU, MIG_GPU],
    "pci_functions": [{"pci_bus_id": "0000:17:00.0", "pci_device_id": "10de:2331", "type": "gpu", "bound_driver": "nvidia",
                       "iommu_group": 12},
                      {"pci_bus_id": "0000:17:00.1", "pci_device_id": "10de:22a3", "type": "audio", "bound_driver": "snd_hda_intel",
                       "iommu_group": 12}],
    "nvswitch_count": 0, "device_nodes": ["/dev/nvidia0", "/dev/nvidiactl"], "reboot_required": False, "reboot_reasons": [],
    "kernels": {"running": "6.1.0-18-amd64", "boot": "6.1.0-18-amd64", "boot_source": "running",
                "installed": [{"release": "6.1.0-18-amd64", "nvidia_module": True, "module_files": ["/lib/modules/6.1.0-18-amd64/updates/dkms/nvidia.ko"]}],
                "without_module": [],
                "dkms": [{"module": "nvidia-current", "version": "550.54.15", "built": ["6.1.0-18-amd64"], "installed": ["6.1.0-18-amd64"]}]},
}
HOST = {"distribution": "Debian", "distribution_major_version": "12", "os_family": "Debian", "architecture": "x86_64",
        "kernel": "6.1.0-18-amd64", "pkg_mgr": "apt", "secure_boot": False, "virtualization_role": "host"}
DRIVER_PLAN = {"branch": "550", "version": None, "flavour": "open", "source": "debian", "errors": [], "packages": []}
TABLE = {"550": {"open": ["nvidia-open-kernel-dkms", "nvidia-driver"], "proprietary": ["nvidia-kernel-dkms", "nvidia-driver"]}}
VFIO_REQUEST = {"pci_addresses": ["0000:65:00.0"], "iommu": "auto", "proxmox": {"pcie": True, "rombar": True, "x_vga": False}}
DNF_LIST = "nvidia-driver.x86_64  3:580.95.05-1.el9  cuda-rhel9-x86_64\n"

# A good call of each filter: (positional arguments, keyword arguments).
K8S_NODE_REQUEST = {"distribution": "auto", "runtime": "containerd", "accelerator": "", "labels": {"example.com/pool": "a"},
                    "taint_effect": "NoSchedule", "preset_labels": True, "taint": True, "registration": True,
                    "image_build": False, "gfd_deployed": False, "default_runtime": False}
# A Node and a Pod as kubernetes.core.k8s_info returns them, cut down.
K8S_NODE = {"metadata": {"name": "gpu-node-1", "labels": {"gpuhost.nvidia/upgrade-state": "host-upgrade-required",
                                                          "gpuhost.nvidia/upgrade-target": "d580.95.05_tany"},
                         "annotations": {"gpuhost.nvidia/upgrade-initial-unschedulable": "false"}},
            "spec": {"unschedulable": True}, "status": {"capacity": {"nvidia.com/gpu": "8"}, "conditions": [{"type": "Ready", "status": "True"}]}}
K8S_POD = {"metadata": {"name": "train-0", "namespace": "ml", "labels": {"app": "train"}, "ownerReferences": [{"kind": "Job"}]},
           "spec": {"nodeName": "gpu-node-1", "containers": [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
           "status": {"phase": "Running"}}

GOOD: dict[str, tuple[list[t.Any], dict[str, t.Any]]] = {
    "select_gpus": ([FACTS], {"min_memory_mib": 1000, "models": ["H100"], "count": 1, "prefer": "most_memory", "allow_mig": True}),
    "gpu_arch": (["8.9"], {}),
    "cuda_supported": (["550.54.15", "12.4"], {"minor_version_compatibility": False}),
    "nvidia_driver_plan": ([{"flavour": "auto", "branch": "550"}, FACTS, HOST, {"open": True}], {}),
    "nvidia_driver_candidate_errors": ([DRIVER_PLAN, "550.54.15-1", {"cuda_version": "12.4"}, "the repository"], {}),
    "nvidia_driver_packages": ([DRIVER_PLAN, TABLE, {"kernel_flavour": "generic"}], {}),
    "nvidia_driver_versionlock": ([["nvidia-driver"], {"branch": "550"}, "dnf4"], {}),
    "nvidia_driver_move": ([DRIVER_PLAN, "535.261.03-1", ["550.54.15-1", "535.261.03-1"]], {}),
    "nvidia_driver_transaction": ([dict(DRIVER_PLAN, fabric_manager=True, packages={
        "userspace": ["nvidia-driver"], "hold": ["nvidia-driver", "nvidia-fabricmanager-550"], "install": ["nvidia-driver"],
        "fabric_manager": ["nvidia-fabricmanager-550"], "pinning": ""}),
        {"installed": {"nvidia-driver": [{"name": "nvidia-driver", "version": "535.261.03-1"}]},
         "offered": [["nvidia-driver", "550.54.15-1", "x"]], "asked": ["nvidia-driver"], "check_mode": False},
        {"pkg_mgr": "apt", "candidate_package": "nvidia-driver", "install": ["nvidia-driver"], "pin": True,
         "request": {"cuda_version": "12.4"}, "requests": [{"role": "g", "userland": True, "packages": ["python3-pynvml"]}],
         "userland": ["nvidia-smi=550.*"]}], {}),
    "nvidia_driver_package_specs": ([["nvidia-driver"], "550.54.15", "apt", "550.54.15-1"], {}),
    "nvidia_driver_lockstep": ([DRIVER_PLAN, {"to": "550.54.15-1"}, {"fabricmanager": ["nvidia-fabricmanager-550"]},
                                ["nvidia-driver"], "apt"], {}),
    "nvidia_driver_lockstep_hold": ([["nvidia-fabricmanager-550"], "550.54.15"], {}),
    "nvidia_driver_dnf_versions": ([DNF_LIST, "nvidia-driver"], {}),
    "nvidia_driver_dkms_lines": ([FACTS["kernels"]["dkms"]], {}),
    "nvidia_driver_module_params_file": ([{"NVreg_EnableGpuFirmware": 0, "NVreg_TemporaryFilePath": "/var/tmp"}], {}),
    "nvidia_driver_absent_plan": ([{"distro": {"module": {"open": ["nvidia-open-kernel-dkms"]}, "fm": "nvidia-fabricmanager-{branch}"}},
                                   {"nvidia-open-kernel-dkms": [{"version": "1"}]}, "nvidia-fabricmanager.service"], {}),
    "gpg_primary_fingerprints": (["pub:-:4096:1:AAAAAAAAAAAAAAAA:1:::-:::scSC::::::23::0:\n"
                                  "fpr:::::::::AE09FE4BBD223A84B2CCFCE3F60F4B3D7FA2AF80:\n"], {}),
    "gpg_fingerprint": (["AE09 FE4B BD22 3A84 B2CC  FCE3 F60F 4B3D 7FA2 AF80"], {"empty": False}),
    "packages_to_ensure": ([["python3-yaml", "nvidia-smi=550.*"], ["python3-yaml"]], {}),
    "packages_ensured": ([["python3-yaml"], ["nvidia-smi=550.*"]], {}),
    "package_plan": ([[{"role": "gpu_settings", "userland": True, "packages": ["python3-pynvml"]}], ["nvidia-smi"], ["nvidia-smi"]], {}),
    "gpu_fleet_report": ([[{"host": "gpu1", "status": "ok", "facts": FACTS}], "2026-11-28T00:00:00Z", "data", "GPU fleet report",
                          ["gpu1"]], {}),
    "gpu_exporter_file_sd": ([[{"host": "gpu1", "address": "10.0.0.1", "port": 9400, "kind": "dcgm", "facts": FACTS}]], {}),
    "gpu_exporter_plan": (["auto", False, "Debian", FACTS, None, "580"], {}),
    "gpu_settings_spec_errors": ([{"persistence_mode": True, "power_limit_w": 300}], {}),
    "gpu_settings_idle_result": ([FACTS], {}),
    "nvidia_container_toolkit_errors": ([{"version": "1.17.8", "mode": "cdi"}], {}),
    "nvidia_container_toolkit_rootless_plan": ([{"users": [{"name": "alice", "engines": ["docker", "podman"]}], "state": "present",
                                                 "runtimes": ["docker"], "mode": "full", "cdi": True, "no_cgroups": None,
                                                 "shared_no_cgroups": True},
                                                {"alice": ["x", "1000", "1000", "", "/home/alice", "/bin/sh"]},
                                                "alice:100000:65536\n", "alice:100000:65536\n"], {}),
    "nvidia_container_toolkit_version": ([["1.17.8-1", "1.18.0-1"], {"version": "1.17.8"}, "the repository"], {}),
    "nvidia_node_labels": ([FACTS, "1.17.8"], {}),
    "nvidia_container_restarts": ([[{"name": "docker", "unit": "docker.service", "active": "active", "changed": True, "newest": 12.5,
                                     "started": 3.0}], "always"], {}),
    "gpu_busy_processes": ([FACTS], {}),
    "gpu_upgrade_summary": ([[{"host": "gpu1", "status": "upgraded", "step": "driver", "message": "ok"}], ["gpu1"]], {}),
    "vfio_passthrough_plan": ([VFIO_REQUEST, FACTS, HOST], {}),
    "gpu_busy_unknown": ([FACTS], {}),
    "gpu_k8s_manifests": ([{"sharing": {"ts-4": {"time_slicing": {"replicas": 4}}}, "default_config": "ts-4", "nodes": ["gpu-1"],
                           "node_labels": {"nvidia.com/gpu": "true"}, "node_taints": [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]}], {}),
    "gpu_k8s_manifest_errors": ([{"sharing": {"ts-4": {"time_slicing": {"replicas": 4}}}, "namespace": "gpu"}], {}),
    "k8s_gpu_node_plan": ([K8S_NODE_REQUEST, {"k3s": False, "rke2": False, "kubespray": False}, FACTS], {}),
    "k8s_gpu_node_errors": ([K8S_NODE_REQUEST], {}),
    "k8s_gpu_node_rancher_plan": ([{"distribution": "k3s", "state": "present", "runtime_name": "nvidia-gpuhost",
                                    "runtime_path": "/usr/bin/nvidia-container-runtime", "default_runtime": False,
                                    "version_text": "k3s version v1.33.1+k3s1 (99d91538)\ngo version go1.24.2\n",
                                    "version_problem": "", "files": {}}], {}),
    "gpu_upgrade_targets": (["580.95.05", None, "1.17.8"], {}),
    "gpu_upgrade_post_check": ([FACTS, {"nvidia-container-toolkit": [{"version": "1.17.8-1"}]},
                                {"driver_version": "", "driver_branch": "", "toolkit_version": "1.17.8", "errors": []}],
                               {"driver": False, "check_loaded": False}),
    "nvidia_node_labels_file": ([{"nvidia.com/gpu.count": "1", "gpuhost.nvidia/gpu.present": "true"}, "# gpuhost.nvidia\n"], {}),
    "role_input_errors": ([{"gpu_exporter_port": 9400, "gpu_exporter_listen_address": "127.0.0.1"}, "gpu_exporter"], {}),
    "systemd_quote": (["--web.listen-address=127.0.0.1:9400"], {}),
    "gpu_upgrade_k8s_cluster": ([{"resources": [K8S_NODE]}, {"gpu01": "gpu-node-1"},
                                 {"driver_version": "580.95.05", "driver_branch": "580", "toolkit_version": ""}], {"max_unavailable": "25%"}),
    "gpu_upgrade_k8s_node": ([{"resources": [K8S_NODE]}, {"resources": [K8S_POD]}, "d580.95.05_tany"], {"drain": False}),
    "gpu_upgrade_k8s_jobs": ([{"resources": [K8S_POD]}, "gpu-node-1"], {}),
}

# More good calls, for filters that take their input in more than one form (the facts, a GPU, a version).
MORE: dict[str, list[tuple[list[t.Any], dict[str, t.Any]]]] = {
    "cuda_supported": [([FACTS, "12.4"], {}), ([{"nvidia_gpu": FACTS}, "12.4"], {}), ([550, 12.4], {})],
    "gpu_arch": [([GPU], {}), (["10de:2331"], {}), ([8.9], {})],
    "select_gpus": [([FACTS["gpus"]], {"prefer": "lowest_utilization"}), ([{"nvidia_gpu": FACTS}], {"prefer": "lowest_index"})],
    "nvidia_driver_plan": [([{"flavour": "auto", "branch": "550"}, {"nvidia_gpu": FACTS}], {})],
    "nvidia_driver_versionlock": [([["nvidia-driver"], {"version": "550.54.15"}, "dnf5"], {})],
    "vfio_passthrough_plan": [([dict(VFIO_REQUEST, device_ids=["10de:2331"], pci_addresses=[],
                                     other_roles={"nvidia_driver": {"passthrough_pci_addresses": ["0000:65:00.0"],
                                                                    "passthrough_policy": "exclude"},
                                                  "gpu_settings_gpus": ["all"]}), FACTS, HOST], {})],
}

# Filters whose traceback is known and not fixed yet, with why (none: keep it that way).
OWNED: dict[str, str] = {}


def _all_filters() -> dict[str, t.Callable[..., t.Any]]:
    found: dict[str, t.Callable[..., t.Any]] = {}
    for path in sorted(glob.glob(os.path.join(ROOT, "plugins", "filter", "*.py"))):
        name = os.path.splitext(os.path.basename(path))[0]
        plugin = importlib.import_module("ansible_collections.gpuhost.nvidia.plugins.filter.%s" % name)
        found.update(plugin.FilterModule().filters())
    return found


FILTERS = _all_filters()


def _leaves(value: t.Any, path: tuple[t.Any, ...] = ()) -> t.Iterator[tuple[t.Any, ...]]:
    """The path of every value nested in ``value`` (dict keys and list indexes), containers included."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield path + (key,)
            yield from _leaves(item, path + (key,))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield path + (index,)
            yield from _leaves(item, path + (index,))


def _replaced(value: t.Any, path: tuple[t.Any, ...], new: t.Any) -> t.Any:
    value = copy.deepcopy(value)
    target = value
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = new
    return value


def _calls(name: str) -> t.Iterator[tuple[str, list[t.Any], dict[str, t.Any]]]:
    """Each hostile call of a filter: one argument, or one value nested in it, replaced by a hostile value."""
    for number, (args, kwargs) in enumerate([GOOD[name]] + MORE.get(name, [])):
        for label, bad_args, bad_kwargs in _variants(args, kwargs):
            yield "call %d: %s" % (number, label), bad_args, bad_kwargs


def _variants(args: list[t.Any], kwargs: dict[str, t.Any]) -> t.Iterator[tuple[str, list[t.Any], dict[str, t.Any]]]:
    for position, arg in enumerate(args):
        for bad in HOSTILE:
            yield "args[%d]=%r" % (position, bad), [bad if i == position else a for i, a in enumerate(args)], dict(kwargs)
        for path in _leaves(arg):
            for bad in HOSTILE:
                yield ("args[%d]%s=%r" % (position, "".join("[%r]" % p for p in path), bad),
                       [_replaced(arg, path, bad) if i == position else a for i, a in enumerate(args)], dict(kwargs))
    for key, arg in kwargs.items():
        for bad in HOSTILE:
            yield "%s=%r" % (key, bad), list(args), dict(kwargs, **{key: bad})


def test_every_filter_has_a_good_call():
    assert sorted(FILTERS) == sorted(GOOD), "add a good call of each new filter to GOOD (and remove the gone ones)"


@pytest.mark.parametrize("name", sorted(GOOD))
def test_the_good_calls_work(name):
    for args, kwargs in [GOOD[name]] + MORE.get(name, []):
        FILTERS[name](*copy.deepcopy(args), **copy.deepcopy(kwargs))


def _short(text: str) -> str:
    return text if len(text) < 300 else text[:300] + "..."


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(reason=OWNED[n], strict=False)) if n in OWNED else n
                                  for n in sorted(GOOD)])
def test_hostile_input_is_refused_by_name_or_tolerated(name):
    function = FILTERS[name]
    problems: list[str] = []
    for label, args, kwargs in _calls(name):
        try:
            function(*args, **kwargs)
        except AnsibleFilterError as exc:
            text = str(exc)
            if getattr(exc, _filter_args.UNCHECKED, False):
                problems.append("%s: reached the catch-all: %s" % (label, _short(text)))
            elif name not in text and not text.startswith(("gpuhost_package_plan",)):
                problems.append("%s: the message does not name %s: %s" % (label, name, _short(text)))
        except Exception as exc:  # pylint: disable=broad-exception-caught
            problems.append("%s: %s: %s" % (label, type(exc).__name__, _short(str(exc))))
    assert not problems, "%d of the hostile calls of %s failed:\n%s" % (len(problems), name, "\n".join(problems[:40]))


# Filter files whose FilterModule is not behind the guard yet (none).
UNGUARDED: dict[str, str] = {}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(reason=UNGUARDED[n], strict=True)) if n in UNGUARDED else n
                                  for n in sorted(GOOD)])
def test_every_filter_goes_through_the_guard(name):
    assert getattr(FILTERS[name], _filter_args.GUARDED, False), "%s: wrap it with _filter_args.guard in its FilterModule" % name


@pytest.mark.parametrize("error", [TypeError("'<' not supported between 'str' and 'int'"), ValueError("x"), KeyError("gpus"),
                                   AttributeError("'str' object has no attribute 'get'"), OverflowError("int too large"),
                                   RecursionError("deep"), ZeroDivisionError("division by zero")])
def test_the_guard_turns_any_exception_into_a_named_filter_error(error):
    def broken(facts: t.Any, count: t.Any = None) -> t.Any:
        raise error

    guarded = _filter_args.guard("select_gpus", broken)
    with pytest.raises(AnsibleFilterError) as caught:
        guarded({"gpus": "x"}, count="two")
    text = str(caught.value)
    assert text.startswith("select_gpus:") and type(error).__name__ in text, text
    assert "facts" in text and "count" in text and "'two'" in text, text
    assert getattr(caught.value, _filter_args.UNCHECKED) is True


def test_the_guard_passes_a_filter_error_through_unchanged():
    def refusing(value: t.Any) -> t.Any:
        raise AnsibleFilterError("gpu_arch: value must be a compute capability, got 'x'")

    with pytest.raises(AnsibleFilterError) as caught:
        _filter_args.guard("gpu_arch", refusing)("x")
    assert str(caught.value) == "gpu_arch: value must be a compute capability, got 'x'"
    assert not getattr(caught.value, _filter_args.UNCHECKED, False)


def _gpu(**changes: t.Any) -> dict[str, t.Any]:
    return dict(FACTS, gpus=[dict(GPU, **changes)])


# The cases issue #37 saw, each with what the refusal must say.
SEEN: list[tuple[str, list[t.Any], dict[str, t.Any], str]] = [
    ("select_gpus", [_gpu(memory_total_mib="81559 MiB")], {}, "select_gpus: facts gpus[0].memory_total_mib must be a whole number"),
    ("select_gpus", [_gpu(memory_total_mib=True)], {}, "memory_total_mib must be a whole number"),
    ("select_gpus", [_gpu(mig="yes")], {}, "select_gpus: facts gpus[0].mig must be a dict"),
    ("select_gpus", [FACTS], {"min_memory_mib": "lots"}, "select_gpus: min_memory_mib must be a whole number"),
    ("select_gpus", [FACTS], {"count": float("nan")}, "select_gpus: count must be a whole number"),
    ("select_gpus", [FACTS], {"models": [None]}, "select_gpus: models must be strings"),
    ("cuda_supported", [{"nvidia_gpu": "x"}, "12.4"], {}, "cuda_supported driver nvidia_gpu: expected a dict, got str"),
    ("cuda_supported", [dict(FACTS, driver="550"), "12.4"], {}, "cuda_supported driver: facts.driver must be a dict, got str '550'"),
    ("cuda_supported", ["550.54.15", ["12.4"]], {}, "cuda_supported: cuda_version must be a version string"),
    ("cuda_supported", [dict(FACTS, driver={}), "12.4"], {}, "the GPU facts hold no driver version or branch"),
    ("nvidia_driver_move", [dict(DRIVER_PLAN, branch="latest"), None, []], {}, "nvidia_driver_move: plan.branch must be a driver branch"),
    ("nvidia_driver_candidate_errors", [dict(DRIVER_PLAN, version="x"), "550.54.15-1"], {}, "plan.version must be a driver version"),
    ("nvidia_driver_dkms_lines", [["x"]], {}, "nvidia_driver_dkms_lines: registrations[0] must be a dict"),
    ("nvidia_driver_module_params_file", [{"NVreg_EnableMSI": "1 NVreg_Other=2"}], {},
     "nvidia_driver_module_params_file: nvidia_driver_module_params: NVreg_EnableMSI="),
    ("nvidia_driver_module_params_file", [["NVreg_EnableMSI=1"]], {}, "must be a mapping"),
    ("gpu_upgrade_summary", [[{"host": "a"}], 3], {}, "gpu_upgrade_summary: names must be a list"),
    ("nvidia_container_toolkit_version", [3, {}], {}, "nvidia_container_toolkit_version offered must be a list"),
]


@pytest.mark.parametrize("name, args, kwargs, expected", SEEN, ids=["%s-%d" % (s[0], i) for i, s in enumerate(SEEN)])
def test_the_cases_seen_are_refused_by_name(name, args, kwargs, expected):
    with pytest.raises(AnsibleFilterError) as caught:
        FILTERS[name](*args, **kwargs)
    assert expected in str(caught.value), str(caught.value)
    assert not getattr(caught.value, _filter_args.UNCHECKED, False)


@pytest.mark.parametrize("request_changes, expected", [
    ({"proxmox": "yes"}, "vfio_passthrough request proxmox must be a dict of pcie, rombar, x_vga"),
    ({"proxmox": {"pcie": "yes"}}, "vfio_passthrough request proxmox.pcie must be true or false, got 'yes'"),
    ({"pci_addresses": [1]}, "vfio_passthrough request pci_addresses must be a list of strings"),
    ({"allow_console_gpu": "no"}, "vfio_passthrough request allow_console_gpu must be true or false"),
    ({"other_roles": {"nvidia_driver": "x"}}, "other_roles.nvidia_driver must be a dict or null"),
])
def test_vfio_plan_lists_wrong_types_as_errors_and_plans_nothing(request_changes, expected):
    plan = FILTERS["vfio_passthrough_plan"](dict(VFIO_REQUEST, **request_changes), FACTS, HOST)
    assert any(expected in error for error in plan["errors"]), plan["errors"]
    assert plan["gpus"] == [] and plan["kernel_args"] == [] and plan["proxmox_hostpci"] == []


def test_vfio_plan_lists_wrong_facts_as_errors():
    plan = FILTERS["vfio_passthrough_plan"](VFIO_REQUEST, dict(FACTS, gpus=["x"]), HOST)
    assert plan["errors"] == ["vfio_passthrough facts.gpus[0] must be a dict, got str 'x'"]
