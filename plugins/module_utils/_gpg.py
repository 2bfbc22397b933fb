# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""OpenPGP repository keys: fingerprints, armour, and the plan of the repository_key module.

Private to this collection: no compatibility promise outside gpuhost.nvidia.

Every repository a role adds is trusted through one key whose primary fingerprint is pinned in a role variable. This
file is the one place that reads such keys:

- :func:`normalize_fingerprint` and :data:`FINGERPRINT` accept a fingerprint as people paste it (gpg's groups of four
  with one or two spaces, lower case, a ``0x`` prefix) and compare it as 40 (v4) or 64 (v5, v6) upper-case hex digits.
- :func:`gpg_primary_fingerprints` reads ``gpg --with-colons`` output (the ``gpg_primary_fingerprints`` filter).
- :func:`read_key` parses a transferable public key (RFC 9580 section 10.1, RFC 4880 section 11.1), armoured or
  binary, without gpg: the packet framing, the primary keys (tag 6) and their fingerprints (v4: SHA-1 over
  ``0x99``, a two-octet length and the key packet body; v5 and v6: SHA-256 over ``0x9A``/``0x9B`` and a four-octet
  length). Secret keys and packets a public key does not hold are refused.
- :func:`plan` decides, from the installed file and (only when that is not already the pinned key) the fetched one,
  what the module writes: the binary keyring apt's ``Signed-By`` reads, or the armoured key ``gpgkey=`` and
  ``pacman-key --add`` read. A key whose primary fingerprint is not the pinned one is refused, naming both.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import time
import typing as t
from dataclasses import dataclass, field

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _validate

# A pinned fingerprint as a role variable may hold it: 40 or 64 hex digits, in groups of four separated by at most
# two spaces (gpg --fingerprint prints two in the middle), optionally after 0x.
FINGERPRINT_RE = re.compile(r"(0[xX])?[0-9A-Fa-f]{4}(?:(?: {0,2}[0-9A-Fa-f]{4}){9}|(?: {0,2}[0-9A-Fa-f]{4}){15})")
FINGERPRINT = _validate.Text(max_length=128, space=True, pattern=FINGERPRINT_RE,
                             what="a key fingerprint of 40 or 64 hex digits (gpg's spacing and a 0x prefix allowed)")
# Where a key is fetched from: one field of printable ASCII, a scheme the module reads (apt's file:/path form too).
KEY_URL = _validate.Text(max_length=2048, pattern=re.compile(r"(https?://|file:/)[!-~]+"), what="an http(s):// or file:// URL")

# Keys are a few kilobytes; NVIDIA's CUDA key is 1.2 kB armoured. A much larger "key" is not what it claims to be.
MAX_KEY_SIZE = 1024 * 1024
ARMOR_BEGIN = "-----BEGIN PGP PUBLIC KEY BLOCK-----"
ARMOR_END = "-----END PGP PUBLIC KEY BLOCK-----"

# Packet tags a transferable public key holds (RFC 9580 section 10.1): signature, public key, marker, trust, user
# ID, public subkey, user attribute, padding.
TAG_SIGNATURE, TAG_PUBLIC_KEY, TAG_MARKER, TAG_TRUST, TAG_USER_ID, TAG_PUBLIC_SUBKEY, TAG_USER_ATTRIBUTE, TAG_PADDING = (
    2, 6, 10, 12, 13, 14, 17, 21)
PUBLIC_KEY_TAGS = frozenset((TAG_SIGNATURE, TAG_PUBLIC_KEY, TAG_MARKER, TAG_TRUST, TAG_USER_ID, TAG_PUBLIC_SUBKEY,
                             TAG_USER_ATTRIBUTE, TAG_PADDING))
SECRET_KEY_TAGS = frozenset((5, 7))
FORMATS = ("binary", "armored")


class GpgError(ValueError):
    """A key that cannot be used; the message says why."""


def normalize_fingerprint(value: t.Any) -> str:
    """``EB693B30...`` for ``eb69 3b30 ...``, ``0xEB693B30...`` or ``EB69 3B30  35CD ...``: whitespace and a 0x
    prefix dropped, upper case. Anything else is kept, so a value that is not a fingerprint stays visibly wrong."""
    text = "".join(str(value if value is not None else "").split())
    if text[:2] in ("0x", "0X"):
        text = text[2:]
    return text.upper()


