# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The nvidia_driver role's apt path as the role templates it (#21, #20).

#21: one read-only ``apt-cache madison`` question answers the candidate check, whether NVIDIA's pinning package is offered
and which headers packages that follow kernel updates are offered; one removal; the headers go into the driver's own
install transaction. #20: the headers flavour follows the kernel the host boots: the running kernel's when Debian built
it, else the installed kernel image meta packages'.
"""

from __future__ import annotations

import os

import pytest
import yaml
from ansible.template import trust_as_template
from ansible_collections.gpuhost.nvidia.plugins.filter import packages
from test_driver_vars import ROLE, Host

# `apt-cache madison` as bookworm's apt prints it: the name padded to the widest, then version and index.
MADISON = [
    "nvidia-open-kernel-dkms | 535.261.03-1~deb12u1 | http://deb.debian.org/debian bookworm/contrib amd64 Packages",
    "nvidia-open-kernel-dkms | 535.247.01-1~deb12u1 | http://deb.debian.org/debian bookworm-updates/contrib amd64 Packages",
    "nvidia-graphics-drivers | 535.261.03-1~deb12u1 | http://deb.debian.org/debian bookworm/non-free Sources",
    "linux-headers-cloud-amd64 |  6.1.192-2 | http://deb.debian.org/debian-security bookworm-security/main amd64 Packages",
]


def _host(kernel="6.18.44-fc-v657", packages=(), offered=None, headers_now=False):
    host = Host("debian12")
    host.variables["ansible_facts"] = dict(host.facts, kernel=kernel)
    plan = host.plan({"source": "distro", "flavour": "open"})
    host.variables.update({
        "__nvidia_driver_plan": plan, "__nvidia_driver_pkgs": host.packages(plan), "nvidia_driver_install_headers": True,
        "__nvidia_driver_offered": {"stdout_lines": MADISON if offered is None else offered},
        # tasks/preflight.yml's one gpuhost.nvidia.nvidia_driver_host answer (#21).
        "__nvidia_driver_host_probe": {"packages": {name: [{"version": "1"}] for name in packages},
                                       "headers_present": not headers_now, "headers_offered": True},
        "nvidia_driver_repo_pending": False,
        # install_apt.yml's move task reads the answer once into this fact (#21), for every task after it.
        "__nvidia_driver_offered_answer": trust_as_template("{{ __nvidia_driver_offered_rows_now }}"),
        "__nvidia_driver_pkg_mgr": "apt",
    })
    return host


@pytest.mark.parametrize("kernel, packages, follow", [
    # Debian built the running kernel: its flavour, whatever else is installed.
    ("6.1.0-26-cloud-amd64", ["linux-image-amd64"], ["linux-headers-cloud-amd64"]),
    ("6.12.48+deb13-amd64", [], ["linux-headers-amd64"]),
    # Another kernel runs (a container on the CI machine's kernel, a custom build): the flavours the host boots.
    ("6.18.44-fc-v657", ["linux-image-cloud-amd64", "bash"], ["linux-headers-cloud-amd64"]),
    ("6.18.44-fc-v657", ["linux-image-rt-amd64", "linux-image-amd64"], ["linux-headers-amd64", "linux-headers-rt-amd64"]),
    ("6.18.44-fc-v657", ["linux-image-cloud-arm64"], ["linux-headers-cloud-arm64"]),
    # Neither: nothing follows (a kernel image package of an exact release is not a flavour meta package).
    ("6.18.44-fc-v657", ["linux-image-6.1.0-56-cloud-amd64"], []),
])
def test_headers_follow_the_kernel_the_host_boots(kernel, packages, follow):
    host = _host(kernel, packages)
    assert host["__nvidia_driver_headers_follow_wanted"] == follow
    assert host["__nvidia_driver_headers_follow_now"] is bool(follow)


def test_one_madison_answer_gives_the_candidate_versions_and_what_is_offered():
    host = _host(packages=["linux-image-cloud-amd64"])
    assert host["__nvidia_driver_candidate_package"].strip() == "nvidia-open-kernel-dkms"
    # Only the driver package's own rows: not the source package's, not the headers'.
    assert host["__nvidia_driver_offered_versions"] == ["535.261.03-1~deb12u1", "535.247.01-1~deb12u1"]
    assert "linux-headers-cloud-amd64" in host["__nvidia_driver_offered_names"]
    assert host["__nvidia_driver_apt_headers"] == ["linux-headers-cloud-amd64"]


def test_headers_the_repositories_do_not_offer_are_left_out():
    host = _host(packages=["linux-image-cloud-amd64", "linux-image-rt-amd64"], offered=MADISON[:1])
    assert host["__nvidia_driver_headers_follow_wanted"] == ["linux-headers-cloud-amd64", "linux-headers-rt-amd64"]
    assert host["__nvidia_driver_apt_headers"] == []


def test_the_running_kernels_headers_join_the_follow_packages():
    host = _host(kernel="6.1.0-26-cloud-amd64", headers_now=True)
    assert host["__nvidia_driver_apt_headers"] == ["linux-headers-6.1.0-26-cloud-amd64", "linux-headers-cloud-amd64"]


def test_a_skipped_query_offers_nothing():
    host = _host(packages=["linux-image-cloud-amd64"])
    host.variables["__nvidia_driver_offered"] = {"skipped": True, "changed": False}
    assert host["__nvidia_driver_offered_versions"] == []
    assert host["__nvidia_driver_apt_headers"] == []


def _tasks(sections=("block",), name="install_apt.yml"):
    """install_apt.yml's tasks, those of its blocks' ``sections`` and of the files it includes (with the include's
    condition first in theirs) in their place."""
    with open(os.path.join(ROLE, "tasks", name), encoding="utf-8") as handle:
        tasks = yaml.safe_load(handle)
    flat = []
    for task in tasks:
        if "block" in task:
            flat.extend(t for key in sections for t in task.get(key, []))
        elif "ansible.builtin.include_tasks" in task:
            flat.extend(dict(t, when=[task["when"], t["when"]]) for t in _tasks(sections, task["ansible.builtin.include_tasks"]))
        else:
            flat.append(task)
    return flat


def test_the_apt_path_asks_once_removes_once_and_installs_the_driver_with_its_headers_in_one_transaction():
    tasks = _tasks()
    commands = [t for t in tasks if "ansible.builtin.command" in t]
    assert len(commands) == 1 and "madison" in commands[0]["ansible.builtin.command"]["argv"]
    assert commands[0]["check_mode"] is False and commands[0]["changed_when"] is False
    apt = [t for t in tasks if "ansible.builtin.apt" in t]
    assert [t["ansible.builtin.apt"]["state"] for t in apt] == ["absent", "present"]
    # NVIDIA's pinning package alone, before the driver, and only when it is used.
    assert apt[1]["ansible.builtin.apt"]["name"] == "{{ __nvidia_driver_pkgs.pinning }}"
    assert "__nvidia_driver_use_pinning_package" in apt[1]["when"]
    # The driver's transaction: gpuhost_apply's apt install, after the pinning package (#21: with the pin, the modprobe.d
    # files and the initramfs in one call).
    (transaction,) = [t for t in tasks if "gpuhost.nvidia.gpuhost_apply" in t]
    assert tasks.index(apt[1]) < tasks.index(transaction)
    packages = transaction["gpuhost.nvidia.gpuhost_apply"]["packages"]
    assert "__nvidia_driver_apt_headers" in packages["install"] and "__nvidia_driver_transaction_specs" in packages["install"]
    assert packages["allow_downgrade"] == "{{ __nvidia_driver_downgrade | bool }}"


def _transaction(plan_request=None, package_plan=None, moves=False, installed=()):
    host = _host(packages=installed)
    plan = host.plan(dict({"source": "distro", "flavour": "open"}, **(plan_request or {})))
    pkgs = host.packages(plan)
    glob = (plan["version"] + "-*") if plan["version"] else (str(plan["branch"]) + ".*")
    userland = [name + "=" + glob for name in pkgs["settings"]]
    host.variables.update({
        "__nvidia_driver_plan": plan, "__nvidia_driver_pkgs": pkgs, "__nvidia_driver_pkg_mgr": "apt",
        "__nvidia_driver_move": {"moves": moves, "to": "535.261.03" if moves else None, "action": "upgrade" if moves else "install"},
        # tasks/preflight.yml's nvidia_driver_userland, as the role sets it for apt.
        "nvidia_driver_userland": {"packages": pkgs["settings"], "version_glob": glob, "specs": userland},
    })
    # vars/main.yml's __nvidia_driver_plan_taken, as the collection's filter answers it (this templar does not load
    # collection filters; test_the_plan_goes_through_the_filter checks the expression).
    taken = {"install": [], "predicted": [], "roles": [], "files": [], "absent": []}
    if package_plan is not None and not plan["version"] and not moves:
        taken = packages.package_plan(package_plan, userland, list(installed))
    host.variables["__nvidia_driver_plan_taken"] = taken
    return host


def test_the_plan_goes_through_the_filter_only_for_an_install_at_the_branch():
    with open(os.path.join(ROLE, "vars", "main.yml"), encoding="utf-8") as handle:
        variables = yaml.safe_load(handle)
    taken = " ".join(variables["__nvidia_driver_plan_taken"].split())
    assert ("(gpuhost_package_plan | default([])) | gpuhost.nvidia.package_plan(nvidia_driver_userland.specs | default([]), "
            "__nvidia_driver_host_packages | list)") in taken
    assert "if not __nvidia_driver_plan.version and not (__nvidia_driver_move.moves | default(false))" in taken
    specs = " ".join(variables["__nvidia_driver_transaction_specs"].split())
    assert "+ __nvidia_driver_plan_taken.install }}" in specs


def test_the_driver_transaction_is_the_install_alone_without_a_package_plan():
    host = _transaction()
    assert host["__nvidia_driver_plan_taken"]["install"] == []
    assert host["__nvidia_driver_transaction_specs"] == host["__nvidia_driver_install_specs"]


def test_the_driver_transaction_installs_what_the_later_roles_asked_for():
    """#21, one transaction: gpu_settings' userland (nvidia-smi replaces the driver's plain name) and bindings, and the
    toolkit's packages on a first install."""
    toolkit = ["nvidia-container-toolkit=1.17.8-1", "nvidia-container-toolkit-base=1.17.8-1", "python3-yaml"]
    host = _transaction(package_plan=[
        {"role": "gpuhost.nvidia.nvidia_container_toolkit", "packages": toolkit, "pending": False,
         "first_install": ["nvidia-container-toolkit", "nvidia-container-toolkit-base"]},
        {"role": "gpuhost.nvidia.gpu_settings", "userland": True, "packages": ["python3-pynvml"]}])
    install = host["__nvidia_driver_install_specs"]
    assert "nvidia-smi" in install
    extra = host["__nvidia_driver_plan_taken"]["install"]
    assert extra == toolkit + ["nvidia-persistenced=535.*", "nvidia-smi=535.*", "python3-pynvml"]
    specs = host["__nvidia_driver_transaction_specs"]
    assert specs == [name for name in install if name != "nvidia-smi"] + extra
    # What the roles then ask for is ensured, entry for entry.
    ensured = packages.packages_ensured([], install + extra)
    assert packages.packages_to_ensure(extra, ensured) == []


