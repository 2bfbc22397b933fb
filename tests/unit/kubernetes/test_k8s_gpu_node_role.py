# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The k8s_gpu_node role on the internal common role: its per-distribution variable (the kubelet's environment file)
layered by the common role's vars.yml resolves as the former test of os_family did on every distribution, its fast
path has the shape of the other roles' (check, probe, end in the role itself, then the per-OS vars), and its record
lists the files each kind of node has the role write, merge or read.
"""

from __future__ import annotations

import pathlib
import sys
import typing as t

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

ROLE = pathlib.Path(__file__).resolve().parents[3] / "roles" / "k8s_gpu_node"
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "roles"))
from os_vars import HOSTS, resolve  # noqa: E402  pylint: disable=wrong-import-position

# vars/main.yml before the common role.
OLD_KUBELET_ENV = ("{{ k8s_gpu_node_kubelet_env_file or ('/etc/sysconfig/kubelet' if ansible_facts['os_family'] == 'RedHat' "
                   "else '/etc/default/kubelet') }}")


def _yaml(path: pathlib.Path) -> t.Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _trust(value: t.Any) -> t.Any:
    if isinstance(value, dict):
        return {k: _trust(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_trust(v) for v in value]
    return trust_as_template(value) if isinstance(value, str) else value


def _variables(facts: dict[str, str], **given: t.Any) -> dict[str, t.Any]:
    """The role's defaults, its vars/main.yml and the per-OS files the common role loads for ``facts``, then ``given``."""
    variables = {**_yaml(ROLE / "defaults" / "main.yml"), **_yaml(ROLE / "vars" / "main.yml"), **resolve("k8s_gpu_node", facts)}
    return {**_trust(variables), "ansible_facts": facts, **given}


def _template(variables: dict[str, t.Any], value: t.Any) -> t.Any:
    return Templar(loader=DataLoader(), variables=variables).template(_trust(value))


@pytest.mark.parametrize("host", sorted(HOSTS))
@pytest.mark.parametrize("env_file", ["", "/etc/kubernetes/kubelet-extra.env"])
def test_the_kubelet_env_file_resolves_as_before(host: str, env_file: str) -> None:
    variables = _variables(HOSTS[host], k8s_gpu_node_kubelet_env_file=env_file)
    assert _template(variables, "{{ __k8s_gpu_node_kubelet_env }}") == _template(variables, OLD_KUBELET_ENV)


def test_the_role_checks_first_then_probes_and_ends_itself_before_loading_its_vars() -> None:
    tasks = _yaml(ROLE / "tasks" / "main.yml")
    names = [task.get("name") for task in tasks]
    assert tasks[0]["ansible.builtin.import_tasks"] == "check.yml"
    probe = tasks[names.index("Probe whether the host is as the role's last full run left it")]
    assert probe["ansible.builtin.include_role"] == {"name": "gpuhost.nvidia.internal_common", "tasks_from": "probe.yml"}
    # What else the role plans from is its own __k8s_gpu_node_converged_inputs, which the action reads from the role's
    # vars (the same in the role and before it, in site.yml): the include passes nothing.
    assert "vars" not in probe and "__k8s_gpu_node_converged_inputs" in (ROLE / "vars" / "main.yml").read_text(encoding="utf-8")
    handback = names.index("Hand back what the last full run reported, on a converged host")
    assert tasks[handback]["ansible.builtin.import_tasks"] == "converged.yml"
    end = names.index("End the role, nothing drifted")
    assert end == handback + 1 and tasks[end]["ansible.builtin.meta"] == "end_role"
    assert tasks[end]["when"] == "__k8s_gpu_node_handed_back is not skipped"
    # The hand-back's conditions repeat the probe's, so a probe result of an earlier role never ends this one.
    converged = _yaml(ROLE / "tasks" / "converged.yml")
    assert len(converged) == 1 and converged[0]["register"] == "__k8s_gpu_node_handed_back"
    assert converged[0]["when"][0] == probe["when"] and "not ansible_check_mode" in converged[0]["when"]
    loads = [i for i, task in enumerate(tasks) if (task.get("ansible.builtin.include_role") or {}).get("tasks_from") == "vars.yml"]
    assert loads == [end + 1]
    record = tasks[-1]
    assert record["ansible.builtin.include_role"] == {"name": "gpuhost.nvidia.internal_common", "tasks_from": "record.yml"}
    assert "k8s_gpu_node_restart_pending | length == 0" in record["when"]
    assert "internal_common_inputs" not in record["vars"]
    # Nothing of the common role is copied: no gpuhost_converged or include_vars task of the role's own.
    text = "".join(path.read_text(encoding="utf-8") for path in (ROLE / "tasks").glob("*.yml"))
    assert "gpuhost.nvidia.gpuhost_converged" not in text and "include_vars" not in text


