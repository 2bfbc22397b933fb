# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Fabric Manager and NSCQ held at the driver's exact version (#20), and dnf 4 / dnf 5 output read the same way.

The holds are rendered as the role writes them: the apt stanzas through the internal repository role's apt.pref.j2 with
the variables tasks/fabric_manager.yml passes to its apt_pin.yml, the dnf 5 entries through templates/versionlock-dnf5-lockstep.toml.j2.
The dnf outputs are real: dnf 4's from Debian's dnf 4.14 (the emulated rocky9 host) listing the stub rpm repository,
dnf 5's from dnf 5's own behave tests (docs/sources.md, "dnf 5").
"""

from __future__ import annotations

import os
import tomllib

import jinja2
import pytest
import yaml
from ansible.errors import AnsibleFilterError
from jinja2.nativetypes import NativeEnvironment

from ansible_collections.gpuhost.nvidia.plugins.filter import driver as driver_filters
from ansible_collections.gpuhost.nvidia.plugins.module_utils import _driver

ROLES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "roles")
FM_TASKS = os.path.join(ROLES, "nvidia_driver", "tasks", "fabric_manager.yml")


def _fm_task(module, name="Hold Fabric Manager and NSCQ at the driver's version"):
    with open(FM_TASKS, encoding="utf-8") as handle:
        return next(t for t in yaml.safe_load(handle) if t["name"] == name and module in t)


def _env():
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, trim_blocks=True)
    env.filters.update({"gpuhost.nvidia." + k: v for k, v in driver_filters.FilterModule().filters().items()})
    return env


def _pin(hold, wanted=True, names=("nvidia-fabricmanager-580",)):
    """tasks/fabric_manager.yml's pin for the internal repository role's apt_pin.yml."""
    task = _fm_task("ansible.builtin.include_role")
    assert task["ansible.builtin.include_role"] == {"name": "gpuhost.nvidia.internal_repository", "tasks_from": "apt_pin.yml"}
    variables = {"__nvidia_driver_lockstep_hold": hold, "__nvidia_driver_pin_file": "/etc/apt/preferences.d/gpuhost-nvidia-driver.pref",
                 "__nvidia_driver_lockstep_wanted": wanted, "__nvidia_driver_lockstep": {"hold": list(names)}}
    native = NativeEnvironment(undefined=jinja2.StrictUndefined)
    native.filters["basename"] = os.path.basename
    native.filters["bool"] = bool
    native.filters["combine"] = lambda first, second: {**first, **second}  # Ansible's combine, shallow as the task uses it
    return task, native.from_string(task["vars"]["internal_repository_pin"].strip()).render(**variables)


def _render_apt(hold):
    """The lockstep preferences file: tasks/fabric_manager.yml's pin through apt.pref.j2."""
    task, pin = _pin(hold)
    with open(os.path.join(ROLES, "internal_repository", "templates", "apt.pref.j2"), encoding="utf-8") as handle:
        return _env().from_string(handle.read()).render(internal_repository_pin=pin, ansible_managed="managed",
                                                        internal_repository_owner=task["vars"]["internal_repository_owner"])


def test_apt_holds_fabric_manager_at_the_driver_version_and_no_other():
    hold = _driver.lockstep_hold(["nvidia-fabricmanager-580", "libnvidia-nscq-580"], "580.105.08")
    text = _render_apt(hold)
    stanzas = [s for s in text.split("\n\n") if "Package:" in s]
    assert len(stanzas) == 2
    first, second = (dict(line.split(": ", 1) for line in s.splitlines() if not line.startswith("#")) for s in stanzas)
    # Exact names, never globs (#21); the driver's version first (apt takes the first stanza that matches a version).
    assert first == {"Explanation": "at the driver's version 580.105.08", "Package": "libnvidia-nscq-580 nvidia-fabricmanager-580",
                     "Pin": "version 580.105.08-*", "Pin-Priority": "1001"}
    assert second == {"Explanation": "no other version of them moves without the driver", "Package": "libnvidia-nscq-580 nvidia-fabricmanager-580",
                      "Pin": "version *", "Pin-Priority": "-1"}
    assert "gpuhost-nvidia-driver.pref" in text


def test_nothing_pinned_removes_the_lockstep_file_through_the_same_call():
    # apt_pin.yml removes its file when the pin is empty: nvidia_driver_pin false leaves no hold of an earlier run.
    task, pin = _pin(_driver.lockstep_hold(["nvidia-fabricmanager-580"], "580.105.08"), wanted=False)
    assert pin == {}
    assert task["vars"]["internal_repository_pin_file"] == "{{ __nvidia_driver_lockstep_pin_file }}"
    assert "not __nvidia_driver_lockstep_wanted | bool or __nvidia_driver_lockstep_hold.held or ansible_check_mode" in task["when"]


