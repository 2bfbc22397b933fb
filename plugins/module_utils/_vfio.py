# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Pure planner for the vfio_passthrough role: which PCI functions go to vfio-pci, and whether that is safe.

Private to this collection: no compatibility promise outside gpuhost.nvidia.

Everything here works on the facts of ``nvidia_gpu_facts`` (``pci_functions``, ``gpus``, ``iommu``,
``display_functions``) plus a request, and never touches the host. The kernel command-line helpers edit text
(``GRUB_CMDLINE_LINUX="..."`` in ``/etc/default/grub``, or a whole ``/etc/kernel/cmdline``) token by token, so
the user's other arguments and spacing survive and removal restores the text exactly.
"""

from __future__ import annotations

import fnmatch
import re
import shlex
import typing as t

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _gpu_schema
from ansible_collections.gpuhost.nvidia.plugins.module_utils._ids import normalize_bus_id
from ansible_collections.gpuhost.nvidia.plugins.module_utils._gpu_schema import process_view
from ansible_collections.gpuhost.nvidia.plugins.module_utils._validate import SHELL_VARIABLE_RE, KernelArgument, InputError

# The driver this planner binds the chosen functions to (one of _pci.PASSTHROUGH_DRIVERS).
VFIO_DRIVER = "vfio-pci"

_ADDRESS_RE = re.compile(r"^(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
_ID_RE = re.compile(r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{4}$")
_CANONICAL_ADDRESS_RE = re.compile(r"^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")

IOMMU_ARGS = {"intel": "intel_iommu=on", "amd": "amd_iommu=on"}
CPU_VENDORS = {"GenuineIntel": "intel", "AuthenticAMD": "amd"}


def _as_list(value: t.Any) -> list[t.Any]:
    if value is None:
        return []
    if isinstance(value, (list, tuple, set)):
        return list(value)
    return [value]


def slot_of(address: str) -> str:
    """``0000:01:00.1`` -> ``0000:01:00``: the functions of one PCI device share it."""
    return address.rsplit(".", 1)[0]


def cpu_vendor(processor: t.Any) -> str | None:
    """``intel`` / ``amd`` from Ansible's ``ansible_facts.processor`` list (or a vendor string), else None."""
    for item in _as_list(processor):
        vendor = CPU_VENDORS.get(str(item).strip())
        if vendor:
            return vendor
    return None


def _describe(function: t.Mapping[str, t.Any]) -> str:
    return "%s (%s, %s, driver %s)" % (
        function.get("pci_bus_id"),
        function.get("pci_device_id") or "unknown id",
        function.get("type") or "unknown type",
        function.get("bound_driver") or "none",
    )


def select_targets(
    facts: t.Mapping[str, t.Any], pci_addresses: t.Iterable[t.Any], device_ids: t.Iterable[t.Any]
) -> dict[str, t.Any]:
    """The GPUs chosen by address and by vendor:device id, each with every function of its PCI device.

    Returns ``gpus`` (GPU function addresses), ``functions`` (the GPUs' functions, audio/USB included, sorted),
    ``ids`` (their vendor:device ids, sorted) and ``errors``.
    """
    errors: list[str] = []
    functions = list(facts.get("pci_functions") or [])
    by_address = {f.get("pci_bus_id"): f for f in functions}
    gpu_functions = [f for f in functions if f.get("type") == "gpu"]
    chosen: list[str] = []

    for raw in _as_list(pci_addresses):
        text = str(raw).strip()
        address = normalize_bus_id(text) if _ADDRESS_RE.fullmatch(text) else None
        if address is None:
            errors.append(
                "vfio_passthrough_pci_addresses: %r is not a PCI address; write it as dddd:bb:dd.f, for example 0000:01:00.0" % raw
            )
            continue
        function = by_address.get(address)
        if function is None:
            known = ", ".join(str(f.get("pci_bus_id")) for f in gpu_functions) or "none"
            errors.append("vfio_passthrough_pci_addresses: %s is not an NVIDIA PCI function on this host (NVIDIA GPUs: %s)" % (address, known))
        elif function.get("type") != "gpu":
            errors.append(
                "vfio_passthrough_pci_addresses: %s is a %s function, not a GPU; name the GPU function (%s.0): its other "
                "functions go with it" % (address, function.get("type"), slot_of(address))
            )
        elif address not in chosen:
            chosen.append(address)

    for raw in _as_list(device_ids):
        text = str(raw).strip().lower()
        if not _ID_RE.fullmatch(text):
            errors.append("vfio_passthrough_device_ids: %r is not a vendor:device id; write it as 10de:2204" % raw)
            continue
        matches = [f.get("pci_bus_id") for f in gpu_functions if f.get("pci_device_id") == text]
        if not matches:
            present = ", ".join(sorted({str(f.get("pci_device_id")) for f in gpu_functions})) or "none"
            errors.append("vfio_passthrough_device_ids: %s matches no NVIDIA GPU on this host (GPU ids present: %s)" % (text, present))
        for address in matches:
            if address not in chosen:
                chosen.append(address)

    slots = {slot_of(a) for a in chosen}
    members = sorted(f.get("pci_bus_id") for f in functions if slot_of(str(f.get("pci_bus_id"))) in slots)
    ids = sorted({by_address[a].get("pci_device_id") for a in members if by_address[a].get("pci_device_id")})
    return {"gpus": sorted(chosen), "functions": members, "ids": ids, "errors": errors}


