# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Every role's converged record in one remote call (issue 21): ``defer: true`` keeps each record or removal call in
the host fact gpuhost_converged_deferred, and ``state: flush`` at the end of the run writes them all, each exactly as
its own call would have.

The host is a temporary directory plus a fake dpkg-query and systemctl; the action plugin runs with its
``_execute_module`` replaced by the module itself run in-process, and a second record directory gets the same calls
one by one, so a flushed record is compared with the one the role's own call writes.
"""

from __future__ import annotations

import datetime
import json
import types

import converged_harness
import pytest

from ansible_collections.gpuhost.nvidia.plugins.action import gpuhost_converged as action_plugin
from ansible_collections.gpuhost.nvidia.plugins.module_utils import _converged, _converged_host

DEFERRED = _converged.DEFERRED_FACT
OBSERVED = _converged.OBSERVATION_FACT


@pytest.fixture
def host(host, tmp_path):
    """The conftest's host with the files, packages and unit the roles below record."""
    etc = tmp_path / "etc"
    etc.mkdir()
    for name in ("daemon.json", "nouveau.conf"):
        (etc / name).write_text(name + "\n")
    host["packages"].update({"nvidia-smi": "535.261.03-1", "nvidia-container-toolkit": "1.17.8-1"})
    host["units"].update({"nvidia-persistenced.service": ("loaded", "enabled", "active")})
    host["etc"] = etc
    return host


class Controller(converged_harness.Controller):
    """The harness's controller with the roles' record task."""

    def __init__(self, module, role_args):
        super().__init__(module)
        self.role_args = role_args

    def role(self, role, defer=True, check_mode=False, **changes):
        """The role's record task (state record, or absent) with or without defer."""
        return self.run(dict(self.role_args(role), defer=defer, **changes), check_mode=check_mode)


@pytest.fixture
def roles(host, tmp_path):
    """The record calls of three roles that share a package and a unit, in a record directory of their own."""
    etc = host["etc"]

    def args(role, records=None):
        base = {
            "nvidia_driver": {"files": [str(etc / "nouveau.conf")], "packages": ["nvidia-smi=535.*"], "units": ["nvidia-persistenced.service"]},
            "nvidia_container_toolkit": {"files": [str(etc / "daemon.json"), str(etc / "absent.conf")],
                                         "packages": ["nvidia-container-toolkit", "nvidia-smi"]},
            "gpu_settings": {"packages": ["nvidia-smi"], "units": ["nvidia-persistenced.service", "gpuhost-gpu-settings.service"]},
        }[role]
        return dict(base, state="record", path=str((records or tmp_path / "converged") / (role + ".json")), inputs_digest="d-" + role,
                    outputs={role + "_report": ["%s: done" % role]})
    return args


ROLES = ("nvidia_driver", "nvidia_container_toolkit", "gpu_settings")


def contents(directory):
    return {path.name: path.read_bytes() for path in sorted(directory.iterdir())} if directory.exists() else {}


# The planner.

def test_a_deferred_call_replaces_the_same_records_earlier_one_and_goes_last():
    fact = None
    for path, digest in (("/r/a.json", "1"), ("/r/b.json", "1"), ("/r/a.json", "2")):
        fact = _converged.defer(fact, "run1", {"state": "record", "path": path, "inputs_digest": digest, "defer": True, "inputs": {}})
    assert fact == {"run": "run1", "records": [{"state": "record", "path": "/r/b.json", "inputs_digest": "1"},
                                               {"state": "record", "path": "/r/a.json", "inputs_digest": "2"}]}
    assert [e["path"] for e in _converged.deferred_records(fact, "run1")] == ["/r/b.json", "/r/a.json"]
    # A fact of another run (a fact cache kept it from a run that failed before its flush) holds nothing for this one.
    assert _converged.deferred_records(fact, "run2") == []
    assert _converged.defer(fact, "run2", {"state": "absent", "path": "/r/c.json"}) == {
        "run": "run2", "records": [{"state": "absent", "path": "/r/c.json"}]}
    for stale in (None, {}, {"run": "run1"}, {"run": "run1", "records": "x"}, "text"):
        assert _converged.deferred_records(stale, "run1") == []


def test_a_deferred_entry_keeps_exactly_the_options_the_flush_takes():
    """_converged.RECORD_OPTIONS (what the action plugin keeps of a deferred call) and the module's RECORD_SPEC (what the
    flush's records take) name the same options: an option added to one only would be dropped or refused at the flush."""
    assert set(_converged.RECORD_OPTIONS) == set(_converged_host.RECORD_SPEC)


