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


# --- expiry and revocation, against what gpg itself says about the same keys -----------------------------------------

NOW = 1_900_000_000.0  # 2030-03-17: after every test key's creation; the "soon" key is judged at its own time below


@pytest.mark.parametrize("name, validity", [("pinned", "-"), ("rsa", "-"), ("expired", "e"), ("revoked", "r"), ("soon", "-"),
                                            ("renewed", "-")])
@pytest.mark.parametrize("form", ["armored", "binary"])
def test_expiry_and_revocation_agree_with_gpg(keys, name, validity, form):
    data = getattr(keys[name], form)
    key = _gpg.read_key(data)
    [(gpg_validity, gpg_expires)] = gpg_keys.colons_validity(keys["home"], data)
    state = key.states[0]
    # gpg's validity field: e expired, r revoked; its expiry field: seconds since 1970, empty for never.
    assert gpg_validity in (validity, "e" if validity == "-" and gpg_expires and int(gpg_expires) < NOW else validity)
    assert state.expires == (int(gpg_expires) if gpg_expires else None)
    assert bool(state.revocations) is (validity == "r")
    now = min(NOW, state.expires - 1) if state.expires else NOW  # before any expiry, except the one that is long past
    refusals = _gpg.key_refusals(key, now if name != "expired" else NOW, "src")
    assert [r.split(" at src ")[1].split(":")[0].split(" on ")[0] for r in refusals] == (
        ["is revoked"] if name == "revoked" else ["expired"] if name == "expired" else [])


def test_an_expired_key_is_refused_naming_it_and_the_date(keys):
    key = keys["expired"]
    with pytest.raises(_gpg.GpgError) as err:
        _gpg.plan_write(key.armored, key.fingerprint, "binary", "file:///srv/key.asc")
    assert str(err.value) == (
        "the key %s at file:///srv/key.asc expired on 2020-12-31 00:00:00 UTC; apt, dnf and pacman refuse every package it signs. Ask "
        "the publisher for the renewed key (the same fingerprint with a later expiry)" % key.fingerprint)


def test_a_revoked_key_is_refused_naming_it_and_the_revocation(keys):
    key = keys["revoked"]
    with pytest.raises(_gpg.GpgError) as err:
        _gpg.plan_write(key.binary, key.fingerprint, "binary", "k")
    assert str(err.value).startswith("the key %s at k is revoked: a key revocation signature made " % key.fingerprint)
    assert "UTC (no reason given); apt, dnf and pacman refuse every package it signs" in str(err.value)


def test_the_newest_self_signature_sets_the_expiry(keys):
    # Made in 2020 to expire in 2021, renewed now for two years: gpg and the parser both take the renewal.
    renewed = keys["renewed"]
    assert _gpg.read_key(renewed.earlier).states[0].expires < 1_700_000_000  # 2021: made in 2020 for a year
    assert _gpg.read_key(renewed.armored).states[0].expires > 1_700_000_000
    assert _gpg.plan_write(renewed.armored, renewed.fingerprint, "binary", "k")[1] == renewed.binary
    # Both self-signatures in one file, the older one last: the newer one still sets the expiry, as gpg takes it.
    old_sigs = [framed for tag, _body, framed in _gpg.packets(renewed.earlier) if tag == _gpg.TAG_SIGNATURE][:1]
    parsed = _gpg.packets(renewed.binary)
    uid_end = next(i for i, (tag, _b, _f) in enumerate(parsed) if tag == _gpg.TAG_USER_ID) + 2
    both = b"".join(f for _t, _b, f in parsed[:uid_end]) + old_sigs[0] + b"".join(f for _t, _b, f in parsed[uid_end:])
    state = _gpg.read_key(both).states[0]
    assert len(state.self_signatures) == 2
    assert state.expires == _gpg.read_key(renewed.binary).states[0].expires
    assert gpg_keys.colons_validity(keys["home"], both)[0][1] == str(state.expires)


@pytest.mark.parametrize("days_left, warn_days, warns", [(9.5, 30, True), (9.5, 10, True), (9.5, 9, False), (9.5, 0, False),
                                                         (0.01, 1, True), (40, 30, False)])