def check_ids_claim_only_targets(facts: t.Mapping[str, t.Any], ids: list[str], targets: list[str]) -> list[str]:
    """``vfio-pci ids=`` claims every function with those ids: none may be a function that is not passed through."""
    errors = []
    for function in facts.get("pci_functions") or []:
        if function.get("pci_device_id") in ids and function.get("pci_bus_id") not in targets:
            errors.append(
                "vfio-pci ids=%s would also claim %s, which is not selected; choose the GPUs by "
                "vfio_passthrough_pci_addresses instead of vfio_passthrough_device_ids" % (function.get("pci_device_id"), _describe(function))
            )
    return errors


def check_iommu_groups(facts: t.Mapping[str, t.Any], targets: list[str]) -> dict[str, t.Any]:
    """Every function sharing an IOMMU group with a target must be a target too, or a PCI bridge.

    Returns ``errors``, ``pending`` (true when the IOMMU is off, so groups cannot be checked yet) and ``groups``
    (the group numbers of the targets).
    """
    iommu = facts.get("iommu") or {}
    functions = {f.get("pci_bus_id"): f for f in facts.get("pci_functions") or []}
    if not iommu.get("enabled"):
        return {"errors": [], "pending": True, "groups": []}
    groups = {g.get("group"): list(g.get("functions") or []) for g in iommu.get("groups") or []}
    errors = []
    seen: list[int] = []
    for address in targets:
        group = (functions.get(address) or {}).get("iommu_group")
        if group is None:
            errors.append("%s has no IOMMU group although the IOMMU is on: the device cannot be assigned to a VM" % address)
            continue
        if group in seen:
            continue
        seen.append(group)
        strangers = [
            f for f in groups.get(group, [])
            if f.get("pci_bus_id") not in targets and f.get("type") != "bridge"
        ]
        if strangers:
            errors.append(
                "IOMMU group %d of %s also holds %s, which would not go to vfio-pci: a group is assigned to a VM as a whole. "
                "Pass those devices through too, move the GPU to another slot, or fix the grouping in the firmware "
                "(ACS); this role does not use the ACS override patch"
                % (group, address, ", ".join(_describe(f) for f in strangers))
            )
    return {"errors": errors, "pending": False, "groups": sorted(seen)}


def check_console(facts: t.Mapping[str, t.Any], targets: list[str], allow: bool) -> dict[str, list[str]]:
    """A target that drives the boot console needs another display device, or an explicit override."""
    errors: list[str] = []
    warnings: list[str] = []
    display = list(facts.get("display_functions") or [])
    for address in targets:
        record = next((d for d in display if d.get("pci_bus_id") == address), None)
        if not record or not record.get("boot_vga"):
            continue
        others = [d for d in display if d.get("pci_bus_id") not in targets]
        if others:
            warnings.append(
                "%s drives the boot console; after passthrough the console is on %s only if the firmware picks it"
                % (address, ", ".join(str(d.get("pci_bus_id")) for d in others))
            )
        elif allow:
            warnings.append("%s is the host's only display device and drives the console: the host console goes dark (allowed by "
                            "vfio_passthrough_allow_console_gpu)" % address)
        else:
            errors.append(
                "%s is the host's only display device and drives the boot console: passing it through leaves the host without "
                "a console. Set vfio_passthrough_allow_console_gpu: true if you have another way in (serial console, BMC)" % address
            )
    return {"errors": errors, "warnings": warnings}


def _nvidia_targets(facts: t.Any, targets: list[str]) -> list[t.Mapping[str, t.Any]]:
    gpus = facts.get("gpus") if isinstance(facts, t.Mapping) else None
    return [gpu for gpu in (gpus if isinstance(gpus, list) else [])
            if isinstance(gpu, t.Mapping) and gpu.get("pci_bus_id") in targets and gpu.get("bound_driver") == "nvidia"]


