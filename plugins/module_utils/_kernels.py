# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The installed kernels, which of them have an nvidia module, and the kernel the host boots next.

Private to this collection: no compatibility promise outside gpuhost.nvidia.

Read below a root (``/`` on a real host, a synthetic tree in tests). A kernel is installed when
``/lib/modules/<release>`` holds its own modules (``kernel/`` or ``modules.dep``) or ``/boot/vmlinuz-<release>``
exists; a directory that only holds what DKMS left after the kernel was removed does not count. Its nvidia module is
any ``nvidia.ko*`` (``nvidia-current``, ``nvidia-open`` too) under the module search directories the facts already use
(``updates/dkms``, ``updates``, ``extra``, ``kernel/drivers/video``, ...) or Ubuntu's ``kernel/nvidia-580srv-open/``. The host boots the newest installed kernel
(version order, as GRUB's menu and ``kernel-install`` put it first) unless the boot loader says otherwise (EL's
``grubby --default-kernel``: pass it as ``boot_hint``).
"""

from __future__ import annotations

import os
import re
import typing as t

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _pci

# The nvidia module file names (the main module; nvidia-uvm, -drm, -modeset, -peermem are not it).
_MODULE_FILE_RE = re.compile(r"^nvidia(-current)?(-open)?\.ko(\.(xz|gz|zst))?$")
_RELEASE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+~-]{0,127}$")
# Debian and Ubuntu kernel releases: <upstream>-<abi>-<flavour>, e.g. 6.1.0-26-cloud-amd64, 6.8.0-45-generic.
# Debian 13 writes the ABI as +debNN: 6.12.48+deb13-amd64.
_DEB_FLAVOUR_RE = re.compile(r"^\d+\.\d+(?:\.\d+)?(?:-\d+(?:\.\d+)?|\+deb\d+)-([a-z][a-z0-9-]*)$")


def version_key(release: str) -> tuple[t.Any, ...]:
    """A sort key that orders kernel releases as version numbers (6.1.0-10 after 6.1.0-9)."""
    return tuple((0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", release) if part)


def debian_flavour(release: str | None) -> str | None:
    """The flavour of a Debian/Ubuntu kernel release (``amd64``, ``cloud-amd64``, ``generic``); None for other kernels."""
    match = _DEB_FLAVOUR_RE.match(release or "")
    return match.group(1) if match else None


def module_files(root: str, release: str) -> list[str]:
    """The nvidia module files of one kernel: the facts' search directories, then Ubuntu's precompiled
    ``kernel/nvidia-<branch>[srv][-open]/`` (linux-modules-nvidia-*), as paths from the root."""
    found = list(_pci.nvidia_module_files(root, release))
    kernel_dir = _join(root, "/lib/modules/%s/kernel" % release)
    try:
        extra = sorted(n for n in os.listdir(kernel_dir) if n.startswith("nvidia") and os.path.isdir(os.path.join(kernel_dir, n)))
    except OSError:
        extra = []
    for name in extra:
        for entry in sorted(os.listdir(os.path.join(kernel_dir, name))):
            path = os.path.join(kernel_dir, name, entry)
            if _MODULE_FILE_RE.match(entry) and path not in found:
                found.append(path)
    return ["/" + os.path.relpath(path, root) for path in found]


def _join(root: str, path: str) -> str:
    return os.path.join(root, path.lstrip("/"))


def _installed_releases(root: str) -> list[str]:
    base = _join(root, "/lib/modules")
    try:
        names = os.listdir(base)
    except OSError:
        names = []
    releases = []
    for name in names:
        path = os.path.join(base, name)
        if not _RELEASE_RE.match(name) or not os.path.isdir(path):
            continue
        if (os.path.isdir(os.path.join(path, "kernel")) or os.path.isfile(os.path.join(path, "modules.dep"))
                or os.path.isfile(_join(root, "/boot/vmlinuz-%s" % name))):
            releases.append(name)
    return sorted(releases, key=version_key)


def boot_release_from_hint(hint: str | None) -> str | None:
    """The release in what a boot loader tool prints for the default entry (``/boot/vmlinuz-<release>``, or a release)."""
    text = (hint or "").strip().splitlines()[0].strip() if (hint or "").strip() else ""
    name = os.path.basename(text)
    if name.startswith("vmlinuz-"):
        name = name[len("vmlinuz-"):]
    return name if _RELEASE_RE.match(name) else None


def installed_kernels(root: str = "/", running: str | None = None, boot_hint: str | None = None) -> dict[str, t.Any]:
    """``{running, boot, boot_source, installed: [{release, nvidia_module, module_files}], without_module}``."""
    installed = []
    for release in _installed_releases(root):
        files = module_files(root, release)
        installed.append({"release": release, "nvidia_module": bool(files), "module_files": files})
    releases = [k["release"] for k in installed]
    hinted = boot_release_from_hint(boot_hint)
    if hinted and hinted in releases:
        boot, source = hinted, "boot loader"
    elif releases:
        boot, source = releases[-1], "newest installed"
    else:
        boot, source = None, None
    return {
        "running": running if running is not None else os.uname().release,
        "boot": boot,
        "boot_source": source,
        "installed": installed,
        "without_module": [k["release"] for k in installed if not k["nvidia_module"]],
    }


def boot_problem(kernels: dict[str, t.Any] | None) -> str | None:
    """Why the kernel the host boots next cannot load the driver (it has no nvidia module), or None."""
    if not kernels or not kernels.get("boot"):
        return None
    entry = next((k for k in kernels.get("installed") or [] if k.get("release") == kernels["boot"]), None)
    if entry is None or entry.get("nvidia_module"):
        return None
    others = [k["release"] for k in kernels.get("installed") or [] if k.get("nvidia_module")]
    return "the host boots %s next (%s) and it has no nvidia module (kernels with one: %s)" % (
        kernels["boot"], kernels.get("boot_source") or "newest installed", ", ".join(others) or "none")


def boot_fix(kernels: dict[str, t.Any] | None) -> str:
    """What to do about ``boot_problem``, naming the kernel."""
    release = (kernels or {}).get("boot") or "<release>"
    flavour = debian_flavour(release)
    headers = ("linux-headers-%s (and linux-headers-%s, which follows kernel updates)" % (release, flavour) if flavour
               else "kernel-devel-%s (EL, Fedora) or linux-headers (Arch)" % release)
    return ("Install the headers of %s - %s - and build the module with `dkms autoinstall -k %s` (or re-run the "
            "nvidia_driver role), or install the precompiled module package for that kernel; then reboot" % (release, headers, release))
