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
        argv = [str(GPG), "--batch", "--no-tty", "--homedir", str(home), *args]
        proc = subprocess.run(argv, input=data, capture_output=True, check=False, env=env)
        if proc.returncode != 0:
            # Seen once under load in the rehearsal: --quick-add-key exited 2, likely while the agent the previous call
            # stopped was still going away. Once more, with a fresh agent; a real failure fails the same way again.
            proc = subprocess.run(argv, input=data, capture_output=True, check=False, env=env)
        if proc.returncode != 0:
            raise subprocess.CalledProcessError(proc.returncode, argv, proc.stdout, proc.stderr)
        return proc.stdout
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
             created: str | None = None, revoke: bool = False, renew: str | None = None, usage: str = "cert,sign",
             signing_subkeys: tuple[str, ...] = (), revoke_subkey: int | None = None) -> TestKey:
    """A key made by gpg. ``expire`` is gpg's (never, 1y, 10d), counted from ``created`` (gpg's --faked-system-time
    form, 20200101T000000) when given; ``revoke`` imports the revocation certificate gpg stored when it made the key
    (a key revocation signature on the primary key); ``renew`` sets a new expiry with a newer self-signature, now.
    ``usage`` is the primary key's (``cert``: it may not sign data); ``signing_subkeys`` adds an ed25519 signing subkey
    per expiry given (gpg's form, counted from ``created``), after the encryption subkey; ``revoke_subkey`` revokes
    the subkey of that number (1: the first) with gpg's own --edit-key revkey."""
    faked = ["--faked-system-time", created] if created else []
    gpg(home, *faked, "--pinentry-mode", "loopback", "--passphrase", "", "--quick-gen-key", uid, algo, usage, expire)
    fpr = [line.split(":")[9] for line in gpg(home, "--with-colons", "--list-keys", uid).decode().splitlines()
           if line.startswith("fpr:")][0]
    if subkey:
        gpg(home, *faked, "--pinentry-mode", "loopback", "--passphrase", "", "--quick-add-key", fpr, subkey, "encr", expire)
    for sub_expire in signing_subkeys:
        gpg(home, *faked, "--pinentry-mode", "loopback", "--passphrase", "", "--quick-add-key", fpr, "ed25519", "sign", sub_expire)
    if revoke_subkey is not None:
        # key N, revkey, "really revoke?" y, reason 0, an empty description line, "okay?" y, save.
        gpg(home, "--pinentry-mode", "loopback", "--passphrase", "", "--command-fd", "0", "--edit-key", fpr,
            data=("key %d\nrevkey\ny\n0\n\ny\nsave\n" % revoke_subkey).encode())
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


def colons_fingerprints_all(home: Path, data: bytes) -> list[str]:
    """Every fingerprint gpg prints for ``data``, primary keys and subkeys, in order."""
    out = gpg(home, "--with-colons", "--show-keys", data=data).decode()
    return [line.split(":")[9] for line in out.splitlines() if line.startswith("fpr:")]


def colons_primary_caps(home: Path, data: bytes) -> str:
    """The capabilities field of the first primary key (field 12 of the ``pub`` line; lower case: the key's own)."""
    out = gpg(home, "--with-colons", "--show-keys", data=data).decode()
    return [line.split(":")[11] for line in out.splitlines() if line.startswith("pub:")][0]


def colons_subkeys(home: Path, data: bytes) -> list[tuple[str, str, str]]:
    """(validity, expiry or '', capabilities) of each subkey in ``data`` as gpg reads it (the ``sub`` lines of
    --show-keys --with-colons: field 2, 7 and 12; ``s`` in the capabilities: it may sign)."""
    out = gpg(home, "--with-colons", "--show-keys", data=data).decode()
    return [(line.split(":")[1], line.split(":")[6], line.split(":")[11]) for line in out.splitlines() if line.startswith("sub:")]


def dearmor(home: Path, armored: bytes) -> bytes:
    return gpg(home, "--dearmor", data=armored)
