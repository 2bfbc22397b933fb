# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Filters of the rolling upgrade (playbooks/upgrade.yml): gpu_busy_processes, gpu_busy_unknown, gpu_upgrade_summary,
and the internal gpu_upgrade_targets and gpu_upgrade_post_check.

Their documentation is in the sidecar .yml files. The targets and the post-check live in module_utils/_upgrade.py.
"""

from __future__ import annotations

import re
import typing as t
from collections.abc import Mapping

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuhost.nvidia.plugins.module_utils._gpu_schema import process_view
from ansible_collections.gpuhost.nvidia.plugins.plugin_utils._filter_args import gpu_facts, guarded, mapping, sequence
from ansible_collections.gpuhost.nvidia.plugins.plugin_utils._lazy import module_utils

# Imported when a filter of this file first runs, not when Ansible loads the file (plugin_utils/_lazy.py).
_upgrade = module_utils("_upgrade")

# The columns of the summary table, in order, with the entry key each one shows.
COLUMNS = (("HOST", "host"), ("STATUS", "status"), ("STEP", "step"), ("DRIVER", "driver"), ("TOOLKIT", "toolkit"),
           ("REBOOTED", "rebooted"), ("NOTE", "message"))


def _facts_or_none(facts: t.Any, name: str) -> t.Any:
    if facts is not None and not isinstance(facts, Mapping):
        raise AnsibleFilterError("%s expects the GPU facts (a dict), got %s" % (name, type(facts).__name__))
    return facts


def gpu_busy_processes(facts: t.Any) -> list[str]:
    """The processes the GPU facts list, one line each: ``name (pid N) on GPU i [MIG gi/ci], M MiB``. A GPU whose
    processes cannot be known adds nothing here: gpu_busy_unknown names it."""
    if _facts_or_none(facts, "gpu_busy_processes") is None:
        return []
    found = []
    for proc in process_view(facts)["processes"]:
        line = "%s (pid %s) on %s" % (proc.get("name") or "?", proc["pid"], proc["where"])
        if proc.get("gpu_instance_id") is not None:
            line += " MIG %s/%s" % (proc.get("gpu_instance_id"), proc.get("compute_instance_id"))
        if proc.get("used_memory_mib") is not None:
            line += ", %s MiB" % proc["used_memory_mib"]
        found.append(" ".join(line.split()))
    return found


def gpu_busy_unknown(facts: t.Any) -> list[str]:
    """One line per GPU whose processes cannot be known, with why (``GPU 0: <reason>``); one line for facts that are
    missing (null) or have no GPU list. Empty when every GPU's processes were read."""
    _facts_or_none(facts, "gpu_busy_unknown")
    return [" ".join(("%s: %s" % (u["gpu"], u["reason"]) if u["gpu"] else u["reason"]).split())
            for u in process_view(facts)["unknown"]]


# A host's error text reaches the table: no control character (an ESC would restyle the terminal, a CR overwrite the
# line) and no unpaired surrogate survives, and a cell is cut.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")


def _cell(value: t.Any) -> str:
    if value is None or value == "":
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    text = " ".join(_CONTROL.sub(" ", str(value)).split())
    return text if len(text) <= 300 else text[:299] + "…"


def _moved(entry: Mapping, what: str) -> str | None:
    before, after = entry.get(what + "_before"), entry.get(what + "_after")
    if before is None and after is None:
        return None
    if after is None or before == after:
        return str(before if after is None else after)
    return "%s -> %s" % (before if before is not None else "?", after)


def _normalise(name: t.Any, entry: t.Any) -> dict[str, t.Any]:
    """One host's row: a missing entry was never reached, a ``started`` one fell out (unreachable) in its step."""
    if not isinstance(entry, Mapping) or not entry:
        return {"host": name, "status": "not reached", "message": "no record: unreachable before its turn, or the run ended"}
    # A status of another type (a list, a dict) is shown as text: the table reports it, it does not decide anything.
    row = {"host": _cell(entry.get("host") or name), "status": _cell(entry.get("status") or "?"), "step": entry.get("step"),
           "driver": _moved(entry, "driver"), "toolkit": _moved(entry, "toolkit"), "rebooted": entry.get("rebooted"),
           "message": entry.get("message")}
    if row["status"] == "started":
        row["status"] = "not finished"
        row["message"] = row["message"] or "the host fell out of the play (unreachable)"
    return row