def check_processes(facts: t.Mapping[str, t.Any], targets: list[str]) -> list[str]:
    """No process may be using a target GPU under the nvidia driver."""
    errors = []
    for gpu in _nvidia_targets(facts, targets):
        processes = gpu.get("processes")
        if isinstance(processes, list) and processes:
            described = ", ".join("%s (pid %s)" % (p.get("name") or "?", p.get("pid")) if isinstance(p, t.Mapping) else repr(p)[:40]
                                  for p in processes)
            errors.append("%s is in use under the nvidia driver by %s: stop them before passing the GPU through" % (gpu.get("pci_bus_id"), described))
    return errors


def unknown_processes(facts: t.Mapping[str, t.Any], targets: list[str]) -> list[str]:
    """A warning per target GPU under the nvidia driver whose processes cannot be read (the facts' reading,
    _gpu_schema.process_view): it may be in use. A warning, not an error: the role changes only the next boot's
    binding, and the reboot that applies it ends whatever runs; the warning says so, never "not in use"."""
    warnings = []
    for gpu in _nvidia_targets(facts, targets):
        if isinstance(gpu.get("processes"), list) and gpu["processes"] and not gpu.get("processes_error"):
            continue  # in use: check_processes refuses it
        unknown = process_view({"present": True, "gpus": [gpu]})["unknown"]
        if unknown:
            warnings.append(
                "%s is bound to the nvidia driver and its processes cannot be read (%s), so it may be in use: whatever "
                "runs on it stops at the reboot that passes it through" % (gpu.get("pci_bus_id"), "; ".join(u["reason"] for u in unknown))
            )
    return warnings


def _gpu_keys(gpu: t.Mapping[str, t.Any]) -> set[str]:
    keys = {str(gpu.get("pci_bus_id")), str(gpu.get("uuid"))}
    if gpu.get("index") is not None:
        keys.add(str(gpu.get("index")))
    return keys


def check_conflicts(facts: t.Mapping[str, t.Any], gpus: list[str], other_roles: t.Mapping[str, t.Any]) -> list[str]:
    """The GPUs passed through must not be driven by nvidia_driver or configured by gpu_settings in the same play.

    ``other_roles.nvidia_driver``: null when the driver role is not configured for this host, else a dict with
    ``passthrough_pci_addresses`` and ``passthrough_policy``: every target must be listed with policy ``exclude``.
    ``other_roles.gpu_settings_gpus``: ``gpu_settings_spec.gpus`` when set. V(all) is fine (NVML does not see
    vfio-pci GPUs); an index, UUID, PCI address or model name (shell wildcards) naming a target is a conflict.
    """
    errors = []
    driver = other_roles.get("nvidia_driver")
    if driver is not None:
        listed = {normalize_bus_id(a) or str(a) for a in _as_list(driver.get("passthrough_pci_addresses"))}
        missing = [a for a in gpus if a not in listed]
        if missing:
            errors.append(
                "nvidia_driver is configured for this host and would drive %s: add %s to nvidia_driver_passthrough_pci_addresses "
                "and set nvidia_driver_passthrough_policy: exclude" % (", ".join(missing), ", ".join(missing))
            )
        elif gpus and driver.get("passthrough_policy") != "exclude":
            errors.append(
                "nvidia_driver_passthrough_policy is %r: set it to exclude so that the driver role leaves %s to vfio-pci"
                % (driver.get("passthrough_policy"), ", ".join(gpus))
            )
    selectors = [str(s) for s in _as_list(other_roles.get("gpu_settings_gpus"))]
    for gpu in facts.get("gpus") or []:
        address = gpu.get("pci_bus_id")
        if address not in gpus:
            continue
        keys = _gpu_keys(gpu)
        name = str(gpu.get("name") or "")
        hits = [s for s in selectors if s != "all" and (s in keys or normalize_bus_id(s) == address or (name and fnmatch.fnmatchcase(name, s)))]
        if hits:
            errors.append("gpu_settings_spec.gpus names %s (%s), which this play passes through to VMs: remove it there"
                          % (address, ", ".join(hits)))
    return errors


def kernel_args(request: t.Mapping[str, t.Any], vendor: str | None, ids: list[str]) -> list[str]:
    """The kernel arguments to ensure: the IOMMU switch for the CPU vendor, iommu=pt, optionally vfio-pci.ids=."""
    args = []
    if vendor in IOMMU_ARGS:
        args.append(IOMMU_ARGS[vendor])
    if request.get("iommu_passthrough_mode", True):
        args.append("iommu=pt")
    if request.get("kernel_ids") and ids:
        args.append("vfio-pci.ids=%s" % ",".join(ids))
    return args


