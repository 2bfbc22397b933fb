# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The converged probe and record run from the internal common role (its probe.yml and record.yml) work for the role
that included it: that role's record path, the variables of its argument specification, and the code of both roles in
the inputs digest. Without this, every role's record would be internal_common.json, digesting the common role only."""

from __future__ import annotations

import pathlib
import shutil

import converged_harness

ROLES = pathlib.Path(__file__).resolve().parents[3] / "roles"


def _controller(module, common: pathlib.Path, caller: str = "gpu_compose", **variables) -> converged_harness.Controller:
    controller = converged_harness.Controller(module)
    controller.vars.update(role_name="internal_common", role_path=str(common),
                           ansible_parent_role_names=["gpuhost.nvidia." + caller, "gpuhost.nvidia.other"],
                           ansible_parent_role_paths=[str(ROLES / caller), "/nowhere"], **variables)
    return controller


def _probe(controller: converged_harness.Controller) -> dict:
    controller.run({"state": "probe"})
    return controller.remote[-1]


def test_the_probe_is_the_including_roles(module) -> None:
    call = _probe(_controller(module, ROLES / "internal_common"))
    assert call["path"] == "/var/lib/gpuhost/converged/gpu_compose.json"
    other = _probe(_controller(module, ROLES / "internal_common", caller="gpu_settings"))
    assert other["path"] == "/var/lib/gpuhost/converged/gpu_settings.json" and other["inputs_digest"] != call["inputs_digest"]


def test_the_digest_covers_the_including_roles_variables_only(module) -> None:
    base = _probe(_controller(module, ROLES / "internal_common"))["inputs_digest"]
    assert _probe(_controller(module, ROLES / "internal_common", gpu_compose_strategy="cdi"))["inputs_digest"] != base
    assert _probe(_controller(module, ROLES / "internal_common", gpu_settings_state="absent"))["inputs_digest"] == base


def test_the_digest_covers_the_common_roles_code(module, tmp_path) -> None:
    copy = tmp_path / "internal_common"
    shutil.copytree(ROLES / "internal_common", copy)
    base = _probe(_controller(module, copy))["inputs_digest"]
    assert _probe(_controller(module, ROLES / "internal_common"))["inputs_digest"] == base
    (copy / "tasks" / "probe.yml").write_text((copy / "tasks" / "probe.yml").read_text(encoding="utf-8") + "# changed\n", encoding="utf-8")
    assert _probe(_controller(module, copy))["inputs_digest"] != base
