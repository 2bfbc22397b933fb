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


def gpg_primary_fingerprints(colons: t.Any) -> list[str]:
    """Fingerprints of the primary keys in ``gpg --with-colons`` output (``pub`` records, not subkeys), upper case."""
    out: list[str] = []
    expect = False
    for line in str(colons or "").splitlines():
        fields = line.split(":")
        if fields[0] == "pub":
            expect = True
        elif fields[0] == "sub":
            expect = False
        elif fields[0] == "fpr" and expect and len(fields) > 9:
            out.append(fields[9].upper())
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


@dataclass
class Key:
    """A parsed transferable public key (or several): its packets and its primary keys."""

    packets: bytes
    fingerprints: list[str]
    user_ids: list[str] = field(default_factory=list)

    def describe(self) -> str:
        """A few lines that say which key this is, for the diff (a binary keyring has no readable text)."""
        lines = ["primary key: %s" % fp for fp in self.fingerprints] or ["primary key: none"]
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
    for tag, body, _framed in parsed:
        if tag in SECRET_KEY_TAGS:
            raise GpgError("it holds a secret key: a repository key is public, and a secret one is not installed")
        if tag not in PUBLIC_KEY_TAGS:
            raise GpgError("it holds a packet (tag %d) that a public key does not have" % tag)
        if tag == TAG_PUBLIC_KEY:
            fingerprints.append(key_fingerprint(body))
        elif tag == TAG_USER_ID and fingerprints:
            user_ids.append(body.decode("utf-8", errors="replace"))
    if not parsed or parsed[0][0] not in (TAG_PUBLIC_KEY, TAG_MARKER):
        raise GpgError("it does not start with a public key packet")
    # Trust packets are local to one keyring (RFC 9580 section 5.10) and are not exported; drop them.
    kept = b"".join(framed for tag, _body, framed in parsed if tag not in (TAG_TRUST, TAG_MARKER))
    return Key(packets=kept, fingerprints=fingerprints, user_ids=user_ids)


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


def verify_error(installed: Installed, pinned: str, dest: str) -> str | None:
    """Why ``dest`` (already read into ``installed``) does not hold exactly the pinned key, in any format."""
    if converged(installed, pinned, None):
        return None
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


def plan(installed: Installed, pinned: str, fmt: str, refresh: bool, fetch: t.Callable[[], tuple[bytes, str]]) -> Plan:
    """The destination's new content. ``fetch()`` returns the source's bytes and a name for messages; it is called only
    when the destination does not already hold the pinned key in ``fmt`` (or ``refresh``). Raises GpgError."""
    if converged(installed, pinned, fmt) and not refresh:
        return Plan(content=t.cast(bytes, installed.data), key=t.cast(Key, installed.key), fetched=False)
    source, where = fetch()
    key, content = plan_write(source, pinned, fmt, where)
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


def plan_write(source: bytes, pinned: str, fmt: str, where: str) -> tuple[Key, bytes]:
    """The key read from ``source`` and the bytes to install. Raises GpgError naming ``where`` and both fingerprints
    when the key is not exactly the pinned one."""
    try:
        key = read_key(source)
    except GpgError as exc:
        raise GpgError("the key at %s is not an OpenPGP public key: %s" % (where, exc)) from None
    problem = mismatch(pinned, key.fingerprints, where)
    if problem:
        raise GpgError(problem)
    return key, render(key, fmt)
