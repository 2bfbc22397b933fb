# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The role variables that reach a file, a unit or a command, checked against what that consumer accepts.

Private to this collection: no compatibility promise outside gpuhost.nvidia.

Each role's first task hands every such variable to :func:`role_errors` (through the ``role_input_errors`` filter)
and fails with all the problems at once, before anything on the host changes. The rules are those of the consumer:
an IP literal or an RFC 1123 host name where a program listens or connects, ports 1-65535, systemd unit names
(systemd.unit(5)), package names as apt, dnf/rpm and pacman accept them, absolute paths without ``.``/``..``
components or control characters, and one-line values for files read line by line. docs/threat-model.md lists each
variable with its consumer.

:func:`systemd_quote` quotes one word of an ``ExecStart=`` line by systemd.service(5)'s rules, so that even a value
that slipped past a check stays one argument.
"""

from __future__ import annotations

import ipaddress
import re
import typing as t

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _compose, _dcgm_fields, _gpg, _nvreg, _validate, _verify
from ansible_collections.gpuhost.nvidia.plugins.module_utils._validate import InputError

# RFC 1123 section 2.1: a label of letters, digits and hyphens, 1-63 characters, neither starting nor ending with a
# hyphen; at most 253 characters in all (255 octets on the wire). RFC 3696 section 2: a top-level label is never
# all digits, which keeps "256.1.1.1" and "1.2.3" from passing as names.
HOST_LABEL_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
HOST_NAME_MAX = 253
# systemd.unit(5): a unit name is a prefix of ASCII letters, digits, ":", "-", "_", "." and "\" (an instance after "@"),
# a dot and a type suffix, at most 255 characters (UNIT_NAME_MAX is 256 with the NUL). "\" (systemd-escape's \x2d)
# is refused here: none of the units these roles order against needs it, and it is an escape in other settings.
UNIT_SUFFIXES = ("service", "socket", "device", "mount", "automount", "swap", "target", "path", "timer", "slice", "scope")
UNIT_NAME_RE = re.compile(r"[A-Za-z0-9:_.-]+(?:@[A-Za-z0-9:_.-]*)?\.(?:%s)" % "|".join(UNIT_SUFFIXES))
UNIT_NAME_MAX = 255
# Package names, by the rules of each package manager:
# - apt: Debian Policy 5.6.7, at least two characters, lower case letters, digits, "+", "-" and ".", starting with a
#   letter or digit (plugins/module_utils/_apt.py holds the same rule).
# - dnf/rpm: Fedora's naming guidelines allow letters (either case), digits and "-", ".", "_", "+"; rpm refuses a
#   name starting with "-" (it would be an option on rpm's and dnf's command line).
# - pacman: PKGBUILD(5) pkgname: letters, digits and "@", ".", "_", "+", "-", not starting with "-" or "."; the
#   Arch package guidelines ask for lower case, which makepkg does not enforce, so upper case is accepted.
PACKAGE_NAME_RES = {
    "apt": re.compile(r"[a-z0-9][a-z0-9+.-]+"),
    "dnf": re.compile(r"[A-Za-z0-9_+][A-Za-z0-9._+-]*"),
    "pacman": re.compile(r"[A-Za-z0-9@_+][A-Za-z0-9@._+-]*"),
}
# ansible_facts.pkg_mgr's names for the managers whose rules are the same.
PACKAGE_MANAGER_ALIASES = {"dnf5": "dnf", "yum": "dnf"}
PACKAGE_NAME_WHAT = {
    "apt": "a Debian package name (two or more of a-z 0-9 + - ., starting with a letter or digit)",
    "dnf": "an RPM package name (letters, digits and - . _ +, not starting with - or .)",
    "pacman": "a pacman package name (letters, digits and @ . _ + -, not starting with - or .)",
}
# An apt version in name=version, a glob allowed (580.*).
APT_VERSION_RE = re.compile(r"[0-9A-Za-z.+~:*-]{1,64}")
# A repository name: pacman.conf's [section] and its database file, dnf's repository id. "options" is pacman.conf's
# own section and "local" pacman's database of installed packages.
REPO_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
# apt sources (sources.list(5)): a suite (a distribution codename or a path, "/" for a flat repository) and components.
SUITE_RE = re.compile(r"[A-Za-z0-9/][A-Za-z0-9/_.+~-]{0,99}")
COMPONENT_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9/_.+-]{0,63}")
# A PCI address (dddd:bb:dd.f, the domain optional) and a PCI vendor:device id, as the vfio planner reads them.
PCI_ADDRESS_RE = re.compile(r"(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]")
PCI_ID_RE = re.compile(r"[0-9a-fA-F]{4}:[0-9a-fA-F]{4}")
# A DCGM field name as dcgm-exporter's collectors CSV takes it, and a metric type as one lower-case word (gauge,
# counter): the exporter decides which types it knows; here only that the field stays one CSV cell.
DCGM_FIELD_RE = re.compile(r"DCGM_(?:FI|EXP)_[A-Z0-9_]{1,120}")
DCGM_TYPE_RE = re.compile(r"[a-z]{1,16}")
# An upstream release version (nvidia_gpu_exporter 1.3.1): it becomes a directory name and part of a URL.
RELEASE_VERSION_RE = re.compile(r"[0-9]{1,4}(?:\.[0-9]{1,4}){1,3}")
SHA256_RE = re.compile(r"[0-9A-Fa-f]{64}")
# One URL on one line: a scheme the consumer fetches from and visible ASCII only (no space, which would start a new
# field of an apt .sources line or a new word of a command).
URL_RE = re.compile(r"(?:https?://[!-~]+|file:/[!-~]*)")
# The CDI refresh environment file (systemd.exec(5) EnvironmentFile=, one NAME=value a line): nvidia-ctk's
# NVIDIA_CTK_* names and values of one word without quotes, "$", "\" or "#".
CDI_ENV_NAME_RE = re.compile(r"NVIDIA_[A-Z0-9_]{1,64}")
CDI_ENV_VALUE_RE = re.compile(r"[A-Za-z0-9_./:,=+@-]{0,1024}")
CDI_FEATURE_FLAG_RE = re.compile(r"[a-z0-9][a-z0-9-]{0,63}")


def _host_problem(value: str) -> str | None:
    """Why ``value`` is neither an IP literal nor an RFC 1123 host name; None when it is one."""
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        address = None
    if address is not None:
        # ipaddress takes a scoped IPv6 literal (fe80::1%eth0); the programs here are not given a zone.
        if "%" in value:
            return "is a scoped IPv6 address; give the address without %zone"
        return None
    if value.startswith("[") and value.endswith("]"):
        return "has brackets; give the IPv6 address without them (the role adds them where a port follows)"
    name = value[:-1] if value.endswith(".") else value
    if len(name) > HOST_NAME_MAX:
        return "is longer than %d characters, which no host name is" % HOST_NAME_MAX
    labels = name.split(".")
    if not all(HOST_LABEL_RE.fullmatch(label) for label in labels):
        return ("is neither an IP address nor a host name (RFC 1123: labels of letters, digits and '-', 1-63 "
                "characters, joined by '.')")
    if labels[-1].isdigit():
        return "is not an IP address, and a host name's last label is never all digits"
    return None


class Host(_validate.Rule):
    """An IPv4 or IPv6 literal (without brackets or zone) or an RFC 1123 host name."""

    def check(self, option: str, value: t.Any) -> None:
        _validate.Text(max_length=HOST_NAME_MAX + 1, what="an IP address or a host name").check(option, value)
        problem = _host_problem(value)
        if problem:
            raise InputError(option, value, problem)


def port_number(value: t.Any) -> int | None:
    """A TCP/UDP port 1-65535 given as an integer or as decimal digits; None otherwise (booleans included)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        number = value
    elif isinstance(value, str) and re.fullmatch(r"[1-9][0-9]{0,4}", value):
        number = int(value)
    else:
        return None
    return number if 1 <= number <= 65535 else None


