"""Verify the converged state of vfio_passthrough on Debian 12 (real update-grub and update-initramfs), emulated Rocky 9
(grubby and dracut stubs that record their arguments) and emulated Arch (real kernel-install writing a BLS entry;
mkinitcpio stub).

The hosts have no NVIDIA device: prepare.yml built a synthetic PCI tree that the role's facts read. test_vfio_runs.py
(collected after this module) then changes the hosts with extra runs; pytest runs one host's tests of a module before the
next host's, so the state checks must live in their own module.
"""

from __future__ import annotations

import re

import pytest

from gpuhost_testinfra import test_check_after_converge_changes_nothing, test_check_mode_predicted_converge  # noqa: F401  pylint: disable=unused-import
from vfio_common import ARCH_KERNEL, FAMILY, KERNEL, MODPROBE, MODULES_LOAD, ROCKY_GRUB_BEFORE, SCRIPT, _args


@pytest.fixture
def family(gpuhost_instance: str) -> str:
    return gpuhost_instance.split("-")[1]


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
