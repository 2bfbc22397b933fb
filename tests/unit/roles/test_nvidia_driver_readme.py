"""roles/nvidia_driver/README.md lists every variable of the role's argument specification, with its default, and
nothing the specification does not have (#19 item 6)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROLE = Path(__file__).resolve().parents[3] / "roles" / "nvidia_driver"
SET_BY_ROLE = {"nvidia_driver_userland", "nvidia_driver_reboot_required", "nvidia_driver_reboot_reasons", "nvidia_driver_report"}


def test_readme_lists_the_argument_specification():
    options = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text(encoding="utf-8"))["argument_specs"]["main"]["options"]
    readme = (ROLE / "README.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| `(nvidia_driver_\w+)` \| ([^|]+) \|", readme, re.M))
    assert set(rows) == set(options)
    for name, option in options.items():
        default = option.get("default")
        if isinstance(default, bool):
            default = str(default).lower()
        elif default is None:
            default = "null"
        elif default == "":
            default = '""'
        assert str(default) in rows[name], (name, rows[name])
    named = set(re.findall(r"`(nvidia_driver_\w+)`", readme))
    assert named <= set(options) | SET_BY_ROLE, named - set(options) - SET_BY_ROLE
