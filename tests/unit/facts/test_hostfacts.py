# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""_hostfacts gives, on this machine, exactly what setup gives for the same subsets, and every fact the roles read."""

from __future__ import annotations

import pathlib
import sys

from ansible.module_utils import basic
from ansible.module_utils.facts import ansible_collector, default_collectors
from ansible.module_utils.facts.namespace import PrefixFactNamespace
from ansible.module_utils.testing import patch_module_args
from ansible_collections.gpuhost.nvidia.plugins.module_utils import _hostfacts

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "playbooks"))
import test_facts_subset  # noqa: E402  pylint: disable=wrong-import-position


def module():
    with patch_module_args({}):
        return basic.AnsibleModule(argument_spec={}, supports_check_mode=True)


def setup_facts(subset):
    """What ansible.builtin.setup's own code collects for ``subset`` (its collector list and namespace)."""
    collector = ansible_collector.get_ansible_collector(
        all_collector_classes=default_collectors.collectors, namespace=PrefixFactNamespace(namespace_name="ansible", prefix="ansible_"),
        gather_subset=subset, minimal_gather_subset=frozenset())
    return collector.collect(module=module())


def test_the_same_facts_as_setup_for_the_same_subsets():
    ours = _hostfacts.collect(module())
    theirs = setup_facts(["!all", "!min"] + list(_hostfacts.SUBSET))
    volatile = {"gather_subset"}  # what each call was asked for
    assert {k: v for k, v in ours.items() if k not in volatile} == {k: v for k, v in theirs.items() if k not in volatile}
    assert ours["gather_subset"] == list(_hostfacts.SUBSET) and ours["module_setup"] is True
    assert ours["ansible_distribution"] and ours["ansible_os_family"] and ours["ansible_pkg_mgr"] and ours["ansible_architecture"]


def test_every_fact_the_roles_read_is_there():
    """Every ansible_facts.X the roles, playbooks and templates read, less what vfio_passthrough gathers itself."""
    ours = {key[len("ansible_"):] if key.startswith("ansible_") else key for key in _hostfacts.collect(module())}
    wanted = test_facts_subset.facts_read() - test_facts_subset.GATHERED_BY_THE_ROLE
    assert wanted and wanted <= ours, sorted(wanted - ours)
    assert wanted <= test_facts_subset.exact_subset_facts(_hostfacts.SUBSET)
