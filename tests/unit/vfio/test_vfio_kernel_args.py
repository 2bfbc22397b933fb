# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""vfio_kernel_args on real files: check mode writes nothing, the record drives an exact removal."""

from __future__ import annotations

import json
import os

from test_cmdline import GRUB

from ansible_collections.gpuhost.nvidia.plugins.modules import vfio_kernel_args

ARGS = ["amd_iommu=on", "iommu=pt"]


def _setup(tmp_path):
    grub = tmp_path / "grub"
    grub.write_text(GRUB)
    record = tmp_path / "state" / "record.json"
    return str(grub), str(record)


def test_check_mode_then_apply_then_idempotent_then_absent(tmp_path, run_module):
    grub, record = _setup(tmp_path)
    args = {"path": grub, "args": ARGS, "record": record, "backup": False}
    check = run_module(vfio_kernel_args, args, check_mode=True)
    assert check["changed"] is True and check["added"] == ARGS
    assert open(grub).read() == GRUB and not os.path.exists(record)
    assert 'GRUB_CMDLINE_LINUX="amd_iommu=on iommu=pt"\n' in check["diff"]["after"]
    assert 'GRUB_CMDLINE_LINUX=""\n' in check["diff"]["before"]

    real = run_module(vfio_kernel_args, args)
    assert real["changed"] is True and real["cmdline"] == "amd_iommu=on iommu=pt"
    assert json.load(open(record)) == {grub: ARGS}

    again = run_module(vfio_kernel_args, args)
    assert again["changed"] is False and again["ours"] == ARGS

    absent_check = run_module(vfio_kernel_args, {"path": grub, "state": "absent", "record": record, "backup": False}, check_mode=True)
    assert absent_check["changed"] is True and absent_check["removed"] == ARGS
    assert os.path.exists(record)
    absent = run_module(vfio_kernel_args, {"path": grub, "state": "absent", "record": record, "backup": False})
    assert absent["removed"] == ARGS
    assert open(grub).read() == GRUB
    assert not os.path.exists(record)
    assert run_module(vfio_kernel_args, {"path": grub, "state": "absent", "record": record})["changed"] is False


def test_conflict_fails_without_writing(tmp_path, run_module):
    grub, record = _setup(tmp_path)
    with open(grub, "w", encoding="utf-8") as handle:
        handle.write(GRUB.replace('GRUB_CMDLINE_LINUX=""', 'GRUB_CMDLINE_LINUX="iommu=soft"'))
    before = open(grub).read()
    result = run_module(vfio_kernel_args, {"path": grub, "args": ARGS, "record": record})
    assert result["failed"] is True
    assert "already sets iommu=soft" in result["msg"]
    assert open(grub).read() == before and not os.path.exists(record)


def test_backup_is_kept(tmp_path, run_module):
    grub, record = _setup(tmp_path)
    result = run_module(vfio_kernel_args, {"path": grub, "args": ARGS, "record": record})
    assert open(result["backup_file"]).read() == GRUB


def test_bad_record_fails(tmp_path, run_module):
    grub, record = _setup(tmp_path)
    os.makedirs(os.path.dirname(record))
    with open(record, "w", encoding="utf-8") as handle:
        handle.write("{not json")
    result = run_module(vfio_kernel_args, {"path": grub, "args": ARGS, "record": record})
    assert result["failed"] is True and "is not valid JSON" in result["msg"]
