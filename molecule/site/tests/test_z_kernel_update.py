"""Kernel updates stay safe on real Debian 12 (issue 20): a second kernel without an nvidia module, the one the host
boots next, makes nvidia_driver's pre-reboot check refuse and the doctor's boot_kernel check fail, each naming the
kernel and the fix (kernel_update.yml says how the kernels are put in place).

This file runs last (after test_site_drift.py, whose repair run must not meet the extra kernels).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuhost_testinfra import run_playbook_json

SCENARIO = Path(__file__).resolve().parents[1]


def task_results(result: dict, host: str) -> dict[str, dict]:
    """Each task's result for the host, by task name (without the ``role : `` prefix of a role's tasks)."""
    return {task["task"]["name"].split(" : ", 1)[-1]: task["hosts"][host] for play in result.get("plays", [])
            for task in play["tasks"] if host in task.get("hosts", {})}


def test_second_kernel_without_module_fails_the_reboot_check_and_the_doctor(gpuhost_instance):
    if gpuhost_instance.split("-")[1] != "debian12":
        pytest.skip("the kernel update runs on the Debian 12 host")
    result = run_playbook_json(str(SCENARIO / "kernel_update.yml"), limit=gpuhost_instance)
    tasks = task_results(result, gpuhost_instance)
    facts = tasks["Name the new kernel and the stand-in for the one the driver was built for"]["ansible_facts"]
    new = facts["__site_kernel_new"]
    assert new.endswith("-cloud-amd64") and facts["__site_kernel_package"] == "linux-image-" + new

    # The pre-reboot check refuses, naming the kernel and the fix; the reboot task never ran.
    refused = tasks["Refuse to reboot into a kernel without an nvidia module"]
    assert refused.get("failed"), refused
    assert "Not rebooting: the host would boot %s (the newest installed kernel)" % new in refused["msg"]
    assert "linux-headers-%s" % new in refused["msg"] and "dkms autoinstall -k %s" % new in refused["msg"]
    assert "Reboot to load the NVIDIA driver" not in tasks

    # The doctor's boot_kernel check fails the same way.
    doctor = tasks["Run the doctor, as for a host with one GPU meant for the nvidia driver (the container has none)"]
    check = next(c for c in doctor["checks"] if c["id"] == "boot_kernel")
    assert check["status"] == "fail", check
    assert "the host boots %s next" % new in check["evidence"] and "it has no nvidia module" in check["evidence"]
    assert "linux-headers-%s (and linux-headers-cloud-amd64, which follows kernel updates)" % new in check["fix"]
