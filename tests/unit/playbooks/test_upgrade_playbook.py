# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""playbooks/upgrade.yml run for real on the controller, three local hosts, with synthetic GPU facts for the guard.

The roles are switched off (molecule/upgrade_roll runs them on test hosts); these runs check the roll's own logic:
the busy-GPU guard, how far a failure stops the roll (gpuhost_upgrade_max_fail_percentage), the hooks, the table, and
that the built-in Kubernetes drain is only called when a kubeconfig and a node are given, through kubernetes.core.
The post-check reads each host's driver from files under its own root (gpuhost_upgrade_facts_root: the loaded
module's /sys/module/nvidia/version and the installed libnvidia-ml.so.<version>), never from the guard's facts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
PLAYBOOK = REPO / "playbooks" / "upgrade.yml"
IDLE = {
    "present": True, "source": "nvml", "state": "ok", "messages": [],
    "driver": {"version": "580.95.05", "branch": "580", "kernel_module_loaded": True, "kernel_module_type": "open"},
    "gpus": [{"index": 0, "uuid": "GPU-3f1c2a51-0a6e-4b6b-9a55-2d4ac6f0e001", "pci_bus_id": "0000:17:00.0", "processes": []}],
    "device_nodes": ["/dev/nvidia0", "/dev/nvidia-uvm", "/dev/nvidiactl"],
}
BUSY = dict(IDLE, gpus=[dict(IDLE["gpus"][0], processes=[{"pid": 4242, "type": "C", "name": "python3", "used_memory_mib": 512}])])


def _root(tmp_path: Path, name: str, loaded: str | None, library: str | None) -> str:
    """A host root with the driver files the facts module reads: the loaded module's version and the NVML library."""
    root = tmp_path / ("root-" + name)
    if loaded is not None:
        (root / "sys/module/nvidia").mkdir(parents=True, exist_ok=True)
        (root / "sys/module/nvidia/version").write_text(loaded + "\n")
    if library is not None:
        lib = root / "usr/lib/x86_64-linux-gnu"
        lib.mkdir(parents=True, exist_ok=True)
        (lib / ("libnvidia-ml.so." + library)).write_text("stand-in\n")
        (lib / "libnvidia-ml.so.1").symlink_to("libnvidia-ml.so." + library)
    root.mkdir(parents=True, exist_ok=True)
    return str(root)


def _host(tmp_path: Path, name: str, facts: dict, loaded: str | None = "580.95.05", library: str | None = "580.95.05", **more) -> dict:
    return {"gpuhost_upgrade_facts": facts, "gpuhost_upgrade_facts_root": _root(tmp_path, name, loaded, library), **more}


def _roll(tmp_path: Path, hostvars: dict[str, dict], *extra: str, timeout: int = 300) -> tuple[int, dict]:
    hooks = tmp_path / "hooks"
    hooks.mkdir(exist_ok=True)
    for when in ("before", "after"):
        (hooks / f"{when}.yml").write_text(
            f"- name: Hook {when}\n  ansible.builtin.debug:\n    msg: \"hook {when} {{{{ inventory_hostname }}}}\"\n")
    inventory = {"all": {"hosts": hostvars, "vars": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "gpuhost_upgrade_driver": False, "gpuhost_upgrade_toolkit": False,
        # The controller is no GPU host: the doctor's checks of its files are not what these tests are about.
        "gpuhost_upgrade_doctor": False,
        "nvidia_driver_version": "580.95.05",
        "gpuhost_upgrade_before_tasks": str(hooks / "before.yml"), "gpuhost_upgrade_after_tasks": str(hooks / "after.yml"),
        "gpuhost_upgrade_summary_dir": str(tmp_path),
    }}}
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json", ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCALHOST_WARNING="0")
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(tmp_path / "inventory.yml"),
                           str(PLAYBOOK), *extra], env=env, capture_output=True, text=True, check=False, timeout=timeout)
    try:
        return proc.returncode, json.loads(proc.stdout)
    except json.JSONDecodeError as exc:
        raise AssertionError(f"no JSON from ansible-playbook (rc {proc.returncode}):\n{proc.stdout}\n{proc.stderr}") from exc


