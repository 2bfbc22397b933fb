# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The rootless engines' planner (module_utils/_rootless.py) and its filter: the users' paths, the host-wide
no-cgroups decision, and every bad request refused with the value and the fix named (all problems at once)."""

from __future__ import annotations

import typing as t

import pytest

import hostile

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuhost.nvidia.plugins.filter.toolkit import FilterModule
from ansible_collections.gpuhost.nvidia.plugins.module_utils import _rootless

PASSWD = {
    "alice": ["x", "1000", "1000", "Alice", "/home/alice", "/bin/bash"],
    "bob": ["x", "1001", "1001", "", "/home/bob/", "/bin/sh"],
    "carol": ["x", "1002", "1002", "", "/srv/carol", "/bin/sh"],
    "toor": ["x", "0", "0", "", "/root", "/bin/sh"],
    "nohome": ["x", "1003", "1003", "", "/", "/usr/sbin/nologin"],
    "relhome": ["x", "1004", "1004", "", "home/relhome", "/bin/sh"],
    "dothome": ["x", "1005", "1005", "", "/home/../etc", "/bin/sh"],
    "nlhome": ["x", "1006", "1006", "", "/home/a\nb", "/bin/sh"],
}
# Debian's useradd writes names; a range may also be given by uid (shadow's subuid(5)).
SUBIDS = "# subordinate IDs\nalice:100000:65536\nbob:165536:65536\n1002:231072:1000\nbroken line\nx:y:z\n"
PLAN = _rootless.plan
PLAN_FILTER = FilterModule().filters()["nvidia_container_toolkit_rootless_plan"]


def request(users: t.Any, **extra: t.Any) -> dict[str, t.Any]:
    base = {"users": users, "state": "present", "runtimes": [], "mode": "full", "cdi": True, "no_cgroups": None,
            "shared_no_cgroups": False}
    return dict(base, **extra)


def plan(users: t.Any, subuid: str | None = SUBIDS, subgid: str | None = SUBIDS, **extra: t.Any) -> dict[str, t.Any]:
    return PLAN(request(users, **extra), PASSWD, subuid, subgid)


def test_docker_and_podman_users_paths_and_no_cgroups() -> None:
    result = plan([{"name": "alice", "engines": ["podman", "docker"]}, {"name": "bob"}])
    assert result["errors"] == [] and result["warnings"] == []
    alice, bob = result["users"]
    assert alice == {"name": "alice", "engines": ["docker", "podman"], "state": "present", "uid": 1000, "gid": 1000,
                     "home": "/home/alice", "daemon_json": "/home/alice/.config/docker/daemon.json",
                     "record": "/home/alice/.local/state/gpuhost/nvidia_container_runtime.json", "runtime_dir": "/run/user/1000"}
    # A home with a trailing slash is the same home.
    assert bob["home"] == "/home/bob" and bob["engines"] == ["podman"]
    assert [u["name"] for u in result["docker"]] == ["alice"]
    assert [u["name"] for u in result["podman"]] == ["alice", "bob"]
    assert result["no_cgroups"] is True


def test_podman_only_leaves_no_cgroups_alone() -> None:
    # CDI: podman injects the devices itself; the toolkit's hook (and its cgroups) is not involved.
    result = plan([{"name": "bob", "engines": ["podman"]}], runtimes=["docker"])
    assert result["errors"] == [] and result["no_cgroups"] is None


@pytest.mark.parametrize("name", [
    "../etc", "alice;id", "alice bob", "Alice", "-rf", "1abc", "a" * 33, "", "al\nice", "al/ice", "$(id)", 7, None,
    ["alice"],
] + [value for _id, value in hostile.text_classes("control", "shell", "whitespace", "non_ascii")])
def test_hostile_user_names_refused_naming_the_value_and_the_rule(name: t.Any) -> None:
    result = plan([{"name": name}])
    assert len(result["errors"]) == 1, result["errors"]
    assert repr(name)[:60] in result["errors"][0]
    assert "Debian's adduser rule" in result["errors"][0]
    assert result["users"] == []


def test_root_refused_by_name_and_by_uid() -> None:
    result = plan([{"name": "root"}, {"name": "toor"}])
    assert len(result["errors"]) == 2
    assert "nvidia_container_toolkit_runtimes" in result["errors"][0]
    assert "toor has uid 0" in result["errors"][1]


def test_unknown_user_named_with_the_fix() -> None:
    result = plan([{"name": "mallory", "engines": ["docker"]}])
    assert result["errors"] == ["rootless user mallory: no such user on this host; create the account first (useradd -m "
                                "mallory) or take it out of nvidia_container_toolkit_rootless_users"]
    assert result["no_cgroups"] is None


@pytest.mark.parametrize("user, home", [("nohome", "'/'"), ("relhome", "'home/relhome'"), ("dothome", "'/home/../etc'"),
                                        ("nlhome", "'/home/a\\nb'")])
def test_home_that_is_not_a_clean_absolute_path_refused(user: str, home: str) -> None:
    result = plan([{"name": user}])
    assert len(result["errors"]) == 1 and home in result["errors"][0] and "usermod -d" in result["errors"][0]


def test_getent_entry_of_another_shape_refused() -> None:
    result = PLAN(request([{"name": "alice"}]), {"alice": "x:1000"}, SUBIDS, SUBIDS)
    assert "not getent's" in result["errors"][0]
    result = PLAN(request([{"name": "alice"}]), {"alice": ["x", "a", "b", "", "/home/alice"]}, SUBIDS, SUBIDS)
    assert "not numbers" in result["errors"][0]


def test_missing_subordinate_ids_refused_with_usermod() -> None:
    result = plan([{"name": "alice"}], subuid=None, subgid="alice:100000:65536\n")
    assert result["errors"] == ["rootless user alice has no subordinate IDs in /etc/subuid, which a rootless engine needs "
                                "for its user namespace; add them (usermod --add-subuids 100000-165535 --add-subgids "
                                "100000-165535 alice)"]


def test_few_subordinate_ids_by_uid_warned() -> None:
    result = plan([{"name": "carol"}])
    assert result["errors"] == []
    assert len(result["warnings"]) == 2 and "1000 subordinate IDs in /etc/subuid" in result["warnings"][0]


def test_subid_counts() -> None:
    assert _rootless.subid_counts(SUBIDS + "alice:300000:10\n") == {"alice": 65546, "bob": 65536, "1002": 1000}
    assert _rootless.subid_counts(None) == {}


def test_rootless_docker_next_to_rootful_engines_refused_without_the_switch() -> None:
    result = plan([{"name": "alice", "engines": ["docker"]}], runtimes=["docker", "containerd"])
    assert len(result["errors"]) == 1
    error = result["errors"][0]
    assert "host-wide" in error and "(docker, containerd)" in error
    assert "nvidia_container_toolkit_rootless_shared_no_cgroups: true" in error
    accepted = plan([{"name": "alice", "engines": ["docker"]}], runtimes=["docker"], shared_no_cgroups=True)
    assert accepted["errors"] == [] and accepted["no_cgroups"] is True
    assert "also applies to the rootful engines (docker)" in accepted["warnings"][0]


def test_rootless_docker_needs_full_mode_and_no_cgroups_not_false() -> None:
    result = plan([{"name": "alice", "engines": ["docker"]}], mode="cdi", no_cgroups=False)
    assert len(result["errors"]) == 2
    assert "nvidia_container_toolkit_mode: full" in result["errors"][0]
    assert "nvidia_container_toolkit_settings.no_cgroups is false" in result["errors"][1]
    # Mode cdi configures no rootful runtime, so the host-wide switch is not the problem there.
    assert not any("shared_no_cgroups" in e for e in result["errors"])


def test_rootless_podman_needs_the_cdi_spec() -> None:
    assert "nvidia_container_toolkit_cdi: true" in plan([{"name": "bob"}], cdi=False)["errors"][0]
    assert plan([{"name": "bob"}], cdi=False, mode="cdi")["errors"] == []


@pytest.mark.parametrize("engines, fix", [("docker", "non-empty list"), ([], "non-empty list"), (["lxc"], "at most once"),
                                          (["docker", "docker"], "at most once"), ({"docker": 1}, "non-empty list")])
def test_bad_engines_refused(engines: t.Any, fix: str) -> None:
    errors = plan([{"name": "alice", "engines": engines}])["errors"]
    assert len(errors) == 1 and fix in errors[0] and "engines" in errors[0]


def test_every_problem_at_once() -> None:
    result = plan([{"name": "alice", "colour": "red"}, "bob", {"name": "alice"}, {"name": "bob", "state": "gone"},
                   {"name": "mallory"}])
    errors = result["errors"]
    assert len(errors) == 5, errors
    assert "unknown keys colour" in errors[0]
    assert "'bob' is not a mapping" in errors[1]
    assert "alice is listed twice" in errors[2]
    assert "'gone' must be present or absent" in errors[3]
    assert "mallory: no such user" in errors[4]


@pytest.mark.parametrize("users", ["alice", {"name": "alice"}, 3])
def test_users_not_a_list_refused(users: t.Any) -> None:
    result = plan(users)
    assert result["errors"] and "must be a list" in result["errors"][0] and result["users"] == []


def test_role_absent_takes_every_docker_user_back_and_skips_gone_users() -> None:
    result = plan([{"name": "alice", "engines": ["docker"]}, {"name": "gone", "engines": ["docker"]}], state="absent",
                  runtimes=["docker"], subuid=None, subgid=None)
    # No subordinate-ID or host-wide checks on the way out; config.toml itself goes back with the role's absent.
    assert result["errors"] == []
    assert [(u["name"], u["state"]) for u in result["docker"]] == [("alice", "absent")]
    assert result["no_cgroups"] is None
    assert "gone does not exist" in result["warnings"][0]


def test_last_docker_user_absent_sets_no_cgroups_back() -> None:
    result = plan([{"name": "alice", "engines": ["docker"], "state": "absent"}, {"name": "bob"}])
    assert result["errors"] == [] and result["no_cgroups"] is False
    assert [u["state"] for u in result["docker"]] == ["absent"]
    # Unless the settings manage the key themselves.
    assert plan([{"name": "alice", "engines": ["docker"], "state": "absent"}], no_cgroups=True)["no_cgroups"] is None


def test_missing_user_in_present_state_is_an_error_even_when_another_is_absent() -> None:
    result = plan([{"name": "gone", "state": "absent"}, {"name": "gone2"}])
    assert len(result["errors"]) == 1 and "gone2" in result["errors"][0]


def test_filter_refuses_wrong_shapes_naming_the_argument() -> None:
    with pytest.raises(AnsibleFilterError, match="subuid must be the text of /etc/subuid"):
        PLAN_FILTER(request([]), PASSWD, b"alice:1:2")
    with pytest.raises(AnsibleFilterError, match="request.runtimes"):
        PLAN_FILTER(request([], runtimes="docker"), PASSWD)
    with pytest.raises(AnsibleFilterError, match="passwd"):
        PLAN_FILTER(request([]), ["alice"])


def test_filter_plans_and_warns() -> None:
    result = PLAN_FILTER(request([{"name": "carol"}]), PASSWD, SUBIDS, SUBIDS)
    assert result["errors"] == [] and result["users"][0]["home"] == "/srv/carol"
