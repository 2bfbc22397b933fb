# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Shared fixtures: the fake NVML, the synthetic host tree, the fake nvidia-smi, and a module runner."""

from __future__ import annotations

import os
import sys
import typing as t

import pytest

FAKES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fakes")
if FAKES not in sys.path:
    sys.path.insert(0, FAKES)

import fake_pynvml  # noqa: E402  pylint: disable=wrong-import-position
import sysfs  # noqa: E402  pylint: disable=wrong-import-position
from gpufacts_support import FakeSmi  # noqa: E402  pylint: disable=wrong-import-position

from ansible.module_utils import basic  # noqa: E402  pylint: disable=wrong-import-position
from ansible.module_utils.testing import patch_module_args  # noqa: E402  pylint: disable=wrong-import-position


class AnsibleExitJson(Exception):
    """exit_json was called; the result is in args[0]."""


class AnsibleFailJson(Exception):
    """fail_json was called; the result is in args[0]."""


@pytest.fixture
def fake_nvml(monkeypatch: pytest.MonkeyPatch) -> t.Callable[..., fake_pynvml.FakeNVML]:
    """``fake_nvml('h100_sxm_8x_nvswitch')`` installs a fake pynvml in sys.modules and returns its state.

    Pass a dict instead of a name for an edited profile.
    """

    def install(profile: str | dict[str, t.Any]) -> fake_pynvml.FakeNVML:
        fake = fake_pynvml.make_fake(profile)
        monkeypatch.setitem(sys.modules, "pynvml", fake.module)
        return fake

    return install


@pytest.fixture
def no_pynvml(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``import pynvml`` fail, as on a host without nvidia-ml-py."""
    monkeypatch.setitem(sys.modules, "pynvml", None)


@pytest.fixture
def host_tree(tmp_path: t.Any) -> t.Callable[..., str]:
    """``host_tree(profile)`` writes the synthetic sysfs/proc/dev/lib tree for a profile and returns its root."""

    def build(profile: str | dict[str, t.Any], **kwargs: t.Any) -> str:
        data = fake_pynvml.load_profile(profile) if isinstance(profile, str) else profile
        root = tmp_path / "root"
        root.mkdir(exist_ok=True)
        return sysfs.build(str(root), data, **kwargs)

    return build


@pytest.fixture
def fake_smi(tmp_path: t.Any, monkeypatch: pytest.MonkeyPatch) -> FakeSmi:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    return FakeSmi(str(bin_dir), monkeypatch)


@pytest.fixture
def run_module(monkeypatch: pytest.MonkeyPatch) -> t.Callable[..., dict[str, t.Any]]:
    """Run a module's main() with arguments; return its result dict (``failed`` is True after fail_json).

    ``smi`` is a FakeSmi (or None): get_bin_path('nvidia-smi') finds only that fake, never a real binary on the
    machine running the tests. ``bins`` names the other commands get_bin_path finds (their run_command is the test's
    to fake); every other lookup finds nothing.
    """

    def run(module: t.Any, args: dict[str, t.Any], smi: FakeSmi | None = None, check_mode: bool = False,
            bins: dict[str, str] | None = None) -> dict[str, t.Any]:
        looked_up: list[str] = []

        def get_bin_path(self: t.Any, arg: str, required: bool = False, opt_dirs: t.Any = None) -> str | None:
            looked_up.append(arg)
            if smi is not None and arg == "nvidia-smi":
                return smi.path
            return (bins or {}).get(arg)

        def exit_json(self: t.Any, **kwargs: t.Any) -> None:
            raise AnsibleExitJson(kwargs)

        def fail_json(self: t.Any, **kwargs: t.Any) -> None:
            kwargs["failed"] = True
            raise AnsibleFailJson(kwargs)

        monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", get_bin_path)
        monkeypatch.setattr(basic.AnsibleModule, "exit_json", exit_json)
        monkeypatch.setattr(basic.AnsibleModule, "fail_json", fail_json)
        if check_mode:
            args = dict(args, _ansible_check_mode=True)
        with patch_module_args(args):
            with pytest.raises((AnsibleExitJson, AnsibleFailJson)) as caught:
                module.main()
        result = caught.value.args[0]
        result["_bin_lookups"] = looked_up
        return result

    return run


# A test that needs a real tool skips with a reason starting "tool missing:" when it is absent. Under `make test`
# (GPUHOST_REQUIRE_TOOLS=1, set by tests/run_tiers.sh) every such tool comes from bindep.txt, so its absence is a
# broken install step, not a reason to pass: the skip becomes a failure. Files outside the repository (../shared)
# stay skips, which the unit tier's summary counts with their reasons.
TOOL_MISSING = "tool missing:"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> t.Generator[None, t.Any, None]:
    outcome = yield
    report = outcome.get_result()
    if not (report.skipped and os.environ.get("GPUHOST_REQUIRE_TOOLS") == "1"):
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    if TOOL_MISSING in reason:
        report.outcome = "failed"
        report.longrepr = "%s (GPUHOST_REQUIRE_TOOLS=1: bindep.txt lists it, so tests/deps/install.sh should have installed it)" % reason
