# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The nvidia_driver role's apt path as the role templates it.

One read-only ``apt-cache madison`` question answers the candidate check, whether NVIDIA's pinning package is offered
and which headers packages that follow kernel updates are offered; one removal; the headers go into the driver's own
install transaction. The headers flavour follows the kernel the host boots: the running kernel's when Debian built it,
else the installed kernel image meta packages'. The answer is read by the transaction's one filter call
(tasks/transaction.yml), templated here with the role's variables.
"""

from __future__ import annotations

import os

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar
from ansible_collections.gpuhost.nvidia.plugins.filter import driver as driver_filters
from ansible_collections.gpuhost.nvidia.plugins.filter import packages
from ansible_collections.gpuhost.nvidia.plugins.module_utils import _driver
from test_driver_vars import ROLE, Host, _trust

# `apt-cache madison` as bookworm's apt prints it: the name padded to the widest, then version and index.
MADISON = [
    "nvidia-open-kernel-dkms | 535.261.03-1~deb12u1 | http://deb.debian.org/debian bookworm/contrib amd64 Packages",
    "nvidia-open-kernel-dkms | 535.247.01-1~deb12u1 | http://deb.debian.org/debian bookworm-updates/contrib amd64 Packages",
    "nvidia-graphics-drivers | 535.261.03-1~deb12u1 | http://deb.debian.org/debian bookworm/non-free Sources",
    "linux-headers-cloud-amd64 |  6.1.192-2 | http://deb.debian.org/debian-security bookworm-security/main amd64 Packages",
]


def _load_tasks(name):
    with open(os.path.join(ROLE, "tasks", name), encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def _headers_settings(host):
    """The plan's headers settings as tasks/preflight.yml passes them (its package settings' headers), templated."""
    task = next(t for t in _load_tasks("preflight.yml") if t.get("name") == "Decide what to install")
    return Templar(loader=DataLoader(), variables=host.variables).template(_trust(task["vars"]["__nvidia_driver_package_settings"]["headers"]))


def _repo_facts(host, pending=False, repo_url=""):
    """tasks/repo.yml's facts after the repository step: whether it is pending, apt's question, whether the host read
    answered it."""
    host.variables.update({"__nvidia_driver_repo": {"url": repo_url} if repo_url else {}, "internal_repository_pending": pending})
    return host.set_fact("repo.yml", "Note that a repository that does not exist yet cannot be queried in check mode")


def _host(kernel="6.18.44-fc-v657", packages=(), offered=None, headers_now=False, request=None):
    host = Host("debian12")
    host.variables["ansible_facts"] = dict(host.facts, kernel=kernel)
    plan = host.plan(dict({"source": "distro", "flavour": "open"}, **(request or {})))
    lines = MADISON if offered is None else offered
    host.variables.update({
        "nvidia_driver_install_headers": True,
        "__nvidia_driver_request": {},
        "__nvidia_driver_offered": {"stdout": "\n".join(lines), "stdout_lines": lines},
        # tasks/preflight.yml's one gpuhost.nvidia.nvidia_driver_host answer, and the fact it sets of its packages.
        "__nvidia_driver_host_probe": {"packages": {name: [{"version": "1"}] for name in packages},
                                       "headers_present": not headers_now, "headers_offered": True},
        "__nvidia_driver_host_packages": {name: [{"version": "1"}] for name in packages},
        "__nvidia_driver_pkg_mgr": "apt",
        "ansible_check_mode": False,
    })
    pkgs = _driver.plan_packages(plan, host["__nvidia_driver_packages"], {"installed_packages": list(packages), "kernel": kernel},
                                 {"pkg_mgr": "apt", "pin": True, "headers": _headers_settings(host)})
    plan["packages"] = pkgs
    host.variables.update({"__nvidia_driver_plan": plan, "__nvidia_driver_pkgs": pkgs, "__nvidia_driver_install_packages": pkgs["install"]})
    _repo_facts(host)
    return host


def _txn(host):
    """The transaction as the role calls it: tasks/transaction.yml's two arguments (with install_apt.yml's answer),
    templated with the role's variables, through the collection's filter (this templar does not load it)."""
    task = _load_tasks("transaction.yml")[0]
    imported = next(t for t in _load_tasks("install_apt.yml") if t.get("ansible.builtin.import_tasks") == "transaction.yml")
    host.variables.update(_trust(dict(task["vars"], **imported["vars"])))
    return driver_filters.nvidia_driver_transaction(host["__nvidia_driver_plan"], host["__nvidia_driver_answers"],
                                                    host["__nvidia_driver_txn_role"])


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
    # The plan's headers: those that follow, asked about in apt's one question after the driver package.
    assert host["__nvidia_driver_pkgs"]["headers"]["follow"] == follow
    assert host["__nvidia_driver_apt_query"] == ["nvidia-open-kernel-dkms"] + follow


def test_one_madison_answer_gives_the_candidate_versions_and_what_is_offered():
    host = _host(packages=["linux-image-cloud-amd64"])
    assert host["__nvidia_driver_pkgs"]["candidate"] == "nvidia-open-kernel-dkms"
    txn = _txn(host)
    # Only the driver package's own rows: not the source package's, not the headers'.
    assert txn["offered_versions"] == ["535.261.03-1~deb12u1", "535.247.01-1~deb12u1"]
    assert "linux-headers-cloud-amd64" in txn["offered_names"]
    assert txn["apt_headers"] == ["linux-headers-cloud-amd64"]


def test_headers_the_repositories_do_not_offer_are_left_out():
    host = _host(packages=["linux-image-cloud-amd64", "linux-image-rt-amd64"], offered=MADISON[:1])
    assert host["__nvidia_driver_headers_follow_wanted"] == ["linux-headers-cloud-amd64", "linux-headers-rt-amd64"]
    assert _txn(host)["apt_headers"] == []


def test_the_running_kernels_headers_join_the_follow_packages():
    host = _host(kernel="6.1.0-26-cloud-amd64", headers_now=True)
    assert _txn(host)["apt_headers"] == ["linux-headers-6.1.0-26-cloud-amd64", "linux-headers-cloud-amd64"]


def test_a_skipped_query_offers_nothing():
    host = _host(packages=["linux-image-cloud-amd64"])
    host.variables["__nvidia_driver_offered"] = {"skipped": True, "changed": False}
    txn = _txn(host)
    assert txn["offered_versions"] == []
    assert txn["apt_headers"] == []


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
    assert "__nvidia_driver_txn.use_pinning_package" in apt[1]["when"]
    # The driver's transaction: gpuhost_apply's apt install, after the pinning package (#21: with the pin, the modprobe.d
    # files and the initramfs in one call).
    (transaction,) = [t for t in tasks if "gpuhost.nvidia.gpuhost_apply" in t]
    assert tasks.index(apt[1]) < tasks.index(transaction)
    packages = transaction["gpuhost.nvidia.gpuhost_apply"]["packages"]
    assert "__nvidia_driver_txn.apt_headers" in packages["install"] and "__nvidia_driver_txn.specs" in packages["install"]
    assert packages["allow_downgrade"] == "{{ __nvidia_driver_txn.downgrade }}"


def _transaction(plan_request=None, package_plan=None, moves=False, installed=()):
    # A driver of another branch installed (530): the transaction moves it to the plan's 535.
    driver = {"nvidia-open-kernel-dkms"} if moves else set()
    host = _host(packages=list(installed) + sorted(driver), request=plan_request)
    if moves:
        host.variables["__nvidia_driver_host_packages"]["nvidia-open-kernel-dkms"] = [{"version": "530.30.02-1"}]
    plan, pkgs = host.variables["__nvidia_driver_plan"], host.variables["__nvidia_driver_pkgs"]
    glob = (plan["version"] + "-*") if plan["version"] else (str(plan["branch"]) + ".*")
    userland = [name + "=" + glob for name in pkgs["settings"]]
    host.variables.update({
        # tasks/preflight.yml's nvidia_driver_userland, as the role sets it for apt.
        "nvidia_driver_userland": {"packages": pkgs["settings"], "version_glob": glob, "specs": userland},
        "gpuhost_package_plan": package_plan or [],
    })
    txn = _txn(host)
    assert txn["move"]["moves"] is moves
    return txn


def test_the_plan_goes_through_the_filter_only_for_an_install_at_the_branch():
    role = _load_tasks("transaction.yml")[0]["vars"]["__nvidia_driver_txn_role"]
    assert role["requests"] == "{{ gpuhost_package_plan | default([]) }}"
    assert role["userland"] == "{{ nvidia_driver_userland.specs | default([]) }}"
    assert _transaction()["takes_requests"] is True
    assert _transaction(moves=True)["takes_requests"] is False
    assert _transaction({"version": "535.261.03"})["takes_requests"] is False


def test_the_driver_transaction_is_the_install_alone_without_a_package_plan():
    txn = _transaction()
    assert txn["taken"]["install"] == []
    assert txn["specs"] == txn["install_specs"]


def test_the_driver_transaction_installs_what_the_later_roles_asked_for():
    """#21, one transaction: gpu_settings' userland (nvidia-smi replaces the driver's plain name) and bindings, and the
    toolkit's packages on a first install."""
    toolkit = ["nvidia-container-toolkit=1.17.8-1", "nvidia-container-toolkit-base=1.17.8-1", "python3-yaml"]
    txn = _transaction(package_plan=[
        {"role": "gpuhost.nvidia.nvidia_container_toolkit", "packages": toolkit, "pending": False,
         "first_install": ["nvidia-container-toolkit", "nvidia-container-toolkit-base"]},
        {"role": "gpuhost.nvidia.gpu_settings", "userland": True, "packages": ["python3-pynvml"]}])
    install = txn["install_specs"]
    assert "nvidia-smi" in install
    extra = txn["taken"]["install"]
    assert extra == toolkit + ["nvidia-persistenced=535.*", "nvidia-smi=535.*", "python3-pynvml"]
    specs = txn["specs"]
    assert specs == [name for name in install if name != "nvidia-smi"] + extra
    # What the roles then ask for is ensured, entry for entry.
    ensured = packages.packages_ensured([], install + extra)
    assert packages.packages_to_ensure(extra, ensured) == []


