# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Every role's per-OS variables, layered by the internal common role, resolve exactly as they did before it.

``fixtures/per_os_vars_before.json`` holds, for each role with per-OS files and each distribution in ``os_vars.HOSTS``,
the files and the variables that the roles' own ``first_found`` chains loaded (captured from the layout before the
common role, commit fcd1982). The layered files (Ubuntu.yml over Debian.yml, Fedora.yml over RedHat.yml, ...) hold only
what differs, and must still resolve to the same values, key for key.
"""

from __future__ import annotations

import json
import pathlib
import typing as t

import pytest
import yaml

from os_vars import HOSTS, ROLES, common_vars, files, resolve  # beside this file (pytest puts its directory on the path)

BEFORE = json.loads((pathlib.Path(__file__).parent / "fixtures" / "per_os_vars_before.json").read_text(encoding="utf-8"))
CASES = [(role, host) for role in sorted(BEFORE) for host in sorted(HOSTS)]


def test_every_role_with_per_os_files_is_captured() -> None:
    with_files = sorted(path.parents[1].name for path in ROLES.glob("*/vars/*.yml") if path.name != "main.yml")
    assert sorted(set(with_files)) == sorted(BEFORE)
    assert all(sorted(BEFORE[role]) == sorted(HOSTS) for role in BEFORE)


def effective(role: str, loaded: dict[str, t.Any]) -> dict[str, t.Any]:
    """What the role sees: its vars/main.yml under the loaded files (include_vars takes precedence over role vars), a
    value that is an ``undef()`` template left undefined (a layered file's way of keeping a family value out), and
    values as JSON has them (the capture's integer keys are strings)."""
    main = ROLES / role / "vars" / "main.yml"
    values = dict((yaml.safe_load(main.read_text(encoding="utf-8")) or {}) if main.is_file() else {}, **loaded)
    return json.loads(json.dumps({name: value for name, value in values.items()
                                  if not (isinstance(value, str) and value.startswith("{{ undef("))}))


@pytest.mark.parametrize(("role", "host"), CASES)
def test_layered_vars_resolve_as_before(role: str, host: str) -> None:
    assert effective(role, resolve(role, HOSTS[host])) == effective(role, BEFORE[role][host]["vars"]), files(role, HOSTS[host])


def test_ubuntu_and_release_files_layer_on_the_family_file() -> None:
    assert files("nvidia_driver", HOSTS["ubuntu2404"]) == ["Debian.yml", "Ubuntu.yml"]
    assert files("nvidia_driver", HOSTS["debian13"]) == ["Debian.yml", "Debian_13.yml"]
    assert files("nvidia_driver", HOSTS["rocky10"]) == ["RedHat.yml", "RedHat_10.yml"]
    assert files("nvidia_driver", HOSTS["fedora42"]) == ["RedHat.yml", "Fedora.yml"]
    assert files("gpu_settings", HOSTS["ubuntu2204"]) == ["Debian.yml", "Ubuntu.yml"]
    assert files("gpu_compose", HOSTS["gentoo"]) == ["default.yml"]
    assert files("gpu_compose", HOSTS["arch"]) == ["Archlinux.yml"]


NEW_RELEASES = {
    "ubuntu2604": {"distribution": "Ubuntu", "os_family": "Debian", "distribution_major_version": "26", "distribution_version": "26.04"},
    "fedora43": {"distribution": "Fedora", "os_family": "RedHat", "distribution_major_version": "43", "distribution_version": "43"},
    "fedora44": {"distribution": "Fedora", "os_family": "RedHat", "distribution_major_version": "44", "distribution_version": "44"},
    "ubuntu2510": {"distribution": "Ubuntu", "os_family": "Debian", "distribution_major_version": "25", "distribution_version": "25.10"},
    "fedora45": {"distribution": "Fedora", "os_family": "RedHat", "distribution_major_version": "45", "distribution_version": "45"},
}


@pytest.mark.parametrize(("host", "layers", "versions"), [
    ("ubuntu2604", ["Debian.yml", "Ubuntu.yml", "Ubuntu_26.04.yml"], ["26.04"]),
    ("fedora43", ["RedHat.yml", "Fedora.yml", "Fedora_43.yml"], ["43"]),
    ("fedora44", ["RedHat.yml", "Fedora.yml", "Fedora_44.yml"], ["44"]),
    # No file of their own: the distribution's, whose versions do not name them (the driver plan refuses them).
    ("ubuntu2510", ["Debian.yml", "Ubuntu.yml"], ["22.04", "24.04"]),
    ("fedora45", ["RedHat.yml", "Fedora.yml"], ["41", "42"]),
])
def test_the_driver_releases_of_2026_layer_their_own_file(host: str, layers: list[str], versions: list[str]) -> None:
    facts = NEW_RELEASES[host]
    assert files("nvidia_driver", facts) == layers
    resolved = resolve("nvidia_driver", facts)
    assert resolved["__nvidia_driver_capabilities"]["versions"] == versions
    # A release is supported exactly when it has a file of its own.
    named = facts["distribution_version"] in versions or facts["distribution_major_version"] in versions
    assert named == (len(layers) == 3)


@pytest.mark.parametrize("path", sorted(p for p in ROLES.glob("*/vars/*_*.yml") if p.name != "main.yml")
                         + sorted(ROLES.glob("*/vars/Ubuntu.yml")) + sorted(ROLES.glob("*/vars/Fedora.yml")))
def test_a_layered_file_repeats_no_value_of_the_file_under_it(path: pathlib.Path) -> None:
    """Ubuntu.yml, Fedora.yml and the release files hold only what differs from the family file they layer on."""
    family = {"Ubuntu": "Debian", "Fedora": "RedHat"}.get(path.stem, path.stem.split("_")[0])
    base = path.parent / (family + ".yml")
    over = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    under = yaml.safe_load(base.read_text(encoding="utf-8")) or {}
    assert [key for key, value in over.items() if under.get(key) == value] == []


def test_the_guard_refuses_a_caller_outside_the_collection() -> None:
    with pytest.raises(Exception, match="internal to the collection.*not by role other.role"):
        files_of_caller("other.role.x")
    with pytest.raises(Exception, match="not by a play or a playbook task"):
        files_of_caller("")


def files_of_caller(name: str) -> list[str]:
    from ansible.parsing.dataloader import DataLoader  # pylint: disable=import-outside-toplevel
    from ansible.template import Templar, trust_as_template  # pylint: disable=import-outside-toplevel

    variables = dict(common_vars(), ansible_facts=HOSTS["debian12"],
                     ansible_parent_role_paths=[str(ROLES / "gpu_compose")] if name else [],
                     ansible_parent_role_names=[name] if name else [])
    return Templar(loader=DataLoader(), variables=variables).template(trust_as_template("{{ __internal_common_guard }}"))