def _include_runs(wanted, held, check_mode):
    task = _fm_task("ansible.builtin.include_role")
    native = NativeEnvironment(undefined=jinja2.StrictUndefined)
    native.filters["bool"] = bool
    return all(native.from_string("{{ %s }}" % condition).render(
        __nvidia_driver_pkg_mgr="apt", __nvidia_driver_lockstep_wanted=wanted,
        __nvidia_driver_lockstep_hold={"held": held}, ansible_check_mode=check_mode) for condition in task["when"])


def test_check_mode_before_the_repository_reports_the_hold_under_the_real_runs_task():
    # Check mode on a fresh host (NVIDIA's apt repository not there yet): the driver's version is unknown, so the hold
    # is not held; the same include reports it (check mode writes nothing), with a placeholder version, so that its
    # prediction names the task the real run changes. A real run never writes the placeholder.
    hold = {"held": False, "apt": [], "version": None}
    task, pin = _pin(hold, names=["nvidia-fabricmanager-580", "libnvidia-nscq-580"])
    assert pin["packages"] == ["nvidia-fabricmanager-580", "libnvidia-nscq-580"]
    assert "check mode" in pin["explanation"]
    assert _include_runs(wanted=True, held=False, check_mode=True)
    assert not _include_runs(wanted=True, held=False, check_mode=False)
    assert _include_runs(wanted=True, held=True, check_mode=False)
    assert _include_runs(wanted=False, held=False, check_mode=False)
    # dnf's check-mode stand-in stays a debug task of the same name; apt no longer uses it.
    assert _fm_task("ansible.builtin.debug")["when"][0] == "__nvidia_driver_pkg_mgr == 'dnf'"


def test_the_lockstep_file_is_read_before_the_branch_pin():
    # apt reads preferences.d in byte order of the file names and keeps the first stanza matching a version.
    pin = "/etc/apt/preferences.d/gpuhost-nvidia-driver.pref"
    with open(os.path.join(ROLES, "nvidia_driver", "tasks", "driver.yml"), encoding="utf-8") as handle:
        task_vars = yaml.safe_load(handle)
    include = next(t for t in task_vars if t.get("ansible.builtin.include_tasks") == "fabric_manager.yml")
    expression = include["vars"]["__nvidia_driver_lockstep_pin_file"]
    assert "regex_replace('[.]pref$', '-lockstep.pref')" in expression
    lockstep = pin[: -len(".pref")] + "-lockstep.pref"
    assert sorted([os.path.basename(pin), os.path.basename(lockstep)]) == [os.path.basename(lockstep), os.path.basename(pin)]


def test_single_pin_callers_render_as_before():
    pin = {"explanation": "x", "packages": ["a", "b"], "version": "580.*"}
    with open(os.path.join(ROLES, "internal_repository", "templates", "apt.pref.j2"), encoding="utf-8") as handle:
        text = _env().from_string(handle.read()).render(internal_repository_pin=pin, ansible_managed="m", internal_repository_owner="o")
    assert text == "# m (o)\nExplanation: x\nPackage: a b\nPin: version 580.*\nPin-Priority: 1001\n"


def test_dnf4_lock_lines_hold_one_version():
    hold = _driver.lockstep_hold(["nvidia-fabricmanager"], "580.65.06")
    assert hold["dnf4"] == ["nvidia-fabricmanager-580.65.06-*"]


def test_dnf5_lockstep_block_is_valid_toml_beside_the_driver_block():
    hold = _driver.lockstep_hold(["nvidia-fabricmanager", "libnvidia-nscq-580"], "580.65.06")
    with open(os.path.join(ROLES, "nvidia_driver", "templates", "versionlock-dnf5-lockstep.toml.j2"), encoding="utf-8") as handle:
        block = jinja2.Environment(undefined=jinja2.StrictUndefined).from_string(handle.read()).render(__nvidia_driver_lockstep_hold=hold)
    data = tomllib.loads('version = "1.0"\n[[packages]]\nname = "nvidia-driver"\n' + block)
    fm = [p for p in data["packages"] if p["name"] == "nvidia-fabricmanager"]
    # One entry per epoch: NVIDIA's 3 and none; each a range holding exactly 580.65.06 (any release).
    assert [p["conditions"] for p in fm] == [
        [{"key": "evr", "comparator": ">=", "value": "3:580.65.06"}, {"key": "evr", "comparator": "<", "value": "3:580.65.06.0"}],
        [{"key": "evr", "comparator": ">=", "value": "0:580.65.06"}, {"key": "evr", "comparator": "<", "value": "0:580.65.06.0"}],
    ]


