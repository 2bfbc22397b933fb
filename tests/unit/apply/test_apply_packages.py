# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""gpuhost_apply's apt transaction and regeneration (#21: the driver's pin, modprobe.d files, install and initramfs in
one call), on temporary files with a fake dpkg/apt-get; and the commands it builds, against this machine's real
dpkg-query and apt-get (a dry run that changes nothing).
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

import fake_pynvml
import sysfs

from ansible.module_utils import basic

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _apply, _apt
from ansible_collections.gpuhost.nvidia.plugins.modules import gpuhost_apply


class FakeApt:
    """dpkg's status as a table; apt-get install sets it from the specs (a glob takes the repository's version)."""

    OFFERED = {"nvidia-smi": ["535.261.03-1", "550.163.01-1"], "libcuda1": ["535.261.03-1"], "python3-yaml": ["6.0-3+b2"]}

    def __init__(self, pin_path):
        self.installed = {}
        self.calls = []
        self.pin_path = pin_path
        self.pin_seen = []
        self.fail_install = False

    def run_command(self, argv, **kwargs):
        tool = os.path.basename(argv[0])
        self.calls.append([tool] + list(argv[1:]))
        if tool == "dpkg-query":
            names = argv[3:]
            out = "".join("%s\t%s\tii \n" % (name, self.installed[name]) for name in names if name in self.installed)
            return (0 if all(name in self.installed for name in names) else 1), out, ""
        if tool == "apt-get":
            assert kwargs.get("environ_update", {}).get("DEBIAN_FRONTEND") == "noninteractive"
            self.pin_seen.append(os.path.exists(self.pin_path))
            if self.fail_install:
                return 100, "", "E: Unable to locate package nvidia-smi\n"
            if "-s" in argv:
                return 0, "Inst nvidia-smi\n", ""
            for spec in argv[argv.index("install") + 1:]:
                name, version = _apt.split_spec(spec)
                offered = self.OFFERED[name]
                self.installed[name] = next(v for v in reversed(offered) if version is None or _apt.fnmatch.fnmatchcase(v, version))
            return 0, "", ""
        if tool == "update-initramfs":
            return 0, "", ""
        raise AssertionError("unexpected command %r" % (argv,))


@pytest.fixture
def apt(tmp_path, monkeypatch):
    fake = FakeApt(str(tmp_path / "pin.pref"))
    monkeypatch.setattr(basic.AnsibleModule, "run_command", fake.run_command)
    return fake


BINS = {"dpkg-query": "/usr/bin/dpkg-query", "apt-get": "/usr/bin/apt-get"}


def request(tmp_path, install, **packages):
    tool = tmp_path / "update-initramfs"
    tool.write_text("")
    return {
        "files": [{"path": str(tmp_path / "pin.pref"), "content": "Package: nvidia-smi\nPin: version 535.*\nPin-Priority: 1001\n"},
                  {"path": str(tmp_path / "blacklist.conf"), "content": "blacklist nouveau\n"}],
        "packages": dict({"install": install}, **packages),
        "regenerate": {"argv": ["update-initramfs", "-u", "-k", "all"], "when_changed": [str(tmp_path / "blacklist.conf")],
                       "if_exists": str(tool)},
    }


def tools(fake):
    return [call[0] + (" -s" if "-s" in call else "") for call in fake.calls]


def test_check_mode_predicts_the_run_and_the_second_run_installs_nothing(run_module, apt, tmp_path):
    args = request(tmp_path, ["nvidia-smi=535.*", "libcuda1", "python3-yaml"])
    apt.installed["python3-yaml"] = "6.0-3+b2"  # installed already: left out of apt-get's command line

    predicted = run_module(gpuhost_apply, args, check_mode=True, bins=BINS)
    assert predicted["changed"] and predicted["regenerated"]
    assert predicted["packages"]["installed"] == ["nvidia-smi=535.*", "libcuda1"]
    assert tools(apt) == ["dpkg-query", "apt-get -s"] and not os.path.exists(tmp_path / "pin.pref")
    assert apt.installed == {"python3-yaml": "6.0-3+b2"}

    apt.calls.clear()
    done = run_module(gpuhost_apply, args, bins=BINS)
    assert done["changed"] and done["regenerated"] and done["packages"]["installed"] == predicted["packages"]["installed"]
    # the preferences were written before apt-get resolved; the initramfs after the transaction
    assert apt.pin_seen == [False, True]
    assert tools(apt) == ["dpkg-query", "apt-get", "dpkg-query", "update-initramfs"]
    assert done["packages"]["before"] == {"nvidia-smi": None, "libcuda1": None, "python3-yaml": "6.0-3+b2"}
    assert done["packages"]["after"] == {"nvidia-smi": "535.261.03-1", "libcuda1": "535.261.03-1", "python3-yaml": "6.0-3+b2"}

    apt.calls.clear()
    again = run_module(gpuhost_apply, args, bins=BINS)
    assert not again["changed"] and not again["regenerated"] and again["packages"]["installed"] == []
    assert tools(apt) == ["dpkg-query"]