def proxmox_hostpci(gpus: list[str], options: t.Mapping[str, t.Any]) -> list[str]:
    """One Proxmox ``hostpciN`` line per GPU (all functions: the slot without the function number)."""
    lines = []
    for number, address in enumerate(gpus):
        slot = slot_of(address)
        if slot.startswith("0000:"):
            slot = slot[5:]
        parts = [slot]
        parts.append("pcie=%d" % (1 if options.get("pcie", True) else 0))
        parts.append("rombar=%d" % (1 if options.get("rombar", True) else 0))
        parts.append("x-vga=%d" % (1 if options.get("x_vga", False) else 0))
        lines.append("hostpci%d: %s" % (number, ",".join(parts)))
    return lines


_FLAG = "true or false"
_TEXT = "a string"
_TEXTS = "a list of strings"
# The type of each request key the planner reads: a wrong one is an error of the plan, not a traceback.
_REQUEST_TYPES = {"state": _TEXT, "pci_addresses": _TEXTS, "device_ids": _TEXTS, "iommu_passthrough_mode": _FLAG,
                  "kernel_ids": _FLAG, "allow_console_gpu": _FLAG, "cpu_vendor": _TEXT}
_PROXMOX_KEYS = ("pcie", "rombar", "x_vga")


def _type_problem(value: t.Any, kind: str) -> bool:
    if kind == _FLAG:
        return not isinstance(value, bool)
    if kind == _TEXT:
        return not isinstance(value, str)
    texts = [value] if isinstance(value, str) else value
    return not isinstance(texts, (list, tuple)) or not all(isinstance(item, str) for item in texts)


def input_problems(request: t.Mapping[str, t.Any], facts: t.Mapping[str, t.Any], host: t.Mapping[str, t.Any]) -> list[str]:
    """Every request, facts or host value of the wrong type, named; the plan stops on any of them (it cannot tell what
    such a value was meant to select, so it selects nothing)."""
    problems = ["vfio_passthrough request %s must be %s, got %r" % (key, kind, request[key])
                for key, kind in _REQUEST_TYPES.items() if request.get(key) is not None and _type_problem(request[key], kind)]
    proxmox = request.get("proxmox")
    if proxmox is not None and not isinstance(proxmox, t.Mapping):
        problems.append("vfio_passthrough request proxmox must be a dict of %s (each true or false), got %r" % (", ".join(_PROXMOX_KEYS), proxmox))
    elif proxmox is not None:
        problems += ["vfio_passthrough request proxmox.%s must be true or false, got %r" % (key, proxmox[key])
                     for key in _PROXMOX_KEYS if proxmox.get(key) is not None and not isinstance(proxmox[key], bool)]
    others = request.get("other_roles")
    if others is not None and not isinstance(others, t.Mapping):
        problems.append("vfio_passthrough request other_roles must be a dict, got %r" % (others,))
    elif others is not None:
        driver = others.get("nvidia_driver")
        if driver is not None and not isinstance(driver, t.Mapping):
            problems.append("vfio_passthrough request other_roles.nvidia_driver must be a dict or null, got %r" % (driver,))
        elif driver is not None and driver.get("passthrough_pci_addresses") is not None and _type_problem(driver["passthrough_pci_addresses"], _TEXTS):
            problems.append("vfio_passthrough request other_roles.nvidia_driver.passthrough_pci_addresses must be a list of strings, got %r"
                            % (driver["passthrough_pci_addresses"],))
        selectors = others.get("gpu_settings_gpus")
        if selectors is not None and not isinstance(selectors, (str, int, list, tuple)):
            problems.append("vfio_passthrough request other_roles.gpu_settings_gpus must be a list, got %r" % (selectors,))
    problems += _gpu_schema.facts_problems(facts, "vfio_passthrough facts")
    if not problems:
        # A function without its address cannot be told apart from the others in its IOMMU group.
        problems += ["vfio_passthrough facts.pci_functions[%d] has no pci_bus_id" % index
                     for index, function in enumerate(facts.get("pci_functions") or []) if not function.get("pci_bus_id")]
    if host.get("proc_cmdline") is not None and not isinstance(host["proc_cmdline"], str):
        problems.append("vfio_passthrough host proc_cmdline must be a string, got %r" % (host["proc_cmdline"],))
    if host.get("processor") is not None and not isinstance(host["processor"], (str, list, tuple)):
        problems.append("vfio_passthrough host processor must be a list (ansible_facts.processor), got %r" % (host["processor"],))
    return problems


