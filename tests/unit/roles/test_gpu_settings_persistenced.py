# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""gpu_settings switching nvidia-persistenced on and off, evaluated with Ansible's own templar on the role's tasks.

Ubuntu's unit is static (no [Install]; the driver's udev rule starts it): systemd cannot disable it, so asked off the
role masks it, stops it and records the mask, and asked on again (or removed) it unmasks it. Debian's unit is enabled
or disabled, and stopped when off. The role asks all of it of one gpuhost.nvidia.gpuhost_apply call: these tests render
that call's arguments from the role's own task and vars, and put them through the module's planner (_apply) against
the unit states systemd reports, with and without a loaded driver. Check mode on a fresh host, where the unit is not
installed yet, predicts the same (package_default). molecule/ubuntu proves it on real systemd (ubuntu2204 asks it off).
"""

from __future__ import annotations

import pathlib
import typing as t

import pytest
import yaml

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar
import os_vars  # beside this file
from role_templates import inline_lookups, trusted

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _apply

ROLE = pathlib.Path(__file__).resolve().parents[3] / "roles" / "gpu_settings"
APPLY = "Install the settings files and switch the units (one call)"
SERVICE = "nvidia-persistenced.service"
BOOT = "gpuhost-gpu-settings.service"
RECORD = "/var/lib/gpuhost/gpu_settings_masked_units"
DROPIN = "/etc/systemd/system/nvidia-persistenced.service.d/gpuhost-persistence-mode.conf"
DRIVER = "/proc/driver/nvidia/version"
STATIC = {"load": "loaded", "enabled": "static", "active": "inactive"}
MASKED = {"load": "masked", "enabled": "masked", "active": "inactive"}
DISABLED = {"load": "loaded", "enabled": "disabled", "active": "inactive"}
ENABLED_RUNNING = {"load": "loaded", "enabled": "enabled", "active": "active"}


def _walk(tasks: list[dict]) -> t.Iterator[dict]:
    for task in tasks or []:
        yield task
        for key in ("block", "rescue", "always"):
            yield from _walk(task.get(key) or [])


def _tasks(name: str, file: str = "main.yml") -> list[dict]:
    found = [task for task in _walk(yaml.safe_load((ROLE / "tasks" / file).read_text(encoding="utf-8"))) if task.get("name") == name]
    assert found, name
    return found


# A host of each distribution the cases name.
LAYERED_HOST = {"Debian": "debian12", "Ubuntu": "ubuntu2404", "RedHat": "rocky9", "Archlinux": "arch", "default": "gentoo"}


def _templar(distro: str, enabled: bool, **extra: t.Any) -> Templar:
    variables: dict[str, t.Any] = {}
    for path in (ROLE / "defaults" / "main.yml", ROLE / "vars" / "main.yml"):
        variables.update(yaml.safe_load(path.read_text(encoding="utf-8")))
    # The per-OS files as the internal common role layers them (Ubuntu.yml over Debian.yml).
    variables.update(os_vars.resolve("gpu_settings", os_vars.HOSTS[LAYERED_HOST.get(distro, distro)]))
    variables = trusted(variables)
    variables.update({"gpu_settings_persistenced_enabled": enabled, "ansible_managed": "Ansible managed"})
    variables.update(extra)
    return Templar(loader=DataLoader(), variables=variables)


def applied(distro: str, enabled: bool, file: str = "main.yml", name: str = APPLY, **extra: t.Any) -> dict[str, t.Any]:
    """The gpuhost_apply arguments of the role's task, rendered (omitted ones left out)."""
    task, = _tasks(name, file)
    templar = _templar(distro, enabled, **extra)
    # the role's template and file lookups, inlined (role_templates.inline_lookups)
    (args, task_vars), lookups = inline_lookups([task["gpuhost.nvidia.gpuhost_apply"], task.get("vars") or {}], ROLE)
    scoped = templar.copy_with_new_env(available_variables={**templar.available_variables, **lookups, **trusted(task_vars)})
    args = scoped.template(trusted(args))
    assert not _apply.check_request(args.get("directories", []), args.get("files", []), args.get("absent", []), args["units"])
    return args


def unit(distro: str, enabled: bool, name: str = SERVICE) -> dict[str, t.Any]:
    return next(item for item in applied(distro, enabled)["units"] if item["name"] == name)


