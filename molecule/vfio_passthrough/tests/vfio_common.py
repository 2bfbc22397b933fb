"""Constants and helpers shared by the vfio_passthrough test modules."""

from __future__ import annotations

import os

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
