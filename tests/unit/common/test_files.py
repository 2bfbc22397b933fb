# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""_files refuses every path that is not a usable file, naming the option and the path, and never leaves a temporary
file behind (issue #16)."""

from __future__ import annotations

import os
import typing as t

import pytest

import hostile

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _files

PROBLEMS = {
    "directory": "is a directory, not a regular file",
    "under_file": "which is a regular file, not a directory",
    "dangling_link": "which does not exist",
    "fifo": "is a FIFO, not a regular file",
    "link_loop": "is a loop of symbolic links",
    "under_dangling_link": "which does not exist",
}


@pytest.mark.parametrize("kind", hostile.SPECIAL_KINDS)
@pytest.mark.parametrize("operation", ["check_file", "read_bytes", "remove"])
def test_unusable_files_are_refused(tmp_path, kind, operation):
    path = hostile.make_special_cases(str(tmp_path))[kind]
    before = hostile.snapshot(str(tmp_path))
    with pytest.raises(_files.FileError) as err:
        getattr(_files, operation)(path, "the_option")
    assert str(err.value).startswith("the_option %r " % path)
    assert PROBLEMS[kind] in str(err.value)
    assert hostile.snapshot(str(tmp_path)) == before


@pytest.mark.parametrize("kind", ["under_file", "dangling_link", "fifo", "under_dangling_link"])
def test_directories_that_cannot_be_made_are_refused(tmp_path, kind):
    path = hostile.make_special_cases(str(tmp_path))[kind]
    before = hostile.snapshot(str(tmp_path))
    with pytest.raises(_files.FileError) as err:
        _files.make_dirs(os.path.join(path, "sub"), "dir")
    assert str(err.value).startswith("dir ")
    assert hostile.snapshot(str(tmp_path)) == before


def test_a_file_where_a_directory_belongs(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(_files.FileError, match="is a regular file, not a directory"):
        _files.check_directory(str(tmp_path / "f"), "dir")


def test_missing_files_and_links_to_files_are_fine(tmp_path):
    assert _files.read_bytes(str(tmp_path / "absent"), "p") is None
    assert _files.check_file(str(tmp_path / "no" / "such" / "dir" / "file"), "p") is False
    (tmp_path / "real").write_bytes(b"data")
    os.symlink(str(tmp_path / "real"), str(tmp_path / "link"))
    assert _files.read_bytes(str(tmp_path / "link"), "p") == b"data"
    assert _files.make_dirs(str(tmp_path / "a" / "b"), "p") is True and (tmp_path / "a" / "b").is_dir()
    assert _files.remove(str(tmp_path / "real"), "p") is True and _files.remove(str(tmp_path / "real"), "p") is False


def test_huge_files_are_refused(tmp_path):
    big = tmp_path / "big"
    big.write_bytes(b"x" * 2048)
    with pytest.raises(_files.FileError, match="larger than 1024 bytes"):
        _files.read_bytes(str(big), "p", max_size=1024)


def test_character_devices_are_refused():
    if not os.path.exists("/dev/null"):
        pytest.skip("no /dev/null")
    with pytest.raises(_files.FileError, match="is a character device, not a regular file"):
        _files.read_bytes("/dev/null", "p")


class FakeModule:
    """What write_file needs of AnsibleModule."""

    def __init__(self, tmpdir: str, check_mode: bool = False):
        self.tmpdir = tmpdir
        self.check_mode = check_mode
        self.params: dict[str, t.Any] = {}
        self.failed: dict[str, t.Any] | None = None

    def fail_json(self, **kwargs: t.Any) -> None:
        self.failed = kwargs
        raise SystemExit(1)

    def atomic_move(self, src: str, dest: str, unsafe_writes: bool = False) -> None:
        os.rename(src, dest)

    def backup_local(self, path: str) -> str:  # pragma: no cover - not used here
        raise AssertionError


@pytest.mark.parametrize("kind", hostile.SPECIAL_KINDS)
@pytest.mark.parametrize("check_mode", [False, True])
def test_write_file_fails_cleanly_and_leaves_nothing_behind(tmp_path, kind, check_mode):
    path = hostile.make_special_cases(str(tmp_path / "work"))[kind] if (tmp_path / "work").mkdir() is None else ""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    module = FakeModule(str(scratch), check_mode)
    before = hostile.snapshot(str(tmp_path))
    with pytest.raises(SystemExit):
        _files.write_file(module, path, b"new\n", what="the_option")  # type: ignore[arg-type]
    assert module.failed is not None and module.failed["msg"].startswith("the_option ")
    assert path in module.failed["msg"]
    assert hostile.snapshot(str(tmp_path)) == before


def test_a_failing_validator_leaves_no_temporary_file(tmp_path):
    target = tmp_path / "conf"
    target.write_bytes(b"old\n")
    module = FakeModule(str(tmp_path / "scratch"))

    def refuse(tmp: str) -> None:
        raise RuntimeError("invalid")

    with pytest.raises(RuntimeError):
        _files.write_file(module, str(target), b"new\n", validate=refuse)  # type: ignore[arg-type]
    assert sorted(os.listdir(tmp_path)) == ["conf"] and target.read_bytes() == b"old\n"


def test_read_json_object_one_policy_for_every_state_record(tmp_path):
    """The modules' state records: absent is None, an object is returned, anything else names the file and the fix."""
    path = tmp_path / "record.json"
    assert _files.read_json_object(str(path)) is None
    path.write_text('{"a": {"original": null}}', encoding="utf-8")
    assert _files.read_json_object(str(path)) == {"a": {"original": None}}
    for content, problem in ((b"{not json", "is not valid JSON"), (b"[1, 2]", "does not hold a JSON object"),
                             (b"\xff\xfe{}", "is not valid JSON")):
        path.write_bytes(content)
        with pytest.raises(_files.FileError) as err:
            _files.read_json_object(str(path))
        assert problem in str(err.value) and str(path) in str(err.value) and "fix or remove it" in str(err.value)
    path.unlink()
    path.mkdir()
    with pytest.raises(_files.FileError, match="not a regular file|is a directory"):
        _files.read_json_object(str(path))


def test_json_record_round_trip_and_removal_when_empty(tmp_path):
    path = str(tmp_path / "state" / "deep" / "record.json")
    module = FakeModule(str(tmp_path))
    assert _files.read_json_record(path) == _files.JsonRecord(path=path, data={}, stale=[])
    result = _files.write_json_record(module, path, {"b": 1, "a": [None]})  # type: ignore[arg-type]
    assert result.changed and not result.existed
    with open(path, encoding="utf-8") as handle:
        assert handle.read() == '{\n  "a": [\n    null\n  ],\n  "b": 1\n}\n'
    assert _files.read_json_record(path).data == {"a": [None], "b": 1}
    assert not _files.write_json_record(module, path, {"a": [None], "b": 1}).changed  # type: ignore[arg-type]
    result = _files.write_json_record(module, path, {})  # type: ignore[arg-type]
    assert result.changed and result.diff["after_header"] == "%s (absent)" % path and not os.path.exists(path)
    assert not _files.write_json_record(module, path, {}).changed  # type: ignore[arg-type]


def test_json_record_check_mode_touches_nothing(tmp_path):
    path = str(tmp_path / "state" / "record.json")
    module = FakeModule(str(tmp_path / "scratch"), check_mode=True)
    (tmp_path / "scratch").mkdir()
    before = hostile.snapshot(str(tmp_path))
    result = _files.write_json_record(module, path, {"a": 1})  # type: ignore[arg-type]
    assert result.changed and result.diff["after"] == '{\n  "a": 1\n}\n'
    assert hostile.snapshot(str(tmp_path)) == before
    os.makedirs(os.path.dirname(path))
    with open(path, "w", encoding="utf-8") as handle:
        handle.write('{"a": 1}')
    before = hostile.snapshot(str(tmp_path))
    assert _files.write_json_record(module, path, {}).changed  # type: ignore[arg-type]
    assert _files.write_json_record(module, path, {"a": 2}).changed  # type: ignore[arg-type]
    assert hostile.snapshot(str(tmp_path)) == before


def test_json_record_found_at_its_old_path_is_moved(tmp_path):
    """An upgrade keeps the host's state: the record at an earlier release's path is read, written at the new path,
    and the old copy (and its directory, once empty) removed; check mode predicts that and touches nothing."""
    old = tmp_path / "old-dir" / "old.json"
    old.parent.mkdir()
    old.write_text('{"spec": "/etc/cdi/nvidia.yaml"}', encoding="utf-8")
    path = str(tmp_path / "new" / "record.json")
    record = _files.read_json_record(path, old_paths=[str(old), str(tmp_path / "never.json")])
    assert record.data == {"spec": "/etc/cdi/nvidia.yaml"} and record.stale == [str(old)]
    (tmp_path / "scratch").mkdir()
    before = hostile.snapshot(str(tmp_path))
    checked = _files.write_json_record(FakeModule(str(tmp_path / "scratch"), True), path, record.data,  # type: ignore[arg-type]
                                       stale=record.stale)
    assert checked.changed and hostile.snapshot(str(tmp_path)) == before
    result = _files.write_json_record(FakeModule(str(tmp_path)), path, record.data, stale=record.stale)  # type: ignore[arg-type]
    assert result.changed and not old.exists() and not old.parent.exists()
    assert _files.read_json_record(path, old_paths=[str(old)]) == _files.JsonRecord(path=path, data=record.data, stale=[])


def test_json_record_at_both_paths_keeps_the_new_one_and_drops_the_old(tmp_path):
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    old.write_text('{"from": "old"}', encoding="utf-8")
    new.write_text('{"from": "new"}\n', encoding="utf-8")
    (tmp_path / "keep").write_text("another file")
    record = _files.read_json_record(str(new), old_paths=[str(old), str(new)])
    assert record.data == {"from": "new"} and record.stale == [str(old)]
    result = _files.write_json_record(FakeModule(str(tmp_path)), str(new), record.data, stale=record.stale)  # type: ignore[arg-type]
    assert result.changed and not old.exists() and (tmp_path / "keep").exists()
    assert new.read_text(encoding="utf-8") == '{\n  "from": "new"\n}\n'


@pytest.mark.parametrize("where", ["new", "old"])
def test_json_record_one_error_policy_at_either_path(tmp_path, where):
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    (old if where == "old" else new).write_text("{not json", encoding="utf-8")
    with pytest.raises(_files.FileError, match="is not valid JSON .*: fix or remove it"):
        _files.read_json_record(str(new), "the_record", old_paths=[str(old)])


def test_json_record_does_not_take_the_modules_file_arguments(tmp_path):
    """gpu_compose_override has mode/owner/group for the override file; its record keeps its own."""

    class WithFileArgs(FakeModule):
        def load_file_common_arguments(self, params: dict[str, t.Any], path: str) -> dict[str, t.Any]:
            raise AssertionError("the record took the module's file arguments")

    module = WithFileArgs(str(tmp_path))
    module.params = {"mode": "0600", "owner": None, "group": None}
    path = str(tmp_path / "r.json")
    assert _files.write_json_record(module, path, {"a": 1}).changed  # type: ignore[arg-type]
    assert not _files.write_json_record(module, path, {"a": 1}).changed  # type: ignore[arg-type]


# The common file arguments, checked before a write (AnsibleModule applies them only after it).
@pytest.mark.parametrize("mode, ok", [
    (None, True), ("0644", True), ("644", True), ("0755", True), ("1777", True), (0o644, True), (0, True), (0o7777, True),
    ("u=rw,g=r,o=r", True), ("u+rwx", True), ("a=r", True), ("=r", True), ("go-w", True), ("u=rw,go=u", True), ("u+X", True),
    ("0999", False), ("12345", False), ("64", False), ("", False), (" 0644", False), ("0644\n", False), ("0o644", False),
    ("rw-r--r--", False), ("u=rw;o=r", False), ("x=r", False), ("u=rw,", False), (",u=rw", False), ("u", False),
    (0o10000, False), (-1, False), (True, False), (1.0, False), (["0644"], False), ({"u": "rw"}, False), ("$(reboot)", False),
])
def test_mode_error(mode, ok):
    problem = _files.mode_error(mode)
    assert (problem is None) is ok, problem
    if not ok:
        assert problem.startswith("mode: %r " % (mode,))


def _lookup(known):
    def lookup(name):
        if name not in known:
            raise KeyError(name)
        return name
    return lookup


@pytest.mark.parametrize("value, problem", [
    (None, None), ("root", None), ("_apt", None), ("svc-gpu.1", None), ("machine$", None), ("0", None), (0, None), ("4294967294", None),
    ("4294967295", "is not a valid numeric ID"), ("nobody-here", "does not exist on this host"), ("", "is not a user or group name"),
    ("-root", "is not a user or group name"), ("root\n", "is not a user or group name"), ("a b", "is not a user or group name"),
    ("x" * 33, "is not a user or group name"), ("rööt", "is not a user or group name"), (True, "is a bool"), (["root"], "is a list"),
])
def test_account_error(value, problem):
    found = _files.account_error(value, "owner", _lookup({"root", "_apt", "svc-gpu.1", "machine$"}))
    if problem is None:
        assert found is None
    else:
        assert found.startswith("owner: ") and problem in found, found


def test_originals_record_round_trip_skips_other_shapes(tmp_path):
    """The one originals record of compose and the runtime merge: {file: {"original": text or null}} on disk."""
    path = str(tmp_path / "state" / "originals.json")
    module = FakeModule(str(tmp_path))
    os.makedirs(os.path.dirname(path))
    with open(path, "w", encoding="utf-8") as handle:
        handle.write('{"/a": {"original": "x\\n"}, "/b": {"original": null}, "/c": {"original": 3}, "/d": ["y"]}')
    record = _files.read_originals(path)
    assert record == {"/a": "x\n", "/b": None}
    after = _files.note_originals(record, [("/a", "changed\n", "new\n"), ("/e", None, "new\n"), ("/f", "same\n", "same\n")], "present")
    assert after == {"/a": "x\n", "/b": None, "/e": None}
    assert not _files.write_originals(module, path, after, dict(after))  # type: ignore[arg-type]
    assert _files.write_originals(module, path, record, after)  # type: ignore[arg-type]
    assert _files.read_json_record(path).data == {"/a": {"original": "x\n"}, "/b": {"original": None}, "/e": {"original": None}}
    gone = _files.note_originals(after, [("/a", "new\n", None), ("/b", None, None), ("/e", "new\n", None)], "absent")
    assert gone == {}
    assert _files.write_originals(module, path, after, gone) and not os.path.exists(path)  # type: ignore[arg-type]


def test_file_record_check_mode_writes_nothing(tmp_path):
    path = str(tmp_path / "state" / "args.json")
    (tmp_path / "scratch").mkdir()
    module = FakeModule(str(tmp_path / "scratch"), check_mode=True)
    before = hostile.snapshot(str(tmp_path))
    assert _files.write_file_record(module, path, {}, {"/etc/default/grub": ["iommu=pt"]})  # type: ignore[arg-type]
    assert hostile.snapshot(str(tmp_path)) == before
    assert _files.read_file_record(path, lambda value: value) == {}


def test_read_text_refuses_non_utf8(tmp_path):
    path = tmp_path / "daemon.json"
    path.write_bytes(b"\xff\xfe{}")
    with pytest.raises(_files.FileError, match="is not UTF-8 text .*; it was not changed"):
        _files.read_text(str(path))
    assert _files.read_text(str(tmp_path / "missing")) is None