def test_an_installed_toolkit_stays_with_its_role():
    plan = [{"role": "t", "packages": ["nvidia-container-toolkit=1.18.0-1"], "first_install": ["nvidia-container-toolkit"]},
            {"role": "g", "userland": True, "packages": ["python3-pynvml"]}]
    host = _transaction(package_plan=plan, installed=["nvidia-container-toolkit"])
    assert host["__nvidia_driver_plan_taken"]["install"] == ["nvidia-persistenced=535.*", "nvidia-smi=535.*", "python3-pynvml"]


@pytest.mark.parametrize("request_, moves", [({"version": "535.261.03"}, False), ({}, True)])
def test_a_move_or_an_exact_version_leaves_the_other_roles_packages_to_them(request_, moves):
    host = _transaction(request_, [{"role": "g", "userland": True, "packages": ["python3-pynvml"]}], moves)
    assert host["__nvidia_driver_plan_taken"]["install"] == []
    if not moves:  # (a move's specs go through a collection filter this test's templar does not load)
        assert host["__nvidia_driver_transaction_specs"] == host["__nvidia_driver_install_specs"]


def test_the_ensured_packages_fact_follows_the_install_and_runs_in_check_mode_too():
    """Set once for apt, dnf and pacman (tasks/driver.yml), right after the package manager's install tasks."""
    with open(os.path.join(ROLE, "tasks", "driver.yml"), encoding="utf-8") as handle:
        tasks = yaml.safe_load(handle)
    names = [t["name"] for t in tasks]
    fact = next(t for t in tasks if "gpuhost_ensured_packages" in t.get("ansible.builtin.set_fact", {}))
    assert names.index(fact["name"]) == names.index("Install the driver packages") + 1
    assert "install_{{ __nvidia_driver_pkg_mgr }}.yml" in tasks[names.index("Install the driver packages")]["ansible.builtin.include_tasks"]
    assert "when" not in fact and "check_mode" not in fact
    expression = fact["ansible.builtin.set_fact"]["gpuhost_ensured_packages"]
    assert "gpuhost_ensured_packages | default([]) | gpuhost.nvidia.packages_ensured(" in expression
    assert "__nvidia_driver_install_packages" in expression and "__nvidia_driver_apt_headers" in expression
    # #21: what the transaction took for the roles after it, and the plan answered.
    assert "__nvidia_driver_plan_taken.install + __nvidia_driver_plan_taken.predicted" in expression
    assert fact["ansible.builtin.set_fact"]["gpuhost_package_plan"] == []
    assert not [t for t in _tasks() if "ansible.builtin.set_fact" in t and "gpuhost_ensured_packages" in t["ansible.builtin.set_fact"]]


