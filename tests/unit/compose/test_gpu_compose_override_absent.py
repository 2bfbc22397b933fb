# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""gpu_compose_override state=absent: only the managed services go; the user's file comes back byte for byte."""

from __future__ import annotations

import typing as t

import pytest
import yaml

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _compose
from ansible_collections.gpuhost.nvidia.plugins.modules import gpu_compose_override

# A user's shared override file: another service, a top-level extension key, comments and their own layout.
USER_OVERRIDE = """# Ops: the sidecar's logging, keep this file.
x-owner: ops
services:
  sidecar:
    image: busybox   # pinned by ops
    logging: {driver: journald}
"""


@pytest.fixture
def run(run_compose_module, tmp_path):
    remote_tmp = tmp_path / "remote-tmp"
    remote_tmp.mkdir()

    def call(args: dict[str, t.Any], check: bool = False) -> dict[str, t.Any]:
        full = dict(args, _ansible_check_mode=check, _ansible_diff=True, _ansible_remote_tmp=str(remote_tmp),
                    _ansible_keep_remote_files=False)
        failed, result = run_compose_module(gpu_compose_override.main, full)
        assert not failed, result
        return result

    return call


def _args(tmp_path, facts, **extra):
    args = {"path": str(tmp_path / "docker-compose.gpu.yml"), "facts": facts("two_h100"),
            "record": str(tmp_path / "lib" / "record.json"),
            "services": [{"name": "app", "device_ids": [1]}, {"name": "trainer", "count": 1}]}
    args.update(extra)
    return args


def _round_trip(run, args, target) -> tuple[dict, dict]:
    before = target.read_bytes() if target.exists() else None
    assert run(args, check=True)["changed"]
    assert run(args)["changed"]
    assert not run(args)["changed"]
    converged = target.read_bytes()
    absent = dict(args, state="absent")
    predicted = run(absent, check=True)
    assert predicted["changed"] and target.read_bytes() == converged
    real = run(absent)
    assert real["changed"] and real["removed"] == predicted["removed"]
    assert (target.read_bytes() if target.exists() else None) == before
    again = run(absent)
    assert not again["changed"]
    return predicted, real


def test_shared_override_keeps_the_other_service_byte_for_byte(run, tmp_path, facts):
    target = tmp_path / "docker-compose.gpu.yml"
    target.write_text(USER_OVERRIDE)
    args = _args(tmp_path, facts)

    predicted, real = _round_trip(run, args, target)
    assert target.read_text() == USER_OVERRIDE
    assert predicted["removed"] is False and real["unmanaged_services"] == ["sidecar"]
    assert not (tmp_path / "lib" / "record.json").exists()


def test_override_the_module_created_is_removed(run, tmp_path, facts):
    target = tmp_path / "docker-compose.gpu.yml"
    predicted, _real = _round_trip(run, _args(tmp_path, facts), target)
    assert predicted["removed"] is True and not target.exists()


def test_without_record_only_our_services_go_and_the_rest_is_rendered(run, tmp_path, facts):
    target = tmp_path / "docker-compose.gpu.yml"
    target.write_text(USER_OVERRIDE)
    args = _args(tmp_path, facts)
    run(args)
    (tmp_path / "lib" / "record.json").unlink()
    result = run(dict(args, state="absent"))
    assert result["changed"] and not result["removed"]
    assert yaml.safe_load(target.read_text()) == yaml.safe_load(USER_OVERRIDE)


def test_absent_without_the_file_changes_nothing(run, tmp_path, facts):
    result = run(dict(_args(tmp_path, facts), state="absent"))
    assert not result["changed"] and not (tmp_path / "docker-compose.gpu.yml").exists()


def test_absent_needs_no_facts_and_refuses_bad_names(run_compose_module, tmp_path):
    failed, result = run_compose_module(gpu_compose_override.main, {
        "path": str(tmp_path / "x.yml"), "state": "absent", "record": str(tmp_path / "r.json"),
        "services": [{"name": "bad name"}], "_ansible_remote_tmp": str(tmp_path)})
    assert failed and "not a valid compose service name" in result["msg"]


@pytest.mark.parametrize(("existing", "expected"), [
    (None, {}),
    ({"services": {"app": {}, "web": {"image": "x"}}}, {"services": {"web": {"image": "x"}}}),
    ({"services": {"app": {}}, "x-a": 1}, {"x-a": 1}),
    ({"services": {"app": {}}}, {}),
])
def test_remove_planner(existing, expected):
    assert _compose.remove(existing, ["app"]) == expected


def test_remove_refuses_a_file_that_is_not_a_mapping():
    with pytest.raises(_compose.ComposeError, match="not a compose mapping"):
        _compose.remove(["a"], ["app"], "f.yml")
