"""Shared testinfra helpers for the gpuhost.nvidia Molecule scenarios.

Each scenario's tests/conftest.py does ``from gpuhost_testinfra import *``. The
``host`` fixture talks to the scenario's podman containers through testinfra's
fast ``podman://`` backend (about 1 s instead of 20 s for the ansible backend),
``converge_in_check_mode`` re-runs the scenario's converge playbook with
``--check`` and reports every task that would still change something, and
``check_mode_predicts_converge`` runs prepare + converge in check mode and then for
real on a fresh twin container, so a test can assert that check mode told the truth.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import testinfra
import yaml


def _instances() -> list[str]:
    config = os.environ.get("MOLECULE_INSTANCE_CONFIG")
    if not config or not Path(config).is_file():
        raise RuntimeError("MOLECULE_INSTANCE_CONFIG is not set or missing: run these tests through `molecule verify`")
    return [entry["instance"] for entry in yaml.safe_load(Path(config).read_text(encoding="utf-8"))]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "gpuhost_instance" in metafunc.fixturenames:
        metafunc.parametrize("gpuhost_instance", _instances(), scope="module")


@pytest.fixture(scope="module")
def host(gpuhost_instance: str):  # noqa: D401 - pytest fixture
    """testinfra host for one podman test container."""
    return testinfra.get_host(f"podman://{gpuhost_instance}")


def run_playbook_json(playbook: str, *extra: str, limit: str | None = None, inventory: str | None = None) -> dict:
    """Run a playbook with the JSON callback (default: against the scenario inventory) and return its result."""
    env = dict(os.environ)
    env["ANSIBLE_STDOUT_CALLBACK"] = "ansible.builtin.json"
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


@functools.cache
def scenario_check_run() -> dict:
    """The scenario's converge.yml in check mode, run once for all its hosts (the JSON callback's result)."""
    return run_playbook_json(str(Path(os.environ["MOLECULE_SCENARIO_DIRECTORY"]) / "converge.yml"), "--check", "--diff")


def converge_in_check_mode(hostname: str) -> tuple[dict, list[str]]:
    """Run converge.yml with --check --diff; return the host's stats and the tasks that would change."""
    playbook = str(Path(os.environ["MOLECULE_SCENARIO_DIRECTORY"]) / "converge.yml")
    result = run_playbook_json(playbook, "--check", "--diff", limit=hostname)
    stats = result.get("stats", {}).get(hostname)
    if stats is None:
        raise AssertionError(f"check-mode converge produced no stats for {hostname}: {result.get('stats')}")
    return stats, changed_tasks(result, hostname)


def wait_for_systemd(name: str) -> None:
    """Wait until systemd in container ``name`` has finished booting."""
    for _attempt in range(60):
        state = subprocess.run(["podman", "exec", name, "systemctl", "is-system-running"], capture_output=True, text=True, check=False)
        if state.stdout.strip() in ("running", "degraded"):
            return
        time.sleep(1)
    raise AssertionError(f"systemd in {name} did not finish booting")


def check_mode_predicts_converge(instance: str) -> tuple[list[str], list[str]]:
    """On a fresh twin of ``instance``: run prepare.yml, then converge.yml in check mode, then for real.

    Returns (tasks check mode said would change, tasks the real run changed). A role whose
    check mode tells the truth gives two equal lists.
    """
    image = subprocess.run(["podman", "inspect", "--format", "{{.ImageName}}", instance], capture_output=True, text=True, check=True).stdout.strip()
    twin = f"{instance}-predict"
    scenario = Path(os.environ["MOLECULE_SCENARIO_DIRECTORY"])
    subprocess.run(["podman", "rm", "-f", twin], capture_output=True, check=False)
    subprocess.run(["podman", "run", "-d", "--name", twin, "--hostname", twin, "--systemd=always", image, "/sbin/init"], capture_output=True, check=True)
    try:
        wait_for_systemd(twin)
        with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as inv:
            yaml.safe_dump({"all": {"hosts": {twin: {"ansible_connection": "containers.podman.podman",
                                                     "ansible_python_interpreter": "/usr/bin/python3"}}}}, inv)
        try:
            if (scenario / "prepare.yml").is_file():
                prepared = run_playbook_json(str(scenario / "prepare.yml"), inventory=inv.name)
                assert prepared["stats"][twin]["failures"] == 0, prepared["stats"]
            check = run_playbook_json(str(scenario / "converge.yml"), "--check", inventory=inv.name)
            real = run_playbook_json(str(scenario / "converge.yml"), inventory=inv.name)
        finally:
            os.unlink(inv.name)
        for label, result in (("check-mode", check), ("real", real)):
            stats = result["stats"][twin]
            assert stats["failures"] == 0 and stats["unreachable"] == 0, f"{label} converge on a fresh host failed: {stats}"
        return changed_tasks(check, twin), changed_tasks(real, twin)
    finally:
        subprocess.run(["podman", "rm", "-f", twin], capture_output=True, check=False)
