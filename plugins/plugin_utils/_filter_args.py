# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Argument checks shared by the collection's filters. Private to this collection: not a public API."""

from __future__ import annotations

import json
import typing as t
from collections.abc import Mapping

from ansible.errors import AnsibleFilterError


def mapping(value: t.Any, name: str) -> Mapping[str, t.Any]:
    """``value`` as a mapping (None: empty); anything else fails naming the filter argument."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise AnsibleFilterError("%s: expected a dict, got %s" % (name, type(value).__name__))
    return value


def gpu_facts(value: t.Any, name: str) -> Mapping[str, t.Any]:
    """The ``nvidia_gpu`` facts, given either themselves or ``ansible_facts`` holding them."""
    facts = mapping(value, name)
    if "nvidia_gpu" in facts and isinstance(facts["nvidia_gpu"], Mapping):
        return facts["nvidia_gpu"]
    return facts


def plain(value: t.Any) -> t.Any:
    """``value`` as plain JSON types (anything else as its string), without Ansible's lazy template containers and
    tags. Code that copies its input (Ansible's ArgumentSpecValidator deep-copies the parameters) would otherwise copy
    the lazy containers, which took 0.3 s for a three-key spec in a site.yml run (#21)."""
    return json.loads(json.dumps(value, default=str))
