"""Shared testinfra helpers for the gpuhost.nvidia Molecule scenarios.

Each scenario's tests/conftest.py imports ``host`` and ``pytest_generate_tests`` from here. The
``host`` fixture talks to the scenario's podman containers through testinfra's ``podman://`` backend,
sending each command through the container's command agent (gpuhost_agent.py) instead of starting
``podman exec`` for it. The scenarios' test_sequence runs converge.yml in check mode on the freshly prepared hosts,
then converges for real, runs idempotence, and runs check mode once more; the test-only callback
plugins/callback/gpuhost_record.py records what each of those runs changed. The two tests below read
those records, so nothing is re-run just to look at it; a scenario's test module imports them:

* ``test_check_mode_predicted_converge``: the first check run named exactly the tasks the first real
  converge then changed (check mode told the truth on a fresh host);
* ``test_check_after_converge_changes_nothing``: the check run after converge + idempotence found
  nothing left to change.

``run_playbook_json`` runs an extra playbook (bad inputs, say) with the JSON callback; such runs are
not recorded.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import gpuhost_agent
import pytest
import testinfra.host
import yaml
from testinfra.backend.base import CommandResult
from testinfra.backend.podman import PodmanBackend


def _instances() -> list[str]:
    config = os.environ.get("MOLECULE_INSTANCE_CONFIG")
    if not config or not Path(config).is_file():
        raise RuntimeError("MOLECULE_INSTANCE_CONFIG is not set or missing: run these tests through `molecule verify`")
    return [entry["instance"] for entry in yaml.safe_load(Path(config).read_text(encoding="utf-8"))]


def instances() -> list[str]:
    """The scenario's test containers, as Molecule created them."""
    return _instances()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "gpuhost_instance" in metafunc.fixturenames:
        metafunc.parametrize("gpuhost_instance", _instances(), scope="module")


class _AgentBackend(PodmanBackend):
    """testinfra's podman backend, with each command run by the container's agent when it has one."""

    def run(self, command: str, *args: str, **kwargs) -> CommandResult:
        path = gpuhost_agent.socket_path(self.name)
        if path is None or self.user is not None:
            return super().run(command, *args, **kwargs)
        cmd = self.get_command(command, *args)
        rc, stdout, stderr = gpuhost_agent.call(path, ["/bin/sh", "-c", cmd])
        return self.result(rc, self.encode(cmd), stdout, stderr)


@pytest.fixture(scope="module")
def host(gpuhost_instance: str):  # noqa: D401 - pytest fixture
    """testinfra host for one podman test container."""
    backend = _AgentBackend(gpuhost_instance)
    test_host = testinfra.host.Host(backend)
    backend.set_host(test_host)
    return test_host


def run_playbook_json(playbook: str, *extra: str, limit: str | None = None, inventory: str | None = None) -> dict:
    """Run a playbook with the JSON callback (default: against the scenario inventory) and return its result."""
    env = dict(os.environ)
    env["ANSIBLE_STDOUT_CALLBACK"] = "ansible.builtin.json"
    env["GPUHOST_RECORD_RUNS"] = "0"
    cmd = ["ansible-playbook", "-i", inventory or os.environ["MOLECULE_INVENTORY_FILE"], playbook, *extra]
    if limit:
        cmd += ["--limit", limit]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError as exc:
        raise AssertionError(f"{' '.join(cmd)} exited {proc.returncode} without JSON:\n{proc.stdout}\n{proc.stderr}") from exc


def changed_tasks(result: dict, hostname: str) -> list[str]:
    """Names of the tasks that reported ``changed`` for one host in a JSON-callback result."""
    names = []
    for play in result.get("plays", []):
        for task in play.get("tasks", []):
            outcome = task.get("hosts", {}).get(hostname)
            if outcome and outcome.get("changed"):
                names.append(task["task"]["name"])
    return names


# How long a fresh container's systemd may take to boot. 60 s was enough on this machine, not on a nested rehearsal host
# (vfs storage, several fresh hosts started at once by the bad-input tests: systemd in one of them was still
# "starting" after 60 s, 2026-11-25).
BOOT_TIMEOUT = 240


