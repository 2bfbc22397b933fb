# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The test keys the repository tests share."""

from __future__ import annotations

import pytest

import gpg_keys


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    """Two ed25519 keys with an encryption subkey, and an RSA key without one, each from its own gpg home; and keys in
    the states apt refuses or will refuse soon: expired (made in 2020 for a year), revoked (gpg's own revocation
    certificate imported), expiring in ten days, and expired then renewed (a newer self-signature, two years on)."""
    base = tmp_path_factory.mktemp("gpg")
    return {
        "expired": gpg_keys.make_key(base / "expired", "expired test key <expired@gpuhost.invalid>", expire="1y", created="20200101T000000"),
        "revoked": gpg_keys.make_key(base / "revoked", "revoked test key <revoked@gpuhost.invalid>", revoke=True),
        "soon": gpg_keys.make_key(base / "soon", "soon test key <soon@gpuhost.invalid>", expire="10d"),
        "renewed": gpg_keys.make_key(base / "renewed", "renewed test key <renewed@gpuhost.invalid>", expire="1y", created="20200101T000000",
                                     renew="2y"),
        "pinned": gpg_keys.make_key(base / "pinned", "pinned test key <pinned@gpuhost.invalid>"),
        "rogue": gpg_keys.make_key(base / "rogue", "rogue test key <rogue@gpuhost.invalid>"),
        "rsa": gpg_keys.make_key(base / "rsa", "rsa test key <rsa@gpuhost.invalid>", algo="rsa2048", subkey=None),
        # A primary key that may only certify, so that the repository's signatures come from its subkeys: one signing
        # subkey expired (made in 2020 for a year), one revoked, one of each beside a valid one, and one expiring soon.
        "sub-expired": gpg_keys.make_key(base / "sub-expired", "sub-expired test key <sub-expired@gpuhost.invalid>", usage="cert",
                                         created="20200101T000000", signing_subkeys=("1y",)),
        "sub-revoked": gpg_keys.make_key(base / "sub-revoked", "sub-revoked test key <sub-revoked@gpuhost.invalid>", usage="cert",
                                         signing_subkeys=("never",), revoke_subkey=2),
        "sub-one-left": gpg_keys.make_key(base / "sub-one-left", "sub-one-left test key <sub-one-left@gpuhost.invalid>", usage="cert",
                                          created="20200101T000000", signing_subkeys=("1y", "never")),
        "sub-soon": gpg_keys.make_key(base / "sub-soon", "sub-soon test key <sub-soon@gpuhost.invalid>", usage="cert",
                                      signing_subkeys=("10d",)),
        "home": base / "reader",
    }
