"""Extra runs of converge.yml on all hosts, after the state checks of test_vfio_passthrough.py: every bad input at once
(must fail before any change), the post-reboot verification with vfio_passthrough_require_bound (the synthetic tree
rebinds Debian's and Arch's functions to vfio-pci, Rocky's stay on nvidia), and `state: absent`, which must restore the
edited files byte for byte. Each run happens once (module-scoped fixtures) and each host's results are checked.
"""

from __future__ import annotations

import subprocess

import pytest

from gpuhost_testinfra import changed_tasks, run_playbook_json
from vfio_common import ARCH_KERNEL, BASELINE, FAMILY, INSTANCES, KERNEL, MODPROBE, MODULES_LOAD, RECORD, ROOT, SCRIPT, _args, _converge, _name


@pytest.fixture
def family(gpuhost_instance: str) -> str:
    return gpuhost_instance.split("-")[1]


def _checksums(host) -> str:
    return host.check_output("for f in /etc/default/grub /etc/kernel/cmdline; do if [ -e $f ]; then sha256sum $f; fi; done")


@pytest.fixture(scope="module")
def bad_run():
    """Two runs of converge.yml with bad input, and nothing may change in either: first a value that is not even a PCI
    address (the role's first task, which checks every variable that reaches a file, must stop and name it), then well
    formed values this host cannot honour (the plan must name them all)."""
    before = {name: _state(name) for name in INSTANCES}
    malformed = run_playbook_json(_converge(), "-e", '{"vfio_passthrough_pci_addresses": ["0000:1:0"]}')
    extra = ('{"vfio_passthrough_pci_addresses": ["0000:04:00.0"], "vfio_passthrough_device_ids": ["10de:ffff"],'
             ' "nvidia_driver_passthrough_pci_addresses": []}')
    result = run_playbook_json(_converge(), "-e", extra)
    # Read right away: the later runs of this module change the hosts before pytest gets to the other hosts' tests.
    return malformed, result, before, {name: _state(name) for name in INSTANCES}


def _failed(result: dict, instance: str) -> list:
    return [(_name(task), task["hosts"][instance]) for play in result["plays"] for task in play["tasks"]
            if task["hosts"].get(instance, {}).get("failed")]


def _state(name: str) -> str:
    """Checksums of every file the role writes or regenerates, read straight from the container."""
    paths = [MODPROBE, MODULES_LOAD, SCRIPT, RECORD, "/etc/default/grub", "/etc/kernel/cmdline", "/boot/grub/grub.cfg",
             f"/boot/initrd.img-{KERNEL}"] + [f["initramfs_file"] for f in FAMILY.values()]
    proc = subprocess.run(["podman", "exec", name, "sh", "-c", 'for f in "$@"; do if [ -e "$f" ]; then sha256sum "$f"; fi; done; '
                           "cat /var/log/gpuhost-stub-*.log 2>/dev/null; ls /boot/loader/entries 2>/dev/null; true", "sh", *paths],
                          capture_output=True, text=True, check=True)
    return proc.stdout


def test_bad_inputs_fail_before_any_change(gpuhost_instance, bad_run):
    malformed, bad_run, before, after = bad_run
    failed = _failed(malformed, gpuhost_instance)
    assert [name for name, _outcome in failed] == ["Check the variables that reach the files and the commands, before changing anything"]
    assert "'0000:1:0' is not a PCI address" in failed[0][1]["msg"]
    assert changed_tasks(malformed, gpuhost_instance) == []
    failed = _failed(bad_run, gpuhost_instance)
    assert [name for name, _outcome in failed] == ["Stop before any change when the request cannot be met"]
    msg = failed[0][1]["msg"]
    assert "10de:ffff matches no NVIDIA GPU on this host" in msg
    assert ("IOMMU group 4 of 0000:04:00.0 also holds 0000:00:1f.3 (8086:a348, audio, driver snd_hda_intel), which would not "
            "go to vfio-pci") in msg
    assert "nvidia_driver is configured for this host and would drive 0000:04:00.0" in msg
    assert changed_tasks(bad_run, gpuhost_instance) == []
    assert after[gpuhost_instance] == before[gpuhost_instance]