class Port(_validate.Rule):
    """A port 1-65535: an integer, or a string of decimal digits (what ``-e name=9400`` gives); never a boolean."""

    def check(self, option: str, value: t.Any) -> None:
        if port_number(value) is None:
            if isinstance(value, bool) or not isinstance(value, (int, str)):
                raise InputError(option, value, "is %s, not a port number 1-65535" % _validate.type_name(value))
            raise InputError(option, value, "is not a port number 1-65535")


def split_host_port(value: str) -> tuple[str, str | None]:
    """``host:port``, ``[v6]:port``, ``host`` or a bare IPv6 literal -> (host, port or None)."""
    if value.startswith("["):
        close = value.find("]")
        if close < 0:
            return value, None
        rest = value[close + 1:]
        if rest and not rest.startswith(":"):
            return value, None
        return value[1:close], (rest[1:] if rest else None)
    if value.count(":") == 1:
        host, port = value.split(":")
        return host, port
    return value, None


class HostPort(_validate.Rule):
    """``host:port`` (an IPv6 literal in brackets), or with ``port_optional`` a host alone."""

    def __init__(self, port_optional: bool = True):
        self.port_optional = port_optional

    def check(self, option: str, value: t.Any) -> None:
        _validate.Text(max_length=HOST_NAME_MAX + 10, what="host:port").check(option, value)
        if value.count(":") > 1 and not value.startswith("["):
            if _host_problem(value) is None:
                if self.port_optional:
                    return
                raise InputError(option, value, "has no port: write an IPv6 address in brackets, [%s]:PORT" % value)
            raise InputError(option, value, "is not host:port (an IPv6 address goes in brackets: [::1]:5555)")
        host, port = split_host_port(value)
        if value.startswith("["):
            # Brackets are for an IPv6 address followed by a port, nothing else.
            if host == value or port is None or ":" not in host:
                raise InputError(option, value, "is not [IPv6]:port (brackets hold an IPv6 address, and a port follows)")
        problem = _host_problem(host) if host else "has no host"
        if problem:
            raise InputError(option, value, "names a host that %s" % problem)
        if port is None:
            if not self.port_optional:
                raise InputError(option, value, "has no port: write host:port")
            return
        if port_number(port) is None:
            raise InputError(option, value, "has the port %r, which is not a port number 1-65535" % port)


