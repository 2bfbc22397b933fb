# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Throwaway OpenPGP keys made by the real gpg, for the tests of _gpg and repository_key.

The parser in module_utils/_gpg.py is checked against what gpg itself says about the same bytes (fingerprints with
--show-keys --with-colons, the binary keyring with --dearmor), never against values written by hand.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

GPG = shutil.which("gpg")
GPGCONF = shutil.which("gpgconf")
MISSING = "tool missing: gpg (bindep.txt gnupg; tests/deps/install.sh)"


@dataclass
class TestKey:
    fingerprint: str
    armored: bytes
    binary: bytes
    secret: bytes
    earlier: bytes = b""  # with renew: the binary key as it was before (its older self-signature)


def gpg(home: Path, *args: str, data: bytes | None = None) -> bytes:
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    env = dict(os.environ, LC_ALL="C", GNUPGHOME=str(home))
    try:
        return subprocess.run([str(GPG), "--batch", "--no-tty", "--homedir", str(home), *args], input=data, capture_output=True,
                              check=True, env=env).stdout
    finally:
        # gpg starts an agent per home directory and leaves it running. Each holds inotify instances, and a test run
        # leaves dozens behind: enough to exhaust the user's inotify limit while Molecule's systemd containers run
        # beside the unit tier (a path unit then fails to start).
        if GPGCONF:
            subprocess.run([GPGCONF, "--homedir", str(home), "--kill", "gpg-agent"], capture_output=True, check=False, env=env)


def colons_fingerprints(home: Path, data: bytes) -> list[str]:
    """Primary fingerprints of ``data`` as gpg reads them."""
    out = gpg(home, "--with-colons", "--show-keys", data=data).decode()
    result, expect = [], False
    for line in out.splitlines():
        fields = line.split(":")
        if fields[0] == "pub":
            expect = True
        elif fields[0] == "sub":
            expect = False
        elif fields[0] == "fpr" and expect:
            result.append(fields[9])
            expect = False
    return result


def make_key(home: Path, uid: str, algo: str = "ed25519", subkey: str | None = "cv25519", expire: str = "never",
             created: str | None = None, revoke: bool = False, renew: str | None = None) -> TestKey:
    """A key made by gpg. ``expire`` is gpg's (never, 1y, 10d), counted from ``created`` (gpg's --faked-system-time
    form, 20200101T000000) when given; ``revoke`` imports the revocation certificate gpg stored when it made the key
    (a key revocation signature on the primary key); ``renew`` sets a new expiry with a newer self-signature, now."""
    faked = ["--faked-system-time", created] if created else []
    gpg(home, *faked, "--pinentry-mode", "loopback", "--passphrase", "", "--quick-gen-key", uid, algo, "cert,sign", expire)
    fpr = [line.split(":")[9] for line in gpg(home, "--with-colons", "--list-keys", uid).decode().splitlines()
           if line.startswith("fpr:")][0]
    if subkey:
        gpg(home, *faked, "--pinentry-mode", "loopback", "--passphrase", "", "--quick-add-key", fpr, subkey, "encr", expire)
    if revoke:
        # gpg stores a revocation certificate with every new key, its armour line escaped by a colon against an
        # accidental import.
        cert = (home / "openpgp-revocs.d" / ("%s.rev" % fpr)).read_bytes().replace(b":-----BEGIN", b"-----BEGIN")
        gpg(home, "--import", data=cert)
    earlier = b""
    if renew:
        earlier = gpg(home, "--export", fpr)
        gpg(home, "--pinentry-mode", "loopback", "--passphrase", "", "--quick-set-expire", fpr, renew)
    return TestKey(
        earlier=earlier,
        fingerprint=fpr,
        armored=gpg(home, "--armor", "--export", fpr),
        binary=gpg(home, "--export", fpr),
        secret=gpg(home, "--pinentry-mode", "loopback", "--passphrase", "", "--export-secret-keys", fpr),
    )


def colons_validity(home: Path, data: bytes) -> list[tuple[str, str]]:
    """(validity, expiry as seconds since 1970 or '') of each primary key in ``data`` as gpg reads it: ``e`` expired,
    ``r`` revoked (gpg --show-keys --with-colons, field 2 and 7)."""
    out = gpg(home, "--with-colons", "--show-keys", data=data).decode()
    return [(line.split(":")[1], line.split(":")[6]) for line in out.splitlines() if line.startswith("pub:")]


def dearmor(home: Path, armored: bytes) -> bytes:
    return gpg(home, "--dearmor", data=armored)
