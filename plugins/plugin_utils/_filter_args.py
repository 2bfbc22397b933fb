# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Argument checks shared by the collection's filters. Private to this collection: not a public API."""

from __future__ import annotations

import functools
import inspect
import json
import typing as t
from collections.abc import Mapping

from ansible.errors import AnsibleFilterError
from jinja2 import Undefined
from jinja2.exceptions import UndefinedError

from ansible_collections.gpuhost.nvidia.plugins.plugin_utils._lazy import module_utils

# Imported when a filter first checks facts, not when Ansible loads the filter files (plugin_utils/_lazy.py).
_gpu_schema = module_utils("_gpu_schema")


def mapping(value: t.Any, name: str) -> Mapping[str, t.Any]:
    """``value`` as a mapping (None: empty); anything else fails naming the filter argument."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise AnsibleFilterError("%s: expected a dict, got %s" % (name, type(value).__name__))
    return value


def gpu_facts(value: t.Any, name: str, check: bool = True) -> Mapping[str, t.Any]:
    """The ``nvidia_gpu`` facts, given either themselves or ``ansible_facts`` holding them; a value of the wrong type
    in them (a string where the schema has a number, a list or a dict) fails, naming each one. ``check=False`` leaves
    that to the caller (a planner that reports it among its errors)."""
    facts = mapping(value, name)
    if "nvidia_gpu" in facts:
        facts = mapping(facts["nvidia_gpu"], "%s nvidia_gpu" % name)
    if not check:
        return facts
    problems = _gpu_schema.facts_problems(facts)
    if problems:
        raise AnsibleFilterError("%s: %s: pass ansible_facts.nvidia_gpu as gpuhost.nvidia.nvidia_gpu_facts returns it"
                                 % (name, "; ".join(problems[:5]) + ("; and %d more" % (len(problems) - 5) if len(problems) > 5 else "")))
    return facts


# The largest whole number a filter takes: anything bigger is not a count, an amount of memory or a percentage.
MAX_WHOLE = 2 ** 63 - 1


def whole(value: t.Any, name: str, fix: str = "") -> int:
    """``value`` as a whole number from 0 to MAX_WHOLE: an int or a string of decimal digits (a template's output).

    A bool, a float (NaN and infinity included), a negative number or anything else fails naming ``name``, the value
    and ``fix``.
    """
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 19:
        number = int(value)
    if number is None or not 0 <= number <= MAX_WHOLE:
        raise AnsibleFilterError("%s must be a whole number from 0 to %d, got %s%s" % (name, MAX_WHOLE, _shown(value), fix and ": " + fix))
    return number


def sequence(value: t.Any, name: str, fix: str = "") -> list[t.Any]:
    """``value`` as a list (None: empty); a string, a mapping or a scalar fails naming ``name``, the value and ``fix``."""
    if value is None:
        return []
    if not isinstance(value, (list, tuple)):
        raise AnsibleFilterError("%s must be a list, got %s %s%s" % (name, type(value).__name__, _shown(value), fix and ": " + fix))
    return list(value)


def plain(value: t.Any) -> t.Any:
    """``value`` as plain JSON types (anything else as its string), without Ansible's lazy template containers and
    tags. Code that copies its input (Ansible's ArgumentSpecValidator deep-copies the parameters) would otherwise copy
    the lazy containers, which took 0.3 s for a three-key spec in a site.yml run)."""
    return json.loads(json.dumps(value, default=str))


# Attributes the guard sets: on the filters it wraps, and on the errors its catch-all raises (the unit battery tells
# these apart from a filter's own refusals, which name the argument and the fix).
GUARDED = "_gpuhost_guarded"
UNCHECKED = "_gpuhost_unchecked"


def _shown(value: t.Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def guard(name: str, function: t.Callable[..., t.Any]) -> t.Callable[..., t.Any]:
    """``function`` as the filter ``name``: any exception but AnsibleFilterError becomes an AnsibleFilterError that
    names the filter, each argument it was given and what went wrong, so that no Python traceback reaches the user.

    This is the last line, not the check: each filter refuses the input it does not take itself, naming the argument
    and the fix. Reaching the catch-all means a shape nobody checked; the message then lists every argument, since it
    cannot tell which one was wrong.
    """
    try:
        parameters = list(inspect.signature(function).parameters)
    except (TypeError, ValueError):  # pragma: no cover - a builtin without a signature
        parameters = []

    @functools.wraps(function)
    def wrapper(*args: t.Any, **kwargs: t.Any) -> t.Any:
        # An undefined argument stays an undefined error, not this filter's: ansible-core 2.18 resolves every variable a
        # conditional names before it evaluates it, so a filter in a variable that the condition would not reach (after
        # a false `and`) gets the undefined value it depends on. As an undefined error the variable is only undefined
        # there (the templar defers it); as a filter error the whole task fails. ansible-core 2.19 never passes one.
        for value in list(args) + list(kwargs.values()):
            if isinstance(value, Undefined):
                value._fail_with_undefined_error()  # pylint: disable=protected-access
        try:
            return function(*args, **kwargs)
        except (AnsibleFilterError, UndefinedError):
            raise
        except Exception as exc:  # pylint: disable=broad-exception-caught
            given = ["%s=%s" % (parameters[i] if i < len(parameters) else "args[%d]" % i, _shown(v)) for i, v in enumerate(args)]
            given += ["%s=%s" % (key, _shown(value)) for key, value in kwargs.items()]
            error = AnsibleFilterError("%s: cannot use these arguments (%s): %s: %s. Check each argument's type against the "
                                       "filter's documentation (ansible-doc -t filter gpuhost.nvidia.%s)"
                                       % (name, ", ".join(given) or "none", type(exc).__name__, exc, name))
            setattr(error, UNCHECKED, True)
            raise error from None

    setattr(wrapper, GUARDED, True)
    return wrapper


def guarded(filters: Mapping[str, t.Callable[..., t.Any]]) -> dict[str, t.Callable[..., t.Any]]:
    """A FilterModule's ``filters()`` mapping with each filter behind :func:`guard`."""
    return {name: guard(name, function) for name, function in filters.items()}