class UnitName(_validate.Rule):
    """A systemd unit name (systemd.unit(5)) with a type suffix."""

    def check(self, option: str, value: t.Any) -> None:
        _validate.Text(max_length=UNIT_NAME_MAX, what="a unit name such as docker.service").check(option, value)
        if not UNIT_NAME_RE.fullmatch(value) or value.startswith(("-", ".", "@")):
            raise InputError(option, value, "is not a systemd unit name (letters, digits and : _ . - with an optional "
                                            "@instance, then a type suffix such as .service or .target)")


class PackageName(_validate.Rule):
    """A package name as ``manager`` (apt, dnf or pacman) accepts it; with no manager, one that all three accept.
    On apt (and with no manager) ``name=version`` is accepted too, the version as apt takes it (a glob allowed)."""

    def __init__(self, manager: str | None = None):
        self.manager = manager

    def check(self, option: str, value: t.Any) -> None:
        _validate.Text(max_length=200, what="a package name").check(option, value)
        managers = [self.manager] if self.manager in PACKAGE_NAME_RES else list(PACKAGE_NAME_RES)
        name = value
        if "=" in value and self.manager in ("apt", None):
            name, version = value.split("=", 1)
            if not APT_VERSION_RE.fullmatch(version):
                raise InputError(option, value, "has the version %r, which is not an apt version (letters, digits and "
                                                ". + ~ : - *)" % version)
        elif "=" in value:
            raise InputError(option, value, "holds '='; %s takes a package name here, without a version" % self.manager)
        if len(name) > 128:
            raise InputError(option, value, "is longer than 128 characters, which no package name is")
        for manager in managers:
            if not PACKAGE_NAME_RES[manager].fullmatch(name):
                raise InputError(option, value, "is not %s" % PACKAGE_NAME_WHAT[manager])


class MappingOf(_validate.Rule):
    """A mapping whose keys pass ``key`` and whose values pass ``value``; every problem is reported."""

    def __init__(self, key: _validate.Rule, value: _validate.Rule, max_items: int = 64):
        self.key = key
        self.value = value
        self.max_items = max_items

    def errors(self, option: str, value: t.Any) -> list[InputError]:
        if value is None:
            return []
        if not isinstance(value, dict):
            return [InputError(option, value, "is %s, not a mapping" % _validate.type_name(value))]
        if len(value) > self.max_items:
            return [InputError(option, value, "has more than %d entries" % self.max_items)]
        out: list[InputError] = []
        for key, item in value.items():
            out.extend(self.key.errors("%s key" % option, key))
            out.extend(self.value.errors("%s[%r]" % (option, key), item))
        return out

    def check(self, option: str, value: t.Any) -> None:
        errors = self.errors(option, value)
        if errors:
            raise errors[0]


