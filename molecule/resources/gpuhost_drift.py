"""Drift checks of the roles' converged fast path (issue 21), shared by the scenarios that run them.

A scenario's drift test reads each host's record (/var/lib/gpuhost/converged/<role>.json), probes every host with
gpuhost.nvidia.gpuhost_converged against the record's own inputs digest (one playbook for all hosts; the inputs
digest itself is unit-tested), changes managed items behind the role's back, probes again, runs its converge once and
probes a last time. molecule/site/tests/test_site_drift.py does the same for every role of site.yml on one host.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from gpuhost_testinfra import run_playbook_json

RECORDS = "/var/lib/gpuhost/converged"
UNCONFIRMED = "the last full run changed what the role manages: the next full run confirms that it changes nothing"


def sh(instance: str, script: str, *args: str) -> str:
    """Run a shell script in a test container; its standard output (a non-zero exit fails the test)."""
    proc = subprocess.run(["podman", "exec", instance, "sh", "-c", script, "sh", *args], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, (instance, script, proc.stdout, proc.stderr)
    return proc.stdout


def read_record(instance: str, role: str) -> dict:
    """The role's converged record on the host."""
    return json.loads(sh(instance, 'cat "$1"', f"{RECORDS}/{role}.json"))


def probe(role: str, records: dict[str, dict], workdir: Path) -> dict[str, dict]:
    """The probe's result per host, each against its own record's inputs digest."""
    path = workdir / f"probe-{role}.json"
    path.write_text(json.dumps([{
        # The host's package manager (setup's min subset): the probe asks rpm on an EL host, dpkg on Debian.
        "hosts": ",".join(records), "gather_facts": True, "gather_subset": ["min"],
        "vars": {"gpuhost_test_digests": {name: record["inputs_digest"] for name, record in records.items()}},
        "tasks": [{"name": "probe", "gpuhost.nvidia.gpuhost_converged": {
            "state": "probe", "path": f"{RECORDS}/{role}.json", "inputs_digest": "{{ gpuhost_test_digests[inventory_hostname] }}"}}],
    }]), encoding="utf-8")
    result = run_playbook_json(str(path))
    return dict(next(task for task in result["plays"][0]["tasks"] if task["task"]["name"] == "probe")["hosts"])


def named(drift: list[str], expected: list[str]) -> list[str]:
    """The expected drift sentences (by their start) that the probe did not name."""
    return [reason for reason in expected if not any(d.startswith(reason) for d in drift)]
