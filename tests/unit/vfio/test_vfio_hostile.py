# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""vfio_kernel_args against hostile and broken input (issue #16): every class refused, naming the option and the value,
nothing written, and no argument that could reach a shell ever lands in the file."""

from __future__ import annotations

import json
import os
import typing as t

import pytest

import hostile
from test_cmdline import GRUB

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _vfio
from ansible_collections.gpuhost.nvidia.plugins.modules import vfio_kernel_args

SAFE = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.,:/=+@%- ")


@pytest.fixture
def host(tmp_path: t.Any) -> dict[str, str]:
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "grub").write_text(GRUB)
    state = tmp_path / "state"
    state.mkdir()
    (state / "record.json").write_text(json.dumps({"/other": ["iommu=pt"]}) + "\n")
    return {"root": str(tmp_path), "grub": str(etc / "grub"), "record": str(state / "record.json")}


def run(run_module: t.Any, host: dict[str, str], check_mode: bool = False, **args: t.Any) -> dict[str, t.Any]:
    full = {"path": host["grub"], "record": host["record"], "args": ["intel_iommu=on"], "backup": True}
    full.update(args)
    return run_module(vfio_kernel_args, full, check_mode=check_mode)


ARG_CASES = hostile.text_classes("control", "shell", "whitespace", "non_ascii", "empty", "huge") + [
    ("one-string-two-args", "intel_iommu=on iommu=pt"),
    ("newline-injects-a-variable", 'on"\nGRUB_TIMEOUT="0'),
    ("no-key", "=on"),
    ("option-like", "-x"),
    ("too-long", "a=" + "b" * 1100),
    ("wrong-type", {"a": 1}),
]


@pytest.mark.parametrize("value", [v for _i, v in ARG_CASES], ids=[i for i, _v in ARG_CASES])
@pytest.mark.parametrize("check_mode", [False, True], ids=["real", "check"])
def test_args_refused(run_module, host, value, check_mode):
    before = hostile.snapshot(host["root"])
    result = run(run_module, host, check_mode=check_mode, args=["iommu=pt", value])
    shown = value if isinstance(value, str) else str(value)  # Ansible turns a mapping element into its text
    hostile.assert_refused(result, "args[1]", shown, before=before, roots=[host["root"]])


VARIABLE_CASES = hostile.text_classes("control", "shell", "whitespace", "non_ascii", "huge") + [
    ("space", "GRUB CMDLINE"),
    ("leading-digit", "1GRUB"),
    ("dash", "GRUB-CMDLINE"),
    ("assignment", "A=B"),
]


@pytest.mark.parametrize("value", [v for _i, v in VARIABLE_CASES], ids=[i for i, _v in VARIABLE_CASES])
def test_variable_refused(run_module, host, value):
    before = hostile.snapshot(host["root"])
    hostile.assert_refused(run(run_module, host, variable=value), "variable", value, before=before, roots=[host["root"]])


PATH_CASES = hostile.text_classes("control", "non_ascii", "empty", "huge") + [
    ("relative", "etc/default/grub"),
    ("traversal", "/etc/default/../../tmp/grub"),
    ("dot", "/etc/./default/grub"),
    ("trailing-slash", "/etc/default/grub/"),
    ("long-component", "/" + "n" * 300),
]


@pytest.mark.parametrize("option", ["path", "record"])
@pytest.mark.parametrize("value", [v for _i, v in PATH_CASES], ids=[i for i, _v in PATH_CASES])
def test_path_options_refused(run_module, host, option, value):
    before = hostile.snapshot(host["root"])
    hostile.assert_refused(run(run_module, host, **{option: value}), option, value, before=before, roots=[host["root"]])


@pytest.mark.parametrize("option", ["path", "record"])
@pytest.mark.parametrize("kind", hostile.SPECIAL_KINDS)
@pytest.mark.parametrize("check_mode", [False, True], ids=["real", "check"])
def test_unusable_files_refused(run_module, host, option, kind, check_mode):
    path = hostile.make_special_cases(host["root"])[kind]
    before = hostile.snapshot(host["root"])
    result = run(run_module, host, check_mode=check_mode, **{option: path})
    hostile.assert_refused(result, option, path, before=before, roots=[host["root"]])


@pytest.mark.parametrize("state", ["present", "absent"])
def test_record_that_is_a_directory_is_refused_for_absent_too(run_module, host, state):
    os.unlink(host["record"])
    os.mkdir(host["record"])
    before = hostile.snapshot(host["root"])
    hostile.assert_refused(run(run_module, host, state=state), "record", host["record"], before=before, roots=[host["root"]])


def test_path_equal_to_record_is_refused(run_module, host):
    before = hostile.snapshot(host["root"])
    hostile.assert_refused(run(run_module, host, record=host["grub"]), "record", host["grub"], before=before, roots=[host["root"]])


BROKEN_FILES = [
    ("unclosed-quote", 'GRUB_CMDLINE_LINUX="quiet splash\n', "never closed"),
    ("unclosed-quote-before-more-lines", 'GRUB_CMDLINE_LINUX="quiet splash\nGRUB_TIMEOUT=5\n', "never closed"),
    ("second-word-runs-a-command", 'GRUB_CMDLINE_LINUX="quiet" "splash"\n', "more follows the value"),
    ("command-after-value", 'GRUB_CMDLINE_LINUX="quiet";reboot\n', "more follows the value"),
    ("expansion", 'GRUB_CMDLINE_LINUX="$EXTRA quiet"\n', "uses shell expansion"),
    ("command-substitution", 'GRUB_CMDLINE_LINUX="`id` quiet"\n', "uses shell expansion"),
    ("backslash", 'GRUB_CMDLINE_LINUX="quiet \\"x\\""\n', "backslash"),
    ("append-operator", 'GRUB_CMDLINE_LINUX+=" quiet"\n', "cannot edit with certainty"),
    ("used-in-a-command", 'GRUB_CMDLINE_LINUX="q"\necho $GRUB_CMDLINE_LINUX\n', "cannot edit with certainty"),
    ("inside-another-string", 'X="\nGRUB_CMDLINE_LINUX=\\"y\\"\n"\n', "inside a quoted string"),
    ("unquoted-metacharacter", "GRUB_CMDLINE_LINUX=quiet;reboot\n", "unquoted value"),
    ("non-ascii-value", 'GRUB_CMDLINE_LINUX="quiet caf\u00e9"\n', "outside printable ASCII"),
    ("control-in-value", 'GRUB_CMDLINE_LINUX="quiet\x1b"\n', "outside printable ASCII"),
    ("continued-last-line", "GRUB_TIMEOUT=5 \\\n", "ends with a backslash"),
]


@pytest.mark.parametrize("content, message", [c[1:] for c in BROKEN_FILES], ids=[c[0] for c in BROKEN_FILES])
@pytest.mark.parametrize("check_mode", [False, True], ids=["real", "check"])
def test_files_it_cannot_parse_with_certainty_are_refused(run_module, host, content, message, check_mode):
    with open(host["grub"], "w", encoding="utf-8") as handle:
        handle.write(content)
    before = hostile.snapshot(host["root"])
    result = run(run_module, host, check_mode=check_mode)
    hostile.assert_refused(result, host["grub"], show_value=False, before=before, roots=[host["root"]])
    assert message in result["msg"]


def test_command_line_file_with_control_characters_is_refused(run_module, host):
    with open(host["grub"], "w", encoding="utf-8") as handle:
        handle.write("root=/dev/sda1 quiet\x1b[2J\n")
    before = hostile.snapshot(host["root"])
    result = run(run_module, host, variable="")
    hostile.assert_refused(result, host["grub"], show_value=False, before=before, roots=[host["root"]])


def test_record_that_is_not_json_names_the_record(run_module, host):
    with open(host["record"], "w", encoding="utf-8") as handle:
        handle.write("[1, 2]")
    before = hostile.snapshot(host["root"])
    hostile.assert_refused(run(run_module, host), "record", host["record"], before=before, roots=[host["root"]])


# -- what the planner writes, whoever calls it -----------------------------------------------------------------
PLANNER_ARGS = [v for _i, v in ARG_CASES if isinstance(v, str)]


@pytest.mark.parametrize("arg", PLANNER_ARGS, ids=[i for i, v in ARG_CASES if isinstance(v, str)])
@pytest.mark.parametrize("variable", ["GRUB_CMDLINE_LINUX", ""])
def test_planner_never_writes_an_unsafe_argument(arg, variable):
    planned = _vfio.plan_cmdline_file("quiet\n" if not variable else GRUB, variable, ["iommu=pt", arg], "present", [])
    assert planned["errors"] and planned["added"] == []
    assert planned["content"] == ("quiet\n" if not variable else GRUB)


def test_whatever_is_accepted_is_printable_ascii_without_metacharacters():
    """Every argument the planner accepts is written as is, and is made of the safe characters only."""
    candidates = [chr(c) for c in range(0, 0x250)] + hostile.CONTROL + hostile.SHELL + hostile.NON_ASCII
    accepted = []
    for char in candidates:
        arg = "k=%sv" % char
        planned = _vfio.plan_cmdline_file(GRUB, "GRUB_CMDLINE_LINUX", [arg], "present", [])
        if planned["errors"]:
            assert planned["content"] == GRUB
            continue
        written = planned["content"].encode("utf-8").splitlines()[-1]
        assert written == b'GRUB_CMDLINE_LINUX="%s"' % arg.encode("ascii")
        assert set(arg) <= SAFE - {" "}, repr(arg)
        accepted.append(char)
    assert accepted and all(c in SAFE for c in accepted)


@pytest.mark.parametrize("variable", ["GRUB CMDLINE", "1GRUB", "GRUB\n", "A;B", ""])
def test_planner_refuses_a_variable_that_is_not_a_name(variable):
    if variable == "":
        return  # the whole-file form
    planned = _vfio.plan_cmdline_file("", variable, ["iommu=pt"], "present", [])
    assert planned["errors"] and planned["content"] == ""


def test_rhel_style_file_with_a_substitution_elsewhere_is_edited():
    text = "GRUB_TIMEOUT=5\nGRUB_DISTRIBUTOR=\"$(sed 's, release .*$,,g' /etc/system-release)\"\nGRUB_CMDLINE_LINUX=\"rhgb quiet\"\n"
    planned = _vfio.plan_cmdline_file(text, "GRUB_CMDLINE_LINUX", ["iommu=pt"], "present", [])
    assert planned["errors"] == []
    assert planned["content"] == text.replace("rhgb quiet", "rhgb quiet iommu=pt")


def test_comments_and_export_lines_naming_the_variable_are_fine():
    text = "# GRUB_CMDLINE_LINUX='don't'\nGRUB_TIMEOUT=5 # see GRUB_CMDLINE_LINUX\nGRUB_CMDLINE_LINUX=\"q\"\nexport GRUB_CMDLINE_LINUX\n"
    planned = _vfio.plan_cmdline_file(text, "GRUB_CMDLINE_LINUX", ["iommu=pt"], "present", [])
    assert planned["errors"] == [] and 'GRUB_CMDLINE_LINUX="q iommu=pt"\n' in planned["content"]


# -- what the distributions ship still parses with certainty ---------------------------------------------------
DEBIAN = """# If you change this file, run 'update-grub' afterwards to update
# /boot/grub/grub.cfg.
# For full documentation of the options in this file, see:
#   info -f grub -n 'Simple configuration'