def test_an_installed_toolkit_stays_with_its_role():
    plan = [{"role": "t", "packages": ["nvidia-container-toolkit=1.18.0-1"], "first_install": ["nvidia-container-toolkit"]},
            {"role": "g", "userland": True, "packages": ["python3-pynvml"]}]
    txn = _transaction(package_plan=plan, installed=["nvidia-container-toolkit"])
    assert txn["taken"]["install"] == ["nvidia-persistenced=535.*", "nvidia-smi=535.*", "python3-pynvml"]


@pytest.mark.parametrize("request_, moves", [({"version": "535.261.03"}, False), ({}, True)])
def test_a_move_or_an_exact_version_leaves_the_other_roles_packages_to_them(request_, moves):
    txn = _transaction(request_, [{"role": "g", "userland": True, "packages": ["python3-pynvml"]}], moves)
    assert txn["taken"]["install"] == []
    assert txn["specs"] == txn["install_specs"]
    # At the move's (or the asked) version, as apt's name=version-* entries.
    assert "nvidia-open-kernel-dkms=535.261.03-*" in txn["specs"]


def test_the_ensured_packages_fact_follows_the_install_and_runs_in_check_mode_too():
    """Set once for apt, dnf and pacman (tasks/driver.yml), right after the package manager's install tasks."""
    with open(os.path.join(ROLE, "tasks", "driver.yml"), encoding="utf-8") as handle:
        tasks = yaml.safe_load(handle)
    names = [t["name"] for t in tasks]
    fact = next(t for t in tasks if "gpuhost_ensured_packages" in t.get("ansible.builtin.set_fact", {}))
    # One include per package manager, each with a literal path (ansible-core 2.18 cannot parse the install files'
    # static imports under an include whose path needs a per-distribution variable), the fact right after them.
    installs = [names.index("Install the driver packages with " + manager) for manager in ("apt", "dnf", "pacman")]
    assert installs == list(range(installs[0], installs[0] + 3)) and names.index(fact["name"]) == installs[-1] + 1
    for index, manager in zip(installs, ("apt", "dnf", "pacman")):
        assert tasks[index]["ansible.builtin.include_tasks"] == "install_%s.yml" % manager
        assert tasks[index]["when"] == "__nvidia_driver_pkg_mgr == '%s'" % manager
    assert "when" not in fact and "check_mode" not in fact
    expression = fact["ansible.builtin.set_fact"]["gpuhost_ensured_packages"]
    assert "gpuhost_ensured_packages | default([]) | gpuhost.nvidia.packages_ensured(" in expression
    assert "__nvidia_driver_install_packages" in expression and "__nvidia_driver_txn.apt_headers" in expression
    # What the transaction took for the roles after it, and the plan answered.
    assert "__nvidia_driver_txn.taken.install + __nvidia_driver_txn.taken.predicted" in expression
    assert fact["ansible.builtin.set_fact"]["gpuhost_package_plan"] == []
    assert not [t for t in _tasks() if "ansible.builtin.set_fact" in t and "gpuhost_ensured_packages" in t["ansible.builtin.set_fact"]]