def plan(request: t.Mapping[str, t.Any], facts: t.Mapping[str, t.Any], host: t.Mapping[str, t.Any]) -> dict[str, t.Any]:
    """Everything the role does, and every reason to stop before changing anything (``errors``).

    request: state, pci_addresses, device_ids, iommu_passthrough_mode, kernel_ids, allow_console_gpu, cpu_vendor
        (auto, intel, amd, none), proxmox ({pcie, rombar, x_vga}), other_roles.
    host: processor (ansible_facts.processor), proc_cmdline (the running kernel's command line).
    """
    problems = input_problems(request, facts, host)
    state = request.get("state") or "present"
    result: dict[str, t.Any] = {
        "state": state,
        "errors": [],
        "warnings": [],
        "gpus": [],
        "functions": [],
        "ids": [],
        "mode": None,
        "kernel_args": [],
        "iommu_pending": False,
        "iommu_groups": [],
        "proxmox_hostpci": [],
        "unbound": [],
    }
    if problems:
        result["errors"] = problems
        return result
    if state not in ("present", "absent"):
        result["errors"].append("vfio_passthrough_state must be present or absent, got %r" % state)
        return result
    if state == "absent":
        return result

    addresses = _as_list(request.get("pci_addresses"))
    device_ids = _as_list(request.get("device_ids"))
    if not addresses and not device_ids:
        result["errors"].append("choose the GPUs to pass through: set vfio_passthrough_pci_addresses or vfio_passthrough_device_ids")
        return result
    selection = select_targets(facts, addresses, device_ids)
    errors = list(selection["errors"])
    result.update(gpus=selection["gpus"], functions=selection["functions"])
    # ids mode (options vfio-pci ids=) only when the user chose by id alone; addresses use a per-device override.
    result["mode"] = "ids" if device_ids and not addresses else "addresses"
    if result["mode"] == "ids":
        result["ids"] = selection["ids"]
        errors.extend(check_ids_claim_only_targets(facts, selection["ids"], selection["functions"]))

    wanted_vendor = request.get("cpu_vendor") or "auto"
    if wanted_vendor == "auto":
        vendor = cpu_vendor(host.get("processor"))
        if vendor is None:
            result["warnings"].append("the CPU vendor is neither Intel nor AMD: no intel_iommu/amd_iommu argument is added "
                                      "(set vfio_passthrough_cpu_vendor to choose one)")
    elif wanted_vendor in ("intel", "amd", "none"):
        vendor = None if wanted_vendor == "none" else wanted_vendor
    else:
        errors.append("vfio_passthrough_cpu_vendor must be auto, intel, amd or none, got %r" % wanted_vendor)
        vendor = None
    result["kernel_args"] = kernel_args(request, vendor, result["ids"])

    groups = check_iommu_groups(facts, selection["functions"])
    errors.extend(groups["errors"])
    result["iommu_groups"] = groups["groups"]
    if groups["pending"]:
        running = (host.get("proc_cmdline") or "").split()
        iommu_arg = IOMMU_ARGS.get(vendor or "")
        if iommu_arg and iommu_arg not in running:
            result["iommu_pending"] = True
            result["warnings"].append(
                "the IOMMU is not on yet: %s takes effect at the next boot; the IOMMU groups are checked on the first run after it"
                % iommu_arg
            )
        else:
            errors.append(
                "the IOMMU is off although the running kernel has %s: enable VT-d / AMD-Vi (IOMMU) in the firmware setup"
                % (iommu_arg or "no IOMMU argument to add")
            )

    console = check_console(facts, selection["gpus"], bool(request.get("allow_console_gpu")))
    errors.extend(console["errors"])
    result["warnings"].extend(console["warnings"])
    errors.extend(check_processes(facts, selection["gpus"]))
    result["warnings"].extend(unknown_processes(facts, selection["gpus"]))
    errors.extend(check_conflicts(facts, selection["gpus"], request.get("other_roles") or {}))

    # The addresses and ids are written into modprobe.d (whose install line modprobe runs as shell) and into the
    # override script: only what is certainly a PCI address or a vendor:device id may reach them.
    for address in selection["functions"]:
        if not isinstance(address, str) or not _CANONICAL_ADDRESS_RE.fullmatch(address):
            errors.append("the facts name PCI function %r, which is not a PCI address (dddd:bb:dd.f); nothing is written" % (address,))
    for device_id in result["ids"]:
        if not isinstance(device_id, str) or not _ID_RE.fullmatch(device_id):
            errors.append("the facts name PCI id %r, which is not a vendor:device id; nothing is written" % (device_id,))

    bound = {f.get("pci_bus_id"): f.get("bound_driver") for f in facts.get("pci_functions") or []}
    result["unbound"] = ["%s (%s)" % (a, bound.get(a) or "no driver") for a in selection["functions"] if bound.get(a) != VFIO_DRIVER]
    result["proxmox_hostpci"] = proxmox_hostpci(selection["gpus"], request.get("proxmox") or {})
    result["errors"] = errors
    return result