def fingerprint_error(value: t.Any, option: str = "fingerprint") -> str | None:
    """Why ``value`` is not a usable pinned fingerprint (None when it is)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return "%s is empty: a repository key is trusted only when its fingerprint is pinned" % option
    return _validate.one(FINGERPRINT, option, value)


# A fingerprint as gpg --with-colons prints it (field 10 of an fpr record): 40 or 64 hex digits, nothing else.
COLONS_FINGERPRINT_RE = re.compile(r"[0-9A-Fa-f]{40}|[0-9A-Fa-f]{64}")


def gpg_primary_fingerprints(colons: t.Any) -> list[str]:
    """Fingerprints of the primary keys in ``gpg --with-colons`` output (``pub`` records, not subkeys), upper case.

    Raises GpgError for a primary key's ``fpr`` record whose fingerprint is not 40 or 64 hex digits: the result ends up
    in commands and files, and text that is not gpg's (``$(reboot)``, a newline) is not passed on as a fingerprint.
    """
    out: list[str] = []
    expect = False
    for number, line in enumerate(str(colons or "").split("\n"), 1):
        fields = line.rstrip("\r").split(":")
        if fields[0] == "pub":
            expect = True
        elif fields[0] == "sub":
            expect = False
        elif fields[0] == "fpr" and expect:
            value = fields[9] if len(fields) > 9 else ""
            if not COLONS_FINGERPRINT_RE.fullmatch(value):
                raise GpgError("line %d of the gpg --with-colons output is an fpr record whose fingerprint %s is not 40 or 64 "
                               "hex digits: this is not what gpg prints" % (number, _validate.show(value)))
            out.append(value.upper())
            expect = False
    return out


# --- ASCII armour (RFC 9580 section 6) -------------------------------------------------------------------------------

def crc24(data: bytes) -> int:
    crc = 0xB704CE
    for octet in data:
        crc ^= octet << 16
        for _bit in range(8):
            crc <<= 1
            if crc & 0x1000000:
                crc ^= 0x1864CFB
    return crc & 0xFFFFFF


def is_armored(data: bytes) -> bool:
    return data.lstrip()[:len(ARMOR_BEGIN)] == ARMOR_BEGIN.encode("ascii")


def dearmor(data: bytes) -> bytes:
    """The binary packets of the first armoured public key block in ``data``. Raises GpgError."""
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        raise GpgError("the armoured key holds bytes that are not ASCII") from None
    lines = [line.rstrip("\r") for line in text.split("\n")]
    try:
        start = [line.strip() for line in lines].index(ARMOR_BEGIN)
    except ValueError:
        raise GpgError("no %s line" % ARMOR_BEGIN) from None
    body: list[str] = []
    checksum = None
    in_headers = True
    for line in lines[start + 1:]:
        stripped = line.strip()
        if stripped == ARMOR_END:
            break
        if in_headers:
            if ":" in stripped:  # an armour header such as "Version: GnuPG v2" or "Comment: ..."
                continue
            in_headers = False
            if not stripped:
                continue
        if stripped.startswith("=") and len(stripped) == 5:
            checksum = stripped[1:]
        elif stripped:
            body.append(stripped)
    else:
        raise GpgError("no %s line" % ARMOR_END)
    try:
        packets = base64.b64decode("".join(body), validate=True)
    except (binascii.Error, ValueError):
        raise GpgError("the armoured key is not valid base64") from None
    if checksum is not None:
        try:
            expected = int.from_bytes(base64.b64decode(checksum, validate=True), "big")
        except (binascii.Error, ValueError):
            raise GpgError("the armour checksum is not valid base64") from None
        if crc24(packets) != expected:
            raise GpgError("the armour checksum does not match: the key was damaged on the way")
    return packets


def armor(packets: bytes) -> bytes:
    """``packets`` as an armoured public key block, as ``gpg --armor --export`` writes it (no headers, 64 columns,
    a CRC-24 line)."""
    encoded = base64.b64encode(packets).decode("ascii")
    lines = [ARMOR_BEGIN, ""] + [encoded[i:i + 64] for i in range(0, len(encoded), 64)]
    lines += ["=" + base64.b64encode(crc24(packets).to_bytes(3, "big")).decode("ascii"), ARMOR_END, ""]
    return "\n".join(lines).encode("ascii")


# --- packets (RFC 9580 section 4.2) ----------------------------------------------------------------------------------

def packets(data: bytes) -> list[tuple[int, bytes, bytes]]:
    """(tag, body, the whole packet as framed) of every packet in ``data``, in order. Raises GpgError for a framing
    that does not parse."""
    out: list[tuple[int, bytes, bytes]] = []
    pos = 0
    size = len(data)
    while pos < size:
        start = pos
        first = data[pos]
        if not first & 0x80:
            raise GpgError("octet %d is not a packet header: this is not an OpenPGP key" % pos)
        pos += 1
        if first & 0x40:  # new format: tag in the low six bits, one, two or five octet lengths
            tag = first & 0x3F
            if pos >= size:
                raise GpgError("a packet header is cut short")
            octet = data[pos]
            if octet < 192:
                length, pos = octet, pos + 1
            elif octet < 224:
                if pos + 1 >= size:
                    raise GpgError("a packet header is cut short")
                length, pos = ((octet - 192) << 8) + data[pos + 1] + 192, pos + 2
            elif octet == 255:
                if pos + 4 >= size:
                    raise GpgError("a packet header is cut short")
                length, pos = int.from_bytes(data[pos + 1:pos + 5], "big"), pos + 5
            else:
                raise GpgError("a packet with partial body lengths (tag %d): keys never have those" % tag)
        else:  # old (legacy) format: tag in bits 5-2, the length type in bits 1-0
            tag = (first >> 2) & 0x0F
            length_type = first & 0x03
            if length_type == 3:
                raise GpgError("a packet of indeterminate length (tag %d): keys never have those" % tag)
            octets = (1, 2, 4)[length_type]
            if pos + octets > size:
                raise GpgError("a packet header is cut short")
            length, pos = int.from_bytes(data[pos:pos + octets], "big"), pos + octets
        if pos + length > size:
            raise GpgError("a packet (tag %d) is longer than the data: the key is cut short" % tag)
        out.append((tag, data[pos:pos + length], data[start:pos + length]))
        pos += length
    return out


def key_fingerprint(body: bytes) -> str:
    """The fingerprint of a public key packet body, upper-case hex. Raises GpgError for a version without one."""
    if not body:
        raise GpgError("an empty public key packet")
    version = body[0]
    if version == 4:
        return hashlib.sha1(b"\x99" + len(body).to_bytes(2, "big") + body).hexdigest().upper()
    if version in (5, 6):
        return hashlib.sha256(bytes((0x95 + version,)) + len(body).to_bytes(4, "big") + body).hexdigest().upper()
    raise GpgError("a version %d public key: only version 4, 5 and 6 keys are accepted" % version)


# --- signatures on the primary key: expiry and revocation (RFC 9580 sections 5.2 and 5.2.3) -------------------------

# Signature types (RFC 9580 section 5.2.1): certifications of a user ID by the key itself (generic, persona, casual,
# positive), a direct-key signature, and the key revocation signature.
SIG_CERTIFICATIONS = frozenset((0x10, 0x11, 0x12, 0x13))
SIG_DIRECT_KEY = 0x1F
SIG_KEY_REVOCATION = 0x20
# A subkey's binding signature and its revocation (RFC 9580 section 5.2.1.9 and 5.2.1.12).
SIG_SUBKEY_BINDING = 0x18
SIG_SUBKEY_REVOCATION = 0x28
# Signature subpackets (RFC 9580 section 5.2.3.7): creation time, key expiration time, issuer key ID, reason for
# revocation, issuer fingerprint; key flags (section 5.2.3.29), whose 0x02 says the key may sign data.
SUB_CREATION, SUB_KEY_EXPIRATION, SUB_ISSUER, SUB_REASON, SUB_ISSUER_FPR = 2, 9, 16, 29, 33
SUB_KEY_FLAGS = 27
FLAG_SIGN_DATA = 0x02
# Reason for Revocation codes (RFC 9580 section 5.2.3.31).
REVOCATION_REASONS = {0: "no reason given", 1: "key superseded", 2: "key material compromised", 3: "key retired"}


@dataclass
class Signature:
    """What the expiry and revocation checks read from one signature packet."""

    version: int
    sig_type: int
    created: int | None = None
    key_expiration: int | None = None  # seconds after the key's creation (hashed area only); 0 means never
    issuers: list[str] = field(default_factory=list)  # upper-case hex key IDs and fingerprints
    reason: str | None = None
    key_flags: int | None = None  # the first octet of the key flags subpacket (hashed area only); None when absent


def _subpackets(data: bytes) -> list[tuple[int, bytes]]:
    """(type without the critical bit, body) of each subpacket in a subpacket area. Raises GpgError."""
    out: list[tuple[int, bytes]] = []
    pos = 0
    while pos < len(data):
        octet = data[pos]
        if octet < 192:
            length, pos = octet, pos + 1
        elif octet < 255:
            if pos + 1 >= len(data):
                raise GpgError("a signature subpacket header is cut short")
            length, pos = ((octet - 192) << 8) + data[pos + 1] + 192, pos + 2
        else:
            if pos + 4 >= len(data):
                raise GpgError("a signature subpacket header is cut short")
            length, pos = int.from_bytes(data[pos + 1:pos + 5], "big"), pos + 5
        if length < 1 or pos + length > len(data):
            raise GpgError("a signature subpacket is longer than its area")
        out.append((data[pos] & 0x7F, data[pos + 1:pos + length]))
        pos += length
    return out


def read_signature(body: bytes) -> Signature:
    """The signature type, creation time, key expiration, issuers and revocation reason of a signature packet body
    (versions 3, 4, 5 and 6). Raises GpgError for one that does not parse."""
    if len(body) < 2:
        raise GpgError("a signature packet is cut short")
    version = body[0]
    if version in (2, 3):
        # Version 3: a five-octet hashed part (type, creation time), then the eight-octet issuer key ID.
        if len(body) < 15 or body[1] != 5:
            raise GpgError("a version 3 signature packet is malformed")
        return Signature(version=version, sig_type=body[2], created=int.from_bytes(body[3:7], "big"),
                         issuers=[body[7:15].hex().upper()])
    if version not in (4, 5, 6):
        raise GpgError("a version %d signature: only versions 3, 4, 5 and 6 are read" % version)
    # Version 4: two-octet subpacket area lengths; versions 5 and 6: four-octet ones.
    width = 2 if version == 4 else 4
    pos = 4
    areas: list[bytes] = []
    for _area in range(2):
        if pos + width > len(body):
            raise GpgError("a version %d signature packet is cut short" % version)
        length = int.from_bytes(body[pos:pos + width], "big")
        pos += width
        if pos + length > len(body):
            raise GpgError("a version %d signature's subpackets are longer than the packet" % version)
        areas.append(body[pos:pos + length])
        pos += length
    sig = Signature(version=version, sig_type=body[1])
    for index, area in enumerate(areas):
        hashed = index == 0
        for kind, data in _subpackets(area):
            if kind == SUB_ISSUER and len(data) == 8:
                sig.issuers.append(data.hex().upper())
            elif kind == SUB_ISSUER_FPR and len(data) > 1:
                sig.issuers.append(data[1:].hex().upper())
            elif not hashed:
                continue  # the unhashed area is not covered by the signature: only who signed is read from it
            elif kind == SUB_CREATION and len(data) == 4:
                sig.created = int.from_bytes(data, "big")
            elif kind == SUB_KEY_EXPIRATION and len(data) == 4:
                sig.key_expiration = int.from_bytes(data, "big")
            elif kind == SUB_KEY_FLAGS and data:
                sig.key_flags = data[0]
            elif kind == SUB_REASON and data:
                text = data[1:].decode("utf-8", errors="replace")
                sig.reason = REVOCATION_REASONS.get(data[0], "reason code %d" % data[0]) + (": %s" % text if text else "")
    return sig


def utc(timestamp: int | None) -> str:
    """An OpenPGP time (seconds since 1970, UTC) as ``2026-01-31 12:00:00 UTC``."""
    if timestamp is None:
        return "an unknown time"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(timestamp))


def _newest(signatures: list[Signature]) -> Signature | None:
    return max(signatures, key=lambda sig: sig.created or 0) if signatures else None


@dataclass
class SubkeyState:
    """A subkey's creation, its binding signatures (the newest sets its expiry and its key flags, as gpg takes them)
    and its revocations. Read, not verified, as for the primary key."""

    fingerprint: str
    created: int | None
    bindings: list[Signature] = field(default_factory=list)
    revocations: list[Signature] = field(default_factory=list)

    @property
    def expires(self) -> int | None:
        newest = _newest(self.bindings)
        if newest is None or not newest.key_expiration or self.created is None:
            return None
        return self.created + newest.key_expiration

    @property
    def signs(self) -> bool:
        """Whether the subkey may sign data: its newest binding's key flags say so (a subkey without key flags is not
        taken as a signing key: gpg's subkeys always carry them)."""
        newest = _newest(self.bindings)
        return newest is not None and newest.key_flags is not None and bool(newest.key_flags & FLAG_SIGN_DATA)

    def problem(self, now: float) -> str | None:
        """Why the subkey cannot sign at ``now`` (revoked, expired), None when it can."""
        if self.revocations:
            sig = self.revocations[0]
            return "subkey %s revoked %s (%s)" % (self.fingerprint, utc(sig.created), sig.reason or "no reason given")
        expires = self.expires
        if expires is not None and expires <= now:
            return "subkey %s expired on %s" % (self.fingerprint, utc(expires))
        return None