GRUB_DEFAULT=0
GRUB_TIMEOUT=5
GRUB_DISTRIBUTOR=`lsb_release -i -s 2> /dev/null || echo Debian`
GRUB_CMDLINE_LINUX_DEFAULT="quiet"
GRUB_CMDLINE_LINUX=""

# Uncomment to enable BadRAM filtering, modify to suit your needs
#GRUB_BADRAM="0x01234567,0xfefefefe,0x89abcdef,0xefefefef"
# you can see them in real GRUB with the command `vbeinfo'
# Uncomment if you don't want GRUB to pass "root=UUID=xxx" parameter to Linux
#GRUB_DISABLE_LINUX_UUID=true
#GRUB_INIT_TUNE="480 440 1"
"""
UBUNTU = ('GRUB_DEFAULT=0\nGRUB_TIMEOUT_STYLE=hidden\nGRUB_TIMEOUT=0\n'
          'GRUB_DISTRIBUTOR=`( . /etc/os-release; echo ${NAME:-Ubuntu} ) 2>/dev/null || echo Ubuntu`\n'
          'GRUB_CMDLINE_LINUX_DEFAULT="quiet splash"\nGRUB_CMDLINE_LINUX=""\n')
RHEL = '''GRUB_TIMEOUT=5
GRUB_DISTRIBUTOR="$(sed 's, release .*$,,g' /etc/system-release)"
GRUB_DEFAULT=saved
GRUB_CMDLINE_LINUX="crashkernel=1G-4G:192M,4G-64G:256M,64G-:512M resume=/dev/mapper/rl-swap rd.lvm.lv=rl/root rhgb quiet"
GRUB_ENABLE_BLSCFG=true
'''


@pytest.mark.parametrize("text", [DEBIAN, UBUNTU, RHEL], ids=["debian", "ubuntu", "rhel"])
def test_distribution_grub_defaults_round_trip(text):
    present = _vfio.plan_cmdline_file(text, "GRUB_CMDLINE_LINUX", ["intel_iommu=on", "iommu=pt"], "present", [])
    assert present["errors"] == [] and present["added"] == ["intel_iommu=on", "iommu=pt"]
    absent = _vfio.plan_cmdline_file(present["content"], "GRUB_CMDLINE_LINUX", [], "absent", present["ours"])
    assert absent["content"] == text
