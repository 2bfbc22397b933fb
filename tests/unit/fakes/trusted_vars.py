# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Values as ansible-core 2.19 hands a role's files and an inventory's values to the templar: every string trusted as a
template (a plain string is never rendered there)."""

from __future__ import annotations

import typing as t

from ansible.template import trust_as_template


def trusted(value: t.Any) -> t.Any:
    """Mark every string in a loaded YAML value as a template, as ansible does for the role's own files."""
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, dict):
        return {key: trusted(item) for key, item in value.items()}
    if isinstance(value, list):
        return [trusted(item) for item in value]
    return value
