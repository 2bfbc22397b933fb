# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Callback for the GPU tier's playbook: every task's result, by task name, into the JSON file GPU_TIER_RESULTS.

A task that failed is recorded with status ``failed`` and the module's own result, so the tier can check the failures
it expects (a power limit out of range) as well as the successes. Results are written when the playbook ends,
whether or not a task failed.
"""

from __future__ import annotations

import json
import os
import typing as t

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = r"""
name: gpu_tier_record
type: aggregate
short_description: Record every task result of the GPU tier's playbook by task name
description:
  - Test-only callback of tests/gpu; writes the file named by the environment variable E(GPU_TIER_RESULTS).
requirements:
  - The playbook written by tests/gpu/gpu_tier.py.
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "gpu_tier_record"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args: t.Any, **kwargs: t.Any) -> None:
        super().__init__(*args, **kwargs)
        self.results: dict[str, dict[str, t.Any]] = {}

    def _record(self, result: t.Any, status: str) -> None:
        task = getattr(result, "task", None) or getattr(result, "_task")
        data = getattr(result, "result", None)
        if not isinstance(data, dict):
            data = getattr(result, "_result", {})
        clean = {k: v for k, v in dict(data).items() if not k.startswith("_ansible")}
        self.results[task.get_name()] = {"status": status, "result": clean}

    def v2_runner_on_ok(self, result: t.Any) -> None:
        self._record(result, "ok")

    def v2_runner_on_failed(self, result: t.Any, ignore_errors: bool = False) -> None:
        self._record(result, "failed")

    def v2_runner_on_skipped(self, result: t.Any) -> None:
        self._record(result, "skipped")

    def v2_runner_on_unreachable(self, result: t.Any) -> None:
        self._record(result, "unreachable")

    def v2_playbook_on_stats(self, stats: t.Any) -> None:
        path = os.environ.get("GPU_TIER_RESULTS")
        if path:
            with open(path, "w", encoding="utf-8") as handle:
                json.dump(self.results, handle, indent=1, sort_keys=True, default=str)