@pytest.mark.parametrize(("distro", "enabled", "expected"), [
    ("Ubuntu", True, {"masked": False, "state": "started", "restart_when_changed": [DROPIN], "package_default": "static"}),
    ("Ubuntu", False, {"masked": True, "state": "stopped", "restart_when_changed": [], "package_default": "static"}),
    ("Debian", True, {"masked": False, "enabled": True, "state": "started", "restart_when_changed": [DROPIN], "package_default": "enabled"}),
    ("Debian", False, {"enabled": False, "state": "stopped", "restart_when_changed": [], "package_default": "enabled"}),
    ("RedHat", True, {"masked": False, "enabled": True, "state": "started", "restart_when_changed": [DROPIN], "package_default": "disabled"}),
])
def test_the_switch(distro: str, enabled: bool, expected: dict[str, t.Any]) -> None:
    assert unit(distro, enabled) == {"name": SERVICE, "start_if_exists": DRIVER, **expected}


@pytest.mark.parametrize(("distro", "enabled", "loaded", "state", "verbs"), [
    # Ubuntu's static unit: on is never masked (and started with a driver); off is masked and stopped
    ("Ubuntu", True, False, STATIC, []),
    ("Ubuntu", True, True, STATIC, ["start"]),
    ("Ubuntu", True, True, MASKED, ["unmask", "start"]),
    ("Ubuntu", False, False, STATIC, ["mask"]),
    ("Ubuntu", False, True, dict(STATIC, active="active"), ["mask", "stop"]),
    # Debian's unit: enabled (and unmasked) or disabled and stopped; never masked by the role
    ("Debian", True, True, DISABLED, ["enable", "start"]),
    ("Debian", True, False, DISABLED, ["enable"]),
    ("Debian", True, False, MASKED, ["unmask", "enable"]),
    ("Debian", False, False, ENABLED_RUNNING, ["disable", "stop"]),
    ("Debian", False, True, dict(DISABLED, enabled="static"), []),
])
def test_what_the_switch_does(distro: str, enabled: bool, loaded: bool, state: dict[str, str], verbs: list[str]) -> None:
    assert _apply.plan_unit(unit(distro, enabled), state, start_ok=loaded)[0] == verbs


@pytest.mark.parametrize(("distro", "enabled", "predicted"), [
    ("Ubuntu", False, True),   # the real run installs the package, then masks the unit
    ("Ubuntu", True, False),   # installed static: nothing to switch
    ("Debian", True, False),   # Debian's install script enables it already
    ("Debian", False, True),   # ... so disabling is a change
])
def test_check_mode_predicts_the_switch_of_a_unit_not_installed_yet(distro: str, enabled: bool, predicted: bool) -> None:
    request = unit(distro, enabled)
    state = _apply.predicted_state(SERVICE, {"load": "not-found", "enabled": "", "active": "inactive"}, {}, request["package_default"])
    assert bool(_apply.plan_unit(request, state, start_ok=False)[0]) is predicted


def test_the_boot_unit_is_predicted_enabled_on_a_fresh_host() -> None:
    args = applied("Debian", True)
    boot = next(item for item in args["units"] if item["name"] == BOOT)
    assert boot == {"name": BOOT, "enabled": True}
    written = {item["path"]: item["content"] for item in args["files"]}
    state = _apply.predicted_state(BOOT, {"load": "not-found", "enabled": "", "active": "inactive"}, written, None)
    assert _apply.plan_unit(boot, state)[0] == ["enable"]


@pytest.mark.parametrize(("distro", "enabled", "recorded", "forgotten"), [
    ("Ubuntu", False, True, False), ("Ubuntu", True, False, True), ("Debian", False, False, False), ("Debian", True, False, True)])
def test_the_mask_is_recorded_only_when_the_role_masks(distro: str, enabled: bool, recorded: bool, forgotten: bool) -> None:
    args = applied(distro, enabled)
    files = {item["path"]: item for item in args["files"]}
    assert (RECORD in files) is recorded
    if recorded:
        assert files[RECORD] == {"path": RECORD, "content": SERVICE + "\n", "owner": "root", "group": "root", "mode": "0644"}
        assert {"path": "/var/lib/gpuhost", "owner": "root", "group": "root", "mode": "0755"} in args["directories"]
    # switched on again, the unit is unmasked (masked: false) and the record goes with it
    assert (RECORD in args["absent"]) is forgotten