def gpu_upgrade_summary(entries: t.Any, names: t.Any = None) -> dict[str, t.Any]:
    """The roll's table (a line per host, in ``names`` order) and the hosts that did not finish, with why."""
    if not isinstance(entries, (list, tuple)):
        raise AnsibleFilterError("gpu_upgrade_summary expects a list of per-host entries")
    names = sequence(names, "gpu_upgrade_summary: names", "give one inventory name per entry") if names is not None else [None] * len(entries)
    if len(names) != len(entries):
        raise AnsibleFilterError("gpu_upgrade_summary: %d names for %d entries" % (len(names), len(entries)))
    rows = [_normalise(name, entry) for name, entry in zip(names, entries)]
    cells = [[_cell(row.get(key)) for _title, key in COLUMNS] for row in rows]
    widths = [max([len(title)] + [len(line[i]) for line in cells]) for i, (title, _key) in enumerate(COLUMNS)]
    widths[-1] = 0  # the note is last and never padded
    table = ["  ".join(title.ljust(width) for (title, _key), width in zip(COLUMNS, widths)).rstrip()]
    table += ["  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in cells]
    failed = [row for row in rows if row["status"] not in ("ok", "skipped")]
    return {
        "table": table,
        "failed": [row["host"] for row in failed],
        "reasons": ["%s%s: %s" % (row["host"], " (%s)" % _cell(row["step"]) if row.get("step") else "", _cell(row.get("message") or row["status"]))
                    for row in failed],
        "counts": {status: sum(1 for row in rows if row["status"] == status) for status in sorted({row["status"] for row in rows})},
    }


def gpu_upgrade_targets(driver_version: t.Any = None, driver_branch: t.Any = None, toolkit_version: t.Any = None) -> dict[str, t.Any]:
    """The roll's targets, checked before the roll touches a host: ``{driver_version, driver_branch, toolkit_version,
    errors}``."""
    wanted, errors = _upgrade.targets(driver_version, driver_branch, toolkit_version)
    return dict(wanted, errors=errors)


def _flag(value: t.Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise AnsibleFilterError("gpu_upgrade_post_check: %s must be true or false, got %r" % (name, value))
    return value


def gpu_upgrade_post_check(
    facts: t.Any,
    packages: t.Any,
    targets: t.Any,
    driver: t.Any = True,
    toolkit: t.Any = True,
    names: t.Any = None,
    check_loaded: t.Any = True,
    packages_before: t.Any = None,
    facts_before: t.Any = None,
) -> dict[str, t.Any]:
    """One host after its upgrade against the roll's targets (module_utils/_upgrade.py post_check)."""
    facts = gpu_facts(facts, "gpu_upgrade_post_check: the GPU facts")
    targets = mapping(targets, "gpu_upgrade_post_check: targets")
    if not isinstance(targets.get("errors", []), list):
        raise AnsibleFilterError("gpu_upgrade_post_check: targets.errors must be the list gpu_upgrade_targets returns, got %r"
                                 % (targets.get("errors"),))
    if targets.get("errors"):
        raise AnsibleFilterError("gpu_upgrade_post_check: the targets are wrong: %s" % "; ".join(map(str, targets["errors"])))
    problems = _upgrade.check_packages_arguments(packages, names) + _upgrade.check_packages_arguments(packages_before, None)
    if problems:
        raise AnsibleFilterError("gpu_upgrade_post_check: %s" % "; ".join(problems))
    wanted = {key: targets.get(key) or "" for key in ("driver_version", "driver_branch", "toolkit_version")}
    for key, value in wanted.items():
        if not isinstance(value, str):
            raise AnsibleFilterError("gpu_upgrade_post_check: targets.%s must be a string, got %r" % (key, value))
    return _upgrade.post_check(
        facts, packages or {}, wanted, driver=_flag(driver, "driver"), toolkit=_flag(toolkit, "toolkit"), names=list(names or []),
        check_loaded=_flag(check_loaded, "check_loaded"), packages_before=packages_before or {},
        facts_before=gpu_facts(facts_before, "gpu_upgrade_post_check: facts_before"),
    )


class FilterModule:
    def filters(self) -> dict[str, t.Callable[..., t.Any]]:
        return guarded({
            "gpu_busy_processes": gpu_busy_processes,
            "gpu_busy_unknown": gpu_busy_unknown,
            "gpu_upgrade_summary": gpu_upgrade_summary,
            "gpu_upgrade_targets": gpu_upgrade_targets,
            "gpu_upgrade_post_check": gpu_upgrade_post_check,
        })
