# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A stand-in for kubernetes.core.k8s_info in the unit tests (module_utils/fake_api.py)."""
from __future__ import annotations

from ansible_collections.kubernetes.core.plugins.module_utils.fake_api import run

if __name__ == "__main__":
    run("k8s_info")
