# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""gpuhost_apply on temporary directories with a fake systemd: check mode predicts the real run, then nothing to do.

The fake answers ``systemctl show`` from a table of units, applies mask/unmask/enable/disable/start/stop/restart to
it, and loads a unit written under a systemd directory on ``daemon-reload`` (static without [Install]).
"""

from __future__ import annotations

import os

import pytest

from ansible.module_utils import basic

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _apply
from ansible_collections.gpuhost.nvidia.plugins.modules import gpuhost_apply

SERVICE = "nvidia-persistenced.service"
BOOT = "gpuhost-gpu-settings.service"


class FakeSystemd:
    def __init__(self, root):
        self.root = root
        self.units = {SERVICE: {"LoadState": "loaded", "UnitFileState": "enabled", "ActiveState": "inactive"}}
        self.calls = []
        self.masked_enablement = {}

    def unit_file(self, name):
        return os.path.join(self.root, "etc", "systemd", "system", name)

    def run_command(self, argv, **kwargs):
        """AnsibleModule.run_command on this systemd (a bound method: the module instance is not passed)."""
        args = argv[1:]
        self.calls.append(" ".join(arg for arg in args if not arg.startswith("--property")))
        verb = args[0]
        if verb == "show":
            names = args[args.index("--") + 1:]
            blocks = []
            for name in names:
                unit = self.units.get(name, {"LoadState": "not-found", "UnitFileState": "", "ActiveState": "inactive"})
                blocks.append("".join("%s=%s\n" % item for item in unit.items()))
            return 0, "\n".join(blocks), ""
        if verb == "daemon-reload":
            for name in (BOOT,):
                if name not in self.units and os.path.exists(self.unit_file(name)):
                    with open(self.unit_file(name), encoding="utf-8") as handle:
                        state = "disabled" if "[Install]" in handle.read() else "static"
                    self.units[name] = {"LoadState": "loaded", "UnitFileState": state, "ActiveState": "inactive"}
            return 0, "", ""
        name = args[-1]
        unit = self.units[name]
        if verb == "mask":
            self.masked_enablement[name] = unit["UnitFileState"]
            unit.update(LoadState="masked", UnitFileState="masked")
        elif verb == "unmask":
            unit.update(LoadState="loaded", UnitFileState=self.masked_enablement.pop(name, "disabled"))
        elif verb in ("enable", "disable"):
            unit["UnitFileState"] = verb + "d"
        elif verb in ("start", "restart"):
            unit["ActiveState"] = "active"
        elif verb == "stop":
            unit["ActiveState"] = "inactive"
        return 0, "", ""


@pytest.fixture
def systemd(tmp_path, monkeypatch):
    fake = FakeSystemd(str(tmp_path))
    # the unit files of the tests live under tmp_path/etc/systemd/
    monkeypatch.setattr(_apply, "SYSTEMD_DIRS", _apply.SYSTEMD_DIRS + (str(tmp_path / "etc" / "systemd") + "/",))
    monkeypatch.setattr(basic.AnsibleModule, "run_command", fake.run_command)
    return fake


@pytest.fixture
def apply(run_module, systemd):
    def call(args, check_mode=False):
        return run_module(gpuhost_apply, args, check_mode=check_mode)
    return call


def request(tmp_path, driver_loaded=False):
    """gpu_settings' request, under tmp_path: a drop-in, a boot unit, a script in a new directory."""
    etc = tmp_path / "etc" / "systemd" / "system"
    etc.mkdir(parents=True)
    dropin = str(etc / (SERVICE + ".d") / "gpuhost.conf")
    proc = tmp_path / "proc-version"
    if driver_loaded:
        proc.write_text("NVRM\n")
    return {
        "directories": [{"path": os.path.dirname(dropin), "mode": "0755"}, {"path": str(tmp_path / "libexec" / "gpuhost"), "mode": "0755"}],
        "files": [
            {"path": dropin, "content": "[Service]\nExecStart=\nExecStart=/usr/bin/nvidia-persistenced --persistence-mode\n", "mode": "0644"},
            {"path": str(etc / BOOT), "content": "[Unit]\n[Service]\nType=oneshot\n[Install]\nWantedBy=multi-user.target\n", "mode": "0644"},
            {"path": str(tmp_path / "libexec" / "gpuhost" / "gpu-settings"), "content": "print('hi')\n", "mode": "0600"},
        ],
        "units": [
            {"name": SERVICE, "masked": False, "enabled": True, "state": "started", "start_if_exists": str(proc),
             "restart_when_changed": [dropin]},
            {"name": BOOT, "enabled": True},
        ],
    }


