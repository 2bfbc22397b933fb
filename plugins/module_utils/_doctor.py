# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The GPU doctor's checks: pure functions of the GPU facts and a snapshot of a few host files.

Private to this collection: no compatibility promise outside gpuhost.nvidia.

Everything about the GPUs and the driver comes from ``ansible_facts.nvidia_gpu`` (gathered with ``gather: [health]``).
:func:`read_host` only reads what the facts do not hold: loaded modules other than nvidia, the Secure Boot variable,
the container runtime configuration files, CDI specs, ``/dev/char`` links and the cgroup version. Each check returns
``{id, title, status, evidence, fix}`` with status ``ok``, ``warn`` or ``fail``; ``fix`` is empty when ok.
"""

from __future__ import annotations

import json
import os
import re
import typing as t

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _catalog, _cdi_compat, _files, _kernels, _pci, _runtime, _toolkit
from ansible_collections.gpuhost.nvidia.plugins.module_utils._ids import version_tuple

try:
    import tomllib  # Python 3.11+

    HAS_TOMLLIB = True
except ImportError:  # pragma: no cover - Python < 3.11
    tomllib = None  # type: ignore[assignment]
    HAS_TOMLLIB = False

OK, WARN, FAIL = "ok", "warn", "fail"
STATUSES = (OK, WARN, FAIL)
# The UEFI SecureBoot variable (EFI_GLOBAL_VARIABLE's GUID) as efivarfs shows it: four octets of attributes, then the
# one-octet value, 1 on and 0 off (docs/sources.md, "Secure Boot, fail closed").
SECURE_BOOT_VAR = "/sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"
SIGNATURE_MAGIC = b"~Module signature appended~\n"
# Throttle reasons that are not a problem: idle, a clock the admin set, sync boost, a display clock.
BENIGN_THROTTLE = frozenset({"gpu_idle", "applications_clocks_setting", "sync_boost", "display_clock_setting"})
HARD_THROTTLE = frozenset({"hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"})
# Where a containerd configuration keeps its runtimes: under the CRI plugin of each config version that
# nvidia_container_runtime writes (_runtime.CRI_PLUGIN: cri for version 1 or no version line, io.containerd.grpc.v1.cri
# for 2, io.containerd.cri.v1.runtime for containerd 2.x), in that order.
CONTAINERD_RUNTIME_TABLES = tuple(("plugins", plugin, "containerd", "runtimes") for plugin in dict.fromkeys(_runtime.CRI_PLUGIN.values()))
DEFAULTS: dict[str, t.Any] = {
    "docker_daemon_json": _runtime.DEFAULT_PATHS["docker"],
    "containerd_config": _runtime.DEFAULT_PATHS["containerd"],
    "containerd_conf_dir": _runtime.CONTAINERD_CONF_DIR,
    "cdi_dirs": ["/etc/cdi", "/var/run/cdi"],
    "cdi_kind": "nvidia.com/gpu",
    "runtime_name": "nvidia",
    "required_cuda": None,
    "vfio_devices": [],
    "ecc_corrected_warn": 100,
    "compose_files": [],
    "toolkit_version": None,
}


def check(cid: str, title: str, status: str, evidence: str, fix: str = "") -> dict[str, str]:
    return {"id": cid, "title": title, "status": status, "evidence": evidence, "fix": fix if status != OK else ""}


# -- reading the host ------------------------------------------------------------------------------------------


def _join(root: str, path: str) -> str:
    return os.path.join(root, path.lstrip("/"))


def _read_text(path: str) -> str | None:
    """The text of a configuration file; None when it is missing or is not a regular file that can be read. Read
    through _files, which refuses a FIFO, socket or device before opening it (a FIFO would hang the module)."""
    try:
        data = _files.read_bytes(path, "path")
    except (OSError, _files.FileError):
        return None
    return None if data is None else data.decode("utf-8", "replace")


def _file(root: str, path: str) -> dict[str, t.Any]:
    full = _join(root, path)
    text = _read_text(full)
    return {"path": path, "exists": text is not None, "text": text, "mtime": os.path.getmtime(full) if text is not None else None}


def _secure_boot(root: str) -> bool | None:
    """True/False from the EFI variable; None when it cannot be read: no /sys/firmware/efi (a legacy boot, or a
    container that cannot see the firmware: :func:`_firmware_visible` tells them apart), or a variable that is missing,
    unreadable or holds anything but 0 or 1."""
    if not os.path.isdir(_join(root, "/sys/firmware/efi")):
        return None
    try:
        with open(_join(root, SECURE_BOOT_VAR), "rb") as handle:
            data = handle.read(64)
    except OSError:
        return None
    if len(data) != 5 or data[4] not in (0, 1):
        return None
    return data[4] == 1


def _firmware_visible(root: str) -> bool:
    """Whether /sys/firmware shows the firmware's entries (acpi, dmi, efi, devicetree...): a container often has it
    empty or masked, and there a missing efi directory says nothing about how the host booted."""
    try:
        return bool(os.listdir(_join(root, "/sys/firmware")))
    except OSError:
        return False


def _module_signed(root: str, kernel_release: str) -> tuple[str | None, bool | None]:
    """The nvidia module file built for the kernel and whether it carries a signature (None: compressed, cannot tell)."""
    for path in _pci.nvidia_module_files(root, kernel_release):
        shown = "/" + os.path.relpath(path, root)
        if not path.endswith(".ko"):
            return shown, None
        try:
            with open(path, "rb") as handle:
                handle.seek(max(0, os.path.getsize(path) - len(SIGNATURE_MAGIC)))
                return shown, handle.read() == SIGNATURE_MAGIC
        except OSError:
            return shown, None
    return None, None


def _char_links(root: str, nodes: t.Iterable[str]) -> dict[str, dict[str, t.Any]]:
    """For each /dev/nvidia* character device: its major:minor and whether /dev/char/MAJOR:MINOR exists."""
    links = {}
    for node in nodes:
        try:
            st = os.stat(_join(root, node))
        except OSError:
            continue
        if not (st.st_mode & 0o170000) == 0o020000:  # not a character device (test trees use plain files)
            continue
        key = "%d:%d" % (os.major(st.st_rdev), os.minor(st.st_rdev))
        links[node] = {"dev": key, "char_link": os.path.lexists(_join(root, "/dev/char/%s" % key))}
    return links


def read_host(facts: dict[str, t.Any], params: dict[str, t.Any], root: str = "/", kernel_release: str | None = None,
              commands: dict[str, t.Any] | None = None) -> dict[str, t.Any]:
    """What the checks need beyond the facts. Reads only; every path is under ``root``. ``commands`` is what
    :func:`read_commands` read on the host (the kernel log, Fabric Manager's state, the Docker version); without it
    those are unknown."""
    release = kernel_release or os.uname().release
    conf_dir = _join(root, params["containerd_conf_dir"])
    dropins = []
    if os.path.isdir(conf_dir):
        dropins = [_file(root, os.path.join(params["containerd_conf_dir"], n)) for n in sorted(os.listdir(conf_dir)) if n.endswith(".toml")]
    cdi = []
    for directory in params["cdi_dirs"]:
        full = _join(root, directory)
        if os.path.isdir(full):
            cdi.extend(_file(root, os.path.join(directory, n)) for n in sorted(os.listdir(full)) if n.endswith((".yaml", ".yml", ".json")))
    library = ((facts.get("driver") or {}).get("library_paths") or {}).get("nvml")
    library_mtime = None
    if library:
        try:
            library_mtime = os.path.getmtime(os.path.realpath(_join(root, library)))
        except OSError:
            library_mtime = None
    module_path, module_signed = _module_signed(root, release)
    return {
        "root": root,
        "kernel_release": release,
        "nouveau_loaded": os.path.isdir(_join(root, "/sys/module/nouveau")),
        "secure_boot": _secure_boot(root),
        "efi": os.path.isdir(_join(root, "/sys/firmware/efi")),
        "firmware_visible": _firmware_visible(root),
        "module_path": module_path,
        "module_signed": module_signed,
        "docker_daemon_json": _file(root, params["docker_daemon_json"]),
        "containerd_config": _file(root, params["containerd_config"]),
        "containerd_dropins": [d for d in dropins if d["exists"]],
        "cdi_specs": [s for s in cdi if s["exists"]],
        "compose_files": [c for c in (_file(root, path) for path in params.get("compose_files") or []) if c["exists"]],
        "library_mtime": library_mtime,
        "char_links": _char_links(root, facts.get("device_nodes") or []),
        "cgroup_v2": os.path.isfile(_join(root, "/sys/fs/cgroup/cgroup.controllers")),
        # Facts gathered before the key existed carry no kernels: read them here, under the same root.
        "kernels": facts.get("kernels") if isinstance(facts.get("kernels"), dict) else _kernels.installed_kernels(root, release),
        **(commands if commands is not None else unread_commands("no command was run on the host")),
        **read_toolkit_host(root),
        "apt_sources": read_apt_sources(root),
    }


APT_SOURCES = "/etc/apt/sources.list"
APT_SOURCES_DIR = "/etc/apt/sources.list.d"


def read_apt_sources(root: str) -> list[dict[str, t.Any]]:
    """apt's source files (sources.list, sources.list.d/*.list and *.sources) that exist, as _file dicts."""
    files = [_file(root, APT_SOURCES)]
    directory = _join(root, APT_SOURCES_DIR)
    if os.path.isdir(directory):
        files += [_file(root, os.path.join(APT_SOURCES_DIR, n)) for n in sorted(os.listdir(directory))
                  if n.endswith((".list", ".sources")) and not n.startswith(".")]
    return [f for f in files if f["exists"]]


_ONE_LINE = re.compile(r"^\s*(deb|deb-src)\s+(?:\[([^\]]*)\]\s+)?(\S+)\s+(\S+)")


def apt_entries(path: str, text: str) -> list[dict[str, str]]:
    """{file, uri, suite, signed_by} for each source of a one-line .list file or a deb822 .sources file. An inline
    key block in Signed-By is reported as "(inline key <first line>)"; a disabled stanza (Enabled: no) is left out."""
    entries: list[dict[str, str]] = []
    if path.endswith(".sources"):
        for stanza in re.split(r"\n\s*\n", text or ""):
            fields: dict[str, str] = {}
            current = None
            for line in stanza.splitlines():
                if line.startswith("#"):
                    continue
                if line[:1] in (" ", "\t") and current:
                    fields[current] += "\n" + line.strip()
                    continue
                match = re.match(r"^([A-Za-z-]+):\s*(.*)$", line)
                if match:
                    current = match.group(1).lower()
                    fields[current] = match.group(2).strip()
            if not fields.get("uris") or fields.get("enabled", "yes").lower() == "no":
                continue
            signed = fields.get("signed-by", "")
            if "\n" in signed or signed.startswith("-----BEGIN"):
                signed = "(inline key %s)" % signed.splitlines()[0][:40]
            for uri in fields["uris"].split():
                for suite in (fields.get("suites") or "").split():
                    entries.append({"file": path, "uri": uri.rstrip("/"), "suite": suite, "signed_by": signed})
        return entries
    for line in (text or "").splitlines():
        match = _ONE_LINE.match(line)
        if not match:
            continue
        options = dict(o.split("=", 1) for o in (match.group(2) or "").split() if "=" in o)
        entries.append({"file": path, "uri": match.group(3).rstrip("/"), "suite": match.group(4),
                        "signed_by": options.get("signed-by", "")})
    return entries


def signed_by_conflicts(files: t.Iterable[dict[str, t.Any]]) -> list[str]:
    """'<uri> <suite>: <file> (signed-by X), <file> (signed-by Y)' for each source that two entries give different
    non-empty Signed-By values: apt then refuses every update with "Conflicting values set for option Signed-By"."""
    groups: dict[tuple[str, str], list[dict[str, str]]] = {}
    for item in files:
        for entry in apt_entries(item["path"], item["text"] or ""):
            groups.setdefault((entry["uri"], entry["suite"]), []).append(entry)
    out = []
    for (uri, suite), entries in sorted(groups.items()):
        values = {e["signed_by"] for e in entries if e["signed_by"]}
        if len(values) > 1:
            named = ", ".join("%s (signed-by %s)" % (e["file"], e["signed_by"] or "none") for e in entries)
            out.append("%s %s: %s" % (uri, suite, named))
    return out


# The toolkit's packages, newest layer first: the version of the first one installed is the toolkit's.
TOOLKIT_PACKAGES = ("nvidia-container-toolkit-base", "nvidia-container-toolkit", "libnvidia-container-tools", "libnvidia-container1")
TOOLKIT_BINARIES = ("/usr/bin/nvidia-ctk", "/usr/bin/nvidia-container-runtime", "/usr/bin/nvidia-container-cli")


def dpkg_installed(text: str | None, names: t.Iterable[str]) -> dict[str, str]:
    """{package: version} for the ``names`` that dpkg's status file marks installed."""
    wanted = set(names)
    found: dict[str, str] = {}
    for paragraph in re.split(r"\n\s*\n", text or ""):
        fields = dict(re.findall(r"^([A-Za-z-]+):[ \t]*(.*)$", paragraph, re.MULTILINE))
        if fields.get("Package") in wanted and fields.get("Status", "").endswith(" installed") and fields.get("Version"):
            found[fields["Package"]] = fields["Version"]
    return found


def pacman_installed(root: str, names: t.Iterable[str]) -> dict[str, str]:
    """{package: version} from pacman's local database (/var/lib/pacman/local/<name>-<version>-<rel>/desc)."""
    local = _join(root, "/var/lib/pacman/local")
    found: dict[str, str] = {}
    if not os.path.isdir(local):
        return found
    for entry in sorted(os.listdir(local)):
        desc = _read_text(os.path.join(local, entry, "desc")) or ""
        match = re.search(r"^%NAME%\n(.+)\n(?:.*\n)*?%VERSION%\n(.+)$", desc, re.MULTILINE)
        if match and match.group(1) in names:
            found[match.group(1)] = match.group(2)
    return found


def read_toolkit_host(root: str) -> dict[str, t.Any]:
    """The installed toolkit version (dpkg's status file, else pacman's local database; None when neither lists it)
    and whether a toolkit binary is there at all (an rpm host, a tarball install: installed, version unknown)."""
    engine_packages = [p for names in _cdi_compat.ENGINE_PACKAGES.values() for p in names]
    dpkg = dpkg_installed(_read_text(_join(root, "/var/lib/dpkg/status")), TOOLKIT_PACKAGES + tuple(engine_packages))
    pacman = pacman_installed(root, TOOLKIT_PACKAGES + tuple(engine_packages))
    packages, source = ({k: v for k, v in dpkg.items() if k in TOOLKIT_PACKAGES}, "dpkg")
    if not packages:
        packages, source = {k: v for k, v in pacman.items() if k in TOOLKIT_PACKAGES}, "pacman"
    version = next((packages[name] for name in TOOLKIT_PACKAGES if name in packages), None)
    installed = {**pacman, **dpkg}
    engines = {engine: next(installed[n] for n in names if n in installed)
               for engine, names in _cdi_compat.ENGINE_PACKAGES.items() if any(n in installed for n in names)}
    return {
        "engines": engines,
        "toolkit": {
            "version": version,
            "source": source if version else None,
            "binaries": [b for b in TOOLKIT_BINARIES if os.path.exists(_join(root, b))],
        },
    }


# -- the checks ------------------------------------------------------------------------------------------------


def _nvidia_gpus(facts: dict[str, t.Any], vfio: t.Iterable[str] = ()) -> list[dict[str, t.Any]]:
    """GPUs meant for the nvidia driver: every GPU in the facts not listed as a passthrough device."""
    wanted = set(vfio)
    return [g for g in facts.get("gpus") or [] if not _listed(g, wanted)]


def _listed(gpu: dict[str, t.Any], wanted: set[str]) -> bool:
    return bool(wanted & {gpu.get("pci_bus_id"), gpu.get("pci_device_id"), gpu.get("uuid")} - {None})


def _gpu_name(gpu: dict[str, t.Any]) -> str:
    return "GPU %s (%s)" % (gpu.get("index") if gpu.get("index") is not None else "-", gpu.get("pci_bus_id"))


def check_driver_loaded(facts: dict[str, t.Any], host: dict[str, t.Any], params: dict[str, t.Any]) -> dict[str, str]:
    title = "nvidia kernel module loaded"
    driver = facts.get("driver") or {}
    gpus = _nvidia_gpus(facts, params["vfio_devices"])
    if driver.get("kernel_module_loaded"):
        return check("driver_loaded", title, OK, "nvidia %s is loaded (%s); facts state %s" % (
            driver.get("kernel_module_version") or driver.get("version") or "?", driver.get("kernel_module_type") or "type unknown", facts.get("state")))
    if not gpus and facts.get("gpus"):
        return check("driver_loaded", title, OK, "every NVIDIA GPU is meant for passthrough (%s); the nvidia module is not needed" % ", ".join(
            str(g.get("pci_bus_id")) for g in facts["gpus"]))
    seen = "no NVIDIA GPU on the PCI bus" if not facts.get("present") else "%d NVIDIA GPU(s) on the PCI bus" % len(gpus)
    return check(
        "driver_loaded", title, FAIL,
        "the nvidia kernel module is not loaded (/sys/module/nvidia absent); %s; facts state %s" % (seen, facts.get("state")),
        "Install the driver (role gpuhost.nvidia.nvidia_driver), then `modprobe nvidia` or reboot; if modprobe fails, read "
        "`dmesg | grep -i nvidia` (Secure Boot, a DKMS build without headers, or nouveau holding the GPU)",
    )


def check_driver_flavour(facts: dict[str, t.Any], host: dict[str, t.Any], params: dict[str, t.Any]) -> dict[str, str]:
    title = "open vs proprietary module matches the GPUs"
    module_type = (facts.get("driver") or {}).get("kernel_module_type")
    gpus = [g for g in _nvidia_gpus(facts, params["vfio_devices"]) if g.get("architecture")]
    if not gpus:
        return check("driver_flavour", title, OK, "no NVIDIA GPU with a known architecture to match a module flavour to")
    if module_type is None:
        return check("driver_flavour", title, OK, "no nvidia module loaded or built for this kernel; nothing to match (see driver_loaded)")
    archs = sorted({g["architecture"] for g in gpus})
    if module_type == "open":
        unsupported = [a for a in archs if _catalog.open_module_supported(a) is False]
        if unsupported:
            return check("driver_flavour", title, FAIL,
                         "the open kernel module is installed but %s GPUs need the proprietary one" % ", ".join(unsupported),
                         "Install the proprietary module (nvidia_driver_flavour: proprietary), then reboot")
    else:
        required = [a for a in archs if _catalog.open_module_required(a)]
        if required:
            return check("driver_flavour", title, FAIL,
                         "the proprietary kernel module is installed but %s GPUs need the open one" % ", ".join(required),
                         "Install the open module (nvidia_driver_flavour: open), then reboot")
    return check("driver_flavour", title, OK, "%s module for %s GPU(s)" % (module_type, ", ".join(archs)))


def check_nouveau(facts: dict[str, t.Any], host: dict[str, t.Any], params: dict[str, t.Any]) -> dict[str, str]:
    title = "nouveau not loaded"
    bound = [str(g.get("pci_bus_id")) for g in facts.get("gpus") or [] if g.get("bound_driver") == "nouveau"]
    if host["nouveau_loaded"] or bound:
        evidence = "nouveau is loaded (/sys/module/nouveau)" if host["nouveau_loaded"] else "nouveau is not loaded"
        if bound:
            evidence += "; bound to %s" % ", ".join(bound)
        return check("nouveau", title, FAIL, evidence,
                     "Blacklist nouveau (`blacklist nouveau` and `options nouveau modeset=0` in /etc/modprobe.d), rebuild the "
                     "initramfs (update-initramfs -u / dracut -f), reboot; the nvidia_driver role does this")
    return check("nouveau", title, OK, "nouveau is not loaded and binds no GPU")


def check_cuda_version(facts: dict[str, t.Any], host: dict[str, t.Any], params: dict[str, t.Any]) -> dict[str, str]:
    title = "driver CUDA version"
    required = params.get("required_cuda")
    have = (facts.get("driver") or {}).get("cuda_version")
    if not required:
        return check("cuda_version", title, OK, "no CUDA version required; the driver supports CUDA %s" % (have or "unknown"))
    if not have:
        return check("cuda_version", title, FAIL, "CUDA %s is required but the driver's CUDA version is unknown (no driver found)" % required,
                     "Install a driver that supports CUDA %s (branch %s or newer)" % (required, _catalog.min_driver_for_cuda(required) or "?"))
    if (version_tuple(have) or ()) < (version_tuple(required) or ()):
        return check("cuda_version", title, FAIL,
                     "the driver supports CUDA %s, older than the required %s" % (have, required),
                     "Upgrade the driver to one that supports CUDA %s (%s or newer), or use a CUDA %s image (forward "
                     "compatibility needs the cuda-compat package on data-center GPUs)" % (required, _catalog.min_driver_for_cuda(required) or "?", have))
    return check("cuda_version", title, OK, "the driver supports CUDA %s; %s is required" % (have, required))


def check_boot_kernel(facts: dict[str, t.Any], host: dict[str, t.Any], params: dict[str, t.Any]) -> dict[str, str]:
    title = "the kernel booted next has an nvidia module"
    kernels = host.get("kernels") or {}
    installed = kernels.get("installed") or []
    with_module = [str(k.get("release")) for k in installed if k.get("nvidia_module")]
    if not _nvidia_gpus(facts, params["vfio_devices"]):
        return check("boot_kernel", title, OK, "no GPU is meant for the nvidia driver; no module is needed")
    if not installed:
        return check("boot_kernel", title, OK, "no installed kernel found under /lib/modules (a container?): nothing to check")
    if not with_module:
        return check("boot_kernel", title, OK, "no installed kernel has an nvidia module yet (%s): the driver_loaded check covers a "
                     "driver that is not installed" % ", ".join(str(k.get("release")) for k in installed))
    problem = _kernels.boot_problem(kernels)
    if problem:
        return check("boot_kernel", title, FAIL, problem + "; after a reboot the driver will not load", _kernels.boot_fix(kernels))
    missing = kernels.get("without_module") or []
    return check("boot_kernel", title, OK, "%s (%s) has one%s" % (
        kernels.get("boot"), kernels.get("boot_source") or "newest installed",
        "; older kernels without one: %s" % ", ".join(missing) if missing else ""))


def check_secure_boot(facts: dict[str, t.Any], host: dict[str, t.Any], params: dict[str, t.Any]) -> dict[str, str]:
    title = "Secure Boot vs module signing"
    state = host["secure_boot"]
    driver = facts.get("driver") or {}
    if state is None and not host["efi"] and host.get("firmware_visible", True):
        return check("secure_boot", title, OK, "no UEFI (legacy boot: /sys/firmware has no efi directory): Secure Boot cannot be "
                                               "on, unsigned modules load")
    if state is False:
        return check("secure_boot", title, OK, "Secure Boot is off: unsigned modules load")
    if driver.get("kernel_module_loaded"):
        return check("secure_boot", title, OK, "Secure Boot is %s and the nvidia module is loaded, so its signature was accepted"
                     % ("on" if state else "unknown"))
    if state is None:
        # Unknown is not off: an unsigned module does not load on a Secure Boot host, and this one cannot say which it is.
        why = ("UEFI, but the SecureBoot variable is missing, unreadable or not 0 or 1" if host["efi"]
               else "/sys/firmware shows nothing here (a container, or masked)")
        unsigned = host["module_path"] is not None and host["module_signed"] is False
        consequence = (", and %s carries no signature: if Secure Boot is on, the kernel refuses it" % host["module_path"]) if unsigned else ""
        return check("secure_boot", title, WARN, "the Secure Boot state is unknown (%s)%s" % (why, consequence),
                     "Read the state where the firmware is visible: `mokutil --sb-state` on the host itself; if it is on, sign the "
                     "module with an enrolled key (`mokutil --import /var/lib/dkms/mok.pub`, then rebuild with DKMS)")
    if host["module_path"] is None:
        return check("secure_boot", title, WARN, "Secure Boot is on and no nvidia module is built for kernel %s" % host["kernel_release"],
                     "Install the driver with DKMS signing set up (a Machine Owner Key enrolled with `mokutil --import`)")
    if host["module_signed"] is False:
        return check("secure_boot", title, FAIL,
                     "Secure Boot is on and %s carries no signature, so the kernel refuses it" % host["module_path"],
                     "Sign the module with an enrolled key: `mokutil --import /var/lib/dkms/mok.pub`, reboot to enroll it in "
                     "the MOK manager, then rebuild with DKMS (which signs with that key); or disable Secure Boot")
    return check("secure_boot", title, WARN,
                 "Secure Boot is on, %s is %s, and the nvidia module is not loaded" % (
                     host["module_path"], "signed" if host["module_signed"] else "compressed (signature not checked)"),
                 "Check that the signing key is enrolled: `mokutil --list-enrolled`, and `dmesg | grep -i 'key was rejected'`")


def check_device_nodes(facts: dict[str, t.Any], host: dict[str, t.Any], params: dict[str, t.Any]) -> dict[str, str]:
    title = "/dev/nvidia* and /dev/nvidia-uvm present"
    nodes = set(facts.get("device_nodes") or [])
    expected = ["/dev/nvidiactl", "/dev/nvidia-uvm"] + [
        "/dev/nvidia%d" % g["index"] for g in _nvidia_gpus(facts, params["vfio_devices"]) if g.get("index") is not None]
    missing = [n for n in expected if n not in nodes]
    if missing:
        return check("device_nodes", title, FAIL,
                     "missing %s (present: %s)" % (", ".join(missing), ", ".join(sorted(nodes)) or "none"),
                     "Load the driver; /dev/nvidia-uvm comes from `modprobe nvidia-uvm` (or `nvidia-modprobe -u -c=0`); "
                     "persistent nodes come from nvidia-persistenced or udev rules")
    return check("device_nodes", title, OK, "present: %s" % ", ".join(sorted(nodes)))


def _runtime_binary_problem(root: str, path: t.Any) -> str | None:
    """Absolute paths must exist; a bare name is looked up in dockerd's PATH, which the doctor does not know."""
    if not isinstance(path, str) or not path:
        return "has no path"
    if path.startswith("/") and not os.path.exists(_join(root, path)):
        return "points at %s, which does not exist" % path
    return None


def check_docker_runtime(facts: dict[str, t.Any], host: dict[str, t.Any], params: dict[str, t.Any]) -> dict[str, str]:
    title = "Docker runtime config (%s)" % params["docker_daemon_json"]
    config = host["docker_daemon_json"]
    name = params["runtime_name"]
    fix_configure = "Run `nvidia-ctk runtime configure --runtime=docker` (role gpuhost.nvidia.nvidia_container_toolkit), then restart docker"
    if not config["exists"]:
        if docker_cdi_by_default(host):
            return check("docker_runtime", title, OK, "%s does not exist, but Docker %s enables CDI by default: use --device "
                         "nvidia.com/gpu=all" % (config["path"], host["docker_version"]))
        return check("docker_runtime", title, WARN, "%s does not exist: Docker knows no nvidia runtime%s" % (
            config["path"], _docker_version_note(host)), fix_configure)
    try:
        data = json.loads(config["text"]) if config["text"].strip() else {}
    except ValueError as exc:
        return check("docker_runtime", title, FAIL, "%s is not valid JSON: %s; dockerd will not start" % (config["path"], exc),
                     "Fix the JSON syntax (python3 -m json.tool %s), then restart docker" % config["path"])
    if not isinstance(data, dict):
        return check("docker_runtime", title, FAIL, "%s is not a JSON object" % config["path"], "Make it a JSON object")
    runtimes = data.get("runtimes") or {}
    default = data.get("default-runtime")
    cdi = (data.get("features") or {}).get("cdi")
    if default and default not in ("runc", "io.containerd.runc.v2") and default not in runtimes:
        return check("docker_runtime", title, FAIL, "default-runtime is %s, which runtimes does not define" % default,
                     "Define runtimes.%s or remove default-runtime, then restart docker" % default)
    if name not in runtimes:
        if cdi:
            return check("docker_runtime", title, OK, "no %s runtime, but CDI is enabled (features.cdi): use --device nvidia.com/gpu=all" % name)
        if cdi is None and docker_cdi_by_default(host):
            return check("docker_runtime", title, OK, "no %s runtime, but Docker %s enables CDI by default: use --device "
                         "nvidia.com/gpu=all" % (name, host["docker_version"]))
        off = " (features.cdi is false)" if cdi is False else _docker_version_note(host)
        return check("docker_runtime", title, WARN, "%s defines no %s runtime and CDI is not enabled%s" % (config["path"], name, off),
                     fix_configure)
    problem = _runtime_binary_problem(host.get("root", "/"), (runtimes[name] or {}).get("path"))
    if problem:
        return check("docker_runtime", title, FAIL, "runtimes.%s %s" % (name, problem), fix_configure)
    return check("docker_runtime", title, OK, "runtimes.%s -> %s%s%s" % (
        name, runtimes[name]["path"], "; default-runtime %s" % default if default else "", "; CDI enabled" if cdi else ""))


def docker_cdi_by_default(host: dict[str, t.Any]) -> bool:
    """Whether the host's Docker engine turns CDI on without features.cdi (Docker Engine 28.2.0 and later)."""
    parsed = version_tuple(host.get("docker_version"))
    return parsed is not None and parsed[:2] >= DOCKER_CDI_DEFAULT


def _docker_version_note(host: dict[str, t.Any]) -> str:
    version = host.get("docker_version")
    if version:
        return " (Docker %s; CDI is on by default from %d.%d)" % ((version,) + DOCKER_CDI_DEFAULT)
    return " (the Docker engine's version is unknown: dockerd --version did not answer)"


def _dig(data: t.Any, keys: t.Iterable[str]) -> t.Any:
    for key in keys:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def check_containerd_runtime(facts: dict[str, t.Any], host: dict[str, t.Any], params: dict[str, t.Any]) -> dict[str, str]:
    title = "containerd runtime config"
    files = [f for f in [host["containerd_config"]] + host["containerd_dropins"] if f["exists"]]
    name = params["runtime_name"]
    if not files:
        return check("containerd_runtime", title, OK, "no %s and no drop-ins in %s: containerd is not configured here" % (
            params["containerd_config"], params["containerd_conf_dir"]))
    if not HAS_TOMLLIB:
        found = [f["path"] for f in files if re.search(r"runtimes\.[\"']?%s[\"']?\]" % re.escape(name), f["text"] or "")]
        if found:
            return check("containerd_runtime", title, OK, "runtime %s found in %s (not parsed: no tomllib)" % (name, ", ".join(found)))
        return check("containerd_runtime", title, WARN, "no %s runtime in %s (not parsed: no tomllib)" % (name, ", ".join(f["path"] for f in files)),
                     "Run `nvidia-ctk runtime configure --runtime=containerd`, then restart containerd")
    found = []
    for entry in files:
        try:
            data = tomllib.loads(entry["text"])
        except (ValueError, TypeError) as exc:
            return check("containerd_runtime", title, FAIL, "%s is not valid TOML: %s; containerd will not start" % (entry["path"], exc),
                         "Fix the TOML syntax in %s, then restart containerd" % entry["path"])
        for table in CONTAINERD_RUNTIME_TABLES:
            runtime = _dig(data, table + (name,))
            if isinstance(runtime, dict):
                binary = _dig(runtime, ("options", "BinaryName"))
                found.append("%s (%s%s)" % (entry["path"], ".".join(table[1:2]), ", BinaryName %s" % binary if binary else ""))
    if not found:
        imports = _dig(tomllib.loads(host["containerd_config"]["text"]), ("imports",)) if host["containerd_config"]["exists"] else None
        where = ", ".join(f["path"] for f in files)
        return check("containerd_runtime", title, WARN,
                     "no [...containerd.runtimes.%s] table in %s%s" % (name, where, "; imports: %s" % imports if imports else ""),
                     "Run `nvidia-ctk runtime configure --runtime=containerd` (it writes a drop-in and an imports line), then restart containerd")
    return check("containerd_runtime", title, OK, "runtime %s in %s" % (name, "; ".join(found)))


_CDI_KIND_RE = re.compile(r"""^\s*["']?kind["']?\s*:\s*["']?([^"',\s]+)""", re.M)
_CDI_LIB_RE = re.compile(r"libnvidia-ml\.so\.(\d+\.\d+(?:\.\d+)?)")


_DEVICE_UUID_RE = re.compile(r"\b(?:GPU|MIG)-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b")


def host_device_uuids(facts: dict[str, t.Any]) -> set[str]:
    """The GPU and MIG device UUIDs the facts list (every GPU, whatever it is bound to)."""
    uuids: set[str] = set()
    for gpu in facts.get("gpus") or []:
        if gpu.get("uuid"):
            uuids.add(gpu["uuid"])
        for mig in gpu.get("mig_devices") or []:
            if isinstance(mig, dict) and mig.get("uuid"):
                uuids.add(mig["uuid"])
    return uuids


def stale_devices(facts: dict[str, t.Any], files: t.Iterable[dict[str, t.Any]]) -> list[str]:
    """'<file> names <uuids>' for each file that names GPU or MIG UUIDs the host does not have. Nothing is judged when
    the facts list no UUID at all (no driver loaded: the UUIDs are unknown, not gone)."""
    have = host_device_uuids(facts)
    if not have:
        return []
    out = []
    for entry in files:
        gone = sorted(set(_DEVICE_UUID_RE.findall(entry.get("text") or "")) - have)
        if gone:
            out.append("%s names %s" % (entry["path"], ", ".join(gone)))
    return out


def check_cdi_spec(facts: dict[str, t.Any], host: dict[str, t.Any], params: dict[str, t.Any]) -> dict[str, str]:
    title = "CDI spec present, fresh, not duplicated"
    kind = params["cdi_kind"]
    specs = [s for s in host["cdi_specs"] if kind in _CDI_KIND_RE.findall(s["text"] or "")]
    fix_generate = "Regenerate it: `nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml` (or enable nvidia-cdi-refresh), after every driver change"
    if not specs:
        return check("cdi_spec", title, WARN, "no CDI spec for %s in %s" % (kind, ", ".join(params["cdi_dirs"])), fix_generate)
    if len(specs) > 1:
        return check("cdi_spec", title, FAIL,
                     "%d specs define %s: %s; CDI refuses duplicate device names" % (len(specs), kind, ", ".join(s["path"] for s in specs)),
                     "Keep one: remove the static /etc/cdi spec when nvidia-cdi-refresh writes /var/run/cdi, or the other way round")
    spec = specs[0]
    driver_version = (facts.get("driver") or {}).get("version")
    versions = sorted(set(_CDI_LIB_RE.findall(spec["text"] or "")))
    if driver_version and versions and driver_version not in versions:
        return check("cdi_spec", title, FAIL, "%s names driver %s but the driver is %s" % (spec["path"], ", ".join(versions), driver_version), fix_generate)
    if host["library_mtime"] is not None and spec["mtime"] is not None and spec["mtime"] < host["library_mtime"]:
        return check("cdi_spec", title, WARN, "%s is older than the installed driver library" % spec["path"], fix_generate)
    stale = stale_devices(facts, [spec] + host.get("compose_files", []))
    if stale:
        return check("cdi_spec", title, FAIL, "; ".join(stale) + ": the host no longer has these devices (a driver change, a GPU "
                     "swap or MIG instances re-created with new UUIDs)",
                     fix_generate + ", after the MIG layout is applied (nvidia-cdi-refresh.service runs after "
                     "gpuhost-gpu-settings.service), and re-render the compose override (gpu_compose)")
    uuids = [g["uuid"] for g in _nvidia_gpus(facts, params["vfio_devices"]) if g.get("uuid")]
    missing = [u for u in uuids if u not in (spec["text"] or "")]
    if missing:
        return check("cdi_spec", title, WARN, "%s does not name %s" % (spec["path"], ", ".join(missing)), fix_generate)
    age = "no driver library to compare its age with" if host["library_mtime"] is None else "newer than the driver library"
    return check("cdi_spec", title, OK, "%s (%s; driver %s)" % (spec["path"], age, ", ".join(versions) or "not named"))


def check_persistence(facts: dict[str, t.Any], host: dict[str, t.Any], params: dict[str, t.Any]) -> dict[str, str]:
    title = "persistence mode on"
    gpus = [g for g in _nvidia_gpus(facts, params["vfio_devices"]) if g.get("persistence_mode") is not None]
    off = [_gpu_name(g) for g in gpus if not g["persistence_mode"]]
    if off:
        return check("persistence", title, WARN, "persistence mode is off on %s" % ", ".join(off),
                     "Enable nvidia-persistenced (role gpuhost.nvidia.gpu_settings, gpu_settings_persistence: true), or `nvidia-smi -pm 1`")
    if not gpus:
        return check("persistence", title, OK, "no GPU reports a persistence mode (none listed by NVML/nvidia-smi)")
    return check("persistence", title, OK, "on for %d GPU(s)" % len(gpus))


def check_bindings(facts: dict[str, t.Any], host: dict[str, t.Any], params: dict[str, t.Any]) -> dict[str, str]:
    title = "GPUs bound as intended (nvidia / vfio-pci)"
    wanted = set(params["vfio_devices"])
    wrong = []
    for gpu in facts.get("gpus") or []:
        bound = gpu.get("bound_driver")
        if _listed(gpu, wanted):
            if bound != "vfio-pci":
                wrong.append("%s is bound to %s, meant for vfio-pci" % (gpu.get("pci_bus_id"), bound or "no driver"))
        elif bound not in ("nvidia",):
            wrong.append("%s is bound to %s, meant for nvidia" % (gpu.get("pci_bus_id"), bound or "no driver"))
    if wrong:
        return check("bindings", title, FAIL, "; ".join(wrong),
                     "Bind passthrough GPUs with role gpuhost.nvidia.vfio_passthrough (vfio-pci ids / addresses, initramfs, "
                     "reboot) and list them in the doctor's vfio_devices; load the nvidia driver for the others")
    gpus = facts.get("gpus") or []
    if not gpus:
        return check("bindings", title, OK, "no NVIDIA GPU on the PCI bus")
    return check("bindings", title, OK, ", ".join("%s:%s" % (g.get("pci_bus_id"), g.get("bound_driver")) for g in gpus))


def _health(gpu: dict[str, t.Any], key: str) -> t.Any:
    return (gpu.get("health") or {}).get(key)


def _by_findings(cid: str, title: str, fails: list[str], warns: list[str], fix: str, ok_evidence: str) -> dict[str, str]:
    """FAIL naming every finding when any is a failure, WARN naming the warnings, else OK with ``ok_evidence``."""
    if fails:
        return check(cid, title, FAIL, "; ".join(fails + warns), fix)
    if warns:
        return check(cid, title, WARN, "; ".join(warns), fix)
    return check(cid, title, OK, ok_evidence)


def check_throttling(facts: dict[str, t.Any], host: dict[str, t.Any], params: dict[str, t.Any]) -> dict[str, str]:
    title = "clock throttle reasons"
    hard, soft, seen = [], [], 0
    for gpu in _nvidia_gpus(facts, params["vfio_devices"]):
        reasons = _health(gpu, "throttle_reasons")
        if reasons is None:
            continue
        seen += 1
        bad = [r for r in reasons if r not in BENIGN_THROTTLE]
        if set(bad) & HARD_THROTTLE:
            hard.append("%s: %s" % (_gpu_name(gpu), ", ".join(bad)))
        elif bad:
            soft.append("%s: %s" % (_gpu_name(gpu), ", ".join(bad)))
    fix = ("Check cooling and airflow (`nvidia-smi -q -d TEMPERATURE,PERFORMANCE`), the power supply and power cables; "
           "sw_power_cap means the power limit is reached (gpu_settings power limit)")
    return _by_findings("throttling", title, hard, soft, fix,
                        "no throttling on %d GPU(s)" % seen if seen else "no GPU reports throttle reasons (needs NVML and gather: [health])")


def check_pcie_link(facts: dict[str, t.Any], host: dict[str, t.Any], params: dict[str, t.Any]) -> dict[str, str]:
    title = "PCIe link generation and width"
    narrow, slow, seen = [], [], 0
    for gpu in _nvidia_gpus(facts, params["vfio_devices"]):
        link = _health(gpu, "pcie") or {}
        if link.get("width_current") is None or link.get("width_max") is None:
            continue
        seen += 1
        if link["width_current"] < link["width_max"]:
            narrow.append("%s: x%d of x%d" % (_gpu_name(gpu), link["width_current"], link["width_max"]))
        idle = "gpu_idle" in (_health(gpu, "throttle_reasons") or [])
        if link.get("gen_current") is not None and link.get("gen_max") is not None and link["gen_current"] < link["gen_max"] and not idle:
            slow.append("%s: gen %d of %d under load" % (_gpu_name(gpu), link["gen_current"], link["gen_max"]))
    if narrow or slow:
        return check("pcie_link", title, WARN, "; ".join(narrow + slow),
                     "Reseat the GPU or use a full-width slot, check riser cables and the BIOS PCIe settings (link speed, "
                     "bifurcation); an idle GPU lowers its link generation on purpose")
    return check("pcie_link", title, OK, "full width on %d GPU(s)" % seen if seen else "no GPU reports its PCIe link (needs NVML and gather: [health])")


def check_ecc(facts: dict[str, t.Any], host: dict[str, t.Any], params: dict[str, t.Any]) -> dict[str, str]:
    title = "ECC errors, retired pages, remapped rows"
    fails, warns, seen = [], [], 0
    for gpu in _nvidia_gpus(facts, params["vfio_devices"]):
        name = _gpu_name(gpu)
        errors = _health(gpu, "ecc_errors") or {}
        pages = _health(gpu, "retired_pages") or {}
        rows = _health(gpu, "remapped_rows")
        if errors or pages or rows:
            seen += 1
        if (errors.get("uncorrected_volatile") or 0) > 0:
            fails.append("%s: %d uncorrected ECC errors since boot" % (name, errors["uncorrected_volatile"]))
        elif (errors.get("uncorrected_aggregate") or 0) > 0:
            warns.append("%s: %d uncorrected ECC errors over its lifetime" % (name, errors["uncorrected_aggregate"]))
        if (errors.get("corrected_volatile") or 0) >= params["ecc_corrected_warn"]:
            warns.append("%s: %d corrected ECC errors since boot" % (name, errors["corrected_volatile"]))
        if rows and rows.get("failure"):
            fails.append("%s: row remapping failed (no spare rows left)" % name)
        if rows and rows.get("pending"):
            warns.append("%s: a row remap is pending until the GPU is reset" % name)
        if pages.get("pending"):
            warns.append("%s: a page retirement is pending until reboot" % name)
        if (pages.get("double_bit") or 0) > 0:
            warns.append("%s: %d pages retired for double-bit errors" % (name, pages["double_bit"]))
    fix = ("Drain the GPU and reset it (`nvidia-smi -r`) or reboot to apply pending retirements/remaps; a GPU with a remap "
           "failure or recurring uncorrected errors needs an RMA (field diagnostic: `dcgmi diag -r 3`)")
    return _by_findings("ecc", title, fails, warns, fix,
                        "no ECC problems on %d GPU(s)" % seen if seen else "no GPU reports ECC counters (needs NVML, ECC and gather: [health])")


def check_nvml_cgroup(facts: dict[str, t.Any], host: dict[str, t.Any], params: dict[str, t.Any]) -> dict[str, str]:
    """The "Failed to initialize NVML: Unknown Error" in containers after ``systemctl daemon-reload``.

    With the systemd cgroup driver, a daemon-reload re-applies the containers' device rules and drops the GPU devices
    that the NVIDIA hook added, unless /dev/char/MAJOR:MINOR links to the /dev/nvidia* nodes exist.
    """
    title = "NVML 'Unknown Error' after daemon-reload (cgroup device rules)"
    links = host["char_links"]
    if not links:
        return check("nvml_cgroup", title, OK, "no /dev/nvidia* character devices: nothing for a daemon-reload to cut off")
    missing = sorted("%s (%s)" % (node, info["dev"]) for node, info in links.items() if not info["char_link"])
    daemon = host["docker_daemon_json"]
    cgroupfs = False
    if daemon["exists"]:
        try:
            opts = (json.loads(daemon["text"] or "{}") or {}).get("exec-opts") or []
            cgroupfs = "native.cgroupdriver=cgroupfs" in opts
        except ValueError:
            cgroupfs = False
    if missing and not cgroupfs:
        return check("nvml_cgroup", title, WARN,
                     "no /dev/char link for %s; with the systemd cgroup driver%s, `systemctl daemon-reload` makes running "
                     "containers fail with \"Failed to initialize NVML: Unknown Error\"" % (
                         ", ".join(missing), " on cgroup v2" if host["cgroup_v2"] else ""),
                     "Create the links: `nvidia-ctk system create-dev-char-symlinks --create-all`, and keep them with the udev rule "
                     "NVIDIA documents (ACTION==\"add\", DEVPATH==\"/bus/pci/drivers/nvidia\", RUN+=\"/usr/bin/nvidia-ctk system "
                     "create-dev-char-symlinks --create-all\" in /lib/udev/rules.d/71-nvidia-dev-char.rules); or set "
                     "\"exec-opts\": [\"native.cgroupdriver=cgroupfs\"] in daemon.json")
    why = "Docker uses the cgroupfs driver" if cgroupfs and missing else "every /dev/nvidia* node has its /dev/char link"
    return check("nvml_cgroup", title, OK, why)


# -- the checks ops teams run by hand: the kernel log's Xids, Fabric Manager, NVLink ----------------------------------

# Xid meanings and what they ask of the operator, for the Xids NVIDIA's Xid catalog names and resolves with more
# than restarting the application (docs/sources.md, "Xid catalog"; dcgm-exporter's xid_errors.go has the same
# descriptions). FAIL: a GPU reset, a reboot or a service call; WARN: memory wearing, watch it.
XID_FAIL: dict[int, str] = {
    48: "double-bit ECC error",
    64: "ECC page retirement or row remapper recording failure",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
    140: "unrecovered ECC error",
    154: "GPU recovery action changed",
}
XID_WARN: dict[int, str] = {
    63: "ECC page retirement or row remapping recording event",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
}
# Xids that an application causes (its bug or its exit), not the GPU: reported, not warned about.
XID_APPLICATION: dict[int, str] = {
    13: "graphics engine exception",
    31: "GPU memory page fault",
    43: "GPU stopped processing",
    45: "preemptive cleanup, due to previous errors",
}
# NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen off the bus.
XID_LINE_RE = re.compile(r"NVRM: Xid \(PCI:([0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})(?:\.[0-7])?\): (\d{1,4})\b")
FABRIC_MANAGER_UNIT = "nvidia-fabricmanager.service"
# Docker Engine 28.2.0 turns CDI on by default (docs/sources.md, "Docker CDI default").
DOCKER_CDI_DEFAULT = (28, 2)
DOCKER_VERSION_RE = re.compile(r"Docker version (\d+)\.(\d+)(?:\.(\d+))?")


def read_commands(run: t.Callable[[list[str]], tuple[int, str, str]], which: t.Callable[[str], str | None]) -> dict[str, t.Any]:
    """What the doctor reads through commands (``run(argv) -> (rc, stdout, stderr)``, ``which(name) -> path|None``):
    the kernel log since boot (journalctl -k -b, else dmesg), Fabric Manager's unit state and the Docker engine's
    version. Each is None when it cannot be read, with the reason under ``<key>_error``."""
    out = unread_commands("")
    errors = []
    journalctl, dmesg = which("journalctl"), which("dmesg")
    if journalctl:
        rc, stdout, stderr = run([journalctl, "-k", "-b", "--no-pager", "-q", "-o", "short-monotonic"])
        if rc == 0 and stdout.strip():
            out.update(kernel_log=stdout, kernel_log_source="journalctl -k -b")
        else:
            errors.append("journalctl -k -b: %s" % ((stderr or "").strip() or ("rc %d" % rc if rc else "no kernel messages in the journal")))
    if out["kernel_log"] is None and dmesg:
        rc, stdout, stderr = run([dmesg])
        if rc == 0:
            out.update(kernel_log=stdout, kernel_log_source="dmesg")
        else:
            reason = (stderr or "").strip() or "rc %d" % rc
            errors.append(reason if reason.startswith("dmesg:") else "dmesg: " + reason)
    if out["kernel_log"] is None:
        out["kernel_log_error"] = "; ".join(errors) or "neither journalctl nor dmesg is installed"
    systemctl = which("systemctl")
    if systemctl:
        rc, stdout, stderr = run([systemctl, "is-active", FABRIC_MANAGER_UNIT])
        # is-active prints the state (active, inactive, failed, activating, ...) and exits non-zero unless active.
        state = stdout.strip().splitlines()[0] if stdout.strip() else ""
        out["fabric_manager"] = state or None
        out["fabric_manager_error"] = "" if state else (stderr or "").strip() or "systemctl is-active printed nothing (rc %d)" % rc
    else:
        out["fabric_manager_error"] = "systemctl is not installed"
    dockerd = which("dockerd")
    if dockerd:
        rc, stdout, _stderr = run([dockerd, "--version"])
        match = DOCKER_VERSION_RE.search(stdout or "") if rc == 0 else None
        if match:
            out["docker_version"] = "%s.%s.%s" % (match.group(1), match.group(2), match.group(3) or "0")
    return out


def unread_commands(reason: str) -> dict[str, t.Any]:
    """read_commands' answer when nothing could be run: every value unknown, for ``reason``."""
    return {"kernel_log": None, "kernel_log_source": None, "kernel_log_error": reason, "fabric_manager": None,
            "fabric_manager_error": reason, "docker_version": None}


def xid_events(text: str) -> list[dict[str, t.Any]]:
    """Every NVRM Xid line of a kernel log: ``{pci, xid, line}`` in log order."""
    events = []
    for line in (text or "").splitlines():
        match = XID_LINE_RE.search(line)
        if match:
            events.append({"pci": match.group(1).lower(), "xid": int(match.group(2)), "line": line.strip()})
    return events


def _xid_meaning(xid: int) -> str:
    return XID_FAIL.get(xid) or XID_WARN.get(xid) or XID_APPLICATION.get(xid) or "not in the catalog's short list"


def check_xid(facts: dict[str, t.Any], host: dict[str, t.Any], params: dict[str, t.Any]) -> dict[str, str]:
    title = "Xid errors in the kernel log since boot"
    text = host.get("kernel_log")
    if text is None:
        return check("xid", title, WARN, "cannot read the kernel log (%s): Xid errors are unknown, not absent" % host.get("kernel_log_error"),
                     "Run the doctor as root (become: true) on a host whose journal keeps kernel messages (journalctl -k -b), or "
                     "allow dmesg (sysctl kernel.dmesg_restrict=0)")
    events = xid_events(text)
    source = host.get("kernel_log_source") or "the kernel log"
    if not events:
        return check("xid", title, OK, "no NVRM Xid line in %s" % source)
    by_xid: dict[int, set[str]] = {}
    for event in events:
        by_xid.setdefault(event["xid"], set()).add(event["pci"])
    findings = ["Xid %d (%s) on %s" % (xid, _xid_meaning(xid), ", ".join(sorted(pcis))) for xid, pcis in sorted(by_xid.items())]
    fix = ("Drain the GPU, then reset it (`nvidia-smi -r -i <gpu>`) or reboot; run `dcgmi diag -r 3` before returning it to "
           "service, and replace a GPU whose Xid 48/64/79/95 recurs. Application Xids (13, 31, 43, 45) point at the job, "
           "not the GPU. Meanings: NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors)")
    if set(by_xid) & set(XID_FAIL):
        return check("xid", title, FAIL, "%s: %s" % (source, "; ".join(findings)), fix)
    if set(by_xid) - set(XID_APPLICATION):
        return check("xid", title, WARN, "%s: %s" % (source, "; ".join(findings)), fix)
    return check("xid", title, OK, "%s: application Xids only: %s" % (source, "; ".join(findings)))


def check_fabric_manager(facts: dict[str, t.Any], host: dict[str, t.Any], params: dict[str, t.Any]) -> dict[str, str]:
    title = "Fabric Manager on an NVSwitch host"
    switches = facts.get("nvswitch_count") or 0
    if not switches:
        return check("fabric_manager", title, OK, "no NVSwitch on the PCI bus: Fabric Manager is not needed")
    state = host.get("fabric_manager")
    fix = ("Install and start Fabric Manager of the driver's branch (role gpuhost.nvidia.nvidia_driver, "
           "nvidia_driver_fabric_manager: auto or true), then `systemctl enable --now %s`; its log is "
           "/var/log/fabricmanager.log" % FABRIC_MANAGER_UNIT)
    if state == "active":
        return check("fabric_manager", title, OK, "%s is active for %d NVSwitch(es)" % (FABRIC_MANAGER_UNIT, switches))
    if state is None:
        return check("fabric_manager", title, WARN, "%d NVSwitch(es), and the state of %s cannot be read (%s)" % (
            switches, FABRIC_MANAGER_UNIT, host.get("fabric_manager_error")), fix)
    return check("fabric_manager", title, FAIL, "%d NVSwitch(es), but %s is %s: CUDA cannot initialise the GPUs "
                 "(cudaErrorSystemNotReady) until it runs" % (switches, FABRIC_MANAGER_UNIT, state), fix)


def check_nvlink(facts: dict[str, t.Any], host: dict[str, t.Any], params: dict[str, t.Any]) -> dict[str, str]:
    title = "NVLink links active"
    counts = {}
    for gpu in _nvidia_gpus(facts, params["vfio_devices"]):
        topology = gpu.get("topology") if isinstance(gpu.get("topology"), dict) else None
        if topology is not None and topology.get("nvlink_active_links") is not None:
            counts[_gpu_name(gpu)] = topology["nvlink_active_links"]
    if not counts:
        return check("nvlink", title, OK, "no GPU reports its NVLink state (needs NVML)")
    most = max(counts.values())
    if most == 0:
        return check("nvlink", title, OK, "no active NVLink on %d GPU(s) (PCIe-only GPUs)" % len(counts))
    short = ["%s: %d of %d" % (name, count, most) for name, count in sorted(counts.items()) if count < most]
    if short:
        return check("nvlink", title, WARN, "fewer active NVLinks than its peers: %s" % "; ".join(short),
                     "Read the link state and errors (`nvidia-smi nvlink -s`, `nvidia-smi nvlink -e`); on an NVSwitch host "
                     "check Fabric Manager; a link that stays down means reseating or replacing the GPU or baseboard")
    return check("nvlink", title, OK, "%d active NVLinks on each of %d GPU(s)" % (most, len(counts)))


def check_toolkit_cves(facts: dict[str, t.Any], host: dict[str, t.Any], params: dict[str, t.Any]) -> dict[str, str]:
    """The installed NVIDIA Container Toolkit against the releases that fixed its container escapes
    (_toolkit.SECURITY_FIXES). A toolkit whose version cannot be read is a warning, not a pass."""
    title = "NVIDIA Container Toolkit has the container-escape fixes (%s+)" % _toolkit.SECURE_MIN_VERSION
    toolkit = host.get("toolkit") or {}
    version = params.get("toolkit_version") or toolkit.get("version")
    upgrade = ("Upgrade the toolkit to %s or newer (gpuhost.nvidia.nvidia_container_toolkit with nvidia_container_toolkit_version, "
               "or your package manager); until then run only trusted images" % _toolkit.SECURE_MIN_VERSION)
    if not version:
        if toolkit.get("binaries"):
            return check("toolkit_cves", title, WARN,
                         "%s present but no package database this check reads (dpkg, pacman) lists the toolkit: version unknown"
                         % ", ".join(toolkit["binaries"]),
                         "Give the doctor the version (toolkit_version, e.g. from `nvidia-ctk --version`), or check it is %s or newer"
                         % _toolkit.SECURE_MIN_VERSION)
        return check("toolkit_cves", title, OK, "no NVIDIA Container Toolkit installed")
    if not _toolkit.version_tuple(version):
        return check("toolkit_cves", title, WARN, "toolkit version %r cannot be read as a version" % version, upgrade)
    missing = _toolkit.open_cves(version)
    where = " (%s)" % toolkit["source"] if toolkit.get("source") and not params.get("toolkit_version") else ""
    if missing:
        fixed = dict(_toolkit.SECURITY_FIXES)
        return check("toolkit_cves", title, FAIL,
                     "toolkit %s%s lacks the fixes of %s" % (_toolkit.upstream(version), where,
                                                             ", ".join("%s (fixed in %s)" % (c, fixed[c]) for c in missing)),
                     upgrade)
    return check("toolkit_cves", title, OK, "toolkit %s%s has the fixes of %s"
                 % (_toolkit.upstream(version), where, ", ".join(c for c, _f in _toolkit.SECURITY_FIXES)))


def check_apt_signed_by(facts: dict[str, t.Any], host: dict[str, t.Any], params: dict[str, t.Any]) -> dict[str, str]:
    """Two apt source entries for the same repository with different Signed-By keys (an earlier manual install's
    nvidia-container-toolkit.list next to the collection's file, say): apt fails every update until one goes."""
    title = "apt sources agree on each repository's Signed-By key"
    files = host.get("apt_sources") or []
    if not files:
        return check("apt_signed_by", title, OK, "no apt sources (not an apt host)")
    conflicts = signed_by_conflicts(files)
    if conflicts:
        return check("apt_signed_by", title, FAIL,
                     "apt reports \"Conflicting values set for option Signed-By\" for %s" % "; ".join(conflicts),
                     "Remove the older of the two files (for the toolkit, the nvidia-container-toolkit.list of a manual "
                     "install: gpuhost.nvidia.nvidia_container_toolkit with nvidia_container_toolkit_replace_foreign_repo_files: "
                     "true does it), then run apt-get update")
    return check("apt_signed_by", title, OK, "%d apt source file(s), no repository with two Signed-By keys" % len(files))


def check_cdi_version(facts: dict[str, t.Any], host: dict[str, t.Any], params: dict[str, t.Any]) -> dict[str, str]:
    """Each CDI spec's cdiVersion against the installed engines (docker, containerd, podman from dpkg or pacman): an
    engine whose CDI library is older than the spec refuses it ("unresolvable CDI devices")."""
    title = "CDI specs have a cdiVersion the installed engines load"
    specs = [s for s in host.get("cdi_specs") or [] if s.get("text")]
    engines = host.get("engines") or {}
    if not specs:
        return check("cdi_version", title, OK, "no CDI spec")
    if not engines:
        return check("cdi_version", title, OK, "no docker, containerd or podman package this check reads (dpkg, pacman)")
    problems, seen = [], []
    for spec in specs:
        version = _cdi_compat.spec_version(spec["text"])
        if version is None:
            continue
        seen.append("%s %s" % (spec["path"], version))
        problems += ["%s (cdiVersion %s): %s" % (spec["path"], version, r) for r in _cdi_compat.rejections(version, engines)]
    engine_list = ", ".join("%s %s" % (e, _cdi_compat.upstream(v)) for e, v in sorted(engines.items()))
    if problems:
        return check("cdi_version", title, FAIL, "; ".join(problems),
                     "Upgrade the engine as named, or generate the spec again with the version the engine loads "
                     "(nvidia-ctk cdi generate writes the lowest version the spec's content needs; an older toolkit writes older specs)")
    return check("cdi_version", title, OK, "%s loaded by %s" % (", ".join(seen) or "no cdiVersion read", engine_list))


CHECKS: tuple[t.Callable[..., dict[str, str]], ...] = (
    check_driver_loaded,
    check_driver_flavour,
    check_nouveau,
    check_cuda_version,
    check_boot_kernel,
    check_secure_boot,
    check_device_nodes,
    check_docker_runtime,
    check_containerd_runtime,
    check_cdi_spec,
    check_persistence,
    check_bindings,
    check_throttling,
    check_pcie_link,
    check_ecc,
    check_nvml_cgroup,
    check_xid,
    check_fabric_manager,
    check_nvlink,
    check_toolkit_cves,
    check_apt_signed_by,
    check_cdi_version,
)
CHECK_IDS = (
    "driver_loaded", "driver_flavour", "nouveau", "cuda_version", "boot_kernel", "secure_boot", "device_nodes", "docker_runtime",
    "containerd_runtime", "cdi_spec", "persistence", "bindings", "throttling", "pcie_link", "ecc", "nvml_cgroup",
    "xid", "fabric_manager", "nvlink",
    "toolkit_cves", "apt_signed_by", "cdi_version",
)


def run_checks(facts: dict[str, t.Any], host: dict[str, t.Any], params: dict[str, t.Any], skip: t.Iterable[str] = ()) -> list[dict[str, str]]:
    merged = dict(DEFAULTS)
    merged.update({k: v for k, v in params.items() if v is not None})
    skipped = set(skip)
    return [c for c in (func(facts, host, merged) for func in CHECKS) if c["id"] not in skipped]


def summary(checks: list[dict[str, str]]) -> dict[str, t.Any]:
    counts = {s: sum(1 for c in checks if c["status"] == s) for s in STATUSES}
    status = FAIL if counts[FAIL] else WARN if counts[WARN] else OK
    return {"status": status, "counts": counts}


def table(checks: list[dict[str, str]], width: int = 100) -> list[str]:
    """A compact fixed-width table: status, check id, evidence (cut to fit); the fix on its own line when not ok."""
    lines = ["%-4s  %-18s  %s" % ("STAT", "CHECK", "EVIDENCE")]
    for item in checks:
        evidence = item["evidence"]
        room = max(20, width - 26)
        lines.append("%-4s  %-18s  %s" % (item["status"].upper(), item["id"], evidence if len(evidence) <= room else evidence[: room - 3] + "..."))
        if item["fix"]:
            lines.append("%-4s  %-18s  fix: %s" % ("", "", item["fix"]))
    return lines


def markdown(hostname: str, checks: list[dict[str, str]]) -> str:
    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ")

    out = ["# GPU doctor: %s" % hostname, "", "| status | check | evidence | fix |", "|---|---|---|---|"]
    out += ["| %s | %s | %s | %s |" % (c["status"], cell(c["title"]), cell(c["evidence"]), cell(c["fix"])) for c in checks]
    return "\n".join(out) + "\n"
