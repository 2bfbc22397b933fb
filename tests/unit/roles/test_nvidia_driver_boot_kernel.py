# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""nvidia_driver's pre-reboot check (tasks/reboot.yml): no reboot into a kernel without an nvidia module.

The role's reboot tasks run in check mode on the controller (the reboot module only reports in check mode, and the
check must refuse before it), with the GPU facts read from a fake root holding two installed kernels.
"""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


def _kernel(root: Path, release: str, module: bool) -> None:
    base = root / "lib" / "modules" / release
    (base / "kernel" / "fs").mkdir(parents=True)
    if module:
        (base / "updates" / "dkms").mkdir(parents=True)
        (base / "updates" / "dkms" / "nvidia-current.ko.xz").write_bytes(b"")


def _reboot_tasks(local_play, tmp_path: Path, newest_has_module: bool) -> dict:
    root = tmp_path / "root"
    (root / "sys" / "bus" / "pci" / "devices").mkdir(parents=True)
    _kernel(root, "6.1.0-26-amd64", module=True)
    _kernel(root, "6.1.0-28-amd64", module=newest_has_module)
    return local_play([{
        "hosts": "localhost", "gather_facts": False,
        "vars": {"nvidia_driver_facts_root": str(root), "__nvidia_driver_pkg_mgr": "apt", "nvidia_driver_reboot_timeout": 60,
                 "nvidia_driver_reboot_settle_seconds": 0, "nvidia_driver_reboot_reasons": ["the driver was installed"]},
        "tasks": [{"name": "Run the role's reboot tasks", "ansible.builtin.include_tasks": str(REPO / "roles/nvidia_driver/tasks/reboot.yml")}],
    }], timeout=120)


@pytest.mark.parametrize("newest_has_module", [False, True])
def test_reboot_refused_when_the_next_kernel_has_no_module(local_play, tmp_path: Path, newest_has_module: bool) -> None:
    tasks = _reboot_tasks(local_play, tmp_path, newest_has_module)
    check = tasks["Refuse to reboot into a kernel without an nvidia module"]
    if newest_has_module:
        assert not check.get("failed"), check
        assert "Reboot to load the NVIDIA driver" in tasks
        return
    assert check["failed"]
    assert "the host would boot 6.1.0-28-amd64 (the newest installed kernel)" in check["msg"]
    assert "kernels with one: 6.1.0-26-amd64" in check["msg"]
    assert "linux-headers-6.1.0-28-amd64" in check["msg"] and "dkms autoinstall -k 6.1.0-28-amd64" in check["msg"]
    assert "Reboot to load the NVIDIA driver" not in tasks
