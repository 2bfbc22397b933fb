# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Which CDI spec versions (cdiVersion) each container engine release can load.

Private to this collection: no compatibility promise outside gpuhost.nvidia.

An engine loads CDI specs through the CDI library it vendors (tags.cncf.io/container-device-interface, formerly
github.com/container-orchestrated-devices/container-device-interface), and that library refuses a spec whose
cdiVersion is newer than its own ``CurrentVersion`` ("invalid version", pkg/cdi/spec.go validateVersion). The tables
below are the library version each release's go.mod / vendor.mod pins, mapped to that library's CurrentVersion, read
from the engines' and the library's git tags (docs/sources.md). Each entry is (first engine release, newest spec
version it loads); an engine release takes the entry of the newest release not after it.
"""

from __future__ import annotations

import re
import typing as t

ENGINE_CDI: dict[str, tuple[tuple[str, str], ...]] = {
    # containerd/containerd go.mod: CDI support (enable_cdi) from 1.7.0.
    "containerd": (("1.7.0", "0.5.0"), ("1.7.12", "0.6.0"), ("1.7.16", "0.7.0"), ("1.7.27", "0.8.0"), ("2.0.0", "0.8.0"),
                   ("2.0.5", "1.0.0"), ("2.1.0", "1.0.0"), ("2.2.1", "1.1.0")),
    # moby/moby vendor.mod: CDI in dockerd from 25.0 (25.0.17 took a newer library than 26.0.0 shipped with).
    "docker": (("25.0.0", "0.6.0"), ("25.0.17", "0.8.0"), ("26.0.0", "0.6.0"), ("26.1.0", "0.7.0"), ("27.4.0", "0.8.0"),
               ("28.1.0", "1.0.0"), ("29.2.0", "1.1.0")),
    # containers/podman go.mod.
    "podman": (("4.1.0", "0.4.0"), ("4.3.0", "0.5.0"), ("4.7.0", "0.6.0"), ("5.1.0", "0.7.0"), ("5.2.0", "0.8.0"),
               ("5.5.0", "1.0.0")),
}
# The packages that carry each engine, as Debian, Ubuntu, Docker's repository and Arch name them.
ENGINE_PACKAGES: dict[str, tuple[str, ...]] = {
    "containerd": ("containerd", "containerd.io"),
    "docker": ("docker-ce", "docker.io", "moby-engine", "docker"),
    "podman": ("podman",),
}


def version_tuple(version: t.Any) -> tuple[int, ...]:
    """(27, 4, 0) for 27.4.0, 5:27.4.0-1~debian.12~bookworm, 1.7.24~ds1-6 or 4.9.3+ds1-1ubuntu0.2; () for no version."""
    text = str(version or "").split(":", 1)[-1]
    match = re.match(r"^(\d+(?:\.\d+)*)", text)
    return tuple(int(p) for p in match.group(1).split(".")) if match else ()


def upstream(version: t.Any) -> str:
    return ".".join(str(p) for p in version_tuple(version))


def max_spec_version(engine: str, version: t.Any) -> str | None:
    """The newest cdiVersion ``engine`` at ``version`` loads; None when the table does not know (an older release without
    CDI support, or an engine not listed)."""
    have = version_tuple(version)
    best = None
    for first, spec in ENGINE_CDI.get(engine, ()):
        if have and version_tuple(first) <= have:
            best = spec
    return best


def first_release_for(engine: str, spec_version: str, at_least: t.Any = None) -> str | None:
    """The first release of ``engine`` (not older than ``at_least``) that loads ``spec_version``; None when none known."""
    floor = version_tuple(at_least)
    for first, spec in ENGINE_CDI.get(engine, ()):
        if version_tuple(spec) >= version_tuple(spec_version) and version_tuple(first) >= floor:
            return first
    return None


def rejections(spec_version: str, engines: t.Mapping[str, t.Any]) -> list[str]:
    """One sentence per installed engine that cannot load a spec of ``spec_version``, naming the upgrade.
    ``engines``: {engine: installed version}."""
    out = []
    for engine, version in sorted(engines.items()):
        limit = max_spec_version(engine, version)
        if limit is None or version_tuple(spec_version) <= version_tuple(limit):
            continue
        upgrade = first_release_for(engine, spec_version, version)
        out.append("%s %s loads CDI specs up to cdiVersion %s, not %s: %s" % (
            engine, upstream(version), limit, spec_version,
            "upgrade %s to %s or later" % (engine, upgrade) if upgrade else "no %s release known to this collection loads it" % engine))
    return out


_CDI_VERSION = re.compile(r"""^\s*["']?cdiVersion["']?\s*:\s*["']?([0-9]+\.[0-9]+\.[0-9]+)["']?\s*,?\s*$""", re.MULTILINE)


def spec_version(text: str | None) -> str | None:
    """The cdiVersion a spec (YAML or JSON) declares; None when it declares none this reads."""
    match = _CDI_VERSION.search(text or "")
    return match.group(1) if match else None
