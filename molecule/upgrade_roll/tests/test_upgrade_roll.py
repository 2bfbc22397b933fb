"""Verify the rolling upgrade (playbooks/upgrade.yml) on three hosts with serial 1.

The recorded runs (gpuhost_record) prove the order: on every host the before hook ran before the after hook, and each
host's after hook ran before the next host's before hook. dpkg's database and log show that every host moved from
driver A to driver B. Two more rolls, with a busy GPU on the second host, show that the roll refuses (or waits, then
refuses), names the process and the host, stops, and still prints the table. Two rolls to a wrong target show that
the roll fails and stops: one to a driver the repository does not have (the upgrade fails on the first batch), one
whose target is not what the host has (the post-check reads dpkg's database, not the synthetic facts, which say A).
"""

from __future__ import annotations

import functools
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
DRIVER_A, DRIVER_B = "580.126.20", "580.159.04"
# The driver's packages of NVIDIA's CUDA debian12 repository that the role installs (nvidia-driver-cuda depends on
# nvidia-smi and nvidia-persistenced at its version).
DRIVER_PACKAGES = ["nvidia-kernel-open-dkms", "nvidia-driver-cuda", "nvidia-smi", "nvidia-persistenced"]


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


def _installed(host, name: str) -> str:
    return host.check_output("dpkg-query -W -f '${Version}' %s" % name)


def test_driver_moved_from_a_to_b(host) -> None:
    """dpkg has every driver package at B, and its log shows the upgrade from A (prepare) to B (the roll)."""
    for name in DRIVER_PACKAGES:
        assert _installed(host, name) == DRIVER_B + "-1", name
    log = host.file("/var/log/dpkg.log").content_string
    for name in DRIVER_PACKAGES:
        assert re.search(r" upgrade %s:\S+ %s-1 %s-1$" % (re.escape(name), re.escape(DRIVER_A), re.escape(DRIVER_B)), log, re.M), (
            f"dpkg.log shows no upgrade of {name} from {DRIVER_A} to {DRIVER_B}")


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
    look = _outcome(result, "Gather the GPU facts with the processes (and wait while a GPU is busy or unknown, when asked)", busy)
    assert look.get("attempts") == 3, f"expected 3 looks (2 waits of 1 s), got {look.get('attempts')}"
    guard = _outcome(result, "Refuse to upgrade while processes use a GPU", busy)
    assert guard.get("failed") and "after waiting 2 s" in guard["msg"] and BUSY in guard["msg"], guard


def _stopped_after_first_batch(result: dict, failed: list[str], untouched: list[str], step: str, why: str) -> None:
    """The hosts of the first batch failed in ``step`` saying ``why``; the hosts after them never ran a task of the upgrade;
    the table and the run's final failure name the hosts and why."""
    for name in failed:
        assert _outcome(result, "Gather the system facts the roles read", name), f"{name} was not in the first batch"
    for name in untouched:
        assert not _outcome(result, "Gather the system facts the roles read", name), f"the roll went on to {name}"
        assert not _outcome(result, "Hook before the upgrade", name)
    lines = _summary_lines(result)
    for name in failed:
        assert _row(lines, name)[1:3] == ["failed", step], _row(lines, name)
    for name in untouched:
        assert _row(lines, name)[1] == "skipped", _row(lines, name)
    final = _outcome(result, "Fail the run when a host did not finish", "localhost")
    assert final.get("failed"), final
    for name in failed:
        assert f"{name} ({step})" in final["msg"], final["msg"]
    assert why in final["msg"], final["msg"]


@functools.cache
def _roll_to_a_missing_driver() -> dict:
    """serial 2 and a driver version no repository has (run once, read by the tests below)."""
    return run_playbook_json(PLAYBOOK, "-e", "nvidia_driver_version=580.999.99", "-e", "gpuhost_upgrade_serial=2", *_elsewhere())


@functools.cache
def _roll_to_a_target_the_hosts_lack() -> dict:
    """The driver role off and the target A while the hosts have B (run once, read by the tests below)."""
    return run_playbook_json(PLAYBOOK, "-e", f"nvidia_driver_version={DRIVER_A}", "-e", "gpuhost_upgrade_driver=false",
                             "-e", '{"nvidia_driver_userland": {"packages": ["nvidia-persistenced", "nvidia-smi"]}}', *_elsewhere())


def test_roll_to_a_driver_the_repository_lacks_fails_and_stops() -> None:
    """The first batch (two hosts) fails in the upgrade, naming the version; the third host is never touched."""
    first, second, third = sorted(instances())
    result = _roll_to_a_missing_driver()
    _stopped_after_first_batch(result, [first, second], [third], "upgrade", "580.999.99")
    assert not _outcome(result, "Hook after the upgrade", first)


def test_post_check_fails_a_host_that_is_not_on_the_target() -> None:
    """The post-check reads dpkg's database and fails the first host, naming both versions (the synthetic facts, on
    driver A, would have let it pass); the roll stops there."""
    first, second, third = sorted(instances())
    result = _roll_to_a_target_the_hosts_lack()
    check = _outcome(result, "Check that the driver and the container toolkit are the target versions", first)
    assert check.get("failed"), check
    assert f"the installed driver is not the target {DRIVER_A}: nvidia-persistenced {DRIVER_B}-1, nvidia-smi {DRIVER_B}-1" in check["msg"], check
    _stopped_after_first_batch(result, [first], [second, third], "post-check", f"not the target {DRIVER_A}")
    assert _row(_summary_lines(result), first)[3] == DRIVER_B, "the table does not show the driver the host has"


def test_failed_rolls_left_every_host_on_b(host) -> None:
    _roll_to_a_missing_driver()
    _roll_to_a_target_the_hosts_lack()
    for name in DRIVER_PACKAGES:
        assert _installed(host, name) == DRIVER_B + "-1", f"{name} moved in a roll that failed"