MARKERS = ["/var/lib/rancher/k3s/agent/etc/containerd/config.toml", "/var/lib/rancher/rke2/agent/etc/containerd/config.toml",
           "/etc/kubernetes/kubelet.env"]
LIB = "/usr/local/lib/gpuhost/k8s_gpu_node"
FEATURES = ["/etc/kubernetes/node-feature-discovery/features.d/gpuhost-k8s-gpu-node",
            "/etc/systemd/system/gpuhost-k8s-node-labels.service", LIB + "/k8s-node-labels"]


def _plan(distribution: str, runtime: bool, registration: bool) -> dict[str, t.Any]:
    return {"distribution": distribution, "kubespray": False, "runtime": {"configure": runtime}, "registration": {"configure": registration}}


def _files(facts: dict[str, str], plan: dict[str, t.Any], **given: t.Any) -> list[str]:
    variables = _variables(facts, __k8s_gpu_node_plan=plan,
                           __k8s_gpu_node_runtime_result={"files": ["/etc/containerd/config.toml", "/etc/containerd/conf.d/99-nvidia.toml"]},
                           __k8s_gpu_node_runtime_result_crio={"files": ["/etc/crio/crio.conf.d/99-nvidia.conf"]}, **given)
    return _template(variables, "{{ __k8s_gpu_node_converged_files }}")


def test_a_kubeadm_worker_records_the_runtime_the_kubelet_and_the_labels() -> None:
    files = _files(HOSTS["debian12"], _plan("kubeadm", True, True))
    lib = [p for p in files if p.startswith(LIB + "/ansible_collections/")]
    assert files == (["/etc/containerd/config.toml", "/etc/containerd/conf.d/99-nvidia.toml", "/var/lib/gpuhost/k8s_gpu_node_runtime.json",
                      "/etc/default/kubelet", "/var/lib/gpuhost/kubelet_registration.json"] + FEATURES + lib + MARKERS)
    assert len(lib) == len(_yaml(ROLE / "vars" / "main.yml")["__k8s_gpu_node_lib_files"])


def test_a_crio_worker_on_el_with_a_kubelet_config_dir() -> None:
    files = _files(HOSTS["rocky9"], _plan("kubeadm", True, True), k8s_gpu_node_runtime="crio", k8s_gpu_node_features=False,
                   k8s_gpu_node_kubelet_config_dir="/etc/kubernetes/kubelet.conf.d")
    assert files == ["/etc/crio/crio.conf.d/99-nvidia.conf", "/var/lib/gpuhost/k8s_gpu_node_runtime.json", "/etc/sysconfig/kubelet",
                     "/var/lib/gpuhost/kubelet_registration.json", "/etc/kubernetes/kubelet.conf.d/90-gpuhost-nvidia.conf"] + MARKERS


def test_a_k3s_agent_records_its_template_and_rendered_config_once() -> None:
    files = _files(HOSTS["debian12"], _plan("k3s", False, False), k8s_gpu_node_features=False)
    rancher = "/var/lib/rancher/k3s/agent/etc/containerd/"
    assert files == [rancher + "config.toml.tmpl", rancher + "config-v3.toml.tmpl", rancher + "config.toml"] + MARKERS[1:]
