# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The nvidia kernel module's NVreg_* parameters: which keys exist, the values each accepts, and the modprobe.d line.

Private to this collection: no compatibility promise outside gpuhost.nvidia.

The keys and their documented values are NVIDIA's (open-gpu-kernel-modules, src/nvidia/arch/nvalloc/unix/include/
nv-reg.h, and the driver README's chapters; docs/sources.md). The module declares every numeric key as a signed int
module parameter and every string key as charp, so a value reaches the driver as one word of an ``options nvidia``
line in a modprobe.d file: the values here are held to what that line can carry unquoted (no blank, quote, ``#`` or
line break) and to each key's documented form, so that nothing but the key's own value reaches the file.

Keys left out on purpose, each refused with the reason: the debug-only ones (ResmanDebugLevel, RmLogonRC, RmMsg,
EnableDbgBreakpoint), the VMware ESXi-only ones (MemoryPoolSize, KMallocHeapMaxSize, VMallocHeapMaxSize,
IgnoreMMIOCheck), the deprecated GpuBlacklist (ExcludedGpus replaces it) and OpenRmEnableUnsupportedGpus (ignored by
the driver since the open modules support every GPU they run on).
"""

from __future__ import annotations

import re
import typing as t

MODULE = "nvidia"
PREFIX = "NVreg_"
INT_MAX = 2**31 - 1  # module_param(x, int, 0)

# name -> (kind, detail): "bool" (0 or 1), "enum" (the allowed ints), "int" ((lowest, highest)), "mode" (an octal
# file mode), "string" (a pattern its whole value must match) and a short description for the error message.
_BOOL = ("bool", (0, 1))
KEYS: dict[str, tuple[str, t.Any]] = {
    "ModifyDeviceFiles": _BOOL,
    "DeviceFileUID": ("int", (0, INT_MAX)),
    "DeviceFileGID": ("int", (0, INT_MAX)),
    "DeviceFileMode": ("mode", (0, 0o777)),
    "InitializeSystemMemoryAllocations": _BOOL,
    "UsePageAttributeTable": _BOOL,
    "EnableMSI": _BOOL,
    "EnablePCIeGen3": _BOOL,
    "EnableStreamMemOPs": _BOOL,
    "EnableUserNUMAManagement": _BOOL,
    "NvLinkDisable": _BOOL,
    "RestrictProfilingToAdminUsers": _BOOL,
    "PreserveVideoMemoryAllocations": _BOOL,
    "TemporaryFilePath": ("string", "an absolute directory path of letters, digits and ._-/ (e.g. /var/tmp)"),
    "EnableS0ixPowerManagement": _BOOL,
    "S0ixPowerManagementVideoMemoryThreshold": ("int", (0, INT_MAX)),
    "DynamicPowerManagement": ("enum", (0, 1, 2, 3)),
    "DynamicPowerManagementVideoMemoryThreshold": ("int", (0, 200)),
    "RegisterPCIDriver": _BOOL,
    "EnablePCIERelaxedOrderingMode": _BOOL,
    "EnableResizableBar": _BOOL,
    "EnableGpuFirmware": _BOOL,
    "EnableGpuFirmwareLogs": _BOOL,
    "DmaRemapPeerMmio": _BOOL,
    "RmNvlinkBandwidthLinkCount": ("int", (0, INT_MAX)),
    "RmNvlinkBandwidth": ("string", "one of OFF, MIN, HALF, 3QUARTER, FULL"),
    "EnableNonblockingOpen": _BOOL,
    "ImexChannelCount": ("int", (0, 2**20)),
    "CreateImexChannel0": _BOOL,
    "GrdmaPciTopoCheckOverride": _BOOL,
    "ExcludedGpus": ("string", "a comma-separated list of GPU UUIDs (GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)"),
    "RegistryDwords": ("string", "semicolon-separated key=value pairs, each key a word and each value a number"),
    "RegistryDwordsPerDevice": ("string", "pci=DDDD:BB:DD.F; followed by key=value pairs, semicolon-separated"),
    "UseKernelSuspendNotifiers": _BOOL,
}
REFUSED: dict[str, str] = {
    "ResmanDebugLevel": "a debugging key of NVIDIA's resource manager, not a setting for a production host",
    "RmLogonRC": "a debugging key of NVIDIA's resource manager, not a setting for a production host",
    "RmMsg": "a debugging key of NVIDIA's resource manager, not a setting for a production host",
    "EnableDbgBreakpoint": "a debugging key (a CPU breakpoint on every driver assertion), never for a production host",
    "MemoryPoolSize": "honoured only on VMware ESXi",
    "KMallocHeapMaxSize": "honoured only on VMware ESXi",
    "VMallocHeapMaxSize": "honoured only on VMware ESXi",
    "IgnoreMMIOCheck": "honoured only on VMware ESXi",
    "GpuBlacklist": "deprecated by NVIDIA; use NVreg_ExcludedGpus with the same GPU UUIDs",
    "OpenRmEnableUnsupportedGpus": "deprecated and ignored by the driver; remove it",
}

_NUMBER = re.compile(r"0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*")
_PATH = re.compile(r"^/[A-Za-z0-9._/-]*$")
_UUID = r"GPU-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_UUIDS = re.compile(rf"^{_UUID}(,{_UUID})*$")
_PAIR = r"[A-Za-z][A-Za-z0-9_]*=(0[xX][0-9a-fA-F]+|[0-9]+)"
_DWORDS = re.compile(rf"^{_PAIR}(;{_PAIR})*;?$")
_BDF = r"pci=([0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(\.[0-7])?"
_PER_DEVICE = re.compile(rf"^({_BDF};({_PAIR};)*{_PAIR};?)+$")
_NVLINK_BW = ("OFF", "MIN", "HALF", "3QUARTER", "FULL")


def _number(value: t.Any) -> int | None:
    """An int from YAML's int or from the forms the kernel's kstrtoint(base 0) reads (decimal, 0x hex, 0 octal)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and _NUMBER.fullmatch(value):
        return int(value, 8) if re.fullmatch(r"0[0-7]+", value) else int(value, 0)
    return None


