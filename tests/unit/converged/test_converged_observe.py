# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""One observation for every role's probe (issue 21): gpuhost_converged state=observe, and the action plugin's probe
answering from it on the controller with the result the module gives on the host, until a role takes its full path.

The host is a temporary directory plus a fake dpkg-query and systemctl; the action plugin runs with its
``_execute_module`` replaced by the module itself run in-process, so a local answer and a live one meet the same host.
"""

from __future__ import annotations

import random

import converged_harness
import pytest

from ansible_collections.gpuhost.nvidia.plugins.action import gpuhost_converged as action_plugin
from ansible_collections.gpuhost.nvidia.plugins.module_utils import _converged

PLAYBOOK = converged_harness.PLAYBOOK
FACT = _converged.OBSERVATION_FACT
VAR = _converged.OBSERVATION_VAR


class Controller(converged_harness.Controller):
    """The harness's controller with the observation's two tasks."""

    def observe(self, **kwargs):
        return self.run({"state": "observe", "path": str(kwargs.pop("path", ""))} if "path" in kwargs else {"state": "observe"},
                        register=VAR, **kwargs)

    def probe(self, path, digest="d", **kwargs):
        return self.run({"state": "probe", "path": str(path), "inputs_digest": digest}, **kwargs)


def live(result):
    """A probe's result as the roles read it: without the facts the action plugin adds."""
    return {key: value for key, value in result.items() if key != "ansible_facts"}


def write_record(module, path, files=(), packages=(), units=(), digest="d", confirmed=True, outputs=None):
    args = {"state": "record", "path": str(path), "inputs_digest": digest, "files": [str(f) for f in files],
            "packages": list(packages), "units": list(units), "outputs": outputs or {"report": [path.stem]}}
    module(args)
    if confirmed:
        module(args)


@pytest.fixture
def fleet(module, host, tmp_path):
    """Three roles' confirmed records that share a package and a unit, on a host as they say."""
    etc = tmp_path / "etc"
    etc.mkdir()
    files = {name: etc / name for name in ("daemon.json", "nouveau.conf", "override.yml")}
    for name, path in files.items():
        path.write_text(name + "\n")
    host["packages"].update({"nvidia-smi": "535.261.03-1", "python3-yaml": "6.0-3", "nvidia-container-toolkit": "1.17.8-1"})
    host["units"].update({"nvidia-persistenced.service": ("loaded", "enabled", "active"),
                          "gpuhost-gpu-settings.service": ("loaded", "enabled", "inactive")})
    records = host["records"]
    write_record(module, records / "nvidia_driver.json", [files["nouveau.conf"]], ["nvidia-smi"], ["nvidia-persistenced.service"])
    write_record(module, records / "nvidia_container_toolkit.json", [files["daemon.json"]],
                 ["nvidia-container-toolkit", "python3-yaml", "nvidia-smi"], [])
    write_record(module, records / "gpu_settings.json", [], ["nvidia-smi"],
                 ["nvidia-persistenced.service", "gpuhost-gpu-settings.service"])
    host["calls"].clear()
    return files


def test_observe_reads_every_record_in_one_package_query_and_one_systemctl_call(module, host, fleet):
    observed = module({"state": "observe", "path": str(host["records"])})
    assert not observed["changed"] and observed["path"] == str(host["records"])
    assert [argv[1] for argv in host["calls"]] == ["-W", "show"]
    # Each shared package and unit is asked for once.
    assert host["calls"][0][host["calls"][0].index("--") + 1:] == ["nvidia-container-toolkit", "nvidia-smi", "python3-yaml"]
    assert host["calls"][1][host["calls"][1].index("--") + 1:] == ["gpuhost-gpu-settings.service", "nvidia-persistenced.service"]
    assert observed["records"] == {
        str(host["records"] / role): {"confirmed": True, "inputs_digest": "d", "outputs": {"report": [role[:-5]]}, "drift": []}
        for role in ("gpu_settings.json", "nvidia_container_toolkit.json", "nvidia_driver.json")}


def test_observe_names_each_records_drift_as_its_own_probe_does(module, host, fleet):
    fleet["daemon.json"].write_text("{}\n")
    fleet["nouveau.conf"].unlink()
    host["packages"]["nvidia-smi"] = "535.274.02-1"
    host["units"]["nvidia-persistenced.service"] = ("loaded", "disabled", "inactive")
    observed = module({"state": "observe", "path": str(host["records"])})["records"]
    for path, entry in observed.items():
        probe = module({"state": "probe", "path": path, "inputs_digest": "d"})
        assert not probe["converged"] and entry["drift"] == probe["drift"]
    driver = observed[str(host["records"] / "nvidia_driver.json")]["drift"]
    assert driver[0].startswith("file %s is missing" % fleet["nouveau.conf"])
    assert driver[1:] == ["package nvidia-smi is version 535.274.02-1, recorded 535.261.03-1",
                          "unit nvidia-persistenced.service is disabled, recorded enabled",
                          "unit nvidia-persistenced.service is inactive, recorded active"]


