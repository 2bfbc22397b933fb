# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Shared fixtures: the fake NVML, the synthetic host tree, the fake nvidia-smi, and a module runner."""

from __future__ import annotations

import json
import os
import subprocess
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


@pytest.fixture
def local_play(tmp_path: t.Any) -> t.Callable[..., t.Any]:
    """Run plays on the controller (local connection, this interpreter, check mode unless ``check=False``) with the JSON
    callback. Without ``hosts``: on localhost, the first play's task results by task name (a role's as ``role : name``).
    With ``hosts`` (name: host variables), on those hosts at once (one run for many cases; the plays target ``all``):
    each host's task results by task name."""

    def run(plays: list[dict[str, t.Any]], check: bool = True, timeout: int = 180,
            hosts: dict[str, dict[str, t.Any]] | None = None) -> t.Any:
        path = tmp_path / "play.json"
        path.write_text(json.dumps(plays), encoding="utf-8")
        inventory = "localhost,"
        if hosts is not None:
            inventory = str(tmp_path / "inventory.json")
            local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
            (tmp_path / "inventory.json").write_text(json.dumps({"all": {"hosts": {name: dict(local, **variables)
                                                                                   for name, variables in hosts.items()}}}), encoding="utf-8")
        env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json", ANSIBLE_NOCOLOR="1", ANSIBLE_LOCALHOST_WARNING="0")
        argv = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", inventory, "-c", "local", "-f", "4"]
        argv += (["--check"] if check else []) + ["-e", "ansible_python_interpreter=" + sys.executable, str(path)]
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=False, timeout=timeout)
        try:
            result = json.loads(proc.stdout)
        except json.JSONDecodeError as exc:
            raise AssertionError(f"no JSON (rc {proc.returncode}):\n{proc.stdout}\n{proc.stderr}") from exc
        tasks = result["plays"][0]["tasks"]
        if hosts is None:
            return {task["task"]["name"]: task["hosts"]["localhost"] for task in tasks}
        return {name: {task["task"]["name"]: task["hosts"][name] for task in tasks if name in task["hosts"]} for name in hosts}

    return run


REACHED = "Reached after the role's tasks"


@pytest.fixture
def role_tasks(local_play: t.Callable[..., t.Any]) -> t.Callable[..., t.Any]:
    """Run one task file of a role on the controller (local_play): the role's set_vars.yml first (public), then the
    facts the test names with a leading ``__`` (they override the role's own variables), then ``before`` tasks, then
    the file, then a task named ``role_tasks.reached``, which is in the result only when the file did not stop the
    play. The other ``variables`` are play variables. With ``cases`` (name: host variables), every case runs at once,
    each as a host of its own, and the result is each case's task results."""

    def run(role: str, tasks_from: str, variables: dict[str, t.Any], before: list[dict[str, t.Any]] | None = None,
            cases: dict[str, dict[str, t.Any]] | None = None) -> t.Any:
        overrides = {k: v for k, v in variables.items() if k.startswith("__")}
        tasks = [{"name": "Load the role's variables", "ansible.builtin.include_role": {"name": role, "tasks_from": "set_vars.yml", "public": True}}]
        tasks += [{"name": "Override what the test asks", "ansible.builtin.set_fact": overrides}] if overrides else []
        tasks += list(before or [])
        tasks += [{"name": "Run the role's tasks", "ansible.builtin.include_role": {"name": role, "tasks_from": tasks_from}},
                  {"name": REACHED, "ansible.builtin.debug": {"msg": "passed"}}]
        return local_play([{"hosts": "localhost" if cases is None else "all", "gather_facts": True, "gather_subset": ["min"],
                            "vars": {k: v for k, v in variables.items() if not k.startswith("__")}, "tasks": tasks}], hosts=cases)

    run.reached = REACHED  # type: ignore[attr-defined]
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