class OneOf(_validate.Rule):
    """One of ``choices`` (exactly, so a trailing newline or another case does not pass)."""

    def __init__(self, choices: t.Sequence[t.Any]):
        self.choices = tuple(choices)

    def check(self, option: str, value: t.Any) -> None:
        if isinstance(value, bool) or value not in self.choices:
            raise InputError(option, value, "is not one of %s" % ", ".join(str(c) for c in self.choices))


class Optional(_validate.Rule):
    """``rule``, except that an empty string (the role's "not set") passes."""

    def __init__(self, rule: _validate.Rule):
        self.rule = rule

    def errors(self, option: str, value: t.Any) -> list[InputError]:
        return [] if value == "" else self.rule.errors(option, value)

    def check(self, option: str, value: t.Any) -> None:
        if value != "":
            self.rule(option, value)


class DcgmField(_validate.Identifier):
    """A DCGM field name dcgm-exporter takes in its collectors CSV: the shape, then the name itself among the fields
    the pinned exporter knows (module_utils/_dcgm_fields.py); an unknown name would stop the exporter at start."""

    def __init__(self) -> None:
        super().__init__(DCGM_FIELD_RE, "a DCGM field name such as DCGM_FI_DEV_GPU_TEMP")

    def check(self, option: str, value: t.Any) -> None:
        super().check(option, value)
        if value not in _dcgm_fields.KNOWN:
            raise InputError(option, value, "is not a DCGM field dcgm-exporter 4.8.2 knows (go-dcgm %s): check the name against "
                             "DCGM's field list (dcgm_fields.h), or the exporter stops with \"could not find DCGM field\""
                             % _dcgm_fields.GO_DCGM_COMMIT)


class Required(_validate.Rule):
    """``rule``, and the value must be there (a suboption that may not be left out)."""

    def __init__(self, rule: _validate.Rule):
        self.rule = rule

    def errors(self, option: str, value: t.Any) -> list[InputError]:
        if value is None:
            return [InputError(option, value, "is missing")]
        return self.rule.errors(option, value)

    def check(self, option: str, value: t.Any) -> None:
        errors = self.errors(option, value)
        if errors:
            raise errors[0]


class IntegerLike(_validate.Rule):
    """An integer from ``minimum`` to ``maximum``, or the same in decimal digits; never a boolean."""

    def __init__(self, minimum: int, maximum: int):
        self.minimum = minimum
        self.maximum = maximum

    def check(self, option: str, value: t.Any) -> None:
        if isinstance(value, str) and re.fullmatch(r"[0-9]{1,9}", value):
            value_int: t.Any = int(value)
        else:
            value_int = value
        _validate.Integer(self.minimum, self.maximum).check(option, value_int)


PATH = _validate.Path()
DIRECTORY = _validate.Path(directory=True)
URL = _validate.Text(max_length=2048, pattern=URL_RE, what="an http(s):// or file:// URL on one line")
FINGERPRINT = _gpg.FINGERPRINT
DEBIAN_VERSION = _validate.Identifier(_validate.PACKAGE_VERSION_RE, "a package version such as 1:4.5.2-1", max_length=64)
UNITS = _validate.ListOf(UnitName(), max_items=32)
# A user or group name as POSIX's portable set allows it (letters, digits, '.', '_', '-', not starting with '-';
# systemd.io's USER_NAMES), at most 32 characters, or a numeric id.
ACCOUNT = _validate.Text(max_length=32, pattern=re.compile(r"[A-Za-z0-9_.][A-Za-z0-9_.-]{0,31}|[0-9]{1,10}"),
                         what="a user or group name such as root, or a numeric id")
# A file mode: octal digits in a string ("0644"), the number YAML makes of an unquoted 0644, or a symbolic mode as
# chmod(1) and Ansible's file modules take it (u=rw,g=r,o=r).
MODE_RE = re.compile(r"0?[0-7]{3,4}|[ugoa]*[-+=](?:[rwxXst]*|[ugo])(?:,[ugoa]*[-+=](?:[rwxXst]*|[ugo]))*")


class NvregParams(_validate.Rule):
    """The nvidia module's NVreg_* parameters (module_utils/_nvreg.py): known keys, each value in its documented form,
    every problem reported."""

    def check(self, option: str, value: t.Any) -> None:
        errors = self.errors(option, value)
        if errors:
            raise errors[0]

    def errors(self, option: str, value: t.Any) -> list[InputError]:
        found = []
        for text in _nvreg.errors(value, option):
            error = InputError(option, value, text)
            error.args = (text,)  # _nvreg's sentence already names the option, the key and the value
            found.append(error)
        return found