def wait_for_systemd(name: str) -> None:
    """Wait until systemd in container ``name`` has finished booting; a timeout names the state and the jobs left."""
    deadline = time.monotonic() + BOOT_TIMEOUT
    state = ""
    while time.monotonic() < deadline:
        state = subprocess.run(["podman", "exec", name, "systemctl", "is-system-running"], capture_output=True, text=True,
                               check=False).stdout.strip()
        if state in ("running", "degraded"):
            return
        time.sleep(1)
    jobs = subprocess.run(["podman", "exec", name, "systemctl", "list-jobs", "--no-pager"], capture_output=True, text=True, check=False)
    raise AssertionError(f"systemd in {name} did not finish booting in {BOOT_TIMEOUT} s (state {state!r}); jobs left:\n"
                         f"{(jobs.stdout or jobs.stderr)[-2000:]}")


def start_fresh_host(image: str, name: str) -> None:
    """Start a fresh, unprepared systemd test container ``name`` with its command agent, as create.yml does."""
    remove_hosts([name])
    volume = gpuhost_agent.prepare([name])[name]
    subprocess.run(["podman", "run", "-d", "--name", name, "--hostname", name, "--systemd=always", "-v", volume,
                    image, "/sbin/init"], capture_output=True, check=True)
    # / as a real root filesystem has it (nested podman's vfs storage leaves it 0700; create.yml says more)
    subprocess.run(["podman", "exec", name, "chmod", "go+rx", "/"], capture_output=True, check=True)
    wait_for_systemd(name)
    gpuhost_agent.start([name])


def remove_hosts(names: list[str]) -> None:
    """Remove test containers at once, without the stop grace time (they are thrown away), and their agent dirs."""
    subprocess.run(["podman", "rm", "--force", "--ignore", "--time", "0", *names], capture_output=True, check=False)
    gpuhost_agent.forget(names)


def recorded_runs() -> list[dict]:
    """The records gpuhost_record wrote for this scenario's ansible-playbook runs, oldest first."""
    runs = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "gpuhost-runs"
    records = [json.loads(path.read_text(encoding="utf-8")) for path in sorted(runs.glob("*.json"))]
    if not records:
        raise AssertionError(f"no recorded runs under {runs}: is the gpuhost_record callback enabled?")
    return records


def _converge_runs(hostname: str) -> list[dict]:
    """Recorded runs of converge.yml that included ``hostname``, oldest first."""
    converge = Path(os.environ["MOLECULE_SCENARIO_DIRECTORY"]) / "converge.yml"
    return [run for run in recorded_runs()
            if Path(run["playbook"]).resolve() == converge.resolve() and hostname in run["changed"]]


def test_check_mode_predicted_converge(gpuhost_instance: str) -> None:
    """On the fresh host, check mode named exactly the tasks that the first real converge changed."""
    runs = _converge_runs(gpuhost_instance)
    kinds = ["check" if run["check"] else "real" for run in runs]
    assert kinds[:2] == ["check", "real"], (
        f"expected a check-mode converge before the first real one for {gpuhost_instance}, got {kinds}: "
        "the scenario's test_sequence must run `check` right after `prepare`")
    predicted, converged = runs[0], runs[1]
    for label, run in (("check-mode", predicted), ("first", converged)):
        assert not run["failed"].get(gpuhost_instance), f"{label} converge failed: {run['failed'][gpuhost_instance]}"
    assert converged["changed"][gpuhost_instance], "the first converge changed nothing: is the role doing anything?"
    said, did = predicted["changed"][gpuhost_instance], converged["changed"][gpuhost_instance]
    assert said == did, (
        f"check mode's prediction differs from the first converge on {gpuhost_instance}:\n"
        f"  predicted but not changed: {[t for t in said if t not in did]}\n"
        f"  changed but not predicted: {[t for t in did if t not in said]}\n"
        f"  predicted: {said}\n  changed:   {did}")


def test_check_after_converge_changes_nothing(gpuhost_instance: str) -> None:
    """After converge and idempotence, check mode finds nothing left to change."""
    runs = _converge_runs(gpuhost_instance)
    real = [index for index, run in enumerate(runs) if not run["check"]]
    later_checks = [run for run in runs[real[-1] + 1:] if run["check"]] if real else []
    assert later_checks, (
        f"no check-mode converge after the real ones for {gpuhost_instance}: "
        "the scenario's test_sequence must run `check` after `idempotence`")
    last = later_checks[-1]
    assert not last["failed"].get(gpuhost_instance), f"check mode after converge failed: {last['failed'][gpuhost_instance]}"
    assert last["changed"][gpuhost_instance] == [], f"check mode after converge would still change: {last['changed'][gpuhost_instance]}"
