# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The key fingerprint filters (plugins/filter/gpg.py) over _gpg."""

from __future__ import annotations

import re

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


def _record(value: str) -> str:
    return "pub:-:4096:1:A4B469963BF863CC:1650377186:::-:::scSC::::::23::0:\nfpr:::::::::%s:\n" % value


# A primary key's fpr record is the only text passed on; anything but 40 or 64 hex digits there is not gpg's output.
@pytest.mark.parametrize("value", [
    "$(REBOOT)", "`reboot`", CUDA + "\x0b", CUDA + "\x85", CUDA[:-1], CUDA + "0", CUDA[:-1] + "G", " " + CUDA, CUDA + " ", "0x" + CUDA[2:],
    "EB69 3B30 35CD 5710 E231  E123 A4B4 6996 3BF8 63CC", "", "A" * 63, "A" * 65, CUDA + ";rm -rf /", "../../etc/passwd",
    CUDA[:20] + "\u0660" * 20,  # Arabic-Indic digits: not hex to apt or pacman-key
])
def test_primary_fingerprints_refuse_what_gpg_does_not_print(value):
    with pytest.raises(AnsibleFilterError) as err:
        gpg_filters.gpg_primary_fingerprints(_record(value))
    assert str(err.value).startswith("gpg_primary_fingerprints: line 2 of the gpg --with-colons output is an fpr record whose "
                                     "fingerprint %r is not 40 or 64 hex digits" % value)


@pytest.mark.parametrize("colons, expected", [
    (_record(CUDA.lower()), [CUDA]),
    (_record("A" * 64), ["A" * 64]),
    (_record(CUDA).replace("\n", "\r\n"), [CUDA]),
    (_record(CUDA) + _record("B" * 40), [CUDA, "B" * 40]),
    ("fpr:::::::::$(REBOOT):\n" + _record(CUDA), [CUDA]),  # an fpr record of no primary key is not read
    ("sub:-:1:1:1:1::::::e:\nfpr:::::::::$(REBOOT):\n", []),  # a subkey's is not read either
    ("", []),
])
def test_primary_fingerprints_keep_what_gpg_prints(colons, expected):
    assert gpg_filters.gpg_primary_fingerprints(colons) == expected


@pytest.mark.parametrize("result, says", [
    ({"stdout": "", "rc": 2, "stderr": "gpg: no valid OpenPGP data found."}, "the gpg command failed (rc 2): gpg: no valid OpenPGP data found."),
    ({"failed": True, "msg": "[Errno 2] No such file or directory: b'gpg'"}, "the gpg command failed (rc None): [Errno 2]"),
    ({"stdout": COLONS, "rc": 1}, "the gpg command failed (rc 1)"),
])
def test_a_failed_gpg_is_not_no_keys(result, says):
    with pytest.raises(AnsibleFilterError, match=r"^gpg_primary_fingerprints: " + re.escape(says)):
        gpg_filters.gpg_primary_fingerprints(result)


@pytest.mark.parametrize("value", [42, ["fpr:::::::::%s:" % CUDA], b"pub:", 1.5])
def test_primary_fingerprints_refuse_input_that_is_not_text(value):
    with pytest.raises(AnsibleFilterError, match="the input is a .*, not gpg's --with-colons text or a registered command result"):
        gpg_filters.gpg_primary_fingerprints(value)
