# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The host facts the collection's roles read, gathered by Ansible's own fact collectors inside another module's call.

Private to this collection: no compatibility promise outside gpuhost.nvidia.

The roles, playbooks and templates read only the platform (architecture, kernel), the distribution (name, version,
major version, family) and the package manager; tests/unit/playbooks/test_facts_subset.py keeps that list. A
``setup`` call costs a remote call of its own plus building its module payload, which imports every fact collector
(about 0.6 s and 0.35 s of the controller's CPU on a run). So site.yml's facts play asks the call it makes
anyway for them: that module calls this, which runs the same collector classes ``setup`` runs for those subsets, with
setup's ``ansible_`` prefix, so the controller files them under ``ansible_facts`` (and, with
INJECT_FACTS_AS_VARS, as ``ansible_distribution`` and so on) exactly as ``setup`` would. Nothing here detects a
distribution itself.
"""

from __future__ import annotations

import typing as t

from ansible.module_utils.facts import ansible_collector
from ansible.module_utils.facts.namespace import PrefixFactNamespace
from ansible.module_utils.facts.system.distribution import DistributionFactCollector
from ansible.module_utils.facts.system.pkg_mgr import OpenBSDPkgMgrFactCollector, PkgMgrFactCollector
from ansible.module_utils.facts.system.platform import PlatformFactCollector

# The gather_subset names, as setup knows them.
SUBSET = ("platform", "distribution", "pkg_mgr")
# Ansible picks the class of each name that matches the host's platform, as setup does (pkg_mgr has an OpenBSD one).
COLLECTORS = (PlatformFactCollector, DistributionFactCollector, PkgMgrFactCollector, OpenBSDPkgMgrFactCollector)


def collect(module: t.Any, timeout: int = 10) -> dict[str, t.Any]:
    """The facts of SUBSET, keyed as setup returns them (``ansible_distribution``, ...), with setup's
    ``gather_subset`` (these names) and ``module_setup``."""
    collector = ansible_collector.get_ansible_collector(
        all_collector_classes=list(COLLECTORS), namespace=PrefixFactNamespace(namespace_name="ansible", prefix="ansible_"),
        gather_subset=list(SUBSET), gather_timeout=timeout, minimal_gather_subset=frozenset())
    return collector.collect(module=module)
