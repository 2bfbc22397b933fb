# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Checks of module options that need nothing from the host: the rules every module shares, in one place.

Private to this collection: no compatibility promise outside gpuhost.nvidia.

A module describes its options as a table of rules and calls :func:`check` before it reads anything from the host::

    RULES = {"path": Path(), "name": Identifier(RUNTIME_NAME, "a runtime name such as nvidia"), "count": Integer(1, 64)}
    errors = _validate.check(module.params, RULES)
    if errors:
        module.fail_json(msg="; ".join(errors), errors=errors)

Each rule raises :class:`InputError`, whose message names the option and shows the value with ``repr`` (shortened
when it is long), so a refused value is easy to find in a play. :func:`check` collects every error, so one run names
every bad value. A rule never changes a value, and ``None`` (an option that was not given) is never checked.

The rule kinds: :class:`Text` (type, emptiness, length, control characters, non-ASCII, whitespace, forbidden
characters, a pattern), :class:`Identifier` (a name that must match a pattern), :class:`KernelArgument`,
:class:`Path`, :class:`FileName`, :class:`Integer`, :class:`Number`, :class:`ListOf` and :class:`Fields`
(the suboptions of a dict, or of each dict in a list).
"""

from __future__ import annotations

import math
import re
import typing as t
import unicodedata
from collections.abc import Sequence

from ansible.module_utils.basic import AnsibleModule

# Characters a POSIX shell (and GRUB's script, and systemd's command-line parser) gives a meaning to. None of them
# may reach a file that something later runs as shell; the rules that guard such files refuse every one of them.
SHELL_METACHARACTERS = "$`\"'\\;&|<>(){}[]*?!#~^"
# What one kernel argument may hold: the characters real parameters use (root=UUID=..., console=ttyS0,115200n8,
# vfio-pci.ids=10de:2204,10de:1aef, video=HDMI-A-1:1920x1080@60, hugepagesz=1G, isolcpus=1-3%2). Nothing else.
KERNEL_ARGUMENT_RE = re.compile(r"^[A-Za-z0-9_.,:/=+@%-]+$")
# A shell variable name.
SHELL_VARIABLE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# A container runtime name that every engine accepts: a DNS label (also a Kubernetes RuntimeClass handler).
RUNTIME_NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
# A CDI kind, vendor/class (nvidia.com/gpu).
CDI_KIND_RE = re.compile(r"^[a-z0-9]([a-z0-9.-]{0,62}[a-z0-9])?/[A-Za-z0-9]([A-Za-z0-9_.-]{0,62}[A-Za-z0-9])?$")
# A version such as 1.17.8, 1.17.8-1 or 0:1.17.8-1.el9 (what a package manager prints).
PACKAGE_VERSION_RE = re.compile(r"^(\d+:)?\d+(\.\d+)*([-~+][0-9A-Za-z.~+-]*)?$")
# A Docker-style runtime name (what an engine may already have configured; the names this collection writes are
# RUNTIME_NAME_RE).
ENGINE_RUNTIME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
# A CUDA version such as 12.4 or 12.4.1.
CUDA_VERSION_RE = re.compile(r"^\d{1,3}(\.\d{1,3}){0,2}$")
# A PCI address (dddd:bb:dd.f, the domain optional) as the modules accept them.
PCI_ADDRESS_RE = re.compile(r"^([0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
# A GPU UUID as NVML prints it.
GPU_UUID_RE = re.compile(r"^GPU-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")

PATH_MAX = 4096
NAME_MAX = 255
_SHOWN = 100


class InputError(ValueError):
    """A value that a rule refuses. ``str()`` names the option and shows the value."""

    def __init__(self, option: str, value: t.Any, problem: str):
        self.option = option
        self.value = value
        self.problem = problem
        super().__init__("%s: %s %s" % (option, show(value), problem))


def show(value: t.Any) -> str:
    """``repr(value)``, cut short (with the full length) when it is long."""
    text = repr(value)
    if len(text) <= _SHOWN + 20:
        return text
    size = len(value) if isinstance(value, (str, bytes, list, tuple, dict)) else len(text)
    return "%s... (%d long)" % (text[:_SHOWN], size)


def type_name(value: t.Any) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list", dict: "a mapping",
            type(None): "null"}.get(type(value), "a %s" % type(value).__name__)


def _char(char: str) -> str:
    """How a character is named in a message: ``'$'``, ``'\\n'``, ``U+202E``."""
    if char.isprintable() and char.isascii():
        return repr(char)
    return "%r (U+%04X)" % (char, ord(char))


def bad_character(text: str, ascii_only: bool = True) -> str | None:
    """The first control, formatting, separator or (with ``ascii_only``) non-ASCII character, named; None when clean."""
    for char in text:
        code = ord(char)
        if code < 0x20 or code == 0x7F:
            return "holds the control character %s" % _char(char)
        if code < 0x80:
            continue
        if ascii_only:
            return "holds the non-ASCII character %s; only printable ASCII is accepted" % _char(char)
        if unicodedata.category(char) in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"):
            return "holds the control or formatting character %s" % _char(char)
    return None


class Rule:
    """One rule for one kind of value. ``rule(option, value)`` raises InputError or returns None."""

    def __call__(self, option: str, value: t.Any) -> None:
        if value is None:
            return
        self.check(option, value)

    def check(self, option: str, value: t.Any) -> None:  # pragma: no cover - every rule overrides it
        raise NotImplementedError

    def errors(self, option: str, value: t.Any) -> list[InputError]:
        """Every problem of ``value``: one rule reports at most one; a collection's rules report each item's."""
        try:
            self(option, value)
        except InputError as exc:
            return [exc]
        return []


class _Collection(Rule):
    """A rule over several values (a list's items, a mapping's fields): ``errors`` reports every item's problem,
    and ``check`` raises the first."""

    def check(self, option: str, value: t.Any) -> None:
        errors = self.errors(option, value)
        if errors:
            raise errors[0]


class Text(Rule):
    """A string: not empty (unless ``empty``), at most ``max_length`` characters, no control characters, printable
    ASCII only (unless ``ascii_only=False``), no whitespace at all (unless ``space``) and never at either end, none of
    ``forbid``, and matching ``pattern`` (described by ``what``) when one is given."""

    def __init__(self, *, empty: bool = False, max_length: int = 256, ascii_only: bool = True, space: bool = False,
                 forbid: str = "", pattern: t.Pattern[str] | None = None, what: str = "", numbers: bool = False):
        self.empty = empty
        self.max_length = max_length
        self.ascii_only = ascii_only
        self.space = space
        self.forbid = forbid
        self.pattern = pattern
        self.what = what
        self.numbers = numbers

    def check(self, option: str, value: t.Any) -> None:
        if self.numbers and isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        if not isinstance(value, str):
            raise InputError(option, value, "is %s, not a string" % type_name(value))
        if not value:
            if self.empty:
                return
            raise InputError(option, value, "is empty%s" % (": give %s" % self.what if self.what else ""))
        if len(value) > self.max_length:
            raise InputError(option, value, "is longer than %d characters" % self.max_length)
        problem = bad_character(value, self.ascii_only)
        if problem:
            raise InputError(option, value, problem)
        if value != value.strip():
            raise InputError(option, value, "starts or ends with whitespace")
        if not self.space and any(c.isspace() for c in value):
            raise InputError(option, value, "holds whitespace%s" % (": give %s" % self.what if self.what else ""))
        bad = [c for c in value if c in self.forbid]
        if bad:
            raise InputError(option, value, "holds the character %s, which is not accepted here" % _char(bad[0]))
        if self.pattern is not None and not self.pattern.fullmatch(value):
            raise InputError(option, value, "is not %s" % (self.what or "accepted here"))


class Identifier(Text):
    """A name that must match ``pattern``, described by ``what`` (printable ASCII, no whitespace)."""

    def __init__(self, pattern: t.Pattern[str], what: str, max_length: int = 128, reserved: t.Iterable[str] = (),
                 numbers: bool = False):
        super().__init__(pattern=pattern, what=what, max_length=max_length, numbers=numbers)
        self.reserved = tuple(reserved)

    def check(self, option: str, value: t.Any) -> None:
        super().check(option, value)
        if value in self.reserved:
            raise InputError(option, value, "is reserved; choose another name")


class KernelArgument(Text):
    """One kernel command-line argument: printable ASCII, no whitespace, no shell metacharacter, a non-empty key."""

    def __init__(self) -> None:
        super().__init__(max_length=1024, what="each kernel argument as its own list item, such as intel_iommu=on")

    def check(self, option: str, value: t.Any) -> None:
        super().check(option, value)
        meta = [c for c in value if c in SHELL_METACHARACTERS]
        if meta:
            raise InputError(option, value, "holds the shell metacharacter %s; kernel arguments here may hold letters, "
                                            "digits and _ . , : / = + @ %% - only" % _char(meta[0]))
        if not KERNEL_ARGUMENT_RE.fullmatch(value):
            raise InputError(option, value, "holds a character that kernel arguments here may not hold (letters, digits "
                                            "and _ . , : / = + @ %% - only)")
        if value.startswith("=") or value.startswith("-"):
            raise InputError(option, value, "does not start with a parameter name")


class Path(Text):
    """A file system path: printable ASCII (spaces inside allowed), at most PATH_MAX characters and NAME_MAX per
    component, absolute unless ``relative``, without ``.`` or ``..`` components, and without a trailing slash unless
    ``directory``."""

    def __init__(self, *, relative: bool = False, directory: bool = False, space: bool = True):
        super().__init__(max_length=PATH_MAX, space=space, what="a path")
        self.relative = relative
        self.directory = directory

    def check(self, option: str, value: t.Any) -> None:
        super().check(option, value)
        if not self.relative and not value.startswith("/"):
            raise InputError(option, value, "is not an absolute path")
        parts = value.split("/")
        if any(part in (".", "..") for part in parts):
            raise InputError(option, value, "has a '.' or '..' component; write the path it means")
        if any(len(part.encode("utf-8")) > NAME_MAX for part in parts):
            raise InputError(option, value, "has a component longer than %d bytes" % NAME_MAX)
        if not self.directory and value.endswith("/"):
            raise InputError(option, value, "ends with '/', so it names a directory, not a file")


class FileName(Text):
    """A plain file name (no directory part) of letters, digits, ``_``, ``.`` and ``-``, with one of ``suffixes``."""

    NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")

    def __init__(self, suffixes: t.Sequence[str]):
        super().__init__(max_length=NAME_MAX, what="a plain file name")
        self.suffixes = tuple(suffixes)

    def check(self, option: str, value: t.Any) -> None:
        super().check(option, value)
        if "/" in value or value in (".", ".."):
            raise InputError(option, value, "is not a plain file name: it may not name another directory")
        if not self.NAME_RE.fullmatch(value):
            raise InputError(option, value, "is not a plain file name of letters, digits, '_', '.' and '-'")
        if (self.suffixes and not value.endswith(self.suffixes)) or value in self.suffixes:
            raise InputError(option, value, "must end with %s" % " or ".join(self.suffixes))


class Integer(Rule):
    """An integer (a boolean is refused) from ``minimum`` to ``maximum``; ``why`` says where the limit comes from."""

    def __init__(self, minimum: int | None = None, maximum: int | None = None, why: str = ""):
        self.minimum = minimum
        self.maximum = maximum
        self.why = why

    def check(self, option: str, value: t.Any) -> None:
        if isinstance(value, bool) or not isinstance(value, int):
            raise InputError(option, value, "is %s, not an integer" % type_name(value))
        if self.minimum is not None and value < self.minimum:
            raise InputError(option, value, "is below the minimum of %d" % self.minimum)
        if self.maximum is not None and value > self.maximum:
            raise InputError(option, value, "is above the maximum of %d%s" % (self.maximum, " (%s)" % self.why if self.why else ""))


class Number(Rule):
    """A finite number above ``above`` (exclusive) and at most ``maximum``."""

    def __init__(self, above: float | None = None, maximum: float | None = None, why: str = ""):
        self.above = above
        self.maximum = maximum
        self.why = why

    def check(self, option: str, value: t.Any) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InputError(option, value, "is %s, not a number" % type_name(value))
        if not math.isfinite(value):
            raise InputError(option, value, "is not a finite number")
        if self.above is not None and value <= self.above:
            raise InputError(option, value, "must be above %s" % _number(self.above))
        if self.maximum is not None and value > self.maximum:
            raise InputError(option, value, "is above the maximum of %s%s" % (_number(self.maximum), " (%s)" % self.why if self.why else ""))


def _number(value: float) -> str:
    return ("%f" % value).rstrip("0").rstrip(".")


class ListOf(_Collection):
    """A list whose items each pass ``item``; at least ``min_items`` and at most ``max_items`` of them."""

    def __init__(self, item: Rule, min_items: int = 0, max_items: int = 256):
        self.item = item
        self.min_items = min_items
        self.max_items = max_items

    def errors(self, option: str, value: t.Any) -> list[InputError]:
        if value is None:
            return []
        if not isinstance(value, list):
            return [InputError(option, value, "is %s, not a list" % type_name(value))]
        if len(value) < self.min_items:
            return [InputError(option, value, "needs at least %d item(s)" % self.min_items)]
        if len(value) > self.max_items:
            return [InputError(option, value, "has more than %d items" % self.max_items)]
        out = []
        for number, item in enumerate(value):
            out.extend(self.item.errors("%s[%d]" % (option, number), item))
        return out


class Fields(_Collection):
    """A mapping whose keys are checked by their own rules (the suboptions of a dict option)."""

    def __init__(self, rules: t.Mapping[str, Rule]):
        self.rules = dict(rules)

    def errors(self, option: str, value: t.Any) -> list[InputError]:
        if value is None:
            return []
        if not isinstance(value, dict):
            return [InputError(option, value, "is %s, not a mapping" % type_name(value))]
        out = []
        for key, rule in self.rules.items():
            out.extend(rule.errors("%s.%s" % (option, key) if option else key, value.get(key)))
        return out


def check(params: t.Mapping[str, t.Any], rules: t.Mapping[str, Rule]) -> list[str]:
    """Every error of ``params`` against ``rules``, as messages (an empty list when all is well)."""
    return [str(error) for error in Fields(rules).errors("", dict(params))]


def one(rule: Rule, option: str, value: t.Any) -> str | None:
    """The error of one value, or None."""
    errors = rule.errors(option, value)
    return str(errors[0]) if errors else None


def _not_finite(value: t.Any) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, dict):
        return any(_not_finite(item) for item in value.values())
    if isinstance(value, (list, tuple)):
        return any(_not_finite(item) for item in value)
    return False


def _shape_problem(spec: t.Mapping[str, t.Any], value: t.Any) -> str | None:
    """What ansible-core's own checks trip over in an option's value: None when nothing."""
    if value is None:
        return None
    if _not_finite(value):
        return "holds a number that is not finite"
    if spec.get("options") and spec.get("type") == "dict" and not isinstance(value, (dict, str)):
        return "must be a dict, got %s" % type_name(value)
    if spec.get("options") and spec.get("type") == "list" and spec.get("elements") == "dict":
        if not isinstance(value, (list, tuple)):
            return None if isinstance(value, (dict, str)) else "must be a list of dicts, got %s" % type_name(value)
        bad = [item for item in value if not isinstance(item, (dict, str))]
        if bad:
            return "must be a list of dicts, and one item is %s" % show(bad[0])
    return None


def ansible_module(**kwargs: t.Any) -> AnsibleModule:
    """``AnsibleModule(**kwargs)``, except that a value ansible-core's own option checks trip over fails the task naming
    the option, where it would be a traceback for the user: an infinite number for an integer option
    (``check_type_int`` raises OverflowError) and a scalar for a dict option with suboptions (a TypeError)."""
    try:
        return AnsibleModule(**kwargs)
    except (OverflowError, TypeError, ValueError) as exc:
        error = exc
    # Every option as it came, so that fail_json can run; nothing of the request is used.
    spec = kwargs["argument_spec"]
    bare = AnsibleModule(argument_spec={name: {"type": "raw"} for name in spec}, supports_check_mode=kwargs.get("supports_check_mode", False))
    problems = ["%s %s %s" % (name, show(bare.params.get(name)), problem) for name in sorted(spec)
                for problem in [_shape_problem(spec[name], bare.params.get(name))] if problem]
    bare.fail_json(msg="; ".join(problems) or "an option has a value the module cannot take: %s" % error, errors=problems)
    raise AssertionError("fail_json returned")  # pragma: no cover


def as_list(value: t.Any) -> list[t.Any]:
    """A list from what a role may pass for one: none for None or "", one item for a string, bytes or scalar, the items
    of any other sequence."""
    if value is None or value == "":
        return []
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        return [value]
    return list(value)
