# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Kernel command-line merging: never duplicate, keep the user's arguments and spacing, remove exactly ours."""

from __future__ import annotations

import pytest

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _vfio

GRUB = """# If you change this file, run 'update-grub' afterwards to update
GRUB_DEFAULT=0
GRUB_TIMEOUT=5
GRUB_DISTRIBUTOR=`lsb_release -i -s 2> /dev/null || echo Debian`
GRUB_CMDLINE_LINUX_DEFAULT="quiet"
GRUB_CMDLINE_LINUX=""
"""
ARGS = ["intel_iommu=on", "iommu=pt"]


def test_merge_adds_missing_and_keeps_the_rest():
    merged = _vfio.merge_cmdline("quiet  splash iommu=pt", ARGS)
    assert merged == {"cmdline": "quiet  splash iommu=pt intel_iommu=on", "added": ["intel_iommu=on"], "removed": [], "errors": []}
    assert _vfio.merge_cmdline("", ARGS)["cmdline"] == "intel_iommu=on iommu=pt"
    again = _vfio.merge_cmdline("quiet intel_iommu=on iommu=pt", ARGS, ours=ARGS)
    assert again["added"] == [] and again["cmdline"] == "quiet intel_iommu=on iommu=pt"
    assert _vfio.merge_cmdline("a", ["x=1", "x=1"])["cmdline"] == "a x=1"


def test_merge_replaces_our_stale_argument_but_never_the_users():
    merged = _vfio.merge_cmdline("ro vfio-pci.ids=10de:2204 iommu=pt", ["iommu=pt", "vfio-pci.ids=10de:2204,10de:1aef"],
                                 ours=["vfio-pci.ids=10de:2204"])
    assert merged["cmdline"] == "ro iommu=pt vfio-pci.ids=10de:2204,10de:1aef"
    assert merged["removed"] == ["vfio-pci.ids=10de:2204"]
    clash = _vfio.merge_cmdline("ro iommu=soft", ["iommu=pt"])
    assert clash["errors"] == ["the kernel command line already sets iommu=soft; this role would set iommu=pt. Remove it, or change "
                               "the role's variables so that it does not ask for iommu"]
    assert clash["cmdline"] == "ro iommu=soft"


@pytest.mark.parametrize("text, args, expected", [
    ("quiet intel_iommu=on iommu=pt", ARGS, "quiet"),
    ("intel_iommu=on iommu=pt", ARGS, ""),
    ("intel_iommu=on quiet  iommu=pt splash", ARGS, "quiet  splash"),
    ("quiet iommu=ptx", ["iommu=pt"], "quiet iommu=ptx"),
])
def test_remove_args(text, args, expected):
    assert _vfio.remove_args(text, args) == expected


def test_grub_file_round_trip_is_exact():
    present = _vfio.plan_cmdline_file(GRUB, "GRUB_CMDLINE_LINUX", ARGS, "present", [])
    assert present["errors"] == []
    assert present["added"] == ARGS and present["ours"] == ARGS
    assert 'GRUB_CMDLINE_LINUX="intel_iommu=on iommu=pt"\n' in present["content"]
    assert 'GRUB_CMDLINE_LINUX_DEFAULT="quiet"\n' in present["content"]
    assert present["content"].count("intel_iommu") == 1
    again = _vfio.plan_cmdline_file(present["content"], "GRUB_CMDLINE_LINUX", ARGS, "present", present["ours"])
    assert again["content"] == present["content"] and again["added"] == [] and again["ours"] == ARGS
    absent = _vfio.plan_cmdline_file(present["content"], "GRUB_CMDLINE_LINUX", [], "absent", present["ours"])
    assert absent["content"] == GRUB
    assert absent["removed"] == ARGS


def test_users_own_argument_survives_absent():
    users = GRUB.replace('GRUB_CMDLINE_LINUX=""', "GRUB_CMDLINE_LINUX='console=ttyS0 iommu=pt'")
    present = _vfio.plan_cmdline_file(users, "GRUB_CMDLINE_LINUX", ARGS, "present", [])
    assert "GRUB_CMDLINE_LINUX='console=ttyS0 iommu=pt intel_iommu=on'\n" in present["content"]
    assert present["ours"] == ["intel_iommu=on"]
    absent = _vfio.plan_cmdline_file(present["content"], "GRUB_CMDLINE_LINUX", [], "absent", present["ours"])
    assert absent["content"] == users


def test_last_assignment_wins_and_missing_variable_is_appended():
    text = 'GRUB_CMDLINE_LINUX="a"\n#GRUB_CMDLINE_LINUX="commented"\nGRUB_CMDLINE_LINUX="b"  # tail\n'
    planned = _vfio.plan_cmdline_file(text, "GRUB_CMDLINE_LINUX", ["iommu=pt"], "present", [])
    assert planned["content"] == 'GRUB_CMDLINE_LINUX="a"\n#GRUB_CMDLINE_LINUX="commented"\nGRUB_CMDLINE_LINUX="b iommu=pt"  # tail\n'
    appended = _vfio.plan_cmdline_file("GRUB_TIMEOUT=5", "GRUB_CMDLINE_LINUX", ["iommu=pt"], "present", [])
    assert appended["content"] == 'GRUB_TIMEOUT=5\nGRUB_CMDLINE_LINUX="iommu=pt"\n'


def test_shell_expansion_is_refused():
    planned = _vfio.plan_cmdline_file('GRUB_CMDLINE_LINUX="$EXTRA quiet"\n', "GRUB_CMDLINE_LINUX", ARGS, "present", [])
    assert planned["errors"] == ['GRUB_CMDLINE_LINUX uses shell expansion ("$EXTRA quiet"); edit it by hand or move the expansion out of it']


def test_whole_file_cmdline():
    text = "root=UUID=1234 rw quiet\n"
    present = _vfio.plan_cmdline_file(text, "", ARGS, "present", [])
    assert present["content"] == "root=UUID=1234 rw quiet intel_iommu=on iommu=pt\n"
    assert _vfio.plan_cmdline_file(present["content"], "", ARGS, "present", ARGS)["content"] == present["content"]
    assert _vfio.plan_cmdline_file(present["content"], "", [], "absent", ARGS)["content"] == text


def test_missing_file():
    assert _vfio.plan_cmdline_file(None, "GRUB_CMDLINE_LINUX", ARGS, "present", [])["errors"] == [
        "the file does not exist: is it this host's bootloader configuration?"]
    assert _vfio.plan_cmdline_file(None, "GRUB_CMDLINE_LINUX", [], "absent", ARGS)["errors"] == []


def test_shell_value():
    assert _vfio.shell_value(GRUB, "GRUB_CMDLINE_LINUX_DEFAULT") == "quiet"
    assert _vfio.shell_value(GRUB, "MISSING") is None


def test_cpu_vendor_and_slot():
    assert _vfio.cpu_vendor(["0", "GenuineIntel", "x"]) == "intel"
    assert _vfio.cpu_vendor("AuthenticAMD") == "amd"
    assert _vfio.cpu_vendor(None) is None
    assert _vfio.slot_of("0000:01:00.1") == "0000:01:00"
