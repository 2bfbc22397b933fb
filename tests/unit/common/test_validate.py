# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The shared option checks (plugins/module_utils/_validate.py): each rule kind against each class of hostile input."""

from __future__ import annotations

import math
import re

import pytest

import hostile

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _validate as v

RULES = {
    "text": v.Text(),
    "identifier": v.Identifier(v.RUNTIME_NAME_RE, "a runtime name"),
    "kernel": v.KernelArgument(),
    "path": v.Path(),
    "filename": v.FileName((".yaml", ".json")),
}
REFUSED = {
    "text": hostile.text_classes("control", "whitespace", "non_ascii", "empty", "huge"),
    "identifier": hostile.text_classes("control", "shell", "whitespace", "non_ascii", "empty", "huge") + [("upper", "Nvidia")],
    "kernel": hostile.text_classes("control", "shell", "whitespace", "non_ascii", "empty", "huge") + [("no-key", "=x")],
    "path": hostile.text_classes("control", "non_ascii", "empty", "huge") + [
        ("relative", "a/b"), ("traversal", "/a/../b"), ("dot", "/a/./b"), ("trailing", "/a/")],
    "filename": hostile.text_classes("control", "shell", "whitespace", "non_ascii", "empty", "huge")
    + [("parent", "../x.yaml"), ("dir", "a/x.yaml"), ("suffix", "x.txt"), ("bare-suffix", ".yaml"), ("dots", "..")],
}
CASES = [(kind, case_id, value) for kind, cases in REFUSED.items() for case_id, value in cases]


@pytest.mark.parametrize("kind, value", [(k, val) for k, _i, val in CASES], ids=["%s-%s" % (k, i) for k, i, _val in CASES])
def test_each_rule_refuses_its_hostile_inputs_naming_option_and_value(kind, value):
    with pytest.raises(v.InputError) as err:
        RULES[kind]("the_option", value)
    assert str(err.value).startswith("the_option: ")
    assert hostile.shown(value) in str(err.value)
    assert "\n" not in str(err.value) and len(str(err.value)) < 400


@pytest.mark.parametrize("kind, value", [("text", "hello"), ("identifier", "nvidia-cdi"), ("kernel", "vfio-pci.ids=10de:2204,10de:1aef"),
                                         ("kernel", "root=UUID=1234-abcd"), ("kernel", "console=ttyS0,115200n8"),
                                         ("kernel", "video=HDMI-A-1:1920x1080@60"), ("path", "/etc/default/grub"),
                                         ("path", "/srv/my project/x.yml"), ("filename", "nvidia.yaml"), ("filename", "nvidia-1.json")])
def test_each_rule_accepts_what_is_real(kind, value):
    RULES[kind]("option", value)


@pytest.mark.parametrize("value", [True, 1.5, ["x"], {"a": 1}, b"x"])
def test_text_of_the_wrong_type(value):
    with pytest.raises(v.InputError, match="not a string"):
        v.Text()("opt", value)


@pytest.mark.parametrize("rule, value, message", [
    (v.Integer(0, 10), -1, "below the minimum of 0"),
    (v.Integer(0, 10), 11, "above the maximum of 10"),
    (v.Integer(0, 10), True, "a boolean, not an integer"),
    (v.Integer(0, 10), "3", "a string, not an integer"),
    (v.Number(above=0, maximum=5000), 0, "must be above 0"),
    (v.Number(above=0, maximum=5000), -1.5, "must be above 0"),
    (v.Number(above=0, maximum=5000), 1e12, "above the maximum of 5000"),
    (v.Number(above=0, maximum=5000), math.inf, "not a finite number"),
    (v.Number(above=0, maximum=5000), math.nan, "not a finite number"),
    (v.Number(above=0, maximum=5000), False, "a boolean, not a number"),
])
def test_numbers(rule, value, message):
    with pytest.raises(v.InputError, match=re.escape(message)) as err:
        rule("num", value)
    assert str(err.value).startswith("num: %r" % value)


def test_none_is_never_checked():
    for rule in RULES.values():
        rule("x", None)
    assert v.check({"a": None}, {"a": v.Integer(0, 1)}) == []


def test_lists_and_fields_name_the_item():
    rules = {"items": v.ListOf(v.Fields({"n": v.Integer(0, 1), "s": v.Text()}), max_items=3)}
    errors = v.check({"items": [{"n": 0, "s": "ok"}, {"n": 5, "s": "a\nb"}]}, rules)
    assert errors == ["items[1].n: 5 is above the maximum of 1", "items[1].s: 'a\\nb' holds the control character '\\n' (U+000A)"]
    assert v.check({"items": [{}] * 4}, rules)[0].startswith("items: [{}, {}, {}, {}] has more than 3 items")
    assert v.check({"items": "x"}, rules) == ["items: 'x' is a string, not a list"]
    assert v.check({"items": ["x"]}, rules) == ["items[0]: 'x' is a string, not a mapping"]
    assert v.check({"items": []}, {"items": v.ListOf(v.Text(), min_items=1)}) == ["items: [] needs at least 1 item(s)"]


def test_long_values_are_shown_short():
    error = v.one(v.Text(max_length=10), "opt", "x" * 100000)
    assert error is not None and len(error) < 300 and "100000 long" in error


def test_patterns_match_the_whole_value():
    # A $-anchored pattern matches before a trailing newline with re.match; the rules never let one through.
    for rule, value in ((v.Identifier(v.RUNTIME_NAME_RE, "a name"), "nvidia\n"), (v.KernelArgument(), "iommu=pt\n"),
                        (v.Text(pattern=v.PACKAGE_VERSION_RE), "1.18.0\n")):
        with pytest.raises(v.InputError):
            rule("opt", value)


def test_reserved_names():
    with pytest.raises(v.InputError, match="reserved"):
        v.Identifier(v.RUNTIME_NAME_RE, "a name", reserved=("runc",))("name", "runc")


def test_kernel_arguments_never_hold_a_shell_metacharacter():
    for char in v.SHELL_METACHARACTERS:
        with pytest.raises(v.InputError):
            v.KernelArgument()("args[0]", "a=%sb" % char)
