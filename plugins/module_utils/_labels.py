# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Kubernetes node labels from the GPU facts, by the rules of NVIDIA's GPU feature discovery (GFD).

Private to this collection: no compatibility promise outside gpuhost.nvidia.

The labels under ``nvidia.com/`` are GFD's: the same names, and values made by the same rules as GFD v0.20.0's
labelers in NVIDIA/k8s-device-plugin ``internal/lm/`` (each rule below names its Go function). Labels of the
collection's own live under ``gpuhost.nvidia/``. Every key and value is checked against Kubernetes' rules before
anything is returned: a value that cannot be valid is refused (LabelError names it), never written.

Not written, because the facts cannot give them or because they belong to GFD's process, not to the node:
``nvidia.com/gfd.timestamp`` (GFD's run time), ``nvidia.com/gpu.clique`` (GPU fabric IDs, not in the facts),
``nvidia.com/vgpu.*`` (vGPU host data, not in the facts), ``nvidia.com/mig.strategy`` and the MIG profile labels
(GFD's ``none`` strategy, its default, writes none of them), and ``nvidia.com/gpu.machine`` unless the caller passes
the DMI product name.
"""

from __future__ import annotations

import re
import typing as t
from collections.abc import Mapping

GFD_PREFIX = "nvidia.com/"
# The collection's own labels. A DNS subdomain by Kubernetes' rule; gpuhost.nvidia is the collection's name.
OWN_PREFIX = "gpuhost.nvidia/"

# Kubernetes' rules (k8s.io/apimachinery pkg/util/validation/validation.go: IsValidLabelValue, IsQualifiedName,
# IsDNS1123Subdomain). A label value is empty, or 1-63 characters of [A-Za-z0-9._-] starting and ending alphanumeric.
LABEL_VALUE_MAX = 63
LABEL_NAME_MAX = 63
LABEL_PREFIX_MAX = 253
_QUALIFIED_NAME_RE = re.compile(r"(?:[A-Za-z0-9][A-Za-z0-9_.-]*)?[A-Za-z0-9]")
_DNS1123_SUBDOMAIN_RE = re.compile(r"[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)*")

# GFD's sanitise() (internal/lm/resource.go) first deletes every character outside this set, then joins the
# space-separated words with "-".
_GFD_KEEP_RE = re.compile(r"[^A-Za-z0-9_. -]")

# nvpci (NVIDIA/go-nvlib pkg/nvpci/nvpci.go): PCIVgaControllerClass and PCI3dControllerClass, the 24-bit class codes
# GFD's getModeForClasses (internal/lm/nvml.go) maps to graphics and compute.
PCI_VGA_CONTROLLER_CLASS = 0x030000
PCI_3D_CONTROLLER_CLASS = 0x030200

_DRIVER_PART_RE = re.compile(r"[0-9]+")
_CUDA_RE = re.compile(r"([0-9]+)\.([0-9]+)")
_COMPUTE_RE = re.compile(r"([0-9]+)\.([0-9]+)")
_CLASS_RE = re.compile(r"(?:0x)?([0-9A-Fa-f]{1,6})")

# The GPU facts' states under which the facts' source (NVML or nvidia-smi) read a GPU completely.
_GPU_OK = "ok"
_RICH_SOURCES = ("nvml", "nvidia-smi")


class LabelError(ValueError):
    """A value that cannot become a valid label. ``problems`` lists every one found, each naming its input."""

    def __init__(self, problems: list[str]):
        super().__init__("; ".join(problems))
        self.problems = problems


def sanitise(text: str) -> str:
    """GFD's sanitise (internal/lm/resource.go): delete characters outside [A-Za-z0-9_. -], then join the words with -.

    ``NVIDIA-TITAN-X-(Pascal)`` -> ``NVIDIA-TITAN-X-Pascal``; ``Tesla T4`` -> ``Tesla-T4``.
    """
    return "-".join(word for word in _GFD_KEEP_RE.sub("", text).split(" ") if word)


def arch_family(major: int, minor: int) -> str:
    """GFD's getArchFamily (internal/lm/resource.go): the family label from the CUDA compute capability."""
    if major == 1:
        return "tesla"
    if major == 2:
        return "fermi"
    if major == 3:
        return "kepler"
    if major == 5:
        return "maxwell"
    if major == 6:
        return "pascal"
    if major == 7:
        return "volta" if minor < 5 else "turing"
    if major == 8:
        return "ampere" if minor < 9 else "ada-lovelace"
    if major == 9:
        return "hopper"
    if major in (10, 12):
        return "blackwell"
    if major == 13:
        return "rubin"
    return "undefined"


def gpu_mode(classes: list[int | None]) -> str:
    """GFD's newGPUModeLabeler and getModeForClasses (internal/lm/nvml.go): graphics for VGA controllers, compute for
    3D controllers, unknown for anything else, for GPUs of different classes, or when a class cannot be read."""
    if not classes or any(c is None for c in classes):
        return "unknown"
    if len(set(classes)) != 1:
        return "unknown"
    return {PCI_VGA_CONTROLLER_CLASS: "graphics", PCI_3D_CONTROLLER_CLASS: "compute"}.get(t.cast(int, classes[0]), "unknown")


def valid_label_value(value: t.Any) -> bool:
    """Kubernetes' IsValidLabelValue: empty, or at most 63 characters of [A-Za-z0-9._-], alphanumeric at both ends."""
    return isinstance(value, str) and len(value) <= LABEL_VALUE_MAX and (value == "" or bool(_QUALIFIED_NAME_RE.fullmatch(value)))


def valid_label_key(key: t.Any) -> bool:
    """Kubernetes' IsQualifiedName for label keys: ``[prefix/]name``, the prefix a DNS-1123 subdomain of at most 253
    characters, the name 1-63 characters of [A-Za-z0-9._-], alphanumeric at both ends."""
    if not isinstance(key, str):
        return False
    prefix, slash, name = key.rpartition("/")
    if slash:
        if "/" in prefix or not prefix or len(prefix) > LABEL_PREFIX_MAX or not _DNS1123_SUBDOMAIN_RE.fullmatch(prefix):
            return False
    return 0 < len(name) <= LABEL_NAME_MAX and bool(_QUALIFIED_NAME_RE.fullmatch(name))


def _show(value: t.Any) -> str:
    """A value for an error message: repr, cut to 80 characters (a hostile value may be long)."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _value(labels: dict[str, str], problems: list[str], key: str, value: str, source: str, fix: str) -> None:
    """Set labels[key] = value when the value is a valid label value; else record why, naming the input and the fix."""
    if valid_label_value(value):
        labels[key] = value
    else:
        problems.append("%s: %s would make %s=%s, not a valid Kubernetes label value (at most 63 characters of "
                        "A-Z a-z 0-9 . _ -, a letter or digit at both ends); %s" % (source, _show(value), key, _show(value), fix))


def driver_version_parts(version: str) -> tuple[str, str, str] | None:
    """GFD's newVersionLabeler (internal/lm/nvml.go): X.Y or X.Y.Z split into major, minor and revision (empty for
    X.Y). None when the version has another form (GFD fails on it); each part must also be digits here."""
    parts = version.split(".")
    if not 2 <= len(parts) <= 3 or not all(_DRIVER_PART_RE.fullmatch(p) for p in parts):
        return None
    return parts[0], parts[1], parts[2] if len(parts) == 3 else ""


def _int(value: t.Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _pci_class(value: t.Any) -> int | None:
    """The facts' class string (0x030200) as an int; None when it is not one."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        match = _CLASS_RE.fullmatch(value.strip())
        if match:
            return int(match.group(1), 16)
    return None


def _gpus(facts: Mapping[str, t.Any], problems: list[str]) -> list[Mapping[str, t.Any]]:
    gpus = facts.get("gpus")
    if gpus is None:
        return []
    if not isinstance(gpus, (list, tuple)):
        problems.append("gpus: expected the list of the GPU facts' GPUs, got %s" % type(gpus).__name__)
        return []
    result = []
    for position, gpu in enumerate(gpus):
        if not isinstance(gpu, Mapping):
            problems.append("gpus[%d]: expected a dict, got %s" % (position, type(gpu).__name__))
            continue
        mig = gpu.get("mig")
        if mig is not None and not (isinstance(mig, Mapping) and mig.get("current") in (True, False, None)):
            problems.append("gpus[%d].mig: %s is not the facts' MIG mode ({current: true, false or null})" % (position, _show(mig)))
        index = gpu.get("index")
        if index is not None and _int(index) is None:
            problems.append("gpus[%d].index: %s is not a GPU index" % (position, _show(index)))
        result.append(gpu)
    return result


def _nvml_gpus(facts: Mapping[str, t.Any], gpus: list[Mapping[str, t.Any]]) -> list[Mapping[str, t.Any]]:
    """The GPUs GFD would enumerate: those the facts' source (NVML or nvidia-smi, which reads NVML) listed with an
    index. GPUs seen only on the PCI bus (bound to vfio-pci, no driver) are not NVML devices."""
    source = facts.get("source")
    return [g for g in gpus if g.get("index") is not None and (g.get("source") in (None, source))]


def _mig_enabled(gpu: Mapping[str, t.Any]) -> bool:
    return _mig_mode(gpu) is True


def _mig_mode(gpu: Mapping[str, t.Any]) -> t.Any:
    """The GPU's current MIG mode: True, False, or None where MIG is not supported (checked in _gpus)."""
    mig = gpu.get("mig")
    return mig.get("current") if isinstance(mig, Mapping) else None


def _model_order(gpus: list[Mapping[str, t.Any]]) -> list[tuple[str, bool]]:
    """GFD's newGPULabelers (internal/lm/mig-strategy.go) builds one labeler per model name, first for the models of
    the MIG-enabled GPUs, then for those of the full GPUs, and merges them in that order, later ones overwriting
    earlier ones. Within each group GFD takes the models in Go map order, which is random, so on a node with several
    models the labels depend on the run. Here each group is taken from the highest first index to the lowest: the
    model of the lowest-index full GPU (else of the lowest-index GPU) comes last and wins, which is one of GFD's
    possible answers and the same on every run. Returns (model, mig_enabled_group) in merge order."""
    first: dict[tuple[str, bool], int] = {}
    for gpu in gpus:
        key = (gpu["name"], _mig_enabled(gpu))
        first.setdefault(key, gpu["index"])
    return sorted(first, key=lambda key: (not key[1], -first[key]))


def gfd_labels(facts: Mapping[str, t.Any], machine: str | None = None) -> tuple[dict[str, str], list[str], list[str]]:
    """GFD's labels for the node the facts describe, by GFD's default configuration (MIG strategy none, no sharing).

    Returns (labels, notes, problems): notes say why labels were left out; problems are values that cannot be valid.
    """
    labels: dict[str, str] = {}
    notes: list[str] = []
    problems: list[str] = []
    gpus = _nvml_gpus(facts, _gpus(facts, problems))
    if problems:
        return {}, notes, problems
    if not gpus:
        # GFD's NewDeviceLabeler: no devices, no labels.
        return {}, notes, problems
    if facts.get("source") not in _RICH_SOURCES:
        notes.append("GFD's labels left out: the GPU facts came from %s, not from NVML or nvidia-smi" % _show(facts.get("source")))
        return {}, notes, problems
    unwell = ["%s (%s)" % (g.get("pci_bus_id") or g.get("index"), g.get("state")) for g in gpus if g.get("state", _GPU_OK) != _GPU_OK]
    if unwell:
        # GFD fails when it cannot read a device and writes nothing; a partial count would draw pods to a broken node.
        notes.append("GFD's labels left out: not every GPU could be read: %s" % ", ".join(unwell))
        return {}, notes, problems

    names = [g.get("name") for g in gpus]
    for g in gpus:
        if g.get("name") is not None and not isinstance(g["name"], str):
            problems.append("gpus[index %s].name: %s is not a GPU name" % (_show(g.get("index")), _show(g["name"])))
    if problems:
        return {}, notes, problems
    if any(not name for name in names):
        # GFD counts GPUs by model name; without every name the count of a model is unknown.
        notes.append("GFD's labels left out: the name of a GPU is unknown")
        return {}, notes, problems
    gpus = sorted(gpus, key=lambda g: g["index"])

    # NewGPUResourceLabeler per model, merged in GFD's order (see _model_order). counts[name] counts the model's GPUs
    # with and without MIG enabled; the device a labeler reads is the model's last GPU in its group (a map assignment
    # per device keeps the last). Values are checked once merged: a model whose labels are overwritten is not refused.
    origin: dict[str, str] = {}
    order = _model_order(gpus)
    for model, mig_group in order:
        device = [g for g in gpus if g["name"] == model and _mig_enabled(g) == mig_group][-1]
        where = "gpus[index %s]" % device["index"]
        # resourceLabeler.baseLabeler (internal/lm/resource.go): product, count, replicas, sharing-strategy. Without a
        # sharing configuration a full GPU has 1 replica; a MIG-enabled model is labelled without sharing (a nil
        # config: 0 replicas).
        merged = {"gpu.product": sanitise(model), "gpu.count": str(names.count(model)), "gpu.replicas": "0" if mig_group else "1",
                  "gpu.sharing-strategy": "none"}
        # gpu.memory in MiB; GFD writes none when the memory is 0 or cannot be read.
        memory = device.get("memory_total_mib")
        if memory is not None and (_int(memory) is None or memory < 0):
            problems.append("%s.memory_total_mib: %s is not a number of MiB" % (where, _show(memory)))
        elif memory:
            merged["gpu.memory"] = str(memory)
        # newArchitectureLabels: family, compute.major and compute.minor; none when the major is 0.
        capability = device.get("compute_capability")
        match = _COMPUTE_RE.fullmatch(capability) if isinstance(capability, str) else None
        if capability is not None and not match:
            problems.append("%s.compute_capability: %s is not MAJOR.MINOR" % (where, _show(capability)))
        elif match and int(match.group(1)) != 0:
            major, minor = int(match.group(1)), int(match.group(2))
            merged.update({"gpu.family": arch_family(major, minor), "gpu.compute.major": str(major), "gpu.compute.minor": str(minor)})
        elif capability is None:
            # GFD fails without the compute capability; what another model left must not pass for this one's.
            for name in ("gpu.family", "gpu.compute.major", "gpu.compute.minor"):
                labels.pop(GFD_PREFIX + name, None)
        for name, value in merged.items():
            labels[GFD_PREFIX + name] = value
            origin[GFD_PREFIX + name] = where + (".name" if name == "gpu.product" else ".memory_total_mib" if name == "gpu.memory" else "")
    winner, winner_mig = order[-1]
    if [g for g in gpus if g["name"] == winner and _mig_enabled(g) == winner_mig][-1].get("compute_capability") is None:
        notes.append("gpu.family and gpu.compute.* left out: the compute capability of %s is unknown" % winner)
    if len(set(names)) > 1:
        notes.append("several GPU models (%s): GFD labels one model, chosen by map order; the labels describe %s"
                     % (", ".join(sorted(set(names))), winner))
    for key in list(labels):
        value = labels.pop(key)
        _value(labels, problems, key, value, origin[key],
               "GFD itself would write this invalid value; label the node another way, or set gfd_deployed")

    # newMigCapabilityLabeler (internal/lm/nvml.go): true when any GPU supports MIG (its MIG mode can be read).
    labels[GFD_PREFIX + "mig.capable"] = "true" if any(_mig_mode(g) is not None for g in gpus) else "false"
    # newSharingLabeler: false unless the sharing strategy is MPS, which GFD's default configuration is not.
    labels[GFD_PREFIX + "mps.capable"] = "false"

    # newGPUModeLabeler: the PCI class of every GPU, from the facts' PCI functions.
    classes = {}
    functions = facts.get("pci_functions") or []
    if not isinstance(functions, (list, tuple)):
        problems.append("pci_functions: expected the GPU facts' list of PCI functions, got %s" % type(functions).__name__)
        functions = []
    for function in functions:
        if isinstance(function, Mapping) and isinstance(function.get("pci_bus_id"), str):
            classes[function["pci_bus_id"].lower()] = _pci_class(function.get("class"))
    labels[GFD_PREFIX + "gpu.mode"] = gpu_mode([classes.get(str(g.get("pci_bus_id") or "").lower()) for g in gpus])

    # newVersionLabeler (internal/lm/nvml.go): the driver version, then the CUDA version the driver supports.
    driver = facts.get("driver") or {}
    if not isinstance(driver, Mapping):
        problems.append("driver: expected the GPU facts' driver dict, got %s" % type(driver).__name__)
        driver = {}
    version = driver.get("version")
    if version is None:
        notes.append("cuda.driver-version.* left out: the driver version is unknown")
    else:
        parts = driver_version_parts(version) if isinstance(version, str) else None
        if parts is None:
            problems.append("driver.version: %s is not a driver version X.Y or X.Y.Z of digits" % _show(version))
        else:
            major, minor, revision = parts
            labels.update({
                GFD_PREFIX + "cuda.driver.major": major,
                GFD_PREFIX + "cuda.driver.minor": minor,
                GFD_PREFIX + "cuda.driver.rev": revision,
                GFD_PREFIX + "cuda.driver-version.major": major,
                GFD_PREFIX + "cuda.driver-version.minor": minor,
                GFD_PREFIX + "cuda.driver-version.revision": revision,
            })
            _value(labels, problems, GFD_PREFIX + "cuda.driver-version.full", version, "driver.version", "check the driver")
    cuda = driver.get("cuda_version")
    if cuda is None:
        notes.append("cuda.runtime-version.* left out: the CUDA version of the driver is unknown")
    else:
        match = _CUDA_RE.fullmatch(cuda) if isinstance(cuda, str) else None
        if not match:
            problems.append("driver.cuda_version: %s is not a CUDA version MAJOR.MINOR" % _show(cuda))
        else:
            cuda_major, cuda_minor = str(int(match.group(1))), str(int(match.group(2)))
            labels.update({
                GFD_PREFIX + "cuda.runtime.major": cuda_major,
                GFD_PREFIX + "cuda.runtime.minor": cuda_minor,
                GFD_PREFIX + "cuda.runtime-version.major": cuda_major,
                GFD_PREFIX + "cuda.runtime-version.minor": cuda_minor,
                GFD_PREFIX + "cuda.runtime-version.full": "%s.%s" % (cuda_major, cuda_minor),
            })

    # newMachineTypeLabeler (internal/lm/machine-type.go): the DMI product name, trimmed and sanitised.
    if machine is not None:
        if not isinstance(machine, str):
            problems.append("machine: %s is not a string" % _show(machine))
        else:
            _value(labels, problems, GFD_PREFIX + "gpu.machine", sanitise(machine.strip()), "machine",
                   "pass the DMI product name, or leave machine out")
    return labels, notes, problems


def node_labels(facts: Mapping[str, t.Any] | None, toolkit_version: str | None = None, gfd_deployed: bool = False,
                machine: str | None = None) -> tuple[dict[str, str], list[str]]:
    """Every label for the node: GFD's (unless GFD itself is deployed) and the collection's own.

    Returns (labels, notes). Raises LabelError listing every value that cannot be a valid label.
    """
    facts = facts or {}
    problems: list[str] = []
    labels: dict[str, str] = {}
    notes: list[str] = []
    if not gfd_deployed:
        labels, notes, problems = gfd_labels(facts, machine)
    present = facts.get("present")
    if not isinstance(present, bool) and present is not None:
        problems.append("present: %s is not true or false" % _show(present))
    labels[OWN_PREFIX + "gpu.present"] = "true" if present is True else "false"
    if toolkit_version is not None:
        if not isinstance(toolkit_version, str):
            problems.append("toolkit_version: %s is not a version string" % _show(toolkit_version))
        else:
            # The upstream version, without a package release or epoch (1.17.8 for 1:1.17.8-1).
            upstream = toolkit_version.split(":", 1)[-1].split("-", 1)[0]
            if not upstream:
                problems.append("toolkit_version: %s has no upstream version" % _show(toolkit_version))
            _value(labels, problems, OWN_PREFIX + "container-toolkit.version", upstream, "toolkit_version",
                   "pass the installed toolkit version, such as 1.17.8")
    for key in labels:
        if not valid_label_key(key):
            problems.append("%s is not a valid Kubernetes label name" % _show(key))
    if problems:
        raise LabelError(problems)
    return labels, notes


def features_file(labels: Mapping[str, str], header: str = "") -> str:
    """The labels as a Node Feature Discovery local feature file: one ``name=value`` a line, sorted, after ``#``
    comment lines. Refuses anything that would change the file's lines (LabelError)."""
    problems = []
    for key, value in labels.items():
        if not valid_label_key(key):
            problems.append("%s is not a valid Kubernetes label name" % _show(key))
        if not valid_label_value(value):
            problems.append("%s=%s: not a valid Kubernetes label value" % (key, _show(value)))
    for line in header.splitlines():
        if not line.startswith("#"):
            problems.append("header: every line must be a # comment, got %s" % _show(line))
    if problems:
        raise LabelError(problems)
    lines = header.splitlines()
    lines += ["%s=%s" % (key, labels[key]) for key in sorted(labels)]
    return "\n".join(lines) + "\n"
