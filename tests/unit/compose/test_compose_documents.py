# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Every kind of generated document validates against the compose spec, and merges under a real docker-compose."""

from __future__ import annotations

import os
import shutil
import subprocess
import typing as t

import pytest
import yaml

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _compose as c

FACTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "facts")


def load_facts(name: str) -> dict[str, t.Any]:
    with open(os.path.join(FACTS_DIR, name + ".yml"), encoding="utf-8") as handle:
        return yaml.safe_load(handle)


# (facts fixture or None, request) pairs that between them use every option, strategy and mode.
CASES: dict[str, tuple[str | None, dict[str, t.Any]]] = {
    "all-gpus": ("two_h100", {"services": [{"name": "app"}]}),
    "count": ("two_h100", {"services": [{"name": "app", "count": 2, "capabilities": ["gpu", "compute", "utility"]}]}),
    "ids-uuid": ("two_h100", {"services": [{"name": "app", "device_ids": [1, 0], "environment_presets": ["nvidia", "cuda"]}]}),
    "ids-index": ("two_h100", {"id_format": "index", "services": [{"name": "app", "device_ids": [0]}]}),
    "mig": ("mixed", {"services": [{"name": "a", "device_ids": ["0:0"]}, {"name": "b", "device_ids": ["MIG-a1000000-0000-4000-8000-0000000000a2"]}]}),
    "cdi": ("two_h100", {"services": [{"name": "a", "driver": "cdi", "device_ids": [0, "nvidia.com/gpu=1"]}, {"name": "b", "driver": "cdi"}]}),
    "knobs": ("two_h100", {"services": [{
        "name": "train", "device_ids": [0], "ipc": "host", "shm_size": "16g", "runtime": "nvidia",
        "ulimits": {"memlock": -1, "stack": 67108864, "nofile": {"soft": 1024, "hard": 65536}},
        "environment_presets": ["nvidia", "cuda", "cudnn", "pytorch", "tensorflow"],
        "environment": {"EXTRA": 1, "FLAG": True},
    }]}),
    "spread": ("four_pack", {"strategy": "spread", "services": [{"name": "s%d" % i} for i in range(5)]}),
    "pack": ("four_pack", {"strategy": "pack", "services": [{"name": "a", "memory_mib": 60000}, {"name": "b", "memory_mib": 20000, "count": 2}]}),
    "exclusive": ("mixed", {"strategy": "exclusive", "services": [{"name": "a"}, {"name": "b"}]}),
    "vm": ("two_h100", {"vm_mode": True, "services": [{"name": "a", "device_ids": [0]}, {"name": "b", "count": "all"}]}),
    "no-facts": (None, {"services": [{"name": "a", "device_ids": [0, "GPU-abc"]}]}),
}


def render(facts: t.Callable[[str], dict[str, t.Any]], case: str, existing: t.Any = None) -> str:
    name, request = CASES[case]
    plan = c.build(request, facts(name) if name else None)
    return c.render(c.merge(existing, plan.services))


@pytest.mark.parametrize("case", sorted(CASES))
def test_document_matches_the_compose_spec(facts, compose_validator, case):
    document = yaml.safe_load(render(facts, case))
    errors = sorted(compose_validator.iter_errors(document), key=lambda e: list(e.path))
    assert not errors, "\n".join("%s: %s" % ("/".join(map(str, e.path)), e.message) for e in errors)


def test_document_with_kept_services_matches_the_spec(facts, compose_validator):
    existing = {"services": {"sidecar": {"image": "busybox", "command": ["sleep", "inf"]}}, "x-owner": "ops"}
    compose_validator.validate(yaml.safe_load(render(facts, "knobs", existing)))


@pytest.fixture(scope="module")
def docker_compose() -> str:
    binary = shutil.which("docker-compose")
    if binary is None:
        pytest.skip("tool missing: docker-compose (bindep.txt; tests/deps/install.sh)")
    return binary


@pytest.fixture(scope="module")
def merged(docker_compose: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, t.Any], dict[str, t.Any]]:
    """One ``docker-compose config`` run over a base file and an override that holds every case's services.

    Services are renamed CASE--SERVICE so that one run covers all cases. Returns (expected entries, merged config).
    """
    expected: dict[str, t.Any] = {}
    for case, (name, request) in CASES.items():
        if case == "no-facts":
            continue
        plan = c.build(request, load_facts(name) if name else None)
        expected.update({"%s--%s" % (case, svc): entry for svc, entry in plan.services.items()})
    base = {"services": {svc: {"image": "busybox", "command": ["sleep", "infinity"], "environment": {"FOO": "bar"}} for svc in expected}}
    directory = tmp_path_factory.mktemp("compose")
    (directory / "docker-compose.yml").write_text(yaml.safe_dump(base), encoding="utf-8")
    (directory / "docker-compose.gpu.yml").write_text(c.render(c.merge(None, expected)), encoding="utf-8")
    proc = subprocess.run(
        [docker_compose, "-f", "docker-compose.yml", "-f", "docker-compose.gpu.yml", "config"],
        cwd=str(directory), env={**os.environ, "LC_ALL": "C"}, capture_output=True, text=True, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return expected, yaml.safe_load(proc.stdout)


@pytest.mark.parametrize("case", sorted(set(CASES) - {"no-facts"}))
def test_docker_compose_merges_the_override(merged, case):
    expected, config = merged
    services = {k: v for k, v in expected.items() if k.startswith(case + "--")}
    assert services
    for service, entry in services.items():
        got = config["services"][service]
        # The base file's keys survive the merge.
        assert got["image"] == "busybox" and got["command"] == ["sleep", "infinity"] and got["environment"]["FOO"] == "bar"
        if "deploy" in entry:
            # The merged service keeps its GPU reservation.
            assert got["deploy"]["resources"]["reservations"]["devices"] == entry["deploy"]["resources"]["reservations"]["devices"]
        else:
            assert got["privileged"] is True
            assert sorted(got["devices"]) == sorted(entry["devices"])
            assert {v["target"] for v in got["volumes"]} == {v["target"] for v in entry["volumes"]}
            assert all(v["read_only"] for v in got["volumes"])
        for key, value in entry.get("environment", {}).items():
            assert got["environment"][key] == value
        for key in ("ipc", "shm_size", "runtime", "ulimits"):
            if key in entry:
                assert got[key] == entry[key]
