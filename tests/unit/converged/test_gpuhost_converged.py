# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""gpuhost_converged: record, probe, drift, check mode and absent, with canned dpkg-query and systemctl output."""

from __future__ import annotations

import json

import pytest

from ansible.module_utils import basic

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _converged
from ansible_collections.gpuhost.nvidia.plugins.modules import gpuhost_converged

DPKG = {"nvidia-smi": "nvidia-smi\tii \t535.261.03-1\n"}
UNITS = "LoadState=loaded\nUnitFileState=enabled\nActiveState=active\n"


@pytest.fixture
def host(monkeypatch):
    """A host whose dpkg database and systemd answer from ``state``; every command run is in ``calls``."""
    state = {"packages": dict(DPKG), "units": UNITS}
    calls = []

    def run_command(self, argv, **kwargs):
        calls.append(argv)
        # The test's get_bin_path finds no real binary (argv[0] is None): the arguments say which command it is.
        if argv[1] == "-W":
            return 0, "".join(state["packages"].get(name, "") for name in argv[argv.index("--") + 1:]), ""
        if argv[1] == "show":
            return 0, state["units"], ""
        raise AssertionError(argv)

    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
    state["calls"] = calls
    return state


@pytest.fixture
def run(run_module, monkeypatch, host):
    def call(args, check_mode=False):
        return run_module(gpuhost_converged, args, check_mode=check_mode)
    return call


def test_record_then_probe_then_each_drift(run, host, tmp_path):
    managed = tmp_path / "daemon.json"
    managed.write_text('{"runtimes": {"nvidia": {}}}\n')
    record_path = tmp_path / "state" / "toolkit.json"
    record = {"state": "record", "path": str(record_path), "inputs_digest": "d1", "files": [str(managed)],
              "packages": ["nvidia-smi"], "units": ["nvidia-persistenced.service"], "outputs": {"x_report": ["done"]}}
    probe = {"state": "probe", "path": str(record_path), "inputs_digest": "d1"}

    assert run(probe)["drift"] == ["no usable record (no record at %s): the next run is a full run" % record_path]
    predicted = run(record, check_mode=True)
    assert predicted["changed"] and not record_path.exists()
    first = run(record)
    written = json.loads(record_path.read_text())
    assert first["changed"] and written["packages"] == {"nvidia-smi": "535.261.03-1"}
    assert (written["confirmed"], written["changed_run"]["boot_id"]) == (False, "0b5e6f1a-boot-1")
    # The first re-run in the same boot takes the fast path; the report is handed back as the changing run's.
    first_rerun = run(probe)
    assert (first_rerun["converged"], first_rerun["drift"]) == (True, [])
    assert first_rerun["outputs"] == {"x_report": ["[reported by the full run of %s, which changed the host] done" % written["changed_run"]["at"]]}
    again = run(record)
    assert not again["changed"] and json.loads(record_path.read_text())["confirmed"] is True
    host["calls"].clear()
    converged = run(probe)
    assert (converged["converged"], converged["drift"], converged["outputs"]) == (True, [], {"x_report": ["done"]})
    assert [argv[1] for argv in host["calls"]] == ["-W", "show"]  # one package query, one systemctl call

    assert "inputs changed" in run(dict(probe, inputs_digest="d2"))["drift"][0]
    managed.write_text('{"runtimes": {}}\n')
    assert run(probe)["drift"][0].startswith("file %s changed" % managed)
    managed.write_text('{"runtimes": {"nvidia": {}}}\n')
    host["packages"]["nvidia-smi"] = "nvidia-smi\tii \t535.247.01-1\n"
    assert run(probe)["drift"] == ["package nvidia-smi is version 535.247.01-1, recorded 535.261.03-1"]
    host["packages"].clear()
    assert run(probe)["drift"] == ["package nvidia-smi is not installed (recorded version 535.261.03-1)"]
    host["packages"].update(DPKG)
    host["units"] = UNITS.replace("enabled", "disabled")
    assert run(probe)["drift"] == ["unit nvidia-persistenced.service is disabled, recorded enabled"]
    assert run(probe)["outputs"] == {}

    # A record after a repair counts as a change and is not confirmed; absent removes it (check mode keeps it).
    assert run(record)["changed"] and json.loads(record_path.read_text())["confirmed"] is False
    assert "changed_run" in json.loads(record_path.read_text())
    assert run({"state": "absent", "path": str(record_path)}, check_mode=True)["changed"] and record_path.exists()
    assert run({"state": "absent", "path": str(record_path)})["changed"] and not record_path.exists()
    assert not run({"state": "absent", "path": str(record_path)})["changed"]


def test_new_outputs_or_inputs_alone_rewrite_the_record_without_a_change(run, tmp_path):
    record_path = tmp_path / "r.json"
    args = {"state": "record", "path": str(record_path), "inputs_digest": "d", "outputs": {"a": 1}}
    assert run(args)["changed"]
    assert not run(dict(args, outputs={"a": 2}, inputs_digest="e"))["changed"]
    assert json.loads(record_path.read_text())["outputs"] == {"a": 2}
    assert json.loads(record_path.read_text())["inputs_digest"] == "e"
    assert run(dict(args, files=[str(tmp_path / "new")]))["changed"]  # the managed set itself changed


