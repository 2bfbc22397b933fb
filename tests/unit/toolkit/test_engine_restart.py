# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Restarts that don't surprise (issue 20): the cgroup parser, the plan, and the read-only module.

The cgroup lines are real shapes, as published (docs/sources.md, "Container cgroup paths"): coroot-node-agent's
``cgroup/cgroup_test.go`` (TestContainerByCgroup, TestNewFromProcessCgroupFile and its fixtures/proc/*/cgroup), Docker's
"Runtime metrics" page (``/sys/fs/cgroup/memory/docker/<longid>/``, ``system.slice/docker-<id>.scope``) and cadvisor's
``container/crio/factory.go`` (``crio-conmon`` is not a container).
"""

from __future__ import annotations

import json
import os
import time

import pytest

from ansible.module_utils import basic

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _engine_restart as er
from ansible_collections.gpuhost.nvidia.plugins.modules import nvidia_container_restart_plan

ID = "63425c4a8b4291744a79dd9011fddc7a1f8ffda61f65d72196aa01d00cae2e2d"

CGROUP_CASES = [
    # Docker, cgroup v1, cgroupfs driver (coroot fixtures/proc/200/cgroup shape; Docker runmetrics)
    ("11:devices:/docker/%s\n4:memory:/docker/%s\n1:name=systemd:/docker/%s\n" % (ID, ID, ID), "docker"),
    # Docker, cgroup v2, systemd driver (coroot fixture 800)
    ("0::/system.slice/docker-%s.scope\n" % ID, "docker"),
    # dockershim under the kubelet's systemd slices (coroot fixture 400)
    ("0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod8712f785_1a3e_41ec_a00b_e2dcc77431cb.slice/"
     "docker-%s.scope\n" % ID, "docker"),
    # containerd CRI, systemd driver, with and without the .scope suffix (coroot TestContainerByCgroup)
    ("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod3e61c214bc3ed9ff81e21474dd6cba17.slice/"
     "cri-containerd-%s.scope\n" % ID, "containerd"),
    ("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod3e61c214bc3ed9ff81e21474dd6cba17.slice/"
     "cri-containerd-%s\n" % ID, "containerd"),
    # containerd's systemd driver path in a cgroup v1 hierarchy: slice:prefix:name (coroot TestContainerByCgroup)
    ("4:memory:/system.slice/containerd.service/kubepods-burstable-pod4ed02c0b_0df8_4d14_a30e_fd589ee4143a.slice:"
     "cri-containerd:%s\n" % ID, "containerd"),
    # CRI-O, systemd driver, and its nested "container" cgroup (coroot TestContainerByCgroup)
    ("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod2942c55e_c9cb_428a_93f4_eaf89c1f3ce0.slice/"
     "crio-%s.scope\n" % ID, "crio"),
    ("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podea19ff5d_943a_4466_a07e_a71e9e50cc62.slice/"
     "crio-%s.scope/container\n" % ID, "crio"),
    # CRI-O, cgroupfs driver
    ("0::/kubepods/poda48c12e8-255a-11e9-8cd9-0007cb0b2cc8/crio-%s\n" % ID, "crio"),
    # the kubelet's cgroupfs layout, which does not name the engine (coroot fixture 300, TestContainerByCgroup)
    ("4:memory:/kubepods/burstable/pod6a4ce4a0-ba47-11ea-b2a7-0cc47ac5979e/%s\n" % ID, "kubernetes"),
    ("4:memory:/kubepods/besteffort/pod0d08203e-255a-11e9-8cd9-0007cb0b2cc8/%s/kube-proxy\n" % ID, "kubernetes"),
    ("4:memory:/kubepods/poda38c12e8-255a-11e9-8cd9-0007cb0b2cc8/%s\n" % ID, "kubernetes"),
    # podman
    ("0::/machine.slice/libpod-%s.scope/container\n" % ID, "podman"),
]


@pytest.mark.parametrize("text, engine", CGROUP_CASES)
def test_container_of_real_shapes(text, engine):
    found = er.container_of(text)
    assert found is not None and found["engine"] == engine and found["id"] == ID


@pytest.mark.parametrize("text", [
    "0::/system.slice/docker.service\n",  # dockerd itself (coroot fixture 100)
    "0::/system.slice/containerd.service\n",
    "0::/user.slice/user-1000.slice/session-1.scope\n",
    "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod2942c55e.slice/crio-conmon-%s.scope\n" % ID,
    "0::/machine.slice/libpod-conmon-%s.scope\n" % ID,
    "0::/system.slice/docker-%s.mount\n" % ID,
    "0::/\n",
    "",
    "garbage",
])
def test_container_of_not_a_container(text):
    assert er.container_of(text) is None


def test_v2_line_wins_over_v1_lines():
    text = "1:name=systemd:/system.slice/ssh.service\n0::/system.slice/docker-%s.scope\n" % ID
    assert er.container_of(text)["cgroup"] == "/system.slice/docker-%s.scope" % ID


def test_gpu_processes_known_unknown_and_no_driver():
    gpu = {"index": 0, "processes": [{"pid": 42, "name": "python3"}]}
    assert er.gpu_processes({"driver": {"kernel_module_loaded": True}, "gpus": [gpu]}) == (
        [{"pid": 42, "name": "python3", "gpu": 0}], None)
    found, unknown = er.gpu_processes({"state": "ok", "driver": {"kernel_module_loaded": True}, "gpus": [{"index": 1}]})
    assert found == [] and "GPU 1" in unknown and "gathered without the processes" in unknown
    # No nvidia module loaded: nothing can use a GPU (the test hosts: driver_not_loaded).
    assert er.gpu_processes({"state": "driver_not_loaded", "driver": {"kernel_module_loaded": False},
                             "gpus": [{"index": None, "pci_bus_id": "0000:01:00.0", "processes": None}]}) == ([], None)
    assert er.gpu_processes(None) == ([], "the GPU processes cannot be read (no GPU facts: none were given)")


def test_parse_systemctl_show_and_start_time():
    text = ("Id=docker.service\nActiveState=active\nExecMainStartTimestampMonotonic=5000000\n\n"
            "Id=crio.service\nActiveState=inactive\nExecMainStartTimestampMonotonic=0\nActiveEnterTimestampMonotonic=0\n")
    units = er.parse_systemctl_show(text)
    assert units["docker.service"]["ActiveState"] == "active" and units["crio.service"]["ActiveState"] == "inactive"
    assert er.start_time(units["docker.service"], now_real=1000.0, now_monotonic=15.0) == pytest.approx(990.0)
    assert er.start_time(units["crio.service"], 1000.0, 15.0) is None


def engine(name, active=True, changed=False, newest=None, started=100.0):
    return {"name": name, "unit": er.ENGINES[name], "active": active, "changed": changed, "newest": newest, "started": started}


def docker_gpu_container():
    return {"engine": "docker", "id": ID, "pid": 4242, "name": "python3", "gpu": 0}


def test_if_idle_defers_while_a_gpu_container_runs_and_names_it():
    result = er.plan("if_idle", [engine("docker", changed=True)], [docker_gpu_container()], None, False)
    assert result["restart"] == [] and result["pending"] == ["docker.service"]
    entry = result["engines"][0]
    assert entry["action"] == "pending" and entry["containers"] == ["docker container 63425c4a8b42 (python3, pid 4242, GPU 0)"]
    assert "restart pending" in result["messages"][0] and "63425c4a8b42" in result["messages"][0]


def test_if_idle_restarts_when_idle_and_docker_live_restore_keeps_containers():
    assert er.plan("if_idle", [engine("docker", changed=True)], [], None, False)["restart"] == ["docker.service"]
    result = er.plan("if_idle", [engine("docker", changed=True)], [docker_gpu_container()], None, True)
    assert result["restart"] == ["docker.service"] and "live-restore" in result["engines"][0]["reason"]


def test_if_idle_only_counts_containers_the_restart_would_stop():
    crio = dict(docker_gpu_container(), engine="crio")
    kube = dict(docker_gpu_container(), engine="kubernetes")
    podman = dict(docker_gpu_container(), engine="podman")
    result = er.plan("if_idle", [engine("docker", changed=True), engine("containerd", changed=True), engine("crio", changed=True)],
                     [crio, kube, podman], None, False)
    assert result["restart"] == ["docker.service"] and result["pending"] == ["containerd.service", "crio.service"]


def test_if_idle_defers_when_the_processes_are_unknown():
    result = er.plan("if_idle", [engine("containerd", changed=True)], [], "the GPU facts do not list the processes of GPU 0", False)
    assert result["pending"] == ["containerd.service"] and "cannot tell" in result["messages"][0]


def test_always_and_never():
    assert er.plan("always", [engine("docker", changed=True)], [docker_gpu_container()], None, False)["restart"] == ["docker.service"]
    never = er.plan("never", [engine("docker", changed=True)], [], None, False)
    assert never["restart"] == [] and never["pending"] == ["docker.service"] and "restart needed" in never["messages"][0]
    assert never["engines"][0]["action"] == "needed"


def test_due_only_when_running_and_changed_or_newer():
    # Not running: it reads the configuration when it starts.
    stopped = er.plan("always", [engine("containerd", active=False, changed=True)], [], None, False)
    assert stopped["restart"] == [] and stopped["engines"][0]["due"] is False
    # A configuration newer than the running engine: a restart deferred by an earlier run is still due.
    later = er.plan("if_idle", [engine("containerd", newest=200.0, started=100.0)], [], None, False)
    assert later["restart"] == ["containerd.service"] and "after it started" in later["engines"][0]["reason"]
    # Older than the running engine, and unchanged: nothing to do (the run after a restart).
    assert er.plan("always", [engine("containerd", newest=50.0, started=100.0)], [], None, False)["restart"] == []


@pytest.fixture
def fake_host(monkeypatch, tmp_path):
    """A /proc with one GPU process in a Docker container, and systemctl answering for the units."""
    proc = tmp_path / "proc" / "4242"
    proc.mkdir(parents=True)
    (proc / "cgroup").write_text("0::/system.slice/docker-%s.scope\n" % ID)
    daemon = tmp_path / "daemon.json"
    daemon.write_text("{}")
    old = time.time() - 3600
    os.utime(daemon, (old, old))
    started_us = int((time.monotonic() - 60) * 1e6)  # the engines started a minute ago, after daemon.json was written
    calls = []

    def run_command(self, args, **kwargs):
        calls.append(args)
        out = "".join("Id=%s\nActiveState=active\nExecMainStartTimestampMonotonic=%d\n\n" % (unit, started_us) for unit in args[3:])
        return 0, out, ""

    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
    return {"proc": str(tmp_path / "proc"), "daemon": daemon, "calls": calls}


SYSTEMCTL = {"systemctl": "/bin/systemctl"}


def busy_facts():
    return {"state": "ok", "driver": {"kernel_module_loaded": True},
            "gpus": [{"index": 0, "processes": [{"pid": 4242, "name": "python3", "type": "C"}]}]}


def module_args(fake_host, **kwargs):
    args = {"engines": [{"name": "docker", "changed": True, "files": [str(fake_host["daemon"])]}], "gpu_facts": busy_facts(),
            "proc_root": fake_host["proc"], "docker_daemon_json": str(fake_host["daemon"])}
    args.update(kwargs)
    return args


def test_module_defers_docker_naming_the_container(run_module, fake_host):
    result = run_module(nvidia_container_restart_plan, module_args(fake_host), check_mode=True, bins=SYSTEMCTL)
    assert not result["changed"] and result["restart"] == [] and result["pending"] == ["docker.service"]
    assert result["gpu_containers"][0]["engine"] == "docker" and result["gpu_containers"][0]["pid"] == 4242
    assert "docker container 63425c4a8b42 (python3, pid 4242, GPU 0)" in result["messages"][0]
    assert fake_host["calls"][0][:3] == ["/bin/systemctl", "show", "--property=" + er.PROPERTIES]


def test_module_live_restore_lets_docker_restart(run_module, fake_host):
    fake_host["daemon"].write_text(json.dumps({"live-restore": True}))
    result = run_module(nvidia_container_restart_plan, module_args(fake_host), bins=SYSTEMCTL)
    assert result["restart"] == ["docker.service"] and result["engines"][0]["live_restore"] is True


def test_module_unchanged_and_older_config_is_not_due(run_module, fake_host):
    args = module_args(fake_host, engines=[{"name": "docker", "changed": False, "files": [str(fake_host["daemon"])]}])
    result = run_module(nvidia_container_restart_plan, args, bins=SYSTEMCTL)
    assert result["restart"] == [] and result["pending"] == [] and result["engines"][0]["due"] is False


def test_module_config_newer_than_the_engine_is_due(run_module, fake_host):
    os.utime(fake_host["daemon"], None)  # written now, after the engine started
    args = module_args(fake_host, engines=[{"name": "docker", "files": [str(fake_host["daemon"])]}], policy="always")
    assert run_module(nvidia_container_restart_plan, args, bins=SYSTEMCTL)["restart"] == ["docker.service"]


def test_module_without_systemd_restarts_nothing_and_says_why(run_module, fake_host, monkeypatch):
    monkeypatch.setattr(basic.AnsibleModule, "run_command",
                        lambda self, args, **kwargs: (1, "", "System has not been booted with systemd"))
    result = run_module(nvidia_container_restart_plan, module_args(fake_host, policy="always"), bins=SYSTEMCTL)
    assert not result.get("failed") and result["restart"] == [] and result["engines"][0]["active"] is False


# The restart decision without a remote call of its own (#21): the runtime merge returns its engine's state, and the
# nvidia_container_restarts filter decides from it as the module does.

def _merge(run_module, tmp_path, content, check_mode=False, **args):
    from ansible_collections.gpuhost.nvidia.plugins.modules import nvidia_container_runtime
    daemon = tmp_path / "daemon.json"
    if content is not None:
        daemon.write_text(content)
        old = time.time() - 3600
        os.utime(daemon, (old, old))
    module_args = dict({"runtime": "docker", "path": str(daemon), "record": str(tmp_path / "record.json"), "backup": False}, **args)
    return run_module(nvidia_container_runtime, module_args, check_mode=check_mode, bins=SYSTEMCTL), daemon


def test_the_runtime_merge_returns_its_engines_state(run_module, fake_host, tmp_path):
    result, daemon = _merge(run_module, tmp_path, json.dumps({"live-restore": True}))
    engine = result["engine"]
    assert result["changed"] and engine["changed"] is True and engine["name"] == "docker" and engine["unit"] == "docker.service"
    assert engine["active"] is True and engine["live_restore"] is True and engine["problem"] is None
    assert engine["newest"] == pytest.approx(os.stat(daemon).st_mtime) and engine["started"] < engine["newest"]
    assert fake_host["calls"][-1] == ["/bin/systemctl", "show", "--property=" + er.PROPERTIES, "docker.service"]
    # Merged already: unchanged.
    again = _merge(run_module, tmp_path, None)[0]
    assert again["changed"] is False and again["engine"]["changed"] is False


def test_the_runtime_merge_in_check_mode_reports_the_change_it_would_make(run_module, fake_host, tmp_path):
    result, daemon = _merge(run_module, tmp_path, "{}", check_mode=True)
    assert result["engine"]["changed"] is True and daemon.read_text() == "{}"
    assert result["engine"]["live_restore"] is False


def test_the_runtime_merge_without_systemd_says_why(run_module, monkeypatch, tmp_path):
    from ansible_collections.gpuhost.nvidia.plugins.modules import nvidia_container_runtime
    result = run_module(nvidia_container_runtime, {"runtime": "containerd", "path": str(tmp_path / "config.toml"),
                                                   "dropin": str(tmp_path / "conf.d" / "99-nvidia.toml"),
                                                   "record": str(tmp_path / "record.json")})
    engine = result["engine"]
    assert engine["active"] is False and engine["live_restore"] is None and engine["unit"] == "containerd.service"
    assert "systemctl was not found" in engine["problem"]
    assert engine["newest"] == pytest.approx(max(os.stat(f).st_mtime for f in result["files"]))


def _state(name="docker", **kwargs):
    state = {"name": name, "unit": er.ENGINES[name], "active": True, "changed": False, "newest": 100.0, "started": 200.0,
             "live_restore": None if name != "docker" else False, "problem": None}
    state.update(kwargs)
    return state


def _restarts(engines, policy):
    from ansible_collections.gpuhost.nvidia.plugins.filter.toolkit import nvidia_container_restarts
    return nvidia_container_restarts(engines, policy)


@pytest.mark.parametrize("policy", ["always", "never"])
@pytest.mark.parametrize("engines", [
    [_state(changed=True)],
    [_state(newest=300.0)],
    [_state()],
    [_state(active=False, changed=True)],
    [_state(changed=True, live_restore=True), _state("containerd", changed=True), _state("crio", newest=None, started=None)],
], ids=["changed", "newer", "older", "stopped", "three"])
def test_the_filter_decides_as_the_module_does(run_module, fake_host, tmp_path, engines, policy):
    """Same states, same plan: the filter on the runtime merges' states and the module reading the host."""
    decided = _restarts(engines, policy)
    expected = er.plan(policy, [{k: e[k] for k in er.STATE_KEYS} for e in engines], [], None,
                       any(e["name"] == "docker" and e["live_restore"] for e in engines))
    assert decided == expected


def test_the_filter_matches_the_module_on_one_host(run_module, fake_host, tmp_path):
    merged, daemon = _merge(run_module, tmp_path, "{}")
    module = run_module(nvidia_container_restart_plan, {"engines": [{"name": "docker", "changed": True, "files": [str(daemon)]}],
                                                        "policy": "always", "docker_daemon_json": str(daemon),
                                                        "proc_root": fake_host["proc"]}, bins=SYSTEMCTL)
    decided = _restarts([merged["engine"]], "always")
    assert decided["restart"] == module["restart"] == ["docker.service"]
    assert [dict(e, reason=None) for e in decided["engines"]] == [dict(e, reason=None) for e in module["engines"]]


def test_the_filter_leaves_if_idle_pending_saying_why_and_tells_problems():
    problem = "systemctl was not found, so no container engine counts as running and none is restarted."
    decided = _restarts([_state(changed=True, problem=problem)], "if_idle")
    assert decided["restart"] == [] and decided["pending"] == ["docker.service"]
    assert decided["messages"][0].startswith("systemctl was not found")
    assert "the GPU processes were not read" in decided["messages"][1]


@pytest.mark.parametrize("engines, policy, fragment", [
    ("docker", "always", "expected the list"),
    ([{"name": "docker"}], "always", "missing unit, active, changed, newest, started"),
    ([_state(name="docker") | {"name": "podman"}], "always", "unknown engine 'podman'"),
    ([_state()], "sometimes", "policy must be one of if_idle, always, never"),
])
def test_the_filter_refuses_what_is_not_an_engine_state(engines, policy, fragment):
    from ansible.errors import AnsibleFilterError
    with pytest.raises(AnsibleFilterError, match=fragment):
        _restarts(engines, policy)
