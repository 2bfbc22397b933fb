# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Fixtures for the compose override builder and module: GPU facts from YAML, the compose schema, a module runner."""

from __future__ import annotations

import copy
import json
import os
import typing as t

import pytest
import yaml

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args

HERE = os.path.dirname(os.path.abspath(__file__))
FACTS_DIR = os.path.join(HERE, "facts")
# The schemas are shared next to the repository, never copied into it.
SCHEMAS = os.path.normpath(os.path.join(HERE, "..", "..", "..", "..", "shared", "schemas"))
COMPOSE_SCHEMA = os.path.join(SCHEMAS, "compose-spec.json")


def load_facts(name: str) -> dict[str, t.Any]:
    with open(os.path.join(FACTS_DIR, name + ".yml"), encoding="utf-8") as handle:
        return yaml.safe_load(handle)


@pytest.fixture
def facts() -> t.Callable[[str], dict[str, t.Any]]:
    """``facts('two_h100')`` returns a fresh copy of tests/unit/compose/facts/two_h100.yml."""
    cache: dict[str, dict[str, t.Any]] = {}

    def get(name: str) -> dict[str, t.Any]:
        if name not in cache:
            cache[name] = load_facts(name)
        return copy.deepcopy(cache[name])

    return get


@pytest.fixture(scope="session")
def compose_validator() -> t.Any:
    """A jsonschema validator for the compose spec; the test is skipped only when the shared schema is absent."""
    if not os.path.isfile(COMPOSE_SCHEMA):
        pytest.skip("compose-spec.json is not at %s" % COMPOSE_SCHEMA)
    jsonschema = pytest.importorskip("jsonschema")
    with open(COMPOSE_SCHEMA, encoding="utf-8") as handle:
        schema = json.load(handle)
    # The spec says draft-07 (without the trailing "#" that jsonschema looks for).
    return jsonschema.Draft7Validator(schema)


class ExitJson(Exception):
    """exit_json was called; the result is in args[0]."""


class FailJson(Exception):
    """fail_json was called; the result is in args[0]."""


@pytest.fixture
def run_compose_module(monkeypatch: pytest.MonkeyPatch) -> t.Callable[..., tuple[bool, dict[str, t.Any]]]:
    """``run_compose_module(main, {...args})`` returns (failed, result) with the warnings in result['warnings']."""

    def exit_json(self: basic.AnsibleModule, **kwargs: t.Any) -> None:
        kwargs.setdefault("changed", False)
        kwargs["warnings"] = list(getattr(basic, "_global_warnings", {}) or [])
        raise ExitJson(kwargs)

    def fail_json(self: basic.AnsibleModule, msg: str, **kwargs: t.Any) -> None:
        kwargs["msg"] = msg
        kwargs["failed"] = True
        raise FailJson(kwargs)

    warnings: list[str] = []

    def warn(self: basic.AnsibleModule, warning: str) -> None:
        warnings.append(warning)

    monkeypatch.setattr(basic.AnsibleModule, "exit_json", exit_json)
    monkeypatch.setattr(basic.AnsibleModule, "fail_json", fail_json)
    monkeypatch.setattr(basic.AnsibleModule, "warn", warn)

    def run(main: t.Callable[[], None], args: dict[str, t.Any]) -> tuple[bool, dict[str, t.Any]]:
        del warnings[:]
        with patch_module_args(args):
            try:
                main()
            except ExitJson as exc:
                result = exc.args[0]
                result["warnings"] = list(warnings)
                return False, result
            except FailJson as exc:
                result = exc.args[0]
                result["warnings"] = list(warnings)
                return True, result
        raise AssertionError("the module returned without exit_json or fail_json")

    return run


@pytest.fixture(autouse=True)
def _compose_record_in_tmp(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """gpu_compose_override's record never goes to the test machine's /var/lib/gpuhost unless a test passes its own."""
    from ansible_collections.gpuhost.nvidia.plugins.modules import gpu_compose_override
    monkeypatch.setattr(gpu_compose_override, "DEFAULT_RECORD", str(tmp_path_factory.mktemp("record") / "compose.json"))
