# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

import pytest

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _catalog
from ansible_collections.gpuhost.nvidia.plugins.module_utils._common import (
    cuda_version_from_int,
    device_id_from_nvml,
    driver_branch,
    normalize_bus_id,
)


@pytest.mark.parametrize(
    "value, expected",
    [
        ("00000000:18:00.0", "0000:18:00.0"),
        ("0000:2A:00.0", "0000:2a:00.0"),
        (b"00000000:DB:00.0", "0000:db:00.0"),
        ("00001580:00:00.0", "1580:00:00.0"),
        ("01:00.1", "0000:01:00.1"),
        ("not a bus id", None),
        (None, None),
    ],
)
def test_normalize_bus_id(value, expected):
    assert normalize_bus_id(value) == expected


@pytest.mark.parametrize(
    "value, expected",
    [
        ("233010DE", "10de:2330"),
        (0x20B010DE, "10de:20b0"),
        ("0x1EB810DE", "10de:1eb8"),
        ("000000DE", None),  # A10G VM capture: no device id
        ("[REDACTED]", None),
        ("12341002", None),  # not NVIDIA
    ],
)
def test_device_id_from_nvml(value, expected):
    assert device_id_from_nvml(value) == expected


def test_small_conversions():
    assert driver_branch("535.104.05") == "535"
    assert driver_branch("595.84") == "595"
    assert driver_branch(None) is None
    assert cuda_version_from_int(12040) == "12.4"
    assert cuda_version_from_int(13010) == "13.1"
    assert cuda_version_from_int(0) is None


@pytest.mark.parametrize(
    "value, arch",
    [
        ("9.0", "Hopper"),
        ("8.0", "Ampere"),
        ("8.6", "Ampere"),
        ("8.9", "Ada Lovelace"),
        ("7.5", "Turing"),
        ("7.0", "Volta"),
        ("6.1", "Pascal"),
        ("5.2", "Maxwell"),
        ("3.7", "Kepler"),
        ("10.0", "Blackwell"),
        ("12.0", "Blackwell"),
        ((9, 0), "Hopper"),
        ("10de:2330", "Hopper"),  # H100 SXM
        ("10de:2331", "Hopper"),  # H100 PCIe
        ("0x20b2", "Ampere"),  # A100 80GB
        ("10de:2204", "Ampere"),  # RTX 3090
        ("10de:2684", "Ada Lovelace"),  # RTX 4090
        ("10de:27b8", "Ada Lovelace"),  # L4
        ("10de:1eb8", "Turing"),  # T4
        ("10de:2184", "Turing"),  # GTX 1660 Ti (TU116, above the TU10x range)
        ("10de:1db6", "Volta"),  # V100 PCIe 32GB
        ("10de:15f8", "Pascal"),  # P100
        ("10de:1b81", "Pascal"),  # GTX 1070
        ("10de:102d", "Kepler"),  # K80
        ("10de:2bb4", "Blackwell"),  # RTX PRO 6000 Max-Q
        ("10de:2901", "Blackwell"),  # B200
        ("10de:ffff", None),
        ("4.0", None),
        (None, None),
    ],
)
def test_architecture(value, arch):
    assert _catalog.architecture(value) == arch


def test_compute_capability_from_device_id():
    assert _catalog.compute_capability_from_device_id("10de:102d") == "3.7"  # GK210, not GK110's 3.5
    assert _catalog.compute_capability_from_device_id("10de:1023") == "3.5"
    assert _catalog.compute_capability_from_device_id("10de:20b0") == "8.0"
    assert _catalog.compute_capability_from_device_id("10de:2237") == "8.6"
    assert _catalog.compute_capability_from_device_id("10de:15f8") == "6.0"
    assert _catalog.compute_capability_from_device_id("10de:1b81") == "6.1"
    assert _catalog.compute_capability_from_device_id("10de:0001") is None


@pytest.mark.parametrize(
    "driver, cuda, expected",
    [
        ("535", "12.2", True),
        ("535", "12.3", False),
        ("535.104.05", "12.2.2", True),
        ("535.86.10", "12.2.2", False),  # 12.2 Update 2 needs 535.104.05
        ("535.54.03", "12.2", True),
        ("535.43.02", "12.2", False),  # older than the 12.2 GA minimum
        ("470.82.01", "11.4", True),
        ("470.82.01", "11.5", False),
        ("550.54.15", "12.4.1", True),
        ("550.54.14", "12.4.1", False),
        ("580.65.06", "13.0", True),
        ("575.57.08", "13.0", False),
        ("595.58.03", "13.2", True),  # bare-branch minimum: any 595 driver
        ("590.48.01", "13.2", False),
        ("565", "12.7", True),
        ("999", "13.1", True),  # a branch newer than the table supports everything the table knows
        ("banana", "12.0", None),
        ("535", "twelve", None),
    ],
)
def test_cuda_supported(driver, cuda, expected):
    assert _catalog.cuda_supported(driver, cuda) is expected


