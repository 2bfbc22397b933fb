# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What gpu_settings decides on the controller, held to what the settings module does on the host (#21).

- ``gpu_settings_spec_errors`` (the role's first check) refuses exactly the specs the module refuses on a host without
  a GPU, naming the same problems, so that a bad spec fails before the spec file and the units are written.
- ``gpu_settings_idle_result`` (the role does not call the module where the run's own GPU facts leave nothing to apply)
  answers only on hosts where the module, reading the same host, is skipped too, and with the module's result keys.
"""

from __future__ import annotations

import typing as t

import pytest

import fake_pynvml
import hostile
import sysfs

from ansible_collections.gpuhost.nvidia.plugins.filter import settings as settings_filters
from ansible_collections.gpuhost.nvidia.plugins.module_utils import _facts, _nvml, _settings, _settings_apply
from ansible_collections.gpuhost.nvidia.plugins.modules import nvidia_smi_settings as module

# Specs the module refuses on any host: each a class of mistake, one or two values each.
BAD_SPECS: list[tuple[str, dict[str, t.Any]]] = [
    ("locked-min-above-max", {"locked_clocks": {"min_mhz": 1500, "max_mhz": 1200}}),
    ("locked-one-end", {"locked_clocks": {"min_mhz": 1200}}),
    ("locked-end-and-reset", {"locked_clocks": {"min_mhz": 1200, "max_mhz": 1400, "reset": True}}),
    ("application-one-clock", {"applications_clocks": {"graphics_mhz": 1000}}),
    ("application-clock-zero", {"applications_clocks": {"memory_mhz": 0, "graphics_mhz": 1000}}),
    ("clock-beyond-any-gpu", {"locked_clocks": {"min_mhz": 1000, "max_mhz": 10 ** 6}}),
    ("clock-not-a-number", {"locked_clocks": {"min_mhz": "fast", "max_mhz": 1400}}),
    ("compute-mode-unknown", {"compute_mode": "EXCLUSIVE_THREAD"}),
    ("compute-mode-lower-case", {"compute_mode": "default"}),
    ("power-zero", {"power_limit": 0}),
    ("power-negative", {"power_limit": -300}),
    ("power-beyond-any-gpu", {"power_limit": 1e9}),
    ("power-not-a-number", {"power_limit": "lots"}),
    ("power-nan", {"power_limit": "nan"}),
    ("no-gpus", {"gpus": []}),
    ("gpus-not-a-list-of-text", {"gpus": [{"index": 0}]}),
    ("mig-device-selected", {"gpus": ["MIG-5c6d7e8f-1111-4222-8333-444455556666"]}),
    ("index-beyond-any-host", {"gpus": ["64"]}),
    ("bad-bus-id", {"gpus": ["0000:07:00.9"]}),
    ("layout-without-mig", {"mig": False, "mig_layout": [{"profile": "1g.5gb"}]}),
    ("layout-not-a-profile", {"mig": True, "mig_layout": [{"profile": "three slices"}]}),
    ("layout-foreign-compute-instance", {"mig": True, "mig_layout": [{"profile": "3g.20gb", "compute_instances": ["1c.2g.10gb"]}]}),
    ("layout-too-many", {"mig": True, "mig_layout": [{"profile": "1g.5gb", "count": 8}]}),
    ("layout-without-profile", {"mig": True, "mig_layout": [{"count": 2}]}),
    ("unknown-option", {"persistence": True}),
    ("unknown-clock-key", {"locked_clocks": {"min_mhz": 1000, "max_mhz": 1400, "boost": 1}}),
    ("bool-not-a-bool", {"ecc": "sometimes"}),
] + [("selector-" + name, {"gpus": ["all", value]}) for name, value in hostile.text_classes("control", "non_ascii", "empty", "huge")] + [
    ("profile-" + name, {"mig": True, "mig_layout": [{"profile": value}]}) for name, value in hostile.text_classes("control", "non_ascii", "huge")
]

GOOD_SPECS: list[tuple[str, dict[str, t.Any]]] = [
    ("empty", {}),
    ("role-default", {"gpus": ["all"], "persistence_mode": True}),
    ("everything", {"gpus": ["0", "GPU-5c6d7e8f-1111-4222-8333-444455556666", "0000:07:00.0", "*A100*"], "persistence_mode": True,
                    "compute_mode": "EXCLUSIVE_PROCESS", "power_limit": 250, "applications_clocks": {"reset": True},
                    "locked_clocks": {"min_mhz": 1200, "max_mhz": 1400}, "ecc": True, "mig": True,
                    "mig_layout": [{"profile": "3g.20gb", "compute_instances": ["1c.3g.20gb", "2c.3g.20gb"]}, {"profile": "1g.5gb", "count": 2}]}),
    ("strings-for-numbers", {"power_limit": "300", "locked_clocks": {"min_mhz": "1200", "max_mhz": "1400"}}),
    ("reset-only", {"applications_clocks": {"reset": True}, "locked_clocks": {"reset": True}}),
]


def _module_on_a_gpu_less_host(run_module: t.Any, spec: dict[str, t.Any], tmp_path: t.Any) -> dict[str, t.Any]:
    return run_module(module, dict(spec, state_path=str(tmp_path / "run" / "settings.json")))


@pytest.mark.parametrize("spec", [s for _n, s in BAD_SPECS], ids=[n for n, _s in BAD_SPECS])
def test_the_role_refuses_what_the_module_refuses(run_module, settings_nvml, no_pci_gpu, tmp_path, spec):
    settings_nvml("no_gpu")
    errors = settings_filters.gpu_settings_spec_errors(spec)
    result = _module_on_a_gpu_less_host(run_module, spec, tmp_path)
    assert result.get("failed") is True, (spec, result)
    assert errors, "the module refuses %r (%s) but the role's check lets it through" % (spec, result["msg"])
    # The same problem, in the same words (the module fails on the first; an unknown option it words as AnsibleModule
    # does, "Unsupported parameters for (...) module: <option>. Supported ...").
    first = errors[0].replace("unsupported option ", "", 1).split(" Supported parameters")[0]  # the module has two more
    assert first in result["msg"], (errors, result["msg"])


@pytest.mark.parametrize("spec", [s for _n, s in GOOD_SPECS], ids=[n for n, _s in GOOD_SPECS])
def test_the_role_takes_what_the_module_takes(run_module, settings_nvml, no_pci_gpu, tmp_path, spec):
    settings_nvml("no_gpu")
    assert settings_filters.gpu_settings_spec_errors(spec) == []
    result = _module_on_a_gpu_less_host(run_module, spec, tmp_path)
    assert result.get("failed") is not True and result["skipped"] is True and result["state"] == "no_gpu", result


def test_a_spec_that_is_not_a_mapping_is_refused() -> None:
    for spec in (None, "persistence_mode: true", ["all"], 1):
        assert settings_filters.gpu_settings_spec_errors(spec) == ["must be a dict of nvidia_smi_settings options, got %s" % type(spec).__name__]


def _facts_and_module(tmp_path: t.Any, profile: dict[str, t.Any]) -> tuple[dict[str, t.Any], dict[str, t.Any]]:
    """The GPU facts of a host and what the settings module reads there, through the same fake NVML and tree."""
    root = sysfs.build(str(tmp_path / ("root-%d" % len(list(tmp_path.iterdir())))), profile)
    facts = _facts.gather_facts(backends=["nvml"], root=root, nv=fake_pynvml.make_fake(profile).module)
    with _nvml.Session(fake_pynvml.make_fake(profile).module) as session:
        state = _settings_apply.read_state(session, None, None, {}, root=root)
    return facts, state


def _variants() -> list[tuple[str, dict[str, t.Any]]]:
    """Every shared host profile, and the mixed ones the module and the facts might tell apart."""
    hosts = [(name, fake_pynvml.load_profile(name)) for name in fake_pynvml.profile_names()]
    no_gpu = fake_pynvml.load_profile("no_gpu")
    not_loaded = fake_pynvml.load_profile("driver_not_loaded")
    hosts += [
        # The driver's libraries installed on a host without an NVIDIA GPU: NVML says "driver not loaded".
        ("no-gpu-with-libraries", dict(no_gpu, nvml={"init_error": "DriverNotLoaded"}, host=dict(no_gpu["host"], libraries={"version": "580.95.05"}))),
        # GPUs, the kernel module not loaded, and no NVML library at all (a fresh host before the driver).
        ("gpu-without-any-driver", dict(not_loaded, nvml={"init_error": "LibraryNotFound"}, host=dict(not_loaded["host"], libraries=None))),
        # GPUs whose NVML fails otherwise (unknown error in a container without /dev/nvidia*).
        ("gpu-nvml-unknown-error", dict(not_loaded, nvml={"init_error": "Unknown"})),
    ]
    return hosts


@pytest.mark.parametrize("profile", [p for _n, p in _variants()], ids=[n for n, _p in _variants()])
def test_the_facts_skip_only_hosts_the_module_skips(tmp_path, profile):
    facts, read = _facts_and_module(tmp_path, profile)
    idle = settings_filters.gpu_settings_idle_result(facts)
    if idle is None:
        return
    # The module finds nothing it could apply either: a quiet state, reported and skipped, never read GPUs.
    assert read["state"] in _settings.QUIET_STATES and read["views"] == [], (facts["state"], read)
    assert idle["state"] == facts["state"] and idle["skipped"] is True and idle["changed"] is False
    if facts["state"] == "driver_not_loaded":
        assert read["state"] == "driver_not_loaded", read


def test_the_facts_skip_the_hosts_of_a_first_converge(tmp_path):
    """The cases the shortcut is for: no GPU (CI, containers) and a GPU before its driver loads (a first install)."""
    for name in ("no_gpu", "driver_not_loaded"):
        facts, _read = _facts_and_module(tmp_path, fake_pynvml.load_profile(name))
        assert settings_filters.gpu_settings_idle_result(facts) is not None, (name, facts["state"])
    for name in ("t4", "a100_mig", "vfio_bound"):
        facts, _read = _facts_and_module(tmp_path, fake_pynvml.load_profile(name))
        assert settings_filters.gpu_settings_idle_result(facts) is None, (name, facts["state"])


def test_the_idle_result_has_the_modules_keys(run_module, settings_nvml, tmp_path, request):
    facts, _read = _facts_and_module(tmp_path, fake_pynvml.load_profile("no_gpu"))
    idle = settings_filters.gpu_settings_idle_result(facts)
    assert idle is not None
    settings_nvml("no_gpu")
    request.getfixturevalue("no_pci_gpu")  # after the facts: it stands in for the PCI scan of both
    result = _module_on_a_gpu_less_host(run_module, {"persistence_mode": True}, tmp_path)
    result.pop("_bin_lookups", None)  # the test harness's own record
    assert set(idle) == set(result), (sorted(idle), sorted(result))
    same = {k: v for k, v in result.items() if k not in ("msg", "messages")}
    assert {k: idle[k] for k in same} == same


@pytest.mark.parametrize("facts", [None, "no_gpu", [], {}, {"state": "no_gpu"}, {"state": "no_gpu", "present": True},
                                   {"state": "driver_not_loaded", "present": True, "driver": {"kernel_module_loaded": True}},
                                   {"state": "ok", "present": True}, {"state": "driver_version_mismatch", "present": True},
                                   {"state": "no_permission", "present": True}])
def test_facts_that_do_not_say_enough_leave_it_to_the_module(facts):
    assert settings_filters.gpu_settings_idle_result(facts) is None
