"""Verify playbooks/site.yml on Debian 12, Debian 13, emulated Rocky 9 and emulated Arch: the summary each host wrote
and printed, and the real state the driver, gpu_settings and gpu_compose roles left behind.

No GPU exists in the containers: the facts say no_gpu, the driver is installed because the scenario forces it, and
its kernel module is not loaded.
"""

from __future__ import annotations

import functools
import json
import os
import re
from pathlib import Path

import pytest
import yaml

from gpuhost_testinfra import recorded_runs
from gpuhost_testinfra import test_check_mode_predicted_converge  # noqa: F401  pylint: disable=unused-import

SUMMARIES = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", ".")) / "summaries"
UUID = "GPU-3f1c2a51-0a6e-4b6b-9a55-2d4ac6f0e001"
FAMILY = {
    "debian12": {
        "host": "Debian 12",
        "driver": ["nvidia-open-kernel-dkms", "nvidia-smi", "libcuda1"],
        "settings": ["nvidia-persistenced", "nvidia-smi", "python3-pynvml"],
        "compose": ["python3-yaml"],
    },
    "debian13": {
        "host": "Debian 13",
        "driver": ["nvidia-open-kernel-dkms", "nvidia-smi", "libcuda1"],
        "settings": ["nvidia-persistenced", "nvidia-smi", "python3-pynvml"],
        "compose": ["python3-yaml"],
    },
    "rocky9": {
        "host": "Rocky 9",
        "driver": ["nvidia-driver", "kmod-nvidia-open-dkms"],
        "settings": ["nvidia-persistenced", "nvidia-driver-cuda"],
        "compose": [],
    },
    "arch": {
        "host": "Archlinux",
        "driver": ["nvidia-utils", "nvidia-open-dkms"],
        "settings": ["nvidia-utils", "python-nvidia-ml-py"],
        "compose": [],
    },
}


@pytest.fixture(scope="module")
def family(gpuhost_instance: str) -> str:
    return gpuhost_instance.split("-")[1]


@functools.cache
def written_summaries() -> dict[str, str]:
    """Every host's summary as the last run (idempotence) wrote it."""
    return {path.stem: path.read_text(encoding="utf-8") for path in SUMMARIES.glob("*.txt")}


@pytest.fixture(scope="module")
def summary_text(gpuhost_instance: str) -> str:
    assert gpuhost_instance in written_summaries(), f"site.yml wrote no summary for {gpuhost_instance} in {SUMMARIES}"
    return written_summaries()[gpuhost_instance]


@pytest.fixture(scope="module")
def summary(summary_text: str) -> list[str]:
    return summary_text.splitlines()


def test_summary_file_says_what_each_role_did(summary, gpuhost_instance, family):
    text = "\n".join(summary)
    assert summary[0] == f"gpuhost.nvidia summary: {gpuhost_instance}"
    assert summary[1].strip().startswith(f"host       {FAMILY[family]['host']}"), summary[1]
    assert "skipped, no NVIDIA GPU" not in text  # nvidia_driver_force took effect
    assert ("gpu_settings: nvidia-persistenced.service enabled with persistence mode on; gpuhost-gpu-settings.service "
            "re-applies /etc/gpuhost/gpu_settings.json at boot; settings not applied:") in " ".join(line.strip() for line in summary)
    # The summary the last run wrote: the override was already in place.
    assert "- gpu_compose: override /srv/gpu-demo/docker-compose.gpu.yml (unchanged)" in text
    assert "facts      state=no_gpu" in text
    assert "GPUs       none: this host has no NVIDIA display/3D PCI function" in text
    # Debian's real userland carries libnvidia-ml; the stub packages of the emulated hosts carry no library.
    driver = {"debian12": "driver     not loaded; userland 535.", "debian13": "driver     not loaded; userland 550.163.01"}.get(
        family, "driver     not loaded, not installed")
    assert any(line.strip().startswith(driver) for line in summary), text
    assert "reboot     reboot_required=true" in text
    assert "- the nvidia kernel module is not loaded" in text


