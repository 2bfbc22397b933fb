"""The facts option is documented once (#19 item 6): plugins/doc_fragments/facts.py, extended by every module that
plans from the GPU facts; a module adds only what differs (required, default)."""

from __future__ import annotations

import copy
import importlib
import re
from pathlib import Path

import pytest
import yaml

from ansible_collections.gpuhost.nvidia.plugins.doc_fragments.facts import ModuleDocFragment

MODULES = Path(__file__).resolve().parents[3] / "plugins" / "modules"
FRAGMENT = yaml.safe_load(ModuleDocFragment.DOCUMENTATION)["options"]["facts"]


def _docs() -> dict[str, dict]:
    out = {}
    for path in sorted(MODULES.glob("*.py")):
        module = importlib.import_module("ansible_collections.gpuhost.nvidia.plugins.modules." + path.stem)
        out[path.stem] = yaml.safe_load(module.DOCUMENTATION)
    return out


DOCS = _docs()
WITH_FACTS = sorted(name for name, doc in DOCS.items()
                    if "facts" in (doc.get("options") or {}) or "gpuhost.nvidia.facts" in (doc.get("extends_documentation_fragment") or []))


def test_the_modules_that_take_facts():
    source = {name for name in DOCS if re.search(r'\bfacts=dict\(type="dict"', (MODULES / (name + ".py")).read_text(encoding="utf-8"))}
    assert WITH_FACTS == sorted(source)
    assert WITH_FACTS == ["gpu_compose_override", "gpu_container_check", "nvidia_cdi_spec", "nvidia_gpu_doctor"]
    assert FRAGMENT["type"] == "dict" and "gpuhost.nvidia.nvidia_gpu_facts" in FRAGMENT["description"][0]


@pytest.mark.parametrize("name", WITH_FACTS)
def test_facts_option_comes_from_the_fragment(name):
    doc = DOCS[name]
    assert "gpuhost.nvidia.facts" in doc["extends_documentation_fragment"]
    own = doc["options"].get("facts") or {}
    assert set(own) <= {"required", "default"}, "%s documents facts itself: %s" % (name, own)
    merged = dict(copy.deepcopy(FRAGMENT), **own)
    assert merged["description"] == FRAGMENT["description"] and merged["type"] == "dict"
