# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Replay GPU tier captures from real machines (tests/unit/fixtures/captured/<gpu>_<driver>/) offline.

Each capture is what tests/gpu/run.sh kept on a GPU machine, imported with ``gpu_tier.py import-capture`` (see
tests/gpu/README.md and tests/unit/fixtures/captured/README.md). The replay puts its ``nvidia-smi -q -x`` through the
collection's nvidia-smi parser and its settings planner, as the unit tests do with the hand-written XML:

* the parser's GPU records agree with the CSV and the NVML values captured on the same machine, and with what the
  facts module's nvidia-smi backend reported there;
* the planner, on views built from the XML, plans what nvidia_smi_settings planned there (through NVML) for the
  tier's change request, and refuses the three requests that must fail;
* the tier's own comparisons, run again from the files, give the statuses recorded at capture time.
"""

from __future__ import annotations

import glob
import os
import sys
import typing as t

import pytest

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _settings, _settings_apply, _smi
from ansible_collections.gpuhost.nvidia.plugins.modules import nvidia_smi_settings

HERE = os.path.dirname(os.path.abspath(__file__))
TIER = os.path.normpath(os.path.join(HERE, "..", "..", "gpu"))
CAPTURED = os.path.normpath(os.path.join(HERE, "..", "fixtures", "captured"))
if TIER not in sys.path:
    sys.path.insert(0, TIER)

import gpu_tier  # noqa: E402  pylint: disable=wrong-import-position,import-error
import tier_compare as tc  # noqa: E402  pylint: disable=wrong-import-position,import-error

CAPTURES = sorted(os.path.dirname(p) for p in glob.glob(os.path.join(CAPTURED, "*", gpu_tier.OUTPUTS["xml"])))
PARSER_FIELDS = (
    "uuid", "name", "pci_bus_id", "pci_device_id", "architecture", "compute_capability", "memory_total_mib", "persistence_mode",
    "compute_mode", "power_limit_w", "power_limit_min_w", "power_limit_max_w", "ecc", "mig",
)


def settings_params(args: dict[str, t.Any]) -> dict[str, t.Any]:
    """nvidia_smi_settings' parameters for ``args`` as AnsibleModule would fill them in (defaults, None suboptions)."""
    spec = nvidia_smi_settings.argument_spec()
    params = {name: option.get("default") for name, option in spec.items()}
    params.update(args)
    for name, option in spec.items():
        if option.get("type") == "dict" and isinstance(params.get(name), dict):
            params[name] = dict({sub: None for sub in option["options"]}, **params[name])
    return params


def replay(directory: str) -> None:
    capture = gpu_tier.load_capture(directory)
    with open(os.path.join(directory, gpu_tier.OUTPUTS["xml"]), "r", encoding="utf-8") as handle:
        xml_text = handle.read()

    # The collection's parser against the CSV and NVML of the same machine, and against its own run there.
    parsed = _smi.parse(xml_text, ("processes",))
    records = {tc.bus_id(g["pci_bus_id"]): g for g in parsed["gpus"]}
    checks = tc.field_checks("parser", "parser", records, capture) + tc.driver_checks("parser", "parser", parsed["driver"], capture)
    assert [c for c in checks if c["status"] == tc.FAIL] == []
    captured = {tc.bus_id(g["pci_bus_id"]): g for g in tc.rich_gpus(tc.facts_of(capture["results"].get("facts_smi")))}
    assert sorted(captured) == sorted(records)
    for bus, record in records.items():
        for field in PARSER_FIELDS:
            assert record[field] == captured[bus][field], (bus, field)

    # The planner on views from the XML.
    extras = _settings_apply.smi_clock_extras(xml_text)
    views = [_settings.current_view(g, dict(e, locked_clocks=None)) for g, e in zip(parsed["gpus"], extras)]
    capable = {"mig": [_settings.gpu_label(v) for v in views if v["mig"].get("current") is not None]}
    specs = capture["plans"]["specs"]

    def errors_for(args: dict[str, t.Any]) -> tuple[dict[str, t.Any], list[t.Mapping[str, t.Any]], list[str]]:
        desired = _settings.desired_from_params(settings_params(args))
        selected = _settings.select(views, args["gpus"])
        errors = _settings.check_request(desired) + [e for gpu in selected for e in _settings.validate(desired, gpu, capable)]
        return desired, selected, errors

    if "change" in specs:
        desired, selected, errors = errors_for(specs["change"]["args"])
        assert errors == []
        plan = _settings.plan_gpu(desired, selected[0])
        planned = {c["setting"]: [c["before"], c["after"]] for c in plan["changes"]}
        assert sorted(planned) == sorted(specs["change"]["expect"])
        for setting, (before, after) in specs["change"]["expect"].items():
            assert tc.change_matches({"before": planned[setting][0], "after": planned[setting][1]}, before, after), setting
        result = capture["results"]["settings_change"]["result"]
        on_machine = {c["setting"]: [c["before"], c["after"]] for c in result["gpus"][0]["changes"]}
        assert sorted(on_machine) == sorted(planned)
    for name in ("power_out_of_range", "clock_not_in_table", "mig_on_non_mig_gpu"):
        if name in specs:
            _desired, _selected, errors = errors_for(specs[name]["args"])
            assert any(specs[name]["expect"] in e for e in errors), (name, errors)

    # The tier's comparisons, again, from the files.
    schema = gpu_tier.load_schema(None)
    statuses = {c["name"]: c["status"] for c in tc.evaluate(capture, schema)}
    recorded = dict(capture["record"].get("checks") or {})
    recorded.pop("outputs.limits", None)
    if schema is None:  # compose-spec.json is not in this checkout's reach: that check cannot run again
        statuses.pop("compose.schema", None)
        recorded.pop("compose.schema", None)
    assert statuses == recorded


@pytest.mark.parametrize(
    "directory",
    [pytest.param(d, id=os.path.basename(d)) for d in CAPTURES]
    or [pytest.param(None, marks=pytest.mark.skip(reason="no capture from a real GPU in %s yet (see tests/gpu/README.md)" % CAPTURED))],
)
def test_capture_replays(directory: str) -> None:
    replay(directory)