def test_parts_that_are_off_never_start(gpuhost_instance):
    """vfio (no GPU named for passthrough) and verify (gpuhost_verify unset) end their plays for every host before
    their roles start; every other part runs, in every run of site.yml (check, converge, idempotence)."""
    site_runs = [run for run in recorded_runs() if Path(run["playbook"]).name == "converge.yml"]
    assert len(site_runs) >= 3, [run["playbook"] for run in recorded_runs()]
    # internal_repository: the shared repository tasks the driver and toolkit roles include; internal_common: the
    # per-OS variables, the converged probe and record and the package ensure every role includes
    expected = ["gpuhost.nvidia.gpu_compose", "gpuhost.nvidia.gpu_doctor", "gpuhost.nvidia.gpu_settings",
                "gpuhost.nvidia.internal_common", "gpuhost.nvidia.internal_repository", "gpuhost.nvidia.nvidia_container_toolkit",
                "gpuhost.nvidia.nvidia_driver"]
    for run in site_runs:
        assert run["roles"].get(gpuhost_instance) == expected, (run["check"], run["roles"].get(gpuhost_instance))


def test_summary_names_what_the_driver_role_did(summary):
    assert any(line.strip().lstrip("- ").startswith("nvidia_driver: ") for line in summary), summary


def test_the_reports_dkms_line_says_what_dkms_status_says(host, summary):
    """The driver's report reads DKMS's registrations from the GPU facts (kernels.dkms, read from /var/lib/dkms; #21: no
    `dkms status` call of its own). Where the driver came with DKMS, every registration the real dkms lists is in it."""
    if not host.exists("dkms"):
        pytest.skip("no dkms on this host (its driver packages carry no DKMS)")
    status = [line.strip() for line in host.check_output("dkms status").splitlines() if "nvidia" in line]
    assert status, "dkms lists no nvidia module"
    report = [line.strip().lstrip("- ") for line in summary if line.strip().lstrip("- ").startswith("nvidia_driver: DKMS ")]
    assert len(report) == 1, summary
    for line in status:
        # `module/version: added` or `module/version, kernel, arch: built|installed`
        head, _sep, state = line.rpartition(": ")
        module_version, *rest = [part.strip() for part in head.split(",")]
        if state == "added":
            assert module_version + ": added" in report[0], (line, report)
        else:
            assert "%s: " % module_version in report[0] and "%s for " % state in report[0] and rest[0] in report[0], (line, report)


def printed_summaries(gpuhost_instance: str) -> list[tuple[bool, list[str]]]:
    """(check mode?, the summary printed) for every recorded run of site.yml on this host, oldest first."""
    return [(run["check"], entry["msg"]) for run in recorded_runs() for entry in run["printed"].get(gpuhost_instance, [])
            if entry["task"] == "Show the summary"]


def test_printed_summary_is_the_written_one(gpuhost_instance, summary_text):
    """The check run, the converge and the idempotence run each printed a summary; the last one is the written one."""
    printed = printed_summaries(gpuhost_instance)
    assert [check for check, _msg in printed][:3] == [True, False, False], printed
    assert printed[2][1] == summary_text.split("\n")


def test_driver_packages_are_installed(host, family):
    for name in FAMILY[family]["driver"]:
        assert host.package(name).is_installed, name


