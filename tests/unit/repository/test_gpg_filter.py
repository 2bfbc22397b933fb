# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The key fingerprint filters (plugins/filter/gpg.py) over _gpg."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuhost.nvidia.plugins.filter import gpg as gpg_filters

CUDA = "EB693B3035CD5710E231E123A4B469963BF863CC"
COLONS = "pub:-:4096:1:A4B469963BF863CC:1650377186:::-:::scSC::::::23::0:\nfpr:::::::::%s:\nsub:-:4096:1:1:1::::::e:\nfpr:::::::::%s:\n" % (
    CUDA, "0" * 24 + "1234567890ABCDEF")


def test_filters_are_exposed():
    assert set(gpg_filters.FilterModule().filters()) == {"gpg_primary_fingerprints", "gpg_fingerprint"}


def test_primary_fingerprints_from_text_or_a_registered_result():
    assert gpg_filters.gpg_primary_fingerprints(COLONS) == [CUDA]
    assert gpg_filters.gpg_primary_fingerprints({"stdout": COLONS, "rc": 0}) == [CUDA]
    assert gpg_filters.gpg_primary_fingerprints(None) == []


def test_gpg_fingerprint_normalises_and_refuses():
    assert gpg_filters.gpg_fingerprint("0xeb69 3b30 35cd 5710 e231  e123 a4b4 6996 3bf8 63cc") == CUDA
    assert gpg_filters.gpg_fingerprint("", empty=True) == "" and gpg_filters.gpg_fingerprint(None, empty=True) == ""
    with pytest.raises(AnsibleFilterError, match="is empty: a repository key is trusted only when its fingerprint is pinned"):
        gpg_filters.gpg_fingerprint("")
    with pytest.raises(AnsibleFilterError, match="is not a key fingerprint"):
        gpg_filters.gpg_fingerprint("3BF863CC")