def test_take_deferred_hands_out_all_or_one_records_calls():
    fact = {"run": "r", "records": [{"path": "/r/a.json"}, {"path": "/r/b.json"}]}
    assert _converged.take_deferred(fact, "r", "/r/b.json") == ([{"path": "/r/b.json"}], {"run": "r", "records": [{"path": "/r/a.json"}]})
    assert _converged.take_deferred(fact, "r", "/r/c.json") == ([], None)  # nothing of that record: the fact stays
    assert _converged.take_deferred(fact, "r") == (fact["records"], {})
    assert _converged.take_deferred(fact, "other") == ([], None)
    assert _converged.take_deferred(None, "r") == ([], None)


def test_one_observation_serves_each_records_items():
    items = _converged.record_items(["/b", "/a", "/b"], ["nvidia-smi=535.*", "x>=1", " "], ["u.service", "u.service"])
    assert items == {"files": ["/a", "/b"], "packages": ["nvidia-smi", "x"], "units": ["u.service"]}
    observed = {"files": {"/a": "h", "/b": None, "/c": "h"}, "packages": {"nvidia-smi": "1", "x": None, "y": "2"},
                "units": {"u.service": {"load": "loaded"}, "v.service": {}}}
    assert _converged.observed_items(observed, items) == {"files": {"/a": "h", "/b": None}, "packages": {"nvidia-smi": "1", "x": None},
                                                          "units": {"u.service": {"load": "loaded"}}}


def test_the_record_verdict():
    observed = {"files": {"/a": "h"}, "packages": {}, "units": {}}
    new = _converged.build_record("d2", observed)
    assert not _converged.record_verdict(None, "no record at /r", new, observed)["converged"]
    old = _converged.build_record("d1", observed)
    assert _converged.record_verdict(old, None, new, observed) == {"converged": True, "drift": []}  # a new digest alone
    assert _converged.record_verdict(old, None, new, observed, pending=True)["converged"]  # pending: check mode only
    assert _converged.record_verdict(old, None, new, observed, pending=True, check_mode=True)["drift"] == [
        "check mode: earlier tasks of this run would change what the record lists"]
    moved = {"files": {"/a": "other"}, "packages": {}, "units": {}}
    assert _converged.record_verdict(old, None, _converged.build_record("d1", moved), moved)["drift"][0].startswith("file /a changed")
    more = {"files": {"/a": "h", "/b": None}, "packages": {}, "units": {}}
    assert _converged.record_verdict(old, None, _converged.build_record("d1", more), more)["drift"] == [
        "the managed files, packages or units changed"]


# The module.

class _FrozenClock(datetime.datetime):
    """The one clock of the test: a record's changed_run.at would differ between the two writers across a second."""

    @classmethod
    def now(cls, tz=None):
        return datetime.datetime(2026, 11, 29, 9, 27, 36, tzinfo=tz)


def test_the_flush_writes_each_record_as_its_own_call_would_in_one_observation(module, host, roles, tmp_path, monkeypatch):
    monkeypatch.setattr(_converged_host, "datetime", types.SimpleNamespace(datetime=_FrozenClock, timezone=datetime.timezone))
    one_by_one, flushed = tmp_path / "own", tmp_path / "flushed"
    calls = [roles(role, flushed) for role in ROLES] + [{"state": "absent", "path": str(flushed / "gpu_compose.json")}]
    (flushed / "gpu_compose.json").parent.mkdir()
    (flushed / "gpu_compose.json").write_text("{}")
    (one_by_one / "gpu_compose.json").parent.mkdir()
    (one_by_one / "gpu_compose.json").write_text("{}")
    for run in range(3):  # the first converge, the confirming run, a converged run
        own = [module(dict(call, path=call["path"].replace(str(flushed), str(one_by_one)))) for call in calls]
        host["calls"].clear()
        result = module({"state": "flush", "records": calls})
        # One package query and one systemctl call for every record.
        assert [argv[1] for argv in host["calls"]] == ["-W", "show"], run
        assert host["calls"][0][host["calls"][0].index("--") + 1:] == ["nvidia-container-toolkit", "nvidia-smi"]
        assert contents(flushed) == contents(one_by_one), run
        if run == 0:  # the changing run stamps its records with the one clock
            assert {json.loads((flushed / (role + ".json")).read_text())["changed_run"]["at"] for role in ROLES} == {
                "2026-11-29T09:27:36Z"}
        assert result["records_written"] == [{"path": call["path"], "state": call["state"], "changed": mine["changed"]}
                                             for call, mine in zip(calls, own)]
        assert result["changed"] == any(mine["changed"] for mine in own) == (run == 0)
        assert len(result["diff"]) == sum(1 for mine in own if mine["changed"])
    assert all(json.loads((flushed / (role + ".json")).read_text())["confirmed"] for role in ROLES)


