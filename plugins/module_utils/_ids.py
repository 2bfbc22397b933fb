# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Identifiers and versions as the facts write them: PCI addresses, PCI device ids, driver branches, version tuples.

Private to this collection: no compatibility promise outside gpuhost.nvidia.

The facts backends write these values and the planners compare them; both import them from here, so a planner does
not load the backends' helpers (_common) to read a bus id.
"""

from __future__ import annotations

import re
import typing as t

_BUS_ID_RE = re.compile(
    r"^(?:(?P<domain>[0-9a-fA-F]{1,8}):)?(?P<bus>[0-9a-fA-F]{1,2}):(?P<device>[0-9a-fA-F]{1,2})\.(?P<function>[0-7])$"
)


def normalize_bus_id(value: t.Any) -> str | None:
    """Return a PCI address as ``dddd:bb:dd.f`` (lower case, 4-digit domain), or None.

    NVML and nvidia-smi write ``00000000:01:00.0``; sysfs writes ``0000:01:00.0``. Domains wider than 16 bits
    (Hyper-V guests, for example ``00001580:00:00.0``) keep their significant digits.
    """
    if value is None:
        return None
    if isinstance(value, bytes):
        value = value.decode("ascii", "replace")
    match = _BUS_ID_RE.match(str(value).strip())
    if not match:
        return None
    domain = int(match.group("domain") or "0", 16)
    return "%04x:%02x:%02x.%s" % (
        domain,
        int(match.group("bus"), 16),
        int(match.group("device"), 16),
        match.group("function"),
    )


def format_device_id(vendor: int | None, device: int | None) -> str | None:
    """Return ``10de:2330`` style ids (lower case hex)."""
    if vendor is None or device is None:
        return None
    return "%04x:%04x" % (vendor, device)


def device_id_from_nvml(pci_device_id: t.Any) -> str | None:
    """Convert NVML/nvidia-smi's combined id (``0x233010DE`` or ``233010DE``) to ``10de:2330``.

    The low 16 bits are the vendor, the high 16 bits the device. Anything that is not an NVIDIA id
    (``000000DE`` in some VMs, ``[REDACTED]``) gives None.
    """
    if pci_device_id is None:
        return None
    if isinstance(pci_device_id, int):
        value = pci_device_id
    else:
        text = str(pci_device_id).strip()
        if text.lower().startswith("0x"):
            text = text[2:]
        if not re.match(r"^[0-9a-fA-F]{1,8}$", text):
            return None
        value = int(text, 16)
    vendor = value & 0xFFFF
    device = (value >> 16) & 0xFFFF
    if vendor != 0x10DE or device == 0:
        return None
    return format_device_id(vendor, device)


def driver_branch(version: str | None) -> str | None:
    """``535.104.05`` -> ``535``."""
    if not version:
        return None
    match = re.match(r"^\s*(\d+)(?:\.|$)", str(version))
    return match.group(1) if match else None


def version_tuple(version: t.Any) -> tuple[int, ...] | None:
    """Parse ``535.104.05`` (or ``535``, ``12.2``) into a tuple of ints; None when it is not a version."""
    if version is None:
        return None
    text = str(version).strip()
    if not re.match(r"^\d+(\.\d+)*$", text):
        return None
    return tuple(int(part) for part in text.split("."))