def test_a_key_that_expires_soon_warns_from_the_configured_days(keys, days_left, warn_days, warns):
    key = _gpg.read_key(keys["soon"].armored)
    now = key.states[0].expires - days_left * 86400
    warnings = _gpg.key_warnings(key, now, warn_days, "/etc/apt/keyrings/x.gpg")
    assert bool(warnings) is warns
    if warns:
        assert warnings[0].startswith("the key %s at /etc/apt/keyrings/x.gpg expires on %s, in " % (
            keys["soon"].fingerprint, _gpg.utc(key.states[0].expires)))
    assert _gpg.key_refusals(key, now, "k") == []
    assert _gpg.key_refusals(key, key.states[0].expires, "k") != []  # the second it expires


def test_a_revocation_of_a_subkey_or_a_user_id_is_not_the_keys(keys):
    # Signatures after a subkey packet are about the subkey: a key revocation signature type there does not revoke the key.
    key = keys["pinned"]
    parsed = _gpg.packets(key.binary)
    revocation = [framed for tag, body, framed in _gpg.packets(keys["revoked"].binary) if tag == _gpg.TAG_SIGNATURE
                  and _gpg.read_signature(body).sig_type == _gpg.SIG_KEY_REVOCATION][0]
    after_subkey = key.binary + revocation  # the pinned key ends with its subkey and that subkey's binding signature
    assert parsed[-2][0] == _gpg.TAG_PUBLIC_SUBKEY
    assert _gpg.read_key(after_subkey).states[0].revocations == []
    # Right after the primary key, the same signature counts, whoever issued it (read, not verified: the safe side).
    first = parsed[0][2]
    assert _gpg.read_key(first + revocation + key.binary[len(first):]).states[0].revocations != []


def _signature(version: int, sig_type: int, hashed: bytes, unhashed: bytes = b"") -> bytes:
    width = 2 if version == 4 else 4
    body = bytes((version, sig_type, 22, 8)) + len(hashed).to_bytes(width, "big") + hashed + len(unhashed).to_bytes(width, "big") + unhashed
    body += b"\x00\x00" + b"\x00\x01\x00"  # hash prefix, a token MPI
    return bytes((0xC2, len(body))) + body


def _sub(kind: int, data: bytes) -> bytes:
    return bytes((len(data) + 1, kind)) + data


@pytest.mark.parametrize("signature, problem", [
    (b"\xc2\x01\x04", "a signature packet is cut short"),
    (b"\xc2\x02\x07\x20", "a version 7 signature"),
    (b"\xc2\x05\x04\x20\x16\x08\x00", "a version 4 signature packet is cut short"),
    (b"\xc2\x08\x04\x20\x16\x08\x00\x40\x00\x00", "a version 4 signature's subpackets are longer than the packet"),
    (_signature(4, 0x20, b"\x09\x02"), "a signature subpacket is longer than its area"),
    (_signature(4, 0x20, b"\xff\x00"), "a signature subpacket header is cut short"),
    (_signature(4, 0x20, b"\x00"), "a signature subpacket is longer than its area"),
    (b"\xc2\x04\x03\x05\x20\x00", "a version 3 signature packet is malformed"),
])
def test_a_signature_on_the_primary_key_that_does_not_parse_is_refused(keys, signature, problem):
    first = _gpg.packets(keys["pinned"].binary)[0][2]
    with pytest.raises(_gpg.GpgError) as err:
        _gpg.read_key(first + signature + keys["pinned"].binary[len(first):])
    assert "a signature on the primary key %s cannot be read (%s" % (keys["pinned"].fingerprint, problem) in str(err.value)
    assert "its expiry and revocation cannot be told" in str(err.value)


@pytest.mark.parametrize("version", [4, 6])
def test_crafted_signatures_are_read_by_version(version):
    created = (1_600_000_000).to_bytes(4, "big")
    reason = _sub(_gpg.SUB_REASON, b"\x02stolen laptop")
    sig = _signature(version, 0x20, _sub(_gpg.SUB_CREATION, created) + reason, _sub(_gpg.SUB_ISSUER, b"\x01" * 8))
    parsed = _gpg.read_signature(_gpg.packets(sig)[0][1])
    assert (parsed.sig_type, parsed.created, parsed.issuers, parsed.reason) == (
        0x20, 1_600_000_000, ["01" * 8], "key material compromised: stolen laptop")
    # A key expiration only counts in the hashed area, which the signature covers.
    sig = _signature(version, 0x13, _sub(_gpg.SUB_CREATION, created), _sub(_gpg.SUB_KEY_EXPIRATION, (86400).to_bytes(4, "big")))
    assert _gpg.read_signature(_gpg.packets(sig)[0][1]).key_expiration is None


