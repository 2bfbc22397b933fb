# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""An undefined argument reaches a filter of the collection as an undefined error, not as the filter's own error.

ansible-core 2.18 resolves every variable a conditional names before it evaluates it. A role variable built by a filter
from a variable that is not set yet (nvidia_container_toolkit's ``__nvidia_container_toolkit_apt_left``, named after a
false ``and``) then hands the filter an undefined value. As an undefined error the templar defers it (the variable is
undefined only where it is used); as an AnsibleFilterError the task failed (site's idempotence on 2.18)."""

from __future__ import annotations

import pytest
from jinja2 import StrictUndefined, Undefined
from jinja2.exceptions import UndefinedError

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuhost.nvidia.plugins.filter.packages import FilterModule as Packages
from ansible_collections.gpuhost.nvidia.plugins.plugin_utils import _filter_args

FILTERS = Packages().filters()


@pytest.mark.parametrize("undefined", [Undefined, StrictUndefined])
def test_an_undefined_argument_is_an_undefined_error(undefined) -> None:
    with pytest.raises(UndefinedError):
        FILTERS["packages_to_ensure"](undefined(name="__nvidia_container_toolkit_pick"), [])
    with pytest.raises(UndefinedError):
        FILTERS["packages_to_ensure"](["nvidia-container-toolkit"], undefined(name="gpuhost_ensured_packages"))
    with pytest.raises(UndefinedError):
        FILTERS["packages_ensured"]([], packages=undefined(name="x"))


def test_defined_arguments_are_checked_as_before() -> None:
    assert FILTERS["packages_to_ensure"](["a", "b=1.*", "a"], ["a"]) == ["b=1.*"]
    with pytest.raises(AnsibleFilterError, match="packages_to_ensure: expected a list of package names, got dict"):
        FILTERS["packages_to_ensure"]({"a": 1}, [])


def test_an_undefined_error_inside_the_filter_is_not_turned_into_the_catch_all() -> None:
    def reads(value):
        return str(value)

    with pytest.raises(UndefinedError):
        _filter_args.guard("reads", reads)([StrictUndefined(name="inner")][0])

    def fails(value):
        raise UndefinedError("'inner' is undefined")

    with pytest.raises(UndefinedError):
        _filter_args.guard("fails", fails)("x")
