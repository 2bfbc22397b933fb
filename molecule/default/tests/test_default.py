"""Verify the placeholder converge against the container's real state."""

from __future__ import annotations

import json

from gpuhost_testinfra import check_mode_predicts_converge, converge_in_check_mode


def test_state_dir_is_root_owned(host):
    d = host.file("/etc/gpuhost")
    assert d.is_directory
    assert (d.user, d.group, d.mode) == ("root", "root", 0o755)


def test_facts_file_reports_debian12_under_systemd(host):
    f = host.file("/etc/gpuhost/test-host.json")
    assert f.mode == 0o644
    assert json.loads(f.content_string) == {
        "distribution": "Debian",
        "major": "12",
        "os_family": "Debian",
        "service_mgr": "systemd",
    }


def test_systemd_is_pid1(host):
    assert host.file("/proc/1/comm").content_string.strip() == "systemd"


def test_check_mode_after_converge_changes_nothing(host, gpuhost_instance):
    stats, would_change = converge_in_check_mode(gpuhost_instance)
    assert stats["failures"] == 0 and stats["unreachable"] == 0, stats
    assert would_change == [], f"check mode after converge would still change: {would_change}"
    assert stats["changed"] == 0, stats


def test_check_mode_on_a_fresh_host_predicts_the_real_converge(gpuhost_instance):
    predicted, changed = check_mode_predicts_converge(gpuhost_instance)
    assert changed, "the first real converge on a fresh host changed nothing: the scenario proves nothing"
    assert predicted == changed
