#!/usr/bin/python
# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_operator_check
short_description: Internal. Refuse to install a driver or toolkit that NVIDIA's GPU Operator already manages on the host
version_added: 0.1.0
description:
  - Internal to the roles M(gpuhost.nvidia.nvidia_driver) and M(gpuhost.nvidia.nvidia_container_toolkit) (their
    preflight); no compatibility promise.
  - Reads the host for signs that the GPU Operator runs its own driver (its driver container's PID file
    C(/run/nvidia/nvidia-driver.pid), its root filesystem mounted at C(/run/nvidia/driver)) or toolkit (the runtime
    under C(/usr/local/nvidia/toolkit)), and fails for each component of O(components) that shows one, naming what it
    saw and the Operator setting to change (C(driver.enabled=false), C(toolkit.enabled=false)). A path it cannot read
    counts as a sign.
  - Read-only; it changes nothing, in check mode or not.
author:
  - gpuhost.nvidia developers (@gpuhost)
attributes:
  check_mode:
    support: full
    description: Reads only.
  diff_mode:
    support: none
    description: Changes nothing, so there is no diff.
  platform:
    support: full
    platforms: posix
    description: Linux hosts.
options:
  components:
    description: What the calling role installs.
    type: list
    elements: str
    choices: [driver, toolkit]
    required: true
  root:
    description: The root to read the paths under (tests); an absolute path.
    type: path
    default: /
seealso:
  - name: docs/kubernetes.md
    description: The GPU Operator profile in which the collection owns the host's driver and toolkit.
    link: https://github.com/NVIDIA/gpu-operator/blob/main/deployments/gpu-operator/values.yaml
"""

EXAMPLES = r"""
- name: Refuse a second driver next to the GPU Operator's
  gpuhost.nvidia.gpu_operator_check:
    components: [driver]
"""

RETURN = r"""
evidence:
  description: Per component, what the host shows of the Operator's own (empty lists when nothing).
  returned: always
  type: dict
  sample: {"driver": ["/run/nvidia/nvidia-driver.pid exists (the driver container's PID file)"], "toolkit": []}
refusals:
  description: One sentence per refused component, with the setting to change.
  returned: always
  type: list
  elements: str
  sample: []
"""

import os

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _gpu_operator, _validate


def main() -> None:
    module = _validate.ansible_module(
        argument_spec=dict(
            components=dict(type="list", elements="str", choices=list(_gpu_operator.COMPONENTS), required=True),
            root=dict(type="path", default="/"),
        ),
        supports_check_mode=True,
    )
    root = module.params["root"]
    if not os.path.isabs(root) or not os.path.isdir(root):
        module.fail_json(msg="root must be the absolute path of a directory, got %r" % root)
    evidence = _gpu_operator.host_evidence(root)
    refusals = _gpu_operator.refusals(evidence, module.params["components"])
    if refusals:
        module.fail_json(msg=" ".join(refusals), evidence=evidence, refusals=refusals)
    module.exit_json(changed=False, evidence=evidence, refusals=[])


if __name__ == "__main__":
    main()
