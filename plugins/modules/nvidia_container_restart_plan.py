#!/usr/bin/python
# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: nvidia_container_restart_plan
short_description: Internal. Decide whether container engines whose configuration changed may restart now
version_added: 0.1.0
description:
  - Internal to the roles C(gpuhost.nvidia.nvidia_container_toolkit) and C(gpuhost.nvidia.k8s_gpu_node) (their engine
    restarts); no compatibility promise.
  - Read-only. For each engine in O(engines) (Docker, containerd, CRI-O, the kubelet, k3s and RKE2), says whether it is due a restart, and
    whether to restart it now, defer it, or only report it, following O(policy).
  - An engine is due a restart when its unit is active and its configuration changed in this run (the engine's
    C(changed)) or one of its configuration files (the engine's C(files)) is newer than the unit's main process. The
    second covers a restart an earlier run deferred or did not make, so it is not forgotten.
  - The GPU processes come from O(gpu_facts) (C(gpus[].processes) of M(gpuhost.nvidia.nvidia_gpu_facts), gathered with
    C(gather=[processes])). Each process is mapped to its container through C(/proc/<pid>/cgroup), from the cgroup
    path shapes the engines create - C(docker-<id>.scope) or C(/docker/<id>), C(cri-containerd-<id>.scope),
    C(crio-<id>.scope), C(libpod-<id>.scope), and the kubelet's C(/kubepods/<qos>/pod<uid>/<id>), which does not
    name the engine.
  - A restart of Docker stops its containers unless C(live-restore) is V(true) in O(docker_daemon_json); then they keep
    running and only Docker's own containers are not counted. A restart of containerd or CRI-O is counted as
    stopping their containers and the kubelet's unnamed ones. A restart of the kubelet is counted as disturbing every
    Kubernetes container (containerd's, CRI-O's and the unnamed ones), since it re-admits the pods and re-registers
    the device plugin when it comes back; so it never restarts under GPU work either. A restart of k3s or RKE2 (their
    server or agent unit, which runs the kubelet and containerd) is counted as stopping containerd's and the
    kubelet's unnamed containers.
  - O(policy=if_idle) restarts an engine when no GPU process runs in a container the restart would stop, and defers
    it otherwise (RV(pending), with the containers named, and a warning).
  - When the GPU processes cannot be known, O(policy=if_idle) defers the restart too, naming each GPU and why.
    Unknown is a GPU whose C(processes) is null (C(processes_error) says why), missing or not a list, an entry
    without a readable pid, a GPU whose C(state) is not V(ok) (lost, an NVML error, bound to nvidia but not listed by
    NVML), or O(gpu_facts) that are null or malformed (C(gpus) not a list). GPUs bound to C(vfio-pci), C(pci-stub) or
    no driver, and any GPU while the nvidia module is not loaded (C(driver.kernel_module_loaded=false)), cannot run
    such processes.
  - O(policy=always) restarts every due engine, whatever runs and whether or not the processes can be read (the
    explicit override). O(policy=never) restarts none and reports each due engine as needing a restart.
author:
  - gpuhost.nvidia developers (@gpuhost)
attributes:
  check_mode:
    support: full
    description: The module only reads, so check mode returns the same plan.
  diff_mode:
    support: none
    description: The module changes nothing.
  platform:
    support: full
    platforms: posix
    description: Linux hosts with systemd.
options:
  engines:
    description: The engines to judge.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description:
          - The engine; its unit is C(<name>.service) (C(docker.service), C(containerd.service), C(crio.service),
            C(kubelet.service), C(k3s.service), C(k3s-agent.service), C(rke2-server.service), C(rke2-agent.service)).
        type: str
        required: true
        choices: [docker, containerd, crio, kubelet, k3s, k3s-agent, rke2-server, rke2-agent]
      changed:
        description: Whether this run changed (or in check mode would change) the engine's configuration.
        type: bool
        default: false
      files:
        description: The engine's configuration files the caller manages; the newest one is compared with the start of
          the engine's main process. Missing files are skipped.
        type: list
        elements: path
        default: []
  policy:
    description: When to restart a due engine, see the description.
    type: str
    choices: [if_idle, always, never]
    default: if_idle
  gpu_facts:
    description:
      - The GPU facts, C(ansible_facts.nvidia_gpu) gathered with C(gather=[processes]). Only read with O(policy=if_idle).
      - Null, malformed facts, or facts in which a GPU's processes are unknown defer every due restart under
        O(policy=if_idle); see the description. Malformed facts never fail the task.
    type: dict
  docker_daemon_json:
    description: Docker's C(daemon.json), read for C(live-restore). A missing or unreadable file means live-restore off.
    type: path
    default: /etc/docker/daemon.json
  proc_root:
    description: Where C(/proc) is, for tests.
    type: path
    default: /proc
seealso:
  - module: gpuhost.nvidia.nvidia_container_runtime
  - module: gpuhost.nvidia.nvidia_gpu_facts
  - name: Docker live restore
    description: With live-restore, containers keep running while dockerd restarts.
    link: https://docs.docker.com/engine/daemon/live-restore/
"""

EXAMPLES = r"""
- name: Gather the GPU processes
  gpuhost.nvidia.nvidia_gpu_facts:
    gather: [processes]

- name: Decide whether docker may restart now
  gpuhost.nvidia.nvidia_container_restart_plan:
    engines:
      - name: docker
        changed: true
        files: [/etc/docker/daemon.json]
    gpu_facts: "{{ ansible_facts.nvidia_gpu }}"
  register: plan

- name: Restart what may restart
  ansible.builtin.systemd_service:
    name: "{{ item }}"
    state: restarted
  loop: "{{ plan.restart }}"
"""

RETURN = r"""
restart:
  description: The units to restart now.
  returned: success
  type: list
  elements: str
  sample: [containerd.service]
pending:
  description: The due units not restarted, deferred by O(policy=if_idle) or reported by O(policy=never).
  returned: success
  type: list
  elements: str
  sample: [docker.service]
messages:
  description: One sentence per pending unit, saying why and what to do (also given as warnings).
  returned: success
  type: list
  elements: str
  sample: ["docker.service restart pending (restart policy if_idle): ..."]
engines:
  description: Per engine, what was found and decided.
  returned: success
  type: list
  elements: dict
  contains:
    name:
      description: The engine.
      returned: success
      type: str
      sample: docker
    unit:
      description: Its systemd unit.
      returned: success
      type: str
      sample: docker.service
    active:
      description: Whether the unit is active.
      returned: success
      type: bool
      sample: true
    due:
      description: Whether it runs and its configuration is newer than it, or changed in this run.
      returned: success
      type: bool
      sample: true
    action:
      description: V(restart), V(pending) (O(policy=if_idle) while GPU containers run), V(needed) (O(policy=never)) or V(none).
      returned: success
      type: str
      sample: pending
    reason:
      description: Why, in words.
      returned: success
      type: str
      sample: "its configuration changed in this run, but containers it would stop use the GPUs: ..."
    containers:
      description: The GPU containers a restart would stop, one line each.
      returned: success
      type: list
      elements: str
      sample: ["docker container 0123456789ab (python3, pid 4242, GPU 0)"]
    live_restore:
      description: For V(docker), whether C(live-restore) is on; null for the other engines.
      returned: success
      type: bool
      sample: false
gpu_containers:
  description: Every GPU process that runs in a container.
  returned: success
  type: list
  elements: dict
  sample: [{engine: docker, id: 0123456789abcdef..., pid: 4242, name: python3, gpu: 0, cgroup: /system.slice/docker-0123....scope}]
"""

import os
import typing as t

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _engine_restart, _files, _runtime, _validate

RULES = {"docker_daemon_json": _validate.Path(), "proc_root": _validate.Path()}


def read_text(path: str) -> str | None:
    """A file's text, or None when it cannot be read (a FIFO, a device or a directory is refused unopened)."""
    try:
        data = _files.read_bytes(path, "path", max_size=1 << 20)
    except (_files.FileError, OSError):
        return None
    return None if data is None else data.decode("utf-8", "replace")


def main() -> None:
    module = _validate.ansible_module(
        argument_spec=dict(
            engines=dict(type="list", elements="dict", required=True, options=dict(
                name=dict(type="str", required=True, choices=list(_engine_restart.ENGINES)),
                changed=dict(type="bool", default=False),
                files=dict(type="list", elements="path", default=[]),
            )),
            policy=dict(type="str", choices=list(_engine_restart.POLICIES), default="if_idle"),
            gpu_facts=dict(type="dict"),
            docker_daemon_json=dict(type="path", default=_runtime.DEFAULT_PATHS["docker"]),
            proc_root=dict(type="path", default="/proc"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    errors = _validate.check(p, RULES)
    errors += ["engines[%d].files %s" % (i, e) for i, engine in enumerate(p["engines"])
               for e in _validate.check({"files": engine["files"]}, {"files": _validate.ListOf(_validate.Path())})]
    if errors:
        module.fail_json(msg="; ".join(errors), errors=errors)
    engines, problem = _engine_restart.engine_states(module, p["engines"])
    if problem:
        module.warn(problem)

    containers: list[dict[str, t.Any]] = []
    unknown = None
    if p["policy"] == "if_idle":
        processes, unknown = _engine_restart.gpu_processes(p["gpu_facts"])
        for proc in processes:
            found = _engine_restart.container_of(read_text(os.path.join(p["proc_root"], str(proc["pid"]), "cgroup")) or "")
            if found:
                containers.append(dict(found, pid=proc["pid"], name=proc["name"], gpu=proc["gpu"]))
    docker_live_restore = any(e["name"] == "docker" for e in engines) and _engine_restart.live_restore(read_text(p["docker_daemon_json"]))
    result = _engine_restart.plan(p["policy"], engines, containers, unknown, docker_live_restore)
    for message in result["messages"]:
        module.warn(message)
    module.exit_json(changed=False, gpu_containers=containers, **result)


if __name__ == "__main__":
    main()
