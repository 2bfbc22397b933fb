"""The driver's move between versions and branches (#20): plan_move, package_specs, plan_lockstep, and the split plan."""

from __future__ import annotations

import inspect

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuhost.nvidia.plugins.filter import driver as driver_filters
from ansible_collections.gpuhost.nvidia.plugins.module_utils import _driver

RHEL9 = ["3:570.172.08-1.el9", "3:580.65.06-1.el9"]
DEB = ["580.126.20-1", "580.159.04-1", "595.91.07-1"]


@pytest.mark.parametrize(
    "plan, installed, offered, expected",
    [
        # Branch change up (EL 9 stream switch): the newest release of the new branch.
        ({"branch": 580}, "570.172.08", RHEL9, ("upgrade", True, "570.172.08", "580.65.06", "3:580.65.06-1.el9", "570.172.08 -> 580.65.06")),
        # Branch change down.
        ({"branch": 580}, "595.91.07-1", DEB, ("downgrade", True, "595.91.07", "580.159.04", "580.159.04-1", "595.91.07 -> 580.159.04")),
        # An exact version below the installed one, on the same branch.
        ({"branch": 580, "version": "580.126.20"}, "580.159.04-1", DEB,
         ("downgrade", True, "580.159.04", "580.126.20", "580.126.20-1", "580.159.04 -> 580.126.20")),
        # On the branch already: kept, even when a later release of the branch is offered.
        ({"branch": 580}, "580.126.20-1", DEB, ("keep", False, "580.126.20", "580.126.20", "580.126.20-1", "580.126.20 (kept)")),
        ({"branch": 580, "version": "580.126.20"}, "580.126.20-1", DEB, ("keep", False, "580.126.20", "580.126.20", "580.126.20-1", "580.126.20 (kept)")),
        # Nothing installed: the newest fitting release.
        ({"branch": 580}, None, RHEL9, ("install", False, None, "580.65.06", "3:580.65.06-1.el9", "none -> 580.65.06")),
        ({"branch": 580}, "", [], ("install", False, None, None, None, "none -> branch 580")),
        # The repositories cannot be asked yet (check mode): the move is named by the branch.
        ({"branch": 595}, "580.65.06", [], ("upgrade", True, "580.65.06", None, None, "580.65.06 -> branch 595")),
        # Arch: no branch asked, a version installed: kept.
        ({"branch": None}, "580.76.05-1", ["580.82.09-1"], ("keep", False, "580.76.05", "580.76.05", None, "580.76.05 (kept)")),
        # An installed value that is not a driver version counts as nothing installed.
        ({"branch": 580}, "(none)", DEB, ("install", False, None, "580.159.04", "580.159.04-1", "none -> 580.159.04")),
    ],
)
def test_plan_move(plan, installed, offered, expected):
    move = _driver.plan_move(plan, installed, offered)
    assert (move["action"], move["moves"], move["from"], move["to"], move["to_package"], move["summary"]) == expected
    if move["moves"]:
        assert move["reboot_reason"] == "driver %s (%s): the new kernel module loads at the next boot" % (move["summary"], move["action"])
    else:
        assert move["reboot_reason"] is None


def test_plan_move_takes_the_highest_revision_of_a_version():
    move = _driver.plan_move({"branch": 580}, "570.172.08-1", ["580.65.06-1", "580.65.06-2", "1:570.172.08-1"])
    assert (move["to"], move["to_package"]) == ("580.65.06", "580.65.06-2")


@pytest.mark.parametrize(
    "names, version, pkg_mgr, exact, expected",
    [
        (["b", "a", "a"], "580.65.06", "dnf", None, ["a-580.65.06", "b-580.65.06"]),
        (["nvidia-driver-cuda"], "580.126.20", "apt", "580.126.20-1", ["nvidia-driver-cuda=580.126.20-1"]),
        (["nvidia-fabricmanager-580"], "580.126.20", "apt", None, ["nvidia-fabricmanager-580=580.126.20-*"]),
        (["nvidia-utils"], "580.76.05", "pacman", None, ["nvidia-utils"]),
        (["x"], None, "apt", None, ["x"]),
        (["x"], "", "dnf", "ignored", ["x"]),
    ],
)
def test_package_specs(names, version, pkg_mgr, exact, expected):
    assert _driver.package_specs(names, version, pkg_mgr, exact) == expected


DEB_TABLE = {"fabric_manager": ["nvidia-fabricmanager-580"], "nscq": ["libnvidia-nscq-580"], "nvlsm": ["nvlsm"]}


