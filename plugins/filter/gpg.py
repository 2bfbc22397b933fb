# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Key fingerprint filters: gpg_primary_fingerprints, gpg_fingerprint.

Their documentation is in the sidecar .yml files. The parsing lives in module_utils/_gpg.py, which the
repository_key module uses too.
"""

from __future__ import annotations

import typing as t
from collections.abc import Mapping

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuhost.nvidia.plugins.plugin_utils._filter_args import guarded
from ansible_collections.gpuhost.nvidia.plugins.plugin_utils._lazy import module_utils

# Imported when a filter of this file first runs, not when Ansible loads the file (plugin_utils/_lazy.py).
_gpg = module_utils("_gpg")


def gpg_primary_fingerprints(colons: t.Any) -> list[str]:
    """Primary key fingerprints from ``gpg --with-colons`` output (or a registered command result)."""
    if isinstance(colons, Mapping):
        # A failed gpg printed nothing to read: that is not "no keys".
        if colons.get("failed") or colons.get("rc") not in (None, 0):
            raise AnsibleFilterError("gpg_primary_fingerprints: the gpg command failed (rc %s): %s" % (
                colons.get("rc"), str(colons.get("stderr") or colons.get("msg") or "no message")[-500:]))
        colons = colons.get("stdout", "")
    if colons is not None and not isinstance(colons, str):
        raise AnsibleFilterError("gpg_primary_fingerprints: the input is a %s, not gpg's --with-colons text or a registered "
                                 "command result" % type(colons).__name__)
    try:
        return _gpg.gpg_primary_fingerprints(colons)
    except _gpg.GpgError as exc:
        raise AnsibleFilterError("gpg_primary_fingerprints: %s" % exc) from None


def gpg_fingerprint(value: t.Any, empty: bool = False) -> str:
    """A pinned fingerprint as 40 or 64 upper-case hex digits; gpg's spacing, lower case and 0x accepted."""
    if empty and (value is None or str(value).strip() == ""):
        return ""
    problem = _gpg.fingerprint_error(value if value is None or isinstance(value, str) else str(value), "gpg_fingerprint input")
    if problem:
        raise AnsibleFilterError(problem)
    return _gpg.normalize_fingerprint(value)


class FilterModule:
    def filters(self) -> dict[str, t.Callable[..., t.Any]]:
        return guarded({
            "gpg_primary_fingerprints": gpg_primary_fingerprints,
            "gpg_fingerprint": gpg_fingerprint,
        })