def test_the_branch_lock_leaves_the_lockstep_names_to_their_own_block():
    with open(os.path.join(ROLES, "nvidia_driver", "tasks", "install_dnf.yml"), encoding="utf-8") as handle:
        task = next(t for t in yaml.safe_load(handle) if t["name"].startswith("Hold the driver packages at the branch or version with dnf versionlock"))
    # The plan's versionlock (dnf4 lines, dnf5 entries) holds the branch without the lockstep names.
    assert "__nvidia_driver_pkgs.versionlock.dnf4" in task["ansible.builtin.blockinfile"]["block"]
    with open(os.path.join(ROLES, "nvidia_driver", "templates", "versionlock-dnf5.toml.j2"), encoding="utf-8") as handle:
        assert "__nvidia_driver_pkgs.versionlock.dnf5" in handle.read()
    plan = {"act": True, "source": "nvidia", "flavour": "open", "branch": 580, "version": None, "fabric_manager": True}
    table = {"module": {"open": ["kmod-nvidia-open-dkms"]}, "userspace": ["nvidia-driver"], "fabric_manager": ["nvidia-fabricmanager"],
             "nscq": ["libnvidia-nscq"]}
    role = {"pkg_mgr": "dnf", "pin": True}
    packages = _driver.plan_packages(plan, {"nvidia": table}, {"installed_packages": ["libnvidia-nscq"]}, role)
    assert packages["lockstep_hold"] == ["libnvidia-nscq", "nvidia-fabricmanager"]
    assert packages["versionlock"]["dnf4"] == ["kmod-nvidia-open-dkms-580.*", "nvidia-driver-580.*"]
    assert [entry["name"] for entry in packages["versionlock"]["dnf5"]] == ["kmod-nvidia-open-dkms", "nvidia-driver"]
    # The module stream holds the branch alone (EL 8/9): no lock, unless an exact version is asked for.
    assert _driver.plan_packages(plan, {"nvidia": table}, {}, dict(role, dnf_modules=True))["versionlock"] == {"dnf4": [], "dnf5": []}


def test_nothing_is_held_without_a_version_or_names():
    assert _driver.lockstep_hold(["nvidia-fabricmanager-580"], None)["held"] is False
    assert _driver.lockstep_hold([], "580.65.06") == {"version": "580.65.06", "held": False, "names": [], "apt": [], "dnf4": [], "dnf5": []}


@pytest.mark.parametrize("version", ["580.65.06\nPin-Priority: 1001", "580.*", "580.65.06-1", "latest"])
def test_a_version_that_is_not_one_never_reaches_a_file(version):
    with pytest.raises(ValueError):
        _driver.lockstep_hold(["nvidia-fabricmanager-580"], version)
    with pytest.raises(AnsibleFilterError):
        driver_filters.nvidia_driver_lockstep_hold(["nvidia-fabricmanager-580"], version)


# Real dnf 4.14 output (Debian's dnf on the emulated rocky9 host, tests/hosts/rocky9), listing the stub cuda-rhel9
# repository with the open-dkms stream enabled, nvidia-driver-cuda-libs 570.172.08 installed, and one line of the same
# host's listing before that install (kmod-nvidia-open-dkms). The Available lines of the second run end with a space (\x20).
DNF4_LIST = """\
Installed Packages
nvidia-driver-cuda-libs.x86_64       3:570.172.08-1.el9       @cuda-rhel9-x86_64
Available Packages
nvidia-driver-cuda-libs.x86_64       3:570.172.08-1.el9       cuda-rhel9-x86_64\x20
nvidia-driver-cuda-libs.x86_64       3:580.65.06-1.el9        cuda-rhel9-x86_64\x20
kmod-nvidia-open-dkms.x86_64         3:580.65.06-1.el9        cuda-rhel9-x86_64
"""
# The same host's `dnf repoquery --disable-modular-filtering --qf "%{name}.%{arch} %{epoch}:%{version}-%{release}"`.
DNF4_REPOQUERY = "nvidia-driver.x86_64 3:570.172.08-1.el9\nnvidia-driver.x86_64 3:580.65.06-1.el9\n"
# dnf 4 wraps a name wider than its column: the name, a newline, then spaces up to the next column (dnf/cli/output.py,
# Output.fmtColumns: `msg += u"%s%s%s\n" + " " * (total_width + width + 1)`).
DNF4_WRAPPED = """\
Available Packages
nvidia-driver-cuda-libs-with-a-name-wider-than-its-column.x86_64
                                     3:580.65.06-1.el9        cuda-rhel9-x86_64
"""
# dnf 5 (Fedora 41+): lower-case headings, installed packages without "@", source packages listed (dnf 5's behave test
# list.feature, "dnf list setup basesystem (when basesystem is not installed)" and "dnf list --showduplicates lists all").
DNF5_LIST = """\
Installed packages
setup.noarch  2.12.1-1.fc29  dnf-ci-fedora

Available packages
basesystem.noarch  11-6.fc29  dnf-ci-fedora
basesystem.src  11-6.fc29  dnf-ci-fedora
setup.src  2.12.1-1.fc29  dnf-ci-fedora
"""
DNF5_DUPLICATES = """\
Available packages
flac.x86_64      1.3.2-8.fc29    dnf-ci-fedora
flac.x86_64      1.3.3-1.fc29    dnf-ci-fedora-updates
flac.x86_64      1.3.3-2.fc29    dnf-ci-fedora-updates
flac.x86_64      1.3.3-3.fc29    dnf-ci-fedora-updates
"""


