# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""nvidia_gpu_doctor against hostile input (issue #16): every option checked before the host is read."""

from __future__ import annotations

import typing as t

import pytest

import hostile

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _doctor
from ansible_collections.gpuhost.nvidia.plugins.modules import nvidia_gpu_doctor

FACTS = {"state": "no_gpu", "gpus": [], "driver": {}}
PATHS = hostile.text_classes("control", "non_ascii", "empty", "huge") + [("relative", "etc/docker/daemon.json"),
                                                                         ("traversal", "/etc/docker/../../x")]
TEXT = hostile.text_classes("control", "shell", "whitespace", "non_ascii", "empty", "huge")
CASES: list[tuple[str, str, t.Any]] = (
    [("required_cuda-%s" % i, "required_cuda", v) for i, v in TEXT + [("word", "latest"), ("negative", "-12.4"), ("four", "1.2.3.4")]]
    + [("vfio_devices-%s" % i, "vfio_devices", [v]) for i, v in hostile.text_classes("control", "whitespace", "non_ascii", "empty", "huge")]
    + [("%s-%s" % (o, i), o, v) for o in ("docker_daemon_json", "containerd_config", "containerd_conf_dir") for i, v in PATHS]
    + [("cdi_dirs-%s" % i, "cdi_dirs", ["/etc/cdi", v]) for i, v in PATHS]
    + [("cdi_kind-%s" % i, "cdi_kind", v) for i, v in TEXT + [("no-class", "gpu")]]
    + [("runtime_name-%s" % i, "runtime_name", v) for i, v in TEXT]
    + [("ecc-negative", "ecc_corrected_warn", -1), ("ecc-huge", "ecc_corrected_warn", 2 ** 40)]
    + [("skip-%s" % i, "skip", [v]) for i, v in hostile.text_classes("control", "non_ascii", "huge")]
    + [("root-%s" % i, "root", v) for i, v in PATHS]
)


def _shown(option: str, value: t.Any) -> t.Any:
    return value[-1] if isinstance(value, list) else value


@pytest.fixture
def no_host_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    reads: list[str] = []
    monkeypatch.setattr(_doctor, "read_host", lambda *a, **k: reads.append("read_host") or {})
    return reads


@pytest.mark.parametrize("option, value", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_options_refused_before_the_host_is_read(run_module, no_host_reads, option, value):
    result = run_module(nvidia_gpu_doctor, {"facts": FACTS, option: value})
    hostile.assert_refused(result, option, _shown(option, value))
    assert no_host_reads == []


@pytest.mark.parametrize("kind", ["missing", "file", "dangling_link", "fifo", "under_file"])
def test_root_that_is_not_a_directory_is_refused(run_module, no_host_reads, tmp_path, kind):
    special = hostile.make_special_cases(str(tmp_path))
    value = {"missing": str(tmp_path / "gone"), "file": str(tmp_path / "a-file")}.get(kind) or special[kind]
    hostile.assert_refused(run_module(nvidia_gpu_doctor, {"facts": FACTS, "root": value}), "root", value)
    assert no_host_reads == []


@pytest.mark.parametrize("facts", [{"gpus": "x", "driver": {}}, {"gpus": [], "driver": "x"}, {"state": "ok"}])
def test_facts_of_the_wrong_shape_are_refused(run_module, no_host_reads, facts):
    result = run_module(nvidia_gpu_doctor, {"facts": facts})
    hostile.assert_refused(result, "facts", show_value=False)
