# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Host probes of the nvidia_driver role: the commands gpuhost.nvidia.nvidia_driver_host runs and the parsers of their output.

Private to this collection: no compatibility promise outside gpuhost.nvidia.

The planner (``_driver``) never reads a host; it takes what these parsers return. Keeping the commands and their
parsers apart from the decisions lets each be tested on canned output alone.
"""

from __future__ import annotations

import re
import typing as t
from collections.abc import Mapping

from ansible_collections.gpuhost.nvidia.plugins.module_utils._validate import as_list


# The host inventory the role plans from (gpuhost.nvidia.nvidia_driver_host): one read-only module call instead of
# a stat of mokutil, mokutil --sb-state, a stat per .run installer marker, package_facts, a find of repository files, a
# stat of the running kernel's build directory and a package manager's question about its headers package.
# Each installed-package query lists every installed package in one line each; the parsers keep what package_facts
# would report for a name (its version as the package manager prints it), so the role's expressions read the same.
INSTALLED_QUERIES: dict[str, list[str]] = {
    # dpkg-query (dpkg 1.16.2 and later): the abbreviated status says whether a listed package is really installed.
    "apt": ["dpkg-query", "-W", "-f=${Package}\\t${Architecture}\\t${db:Status-Abbrev}\\t${Version}\\n"],
    # rpm: %{EPOCH} prints "(none)" for a package without an epoch.
    "rpm": ["rpm", "-qa", "--qf", "%{NAME}\\t%{EPOCH}\\t%{VERSION}\\t%{RELEASE}\\t%{ARCH}\\n"],
    # pacman -Q: "name version" (the version with its epoch and pkgrel, as -Qi prints it).
    "pacman": ["pacman", "-Q"],
}
# The role's package manager and the package database it reads first (package_facts' manager names).
PACKAGE_DATABASES: dict[str, str] = {"apt": "apt", "dnf": "rpm", "pacman": "pacman"}
# Asked only when the running kernel's build directory is missing: exit status 0 when a repository offers the package.
HEADERS_QUERIES: dict[str, list[str]] = {
    "apt": ["apt-cache", "show", "--no-all-versions"],
    "dnf": ["dnf", "-q", "info"],
    "pacman": ["pacman", "-Si"],
}
# apt: asked first, for a plain package name. apt-cache show looks a name up, and only when no package has it goes on to
# read it as a regular expression (a dot is one) and match it against every package name: 0.5-1 s on Debian 12 for a
# running kernel whose headers package no repository has (a container's, a custom kernel's), against 0.03 s for this
# listing of every name APT knows (virtual and only referenced names too) that starts with the name. A name it does not
# list is not offered: the regular expression never finds that package, only others whose names contain it.
APT_KNOWN_NAMES_QUERY: list[str] = ["apt-cache", "--all-names", "pkgnames"]
# A package name as Debian policy allows it (no architecture qualifier, no glob or pattern).
_APT_PLAIN_NAME = re.compile(r"[a-z0-9][a-z0-9+.-]+\Z")
# dpkg's current-state letter (the second of db:Status-Abbrev) of a package that is not installed: n (not-installed)
# and c (config-files: removed, its configuration files kept). Every other state has an installed version, which
# python-apt (package_facts) lists too.
_DPKG_NOT_INSTALLED = ("n", "c")


# apt: the versions the repositories offer, in the same call: what install_apt.yml's own `apt-cache madison` would
# answer, asked here when the role adds no repository in the run (the lists cannot change before the install). One line
# per offered version, "name | version | source", nothing for a name no repository has; exit status 0 either way.
APT_OFFERED_QUERY: list[str] = ["apt-cache", "madison"]
# Names apt-cache reads as they are, never as a pattern: apt reads a name with one of .?+*|[^$ as a regular expression
# when no package has it (matched against every package name), and name:arch as an architecture-qualified name.
_APT_LITERAL_NAME = re.compile(r"[a-z0-9][a-z0-9-]*\Z")


def apt_offered_names(names: t.Any) -> list[str]:
    """The names of ``names`` that ``APT_OFFERED_QUERY`` is asked about, sorted and once each: the literal ones."""
    return sorted({str(n) for n in as_list(names) if _APT_LITERAL_NAME.match(str(n or ""))})


def parse_offered(output: t.Any) -> list[list[str]]:
    """``apt-cache madison`` output as rows of its ``|``-separated fields, stripped (name, version, source), as the role
    splits its own call's lines."""
    return [[field.strip() for field in line.split("|")] for line in str(output or "").splitlines() if line.strip()]


def database_order(pkg_mgr: str) -> list[str]:
    """The package databases to read, the role's package manager's first (a host can carry a second database: an
    emulated EL host on Debian, alien); the others are read only when it lists no package (package_facts' ``auto``)."""
    first = PACKAGE_DATABASES.get(str(pkg_mgr or ""))
    return ([first] if first else []) + [db for db in ("apt", "pacman", "rpm") if db != first]


