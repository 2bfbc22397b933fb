# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Pure decisions for the nvidia_driver role: source, branch, version, flavour, fabric manager, preflight errors.

Private to this collection: no compatibility promise outside gpuhost.nvidia.

Everything here takes plain data (the role's request, the GPU facts, what the role probed on the host, and the
per-distribution capability table from the role's vars/) and returns plain data. Nothing is run or written, so the
role can fail with every reason at once before it changes anything. GPU tables (architecture, CUDA per branch,
open-module support, legacy branches) come from ``_catalog``; this module holds no copy of them.
"""

from __future__ import annotations

import re
import typing as t
from collections.abc import Mapping, Sequence

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _catalog, _gpg, _gpu_schema, _pci, _validate
from ansible_collections.gpuhost.nvidia.plugins.module_utils._ids import normalize_bus_id, version_tuple
from ansible_collections.gpuhost.nvidia.plugins.module_utils._validate import as_list

FLAVOURS = ("auto", "open", "proprietary")
SOURCES = ("auto", "nvidia", "distro")
PASSTHROUGH_POLICIES = ("fail", "exclude")

# First driver branch that drives an architecture (NVIDIA driver release notes, "supported products"): H100 and the Ada
# boards arrived with 525, the Blackwell parts (B200, RTX 50) with 570. Older architectures run on every branch the role
# knows until their last one (``_catalog.LAST_BRANCH``).
FIRST_BRANCH: dict[str, int] = {"Hopper": 525, "Ada Lovelace": 525, "Blackwell": 570}

# NVIDIA's Fabric Manager guide: from the 570 branch, HGX systems with NVLink 5 (Blackwell) NVSwitches also need the
# NVLink Subnet Manager (nvlsm) next to Fabric Manager.
NVLSM_FIRST_BRANCH = 570
NVLSM_ARCHITECTURES = ("Blackwell",)

# Matched with fullmatch only: "$" would also match before a trailing newline, and the version reaches an apt
# preferences file (Pin: version), a dnf versionlock line and package specs. ASCII digits only (\d takes any
# script's digits).
_VERSION_RE = re.compile(r"([0-9]{3})\.[0-9]{1,3}(?:\.[0-9]{1,3})?")
# A PCI address as normalize_bus_id writes it (dddd:bb:dd.f): the only form that reaches the modprobe.d comment.
PCI_ADDRESS_RE = re.compile(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")

# Values the role writes into repository files (apt deb822 URIs:, dnf baseurl=, pacman Server =, the pacman section
# name) and key checks: each must stay one field of one line. No whitespace, no control character (a newline could add
# "SigLevel = Never" to pacman.conf or a field to an apt .sources file), a scheme the package managers fetch from.
# apt also takes file:/path (one slash), as its own documentation writes it.
_URL = _validate.Text(max_length=2048, pattern=re.compile(r"(https?://|file:/)[!-~]+"), what="an http(s):// or file:// URL")
_FINGERPRINT = _gpg.FINGERPRINT
# A pacman repository name: the section header [name] and the database file name.db. "options" is pacman.conf's own
# section and "local" names the database of installed packages.
PACMAN_REPO_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
REQUEST_RULES: dict[str, _validate.Rule] = {
    "repo_url": _URL,
    "repo_key_url": _URL,
    "repo_key_fingerprint": _FINGERPRINT,
    "epel_repo_url": _URL,
    "epel_repo_key_url": _URL,
    "epel_repo_key_fingerprint": _FINGERPRINT,
    "pacman_repo_name": _validate.Identifier(PACMAN_REPO_NAME_RE, "a pacman repository name of letters, digits, '_', '.' and '-'",
                                             max_length=64, reserved=("options", "local")),
}


def request_errors(request: Mapping[str, t.Any]) -> list[str]:
    """Errors of the request's repository values (URLs, key fingerprints, the pacman repository name), each named as
    its role variable. An empty or missing value means the default and is not checked."""
    values = {k: (None if request.get(k) in (None, "") else request.get(k)) for k in REQUEST_RULES}
    return ["nvidia_driver_" + e for e in _validate.check(values, REQUEST_RULES)]


def _tristate(value: t.Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    text = str(value if value is not None else "auto").strip().lower()
    return {"yes": "true", "no": "false", "on": "true", "off": "false"}.get(text, text)


def is_driver_version(value: t.Any) -> bool:
    """Whether ``value`` is an upstream driver version string (``580.65.06``, ``535.104``)."""
    return isinstance(value, str) and _VERSION_RE.fullmatch(value) is not None


def parse_branch(value: t.Any) -> int | None:
    """``580``, ``"580"`` or ``"580.65.06"`` -> 580; None for empty or unparsable values."""
    if value is None or value == "" or isinstance(value, bool):
        return None
    match = re.match(r"^\s*(\d{3})(?:\.|\s*$)", str(value))
    return int(match.group(1)) if match else None


def _gpus(facts: Mapping[str, t.Any]) -> list[dict[str, t.Any]]:
    """GPUs from the facts; GPU-class PCI functions that no richer source listed are added from pci_functions."""
    out: list[dict[str, t.Any]] = []
    seen: set[str] = set()
    for gpu in _gpu_schema.gpus(facts):
        bus = normalize_bus_id(gpu.get("pci_bus_id"))
        out.append({**gpu, "pci_bus_id": bus})
        if bus:
            seen.add(bus)
    for fn in facts.get("pci_functions") or []:
        if not isinstance(fn, Mapping) or fn.get("type", "gpu") != "gpu":
            continue
        bus = normalize_bus_id(fn.get("pci_bus_id"))
        if bus and bus not in seen:
            out.append({**fn, "pci_bus_id": bus})
            seen.add(bus)
    return out


def choose_source(requested: str, capabilities: Mapping[str, t.Any]) -> str | None:
    """``auto`` means NVIDIA's repository where NVIDIA publishes one for this distribution, else the distribution's."""
    sources = capabilities.get("sources") or {}
    if requested != "auto":
        return requested
    if (sources.get("nvidia") or {}).get("available"):
        return "nvidia"
    if (sources.get("distro") or {}).get("available"):
        return "distro"
    return None


def _skip(result: dict[str, t.Any], reason: str) -> dict[str, t.Any]:
    result["act"] = False
    result["skip_reason"] = reason
    return result


def plan(
    request: Mapping[str, t.Any],
    facts: Mapping[str, t.Any] | None,
    host: Mapping[str, t.Any],
    capabilities: Mapping[str, t.Any],
) -> dict[str, t.Any]:
    """Decide what the role installs, or why it must not.

    request: source, flavour, branch, version, cuda_version, cuda_minor_version_compatibility, passthrough_pci_addresses,
        passthrough_policy, fabric_manager, nvlsm, secure_boot (auto/true/false: the state where mokutil cannot tell),
        secure_boot_mok, force, require_headers, reboot; the repository
        values written into files (repo_url, repo_key_url, repo_key_fingerprint, epel_*, pacman_repo_name: REQUEST_RULES).
    facts: ansible_facts.nvidia_gpu (may be empty).
    host: distribution, distribution_major_version, connection, secure_boot (True/False/None: unknown), secure_boot_unknown
        (why it is unknown), headers_present,
        runfile_install (list of paths found), installed_packages (names), foreign_repo_files (paths).
    capabilities: the role's per-distribution table (``__nvidia_driver_capabilities``): supported, name, versions,
        sources: {nvidia|distro: {available, branches, flavours, signed_modules, dkms, fabric_manager, foreign_packages,
        note}}.

    Returns a dict with the decision and ``errors`` (every reason the role must stop, empty when it may go on). The
    stages below run in order; each is a small pure function, and a stage that finds the host out of scope ends the plan.
    """
    facts = facts or {}
    errors: list[str] = []
    distro = "%s %s" % (host.get("distribution") or "unknown", host.get("distribution_version") or host.get("distribution_major_version") or "")
    distro = distro.strip()
    result: dict[str, t.Any] = {
        "act": True,
        "skip_reason": None,
        "source": None,
        "flavour": None,
        "branch": None,
        "version": None,
        "dkms": None,
        "signed_modules": False,
        "fabric_manager": False,
        "nvlsm": False,
        "gpus": [],
        "excluded_gpus": [],
        "architectures": [],
        # enabled: the state the plan goes by (None: unknown); detected: what mokutil reported; stated: the user's
        # nvidia_driver_secure_boot (None: auto); path: how modules load (_stage_secure_boot).
        "secure_boot": {"enabled": secure_boot_state(host.get("secure_boot")), "detected": secure_boot_state(host.get("secure_boot")),
                        "stated": None, "path": None},
        "notes": [],
        "errors": errors,
    }

    # Values written into repository files are checked first, whatever the host: a bad one is never written.
    errors.extend(request_errors(request))
    gpus = _gpus(facts)
    force = bool(request.get("force"))
    if not (bool(facts.get("present")) or bool(gpus)) and not force:
        return _skip(result, "no NVIDIA GPU on this host (ansible_facts.nvidia_gpu.present is false): nothing to drive; "
                             "set nvidia_driver_force: true to install the driver anyway")

    # Inputs that need no host knowledge.
    inputs, input_errors = _stage_inputs(request)
    errors.extend(input_errors)
    result["version"] = inputs["version"]

    # Distribution and source.
    source, src_caps, source_errors = _stage_source(inputs["source"], host, capabilities, distro)
    errors.extend(source_errors)
    if source is None:
        return result
    result["source"] = source
    result["dkms"] = bool(src_caps.get("dkms", True))
    result["signed_modules"] = bool(src_caps.get("signed_modules"))

    # Branch: what the source offers (an empty list: whatever its repository holds, checked once it is configured).
    branch, branch_from_default, branch_errors = _stage_branch(inputs["branch"], source, src_caps, distro)
    errors.extend(branch_errors)
    result["branch"] = branch
    result["lifecycle"] = _catalog.branch_lifecycle(branch) if branch is not None else None

    # CUDA requirement.
    cuda = str(request.get("cuda_version") or "").strip() or None
    if cuda is not None:
        errors.extend(check_cuda(inputs["version"] or branch, cuda, bool(request.get("cuda_minor_version_compatibility"))))

    # GPUs, passthrough.
    driven, excluded, passthrough_errors = _stage_passthrough(gpus, request, inputs["policy"])
    errors.extend(passthrough_errors)
    result["gpus"] = [g.get("pci_bus_id") for g in driven]
    result["excluded_gpus"] = [g.get("pci_bus_id") for g in excluded]
    if gpus and not driven and not force:
        _skip(result, "every NVIDIA GPU on this host is meant for passthrough (%s): nothing for the nvidia driver to drive"
              % ", ".join(str(g.get("pci_bus_id")) for g in excluded))
        # Only the input errors stand: passthrough GPUs are what this host is for.
        result["errors"] = request_errors(request) + [e for e in errors if e.startswith("the GPU facts list")]
        return result

    arch_by_gpu = [(g.get("pci_bus_id"), _catalog.gpu_architecture(g)) for g in driven]
    archs = sorted({a for _b, a in arch_by_gpu if a}, key=_catalog.ARCHITECTURES.index)
    result["architectures"] = archs

    # Flavour.
    result["flavour"], flavour_errors = _stage_flavour(inputs["flavour"], arch_by_gpu, source, src_caps, distro)
    errors.extend(flavour_errors)

    # Branch against the GPUs.
    if branch is not None:
        errors.extend(check_branch_for_gpus(branch, arch_by_gpu, src_caps if branch_from_default else None, source, distro))
    if cuda is not None:
        errors.extend(check_cuda_for_gpus(cuda, arch_by_gpu))

    # Secure Boot.
    result["secure_boot"]["path"], secure_boot_errors = _stage_secure_boot(result, host, request, capabilities, source, distro)
    errors.extend(secure_boot_errors)

    # Kernel headers for DKMS.
    header_errors, header_notes = _stage_headers(result["dkms"], host, request)
    errors.extend(header_errors)
    result["notes"].extend(header_notes)

    # Earlier, conflicting installs.
    errors.extend(_stage_conflicts(host, src_caps, source))

    # Fabric Manager and NVLSM.
    fm, fm_errors = _stage_fabric_manager(request, facts, src_caps, source, distro, branch, archs)
    errors.extend(fm_errors)
    result.update(fm)

    # Reboot policy.
    errors.extend(_stage_reboot(request, host))
    return result


def _stage_inputs(request: Mapping[str, t.Any]) -> tuple[dict[str, t.Any], list[str]]:
    """The request's choices that need no host knowledge: flavour, source, passthrough policy, branch and version."""
    errors: list[str] = []
    flavour = str(request.get("flavour") or "auto")
    if flavour not in FLAVOURS:
        errors.append("nvidia_driver_flavour must be one of %s, got %r" % (", ".join(FLAVOURS), flavour))
    source_req = str(request.get("source") or "auto")
    if source_req not in SOURCES:
        errors.append("nvidia_driver_source must be one of %s, got %r" % (", ".join(SOURCES), source_req))
    policy = str(request.get("passthrough_policy") or "fail")
    if policy not in PASSTHROUGH_POLICIES:
        errors.append("nvidia_driver_passthrough_policy must be one of %s, got %r" % (", ".join(PASSTHROUGH_POLICIES), policy))

    version = str(request.get("version") or "").strip() or None
    branch_req = request.get("branch")
    branch = parse_branch(branch_req) if branch_req not in (None, "") else None
    if branch_req not in (None, "") and (branch is None or str(branch_req).strip() != str(branch)):
        errors.append("nvidia_driver_branch must be a driver branch number such as 580, got %r" % (branch_req,))
        branch = None
    elif branch is not None and not _catalog.is_known_branch(branch):
        errors.append(
            "unknown driver branch %d: the catalog knows %s" % (branch, ", ".join(str(b) for b in _catalog.known_branches(470)))
        )
        branch = None
    if version is not None:
        match = _VERSION_RE.fullmatch(version)
        if not match:
            errors.append("nvidia_driver_version must be a full driver version such as 580.65.06, got %r" % version)
            version = None
        else:
            version_branch = int(match.group(1))
            if branch is not None and version_branch != branch:
                errors.append("nvidia_driver_version %s is not on nvidia_driver_branch %d" % (version, branch))
            branch = version_branch if branch is None else branch
    return {"flavour": flavour, "source": source_req, "policy": policy, "version": version, "branch": branch}, errors


def _stage_source(
    source_req: str, host: Mapping[str, t.Any], capabilities: Mapping[str, t.Any], distro: str
) -> tuple[str | None, Mapping[str, t.Any], list[str]]:
    """The distribution's support and the driver source; no source (None) ends the plan."""
    if not capabilities.get("supported"):
        supported = capabilities.get("supported_list") or "Debian 12/13, Ubuntu 22.04/24.04/26.04, EL 8-10, Fedora 41-44, Arch Linux"
        return None, {}, ["unsupported distribution %s: this role supports %s" % (distro, supported)]
    versions = [str(v) for v in as_list(capabilities.get("versions"))]
    major = str(host.get("distribution_major_version") or "")
    full = str(host.get("distribution_version") or "")
    if versions and major not in versions and full not in versions:
        name = host.get("distribution")
        return None, {}, ["unsupported %s release %s: this role supports %s %s" % (name, full or major, name, ", ".join(versions))]
    source = choose_source(source_req, capabilities) if source_req in SOURCES else None
    src_caps: Mapping[str, t.Any] = ((capabilities.get("sources") or {}).get(source) or {}) if source else {}
    if source is None or not src_caps.get("available"):
        why = src_caps.get("note") if src_caps else None
        return None, {}, ["driver source %r is not available on %s%s" % (source or source_req, distro, (": " + why) if why else "")]
    return source, src_caps, []


def _stage_branch(branch: int | None, source: str, src_caps: Mapping[str, t.Any], distro: str) -> tuple[int | None, bool, list[str]]:
    """The branch (the request's, else the source's default), whether it is the default, and what the source refuses."""
    errors: list[str] = []
    offered = sorted(int(b) for b in as_list(src_caps.get("branches")))
    branch_from_default = False
    if branch is None:
        default = src_caps.get("default_branch")
        branch = parse_branch(default) if default not in (None, "") else None
        branch_from_default = branch is not None
        # A repository whose branches no two public sources agree on has no default: the request must name one.
        if branch is None and src_caps.get("default_branch_unconfirmed"):
            errors.append(
                "no default driver branch for the %s source on %s: %s; set nvidia_driver_branch (or nvidia_driver_version) to a "
                "branch the repository carries" % (source, distro, src_caps.get("default_branch_unconfirmed"))
            )
    if branch is not None and offered and branch not in offered:
        errors.append(
            "driver branch %d is not offered by the %s source on %s (offered: %s)" % (branch, source, distro, ", ".join(str(b) for b in offered))
        )
    minimum = src_caps.get("min_branch")
    if branch is not None and minimum not in (None, "") and branch < int(minimum):
        errors.append(
            "driver branch %d is not offered by the %s source on %s: its repository starts at branch %s%s"
            % (branch, source, distro, minimum, (": " + str(src_caps.get("min_branch_note"))) if src_caps.get("min_branch_note") else "")
        )
    return branch, branch_from_default, errors


def _stage_passthrough(
    gpus: Sequence[Mapping[str, t.Any]], request: Mapping[str, t.Any], policy: str
) -> tuple[list[Mapping[str, t.Any]], list[Mapping[str, t.Any]], list[str]]:
    """The GPUs the driver drives and those left to vfio-pci (listed, or bound to it already)."""
    errors: list[str] = []
    passthrough = {normalize_bus_id(a) or str(a) for a in as_list(request.get("passthrough_pci_addresses"))}
    for addr in sorted(a for a in passthrough if not PCI_ADDRESS_RE.fullmatch(a)):
        errors.append("nvidia_driver_passthrough_pci_addresses: %r is not a PCI address (dddd:bb:dd.f)" % addr)
    driven: list[Mapping[str, t.Any]] = []
    excluded: list[Mapping[str, t.Any]] = []
    for gpu in gpus:
        if gpu.get("pci_bus_id") in passthrough or gpu.get("bound_driver") in _pci.PASSTHROUGH_DRIVERS:
            excluded.append(gpu)
        else:
            driven.append(gpu)
    # The excluded addresses are written into a modprobe.d comment: only canonical PCI addresses may get there.
    unaddressed = [g for g in excluded if not PCI_ADDRESS_RE.fullmatch(str(g.get("pci_bus_id") or ""))]
    if unaddressed:
        errors.append(
            "the GPU facts list %d GPU(s) meant for passthrough without a PCI address (dddd:bb:dd.f) to keep them on "
            "vfio-pci by: gather ansible_facts.nvidia_gpu with gpuhost.nvidia.nvidia_gpu_facts" % len(unaddressed)
        )
        excluded = [g for g in excluded if g not in unaddressed]
    if excluded:
        desc = ", ".join(
            "%s (bound to %s%s)"
            % (g.get("pci_bus_id"), g.get("bound_driver") or "no driver", ", listed for passthrough" if g.get("pci_bus_id") in passthrough else "")
            for g in excluded
        )
        if policy == "fail":
            errors.append(
                "GPUs meant for passthrough are on this host: %s. The nvidia driver would claim them; set "
                "nvidia_driver_passthrough_policy: exclude to keep them on vfio-pci" % desc
            )
        else:
            unbound = [g for g in excluded if g.get("bound_driver") not in _pci.PASSTHROUGH_DRIVERS]
            if unbound:
                errors.append(
                    "passthrough GPUs %s are not bound to vfio-pci yet: bind them first (gpuhost.nvidia.vfio_passthrough), "
                    "or the nvidia driver claims them at the next boot" % ", ".join(str(g.get("pci_bus_id")) for g in unbound)
                )
    return driven, excluded, errors


def _stage_flavour(
    flavour: str, arch_by_gpu: Sequence[tuple[t.Any, str | None]], source: str, src_caps: Mapping[str, t.Any], distro: str
) -> tuple[str | None, list[str]]:
    """The kernel module flavour for the driven GPUs, and whether the source offers it."""
    flavours_offered = [str(f) for f in as_list(src_caps.get("flavours"))] or ["open", "proprietary"]
    chosen, errors = choose_flavour(flavour, arch_by_gpu, flavours_offered)
    if chosen and chosen not in flavours_offered:
        errors.append(
            "the %s kernel modules are not offered by the %s source on %s%s"
            % (chosen, source, distro, (": " + str(src_caps.get("flavour_note"))) if src_caps.get("flavour_note") else "")
        )
    return chosen, errors


def secure_boot_state(value: t.Any) -> bool | None:
    """The host's Secure Boot state as the plan reads it: True or False only for a real boolean (or its text, as a
    template may hand it on), None (unknown) for anything else, so that an unreadable state is never taken for off."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower() if isinstance(value, str) else None
    return {"true": True, "false": False}.get(text or "")


def _stage_secure_boot(
    result: t.MutableMapping[str, t.Any], host: Mapping[str, t.Any], request: Mapping[str, t.Any], capabilities: Mapping[str, t.Any], source: str, distro: str
) -> tuple[str | None, list[str]]:
    """How modules load under Secure Boot: ``signed`` (the source's), ``mok`` (DKMS signing), ``off``, or None (unknown).

    The host's state is what mokutil reported; only when it could not tell (None) does the user's statement
    (``nvidia_driver_secure_boot``) stand in for it. Unknown, unstated and unsigned DKMS modules stop the plan: an
    unsigned module on a Secure Boot host does not load, and the host cannot say which it is.
    """
    probed = secure_boot_state(host.get("secure_boot"))
    stated = _tristate(request.get("secure_boot", "auto"))
    if stated not in ("auto", "true", "false"):
        return None, ["nvidia_driver_secure_boot must be auto, true or false, got %r: state whether Secure Boot is on where "
                      "the host cannot tell (auto: what mokutil reports)" % (request.get("secure_boot"),)]
    state = probed if probed is not None or stated == "auto" else stated == "true"
    result["secure_boot"].update(enabled=state, detected=probed, stated=None if stated == "auto" else stated == "true")
    if probed is not None and stated != "auto" and (stated == "true") != probed:
        result["notes"].append("nvidia_driver_secure_boot is %s, but mokutil reports Secure Boot %s: the role goes by what the "
                               "host reports" % (stated, "on" if probed else "off"))
    signed = bool(result["signed_modules"]) and not result["dkms"]
    if state:
        if signed:
            return "signed", []
        if request.get("secure_boot_mok"):
            return "mok", []
        return None, [
            "Secure Boot is %s and the %s source on %s builds unsigned DKMS modules that would not load: set "
            "nvidia_driver_secure_boot_mok: true to sign them with a Machine Owner Key (enrolment is then pending until "
            "the next boot's MokManager), or use a source with signed modules%s"
            % ("enabled" if probed else "stated on (nvidia_driver_secure_boot: true)", source, distro, _signed_hint(capabilities))
        ]
    if state is False:
        return "off", []
    # Unknown and unstated.
    if signed:
        return "signed", []
    if request.get("secure_boot_mok"):
        return "mok", []
    reason = str(host.get("secure_boot_unknown") or "mokutil could not tell")
    return None, [
        "the Secure Boot state of this host is unknown (%s), and the %s source on %s builds unsigned DKMS modules, which do "
        "not load when Secure Boot is on: set nvidia_driver_secure_boot: false if Secure Boot is off on this host (true if "
        "it is on), or nvidia_driver_secure_boot_mok: true to sign the modules either way%s"
        % (reason, source, distro, _signed_hint(capabilities))
    ]


def _stage_headers(dkms: bool, host: Mapping[str, t.Any], request: Mapping[str, t.Any]) -> tuple[list[str], list[str]]:
    """Errors (or notes, when the user accepts it) for a DKMS build without the running kernel's headers."""
    if not (dkms and host.get("headers_present") is False):
        return [], []
    message = (
        "no kernel headers for the running kernel %s (and no package providing them could be found): DKMS cannot build "
        "the module" % (host.get("kernel") or "")
    )
    if request.get("require_headers", True):
        return [message + "; install them, or set nvidia_driver_require_headers: false to install anyway"], []
    return [], [message + " (nvidia_driver_require_headers is false: installing anyway)"]


def _stage_conflicts(host: Mapping[str, t.Any], src_caps: Mapping[str, t.Any], source: str) -> list[str]:
    """Earlier installs that clash with the source: NVIDIA's .run installer, another source's packages or repository."""
    errors: list[str] = []
    runfiles = as_list(host.get("runfile_install"))
    if runfiles:
        errors.append(
            "a driver installed with NVIDIA's .run installer is present (%s): remove it with nvidia-uninstall before "
            "installing packages" % ", ".join(str(p) for p in runfiles)
        )
    foreign_pkgs = set(str(p) for p in as_list(src_caps.get("foreign_packages")))
    installed = set(str(p) for p in as_list(host.get("installed_packages")))
    clash = sorted(foreign_pkgs & installed)
    if clash:
        errors.append(
            "packages from another NVIDIA driver source are installed (%s): remove them before installing from the %s source"
            % (", ".join(clash), source)
        )
    foreign_repos = as_list(host.get("foreign_repo_files"))
    if foreign_repos:
        errors.append(
            "another NVIDIA driver repository is configured (%s): remove it, or choose nvidia_driver_source: %s"
            % (", ".join(str(p) for p in foreign_repos), "distro" if source == "nvidia" else "nvidia")
        )
    return errors


def _stage_fabric_manager(
    request: Mapping[str, t.Any], facts: Mapping[str, t.Any], src_caps: Mapping[str, t.Any], source: str, distro: str,
    branch: int | None, archs: Sequence[str],
) -> tuple[dict[str, bool], list[str]]:
    """Whether Fabric Manager (NVSwitch hosts, or asked for) and NVLSM (NVLink 5 from branch 570) are installed."""
    errors: list[str] = []
    nvswitches = int(facts.get("nvswitch_count") or 0)
    fm_req = _tristate(request.get("fabric_manager"))
    fabric_manager = nvswitches > 0 if fm_req == "auto" else fm_req == "true"
    if fabric_manager and not src_caps.get("fabric_manager"):
        errors.append(
            "this host has %d NVSwitch(es) and needs NVIDIA Fabric Manager, which the %s source on %s does not ship: use "
            "nvidia_driver_source: nvidia" % (nvswitches, source, distro)
            if nvswitches
            else "nvidia_driver_fabric_manager is true but the %s source on %s does not ship Fabric Manager" % (source, distro)
        )
    nvlsm_req = _tristate(request.get("nvlsm"))
    if nvlsm_req == "auto":
        nvlsm = bool(fabric_manager and branch is not None and branch >= NVLSM_FIRST_BRANCH and any(a in NVLSM_ARCHITECTURES for a in archs))
    else:
        nvlsm = nvlsm_req == "true"
    return {"fabric_manager": fabric_manager, "nvlsm": nvlsm}, errors


def _stage_reboot(request: Mapping[str, t.Any], host: Mapping[str, t.Any]) -> list[str]:
    """The reboot policy, and a reboot the run could not survive (a local connection)."""
    reboot = str(request.get("reboot") or "never")
    if reboot not in ("never", "if_needed", "always"):
        return ["nvidia_driver_reboot must be never, if_needed or always, got %r" % reboot]
    if reboot != "never" and host.get("connection") == "local":
        return [
            "nvidia_driver_reboot is %s but this host is managed over a local connection: rebooting would kill this run. "
            "Use nvidia_driver_reboot: never and reboot yourself" % reboot
        ]
    return []


def _signed_hint(capabilities: Mapping[str, t.Any]) -> str:
    signed = [name for name, caps in (capabilities.get("sources") or {}).items() if (caps or {}).get("signed_modules") and (caps or {}).get("available")]
    return " (here: nvidia_driver_source: %s)" % signed[0] if signed else ""


def choose_flavour(requested: str, arch_by_gpu: Sequence[tuple[t.Any, str | None]], offered: Sequence[str]) -> tuple[str | None, list[str]]:
    """Open or proprietary kernel modules for these GPUs; errors for a combination that cannot work."""
    errors: list[str] = []
    no_open = [(bus, a) for bus, a in arch_by_gpu if a and _catalog.open_module_supported(a) is False]
    need_open = [(bus, a) for bus, a in arch_by_gpu if a and _catalog.open_module_required(a)]
    if requested == "auto":
        if need_open and no_open:
            errors.append(
                "no kernel module flavour drives all GPUs: %s need the open modules, %s are not supported by them"
                % (_describe(need_open), _describe(no_open))
            )
            return None, errors
        if no_open:
            return "proprietary", errors
        if need_open or arch_by_gpu:
            return "open", errors
        # Forced host without GPU facts: NVIDIA's default since the 560 branch.
        return ("open" if "open" in offered else (offered[0] if offered else "open")), errors
    if requested == "open" and no_open:
        errors.append(
            "the open kernel modules do not support %s: use nvidia_driver_flavour: proprietary (or auto)" % _describe(no_open)
        )
    if requested == "proprietary" and need_open:
        errors.append(
            "%s require the open kernel modules; the proprietary modules cannot drive them: use nvidia_driver_flavour: open (or auto)"
            % _describe(need_open)
        )
    return (requested if requested in ("open", "proprietary") else None), errors


def _describe(entries: Sequence[tuple[t.Any, str | None]]) -> str:
    by_arch: dict[str, list[str]] = {}
    for bus, arch in entries:
        by_arch.setdefault(str(arch), []).append(str(bus))
    return "; ".join("%s GPUs (%s)" % (arch, ", ".join(buses)) for arch, buses in by_arch.items())


def check_branch_for_gpus(
    branch: int,
    arch_by_gpu: Sequence[tuple[t.Any, str | None]],
    default_of: Mapping[str, t.Any] | None = None,
    source: str | None = None,
    distro: str = "",
) -> list[str]:
    """Errors for GPUs the branch cannot drive. ``default_of``: the source's capabilities when the branch is its default."""
    errors = []
    too_new = [(bus, a) for bus, a in arch_by_gpu if a and (_catalog.last_supported_branch(a) or 10**6) < branch]
    too_old = [(bus, a) for bus, a in arch_by_gpu if a and FIRST_BRANCH.get(a, 0) > branch]
    for bus, arch in too_new:
        last = _catalog.last_supported_branch(arch)
        if default_of is not None:
            hint = "; branch %d is the default of the %s source on %s%s: set nvidia_driver_branch: %d where a source offers it" % (
                branch, source, distro, (" (" + str(default_of.get("default_branch_note")) + ")") if default_of.get("default_branch_note") else "", last)
        else:
            hint = "; set nvidia_driver_branch: %d" % last
        errors.append("driver branch %d no longer supports %s GPU %s: its last branch is %d%s" % (branch, arch, bus, last, hint))
    for bus, arch in too_old:
        errors.append("driver branch %d predates %s GPU %s: it needs branch %d or newer" % (branch, arch, bus, FIRST_BRANCH[arch]))
    return errors


def check_cuda_for_gpus(cuda: str, arch_by_gpu: Sequence[tuple[t.Any, str | None]]) -> list[str]:
    """Errors for GPUs whose last CUDA toolkit is older than the requested one (Maxwell/Pascal/Volta end at 12.x)."""
    parts = version_tuple(cuda)
    if not parts:
        return []
    errors = []
    for bus, arch in arch_by_gpu:
        last = _catalog.last_cuda_major(arch) if arch else None
        if last is not None and parts[0] > last:
            errors.append("%s GPU %s cannot run CUDA %s: CUDA %s.x is the last toolkit for %s" % (arch, bus, cuda, last, arch))
    return errors


def check_cuda(driver: t.Any, cuda: str, minor_compat: bool = False) -> list[str]:
    """Errors when a driver version or branch cannot run CUDA ``cuda`` (empty list when it can)."""
    if driver in (None, ""):
        return ["nvidia_driver_cuda_version %s is set but no branch or version is chosen to check it against" % cuda]
    driver_text = str(driver)
    supported = _catalog.cuda_supported(driver_text, cuda, minor_compat)
    if supported is None:
        if not version_tuple(cuda) or not version_tuple(driver_text):
            return ["cannot tell whether driver %s runs CUDA %s: the CUDA version is unknown to the catalog" % (driver_text, cuda)]
        return [
            "cannot tell whether driver %s runs CUDA %s: no public source the catalog records says so (docs/sources.md); "
            "choose a branch the catalog knows to run it, or leave nvidia_driver_cuda_version empty" % (driver_text, cuda)
        ]
    if supported:
        return []
    branch = parse_branch(driver_text)
    branch_max = _catalog.max_cuda_for_branch(branch) if branch else None
    minimum = _catalog.min_driver_for_cuda(cuda)
    what = "driver %s" % driver_text if "." in driver_text else "driver branch %s" % driver_text
    needs = ""
    if minimum:
        needs = "; CUDA %s needs driver %s or newer (branch %s+)" % (cuda, minimum, parse_branch(minimum))
    return ["%s cannot run CUDA %s: it supports CUDA up to %s%s" % (what, cuda, branch_max or "an older release", needs)]


def _upstream(version: t.Any) -> str:
    """Upstream part of a package version: ``3:580.65.06-1.el9`` -> ``580.65.06``, ``535.261.03-1~deb12u1`` -> ``535.261.03``."""
    return re.sub(r"^\d+:", "", str(version or "").strip()).split("-")[0].split("~")[0]


def check_candidate(plan_result: Mapping[str, t.Any], candidates: t.Any, request: Mapping[str, t.Any], source_label: str = "") -> list[str]:
    """Errors when no version the package manager offers fits the plan (branch, exact version, CUDA); empty when one does.

    ``candidates`` is one version or a list of them, as the package manager prints them (epoch and revision included).
    """
    where = " from %s" % source_label if source_label else ""
    offered = sorted({u for u in (_upstream(c) for c in as_list(candidates)) if _VERSION_RE.fullmatch(u)}, key=version_tuple, reverse=True)
    if not offered:
        return ["no installable NVIDIA driver package%s: is the repository configured and enabled?" % where]
    fitting = offered
    branch = plan_result.get("branch")
    if branch is not None:
        fitting = [v for v in fitting if parse_branch(v) == int(branch)]
        if not fitting:
            return ["driver branch %s was requested but the package manager offers only %s%s" % (branch, ", ".join(offered), where)]
    version = plan_result.get("version")
    if version:
        fitting = [v for v in fitting if version_tuple(v) == version_tuple(version)]
        if not fitting:
            return ["driver %s was requested but the package manager offers only %s%s" % (version, ", ".join(offered), where)]
    cuda = str(request.get("cuda_version") or "").strip()
    if cuda:
        return check_cuda(fitting[0], cuda, bool(request.get("cuda_minor_version_compatibility")))
    return []


_PLACEHOLDER_RE = re.compile(r"\{(branch|pin|kernel_flavour)\}")
PACKAGE_KEYS = ("module", "userspace", "desktop", "fabric_manager", "nscq", "nvlsm", "settings", "pin", "pinning")


def _fill(value: t.Any, fills: Mapping[str, str]) -> t.Any:
    if isinstance(value, Mapping):
        return {k: _fill(v, fills) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_fill(v, fills) for v in value]
    if isinstance(value, str):
        return _PLACEHOLDER_RE.sub(lambda m: fills.get(m.group(1)) or m.group(0), value)
    return value


def _names(value: t.Any) -> list[str]:
    """Package names from a name, a list (nested lists flattened: YAML anchors) or a mapping of them."""
    if isinstance(value, Mapping):
        return [n for v in value.values() for n in _names(v)]
    if isinstance(value, (list, tuple)):
        return [n for v in value for n in _names(v)]
    return [str(value).strip()] if value is not None and str(value).strip() else []


def resolve_packages(plan_result: Mapping[str, t.Any], table: Mapping[str, t.Any] | None, host: Mapping[str, t.Any] | None = None) -> dict[str, t.Any]:
    """The package names of one source for the plan's branch and flavour.

    ``table`` is one source's entry of the role's ``__nvidia_driver_packages``: ``module``/``desktop`` per flavour,
    ``userspace``, ``fabric_manager``, ``nscq`` (libnvidia-nscq, moved and held with the driver where installed),
    ``nvlsm``, ``settings`` (the userland the gpu_settings role installs), ``pin``
    (more driver packages the installed ones depend on, held with them), ``pinning`` (NVIDIA's pinning package, apt
    only) and ``by_branch`` ({first branch: overrides}), whose entries at or below the plan's branch apply in order.
    Names may hold ``{branch}``, ``{pin}`` (the exact version when one is asked for, else the branch) and
    ``{kernel_flavour}``.

    Returns the same keys, resolved, plus ``hold``: every exact name the branch pin must cover (both flavours, the
    desktop set and the settings userland too, so the pin does not change when a toggle does), sorted. NVLSM is not
    held: its versions do not follow the driver's, and dnf versionlock would exclude every one of them. Nor are the
    module packages of a table with ``module_versioned_by_kernel`` true (Ubuntu's signed linux-modules-nvidia-*, versioned
    6.8.0-136.136+1): a pin on the driver's version never matches them, and their names already carry the branch.
    """
    table = dict(table or {})
    branch = plan_result.get("branch")
    overrides = table.pop("by_branch", None) or {}
    if branch is not None:
        for first in sorted(overrides, key=int):
            if int(branch) >= int(first):
                table.update(overrides[first] or {})
    fills = {
        "branch": str(branch) if branch is not None else "",
        "pin": str(plan_result.get("version") or (branch if branch is not None else "")),
        "kernel_flavour": str((host or {}).get("kernel_flavour") or ""),
    }
    resolved: dict[str, t.Any] = {}
    for key in PACKAGE_KEYS:
        value = _fill(table.get(key), fills)
        if key in ("module", "desktop"):
            value = {f: _names((value or {}).get(f)) for f in ("open", "proprietary")}
        elif key == "pinning":
            value = str(value or "")
        else:
            value = _names(value)
        resolved[key] = value
    held_modules = [] if table.get("module_versioned_by_kernel") else _names(resolved["module"])
    hold = set(held_modules + _names(resolved["desktop"]))
    for key in ("userspace", "fabric_manager", "nscq", "settings", "pin"):
        hold.update(resolved[key])
    resolved["hold"] = sorted(n for n in hold if n)
    resolved["errors"] = sorted(
        {"package name %r needs %s, which the plan does not set" % (n, m.group(0))
         for n in resolved["hold"] + [resolved["pinning"]] for m in [_PLACEHOLDER_RE.search(n)] if m}
    )
    return resolved


# NVIDIA's driver rpms carry epoch 3 (NVIDIA's version-locking guide; dnf5-versionlock(8) locks "*nvidia*" to 3:570).
NVIDIA_RPM_EPOCH = 3


# An rpm package name as the versionlock entries hold it: one literal name, nothing that is a glob, a space or a line.
_RPM_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*")


def _lock_parts(names: t.Any, plan_result: Mapping[str, t.Any]) -> tuple[list[str], str | None, int | None]:
    """The names, version and branch of a versionlock entry, each checked: they become lines of a file dnf reads, and a
    newline or a glob in one would add entries or lock other packages. Raises ValueError naming the value."""
    held = sorted(set(_names(names)))
    bad = [name for name in held if not _RPM_NAME_RE.fullmatch(name)]
    if bad:
        raise ValueError("versionlock: %s %s not a package name (letters, digits and _ . + - only)"
                         % (", ".join(repr(name) for name in bad), "is" if len(bad) == 1 else "are"))
    version = plan_result.get("version")
    if version:
        if not isinstance(version, str) or not _VERSION_RE.fullmatch(version):
            raise ValueError("versionlock: the plan's version %r is not a driver version such as 580.65.06" % (version,))
        return held, version, None
    branch = plan_result.get("branch")
    if isinstance(branch, bool) or not (isinstance(branch, int) or (isinstance(branch, str) and re.fullmatch(r"[0-9]{3}", branch))):
        raise ValueError("versionlock: the plan's branch %r is not a driver branch such as 580" % (branch,))
    return held, None, int(branch)


def versionlock_dnf4(names: t.Any, plan_result: Mapping[str, t.Any]) -> list[str]:
    """Lines of the dnf4 versionlock plugin's lock list holding ``names`` at the plan's branch or exact version.

    ``name-580.*`` (the NEV form with a glob version) holds every 580 release; ``name-580.65.06-*`` one version. Lines
    are written as they are (``dnf versionlock add --raw``), so a later release of the branch is not locked out.
    Raises ValueError for a name, version or branch that would change the lines' structure.
    """
    held, version, branch = _lock_parts(names, plan_result)
    glob = ("%s-*" % version) if version else ("%d.*" % t.cast(int, branch))
    return ["%s-%s" % (name, glob) for name in held]


def versionlock_dnf5(names: t.Any, plan_result: Mapping[str, t.Any], epoch: int = NVIDIA_RPM_EPOCH) -> list[dict[str, t.Any]]:
    """Entries of dnf5's /etc/dnf/versionlock.toml holding ``names`` at the branch (an evr range) or exact version."""
    held, version, branch = _lock_parts(names, plan_result)
    if version:
        # [3:V, 3:V.0): every release of exactly this version (rpm version comparison: V < V.0 < the next V).
        low, high = "%d:%s" % (epoch, version), "%d:%s.0" % (epoch, version)
    else:
        low, high = "%d:%d" % (epoch, t.cast(int, branch)), "%d:%d" % (epoch, t.cast(int, branch) + 1)
    return [
        {"name": name, "conditions": [{"key": "evr", "comparator": ">=", "value": low}, {"key": "evr", "comparator": "<", "value": high}]}
        for name in held
    ]


def _offered_versions(candidates: t.Any) -> dict[str, str]:
    """Upstream version -> the package version the package manager printed (the highest one, revision included)."""
    raw: dict[str, str] = {}
    for candidate in as_list(candidates):
        text = str(candidate or "").strip()
        upstream = _upstream(text)
        if _VERSION_RE.fullmatch(upstream) and (upstream not in raw or _digits(text) > _digits(raw[upstream])):
            raw[upstream] = text
    return raw


def _digits(text: str) -> tuple[int, ...]:
    return tuple(int(d) for d in re.findall(r"[0-9]+", text))


def plan_move(plan_result: Mapping[str, t.Any], installed: t.Any, candidates: t.Any) -> dict[str, t.Any]:
    """What happens to the installed driver: kept, installed, or moved up or down to another version.

    ``installed`` is the driver package's installed version as the package manager prints it (None or "" when not
    installed); ``candidates`` the versions the repositories offer (an empty list when they cannot be asked yet, in check
    mode before the repository exists). A driver on the plan's branch stays where it is unless an exact version is asked
    for (later releases of the branch come with the package manager's own upgrades, the pin lets them); a driver on
    another branch, or not at the asked version, moves to the asked version, else to the newest release of the branch
    that the repositories offer.

    Returns ``action`` (``install``, ``keep``, ``upgrade``, ``downgrade``), ``moves`` (an installed driver changes
    version), ``from`` and ``to`` (upstream versions; ``to`` is None when the repositories could not be asked and no
    exact version was asked for), ``to_package`` (the package version to ask the package manager for, revision included
    where the repositories said it), ``summary`` ("570.172.08 -> 580.65.06") and ``reboot_reason`` (None unless it moves).
    """
    branch = plan_result.get("branch")
    version = plan_result.get("version") or None
    current = _upstream(installed) if installed not in (None, "") else None
    current = current if current and _VERSION_RE.fullmatch(current) else None
    offered = _offered_versions(candidates)
    fitting = [v for v in offered if (branch is None or parse_branch(v) == int(branch)) and (version is None or version_tuple(v) == version_tuple(version))]
    newest = max(fitting, key=version_tuple) if fitting else None
    target_name = "branch %s" % branch if branch is not None else "the repository's version"
    if current is None:
        target = version or newest
        action = "install"
    elif version is not None and version_tuple(current) != version_tuple(version):
        target = version
        action = "upgrade" if version_tuple(version) > version_tuple(current) else "downgrade"
    elif version is None and branch is not None and parse_branch(current) != int(branch):
        target = newest
        action = "upgrade" if int(branch) > (parse_branch(current) or 0) else "downgrade"
    else:
        target = current
        action = "keep"
    moves = action in ("upgrade", "downgrade")
    if action == "keep":
        summary = "%s (kept)" % current
    elif action == "install":
        summary = "none -> %s" % (target or target_name)
    else:
        summary = "%s -> %s" % (current, target or target_name)
    return {
        "action": action,
        "moves": moves,
        "from": current,
        "to": target,
        "to_package": offered.get(target) if target else None,
        "summary": summary,
        "reboot_reason": (
            "driver %s (%s): the new kernel module loads at the next boot" % (summary, action) if moves else None
        ),
    }


def package_specs(names: t.Any, version: t.Any, pkg_mgr: str, exact: t.Any = None) -> list[str]:
    """Package specs that ask the package manager for ``names`` at one driver version.

    apt: ``name=<exact>`` when the repositories gave the full package version (revision included), else ``name=<v>-*``
    (the apt module's version wildcard); dnf: ``name-<v>``; pacman has no version selection (a repository carries one
    version) and gets the names. No version: the names as they are.
    """
    out = sorted(set(_names(names)))
    if not version:
        return out
    if pkg_mgr == "apt":
        suffix = ("=%s" % exact) if exact else ("=%s-*" % version)
        return [n + suffix for n in out]
    if pkg_mgr == "dnf":
        return ["%s-%s" % (n, version) for n in out]
    return out


def plan_lockstep(
    plan_result: Mapping[str, t.Any], move: Mapping[str, t.Any], resolved: Mapping[str, t.Any], installed: t.Any, pkg_mgr: str
) -> dict[str, t.Any]:
    """Fabric Manager and NSCQ (libnvidia-nscq), which must run at the driver's exact version, and NVLSM.

    Fabric Manager is wanted when the plan says so; NSCQ only where some libnvidia-nscq package is installed (DCGM and
    nvidia-smi read NVSwitches through it). Both are asked for at the driver's version (``move.to``) and held with the
    driver's pin. An installed package of another branch is removed: names that carry the branch (nvidia-fabricmanager-570,
    libnvidia-nscq-570) and EL's renamed Fabric Manager (nvidia-fabric-manager to 575, nvidia-fabricmanager from 580).
    NVLSM's versions do not follow the driver's: it is installed (and moves with the package manager's upgrades), never
    pinned to the driver's version.

    Returns ``install`` (specs), ``remove`` (names), ``hold`` (names for the pin) and ``names`` (the wanted names).
    """
    installed_names = set(str(n) for n in as_list(installed))
    wanted: list[str] = []
    if plan_result.get("fabric_manager"):
        wanted.extend(_names(resolved.get("fabric_manager")))
    nscq = _names(resolved.get("nscq"))
    if nscq and any(n.startswith("libnvidia-nscq") for n in installed_names):
        wanted.extend(nscq)
    wanted = sorted(set(wanted))
    families = {_family(w) for w in wanted}
    stale = sorted(n for n in installed_names if n not in wanted and _family(n) in families)
    version = move.get("to")
    install = package_specs(wanted, version, pkg_mgr)
    if plan_result.get("nvlsm"):
        install.extend(_names(resolved.get("nvlsm")))
    return {"install": install, "remove": stale, "hold": wanted, "names": wanted + (_names(resolved.get("nvlsm")) if plan_result.get("nvlsm") else [])}


def _family(name: str) -> str:
    """One key for the names a package takes across branches: ``nvidia-fabricmanager-580``, ``nvidia-fabricmanager``
    (590 on) and EL's ``nvidia-fabric-manager`` (to 575) are all ``nvidia fabric manager``."""
    return re.sub(r"-?[0-9]{3}$", "", name).replace("-", "")


# A hold at the driver's exact version where apt, dnf or pacman would otherwise move a package on its own: a
# public bug report had Fabric Manager 590 beside driver 580 because only the branch held it.
LOCKSTEP_PIN_PRIORITY = 1001
LOCKSTEP_OTHER_PRIORITY = -1


def lockstep_hold(names: t.Any, version: t.Any) -> dict[str, t.Any]:
    """The exact-version hold of Fabric Manager and NSCQ (``plan_lockstep``'s ``hold``) at the driver's version.

    ``version`` is the driver's upstream version (the move's ``to``); None or "" when it is not known yet (check mode
    before the repository exists), and then nothing is held (``held`` false).

    Returns ``version``, ``held``, ``names`` and, per package manager:

    - ``apt``: two apt preferences stanzas by exact name, for a file that apt reads before the driver's branch pin
      (apt takes the first stanza that matches a version, file by file in name order): the driver's version
      (``Pin: version 580.105.08-*``: any packaging revision, as Fabric Manager's ``-1`` sits beside the driver's
      ``-1ubuntu1``) at 1001, then every other version at -1, so neither ``apt upgrade`` nor an install without a
      version moves them away from the driver (an explicit ``name=version`` still can: apt's own rule).
    - ``dnf4``: lock-list lines ``name-580.65.06-*`` (the versionlock plugin); the names must not also be in the branch
      lock, whose ``name-580.*`` would let every release of the branch through.
    - ``dnf5``: versionlock.toml entries ``[V, V.0)``, once with NVIDIA's epoch 3 and once with none (one entry per
      epoch: dnf5 unlocks a version that any entry of the name matches, and public sources show Fabric Manager rpms
      without an epoch as well as the driver's with 3).
    """
    held_names = sorted(set(_names(names)))
    bad = [name for name in held_names if not _RPM_NAME_RE.fullmatch(name)]
    if bad:
        # The names become apt preferences stanzas and versionlock lines: a newline would add a stanza or an entry.
        raise ValueError("lockstep_hold: %s: not package names (letters, digits and _ . + - only)" % ", ".join(repr(name) for name in bad))
    text = str(version or "").strip()
    if text and not _VERSION_RE.fullmatch(text):
        raise ValueError("lockstep_hold: %r is not a driver version such as 580.65.06" % (text,))
    held = bool(text and held_names)
    out: dict[str, t.Any] = {"version": text or None, "held": held, "names": held_names, "apt": [], "dnf4": [], "dnf5": []}
    if not held:
        return out
    out["apt"] = [
        {"explanation": "at the driver's version %s" % text, "packages": held_names, "version": "%s-*" % text,
         "priority": LOCKSTEP_PIN_PRIORITY},
        {"explanation": "no other version of them moves without the driver", "packages": held_names, "version": "*",
         "priority": LOCKSTEP_OTHER_PRIORITY},
    ]
    out["dnf4"] = versionlock_dnf4(held_names, {"version": text})
    out["dnf5"] = [entry for epoch in (NVIDIA_RPM_EPOCH, 0) for entry in _versionlock_dnf5_exact(held_names, text, epoch)]
    return out


def _versionlock_dnf5_exact(names: list[str], version: str, epoch: int) -> list[dict[str, t.Any]]:
    low, high = ("%d:%s" % (epoch, version), "%d:%s.0" % (epoch, version))
    return [
        {"name": name, "conditions": [{"key": "evr", "comparator": ">=", "value": low}, {"key": "evr", "comparator": "<", "value": high}]}
        for name in names
    ]


# dnf's package lines: "name.arch  [epoch:]version-release  repository" (dnf4 and dnf5 `list`, the role's dnf4
# repoquery format "%{name}.%{arch} %{epoch}:%{version}-%{release}"). dnf4's `list` wraps a line whose name does not fit
# its column: the name alone, then the version and repository on the next line.
_DNF_SECTION_RE = re.compile(r"(Installed|Available|Extra|Obsoleting|Recently added)( packages| upgrades)?\s*$", re.IGNORECASE)


def dnf_versions(output: t.Any, name: str) -> list[str]:
    """The versions of ``name`` in dnf4 or dnf5 output, as dnf printed them (epoch and release included), in order.

    Reads ``dnf list --showduplicates`` of dnf4 ("Available Packages", a repository ``@repo`` for installed ones, long
    names wrapped onto two lines) and of dnf5 ("Available packages", no ``@``; Fedora 41 and later), and the lines of
    ``dnf repoquery --qf "%{name}.%{arch} %{epoch}:%{version}-%{release}"``. Section headings, source packages
    (``.src``) and other names are skipped. dnf5's repoquery prints no newline after a format (docs/sources.md), so the
    role asks dnf5 with ``list`` and keeps repoquery for dnf4.
    """
    text = str(output or "")
    prefix = str(name) + "."
    tokens: list[list[str]] = []
    pending: list[str] = []
    for line in text.splitlines():
        if not line.strip() or _DNF_SECTION_RE.match(line.strip()):
            pending = []
            continue
        fields = line.split()
        if pending:
            fields = pending + fields
            pending = []
        if len(fields) == 1 and fields[0].startswith(prefix):
            pending = fields
            continue
        tokens.append(fields)
    versions: list[str] = []
    for fields in tokens:
        if len(fields) < 2 or not fields[0].startswith(prefix):
            continue
        arch = fields[0][len(prefix):]
        if not arch or "." in arch or arch in ("src", "nosrc"):
            continue
        if fields[1] not in versions:
            versions.append(fields[1])
    return versions


def plan_packages(plan_result: Mapping[str, t.Any], tables: Mapping[str, t.Any], host: Mapping[str, t.Any], role: Mapping[str, t.Any]) -> dict[str, t.Any]:
    """The plan's packages: ``resolve_packages`` of the plan's source, with what the role installs and holds.

    ``tables``: the role's ``__nvidia_driver_packages`` (one table per source). ``host``: ``kernel_flavour`` and
    ``installed_packages`` (names). ``role``: ``pkg_mgr``, ``desktop``, ``extra`` (the user's extra packages), ``pin``,
    ``dnf_modules`` (the module stream holds the branch), ``other_module`` (Arch: the module package of the other kernel
    kind), ``candidate_from_userspace`` (the sources whose module
    packages carry the kernel's version, so the driver's version is read from the first userspace package) and
    ``headers`` (``plan_headers``'s settings; the host's ``kernel`` and ``kernels_installed`` come with ``host``).

    Adds ``install`` (module, userspace, the desktop set when asked for, the extra packages), ``candidate`` (the package
    whose version is the driver's), ``other_flavour`` and ``other_module_installed`` (the installed module packages
    the plan replaces), ``lockstep_hold`` (Fabric Manager and NSCQ, held at the driver's exact version in a
    block of their own) and ``versionlock`` (dnf: the branch lock's ``dnf4`` lines and ``dnf5`` entries, without the
    lockstep names; empty where the module stream holds the branch alone or nothing is pinned) with
    ``versionlock_wanted`` (whether the role holds the branch with versionlock, where dnf is the package manager),
    ``lockstep_pinned`` (whether the lockstep names are held at the driver's version),
    ``pin_glob`` (the branch or exact version as the package manager's version glob), ``headers`` (``plan_headers``)
    and ``apt_query`` (apt's one question to the repositories: ``repository``, the candidate package and NVIDIA's
    pinning package when pinning, which only a configured repository can answer; ``headers``, the headers packages that
    follow kernel updates). The versionlock is known here, before the transaction: dnf must see the branch's lock before
    it is asked what it offers.
    """
    source = plan_result.get("source")
    if source not in tables:
        raise ValueError("the package tables have no source %r (they have %s)" % (source, ", ".join(map(str, tables)) or "none"))
    resolved = resolve_packages(plan_result, tables[source], {"kernel_flavour": host.get("kernel_flavour") or ""})
    flavour = str(plan_result.get("flavour") or "")
    module = resolved["module"].get(flavour, [])
    resolved["install"] = module + resolved["userspace"] + (resolved["desktop"].get(flavour, []) if role.get("desktop") else []) + _names(role.get("extra"))
    from_userspace = source in [str(s) for s in as_list(role.get("candidate_from_userspace"))]
    candidates = resolved["userspace"] if from_userspace else module
    resolved["candidate"] = candidates[0] if candidates else ""
    # The other flavour's module packages (and Arch's module built for the other kernel kind) that are installed: removed.
    installed_names = [str(n) for n in as_list(host.get("installed_packages"))]
    other = "proprietary" if flavour == "open" else "open"
    resolved["other_flavour"] = other
    resolved["other_module_installed"] = [n for n in dict.fromkeys(resolved["module"].get(other, []) + _names(role.get("other_module")))
                                          if n not in module and n in installed_names]
    pkg_mgr = str(role.get("pkg_mgr") or "")
    resolved["lockstep_hold"] = plan_lockstep(plan_result, {}, resolved, host.get("installed_packages"), pkg_mgr)["hold"]
    resolved["versionlock"] = {"dnf4": [], "dnf5": []}
    wanted = bool(role.get("pin")) and (not role.get("dnf_modules") or bool(plan_result.get("version")))
    if pkg_mgr == "dnf" and wanted and not resolved["errors"]:
        names = [n for n in resolved["hold"] if n not in resolved["lockstep_hold"]]
        resolved["versionlock"] = {"dnf4": versionlock_dnf4(names, plan_result), "dnf5": versionlock_dnf5(names, plan_result)}
    resolved["versionlock_wanted"] = wanted
    # Fabric Manager and NSCQ held at the driver's exact version (the transaction's lockstep.wanted, known here: the
    # names do not depend on the move): dnf's versionlock plugin and file are needed for that hold too.
    resolved["lockstep_pinned"] = bool(role.get("pin")) and bool(resolved["lockstep_hold"])
    version = plan_result.get("version")
    resolved["pin_glob"] = ("%s-*" % version) if version else ("%s.*" % plan_result.get("branch"))
    resolved["headers"] = plan_headers(plan_result, role.get("headers") or {}, pkg_mgr, host)
    pinning = str(resolved.get("pinning") or "")
    resolved["apt_query"] = {"repository": [resolved["candidate"]] + ([pinning] if role.get("pin") and pinning else []),
                             "headers": resolved["headers"]["follow"]}
    return resolved


def plan_headers(plan_result: Mapping[str, t.Any], settings: Mapping[str, t.Any], pkg_mgr: str, host: Mapping[str, t.Any]) -> dict[str, list[str]]:
    """The kernel headers the install adds, where DKMS builds the module and the role installs headers.

    ``settings``: ``install`` (nvidia_driver_install_headers), ``running`` (the running kernel's headers packages),
    ``follow`` (apt: the flavour's headers packages that follow kernel updates; a bare ``linux-headers-``, a kernel
    flavour that is not known, is none), ``installed`` and ``offered`` (the host read: the running kernel's headers are
    there; a repository offers their package). ``host``: ``kernel`` (the running kernel's release) and
    ``kernels_installed`` (the GPU facts' ``kernels.installed``).

    Returns ``running`` (installed when missing and offered), ``follow`` and ``kernel_devel`` (dnf: kernel-devel of
    every other installed kernel, which DKMS also builds for).
    """
    wanted = bool(settings.get("install")) and bool(plan_result.get("dkms"))
    follow = [n for n in _names(settings.get("follow")) if n != "linux-headers-"]
    running = _names(settings.get("running")) if wanted and not settings.get("installed") and settings.get("offered") else []
    kernel = str(host.get("kernel") or "")
    releases = [str(entry.get("release")) for entry in as_list(host.get("kernels_installed")) if isinstance(entry, Mapping)]
    kernel_devel = ["kernel-devel-" + r for r in releases if r != kernel] if wanted and pkg_mgr == "dnf" else []
    return {"running": running, "follow": follow if wanted else [], "kernel_devel": kernel_devel}


# The transaction: the plan met with the host's answers (the versions the repositories offer, the installed packages).
_PACMAN_VERSION_RE = re.compile(r"^Version\s*:\s*")


def offered_rows(offered: t.Any, asked: t.Any = None) -> list[list[str]]:
    """apt's answer as ``[name, version, source]`` rows: ``apt-cache madison`` output (text, split on ``|`` and
    stripped), or rows the host read already gave, of which only those of the names ``asked`` count."""
    if isinstance(offered, str) or offered is None:
        return [[field.strip() for field in line.split("|")] for line in str(offered or "").splitlines() if line.strip()]
    wanted = set(str(n) for n in as_list(asked))
    return [[str(f) for f in row] for row in as_list(offered) if isinstance(row, Sequence) and not isinstance(row, str)
            and len(row) >= 2 and str(row[0]) in wanted]


def offered_versions(pkg_mgr: str, offered: t.Any, name: str) -> list[str]:
    """The versions the repositories offer of ``name``, as the package manager printed them: apt's rows
    (``offered_rows``), dnf 4's repoquery or dnf 5's list output (``dnf_versions``), ``pacman -Si``'s Version lines."""
    if pkg_mgr == "apt":
        return [row[1] for row in offered if row[0] == name]
    if pkg_mgr == "dnf":
        return dnf_versions(offered, name)
    return [_PACMAN_VERSION_RE.sub("", line) for line in str(offered or "").splitlines() if _PACMAN_VERSION_RE.match(line)]


def installed_version(installed: Mapping[str, t.Any], name: str) -> str:
    """The installed version of ``name`` in package_facts' form (its first entry), "" when it is not installed."""
    entries = as_list(installed.get(name))
    first = entries[0] if entries and isinstance(entries[0], Mapping) else {}
    return str(first.get("version") or "")


def _lockstep_in_place(lockstep: Mapping[str, t.Any], move: Mapping[str, t.Any], installed: Mapping[str, t.Any]) -> bool:
    """Whether Fabric Manager and NSCQ are all installed at the driver's version, nothing of another branch to replace:
    then their install would change nothing and is skipped."""
    if lockstep["remove"] or move.get("to") is None:
        return False
    if any(name not in installed for name in lockstep["names"]):
        return False
    upstream = [re.sub(r"-.*$", "", re.sub(r"^[0-9]+:", "", installed_version(installed, name))) for name in lockstep["hold"]]
    return all(version == move["to"] for version in upstream)


def transaction(plan_result: Mapping[str, t.Any], resolved: Mapping[str, t.Any], host: Mapping[str, t.Any], role: Mapping[str, t.Any]) -> dict[str, t.Any]:
    """What the run does to the driver's packages, from the plan and the host's answers, in one step.

    ``resolved``: the plan's package names (``resolve_packages``). ``host``: ``installed`` (the installed packages in
    package_facts' form), ``offered`` (the repositories' answer: apt's rows or ``apt-cache madison`` output, dnf's
    listing, ``pacman -Si`` output; empty when it was not asked), ``asked`` (apt: the names the answer is for),
    ``repo_pending`` (check mode before the repository exists), ``hold_pending`` (dnf: a stream or lock that check mode
    did not write) and ``check_mode``. ``role``: ``pkg_mgr``, ``candidate_package`` (whose installed version decides the
    move; apt also reads its offered versions), ``install`` (the names the role installs), ``pin``, ``dnf_modules`` (the
    module stream holds the branch) and ``request`` (its CUDA requirement).

    Returns ``offered_versions``, ``offered_names``, ``candidate_errors`` (empty while the repository is pending),
    ``move`` (``plan_move``), ``hold_pending``, ``predict_only`` (check mode cannot ask the package manager for the
    install: report it instead), ``downgrade``, ``install_specs`` (at the move's version when the driver moves or an exact
    version is asked for, else the names), ``takes_requests`` (the install is at the branch's candidate, so the roles
    after this one may have theirs installed with it), ``use_pinning_package`` and ``stale_pinning_packages`` (apt),
    ``lockstep`` (``plan_lockstep``, with ``wanted``, ``in_place`` and ``held``: ``lockstep_hold`` at the move's version)
    and ``pin_method`` (how the branch is held, for the report).
    """
    pkg_mgr = str(role.get("pkg_mgr") or "")
    installed: Mapping[str, t.Any] = host.get("installed") or {}
    repo_pending = bool(host.get("repo_pending"))
    candidate = str(role.get("candidate_package") or "")
    userspace = _names(resolved.get("userspace"))
    asked_about = candidate if pkg_mgr == "apt" else (userspace[0] if userspace else "")
    offered = offered_rows(host.get("offered"), host.get("asked")) if pkg_mgr == "apt" else host.get("offered")
    versions = offered_versions(pkg_mgr, offered, asked_about)
    names = list(dict.fromkeys(row[0] for row in offered)) if pkg_mgr == "apt" else []
    label = "%s (%s source)" % (asked_about, plan_result.get("source"))
    errors = [] if repo_pending else check_candidate(plan_result, versions, role.get("request") or {}, label)
    move = plan_move(plan_result, installed_version(installed, candidate), versions)
    if pkg_mgr == "apt":
        hold_pending = bool(host.get("check_mode")) and move["moves"]
    else:
        hold_pending = bool(host.get("hold_pending"))
    install = _names(role.get("install"))
    hold = _names(resolved.get("hold"))
    moving = [n for n in dict.fromkeys(install + [n for n in installed if n in _names(resolved.get("pin")) + _names(resolved.get("settings"))])
              if n in hold]
    versioned = move["to"] is not None and (move["moves"] or bool(plan_result.get("version")))
    specs = package_specs(moving, move["to"], pkg_mgr) + [n for n in install if n not in moving] if versioned else install
    pin = bool(role.get("pin"))
    pinning = str(resolved.get("pinning") or "")
    if not (pin and pinning):
        use_pinning = False
    elif repo_pending:
        use_pinning = plan_result.get("branch") is not None and int(plan_result["branch"]) >= 590
    else:
        use_pinning = pinning in names
    lockstep = plan_lockstep(plan_result, move, resolved, list(installed), pkg_mgr)
    lockstep["wanted"] = pin and bool(lockstep["hold"])
    lockstep["in_place"] = _lockstep_in_place(lockstep, move, installed)
    lockstep["held"] = lockstep_hold(lockstep["hold"], move["to"])
    return {
        "offered_versions": versions,
        "offered_names": names,
        "candidate_errors": errors,
        "move": move,
        "hold_pending": hold_pending,
        "predict_only": (repo_pending or hold_pending) and move["action"] != "keep",
        "downgrade": move["action"] == "downgrade",
        "install_specs": specs,
        "takes_requests": not plan_result.get("version") and not move["moves"],
        "use_pinning_package": use_pinning,
        "stale_pinning_packages": [n for n in installed if n.startswith("nvidia-driver-pinning-") and n != (pinning if use_pinning else "")],
        "apt_headers": (_names(role.get("headers_running")) + [n for n in _names(role.get("headers_follow")) if n in names]) if pkg_mgr == "apt" else [],
        "lockstep": lockstep,
        "pin_method": pin_method(pkg_mgr, use_pinning, pinning, _names(resolved.get("hold")), bool(role.get("dnf_modules")),
                                 bool(plan_result.get("version"))),
        "record": converged_record(resolved, install, lockstep, use_pinning, pkg_mgr, role.get("record_paths") or {}),
    }


def converged_record(resolved: Mapping[str, t.Any], install: t.Any, lockstep: Mapping[str, t.Any], use_pinning: bool, pkg_mgr: str,
                     paths: Mapping[str, t.Any]) -> dict[str, list[str]]:
    """What the converged record of a run that acted lists (the role's record.yml include): ``files`` - the apt pin
    file, Fabric Manager's exact-version hold beside it (while there is one to hold), dnf's versionlock list and
    module file, the repository file, its key and keyring, then the modprobe.d and DKMS files (``paths``, the role's
    own); ``packages`` - the install list, the other flavour's module packages (recorded absent: installing one later is
    drift) and NVIDIA's pinning package when it holds the branch. Each once, in that order, empty names left out."""
    pin = str(paths.get("pin") or "")
    dnf = pkg_mgr == "dnf"
    files = [pin, re.sub(r"[.]pref$", "-lockstep.pref", pin) if _names(lockstep.get("hold")) else "",
             paths.get("versionlock") if dnf else "", paths.get("dnf_module") if dnf else "",
             paths.get("repo"), paths.get("key"), paths.get("keyring")] + as_list(paths.get("modprobe"))
    modules = resolved.get("module") if isinstance(resolved.get("module"), Mapping) else {}
    other = resolved.get("other_flavour")
    packages = (_names(install) + (_names(modules.get(other)) if other else [])
                + ([str(resolved.get("pinning"))] if use_pinning and resolved.get("pinning") else []))
    return {"files": list(dict.fromkeys(str(f) for f in files if f)), "packages": list(dict.fromkeys(p for p in packages if p))}


# A package name in the role's package tables, as state absent looks for them: one of apt's, dnf's or pacman's name
# characters, or a template such as nvidia-fabricmanager-{branch} (looked for by its prefix).
_TABLE_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9+._{}-]*")


def _json_key(key: t.Any) -> t.Any:
    """A mapping key as JSON writes it (a number or a boolean becomes its JSON text): the tables' names were once found
    in their JSON text, keys included."""
    if isinstance(key, bool):
        return "true" if key else "false"
    if key is None:
        return "null"
    return str(key) if isinstance(key, int) else key


def absent_plan(tables: t.Any, installed: t.Any = None, fabric_manager_service: str = "") -> dict[str, t.Any]:
    """What state absent removes: ``query`` - every package name of the distribution's package tables (every source
    and flavour) and ``prefixes`` - the prefixes of the templated ones, for the one read of what is installed;
    ``units`` - the driver's daemons to stop and disable first. With ``installed`` (that read's packages):
    ``packages`` - the installed ones to remove, sorted, and ``lockstep`` - whether Fabric Manager or NSCQ is among
    them (their exact-version hold exists only beside them)."""
    found: list[str] = []

    def walk(value: t.Any) -> None:
        if isinstance(value, Mapping):
            for key, item in value.items():
                walk(_json_key(key))
                walk(item)
        elif isinstance(value, (list, tuple)):
            for item in value:
                walk(item)
        elif isinstance(value, str) and _TABLE_NAME_RE.fullmatch(value):
            found.append(value)

    walk(tables)
    names = list(dict.fromkeys(found))
    packages = sorted(installed) if isinstance(installed, Mapping) else []
    return {
        "query": [n for n in names if "{" not in n],
        "prefixes": [p for p in (re.sub(r"[{].*$", "", n) for n in names if "{" in n) if p],
        "units": ["nvidia-persistenced.service", fabric_manager_service or "nvidia-fabricmanager.service"],
        "packages": packages,
        "lockstep": any(re.search(r"fabric.?manager|nscq", n) for n in packages),
    }


def pin_method(pkg_mgr: str, use_pinning: bool, pinning: str, hold: Sequence[str], dnf_modules: bool, exact: bool) -> str:
    """How the branch is held, for the report."""
    if use_pinning:
        return "the pinning package " + pinning
    if pkg_mgr == "apt":
        return "apt preferences (%d packages by name)" % len(hold)
    if pkg_mgr == "dnf" and dnf_modules:
        return "the nvidia-driver module stream" + (" and dnf versionlock" if exact else "")
    if pkg_mgr == "dnf":
        return "dnf versionlock"
    return "pacman IgnorePkg"


def transaction_specs(result: Mapping[str, t.Any], taken: Mapping[str, t.Any], pkg_mgr: str, install: t.Any) -> dict[str, list[str]]:
    """The package manager's install list: the driver's specs (pacman: the names, it has no version selection), each
    name that a request the transaction takes (``taken``, from the package_plan filter) names itself replaced by the
    request's entry, then the requests' entries; ``predicted`` adds the entries check mode can only report."""
    own = _names(install) if pkg_mgr == "pacman" else list(result["install_specs"])
    replaced = {re.sub(r"=.*$", "", str(entry)) for entry in as_list(taken.get("install"))}
    specs = [s for s in own if s not in replaced] + [str(e) for e in as_list(taken.get("install"))]
    return {"specs": specs, "predicted": specs + [str(e) for e in as_list(taken.get("predicted"))]}