@pytest.mark.parametrize(
    "output, name, expected",
    [
        (DNF4_LIST, "nvidia-driver-cuda-libs", ["3:570.172.08-1.el9", "3:580.65.06-1.el9"]),
        (DNF4_LIST, "nvidia-driver", []),
        (DNF4_LIST, "kmod-nvidia-open-dkms", ["3:580.65.06-1.el9"]),
        (DNF4_REPOQUERY, "nvidia-driver", ["3:570.172.08-1.el9", "3:580.65.06-1.el9"]),
        (DNF4_WRAPPED, "nvidia-driver-cuda-libs-with-a-name-wider-than-its-column", ["3:580.65.06-1.el9"]),
        (DNF5_LIST, "setup", ["2.12.1-1.fc29"]),
        (DNF5_LIST, "basesystem", ["11-6.fc29"]),
        (DNF5_DUPLICATES, "flac", ["1.3.2-8.fc29", "1.3.3-1.fc29", "1.3.3-2.fc29", "1.3.3-3.fc29"]),
        ("", "flac", []),
        (None, "flac", []),
    ],
)
def test_dnf_versions_read_dnf4_and_dnf5_output(output, name, expected):
    assert _driver.dnf_versions(output, name) == expected


def test_dnf_versions_feed_the_move_for_both_dnfs():
    move = _driver.plan_move({"branch": 580}, "570.172.08", _driver.dnf_versions(DNF4_LIST, "nvidia-driver-cuda-libs"))
    assert (move["summary"], move["to_package"]) == ("570.172.08 -> 580.65.06", "3:580.65.06-1.el9")
    fedora = "Available packages\nnvidia-driver.x86_64  3:580.82.07-1.fc42  cuda-fedora42-x86_64\n"
    assert _driver.check_candidate({"branch": 580}, _driver.dnf_versions(fedora, "nvidia-driver"), {}) == []


def test_the_dnf_versions_filter_needs_a_name():
    assert driver_filters.nvidia_driver_dnf_versions(DNF5_DUPLICATES, "flac")[0] == "1.3.2-8.fc29"
    with pytest.raises(AnsibleFilterError, match="name"):
        driver_filters.nvidia_driver_dnf_versions(DNF5_DUPLICATES)


def test_kernel_devel_names_split_the_same_for_dnf4_and_dnf5():
    # dnf 4 ends each format with a newline, dnf 5 with nothing ("--queryformat ... no longer prints an additional
    # newline", dnf 5's changes from dnf 4): the role's format ends with a space and the output is split on whitespace.
    with open(os.path.join(ROLES, "nvidia_driver", "tasks", "install_dnf.yml"), encoding="utf-8") as handle:
        task = next(t for t in yaml.safe_load(handle) if t["name"] == "Look for the kernel-devel packages of the installed kernels")
    fmt = task["ansible.builtin.command"]["argv"][5]
    assert fmt.endswith(" ")
    nevras = ["kernel-devel-5.14.0-503.el9.x86_64", "kernel-devel-5.14.0-570.el9.x86_64"]
    dnf4 = "".join(n + " \n" for n in nevras)
    dnf5 = "".join(n + " " for n in nevras)
    assert dnf4.split() == dnf5.split() == nevras