def tree(root):
    return sorted((os.path.relpath(os.path.join(d, f), root), oct(os.stat(os.path.join(d, f)).st_mode & 0o7777))
                  for d, dirs, files in os.walk(root) for f in files + dirs)


def test_check_mode_predicts_the_first_run_and_the_second_changes_nothing(apply, systemd, tmp_path):
    args = request(tmp_path)
    before = tree(tmp_path)
    predicted = apply(args, check_mode=True)
    assert tree(tmp_path) == before and systemd.calls == ["show -- %s %s" % (SERVICE, BOOT)]
    real = apply(args)
    keys = ("changed", "changed_files", "changed_units", "daemon_reloaded", "missing_units")
    assert {key: predicted[key] for key in keys} == {key: real[key] for key in keys}
    assert real["changed"] and real["changed_units"] == {BOOT: "enabled"}  # no driver: persistenced not started
    assert real["notes"] == ["%s is not started: %s does not exist" % (SERVICE, tmp_path / "proc-version")]
    assert systemd.calls[1:] == ["show -- %s %s" % (SERVICE, BOOT), "daemon-reload", "show -- %s %s" % (SERVICE, BOOT), "enable -- " + BOOT]
    assert oct(os.stat(args["files"][2]["path"]).st_mode & 0o777) == "0o600"
    assert len(real["diff"]) == 3 and real["diff"][0]["before_header"].endswith("(absent)")
    for check_mode in (True, False):
        again = apply(args, check_mode=check_mode)
        assert (again["changed"], again["changed_files"], again["changed_units"]) == (False, [], {})


def test_a_changed_dropin_restarts_the_running_unit_once(apply, systemd, tmp_path):
    args = request(tmp_path, driver_loaded=True)
    first = apply(args)
    assert first["changed_units"] == {SERVICE: "started", BOOT: "enabled"}  # started by the call: no restart
    args["files"][0]["content"] += "# changed\n"
    args["files"][0]["backup"] = True
    predicted = apply(args, check_mode=True)
    real = apply(args)
    assert predicted["changed_units"] == real["changed_units"] == {SERVICE: "restarted"}
    assert predicted["daemon_reloaded"] and real["daemon_reloaded"]
    backup = real["backups"][args["files"][0]["path"]]
    assert "# changed" not in open(backup, encoding="utf-8").read()
    show = "show -- %s %s" % (SERVICE, BOOT)
    assert systemd.calls[-4:] == [show, "daemon-reload", show, "restart -- " + SERVICE]


def test_static_unit_off_is_masked_and_on_again_unmasked(apply, systemd, tmp_path):
    systemd.units[SERVICE] = {"LoadState": "loaded", "UnitFileState": "static", "ActiveState": "active"}
    record = str(tmp_path / "masked_units")
    off = {"units": [{"name": SERVICE, "masked": True, "state": "stopped"}], "files": [{"path": record, "content": SERVICE + "\n"}]}
    assert apply(off, check_mode=True)["changed_units"] == apply(off)["changed_units"] == {SERVICE: "masked, stopped"}
    assert systemd.units[SERVICE]["LoadState"] == "masked" and not apply(off)["changed"]
    on = {"units": [{"name": SERVICE, "masked": False, "enabled": None, "state": "started"}], "absent": [record]}
    predicted = apply(on, check_mode=True)
    real = apply(on)
    assert predicted["changed_units"] == real["changed_units"] == {SERVICE: "unmasked, started"}
    assert predicted["removed"] == real["removed"] == [record] and not os.path.exists(record)
    assert systemd.units[SERVICE]["UnitFileState"] == "static" and not apply(on)["changed"]