class Mode(_validate.Rule):
    def check(self, option: str, value: t.Any) -> None:
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 0o7777:
            return
        _validate.Text(max_length=64, pattern=MODE_RE, what="a file mode such as \"0644\" or u=rw,g=r,o=r").check(option, value)


MODE = Mode()
# Text for a comment line or a description= field: spaces inside, one line.
ONE_LINE = _validate.Text(space=True, max_length=200, what="one line of text")

# What each role's first task checks: variable -> rule. The role hands over every name listed here (a name that is
# missing is reported, so a table and a task cannot drift apart unnoticed). Rules that depend on another value
# (the package manager, the exporter's kind) are added by _context_errors.
ROLE_RULES: dict[str, dict[str, _validate.Rule]] = {
    "gpu_exporter": {
        # dcgm-exporter -a and nvidia_gpu_exporter --web.listen-address: Go's host:port, which the role builds (empty:
        # every address, ":9400", as Go reads it).
        "gpu_exporter_listen_address": Optional(Host()),
        "gpu_exporter_port": Port(),
        # dcgm-exporter -r: nv-hostengine's host:port (the port defaults to 5555).
        "gpu_exporter_dcgm_hostengine": HostPort(port_optional=True),
        # Prometheus file_sd targets (playbooks/exporter.yml): host:port.
        "gpu_exporter_scrape_host": Host(),
        "gpu_exporter_facts_root": DIRECTORY,
        "gpu_exporter_dcgm_version": DEBIAN_VERSION,
        # Null: the family's default (apt and dnf carry different exporter builds).
        "gpu_exporter_dcgm_exporter_version": Optional(DEBIAN_VERSION),
        # Part of the package name datacenter-gpu-manager-4-cuda<major>.
        "gpu_exporter_dcgm_cuda_major": Optional(IntegerLike(1, 99)),
        # Null: nvidia_driver's keyring for the family (apt's .gpg, or the armoured key dnf imports).
        "gpu_exporter_dcgm_repo_keyring": Optional(PATH),
        "gpu_exporter_dcgm_repo_key_fingerprint": Optional(FINGERPRINT),
        # dcgm-exporter's collectors CSV: one row a line, three comma-separated fields.
        "gpu_exporter_dcgm_collectors": _validate.ListOf(_validate.Fields({
            "field": Required(DcgmField()),
            "type": Required(_validate.Identifier(DCGM_TYPE_RE, "a metric type such as gauge or counter")),
            "help": Required(_validate.Text(space=True, forbid=',"', max_length=512, what="one line of help text without commas")),
        }), min_items=1, max_items=512),
        "gpu_exporter_nvidia_gpu_exporter_version": _validate.Identifier(RELEASE_VERSION_RE, "a release version such as 1.3.1"),
        # nvidia_gpu_exporter --collect.backend (and the release archive's -nvml flavour).
        "gpu_exporter_nvidia_gpu_exporter_backend": OneOf(("exec", "nvml")),
        "gpu_exporter_nvidia_gpu_exporter_url": URL,
        "gpu_exporter_nvidia_gpu_exporter_sha256": Optional(_validate.Identifier(SHA256_RE, "a SHA-256 of 64 hex digits")),
    },
    "nvidia_container_toolkit": {
        "nvidia_container_toolkit_node_labels_file": Optional(PATH),
        "nvidia_container_toolkit_runtime_path": PATH,
        "nvidia_container_toolkit_docker_daemon_json": PATH,
        "nvidia_container_toolkit_containerd_config": PATH,
        "nvidia_container_toolkit_containerd_dropin": PATH,
        "nvidia_container_toolkit_crio_dropin": Optional(PATH),
        "nvidia_container_toolkit_crio_config": PATH,
        # nvidia-cdi-refresh.service's drop-in: After= and Before= lists of unit names.
        "nvidia_container_toolkit_cdi_refresh_after": UNITS,
        "nvidia_container_toolkit_cdi_refresh_before": UNITS,
        # nvidia-cdi-refresh.env (EnvironmentFile=): NAME=value lines.
        "nvidia_container_toolkit_cdi_feature_flags": _validate.ListOf(
            _validate.Identifier(CDI_FEATURE_FLAG_RE, "a feature flag such as disable-nvsandboxutils", max_length=64), max_items=32),
        "nvidia_container_toolkit_cdi_refresh_env": MappingOf(
            _validate.Identifier(CDI_ENV_NAME_RE, "an NVIDIA_* variable name in upper case", max_length=71),
            _validate.Text(empty=True, max_length=1024, pattern=CDI_ENV_VALUE_RE, numbers=True,
                           what="one word of letters, digits and _ . / : , = + @ -")),
    },
    "nvidia_driver": {
        "nvidia_driver_mok_key": PATH,
        "nvidia_driver_mok_certificate": PATH,
        "nvidia_driver_facts_root": DIRECTORY,
        # Empty or null: the distribution's default repository.
        "nvidia_driver_repo_url": Optional(URL),
        "nvidia_driver_repo_key_url": Optional(URL),
        "nvidia_driver_repo_key_fingerprint": Optional(FINGERPRINT),
        "nvidia_driver_epel_repo_url": Optional(URL),
        "nvidia_driver_epel_repo_key_url": Optional(URL),
        "nvidia_driver_epel_repo_key_fingerprint": Optional(FINGERPRINT),
        "nvidia_driver_reboot_timeout": IntegerLike(1, 86400),
        "nvidia_driver_reboot_settle_seconds": IntegerLike(0, 3600),
        "nvidia_driver_module_params": NvregParams(),
    },
    "gpu_settings": {
        "gpu_settings_spec_path": PATH,
        "gpu_settings_nvidia_smi_path": PATH,
        "gpu_settings_python_interpreter": PATH,
    },
    # The internal repository role, called by the others: what reaches apt's .sources file (deb822, one field a line,
    # words separated by spaces), dnf's .repo file, pacman.conf's section, the key module and the package lists.
    "internal_repository": {
        "internal_repository_url": URL,
        # Empty: told by the same task as a missing key, with the caller's variable names.
        "internal_repository_key_url": Optional(URL),
        "internal_repository_key_fingerprint": Optional(FINGERPRINT),
        "internal_repository_keyring": PATH,
        "internal_repository_file": PATH,
        "internal_repository_name": Optional(_validate.Identifier(
            REPO_NAME_RE, "a repository name of letters, digits, '_', '.' and '-'", max_length=64, reserved=("options", "local"))),
        "internal_repository_suites": _validate.Identifier(SUITE_RE, "one apt suite such as stable or / (a flat repository)"),
        "internal_repository_components": _validate.ListOf(_validate.Identifier(COMPONENT_RE, "an apt component such as main"),
                                                           max_items=16),
        "internal_repository_description": ONE_LINE,
        "internal_repository_owner": ONE_LINE,
    },
    # gpu_container_check's own option rules (module_utils/_verify.py), before the role installs the docker SDK.
    "gpu_verify": {"gpu_verify_" + name: rule for name, rule in _verify.OPTION_RULES.items()},
    # The planner checks the addresses and ids against the GPU facts before any change; here, before the facts are
    # read, what no host has: a value that is not a PCI address or a vendor:device id (they reach modprobe.d and the
    # override script), and the root the facts and /proc/cmdline are read under.
    "vfio_passthrough": {
        "vfio_passthrough_pci_addresses": _validate.ListOf(_validate.Identifier(
            PCI_ADDRESS_RE, "a PCI address such as 0000:01:00.0"), max_items=64),
        "vfio_passthrough_device_ids": _validate.ListOf(_validate.Identifier(
            PCI_ID_RE, "a vendor:device id such as 10de:2204"), max_items=64),
        "vfio_passthrough_facts_root": DIRECTORY,
    },
    # The controller directory the reports are written to, and the files the doctor reads.
    "gpu_doctor": {
        "gpu_doctor_report_dir": Optional(DIRECTORY),
        "gpu_doctor_docker_daemon_json": PATH,
        "gpu_doctor_containerd_config": PATH,
        "gpu_doctor_containerd_conf_dir": DIRECTORY,
        "gpu_doctor_cdi_dirs": _validate.ListOf(DIRECTORY, max_items=16),
        "gpu_doctor_cdi_kind": _validate.Identifier(_validate.CDI_KIND_RE, "a CDI kind such as nvidia.com/gpu"),
        "gpu_doctor_runtime_name": _validate.Identifier(_validate.ENGINE_RUNTIME_RE, "a runtime name such as nvidia"),
    },
    # The kubelet's container runtime configuration, the NFD feature file and the boot refresh unit's command line.
    "k8s_gpu_node": {
        "k8s_gpu_node_runtime_path": PATH,
        "k8s_gpu_node_containerd_config": PATH,
        "k8s_gpu_node_containerd_dropin": PATH,
        "k8s_gpu_node_crio_config": PATH,
        "k8s_gpu_node_crio_dropin": Optional(PATH),
        "k8s_gpu_node_features_file": PATH,
        "k8s_gpu_node_kubelet_env_file": Optional(PATH),
        "k8s_gpu_node_kubelet_config_dir": Optional(DIRECTORY),
        "k8s_gpu_node_kubelet_config_file": Optional(PATH),
        "k8s_gpu_node_python_interpreter": PATH,
        "k8s_gpu_node_nvidia_smi_path": PATH,
    },
    # The override module checks each project's services before it reads or writes anything; here, before the role
    # installs PyYAML for it, what reaches a path or the file's ownership.
    "gpu_compose": {
        "gpu_compose_projects": _validate.ListOf(_validate.Fields({
            "path": Required(DIRECTORY),
            "compose_files": _validate.ListOf(_validate.Path(relative=True), max_items=32),
            "cdi_kind": Optional(_validate.Identifier(_validate.CDI_KIND_RE, "a CDI kind such as nvidia.com/gpu")),
            "owner": Optional(ACCOUNT), "group": Optional(ACCOUNT), "mode": Optional(MODE),
            "strategy": Optional(OneOf(_compose.STRATEGIES)), "id_format": Optional(OneOf(_compose.ID_FORMATS)),
            "request_form": Optional(OneOf(_compose.REQUEST_FORMS)),
            "base_requests": Optional(OneOf(_compose.BASE_REQUEST_POLICIES)),
            "services": Required(_validate.ListOf(_validate.Fields({}), min_items=1, max_items=256)),
        }), max_items=256),
        "gpu_compose_override_name": _validate.FileName((".yml", ".yaml")),
        "gpu_compose_strategy": OneOf(_compose.STRATEGIES),
        "gpu_compose_id_format": OneOf(_compose.ID_FORMATS),
        "gpu_compose_request_form": OneOf(_compose.REQUEST_FORMS),
        "gpu_compose_base_requests": OneOf(_compose.BASE_REQUEST_POLICIES),
        "gpu_compose_cdi_kind": _validate.Identifier(_validate.CDI_KIND_RE, "a CDI kind such as nvidia.com/gpu"),
        "gpu_compose_owner": ACCOUNT,
        "gpu_compose_group": ACCOUNT,
        "gpu_compose_mode": MODE,
    },
}

