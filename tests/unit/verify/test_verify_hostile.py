# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""gpu_container_check against hostile input (issue #16): every option checked before the engine is asked anything."""

from __future__ import annotations

import typing as t

import pytest

import hostile

from ansible_collections.gpuhost.nvidia.plugins.modules import gpu_container_check

FACTS = {"state": "ok", "gpus": []}
TEXT = hostile.text_classes("control", "shell", "whitespace", "non_ascii", "empty", "huge")
CASES: list[tuple[str, str, t.Any, t.Any]] = (
    [("docker_host-%s" % i, "docker_host", v, v) for i, v in hostile.text_classes("control", "whitespace", "non_ascii", "empty", "huge")]
    + [("docker_host-file", "docker_host", "file:///etc/passwd", "file:///etc/passwd"),
       ("docker_host-no-scheme", "docker_host", "/var/run/docker.sock", "/var/run/docker.sock"),
       ("docker_host-shell", "docker_host", "unix:///var/run/docker.sock;reboot", "unix:///var/run/docker.sock;reboot")]
    + [("timeout-zero", "timeout", 0, 0), ("timeout-negative", "timeout", -5, -5), ("timeout-huge", "timeout", 10 ** 9, 10 ** 9)]
    + [("image-%s" % i, "image", v, v) for i, v in TEXT]
    + [("command-empty-list", "command", [], [])]
    + [("command-%s" % i, "command", ["nvidia-smi", v], v) for i, v in hostile.text_classes("control", "huge")]
    + [("device_ids-%s" % i, "device_ids", [v], v) for i, v in TEXT + [("negative", "-1"), ("bad-uuid", "GPU-x"), ("index-100", "100")]]
    + [("runtime_name-%s" % i, "runtime_name", v, v) for i, v in TEXT]
    + [("cdi_kind-%s" % i, "cdi_kind", v, v) for i, v in TEXT + [("no-class", "gpu")]]
)


@pytest.fixture
def no_engine(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    asked: list[str] = []

    def client(**_kwargs: t.Any) -> t.Any:
        asked.append("DockerClient")
        raise AssertionError("the engine was asked before the options were checked")

    monkeypatch.setattr(gpu_container_check.docker, "DockerClient", client)
    return asked


@pytest.mark.parametrize("option, value, shown", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_options_refused_before_the_engine_is_asked(run_module, no_engine, option, value, shown):
    result = run_module(gpu_container_check, {"facts": FACTS, option: value})
    hostile.assert_refused(result, option, shown)
    assert no_engine == []


def test_a_good_address_reaches_the_engine(run_module, no_engine):
    with pytest.raises(AssertionError, match="the engine was asked"):
        run_module(gpu_container_check, {"facts": FACTS, "docker_host": "tcp://[::1]:2375", "image": "registry.example.com:5000/cuda@sha256:ab"})