@pytest.fixture(scope="module")
def bound_run():
    """Rebind the chosen functions to vfio-pci in the synthetic tree of Debian and Arch (as after the reboot), leave Rocky's
    on nvidia, and run converge.yml with vfio_passthrough_require_bound: the facts decide who passes."""
    for name in (INSTANCES[0], INSTANCES[2]):
        for function in FAMILY[name.split("-")[1]]["functions"]:
            subprocess.run(["podman", "exec", name, "ln", "-sfn", "../../../bus/pci/drivers/vfio-pci",
                            f"{ROOT}/sys/devices/pci0000:00/{function}/driver"], check=True)
    return run_playbook_json(_converge(), "-e", '{"vfio_passthrough_require_bound": true}')


def test_after_reboot_the_facts_verify_the_binding(gpuhost_instance, family, bound_run):
    assert changed_tasks(bound_run, gpuhost_instance) == []
    outcomes = {_name(task): task["hosts"][gpuhost_instance] for play in bound_run["plays"] for task in play["tasks"]
                if gpuhost_instance in task["hosts"]}
    report = outcomes["Report what changed and why a reboot is needed"]["ansible_facts"]
    verify = outcomes["Verify that every chosen function is bound to vfio-pci"]
    if family == "rocky9":
        assert report["vfio_passthrough_reboot_reasons"] == [
            "not bound to vfio-pci yet: 0000:01:00.0 (nvidia), 0000:01:00.1 (snd_hda_intel), 0000:02:00.0 (nvidia), "
            "0000:02:00.1 (snd_hda_intel)"]
        assert verify.get("failed") is True
        assert "are not bound to vfio-pci" in verify["msg"]
        assert report["vfio_passthrough_report"][0] == (
            "vfio_passthrough: 0000:01:00.0, 0000:01:00.1, 0000:02:00.0, 0000:02:00.1 to vfio-pci by vendor:device id "
            "(10de:1aef,10de:2204)")
    else:
        assert report["vfio_passthrough_reboot_reasons"] == []
        assert report["vfio_passthrough_reboot_required"] is False
        assert not verify.get("failed") and not verify.get("skipped")
        slot = "01:00" if family == "debian12" else "02:00"
        assert report["vfio_passthrough_proxmox_hostpci"] == [f"hostpci0: {slot},pcie=1,rombar=1,x-vga=0"]


@pytest.fixture(scope="module")
def absent_run():
    return run_playbook_json(_converge(), "-e", '{"vfio_passthrough_state": "absent"}')


def test_absent_restores_the_files_exactly(host, gpuhost_instance, family, absent_run):
    assert not any(task["hosts"].get(gpuhost_instance, {}).get("failed") for play in absent_run["plays"] for task in play["tasks"])
    baseline = host.file(BASELINE).content_string
    assert baseline.strip(), "prepare recorded no checksums"
    assert _checksums(host) == baseline.rstrip("\n")
    for path in (MODPROBE, MODULES_LOAD, SCRIPT, FAMILY[family]["initramfs_file"], RECORD):
        assert not host.file(path).exists, path
    args = _args(host, family)
    if family == "debian12":
        grub_cfg = host.file("/boot/grub/grub.cfg").content_string
        assert "iommu" not in grub_cfg
        assert SCRIPT.lstrip("/") not in host.check_output("lsinitramfs /boot/initrd.img-%s", KERNEL).splitlines()
    elif family == "rocky9":
        log = host.file("/var/log/gpuhost-stub-grubby.log").content_string.splitlines()
        assert log[-1] == "grubby --update-kernel=ALL --remove-args=%s" % " ".join(args)
        # The converge, the drift repair (test_vfio_pt_drift.py: the dracut drop-in was edited) and the removal.
        assert host.file("/var/log/gpuhost-stub-dracut.log").content_string.count("dracut -f --regenerate-all") == 3
    else:
        entries = host.check_output("cat /boot/loader/entries/*-%s.conf", ARCH_KERNEL)
        assert "iommu" not in entries
        # The converge, the drift repair (test_vfio_pt_drift.py: the modprobe.d file was edited) and the removal.
        assert host.file("/var/log/gpuhost-stub-mkinitcpio.log").content_string.splitlines() == ["mkinitcpio -P"] * 3
    report = [task["hosts"][gpuhost_instance]["ansible_facts"] for play in absent_run["plays"] for task in play["tasks"]
              if _name(task) == "Report what changed and why a reboot is needed"][0]
    assert report["vfio_passthrough_report"][:2] == ["vfio_passthrough: configuration removed",
                                                     "kernel arguments removed: " + " ".join(args)]
    assert "the passed-through GPUs return to their drivers at the next boot" in report["vfio_passthrough_reboot_reasons"]
