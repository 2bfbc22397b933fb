# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Merge the NVML, nvidia-smi and PCI backends into ``ansible_facts.nvidia_gpu``.

Private to this collection: no compatibility promise outside gpuhost.nvidia.

Best source first: NVML, then nvidia-smi (only when NVML gave nothing), and the PCI scan always. PCI adds binding,
IOMMU group and NUMA node to every GPU (matched by PCI address) and lists the GPUs the richer sources cannot see.
"""

from __future__ import annotations

import os
import re
import subprocess
import typing as t

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _catalog, _files, _kernels, _nvml, _pci, _smi, _validate
from ansible_collections.gpuhost.nvidia.plugins.module_utils._gpu_schema import empty_gpu_record, onoff, processes_unknown
from ansible_collections.gpuhost.nvidia.plugins.module_utils._common import (
    STATE_DRIVER_NOT_LOADED,
    STATE_ERROR,
    STATE_GPU_LOST,
    STATE_LIBRARY_NOT_FOUND,
    STATE_NO_GPU,
    STATE_NO_PERMISSION,
    STATE_OK,
    STATE_PCI_ONLY,
    STATE_VERSION_MISMATCH,
    best_failure_state,
    driver_branch,
)

BACKENDS = ("nvml", "nvidia-smi", "pci")
GATHER = _nvml.GATHER_CHOICES
# What the kernel names every PCI function in sysfs. The roles write these addresses into modprobe.d and scripts, so
# an entry under a (test or image) root that is not one is left out of the facts, with a message.
_CANONICAL_ADDRESS_RE = re.compile(r"^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


def _drop_strange_functions(pci: dict[str, t.Any], messages: list[str]) -> None:
    """Remove PCI functions whose sysfs name is not a PCI address from every list of the scan, naming them."""

    def fine(function: t.Any) -> bool:
        return isinstance(function, dict) and bool(_CANONICAL_ADDRESS_RE.fullmatch(str(function.get("pci_bus_id"))))

    listed = list(pci["functions"]) + list(pci["display_functions"])
    listed += [f for group in pci["iommu"].get("groups") or [] for f in group.get("functions") or []]
    strange = sorted({str(f.get("pci_bus_id")) if isinstance(f, dict) else str(f) for f in listed if not fine(f)})
    if not strange:
        return
    messages.append("PCI sysfs entries that are not PCI addresses were left out: %s" % ", ".join(repr(s) for s in strange))
    pci["functions"] = [f for f in pci["functions"] if fine(f)]
    pci["gpus"] = [f for f in pci["gpus"] if fine(f)]
    pci["display_functions"] = [f for f in pci["display_functions"] if fine(f)]
    for group in pci["iommu"].get("groups") or []:
        group["functions"] = [f for f in group.get("functions") or [] if fine(f)]


def _pci_only_record(function: dict[str, t.Any], gather: set[str]) -> dict[str, t.Any]:
    record = empty_gpu_record(None)
    record.update(
        pci_bus_id=function["pci_bus_id"],
        pci_device_id=function["pci_device_id"],
        architecture=_catalog.architecture(function["pci_device_id"]),
        compute_capability=_catalog.compute_capability_from_device_id(function["pci_device_id"]),
        bound_driver=function["bound_driver"],
        iommu_group=function["iommu_group"],
        numa_node=function["numa_node"],
        state=STATE_PCI_ONLY,
        source="pci",
    )
    driver = function["bound_driver"]
    record["message"] = "seen on the PCI bus only (%s)" % ("bound to %s" % driver if driver else "no driver bound")
    _optional_keys(record, gather)
    return record


def _optional_keys(record: dict[str, t.Any], gather: set[str]) -> None:
    """Requested detail groups are present on every GPU (null where the source could not tell)."""
    if "utilization" in gather:
        record.setdefault("utilization", None)
        record.setdefault("temperature_c", None)
        record.setdefault("power_draw_w", None)
    if "processes" in gather:
        record.setdefault("processes", None)
        record.setdefault("processes_error", None)
        if record["state"] != STATE_OK or record["processes"] is None:
            # A GPU whose state is not ok, or whose source did not list its processes: unknown, never "none".
            processes_unknown(record, record["processes_error"])
    if "topology" in gather:
        record.setdefault("topology", None)
    if "health" in gather:
        record.setdefault("health", None)


def _reboot_reasons(gpus: list[dict[str, t.Any]], state: str, kernel: dict[str, t.Any], library_version: str | None) -> list[str]:
    reasons = []
    for gpu in gpus:
        name = "GPU %s (%s)" % (gpu["index"], gpu["pci_bus_id"])
        for key, label in (("ecc", "ECC mode"), ("mig", "MIG mode")):
            pair = gpu[key]
            if pair["current"] is not None and pair["pending"] is not None and pair["current"] != pair["pending"]:
                reasons.append(
                    "%s: %s change pending (%s -> %s); it takes effect after a GPU reset or reboot"
                    % (name, label, onoff(pair["current"]), onoff(pair["pending"]))
                )
    if kernel["version"] and library_version and kernel["version"] != library_version:
        reasons.append(
            "the loaded nvidia kernel module is %s but the installed user-space driver is %s" % (kernel["version"], library_version)
        )
    elif state == STATE_VERSION_MISMATCH:
        reasons.append("the loaded nvidia kernel module does not match the installed user-space driver")
    return reasons


def root_errors(root: t.Any, option: str = "root") -> list[str]:
    """Why the facts cannot be gathered under ``root`` (given as the option ``option``); empty when they can. Checked
    before anything is read under it: a root that is not an existing directory would be scanned as a host without GPUs
    and reported as no_gpu."""
    errors = _validate.check({option: root}, {option: _validate.Path(directory=True)})
    if not errors:
        try:
            if not _files.check_directory(root, option):
                errors.append("%s %r does not exist" % (option, root))
        except _files.FileError as exc:
            errors.append(str(exc))
    return errors


# The exit code of a command that did not finish in time, as coreutils' timeout reports it.
EXIT_TIMED_OUT = 124


def run_bounded(args: list[str], timeout: float | None, env: dict[str, str] | None = None) -> t.Tuple[int, str, str]:
    """Run ``args`` in the C locale for at most ``timeout`` seconds (None or 0: no bound); (rc, stdout, stderr).

    nvidia-smi waits on the driver as NVML does, and a hung GPU hangs it too. One that does not finish in time is
    killed and reported with rc 124 and a message naming the bound; it is not waited for beyond a second after the
    kill (a process blocked in the kernel ignores the signal: it is left behind, the module goes on)."""
    environ = dict(os.environ if env is None else env, LC_ALL="C", LANGUAGE="C")
    try:
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,  # pylint: disable=consider-using-with
                                env=environ, universal_newlines=True)
    except OSError as exc:
        return 127, "", "%s could not be run: %s" % (args[0], exc)
    try:
        out, err = proc.communicate(timeout=timeout if timeout and timeout > 0 else None)
    except subprocess.TimeoutExpired:
        proc.kill()
        try:
            proc.communicate(timeout=1)
        except subprocess.TimeoutExpired:
            pass
        return EXIT_TIMED_OUT, "", ("%s did not answer within %s s (6 x nvml_timeout) and was killed: the driver does not answer, "
                                    "so nothing it would say (the GPU processes included) is known" % (os.path.basename(args[0]), timeout))
    return proc.returncode, out, err


def gather_on_host(module: t.Any, backends: t.Iterable[str] = BACKENDS, gather: t.Iterable[str] = (), root: str = "/",
                   nvml_timeout: float | None = _nvml.DEFAULT_TIMEOUT) -> dict[str, t.Any]:
    """:func:`gather_facts` on the managed host, from a module: ``nvidia-smi`` found on the module's PATH and run in the C
    locale. The one place both nvidia_gpu_facts and nvidia_gpu_doctor (which gathers in-process when it is not handed
    facts) gather with. A read error fails the module, naming the root."""
    backends = list(backends)
    smi_binary = module.get_bin_path("nvidia-smi") if "nvidia-smi" in backends else None

    def run_smi(args: list[str]) -> t.Tuple[int, str, str]:
        return run_bounded(args, _nvml.whole_host(nvml_timeout))

    try:
        return gather_facts(backends=backends, gather=gather, root=root, smi_run=run_smi, smi_binary=smi_binary,
                            nvml_timeout=nvml_timeout)
    except OSError as exc:
        module.fail_json(msg="Reading the host's GPU state under %s failed: %s" % (root, exc))
    raise AssertionError("fail_json returned")  # pragma: no cover


def gather_facts(
    backends: t.Iterable[str] = BACKENDS,
    gather: t.Iterable[str] = (),
    root: str = "/",
    smi_run: _smi.Runner | None = None,
    smi_binary: str | None = None,
    nv: t.Any = None,
    kernel_release: str | None = None,
    nvml_timeout: float | None = _nvml.DEFAULT_TIMEOUT,
) -> dict[str, t.Any]:
    """Build ``ansible_facts.nvidia_gpu``. ``nv`` overrides the pynvml module (tests); PCI always runs.
    ``nvml_timeout``: seconds each bounded NVML step may take (_nvml; None: no bound)."""
    backends = list(backends)
    gather_set = set(gather)
    pci = _pci.scan(root, kernel_release)
    messages: list[str] = []
    if not os.path.isdir(os.path.join(root, "sys/bus/pci/devices")):
        messages.append("root %r has no sys/bus/pci/devices, so the PCI scan saw no device there: is sysfs mounted under it?" % root)
    _drop_strange_functions(pci, messages)
    failures: list[str] = []
    rich: dict[str, t.Any] | None = None
    source = "pci"

    if "nvml" in backends:
        result = _nvml.collect(gather_set, nv, timeout=nvml_timeout)
        if result["available"]:
            rich, source = result, "nvml"
        else:
            failures.append(result["state"])
            messages.append(result["message"])
    if rich is None and "nvidia-smi" in backends:
        if smi_binary is None or smi_run is None:
            messages.append("nvidia-smi: not found in PATH, not used")
            failures.append(STATE_LIBRARY_NOT_FOUND)
        else:
            result = _smi.collect(smi_run, smi_binary, gather_set)
            if result["available"]:
                rich, source = result, "nvidia-smi"
            else:
                failures.append(result["state"])
                messages.append(result["message"])

    pci_by_bus = {f["pci_bus_id"]: f for f in pci["gpus"]}
    gpus: list[dict[str, t.Any]] = []
    seen: set[str] = set()
    if rich is not None:
        messages.extend(rich["messages"])
        for record in rich["gpus"]:
            function = pci_by_bus.get(record["pci_bus_id"] or "")
            if function is not None:
                seen.add(function["pci_bus_id"])
                record["bound_driver"] = function["bound_driver"]
                record["iommu_group"] = function["iommu_group"]
                record["numa_node"] = function["numa_node"]
                if record["pci_device_id"] is None:
                    record["pci_device_id"] = function["pci_device_id"]
            if record["architecture"] is None:
                record["architecture"] = _catalog.architecture(record["pci_device_id"])
            if record["compute_capability"] is None:
                record["compute_capability"] = _catalog.compute_capability_from_device_id(record["pci_device_id"])
            _optional_keys(record, gather_set)
            gpus.append(record)
    pci_only = [f for f in pci["gpus"] if f["pci_bus_id"] not in seen]
    for function in pci_only:
        gpus.append(_pci_only_record(function, gather_set))
        if rich is not None and function["bound_driver"] == "nvidia":
            messages.append("%s: bound to nvidia but not listed by %s" % (function["pci_bus_id"], source))

    kernel = pci["kernel_module"]
    present = bool(pci["gpus"]) or any(g["state"] != STATE_PCI_ONLY for g in gpus)
    needs_nvidia = [f for f in pci["gpus"] if f["bound_driver"] not in _pci.PASSTHROUGH_DRIVERS]

    if rich is not None:
        rich_gpus = [g for g in gpus if g["source"] == source]
        if any(g["state"] == STATE_GPU_LOST for g in rich_gpus):
            state = STATE_GPU_LOST
        elif rich_gpus and all(g["state"] == STATE_NO_PERMISSION for g in rich_gpus):
            state = STATE_NO_PERMISSION
        elif not present:
            state = STATE_NO_GPU
        else:
            state = STATE_OK
    elif not present:
        state = STATE_NO_GPU
    elif not needs_nvidia:
        state = STATE_OK
        messages.append("every NVIDIA GPU is bound to a passthrough driver (%s)" % ", ".join(sorted({f["bound_driver"] for f in pci["gpus"]})))
    else:
        state = best_failure_state(failures) or (STATE_OK if kernel["loaded"] else STATE_DRIVER_NOT_LOADED)
        if not kernel["loaded"] and state in (STATE_LIBRARY_NOT_FOUND, STATE_ERROR):
            # The richer sources could not say more than "no library"; the kernel module is not loaded either.
            state = STATE_DRIVER_NOT_LOADED
            messages.append("the nvidia kernel module is not loaded")

    rich_driver = rich["driver"] if rich is not None else {"version": None, "cuda_version": None, "nvml_version": None}
    version = rich_driver["version"] or kernel["version"] or pci["library_version"]
    branch = driver_branch(version)
    driver = {
        "version": version,
        "branch": branch,
        "cuda_version": rich_driver["cuda_version"] or _catalog.max_cuda_for_branch(branch),
        "kernel_module_type": kernel["type"],
        "kernel_module_loaded": kernel["loaded"],
        "kernel_module_version": kernel["version"],
        "nvml_version": rich_driver["nvml_version"],
        "library_version": pci["library_version"],
        "library_paths": pci["library_paths"],
        "library_files": pci.get("library_files") or {key: None for key in pci["library_paths"]},
    }
    reasons = _reboot_reasons(gpus, state, kernel, pci["library_version"])
    return {
        "present": present,
        "source": source,
        "state": state,
        "messages": [m for m in messages if m],
        "driver": driver,
        "gpus": gpus,
        "pci_functions": pci["functions"],
        "nvswitch_count": pci["nvswitch_count"],
        "iommu": pci["iommu"],
        "display_functions": pci["display_functions"],
        "device_nodes": pci["device_nodes"],
        "kernels": _kernels.installed_kernels(root, kernel_release or os.uname().release),
        "reboot_required": bool(reasons),
        "reboot_reasons": reasons,
    }