def test_state_absent_unmasks_only_what_was_recorded_and_disables_before_removing(apply, systemd, tmp_path):
    args = request(tmp_path)
    apply(args)
    systemd.units[SERVICE].update(LoadState="masked", UnitFileState="masked")
    record = tmp_path / "masked_units"
    libexec = str(tmp_path / "libexec" / "gpuhost")
    absent = {"units": [{"name": BOOT, "enabled": False},
                        {"name": SERVICE, "masked": False, "switch_if_exists": str(record), "restart_when_changed": [args["files"][0]["path"]]}],
              "absent": [item["path"] for item in args["files"]] + [str(record), libexec, os.path.dirname(args["files"][0]["path"])]}
    assert apply(absent, check_mode=True)["changed_units"] == {BOOT: "disabled"}  # not recorded: the mask is the user's
    record.write_text(SERVICE + "\n")
    (tmp_path / "libexec" / "gpuhost" / "other").write_text("vfio's\n")
    predicted = apply(absent, check_mode=True)
    calls = len(systemd.calls)
    real = apply(absent)
    assert predicted["changed_units"] == real["changed_units"] == {BOOT: "disabled", SERVICE: "unmasked"}
    assert predicted["removed"] == real["removed"] and libexec not in real["removed"] and os.path.isdir(libexec)
    assert os.path.dirname(args["files"][0]["path"]) in real["removed"]
    assert systemd.calls[calls:].index("disable -- " + BOOT) < systemd.calls[calls:].index("daemon-reload")
    assert not apply(absent)["changed"]


def test_a_unit_not_installed_yet_in_check_mode(apply, systemd, tmp_path):
    del systemd.units[SERVICE]
    on = {"units": [{"name": SERVICE, "enabled": True, "package_default": "enabled"}]}
    assert not apply(on, check_mode=True)["changed"]  # the package enables it on install
    off = {"units": [{"name": SERVICE, "enabled": False}]}
    assert not apply(off, check_mode=True)["changed"]  # nothing to disable
    assert apply({"units": [{"name": SERVICE, "enabled": False, "masked": True, "package_default": "static"}]}, check_mode=True)["changed"]
    unknown = apply({"units": [{"name": SERVICE, "enabled": True}]}, check_mode=True)
    assert unknown["changed"] and unknown["missing_units"] == [SERVICE]
    failed = apply({"units": [{"name": SERVICE, "state": "started"}]})
    assert failed["failed"] and "is not installed" in failed["msg"]


@pytest.mark.parametrize("path", ["etc/x", "/etc/../etc/shadow", "/tmp/a\nb"])
def test_hostile_paths_are_refused_before_anything_is_read(apply, systemd, tmp_path, path):
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    result = apply({"files": [{"path": str(victim), "content": "owned\n"}, {"path": path, "content": "x"}], "units": [{"name": SERVICE, "enabled": False}]})
    assert result["failed"] and repr(path) in result["msg"]
    assert victim.read_text() == "keep\n" and systemd.calls == []


def test_a_failed_write_leaves_the_old_file_and_no_temporary_file(apply, systemd, tmp_path, monkeypatch):
    target = tmp_path / "spec.json"
    target.write_text("old\n")

    def broken_move(self, src, dest, unsafe_writes=False, keep_dest_attrs=True):
        raise OSError("disk full")

    monkeypatch.setattr(basic.AnsibleModule, "atomic_move", broken_move)
    with pytest.raises(OSError):
        apply({"files": [{"path": str(target), "content": "new\n"}]})
    assert target.read_text() == "old\n" and os.listdir(tmp_path) == ["spec.json"]


def test_a_directory_in_place_of_a_file_is_refused(apply, systemd, tmp_path):
    (tmp_path / "spec.json").mkdir()
    result = apply({"files": [{"path": str(tmp_path / "spec.json"), "content": "{}"}]})
    assert result["failed"] and "is a directory, not a regular file" in result["msg"]


def test_a_directory_an_earlier_task_only_pretended_to_create(apply, systemd, tmp_path):
    """Check mode: another role's call predicted the directory (gpuhost_ensured_dirs); the real run without it fails."""
    args = {"files": [{"path": str(tmp_path / "libexec" / "gpuhost" / "vfio-pci-override"), "content": "#!/bin/sh\n", "mode": "0755"}]}
    predicted = apply(args, check_mode=True)
    assert predicted["changed"] and predicted["changed_files"] == [args["files"][0]["path"]]
    assert not (tmp_path / "libexec").exists()
    failed = apply(args)
    assert failed["failed"] and "does not exist" in failed["msg"]