def test_observe_without_records_a_garbled_one_and_unobservable_items(module, host, fleet, tmp_path):
    assert module({"state": "observe", "path": str(tmp_path / "none")})["records"] == {}
    assert not host["calls"]  # nothing to observe, nothing asked
    (host["records"] / "gpu_compose.json").write_text("not json")
    (host["records"] / "vfio_passthrough.json").mkdir()  # a probe of it fails: left to that probe
    (host["records"] / "notes.txt").write_text("not a record")
    fleet["daemon.json"].unlink()
    fleet["daemon.json"].mkdir()  # the toolkit's probe fails on it: left to that probe
    host["systemctl_fails"] = True  # every record with units is left to its probe
    records = module({"state": "observe", "path": str(host["records"])})["records"]
    assert sorted(records) == [str(host["records"] / name) for name in
                               ("gpu_compose.json", "gpu_settings.json", "nvidia_container_toolkit.json", "nvidia_driver.json",
                                "vfio_passthrough.json")]
    assert "not valid JSON" in records[str(host["records"] / "gpu_compose.json")]["problem"]
    assert str(host["records"] / "vfio_passthrough.json") in records[str(host["records"] / "vfio_passthrough.json")]["live"]
    assert str(fleet["daemon.json"]) in records[str(host["records"] / "nvidia_container_toolkit.json")]["live"]
    assert records[str(host["records"] / "nvidia_driver.json")]["live"].startswith("systemctl show failed")
    assert records[str(host["records"] / "gpu_settings.json")]["live"].startswith("systemctl show failed")


def test_a_probe_answers_from_the_observation_without_a_remote_call(module, host, fleet, monkeypatch):
    monkeypatch.setattr(action_plugin, "RECORD_DIR", str(host["records"]))  # the roles' /var/lib/gpuhost/converged
    controller = Controller(module)
    observation = controller.observe()
    assert len(controller.remote) == 1 and controller.remote[0]["path"] == str(host["records"])
    assert controller.vars["ansible_facts"][FACT] == {"id": observation["id"], "playbook": PLAYBOOK, "trusted": True, "used": []}
    controller.remote.clear()
    path = host["records"] / "nvidia_driver.json"
    local = controller.probe(path)
    assert not controller.remote
    assert live(local) == module({"state": "probe", "path": str(path), "inputs_digest": "d"})
    assert local["converged"] and local["outputs"] == {"report": ["nvidia_driver"]}
    assert local["ansible_facts"][FACT]["used"] == [str(path)] and local["ansible_facts"][FACT]["trusted"]
    # A changed input is not converged, and answered locally too.
    other = controller.probe(host["records"] / "gpu_settings.json", digest="e")
    assert not controller.remote and "inputs changed" in other["drift"][0] and other["outputs"] == {}


@pytest.mark.parametrize("seed", range(40))
def test_the_local_answer_is_the_live_one_on_the_same_host(module, host, tmp_path, seed):
    """Property: for any records and any host state, a probe answered from a fresh observation equals the module's."""
    rng = random.Random(seed)
    files = [tmp_path / ("f%d" % index) for index in range(4)]
    for path in files:
        if rng.random() < 0.8:
            path.write_text("v1 %s\n" % path.name)
    packages, units = ["p1", "p2", "p3"], ["u1.service", "u2.service", "u3.service"]
    host["packages"].update({name: "1.0-1" for name in packages if rng.random() < 0.8})
    host["units"].update({name: rng.choice([("loaded", "enabled", "active"), ("loaded", "enabled", "failed"),
                                            ("loaded", "disabled", "inactive")]) for name in units if rng.random() < 0.8})
    paths = [host["records"] / ("role%d.json" % index) for index in range(4)]
    for path in paths:
        kind = rng.choice(["confirmed", "confirmed", "unconfirmed", "garbled", "none"])
        if kind == "garbled":
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(rng.choice(["{", "[]", '{"format": 1}']))
        elif kind != "none":
            write_record(module, path, rng.sample(files, rng.randint(0, 3)), rng.sample(packages, rng.randint(0, 3)),
                         rng.sample(units, rng.randint(0, 2)), digest=rng.choice(["d", "old"]), confirmed=kind == "confirmed")
    # Drift behind the roles' back.
    for path in files:
        if rng.random() < 0.3:
            path.unlink() if path.exists() else path.write_text("new\n")
    for name in packages:
        if rng.random() < 0.3:
            host["packages"].pop(name, None) if rng.random() < 0.5 else host["packages"].update({name: "2.0-1"})
    for name in units:
        if rng.random() < 0.3:
            host["units"][name] = ("loaded", rng.choice(["enabled", "disabled", "masked"]), rng.choice(["active", "inactive"]))
    controller = Controller(module)
    controller.observe(path=host["records"])
    fresh = dict(controller.vars["ansible_facts"])
    for path in paths:
        controller.vars["ansible_facts"] = dict(fresh)  # each probe as the first of the run
        controller.remote.clear()
        local = controller.probe(path)
        assert not controller.remote, path
        assert live(local) == module({"state": "probe", "path": str(path), "inputs_digest": "d"}), (seed, path)