# Kernel command line editing -------------------------------------------------------------------------------------


def _key(arg: str) -> str:
    return arg.split("=", 1)[0]


def _tokens(text: str) -> list[tuple[int, int, str]]:
    """Whitespace-separated tokens of a command line with their spans."""
    return [(m.start(), m.end(), m.group(0)) for m in re.finditer(r"\S+", text)]


def merge_cmdline(current: str, wanted: t.Iterable[str], ours: t.Iterable[str] = ()) -> dict[str, t.Any]:
    """Ensure ``wanted`` arguments in a command line, keeping every other argument and the spacing.

    ``ours``: arguments an earlier run added (from the record). An argument of ours whose key is wanted with another
    value is replaced; a user's argument with the same key and another value is a conflict (never overwritten).
    Returns ``cmdline``, ``added`` (now ours and not there before), ``removed`` and ``errors``.
    """
    ours = list(ours)
    text = current
    removed = []
    errors = []
    added = []
    wanted = list(dict.fromkeys(wanted))
    # Drop our own stale arguments (a changed vfio-pci.ids=, an iommu arg for another vendor).
    stale = [a for a in ours if a not in wanted and a in text.split()]
    if stale:
        text = remove_args(text, stale)
        removed = stale
    present = text.split()
    for arg in wanted:
        if arg in present:
            continue
        clash = [p for p in present if _key(p) == _key(arg) and p != arg]
        if clash:
            errors.append("the kernel command line already sets %s; this role would set %s. Remove it, or change the role's "
                          "variables so that it does not ask for %s" % (" ".join(clash), arg, _key(arg)))
            continue
        text = (text + " " + arg) if text.strip() else (text + arg)
        present.append(arg)
        added.append(arg)
    return {"cmdline": text, "added": added, "removed": removed, "errors": errors}


def remove_args(current: str, args: t.Iterable[str]) -> str:
    """Remove whole-token arguments, each with the space before it (or after it, at the start)."""
    drop = set(args)
    text = current
    for start, end, token in reversed(_tokens(current)):
        if token not in drop:
            continue
        if start > 0 and text[start - 1] == " ":
            text = text[: start - 1] + text[end:]
        elif end < len(text) and text[end] == " ":
            text = text[:start] + text[end + 1:]
        else:
            text = text[:start] + text[end:]
    return text


_ASSIGN_RE_TEMPLATE = r'^(?P<prefix>\s*(?:export\s+)?%s=)(?P<value>"[^"]*"|\'[^\']*\'|[^\s#]*)(?P<rest>.*)$'
# What a bare (unquoted) value may hold so that the shell reads it as one plain word.
_BARE_VALUE_RE = re.compile(r"^[A-Za-z0-9_.,:/=+@%-]*$")
_REST_RE = re.compile(r"^[ \t]*(#.*)?$")
_NAME_RE_TEMPLATE = r"(?<![A-Za-z0-9_])%s(?![A-Za-z0-9_])"


