"""The toolkit's CVE floor: releases without the fixes of CVE-2024-0132 (1.16.2), CVE-2025-23359 (1.17.4) and
CVE-2025-23266 (1.17.8) are refused unless the user names every open CVE (docs/sources.md lists the sources)."""

from __future__ import annotations

import pytest

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _toolkit

ALL = ["CVE-2024-0132", "CVE-2025-23359", "CVE-2025-23266"]


@pytest.mark.parametrize("version, expected", [
    ("1.16.1", ALL),
    ("1.16.2", ["CVE-2025-23359", "CVE-2025-23266"]),
    ("1.17.3-1", ["CVE-2025-23359", "CVE-2025-23266"]),
    ("1.17.4", ["CVE-2025-23266"]),
    ("0:1.17.7-1", ["CVE-2025-23266"]),
    ("1.17.8", []),
    ("1.17.8-1", []),
    ("1.18.0", []),
    ("1.20.0-1.el9", []),
    ("banana", []),
])
def test_open_cves(version, expected):
    assert _toolkit.open_cves(version) == expected


def test_floor_is_1_17_8():
    assert _toolkit.SECURE_MIN_VERSION == "1.17.8"


def test_request_below_the_floor_is_refused_naming_the_cves_and_the_fix():
    errors = _toolkit.request_errors({"version": "1.17.3"})
    assert len(errors) == 1
    assert "1.17.3 lacks the fixes of CVE-2025-23359, CVE-2025-23266" in errors[0]
    assert "Install 1.17.8 or newer" in errors[0]
    assert "nvidia_container_toolkit_accept_cves: [CVE-2025-23359, CVE-2025-23266]" in errors[0]


def test_accepting_only_some_cves_is_not_enough():
    errors = _toolkit.request_errors({"version": "1.16.2", "accept_cves": ["CVE-2025-23266"]})
    assert len(errors) == 1 and "lacks the fixes of CVE-2025-23359 (" in errors[0]


def test_accepting_every_open_cve_installs():
    assert _toolkit.request_errors({"version": "1.17.4", "accept_cves": ["CVE-2025-23266"]}) == []
    assert _toolkit.request_errors({"version": "1.16.0", "accept_cves": ALL}) == []


@pytest.mark.parametrize("accepted, fragment", [
    ("CVE-2025-23266", "must be a list"),
    (["CVE-2025-99999"], "'CVE-2025-99999'"),
    (["cve-2025-23266"], "'cve-2025-23266'"),
    (["CVE-2025-23266\n"], "'CVE-2025-23266\\n'"),
    ([1], "1: list only"),
])
def test_accept_cves_is_validated(accepted, fragment):
    errors = _toolkit.request_errors({"version": "1.18.0", "accept_cves": accepted})
    assert len(errors) == 1 and fragment in errors[0], errors


def test_the_repository_candidate_is_checked_too():
    # No version requested: the repository's newest is what gets installed, and it must clear the floor as well.
    errors = _toolkit.candidate_errors("1.17.7-1", {"mode": "full"})
    assert len(errors) == 1 and "1.17.7 lacks the fixes of CVE-2025-23266" in errors[0]
    assert _toolkit.candidate_errors("1.17.7-1", {"mode": "full", "accept_cves": ["CVE-2025-23266"]}) == []
    assert _toolkit.candidate_errors("1.17.8-1", {"mode": "full"}) == []
