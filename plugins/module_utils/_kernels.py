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

The nvidia modules registered with DKMS (``dkms``) are read from DKMS's own tree, as ``dkms status`` reads it (the
driver's report had a ``dkms status`` call of its own after every install): ``/var/lib/dkms/<module>/<version>/`` is a
registered (added) version, ``<version>/<kernel>/<arch>/module/`` a build for a kernel, and the link
``<module>/kernel-<kernel>-<arch>`` -> ``<version>/<kernel>/<arch>`` the build installed into that kernel's modules
(DKMS 3's ``do_install``).
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


DKMS_TREE = "/var/lib/dkms"


def _dirs(path: str) -> list[str]:
    """The subdirectories of ``path`` (not links to them), sorted; none when it cannot be read."""
    try:
        names = os.listdir(path)
    except OSError:
        return []
    return sorted(name for name in names if os.path.isdir(os.path.join(path, name)) and not os.path.islink(os.path.join(path, name)))


def dkms_registrations(root: str = "/") -> list[dict[str, t.Any]]:
    """The nvidia modules DKMS knows: ``[{module, version, built: [kernel], installed: [kernel]}]``, by module and version.

    A version with neither builds nor installs is only added (its sources registered, no kernel's headers yet)."""
    tree = _join(root, DKMS_TREE)
    found = []
    for module in _dirs(tree):
        if "nvidia" not in module:
            continue
        base = os.path.join(tree, module)
        installed: dict[str, list[str]] = {}
        for link in sorted(os.listdir(base)):
            path = os.path.join(base, link)
            if link.startswith("kernel-") and os.path.islink(path):
                parts = os.readlink(path).strip("/").split("/")
                if len(parts) == 3:
                    installed.setdefault(parts[0], []).append(parts[1])
        for version in _dirs(base):
            if version.startswith("kernel-"):
                continue
            vdir = os.path.join(base, version)
            built = [kernel for kernel in _dirs(vdir) if kernel not in ("source", "build")
                     and any(os.path.isdir(os.path.join(vdir, kernel, arch, "module")) for arch in _dirs(os.path.join(vdir, kernel)))]
            found.append({"module": module, "version": version, "built": sorted(built, key=version_key),
                          "installed": sorted(installed.get(version, []), key=version_key)})
    return found


def dkms_lines(registrations: t.Any) -> list[str]:
    """One line per registration, as ``dkms status`` sums it up: ``nvidia-current/535.261.03: installed for 6.1.0-26-amd64;
    built for 6.1.0-28-amd64`` (built and not installed), or ``...: added`` (built for no kernel)."""
    lines = []
    for entry in registrations or []:
        installed = list(entry.get("installed") or [])
        built = [kernel for kernel in entry.get("built") or [] if kernel not in installed]
        states = (["installed for " + ", ".join(installed)] if installed else []) + (["built for " + ", ".join(built)] if built else [])
        lines.append("%s/%s: %s" % (entry.get("module"), entry.get("version"), "; ".join(states) or "added (built for no kernel yet)"))
    return lines


def installed_kernels(root: str = "/", running: str | None = None, boot_hint: str | None = None) -> dict[str, t.Any]:
    """``{running, boot, boot_source, installed: [{release, nvidia_module, module_files}], without_module, dkms}``."""
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
        "dkms": dkms_registrations(root),
    }


def boot_problem(kernels: dict[str, t.Any] | None) -> str | None:
    """Why the kernel the host boots next cannot load the driver (it has no nvidia module), or None."""
    if not kernels or not kernels.get("boot"):
        return None
    entry = next((k for k in kernels.get("installed") or [] if k.get("release") == kernels["boot"]), None)
    if entry is None or entry.get("nvidia_module"):
        return None
    others = [str(k.get("release")) for k in kernels.get("installed") or [] if k.get("nvidia_module")]
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