def shell_structure(content: str) -> tuple[list[bool], dict[int, int]]:
    """Where a shell-style defaults file's lines start, and where their comments begin.

    Returns, per line, whether it starts at the top level (outside quotes, command substitutions and continued
    lines), and the column where a top-level comment begins, by line number. Raises ValueError when a quote or a
    substitution is never closed, or the file ends with a continued line: such a file cannot be edited with
    certainty.
    """
    top: list[bool] = []
    comments: dict[int, int] = {}
    stack: list[tuple[str, int]] = []
    index, size = 0, len(content)
    line, line_offset = -1, 0
    new_line, continued, word_start = True, False, True
    while index < size:
        if new_line:
            line += 1
            line_offset = index
            top.append(not stack and not continued)
            new_line, continued, word_start = False, False, True
        char = content[index]
        nxt = content[index + 1] if index + 1 < size else ""
        context = stack[-1][0] if stack else ""
        if char == "\n":
            new_line = True
            index += 1
            continue
        if context == "'":
            if char == "'":
                stack.pop()
            index += 1
            continue
        if char == "\\":
            if nxt == "\n":
                new_line, continued = True, True
            index += 2
            word_start = False
            continue
        if context == '"':
            if char == '"':
                stack.pop()
            elif char == "`":
                stack.append(("`", line + 1))
            elif char == "$" and nxt in "({":
                stack.append(("$" + nxt, line + 1))
                index += 1
            index += 1
            continue
        if char == "#" and word_start and context != "${":
            if not stack:
                comments[line] = index - line_offset
            end = content.find("\n", index)
            index = size if end < 0 else end
            continue
        if char in "'\"":
            stack.append((char, line + 1))
        elif char == "`":
            if context == "`":
                stack.pop()
            else:
                stack.append(("`", line + 1))
        elif char == "$" and nxt in "({":
            stack.append(("$" + nxt, line + 1))
            index += 2
            word_start = nxt == "("
            continue
        elif char == "(" and context in ("$(", "("):
            stack.append(("(", line + 1))
        elif char == ")" and context in ("$(", "("):
            stack.pop()
        elif char == "}" and context == "${":
            stack.pop()
        word_start = char in " \t;&|()"
        index += 1
    if stack:
        kind = {"'": "single quote", '"': "double quote", "`": "backtick", "$(": "$( substitution", "(": "parenthesis",
                "${": "${ expansion"}[stack[-1][0]]
        raise ValueError("the %s opened on line %d is never closed" % (kind, stack[-1][1]))
    if continued:
        raise ValueError("its last line ends with a backslash, so a line appended to it would continue that line")
    return top, comments


def _plain_ascii(text: str, allow_newline: bool = False) -> bool:
    """Printable ASCII, spaces and tabs (and newlines when allowed) only."""
    return all(" " <= c <= "~" or c == "\t" or (allow_newline and c == "\n") for c in text)


def _assignment(line: str, variable: str, number: int) -> tuple[re.Match[str], str, str]:
    """The match, quote and value of ``VARIABLE=...`` on one line; ValueError when it is not certain."""
    match = re.match(_ASSIGN_RE_TEMPLATE % re.escape(variable), line)
    if match is None:
        raise ValueError("line %d sets or uses %s in a way this module cannot edit with certainty: %r; edit it by hand"
                         % (number, variable, line))
    raw = match.group("value")
    if "$" in raw or "`" in raw:
        raise ValueError("%s uses shell expansion (%s); edit it by hand or move the expansion out of it" % (variable, raw))
    if raw[:1] in ('"', "'"):
        quote = raw[0]
        if len(raw) < 2 or not raw.endswith(quote):
            raise ValueError("line %d: the value of %s has no closing %s quote: %r" % (number, variable, quote, line))
        value = raw[1:-1]
        if quote == '"' and "\\" in value:
            raise ValueError("line %d: the value of %s holds a backslash escape: %r; edit it by hand" % (number, variable, line))
    else:
        quote, value = '"', raw
        if not _BARE_VALUE_RE.fullmatch(value):
            raise ValueError("line %d: the unquoted value of %s holds characters the shell interprets: %r; quote it by hand"
                             % (number, variable, line))
    if not _REST_RE.fullmatch(match.group("rest")):
        raise ValueError("line %d: more follows the value of %s: %r; this module edits only a plain assignment"
                         % (number, variable, line))
    if not _plain_ascii(value):
        raise ValueError("line %d: the value of %s holds a character outside printable ASCII: %r" % (number, variable, line))
    return match, quote, value


