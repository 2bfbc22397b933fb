# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""_apply: the request checks and the unit planner of gpuhost_apply, without a host."""

from __future__ import annotations

import pytest

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _apply

LOADED = {"load": "loaded", "enabled": "disabled", "active": "inactive"}
SERVICE = "nvidia-persistenced.service"


@pytest.mark.parametrize("path", ["relative/x", "/etc/../shadow", "/etc/./x", "/a//b", "/etc/x\n", "/etc/\x00x", "/", "/etc/", "", None,
                                  "/" + "a" * 5000])
def test_hostile_paths_are_refused(path):
    problems = _apply.check_request([{"path": path}], [{"path": path, "content": ""}], [path], [])
    assert len(problems) == 3 and all("path %r" % (path,) in problem for problem in problems), problems


def test_plain_paths_pass():
    assert _apply.check_request([{"path": "/etc/gpuhost", "mode": "0755", "owner": "root", "group": "0"}],
                                [{"path": "/etc/gpuhost/a.json", "content": "{}", "mode": "644"}], ["/etc/old"],
                                [{"name": SERVICE, "restart_when_changed": ["/etc/gpuhost/a.json", "/etc/old"]}]) == []


def test_every_problem_is_reported_at_once():
    problems = _apply.check_request(
        [{"path": "/d", "mode": "rwx"}, {"path": "/d"}],
        [{"path": "/f", "content": "", "owner": "root;reboot", "group": "a b"}],
        [],
        [{"name": "x;reboot"}, {"name": SERVICE, "state": "running", "masked": True, "enabled": True,
                                "restart_when_changed": ["/elsewhere"], "start_if_exists": "../x", "package_default": "on"},
         {"name": SERVICE}],
    )
    text = "\n".join(problems)
    for expected in ("mode 'rwx'", "path /d is also directories[0]", "owner 'root;reboot'", "group 'a b'", "'x;reboot' is not a systemd unit",
                     "state 'running'", "masked unit cannot be enabled", "'/elsewhere', which is not in files or absent",
                     "start_if_exists: path '../x'", "package_default 'on'", "unit nvidia-persistenced.service is listed twice"):
        assert expected in text, (expected, problems)


def test_unit_files_and_their_predicted_state():
    assert _apply.is_unit_file("/etc/systemd/system/x.service.d/a.conf") and not _apply.is_unit_file("/etc/systemdx/a")
    assert _apply.unit_file_state("[Unit]\n[Service]\n[Install]\nWantedBy=multi-user.target\n") == "disabled"
    assert _apply.unit_file_state("[Unit]\n[Service]\nExecStart=/bin/true\n") == "static"
    missing = {"load": "not-found", "enabled": "", "active": "inactive"}
    written = {"/etc/systemd/system/gpuhost-gpu-settings.service": "[Install]\n"}
    assert _apply.predicted_state("gpuhost-gpu-settings.service", missing, written, None) == LOADED
    assert _apply.predicted_state(SERVICE, missing, written, "static") == dict(LOADED, enabled="static")
    assert _apply.predicted_state(SERVICE, missing, written, None) is None
    assert _apply.predicted_state(SERVICE, LOADED, {}, "enabled") == LOADED  # installed: as found


@pytest.mark.parametrize(("request_", "state", "verbs", "after"), [
    ({"enabled": True, "state": "started"}, LOADED, ["enable", "start"], {"enabled": "enabled", "active": "active"}),
    ({"enabled": True, "state": "started"}, dict(LOADED, enabled="enabled", active="active"), [], {}),
    ({"enabled": False, "state": "stopped"}, dict(LOADED, enabled="enabled", active="active"), ["disable", "stop"], {"enabled": "disabled"}),
    # Ubuntu's static nvidia-persistenced: off is masked and stopped; on is unmasked (enablement then read again)
    ({"masked": True, "state": "stopped"}, dict(LOADED, enabled="static", active="active"), ["mask", "stop"], {"load": "masked"}),
    ({"masked": False, "enabled": True}, {"load": "masked", "enabled": "masked", "active": "inactive"}, ["unmask", "enable"], {}),
    ({"masked": False}, dict(LOADED, enabled="static"), [], {}),
    # a static unit has no enablement to switch: never a change
    ({"enabled": True}, dict(LOADED, enabled="static"), [], {}),
    ({"enabled": False}, dict(LOADED, enabled="static"), [], {}),
    # a unit that is not installed: only a mask can be done
    ({"enabled": False, "state": "stopped"}, {"load": "not-found", "enabled": "", "active": "inactive"}, [], {}),
    ({"masked": True}, {"load": "not-found", "enabled": "", "active": "inactive"}, ["mask"], {"load": "masked"}),
])
def test_plan_unit(request_, state, verbs, after):
    planned, left, _notes = _apply.plan_unit(dict(request_, name=SERVICE), state)
    assert planned == verbs
    assert {key: left[key] for key in after} == after


def test_conditions_hold_back_the_start_and_the_switches():
    unit = {"name": SERVICE, "masked": False, "enabled": True, "state": "started", "start_if_exists": "/proc/driver/nvidia/version"}
    verbs, left, notes = _apply.plan_unit(unit, LOADED, start_ok=False)
    assert (verbs, left["active"]) == (["enable"], "inactive")
    assert notes == ["nvidia-persistenced.service is not started: /proc/driver/nvidia/version does not exist"]
    masked = {"load": "masked", "enabled": "masked", "active": "inactive"}
    assert _apply.plan_unit({"name": SERVICE, "masked": False}, masked, switch_ok=False)[0] == []


@pytest.mark.parametrize(("active", "verbs", "restart"), [("active", [], True), ("inactive", [], False), ("active", ["start"], False)])
def test_restart_only_a_running_unit_whose_file_changed(active, verbs, restart):
    unit = {"name": SERVICE, "restart_when_changed": ["/etc/a.conf"]}
    assert _apply.needs_restart(unit, verbs, dict(LOADED, active=active), {"/etc/a.conf"}) is restart
    assert _apply.needs_restart(unit, verbs, dict(LOADED, active=active), {"/etc/other"}) is False
    assert _apply.needs_restart(unit, verbs, dict(LOADED, active=active), {"/etc/a.conf"}, start_ok=False) is False


def test_describe():
    assert _apply.describe(["unmask", "enable", "start", "restart"]) == "unmasked, enabled, started, restarted"