def test_a_version_spec_is_a_glob_and_a_downgrade_is_asked_for(run_module, apt, tmp_path):
    apt.installed["nvidia-smi"] = "550.163.01-1"
    args = request(tmp_path, ["nvidia-smi=535.261.03-1"], allow_downgrade=True)
    done = run_module(gpuhost_apply, args, bins=BINS)
    assert done["packages"]["installed"] == ["nvidia-smi=535.261.03-1"]
    assert "--allow-downgrades" in apt.calls[1] and done["packages"]["after"]["nvidia-smi"] == "535.261.03-1"
    assert _apt.specs_left(["nvidia-smi=535.*", "nvidia-smi=535"], {"nvidia-smi": "535.261.03-1"}) == ["nvidia-smi=535"]


def test_a_failed_install_still_regenerates_for_the_written_files_then_fails(run_module, apt, tmp_path):
    apt.fail_install = True
    failed = run_module(gpuhost_apply, request(tmp_path, ["nvidia-smi"]), bins=BINS)
    assert "apt-get install of nvidia-smi failed (rc 100): E: Unable to locate package nvidia-smi" in failed["msg"]
    assert failed["regenerated"] and tools(apt)[-1] == "update-initramfs"
    assert os.path.exists(tmp_path / "blacklist.conf")
    # the next run finds the files written: no regeneration, the install is tried again
    apt.fail_install = False
    apt.calls.clear()
    done = run_module(gpuhost_apply, request(tmp_path, ["nvidia-smi"]), bins=BINS)
    assert not done["regenerated"] and done["packages"]["changed"] and "update-initramfs" not in tools(apt)


def test_no_regeneration_without_the_tool(run_module, apt, tmp_path):
    args = request(tmp_path, [])
    os.remove(args["regenerate"]["if_exists"])
    done = run_module(gpuhost_apply, args, bins=BINS)
    assert done["changed_files"] and not done["regenerated"] and tools(apt) == []


@pytest.mark.parametrize("packages, regenerate, expected", [
    ({"install": ["nvidia-smi; rm -rf /"]}, None, "packages.install[0]: 'nvidia-smi; rm -rf /' is not a package name"),
    ({"install": ["-oAPT::Get::Simulate=0"]}, None, "packages.install[0]: '-oAPT::Get::Simulate=0' is not"),
    ({"install": ["NVIDIA-smi"]}, None, "is not a package name"),
    ({"install": ["nvidia-smi=535 550"]}, None, "is not a package name"),
    ({"install": ["nvidia-smi", "nvidia-smi=535.*"]}, None, "packages.install[1]: package nvidia-smi is listed twice"),
    (None, {"argv": ["-rf", "/"], "when_changed": ["F"]}, "regenerate.argv: ['-rf'] does not start with a command name"),
    (None, {"argv": ["update-initramfs", "-u\nrm"], "when_changed": ["F"]}, "regenerate.argv[1]: '-u\\nrm' is not a single-line argument"),
    (None, {"argv": ["update-initramfs"], "when_changed": ["/etc/passwd"]}, "regenerate.when_changed names '/etc/passwd', which is not in files"),
    (None, {"argv": ["update-initramfs"], "when_changed": ["F"], "if_exists": "../x"}, "regenerate.if_exists: path '../x' is not an absolute path"),
])
def test_hostile_requests_are_refused_before_anything_runs(run_module, apt, tmp_path, packages, regenerate, expected):
    target = str(tmp_path / "f.conf")
    if regenerate:
        regenerate = dict(regenerate, when_changed=[target if p == "F" else p for p in regenerate["when_changed"]])
    args = {"files": [{"path": target, "content": "x\n"}]}
    args.update({key: value for key, value in (("packages", packages), ("regenerate", regenerate)) if value})
    failed = run_module(gpuhost_apply, args, bins=BINS)
    assert expected in failed["msg"], failed["msg"]
    assert apt.calls == [] and not os.path.exists(target)


