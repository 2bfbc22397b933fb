# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Every module of the collection against hostile input (issue #37): no traceback, whatever the shape.

The battery finds the modules itself (plugins/modules), so a new module without a good call in GOOD fails here. It
reads each module's argument spec from a good call, then replaces each option in turn by each value of HOSTILE, and
each value nested in the GPU facts a module is given by each value of NESTED. Every call runs in check mode, with no
command found on the host, against paths under a temporary directory. A module must end with exit_json or fail_json:
any other exception is a traceback for the user. A failure must not carry a traceback (``exception``), and a refused
facts value must be named under the facts option.
"""

from __future__ import annotations

import copy
import glob
import importlib
import os
import signal
import typing as t

import pytest

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args

import hostile
import test_hostile_filters as filters

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
FACTS = filters.FACTS

HOSTILE: list[t.Any] = [None, "", "x", "\x00\n", "caf\u00e9\u202e", "a" * 5000, "../../etc/shadow", -1, 2 ** 70, float("nan"),
                        float("inf"), True, [], ["x"], [None], {}, {"x": 1}]
NESTED: list[t.Any] = [None, "x", "", -1, 2 ** 70, float("nan"), True, [], ["x"], {}, {"x": 1}]


def _good(tmp: str) -> dict[str, dict[str, t.Any]]:
    """A call of each module that gets past its argument checks, under ``tmp``."""
    os.makedirs(os.path.join(tmp, "cdi"), exist_ok=True)
    with open(os.path.join(tmp, "grub"), "w", encoding="ascii") as handle:
        handle.write('GRUB_CMDLINE_LINUX_DEFAULT="quiet"\n')
    return {
        "gpu_compose_override": {"path": os.path.join(tmp, "compose.override.yml"), "services": [{"name": "app"}], "facts": FACTS,
                                 "record": os.path.join(tmp, "compose-record.json")},
        "gpu_container_check": {"facts": FACTS, "docker_host": "unix://%s/no-docker.sock" % tmp, "timeout": 1},
        "gpuhost_apply": {"files": [{"path": os.path.join(tmp, "a.conf"), "content": "a\n", "mode": "0644"}],
                          "directories": [{"path": os.path.join(tmp, "d")}], "absent": [os.path.join(tmp, "gone")]},
        "gpuhost_converged": {"state": "probe", "path": os.path.join(tmp, "converged.json"), "inputs": {"a": 1},
                              "inputs_digest": "015abd7f5cc57a2dd94b7590f04ad8084273905ee33ec5cebeae62276a97f862"},
        "nvidia_cdi_spec": {"dir": os.path.join(tmp, "cdi"), "record": os.path.join(tmp, "cdi-record.json"), "facts": FACTS},
        "nvidia_container_restart_plan": {"engines": [{"name": "docker"}]},
        "nvidia_container_runtime": {"runtime": "docker", "path": os.path.join(tmp, "daemon.json")},
        "nvidia_container_toolkit_config": {"path": os.path.join(tmp, "config.toml"), "record": os.path.join(tmp, "tk-record.json"),
                                            "no_cgroups": True},
        "nvidia_driver_host": {},
        "nvidia_gpu_doctor": {"facts": FACTS, "root": tmp},
        "nvidia_gpu_facts": {"root": tmp},
        "nvidia_smi_settings": {"persistence_mode": True},
        "repository_key": {"fingerprint": "AE09FE4BBD223A84B2CCFCE3F60F4B3D7FA2AF80", "dest": os.path.join(tmp, "key.gpg"),
                           "url": "https://127.0.0.1:1/key.asc"},
        "vfio_kernel_args": {"path": os.path.join(tmp, "grub"), "args": ["iommu=pt"]},
        "kubelet_registration": {"env_file": os.path.join(tmp, "kubelet"), "record": os.path.join(tmp, "kubelet-record.json"),
                                 "labels": {"nvidia.com/gpu": "true"},
                                 "taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]},
        "gpu_operator_check": {"components": ["driver", "toolkit"], "root": tmp},
    }


# The option of each module that takes the GPU facts.
FACTS_OPTION = {"gpu_compose_override": "facts", "gpu_container_check": "facts", "nvidia_cdi_spec": "facts", "nvidia_gpu_doctor": "facts"}
# Modules whose traceback is known and not fixed yet, with why (none: keep it that way).
OWNED: dict[str, str] = {}

MODULE_NAMES = sorted(os.path.splitext(os.path.basename(p))[0] for p in glob.glob(os.path.join(ROOT, "plugins", "modules", "*.py")))


class _Done(Exception):
    pass


def _runner(monkeypatch: pytest.MonkeyPatch) -> t.Callable[..., t.Any]:
    specs: dict[str, t.Any] = {}
    original_init = basic.AnsibleModule.__init__

    def init(self: t.Any, *args: t.Any, **kwargs: t.Any) -> None:
        specs["argument_spec"] = kwargs.get("argument_spec") or (args[0] if args else {})
        original_init(self, *args, **kwargs)

    def finish(self: t.Any, **kwargs: t.Any) -> None:
        raise _Done(kwargs)

    def fail(self: t.Any, **kwargs: t.Any) -> None:
        kwargs["failed"] = True
        raise _Done(kwargs)

    monkeypatch.setattr(basic.AnsibleModule, "__init__", init)
    monkeypatch.setattr(basic.AnsibleModule, "exit_json", finish)
    monkeypatch.setattr(basic.AnsibleModule, "fail_json", fail)
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", lambda self, arg, required=False, opt_dirs=None: None)
    monkeypatch.setattr(basic.AnsibleModule, "run_command", lambda self, argv, **kwargs: (127, "", "%s: not found" % argv))

    def run(module: t.Any, args: dict[str, t.Any]) -> tuple[dict[str, t.Any] | None, BaseException | None]:
        with patch_module_args(dict(copy.deepcopy(args), _ansible_check_mode=True)):
            try:
                module.main()
            except _Done as done:
                return done.args[0], None
            except SystemExit as exc:  # pragma: no cover - exit_json and fail_json are patched
                return None, exc
            except Exception as exc:  # pylint: disable=broad-exception-caught
                return None, exc
        return None, AssertionError("main() returned without exit_json or fail_json")

    run.specs = specs  # type: ignore[attr-defined]
    return run


def _problem(result: dict[str, t.Any] | None, error: BaseException | None) -> str | None:
    if error is not None:
        return "%s: %s" % (type(error).__name__, str(error)[:200])
    assert result is not None
    if result.get("failed") and "exception" in result and "missing" not in str(result.get("msg")):
        return "failed with a traceback: %s" % str(result.get("msg"))[:200]
    if "Traceback (most recent call last)" in str(result.get("msg")):
        return "the message holds a traceback"
    return None


def test_every_module_has_a_good_call(tmp_path):
    assert sorted(_good(str(tmp_path))) == MODULE_NAMES, "add a good call of each new module to _good (and remove the gone ones)"


def _params(name: str) -> list[t.Any]:
    return [pytest.param(name, marks=pytest.mark.xfail(reason=OWNED[name], strict=False))] if name in OWNED else [name]


@pytest.mark.parametrize("name", [p for n in MODULE_NAMES for p in _params(n)])
def test_hostile_options_end_in_exit_or_fail_json(name, tmp_path, monkeypatch):
    module = importlib.import_module("ansible_collections.gpuhost.nvidia.plugins.modules.%s" % name)
    run = _runner(monkeypatch)
    good = _good(str(tmp_path))[name]
    result, error = run(module, good)
    assert _problem(result, error) is None, _problem(result, error)
    problems = []
    for option in sorted(run.specs["argument_spec"]):
        for bad in HOSTILE:
            result, error = run(module, dict(good, **{option: bad}))
            problem = _problem(result, error)
            if problem is not None:
                problems.append("%s=%r: %s" % (option, bad, problem))
    assert not problems, "%d hostile calls of %s failed:\n%s" % (len(problems), name, "\n".join(problems[:40]))


def _leaves(value: t.Any, path: tuple[t.Any, ...] = ()) -> t.Iterator[tuple[t.Any, ...]]:
    yield from filters._leaves(value, path)  # pylint: disable=protected-access


@pytest.mark.parametrize("name", sorted(FACTS_OPTION))
def test_hostile_facts_are_refused_naming_the_option_or_tolerated(name, tmp_path, monkeypatch):
    module = importlib.import_module("ansible_collections.gpuhost.nvidia.plugins.modules.%s" % name)
    run = _runner(monkeypatch)
    good = _good(str(tmp_path))[name]
    option = FACTS_OPTION[name]
    problems = []
    for path in _leaves(FACTS):
        for bad in NESTED:
            facts = filters._replaced(FACTS, path, bad)  # pylint: disable=protected-access
            result, error = run(module, dict(good, **{option: facts}))
            problem = _problem(result, error)
            label = "%s%s=%r" % (option, "".join("[%r]" % p for p in path), bad)
            if problem is not None:
                problems.append("%s: %s" % (label, problem))
    assert not problems, "%d hostile facts of %s failed:\n%s" % (len(problems), name, "\n".join(problems[:40]))


@pytest.mark.parametrize("facts, expected", [
    ({"gpus": ["x"], "driver": {}}, "facts: facts.gpus[0] must be a dict, got str 'x'"),
    ({"gpus": [dict(FACTS["gpus"][0], memory_total_mib="80GB")], "driver": {}}, "facts.gpus[0].memory_total_mib must be a whole number"),
    ({"gpus": [], "driver": "550"}, "facts.driver must be a dict, got str '550'"),
])
@pytest.mark.parametrize("name", sorted(FACTS_OPTION))
def test_wrong_facts_are_named_before_the_host_is_read(name, facts, expected, tmp_path, monkeypatch):
    module = importlib.import_module("ansible_collections.gpuhost.nvidia.plugins.modules.%s" % name)
    run = _runner(monkeypatch)
    reads: list[str] = []
    monkeypatch.setattr(os, "listdir", lambda *a: reads.append("listdir") or [])
    result, error = run(module, dict(_good(str(tmp_path))[name], facts=facts))
    assert error is None and result is not None and result.get("failed") is True, (result, error)
    assert expected in result["msg"] and "pass ansible_facts.nvidia_gpu" in result["msg"], result["msg"]
    assert reads == []


# Each option that names a file a module reads or writes, and whether the module refuses a special file there (True) or
# reports it as unusable and goes on (False: the doctor, which diagnoses what it finds).
FILE_OPTIONS = [
    ("gpu_compose_override", "path", True), ("gpu_compose_override", "record", True),
    ("gpuhost_converged", "path", True),
    ("nvidia_cdi_spec", "record", True),
    ("nvidia_container_runtime", "path", True),
    ("nvidia_container_toolkit_config", "path", True), ("nvidia_container_toolkit_config", "record", True),
    ("nvidia_gpu_doctor", "docker_daemon_json", False), ("nvidia_gpu_doctor", "containerd_config", False),
    ("vfio_kernel_args", "path", True),
]


@pytest.mark.parametrize("kind", ["fifo", "directory", "under_file", "link_loop"])
@pytest.mark.parametrize("name, option, refused", FILE_OPTIONS, ids=["%s-%s" % o[:2] for o in FILE_OPTIONS])
def test_a_special_file_at_a_path_is_never_opened(name, option, refused, kind, tmp_path, monkeypatch):
    special = hostile.make_special_cases(str(tmp_path / "special"))
    module = importlib.import_module("ansible_collections.gpuhost.nvidia.plugins.modules.%s" % name)
    run = _runner(monkeypatch)
    before = hostile.snapshot(str(tmp_path / "special"))

    def hang(*_args: t.Any) -> None:
        raise TimeoutError("the module blocked on %s" % special[kind])

    previous = signal.signal(signal.SIGALRM, hang)
    signal.alarm(10)
    try:
        result, error = run(module, dict(_good(str(tmp_path))[name], **{option: special[kind]}))
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert error is None and result is not None, error
    assert hostile.snapshot(str(tmp_path / "special")) == before
    if refused:
        assert result.get("failed") is True and special[kind] in result["msg"] and "exception" not in result, result
    else:
        assert "exception" not in result, result


@pytest.mark.parametrize("address, expected", [
    ("tcp://127.0.0.1:99999", "Port out of range"), ("tcp://127.0.0.1:0", "has port 0"), ("tcp://:2375", "names no host"),
    ("tcp://host:", "empty port"), ("http://host:2375/v1.40", "has a path"), ("unix://var/run/docker.sock", "absolute socket path"),
    ("tcp://host:-1", "is not a valid address"), ("ssh://user@:22", "names no host"),
])
def test_engine_addresses_it_cannot_use_are_refused_by_name(address, expected, tmp_path, monkeypatch):
    module = importlib.import_module("ansible_collections.gpuhost.nvidia.plugins.modules.gpu_container_check")
    run = _runner(monkeypatch)
    result, error = run(module, dict(_good(str(tmp_path))["gpu_container_check"], docker_host=address))
    assert error is None and result is not None and result.get("failed") is True, (result, error)
    assert result["msg"].startswith("docker_host: %r" % address) and expected in result["msg"], result["msg"]


def _blocked(*_args):
    raise TimeoutError("blocked on a FIFO")


@pytest.mark.parametrize("address", ["unix:///var/run/docker.sock", "tcp://127.0.0.1:2376", "tcp://[::1]:2375", "ssh://user@host",
                                     "https://docker.example:65535", "tcp://host"])
def test_engine_addresses_it_can_use_pass(address):
    from ansible_collections.gpuhost.nvidia.plugins.module_utils import _verify

    assert _verify.docker_host_problem(address) is None


def test_an_unreachable_engine_is_the_reason_not_a_traceback(tmp_path, monkeypatch):
    module = importlib.import_module("ansible_collections.gpuhost.nvidia.plugins.modules.gpu_container_check")
    run = _runner(monkeypatch)
    result, error = run(module, dict(_good(str(tmp_path))["gpu_container_check"], docker_host="tcp://127.0.0.1:9"))
    assert error is None and result is not None and result.get("failed") is True, (result, error)
    assert result["msg"].startswith("cannot reach the engine at tcp://127.0.0.1:9"), result["msg"]


def test_the_facts_never_open_a_fifo_under_the_root(tmp_path):
    pci = importlib.import_module("ansible_collections.gpuhost.nvidia.plugins.module_utils._pci")
    (tmp_path / "etc").mkdir()
    os.mkfifo(str(tmp_path / "etc" / "ld.so.cache"))
    os.mkfifo(str(tmp_path / "nvidia.ko"))
    previous = signal.signal(signal.SIGALRM, _blocked)
    signal.alarm(10)
    try:
        assert pci._ld_cache_paths(str(tmp_path), "libcuda.so.1") == []  # pylint: disable=protected-access
        assert pci._module_license(str(tmp_path / "nvidia.ko")) is None  # pylint: disable=protected-access
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
