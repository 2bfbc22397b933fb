# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""One apt repository's package lists and the versions it offers: the commands and the parse of their output.

Private to this collection: no compatibility promise outside gpuhost.nvidia.

repository_key fetches the lists of the one source it wrote (not every source of the host: an unreachable one of the
user's cannot fail the run, and one repository costs about 0.3 s instead of seconds) and asks apt which versions of
some packages the lists now offer, in the same call as the key and the source file (#21: one remote call, not three).
"""

from __future__ import annotations

import re

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
