# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The boot script and the module's nvidia-smi fallback run the same argument lists for the same spec.

roles/gpu_settings/files/gpuhost-gpu-settings stays standalone (it runs at boot, without Ansible), so it restates how
a spec becomes nvidia-smi argument lists. Here each spec of a battery goes through both: the script runs as its own
process with a fake ``nvidia-smi`` on PATH that records its argv (tests/unit/fakes/fake_nvidia_smi.py), and the
module's side goes through ``_settings.check_params``, ``select``, ``plan_gpu`` (against GPUs whose every setting
differs) and ``smi_argv``. The lists must be equal, GPU by GPU and in order.

What the script leaves alone by design is left out of the module's lists: ECC and MIG mode (the GPU keeps them across a
reboot) and the MIG layout (the module applies it through NVML only; the script re-creates it with ``nvidia-smi mig``,
tested in test_settings_planner.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import typing as t

import pytest

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _settings
from ansible_collections.gpuhost.nvidia.plugins.modules import nvidia_smi_settings

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
BOOT_SCRIPT = os.path.join(REPO, "roles", "gpu_settings", "files", "gpuhost-gpu-settings")
FAKE_SMI = os.path.normpath(os.path.join(HERE, "..", "fakes", "fake_nvidia_smi.py"))

UUIDS = ("GPU-5c6d7e8f-1111-4222-8333-444455556666", "GPU-6d7e8f90-2222-4333-8444-555566667777", "GPU-7e8f9001-3333-4444-8555-666677778888")
# What ``nvidia-smi --query-gpu=index,uuid,pci.bus_id,name,mig.mode.current --format=csv,noheader`` prints.
QUERY_OUT = (
    "0, %s, 00000000:07:00.0, NVIDIA A100-SXM4-40GB, Disabled\n"
    "1, %s, 00000000:0F:00.0, NVIDIA A100-SXM4-40GB, Disabled\n"
    "2, %s, 00000000:9A:00.0, Tesla T4, [N/A]\n"
) % UUIDS
GPUS = [
    {"index": 0, "uuid": UUIDS[0], "pci_bus_id": "0000:07:00.0", "name": "NVIDIA A100-SXM4-40GB"},
    {"index": 1, "uuid": UUIDS[1], "pci_bus_id": "0000:0f:00.0", "name": "NVIDIA A100-SXM4-40GB"},
    {"index": 2, "uuid": UUIDS[2], "pci_bus_id": "0000:9a:00.0", "name": "Tesla T4"},
]

SPECS = [
    ("empty spec", {}),
    ("only gpus", {"gpus": ["all"]}),
    (
        "every setting kind",
        {
            "persistence_mode": True,
            "compute_mode": "EXCLUSIVE_PROCESS",
            "power_limit": 280.5,
            "applications_clocks": {"memory_mhz": 5001, "graphics_mhz": 1590},
            "locked_clocks": {"min_mhz": 1200, "max_mhz": 1500},
        },
    ),
    (
        "the other values and the resets",
        {"persistence_mode": False, "compute_mode": "DEFAULT", "applications_clocks": {"reset": True}, "locked_clocks": {"reset": True}},
    ),
    ("prohibited on one index", {"gpus": ["1"], "compute_mode": "PROHIBITED"}),
    ("watts with decimals", {"power_limit": 65.125}),
    ("whole watts", {"gpus": ["2"], "power_limit": 70}),
    ("by UUID", {"gpus": [UUIDS[2]], "persistence_mode": True}),
    ("by UUID in lower and upper case", {"gpus": [UUIDS[0].upper().replace("GPU-", "gpu-")], "power_limit": 300}),
    ("by PCI bus id, long and short", {"gpus": ["0000:0F:00.0", "9a:00.0"], "locked_clocks": {"min_mhz": 300, "max_mhz": 600}}),
    ("by model name with a wildcard", {"gpus": ["*a100*"], "compute_mode": "EXCLUSIVE_PROCESS"}),
    ("by exact model name", {"gpus": ["Tesla T4"], "applications_clocks": {"memory_mhz": 405, "graphics_mhz": 645}}),
    ("mixed and overlapping selectors", {"gpus": ["2", "0", UUIDS[0], "Tesla*"], "persistence_mode": True, "power_limit": 250}),
    ("ECC, MIG mode and MIG layout only", {"ecc": False, "mig": True, "mig_layout": [{"profile": "1g.5gb", "count": 2}]}),
    ("ECC and MIG next to a setting", {"gpus": ["0"], "ecc": True, "mig": False, "persistence_mode": True}),
]


def _params(spec: dict[str, t.Any]) -> dict[str, t.Any]:
    """The module's parameters for a spec, as AnsibleModule fills them in (defaults, None suboptions)."""
    argspec = nvidia_smi_settings.argument_spec()
    params = {name: option.get("default") for name, option in argspec.items()}
    params.update({key: value for key, value in spec.items() if key in argspec})
    for name, option in argspec.items():
        if option.get("type") == "dict" and isinstance(params.get(name), dict):
            params[name] = dict({sub: None for sub in option["options"]}, **params[name])
    return params


def _unlike_any_request(gpu: dict[str, t.Any]) -> dict[str, t.Any]:
    """A planner view of ``gpu`` on which every setting the script applies differs from any request."""
    return _settings.current_view(
        dict(gpu, persistence_mode=None, compute_mode=None, power_limit_w=None, ecc={"current": None, "pending": None},
             mig={"current": None, "pending": None}),
        {"default_applications_clocks": {"memory_mhz": 1, "graphics_mhz": 1}},
    )


def module_argv(smi: str, spec: dict[str, t.Any]) -> list[list[str]]:
    params = _params(spec)
    assert _settings.check_params(params) == [], "the battery holds only specs the module accepts"
    desired = _settings.desired_from_params(params)
    argv = []
    for gpu in _settings.select([_unlike_any_request(g) for g in GPUS], params["gpus"]):
        for change in _settings.plan_gpu(desired, gpu)["changes"]:
            if change["setting"] in _settings.PENDING_SETTINGS or change["op"] == "mig_layout":
                continue
            argv.extend(_settings.smi_argv(smi, gpu, change))
    return argv


@pytest.fixture
def fake_bin(tmp_path: t.Any) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text('#!/bin/sh\nexec "%s" "%s" "$@"\n' % (sys.executable, FAKE_SMI), encoding="utf-8")
    smi.chmod(0o755)
    query = tmp_path / "query.csv"
    query.write_text(QUERY_OUT, encoding="utf-8")
    return {"dir": str(bin_dir), "log": str(tmp_path / "calls.jsonl"), "query": str(query), "tmp": str(tmp_path)}


def script_argv(fake_bin: dict[str, str], spec: dict[str, t.Any]) -> tuple[int, list[list[str]], str]:
    """Run the boot script as the unit does (its own interpreter, no Ansible), with ``nvidia-smi`` found on PATH."""
    spec_path = os.path.join(fake_bin["tmp"], "gpu_settings.json")
    with open(spec_path, "w", encoding="utf-8") as handle:
        json.dump(spec, handle)
    if os.path.exists(fake_bin["log"]):
        os.unlink(fake_bin["log"])
    env = {
        "PATH": fake_bin["dir"] + os.pathsep + os.environ.get("PATH", ""),
        "FAKE_NVIDIA_SMI_LOG": fake_bin["log"],
        "FAKE_NVIDIA_SMI_STDOUT": fake_bin["query"],
    }
    proc = subprocess.run(
        [sys.executable, BOOT_SCRIPT, "--spec", spec_path, "--nvidia-smi", "nvidia-smi", "--driver-check", spec_path],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, check=False, timeout=60,
    )
    with open(fake_bin["log"], "r", encoding="utf-8") as handle:
        calls = [json.loads(line) for line in handle]
    assert all(call["LC_ALL"] == "C" for call in calls)
    return proc.returncode, [["nvidia-smi"] + call["argv"] for call in calls], proc.stdout


@pytest.mark.parametrize("spec", [s for _name, s in SPECS], ids=[name for name, _spec in SPECS])
def test_boot_script_and_module_run_the_same_argument_lists(fake_bin, spec):
    rc, calls, output = script_argv(fake_bin, spec)
    assert rc == 0, output
    query = ["nvidia-smi", "--query-gpu=index,uuid,pci.bus_id,name,mig.mode.current", "--format=csv,noheader"]
    assert calls[0] == query
    assert calls[1:] == module_argv("nvidia-smi", spec)


def test_the_battery_covers_every_setting_the_script_applies_and_every_selector_kind():
    applied = {argv[3] for _name, spec in SPECS for argv in module_argv("nvidia-smi", spec)}
    assert applied == {"-pm", "-c", "-pl", "-ac", "-rac", "-lgc", "-rgc"}
    selectors = [s for _name, spec in SPECS for s in spec.get("gpus") or []]
    assert {"all", "1", UUIDS[2], "0000:0F:00.0", "9a:00.0", "*a100*", "Tesla T4"} <= set(selectors)
    assert any(not spec for _name, spec in SPECS)


def test_both_refuse_a_selector_that_matches_nothing(fake_bin):
    spec = {"gpus": ["7"], "power_limit": 300}
    rc, calls, output = script_argv(fake_bin, spec)
    assert rc == 1 and "no GPU matches 7" in output and len(calls) == 1
    with pytest.raises(_settings.SettingsError, match="no GPU matches '7'"):
        _settings.select([_unlike_any_request(g) for g in GPUS], ["7"])
