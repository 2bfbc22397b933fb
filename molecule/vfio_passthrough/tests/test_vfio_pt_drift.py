"""The converged fast path stays honest for vfio_passthrough (issue 21): runs after test_vfio_passthrough.py and before
test_vfio_runs.py (file names sort so), on the hosts as converge + idempotence + check left them.

The idempotence run confirmed each host's record, and the check run after it (the full path in check mode) changed
nothing (the shared test_check_after_converge_changes_nothing): so the probe must say converged. Then, behind the
role's back, on every host: the modprobe.d file is edited, the modules-load.d file removed, and the kernel arguments
lose ``iommu=pt`` (Debian's /etc/default/grub, Arch's /etc/kernel/cmdline; Rocky's grubby keeps them outside any
file, so its dracut drop-in is edited instead). The probe must name each drift, one run of converge.yml must repair
it, and the probe must then find every file as recorded.
"""

from __future__ import annotations

import pytest

from gpuhost_drift import UNCONFIRMED, named, probe, read_record, sh
from gpuhost_testinfra import changed_tasks, run_playbook_json
from vfio_common import FAMILY, INSTANCES, MODPROBE, MODULES_LOAD, _converge

ROLE = "vfio_passthrough"
KERNEL_ARGS_FILE = {"debian12": "/etc/default/grub", "arch": "/etc/kernel/cmdline"}


@pytest.fixture(scope="module")
def drift(tmp_path_factory):
    """Probe, mutate, probe, repair, probe: once for all hosts."""
    work = tmp_path_factory.mktemp("drift")
    records = {name: read_record(name, ROLE) for name in INSTANCES}
    converged = probe(ROLE, records, work)
    expected: dict[str, list[str]] = {}
    for name in INSTANCES:
        family = name.split("-")[1]
        sh(name, 'printf "# gpuhost drift test\\n" >> "$1" && rm "$2"', MODPROBE, MODULES_LOAD)
        expected[name] = [f"file {MODPROBE} changed", f"file {MODULES_LOAD} is missing"]
        if family in KERNEL_ARGS_FILE:
            path = KERNEL_ARGS_FILE[family]
            sh(name, 'grep -q " iommu=pt" "$1" && sed -i "s/ iommu=pt//" "$1"', path)
        else:
            path = FAMILY[family]["initramfs_file"]
            sh(name, 'printf "# gpuhost drift test\\n" >> "$1"', path)
        expected[name].append(f"file {path} changed")
    drifted = probe(ROLE, records, work)
    repair = run_playbook_json(_converge())
    after = {name: read_record(name, ROLE) for name in INSTANCES}
    return {"records": records, "converged": converged, "expected": expected, "drifted": drifted, "repair": repair,
            "after": after, "again": probe(ROLE, after, work)}


def test_probe_sees_each_drift_and_one_run_repairs_it(host, gpuhost_instance, drift):
    assert (drift["converged"][gpuhost_instance]["converged"], drift["converged"][gpuhost_instance]["drift"]) == (True, [])
    drifted = drift["drifted"][gpuhost_instance]
    assert drifted["converged"] is False
    assert named(drifted["drift"], drift["expected"][gpuhost_instance]) == [], drifted["drift"]
    assert not drift["repair"]["stats"][gpuhost_instance].get("failures"), drift["repair"]["stats"]
    changed = set(changed_tasks(drift["repair"], gpuhost_instance))
    family = gpuhost_instance.split("-")[1]
    files_task = "Write the vfio-pci files (override script, modprobe.d, modules-load.d and initramfs files)"  # one gpuhost_apply call
    repairs = {files_task} | ({"Write the kernel arguments for the next boot"} if family in KERNEL_ARGS_FILE else set())
    assert {"gpuhost.nvidia.vfio_passthrough : " + name for name in repairs} <= changed, changed
    # the call rewrote exactly the drifted files
    rewritten = [task["hosts"][gpuhost_instance]["changed_files"] for play in drift["repair"]["plays"] for task in play["tasks"]
                 if task["task"]["name"] == "gpuhost.nvidia.vfio_passthrough : " + files_task and gpuhost_instance in task["hosts"]]
    assert rewritten == [[MODPROBE, MODULES_LOAD] + ([] if family in KERNEL_ARGS_FILE else [FAMILY[family]["initramfs_file"]])], rewritten
    # Every file is as the role writes it again: the drift comment gone, the removed file back, iommu=pt back.
    assert "gpuhost drift test" not in host.file(MODPROBE).content_string
    assert host.file(MODULES_LOAD).exists
    if family in KERNEL_ARGS_FILE:
        assert "iommu=pt" in host.file(KERNEL_ARGS_FILE[family]).content_string
    else:
        assert "gpuhost drift test" not in host.file(FAMILY[family]["initramfs_file"]).content_string
    # A repair that restored exactly what the confirmed record holds keeps it confirmed; otherwise the next full run
    # confirms it. Either way every file is as recorded.
    again = drift["again"][gpuhost_instance]
    assert again["drift"] in ([], [UNCONFIRMED]), again