# Package-name lists, checked by the host's package manager's rules (the first task passes it).
PACKAGE_LISTS: dict[str, tuple[str, ...]] = {
    "gpu_exporter": (),
    "nvidia_container_toolkit": (),
    "nvidia_driver": ("nvidia_driver_packages_extra",),
    "gpu_settings": ("gpu_settings_packages",),
    "internal_repository": ("internal_repository_versions_of",),
    "gpu_verify": (), "vfio_passthrough": (), "gpu_doctor": (), "gpu_compose": (), "k8s_gpu_node": (),
}

# The paths that go into a unit's ExecStart= or ConditionPathExists= as they are: systemd splits those on whitespace
# and expands %, $ and \, so they may hold only characters that mean nothing there.
UNIT_PATH_RE = re.compile(r"/[A-Za-z0-9_.+/-]*")
UNIT_PATHS: dict[str, tuple[str, ...]] = {
    "gpu_settings": ("gpu_settings_spec_path", "gpu_settings_nvidia_smi_path", "gpu_settings_python_interpreter"),
    "k8s_gpu_node": ("k8s_gpu_node_features_file", "k8s_gpu_node_python_interpreter", "k8s_gpu_node_nvidia_smi_path"),
}


def roles() -> list[str]:
    return sorted(ROLE_RULES)