def _known(repo_url="", offered=True, asked=None, pending=False):
    """The apt path after the preflight's host read asked the repositories ahead (#21)."""
    host = _host(packages=["linux-image-cloud-amd64"])
    rows = [[field.strip() for field in line.split("|")] for line in MADISON]
    host.variables.update({
        "__nvidia_driver_repo": {"url": repo_url} if repo_url else {},
        "nvidia_driver_repo_pending": pending,
        # install_apt.yml's own question did not run (skipped): only the host read can answer.
        "__nvidia_driver_offered": {"skipped": True, "changed": False},
    })
    host.variables["__nvidia_driver_host_probe"].update({
        "offered": rows if offered else None,
        "offered_asked": ["linux-headers-cloud-amd64", "nvidia-kernel-dkms", "nvidia-open-kernel-dkms"] if asked is None else asked})
    return host


def test_the_host_reads_answer_stands_for_the_question_when_no_repository_is_added():
    host = _known()
    assert host["__nvidia_driver_apt_query"] == ["nvidia-open-kernel-dkms", "linux-headers-cloud-amd64"]
    assert host["__nvidia_driver_offered_known"] is True
    # The same rows as the question's own answer: those of the names asked (the source package's row is not one).
    assert host["__nvidia_driver_offered_versions"] == ["535.261.03-1~deb12u1", "535.247.01-1~deb12u1"]
    assert host["__nvidia_driver_offered_names"] == ["nvidia-open-kernel-dkms", "linux-headers-cloud-amd64"]
    assert host["__nvidia_driver_apt_headers"] == ["linux-headers-cloud-amd64"]


