# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The nvidia_container_toolkit role hands its repository values and runtime name to the request check (#16, #17)."""

from __future__ import annotations

from pathlib import Path

import yaml

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _toolkit

ROLE = Path(__file__).resolve().parents[3] / "roles" / "nvidia_container_toolkit"


def test_every_checked_value_comes_from_its_role_variable():
    request = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())["__nvidia_container_toolkit_request"]
    for key in _toolkit.REQUEST_RULES:
        assert request[key] == "{{ nvidia_container_toolkit_%s }}" % key


def test_the_role_defaults_pass_the_check():
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    request = {key: defaults["nvidia_container_toolkit_" + key] for key in _toolkit.REQUEST_RULES}
    assert _toolkit.request_errors(request) == []


def test_a_newline_in_the_role_repository_url_is_refused():
    request = {"repo_url": "file:///srv/repo\nTrusted: yes", "runtime_name": "nvidia"}
    assert _toolkit.request_errors(request) == [
        "nvidia_container_toolkit_repo_url: 'file:///srv/repo\\nTrusted: yes' holds the control character '\\n' (U+000A)"
    ]


def test_the_test_and_demo_mirror_urls_pass():
    """apt's file:/path form (molecule/site, molecule/nvidia_container_toolkit, tests/demo) is a URL the check takes."""
    for url in ("file:/srv/gpuhost-repos/apt/", "file:///srv/gpuhost-repos/rpm/libnvidia-container"):
        assert _toolkit.request_errors({"repo_url": url}) == []
    assert _toolkit.request_errors({"repo_url": "file:srv/repo"}) != []
