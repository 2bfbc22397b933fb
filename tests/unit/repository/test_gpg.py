# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""_gpg: fingerprints as people paste them, and the OpenPGP parser checked against the real gpg on the same bytes."""

from __future__ import annotations

import base64

import pytest

import gpg_keys

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _gpg, _validate

pytestmark = pytest.mark.skipif(gpg_keys.GPG is None, reason=gpg_keys.MISSING)

CUDA = "EB693B3035CD5710E231E123A4B469963BF863CC"


@pytest.mark.parametrize("text", [
    "EB693B3035CD5710E231E123A4B469963BF863CC",
    "eb693b3035cd5710e231e123a4b469963bf863cc",
    "EB69 3B30 35CD 5710 E231  E123 A4B4 6996 3BF8 63CC",  # gpg --fingerprint
    "eb69 3b30 35cd 5710 e231 e123 a4b4 6996 3bf8 63cc",
    "0xEB693B3035CD5710E231E123A4B469963BF863CC",
    "0XEB69 3B30 35CD 5710 E231  E123 A4B4 6996 3BF8 63CC",
])
def test_pasted_fingerprints_are_accepted_and_normalised(text):
    assert _gpg.fingerprint_error(text) is None
    assert _gpg.normalize_fingerprint(text) == CUDA


@pytest.mark.parametrize("text, problem", [
    ("", "is empty: a repository key is trusted only when its fingerprint is pinned"),
    (None, "is empty: a repository key is trusted only when its fingerprint is pinned"),
    ("   ", "is empty"),
    (CUDA[:-1], "is not a key fingerprint of 40 or 64 hex digits"),
    (CUDA + "0000", "is not a key fingerprint of 40 or 64 hex digits"),
    ("EB69   3B30 35CD 5710 E231 E123 A4B4 6996 3BF8 63CC", "is not a key fingerprint"),  # three spaces
    ("3BF863CC", "is not a key fingerprint"),  # a short key id is not a pin
    (CUDA + "\nSigned-By: /tmp/x", "control character"),
    ("EB69-3B30-35CD-5710-E231-E123-A4B4-6996-3BF8-63CC", "is not a key fingerprint"),
])
def test_bad_fingerprints_are_refused(text, problem):
    assert problem in (_gpg.fingerprint_error(text, "pin") or "")


def test_the_roles_request_checks_share_the_rule():
    from ansible_collections.gpuhost.nvidia.plugins.module_utils import _driver, _toolkit

    spaced = "EB69 3B30 35CD 5710 E231  E123 A4B4 6996 3BF8 63CC"
    assert _toolkit.request_errors({"repo_key_fingerprint": spaced}) == []
    assert _driver.request_errors({"repo_key_fingerprint": "0x" + CUDA.lower()}) == []
    assert _toolkit.request_errors({"repo_key_fingerprint": "3BF863CC"})[0].startswith("nvidia_container_toolkit_repo_key_fingerprint: ")


COLONS = """\
pub:-:4096:1:A4B469963BF863CC:1650377186:::-:::scSC::::::23::0:
fpr:::::::::EB693B3035CD5710E231E123A4B469963BF863CC:
uid:-::::1650377186::A8F0F7D7B1F1A1E8D6B3C0FCD9A58E34C7D8E2A1::cudatools <cudatools@nvidia.com>::::::::::0:
sub:-:4096:1:1234567890ABCDEF:1650377186::::::e::::::23:
fpr:::::::::0000000000000000000000001234567890ABCDEF:
"""


def test_gpg_primary_fingerprints_skip_subkeys():
    assert _gpg.gpg_primary_fingerprints(COLONS) == [CUDA]
    assert _gpg.gpg_primary_fingerprints(COLONS + COLONS.replace("EB69", "AAAA")) == [CUDA, "AAAA" + CUDA[4:]]
    assert _gpg.gpg_primary_fingerprints("") == []


@pytest.mark.parametrize("name", ["pinned", "rsa"])
@pytest.mark.parametrize("form", ["armored", "binary"])
def test_fingerprints_agree_with_gpg(keys, name, form):
    key = keys[name]
    data = getattr(key, form)
    assert _gpg.read_key(data).fingerprints == gpg_keys.colons_fingerprints(keys["home"], data) == [key.fingerprint]


def test_two_keys_in_one_file_agree_with_gpg(keys):
    data = keys["pinned"].binary + keys["rogue"].binary
    assert _gpg.read_key(data).fingerprints == gpg_keys.colons_fingerprints(keys["home"], data)
    assert len(_gpg.read_key(data).fingerprints) == 2


@pytest.mark.parametrize("name", ["pinned", "rsa"])
def test_binary_keyring_is_what_gpg_dearmor_writes(keys, name):
    key = keys[name]
    assert _gpg.render(_gpg.read_key(key.armored), "binary") == gpg_keys.dearmor(keys["home"], key.armored) == key.binary