def test_the_files_the_role_writes() -> None:
    args = applied("Debian", True)
    files = {item["path"]: item for item in args["files"]}
    assert sorted(files) == sorted([DROPIN, "/etc/gpuhost/gpu_settings.json", "/usr/local/libexec/gpuhost/gpu-settings",
                                    "/etc/systemd/system/" + BOOT])
    assert {(item["owner"], item["group"], item["mode"]) for item in files.values()} == {("root", "root", "0644")}
    assert files[DROPIN]["content"].endswith("ExecStart=\nExecStart=/usr/bin/nvidia-persistenced --user nvpd --persistence-mode\n")
    assert files["/usr/local/libexec/gpuhost/gpu-settings"]["content"] == (ROLE / "files" / "gpuhost-gpu-settings").read_text(encoding="utf-8")
    assert files["/etc/gpuhost/gpu_settings.json"]["content"].endswith('"persistence_mode": true\n}\n')
    assert [item["path"] for item in args["directories"]] == [
        "/etc/systemd/system/nvidia-persistenced.service.d", "/etc/gpuhost", "/usr/local/libexec/gpuhost"]
    # off: no drop-in is written (one left from an earlier run stays) and its directory is not ensured
    off = applied("Debian", False)
    assert DROPIN not in [item["path"] for item in off["files"]]
    assert "/etc/systemd/system/nvidia-persistenced.service.d" not in [item["path"] for item in off["directories"]]


@pytest.mark.parametrize(("found", "unmasked"), [([RECORD], True), ([], False)])
def test_state_absent_unmasks_only_what_the_role_recorded(found: list[str], unmasked: bool) -> None:
    args = applied("Ubuntu", False, "absent.yml", "Remove the boot unit, its script, its spec and the nvidia-persistenced drop-in")
    boot, persistenced = args["units"]
    assert boot == {"name": BOOT, "enabled": False}
    assert persistenced == {"name": SERVICE, "masked": False, "switch_if_exists": RECORD, "start_if_exists": DRIVER, "restart_when_changed": [DROPIN]}
    assert _apply.plan_unit(persistenced, MASKED, switch_ok=bool(found))[0] == (["unmask"] if unmasked else [])
    # the files first, then the directories the role created (each removed once nothing else is in it)
    assert args["absent"] == ["/etc/systemd/system/" + BOOT, "/usr/local/libexec/gpuhost/gpu-settings", "/etc/gpuhost/gpu_settings.json",
                              DROPIN, RECORD, "/etc/gpuhost", "/usr/local/libexec/gpuhost", "/etc/systemd/system/nvidia-persistenced.service.d"]
    # the drop-in's removal restarts nvidia-persistenced only when it runs and the driver is loaded
    running = dict(STATIC, active="active")
    assert _apply.needs_restart(persistenced, [], running, {DROPIN}, start_ok=True)
    assert not _apply.needs_restart(persistenced, [], running, {DROPIN}, start_ok=False)


def test_state_absent_takes_its_directories_out_of_the_shared_fact() -> None:
    task, = _tasks("Tell the roles after this one that gpu_settings' directories may be gone", "absent.yml")
    ensured = {"/etc/gpuhost": "root:root:0755", "/usr/local/libexec/gpuhost": "root:root:0755", "/opt/other": "root:root:0755"}
    templar = _templar("Ubuntu", True, gpuhost_ensured_dirs=ensured)
    assert templar.template(trusted(task["ansible.builtin.set_fact"]["gpuhost_ensured_dirs"])) == {"/opt/other": "root:root:0755"}


@pytest.mark.parametrize(("distro", "enabled", "units", "start"), [
    ("Ubuntu", False, {}, "masked and stopped (a static unit"),
    ("Ubuntu", True, {}, "static (no [Install] section"),
    ("Debian", False, {}, "disabled and stopped"),
    ("Debian", True, {}, "enabled with persistence mode on"),
    # a unit systemd reports static where the distribution's vars do not say so
    ("Debian", True, {SERVICE: STATIC}, "static (no [Install] section"),
])
def test_the_report_says_masked_static_or_disabled(distro: str, enabled: bool, units: dict, start: str) -> None:
    task, = _tasks("Report what the role configured, for the site summary")
    templar = _templar(distro, enabled, __gpu_settings_applied={"units": units})
    state = templar.template(trusted(task["vars"]["__gpu_settings_persistenced_state"]))
    assert state.startswith(start), state
