"""Verify the rolling upgrade (playbooks/upgrade.yml) on three hosts with serial 1.

The recorded runs (gpuhost_record) prove the order: on every host the before hook ran before the after hook, and each
host's after hook ran before the next host's before hook. Two more rolls, with a busy GPU on the second host, show
that the roll refuses (or waits, then refuses), names the process and the host, stops, and still prints the table.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

import pytest
from gpuhost_testinfra import (  # noqa: F401  pylint: disable=unused-import
    instances,
    recorded_runs,
    run_playbook_json,
    test_check_mode_predicted_converge,
)

PLAYBOOK = str(Path(os.environ.get("MOLECULE_PROJECT_DIRECTORY", ".")) / "playbooks" / "upgrade.yml")
HOOK = re.compile(r"^hook (before|after) (\S+) at ([0-9.]+)$")
BUSY = "python3 (pid 4242) on GPU 0, 20480 MiB"


def _elsewhere() -> tuple[str, str]:
    """Extra vars that keep an extra roll's table away from the converge's upgrade.txt."""
    directory = tempfile.mkdtemp(prefix="gpuhost-upgrade-")
    return "-e", f"gpuhost_upgrade_summary_dir={directory}"


def _roll_runs() -> list[dict]:
    converge = Path(os.environ["MOLECULE_SCENARIO_DIRECTORY"]) / "converge.yml"
    return [run for run in recorded_runs() if Path(run["playbook"]).resolve() == converge.resolve()]


def _hooks(run: dict) -> list[tuple[float, str, str]]:
    """(time, before|after, host) of every hook a recorded run printed, in time order."""
    found = []
    for hostname, printed in run["printed"].items():
        for item in printed:
            match = HOOK.match(str(item["msg"]))
            if match:
                assert match.group(2) == hostname, f"{hostname} printed a hook line for {match.group(2)}"
                found.append((float(match.group(3)), match.group(1), hostname))
    return sorted(found)


def _summary_lines(result: dict) -> list[str]:
    for play in result["plays"]:
        for task in play["tasks"]:
            if task["task"]["name"] == "Show the roll":
                return task["hosts"]["localhost"]["msg"]
    raise AssertionError("the roll printed no summary table")


def _row(lines: list[str], hostname: str) -> list[str]:
    rows = [line.split() for line in lines if line.split() and line.split()[0] == hostname]
    assert len(rows) == 1, f"expected one table row for {hostname}:\n" + "\n".join(lines)
    return rows[0]


def _outcome(result: dict, task: str, hostname: str) -> dict:
    for play in result["plays"]:
        for item in play["tasks"]:
            if item["task"]["name"] == task and hostname in item["hosts"]:
                return item["hosts"][hostname]
    return {}


@pytest.mark.parametrize("kind", ["check", "real"])
def test_hooks_ran_in_order_one_host_after_the_other(kind: str) -> None:
    """before, after on host 1, then host 2, then host 3: serial 1 and the hooks around each host's upgrade."""
    runs = [run for run in _roll_runs() if run["check"] == (kind == "check")]
    assert runs, f"no recorded {kind} roll"
    hooks = [(when, host_) for _time, when, host_ in _hooks(runs[0])]
    expected = [(when, name) for name in sorted(instances()) for when in ("before", "after")]
    assert hooks == expected, f"hooks ran as {hooks}"


def test_roll_recorded_no_failure() -> None:
    for run in _roll_runs():
        assert not any(run["failed"].values()), f"a roll failed: {run['failed']}"


def test_toolkit_upgraded(host) -> None:
    assert host.package("nvidia-container-toolkit").version.startswith("1.18.0")


def test_summary_table_names_every_host() -> None:
    table = (Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "upgrade.txt").read_text(encoding="utf-8").splitlines()
    for name in instances():
        row = _row(table, name)
        assert row[1] == "ok", f"{name}: {row}"
        assert "1.18.0-1" in " ".join(row), f"{name}: the table does not show the toolkit version: {row}"


def test_busy_gpu_refused_and_roll_stopped() -> None:
    """The second host's GPU is busy: the roll refuses it naming the process, skips the third, and fails the run."""
    first, busy, third = sorted(instances())
    result = run_playbook_json(PLAYBOOK, "-e", "gpuhost_test_busy=true", *_elsewhere())
    guard = _outcome(result, "Refuse to upgrade while processes use a GPU", busy)
    assert guard.get("failed"), f"the guard let {busy} through: {guard}"
    assert BUSY in guard["msg"] and busy in guard["msg"], guard["msg"]
    assert _outcome(result, "Refuse to upgrade while processes use a GPU", first).get("failed") is not True
    assert not _outcome(result, "Hook before the upgrade", busy), "the before hook ran on the busy host"
    assert _outcome(result, "Hook before the upgrade", first), "the first host was not upgraded"
    assert not _outcome(result, "Gather the system facts the roles read", third), "the roll went on after the busy host"
    lines = _summary_lines(result)
    assert _row(lines, first)[1] == "ok"
    assert _row(lines, busy)[1:3] == ["failed", "guard"], _row(lines, busy)
    assert _row(lines, third)[1] == "skipped"
    final = _outcome(result, "Fail the run when a host did not finish", "localhost")
    assert final.get("failed") and busy in final["msg"] and BUSY in final["msg"], final


def test_busy_gpu_waited_then_refused() -> None:
    """gpuhost_upgrade_busy: wait looks again every second for 2 s, then refuses, naming the process and the wait."""
    busy = sorted(instances())[1]
    result = run_playbook_json(PLAYBOOK, "-e", "gpuhost_test_busy=true", "-e", "gpuhost_upgrade_busy=wait",
                               "-e", "gpuhost_upgrade_busy_timeout=2", "-e", "gpuhost_upgrade_busy_delay=1", *_elsewhere(), limit=busy)
    look = _outcome(result, "Gather the GPU facts with the processes (and wait while a GPU is busy, when asked)", busy)
    assert look.get("attempts") == 3, f"expected 3 looks (2 waits of 1 s), got {look.get('attempts')}"
    guard = _outcome(result, "Refuse to upgrade while processes use a GPU", busy)
    assert guard.get("failed") and "after waiting 2 s" in guard["msg"] and BUSY in guard["msg"], guard