def test_driver_module_params_reach_modprobe_and_the_initramfs(host, family, summary):
    """nvidia_driver_module_params: one options line of ours in /etc/modprobe.d, which kmod reads and, on Debian,
    initramfs-tools copies into every initramfs it builds (checked with a kernel tree made for the check: the test host
    boots none of its own)."""
    conf = host.file("/etc/modprobe.d/gpuhost-nvidia-params.conf")
    assert conf.is_file and conf.mode == 0o644 and conf.user == "root"
    assert conf.content_string.splitlines()[-1] == "options nvidia NVreg_DeviceFileMode=0660 NVreg_RestrictProfilingToAdminUsers=1"
    assert any("nvidia_driver: module parameters NVreg_DeviceFileMode, NVreg_RestrictProfilingToAdminUsers in "
               "/etc/modprobe.d/gpuhost-nvidia-params.conf" in line for line in summary), summary
    if not family.startswith("debian"):
        return
    release = "0.0.0-gpuhost-check"
    # The container boots no kernel of its own, so the role had no initramfs to build and installs no initramfs-tools
    # here; the check brings Debian's own for its run and takes it away again.
    had_tools = host.package("initramfs-tools").is_installed
    if not had_tools:
        host.check_output("DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends initramfs-tools")
    try:
        host.check_output("mkdir -p /lib/modules/%s && touch /lib/modules/%s/modules.order /lib/modules/%s/modules.builtin "
                          "/lib/modules/%s/modules.builtin.modinfo && depmod %s && printf 'CONFIG_RD_GZIP=y\\n' > /boot/config-%s",
                          release, release, release, release, release, release)
        host.check_output("mkinitramfs -o /tmp/gpuhost-check-initrd.img %s", release)
        listed = host.check_output("lsinitramfs /tmp/gpuhost-check-initrd.img").splitlines()
        assert "etc/modprobe.d/gpuhost-nvidia-params.conf" in listed, [p for p in listed if "modprobe" in p]
    finally:
        host.run("rm -rf /lib/modules/%s /boot/config-%s /tmp/gpuhost-check-initrd.img", release, release)
        if not had_tools:
            host.run("DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq initramfs-tools initramfs-tools-core")


def test_driver_source_per_family(host, family):
    if family == "rocky9":
        assert "stream=580-open" in host.file("/etc/dnf/modules.d/nvidia-driver.module").content_string
        repo = host.file("/etc/yum.repos.d/gpuhost-nvidia-cuda.repo").content_string
        assert "baseurl = file:///srv/gpuhost-repos/rpm/cuda-rhel9" in repo and "repo_gpgcheck = 1" in repo
        assert host.check_output("rpm -q --qf '%{VERSION}' nvidia-driver") == "580.65.06"
    elif family == "arch":
        conf = host.file("/etc/pacman.conf").content_string
        assert "[gpuhost-test]" in conf and "Server = file:///srv/gpuhost-repos/pacman" in conf
        assert host.check_output("pacman -Q nvidia-utils") == "nvidia-utils 580.76.05-1"
    else:
        assert host.package("nvidia-smi").version.startswith(BRANCH[family] + ".")
        pref = host.file("/etc/apt/preferences.d/gpuhost-nvidia-driver.pref").content_string
        assert f"Pin: version {BRANCH[family]}.*\nPin-Priority: 1001" in pref, pref
        # The exact-name pin holds the installed module package at 1001 (apt-cache policy lists the pinned version).
        policy = host.check_output("apt-cache policy nvidia-open-kernel-dkms")
        assert f"Installed: {host.package('nvidia-open-kernel-dkms').version}" in policy
        assert " 1001" in policy, policy
    if family == "debian13":
        assert host.package("nvidia-open-kernel-dkms").version.startswith("550.163.01"), "Debian 13's non-free 550.163.01"


# apt matches a glob or regex pin (`Package: nvidia-*`, `/re/`) against every package each time it opens its cache: the
# driver's old 13-glob pin made an apt task over SSH take 3.2-4.1 s instead of 1.4-1.6 s. `benchmarks/apt_pin.py`
# measures that on a Debian host; this test checks the cause, which a loaded CI machine cannot blur: every Package
# line of the collection's preferences names exact packages.
DEBIAN_PACKAGE_NAME = re.compile(r"^[a-z0-9][a-z0-9+.-]+$")