def _ran(result: dict, task: str) -> dict[str, dict]:
    """Per host, the outcome of the task named ``task`` that was not skipped there."""
    found = {}
    for play in result["plays"]:
        for item in play["tasks"]:
            if item["task"]["name"] == task:
                found.update({h: r for h, r in item["hosts"].items() if not r.get("skipped")})
    return found


def _table(tmp_path: Path) -> dict[str, list[str]]:
    lines = (tmp_path / "upgrade.txt").read_text(encoding="utf-8").splitlines()
    return {line.split()[0]: line.split() for line in lines[1:]}


@pytest.fixture(scope="module")
def refused(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("refused")
    rc, result = _roll(tmp_path, {name: _host(tmp_path, name, facts) for name, facts in
                                  (("gpu01", IDLE), ("gpu02", BUSY), ("gpu03", IDLE))})
    return tmp_path, rc, result


def test_busy_gpu_stops_the_roll_at_its_host(refused):
    tmp_path, rc, result = refused
    assert rc != 0
    guard = _ran(result, "Refuse to upgrade while processes use a GPU")
    assert guard["gpu02"]["failed"] and "python3 (pid 4242) on GPU 0, 512 MiB" in guard["gpu02"]["msg"]
    assert "gpu02:" in guard["gpu02"]["msg"] and "gpuhost_upgrade_busy: wait" in guard["gpu02"]["msg"]
    assert not guard["gpu01"].get("failed")
    assert "gpu03" not in guard, "the roll went on after the busy host (max_fail_percentage 0)"
    table = _table(tmp_path)
    assert [table[h][1] for h in ("gpu01", "gpu02", "gpu03")] == ["ok", "failed", "skipped"]
    assert table["gpu02"][2] == "guard"
    final = _ran(result, "Fail the run when a host did not finish")["localhost"]
    assert final["failed"] and "gpu02 (guard)" in final["msg"] and "python3 (pid 4242)" in final["msg"]


def test_hooks_run_around_each_upgraded_host_only(refused):
    _tmp, _rc, result = refused
    assert set(_ran(result, "Hook before")) == {"gpu01"} and set(_ran(result, "Hook after")) == {"gpu01"}


@pytest.fixture(scope="module")
def tolerated(tmp_path_factory):
    """gpu02 names a Kubernetes node but no kubeconfig (so no Kubernetes step runs), gpu03 still runs the old driver
    (its files say so, while the guard's synthetic facts say the target); max_fail_percentage 50."""
    tmp_path = tmp_path_factory.mktemp("tolerated")
    rc, result = _roll(tmp_path, {
        "gpu01": _host(tmp_path, "gpu01", IDLE),
        "gpu02": _host(tmp_path, "gpu02", IDLE, gpuhost_upgrade_k8s_node="gpu02"),
        "gpu03": _host(tmp_path, "gpu03", IDLE, loaded="570.172.08", library="570.172.08")},
        "-e", "gpuhost_upgrade_max_fail_percentage=50")
    return tmp_path, rc, result


def test_kubernetes_steps_only_when_configured(refused, tolerated):
    """Without a kubeconfig and a node, no Kubernetes step runs (tests/unit/kubernetes/test_upgrade_k8s_playbook.py runs
    them against a stand-in API); one failed host of three is within 50 %."""
    for _tmp, _rc, result in (refused, tolerated):
        for task in ("Read the Kubernetes cluster's nodes", "Read the Kubernetes node", "Cordon the Kubernetes node",
                     "Uncordon the Kubernetes node", "Record the node as upgrade-done", "Label the node upgrade-failed (it stays cordoned)"):
            assert not _ran(result, task), task
    tmp_path, rc, result = tolerated
    assert rc != 0
    assert set(_ran(result, "Hook before")) == {"gpu01", "gpu02", "gpu03"}
    table = _table(tmp_path)
    assert [table[h][1:3] for h in ("gpu01", "gpu02", "gpu03")] == [["ok", "-"], ["ok", "-"], ["failed", "post-check"]]


POST_CHECK = "Check that the driver and the container toolkit are the target versions"


def test_wrong_driver_version_fails_the_post_check(tolerated):
    """gpu03's files still show the old driver: the post-check fails the host, naming both versions, although the
    synthetic facts the guard read say it runs the target."""
    tmp_path, _rc, result = tolerated
    check = _ran(result, POST_CHECK)["gpu03"]
    assert check["failed"], check
    assert "the installed driver is not the target 580.95.05: libnvidia-ml.so 570.172.08" in check["msg"], check["msg"]
    assert "the loaded nvidia kernel module is 570.172.08, not the target 580.95.05" in check["msg"], check["msg"]
    assert set(_ran(result, "Hook after")) == {"gpu01", "gpu02"}, "the after hook ran on a host that failed"
    # Before: the guard's look at the controller, which has no driver; after: what gpu03's files show.
    assert _table(tmp_path)["gpu03"][3:6] == ["?", "->", "570.172.08"], "the table does not show the driver gpu03 has"


# name: (loaded module, installed library, extra variables, what the post-check says; None: it passes). The pure cases
# (targets, package versions, what cannot be seen) are test_upgrade_post_check.py's; these go through the playbook.
POST_CHECK_CASES = {
    "old module still loaded": ("570.172.08", "580.95.05", {}, "the loaded nvidia kernel module is 570.172.08, not the target 580.95.05"),
    "no module loaded": (None, "580.95.05", {}, "the nvidia kernel module is not loaded"),
    "no module loaded, container": (None, "580.95.05", {"gpuhost_upgrade_check_loaded": False}, None),
    "nothing installed, other branch loaded": ("590.48.01", None, {"nvidia_driver_version": "", "nvidia_driver_branch": 580},
                                               "no installed driver to compare with the target"),
}


@pytest.fixture(scope="module")
def post_checked(tmp_path_factory):
    """One roll, one host per case, all in one batch (each is post-checked, whatever the others did)."""
    tmp_path = tmp_path_factory.mktemp("post_checked")
    hosts = {}
    for index, (loaded, library, extra, _needle) in enumerate(POST_CHECK_CASES.values()):
        name = "case%02d" % index
        hosts[name] = _host(tmp_path, name, IDLE, loaded=loaded, library=library, **extra)
    rc, result = _roll(tmp_path, hosts, "-e", "gpuhost_upgrade_serial=%d" % len(hosts), timeout=600)
    return rc, result


@pytest.mark.parametrize("index, case", list(enumerate(POST_CHECK_CASES)))
def test_post_check_reads_the_host(post_checked, index, case):
    _rc, result = post_checked
    _loaded, _library, _extra, needle = POST_CHECK_CASES[case]
    check = _ran(result, POST_CHECK)["case%02d" % index]
    if needle is None:
        assert not check.get("failed"), check.get("msg")
    else:
        assert check.get("failed") and needle in check["msg"], check


@pytest.mark.parametrize("variable, value, needle", [
    ("nvidia_driver_version", "580.95.05\nPin-Priority: 1001", "nvidia_driver_version must be a full driver version"),
    ("nvidia_driver_branch", 580.6, "nvidia_driver_branch must be a branch or version string"),
])
def test_wrong_targets_fail_before_the_host_is_touched(tmp_path, variable, value, needle):
    """A target that is no version fails the first host before its guard, naming the variable; the roll stops. (The
    other hostile values are test_upgrade_post_check.py's; these two go through the inventory's YAML.)"""
    rc, result = _roll(tmp_path, {name: _host(tmp_path, name, IDLE, **{variable: value}) for name in ("gpu01", "gpu02")})
    assert rc != 0
    check = _ran(result, "Check the roll's targets before touching the host")["gpu01"]
    assert check["failed"] and needle in check["msg"] and "gpu01" in check["msg"], check
    assert not _ran(result, "Gather the system facts the roles read"), "the roll touched a host with a wrong target"
    table = _table(tmp_path)
    assert table["gpu01"][1:3] == ["failed", "guard"] and table["gpu02"][1] == "skipped"
