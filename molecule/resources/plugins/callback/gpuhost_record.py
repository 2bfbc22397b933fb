"""Test-only callback: record what each ansible-playbook run of a Molecule scenario changed.

Molecule runs converge.yml in check mode on the freshly prepared hosts (check mode's prediction),
for real (converge), again (idempotence) and in check mode once more. This callback writes one JSON
file per run to ``$MOLECULE_EPHEMERAL_DIRECTORY/gpuhost-runs/`` with the playbook, whether it ran in
check mode, and per host the names of the tasks that reported ``changed`` (in order), the tasks that
failed, what ``ansible.builtin.debug`` tasks printed, and the roles whose tasks ran or were skipped there (a
role whose play ended for the host before it started is not among them). The verify step compares those records
(gpuhost_testinfra), so no run is repeated just to look at it. Runs started by the tests themselves set GPUHOST_RECORD_RUNS=0 and are not recorded.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from ansible import context
from ansible.plugins.callback import CallbackBase

DOCUMENTATION = r"""
name: gpuhost_record
type: aggregate
short_description: Record changed tasks per host for the Molecule verifiers (test-only)
description:
  - Writes one JSON record per playbook run under E(MOLECULE_EPHEMERAL_DIRECTORY)/gpuhost-runs.
requirements:
  - enabled in callbacks_enabled
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "gpuhost_record"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._playbook = None
        self._changed: dict[str, list[str]] = {}
        self._failed: dict[str, list[str]] = {}
        self._printed: dict[str, list[dict]] = {}
        self._roles: dict[str, set[str]] = {}
        self._started = time.time()

    def v2_playbook_on_start(self, playbook):
        self._playbook = playbook._file_name

    def _host(self, result) -> str:
        """The result's host name; also notes the task's role as one that ran tasks (ran or skipped) on the host."""
        host = result._host.get_name()
        role = getattr(result._task, "_role", None)
        if role is not None:
            self._roles.setdefault(host, set()).add(role.get_name())
        return host

    def v2_runner_on_ok(self, result):
        self._changed.setdefault(self._host(result), [])
        if result._result.get("changed", False):
            self._changed[self._host(result)].append(result._task.get_name())
        if result._task.action in ("debug", "ansible.builtin.debug") and "msg" in result._result:
            self._printed.setdefault(self._host(result), []).append({"task": result._task.get_name(), "msg": result._result["msg"]})

    def v2_runner_on_skipped(self, result):
        self._changed.setdefault(self._host(result), [])

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._changed.setdefault(self._host(result), [])
        if not ignore_errors:
            self._failed.setdefault(self._host(result), []).append(result._task.get_name())

    def v2_runner_on_unreachable(self, result):
        self._failed.setdefault(self._host(result), []).append(f"unreachable: {result._task.get_name()}")

    def v2_playbook_on_stats(self, stats):
        directory = os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY")
        if not directory or os.environ.get("GPUHOST_RECORD_RUNS", "1") == "0":
            return
        runs = Path(directory) / "gpuhost-runs"
        runs.mkdir(parents=True, exist_ok=True)
        record = {
            "playbook": self._playbook,
            "check": bool(context.CLIARGS.get("check")),
            "limit": context.CLIARGS.get("subset"),
            "changed": self._changed,
            "failed": self._failed,
            "printed": self._printed,
            "roles": {host: sorted(roles) for host, roles in self._roles.items()},
            "seconds": round(time.time() - self._started, 1),
        }
        number = len(list(runs.glob("*.json"))) + 1
        tmp = runs / f".{number:03d}.tmp"
        tmp.write_text(json.dumps(record, indent=1), encoding="utf-8")
        tmp.rename(runs / f"{number:03d}.json")