def test_a_full_path_hands_every_recorded_role_back_to_the_host(module, host, fleet):
    records = host["records"]
    fleet["nouveau.conf"].write_text("edited\n")
    controller = Controller(module)
    controller.observe(path=records)
    controller.remote.clear()
    # The driver drifted: its probe says so (locally) and its full path runs, which may move what other records track.
    driver = controller.probe(records / "nvidia_driver.json")
    assert not controller.remote and not driver["converged"]
    assert controller.vars["ansible_facts"][FACT]["trusted"] is False
    host["packages"]["nvidia-smi"] = "535.274.02-1"  # what the driver's full path did
    # The toolkit's record: asked on the host now (the observation is stale).
    toolkit = controller.probe(records / "nvidia_container_toolkit.json")
    assert len(controller.remote) == 1 and controller.remote[-1]["state"] == "probe"
    assert toolkit["drift"] == ["package nvidia-smi is version 535.274.02-1, recorded 535.261.03-1"]
    # A role without a record still has none (only it writes it): answered locally.
    compose = controller.probe(records / "gpu_compose.json")
    assert len(controller.remote) == 1
    assert compose["drift"] == ["no usable record (no record at %s): the next run is a full run" % (records / "gpu_compose.json")]


def test_a_record_or_removal_makes_that_roles_entry_live(module, host, fleet):
    """The first converge: no records; each probe answers locally, and a role that recorded asks the host again."""
    records = host["records"]
    for path in list(records.iterdir()):
        path.unlink()
    controller = Controller(module)
    controller.observe(path=records)
    controller.remote.clear()
    for role in ("nvidia_driver", "nvidia_container_toolkit"):
        assert not controller.probe(records / (role + ".json"))["converged"]
    assert not controller.remote  # two probes, no remote call
    # Each role records at the end of its full path (a remote call); the roles after it still have no record.
    recorded = controller.run({"state": "record", "path": str(records / "nvidia_driver.json"), "inputs_digest": "d"})
    assert recorded["changed"] and len(controller.remote) == 1
    compose = controller.probe(records / "gpu_compose.json")
    assert len(controller.remote) == 1 and compose["drift"][0].startswith("no usable record (no record at")
    # A role that recorded or removed its record before its probe (not how the roles run) has it asked on the host.
    for state in ("record", "absent"):
        path = records / ("%s.json" % state)
        controller.run({"state": state, "path": str(path), "inputs_digest": "d"})
        assert str(path) in controller.vars["ansible_facts"][FACT]["used"]
        controller.remote.clear()
        # The record of a run that changed the host holds in that boot (docs/design-notes.md, the first re-run).
        expected = {"record": [], "absent": ["no usable record (no record at %s): the next run is a full run" % path]}
        assert controller.probe(path)["drift"] == expected[state]
        assert len(controller.remote) == 1


def test_each_record_answers_once_per_run(module, host, fleet):
    controller = Controller(module)
    controller.observe(path=host["records"])
    controller.remote.clear()
    path = host["records"] / "gpu_settings.json"
    assert controller.probe(path)["converged"] and not controller.remote
    fleet["daemon.json"].write_text("changed by a later play\n")
    host["units"]["gpuhost-gpu-settings.service"] = ("loaded", "disabled", "inactive")
    again = controller.probe(path)
    assert len(controller.remote) == 1 and again["drift"] == ["unit gpuhost-gpu-settings.service is disabled, recorded enabled"]


@pytest.mark.parametrize("case", ["standalone", "other run", "other playbook", "check mode", "cleared facts", "other directory"])
def test_the_probe_asks_the_host_without_this_runs_observation(module, host, fleet, tmp_path, case):
    controller = Controller(module)
    if case != "standalone":
        controller.observe(path=host["records"])
    if case == "other run":  # a fact cache holds an earlier run's fact; this run registered another observation
        controller.vars[VAR] = dict(controller.vars[VAR], id="0" * 32)
    if case == "cleared facts":
        controller.vars["ansible_facts"].pop(FACT)
    controller.remote.clear()
    path = host["records"] / "nvidia_driver.json"
    if case == "other directory":
        path = tmp_path / "elsewhere" / "nvidia_driver.json"
    result = controller.probe(path, playbook="/home/me/mine.yml" if case == "other playbook" else None, check_mode=case == "check mode")
    assert len(controller.remote) == 1 and controller.remote[0]["state"] == "probe"
    expected = module({"state": "probe", "path": str(path), "inputs_digest": "d"}, check_mode=case == "check mode")
    assert live(result) == expected
    assert ("ansible_facts" in result) == (case in ("other playbook", "check mode", "other directory"))


