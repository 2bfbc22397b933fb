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


# NVIDIA's install guide writes this file (its signed-by keyring); the collection's role writes a deb822 file with
# its own keyring for the same repository: apt refuses both with "Conflicting values set for option Signed-By".
MANUAL_LIST = ("deb [signed-by=/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg] "
               "https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH) /\n")
OURS = """Types: deb
URIs: https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH)/
Suites: /
Signed-By: /usr/share/keyrings/gpuhost-nvidia-container-toolkit.gpg
"""


def signed_by_check(root: str) -> dict[str, str]:
    host = {"apt_sources": _doctor.read_apt_sources(root)}
    return _doctor.check_apt_signed_by({}, host, dict(_doctor.DEFAULTS))


def test_two_signed_by_keys_for_the_toolkit_repository_fail(tmp_path):
    write(str(tmp_path), "/etc/apt/sources.list.d/nvidia-container-toolkit.list", MANUAL_LIST)
    write(str(tmp_path), "/etc/apt/sources.list.d/gpuhost-nvidia-container-toolkit.sources", OURS)
    result = signed_by_check(str(tmp_path))
    assert result["status"] == "fail"
    assert "Conflicting values set for option Signed-By" in result["evidence"]
    assert "/etc/apt/sources.list.d/nvidia-container-toolkit.list (signed-by /usr/share/keyrings/nvidia-container-toolkit-keyring.gpg)" \
        in result["evidence"]
    assert "nvidia_container_toolkit_replace_foreign_repo_files" in result["fix"]


def test_the_same_key_twice_and_other_repositories_pass(tmp_path):
    write(str(tmp_path), "/etc/apt/sources.list.d/nvidia-container-toolkit.list",
          MANUAL_LIST.replace("nvidia-container-toolkit-keyring", "gpuhost-nvidia-container-toolkit"))
    write(str(tmp_path), "/etc/apt/sources.list.d/gpuhost-nvidia-container-toolkit.sources", OURS)
    write(str(tmp_path), "/etc/apt/sources.list",
          "deb http://deb.debian.org/debian bookworm main\n# deb [signed-by=/x] http://deb.debian.org/debian bookworm main\n")
    assert signed_by_check(str(tmp_path))["status"] == "ok"


def test_a_disabled_stanza_and_an_inline_key(tmp_path):
    write(str(tmp_path), "/etc/apt/sources.list.d/nvidia-container-toolkit.list", MANUAL_LIST)
    write(str(tmp_path), "/etc/apt/sources.list.d/gpuhost-nvidia-container-toolkit.sources", OURS + "Enabled: no\n")
    assert signed_by_check(str(tmp_path))["status"] == "ok"
    inline = OURS.replace("Signed-By: /usr/share/keyrings/gpuhost-nvidia-container-toolkit.gpg",
                          "Signed-By:\n -----BEGIN PGP PUBLIC KEY BLOCK-----\n .\n mQINBF...\n -----END PGP PUBLIC KEY BLOCK-----")
    write(str(tmp_path), "/etc/apt/sources.list.d/gpuhost-nvidia-container-toolkit.sources", inline)
    result = signed_by_check(str(tmp_path))
    assert result["status"] == "fail" and "(inline key" in result["evidence"]


def test_not_an_apt_host(tmp_path):
    assert signed_by_check(str(tmp_path))["status"] == "ok"


def cdi_check(root: str) -> dict[str, str]:
    spec = os.path.join(root, "var/run/cdi/nvidia.yaml")
    specs = [{"path": "/var/run/cdi/nvidia.yaml", "exists": True, "text": open(spec, encoding="utf-8").read()}] if os.path.exists(spec) else []
    host = dict(_doctor.read_toolkit_host(root), cdi_specs=specs)
    return _doctor.check_cdi_version({}, host, dict(_doctor.DEFAULTS))


def test_a_spec_newer_than_the_engine_loads_fails_naming_the_upgrade(tmp_path):
    write(str(tmp_path), "/var/lib/dpkg/status", "Package: podman\nStatus: install ok installed\nVersion: 4.9.3+ds1-1ubuntu0.2\n")
    write(str(tmp_path), "/var/run/cdi/nvidia.yaml", "---\ncdiVersion: 0.7.0\nkind: nvidia.com/gpu\n")
    result = cdi_check(str(tmp_path))
    assert result["status"] == "fail"
    assert "podman 4.9.3 loads CDI specs up to cdiVersion 0.6.0, not 0.7.0: upgrade podman to 5.1.0 or later" in result["evidence"]


def test_a_spec_the_engines_load_passes(tmp_path):
    write(str(tmp_path), "/var/lib/dpkg/status", "Package: containerd\nStatus: install ok installed\nVersion: 1.7.24~ds1-6\n")
    write(str(tmp_path), "/var/run/cdi/nvidia.yaml", "---\ncdiVersion: 0.5.0\nkind: nvidia.com/gpu\n")
    result = cdi_check(str(tmp_path))
    assert result["status"] == "ok" and "containerd 1.7.24" in result["evidence"]


def test_no_spec_or_no_engine_is_ok(tmp_path):
    assert cdi_check(str(tmp_path))["status"] == "ok"