def test_the_pins_name_exact_packages_so_apt_opens_its_cache_fast(host, family):
    """The role's preferences files (the driver's pin, the toolkit's hold) list package names, never a glob or regex."""
    if not family.startswith("debian"):
        pytest.skip("apt preferences exist on the Debian family only")
    names = host.check_output("ls /etc/apt/preferences.d").split()
    ours = sorted(name for name in names if name.startswith("gpuhost-"))
    assert {"gpuhost-nvidia-driver.pref", "gpuhost-nvidia-container-toolkit.pref"} <= set(ours), names
    for name in ours:
        text = host.file(f"/etc/apt/preferences.d/{name}").content_string
        lines = [line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("Package:")]
        assert lines and all(lines), (name, text)
        bad = [package for line in lines for package in line if not DEBIAN_PACKAGE_NAME.match(package)]
        assert not bad, (name, bad, text)


# The driver's branch on each family; no role installs another branch's userland.
BRANCH = {"debian12": "535", "debian13": "550", "rocky9": "580", "arch": "580"}


def test_gpu_settings_installs_the_drivers_branch_only(host, family):
    """gpu_settings installs nvidia_driver_userland's packages at the driver's branch, never a second branch."""
    for name in FAMILY[family]["settings"]:
        if name.startswith(("python3-", "python-")):
            continue
        assert host.package(name).version.split(":")[-1].startswith(BRANCH[family] + "."), (name, host.package(name).version)
    if family.startswith("debian"):
        # Every installed package whose version is a driver version (Debian's helper packages carry dates instead).
        # nvidia-modprobe is its own Debian source package with its own version (trixie: 570.133.07), not driver userland.
        installed = host.check_output("dpkg-query -W -f '${db:Status-Abbrev} ${Package} ${Version}\\n' '*nvidia*' 'libcuda*'")
        branches = {m.group(2) for m in re.finditer(r"^ii +(\S+) (?:\d+:)?(\d{3})\.\d+", installed, re.M)
                    if m.group(1) != "nvidia-modprobe"}
        assert branches == {BRANCH[family]}, installed


def test_gpu_settings_packages_and_units(host, family):
    for name in FAMILY[family]["settings"]:
        assert host.package(name).is_installed, name
    assert host.service("nvidia-persistenced").is_enabled
    assert host.service("gpuhost-gpu-settings").is_enabled
    spec = yaml.safe_load(host.file("/etc/gpuhost/gpu_settings.json").content_string)
    assert spec == {"gpus": ["all"], "persistence_mode": True, "compute_mode": "EXCLUSIVE_PROCESS", "nvidia_smi": "/usr/bin/nvidia-smi"}
    assert host.run("nvidia-smi").rc != 0  # no driver reachable in a container


def test_compose_override_from_the_synthetic_facts(host, family):
    for name in FAMILY[family]["compose"]:
        assert host.package(name).is_installed, name
    override = host.file("/srv/gpu-demo/docker-compose.gpu.yml")
    assert (override.user, override.mode) == ("root", 0o644)
    app = yaml.safe_load(override.content_string)["services"]["app"]
    assert app["deploy"]["resources"]["reservations"]["devices"] == [{"driver": "nvidia", "device_ids": [UUID], "capabilities": ["gpu"]}]
    assert app["environment"]["NVIDIA_VISIBLE_DEVICES"] == UUID


TOOLKIT_VERSION = {"debian12": "1.17.8", "debian13": "1.17.8", "rocky9": "1.20.0", "arch": "1.17.8"}
# Where the CDI spec is: 1.18+ ships nvidia-cdi-refresh, which writes /var/run/cdi (Rocky's newest, 1.20.0); the hosts
# held at 1.17.8 have the role generate /etc/cdi.
CDI_SPEC = {family: "/var/run/cdi/nvidia.yaml" if version != "1.17.8" else "/etc/cdi/nvidia.yaml"
            for family, version in TOOLKIT_VERSION.items()}


