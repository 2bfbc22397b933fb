# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Static tables about NVIDIA GPUs and drivers: architecture, compute capability, CUDA support, open modules.

Private to this collection: no compatibility promise outside gpuhost.nvidia.

Every table here is a claim about the outside world. docs/sources.md names, for each one, the public documents it was
checked against (at least two); tests/unit/test_sources.py keeps the two in step. In short:
- Compute capability per architecture: NVIDIA CUDA C++ Programming Guide, "Compute Capabilities", and
  https://developer.nvidia.com/cuda-gpus .
- PCI device id ranges per GPU chip: the PCI ID repository (https://pci-ids.ucw.cz/read/PC/10de) and the
  "supported chips" appendix of the NVIDIA Linux driver README (Appendix A).
- Minimum driver per CUDA toolkit release: CUDA Toolkit Release Notes, table "CUDA Toolkit and Corresponding
  Driver Versions", Linux x86_64 column.
- Highest CUDA version per driver branch: what the driver itself reports (nvidia-smi header), cross-checked against
  public nvidia-smi captures (from 610 the header says "CUDA UMD Version"). A branch whose exact highest CUDA minor no
  public source states (620) carries only the CUDA major version of NVIDIA's data center support matrix; the catalog
  then answers "cannot tell" for a minor above what an older branch is known to run, instead of guessing.
- Branch lifecycle (designation, end of life): NVIDIA Data Center Drivers documentation, "Supported Drivers and CUDA
  Toolkit Versions" (the 580, 615 and 620 editions), for the branches a second source confirms (580, 595).
- Open kernel modules: NVIDIA's open-gpu-kernel-modules README and the July 2024 technical blog: Turing and later.
- Last branch and last CUDA toolkit per architecture: NVIDIA Data Center Drivers, "CUDA Toolkit, Driver, and
  Architecture Matrix" (Maxwell, Pascal, Volta: last driver R580, last toolkit CUDA 12.x; Kepler: R470) and NVIDIA's
  Unix legacy GPU list.
"""

from __future__ import annotations

import re
import typing as t

from ansible_collections.gpuhost.nvidia.plugins.module_utils._ids import driver_branch, version_tuple

ARCHITECTURES = (
    "Tesla",
    "Fermi",
    "Kepler",
    "Maxwell",
    "Pascal",
    "Volta",
    "Turing",
    "Ampere",
    "Ada Lovelace",
    "Hopper",
    "Blackwell",
)

# (first device id, last device id, chip, architecture, compute capability). Searched in order: the first match wins.
_DEVICE_RANGES: tuple[tuple[int, int, str, str, str | None], ...] = (
    (0x06C0, 0x06DF, "GF100", "Fermi", "2.0"),
    (0x0DC0, 0x0DFF, "GF106/GF108", "Fermi", "2.1"),
    (0x0E00, 0x0E3F, "GF104", "Fermi", "2.1"),
    (0x1080, 0x109F, "GF110", "Fermi", "2.0"),
    (0x1040, 0x10BF, "GF119/GF117", "Fermi", "2.1"),
    (0x1200, 0x127F, "GF114/GF116", "Fermi", "2.1"),
    (0x0FC0, 0x0FFF, "GK107", "Kepler", "3.0"),
    (0x102D, 0x102D, "GK210", "Kepler", "3.7"),
    (0x1000, 0x103F, "GK110", "Kepler", "3.5"),
    (0x1180, 0x11FF, "GK104/GK106", "Kepler", "3.0"),
    (0x1280, 0x12BF, "GK208", "Kepler", "3.5"),
    (0x1340, 0x13BF, "GM108/GM107", "Maxwell", "5.0"),
    (0x13C0, 0x13FF, "GM204", "Maxwell", "5.2"),
    (0x1400, 0x143F, "GM206", "Maxwell", "5.2"),
    (0x17C0, 0x17FF, "GM200", "Maxwell", "5.2"),
    (0x15F0, 0x15FF, "GP100", "Pascal", "6.0"),
    (0x1B00, 0x1BFF, "GP102/GP104", "Pascal", "6.1"),
    (0x1C00, 0x1CFF, "GP106/GP107", "Pascal", "6.1"),
    (0x1D00, 0x1D7F, "GP108", "Pascal", "6.1"),
    (0x1D80, 0x1DFF, "GV100", "Volta", "7.0"),
    (0x1E00, 0x1FFF, "TU102/TU104/TU106/TU117", "Turing", "7.5"),
    (0x2180, 0x21FF, "TU116", "Turing", "7.5"),
    (0x2080, 0x20FF, "GA100", "Ampere", "8.0"),
    (0x2200, 0x223F, "GA102", "Ampere", "8.6"),
    (0x2400, 0x25FF, "GA103/GA104/GA106/GA107", "Ampere", "8.6"),
    (0x2300, 0x234F, "GH100", "Hopper", "9.0"),
    (0x2680, 0x28FF, "AD102/AD103/AD104/AD106/AD107", "Ada Lovelace", "8.9"),
    (0x2900, 0x29FF, "GB100", "Blackwell", "10.0"),
    (0x2B00, 0x2FFF, "GB202/GB203/GB205/GB206/GB207", "Blackwell", "12.0"),
)

# compute capability major -> architecture; minor refines where one major spans two families.
_CC_ARCH: dict[tuple[int, int | None], str] = {
    (1, None): "Tesla",
    (2, None): "Fermi",
    (3, None): "Kepler",
    (5, None): "Maxwell",
    (6, None): "Pascal",
    (7, 0): "Volta",
    (7, 2): "Volta",
    (7, 5): "Turing",
    (8, 0): "Ampere",
    (8, 6): "Ampere",
    (8, 7): "Ampere",
    (8, 9): "Ada Lovelace",
    (9, None): "Hopper",
    (10, None): "Blackwell",
    (11, None): "Blackwell",
    (12, None): "Blackwell",
}

# Highest CUDA version each driver branch supports (what the driver reports as "CUDA Version").
# 565 reports 12.7 although no CUDA 12.7 toolkit was released.
BRANCH_MAX_CUDA: dict[int, str] = {
    384: "9.0",
    387: "9.1",
    390: "9.1",
    396: "9.2",
    410: "10.0",
    418: "10.1",
    440: "10.2",
    450: "11.0",
    455: "11.1",
    460: "11.2",
    465: "11.3",
    470: "11.4",
    495: "11.5",
    510: "11.6",
    515: "11.7",
    520: "11.8",
    525: "12.0",
    530: "12.1",
    535: "12.2",
    545: "12.3",
    550: "12.4",
    555: "12.5",
    560: "12.6",
    565: "12.7",
    570: "12.8",
    575: "12.9",
    580: "13.0",
    590: "13.1",
    595: "13.2",
    610: "13.3",
    615: "13.4",
}

# Branches whose highest CUDA minor version no public source states: only the CUDA major version that NVIDIA's data
# center support matrix lists ("Maximum CUDA Major Version Supported Without Forward Compatibility Package").
BRANCH_MAX_CUDA_MAJOR: dict[int, int] = {
    620: 13,
}

# Lifecycle of the current data center branches: (designation, end of life as YYYY-MM). NVIDIA Data Center Drivers,
# "Supported Drivers and CUDA Toolkit Versions" (editions 615 and 620; the 580 edition gave R580 "August 2028"), each
# with a second, independent source (docs/sources.md). NVIDIA's pages also list R610 (New Feature Branch, August 2026)
# and R620 (Long Term Support Branch, September 2029), but no second source was found: they are left out rather than
# reported as facts. R590 is a "new feature branch" on NVIDIA's forum and a production branch on a lifecycle tracker,
# and R615 is in neither edition's table: the sources disagree or are silent, so neither is listed.
BRANCH_LIFECYCLE: dict[int, tuple[str, str | None]] = {
    580: ("Long Term Support Branch", "2028-06"),
    595: ("Production Branch", "2027-03"),
}

# The branch a role installs when nothing else is asked for: R580, NVIDIA's long-term branch (to 2028), and the last
# branch that drives every architecture the roles support (Maxwell to Blackwell); 590 and later drop Maxwell, Pascal
# and Volta. R620 is the next long-term branch, but a default past 580 would fail every pre-Turing GPU, so 580 stays
# the default until NVIDIA ends it; sources that lack 580 (Debian 13's CUDA repository) set their own default.
DEFAULT_BRANCH = 580

# Minimum Linux x86_64 driver for each CUDA toolkit release (GA row, and updates that raised the minimum).
# A bare branch ("595") means "any driver of that branch": the release-notes value is not recorded here.
CUDA_MIN_DRIVER: dict[str, str] = {
    "9.0": "384.81",
    "9.1": "390.46",
    "9.2": "396.26",
    "9.2.148": "396.37",
    "10.0": "410.48",
    "10.1": "418.39",
    "10.2": "440.33",
    "11.0": "450.51.05",
    "11.0.3": "450.51.06",
    "11.1": "455.23",
    "11.1.1": "455.32",
    "11.2": "460.27.03",
    "11.2.1": "460.32.03",
    "11.2.2": "460.32.03",
    "11.3": "465.19.01",
    "11.4": "470.42.01",
    "11.4.1": "470.57.02",
    "11.4.2": "470.57.02",
    "11.4.3": "470.82.01",
    "11.4.4": "470.82.01",
    "11.5": "495.29.05",
    "11.6": "510.39.01",
    "11.6.1": "510.47.03",
    "11.6.2": "510.47.03",
    "11.7": "515.43.04",
    "11.7.1": "515.65.01",
    "11.8": "520.61.05",
    "12.0": "525.60.13",
    "12.0.1": "525.85.12",
    "12.1": "530.30.02",
    "12.2": "535.54.03",
    "12.2.1": "535.86.09",
    "12.2.2": "535.104.05",
    "12.3": "545.23.06",
    "12.3.1": "545.23.08",
    "12.4": "550.54.14",
    "12.4.1": "550.54.15",
    "12.5": "555.42.02",
    "12.5.1": "555.42.06",
    "12.6": "560.28.03",
    "12.6.1": "560.35.03",
    "12.6.2": "560.35.03",
    "12.6.3": "560.35.05",
    "12.8": "570.26",
    "12.8.1": "570.124.06",
    "12.9": "575.51.03",
    "12.9.1": "575.57.08",
    "13.0": "580.65.06",
    "13.0.1": "580.82.07",
    "13.0.2": "580.95.05",
    "13.1": "590.44.01",
    "13.1.1": "590.48.01",
    "13.2": "595",
}

# CUDA minor version compatibility: a driver at or above this runs any toolkit of that major version
# (with the PTX JIT limitations NVIDIA documents). CUDA Compatibility guide, "Minor Version Compatibility".
CUDA_MINOR_COMPAT_MIN_DRIVER: dict[int, str] = {
    11: "450.80.02",
    12: "525.60.13",
    13: "580.65.06",
}

# Last driver branch that supports an architecture; None: still supported by current branches.
LAST_BRANCH: dict[str, int | None] = {
    "Tesla": 340,
    "Fermi": 390,
    "Kepler": 470,
    "Maxwell": 580,
    "Pascal": 580,
    "Volta": 580,
    "Turing": None,
    "Ampere": None,
    "Ada Lovelace": None,
    "Hopper": None,
    "Blackwell": None,
}

# Last CUDA toolkit major version per architecture; absent: current toolkits still build for it. NVIDIA's
# "CUDA Toolkit, Driver, and Architecture Matrix": CUDA 13.0 dropped Maxwell, Pascal and Volta (sm_50 to sm_72).
LAST_CUDA_MAJOR: dict[str, int] = {
    "Maxwell": 12,
    "Pascal": 12,
    "Volta": 12,
}

OPEN_MODULE_ARCHITECTURES = ("Turing", "Ampere", "Ada Lovelace", "Hopper", "Blackwell")
OPEN_MODULE_REQUIRED_ARCHITECTURES = ("Blackwell",)


def _parse_device_id(value: t.Any) -> int | None:
    """Accept ``10de:2330``, ``0x2330``, ``2330``, ``0x233010DE`` or an int; return the 16-bit device id."""
    if value is None:
        return None
    if isinstance(value, int):
        return value & 0xFFFF if value <= 0xFFFF else (value >> 16) & 0xFFFF
    text = str(value).strip().lower()
    match = re.match(r"^(?:0x)?10de:(?:0x)?([0-9a-f]{1,4})$", text)
    if match:
        return int(match.group(1), 16)
    match = re.match(r"^(?:0x)?([0-9a-f]{8})$", text)
    if match:
        combined = int(match.group(1), 16)
        if combined & 0xFFFF != 0x10DE:
            return None
        return (combined >> 16) & 0xFFFF
    match = re.match(r"^(?:0x)?([0-9a-f]{1,4})$", text)
    if match:
        return int(match.group(1), 16)
    return None


def _device_range(device_id: t.Any) -> tuple[int, int, str, str, str | None] | None:
    device = _parse_device_id(device_id)
    if device is None:
        return None
    for entry in _DEVICE_RANGES:
        if entry[0] <= device <= entry[1]:
            return entry
    return None


def _parse_cc(value: t.Any) -> tuple[int, int] | None:
    if value is None:
        return None
    if isinstance(value, (tuple, list)) and len(value) == 2:
        try:
            return int(value[0]), int(value[1])
        except (TypeError, ValueError):
            return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = "%.1f" % value
    match = re.match(r"^\s*(\d+)\.(\d+)\s*$", str(value))
    if not match:
        return None
    return int(match.group(1)), int(match.group(2))


def is_compute_capability(value: t.Any) -> bool:
    """True for ``9.0``-like values (``major.minor`` with one dot and short parts)."""
    if isinstance(value, (tuple, list)):
        return _parse_cc(value) is not None
    return bool(re.match(r"^\s*\d{1,2}\.\d{1,2}\s*$", str(value)))


def arch_from_compute_capability(value: t.Any) -> str | None:
    parsed = _parse_cc(value)
    if parsed is None:
        return None
    major, minor = parsed
    return _CC_ARCH.get((major, minor)) or _CC_ARCH.get((major, None))


def arch_from_device_id(device_id: t.Any) -> str | None:
    entry = _device_range(device_id)
    return entry[3] if entry else None


def compute_capability_from_device_id(device_id: t.Any) -> str | None:
    entry = _device_range(device_id)
    return entry[4] if entry else None


def architecture(value: t.Any) -> str | None:
    """Architecture from a compute capability (``8.6``) or a PCI device id (``10de:2204``, ``0x2204``)."""
    if value is None:
        return None
    if is_compute_capability(value):
        return arch_from_compute_capability(value)
    return arch_from_device_id(value)


def gpu_architecture(gpu: t.Mapping[str, t.Any]) -> str | None:
    """Architecture of one GPU (or PCI function) of the facts: the facts' name, else the catalog's from the compute
    capability or the PCI id."""
    return (
        normalize_architecture(gpu.get("architecture"))
        or architecture(gpu.get("compute_capability"))
        or architecture(gpu.get("pci_device_id"))
    )


def normalize_architecture(name: t.Any) -> str | None:
    """Map nvidia-smi's ``product_architecture`` (``Ada Lovelace``, ``Hopper``...) onto ARCHITECTURES."""
    if not name:
        return None
    text = str(name).strip()
    for arch in ARCHITECTURES:
        if text.lower() == arch.lower():
            return arch
    if text.lower() in ("ada", "adalovelace"):
        return "Ada Lovelace"
    return None


def max_cuda_for_branch(branch: t.Any) -> str | None:
    number = driver_branch(str(branch)) if branch is not None else None
    if number is None:
        return None
    return BRANCH_MAX_CUDA.get(int(number))


def min_driver_for_cuda(cuda_version: t.Any) -> str | None:
    """Minimum driver for a toolkit release (``12.2``, ``12.2.2``); the GA row when the update is not listed."""
    parts = version_tuple(cuda_version)
    if not parts:
        return None
    key = ".".join(str(p) for p in parts[:3])
    if key in CUDA_MIN_DRIVER:
        return CUDA_MIN_DRIVER[key]
    major_minor = ".".join(str(p) for p in parts[:2])
    return CUDA_MIN_DRIVER.get(major_minor)


def _version_ge(version: tuple[int, ...], minimum: tuple[int, ...]) -> bool:
    # A bare branch minimum ("595") is met by any driver of that branch or later.
    return version[: len(minimum)] >= minimum if len(minimum) == 1 else version >= minimum


def cuda_supported(driver: t.Any, cuda_version: t.Any, minor_version_compatibility: bool = False) -> bool | None:
    """Whether a driver (``535.104.05``) or a driver branch (``535``) runs a CUDA toolkit release.

    Returns None when the driver or CUDA version is unknown to the catalog.
    """
    driver_parts = version_tuple(driver)
    cuda_parts = version_tuple(cuda_version)
    if not driver_parts or not cuda_parts:
        return None
    if minor_version_compatibility:
        compat = CUDA_MINOR_COMPAT_MIN_DRIVER.get(cuda_parts[0])
        compat_parts = version_tuple(compat)
        if compat_parts and _version_ge(driver_parts, compat_parts if len(driver_parts) > 1 else compat_parts[:1]):
            return True
    if len(driver_parts) == 1:
        # A branch: compare against the highest CUDA version the branch reports.
        return _branch_runs(driver_parts[0], cuda_parts)
    minimum = min_driver_for_cuda(cuda_version)
    if minimum is None:
        # Unknown toolkit release: fall back to the branch's reported CUDA version.
        if max_cuda_for_branch(driver_parts[0]) is None and driver_parts[0] not in BRANCH_MAX_CUDA_MAJOR:
            return None
        return _branch_runs(driver_parts[0], cuda_parts)
    return _version_ge(driver_parts, version_tuple(minimum) or ())


def _branch_runs(branch: int, cuda_parts: tuple[int, ...]) -> bool | None:
    """Whether a driver branch runs a CUDA release; None when no source says.

    A branch newer than every branch with a known maximum runs at least what the newest of those runs (NVIDIA's CUDA
    driver API is backwards compatible); above that, only a branch's listed CUDA major can still say no.
    """
    branch_max = max_cuda_for_branch(branch)
    if branch_max is not None:
        return cuda_parts[:2] <= (version_tuple(branch_max) or ())
    known = sorted(BRANCH_MAX_CUDA)
    if branch < known[-1]:
        return None
    newest = version_tuple(BRANCH_MAX_CUDA[known[-1]]) or ()
    if cuda_parts[:2] <= newest:
        return True
    major = BRANCH_MAX_CUDA_MAJOR.get(branch)
    if major is not None and cuda_parts[0] > major:
        return False
    return None


def open_module_supported(arch: t.Any) -> bool | None:
    name = normalize_architecture(arch)
    if name is None:
        return None
    return name in OPEN_MODULE_ARCHITECTURES


def open_module_required(arch: t.Any) -> bool | None:
    name = normalize_architecture(arch)
    if name is None:
        return None
    return name in OPEN_MODULE_REQUIRED_ARCHITECTURES


def last_supported_branch(arch: t.Any) -> int | None:
    name = normalize_architecture(arch)
    if name is None:
        return None
    return LAST_BRANCH.get(name)


def is_known_branch(branch: t.Any) -> bool:
    """Whether the catalog knows a driver branch (its highest CUDA version, or at least its CUDA major)."""
    try:
        number = int(str(branch))
    except (TypeError, ValueError):
        return False
    return number in BRANCH_MAX_CUDA or number in BRANCH_MAX_CUDA_MAJOR


def known_branches(minimum: int = 0) -> list[int]:
    return sorted(b for b in set(BRANCH_MAX_CUDA) | set(BRANCH_MAX_CUDA_MAJOR) if b >= minimum)


def branch_lifecycle(branch: t.Any) -> dict[str, t.Any] | None:
    """``{"designation": ..., "end_of_life": "YYYY-MM" | None}`` for a current data center branch, else None."""
    try:
        entry = BRANCH_LIFECYCLE.get(int(str(branch)))
    except (TypeError, ValueError):
        return None
    if entry is None:
        return None
    return {"designation": entry[0], "end_of_life": entry[1]}


def last_cuda_major(arch: t.Any) -> int | None:
    """Last CUDA toolkit major version that builds for an architecture; None while current toolkits still do."""
    name = normalize_architecture(arch)
    return LAST_CUDA_MAJOR.get(name) if name else None