@pytest.mark.parametrize("case", [
    {"repo_url": "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/"},  # the run adds or refreshes one
    {"offered": False},  # the host read asked nothing (or its question failed)
    {"asked": ["nvidia-open-kernel-dkms"]},  # a name of the question was not asked ahead
])
def test_the_apt_path_asks_itself_unless_the_host_read_answered_every_name(case):
    host = _known(**case)
    assert host["__nvidia_driver_offered_known"] is False
    assert host["__nvidia_driver_offered_versions"] == []  # (the skipped task's answer)
    task = next(t for t in _tasks() if "ansible.builtin.command" in t)
    assert task["when"] == ["__nvidia_driver_apt_query | length > 0", "not __nvidia_driver_offered_known | bool"]
    assert task["ansible.builtin.command"]["argv"] == "{{ ['apt-cache', 'madison'] + __nvidia_driver_apt_query }}"


def test_the_move_and_check_modes_unwritten_pin_are_decided_in_one_task():
    """#21: one set_fact (one task result) for the move, __nvidia_driver_hold_pending from the same move, and the
    repositories' answer read once, before every task that reads it."""
    tasks = _tasks()
    task = next(t for t in tasks if t["name"] == "Decide whether the installed driver moves")
    facts = task["ansible.builtin.set_fact"]
    assert facts == {"__nvidia_driver_offered_answer": "{{ __nvidia_driver_offered_rows }}",
                     "__nvidia_driver_move": "{{ __nvidia_driver_move_now }}",
                     # The vars lookup: a name the template references is resolved even where `and` skips it (the move
                     # again); not vars[], which ansible-core 2.18 hands over as the unrendered template string
                     "__nvidia_driver_hold_pending":
                         "{{ ansible_check_mode and lookup('ansible.builtin.vars', '__nvidia_driver_move_now').moves }}"}
    # In the task, the rows are the answer itself (the task variable hides the role variable, which is the fact).
    assert task["vars"]["__nvidia_driver_offered_rows"] == "{{ __nvidia_driver_offered_rows_now }}"
    assert ("gpuhost.nvidia.nvidia_driver_move(__nvidia_driver_installed_version, __nvidia_driver_offered_versions)"
            in task["vars"]["__nvidia_driver_move_now"])
    assert not [t for t in tasks if "__nvidia_driver_hold_pending" in t.get("ansible.builtin.set_fact", {}) and t["name"] != task["name"]]
    # Only the question comes before it; every reader of the answer (the offered versions and names, the headers, the
    # pinning package) comes after it.
    readers = ("__nvidia_driver_offered_", "__nvidia_driver_apt_headers", "__nvidia_driver_use_pinning_package", "__nvidia_driver_move")
    before = tasks[:tasks.index(task)]
    assert [t["name"] for t in before] == ["Ask the repositories about the driver, its pinning package and the headers that follow kernel updates"]
    assert not any(reader in yaml.safe_dump(t) for t in before for reader in readers if reader != "__nvidia_driver_offered_")
    assert "__nvidia_driver_offered_rows" not in yaml.safe_dump(before)
    # The rows after it are the fact, on apt only (no other package manager reads them).
    with open(os.path.join(ROLE, "vars", "main.yml"), encoding="utf-8") as handle:
        variables = yaml.safe_load(handle)
    assert variables["__nvidia_driver_offered_rows"] == "{{ __nvidia_driver_offered_answer if __nvidia_driver_pkg_mgr == 'apt' else [] }}"


