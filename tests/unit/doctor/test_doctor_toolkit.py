# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The doctor's container toolkit checks, on package databases and files under a test root."""

from __future__ import annotations

import os
import typing as t

import pytest

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _doctor

DPKG_STATUS = """Package: libnvidia-container1
Status: install ok installed
Version: {lib}

Package: nvidia-container-toolkit-base
Status: {base_status}
Priority: optional
Version: {base}
Description: NVIDIA Container Toolkit Base

Package: bash
Status: install ok installed
Version: 5.2.15-2+b7
"""


def write(root: str, path: str, text: str) -> None:
    full = os.path.join(root, path.lstrip("/"))
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w", encoding="utf-8") as handle:
        handle.write(text)


def toolkit_check(root: str, **params: t.Any) -> dict[str, str]:
    host = _doctor.read_toolkit_host(root)
    return _doctor.check_toolkit_cves({}, host, dict(_doctor.DEFAULTS, **params))


@pytest.mark.parametrize("base, status, fragment", [
    ("1.17.7-1", "fail", "toolkit 1.17.7 (dpkg) lacks the fixes of CVE-2025-23266 (fixed in 1.17.8)"),
    ("1.16.1-1", "fail", "CVE-2024-0132 (fixed in 1.16.2), CVE-2025-23359 (fixed in 1.17.4), CVE-2025-23266"),
    ("1.17.8-1", "ok", "toolkit 1.17.8 (dpkg) has the fixes of CVE-2024-0132, CVE-2025-23359, CVE-2025-23266"),
    ("1.20.0-1", "ok", "toolkit 1.20.0"),
])
def test_dpkg_toolkit_against_the_floor(tmp_path, base, status, fragment):
    write(str(tmp_path), "/var/lib/dpkg/status", DPKG_STATUS.format(lib="1.17.8-1", base=base, base_status="install ok installed"))
    result = toolkit_check(str(tmp_path))
    assert result["status"] == status and fragment in result["evidence"], result
    assert ("Upgrade the toolkit to 1.17.8" in result["fix"]) == (status == "fail")


def test_a_removed_package_does_not_count(tmp_path):
    # deinstall ok config-files: the base package is gone; the library that is still installed tells the version.
    write(str(tmp_path), "/var/lib/dpkg/status", DPKG_STATUS.format(lib="1.17.3-1", base="1.18.0-1", base_status="deinstall ok config-files"))
    result = toolkit_check(str(tmp_path))
    assert result["status"] == "fail" and "toolkit 1.17.3 (dpkg)" in result["evidence"]


def test_pacman_local_database(tmp_path):
    write(str(tmp_path), "/var/lib/pacman/local/nvidia-container-toolkit-1.17.6-1/desc",
          "%NAME%\nnvidia-container-toolkit\n\n%VERSION%\n1.17.6-1\n\n%BASE%\nnvidia-container-toolkit\n")
    result = toolkit_check(str(tmp_path))
    assert result["status"] == "fail" and "toolkit 1.17.6 (pacman)" in result["evidence"]


def test_no_toolkit_is_ok(tmp_path):
    write(str(tmp_path), "/var/lib/dpkg/status", "Package: bash\nStatus: install ok installed\nVersion: 5.2\n")
    assert toolkit_check(str(tmp_path))["status"] == "ok"


def test_a_binary_without_a_package_is_unknown_not_ok(tmp_path):
    write(str(tmp_path), "/usr/bin/nvidia-ctk", "")
    result = toolkit_check(str(tmp_path))
    assert result["status"] == "warn" and "version unknown" in result["evidence"] and "toolkit_version" in result["fix"]


def test_the_given_version_wins(tmp_path):
    write(str(tmp_path), "/usr/bin/nvidia-ctk", "")
    assert toolkit_check(str(tmp_path), toolkit_version="1.17.4")["status"] == "fail"
    assert toolkit_check(str(tmp_path), toolkit_version="1.18.0")["status"] == "ok"
    assert toolkit_check(str(tmp_path), toolkit_version="garbage")["status"] == "warn"


def test_the_check_is_listed():
    assert "toolkit_cves" in _doctor.CHECK_IDS
    assert _doctor.check_toolkit_cves in _doctor.CHECKS