def test_the_flush_in_check_mode_predicts_and_writes_nothing(module, host, roles, tmp_path):
    records = tmp_path / "converged"
    calls = [roles(role) for role in ROLES]
    predicted = module({"state": "flush", "records": calls}, check_mode=True)
    assert predicted["changed"] and not records.exists()
    assert module({"state": "flush", "records": calls})["changed"]
    module({"state": "flush", "records": calls})  # confirmed
    before = contents(records)
    assert not module({"state": "flush", "records": calls}, check_mode=True)["changed"]
    # pending, as for the record call: a version change check mode only pretended to make.
    pending = [dict(call, pending=call["path"].endswith("nvidia_driver.json")) for call in calls]
    result = module({"state": "flush", "records": pending}, check_mode=True)
    assert result["changed"] and [r["changed"] for r in result["records_written"]] == [True, False, False]
    assert contents(records) == before


def test_a_probe_reads_the_record_its_run_deferred(module, host, roles, tmp_path):
    """``records`` with any state: the deferred call of that record is made first, in the same remote call."""
    driver = roles("nvidia_driver")
    module(driver)
    host["calls"].clear()
    result = module({"state": "probe", "path": driver["path"], "inputs_digest": driver["inputs_digest"], "records": [driver]})
    assert result["converged"] and result["changed"] is False  # the record (confirmed now) did not count as a change
    assert result["records_written"] == [{"path": driver["path"], "state": "record", "changed": False}]
    assert [argv[1] for argv in host["calls"]] == ["-W", "show", "-W", "show"]  # the record's observation, then the probe's
    assert module({"state": "flush"}) == {"changed": False}  # nothing to write: no call, nothing read
    assert module({"state": "flush", "records": [{"state": "record", "path": driver["path"]}]})["failed"]  # no inputs digest


# The action plugin.

@pytest.fixture
def controller(module, roles, host, monkeypatch):
    monkeypatch.setattr(action_plugin, "RECORD_DIR", str(host["etc"].parent / "converged"))
    return Controller(module, roles)


def test_deferred_records_make_no_remote_call_and_the_flush_makes_one(controller, host, tmp_path):
    records = tmp_path / "converged"
    for role in ROLES:
        result = controller.role(role)
        assert result["deferred"] and not result["changed"] and result["path"] == str(records / (role + ".json"))
    assert not controller.remote and not records.exists()
    fact = controller.vars["ansible_facts"][DEFERRED]
    assert fact["run"] == action_plugin.run_identity() and [e["path"] for e in fact["records"]] == [str(records / (r + ".json")) for r in ROLES]
    assert all("defer" not in entry and "inputs" not in entry for entry in fact["records"])
    flushed = controller.run({"state": "flush"})
    assert len(controller.remote) == 1 and flushed["changed"]
    assert sorted(path.name for path in records.iterdir()) == sorted(role + ".json" for role in ROLES)
    assert controller.vars["ansible_facts"][DEFERRED] == {}
    # The second converge: the same records, nothing changed, one call again; then nothing deferred, no call.
    for role in ROLES:
        controller.role(role)
    assert not controller.run({"state": "flush"})["changed"] and len(controller.remote) == 2
    assert controller.run({"state": "flush"}) == {"changed": False, "records_written": [], "msg": "no record was deferred in this run"}
    assert len(controller.remote) == 2


def test_without_defer_each_role_records_at_once(controller, tmp_path):
    for role in ROLES:
        assert controller.role(role, defer=False)["changed"]
    assert len(controller.remote) == 3 and DEFERRED not in controller.vars["ansible_facts"]
    assert controller.role("nvidia_driver", defer="false")["changed"] is False  # the string a template gives


