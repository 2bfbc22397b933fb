"""Verify playbooks/site.yml on the emulated Ubuntu 24.04 and 22.04 hosts (#24): the package names and versions each
source installed from the stub repositories (Ubuntu's archive, NVIDIA's CUDA ubuntu2204 repository), the pin, the
repository, Fabric Manager chosen from the NVSwitches in the facts, the persistence daemon's drop-in over Ubuntu's
static unit (and the report saying static), or the unit masked where it is asked off (ubuntu2204), vfio_passthrough
with Ubuntu's GRUB files (by PCI address on ubuntu2404), the exporter, and the bad request that must fail before any
change. test_ubuntu_removal.py (collected after this module) then removes the driver.

The versions are the stubs' (tests/repos/packages.yml), which are the real packages' versions (docs/sources.md).
No GPU and no loadable module exist in the containers: units are checked as installed and enabled, not running.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from gpuhost_testinfra import changed_tasks, run_playbook_json
from gpuhost_testinfra import test_check_mode_predicted_converge  # noqa: F401  pylint: disable=unused-import

SCENARIO = Path(os.environ.get("MOLECULE_SCENARIO_DIRECTORY", Path(__file__).resolve().parent.parent))
SUMMARIES = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", ".")) / "summaries"
NOBLE = "580.95.05-0ubuntu0.24.04.2"
AZURE = "6.8.0-1031.36"
CUDA = "580.105.08-1ubuntu1"
TOOLKIT = "1.17.8-1"
FAMILY = {
    "ubuntu2404": {
        "host": "Ubuntu 24.04 (Debian), kernel 6.8.0-1031-azure",
        "installed": {
            # the signed precompiled modules of the running kernel's flavour, and what they depend on
            "linux-modules-nvidia-580-server-open-azure": AZURE,
            "linux-modules-nvidia-580-server-open-6.8.0-1031-azure": AZURE,
            "linux-signatures-nvidia-6.8.0-1031-azure": AZURE,
            "linux-objects-nvidia-580-server-open-6.8.0-1031-azure": AZURE,
            # the -server userland: the driver's and gpu_settings'
            "nvidia-utils-580-server": NOBLE,
            "libnvidia-compute-580-server": NOBLE,
            "nvidia-kernel-common-580-server": NOBLE,
            "nvidia-compute-utils-580-server": NOBLE,
            "nvidia-container-toolkit": TOOLKIT,
        },
        "absent": ["linux-modules-nvidia-580-server-open-generic", "linux-modules-nvidia-580-server-open-aws",
                   "linux-signatures-nvidia-6.8.0-136-generic", "nvidia-dkms-580-open", "nvidia-utils-580", "nvidia-fabricmanager-580"],
        "hold": ["libnvidia-compute-580-server", "nvidia-compute-utils-580-server", "nvidia-kernel-common-580-server", "nvidia-utils-580-server"],
        "repo": None,
    },
    "ubuntu2204": {
        "host": "Ubuntu 22.04 (Debian), kernel ",
        "installed": {
            "nvidia-dkms-580-open": CUDA,
            "nvidia-kernel-common-580": CUDA,
            "libnvidia-compute-580": CUDA,
            "nvidia-utils-580": CUDA,
            "nvidia-compute-utils-580": CUDA,
            "nvidia-fabricmanager-580": "580.105.08-1",
            "nvidia-container-toolkit": TOOLKIT,
        },
        "absent": ["nvidia-utils-580-server", "libnvidia-compute-580-server", "linux-modules-nvidia-580-server-open-generic"],
        "hold": ["libnvidia-compute-580", "nvidia-dkms-580-open", "nvidia-fabricmanager-580", "nvidia-utils-580"],
        "repo": "file:///srv/gpuhost-repos/apt-cuda-ubuntu2204",
    },
}
DROPIN = "/etc/systemd/system/nvidia-persistenced.service.d/gpuhost-persistence-mode.conf"
# DCGM on ubuntu2204: the role's default pin (NVIDIA's epoch), CUDA 13, and the profiling module
DCGM = {name: "1:4.5.2-1" for name in ("datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-cuda13",
                                       "datacenter-gpu-manager-4-proprietary", "datacenter-gpu-manager-4-proprietary-cuda13")}
DCGM["datacenter-gpu-manager-exporter"] = "4.8.2-1"
FINGERPRINT = (SCENARIO.parents[1] / ".cache" / "repos" / "current" / "key" / "fingerprint").read_text(encoding="utf-8").strip()
# nvidia_driver's pinned key for NVIDIA's CUDA ubuntu2204 repository (roles/nvidia_driver/vars/Ubuntu.yml, docs/sources.md)
UBUNTU_CUDA_KEY = "EB693B3035CD5710E231E123A4B469963BF863CC"


@pytest.fixture(scope="module")
def family(gpuhost_instance: str) -> str:
    return gpuhost_instance.split("-")[1]


def _installed(host) -> dict[str, str]:
    out = host.check_output("dpkg-query -W -f='${db:Status-Status} ${Package} ${Version}\\n'")
    return {name: version for status, name, version in (line.split() for line in out.splitlines()) if status == "installed"}


def test_facts_say_ubuntu_with_the_release_and_the_presented_kernel(family):
    summary = (SUMMARIES / f"gpuhost-{family}-ubuntu.txt").read_text(encoding="utf-8")
    assert FAMILY[family]["host"] in summary.splitlines()[1]


def test_the_sources_packages_are_installed_at_their_versions(host, family):
    installed = _installed(host)
    assert {name: installed.get(name) for name in FAMILY[family]["installed"]} == FAMILY[family]["installed"]
    assert [name for name in FAMILY[family]["absent"] if name in installed] == []


def test_every_installed_nvidia_package_is_a_stub_of_the_expected_set(host, family):
    installed = _installed(host)
    nvidia = {name for name in installed if "nvidia" in name and not name.startswith(("libnvidia-container", "nvidia-container"))}
    assert nvidia == {name for name in FAMILY[family]["installed"] if name != "nvidia-container-toolkit"}
    for name in nvidia:
        assert host.file(f"/usr/share/gpuhost-stub/{name}/STUB").exists


def test_the_pin_holds_the_driver_userland_by_name_and_not_the_kernel_versioned_modules(host, family):
    pref = host.file("/etc/apt/preferences.d/gpuhost-nvidia-driver.pref").content_string
    packages = next(line for line in pref.splitlines() if line.startswith("Package: ")).split()[1:]
    assert set(FAMILY[family]["hold"]) <= set(packages)
    assert [name for name in packages if name.startswith("linux-modules-")] == []
    assert "Pin: version 580.*" in pref
    # apt agrees: the userland's candidate is the pinned version
    policy = host.check_output("apt-cache policy %s", FAMILY[family]["hold"][-1])
    assert "1001" in policy


def test_the_repository_is_the_sources(host, family):
    repo = host.file("/etc/apt/sources.list.d/gpuhost-nvidia-cuda.sources")
    if FAMILY[family]["repo"] is None:
        # the distro source: Ubuntu's own archive (here the stand-in the host came with), no repository of the role's
        assert not repo.exists
    else:
        assert f"URIs: {FAMILY[family]['repo']}" in repo.content_string
        assert "Signed-By: /etc/apt/keyrings/gpuhost-nvidia-cuda.gpg" in repo.content_string


def _summary(family: str) -> str:
    return (SUMMARIES / f"gpuhost-{family}-ubuntu.txt").read_text(encoding="utf-8")


def test_fabric_manager_only_on_the_nvswitch_host(host, family):
    unit = host.service("nvidia-fabricmanager")
    if family == "ubuntu2204":
        assert unit.is_enabled
        # chosen by detection: the inventory leaves nvidia_driver_fabric_manager at auto, the facts count two NVSwitches
        assert "nvidia_driver: Fabric Manager installed and enabled (2 NVSwitches)" in _summary(family)
        assert "0000:18:00.0" in _summary(family), _summary(family)  # the synthetic H100 SXM the facts read
    else:
        assert not host.file("/usr/lib/systemd/system/nvidia-fabricmanager.service").exists
        assert "Fabric Manager" not in _summary(family)


def test_persistenced_as_asked_over_ubuntus_static_unit(host, family):
    # Ubuntu's unit (no [Install]: systemd calls it static) runs --no-persistence-mode; the drop-in replaces that.
    assert "--no-persistence-mode" in host.file("/lib/systemd/system/nvidia-persistenced.service").content_string
    if family == "ubuntu2204":
        # gpu_settings_persistenced_enabled: false. A static unit cannot be disabled (the driver's udev rule starts it),
        # so the role masked it, stopped it and recorded the mask for state absent (test_ubuntu_removal.py).
        assert host.run("systemctl is-enabled nvidia-persistenced.service").stdout.strip() == "masked"
        assert host.file("/etc/systemd/system/nvidia-persistenced.service").linked_to == "/dev/null"
        assert host.run("systemctl is-active nvidia-persistenced.service").stdout.strip() == "inactive"
        assert host.file("/var/lib/gpuhost/gpu_settings_masked_units").content_string == "nvidia-persistenced.service\n"
        assert not host.file(DROPIN).exists
        return
    assert host.check_output("systemctl is-enabled nvidia-persistenced.service") == "static"
    assert not host.file("/var/lib/gpuhost/gpu_settings_masked_units").exists
    dropin = host.file(DROPIN).content_string
    assert "ExecStart=/usr/bin/nvidia-persistenced --user nvidia-persistenced --persistence-mode --verbose" in dropin
    shown = host.check_output("systemctl show -p ExecStart --value nvidia-persistenced.service")
    assert "--persistence-mode" in shown and "--no-persistence-mode" not in shown


def test_gpu_settings_reports_the_unit_as_static_or_masked_not_enabled(family):
    lines = [line for line in _summary(family).splitlines() if "gpu_settings: nvidia-persistenced.service" in line]
    assert len(lines) == 1, _summary(family)
    if family == "ubuntu2204":
        assert "gpu_settings: nvidia-persistenced.service masked and stopped (a static unit" in lines[0], lines[0]
    else:
        assert "gpu_settings: nvidia-persistenced.service static (no [Install] section" in lines[0], lines[0]
    assert "enabled with" not in lines[0]


OVERRIDE = "/usr/local/libexec/gpuhost/vfio-pci-override"
VFIO = {
    # a cloud image (Azure, Intel), by PCI address: the grub.d file's default command line replaces "quiet splash"; the
    # override script lies beside gpu_settings' boot script
    "ubuntu2404": {"args": "intel_iommu=on iommu=pt", "kernel": "6.8.0-1031-azure",
                   "default": "console=tty1 console=ttyS0 earlyprintk=ttyS0", "first": f"install vfio-pci {OVERRIDE}"},
    # a bare-metal AMD server with Ubuntu 22.04's stock /etc/default/grub, by vendor:device id: "quiet splash" stays
    "ubuntu2204": {"args": "amd_iommu=on iommu=pt vfio-pci.ids=10de:2236", "kernel": "5.15.0-126-generic",
                   "default": "quiet splash", "first": "options vfio-pci ids=10de:2236"},
}


def test_vfio_passthrough_with_ubuntus_grub_files(host, family):
    want = VFIO[family]
    args = want["args"]
    grub = host.file("/etc/default/grub").content_string
    assert re.findall(r'^GRUB_CMDLINE_LINUX="(.*)"$', grub, re.M) == [args]
    assert 'GRUB_CMDLINE_LINUX_DEFAULT="quiet splash"' in grub
    # The real update-grub sourced /etc/default/grub (and on the cloud image its grub.d file after it): the passthrough
    # arguments (GRUB_CMDLINE_LINUX) are in every Linux entry of the kernel, beside the default command line.
    linux_lines = [line.strip() for line in host.file("/boot/grub/grub.cfg").content_string.splitlines()
                   if line.strip().startswith("linux\t") and want["kernel"] in line]
    assert len(linux_lines) >= 2, linux_lines
    assert all(f" {args}" in line and line.count("iommu=pt") == 1 for line in linux_lines), linux_lines
    assert any(want["default"] in line for line in linux_lines), linux_lines
    if family == "ubuntu2404":
        assert not any("splash" in line for line in linux_lines if want["default"] in line), linux_lines
    modprobe = [line for line in host.file("/etc/modprobe.d/gpuhost-vfio.conf").content_string.splitlines() if line and not line.startswith("#")]
    assert modprobe == [want["first"], "softdep nvidia pre: vfio-pci", "softdep nouveau pre: vfio-pci"]
    assert host.file("/etc/initramfs-tools/hooks/gpuhost-vfio").mode == 0o755
    script = host.file(OVERRIDE)
    if family == "ubuntu2204":
        assert not script.exists
        return
    # by address: the GPU and its audio function, in the directory gpu_settings' boot script shares (check mode on the
    # fresh host predicted that directory created once: the shared test_check_mode_predicted_converge)
    assert script.mode == 0o755 and "for dev in 0000:01:00.0 0000:01:00.1; do" in script.content_string
    assert host.file("/usr/local/libexec/gpuhost/gpu-settings").exists


def test_the_exporter_runs(host, family, tmp_path):
    """ubuntu2404: nvidia_gpu_exporter from its tarball; ubuntu2204: DCGM (auto, the facts' H100) from NVIDIA's CUDA
    ubuntu2204 repository stub at the role's default pin, the CUDA major of the facts' CUDA 13.0 and the profiling
    module (the facts name no architecture), trusted through nvidia_driver's keyring holding exactly the pinned key."""
    unit = host.service("gpuhost-gpu-exporter")
    assert unit.is_enabled and unit.is_running
    exec_start = host.check_output("systemctl show -p ExecStart --value gpuhost-gpu-exporter.service")
    if family == "ubuntu2404":
        assert ":9835" in exec_start, exec_start
        assert host.file("/usr/local/bin/nvidia_gpu_exporter").linked_to == "/opt/gpuhost-gpu-exporter/1.14.0/nvidia_gpu_exporter"
        assert not host.package("datacenter-gpu-manager-4-core").is_installed
        return
    assert ":9400" in exec_start and "-r localhost:5555" in exec_start, exec_start
    assert host.service("nvidia-dcgm.service").is_enabled and host.service("nvidia-dcgm.service").is_running
    installed = _installed(host)
    assert {name: installed.get(name) for name in DCGM} == DCGM
    assert [name for name in installed if name.startswith("datacenter-gpu-manager-4-") and name.endswith("cuda12")] == []
    policy = host.check_output("apt-cache policy datacenter-gpu-manager-4-cuda13")
    assert "file:/srv/gpuhost-repos/apt-cuda-ubuntu2204" in policy, policy
    # The host has no gpg (the role reads keys itself): the controller's gpg reads the keyring's bytes.
    keyring = subprocess.run(["gpg", "--homedir", str(tmp_path), "--show-keys", "--with-colons"], check=True, capture_output=True,
                             input=host.file("/etc/apt/keyrings/gpuhost-nvidia-cuda.gpg").content).stdout.decode()
    assert [line.split(":")[9] for line in keyring.splitlines() if line.startswith("fpr:")] == [FINGERPRINT]
    assert not host.file("/usr/local/bin/nvidia_gpu_exporter").exists


def test_without_a_fingerprint_dcgm_checks_ubuntus_cuda_key(bad_run, family):
    """Without a fingerprint set, the exporter checks nvidia_driver's keyring against the key that role pins for
    Ubuntu 22.04's CUDA repository (3BF863CC, as Debian 12's; not Debian 13's 8793F200); the test key is not it, so it
    fails with nothing changed."""
    if family != "ubuntu2204":
        pytest.skip("the DCGM host's case")
    changed, reports = bad_run[4]
    assert changed == [], changed
    (message,) = reports
    assert "/etc/apt/keyrings/gpuhost-nvidia-cuda.gpg does not hold exactly the pinned key" in message, message
    assert f"EXPECTED {UBUNTU_CUDA_KEY}" in message.upper() and "Nothing was installed" in message, message


def test_compose_override_written(host):
    assert host.file("/srv/gpu-demo/docker-compose.gpu.yml").exists


@pytest.fixture(scope="module")
def bad_run():
    """bad_inputs.yml: on the ubuntu2404 host (stats, changed tasks, the failed task and its message, apt files after),
    and on the ubuntu2204 host (its changed tasks and the exporter's key error with no fingerprint set)."""
    name = "gpuhost-ubuntu2404-ubuntu"
    listing = ["podman", "exec", name, "ls", "/etc/apt/sources.list.d", "/etc/apt/keyrings"]
    before = subprocess.run(listing, capture_output=True, text=True, check=False).stdout
    result = run_playbook_json(str(SCENARIO / "bad_inputs.yml"))
    after = subprocess.run(listing, capture_output=True, text=True, check=False).stdout
    failed = [(task["task"]["name"], task["hosts"][name].get("msg", "")) for play in result["plays"] for task in play["tasks"]
              if task["hosts"].get(name, {}).get("failed")]
    dcgm_host = "gpuhost-ubuntu2204-ubuntu"
    reports = [task["hosts"][dcgm_host]["__gpuhost_default_key_error"] for play in result["plays"] for task in play["tasks"]
               if task["task"]["name"] == "Report the default key's failure" and dcgm_host in task["hosts"]]
    return result["stats"][name], changed_tasks(result, name), failed, (before, after), (changed_tasks(result, dcgm_host), reports)


def test_secure_boot_with_the_nvidia_source_fails_in_the_preflight_naming_the_signed_source(bad_run):
    stats, changed, failed, (before, after) = bad_run[:4]
    assert stats["failures"] == 1 and changed == [], (stats, changed)
    (task, message), = failed
    assert task.endswith("Stop before any change when the request cannot work here"), task
    assert "Secure Boot is enabled and the nvidia source on Ubuntu 24.04 builds unsigned DKMS modules" in message, message
    assert "(here: nvidia_driver_source: distro)" in message, message
    assert after == before