def _string_ok(name: str, value: str) -> bool:
    if name == "TemporaryFilePath":
        return bool(_PATH.fullmatch(value)) and "/../" not in value + "/" and not value.endswith("/..")
    if name == "RmNvlinkBandwidth":
        return value in _NVLINK_BW
    if name == "ExcludedGpus":
        return bool(_UUIDS.fullmatch(value))
    if name == "RegistryDwords":
        return bool(_DWORDS.fullmatch(value))
    return bool(_PER_DEVICE.fullmatch(value))


def errors(params: t.Any, var: str = "nvidia_driver_module_params") -> list[str]:
    """Every reason ``params`` (a dict of NVreg_<Key>: value) cannot be written, each naming the key, the value and
    the fix; [] when it can."""
    if params is None:
        return []
    if not isinstance(params, dict):
        return [f"{var} must be a mapping of NVreg_<Key>: value, got {type(params).__name__} {params!r}"]
    found = []
    for key, value in params.items():
        if not isinstance(key, str) or not key.startswith(PREFIX):
            bare = str(key)
            hint = (f" (did you mean {PREFIX}{bare}?)" if bare in KEYS else "")
            found.append(f"{var}: key {key!r} is not an NVreg_ parameter of the nvidia module{hint}; keys are written "
                         f"as the driver names them, e.g. NVreg_EnableGpuFirmware")
            continue
        name = key[len(PREFIX):]
        if name in REFUSED:
            found.append(f"{var}: {key} is not managed by this collection: {REFUSED[name]}")
            continue
        if name not in KEYS:
            found.append(f"{var}: {key} is not a known nvidia module parameter (known: "
                         f"{', '.join(PREFIX + k for k in sorted(KEYS))}); check its spelling against the driver "
                         f"README or `modinfo -p nvidia`")
            continue
        kind, detail = KEYS[name]
        if kind == "string":
            if not isinstance(value, str) or not _string_ok(name, value):
                found.append(f"{var}: {key}={value!r} is not {detail}")
            continue
        number = _number(value)
        if kind == "mode" and isinstance(value, str) and number is not None and not value.startswith("0"):
            number = None  # a mode written as a string must say it is octal ("0660"); 660 as a YAML int is decimal
        if number is None:
            form = {"bool": "0 or 1", "enum": "one of " + ", ".join(str(v) for v in detail),
                    "int": f"a whole number from {detail[0]} to {detail[1]}",
                    "mode": "an octal file mode as a string, e.g. '0660'"}[kind]
            found.append(f"{var}: {key}={value!r} is not a number; give {form}")
            continue
        if kind in ("bool", "enum") and number not in detail:
            found.append(f"{var}: {key}={value!r} must be one of {', '.join(str(v) for v in detail)}")
        elif kind in ("int", "mode") and not detail[0] <= number <= detail[1]:
            shown = (f"{detail[0]:#o} to {detail[1]:#o}" if kind == "mode" else f"{detail[0]} to {detail[1]}")
            found.append(f"{var}: {key}={value!r} is out of range ({shown})")
    return found


def render_value(key: str, value: t.Any) -> str:
    """The value as the options line carries it (call only after errors() returned [])."""
    kind = KEYS[key[len(PREFIX):]][0]
    if kind == "string":
        return value
    number = _number(value)
    return f"0{number:o}" if kind == "mode" else str(number)


def content(params: dict[str, t.Any] | None) -> str:
    """The modprobe.d file for ``params`` (keys sorted, so the same dict always writes the same bytes); "" for none.
    Call only after errors() returned []."""
    if not params:
        return ""
    words = " ".join(f"{key}={render_value(key, params[key])}" for key in sorted(params))
    return ("# Managed by gpuhost.nvidia (nvidia_driver_module_params): the nvidia kernel module's parameters.\n"
            "# Read when the module loads; the role regenerates the initramfs when this file changes.\n"
            f"options {MODULE} {words}\n")
