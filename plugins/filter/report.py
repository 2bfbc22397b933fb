# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Fleet report and Prometheus file_sd filters: gpu_fleet_report, gpu_exporter_file_sd.

Their documentation is in the sidecar .yml files. The logic lives in module_utils/_report.py.
"""

from __future__ import annotations

import typing as t

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuhost.nvidia.plugins.plugin_utils._lazy import module_utils

# Imported when a filter of this file first runs, not when Ansible loads the file (plugin_utils/_lazy.py).
_report = module_utils("_report")

_FORMATS = ("data", "json", "csv", "html")


def gpu_fleet_report(hosts: t.Any, generated_at: str = "", form: str = "data", title: str = "GPU fleet report",
                     names: t.Any = None) -> t.Any:
    """The fleet report of the hosts, as data or rendered (json, csv, html)."""
    if names is not None:
        if not isinstance(hosts, list) or not isinstance(names, list) or len(names) != len(hosts):
            raise AnsibleFilterError("gpu_fleet_report: names must list one inventory name per entry")
        hosts = [entry if isinstance(entry, dict) and entry else {"host": str(name), "status": "unreachable"}
                 for entry, name in zip(hosts, names)]
    if not isinstance(hosts, list) or not all(isinstance(h, dict) and h.get("host") for h in hosts):
        raise AnsibleFilterError("gpu_fleet_report expects a list of {host, status, facts, doctor, error} entries")
    if form not in _FORMATS:
        raise AnsibleFilterError(f"gpu_fleet_report: form must be one of {', '.join(_FORMATS)}, not {form!r}")
    report = _report.fleet_report(hosts, str(generated_at))
    if form == "json":
        return _report.report_json(report)
    if form == "csv":
        return _report.report_csv(report)
    if form == "html":
        return _report.report_html(report, str(title))
    return report


def gpu_exporter_file_sd(targets: t.Any) -> list[dict[str, t.Any]]:
    """Prometheus file_sd entries for the exporter targets."""
    if not isinstance(targets, list) or not all(isinstance(x, dict) and x.get("address") and x.get("port") for x in targets):
        raise AnsibleFilterError("gpu_exporter_file_sd expects a list of {host, address, port, kind, facts} entries")
    return _report.file_sd(targets)


class FilterModule:
    def filters(self) -> dict[str, t.Callable[..., t.Any]]:
        return {"gpu_fleet_report": gpu_fleet_report, "gpu_exporter_file_sd": gpu_exporter_file_sd}