def test_lockstep_moves_fabric_manager_and_nscq_with_the_driver_and_removes_the_old_branch():
    move = _driver.plan_move({"branch": 580}, "570.172.08-1", ["580.126.20-1"])
    out = _driver.plan_lockstep({"fabric_manager": True, "nvlsm": True}, move, DEB_TABLE,
                                ["nvidia-fabricmanager-570", "libnvidia-nscq-570", "nvlsm", "bash"], "apt")
    assert out == {
        "install": ["libnvidia-nscq-580=580.126.20-*", "nvidia-fabricmanager-580=580.126.20-*", "nvlsm"],
        "remove": ["libnvidia-nscq-570", "nvidia-fabricmanager-570"],
        "hold": ["libnvidia-nscq-580", "nvidia-fabricmanager-580"],
        "names": ["libnvidia-nscq-580", "nvidia-fabricmanager-580", "nvlsm"],
    }


def test_lockstep_leaves_nscq_alone_where_none_is_installed_and_fm_when_not_wanted():
    move = {"to": "580.65.06"}
    table = {"fabric_manager": ["nvidia-fabric-manager"], "nscq": ["libnvidia-nscq-580"], "nvlsm": ["nvlsm"]}
    assert _driver.plan_lockstep({"fabric_manager": True}, move, table, ["nvidia-fabric-manager"], "dnf") == {
        "install": ["nvidia-fabric-manager-580.65.06"], "remove": [], "hold": ["nvidia-fabric-manager"], "names": ["nvidia-fabric-manager"]}
    assert _driver.plan_lockstep({"fabric_manager": False}, move, table, ["nvidia-fabric-manager"], "dnf")["install"] == []


def test_lockstep_from_590_where_fabric_manager_loses_its_branch_suffix():
    move = {"to": "595.91.07"}
    out = _driver.plan_lockstep({"fabric_manager": True}, move, {"fabric_manager": ["nvidia-fabricmanager"]}, ["nvidia-fabricmanager-580"], "apt")
    assert (out["install"], out["remove"]) == (["nvidia-fabricmanager=595.91.07-*"], ["nvidia-fabricmanager-580"])


def test_lockstep_follows_el_fabric_manager_rename_at_580():
    # EL: nvidia-fabric-manager to 575, nvidia-fabricmanager from 580 (vars/RedHat.yml by_branch, docs/sources.md).
    move = {"to": "580.65.06"}
    out = _driver.plan_lockstep({"fabric_manager": True}, move, {"fabric_manager": ["nvidia-fabricmanager"]},
                                ["nvidia-fabric-manager", "nvidia-driver"], "dnf")
    assert (out["install"], out["remove"]) == (["nvidia-fabricmanager-580.65.06"], ["nvidia-fabric-manager"])


def test_nscq_is_resolved_per_branch_and_held():
    resolved = _driver.resolve_packages({"branch": 580}, {"nscq": ["libnvidia-nscq-{branch}"], "userspace": ["u"]})
    assert resolved["nscq"] == ["libnvidia-nscq-580"]
    assert "libnvidia-nscq-580" in resolved["hold"]


def test_the_filters_wrap_the_planner():
    filters = driver_filters.FilterModule().filters()
    move = filters["nvidia_driver_move"]({"branch": 580}, "570.172.08", RHEL9)
    assert move["summary"] == "570.172.08 -> 580.65.06"
    assert filters["nvidia_driver_package_specs"](["a"], "580.65.06", "dnf") == ["a-580.65.06"]
    with pytest.raises(AnsibleFilterError, match="pkg_mgr"):
        filters["nvidia_driver_package_specs"](["a"], "580.65.06", "yum")
    assert filters["nvidia_driver_lockstep"]({"fabric_manager": False}, move, {}, [], "dnf")["install"] == []


@pytest.mark.parametrize("name", ["_stage_inputs", "_stage_source", "_stage_branch", "_stage_passthrough", "_stage_flavour",
                                  "_stage_secure_boot", "_stage_headers", "_stage_conflicts", "_stage_fabric_manager", "_stage_reboot"])
def test_plan_is_split_into_small_stages(name):
    # #19 item 4: each stage of plan() is its own small function.
    source = inspect.getsource(getattr(_driver, name))
    assert len(source.splitlines()) <= 60, name
    assert len(inspect.getsource(_driver.plan).splitlines()) <= 130


def test_stages_are_pure():
    inputs, errors = _driver._stage_inputs({"branch": "580", "version": "595.71.05", "flavour": "x"})
    assert inputs["branch"] == 580 and inputs["version"] == "595.71.05"
    assert errors == ["nvidia_driver_flavour must be one of auto, open, proprietary, got 'x'",
                      "nvidia_driver_version 595.71.05 is not on nvidia_driver_branch 580"]
    assert _driver._stage_reboot({"reboot": "always"}, {"connection": "local"})[0].startswith("nvidia_driver_reboot is always")
    assert _driver._stage_headers(True, {"headers_present": False, "kernel": "6.1"}, {"require_headers": False})[0] == []
