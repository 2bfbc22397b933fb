# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""tests/molecule/images.py: the test images `make molecule` builds. Without a scenario named (`make test`), only those
of the scenarios run.sh runs then: the on-demand ones (tests/molecule/on-demand.txt) are left out, as run.sh leaves
them out, unless GPUHOST_MOLECULE_ALL=1."""

from __future__ import annotations

from pathlib import Path

import pytest
import script_module

REPO = Path(__file__).resolve().parents[3]
IMAGES = REPO / "tests" / "molecule" / "images.py"


@pytest.fixture(name="images")
def _images():
    return script_module.load("gpuhost_molecule_images", IMAGES)


def _printed(images, capsys, names: list[str]) -> set[str]:
    assert images.main(names) == 0
    return set(capsys.readouterr().out.split())


def test_on_demand_names_scenarios_that_exist(images, monkeypatch):
    monkeypatch.delenv("GPUHOST_MOLECULE_ALL", raising=False)
    listed = images.on_demand()
    assert listed and all((REPO / "molecule" / name / "molecule.yml").is_file() for name in listed), listed


def test_make_test_builds_only_the_ci_scenarios_images(images, capsys, monkeypatch):
    monkeypatch.delenv("GPUHOST_MOLECULE_ALL", raising=False)
    ci = sorted(p.parent.name for p in (REPO / "molecule").glob("*/molecule.yml") if p.parent.name not in images.on_demand())
    assert _printed(images, capsys, []) == _printed(images, capsys, ci)
    monkeypatch.setenv("GPUHOST_MOLECULE_ALL", "1")
    everything = _printed(images, capsys, [])
    assert everything == _printed(images, capsys, sorted(p.parent.name for p in (REPO / "molecule").glob("*/molecule.yml")))
    monkeypatch.delenv("GPUHOST_MOLECULE_ALL")
    assert _printed(images, capsys, []) <= everything


def test_a_named_on_demand_scenario_gets_its_images(images, capsys, monkeypatch):
    monkeypatch.delenv("GPUHOST_MOLECULE_ALL", raising=False)
    assert "nvidia_driver" in images.on_demand()
    assert "rocky10" in _printed(images, capsys, ["nvidia_driver"])
