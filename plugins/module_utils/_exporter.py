# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The gpu_exporter role's choice of exporter and DCGM package, as a pure function of the request, the host's family
and the GPU facts.

Private to this collection: no compatibility promise outside gpuhost.nvidia.

DCGM 4 is split by CUDA major (``datacenter-gpu-manager-4-cuda<major>``); the major is the one the driver reports
(the facts' ``driver.cuda_version``), else the highest CUDA of the driver branch the run installs (the catalog:
branch 580 reports CUDA 13.0). The role installs DCGM from the CUDA repository nvidia_driver configured, with apt on
Debian and Ubuntu and with dnf on EL 8/9/10; NVIDIA publishes no DCGM for Arch Linux, so ``auto`` chooses
nvidia_gpu_exporter there and says why, and an explicit ``dcgm`` there is refused before anything runs.

Profiling fields (``DCGM_FI_PROF_*``) come from DCGM's profiling module on Ampere and older GPUs, which is in the
``datacenter-gpu-manager-4-proprietary`` packages (dcgm-exporter 4.0.4: "DCGM proprietary package for DCP metrics for Ada
and older GPUs"); Hopper and newer read them through NVML's GPM, which the core package covers. The plan installs
``-proprietary`` and ``-proprietary-cuda<major>`` when the collectors ask for a profiling field and a GPU of the facts is
older than Hopper or of an unknown architecture (docs/sources.md).
"""

from __future__ import annotations

import typing as t

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _catalog, _gpu_schema
from ansible_collections.gpuhost.nvidia.plugins.module_utils._ids import version_tuple

# The os_family values (Ansible's) whose hosts this role installs DCGM on, and why not on the others it knows.
DCGM_FAMILIES = ("Debian", "RedHat")
NO_DCGM = {
    "Archlinux": "NVIDIA publishes no DCGM for Arch Linux (its CUDA repositories cover Debian, Ubuntu, RHEL/Rocky, "
                 "SLES and Amazon/Azure Linux)",
}
_NO_DCGM_OTHER = "this role installs DCGM on Debian, Ubuntu and EL 8/9/10 only"

# The architectures whose profiling fields need DCGM's profiling module (the -proprietary packages): everything before
# Hopper. Hopper and Blackwell read them through NVML's GPM.
PROFILING_MODULE_ARCHITECTURES = ("Tesla", "Fermi", "Kepler", "Maxwell", "Pascal", "Volta", "Turing", "Ampere",
                                  "Ada Lovelace")
GPM_ARCHITECTURES = ("Hopper", "Blackwell")
PROFILING_PREFIX = "DCGM_FI_PROF_"

# nvidia_gpu_exporter's release archives: nvidia_gpu_exporter_<version>_linux_<arch>.tar.gz for x86_64 and arm64 (the
# machine names Ansible reports, mapped onto the archive's), and from 1.11.0 nvidia_gpu_exporter-nvml_<version>_linux_x86_64
# (the NVML backend, --collect.backend=nvml, built for x86_64 only). docs/sources.md.
TARBALL_ARCH = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "arm64", "arm64": "arm64"}
NVML_SINCE = (1, 11, 0)
BACKENDS = ("exec", "nvml")


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


def profiling_fields(collectors: t.Any) -> list[str]:
    """The profiling fields (DCGM_FI_PROF_*) among the collectors' rows, in their order."""
    rows = collectors if isinstance(collectors, (list, tuple)) else []
    return [str(row.get("field")) for row in rows
            if isinstance(row, t.Mapping) and str(row.get("field", "")).startswith(PROFILING_PREFIX)]


def needs_proprietary(request: t.Any, collectors: t.Any, facts: t.Mapping[str, t.Any] | None) -> tuple[bool, str]:
    """Whether DCGM's -proprietary packages (the profiling module) are installed, and why.

    ``request``: true or false forces it; null decides from the collectors and the GPU facts' architectures."""
    if request is True or request is False:
        return request, "gpu_exporter_dcgm_proprietary is %s" % str(request).lower()
    fields = profiling_fields(collectors)
    if not fields:
        return False, "no profiling field (DCGM_FI_PROF_*) in the collectors"
    gpus = _gpu_schema.gpus(facts)
    older: list[str] = []
    unknown: list[str] = []
    for gpu in gpus:
        arch = _catalog.gpu_architecture(gpu)
        label = "GPU %s (%s)" % (gpu.get("index", "?"), gpu.get("name") or "unnamed")
        if arch in PROFILING_MODULE_ARCHITECTURES:
            older.append("%s, %s" % (label, arch))
        elif arch not in GPM_ARCHITECTURES:
            unknown.append(label)
    if older:
        return True, "%d profiling field(s) in the collectors and %s older than Hopper" % (len(fields), "; ".join(older))
    if unknown:
        return True, "%d profiling field(s) in the collectors and no architecture known for %s" % (
            len(fields), "; ".join(unknown))
    if not gpus:
        return False, ("no GPU in the facts to profile (set gpu_exporter_dcgm_proprietary: true for profiling fields on "
                       "GPUs older than Hopper)")
    return False, "every GPU is Hopper or newer, which reads the profiling fields through NVML"


def nvidia_gpu_exporter_errors(version: t.Any, backend: t.Any, architecture: t.Any) -> list[str]:
    """Why nvidia_gpu_exporter's release cannot serve the request: an unknown backend, the NVML backend before the
    release that has it, or off x86_64 (its -nvml archive is built for x86_64 only), a machine with no release archive."""
    errors: list[str] = []
    arch = str(architecture or "")
    if backend not in BACKENDS:
        errors.append("gpu_exporter_nvidia_gpu_exporter_backend must be exec or nvml, not %r" % (backend,))
    elif backend == "nvml":
        parsed = version_tuple(version)
        if not parsed or tuple(parsed[:3]) < NVML_SINCE:
            errors.append("gpu_exporter_nvidia_gpu_exporter_backend is nvml, but nvidia_gpu_exporter %s has no NVML backend "
                          "(--collect.backend=nvml came with 1.11.0): set gpu_exporter_nvidia_gpu_exporter_version to 1.11.0 "
                          "or later, or the backend to exec" % (version,))
        if arch and TARBALL_ARCH.get(arch) != "x86_64":
            errors.append("gpu_exporter_nvidia_gpu_exporter_backend is nvml, but its release archive (-nvml) is built for "
                          "x86_64 only, not %s: use the exec backend on this host" % arch)
    if arch and arch not in TARBALL_ARCH:
        errors.append("nvidia_gpu_exporter publishes release archives for x86_64 and arm64, not %s: set "
                      "gpu_exporter_nvidia_gpu_exporter_url to a build for this machine" % arch)
    return errors


def plan(kind: str, consumer_only: bool, os_family: str, facts: t.Mapping[str, t.Any] | None, cuda_major: t.Any = None,
         branch: t.Any = None, collectors: t.Any = None, proprietary: t.Any = None,
         nvgpu: t.Mapping[str, t.Any] | None = None) -> dict[str, t.Any]:
    """``{kind, cuda_major, proprietary, notes, errors}``: the exporter to run, the DCGM package's CUDA major and whether
    DCGM's -proprietary packages go with it (dcgm only), what the report should say about the choice, and every reason
    the request cannot be met (empty when it can). ``nvgpu``: nvidia_gpu_exporter's ``version``, ``backend`` and the
    host's ``architecture``, checked when that exporter is chosen."""
    notes: list[str] = []
    errors: list[str] = []
    chosen = kind
    if kind == "auto":
        chosen = "nvidia_gpu_exporter" if consumer_only else "dcgm"
        if chosen == "dcgm" and os_family not in DCGM_FAMILIES:
            chosen = "nvidia_gpu_exporter"
            notes.append("nvidia_gpu_exporter instead of DCGM on %s: %s" % (os_family, NO_DCGM.get(os_family, _NO_DCGM_OTHER)))
    elif kind == "dcgm" and os_family not in DCGM_FAMILIES:
        errors.append("gpu_exporter_kind is dcgm, but %s; use gpu_exporter_kind: nvidia_gpu_exporter (or auto) on this host"
                      % NO_DCGM.get(os_family, "%s (os_family %s)" % (_NO_DCGM_OTHER, os_family)))
    if chosen == "nvidia_gpu_exporter" and nvgpu is not None and not errors:
        errors.extend(nvidia_gpu_exporter_errors(nvgpu.get("version"), nvgpu.get("backend", "exec"), nvgpu.get("architecture")))
    major = None
    with_proprietary = False
    if chosen == "dcgm" and not errors:
        major, source = dcgm_cuda_major(cuda_major, facts, branch)
        if major is None:
            errors.append(source)
        else:
            notes.append("DCGM for CUDA %d (datacenter-gpu-manager-4-cuda%d), from %s" % (major, major, source))
            with_proprietary, why = needs_proprietary(proprietary, collectors, facts)
            notes.append("DCGM %s the profiling module (datacenter-gpu-manager-4-proprietary-cuda%d): %s"
                         % ("with" if with_proprietary else "without", major, why))
    return {"kind": chosen, "cuda_major": major, "proprietary": with_proprietary, "notes": notes, "errors": errors}