def test_check_mode_does_not_observe(module, host, fleet):
    controller = Controller(module)
    result = controller.observe(path=host["records"], check_mode=True)
    assert result["skipped"] and not result["changed"] and not controller.remote and "ansible_facts" not in result


def test_the_observation_status_moves_only_forward():
    observation = {"id": "a" * 32, "path": "/r", "records": {}}
    status = _converged.observation_status("a" * 32, PLAYBOOK)
    assert _converged.status_after(observation, status, "/r/x.json", "probe", True) == dict(status, used=["/r/x.json"])
    untrusted = _converged.status_after(observation, status, "/r/x.json", "probe", False)
    assert untrusted == dict(status, used=["/r/x.json"], trusted=False)
    assert _converged.status_after(observation, untrusted, "/r/x.json", "probe", True) is None  # nothing new
    for state in ("record", "absent"):
        assert _converged.status_after(observation, status, "/r/y.json", state, True)["trusted"] is False
    assert _converged.status_after(observation, dict(status, id="b" * 32), "/r/x.json", "record", True) is None
    assert _converged.status_after(None, status, "/r/x.json", "record", True) is None
    assert _converged.local_answer(observation, status, "/r/x.json", "d", "") is None  # no playbook known: ask the host


def test_the_first_rerun_answers_from_the_changing_runs_records_in_that_boot(module, host, boot, tmp_path):
    """The first re-run after a converge: the converge's records (not confirmed, written in this boot) answer from the
    one observation, with the converge's report marked as that run's; after a boot the same records ask for a full run."""
    records = host["records"]
    host["packages"]["nvidia-smi"] = "535.261.03-1"
    write_record(module, records / "nvidia_driver.json", packages=["nvidia-smi"], confirmed=False,
                 outputs={"nvidia_driver_report": ["nvidia_driver: installed nvidia-smi"], "nvidia_driver_reboot_reasons": ["new module"]})
    controller = Controller(module)
    observed = controller.observe(path=records)
    entry = observed["records"][str(records / "nvidia_driver.json")]
    assert observed["boot_id"] == "0b5e6f1a-boot-1" and entry["confirmed"] is False and entry["changed_run"]["boot_id"] == observed["boot_id"]
    controller.remote.clear()
    answer = controller.probe(records / "nvidia_driver.json")
    assert not controller.remote and (answer["converged"], answer["drift"]) == (True, [])
    assert answer["outputs"] == {"nvidia_driver_report": ["nvidia_driver: [reported by the full run of %s, which changed the host] installed nvidia-smi"
                                                          % entry["changed_run"]["at"]], "nvidia_driver_reboot_reasons": ["new module"]}
    # The same probe on the host gives the same answer.
    assert live(answer) == live(Controller(module).probe(records / "nvidia_driver.json"))
    boot["id"] = "0b5e6f1a-boot-2"
    rebooted = Controller(module)
    rebooted.observe(path=records)
    after_boot = rebooted.probe(records / "nvidia_driver.json")
    assert not after_boot["converged"] and after_boot["drift"] == [_converged.REBOOTED] and after_boot["outputs"] == {}


def test_a_full_run_asks_every_roles_probe_for_its_full_path(module, host, fleet, tmp_path):
    """gpuhost_converged_full_run (Molecule's idempotence): a role's probe answers not converged without a remote call,
    and the full path's record of an unchanged host is confirmed; a probe outside a role still asks the host."""
    controller = Controller(module)
    controller.observe(path=host["records"])
    controller.vars.update({_converged.FULL_RUN_VAR: "true", "role_name": "gpuhost.nvidia.gpu_settings", "role_path": str(tmp_path)})
    controller.remote.clear()
    path = host["records"] / "gpu_settings.json"
    answer = controller.probe(path)
    assert not controller.remote
    assert (answer["converged"], answer["drift"], answer["outputs"], answer["changed"]) == (False, [_converged.FULL_RUN], {}, False)
    recorded = controller.run({"state": "record", "path": str(path), "inputs_digest": "d", "packages": ["nvidia-smi"],
                               "units": ["nvidia-persistenced.service", "gpuhost-gpu-settings.service"], "outputs": {"report": ["gpu_settings"]}})
    assert not recorded["changed"] and recorded["converged"]
    for name in ("role_name", "role_path"):
        del controller.vars[name]
    assert controller.probe(path)["converged"]  # outside a role: the host answers