def test_a_broken_record_is_drift_not_a_failure(run, tmp_path):
    record_path = tmp_path / "r.json"
    record_path.write_text("not json")
    result = run({"state": "probe", "path": str(record_path), "inputs_digest": "d"})
    assert not result.get("failed") and not result["converged"] and "not valid JSON" in result["drift"][0]


def test_check_mode_predicts_the_record_a_version_change_writes(run, host, tmp_path):
    """A version change (molecule/upgrade_roll): check mode did not upgrade the package, so the host still matches the
    confirmed record; ``pending`` (the install task would change it) makes the record task report the real run's change."""
    record_path = tmp_path / "r.json"
    record = {"state": "record", "path": str(record_path), "inputs_digest": "v1", "packages": ["nvidia-smi"]}
    run(record)
    run(record)
    before = record_path.read_text()
    assert json.loads(before)["confirmed"] is True
    new_version = dict(record, inputs_digest="v2")
    # Without pending, check mode finds the host as recorded: nothing to predict (as before this option).
    assert not run(new_version, check_mode=True)["changed"]
    predicted = run(dict(new_version, pending=True), check_mode=True)
    assert predicted["changed"] and predicted["drift"] == ["check mode: earlier tasks of this run would change what the record lists"]
    assert record_path.read_text() == before  # check mode writes nothing
    # The real run upgraded the package: the record changes, which is what check mode predicted.
    host["packages"]["nvidia-smi"] = "nvidia-smi\tii \t535.274.02-1\n"
    assert run(dict(new_version, pending=True))["changed"]
    # Outside check mode pending is ignored: the record is compared with what the run left.
    assert not run(dict(new_version, pending=True))["changed"]


def test_a_changing_runs_record_holds_only_in_its_boot(run, boot, tmp_path):
    """The record of a run that changed the host: its reboot reasons hold until the host boots, so the fast path trusts
    it in that boot only; a full run that changes nothing confirms it for every boot."""
    record_path = tmp_path / "r.json"
    outputs = {"nvidia_driver_report": ["nvidia_driver: installed nvidia-smi", "no role prefix"],
               "nvidia_driver_reboot_reasons": ["driver packages installed or changed"], "nvidia_driver_userland": "535"}
    record = {"state": "record", "path": str(record_path), "inputs_digest": "d", "packages": ["nvidia-smi"], "outputs": outputs}
    probe = {"state": "probe", "path": str(record_path), "inputs_digest": "d"}
    assert run(record)["changed"]
    at = json.loads(record_path.read_text())["changed_run"]["at"]
    handed = run(probe)["outputs"]
    mark = "[reported by the full run of %s, which changed the host]" % at
    assert handed == {"nvidia_driver_report": ["nvidia_driver: %s installed nvidia-smi" % mark, "%s no role prefix" % mark],
                      "nvidia_driver_reboot_reasons": ["driver packages installed or changed"], "nvidia_driver_userland": "535"}
    for other in ("0b5e6f1a-boot-2", None):  # another boot, or one that cannot be read
        boot["id"] = other
        rebooted = run(probe)
        assert (rebooted["converged"], rebooted["outputs"]) == (False, {})
        assert rebooted["drift"][0].startswith("the host has booted since the full run that changed what the role manages")
    # The full run after the boot changes nothing: confirmed, no changed_run, its outputs handed back as they are.
    steady = dict(outputs, nvidia_driver_report=["nvidia_driver: already installed: nvidia-smi"])
    assert not run(dict(record, outputs=steady))["changed"]
    assert "changed_run" not in json.loads(record_path.read_text())
    boot["id"] = "0b5e6f1a-boot-3"
    assert run(probe)["outputs"] == steady


def test_a_record_without_changed_run_still_waits_for_a_full_run(run, tmp_path):
    """A record of a changing run written before records named the run's boot: the next full run confirms it."""
    record_path = tmp_path / "r.json"
    record_path.write_text(json.dumps({"format": 1, "confirmed": False, "inputs_digest": "d", "files": {}, "packages": {},
                                       "units": {}, "outputs": {"a_report": ["a: installed"]}}))
    result = run({"state": "probe", "path": str(record_path), "inputs_digest": "d"})
    assert (result["converged"], result["drift"]) == (False, [_converged.UNCONFIRMED])
    record_path.write_text(json.dumps({"format": 1, "confirmed": False, "inputs_digest": "d", "files": {}, "packages": {},
                                       "units": {}, "outputs": {}, "changed_run": "yesterday"}))
    result = run({"state": "probe", "path": str(record_path), "inputs_digest": "d"})
    assert not result["converged"] and result["drift"][0].startswith("no usable record (the record's changed_run is not")
