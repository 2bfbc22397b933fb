# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""One apt repository's package lists and the versions it offers: the commands and the parse of their output.

Private to this collection: no compatibility promise outside gpuhost.nvidia.

repository_key fetches the lists of the one source it wrote (not every source of the host: an unreachable one of the
user's cannot fail the run, and one repository costs about 0.3 s instead of seconds) and asks apt which versions of
some packages the lists now offer, in the same call as the key and the source file (one remote call, not three).
"""

from __future__ import annotations

import fnmatch
import re
import typing as t

# A Debian package name (Debian Policy 5.6.1): lower case letters, digits and + - . , at least two characters,
# starting with a letter or digit. Anything else never reaches apt's command line.
PACKAGE_NAME_RE = re.compile(r"[a-z0-9][a-z0-9+.-]+")
PACKAGE_NAME = "a Debian package name (lower case letters, digits and + - . only, starting with a letter or digit)"

# What apt reads from sources.list.d: a deb822 .sources file or a one-line .list file.
SOURCES_SUFFIXES = (".sources", ".list")


def lists_update_argv(sources_file: str) -> list[str]:
    """apt-get update of ``sources_file`` alone, keeping the other sources' lists as they are."""
    return ["apt-get", "update", "-o", "Dir::Etc::sourcelist=%s" % sources_file, "-o", "Dir::Etc::sourceparts=-",
            "-o", "APT::Get::List-Cleanup=0"]


def madison_argv(names: list[str]) -> list[str]:
    """apt-cache madison of ``names``: one line per version and source, newest first."""
    return ["apt-cache", "madison"] + list(names)


def sources_file_error(path: str) -> str | None:
    """Why ``path`` (an absolute path already checked) is not a file apt reads sources from, or None."""
    if not path.endswith(SOURCES_SUFFIXES):
        return "%r is not a .sources or .list file, which apt reads sources from" % path
    return None


def parse_madison(text: str, names: list[str]) -> dict[str, list[str]]:
    """Each of ``names`` with the versions ``apt-cache madison`` printed for it, in its order, each version once.

    A line is ``package | version | source``; a name apt knows nothing about prints no line and maps to [].
    """
    versions: dict[str, list[str]] = {name: [] for name in names}
    for line in text.splitlines():
        fields = [field.strip() for field in line.split("|")]
        if len(fields) < 3 or fields[0] not in versions or not fields[1]:
            continue
        if fields[1] not in versions[fields[0]]:
            versions[fields[0]].append(fields[1])
    return versions


# The install transaction of gpuhost_apply (option ``packages``): the driver's packages, with the requests of the
# roles after it, installed in the call that writes their preferences and the modprobe.d files, instead of a call of
# Ansible's apt module after a call of its own. The same apt-get options as ansible.builtin.apt (state present,
# install_recommends false): no prompt, the old conffile kept, a 60 s wait for dpkg's lock.

# An install spec: a package name, or name=version, where the version is a Debian version or a glob of one (apt-get
# matches ``580.*``): letters, digits and . + ~ : - and *. Anything else never reaches apt-get's command line.
SPEC_RE = re.compile(r"(%s)(?:=([A-Za-z0-9.+~:*-]+))?\Z" % PACKAGE_NAME_RE.pattern)
SPEC = PACKAGE_NAME.replace("a Debian package name", "a package name", 1) + ", or name=version (letters, digits and . + ~ : - *)"
APT_ENV = {"DEBIAN_FRONTEND": "noninteractive", "DEBIAN_PRIORITY": "critical", "LC_ALL": "C", "LANGUAGE": "C"}
INSTALL_OPTIONS = ["-y", "-o", "Dpkg::Options::=--force-confdef", "-o", "Dpkg::Options::=--force-confold",
                   "-o", "DPkg::Lock::Timeout=60", "--no-install-recommends"]


def spec_problem(spec: t.Any) -> str | None:
    """Why ``spec`` is not an install spec; None when it is."""
    if not isinstance(spec, str) or not SPEC_RE.match(spec):
        return "%r is not %s" % (spec, SPEC)
    return None


def split_spec(spec: str) -> tuple[str, str | None]:
    """``name=version`` as (name, version); a plain name as (name, None)."""
    name, _sep, version = spec.partition("=")
    return name, (version or None)


def status_argv(names: t.Sequence[str]) -> list[str]:
    """dpkg-query of ``names``: one ``package<TAB>version<TAB>status`` line each (a name dpkg never saw prints none)."""
    return ["dpkg-query", "-W", "-f=${Package}\t${Version}\t${db:Status-Abbrev}\n"] + list(names)


def parse_status(text: str) -> dict[str, str]:
    """The installed packages of a :func:`status_argv` answer, with their versions.

    Installed means dpkg's current status is ``i`` (the second letter of ``db:Status-Abbrev``): a package that is
    only unpacked, half-configured or removed with its conffiles kept is not, and apt-get install completes it."""
    installed: dict[str, str] = {}
    for line in text.splitlines():
        fields = line.split("\t")
        if len(fields) == 3 and len(fields[2]) >= 2 and fields[2][1] == "i":
            installed[fields[0]] = fields[1]
    return installed


def specs_left(specs: t.Sequence[str], installed: t.Mapping[str, str]) -> list[str]:
    """The specs the host does not satisfy: the package is not installed, or its version does not match the spec's.

    As ansible.builtin.apt's ``state: present``: an installed package is left alone whatever its candidate, and a
    version spec is matched as a glob (``580.*``)."""
    left = []
    for spec in specs:
        name, version = split_spec(spec)
        have = installed.get(name)
        if have is None or (version is not None and not fnmatch.fnmatchcase(have, version)):
            left.append(spec)
    return left


def install_argv(specs: t.Sequence[str], allow_downgrade: bool = False, simulate: bool = False) -> list[str]:
    """apt-get install of ``specs``; ``simulate`` (check mode): apt-get's own dry run (``-s``), which changes nothing."""
    return (["apt-get"] + INSTALL_OPTIONS + (["--allow-downgrades"] if allow_downgrade else []) + (["-s"] if simulate else [])
            + ["install"] + list(specs))
