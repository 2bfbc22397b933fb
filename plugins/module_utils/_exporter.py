# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The gpu_exporter role's choice of exporter and DCGM package, as a pure function of the request, the host's family
and the GPU facts.

Private to this collection: no compatibility promise outside gpuhost.nvidia.

DCGM 4 is split by CUDA major (``datacenter-gpu-manager-4-cuda<major>``); the major is the one the driver reports
(the facts' ``driver.cuda_version``), else the highest CUDA of the driver branch the run installs (the catalog:
branch 580 reports CUDA 13.0). The role installs DCGM with apt from the CUDA repository nvidia_driver configured;
NVIDIA publishes no DCGM for Arch Linux, and this role does not install it with dnf yet, so ``auto`` chooses
nvidia_gpu_exporter on those families and says why, and an explicit ``dcgm`` there is refused before anything runs.
"""

from __future__ import annotations

import typing as t

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _catalog
from ansible_collections.gpuhost.nvidia.plugins.module_utils._ids import version_tuple

# The os_family values (Ansible's) whose hosts this role installs DCGM on, and why not on the others it knows.
DCGM_FAMILIES = ("Debian",)
NO_DCGM = {
    "Archlinux": "NVIDIA publishes no DCGM for Arch Linux (its CUDA repositories cover Debian, Ubuntu, RHEL/Rocky, "
                 "SLES and Amazon/Azure Linux)",
    "RedHat": "NVIDIA publishes DCGM in the CUDA rhel8/rhel9/rhel10 repositories, but this role installs it with apt "
              "only so far",
}


def dcgm_cuda_major(request: t.Any, facts: t.Mapping[str, t.Any] | None, branch: t.Any) -> tuple[int | None, str]:
    """The CUDA major of the DCGM package and where it came from; (None, why) when nothing tells it."""
    if request not in (None, ""):
        return int(request), "gpu_exporter_dcgm_cuda_major"
    driver = (facts or {}).get("driver") if isinstance((facts or {}).get("driver"), t.Mapping) else {}
    parsed = version_tuple(driver.get("cuda_version"))
    if parsed:
        return parsed[0], "the driver's CUDA %s (facts)" % driver.get("cuda_version")
    for source, value in (("the facts' driver branch", driver.get("branch")), ("nvidia_driver_branch", branch)):
        cuda = _catalog.max_cuda_for_branch(value) if value not in (None, "") else None
        if cuda:
            return int(cuda.split(".")[0]), "%s %s (CUDA %s)" % (source, value, cuda)
    return None, ("neither the GPU facts (driver.cuda_version, driver.branch) nor nvidia_driver_branch tell the driver's "
                  "CUDA major; set gpu_exporter_dcgm_cuda_major (12 or 13: the major nvidia-smi reports)")


def plan(kind: str, consumer_only: bool, os_family: str, facts: t.Mapping[str, t.Any] | None, cuda_major: t.Any = None,
         branch: t.Any = None) -> dict[str, t.Any]:
    """``{kind, cuda_major, notes, errors}``: the exporter to run, the DCGM package's CUDA major (dcgm only), what the
    report should say about the choice, and every reason the request cannot be met (empty when it can)."""
    notes: list[str] = []
    errors: list[str] = []
    chosen = kind
    if kind == "auto":
        chosen = "nvidia_gpu_exporter" if consumer_only else "dcgm"
        if chosen == "dcgm" and os_family not in DCGM_FAMILIES:
            chosen = "nvidia_gpu_exporter"
            notes.append("nvidia_gpu_exporter instead of DCGM on %s: %s" % (os_family, NO_DCGM.get(
                os_family, "this role installs DCGM on Debian and Ubuntu only")))
    elif kind == "dcgm" and os_family not in DCGM_FAMILIES:
        errors.append("gpu_exporter_kind is dcgm, but %s; use gpu_exporter_kind: nvidia_gpu_exporter (or auto) on this host"
                      % NO_DCGM.get(os_family, "this role installs DCGM on Debian and Ubuntu only (os_family %s)" % os_family))
    major = None
    if chosen == "dcgm" and not errors:
        major, source = dcgm_cuda_major(cuda_major, facts, branch)
        if major is None:
            errors.append(source)
        else:
            notes.append("DCGM for CUDA %d (datacenter-gpu-manager-4-cuda%d), from %s" % (major, major, source))
    return {"kind": chosen, "cuda_major": major, "notes": notes, "errors": errors}
