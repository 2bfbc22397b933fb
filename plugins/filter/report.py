# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Fleet report and Prometheus filters: gpu_fleet_report, gpu_exporter_file_sd, gpu_exporter_plan.

Their documentation is in the sidecar .yml files. The logic lives in module_utils/_report.py.
"""

from __future__ import annotations

import typing as t
from collections.abc import Mapping, Sequence

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuhost.nvidia.plugins.plugin_utils._filter_args import guarded
from ansible_collections.gpuhost.nvidia.plugins.plugin_utils._lazy import module_utils

# Imported when a filter of this file first runs, not when Ansible loads the file (plugin_utils/_lazy.py).
_report = module_utils("_report")
_exporter = module_utils("_exporter")

_FORMATS = ("data", "json", "csv", "html")


def gpu_fleet_report(hosts: t.Any, generated_at: str = "", form: str = "data", title: str = "GPU fleet report",
                     names: t.Any = None) -> t.Any:
    """The fleet report of the hosts, as data or rendered (json, csv, html).

    Only the call itself can be refused (the input is not a list, the names do not match it, an unknown form): a host
    whose entry, facts or doctor result is of the wrong shape is listed as malformed, and the others are still written.
    """
    if isinstance(hosts, (str, bytes, Mapping)) or not isinstance(hosts, Sequence):
        raise AnsibleFilterError("gpu_fleet_report expects a list of {host, status, facts, doctor, error} entries, not %s"
                                 % type(hosts).__name__)
    if names is not None and (isinstance(names, (str, bytes, Mapping)) or not isinstance(names, Sequence) or len(names) != len(hosts)):
        raise AnsibleFilterError("gpu_fleet_report: names must list one inventory name per entry")
    if not isinstance(form, str) or form not in _FORMATS:
        raise AnsibleFilterError(f"gpu_fleet_report: form must be one of {', '.join(_FORMATS)}, not {form!r}")
    report = _report.fleet_report(list(hosts), str(generated_at), names=list(names) if names is not None else None)
    if form == "json":
        return _report.report_json(report)
    if form == "csv":
        return _report.report_csv(report)
    if form == "html":
        return _report.report_html(report, _report.clean_text(str(title)))
    return report


def gpu_exporter_file_sd(targets: t.Any) -> list[dict[str, t.Any]]:
    """Prometheus file_sd entries for the exporter targets; every target that is not host:port is refused by name."""
    errors = _report.file_sd_errors(targets)
    if errors:
        raise AnsibleFilterError("gpu_exporter_file_sd: %d target(s) Prometheus could not scrape: %s"
                                 % (len(errors), "; ".join(errors)))
    return _report.file_sd(targets)


_KINDS = ("auto", "dcgm", "nvidia_gpu_exporter")


def gpu_exporter_plan(kind: t.Any, consumer_only: t.Any, os_family: t.Any, facts: t.Any = None, cuda_major: t.Any = None,
                      branch: t.Any = None, collectors: t.Any = None, proprietary: t.Any = None,
                      nvidia_gpu_exporter: t.Any = None) -> dict[str, t.Any]:
    """Internal: gpu_exporter's choice of exporter, DCGM CUDA major and -proprietary packages; a request it cannot meet
    fails naming why."""
    if kind not in _KINDS:
        raise AnsibleFilterError(f"gpu_exporter_plan: gpu_exporter_kind must be one of {', '.join(_KINDS)}, not {kind!r}")
    if not isinstance(consumer_only, bool):
        raise AnsibleFilterError(f"gpu_exporter_plan: consumer_only must be true or false, not {consumer_only!r}")
    if not isinstance(os_family, str) or not os_family:
        raise AnsibleFilterError(f"gpu_exporter_plan: os_family must be the host's ansible_facts.os_family, not {os_family!r}")
    if facts is not None and not isinstance(facts, Mapping):
        raise AnsibleFilterError(f"gpu_exporter_plan: facts must be ansible_facts.nvidia_gpu, not {type(facts).__name__}")
    if cuda_major not in (None, "") and (isinstance(cuda_major, bool) or not str(cuda_major).isdigit() or not 1 <= int(cuda_major) <= 99):
        raise AnsibleFilterError(f"gpu_exporter_plan: gpu_exporter_dcgm_cuda_major must be a CUDA major such as 13, not {cuda_major!r}")
    if collectors is not None and (isinstance(collectors, (str, bytes, Mapping)) or not isinstance(collectors, Sequence)):
        raise AnsibleFilterError("gpu_exporter_plan: collectors must be gpu_exporter_dcgm_collectors (a list of {field, type, "
                                 f"help}}), not {type(collectors).__name__}")
    if proprietary not in (None, "") and not isinstance(proprietary, bool):
        raise AnsibleFilterError("gpu_exporter_plan: gpu_exporter_dcgm_proprietary must be true, false or null (decide from "
                                 f"the GPUs' architecture), not {proprietary!r}")
    if nvidia_gpu_exporter is not None and not isinstance(nvidia_gpu_exporter, Mapping):
        raise AnsibleFilterError("gpu_exporter_plan: nvidia_gpu_exporter must be a dict of version, backend and architecture, "
                                 f"not {type(nvidia_gpu_exporter).__name__}")
    result = _exporter.plan(kind, consumer_only, os_family, facts, cuda_major, branch, collectors,
                            None if proprietary == "" else proprietary, nvidia_gpu_exporter)
    if result["errors"]:
        raise AnsibleFilterError("gpu_exporter: " + "; ".join(result["errors"]))
    return result


class FilterModule:
    def filters(self) -> dict[str, t.Callable[..., t.Any]]:
        return guarded({"gpu_fleet_report": gpu_fleet_report, "gpu_exporter_file_sd": gpu_exporter_file_sd,
                        "gpu_exporter_plan": gpu_exporter_plan})
