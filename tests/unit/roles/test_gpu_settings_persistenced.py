# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""gpu_settings switching nvidia-persistenced on and off, evaluated with Ansible's own templar on the role's tasks.

Ubuntu's unit is static (no [Install]; the driver's udev rule starts it): systemd cannot disable it, so asked off the
role masks it, stops it and records the mask, and asked on again (or removed) it unmasks it. Debian's unit is enabled
or disabled, and stopped when off. Check mode on a fresh host, where the unit is not installed yet, predicts the same
(the twin task's changed_when). molecule/ubuntu proves it on real systemd (ubuntu2204 asks it off).
"""

from __future__ import annotations

import pathlib
import typing as t

import pytest
import yaml

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from role_templates import trusted

ROLE = pathlib.Path(__file__).resolve().parents[3] / "roles" / "gpu_settings"
SWITCH = "Switch nvidia-persistenced on or off (enable, or disable; a static unit unmasked, or masked; started or stopped)"
SERVICE = "nvidia-persistenced.service"
RECORD = "/var/lib/gpuhost/gpu_settings_masked_units"


def _walk(tasks: list[dict]) -> t.Iterator[dict]:
    for task in tasks or []:
        yield task
        for key in ("block", "rescue", "always"):
            yield from _walk(task.get(key) or [])


def _tasks(name: str, file: str = "main.yml") -> list[dict]:
    found = [task for task in _walk(yaml.safe_load((ROLE / "tasks" / file).read_text(encoding="utf-8"))) if task.get("name") == name]
    assert found, name
    return found


def _templar(distro: str, enabled: bool, driver_loaded: bool = False, **extra: t.Any) -> Templar:
    variables: dict[str, t.Any] = {}
    for path in (ROLE / "defaults" / "main.yml", ROLE / "vars" / "main.yml", ROLE / "vars" / f"{distro}.yml"):
        variables.update(yaml.safe_load(path.read_text(encoding="utf-8")))
    variables = trusted(variables)
    variables.update({"gpu_settings_persistenced_enabled": enabled, "gpu_settings_driver_loaded": {"stat": {"exists": driver_loaded}}})
    variables.update(extra)
    return Templar(loader=DataLoader(), variables=variables)


def _when(templar: Templar, task: dict) -> bool:
    conditions = task.get("when", [])
    conditions = conditions if isinstance(conditions, list) else [conditions]
    return all(templar.evaluate_conditional(trust_as_template(str(condition))) for condition in conditions)


def switch(distro: str, enabled: bool, driver_loaded: bool = False) -> dict[str, t.Any]:
    """The systemd_service arguments of the switch task (omitted ones left out)."""
    task = next(task for task in _tasks(SWITCH) if "ansible.builtin.systemd_service" in task)
    return _templar(distro, enabled, driver_loaded).template(trusted(task["ansible.builtin.systemd_service"]))


@pytest.mark.parametrize(("distro", "enabled", "loaded", "expected"), [
    # Ubuntu's static unit: on is never masked (and started with a driver); off is masked and stopped
    ("Ubuntu", True, False, {"masked": False}),
    ("Ubuntu", True, True, {"masked": False, "state": "started"}),
    ("Ubuntu", False, False, {"masked": True, "state": "stopped"}),
    ("Ubuntu", False, True, {"masked": True, "state": "stopped"}),
    # Debian's unit: enabled (and unmasked) or disabled and stopped; never masked by the role
    ("Debian", True, True, {"masked": False, "enabled": True, "state": "started"}),
    ("Debian", True, False, {"masked": False, "enabled": True}),
    ("Debian", False, False, {"enabled": False, "state": "stopped"}),
])
def test_the_switch(distro: str, enabled: bool, loaded: bool, expected: dict[str, t.Any]) -> None:
    assert switch(distro, enabled, loaded) == {"name": SERVICE, **expected}


@pytest.mark.parametrize(("distro", "enabled", "predicted"), [
    ("Ubuntu", False, True),   # the real run installs the package, then masks the unit
    ("Ubuntu", True, False),   # installed static: nothing to switch
    ("Debian", True, False),   # Debian's install script enables it already
    ("Debian", False, True),   # ... so disabling is a change
])
def test_check_mode_predicts_the_switch_of_a_unit_not_installed_yet(distro: str, enabled: bool, predicted: bool) -> None:
    twin = next(task for task in _tasks(SWITCH) if "ansible.builtin.debug" in task)
    templar = _templar(distro, enabled)
    assert templar.evaluate_conditional(trust_as_template(twin["changed_when"])) is predicted


@pytest.mark.parametrize(("distro", "enabled", "recorded"), [("Ubuntu", False, True), ("Ubuntu", True, False), ("Debian", False, False)])
def test_the_mask_is_recorded_only_when_the_role_masks(distro: str, enabled: bool, recorded: bool) -> None:
    task, = _tasks("Record that the role masked nvidia-persistenced, for state absent")
    templar = _templar(distro, enabled)
    assert _when(templar, task) is recorded
    assert templar.template(trusted(task["ansible.builtin.lineinfile"])) == {
        "path": RECORD, "line": SERVICE, "create": True, "owner": "root", "group": "root", "mode": "0644"}


@pytest.mark.parametrize(("unit", "dropin_changed", "loaded", "forgotten"), [
    ({"changed": True, "status": {"LoadState": "masked"}}, False, False, True),     # the switch unmasked it
    ({"changed": True, "status": {"LoadState": "loaded"}}, False, True, False),     # only started
    ({"changed": False, "status": {"LoadState": "loaded"}}, True, True, True),      # the restart handler unmasked it
    ({"changed": False, "status": {"LoadState": "loaded"}}, True, False, False),    # no restart without a driver
    ({"skipped": True, "changed": False}, False, False, False),                      # check mode, not installed yet
])
def test_the_record_is_forgotten_when_the_unit_is_unmasked(unit: dict, dropin_changed: bool, loaded: bool, forgotten: bool) -> None:
    task, = _tasks("Forget the mask the role recorded")
    templar = _templar("Ubuntu", True, loaded, __gpu_settings_persistenced_unit=unit, __gpu_settings_dropin_file={"changed": dropin_changed})
    assert _when(templar, task) is forgotten
    assert not _when(_templar("Ubuntu", False, loaded, __gpu_settings_persistenced_unit=unit,
                              __gpu_settings_dropin_file={"changed": dropin_changed}), task)


def test_the_restart_handler_unmasks_first() -> None:
    handler = next(task for task in yaml.safe_load((ROLE / "handlers" / "main.yml").read_text(encoding="utf-8"))
                   if task["name"] == "Restart nvidia-persistenced")
    assert handler["ansible.builtin.systemd_service"]["masked"] is False
    assert "gpu_settings_persistenced_enabled" in handler["when"]


@pytest.mark.parametrize(("found", "unmasked"), [([RECORD], True), ([], False), (["/etc/systemd/system/gpuhost-gpu-settings.service"], False)])
def test_state_absent_unmasks_only_what_the_role_recorded(found: list[str], unmasked: bool) -> None:
    task, = _tasks("Unmask nvidia-persistenced, which the role masked", "absent.yml")
    templar = _templar("Ubuntu", False, __gpu_settings_found={"files": [{"path": path} for path in found]})
    assert _when(templar, task) is unmasked
    assert task["ansible.builtin.systemd_service"] == {"name": "{{ __gpu_settings_persistenced_service }}", "masked": False}
    removed, = _tasks("Remove the boot unit, its script, its spec and the nvidia-persistenced drop-in", "absent.yml")
    assert templar.template(trusted(removed["loop"]))[-1] == RECORD
    # the drop-in stays at the index the restart after the removal reads
    assert "results[3]" in str(_tasks("Restart nvidia-persistenced without the persistence-mode drop-in when the driver is loaded",
                                      "absent.yml")[0]["when"])
    assert templar.template(trusted(removed["loop"]))[3] == templar.template(trust_as_template("{{ __gpu_settings_persistenced_dropin }}"))


def test_state_absent_takes_its_directories_out_of_the_shared_fact() -> None:
    task, = _tasks("Tell the roles after this one that gpu_settings' directories may be gone", "absent.yml")
    ensured = {"/etc/gpuhost": "root:root:0755", "/usr/local/libexec/gpuhost": "root:root:0755", "/opt/other": "root:root:0755"}
    templar = _templar("Ubuntu", True, gpuhost_ensured_dirs=ensured)
    assert templar.template(trusted(task["ansible.builtin.set_fact"]["gpuhost_ensured_dirs"])) == {"/opt/other": "root:root:0755"}


@pytest.mark.parametrize(("distro", "enabled", "start"), [
    ("Ubuntu", False, "masked and stopped (a static unit"),
    ("Ubuntu", True, "static (no [Install] section"),
    ("Debian", False, "disabled and stopped"),
    ("Debian", True, "enabled with persistence mode on"),
])
def test_the_report_says_masked_static_or_disabled(distro: str, enabled: bool, start: str) -> None:
    task, = _tasks("Report what the role configured, for the site summary")
    templar = _templar(distro, enabled, __gpu_settings_persistenced_unit={"skipped": True})
    state = templar.template(trusted(task["vars"]["__gpu_settings_persistenced_state"]))
    assert state.startswith(start), state