def test_cuda_minor_version_compatibility():
    # 535 runs any 12.x toolkit through minor version compatibility, but not 13.x.
    assert _catalog.cuda_supported("535.104.05", "12.8", minor_version_compatibility=True) is True
    assert _catalog.cuda_supported("535.104.05", "12.8") is False
    assert _catalog.cuda_supported("535.104.05", "13.0", minor_version_compatibility=True) is False
    assert _catalog.cuda_supported("520.61.05", "12.0", minor_version_compatibility=True) is False


def test_branch_table_matches_public_captures():
    # What real drivers reported in the public nvidia-smi captures (see /work/shared/fixtures/SOURCES.md).
    reported = {"410": "10.0", "418": "10.1", "460": "11.2", "470": "11.4", "510": "11.6", "515": "11.7",
                "525": "12.0", "535": "12.2", "570": "12.8", "590": "13.1", "595": "13.2"}
    for branch, cuda in reported.items():
        assert _catalog.max_cuda_for_branch(branch) == cuda


def test_open_module_and_legacy_branches():
    assert _catalog.open_module_supported("Turing") is True
    assert _catalog.open_module_supported("Hopper") is True
    assert _catalog.open_module_supported("Pascal") is False
    assert _catalog.open_module_supported("Volta") is False
    assert _catalog.open_module_required("Blackwell") is True
    assert _catalog.open_module_required("Hopper") is False
    assert _catalog.open_module_supported("Unobtainium") is None
    assert _catalog.last_supported_branch("Kepler") == 470
    assert _catalog.last_supported_branch("Maxwell") == 580
    assert _catalog.last_supported_branch("Volta") == 580
    assert _catalog.last_supported_branch("Ampere") is None
    assert _catalog.normalize_architecture("ada lovelace") == "Ada Lovelace"


@pytest.mark.parametrize(
    "branch, cuda, expected",
    [
        ("620", "13.2", True),  # at least what 595 runs
        ("610", "12.8", True),
        ("610", "13.3", True),  # R610's nvidia-smi header: "CUDA UMD Version: 13.3" (docs/sources.md)
        ("610", "13.4", False),
        ("620", "13.3", True),  # at least what 610 runs
        ("615", "13.4", True),  # R615's nvidia-smi header: "CUDA UMD Version: 13.4" (docs/sources.md)
        ("615", "13.5", False),
        ("620", "13.4", True),  # at least what 615 runs
        ("620", "13.5", None),  # above every known maximum: no source says, the catalog does not guess
        ("620", "14.0", False),  # past the CUDA major NVIDIA's support matrix lists
        ("580", "13.1", False),
        ("590", "13.1", True),
    ],
)
def test_branches_580_to_620(branch, cuda, expected):
    assert _catalog.cuda_supported(branch, cuda) is expected


def test_branch_lifecycle_and_default():
    assert _catalog.branch_lifecycle(580) == {"designation": "Long Term Support Branch", "end_of_life": "2028-06"}
    assert _catalog.branch_lifecycle("595") == {"designation": "Production Branch", "end_of_life": "2027-03"}
    # Single-sourced lifecycles (610, 620) and those no source states (615) are not reported (docs/sources.md, unconfirmed).
    assert _catalog.branch_lifecycle(620) is None and _catalog.branch_lifecycle(610) is None and _catalog.branch_lifecycle(615) is None
    assert _catalog.branch_lifecycle(123) is None
    assert _catalog.DEFAULT_BRANCH == 580
    # The default drives every architecture the roles support.
    assert all((_catalog.last_supported_branch(a) or 10**6) >= _catalog.DEFAULT_BRANCH for a in ("Maxwell", "Pascal", "Volta", "Blackwell"))
    assert _catalog.known_branches(580) == [580, 590, 595, 610, 615, 620]
    assert _catalog.is_known_branch("610") and not _catalog.is_known_branch(600)


def test_last_cuda_toolkit_per_architecture():
    assert [_catalog.last_cuda_major(a) for a in ("Maxwell", "Pascal", "Volta", "Turing", "Nothing")] == [12, 12, 12, None, None]
