# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""playbooks/upgrade.yml's busy-GPU guard fails closed: GPUs whose processes cannot be read refuse the upgrade (or are
waited for), gpuhost_upgrade_busy: force goes ahead and says so, and check mode predicts every refusal.

One roll of many local hosts in one batch (max_fail_percentage 100, so that every host reaches its guard), each with
its own synthetic GPU facts (gpuhost_upgrade_facts), run for real and in check mode; the roles are switched off.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
PLAYBOOK = REPO / "playbooks" / "upgrade.yml"
GPU = {"index": 0, "uuid": "GPU-3f1c2a51-0a6e-4b6b-9a55-2d4ac6f0e001", "pci_bus_id": "0000:17:00.0", "state": "ok",
       "bound_driver": "nvidia", "processes": [], "processes_error": None}
IDLE = {"present": True, "source": "nvml", "state": "ok", "messages": [],
        "driver": {"version": "580.95.05", "branch": "580", "kernel_module_loaded": True}, "gpus": [GPU]}
PYTHON3 = {"pid": 4242, "type": "C", "name": "python3", "used_memory_mib": 512}


def facts(**gpu) -> dict:
    result = copy.deepcopy(IDLE)
    result["gpus"][0].update(gpu)
    return result


NO_PERMISSION = "nvmlDeviceGetComputeRunningProcesses failed: Insufficient Permissions (NVMLError_NoPermission)"
# host -> (host variables, what the guard says: ok | refused | settings, a fragment of its message)
HOSTS = {
    "idle": ({"gpuhost_upgrade_facts": IDLE}, "ok", None),
    "busy": ({"gpuhost_upgrade_facts": facts(processes=[PYTHON3])}, "refused", "python3 (pid 4242) on GPU 0, 512 MiB"),
    "noperm": ({"gpuhost_upgrade_facts": facts(processes=None, processes_error=NO_PERMISSION)}, "refused",
               "GPU 0: " + NO_PERMISSION),
    "hung": ({"gpuhost_upgrade_facts": facts(processes=None, state="error",
                                             processes_error="NVML did not answer within 10 s while reading GPU 0")},
             "refused", "did not answer"),
    "lost": ({"gpuhost_upgrade_facts": facts(processes=[], state="gpu_lost", message="lost")}, "refused", "gpu_lost"),
    "unlisted": ({"gpuhost_upgrade_facts": facts(index=None, state="pci_only", processes=None)}, "refused",
                 "GPU 0000:17:00.0"),
    "nullprocs": ({"gpuhost_upgrade_facts": facts(processes=None)}, "refused", "null"),
    "strprocs": ({"gpuhost_upgrade_facts": facts(processes="none")}, "refused", "not a list"),
    "nogather": ({"gpuhost_upgrade_facts": {"present": True, "gpus": [{"index": 0, "state": "ok"}]}}, "refused",
                 "gathered without the processes"),
    "gpus5": ({"gpuhost_upgrade_facts": {"present": True, "gpus": 5}}, "refused", "no GPU list"),
    "empty": ({"gpuhost_upgrade_facts": {}}, "refused", "no GPU list"),
    "mixed": (
        {"gpuhost_upgrade_facts": {**IDLE, "gpus": [dict(GPU, processes=[PYTHON3]),
                                                    dict(GPU, index=1, processes=None, processes_error="Unknown Error")]}},
        "refused", "python3 (pid 4242) on GPU 0, 512 MiB; GPU 1: Unknown Error"),
    "vfio": ({"gpuhost_upgrade_facts": facts(index=None, state="pci_only", bound_driver="vfio-pci", processes=None)}, "ok", None),
    "waited": ({"gpuhost_upgrade_facts": facts(processes=None, processes_error=NO_PERMISSION), "gpuhost_upgrade_busy": "wait",
                "gpuhost_upgrade_busy_timeout": 1, "gpuhost_upgrade_busy_delay": 1}, "refused", "after waiting 1 s"),
    "forced": ({"gpuhost_upgrade_facts": facts(processes=None, processes_error=NO_PERMISSION), "gpuhost_upgrade_busy": "force"},
               "ok", None),
    "forcedbusy": ({"gpuhost_upgrade_facts": facts(processes=[PYTHON3]), "gpuhost_upgrade_busy": "force"}, "ok", None),
    "badpolicy": ({"gpuhost_upgrade_facts": IDLE, "gpuhost_upgrade_busy": "Force"}, "settings", '"Force"'),
    "badlist": ({"gpuhost_upgrade_facts": IDLE, "gpuhost_upgrade_busy": ["refuse"]}, "settings", "gpuhost_upgrade_busy is"),
    "badtimeout": ({"gpuhost_upgrade_facts": IDLE, "gpuhost_upgrade_busy_timeout": "ten"}, "settings", '"ten"'),
    "negdelay": ({"gpuhost_upgrade_facts": IDLE, "gpuhost_upgrade_busy_delay": -5}, "settings", '"-5"'),
    "badnvml": ({"gpuhost_upgrade_facts": IDLE, "gpuhost_upgrade_nvml_timeout": "1; rm"}, "settings", "gpuhost_upgrade_nvml_timeout"),
}
SETTINGS = "Check the busy-GPU guard's settings"
GUARD = "Refuse to upgrade while processes use a GPU"
FORCED = "Warn that the upgrade goes ahead over busy or unreadable GPUs (gpuhost_upgrade_busy is force)"


