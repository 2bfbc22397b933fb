# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""gpu_compose_override against hostile and broken input (issue #16): every class refused, naming the option and the
value, with the project directory byte for byte as it was; and the defects the issue lists fixed."""

from __future__ import annotations

import os
import typing as t

import pytest
import yaml

import hostile

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _compose
from ansible_collections.gpuhost.nvidia.plugins.modules import gpu_compose_override

A100_MIG1 = "MIG-a1000000-0000-4000-8000-0000000000a1"
A100_MIG2 = "MIG-a1000000-0000-4000-8000-0000000000a2"
EXISTING = "services:\n  sidecar:\n    image: busybox\n"


@pytest.fixture
def project(tmp_path: t.Any) -> t.Any:
    directory = tmp_path / "project"
    directory.mkdir()
    (directory / "docker-compose.yml").write_text("services:\n  app:\n    image: busybox\n", encoding="utf-8")
    (directory / "docker-compose.gpu.yml").write_text(EXISTING, encoding="utf-8")
    (tmp_path / "remote-tmp").mkdir()
    return directory


@pytest.fixture
def run(run_compose_module: t.Any, project: t.Any, facts: t.Any) -> t.Callable[..., tuple[bool, dict[str, t.Any]]]:
    def call(check: bool = False, **extra: t.Any) -> tuple[bool, dict[str, t.Any]]:
        args: dict[str, t.Any] = {
            "path": str(project / "docker-compose.gpu.yml"),
            "facts": facts("two_h100"),
            "services": [{"name": "app", "device_ids": [0]}],
            "_ansible_check_mode": check,
            "_ansible_diff": True,
            "_ansible_remote_tmp": str(project.parent / "remote-tmp"),
        }
        args.update(extra)
        return run_compose_module(gpu_compose_override.main, args)

    return call


def refused(outcome: tuple[bool, dict[str, t.Any]], project: t.Any, before: dict[str, t.Any], option: str, value: t.Any = None,
            show_value: bool = True) -> dict[str, t.Any]:
    failed, result = outcome
    assert failed, result
    hostile.assert_refused(result, option, value, before=before, roots=[str(project.parent)], show_value=show_value)
    return result


def service(**fields: t.Any) -> list[dict[str, t.Any]]:
    return [dict({"name": "app"}, **fields)]


# -- the file options ---------------------------------------------------------------------------------------------
PATH_CASES = hostile.text_classes("control", "non_ascii", "empty", "huge") + [
    ("relative", "project/docker-compose.gpu.yml"),
    ("traversal", "/srv/project/../../etc/docker-compose.gpu.yml"),
    ("trailing-slash", "/srv/project/docker-compose.gpu.yml/"),
]


@pytest.mark.parametrize("value", [v for _i, v in PATH_CASES], ids=[i for i, _v in PATH_CASES])
def test_path_refused(run, project, value):
    before = hostile.snapshot(str(project.parent))
    refused(run(path=value), project, before, "path", value)


@pytest.mark.parametrize("kind", hostile.SPECIAL_KINDS)
@pytest.mark.parametrize("check", [False, True], ids=["real", "check"])
def test_unusable_path_refused(run, project, kind, check):
    value = hostile.make_special_cases(str(project.parent))[kind]
    before = hostile.snapshot(str(project.parent))
    refused(run(check=check, path=value), project, before, "path", value)


COMPOSE_FILE_CASES = [(i, v) for i, v in PATH_CASES if v and i != "relative"]


@pytest.mark.parametrize("value", [v for _i, v in COMPOSE_FILE_CASES], ids=[i for i, _v in COMPOSE_FILE_CASES])
def test_compose_files_refused(run, project, value):
    before = hostile.snapshot(str(project.parent))
    refused(run(validate=True, compose_files=[value]), project, before, "compose_files[0]", value)


def test_relative_compose_file_is_looked_for_in_the_project(run, project):
    before = hostile.snapshot(str(project.parent))
    refused(run(validate=True, compose_files=["compose.prod.yml"]), project, before, "compose_files", "compose.prod.yml",
            show_value=False)


@pytest.mark.parametrize("kind", ["directory", "under_file", "dangling_link", "fifo", "link_loop"])
def test_unusable_compose_file_refused(run, project, kind):
    value = hostile.make_special_cases(str(project.parent))[kind]
    before = hostile.snapshot(str(project.parent))
    refused(run(validate=True, compose_files=[value]), project, before, "compose_files", value)


BROKEN_OVERRIDES = [
    ("not-yaml", "services: [\n", "is not valid YAML"),
    ("a-list", "- a\n- b\n", "is not a compose mapping"),
    ("services-is-a-list", "services: [a, b]\n", "services key is not a mapping"),
    ("a-scalar", "just text\n", "is not a compose mapping"),
]


@pytest.mark.parametrize("content, message", [c[1:] for c in BROKEN_OVERRIDES], ids=[c[0] for c in BROKEN_OVERRIDES])
@pytest.mark.parametrize("check", [False, True], ids=["real", "check"])
def test_broken_existing_override_is_named(run, project, content, message, check):
    target = project / "docker-compose.gpu.yml"
    target.write_text(content, encoding="utf-8")
    before = hostile.snapshot(str(project.parent))
    result = refused(run(check=check), project, before, str(target), show_value=False)
    assert message in result["msg"]


def test_existing_override_that_is_not_utf8_is_named(run, project):
    target = project / "docker-compose.gpu.yml"
    target.write_bytes(b"services:\n  x:\n    image: \xff\n")
    before = hostile.snapshot(str(project.parent))
    refused(run(), project, before, str(target), show_value=False)


# -- the request --------------------------------------------------------------------------------------------------
NAME_CASES = hostile.text_classes("control", "shell", "whitespace", "non_ascii", "empty", "huge")


@pytest.mark.parametrize("value", [v for _i, v in NAME_CASES], ids=[i for i, _v in NAME_CASES])
def test_service_name_refused(run, project, value):
    before = hostile.snapshot(str(project.parent))
    refused(run(services=[{"name": value}]), project, before, "service name", value)


COUNT_CASES = [("zero", 0), ("negative", -1), ("beyond-any-host", 65), ("huge", 10 ** 20), ("negative-text", "-1"),
               ("word", "lots"), ("boolean", True), ("mapping", {"n": 1}), ("float", 1.5)]


@pytest.mark.parametrize("value", [v for _i, v in COUNT_CASES], ids=[i for i, _v in COUNT_CASES])
@pytest.mark.parametrize("with_facts", [True, False], ids=["facts", "no-facts"])
def test_count_refused(run, project, value, with_facts):
    before = hostile.snapshot(str(project.parent))
    refused(run(services=service(count=value), **({} if with_facts else {"facts": None})), project, before, "count", value)


def test_count_with_cdi_refused(run, project):
    before = hostile.snapshot(str(project.parent))
    refused(run(services=service(count=2, driver="cdi"), facts=None), project, before, "count", 2)


DEVICE_ID_CASES = hostile.text_classes("control", "shell", "whitespace", "non_ascii", "empty", "huge") + [
    ("negative", -1), ("beyond-any-host", 64), ("huge-index", 10 ** 20), ("huge-mig", "0:99"), ("mapping", {"a": 1}),
    ("list", [0]), ("boolean", True), ("null", None), ("float", 0.5), ("negative-text", "-1"),
]


@pytest.mark.parametrize("value", [v for _i, v in DEVICE_ID_CASES], ids=[i for i, _v in DEVICE_ID_CASES])
@pytest.mark.parametrize("with_facts", [True, False], ids=["facts", "no-facts"])
def test_device_ids_refused(run, project, value, with_facts):
    before = hostile.snapshot(str(project.parent))
    outcome = run(services=service(device_ids=[value]), **({} if with_facts else {"facts": None}))
    refused(outcome, project, before, "device", hostile.shown(value) if not isinstance(value, str) else value,
            show_value=isinstance(value, str) and len(value) < 200)


ENV_NAME_CASES = hostile.text_classes("control", "shell", "whitespace", "non_ascii", "empty", "huge") + [("leading-digit", "1X")]


@pytest.mark.parametrize("value", [v for _i, v in ENV_NAME_CASES], ids=[i for i, _v in ENV_NAME_CASES])
def test_environment_names_refused(run, project, value):
    before = hostile.snapshot(str(project.parent))
    refused(run(services=service(environment={value: "x"})), project, before, "environment", value)


ENV_VALUE_CASES = [("mapping", {"a": 1}), ("list", [1, 2]), ("newline", "a\nb"), ("escape", "\x1b[2J"), ("nul", "a\x00b"),
                   ("bidi", "\u202eevil"), ("huge", "v" * 40000)]


@pytest.mark.parametrize("value", [v for _i, v in ENV_VALUE_CASES], ids=[i for i, _v in ENV_VALUE_CASES])
def test_environment_values_refused(run, project, value):
    before = hostile.snapshot(str(project.parent))
    refused(run(services=service(environment={"FOO": value})), project, before, "environment FOO", value)


OTHER_CASES = [
    ("ipc", "host;reboot"), ("ipc", "host\n"), ("ipc", ""), ("ipc", "caf\u00e9"),
    ("runtime", ""), ("runtime", "nvidia\n"), ("runtime", "a b"), ("runtime", "$(reboot)"), ("runtime", "r" * 200),
    ("shm_size", -1), ("shm_size", 0), ("shm_size", 2 ** 64), ("shm_size", "8g\n"), ("shm_size", "9" * 40), ("shm_size", "-8g"),
    ("memory_mib", -5), ("memory_mib", 0), ("memory_mib", 10 ** 12),
    ("ulimits", {"memlock": -2}), ("ulimits", {"memlock": 2 ** 64}), ("ulimits", {"nofile": {"soft": 10, "hard": 5}}),
    ("ulimits", {"memlock\n": 1}), ("ulimits", {"memlock": "1; reboot"}), ("ulimits", {"memlock": [1]}),
]


@pytest.mark.parametrize("option, value", OTHER_CASES, ids=["%s-%d" % (o, n) for n, (o, _v) in enumerate(OTHER_CASES)])
def test_other_service_options_refused(run, project, option, value):
    before = hostile.snapshot(str(project.parent))
    outcome = run(services=service(**{option: value}))
    show = value if not isinstance(value, dict) else next(iter(value.values())) if option == "ulimits" else value
    if option == "ulimits":
        refused(outcome, project, before, "ulimit", show_value=False)
        assert repr(next(iter(value))) in outcome[1]["msg"] or next(iter(value)) in outcome[1]["msg"]
    else:
        refused(outcome, project, before, option, show)


CDI_KIND_CASES = hostile.text_classes("control", "shell", "whitespace", "non_ascii", "empty", "huge") + [("no-class", "gpu")]


@pytest.mark.parametrize("value", [v for _i, v in CDI_KIND_CASES], ids=[i for i, _v in CDI_KIND_CASES])
def test_cdi_kind_refused(run, project, value):
    before = hostile.snapshot(str(project.parent))
    refused(run(cdi_kind=value), project, before, "cdi_kind", value)


# -- facts whose values would be written ----------------------------------------------------------------------------
def _odd(facts: t.Any, edit: str) -> dict[str, t.Any]:
    f = facts("two_h100")
    if edit == "index":
        f["gpus"][0]["index"] = "0;reboot"
    elif edit == "negative-index":
        f["gpus"][0]["index"] = -1
    elif edit == "uuid":
        f["gpus"][0]["uuid"] = "GPU-x\nprivileged: true"
    elif edit == "gpus-string":
        f["gpus"] = "all"
    elif edit == "node":
        f["device_nodes"].append("/dev/nvidia/../sda")
    elif edit == "library":
        f["driver"]["library_paths"]["cuda"] = "/usr/lib/../../etc/shadow"
    elif edit == "relative-library":
        f["driver"]["library_paths"]["cuda"] = "libcuda.so.1"
    elif edit == "version":
        f["driver"]["version"] = f["driver"]["library_version"] = "../../../etc/shadow"
    return f


@pytest.mark.parametrize("edit, vm_mode", [("index", False), ("negative-index", False), ("uuid", False), ("gpus-string", False),
                                           ("node", True), ("library", True), ("relative-library", True), ("version", True)])
def test_odd_facts_are_refused_not_written(run, project, facts, edit, vm_mode):
    before = hostile.snapshot(str(project.parent))
    failed, result = run(facts=_odd(facts, edit), vm_mode=vm_mode)
    assert failed, result
    hostile.assert_refused(result, "facts" if not vm_mode else "vm_mode", show_value=False, before=before, roots=[str(project.parent)])


# -- the defects of issue #16 ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("device", [0, "0", "GPU-a1000000-0000-4000-8000-000000000000", "nvidia.com/gpu=0"])
def test_whole_gpu_with_mig_on_is_refused_like_a_vfio_gpu(run, project, facts, device):
    before = hostile.snapshot(str(project.parent))
    driver = "cdi" if str(device).startswith("nvidia.com") else "nvidia"
    result = refused(run(facts=facts("mixed"), services=service(device_ids=[device], driver=driver)), project, before, "device id",
                     show_value=False)
    assert "has MIG enabled" in result["msg"] and "0:0 (%s), 0:1 (%s)" % (A100_MIG1, A100_MIG2) in result["msg"]
    vfio = refused(run(facts=facts("mixed"), services=service(device_ids=[3])), project, before, "device id", show_value=False)
    assert "is bound to vfio-pci" in vfio["msg"]


def test_library_paths_fall_back_to_the_top_level_when_the_facts_found_none(run, project, facts):
    f = facts("two_h100")
    f["library_paths"] = dict(f["driver"]["library_paths"])
    f["driver"]["library_paths"] = {"nvml": None, "cuda": None}  # what nvidia_gpu_facts reports without a library
    failed, result = run(facts=f, vm_mode=True)
    assert not failed, result
    sources = [v["source"] for v in result["services"]["app"]["volumes"]]
    assert "/usr/lib/x86_64-linux-gnu/libcuda.so.1" in sources and "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1" in sources
    assert _compose.library_paths({"driver": {"library_paths": {"nvml": "/a/libnvidia-ml.so.1", "cuda": None}},
                                   "library_paths": {"cuda": "/b/libcuda.so.1", "nvml": "/b/x"}}) == {
        "nvml": "/a/libnvidia-ml.so.1", "cuda": "/b/libcuda.so.1"}


@pytest.mark.parametrize("value, written", [(1, "1"), (True, "true"), (2.5, "2.5"), (None, ""), ("x y", "x y")])
def test_scalar_environment_values_are_written_as_strings(run, project, value, written):
    failed, result = run(services=service(environment={"FOO": value}))
    assert not failed, result
    text = (project / "docker-compose.gpu.yml").read_text(encoding="utf-8")
    assert yaml.safe_load(text)["services"]["app"]["environment"]["FOO"] == written


@pytest.mark.parametrize("ids, strategy", [([0, "nvidia.com/gpu=1"], "explicit"), (None, "explicit"), (None, "spread")])
def test_cdi_assignment_is_what_the_file_holds(run, project, ids, strategy):
    svc = service(driver="cdi", **({"device_ids": ids} if ids else {}))
    failed, result = run(services=svc, strategy=strategy, id_format="index")
    assert not failed, result
    held = yaml.safe_load((project / "docker-compose.gpu.yml").read_text(encoding="utf-8"))
    reservation = held["services"]["app"]["deploy"]["resources"]["reservations"]["devices"][0]
    assert result["assignment"]["app"] == reservation["device_ids"]


def test_nothing_left_behind_after_refusals(run, project):
    before = sorted(os.listdir(project))
    for extra in ({"services": service(count=-1)}, {"services": service(environment={"A": {"b": 1}})}, {"cdi_kind": "x\ny"}):
        assert run(**extra)[0]
        assert run(check=True, **extra)[0]
    assert sorted(os.listdir(project)) == before
