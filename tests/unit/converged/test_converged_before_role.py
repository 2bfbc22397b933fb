# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The converged probe before the role (playbooks/site.yml's pre-task of each role's play): the role's inputs digest
computed where Ansible has not loaded the role's defaults and vars is the digest the role's own probe computes, for the
same user values; it answers from this run's observation on the controller only, never by the host; and it changes what
the observation holds only where it answers converged (the role is then not entered)."""

from __future__ import annotations

import pathlib

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader

from test_converged_observe import Controller, write_record
from trusted_vars import trusted

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _converged

ROLES = pathlib.Path(__file__).resolve().parents[3] / "roles"
RECORDED = ["nvidia_driver", "nvidia_container_toolkit", "gpu_settings", "vfio_passthrough", "gpu_compose", "gpu_exporter", "k8s_gpu_node"]
FACTS = {"pkg_mgr": "apt", "os_family": "Debian", "distribution": "Debian", "distribution_major_version": "12",
         "distribution_version": "12.7", "distribution_release": "bookworm", "kernel": "6.1.0-28-amd64", "architecture": "x86_64",
         "nvidia_gpu": {"present": True, "state": "ok", "driver": {"version": "580.126.20", "branch": "580", "kernel_module_loaded": True},
                        "gpus": [{"index": 0, "uuid": "GPU-1", "name": "NVIDIA H100 80GB HBM3", "pci_bus_id": "0000:18:00.0",
                                  "persistence_mode": "Enabled", "compute_mode": "Default"}]}}
# User values of each kind, as an inventory sets them: a scalar, a list, a template over the facts and another variable.
USER = {
    "nvidia_driver": {"nvidia_driver_branch": "570", "nvidia_driver_packages_extra": ["nvidia-fabricmanager-570"]},
    "nvidia_container_toolkit": {"nvidia_container_toolkit_runtimes": ["docker", "containerd"]},
    "gpu_settings": {"gpu_settings_spec": {"persistence_mode": True}, "nvidia_driver_userland": "580"},
    "vfio_passthrough": {"vfio_passthrough_pci_addresses": ["0000:18:00.0"]},
    "gpu_compose": {"gpu_compose_strategy": "cdi", "gpu_compose_projects": [{"path": "/srv/{{ ansible_facts.distribution | lower }}"}]},
    "gpu_exporter": {"gpu_exporter_kind": "nvidia_gpu_exporter", "gpu_exporter_port": 9835},
    "k8s_gpu_node": {"k8s_gpu_node_runtime": "crio", "k8s_gpu_node_taint": False},
}
# Every case: the unit tier has no plugin loader for the collection's filters, and k8s_gpu_node's extra inputs call one
# (the node labels) unless its feature labels are off. Its Molecule scenario runs the fast path through Ansible itself.
BASE = {"inventory_hostname": "gpu1", "k8s_gpu_node_features": False}


def _yaml(path: pathlib.Path) -> dict:
    return yaml.safe_load(path.read_text(encoding="utf-8")) if path.is_file() else {}


def _role_file(path: pathlib.Path) -> dict:
    """A role's defaults or vars file as Ansible loads it: its templates trusted."""
    return dict(DataLoader().load_from_file(str(path), cache="none", trusted_as_template=True) or {}) if path.is_file() else {}


def _spec(role: str) -> set[str]:
    return set(_yaml(ROLES / role / "meta" / "argument_specs.yml")["argument_specs"]["main"]["options"])


def _in_role_vars(role: str, user: dict) -> dict:
    """A task's variables inside the role, by Ansible's precedence: the role's defaults under the inventory's values, the
    role's vars/main.yml and its per-OS files (include_vars) over them, and the internal common role's magic variables
    (its probe.yml runs the action for the role that included it)."""
    variables = _role_file(ROLES / role / "defaults" / "main.yml")
    variables.update(trusted(dict(BASE, **user)))
    variables.update(_role_file(ROLES / role / "vars" / "main.yml"))
    for name in ("Debian.yml", "Debian_12.yml"):
        variables.update(_role_file(ROLES / role / "vars" / name))
    variables.update(role_name="gpuhost.nvidia.internal_common", role_path=str(ROLES / "internal_common"),
                     ansible_parent_role_names=["gpuhost.nvidia." + role], ansible_parent_role_paths=[str(ROLES / role)])
    return variables


def _controller(module, variables: dict) -> Controller:
    controller = Controller(module, tagged=True)
    controller.vars.update(trusted(BASE))
    controller.vars.update(trusted(variables) if "role_path" not in variables else variables)
    controller.vars["ansible_facts"] = dict(FACTS, **controller.vars.get("ansible_facts", {}))
    return controller


def _before(controller: Controller, role: str, **kwargs) -> dict:
    return controller.run({"state": "probe", "role": role, **kwargs}, check_mode=kwargs.pop("check_mode", False))