# --- signing subkeys: a primary key that may only certify signs nothing itself ---------------------------------------

@pytest.mark.parametrize("name", ["sub-expired", "sub-revoked", "sub-one-left", "sub-soon", "pinned", "rsa"])
def test_subkeys_agree_with_gpg(keys, name):
    key = _gpg.read_key(keys[name].binary)
    [state] = key.states
    theirs = gpg_keys.colons_subkeys(keys["home"], keys[name].binary)
    assert [sub.fingerprint for sub in state.subkeys] == gpg_keys.colons_fingerprints_all(keys["home"], keys[name].binary)[1:]
    for sub, (validity, expires, caps) in zip(state.subkeys, theirs):
        assert sub.signs is ("s" in caps)
        assert sub.expires == (int(expires) if expires else None)
        assert bool(sub.revocations) is (validity == "r")
    # gpg's own usage flags of the primary key (field 12 of the pub line: lower case, the key's own).
    assert state.signs is ("s" in gpg_keys.colons_primary_caps(keys["home"], keys[name].binary))


def test_a_key_whose_signing_subkeys_all_expired_is_refused_naming_each(keys):
    key = keys["sub-expired"]
    state = _gpg.read_key(key.binary).states[0]
    signing = [sub for sub in state.subkeys if sub.signs]
    with pytest.raises(_gpg.GpgError) as err:
        _gpg.plan_write(key.armored, key.fingerprint, "binary", "file:///srv/key.asc")
    assert str(err.value) == (
        "the key %s at file:///srv/key.asc may not sign data itself, and subkey %s expired on 2020-12-31 00:00:00 UTC; "
        "apt, dnf and pacman refuse every package it signs. Ask the publisher for the key with a renewed signing "
        "subkey (the same primary fingerprint)" % (key.fingerprint, signing[0].fingerprint))


def test_a_key_whose_signing_subkey_is_revoked_is_refused(keys):
    key = keys["sub-revoked"]
    with pytest.raises(_gpg.GpgError) as err:
        _gpg.plan_write(key.binary, key.fingerprint, "binary", "k")
    assert "may not sign data itself, and subkey " in str(err.value) and " revoked " in str(err.value)


def test_one_valid_signing_subkey_is_enough(keys):
    key = keys["sub-one-left"]
    state = _gpg.read_key(key.binary).states[0]
    valid, problems = state.signing_subkeys(NOW)
    assert len(valid) == 1 and len(problems) == 1 and "expired on 2020-12-31" in problems[0]
    assert _gpg.key_refusals(_gpg.read_key(key.binary), NOW, "k") == []
    assert _gpg.plan_write(key.armored, key.fingerprint, "binary", "k")[1] == key.binary


def test_a_primary_key_that_signs_needs_no_subkey(keys):
    # The encryption subkey of the usual keys says nothing about signing: the primary key signs.
    for name in ("pinned", "rsa"):
        assert _gpg.key_refusals(_gpg.read_key(keys[name].binary), NOW, "k") == []


def test_the_last_signing_subkey_expiring_soon_warns(keys):
    key = _gpg.read_key(keys["sub-soon"].binary)
    [sub] = [sub for sub in key.states[0].subkeys if sub.signs]
    warnings = _gpg.key_warnings(key, sub.expires - 5 * 86400, 30, "/etc/apt/keyrings/x.gpg")
    assert warnings == ["the last signing subkey of the key %s at /etc/apt/keyrings/x.gpg expires on %s, in 5 day(s) (warning "
                        "from 30 days): install its renewal before then, or every update from its repository fails" % (
                            keys["sub-soon"].fingerprint, _gpg.utc(sub.expires))]
    assert _gpg.key_warnings(key, sub.expires - 5 * 86400, 4, "k") == []
    assert _gpg.key_refusals(key, sub.expires, "k") != []  # the second it expires