def test_every_problem_of_the_request_at_once():
    problems = _apply.check_request([], [], [], [], {"install": ["ok-name", "Bad"]}, {"argv": [], "when_changed": []})
    assert len(problems) == 3, problems


# The commands against this machine's own dpkg-query and apt-get (Debian, bindep: dpkg, apt): the format string and the
# options are accepted, and a dry run of an installed package changes nothing.
@pytest.mark.skipif(shutil.which("dpkg-query") is None or shutil.which("apt-get") is None, reason="needs dpkg and apt (bindep.txt)")
def test_the_commands_against_the_real_dpkg_query_and_apt_get():
    query = subprocess.run(_apt.status_argv(["dpkg", "gpuhost-no-such-package"]), capture_output=True, text=True, check=False,
                           env=dict(os.environ, **_apt.APT_ENV))
    assert query.returncode == 1, query.stderr  # the unknown name
    installed = _apt.parse_status(query.stdout)
    assert list(installed) == ["dpkg"] and installed["dpkg"][0].isdigit()
    assert _apt.specs_left(["dpkg", "dpkg=" + installed["dpkg"], "dpkg=0.*"], installed) == ["dpkg=0.*"]
    dry = subprocess.run(_apt.install_argv(["dpkg=" + installed["dpkg"]], allow_downgrade=True, simulate=True), capture_output=True,
                         text=True, check=False, env=dict(os.environ, **_apt.APT_ENV))
    assert dry.returncode == 0, dry.stderr
    assert "0 upgraded, 0 newly installed" in dry.stdout, dry.stdout


# gpu_facts (#21): the driver's transaction hands back the GPU facts of the host it left, instead of a call of its own.
def _no_gpu_root(tmp_path):
    return sysfs.build(str(tmp_path / "root"), fake_pynvml.load_profile("no_gpu"))


def test_the_gpu_facts_are_gathered_after_an_install_only(run_module, apt, tmp_path):
    args = dict(request(tmp_path, ["nvidia-smi=535.*"]), gpu_facts="installed", gpu_facts_root=_no_gpu_root(tmp_path))
    predicted = run_module(gpuhost_apply, args, check_mode=True, bins=BINS)
    assert predicted["gpu_facts_gathered"] and predicted["ansible_facts"]["nvidia_gpu"]["state"] == "no_gpu"
    done = run_module(gpuhost_apply, args, bins=BINS)
    assert done["gpu_facts_gathered"] and done["ansible_facts"]["nvidia_gpu"]["present"] is False
    # the facts come last: after the transaction's second dpkg-query and the regeneration
    assert tools(apt)[-2:] == ["dpkg-query", "update-initramfs"]
    again = run_module(gpuhost_apply, args, bins=BINS)
    assert not again["changed"] and again["gpu_facts_gathered"] is False and "ansible_facts" not in again


@pytest.mark.parametrize("when, gathered", [("always", True), ("never", False)])
def test_the_gpu_facts_always_or_never(run_module, apt, tmp_path, when, gathered):
    apt.installed["nvidia-smi"] = "535.261.03-1"
    args = dict(request(tmp_path, ["nvidia-smi=535.*"]), gpu_facts=when, gpu_facts_root=_no_gpu_root(tmp_path))
    result = run_module(gpuhost_apply, args, bins=BINS)
    assert result["gpu_facts_gathered"] is gathered and ("ansible_facts" in result) is gathered


@pytest.mark.parametrize("root", ["relative/root", "/nonexistent/gpuhost-root", "/tmp/\nroot"])
def test_a_facts_root_that_cannot_be_read_is_refused_before_anything(run_module, apt, tmp_path, root):
    args = dict(request(tmp_path, ["nvidia-smi=535.*"]), gpu_facts="installed", gpu_facts_root=root)
    result = run_module(gpuhost_apply, args, bins=BINS)
    assert result["failed"] and "gpu_facts_root" in result["msg"], result
    assert apt.calls == [] and not os.path.exists(tmp_path / "pin.pref")