def test_toolkit_installed_and_runtime_merged(host, family):
    assert host.package("nvidia-container-toolkit").version.startswith(TOOLKIT_VERSION[family])
    daemon = json.loads(host.file("/etc/docker/daemon.json").content_string)
    runtime = daemon["runtimes"]["nvidia"]["path"]
    assert runtime == "/usr/bin/nvidia-container-runtime" and host.file(runtime).is_file
    spec = yaml.safe_load(host.file(CDI_SPEC[family]).content_string)
    assert spec["kind"] == "nvidia.com/gpu"
    other = ({"/etc/cdi/nvidia.yaml", "/var/run/cdi/nvidia.yaml"} - {CDI_SPEC[family]}).pop()
    assert not host.file(other).exists  # one location only


def test_toolkit_held_at_its_version_by_the_drivers_pin_call(host, family):
    """apt hosts: the toolkit's hold, which site.yml hands to the driver's pin call with its request (#21), is written,
    with exact names, and apt's policy follows it."""
    if host.system_info.distribution not in ("debian", "ubuntu"):
        pytest.skip("an apt preferences hold")
    pin = host.file("/etc/apt/preferences.d/gpuhost-nvidia-container-toolkit.pref")
    assert pin.user == "root" and pin.group == "root" and pin.mode == 0o644
    assert f"Pin: version {TOOLKIT_VERSION[family]}-*" in pin.content_string and "*" not in pin.content_string.split("Package:")[1].split("\n")[0]
    policy = host.check_output("apt-cache policy nvidia-container-toolkit")
    # The version table: the held version carries the pin's priority (apt_preferences(5)), the others the source's.
    held = [line.split() for line in policy.splitlines() if line.strip().lstrip("* ").startswith(TOOLKIT_VERSION[family] + "-")]
    assert held and all(fields[-1] == "1001" for fields in held), policy


def test_summary_lines_are_one_line_each(summary):
    """No report line wraps into a line of its own (a folded YAML scalar can leave a line break in the text)."""
    body = [line for line in summary[2:] if line.strip()]
    assert all(line.startswith("  ") for line in body), body


def test_doctor_fails_exactly_what_a_gpu_less_container_lacks(summary):
    doctor = [line.strip().lstrip("- ") for line in summary if line.strip().lstrip("- ").startswith("gpu_doctor: ")]
    # 22 checks; boot_kernel is ok in a container (no installed kernel under /lib/modules to boot into). A container has
    # no EFI variables, so the doctor cannot see Secure Boot and says so (warn), as it fails closed. Nor can it read the
    # kernel log (the container's journal holds no kernel messages, and the kernel refuses it dmesg): xid warns that
    # Xid errors are unknown. fabric_manager is ok (no NVSwitch on the PCI bus), nvlink is ok (no NVML, no link state);
    # toolkit_cves, apt_signed_by and cdi_version are ok (toolkit 1.17.8 or newer, one Signed-By per repository, a
    # 0.5.0 spec).
    assert sorted(doctor) == sorted(["gpu_doctor: fail (18 ok, 2 warn, 2 fail)", "gpu_doctor: secure_boot: warn",
                                     "gpu_doctor: xid: warn", "gpu_doctor: driver_loaded: fail", "gpu_doctor: device_nodes: fail"])


def test_summary_names_what_the_toolkit_did(summary, family):
    toolkit = [line.strip().lstrip("- ") for line in summary if line.strip().lstrip("- ").startswith("nvidia_container_toolkit: ")]
    assert toolkit[0].startswith("nvidia_container_toolkit: already installed: "), toolkit
    assert TOOLKIT_VERSION[family] in toolkit[0]
    assert toolkit[1:] == ["nvidia_container_toolkit: runtime nvidia configured for docker",
                           f"nvidia_container_toolkit: CDI spec {CDI_SPEC[family]} (nvidia.com/gpu=all)"]
