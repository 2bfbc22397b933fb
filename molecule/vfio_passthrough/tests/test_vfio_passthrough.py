"""Verify vfio_passthrough on Debian 12 (real update-grub and update-initramfs), emulated Rocky 9 (grubby and dracut
stubs that record their arguments) and emulated Arch (real kernel-install writing a BLS entry; mkinitcpio stub).

The hosts have no NVIDIA device: prepare.yml built a synthetic PCI tree that the role's facts read. The tests run in
file order: the converged state first, then three extra runs of converge.yml on all hosts (bad inputs that must fail
before any change; the post-reboot verification with vfio_passthrough_require_bound; `state: absent`, which must
restore the edited files byte for byte).
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from gpuhost_testinfra import changed_tasks, run_playbook_json
from gpuhost_testinfra import test_check_mode_predicted_converge, test_check_after_converge_changes_nothing  # noqa: F401

ROOT = "/srv/gpuhost-vfio-root"
MODPROBE = "/etc/modprobe.d/gpuhost-vfio.conf"
MODULES_LOAD = "/etc/modules-load.d/gpuhost-vfio.conf"
SCRIPT = "/usr/local/libexec/gpuhost/vfio-pci-override"
RECORD = "/var/lib/gpuhost/vfio_kernel_args.json"
BASELINE = "/var/tmp/gpuhost-vfio-baseline.sha256"
KERNEL = "6.1.0-99-amd64"
ARCH_KERNEL = "6.1.0-99-arch"
INSTANCES = ("gpuhost-debian12-vfio_passthrough", "gpuhost-rocky9-vfio_passthrough", "gpuhost-arch-vfio_passthrough")
ROCKY_GRUB_BEFORE = ("crashkernel=1G-4G:192M,4G-64G:256M,64G-:512M resume=/dev/mapper/rl-swap rd.lvm.lv=rl/root rhgb quiet")

FAMILY = {
    "debian12": {"functions": ["0000:01:00.0", "0000:01:00.1"], "mode": "addresses",
                 "initramfs_file": "/etc/initramfs-tools/hooks/gpuhost-vfio"},
    "rocky9": {"functions": ["0000:01:00.0", "0000:01:00.1", "0000:02:00.0", "0000:02:00.1"], "mode": "ids",
               "initramfs_file": "/etc/dracut.conf.d/gpuhost-vfio.conf"},
    "arch": {"functions": ["0000:02:00.0", "0000:02:00.1"], "mode": "addresses",
             "initramfs_file": "/etc/mkinitcpio.conf.d/gpuhost-vfio.conf"},
}


@pytest.fixture
def family(gpuhost_instance: str) -> str:
    # Function scope on purpose: a module-scoped fixture on the instance would make pytest run every test of one host
    # before the next host's, and the extra runs below (absent) must come after every host's state checks.
    return gpuhost_instance.split("-")[1]


def _name(task: dict) -> str:
    """A task's name without the "role : " prefix the JSON callback adds."""
    return task["task"]["name"].split(" : ")[-1]


def _iommu_arg(host, family: str) -> str:
    if family == "debian12":
        return "intel_iommu=on"
    if family == "rocky9":
        return "amd_iommu=on"
    # Arch runs with vfio_passthrough_cpu_vendor: auto: the CI machine's CPU decides.
    vendor = host.check_output("grep -m1 vendor_id /proc/cpuinfo")
    return "amd_iommu=on" if "AuthenticAMD" in vendor else "intel_iommu=on"


def _args(host, family: str) -> list[str]:
    args = [_iommu_arg(host, family), "iommu=pt"]
    if family == "rocky9":
        args.append("vfio-pci.ids=10de:1aef,10de:2204")
    return args


def _converge() -> str:
    return os.path.join(os.environ["MOLECULE_SCENARIO_DIRECTORY"], "converge.yml")


def test_kernel_arguments_reach_the_bootloader(host, family):
    args = " ".join(_args(host, family))
    if family == "arch":
        assert host.file("/etc/kernel/cmdline").content_string == f"root=UUID=3f0a7c12-0000-4000-8000-00000000beef rw quiet {args}\n"
        entries = host.check_output("cat /boot/loader/entries/*-%s.conf", ARCH_KERNEL)
        options = [line for line in entries.splitlines() if line.startswith("options")]
        assert len(options) == 1 and f"rw quiet {args} systemd.machine_id=" in options[0], entries
        return
    grub = host.file("/etc/default/grub").content_string
    assigned = re.findall(r'^GRUB_CMDLINE_LINUX="(.*)"$', grub, re.M)
    if family == "debian12":
        assert assigned == [args]
        # The real update-grub wrote them into every Linux entry (normal, advanced, recovery).
        linux_lines = [line.strip() for line in host.file("/boot/grub/grub.cfg").content_string.splitlines()
                       if line.strip().startswith("linux\t")]
        assert len(linux_lines) == 3, linux_lines
        assert all(f" {args}" in line and line.count("iommu=pt") == 1 for line in linux_lines), linux_lines
        backups = host.check_output("ls /etc/default/ | grep '^grub\\..*~$' || true").split()
        assert len(backups) == 1, backups
    else:
        assert assigned == [f"{ROCKY_GRUB_BEFORE} {args}"]
        log = host.file("/var/log/gpuhost-stub-grubby.log").content_string.splitlines()
        assert log == [f"grubby --update-kernel=ALL --args={args}"]


def test_modprobe_and_modules_load(host, family):
    lines = [line for line in host.file(MODPROBE).content_string.splitlines() if line and not line.startswith("#")]
    if FAMILY[family]["mode"] == "ids":
        first = "options vfio-pci ids=10de:1aef,10de:2204"
    else:
        first = f"install vfio-pci {SCRIPT}"
    assert lines == [first, "softdep nvidia pre: vfio-pci", "softdep nouveau pre: vfio-pci"]
    modules = [line for line in host.file(MODULES_LOAD).content_string.splitlines() if not line.startswith("#")]
    assert modules == ["vfio", "vfio_iommu_type1", "vfio_pci"]