def _known(repo_url="", offered=True, asked=None, pending=False):
    """The apt path after the preflight's host read asked the repositories ahead."""
    host = _host(packages=["linux-image-cloud-amd64"])
    rows = [[field.strip() for field in line.split("|")] for line in MADISON]
    # install_apt.yml's own question did not run (skipped): only the host read can answer.
    host.variables["__nvidia_driver_offered"] = {"skipped": True, "changed": False}
    host.variables["__nvidia_driver_host_probe"].update({
        "offered": rows if offered else None,
        "offered_asked": ["linux-headers-cloud-amd64", "nvidia-kernel-dkms", "nvidia-open-kernel-dkms"] if asked is None else asked})
    _repo_facts(host, pending, repo_url)
    return host


def test_the_host_reads_answer_stands_for_the_question_when_no_repository_is_added():
    host = _known()
    assert host["__nvidia_driver_apt_query"] == ["nvidia-open-kernel-dkms", "linux-headers-cloud-amd64"]
    assert host["__nvidia_driver_offered_known"] is True
    # The same rows as the question's own answer: those of the names asked (the source package's row is not one).
    txn = _txn(host)
    assert txn["offered_versions"] == ["535.261.03-1~deb12u1", "535.247.01-1~deb12u1"]
    assert txn["offered_names"] == ["nvidia-open-kernel-dkms", "linux-headers-cloud-amd64"]
    assert txn["apt_headers"] == ["linux-headers-cloud-amd64"]