@dataclass
class PrimaryState:
    """A primary key's creation, its expiry as its newest self-signature sets it (None: it never expires), and the
    key revocation signatures on it.

    Signatures are read, not verified: a key revocation signature counts whoever issued it (a forged one stops the
    install, which is the safe side), and the expiry is the newest self-signature's, as gpg takes it. The publisher's
    real signatures are verified by apt, dnf and pacman, which then refuse an expired or revoked key on every update.
    """

    fingerprint: str
    created: int | None
    self_signatures: list[Signature] = field(default_factory=list)
    revocations: list[Signature] = field(default_factory=list)
    subkeys: list[SubkeyState] = field(default_factory=list)

    @property
    def signs(self) -> bool:
        """Whether the primary key itself may sign data: its newest self-signature's key flags, and when that has
        none, yes (gpg then goes by the algorithm, and every primary key algorithm can sign)."""
        newest = _newest([sig for sig in self.self_signatures if self.is_self(sig)])
        return newest is None or newest.key_flags is None or bool(newest.key_flags & FLAG_SIGN_DATA)

    def signing_subkeys(self, now: float) -> tuple[list[SubkeyState], list[str]]:
        """The signing subkeys that can sign at ``now``, and why each other one cannot."""
        valid, problems = [], []
        for sub in self.subkeys:
            if not sub.signs:
                continue
            problem = sub.problem(now)
            if problem:
                problems.append(problem)
            else:
                valid.append(sub)
        return valid, problems

    @property
    def key_id(self) -> str:
        # Version 4: the low 64 bits of the fingerprint; versions 5 and 6: the high 64 bits (RFC 9580 section 5.5.4).
        return self.fingerprint[-16:] if len(self.fingerprint) == 40 else self.fingerprint[:16]

    def is_self(self, sig: Signature) -> bool:
        # A signature without issuer subpackets is taken as the key's own: gpg's exports always name the issuer.
        return not sig.issuers or any(issuer in (self.key_id, self.fingerprint) for issuer in sig.issuers)

    @property
    def expires(self) -> int | None:
        """When the key expires (seconds since 1970), None when it never does."""
        own = [sig for sig in self.self_signatures if self.is_self(sig)]
        if not own or self.created is None:
            return None
        newest = max(own, key=lambda sig: sig.created or 0)
        if not newest.key_expiration:
            return None
        return self.created + newest.key_expiration

    def describe(self) -> str:
        parts = ["created %s" % utc(self.created)]
        expires = self.expires
        parts.append("expires %s" % utc(expires) if expires is not None else "does not expire")
        parts += ["revoked %s (%s)" % (utc(sig.created), sig.reason or "no reason given") for sig in self.revocations]
        for sub in self.subkeys:
            if sub.signs:
                parts.append("signing subkey %s %s" % (sub.fingerprint, "expires %s" % utc(sub.expires) if sub.expires is not None
                                                       else "does not expire"))
        return ", ".join(parts)


