"""Verify the placeholder converge against the container's real state."""

from __future__ import annotations

import json

from gpuhost_testinfra import test_check_after_converge_changes_nothing, test_check_mode_predicted_converge  # noqa: F401  pylint: disable=unused-import


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
