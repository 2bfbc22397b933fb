# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""gpuhost_apply checks every item before its first write (issue #37): one bad item among good ones refuses the whole
call, in check mode too, and nothing on the host changes."""

from __future__ import annotations

import os
import typing as t

import pytest

import hostile

from ansible.module_utils import basic

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _apply
from ansible_collections.gpuhost.nvidia.plugins.modules import gpuhost_apply


@pytest.fixture
def no_commands(monkeypatch):
    calls: list[t.Any] = []

    def run_command(self, argv, **kwargs):
        calls.append(argv)
        return 0, "", ""

    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
    return calls


@pytest.fixture
def host(tmp_path):
    special = hostile.make_special_cases(str(tmp_path / "special"))
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "kept.conf").write_text("kept\n")
    return tmp_path, special


def good(tmp_path) -> dict[str, t.Any]:
    """A request that works: a new directory, a file in it, a file beside an existing one, an absent file."""
    return {
        "directories": [{"path": str(tmp_path / "etc" / "gpuhost"), "mode": "0755"}],
        "files": [{"path": str(tmp_path / "etc" / "gpuhost" / "a.conf"), "content": "a\n", "mode": "0644"},
                  {"path": str(tmp_path / "etc" / "b.conf"), "content": "b\n", "mode": "0600"}],
        "absent": [str(tmp_path / "etc" / "kept.conf")],
    }


def _with(request: dict[str, t.Any], kind: str, item: t.Any) -> dict[str, t.Any]:
    request = dict(request, **{kind: list(request[kind])})
    request[kind].append(item)
    return request


# (id, kind, item builder (tmp_path, special) -> item, what the message must hold, refused in check mode too)
def _special_item(kind: str, shape: str) -> t.Callable[..., t.Any]:
    """The bad item of a special-file case: a file, a directory or an absent path at the special path ``kind``."""
    def item(tmp: t.Any, sp: dict[str, str]) -> t.Any:
        del tmp
        return {"file": {"path": sp[kind], "content": "x"}, "dir": {"path": sp[kind]}, "path": sp[kind]}[shape]
    return item


def _special_message(kind: str, where: str) -> t.Callable[..., str]:
    def message(tmp: t.Any, sp: dict[str, str]) -> str:
        del tmp
        return "%s %r" % (where, sp[kind])
    return message


CASES: list[tuple[str, str, t.Callable[..., t.Any], t.Callable[..., str], bool]] = [
    ("file-in-missing-dir", "files", lambda tmp, sp: {"path": str(tmp / "nodir" / "b.conf"), "content": "x"},
     lambda tmp, sp: "files[2]: path %r: its directory %r does not exist" % (str(tmp / "nodir" / "b.conf"), str(tmp / "nodir")), False),
    ("unknown-owner", "files", lambda tmp, sp: {"path": str(tmp / "etc" / "c.conf"), "content": "x", "owner": "no-such-user-37"},
     lambda tmp, sp: "files[2]: owner 'no-such-user-37' is not a user on this host", True),
    ("unknown-group", "files", lambda tmp, sp: {"path": str(tmp / "etc" / "c.conf"), "content": "x", "group": "no-such-group-37"},
     lambda tmp, sp: "files[2]: group 'no-such-group-37' is not a group on this host", True),
    ("unknown-dir-owner", "directories", lambda tmp, sp: {"path": str(tmp / "etc" / "d"), "owner": "no-such-user-37"},
     lambda tmp, sp: "directories[1]: owner 'no-such-user-37' is not a user", True),
    ("mode-420", "files", lambda tmp, sp: {"path": str(tmp / "etc" / "c.conf"), "content": "x", "mode": 420},
     lambda tmp, sp: "files[2]: mode 420 is a number, not a quoted octal string", True),
    ("mode-644-int", "files", lambda tmp, sp: {"path": str(tmp / "etc" / "c.conf"), "content": "x", "mode": 644},
     lambda tmp, sp: "files[2]: mode 644 is a number", True),
    ("mode-dir-493", "directories", lambda tmp, sp: {"path": str(tmp / "etc" / "d"), "mode": 493},
     lambda tmp, sp: "directories[1]: mode 493 is a number", True),
    ("mode-bool", "files", lambda tmp, sp: {"path": str(tmp / "etc" / "c.conf"), "content": "x", "mode": True},
     lambda tmp, sp: "files[2]: mode True is not an octal mode string", True),
    ("mode-symbolic", "files", lambda tmp, sp: {"path": str(tmp / "etc" / "c.conf"), "content": "x", "mode": "u=rw"},
     lambda tmp, sp: "files[2]: mode 'u=rw' is not an octal mode string", True),
    ("mode-8", "files", lambda tmp, sp: {"path": str(tmp / "etc" / "c.conf"), "content": "x", "mode": "0648"},
     lambda tmp, sp: "files[2]: mode '0648'", True),
    ("mode-newline", "files", lambda tmp, sp: {"path": str(tmp / "etc" / "c.conf"), "content": "x", "mode": "0644\n"},
     lambda tmp, sp: "files[2]: mode '0644\\n'", True),
    # (No lone-surrogate case: whether ansible-core's own parameter decoding refuses it first depends on a process-wide
    # string check that other tests switch, so the case passed or failed with the test order.)
] + [
    ("file-at-%s" % kind, "files", _special_item(kind, "file"), _special_message(kind, "files[2]"), True)
    for kind in hostile.SPECIAL_KINDS
] + [
    ("dir-at-%s" % kind, "directories", _special_item(kind, "dir"), _special_message(kind, "directories[1]"), True)
    for kind in ("under_file", "fifo", "dangling_link", "link_loop", "under_dangling_link")
] + [
    ("absent-%s" % kind, "absent", _special_item(kind, "path"), _special_message(kind, "absent[1]"), True)
    for kind in ("fifo", "under_file", "link_loop")
]


@pytest.mark.parametrize("check_mode", [False, True], ids=["real", "check"])
@pytest.mark.parametrize("kind, build, expected, in_check_mode", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_one_bad_item_refuses_the_call_before_any_write(run_module, no_commands, host, kind, build, expected, in_check_mode,
                                                        check_mode):
    tmp_path, special = host
    request = _with(good(tmp_path), kind, build(tmp_path, special))
    before = hostile.snapshot(str(tmp_path))
    result = run_module(gpuhost_apply, request, check_mode=check_mode)
    assert hostile.snapshot(str(tmp_path)) == before, "the host changed"
    assert no_commands == []
    if check_mode and not in_check_mode:
        assert not result.get("failed") and any(expected(tmp_path, special) in note for note in result["notes"]), result
        assert str(tmp_path / "nodir" / "b.conf") in result["changed_files"]
        return
    assert result.get("failed") is True, result
    assert expected(tmp_path, special) in result["msg"], result["msg"]
    assert "Traceback" not in result["msg"] and "exception" not in result
    assert result["changed_files"] == [] and result["removed"] == []


def test_every_problem_is_reported_at_once(run_module, no_commands, host):
    tmp_path, special = host
    request = good(tmp_path)
    request["files"] += [{"path": str(tmp_path / "nodir" / "b.conf"), "content": "x"}, {"path": special["fifo"], "content": "x"},
                         {"path": str(tmp_path / "etc" / "c.conf"), "content": "x", "owner": "no-such-user-37"}]
    result = run_module(gpuhost_apply, request)
    assert len(result["problems"]) == 3, result["problems"]
    assert [p.split(":")[0].split(" ")[0] for p in result["problems"]] == ["files[2]", "files[3]", "files[4]"]


def test_the_good_request_alone_writes(run_module, no_commands, host):
    tmp_path, _special = host
    request = good(tmp_path)
    predicted = run_module(gpuhost_apply, request, check_mode=True)
    real = run_module(gpuhost_apply, request)
    assert predicted["changed_files"] == real["changed_files"] and predicted["removed"] == real["removed"]
    assert (tmp_path / "etc" / "gpuhost" / "a.conf").read_text() == "a\n" and not (tmp_path / "etc" / "kept.conf").exists()
    assert oct(os.stat(tmp_path / "etc" / "b.conf").st_mode & 0o777) == "0o600"


def test_a_file_in_a_directory_of_the_same_call_is_not_refused(run_module, no_commands, host):
    tmp_path, _special = host
    deep = str(tmp_path / "new" / "deeper")
    request = {"directories": [{"path": deep}],
               "files": [{"path": os.path.join(deep, "x.conf"), "content": "x"}, {"path": str(tmp_path / "new" / "y.conf"), "content": "y"}]}
    real = run_module(gpuhost_apply, request)
    assert not real.get("failed") and os.path.isfile(os.path.join(deep, "x.conf")), real


@pytest.mark.parametrize("account", ["root", "0", "65534"])
def test_known_and_numeric_owners_pass(run_module, no_commands, host, account, monkeypatch):
    tmp_path, _special = host
    request = {"files": [{"path": str(tmp_path / "etc" / "c.conf"), "content": "x", "owner": account, "group": account}]}
    result = run_module(gpuhost_apply, request, check_mode=True)
    assert not result.get("failed"), result


@pytest.mark.parametrize("mode, problem", [
    (420, "the number 420 is octal 0644"), (493, "the number 493 is octal 0755"), (644, "the number 644 is octal 01204"),
    (-1, "mode -1 is a number"), (2 ** 70, "is a number"), (0.5, "is not an octal mode string"), ("", "is not an octal mode string"),
    ("0o644", "is not an octal mode string"), ("+x", "is not an octal mode string"), ("006444", "is not an octal mode string"),
])
def test_mode_problems(mode, problem):
    assert problem in (_apply.mode_problem(mode) or "")


@pytest.mark.parametrize("mode", ["0644", "644", "0755", "1777", "0600", None])
def test_good_modes(mode):
    assert _apply.mode_problem(mode) is None


def test_request_and_host_problems_are_reported_together(run_module, no_commands, host):
    tmp_path, special = host
    request = good(tmp_path)
    request["files"] += [{"path": str(tmp_path / "etc" / "c.conf"), "content": "x", "mode": 420},
                         {"path": str(tmp_path / "nodir" / "b.conf"), "content": "x"}, {"path": "relative/x", "content": "x"}]
    before = hostile.snapshot(str(tmp_path))
    result = run_module(gpuhost_apply, request)
    assert [p.split(":")[0].split(" ")[0] for p in result["problems"]] == ["files[2]", "files[4]", "files[3]"], result["problems"]
    assert hostile.snapshot(str(tmp_path)) == before
