# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""host_facts (issue 21): the observation's call returns the host facts setup's platform, distribution and pkg_mgr
subsets give (module_utils/_hostfacts.py, Ansible's own collectors), so site.yml's facts play needs no setup call; the
observation then asks the host's own package manager for the recorded packages, which the action plugin cannot pass
before any fact is gathered."""

from __future__ import annotations

import pytest

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _converged_host, _hostfacts
from ansible_collections.gpuhost.nvidia.plugins.modules import gpuhost_converged, nvidia_gpu_facts


@pytest.fixture
def managers(monkeypatch):
    """The package manager each observation asked with."""
    asked = []
    real = _converged_host.observe_all

    def observe_all(module, path, manager):
        asked.append(manager)
        return real(module, path, manager)

    monkeypatch.setattr(_converged_host, "observe_all", observe_all)
    return asked


class HostModule:
    """What the collectors use of AnsibleModule, as the run_module fixture leaves it: no binary is found."""

    def get_bin_path(self, *args, **kwargs):
        return None

    def run_command(self, *args, **kwargs):
        raise AssertionError("no command: get_bin_path finds none")


def host_part(facts):
    return {key: value for key, value in facts.items() if key != "nvidia_gpu"}


@pytest.mark.parametrize("check_mode", [False, True], ids=["run", "check"])
def test_the_observation_returns_the_collectors_host_facts_beside_the_gpu_facts(run_module, no_pynvml, tmp_path, check_mode):
    observed = run_module(gpuhost_converged, {"state": "observe", "path": str(tmp_path / "c"), "gpu_facts": True, "host_facts": True},
                          check_mode=check_mode)
    plain = run_module(nvidia_gpu_facts, {}, check_mode=check_mode)
    for result in (observed, plain):
        assert not result.get("failed") and result["changed"] is False, result
    host = host_part(observed["ansible_facts"])
    assert host == _hostfacts.collect(HostModule())
    assert host["gather_subset"] == list(_hostfacts.SUBSET) and host["module_setup"] is True
    for key in ("ansible_distribution", "ansible_distribution_version", "ansible_os_family", "ansible_kernel", "ansible_architecture",
                "ansible_pkg_mgr"):
        assert host[key], key
    assert observed["ansible_facts"]["nvidia_gpu"] == plain["ansible_facts"]["nvidia_gpu"]


def test_without_host_facts_only_the_gpu_facts(run_module, no_pynvml, tmp_path):
    observed = run_module(gpuhost_converged, {"state": "observe", "path": str(tmp_path / "c"), "gpu_facts": True})
    assert set(observed["ansible_facts"]) == {"nvidia_gpu"}
    bare = run_module(gpuhost_converged, {"state": "observe", "path": str(tmp_path / "c")})
    assert "ansible_facts" not in bare
    host_only = run_module(gpuhost_converged, {"state": "observe", "path": str(tmp_path / "c"), "host_facts": True})
    assert "nvidia_gpu" not in host_only["ansible_facts"] and host_only["ansible_facts"]["ansible_distribution"]


def test_the_observation_asks_the_host_s_own_package_manager(run_module, no_pynvml, tmp_path, managers):
    """Before any fact is gathered the action plugin passes no package manager (the module's default is apt): with
    host_facts the collected one is used, here this machine's."""
    assert _hostfacts.collect(HostModule())["ansible_pkg_mgr"] == "apt"  # the machine the unit tier runs on (Debian)
    run_module(gpuhost_converged, {"state": "observe", "path": str(tmp_path / "c"), "host_facts": True, "package_manager": "pacman"})
    run_module(gpuhost_converged, {"state": "observe", "path": str(tmp_path / "c"), "package_manager": "pacman"})
    assert managers == ["apt", "pacman"]
