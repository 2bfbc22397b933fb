# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Pure planning for the NVIDIA Container Toolkit: versions, the CDI spec location, when to regenerate it, device names.

Private to this collection: no compatibility promise outside gpuhost.nvidia.
"""

from __future__ import annotations

import json
import re
import typing as t

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _gpg, _gpu_schema, _validate
from ansible_collections.gpuhost.nvidia.plugins.module_utils._validate import PACKAGE_VERSION_RE, bad_character

try:
    import yaml
except ImportError:  # pragma: no cover - the module reports it
    yaml = None  # type: ignore[assignment]

# `nvidia-ctk cdi generate` with --device-name-strategy and the nvidia-container-toolkit-base package (CDI without the
# legacy hook stack) arrived in 1.12.0. (The nvidia-cdi-refresh units' 1.18 and the package lists live in the role:
# roles/nvidia_container_toolkit/tasks/cdi.yml and vars/main.yml.)
CDI_MIN_VERSION = "1.12.0"
CDI_DIRS = ("/etc/cdi", "/var/run/cdi")
STRATEGIES = ("index", "uuid")
# Container escapes fixed in the toolkit, each with the first release that has the fix (docs/sources.md: the CVE
# records NVIDIA published, and a second public source each). A release below one of them is installed only when the
# user names every CVE it still has in nvidia_container_toolkit_accept_cves.
SECURITY_FIXES = (
    ("CVE-2024-0132", "1.16.2"),   # TOCTOU with the default (legacy) configuration: host file system access
    ("CVE-2025-23359", "1.17.4"),  # the same class again (CUDA compat libraries mounted from the container)
    ("CVE-2025-23266", "1.17.8"),  # "NVIDIAScape": LD_PRELOAD into the enable-cuda-compat OCI hook, root on the host
)
SECURE_MIN_VERSION = max((fixed for _cve, fixed in SECURITY_FIXES), key=lambda v: tuple(int(p) for p in v.split(".")))
_CVE_RE = re.compile(r"^CVE-\d{4}-\d{4,7}$")


def version_tuple(version: str) -> tuple[int, ...]:
    """(1, 17, 8) for 1.17.8, 1.17.8-1, 1.17.8-1.el9 or 0:1.17.8-1; () when it does not start with a number."""
    version = str(version).split(":", 1)[-1]
    match = re.match(r"^(\d+(?:\.\d+)*)", version)
    return tuple(int(part) for part in match.group(1).split(".")) if match else ()


def upstream(version: str) -> str:
    """1.17.8 for 1.17.8-1 (the package release and an epoch dropped)."""
    return str(version).split(":", 1)[-1].split("-", 1)[0]


# Values the role writes into repository files (apt deb822 URIs:, dnf baseurl=, pacman Server =) and that must stay
# one field: no whitespace, no control character, a scheme a package manager fetches from. Checked when the request
# holds them (see request_errors).
# apt also takes file:/path (one slash), as its documentation writes it (the test and demo mirrors use it).
_URL = _validate.Text(max_length=2048, pattern=re.compile(r"^(https?://|file:/)[!-~]+$"), what="an http(s):// or file:// URL")
# gpg's spacing (two spaces in the middle), lower case and 0x are accepted, as by nvidia_driver (one rule, in _gpg).
_FINGERPRINT = _gpg.FINGERPRINT
REQUEST_RULES: dict[str, _validate.Rule] = {
    "repo_url": _URL,
    "repo_key_url": _URL,
    "repo_key_fingerprint": _FINGERPRINT,
    "runtime_name": _validate.Identifier(_validate.RUNTIME_NAME_RE, "a runtime name such as nvidia (a DNS label)", max_length=63),
}


def request_errors(request: t.Mapping[str, t.Any]) -> list[str]:
    """Everything wrong with the role's request that is known before the host is asked anything.

    Besides the choices, the repository URLs, key fingerprint and runtime name are checked when the request holds
    them (``repo_url``, ``repo_key_url``, ``repo_key_fingerprint``, ``runtime_name``; empty means the default).
    """
    errors: list[str] = [
        "nvidia_container_toolkit_" + e for e in _validate.check({k: request.get(k) or None for k in REQUEST_RULES}, REQUEST_RULES)
    ]
    version = str(request.get("version") or "")
    # The version is written into an apt preferences file and package specs: nothing but a version may reach them.
    if version and (not version_tuple(version) or bad_character(version) or not PACKAGE_VERSION_RE.fullmatch(version)):
        errors.append("nvidia_container_toolkit_version %r is not a version such as 1.17.8" % version)
    cve_errors = accepted_cves_errors(request.get("accept_cves"))
    errors += cve_errors
    if version and version_tuple(version) and not cve_errors:
        errors += insecure_version_errors(version, request.get("accept_cves"), "nvidia_container_toolkit_version")
    mode = request.get("mode", "full")
    if mode not in ("full", "cdi"):
        errors.append("nvidia_container_toolkit_mode %r: choose full or cdi" % mode)
    cdi_wanted = mode == "cdi" or bool(request.get("cdi"))
    if cdi_wanted and version and version_tuple(version) and version_tuple(version) < version_tuple(CDI_MIN_VERSION):
        errors.append(
            "nvidia_container_toolkit_version %s is too old for CDI (%s): CDI needs %s or newer (nvidia-ctk cdi generate "
            "with --device-name-strategy). Ask for a newer version, or set nvidia_container_toolkit_cdi: false and "
            "nvidia_container_toolkit_mode: full."
            % (version, "nvidia_container_toolkit_mode: cdi" if mode == "cdi" else "nvidia_container_toolkit_cdi: true", CDI_MIN_VERSION)
        )
    if mode == "cdi" and request.get("runtimes"):
        errors.append(
            "nvidia_container_toolkit_mode: cdi installs only nvidia-container-toolkit-base, which has no "
            "nvidia-container-runtime for %s; set nvidia_container_toolkit_runtimes: [] or use mode full"
            % ", ".join(request["runtimes"])
        )
    location = request.get("cdi_location", "auto")
    if location not in ("auto",) + CDI_DIRS:
        errors.append("nvidia_container_toolkit_cdi_location %r: choose auto, %s" % (location, " or ".join(CDI_DIRS)))
    if request.get("cdi_device_name_strategy", "index") not in STRATEGIES:
        errors.append("nvidia_container_toolkit_cdi_device_name_strategy %r: choose %s"
                      % (request.get("cdi_device_name_strategy"), " or ".join(STRATEGIES)))
    return errors


def open_cves(version: str) -> list[str]:
    """The CVEs of SECURITY_FIXES that ``version`` (1.17.3, 1.17.3-1, 0:1.17.3-1) does not have the fix for; [] for a
    version that does not parse (the version check reports that)."""
    have = version_tuple(version)
    if not have:
        return []
    return [cve for cve, fixed in SECURITY_FIXES if have < version_tuple(fixed)]


def accepted_cves_errors(accepted: t.Any) -> list[str]:
    """nvidia_container_toolkit_accept_cves must be a list of the CVE ids this collection knows."""
    if accepted in (None, ""):
        return []
    known = [cve for cve, _fixed in SECURITY_FIXES]
    if not isinstance(accepted, (list, tuple)):
        return ["nvidia_container_toolkit_accept_cves must be a list of CVE ids such as [%s], not %r" % (known[-1], accepted)]
    bad = [item for item in accepted if not isinstance(item, str) or not _CVE_RE.fullmatch(item) or item not in known]
    if bad:
        return ["nvidia_container_toolkit_accept_cves: %s: list only the toolkit CVEs this collection refuses unfixed "
                "releases for (%s)" % (", ".join(repr(b) for b in bad), ", ".join(known))]
    return []


def insecure_version_errors(version: str, accepted: t.Any, what: str) -> list[str]:
    """An error naming the CVEs ``version`` has not fixed that the user did not accept, and the fix; [] otherwise."""
    accepted_list = list(accepted) if isinstance(accepted, (list, tuple)) else []
    missing = [cve for cve in open_cves(version) if cve not in accepted_list]
    if not missing:
        return []
    return ["%s %s lacks the fixes of %s (container escapes to the host; fixed in %s). Install %s or newer, or accept the "
            "risk by naming every one of them in nvidia_container_toolkit_accept_cves: [%s]"
            % (what, upstream(version), ", ".join(missing),
               ", ".join("%s in %s" % (cve, fixed) for cve, fixed in SECURITY_FIXES if cve in missing),
               SECURE_MIN_VERSION, ", ".join(open_cves(version)))]


def pick_version(offered: t.Iterable[str], requested: str, source: str) -> tuple[str | None, list[str]]:
    """The offered package version for the request (the newest offered when none is requested), and errors."""
    offered = [str(v).strip() for v in offered if str(v).strip()]
    if not offered:
        return None, ["%s offers no nvidia-container-toolkit package; check the repository URL and that its metadata loads" % source]
    ordered = sorted(offered, key=version_tuple, reverse=True)
    if not requested:
        return ordered[0], []
    matches = [v for v in ordered if v == requested or upstream(v) == requested]
    if not matches:
        return None, ["nvidia_container_toolkit_version %s is not in %s, which offers %s"
                      % (requested, source, ", ".join(sorted({upstream(v) for v in ordered}, key=version_tuple)))]
    return matches[0], []


def candidate_errors(candidate: str | None, request: t.Mapping[str, t.Any]) -> list[str]:
    """Errors about the version that would be installed (no version requested: the repository's newest)."""
    mode = request.get("mode", "full")
    if candidate and (mode == "cdi" or request.get("cdi")) and version_tuple(candidate) < version_tuple(CDI_MIN_VERSION):
        return ["nvidia-container-toolkit %s from the repository is too old for CDI, which needs %s or newer"
                % (upstream(candidate), CDI_MIN_VERSION)]
    if candidate and not accepted_cves_errors(request.get("accept_cves")):
        return insecure_version_errors(candidate, request.get("accept_cves"), "nvidia-container-toolkit from the repository,")
    return []


def cdi_location(requested: str, refresh_units: bool) -> dict[str, t.Any]:
    """Where the spec goes: /var/run/cdi with the toolkit's nvidia-cdi-refresh units, else /etc/cdi."""
    if requested in CDI_DIRS:
        directory = requested
    else:
        directory = "/var/run/cdi" if refresh_units else "/etc/cdi"
    return {
        "dir": directory,
        "other_dirs": [d for d in CDI_DIRS if d != directory],
        "refresh_units": bool(refresh_units) and directory == "/var/run/cdi",
    }


def generated_for(facts: t.Mapping[str, t.Any] | None, strategy: str, toolkit_version: str) -> dict[str, t.Any]:
    """What a spec depends on: the driver, the GPUs and their MIG devices, the naming strategy and the toolkit."""
    facts = facts if isinstance(facts, t.Mapping) else {}
    gpus = []
    for gpu in _gpu_schema.gpus(facts):
        if gpu.get("index") is None:
            continue
        gpus.append({
            "uuid": gpu.get("uuid"),
            "mig": _gpu_schema.mig_on(gpu),
            "mig_devices": sorted(str(d.get("uuid")) for d in _dicts(gpu.get("mig_devices"))),
        })
    driver = facts.get("driver")
    return {
        "driver_version": driver.get("version") if isinstance(driver, dict) else None,
        "gpus": sorted(gpus, key=lambda g: str(g["uuid"])),
        "device_name_strategy": strategy,
        "toolkit_version": upstream(toolkit_version) if toolkit_version else None,
    }


def _dicts(value: t.Any) -> list[dict[str, t.Any]]:
    """The mappings in a facts list; anything else there (a string, a number) is ignored."""
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def needs_generate(spec_exists: bool, record: t.Mapping[str, t.Any] | None, wanted: t.Mapping[str, t.Any]) -> str | None:
    """Why the spec must be (re)generated, or None when it is current."""
    if not spec_exists:
        return "the spec does not exist"
    if not record:
        return "no record of what the spec was generated for"
    if dict(record) == dict(wanted):
        return None
    changes = [key for key in wanted if record.get(key) != wanted[key]]
    labels = {"driver_version": "the driver version", "gpus": "the GPUs or their MIG layout",
              "device_name_strategy": "the device-name strategy", "toolkit_version": "the toolkit version"}
    return "changed since it was generated: " + ", ".join(labels.get(k, k) for k in changes)


def parse_spec(text: str, path: str) -> dict[str, t.Any]:
    """A CDI spec document (JSON, or YAML with PyYAML)."""
    stripped = text.lstrip()
    try:
        if stripped.startswith("{"):
            doc = json.loads(text)
        elif yaml is None:
            raise ValueError("reading a YAML CDI spec needs PyYAML on the managed host")
        else:
            doc = yaml.safe_load(text)
    except Exception as exc:
        raise ValueError("%s is not a readable CDI spec: %s" % (path, exc)) from exc
    if not isinstance(doc, dict) or "kind" not in doc or not isinstance(doc.get("devices"), list):
        raise ValueError("%s is not a CDI spec (it needs kind and devices)" % path)
    return doc


def device_names(spec: t.Mapping[str, t.Any]) -> list[str]:
    """Fully qualified device names, kind=name, in spec order (nvidia.com/gpu=0, ..., nvidia.com/gpu=all)."""
    kind = spec["kind"]
    return ["%s=%s" % (kind, d["name"]) for d in spec["devices"] if isinstance(d, dict) and "name" in d]