def test_a_role_run_twice_keeps_its_last_call_and_removal_is_deferred_too(controller, tmp_path):
    records = tmp_path / "converged"
    controller.role("nvidia_driver")
    controller.role("gpu_settings")
    controller.role("nvidia_driver", outputs={"nvidia_driver_report": ["second"]})
    controller.role("gpu_settings", state="absent")
    entries = controller.vars["ansible_facts"][DEFERRED]["records"]
    assert [(e["path"].rsplit("/", 1)[1], e["state"]) for e in entries] == [("nvidia_driver.json", "record"), ("gpu_settings.json", "absent")]
    controller.run({"state": "flush"})
    assert json.loads((records / "nvidia_driver.json").read_text())["outputs"] == {"nvidia_driver_report": ["second"]}
    assert not (records / "gpu_settings.json").exists()


def test_a_probe_after_a_deferred_record_answers_as_after_a_written_one(controller, module, host, tmp_path):
    records = tmp_path / "converged"
    for role in ROLES:  # the first converge and the confirming run, recorded one by one
        controller.role(role, defer=False)
        controller.role(role, defer=False)
    controller.remote.clear()
    controller.run({"state": "observe"}, register=_converged.OBSERVATION_VAR)
    controller.role("nvidia_driver")  # deferred: the observation no longer holds for it, nor (a full path ran) the others
    status = controller.vars["ansible_facts"][OBSERVED]
    assert status["used"] == [str(records / "nvidia_driver.json")] and status["trusted"] is False
    controller.remote.clear()
    # The role again in the same run: its probe writes the deferred record first, in the probe's own call.
    probe = controller.run({"state": "probe"} | {"path": str(records / "nvidia_driver.json"), "inputs_digest": "d-nvidia_driver"})
    assert len(controller.remote) == 1 and controller.remote[0]["records"][0]["path"] == str(records / "nvidia_driver.json")
    assert probe["converged"] and probe["outputs"] == {"nvidia_driver_report": ["nvidia_driver: done"]}
    assert controller.vars["ansible_facts"][DEFERRED] == {}
    # Another role's probe asks the host (the observation is not trusted after a full path), with nothing to write.
    controller.run({"state": "probe", "path": str(records / "gpu_settings.json"), "inputs_digest": "d-gpu_settings"})
    assert len(controller.remote) == 2 and "records" not in controller.remote[1]
    # An observation writes every deferred record first: it reads them.
    controller.role("nvidia_container_toolkit", outputs={"x": 1})
    controller.run({"state": "observe"}, register=_converged.OBSERVATION_VAR)
    assert controller.remote[-1]["records"][0]["outputs"] == {"x": 1}
    assert json.loads((records / "nvidia_container_toolkit.json").read_text())["outputs"] == {"x": 1}
    assert controller.vars["ansible_facts"][DEFERRED] == {}


def test_the_flush_marks_its_records_used_in_the_observation(controller, tmp_path):
    records = tmp_path / "converged"
    controller.run({"state": "observe"}, register=_converged.OBSERVATION_VAR)
    controller.vars["ansible_facts"][DEFERRED] = {"run": action_plugin.run_identity(), "records": [
        {"state": "absent", "path": str(records / "gpu_compose.json")}]}  # deferred before this observation's status
    result = controller.run({"state": "flush"})
    assert result["ansible_facts"][OBSERVED]["used"] == [str(records / "gpu_compose.json")]
    assert result["ansible_facts"][OBSERVED]["trusted"] is False


def test_a_deferred_fact_of_another_run_is_never_written(controller, tmp_path, monkeypatch):
    records = tmp_path / "converged"
    controller.role("nvidia_driver")
    controller.role("gpu_settings")
    # That run failed before its flush; a fact cache hands its fact to the next run.
    monkeypatch.setattr(action_plugin, "run_identity", lambda: "f" * 32)
    assert controller.run({"state": "flush"})["records_written"] == [] and not controller.remote
    controller.role("nvidia_container_toolkit")
    assert [e["path"] for e in controller.vars["ansible_facts"][DEFERRED]["records"]] == [str(records / "nvidia_container_toolkit.json")]
    controller.run({"state": "flush"})
    assert [path.name for path in records.iterdir()] == ["nvidia_container_toolkit.json"]


def test_check_mode_defers_and_the_flush_predicts(controller, tmp_path):
    records = tmp_path / "converged"
    for role in ROLES:
        assert not controller.role(role, check_mode=True)["changed"]
    predicted = controller.run({"state": "flush"}, check_mode=True)
    assert predicted["changed"] and len(controller.remote) == 1 and not records.exists()
    for role in ROLES:
        controller.role(role)
    assert controller.run({"state": "flush"})["changed"]  # what check mode predicted