def parse_installed(database: str, output: t.Any) -> dict[str, list[dict[str, t.Any]]]:
    """Installed packages by name from ``INSTALLED_QUERIES[database]``'s output, in package_facts' form.

    apt: a package of another architecture than dpkg's own is named ``name:arch``, as python-apt names it; ``all`` is
    the native one. rpm: ``epoch`` is an int or None, ``version`` without epoch and release, as package_facts reports
    it. pacman: ``version`` as pacman prints it.
    """
    text = str(output or "")
    packages: dict[str, list[dict[str, t.Any]]] = {}
    if database == "apt":
        rows = [line.split("\t") for line in text.splitlines()]
        rows = [row for row in rows if len(row) == 4 and row[0] and len(row[2]) >= 2 and row[2][1] not in _DPKG_NOT_INSTALLED]
        native = next((row[1] for row in rows if row[0] == "dpkg"), None)
        for name, arch, _status, version in rows:
            key = name if arch in ("all", native) or native is None else "%s:%s" % (name, arch)
            packages.setdefault(key, []).append({"name": name, "version": version, "arch": arch, "source": "apt"})
    elif database == "rpm":
        for line in text.splitlines():
            row = line.split("\t")
            if len(row) != 5 or not row[0]:
                continue
            epoch = int(row[1]) if row[1].isdigit() else None
            packages.setdefault(row[0], []).append(
                {"name": row[0], "epoch": epoch, "version": row[2], "release": row[3], "arch": row[4], "source": "rpm"})
    elif database == "pacman":
        for line in text.splitlines():
            row = line.split()
            if len(row) == 2:
                packages.setdefault(row[0], []).append({"name": row[0], "version": row[1], "source": "pacman"})
    else:
        raise ValueError("package database %r is not one of %s" % (database, ", ".join(INSTALLED_QUERIES)))
    return packages


def select_installed(packages: Mapping[str, t.Any], names: t.Any, prefixes: t.Any) -> dict[str, t.Any]:
    """The installed packages the role reads: those named, and those whose name starts with one of ``prefixes``."""
    wanted = set(str(n) for n in as_list(names))
    starts = tuple(str(p) for p in as_list(prefixes) if str(p))
    return {name: packages[name] for name in sorted(packages) if name in wanted or (starts and name.startswith(starts))}


def apt_name_check(pkg_mgr: t.Any, name: t.Any) -> bool:
    """Whether to ask ``APT_KNOWN_NAMES_QUERY`` before ``HEADERS_QUERIES['apt']``: apt, and a plain package name."""
    return pkg_mgr == "apt" and bool(_APT_PLAIN_NAME.match(str(name or "")))


def apt_name_unknown(output: t.Any, name: t.Any) -> bool:
    """Whether ``apt-cache --all-names pkgnames <name>`` printed no line that is exactly ``name``."""
    return str(name) not in str(output or "").splitlines()


# What ``mokutil --sb-state`` prints on its first line for the two states it can read.
SB_STATE_LINES = {"SecureBoot enabled": True, "SecureBoot disabled": False}


def secure_boot_enabled(mokutil_found: bool, output: t.Any) -> bool | None:
    """Secure Boot from ``mokutil --sb-state``: True or False only when a line of its output is exactly "SecureBoot
    enabled" or "SecureBoot disabled" (and not both); None (unknown) without mokutil, when it could not run or printed
    neither (on a machine without EFI variables it exits non-zero and says so, and a container cannot read them)."""
    if not mokutil_found:
        return None
    found = {SB_STATE_LINES[line.strip()] for line in str(output or "").splitlines() if line.strip() in SB_STATE_LINES}
    return found.pop() if len(found) == 1 else None


def secure_boot_unknown(mokutil: str, mokutil_found: bool, rc: int | None, output: t.Any, error: t.Any) -> str | None:
    """Why ``secure_boot_enabled`` could not tell (None when it could), for the plan's error."""
    if not mokutil_found:
        return "%s does not exist" % mokutil
    if secure_boot_enabled(True, output) is not None:
        return None
    said = " ".join(" ".join(str(part or "") for part in (output, error)).split())[:200]
    if rc is None:
        return "%s --sb-state could not run: %s" % (mokutil, said or "no reason given")
    return "%s --sb-state exited %d and printed %s" % (mokutil, rc, repr(said) if said else "nothing")


def mentions_any(text: t.Any, needles: t.Any) -> bool:
    """Whether a line of ``text`` contains one of ``needles`` (a repository definition naming NVIDIA's hosts)."""
    words = [str(n) for n in as_list(needles) if str(n)]
    return any(word in line for line in str(text or "").splitlines() for word in words)
