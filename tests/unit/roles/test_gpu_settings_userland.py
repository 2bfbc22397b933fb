# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""gpu_settings' "Decide the driver userland to install", evaluated with Ansible's own templar.

The branch of the userland follows the driver: what nvidia_driver chose, else the loaded driver, else the installed
driver packages. Installed packages whose versions are not driver versions (python3-pynvml 11.525.112-1) must not
break the decision: the second converge of molecule/gpu_settings failed on exactly that.
"""

from __future__ import annotations

import pathlib
import typing as t

import pytest
import yaml

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

ROLE = pathlib.Path(__file__).resolve().parents[3] / "roles" / "gpu_settings"
TASK = "Decide the driver userland to install"


def decide(distro: str, os_family: str, **variables: t.Any) -> dict[str, t.Any]:
    task = next(task for task in yaml.safe_load((ROLE / "tasks" / "userland.yml").read_text(encoding="utf-8"))
                if task.get("name") == TASK)
    role_vars = yaml.safe_load((ROLE / "vars" / ("%s.yml" % distro)).read_text(encoding="utf-8"))
    context: dict[str, t.Any] = {"gpu_settings_packages": [], "ansible_facts": {"os_family": os_family}}
    context.update(role_vars)
    context.update({name: trust_as_template(value) if isinstance(value, str) else value for name, value in task["vars"].items()})
    for name, value in variables.items():
        if name == "facts":
            context["ansible_facts"].update(value)
        else:
            context[name] = value
    templar = Templar(loader=DataLoader(), variables=context)
    return {name: templar.template(trust_as_template(value)) for name, value in task["ansible.builtin.set_fact"].items()}


def installed(**versions: str) -> dict[str, t.Any]:
    return {"packages": {name.replace("_", "-"): [{"version": version}] for name, version in versions.items()}}


def test_debian_installed_driver_branch_with_other_versions_installed() -> None:
    facts = installed(python3_pynvml="11.525.112-1", nvidia_smi="535.261.03-1", libcuda1="535.261.03-1")
    result = decide("Debian", "Debian", facts=facts)
    assert result["__gpu_settings_install"] == ["nvidia-persistenced=535.*", "nvidia-smi=535.*", "python3-pynvml"]


def test_debian_only_a_non_driver_version_installed_leaves_the_branch_open() -> None:
    result = decide("Debian", "Debian", facts=installed(python3_pynvml="11.525.112-1"))
    assert result["__gpu_settings_install"] == ["nvidia-persistenced", "nvidia-smi", "python3-pynvml"]


def test_the_driver_role_s_choice_wins() -> None:
    userland = {"branch": "580", "version_glob": "580.*", "packages": ["nvidia-persistenced", "nvidia-smi"]}
    result = decide("Debian", "Debian", nvidia_driver_userland=userland, facts=installed(nvidia_smi="535.261.03-1"))
    assert result["__gpu_settings_install"] == ["nvidia-persistenced=580.*", "nvidia-smi=580.*", "python3-pynvml"]


def test_loaded_driver_branch_from_the_facts() -> None:
    facts = {"nvidia_gpu": {"driver": {"branch": "550"}}, **installed(nvidia_smi="535.261.03-1")}
    assert decide("Debian", "Debian", facts=facts)["__gpu_settings_install"][:2] == ["nvidia-persistenced=550.*", "nvidia-smi=550.*"]


@pytest.mark.parametrize(("package", "version", "expected"), [
    ("nvidia-utils-580-server", "580.95.05-0ubuntu1", ["nvidia-compute-utils-580-server=580.*", "nvidia-utils-580-server=580.*"]),
    ("nvidia-utils-570", "570.172.08-0ubuntu1", ["nvidia-compute-utils-570=570.*", "nvidia-utils-570=570.*"]),
    ("nvidia-utils", "595.71.05-0ubuntu1", ["nvidia-compute-utils=595.*", "nvidia-utils=595.*"]),
])
def test_ubuntu_family_and_branch_from_the_installed_utils(package: str, version: str, expected: list[str]) -> None:
    facts = {"packages": {package: [{"version": version}], "python3-pynvml": [{"version": "11.525.112-1"}]}}
    result = decide("Ubuntu", "Debian", facts=facts)
    assert result["__gpu_settings_install"] == expected and result["__gpu_settings_unresolved"] == []


def test_ubuntu_without_a_driver_cannot_tell() -> None:
    result = decide("Ubuntu", "Debian", facts={"packages": {}})
    assert result["__gpu_settings_unresolved"] == ["nvidia-compute-utils{family}", "nvidia-utils{family}"]
