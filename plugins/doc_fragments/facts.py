# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations


class ModuleDocFragment:
    """The O(facts) option of every module that plans from the GPU facts (nvidia_cdi_spec, gpu_compose_override,
    nvidia_gpu_doctor, gpu_container_check). A module adds only what differs (C(required), C(default)) and says in
    its notes which keys it reads."""

    DOCUMENTATION = r"""
options:
  facts:
    description:
      - The host's GPU facts, C(ansible_facts.nvidia_gpu) as M(gpuhost.nvidia.nvidia_gpu_facts) returns them; pass
        C({{ ansible_facts.nvidia_gpu }}).
      - Gather them earlier in the same play, so that they describe the host as it is now; the schema is documented in
        the RETURN section of M(gpuhost.nvidia.nvidia_gpu_facts). Only where the module's description says so does it
        gather them itself when O(facts) is left out (M(gpuhost.nvidia.nvidia_gpu_doctor)).
    type: dict
"""