def _roll(tmp_path: Path, *extra: str) -> dict:
    inventory = {"all": {"hosts": {name: variables for name, (variables, _v, _m) in HOSTS.items()}, "vars": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "gpuhost_upgrade_driver": False, "gpuhost_upgrade_toolkit": False, "gpuhost_upgrade_doctor": False,
        "nvidia_driver_version": "580.95.05", "gpuhost_upgrade_max_fail_percentage": 100,
    }}}
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json", ANSIBLE_NOCOLOR="1", ANSIBLE_LOCALHOST_WARNING="0")
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(tmp_path / "inventory.yml"),
                           str(PLAYBOOK), "-f", "8", "-e", "gpuhost_upgrade_serial=100%", *extra],
                          env=env, capture_output=True, text=True, check=False, timeout=500)
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError as exc:
        raise AssertionError(f"no JSON from ansible-playbook (rc {proc.returncode}):\n{proc.stdout}\n{proc.stderr}") from exc


def _ran(result: dict, task: str) -> dict[str, dict]:
    found = {}
    for play in result["plays"]:
        for item in play["tasks"]:
            if item["task"]["name"] == task:
                found.update({h: r for h, r in item["hosts"].items() if not r.get("skipped")})
    return found


@pytest.fixture(scope="module", params=[False, True], ids=["real", "check"])
def roll(request, tmp_path_factory):
    return _roll(tmp_path_factory.mktemp("guard"), *(["--check"] if request.param else []))


def _verdict(result: dict, host: str) -> tuple[str, str]:
    settings, guard = _ran(result, SETTINGS).get(host, {}), _ran(result, GUARD).get(host, {})
    if settings.get("failed"):
        return "settings", settings["msg"]
    assert guard, "the guard did not run on %s" % host
    return ("refused", guard["msg"]) if guard.get("failed") else ("ok", "")


@pytest.mark.parametrize("host", sorted(HOSTS))
def test_each_host_gets_the_guards_verdict(roll, host):
    _variables, verdict, fragment = HOSTS[host]
    got, msg = _verdict(roll, host)
    assert got == verdict, msg
    if fragment:
        assert fragment in msg and msg.startswith(host + ":"), msg
    if verdict == "refused" and "process(es) use the GPUs" not in msg:
        assert "cannot be read" in msg and "gpuhost_upgrade_busy: force" in msg, msg
    if verdict == "settings":
        assert "refuse, wait or force" in msg


def test_force_goes_ahead_naming_what_it_ignores(roll):
    forced = _ran(roll, FORCED)
    assert set(forced) == {"forced", "forcedbusy"}
    assert NO_PERMISSION in forced["forced"]["msg"] and "python3 (pid 4242)" in forced["forcedbusy"]["msg"]


def test_the_failed_hosts_are_named_in_the_summary(roll):
    final = _ran(roll, "Fail the run when a host did not finish")["localhost"]
    refused = sorted(h for h, (_v, verdict, _m) in HOSTS.items() if verdict != "ok")
    assert final["failed"] and all(h + " (guard)" in final["msg"] for h in refused), final["msg"]
    assert not any(h + " (guard)" in final["msg"] for h, (_v, verdict, _m) in HOSTS.items() if verdict == "ok")
