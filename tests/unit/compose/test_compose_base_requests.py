# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""gpu_compose_override's base_requests through main(): refuse reads the project's compose files before anything is
written (a GPU request there, or a file it cannot read, fails the task and writes nothing); replace writes the tags and
stays idempotent; request_form gpus writes the service-level attribute."""

from __future__ import annotations

import typing as t

import pytest

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _compose
from ansible_collections.gpuhost.nvidia.plugins.modules import gpu_compose_override


@pytest.fixture
def project(tmp_path):
    directory = tmp_path / "project"
    directory.mkdir()
    return directory


@pytest.fixture
def run(run_compose_module, tmp_path):
    remote_tmp = tmp_path / "remote-tmp"
    remote_tmp.mkdir()

    def call(args: dict[str, t.Any], check: bool = False) -> tuple[bool, dict[str, t.Any]]:
        full = dict(args, _ansible_check_mode=check, _ansible_diff=True, _ansible_remote_tmp=str(remote_tmp),
                    _ansible_keep_remote_files=False)
        return run_compose_module(gpu_compose_override.main, full)

    return call


def args(project, **extra: t.Any) -> dict[str, t.Any]:
    return dict({"path": str(project / "docker-compose.gpu.yml"), "record": str(project.parent / "record.json"),
                 "services": [{"name": "app", "device_ids": ["0"]}]}, **extra)


BASE_REQUESTS = {
    "gpus all": "services:\n  app:\n    image: busybox\n    gpus: all\n",
    "deploy devices": "services:\n  app:\n    image: busybox\n    deploy:\n      resources:\n        reservations:\n"
                      "          devices:\n            - driver: nvidia\n              count: all\n",
    "hidden under !override": "services:\n  app: !override\n    image: busybox\n    gpus: [{driver: nvidia, count: 1}]\n",
}


@pytest.mark.parametrize("text", BASE_REQUESTS.values(), ids=list(BASE_REQUESTS))
@pytest.mark.parametrize("check", [True, False])
def test_refuse_stops_before_writing_naming_the_service_and_the_file(run, project, text, check):
    (project / "compose.yml").write_text(text, encoding="utf-8")
    failed, result = run(args(project), check=check)
    assert failed, result
    assert "service 'app'" in result["msg"] and str(project / "compose.yml") in result["msg"]
    assert "base_requests: replace" in result["msg"]
    assert sorted(p.name for p in project.iterdir()) == ["compose.yml"]
    assert not (project.parent / "record.json").exists()


def test_refuse_checks_the_files_given_and_another_service_is_not_ours(run, project):
    (project / "compose.yml").write_text("services:\n  app:\n    image: busybox\n", encoding="utf-8")
    (project / "compose.gpu-base.yml").write_text(BASE_REQUESTS["gpus all"].replace("app", "other"), encoding="utf-8")
    failed, result = run(args(project, compose_files=["compose.yml", "compose.gpu-base.yml"]))
    assert not failed and result["changed"], result
    (project / "compose.gpu-base.yml").write_text(BASE_REQUESTS["gpus all"], encoding="utf-8")
    failed, result = run(args(project, compose_files=["compose.yml", "compose.gpu-base.yml"]))
    assert failed and "compose.gpu-base.yml" in result["msg"]


@pytest.mark.parametrize("text", ["services: [unclosed\n", b"\xff\xfe".decode("latin-1")])
def test_refuse_fails_closed_on_a_base_file_it_cannot_read(run, project, text):
    (project / "compose.yml").write_text(text, encoding="latin-1" if "\xff" in text else "utf-8")
    failed, result = run(args(project))
    assert failed and "cannot be read to check it for GPU requests" in result["msg"], result
    assert sorted(p.name for p in project.iterdir()) == ["compose.yml"]


def test_refuse_with_no_project_file_writes_plain_yaml(run, project):
    failed, result = run(args(project))
    assert not failed and result["changed"]
    text = (project / "docker-compose.gpu.yml").read_text(encoding="utf-8")
    assert "!override" not in text and "!reset" not in text


@pytest.mark.parametrize("form", _compose.REQUEST_FORMS)
def test_replace_writes_the_tags_once_and_a_second_run_changes_nothing(run, project, form):
    (project / "compose.yml").write_text(BASE_REQUESTS["gpus all"], encoding="utf-8")
    request = args(project, base_requests="replace", request_form=form)
    failed, predicted = run(request, check=True)
    assert not failed and predicted["changed"]
    failed, result = run(request)
    assert not failed and result["changed"]
    assert result["diff"]["after"] == predicted["diff"]["after"]
    text = (project / "docker-compose.gpu.yml").read_text(encoding="utf-8")
    assert ("gpus: !override" if form == "gpus" else "devices: !override") in text
    assert ("devices: !reset []" if form == "gpus" else "gpus: !reset []") in text
    # the result is plain data (no tags), and the second run reads the tags back as they were
    assert result["services"]["app"]["gpus" if form == "gpus" else "deploy"]
    failed, again = run(request)
    assert not failed and not again["changed"], again["diff"]


def test_a_users_tagged_service_in_the_override_is_kept_byte_for_byte(run, project):
    mine = "  sidecar:\n    image: busybox\n    ports: !reset []\n    environment: !override\n      A: '1'\n"
    (project / "docker-compose.gpu.yml").write_text("services:\n" + mine, encoding="utf-8")
    failed, result = run(args(project))
    assert not failed and result["changed"]
    text = (project / "docker-compose.gpu.yml").read_text(encoding="utf-8")
    assert "ports: !reset []" in text and "environment: !override" in text
    assert result["document"]["services"]["sidecar"]["environment"] == {"A": "1"}
    failed, again = run(args(project))
    assert not failed and not again["changed"]
