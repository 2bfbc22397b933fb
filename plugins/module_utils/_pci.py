# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""PCI sysfs scan for NVIDIA functions, plus the driver traces a host carries without a working driver.

Private to this collection: no compatibility promise outside gpuhost.nvidia.

Everything is read below a configurable root (``/`` on a real host, a synthetic tree in tests). The scan needs
no NVIDIA software, so it describes hosts with no driver, a driver that is not loaded, or GPUs bound to vfio-pci.
"""

from __future__ import annotations

import glob
import gzip
import lzma
import os
import re
import typing as t

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _files
from ansible_collections.gpuhost.nvidia.plugins.module_utils._ids import format_device_id, normalize_bus_id

NVIDIA_VENDOR = 0x10DE

FUNCTION_GPU = "gpu"
FUNCTION_AUDIO = "audio"
FUNCTION_USB = "usb"
FUNCTION_SERIAL_BUS = "serial_bus"
FUNCTION_NVSWITCH = "nvswitch"
FUNCTION_BRIDGE = "bridge"
FUNCTION_OTHER = "other"

# The one definition of "passthrough drivers": drivers that claim a GPU on purpose so that the nvidia driver does not
# (a GPU meant for a VM). The facts, the driver role's planner and the compose planner read it from here; the compose
# planner's "drivers under which containers cannot use a GPU" (_gpu_schema.NO_CONTAINER_DRIVERS) adds nouveau to it.
PASSTHROUGH_DRIVERS = ("vfio-pci", "pci-stub")

LIBRARIES = {
    "nvml": "libnvidia-ml.so.1",
    "cuda": "libcuda.so.1",
}

# Searched when the ld.so cache does not name the library (the multiarch dirs first, as ld.so does).
STANDARD_LIB_DIRS = (
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/lib64",
    "/usr/lib",
    "/lib",
    "/usr/local/nvidia/lib64",
    "/usr/lib/wsl/lib",
)

# nvidia.ko as NVIDIA's packages and DKMS name it, and nvidia-current(-open).ko as Debian's do, maybe compressed.
_MODULE_FILE_RE = re.compile(r"^nvidia(-current)?(-open)?\.ko(\.(xz|gz|zst))?$")
_MODULE_SEARCH_DIRS = ("updates/dkms", "updates", "extra", "kernel/drivers/video", "kernel/drivers/gpu", "nvidia", "misc", "video")


def classify(pci_class: int) -> str:
    """Map a 24-bit PCI class code to the function type reported in the facts."""
    base_sub = pci_class >> 8
    if base_sub in (0x0300, 0x0302, 0x0380):
        return FUNCTION_GPU
    if base_sub == 0x0403:
        return FUNCTION_AUDIO
    if base_sub == 0x0C03:
        return FUNCTION_USB
    if base_sub == 0x0C80:
        return FUNCTION_SERIAL_BUS
    if base_sub == 0x0680:
        # NVIDIA's only "other bridge" functions are NVSwitches.
        return FUNCTION_NVSWITCH
    if (pci_class >> 16) == 0x06:
        return FUNCTION_BRIDGE
    return FUNCTION_OTHER


def _join(root: str, path: str) -> str:
    return os.path.join(root, path.lstrip("/"))


def _read(path: str) -> str | None:
    try:
        with open(path, "r", encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def _read_hex(path: str) -> int | None:
    text = _read(path)
    if text is None:
        return None
    try:
        return int(text.strip(), 16)
    except ValueError:
        return None


def _link_basename(path: str) -> str | None:
    try:
        target = os.readlink(path)
    except OSError:
        return None
    name = os.path.basename(target.rstrip("/"))
    return name or None


def _numa_node(path: str) -> int | None:
    text = _read(path)
    if text is None:
        return None
    try:
        value = int(text.strip())
    except ValueError:
        return None
    return None if value < 0 else value


def _iommu_group(path: str) -> int | None:
    name = _link_basename(path)
    if name is None:
        return None
    try:
        return int(name)
    except ValueError:
        return None


def scan_functions(root: str = "/") -> list[dict[str, t.Any]]:
    """Every NVIDIA PCI function under ``<root>/sys/bus/pci/devices``, sorted by address."""
    base = _join(root, "/sys/bus/pci/devices")
    try:
        entries = sorted(os.listdir(base))
    except OSError:
        return []
    functions = []
    for entry in entries:
        path = os.path.join(base, entry)
        if _read_hex(os.path.join(path, "vendor")) != NVIDIA_VENDOR:
            continue
        device = _read_hex(os.path.join(path, "device"))
        pci_class = _read_hex(os.path.join(path, "class"))
        sub_vendor = _read_hex(os.path.join(path, "subsystem_vendor"))
        sub_device = _read_hex(os.path.join(path, "subsystem_device"))
        functions.append(
            {
                "pci_bus_id": normalize_bus_id(entry) or entry,
                "pci_device_id": format_device_id(NVIDIA_VENDOR, device),
                "subsystem_id": format_device_id(sub_vendor, sub_device),
                "class": None if pci_class is None else "0x%06x" % pci_class,
                "type": FUNCTION_OTHER if pci_class is None else classify(pci_class),
                "bound_driver": _link_basename(os.path.join(path, "driver")),
                "iommu_group": _iommu_group(os.path.join(path, "iommu_group")),
                "numa_node": _numa_node(os.path.join(path, "numa_node")),
            }
        )
    return functions


def _any_function(path: str, entry: str) -> dict[str, t.Any]:
    """One PCI function of any vendor, as the IOMMU-group and display listings report it."""
    vendor = _read_hex(os.path.join(path, "vendor"))
    device = _read_hex(os.path.join(path, "device"))
    pci_class = _read_hex(os.path.join(path, "class"))
    if pci_class is None:
        kind = FUNCTION_OTHER
    elif vendor != NVIDIA_VENDOR and (pci_class >> 16) == 0x06:
        kind = FUNCTION_BRIDGE  # 0x0680 is an NVSwitch only when NVIDIA makes it
    else:
        kind = classify(pci_class)
    boot_vga = _read(os.path.join(path, "boot_vga"))
    return {
        "pci_bus_id": normalize_bus_id(entry) or entry,
        "pci_device_id": format_device_id(vendor, device),
        "class": None if pci_class is None else "0x%06x" % pci_class,
        "type": kind,
        "bound_driver": _link_basename(os.path.join(path, "driver")),
        "boot_vga": None if boot_vga is None else boot_vga.strip() == "1",
    }


def scan_host_functions(root: str = "/") -> dict[str, t.Any]:
    """IOMMU state, the IOMMU groups holding NVIDIA functions (every member, any vendor), and every display function.

    ``iommu.enabled`` is true when the kernel created IOMMU groups. A group's members are the PCI functions whose
    ``iommu_group`` link names it (the same set as ``/sys/kernel/iommu_groups/<n>/devices``). ``display_functions``
    lists every display-class function of any vendor with its ``boot_vga`` flag (the console's device).
    """
    base = _join(root, "/sys/bus/pci/devices")
    try:
        entries = sorted(os.listdir(base))
    except OSError:
        entries = []
    by_group: dict[int, list[dict[str, t.Any]]] = {}
    nvidia_groups: set[int] = set()
    display = []
    for entry in entries:
        path = os.path.join(base, entry)
        group = _iommu_group(os.path.join(path, "iommu_group"))
        record = _any_function(path, entry)
        if group is not None:
            by_group.setdefault(group, []).append(record)
            if _read_hex(os.path.join(path, "vendor")) == NVIDIA_VENDOR:
                nvidia_groups.add(group)
        if record["class"] is not None and record["class"].startswith("0x03"):
            display.append(record)
    try:
        kernel_groups = bool(os.listdir(_join(root, "/sys/kernel/iommu_groups")))
    except OSError:
        kernel_groups = False
    return {
        "iommu": {
            "enabled": kernel_groups or bool(by_group),
            "groups": [{"group": group, "functions": by_group[group]} for group in sorted(nvidia_groups)],
        },
        "display_functions": display,
    }


def device_nodes(root: str = "/") -> list[str]:
    """``/dev/nvidia*`` and ``/dev/nvidia-caps/*`` present under root, as host paths."""
    found = set()
    for pattern in ("/dev/nvidia*", "/dev/nvidia-caps/*"):
        for path in glob.glob(_join(root, pattern)):
            if os.path.isdir(path):
                continue
            found.add("/" + os.path.relpath(path, root).replace(os.sep, "/"))

    def order(node: str) -> tuple[str, int, str]:
        match = re.match(r"^(.*?)(\d+)$", node)
        if match:
            return (match.group(1), int(match.group(2)), node)
        return (node, -1, node)

    return sorted(found, key=order)


def parse_proc_version(text: str | None) -> dict[str, str | None]:
    """Parse ``/proc/driver/nvidia/version``.

    ``NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.15  Release Build ...`` is the open module;
    ``NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  ...`` is the proprietary one.
    """
    result: dict[str, str | None] = {"version": None, "type": None}
    if not text:
        return result
    for line in text.splitlines():
        if not line.startswith("NVRM version:"):
            continue
        result["type"] = "open" if "Open Kernel Module" in line else "proprietary"
        match = re.search(r"\s(\d+\.\d+(?:\.\d+)?)\s", line + " ")
        if match:
            result["version"] = match.group(1)
        break
    return result


def _regular_file(path: str) -> bool:
    """Whether ``path`` is a regular file (through a link); a FIFO, socket or device under the root is never opened,
    since opening a FIFO blocks."""
    try:
        return _files.check_file(path, "root")
    except _files.FileError:
        return False


def _module_license(path: str) -> str | None:
    if not _regular_file(path):
        return None
    try:
        if path.endswith(".xz"):
            with lzma.open(path, "rb") as handle:
                data = handle.read()
        elif path.endswith(".gz"):
            with gzip.open(path, "rb") as handle:
                data = handle.read()
        else:
            with open(path, "rb") as handle:
                data = handle.read()
    except (OSError, lzma.LZMAError, EOFError):
        return None
    match = re.search(rb"(?:^|\x00)license=([^\x00]*)\x00", data)
    return match.group(1).decode("ascii", "replace") if match else None


def module_type_from_license(license_text: str | None) -> str | None:
    """The open modules are ``Dual MIT/GPL``; the proprietary module declares ``NVIDIA``."""
    if not license_text:
        return None
    if "MIT" in license_text or "GPL" in license_text:
        return "open"
    if license_text.strip() == "NVIDIA":
        return "proprietary"
    return None


def nvidia_module_files(root: str = "/", kernel_release: str | None = None) -> t.Iterator[str]:
    """Paths of the nvidia kernel module files built for the kernel, in module-search-directory order."""
    release = kernel_release or os.uname().release
    base = _join(root, "/lib/modules/%s" % release)
    seen = set()
    for sub in _MODULE_SEARCH_DIRS:
        top = os.path.join(base, sub)
        if not os.path.isdir(top):
            continue
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames.sort()
            for name in sorted(filenames):
                path = os.path.join(dirpath, name)
                if _MODULE_FILE_RE.match(name) and path not in seen:
                    seen.add(path)
                    yield path


def installed_module_type(root: str = "/", kernel_release: str | None = None) -> str | None:
    """Type of the nvidia kernel module built for the running kernel, read from its ``license=`` modinfo tag."""
    for path in nvidia_module_files(root, kernel_release):
        module_type = module_type_from_license(_module_license(path))
        if module_type:
            return module_type
    return None


def kernel_module(root: str = "/", kernel_release: str | None = None) -> dict[str, t.Any]:
    """Whether the nvidia kernel module is loaded, its version and whether it is the open or proprietary one."""
    proc = parse_proc_version(_read(_join(root, "/proc/driver/nvidia/version")))
    sys_version = _read(_join(root, "/sys/module/nvidia/version"))
    loaded = proc["version"] is not None or os.path.isdir(_join(root, "/sys/module/nvidia"))
    version = proc["version"] or (sys_version.strip() if sys_version else None) or None
    module_type = proc["type"]
    if module_type is None:
        module_type = installed_module_type(root, kernel_release)
    return {"loaded": loaded, "version": version, "type": module_type}


def _resolve_in_root(root: str, path: str, depth: int = 0) -> str | None:
    """Follow symlinks of a host path inside root; return the final host path if it exists."""
    full = _join(root, path)
    if depth > 16:
        return None
    if os.path.islink(full):
        target = os.readlink(full)
        if not target.startswith("/"):
            target = os.path.normpath(os.path.join(os.path.dirname(path), target))
        return _resolve_in_root(root, target, depth + 1)
    return path if os.path.exists(full) else None


def _ld_cache_paths(root: str, soname: str) -> list[str]:
    """Paths the ld.so cache (``/etc/ld.so.cache``) records for a soname: its string table holds full paths."""
    cache = _join(root, "/etc/ld.so.cache")
    if not _regular_file(cache):
        return []
    try:
        with open(cache, "rb") as handle:
            data = handle.read()
    except OSError:
        return []
    pattern = re.compile(rb"(/[^\x00]*/" + re.escape(soname.encode()) + rb")\x00")
    seen: list[str] = []
    for match in pattern.finditer(data):
        path = match.group(1).decode("utf-8", "replace")
        if path not in seen:
            seen.append(path)
    return seen


