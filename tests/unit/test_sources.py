# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Every external fact a role ships as a default has its line in docs/sources.md.

The facts are taken from roles/*/vars/*.yml and roles/*/defaults/main.yml: key fingerprints (40 hex digits),
repository and key URLs, and package names (every string under a key that names packages). A Jinja expression in
such a string stands for a value the host gives: ``{{ __nvidia_driver_cuda_arch }}`` is written ``{cuda_arch}`` in
docs/sources.md; the package names a conditional expression chooses between are each a fact of their own.

docs/sources.md holds them in tables ``| facts | checked against | status |``: the status is ``confirmed``, with at
least two sources separated by ``;``, or ``unconfirmed``, and then the roles must not rely on the fact silently (the
table says what fails instead).
"""

from __future__ import annotations

import glob
import os
import re

import pytest
import yaml

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
SOURCES = os.path.join(ROOT, "docs", "sources.md")

_FINGERPRINT = re.compile(r"^[0-9A-F]{40}$")
_PACKAGE = re.compile(r"^[a-z0-9][a-z0-9+._{}-]*$")
_JINJA = re.compile(r"\{\{(.*?)\}\}", re.S)
_QUOTED = re.compile(r"'([^']*)'|\"([^\"]*)\"")
_PREFIX = re.compile(r"^_*(nvidia_driver_|gpu_settings_|nvidia_container_toolkit_)?")
# A key that names packages: everything below it is a package name.
_PACKAGE_KEY = re.compile(r"packages|prerequisites|userland|bindings|pinning|_package$")


def _placeholder(expression: str) -> str:
    """``{{ __nvidia_driver_cuda_arch }}`` -> ``{cuda_arch}``; ``{{ ansible_facts['kernel'] }}`` -> ``{kernel}``."""
    words = re.findall(r"[A-Za-z_][A-Za-z0-9_]*", expression)
    return "{%s}" % _PREFIX.sub("", words[-1]) if words else "{}"


def _normalise(text: str) -> list[str]:
    """The facts one string holds: itself with placeholders, or the literals a conditional chooses between."""
    text = " ".join(str(text).split())
    expressions = _JINJA.findall(text)
    if not expressions:
        return [text]
    if any(re.search(r"\bif\b", e) for e in expressions):
        # The values a conditional chooses between: 'a' if ... else 'b' (not the operands it compares).
        chosen = [m for e in expressions for m in re.findall(r"'([^']*)'\s+if\b|\belse\s+'([^']*)'", e)]
        return [a or b for a, b in chosen if _PACKAGE.match(a or b)]
    if _JINJA.sub("", text).strip() == "":
        return []  # a reference to another variable, not a fact
    return [_JINJA.sub(lambda m: _placeholder(m.group(1)), text)]


def _walk(value, in_packages=False, key=""):
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _walk(v, in_packages or bool(_PACKAGE_KEY.search(str(k))), str(k))
    elif isinstance(value, list):
        for v in value:
            yield from _walk(v, in_packages, key)
    elif isinstance(value, str):
        for fact in _normalise(value):
            if _FINGERPRINT.match(fact):
                yield "fingerprint", fact
            elif "://" in fact:
                for url in re.findall(r"https?://\S+", fact):
                    yield "url", url
            elif fact.endswith(".pub") and not fact.startswith("/"):
                yield "url", fact  # a key file under a repository URL given by another variable
            elif in_packages and _PACKAGE.match(fact):
                yield "package", fact


def role_facts() -> dict[tuple[str, str], list[str]]:
    """{(kind, fact): [files]} over the roles' vars and defaults."""
    found: dict[tuple[str, str], list[str]] = {}
    files = sorted(glob.glob(os.path.join(ROOT, "roles", "*", "vars", "*.yml")) + glob.glob(os.path.join(ROOT, "roles", "*", "defaults", "main.yml")))
    for path in files:
        with open(path, encoding="utf-8") as handle:
            data = yaml.safe_load(handle) or {}
        for kind, fact in _walk(data):
            found.setdefault((kind, fact), []).append(os.path.relpath(path, ROOT))
    return found


def source_rows() -> list[dict[str, object]]:
    rows = []
    with open(SOURCES, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else []
            if len(cells) != 3 or not cells[0].count("`") or set(cells[0]) <= set("-: "):
                continue
            rows.append({"line": number, "facts": re.findall(r"`([^`]+)`", cells[0]), "sources": [s for s in cells[1].split(";") if s.strip()],
                         "status": cells[2].lower()})
    return rows


def test_every_fact_in_the_roles_has_a_line_in_sources_md():
    documented = {fact for row in source_rows() for fact in row["facts"]}
    missing = sorted("%s %s (%s)" % (kind, fact, ", ".join(sorted(set(files)))) for (kind, fact), files in role_facts().items() if fact not in documented)
    assert not missing, "facts without a line in docs/sources.md:\n" + "\n".join(missing)


def test_every_line_is_confirmed_by_two_sources_or_marked_unconfirmed():
    bad = []
    for row in source_rows():
        if row["status"].startswith("confirmed"):
            if len(row["sources"]) < 2:
                bad.append("line %d: confirmed by %d source(s): %s" % (row["line"], len(row["sources"]), row["facts"]))
        elif not row["status"].startswith("unconfirmed"):
            bad.append("line %d: status must be confirmed or unconfirmed, got %r" % (row["line"], row["status"]))
    assert not bad, "\n".join(bad)


def test_the_default_fingerprints_are_the_publishers():
    # The wrong RHEL/Fedora value shipped before (issue #17) must not come back.
    facts = {fact for (kind, fact) in role_facts() if kind == "fingerprint"}
    assert "610C7B14E068A878070D4F8FCE1F40A0D42D0685" not in facts
    assert {"610C7B14E068A878070DA4E99CD0A493D42D0685", "EB693B3035CD5710E231E123A4B469963BF863CC",
            "C95B321B61E88C1809C4F759DDCAE044F796ECB0"} <= facts
    confirmed = {fact for row in source_rows() if row["status"].startswith("confirmed") for fact in row["facts"]}
    assert facts <= confirmed, "fingerprints not confirmed in docs/sources.md: %s" % sorted(facts - confirmed)


@pytest.mark.parametrize("text, facts", [
    ("https://x/{{ __nvidia_driver_cuda_arch }}/", ["https://x/{cuda_arch}/"]),
    ("linux-headers-{{ ansible_facts['kernel'] }}", ["linux-headers-{kernel}"]),
    ("{{ 'nvidia-open-dkms' if __nvidia_driver_arch_dkms | bool else 'nvidia-open' }}", ["nvidia-open-dkms", "nvidia-open"]),
    ("{{ __nvidia_container_toolkit_packages_cdi if a else b }}", []),
    ("{{ a if mode == 'cdi' else b }}", []),
    ("{{ __nvidia_driver_cuda_repo_base }}", []),
    ("nvidia-dkms-{branch}-open", ["nvidia-dkms-{branch}-open"]),
])
def test_normalisation(text, facts):
    assert _normalise(text) == facts
