# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Where the nvidia_container_toolkit role writes the node labels: NFD's features.d when enabled, a file the user
names (as before the option existed), or nowhere; and the labels it computes in its report task."""

from __future__ import annotations

import os

import yaml

ROLE = os.path.join(os.path.dirname(__file__), "..", "..", "..", "roles", "nvidia_container_toolkit")
NFD_FILE = "/etc/kubernetes/node-feature-discovery/features.d/gpuhost-nvidia"

CASES = {
    "off": ({"nvidia_container_toolkit_node_labels_enabled": False, "nvidia_container_toolkit_node_labels_file": ""}, ""),
    "enabled": ({"nvidia_container_toolkit_node_labels_enabled": True, "nvidia_container_toolkit_node_labels_file": ""}, NFD_FILE),
    "named": ({"nvidia_container_toolkit_node_labels_enabled": False, "nvidia_container_toolkit_node_labels_file": "/etc/x"}, "/etc/x"),
    "both": ({"nvidia_container_toolkit_node_labels_enabled": True, "nvidia_container_toolkit_node_labels_file": "/etc/x"}, "/etc/x"),
}


def test_defaults_keep_the_file_off():
    with open(os.path.join(ROLE, "defaults", "main.yml"), encoding="utf-8") as handle:
        defaults = yaml.safe_load(handle)
    assert (defaults["nvidia_container_toolkit_node_labels_enabled"], defaults["nvidia_container_toolkit_node_labels_file"],
            defaults["nvidia_container_toolkit_node_labels_gfd_deployed"]) == (False, "", False)


def test_labels_path(local_play):
    result = local_play([{
        "hosts": "all", "gather_facts": False,
        "tasks": [
            {"name": "Load the role's variables", "ansible.builtin.include_vars": os.path.abspath(os.path.join(ROLE, "vars", "main.yml"))},
            {"name": "Path", "ansible.builtin.debug": {"msg": "{{ __nvidia_container_toolkit_node_labels_path }}"}},
        ],
    }], hosts={name: case[0] for name, case in CASES.items()})
    assert {name: result[name]["Path"]["msg"] for name in CASES} == {name: case[1] for name, case in CASES.items()}
