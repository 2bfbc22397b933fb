"""docs/design.md stays true (#19 item 6): its module_utils map names every file in plugins/module_utils, and only
those; the README points at it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
DESIGN = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")


def _section(title: str) -> str:
    start = DESIGN.index("\n## %s\n" % title)
    end = DESIGN.find("\n## ", start + 1)
    return DESIGN[start:end if end > 0 else None]


def test_module_utils_map_names_every_file():
    mapped = re.findall(r"^\| `(_\w+\.py)` \|", _section("module_utils map"), re.M)
    files = sorted(p.name for p in (ROOT / "plugins" / "module_utils").glob("*.py") if p.name != "__init__.py")
    assert sorted(mapped) == files
    assert len(mapped) == len(set(mapped))


def test_modules_table_names_every_module():
    listed = re.findall(r"^\| `(\w+)` \|", _section("Modules"), re.M)
    assert sorted(listed) == sorted(p.stem for p in (ROOT / "plugins" / "modules").glob("*.py"))


def test_state_records_are_the_modules_defaults():
    from ansible_collections.gpuhost.nvidia.plugins.module_utils import _files
    records = re.findall(r"^\| `(/[^`]+)` \|", _section("State records"), re.M)
    assert len(records) == 7
    sources = "".join(p.read_text(encoding="utf-8") for p in (ROOT / "plugins" / "modules").glob("*.py"))
    for record in records:
        assert record.startswith((_files.STATE_DIR + "/", _files.RUN_STATE_DIR + "/")), record
        assert "<role>" in record or "default: %s\n" % record in sources, record


def test_readme_points_at_the_design():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "docs/design.md" in readme and "DESIGN.md" not in readme


def test_one_test_layout():
    """Feature folders only: no tests/unit/plugins mirror beside them."""
    unit = ROOT / "tests" / "unit"
    assert not (unit / "plugins").exists()
    for folder in sorted(p.name for p in unit.iterdir() if p.is_dir() and any(p.glob("test_*.py"))):
        assert "%s/" % folder in _section("Layout"), folder
