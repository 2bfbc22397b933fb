"""The test images' zipimport bytecode cache (tests/hosts/debian12/gpuhost_test_zipimport_cache.py)."""

from __future__ import annotations

import importlib.util
import marshal
import sys
import traceback
import zipfile
import zipimport
from pathlib import Path

import pytest
import script_module

CACHE_MODULE = Path(__file__).resolve().parents[2] / "hosts" / "debian12" / "gpuhost_test_zipimport_cache.py"


def _load(name: str = "gpuhost_test_zipimport_cache"):
    """The module, loaded from the image's directory without writing bytecode there (script_module.load)."""
    return script_module.load(name, CACHE_MODULE)


@pytest.fixture(name="cache")
def _cache(tmp_path, monkeypatch):
    """Load the cache module with its cache under tmp_path; zipimport is restored afterwards."""
    monkeypatch.setattr(zipimport, "_compile_source", zipimport._compile_source)  # restored by monkeypatch
    module = _load()
    monkeypatch.setattr(module, "CACHE_DIR", str(tmp_path / "cache"))
    return module


def _import_from_zip(tmp_path: Path, name: str, source: str, archive: str):
    path = tmp_path / archive
    with zipfile.ZipFile(path, "w") as zipped:
        zipped.writestr(f"{name}.py", source)
    sys.modules.pop(name, None)
    importer = zipimport.zipimporter(str(path))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(name, importer))
    try:
        importer.exec_module(module)
    finally:
        sys.modules.pop(name, None)
    return module


def test_second_import_comes_from_the_cache_and_behaves_the_same(cache, tmp_path):
    source = "def answer():\n    return 42\n"
    first = _import_from_zip(tmp_path, "gpuhost_zc_demo", source, "one.zip")
    cached = list((tmp_path / "cache").iterdir())
    assert len(cached) == 1
    second = _import_from_zip(tmp_path, "gpuhost_zc_demo", source, "two.zip")
    assert len(list((tmp_path / "cache").iterdir())) == 1
    assert first.answer() == second.answer() == 42
    # The cached code takes the file name of the archive it was imported from this time.
    assert second.answer.__code__.co_filename == str(tmp_path / "two.zip" / "gpuhost_zc_demo.py")


def test_the_second_import_really_reads_the_cache(cache, tmp_path):
    source = b"VALUE = 'compiled'\n"
    _import_from_zip(tmp_path, "gpuhost_zc_demo", source.decode(), "f.zip")
    (entry,) = list((tmp_path / "cache").iterdir())
    entry.write_bytes(marshal.dumps(compile("VALUE = 'from the cache'\n", "x", "exec")))
    assert _import_from_zip(tmp_path, "gpuhost_zc_demo", source.decode(), "g.zip").VALUE == "from the cache"


def test_changed_source_is_compiled_again_never_served_stale(cache, tmp_path):
    assert _import_from_zip(tmp_path, "gpuhost_zc_demo", "VALUE = 1\n", "a.zip").VALUE == 1
    assert _import_from_zip(tmp_path, "gpuhost_zc_demo", "VALUE = 2\n", "b.zip").VALUE == 2
    assert len(list((tmp_path / "cache").iterdir())) == 2


def test_a_traceback_names_the_current_archive(cache, tmp_path):
    source = "def boom():\n    raise RuntimeError('boom')\n"
    _import_from_zip(tmp_path, "gpuhost_zc_demo", source, "first.zip")
    module = _import_from_zip(tmp_path, "gpuhost_zc_demo", source, "second.zip")
    with pytest.raises(RuntimeError) as info:
        module.boom()
    assert str(tmp_path / "second.zip") in "".join(traceback.format_tb(info.tb))


def test_an_unwritable_cache_only_costs_the_compile(cache, tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setattr(cache, "CACHE_DIR", str(blocker / "cache"))
    assert _import_from_zip(tmp_path, "gpuhost_zc_demo", "VALUE = 3\n", "c.zip").VALUE == 3


def test_a_corrupt_cache_entry_is_compiled_again(cache, tmp_path):
    _import_from_zip(tmp_path, "gpuhost_zc_demo", "VALUE = 4\n", "d.zip")
    (entry,) = list((tmp_path / "cache").iterdir())
    entry.write_bytes(b"\x00garbage")
    assert _import_from_zip(tmp_path, "gpuhost_zc_demo", "VALUE = 4\n", "e.zip").VALUE == 4


def test_loading_it_leaves_no_bytecode_in_the_image_directory(monkeypatch):
    """A stale one from an older checkout also fails here: it changes the images' key (delete the __pycache__)."""
    monkeypatch.setattr(zipimport, "_compile_source", zipimport._compile_source)  # restored by monkeypatch
    _load("gpuhost_test_zipimport_cache_probe")
    assert not (CACHE_MODULE.parent / "__pycache__").exists(), CACHE_MODULE.parent / "__pycache__"