def test_armored_output_reads_back_in_gpg(keys):
    key = keys["pinned"]
    armored = _gpg.render(_gpg.read_key(key.binary), "armored")
    assert armored.startswith(b"-----BEGIN PGP PUBLIC KEY BLOCK-----\n\n") and armored.endswith(b"-----END PGP PUBLIC KEY BLOCK-----\n")
    assert gpg_keys.colons_fingerprints(keys["home"], armored) == [key.fingerprint]
    assert _gpg.dearmor(armored) == key.binary
    assert _gpg.render(_gpg.read_key(armored), "armored") == armored


def test_armour_headers_and_crlf_are_read(keys):
    key = keys["pinned"]
    lines = key.armored.decode().splitlines()
    with_header = "\r\n".join([lines[0], "Comment: a mirror's note", "Version: GnuPG v2"] + lines[1:]).encode()
    assert _gpg.read_key(with_header).fingerprints == [key.fingerprint]


def test_a_damaged_armoured_key_is_refused(keys):
    text = keys["pinned"].armored.decode()
    body_line = text.splitlines()[3]
    flipped = body_line[:10] + ("A" if body_line[10] != "A" else "B") + body_line[11:]
    with pytest.raises(_gpg.GpgError, match="checksum does not match"):
        _gpg.read_key(text.replace(body_line, flipped).encode())


@pytest.mark.parametrize("data, problem", [
    (b"", "it is empty"),
    (b"<html>404 Not Found</html>", "is not a packet header"),
    (b"-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nmQ==\n", "no -----END PGP PUBLIC KEY BLOCK----- line"),
    (b"-----BEGIN PGP PUBLIC KEY BLOCK-----\n\n!!!!\n-----END PGP PUBLIC KEY BLOCK-----\n", "not valid base64"),
    (b"\x99\x00\x05\x04abc", "cut short"),
    (b"\xc6\x01\x03", "version 3 public key"),
    (b"x" * (_gpg.MAX_KEY_SIZE + 1), "larger than"),
])
def test_what_is_not_a_public_key_is_refused(data, problem):
    with pytest.raises(_gpg.GpgError, match=problem):
        _gpg.read_key(data)


def test_a_secret_key_is_refused(keys):
    with pytest.raises(_gpg.GpgError, match="holds a secret key"):
        _gpg.read_key(keys["pinned"].secret)


def test_a_packet_a_public_key_does_not_hold_is_refused(keys):
    literal = b"\xcb\x05b\x00abc"  # a literal data packet (tag 11) after the key
    with pytest.raises(_gpg.GpgError, match=r"packet \(tag 11\)"):
        _gpg.read_key(keys["pinned"].binary + literal)


def test_plan_write_names_both_fingerprints(keys):
    pinned, rogue = keys["pinned"], keys["rogue"]
    with pytest.raises(_gpg.GpgError) as err:
        _gpg.plan_write(rogue.armored, pinned.fingerprint, "binary", "file:///srv/key.asc")
    assert str(err.value) == ("the key at file:///srv/key.asc does not match the pinned fingerprint: expected %s, got %s"
                              % (pinned.fingerprint, rogue.fingerprint))
    with pytest.raises(_gpg.GpgError, match="one key is pinned, so the file must hold that key alone"):
        _gpg.plan_write(pinned.binary + rogue.binary, pinned.fingerprint, "binary", "k")
    key, content = _gpg.plan_write(pinned.armored, pinned.fingerprint, "binary", "k")
    assert content == pinned.binary and key.user_ids == ["pinned test key <pinned@gpuhost.invalid>"]


def test_trust_packets_are_dropped(keys):
    trust = b"\xcc\x02\x00\x00"  # a trust packet (tag 12), as a keyring file holds after gpg's own packets
    assert _gpg.read_key(keys["pinned"].binary + trust).packets == keys["pinned"].binary


def test_converged_needs_the_pinned_key_alone_in_the_format(keys):
    pinned = keys["pinned"]
    assert _gpg.converged(_gpg.inspect_installed(pinned.binary), pinned.fingerprint, "binary")
    assert not _gpg.converged(_gpg.inspect_installed(pinned.binary), pinned.fingerprint, "armored")
    assert _gpg.converged(_gpg.inspect_installed(pinned.armored), pinned.fingerprint, None)
    assert not _gpg.converged(_gpg.inspect_installed(pinned.binary + keys["rogue"].binary), pinned.fingerprint, "binary")
    assert not _gpg.converged(_gpg.inspect_installed(None), pinned.fingerprint, "binary")
    broken = _gpg.inspect_installed(b"not a key")
    assert not _gpg.converged(broken, pinned.fingerprint, None) and "packet header" in broken.problem


def test_crc24_of_the_rfc_example():
    # RFC 9580 section 6.1: the CRC-24 of no octets is the initial value.
    assert _gpg.crc24(b"") == 0xB704CE
    assert base64.b64encode(_gpg.crc24(b"abc").to_bytes(3, "big"))


def test_the_rule_is_a_validate_text_rule():
    assert isinstance(_gpg.FINGERPRINT, _validate.Text)