def key_refusals(key: Key, now: float, where: str) -> list[str]:
    """Why ``key`` must not be installed at ``now``: a revoked or an expired primary key, each named with its date, or
    a primary key that may not sign data itself and whose signing subkeys are all expired or revoked (apt then fails
    with EXPKEYSIG or REVKEYSIG on every update: the repository's signatures can only come from those subkeys)."""
    problems: list[str] = []
    for state in key.states:
        for sig in state.revocations:
            problems.append("the key %s at %s is revoked: a key revocation signature made %s (%s); apt, dnf and pacman "
                            "refuse every package it signs" % (state.fingerprint, where, utc(sig.created), sig.reason or "no reason given"))
        expires = state.expires
        if expires is not None and expires <= now:
            problems.append("the key %s at %s expired on %s; apt, dnf and pacman refuse every package it signs. Ask the "
                            "publisher for the renewed key (the same fingerprint with a later expiry)" % (state.fingerprint, where, utc(expires)))
        if state.revocations or (expires is not None and expires <= now) or state.signs:
            continue
        valid, sub_problems = state.signing_subkeys(now)
        if not valid:
            problems.append("the key %s at %s may not sign data itself, and %s; apt, dnf and pacman refuse every package "
                            "it signs. Ask the publisher for the key with a renewed signing subkey (the same primary "
                            "fingerprint)" % (state.fingerprint, where, "; ".join(sub_problems) if sub_problems
                                              else "it has no signing subkey"))
    return problems