def variables(role: str) -> list[str]:
    """Every variable the role's first task must hand to :func:`role_errors`."""
    return sorted(set(ROLE_RULES[role]) | set(PACKAGE_LISTS[role]))


def _context_errors(role: str, values: t.Mapping[str, t.Any], context: t.Mapping[str, t.Any]) -> list[str]:
    errors: list[str] = []
    manager = PACKAGE_MANAGER_ALIASES.get(context.get("package_manager") or "", context.get("package_manager") or None)
    for name in PACKAGE_LISTS[role]:
        errors.extend(str(e) for e in _validate.ListOf(PackageName(manager), max_items=128).errors(name, values.get(name)))
    for name in UNIT_PATHS.get(role, ()):
        value = values.get(name)
        if isinstance(value, str) and _validate.one(PATH, name, value) is None and not UNIT_PATH_RE.fullmatch(value):
            errors.append(str(InputError(name, value, "holds a character that a unit's command line would read as more "
                                                      "than a path: use letters, digits and _ . + / - only")))
    if role == "gpu_compose":
        errors.extend(_compose_service_errors(values))
    if role == "gpu_exporter" and context.get("kind") == "nvidia_gpu_exporter" and values.get("gpu_exporter_nvidia_gpu_exporter_sha256") == "":
        errors.append("gpu_exporter_nvidia_gpu_exporter_sha256: is empty: give the SHA-256 of the release tarball (its line "
                      "in the release's checksums.txt); the role downloads nothing without it")
    return errors


