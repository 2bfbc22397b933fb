#!/usr/bin/env python
# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""A fake ``nvidia-smi`` that replays recorded output.

What it prints is chosen by environment variables:
  FAKE_NVIDIA_SMI_SCENARIO  a named failure below (driver_not_loaded, no_permission, library_not_found,
                            version_mismatch, unknown_error); exit code and text as the real tool prints them
  FAKE_NVIDIA_SMI_STDOUT    a file whose bytes go to stdout (for example an nvidia-smi -q -x capture)
  FAKE_NVIDIA_SMI_STDERR    a file whose bytes go to stderr
  FAKE_NVIDIA_SMI_RC        the exit code (default 0)
  FAKE_NVIDIA_SMI_LOG       a file to which each invocation's argv and LC_ALL are appended as a JSON line
"""

from __future__ import annotations

import json
import os
import sys

DRIVER_NOT_LOADED = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running.\n\n"
)

SCENARIOS = {
    "driver_not_loaded": (9, DRIVER_NOT_LOADED, ""),
    "no_permission": (4, "Failed to initialize NVML: Insufficient Permissions\n", ""),
    "library_not_found": (
        12,
        "NVIDIA-SMI couldn't find libnvidia-ml.so library in your system. Please make sure that the NVIDIA Display Driver "
        "is properly installed and present in your system.\nPlease also try adding directory that contains "
        "libnvidia-ml.so to your system PATH.\n",
        "",
    ),
    "version_mismatch": (18, "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 550.54\n", ""),
    "unknown_error": (255, "Failed to initialize NVML: Unknown Error\n", ""),
}


def _read(path: str) -> str:
    with open(path, "r", encoding="utf-8") as handle:
        return handle.read()


def main() -> int:
    log = os.environ.get("FAKE_NVIDIA_SMI_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"argv": sys.argv[1:], "LC_ALL": os.environ.get("LC_ALL")}) + "\n")
    scenario = os.environ.get("FAKE_NVIDIA_SMI_SCENARIO")
    if scenario:
        rc, out, err = SCENARIOS[scenario]
        sys.stdout.write(out)
        sys.stderr.write(err)
        return rc
    if os.environ.get("FAKE_NVIDIA_SMI_STDOUT"):
        sys.stdout.write(_read(os.environ["FAKE_NVIDIA_SMI_STDOUT"]))
    if os.environ.get("FAKE_NVIDIA_SMI_STDERR"):
        sys.stderr.write(_read(os.environ["FAKE_NVIDIA_SMI_STDERR"]))
    return int(os.environ.get("FAKE_NVIDIA_SMI_RC", "0"))


if __name__ == "__main__":
    sys.exit(main())