@pytest.mark.parametrize("case", [
    {"repo_url": "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/"},  # the run adds or refreshes one
    {"offered": False},  # the host read asked nothing (or its question failed)
    {"asked": ["nvidia-open-kernel-dkms"]},  # a name of the question was not asked ahead
])
def test_the_apt_path_asks_itself_unless_the_host_read_answered_every_name(case):
    host = _known(**case)
    assert host["__nvidia_driver_offered_known"] is False
    assert _txn(host)["offered_versions"] == []  # (the skipped task's answer)
    task = next(t for t in _tasks() if "ansible.builtin.command" in t)
    assert task["when"] == ["__nvidia_driver_apt_query | length > 0", "not __nvidia_driver_offered_known | bool"]
    assert task["ansible.builtin.command"]["argv"] == "{{ ['apt-cache', 'madison'] + __nvidia_driver_apt_query }}"


def test_the_move_and_check_modes_unwritten_pin_are_decided_in_one_task():
    """One filter call (one task result) decides the move and whether check mode's pin is unwritten, from the same move;
    the repositories' answer is read there once, before every task that reads it."""
    tasks = _tasks()
    imported = next(t for t in tasks if t["name"] == "Decide what the install does to the driver, and check the candidate")
    assert imported["ansible.builtin.import_tasks"] == "transaction.yml"
    transaction = _load_tasks("transaction.yml")
    assert [list(t["ansible.builtin.set_fact"]) for t in transaction if "ansible.builtin.set_fact" in t] == [["__nvidia_driver_txn"]]
    assert "gpuhost.nvidia.nvidia_driver_transaction(" in transaction[0]["ansible.builtin.set_fact"]["__nvidia_driver_txn"]
    # Only the question comes before it; every reader of the answer comes after it, through the transaction.
    before = tasks[:tasks.index(imported)]
    assert [t["name"] for t in before] == ["Ask the repositories about the driver, its pinning package and the headers that follow kernel updates"]
    after = yaml.safe_dump(tasks[tasks.index(imported) + 1:])
    assert "__nvidia_driver_offered." not in after and "__nvidia_driver_host_probe.offered" not in after
    # Check mode: a move leaves the pin unwritten, so the install is reported (predicted), not asked of apt.
    host = _host(packages=["linux-image-cloud-amd64", "nvidia-open-kernel-dkms"])
    host.variables["__nvidia_driver_host_packages"]["nvidia-open-kernel-dkms"] = [{"version": "530.30.02-1"}]
    host.variables["ansible_check_mode"] = True
    txn = _txn(host)
    assert txn["move"]["moves"] and txn["hold_pending"] and txn["predict_only"]
    host.variables["ansible_check_mode"] = False
    txn = _txn(host)
    assert txn["move"]["moves"] and not txn["hold_pending"] and not txn["predict_only"]


def test_in_the_move_task_the_versions_come_from_the_answer_itself():
    """The answer the transaction reads is the question's own when the host read did not answer it: every row of it,
    the source package's too (only the driver package's rows are its versions)."""
    host = _host(packages=["linux-image-cloud-amd64"])
    assert host["__nvidia_driver_offered_known"] is False
    txn = _txn(host)
    assert txn["offered_versions"] == ["535.261.03-1~deb12u1", "535.247.01-1~deb12u1"]
    assert txn["offered_names"] == ["nvidia-open-kernel-dkms", "nvidia-graphics-drivers", "linux-headers-cloud-amd64"]


def test_the_answer_a_task_read_is_the_one_later_tasks_see():
    """The fact holds what the transaction read: the tasks after it read __nvidia_driver_txn, not the answer again."""
    host = _host(packages=["linux-image-cloud-amd64"], offered=["nvidia-open-kernel-dkms | 535.247.01-1~deb12u1 | x"])
    txn = _txn(host)
    assert txn["offered_versions"] == ["535.247.01-1~deb12u1"]
    assert txn["offered_names"] == ["nvidia-open-kernel-dkms"]
    for name in ("install_apt.yml", "driver.yml", "fabric_manager.yml", "report.yml"):
        assert "__nvidia_driver_offered_versions" not in yaml.safe_dump(_load_tasks(name))