def edit_shell_variable(content: str, variable: str, edit: t.Callable[[str], str]) -> tuple[str, str | None]:
    """Apply ``edit`` to the value of ``VARIABLE="..."`` in a shell-style defaults file (the last assignment wins).

    Returns the new content and the old value (None when the variable was not assigned; it is then appended).
    The file must be certain: every quote and substitution closed, and every line that names the variable (outside
    comments) either a plain assignment (double-quoted without expansions or escapes, single-quoted, or a bare
    word), possibly exported and followed by a comment, or ``export VARIABLE``. Anything else raises ValueError.
    """
    if not SHELL_VARIABLE_RE.fullmatch(variable or ""):
        raise ValueError("%r is not a shell variable name" % variable)
    top, comments = shell_structure(content)
    name = re.compile(_NAME_RE_TEMPLATE % re.escape(variable))
    export_only = re.compile(r"^[ \t]*export[ \t]+%s[ \t]*(#.*)?$" % re.escape(variable))
    lines = content.splitlines(keepends=True)
    index = None
    for number, line in enumerate(lines):
        body = line.rstrip("\n")
        code = body[:comments[number]] if number in comments else body
        if not name.search(code):
            continue
        if not top[number]:
            raise ValueError("line %d names %s inside a quoted string or a continued line; edit it by hand" % (number + 1, variable))
        if export_only.match(body):
            continue
        _assignment(body, variable, number + 1)
        index = number
    if index is None:
        new_value = edit("")
        sep = "" if not content or content.endswith("\n") else "\n"
        return content + sep + '%s="%s"\n' % (variable, new_value), None
    line = lines[index]
    ending = "\n" if line.endswith("\n") else ""
    match, quote, value = _assignment(line.rstrip("\n"), variable, index + 1)
    new = edit(value)
    lines[index] = "%s%s%s%s%s%s" % (match.group("prefix"), quote, new, quote, match.group("rest"), ending)
    return "".join(lines), value


def shell_value(content: str, variable: str) -> str | None:
    """The value of the last ``VARIABLE=`` assignment, unquoted (None when not assigned)."""
    pattern = re.compile(_ASSIGN_RE_TEMPLATE % re.escape(variable))
    value = None
    for line in content.splitlines():
        match = pattern.match(line)
        if match:
            parsed = shlex.split(match.group("value")) if match.group("value") else [""]
            value = " ".join(parsed)
    return value


def plan_cmdline_file(
    content: str | None, variable: str | None, args: list[str], state: str, recorded: list[str]
) -> dict[str, t.Any]:
    """The new content of a kernel command-line file, and the arguments that are ours afterwards.

    ``variable``: the shell variable holding the command line (``GRUB_CMDLINE_LINUX`` in ``/etc/default/grub``);
    empty for a file that is the command line itself (``/etc/kernel/cmdline``). ``recorded``: the arguments an earlier
    run added to this file. ``state: absent`` removes exactly those, so the file comes back as it was.
    Returns ``content``, ``before`` / ``after`` (the command line), ``added``, ``removed``, ``ours`` and ``errors``.
    """
    result: dict[str, t.Any] = {"content": content, "before": None, "after": None, "added": [], "removed": [],
                                "ours": [], "errors": []}
    # The module checks its options first; this guard keeps every caller from writing anything else into a file
    # that the bootloader tooling runs as shell.
    refused = []
    for number, arg in enumerate(args if state == "present" else []):
        try:
            KernelArgument()("args[%d]" % number, arg)
        except InputError as exc:
            refused.append(str(exc))
    if variable and not SHELL_VARIABLE_RE.fullmatch(variable):
        refused.append("variable: %r is not a shell variable name" % variable)
    if refused:
        result["errors"] = refused
        return result
    if content is None:
        if state == "absent":
            return result
        result["errors"].append("the file does not exist: is it this host's bootloader configuration?")
        return result
    present_args: list[str] = []
    changes: dict[str, t.Any] = {}

    def edit(value: str) -> str:
        result["before"] = value
        present_args.extend(value.split())
        if state == "absent":
            mine = [a for a in recorded if a in present_args]
            changes["removed"] = mine
            return remove_args(value, mine)
        merged = merge_cmdline(value, args, recorded)
        changes.update(merged)
        return merged["cmdline"]

    if variable:
        try:
            new_content, _old = edit_shell_variable(content, variable, edit)
        except ValueError as exc:
            result["errors"].append(str(exc))
            return result
    else:
        body = content.rstrip("\n")
        if not _plain_ascii(body, allow_newline=True):
            bad = next(c for c in body if not _plain_ascii(c, allow_newline=True))
            result["errors"].append("the command line holds %r, a character outside printable ASCII; edit it by hand" % bad)
            return result
        new_body = edit(body)
        new_content = content if new_body == body else new_body + (content[len(body):] or "\n")
    result["errors"] = list(changes.get("errors", []))
    if result["errors"]:
        return result
    if state == "absent":
        result["removed"] = changes.get("removed", [])
        result["ours"] = []
        if not result["removed"]:
            new_content = content
    else:
        result["added"] = changes.get("added", [])
        result["removed"] = changes.get("removed", [])
        now = (changes.get("cmdline") or "").split()
        result["ours"] = [a for a in list(dict.fromkeys(list(recorded) + result["added"])) if a in now and a in args]
        if not result["added"] and not result["removed"]:
            new_content = content
    result["content"] = new_content
    result["after"] = changes.get("cmdline") if state == "present" else None
    return result
