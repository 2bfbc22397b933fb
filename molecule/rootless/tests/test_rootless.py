"""Rootless engines on Debian 12 with Debian's real rootless podman: see molecule.yml. The state absent test runs last."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from gpuhost_testinfra import (  # noqa: F401  pylint: disable=unused-import
    changed_tasks,
    run_playbook_json,
    test_check_after_converge_changes_nothing,
    test_check_mode_predicted_converge,
)

SCENARIO = Path(__file__).resolve().parents[1]
SPEC = "/var/run/cdi/nvidia.yaml"
ALICE_JSON = "/home/alice/.config/docker/daemon.json"
ALICE_RECORD = "/home/alice/.local/state/gpuhost/nvidia_container_runtime.json"


def podman_run(host, user: str, script: str):
    """The user's own rootless podman (a login shell as the user), asking for every GPU of the CDI spec."""
    podman = ("podman --runtime runc run --rm --network host --pid host --device nvidia.com/gpu=all "
              "--rootfs $HOME/rootfs /bin/sh -c %s" % shlex.quote(script))
    return host.run("su - %s -c %s" % (user, shlex.quote(podman)))


def test_alice_daemon_json_has_the_runtime_and_her_keys(host):
    daemon = host.file(ALICE_JSON)
    assert daemon.user == "alice" and daemon.group == "alice"
    assert daemon.mode == 0o640, "the module keeps the mode of the user's file"
    doc = json.loads(daemon.content_string)
    assert doc["runtimes"]["nvidia"] == {"path": "/usr/bin/nvidia-container-runtime"}
    assert doc["log-level"] == "warn" and doc["data-root"] == "/home/alice/.local/share/docker"
    assert "default-runtime" not in doc
    for path in ("/home/alice/.config/docker", "/home/alice/.local/state/gpuhost", ALICE_RECORD):
        assert host.file(path).user == "alice", "%s must be alice's, not root's" % path
    record = json.loads(host.file(ALICE_RECORD).content_string)
    assert ALICE_JSON in json.dumps(record), "the record names the file whose original it keeps"
    assert not host.file("/home/bob/.config/docker/daemon.json").exists, "bob has no rootless Docker"
    # The user's rootless dockerd is not restarted by the role: nothing of the kind ran as alice.
    assert not host.file("/home/alice/.config/systemd").exists


def test_no_cgroups_is_set_host_wide(host):
    config = host.file("/etc/nvidia-container-runtime/config.toml").content_string
    assert "no-cgroups = true" in config.replace("\t", " ")


def test_spec_and_directory_readable_by_the_users(host):
    assert host.file("/var/run/cdi").mode & 0o005 == 0o005
    assert host.file(SPEC).mode & 0o004 == 0o004
    for user in ("alice", "bob"):
        read = host.run("su - %s -c %s" % (user, shlex.quote("cat " + SPEC)))
        assert read.rc == 0, read.stderr
        assert "kind: nvidia.com/gpu" in read.stdout


def test_users_rootless_podman_injects_the_cdi_device(host):
    for user in ("alice", "bob"):
        result = podman_run(host, user, "env; stat -c 'node %F %t:%T' /dev/nvidiactl; id -u")
        assert result.rc == 0, "%s: %s\n%s" % (user, result.stdout, result.stderr)
        lines = result.stdout.splitlines()
        # The spec's containerEdits: its environment and its one device node.
        assert "NVIDIA_VISIBLE_DEVICES=void" in lines
        assert "node character special file 1:3" in lines
        # Rootless: root in the container is the user outside it.
        assert lines[-1] == "0"
    owner = host.run("su - bob -c %s" % shlex.quote("podman info --format '{{.Host.Security.Rootless}}'"))
    assert owner.stdout.strip() == "true"


def test_restart_of_alice_rootless_dockerd_left_to_her(host):
    said = json.loads(host.file("/root/rootless-restart.json").content_string)
    assert said["pending"] == ["docker (rootless, user alice)"]
    assert len(said["report"]) == 1 and 'as alice, run "systemctl --user restart docker"' in said["report"][0]


def test_hostile_and_unknown_users_refused_before_any_change(host, gpuhost_instance):
    before = host.file(ALICE_JSON).sha256sum
    users = [{"name": "../evil", "engines": ["docker"]}, {"name": "alice;id"}, {"name": "mallory"}, {"name": "root"}]
    result = run_playbook_json(str(SCENARIO / "converge.yml"), "-e", json.dumps({"nvidia_container_toolkit_rootless_users": users}),
                               limit=gpuhost_instance)
    assert changed_tasks(result, gpuhost_instance) == []
    failed = [task["hosts"][gpuhost_instance] for play in result["plays"] for task in play["tasks"]
              if task["hosts"].get(gpuhost_instance, {}).get("failed")]
    assert len(failed) == 1, failed
    message = failed[0]["msg"]
    for part in ("'../evil' is not a user name", "'alice;id' is not a user name", "Debian's adduser rule",
                 "mallory: no such user on this host; create the account first (useradd -m mallory)",
                 "root is not a rootless user", "Nothing was changed."):
        assert part in message, message
    assert host.file(ALICE_JSON).sha256sum == before


def test_state_absent_restores_alice_daemon_json(host, gpuhost_instance):
    first = run_playbook_json(str(SCENARIO / "absent.yml"), limit=gpuhost_instance)
    assert not first.get("stats", {}).get(gpuhost_instance, {}).get("failures"), json.dumps(first)[-3000:]
    assert any("rootless Docker user" in name for name in changed_tasks(first, gpuhost_instance))
    want = host.file("/root/alice-daemon.json.sha256").content_string.strip()
    assert host.file(ALICE_JSON).sha256sum == want, "alice's daemon.json has its own bytes back"
    assert host.file(ALICE_JSON).user == "alice"
    assert not host.file(ALICE_RECORD).exists, "the record goes with its last entry"
    second = run_playbook_json(str(SCENARIO / "absent.yml"), limit=gpuhost_instance)
    assert not second.get("stats", {}).get(gpuhost_instance, {}).get("failures"), json.dumps(second)[-3000:]
    assert changed_tasks(second, gpuhost_instance) == []