def test_in_the_move_task_the_versions_come_from_the_answer_itself():
    """The move task's own variables, over the role's: no fact yet (a first run of the role), and the versions and the
    fact's value are read from the registered answer."""
    task = next(t for t in _tasks() if t["name"] == "Decide whether the installed driver moves")
    host = _host(packages=["linux-image-cloud-amd64"])
    del host.variables["__nvidia_driver_offered_answer"]
    host.variables["__nvidia_driver_offered_rows"] = trust_as_template(task["vars"]["__nvidia_driver_offered_rows"])
    assert host["__nvidia_driver_offered_versions"] == ["535.261.03-1~deb12u1", "535.247.01-1~deb12u1"]
    # The fact's value ({{ __nvidia_driver_offered_rows }} in the task): the answer's rows of the names asked.
    assert [row[:2] for row in host["__nvidia_driver_offered_rows"]] == [
        ["nvidia-open-kernel-dkms", "535.261.03-1~deb12u1"], ["nvidia-open-kernel-dkms", "535.247.01-1~deb12u1"],
        ["nvidia-graphics-drivers", "535.261.03-1~deb12u1"], ["linux-headers-cloud-amd64", "6.1.192-2"]]


def test_the_answer_a_task_read_is_the_one_later_tasks_see():
    """The fact holds the rows as the move task read them: the registered answer is not parsed again."""
    host = _host(packages=["linux-image-cloud-amd64"])
    host.variables["__nvidia_driver_offered_answer"] = [["nvidia-open-kernel-dkms", "535.247.01-1~deb12u1", "x"]]
    assert host["__nvidia_driver_offered_versions"] == ["535.247.01-1~deb12u1"]
    assert host["__nvidia_driver_offered_names"] == ["nvidia-open-kernel-dkms"]