def key_warnings(key: Key, now: float, warn_days: int, where: str) -> list[str]:
    """A warning for each primary key of ``key`` that expires within ``warn_days`` days of ``now`` (none for 0)."""
    warnings: list[str] = []
    if warn_days <= 0:
        return warnings
    for state in key.states:
        expires = state.expires
        if state.signs or state.revocations:
            name = "the key %s" % state.fingerprint
        else:
            # Signing rests on the subkeys: it ends when the last valid one expires (never, if one does not).
            valid, _problems = state.signing_subkeys(now)
            ends = [sub.expires for sub in valid]
            if not ends or None in ends:
                name = "the key %s" % state.fingerprint
            else:
                last = max(t.cast("list[int]", ends))
                if expires is None or last < expires:
                    expires = last
                    name = "the last signing subkey of the key %s" % state.fingerprint
                else:
                    name = "the key %s" % state.fingerprint
        if expires is not None and now < expires <= now + warn_days * 86400:
            warnings.append("%s at %s expires on %s, in %d day(s) (warning from %d days): install its renewal before "
                            "then, or every update from its repository fails" % (
                                name, where, utc(expires), -int((now - expires) // 86400), warn_days))
    return warnings


@dataclass
class Key:
    """A parsed transferable public key (or several): its packets and its primary keys."""

    packets: bytes
    fingerprints: list[str]
    user_ids: list[str] = field(default_factory=list)
    # One per primary key, in order: its creation, expiry and revocations (see :class:`PrimaryState`).
    states: list[PrimaryState] = field(default_factory=list)

    def describe(self) -> str:
        """A few lines that say which key this is, for the diff (a binary keyring has no readable text)."""
        lines = ["primary key: %s" % fp for fp in self.fingerprints] or ["primary key: none"]
        lines += ["%s: %s" % (state.fingerprint, state.describe()) for state in self.states]
        lines += ["user ID: %s" % uid for uid in self.user_ids]
        lines.append("sha256 of the packets: %s" % hashlib.sha256(self.packets).hexdigest())
        return "\n".join(lines) + "\n"


def read_key(data: bytes) -> Key:
    """Parse an armoured or binary public key. Raises GpgError for anything that is not one."""
    if not data or not data.strip():
        raise GpgError("it is empty")
    if len(data) > MAX_KEY_SIZE:
        raise GpgError("it is larger than %d bytes: not a public key" % MAX_KEY_SIZE)
    raw = dearmor(data) if is_armored(data) else data
    parsed = packets(raw)
    fingerprints: list[str] = []
    user_ids: list[str] = []
    states: list[PrimaryState] = []
    # Which component the signatures that follow belong to: the primary key itself, one of its user IDs or user
    # attributes, or a subkey (whose signatures say nothing about the primary key's expiry or revocation).
    context = None
    for tag, body, _framed in parsed:
        if tag in SECRET_KEY_TAGS:
            raise GpgError("it holds a secret key: a repository key is public, and a secret one is not installed")
        if tag not in PUBLIC_KEY_TAGS:
            raise GpgError("it holds a packet (tag %d) that a public key does not have" % tag)
        if tag == TAG_PUBLIC_KEY:
            fingerprints.append(key_fingerprint(body))
            states.append(PrimaryState(fingerprint=fingerprints[-1], created=int.from_bytes(body[1:5], "big") if len(body) >= 5 else None))
            context = "key"
        elif tag == TAG_USER_ID and fingerprints:
            user_ids.append(body.decode("utf-8", errors="replace"))
            context = "user"
        elif tag == TAG_USER_ATTRIBUTE:
            context = "user"
        elif tag == TAG_PUBLIC_SUBKEY:
            context = "subkey"
            if states:
                states[-1].subkeys.append(SubkeyState(fingerprint=key_fingerprint(body),
                                                      created=int.from_bytes(body[1:5], "big") if len(body) >= 5 else None))
        elif tag == TAG_SIGNATURE and states and context == "subkey" and states[-1].subkeys:
            sub = states[-1].subkeys[-1]
            try:
                sig = read_signature(body)
            except GpgError as exc:
                raise GpgError("a signature on the subkey %s cannot be read (%s): its expiry and revocation cannot be "
                               "told" % (sub.fingerprint, exc)) from None
            if sig.sig_type == SIG_SUBKEY_REVOCATION:
                sub.revocations.append(sig)
            elif sig.sig_type == SIG_SUBKEY_BINDING:
                sub.bindings.append(sig)
        elif tag == TAG_SIGNATURE and states and context in ("key", "user"):
            try:
                sig = read_signature(body)
            except GpgError as exc:
                raise GpgError("a signature on the primary key %s cannot be read (%s): its expiry and revocation cannot be "
                               "told" % (states[-1].fingerprint, exc)) from None
            if sig.sig_type == SIG_KEY_REVOCATION:
                states[-1].revocations.append(sig)
            elif sig.sig_type == SIG_DIRECT_KEY or (context == "user" and sig.sig_type in SIG_CERTIFICATIONS):
                states[-1].self_signatures.append(sig)
    if not parsed or parsed[0][0] not in (TAG_PUBLIC_KEY, TAG_MARKER):
        raise GpgError("it does not start with a public key packet")
    # Trust packets are local to one keyring (RFC 9580 section 5.10) and are not exported; drop them.
    kept = b"".join(framed for tag, _body, framed in parsed if tag not in (TAG_TRUST, TAG_MARKER))
    return Key(packets=kept, fingerprints=fingerprints, user_ids=user_ids, states=states)


# --- the repository_key plan -----------------------------------------------------------------------------------------

def render(key: Key, fmt: str) -> bytes:
    """The file content for ``fmt``: the binary keyring (apt Signed-By) or the armoured key (rpm gpgkey=, pacman-key)."""
    return key.packets if fmt == "binary" else armor(key.packets)


def mismatch(pinned: str, found: list[str], where: str) -> str | None:
    """Why the key at ``where`` is not exactly the pinned one (None when it is)."""
    if found == [pinned]:
        return None
    if not found:
        got = "no primary key"
    elif pinned in found:
        got = "%d primary keys (%s); one key is pinned, so the file must hold that key alone" % (len(found), ", ".join(found))
    else:
        got = ", ".join(found)
    return "the key at %s does not match the pinned fingerprint: expected %s, got %s" % (where, pinned, got)


@dataclass
class Installed:
    """What the destination holds now."""

    data: bytes | None
    key: Key | None = None
    problem: str | None = None  # why it is not a usable key (None when it is, or when there is no file)

    @property
    def fingerprints(self) -> list[str]:
        return self.key.fingerprints if self.key else []


def inspect_installed(data: bytes | None) -> Installed:
    """Parse the destination's bytes; a file that is not a key is noted, not raised (it will be replaced)."""
    if data is None:
        return Installed(data=None)
    try:
        return Installed(data=data, key=read_key(data))
    except GpgError as exc:
        return Installed(data=data, problem=str(exc))


def converged(installed: Installed, pinned: str, fmt: str | None) -> bool:
    """Whether the destination already holds exactly the pinned key, in ``fmt`` (any format when None)."""
    if installed.key is None or installed.fingerprints != [pinned] or installed.data is None:
        return False
    if fmt is None:
        return True
    return is_armored(installed.data) == (fmt == "armored")


def verify_error(installed: Installed, pinned: str, dest: str, now: float | None = None) -> str | None:
    """Why ``dest`` (already read into ``installed``) does not hold exactly the pinned key, in any format, or holds it
    expired or revoked at ``now`` (the current time when None)."""
    if converged(installed, pinned, None):
        refusals = key_refusals(t.cast(Key, installed.key), time.time() if now is None else now, dest)
        return "; ".join(refusals) if refusals else None
    if installed.data is None or installed.problem:
        return "the key at %s cannot be checked: %s" % (dest, installed.problem or "it does not exist")
    return "the key file %s does not hold exactly the pinned key: expected %s, got %s" % (
        dest, pinned, ", ".join(installed.fingerprints) or "no primary key")


@dataclass
class Plan:
    """What the module writes: ``content`` for the destination (unchanged bytes when converged), the key, and whether
    the source was read."""

    content: bytes
    key: Key
    fetched: bool


def plan(installed: Installed, pinned: str, fmt: str, refresh: bool, fetch: t.Callable[[], tuple[bytes, str]],
         now: float | None = None) -> Plan:
    """The destination's new content. ``fetch()`` returns the source's bytes and a name for messages; it is called only
    when the destination does not already hold the pinned key in ``fmt`` (or ``refresh``), or holds it expired or
    revoked at ``now`` (the source may have the renewal). Raises GpgError, also for a fetched key that is expired or
    revoked."""
    now = time.time() if now is None else now
    usable = converged(installed, pinned, fmt) and not key_refusals(t.cast(Key, installed.key), now, "")
    if usable and not refresh:
        return Plan(content=t.cast(bytes, installed.data), key=t.cast(Key, installed.key), fetched=False)
    source, where = fetch()
    key, content = plan_write(source, pinned, fmt, where, now)
    if converged(installed, pinned, fmt) and t.cast(Key, installed.key).packets == key.packets:
        content = t.cast(bytes, installed.data)  # the same key, armoured differently: leave the file alone
    return Plan(content=content, key=key, fetched=True)


def file_format(installed: Installed) -> str | None:
    """``binary`` or ``armored`` for a destination that holds a key, else None."""
    if installed.key is None or installed.data is None:
        return None
    return "armored" if is_armored(installed.data) else "binary"


def describe(installed: Installed) -> str:
    """The diff's text for what the destination holds."""
    if installed.data is None:
        return ""
    if installed.key is None:
        return "not an OpenPGP key: %s\n" % installed.problem
    return "format: %s\n%s" % (file_format(installed), installed.key.describe())


def plan_write(source: bytes, pinned: str, fmt: str, where: str, now: float | None = None) -> tuple[Key, bytes]:
    """The key read from ``source`` and the bytes to install. Raises GpgError naming ``where`` and both fingerprints
    when the key is not exactly the pinned one, and naming the key and the date when it is revoked or expired at
    ``now`` (the current time when None)."""
    try:
        key = read_key(source)
    except GpgError as exc:
        raise GpgError("the key at %s is not an OpenPGP public key: %s" % (where, exc)) from None
    problem = mismatch(pinned, key.fingerprints, where)
    if problem:
        raise GpgError(problem)
    refusals = key_refusals(key, time.time() if now is None else now, where)
    if refusals:
        raise GpgError("; ".join(refusals))
    return key, render(key, fmt)
