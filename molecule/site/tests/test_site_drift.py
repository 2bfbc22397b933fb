"""The converged fast path stays honest (issue 21), on the Debian 12 host after idempotence (a full run that confirmed
the records).

First a re-run takes the fast path in every role (nothing changes, each role ends at its probe; its time and the
repair run's go to tests/output/molecule/site.fast-path.json). Then, for each role's record
(/var/lib/gpuhost/converged/<role>.json), one managed item of each kind is changed behind the roles' back: a file
edited (a runtime key in the toolkit's daemon.json), a package removed, an enabled unit disabled.
The probe (gpuhost.nvidia.gpuhost_converged run outside the roles, one playbook for every role) must name each drift;
then one run of site.yml must repair it (each drifted role changes something) and the probe must find every item as
recorded again. Last, the run right after that repair takes the fast path in every role (the records of a run that
changed the host hold in the boot it changed it in), changes nothing, and hands back the repair's report lines marked
as that run's.
This file runs after test_site.py, and the repair run writes its summaries elsewhere: the other tests read the
idempotence run's.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

SCENARIO = Path(__file__).resolve().parents[1]
REPO = SCENARIO.parents[1]
EPHEMERAL = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "."))
RECORDS = "/var/lib/gpuhost/converged"
ROLES = ["nvidia_driver", "nvidia_container_toolkit", "gpu_settings", "gpu_compose"]
# The converged probe and record, as the internal common role's probe.yml and record.yml name them.
PROBE_TASK = "gpuhost.nvidia.internal_common : Ask whether the host is as the calling role's last full run left it"
RECORD_TASK = "gpuhost.nvidia.internal_common : Write what the calling role's full run left, or remove its record"
DAEMON_JSON = "/etc/docker/daemon.json"
# The shared Molecule configuration asks every role for its full path (gpuhost_converged_full_run, for idempotence):
# these runs are the ones a user makes, with the fast path.
FAST = ("-e", "gpuhost_converged_full_run=false")


def playbook(tmp_path: Path, name: str, plays: list, *extra: str) -> dict:
    """Run plays against the scenario's inventory with the JSON callback; its parsed output."""
    path = tmp_path / name
    path.write_text(json.dumps(plays), encoding="utf-8")
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json", GPUHOST_RECORD_RUNS="0")
    proc = subprocess.run(["ansible-playbook", "-i", os.environ["MOLECULE_INVENTORY_FILE"], str(path), *extra],
                          env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    return json.loads(proc.stdout)


def probe(tmp_path: Path, instance: str, records: dict[str, dict]) -> dict[str, dict]:
    """The probe of every role against its record's own inputs digest (the inputs digest is unit-tested)."""
    tasks = [{"name": role, "gpuhost.nvidia.gpuhost_converged": {
        "state": "probe", "path": f"{RECORDS}/{role}.json", "inputs_digest": record["inputs_digest"]}}
        for role, record in records.items()]
    result = playbook(tmp_path, "probe.json", [{"hosts": instance, "gather_facts": False, "tasks": tasks}])
    return {t["task"]["name"]: t["hosts"][instance] for t in result["plays"][0]["tasks"]}


def observation(run: dict, instance: str) -> dict[str, dict]:
    """What site.yml's one observation call (gpuhost_converged state=observe) found, by role."""
    found = [t["hosts"][instance] for p in run["plays"] for t in p["tasks"]
             if t["task"]["name"] == "Observe what every role's converged record lists, in one call" and instance in t["hosts"]]
    assert len(found) == 1 and not found[0].get("skipped"), found
    return {Path(path).stem: entry for path, entry in found[0]["records"].items()}


def assert_fast_path(run: dict, instance: str) -> None:
    """Each role's play answered "converged" before the role, on the controller (site.yml's gpuhost_converged task with
    role:, whose result names the role), so the role was not entered: no role ran its own probe or reached its record
    task at the end of the full path, and the run changed nothing. The probe and the record are the internal common
    role's tasks, included by each role: the role is the record's name in the result's path."""
    def roles_that_ran(suffix: str) -> set[str]:
        return {Path(t["hosts"][instance]["path"]).stem for p in run["plays"] for t in p["tasks"]
                if t["task"]["name"].endswith(suffix) and instance in t["hosts"]
                and not t["hosts"][instance].get("skipped") and t["hosts"][instance].get("path")}
    # Only that task's result names a role (its "role").
    before = {t["hosts"][instance]["role"]: {k: v for k, v in t["hosts"][instance].items() if k in ("converged", "drift")}
              for p in run["plays"] for t in p["tasks"]
              if instance in t["hosts"] and t["hosts"][instance].get("role") in ROLES}
    ended = {role for role, answer in before.items() if answer.get("converged")}
    entered = roles_that_ran(PROBE_TASK) | roles_that_ran(RECORD_TASK)
    # On a failure, what each role's question answered (its drift, or why the observation could not answer) says why.
    assert ended == set(ROLES) and not entered and run["stats"][instance]["changed"] == 0, (ended, entered, run["stats"], before)


def test_probe_sees_each_drift_and_one_run_repairs_it(host, gpuhost_instance, tmp_path):
    if not gpuhost_instance.startswith("gpuhost-debian12"):
        pytest.skip("the drift check runs on the Debian 12 host")
    (tmp_path / "summaries").mkdir()  # the re-runs write their summaries here, not over the idempotence run's
    records = {role: json.loads(host.file(f"{RECORDS}/{role}.json").content_string) for role in ROLES}
    assert all(r["outputs"] for r in records.values()), "every role recorded what it reports"
    converged = probe(tmp_path, gpuhost_instance, records)
    assert {role: (r["converged"], r["drift"]) for role, r in converged.items()} == {role: (True, []) for role in ROLES}
    # The idempotence run confirmed the records, so this re-run takes the fast path in every role: nothing changes
    # and each role ends at its probe.
    start = time.monotonic()
    fast = playbook(tmp_path, "fast.json", [{"ansible.builtin.import_playbook": str(SCENARIO / "converge.yml")}],
                    "--limit", gpuhost_instance, "-e", f"gpuhost_summary_dir={tmp_path / 'summaries'}", *FAST)
    timings = {"fast_rerun_s": round(time.monotonic() - start, 1)}

    assert_fast_path(fast, gpuhost_instance)
    # The probes answered from site.yml's one observation of every record: it found each one confirmed and undrifted.
    observed = observation(fast, gpuhost_instance)
    assert {role: (observed[role]["confirmed"], observed[role]["drift"]) for role in ROLES} == {role: (True, []) for role in ROLES}

    expected: dict[str, list[str]] = {role: [] for role in ROLES}
    for role, record in records.items():
        # A file: the toolkit's runtime key in daemon.json, else the first managed file that exists.
        if role == "nvidia_container_toolkit":
            host.check_output("python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); d[\"runtimes\"][\"nvidia\"][\"path\"]=\"/usr/bin/false\";"
                              " json.dump(d, open(sys.argv[1], \"w\"))' %s", DAEMON_JSON)
            expected[role].append(f"file {DAEMON_JSON} changed")
        else:
            path = next(p for p, digest in sorted(record["files"].items()) if digest and not p.endswith(".json"))
            host.check_output("printf '\\n# gpuhost drift test\\n' >> %s", path)
            expected[role].append(f"file {path} changed")
        # A package removed under the roles' feet: the first one dpkg removes without breaking another package's
        # dependencies (apt would refuse to install anything on a broken system), and not a DKMS one (dkms runs).
        package = None
        for name in (p for p, v in sorted(record["packages"].items(), reverse=True) if v and "dkms" not in p):
            if host.run("dpkg --remove %s", name).rc == 0:
                package = name
                break
        if package:
            expected[role].append(f"package {package} is not installed")
        # An enabled unit that is still there after that removal, disabled.
        unit = next((u for u, st in sorted(record["units"].items()) if st["enabled"] == "enabled"
                     and host.check_output("systemctl show --property=LoadState --value %s", u) == "loaded"), None)
        if unit:
            host.check_output("systemctl disable %s", unit)
            expected[role].append(f"unit {unit} is disabled, recorded enabled")
    kinds = {reason.split()[0] for reasons in expected.values() for reason in reasons}
    assert kinds == {"file", "package", "unit"}, expected

    drifted = probe(tmp_path, gpuhost_instance, records)
    for role in ROLES:
        assert drifted[role]["converged"] is False
        for reason in expected[role]:
            assert any(d.startswith(reason) for d in drifted[role]["drift"]), (role, reason, drifted[role]["drift"])

    # One run of site.yml repairs every drift: each role changed something, and the probe says converged again.
    start = time.monotonic()
    repair = playbook(tmp_path, "repair.json", [{"ansible.builtin.import_playbook": str(SCENARIO / "converge.yml")}],
                      "--limit", gpuhost_instance, "-e", f"gpuhost_summary_dir={tmp_path / 'summaries'}", *FAST)
    timings["repair_run_s"] = round(time.monotonic() - start, 1)
    # The repair run's one observation named every drift, as each role's own probe did.
    observed = observation(repair, gpuhost_instance)
    for role in ROLES:
        for reason in expected[role]:
            assert any(d.startswith(reason) for d in observed[role]["drift"]), (role, reason, observed[role]["drift"])
    (REPO / "tests" / "output" / "molecule").mkdir(parents=True, exist_ok=True)
    (REPO / "tests" / "output" / "molecule" / "site.fast-path.json").write_text(json.dumps(timings) + "\n", encoding="utf-8")
    # The record task changes after any drift; the repair is what the role's other tasks changed.
    changed_roles = {t["task"]["name"].split(" : ")[0].split(".")[-1] for p in repair["plays"] for t in p["tasks"]
                     if t["hosts"].get(gpuhost_instance, {}).get("changed") and " : " in t["task"]["name"]
                     and not t["task"]["name"].endswith(RECORD_TASK) and "internal_common" not in t["task"]["name"]}
    assert changed_roles >= set(ROLES), (changed_roles, repair["stats"])
    records_after = {role: json.loads(host.file(f"{RECORDS}/{role}.json").content_string) for role in ROLES}
    again = probe(tmp_path, gpuhost_instance, records_after)
    # Every mutated item is as recorded again. A repair that left the host exactly as the confirmed record says keeps
    # it confirmed; otherwise the record names the repair run and this boot, in which it holds.
    assert {role: (r["converged"], r["drift"]) for role, r in again.items()} == {role: (True, []) for role in ROLES}, again
    changing = [role for role, record in records_after.items() if not record["confirmed"]]
    assert all(records_after[role]["changed_run"]["at"] for role in changing), records_after

    # The first re-run after the repair takes the fast path in every role, without a confirming full run, and its
    # summary says which lines the repair run reported.
    start = time.monotonic()
    first_rerun = playbook(tmp_path, "first-rerun.json", [{"ansible.builtin.import_playbook": str(SCENARIO / "converge.yml")}],
                           "--limit", gpuhost_instance, "-e", f"gpuhost_summary_dir={tmp_path / 'summaries'}", *FAST)
    timings["first_rerun_after_repair_s"] = round(time.monotonic() - start, 1)
    (REPO / "tests" / "output" / "molecule" / "site.fast-path.json").write_text(json.dumps(timings) + "\n", encoding="utf-8")
    assert_fast_path(first_rerun, gpuhost_instance)
    summary = (tmp_path / "summaries" / f"{gpuhost_instance}.txt").read_text(encoding="utf-8")
    for role in changing:
        marked = f"{role}: [reported by the full run of {records_after[role]['changed_run']['at']}, which changed the host]"
        assert marked in summary, (role, summary)
