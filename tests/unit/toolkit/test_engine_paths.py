# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The engines' default configuration paths come from one table (_runtime.DEFAULT_PATHS and its neighbours).

The modules read the table. The roles' public defaults spell the paths out, because ansible-doc and the argument
specs show them to users; this test holds every one of them, in defaults/main.yml and in meta/argument_specs.yml, to
the table.
"""

from __future__ import annotations

import os

import pytest
import yaml

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _doctor, _runtime

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
EXPECTED = {
    ("nvidia_container_toolkit", "nvidia_container_toolkit_docker_daemon_json"): _runtime.DEFAULT_PATHS["docker"],
    ("nvidia_container_toolkit", "nvidia_container_toolkit_containerd_config"): _runtime.DEFAULT_PATHS["containerd"],
    ("nvidia_container_toolkit", "nvidia_container_toolkit_containerd_dropin"): _runtime.DEFAULT_CONTAINERD_DROPIN,
    ("nvidia_container_toolkit", "nvidia_container_toolkit_crio_config"): _runtime.DEFAULT_CRIO_CONFIG,
    ("k8s_gpu_node", "k8s_gpu_node_containerd_config"): _runtime.DEFAULT_PATHS["containerd"],
    ("k8s_gpu_node", "k8s_gpu_node_containerd_dropin"): _runtime.DEFAULT_CONTAINERD_DROPIN,
    ("k8s_gpu_node", "k8s_gpu_node_crio_config"): _runtime.DEFAULT_CRIO_CONFIG,
    ("gpu_doctor", "gpu_doctor_docker_daemon_json"): _runtime.DEFAULT_PATHS["docker"],
    ("gpu_doctor", "gpu_doctor_containerd_config"): _runtime.DEFAULT_PATHS["containerd"],
    ("gpu_doctor", "gpu_doctor_containerd_conf_dir"): _runtime.CONTAINERD_CONF_DIR,
}


def _load(*parts: str) -> dict:
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as handle:
        return yaml.safe_load(handle)


@pytest.mark.parametrize("role, variable", sorted(EXPECTED))
def test_role_default_is_the_table(role: str, variable: str) -> None:
    assert _load("roles", role, "defaults", "main.yml")[variable] == EXPECTED[role, variable]
    options = _load("roles", role, "meta", "argument_specs.yml")["argument_specs"]["main"]["options"]
    assert options[variable]["default"] == EXPECTED[role, variable]


def test_the_table_is_consistent() -> None:
    assert _runtime.DEFAULT_CONTAINERD_DROPIN.startswith(_runtime.CONTAINERD_CONF_DIR + "/")
    assert _runtime.CONTAINERD_DEFAULT_IMPORT == _runtime.CONTAINERD_CONF_DIR + "/*.toml"
    assert os.path.join(_runtime.CRIO_CONFIG_DIR, _runtime.CRIO_DROPIN_NAME) == _runtime.DEFAULT_PATHS["crio"]
    assert _doctor.DEFAULTS["docker_daemon_json"] == _runtime.DEFAULT_PATHS["docker"]
    assert _doctor.DEFAULTS["containerd_conf_dir"] == _runtime.CONTAINERD_CONF_DIR


def test_no_module_or_module_util_spells_a_default_engine_path() -> None:
    """Only _runtime's table names them; module docs (DOCUMENTATION, EXAMPLES) may quote them."""
    literals = ('"/etc/docker/daemon.json"', '"/etc/containerd/config.toml"', '"/etc/crio/crio.conf"',
                '"/etc/containerd/conf.d', '"/etc/crio/crio.conf.d')
    found = []
    for folder in ("modules", "module_utils"):
        for name in sorted(os.listdir(os.path.join(ROOT, "plugins", folder))):
            if not name.endswith(".py") or name == "_runtime.py":
                continue
            with open(os.path.join(ROOT, "plugins", folder, name), encoding="utf-8") as handle:
                found += ["%s/%s: %s" % (folder, name, literal) for literal in literals if literal in handle.read()]
    assert found == []