def test_per_device_override_script(host, family):
    script = host.file(SCRIPT)
    if FAMILY[family]["mode"] == "ids":
        assert not script.exists
        return
    assert script.mode == 0o755
    assert f"for dev in {' '.join(FAMILY[family]['functions'])}; do" in script.content_string
    # The twin GPU stays with the host.
    other = "0000:02:00.0" if family == "debian12" else "0000:01:00.0"
    assert other not in script.content_string
    assert host.run("sh -n %s", SCRIPT).rc == 0


def test_initramfs(host, family):
    dropin = host.file(FAMILY[family]["initramfs_file"]).content_string
    if family == "debian12":
        # The real update-initramfs ran the hook: the image force-loads the vfio modules and carries the script.
        assert host.file(FAMILY[family]["initramfs_file"]).mode == 0o755
        listing = host.check_output("lsinitramfs /boot/initrd.img-%s", KERNEL).splitlines()
        assert SCRIPT.lstrip("/") in listing
        modules = host.check_output("rm -rf /tmp/vfio-initrd && unmkinitramfs /boot/initrd.img-%s /tmp/vfio-initrd && "
                                    "cat /tmp/vfio-initrd/conf/modules /tmp/vfio-initrd/main/conf/modules 2>/dev/null || true", KERNEL)
        assert modules.split() == ["vfio", "vfio_iommu_type1", "vfio_pci"]
    elif family == "rocky9":
        assert 'force_drivers+=" vfio vfio_iommu_type1 vfio_pci "' in dropin
        assert "install_items" not in dropin  # ids mode: no script
        assert host.file("/var/log/gpuhost-stub-dracut.log").content_string.count("dracut -f --regenerate-all") == 1
    else:
        assert 'MODULES=(vfio_pci vfio vfio_iommu_type1 "${MODULES[@]}")' in dropin
        assert f"FILES+=({SCRIPT})" in dropin
        assert host.file("/var/log/gpuhost-stub-mkinitcpio.log").content_string.splitlines() == ["mkinitcpio -P"]


def _checksums(host) -> str:
    return host.check_output("for f in /etc/default/grub /etc/kernel/cmdline; do if [ -e $f ]; then sha256sum $f; fi; done")


@pytest.fixture(scope="module")
def bad_run():
    """One run of converge.yml with every bad input at once: the plan must name them all and nothing may change."""
    extra = ('{"vfio_passthrough_pci_addresses": ["0000:1:0", "0000:04:00.0"], "vfio_passthrough_device_ids": ["10de:ffff"],'
             ' "nvidia_driver_passthrough_pci_addresses": []}')
    before = {name: _state(name) for name in INSTANCES}
    return run_playbook_json(_converge(), "-e", extra), before


def _state(name: str) -> str:
    """Checksums of every file the role writes or regenerates, read straight from the container."""
    paths = [MODPROBE, MODULES_LOAD, SCRIPT, RECORD, "/etc/default/grub", "/etc/kernel/cmdline", "/boot/grub/grub.cfg",
             f"/boot/initrd.img-{KERNEL}"] + [f["initramfs_file"] for f in FAMILY.values()]
    proc = subprocess.run(["podman", "exec", name, "sh", "-c", 'for f in "$@"; do if [ -e "$f" ]; then sha256sum "$f"; fi; done; '
                           "cat /var/log/gpuhost-stub-*.log 2>/dev/null; ls /boot/loader/entries 2>/dev/null; true", "sh", *paths],
                          capture_output=True, text=True, check=True)
    return proc.stdout


def test_bad_inputs_fail_before_any_change(gpuhost_instance, bad_run):
    bad_run, before = bad_run
    failed = [(_name(task), task["hosts"][gpuhost_instance]) for play in bad_run["plays"] for task in play["tasks"]
              if task["hosts"].get(gpuhost_instance, {}).get("failed")]
    assert [name for name, _ in failed] == ["Stop before any change when the request cannot be met"]
    msg = failed[0][1]["msg"]
    assert "'0000:1:0' is not a PCI address" in msg
    assert "10de:ffff matches no NVIDIA GPU on this host" in msg
    assert ("IOMMU group 4 of 0000:04:00.0 also holds 0000:00:1f.3 (8086:a348, audio, driver snd_hda_intel), which would not "
            "go to vfio-pci") in msg
    assert "nvidia_driver is configured for this host and would drive 0000:04:00.0" in msg
    assert changed_tasks(bad_run, gpuhost_instance) == []
    assert _state(gpuhost_instance) == before[gpuhost_instance]


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
        assert host.file("/var/log/gpuhost-stub-dracut.log").content_string.count("dracut -f --regenerate-all") == 2
    else:
        entries = host.check_output("cat /boot/loader/entries/*-%s.conf", ARCH_KERNEL)
        assert "iommu" not in entries
        assert host.file("/var/log/gpuhost-stub-mkinitcpio.log").content_string.splitlines() == ["mkinitcpio -P"] * 2
    report = [task["hosts"][gpuhost_instance]["ansible_facts"] for play in absent_run["plays"] for task in play["tasks"]
              if _name(task) == "Report what changed and why a reboot is needed"][0]
    assert report["vfio_passthrough_report"][:2] == ["vfio_passthrough: configuration removed",
                                                     "kernel arguments removed: " + " ".join(args)]
    assert "the passed-through GPUs return to their drivers at the next boot" in report["vfio_passthrough_reboot_reasons"]