@pytest.mark.parametrize("role", RECORDED)
def test_no_role_file_sets_a_variable_of_its_argument_specification(role) -> None:
    """What makes the digest the same before the role and in it: a user's value of a specified variable is never
    replaced by the role's vars/main.yml or a per-OS file (they would win over the inventory in the role only)."""
    spec = _spec(role)
    for path in sorted((ROLES / role / "vars").glob("*.yml")):
        assert not spec & set(_yaml(path)), (path, spec & set(_yaml(path)))


@pytest.mark.parametrize("user", [False, True], ids=["defaults", "user-values"])
@pytest.mark.parametrize("role", RECORDED)
def test_the_digest_before_the_role_is_the_roles_own(module, role, user) -> None:
    values = USER[role] if user else {}
    inside = _controller(module, _in_role_vars(role, values))
    inside.run({"state": "probe"})
    own = inside.remote[-1]["inputs_digest"]
    before = _controller(module, values)
    answer = _before(before, role, path="/nowhere")
    assert answer["inputs_digest"] == own and not answer["converged"]
    assert before.remote == []  # never the host


@pytest.mark.parametrize("role", RECORDED)
def test_a_changed_value_changes_the_digest_before_the_role(module, role) -> None:
    base = _before(_controller(module, {}), role)["inputs_digest"]
    assert base and _before(_controller(module, USER[role]), role)["inputs_digest"] != base
    moved = _controller(module, {})
    moved.vars["ansible_facts"]["kernel"] = "6.1.0-29-amd64"
    assert _before(moved, role)["inputs_digest"] != base


def _observed(module, host, role: str, drift: bool = False) -> tuple[Controller, pathlib.Path]:
    """A converged record of ``role`` with the digest the probe before it computes, then this run's observation."""
    controller = _controller(module, {})
    digest = _before(controller, role)["inputs_digest"]
    conf = host["records"].parent / "etc.conf"
    conf.write_text("as recorded\n")
    host["records"].mkdir(exist_ok=True)
    write_record(module, host["records"] / (role + ".json"), [conf], digest=digest, outputs={role + "_report": ["done"]})
    if drift:
        conf.write_text("edited\n")
    controller.observe(path=host["records"])
    controller.remote.clear()
    return controller, host["records"]


def test_a_converged_role_is_answered_on_the_controller_and_its_record_used(module, host) -> None:
    controller, records = _observed(module, host, "gpu_compose")
    peek = controller.run({"state": "probe", "roles": ["gpu_compose", "gpu_settings"], "path": str(records)})
    assert peek["converged_roles"] == ["gpu_compose"] and "ansible_facts" not in peek
    answer = _before(controller, "gpu_compose", path=str(records))
    assert answer["converged"] and answer["outputs"] == {"gpu_compose_report": ["done"]} and answer["role"] == "gpu_compose"
    assert controller.remote == []
    # Used, as the role's own probe would use it: a later probe of the same record asks the host.
    assert answer["ansible_facts"][_converged.OBSERVATION_FACT]["used"] == [str(records / "gpu_compose.json")]
    assert answer["ansible_facts"][_converged.OBSERVATION_FACT]["trusted"] is True


def test_drift_is_not_converged_and_leaves_the_observation_to_the_roles_own_probe(module, host) -> None:
    controller, records = _observed(module, host, "gpu_compose", drift=True)
    answer = _before(controller, "gpu_compose", path=str(records))
    assert not answer["converged"] and "ansible_facts" not in answer and controller.remote == []
    assert any("etc.conf" in line for line in answer["drift"])


def test_check_mode_and_a_full_run_never_answer_converged(module, host) -> None:
    controller, records = _observed(module, host, "gpu_compose")
    checked = controller.run({"state": "probe", "role": "gpu_compose", "path": str(records)}, check_mode=True)
    assert not checked["converged"] and checked["inputs_digest"] is None
    controller.vars[_converged.FULL_RUN_VAR] = True
    assert not _before(controller, "gpu_compose", path=str(records))["converged"]
    assert controller.remote == []


def test_without_an_observation_the_role_probes_for_itself(module) -> None:
    controller = _controller(module, {})
    answer = _before(controller, "gpu_settings")
    assert not answer["converged"] and answer["drift"] == ["the observation cannot answer: the role asks the host itself"]
    assert controller.remote == []


def test_inputs_that_cannot_be_resolved_before_the_role_are_not_converged(module) -> None:
    controller = _controller(module, {"gpu_compose_strategy": "{{ undefined_anywhere }}"})
    answer = _before(controller, "gpu_compose")
    assert not answer["converged"] and answer["inputs_digest"] is None
    assert "cannot be resolved before the role" in answer["drift"][0]


@pytest.mark.parametrize("name", ["internal_repository", "../roles/gpu_compose", "no_such_role", "Gpu_compose"])
def test_only_a_role_of_the_collection_with_an_argument_specification(module, name) -> None:
    controller = _controller(module, {})
    with pytest.raises(Exception, match="is not a role of gpuhost.nvidia with a converged record"):
        _before(controller, name)