def find_library(root: str, soname: str) -> str | None:
    """The host path of a shared library, from the ld.so cache, else the standard library directories."""
    candidates = _ld_cache_paths(root, soname) + [os.path.join(d, soname) for d in STANDARD_LIB_DIRS]
    for candidate in candidates:
        if _resolve_in_root(root, candidate) is not None:
            return candidate
    return None


def library_version(root: str, path: str | None) -> str | None:
    """``libnvidia-ml.so.1 -> libnvidia-ml.so.550.54.15`` gives ``550.54.15``."""
    if not path:
        return None
    resolved = _resolve_in_root(root, path)
    if not resolved:
        return None
    match = re.search(r"\.so\.(\d+\.\d+(?:\.\d+)?)$", resolved)
    return match.group(1) if match else None


def scan(root: str = "/", kernel_release: str | None = None) -> dict[str, t.Any]:
    """The whole PCI/host picture, as one dict (see nvidia_gpu_facts RETURN for the keys it feeds)."""
    functions = scan_functions(root)
    libraries = {key: find_library(root, soname) for key, soname in LIBRARIES.items()}
    host = scan_host_functions(root)
    return {
        "functions": functions,
        "iommu": host["iommu"],
        "display_functions": host["display_functions"],
        "gpus": [f for f in functions if f["type"] == FUNCTION_GPU],
        "nvswitch_count": sum(1 for f in functions if f["type"] == FUNCTION_NVSWITCH),
        "device_nodes": device_nodes(root),
        "kernel_module": kernel_module(root, kernel_release),
        "library_paths": libraries,
        "library_files": {key: _resolve_in_root(root, path) if path else None for key, path in libraries.items()},
        "library_version": library_version(root, libraries["nvml"]),
    }