def _compose_service_errors(values: t.Mapping[str, t.Any]) -> list[str]:
    """Each project's services as the override module checks them (module_utils/_compose.py), with the project's
    strategy, id format and CDI kind or the role's; only where the project itself passed its own rules."""
    projects = values.get("gpu_compose_projects")
    if not isinstance(projects, list):
        return []
    errors: list[str] = []
    for number, project in enumerate(projects):
        if not isinstance(project, dict) or not isinstance(project.get("services"), list) or not project["services"]:
            continue
        request = {"strategy": project.get("strategy") or values.get("gpu_compose_strategy"),
                   "id_format": project.get("id_format") or values.get("gpu_compose_id_format"),
                   "cdi_kind": project.get("cdi_kind") or values.get("gpu_compose_cdi_kind"),
                   "services": project["services"]}
        errors.extend("gpu_compose_projects[%d].services: %s" % (number, e) for e in _compose.request_errors(request))
    return errors


def role_errors(role: str, values: t.Mapping[str, t.Any], context: t.Mapping[str, t.Any] | None = None) -> list[str]:
    """Every problem of the role's variables that reach a file, a unit or a command, each naming the variable, the
    value and what is accepted; an empty list when all pass. ``context``: ``package_manager`` (apt, dnf, pacman) for
    package names, ``kind`` (gpu_exporter's exporter, when the user chose one)."""
    if role not in ROLE_RULES:
        raise ValueError("role_input_errors: no rules for the role %r (known: %s)" % (role, ", ".join(roles())))
    if not isinstance(values, t.Mapping):
        raise ValueError("role_input_errors: expected a mapping of variable names to values, got %s" % _validate.type_name(values))
    # Fail closed: a variable the task did not hand over was not checked, which is reported rather than passed.
    missing = [name for name in variables(role) if name not in values]
    unknown = sorted(set(values) - set(variables(role)))
    errors = ["%s: not handed to the check (the role's first task must pass it)" % name for name in missing]
    errors += ["%s: the check has no rule for it" % name for name in unknown]
    for name, rule in ROLE_RULES[role].items():
        if name in values:
            errors.extend(str(e) for e in rule.errors(name, values[name]))
    errors.extend(_context_errors(role, values, dict(context or {})))
    return errors


def listen_address(host: str, port: t.Any) -> str:
    """Go's host:port for a listener or a connection: an IPv6 literal in brackets (net.JoinHostPort)."""
    return "[%s]:%s" % (host, port) if ":" in host else "%s:%s" % (host, port)


# A word systemd reads as it is: none of these characters is a separator, a quote, an escape, a specifier or a
# variable there.
PLAIN_WORD_RE = re.compile(r"[A-Za-z0-9_.+/:@=,\[\]-]+")


# systemd.service(5), "Command lines": a word in double quotes may hold spaces; "\" starts a C-style escape, "%" a
# specifier ("%%" is a literal "%"), and "$" an environment variable ("$$" is a literal "$"). A line break would end
# the setting, so no quoting makes one safe: it is refused.
def systemd_quote(value: t.Any) -> str:
    """One ``ExecStart=`` argument, quoted (when it needs it) so that systemd passes exactly ``value`` as one word."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise ValueError("systemd_quote: expected a string or an integer, got %s" % _validate.type_name(value))
    text = str(value)
    problem = _validate.bad_character(text, ascii_only=False)
    if problem:
        raise ValueError("systemd_quote: %s %s, which no unit file line can carry" % (_validate.show(text), problem))
    if PLAIN_WORD_RE.fullmatch(text):
        return text
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$")
    return '"%s"' % escaped
