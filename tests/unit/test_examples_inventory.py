"""The example inventory sets only variables the roles declare, with values their argument_specs accept."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

ROOT = Path(__file__).resolve().parents[2]
# The roles a user puts in a play: those with a main entry point (internal_repository has only tasks_from ones).
ROLES = sorted(path.name for path in (ROOT / "roles").iterdir() if (path / "meta" / "argument_specs.yml").is_file()
               and "main" in yaml.safe_load((path / "meta" / "argument_specs.yml").read_text(encoding="utf-8"))["argument_specs"])
VAR_FILES = sorted((ROOT / "examples" / "inventory").glob("*_vars/*.yml"))


def _spec(role: str) -> dict:
    specs = yaml.safe_load((ROOT / "roles" / role / "meta" / "argument_specs.yml").read_text(encoding="utf-8"))
    return specs["argument_specs"]["main"]["options"]


def _owner(name: str) -> str | None:
    """The role whose prefix the variable carries (the longest match), if any."""
    owners = [role for role in ROLES if name.startswith(role + "_")]
    return max(owners, key=len) if owners else None


@pytest.mark.parametrize("path", VAR_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_example_variables_pass_the_roles_argument_specs(path: Path) -> None:
    values = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    by_role: dict[str, dict] = {}
    for name, value in values.items():
        role = _owner(name)
        if role is not None:
            by_role.setdefault(role, {})[name] = value
    assert by_role or path.name.startswith("gpu-vm-host"), f"{path} sets no role variable"
    for role, params in by_role.items():
        spec = _spec(role)
        unknown = sorted(set(params) - set(spec))
        assert unknown == [], f"{path.name}: {role} declares no {unknown}"
        result = ArgumentSpecValidator(spec).validate(params)
        assert result.error_messages == [], f"{path.name}: {role}: {result.error_messages}"


def test_every_site_role_appears_in_the_example() -> None:
    text = (ROOT / "examples" / "inventory" / "group_vars" / "all.yml").read_text(encoding="utf-8")
    missing = [role for role in ROLES if f"{role}_" not in text]
    assert missing == []
