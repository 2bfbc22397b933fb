# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""One rule for "a container can be given this GPU": the compose planner and the select_gpus filter agree.

Before the rule moved into _gpu_schema, select_gpus went by the GPU's state alone and the compose planner by its index
and bound driver alone. The cases marked below are the ones where the two used to disagree.
"""

from __future__ import annotations

import typing as t

import pytest

from ansible_collections.gpuhost.nvidia.plugins.filter import gpu as gpu_filters
from ansible_collections.gpuhost.nvidia.plugins.module_utils import _compose, _gpu_schema

UUID = "GPU-3f1c2a51-0a6e-4b6b-9a55-2d4ac6f0e001"


def _record(**changes: t.Any) -> dict[str, t.Any]:
    record = _gpu_schema.empty_gpu_record(0)
    record.update(uuid=UUID, name="NVIDIA H100 80GB HBM3", pci_bus_id="0000:17:00.0", memory_total_mib=81559,
                  bound_driver="nvidia", state="ok")
    record.update(changes)
    return record


def _without_state() -> dict[str, t.Any]:
    record = _record()
    del record["state"]
    return record


# (case, record, usable, why): "why" is what the refusal names.
CASES = [
    ("bound to nvidia, state ok", _record(), True, None),
    ("hand-written facts without a state", _without_state(), True, None),
    # select_gpus used to return these three: their state said ok.
    ("bound to vfio-pci", _record(bound_driver="vfio-pci"), False, "is bound to vfio-pci"),
    ("bound to nouveau", _record(bound_driver="nouveau"), False, "is bound to nouveau"),
    ("no index (the driver does not list it)", _record(index=None), False, "has no index"),
    # The compose planner used to place these two: they had an index and were bound to nvidia.
    ("lost", _record(state="gpu_lost", message="fell off the bus"), False, "is in state gpu_lost (fell off the bus)"),
    ("unreadable", _record(state="no_permission"), False, "is in state no_permission"),
]


@pytest.mark.parametrize("case, record, usable, why", CASES, ids=[c[0] for c in CASES])
def test_compose_and_select_gpus_agree(case: str, record: dict[str, t.Any], usable: bool, why: str | None) -> None:
    facts = {"gpus": [record]}
    reason = _gpu_schema.container_unusable(record)
    assert (reason is None) == usable, case
    if why is not None:
        assert why in reason

    assert gpu_filters.select_gpus(facts) == ([UUID] if usable else [])

    request = {"services": [{"name": "app", "device_ids": [UUID if record.get("index") is None else 0]}]}
    if usable:
        plan = _compose.build(request, facts)
        assert plan.assignment == {"app": ["0"]} or plan.assignment == {"app": [UUID]}
    elif record.get("index") is None:
        with pytest.raises(_compose.ComposeError, match="has no index"):
            _compose.build(request, facts)
    else:
        with pytest.raises(_compose.ComposeError, match=why.replace("(", r"\(").replace(")", r"\)")):
            _compose.build(request, facts)


def test_mig_on_is_usable_through_its_mig_devices_only() -> None:
    mig = {"uuid": "MIG-a1000000-0000-4000-8000-0000000000a1", "gi": 1, "ci": 0, "profile": "3g.40gb", "memory_mib": 40192}
    record = _record(mig={"current": True, "pending": True}, mig_devices=[mig])
    facts = {"gpus": [record]}
    assert _gpu_schema.container_unusable(record) is None
    assert _gpu_schema.mig_on(record)
    assert gpu_filters.select_gpus(facts) == []
    assert gpu_filters.select_gpus(facts, allow_mig=True) == [mig["uuid"]]
    with pytest.raises(_compose.ComposeError, match="has MIG enabled"):
        _compose.build({"services": [{"name": "app", "device_ids": [0]}]}, facts)
    plan = _compose.build({"services": [{"name": "app", "device_ids": [mig["uuid"]]}]}, facts)
    assert list(plan.assignment) == ["app"]


def test_gpus_accessor_reads_wrapped_plain_and_broken_facts() -> None:
    record = _record()
    assert _gpu_schema.gpus({"gpus": [record, "junk"]}) == [record]
    assert _gpu_schema.gpus({"nvidia_gpu": {"gpus": [record]}}) == [record]
    assert _gpu_schema.gpus(None) == []
    assert _gpu_schema.gpus({"gpus": "junk"}) == []
    assert _gpu_schema.mig_on({"mig": True}) and not _gpu_schema.mig_on({"mig": None})
