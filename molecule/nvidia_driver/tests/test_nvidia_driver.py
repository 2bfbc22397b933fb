"""Verify nvidia_driver on the scenario's hosts (Debian 12 real packages; emulated Rocky 9 and Arch on stub repos).

No GPU and no loadable kernel module exist in the containers: the driver is checked as installed, pinned, registered
with DKMS and configured, and the role is expected to say that a reboot is needed because the module is not loaded.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml

from gpuhost_testinfra import changed_tasks, recorded_runs, remove_hosts, run_playbook_json, start_fresh_host
from gpuhost_testinfra import test_check_after_converge_changes_nothing, test_check_mode_predicted_converge  # noqa: F401  pylint: disable=unused-import

SCENARIO = Path(os.environ.get("MOLECULE_SCENARIO_DIRECTORY", Path(__file__).resolve().parent.parent))
REPOS = SCENARIO.parent.parent / ".cache" / "repos" / "current"
PREFIX = "gpuhost-nvidia_driver-"

EXPECTED = {
    "debian12-proprietary": {
        "installed": ["nvidia-kernel-dkms", "nvidia-smi", "libcuda1"],
        "absent": ["nvidia-open-kernel-dkms", "nvidia-driver", "xserver-xorg-video-nvidia"],
        "dkms": "nvidia-current/535.261.03: added",
        "branch": "535",
    },
    "rocky9": {"installed": ["nvidia-driver", "kmod-nvidia-open-dkms", "nvidia-persistenced", "nvidia-fabricmanager"], "absent": ["nvidia-fabric-manager"],
               "branch": "580"},
    "debian13-nvidia": {"installed": ["nvidia-driver-pinning-595", "nvidia-kernel-open-dkms", "nvidia-driver-cuda", "nvidia-smi"],
                        "absent": ["nvidia-open-kernel-dkms", "nvidia-kernel-dkms"], "branch": "595"},
    "rocky10": {"installed": ["nvidia-driver", "kmod-nvidia-open-dkms", "nvidia-persistenced"],
                "absent": ["nvidia-fabric-manager"], "branch": "580"},
    "arch": {"installed": ["nvidia-utils", "nvidia-open-dkms"], "absent": ["nvidia-open"], "branch": "580"},
}
INITRAMFS_LOG = {
    "debian12-proprietary": ("/var/log/gpuhost-update-initramfs.log", "-u -k all"),
    "debian13-nvidia": ("/var/log/gpuhost-update-initramfs.log", "-u -k all"),
    "rocky9": ("/var/log/gpuhost-stub-dracut.log", "-f --regenerate-all"),
    "rocky10": ("/var/log/gpuhost-stub-dracut.log", "-f --regenerate-all"),
    "arch": ("/var/log/gpuhost-stub-mkinitcpio.log", "mkinitcpio -P"),
}


@pytest.fixture(scope="module")
def case(gpuhost_instance):
    return gpuhost_instance[len(PREFIX):]


@pytest.fixture(scope="module")
def runs(host):
    lines = host.file("/root/nvidia_driver_runs.jsonl").content_string.splitlines()
    return [json.loads(line) for line in lines]


# The driver's install on apt (tasks/install_apt.yml): the transaction's call, and its check-mode twin.
INSTALL_TASK = "Install the driver packages, after the pin and the module configuration, and regenerate the initramfs"


def test_driver_packages_are_installed(host, case):
    for name in EXPECTED[case]["installed"]:
        assert host.package(name).is_installed, name
    for name in EXPECTED[case]["absent"]:
        assert not host.package(name).is_installed, name


def test_branch_is_pinned(host, case):
    branch = EXPECTED[case]["branch"]
    if case.startswith("debian12"):
        pref = host.file("/etc/apt/preferences.d/gpuhost-nvidia-driver.pref")
        assert (pref.user, pref.mode) == ("root", 0o644)
        assert f"Pin: version {branch}.*" in pref.content_string and "Pin-Priority: 1001" in pref.content_string
        module = "nvidia-kernel-dkms" if case.endswith("proprietary") else "nvidia-open-kernel-dkms"
        policy = host.check_output(f"apt-cache policy {module}")
        assert re.search(rf"\*\*\* {branch}\.\S+ 1001", policy), policy
    elif case == "debian13-nvidia":
        # NVIDIA's pinning package holds the branch; the role writes no preferences of its own.
        assert not host.file("/etc/apt/preferences.d/gpuhost-nvidia-driver.pref").exists
        assert "Pin: version 595.*" in host.file("/etc/apt/preferences.d/nvidia-driver-pinning-595").content_string
        for name in ("nvidia-kernel-open-dkms", "nvidia-driver-cuda", "nvidia-smi"):
            assert host.package(name).version == "595.71.05-1", name
            madison = host.check_output(f"apt-cache madison {name}")
            assert "610.10.02-1" in madison, madison  # the newer branch is offered, and not installed
        assert "Candidate: 595.71.05-1" in host.check_output("apt-cache policy nvidia-driver-cuda")
    elif case == "rocky9":
        stream = host.file("/etc/dnf/modules.d/nvidia-driver.module").content_string
        assert "stream=580-open" in stream and "state=enabled" in stream
        assert re.search(r"nvidia-driver\s+580-open \[e\]", host.check_output("dnf -q module list --enabled nvidia-driver"))
    elif case == "rocky10":
        # No module streams on EL 10: the real dnf versionlock plugin (trixie's dnf-plugins-core) holds the branch.
        assert not host.file("/etc/dnf/modules.d/nvidia-driver.module").exists
        lock = host.file("/etc/dnf/plugins/versionlock.list").content_string
        block = lock.split("# BEGIN gpuhost.nvidia.nvidia_driver\n")[1].split("# END gpuhost.nvidia.nvidia_driver")[0].splitlines()
        assert "nvidia-driver-580.*" in block and "kmod-nvidia-open-dkms-580.*" in block and "nvidia-persistenced-580.*" in block, block
        assert all(line.endswith("-580.*") for line in block), block
        assert host.check_output("rpm -q --qf '%{EPOCH}:%{VERSION}' nvidia-driver kmod-nvidia-open-dkms") == "3:580.65.06" * 2
        # The repository offers 595 too: without the lock dnf would upgrade to it; with the lock it has nothing to do.
        unlocked = host.run("dnf --assumeno --disableplugin=versionlock upgrade")
        assert unlocked.rc == 1 and re.search(r"nvidia-driver +x86_64 +3:595\.71\.05-1\.el10", unlocked.stdout), unlocked.stdout
        locked = host.run("dnf --assumeno upgrade")
        assert locked.rc == 0 and "Nothing to do." in locked.stdout and "595." not in locked.stdout, locked.stdout
    else:
        assert host.check_output("pacman-conf IgnorePkg").split() == [
            "nvidia-utils", "nvidia-open", "nvidia-open-dkms", "nvidia-settings", "opencl-nvidia", "lib32-nvidia-utils"]


def test_nouveau_is_blacklisted_in_the_roles_own_file(host):
    conf = host.file("/etc/modprobe.d/gpuhost-nvidia-blacklist-nouveau.conf")
    assert (conf.user, conf.group, conf.mode) == ("root", "root", 0o644)
    lines = [line for line in conf.content_string.splitlines() if line and not line.startswith("#")]
    assert lines == ["blacklist nouveau", "options nouveau modeset=0"]


def test_initramfs_was_regenerated_once_by_the_handler(host, case):
    path, args = INITRAMFS_LOG[case]
    calls = host.file(path).content_string.splitlines()
    # converge, idempotence and check mode: the handler ran on the first converge only.
    assert calls.count(args) == 1, calls


def test_dkms_registration(host, case):
    if "dkms" not in EXPECTED[case]:
        pytest.skip("the stub packages of the emulated hosts carry no DKMS tree")
    assert EXPECTED[case]["dkms"] in host.check_output("dkms status")


def test_repository_and_pinned_key(host, case):
    if case.startswith("debian12"):
        assert not host.file("/etc/apt/sources.list.d/gpuhost-nvidia-cuda.sources").exists  # Debian's own archive
        return
    fingerprint = host.file("/srv/gpuhost-repos/key/fingerprint").content_string.strip()
    if case == "debian13-nvidia":
        sources = host.file("/etc/apt/sources.list.d/gpuhost-nvidia-cuda.sources").content_string
        for line in ("URIs: file:///srv/gpuhost-repos/apt-cuda-debian13", "Suites: /",
                     "Signed-By: /etc/apt/keyrings/gpuhost-nvidia-cuda.gpg"):
            assert line in sources, sources
        key = "/etc/apt/keyrings/gpuhost-nvidia-cuda.gpg"
    elif case.startswith("rocky"):
        repo = host.file("/etc/yum.repos.d/gpuhost-nvidia-cuda.repo").content_string
        for line in ("baseurl = file:///srv/gpuhost-repos/rpm/cuda-rhel" + case[len("rocky"):], "gpgcheck = 1", "repo_gpgcheck = 1",
                     "gpgkey = file:///etc/pki/rpm-gpg/RPM-GPG-KEY-gpuhost-nvidia-cuda"):
            assert line in repo, repo
        key = "/etc/pki/rpm-gpg/RPM-GPG-KEY-gpuhost-nvidia-cuda"
        assert f"gpg-pubkey-{fingerprint[-8:].lower()}" in host.check_output("rpm -q gpg-pubkey")
    else:
        conf = host.file("/etc/pacman.conf").content_string
        assert "[gpuhost-test]\nSigLevel = Required\nServer = file:///srv/gpuhost-repos/pacman" in conf
        key = "/etc/pacman.d/gpuhost-nvidia-repo.asc"
        assert host.run(f"pacman-key --list-keys {fingerprint}").rc == 0
    # Read with the controller's gpg: the hosts need no gpg since the key is checked by repository_key (#19).
    with tempfile.TemporaryDirectory() as home:
        colons = subprocess.run(["gpg", "--batch", "--homedir", home, "--show-keys", "--with-colons"], input=host.file(key).content,
                                capture_output=True, check=True).stdout.decode()
    assert [line.split(":")[9] for line in colons.splitlines() if line.startswith("fpr")][0] == fingerprint


def test_fabric_manager_only_with_nvswitches(host, case):
    if case == "rocky9":
        assert host.service("nvidia-fabricmanager").is_enabled
        # #20: held at the driver's exact version in a versionlock block of its own (the stream holds only the branch).
        lock = host.file("/etc/dnf/plugins/versionlock.list").content_string
        block = lock.split("# BEGIN gpuhost.nvidia.nvidia_driver lockstep\n")[1].split("# END gpuhost.nvidia.nvidia_driver lockstep")[0]
        assert block.splitlines() == ["nvidia-fabricmanager-580.65.06-*"], block
        assert host.package("python3-dnf-plugin-versionlock").is_installed
    else:
        assert not host.exists("nv-fabricmanager") and not host.package("nvidia-fabric-manager").is_installed


def test_reboot_required_fact_and_report(runs, case):
    first, second = [r for r in runs if not r["check_mode"]][:2]
    assert first["reboot_required"] is True
    assert any(r.startswith("driver packages installed or changed") for r in first["reboot_reasons"]), first
    assert "the nvidia kernel module is not loaded" in first["reboot_reasons"]
    assert (second["reboot_required"], second["reboot_reasons"]) == (True, ["the nvidia kernel module is not loaded"])
    report = "\n".join(first["report"])
    assert "nvidia_driver: installed " in report and f"pinned to {EXPECTED[case]['branch'] if case != 'arch' else 'the installed'}" in report
    assert "nouveau blacklisted in /etc/modprobe.d/gpuhost-nvidia-blacklist-nouveau.conf; initramfs regenerated" in report
    assert "nvidia_driver: reboot required: " in report
    assert "nvidia_driver: already installed: " in "\n".join(second["report"])
    if case == "rocky10":
        assert "nvidia_driver: pinned to 580 with dnf versionlock" in report, report
    if case == "debian13-nvidia":
        assert "nvidia_driver: pinned to 595 with the pinning package nvidia-driver-pinning-595" in report, report


def test_headers_follow_the_kernel_the_host_boots(host, runs, case, gpuhost_instance):
    """#20: the container runs the CI machine's kernel, which Debian did not build; debian13-nvidia has Debian's real
    linux-image-cloud-amd64 installed, so the driver's one apt transaction (#21) brought Debian's real
    linux-headers-cloud-amd64, and check mode on the fresh host (NVIDIA's repository not configured yet) named it."""
    ensured = [r["ensured"] for r in runs]
    # Every run, check mode included, on every package manager, hands the packages it ensured to the roles after it
    # (#21), and each one it names is installed at the end.
    assert ensured and all(e and sorted(e) == sorted(ensured[-1]) for e in ensured), ensured
    missing = [p for p in ensured[-1] if not host.package(p).is_installed]
    assert not missing, (missing, ensured[-1])
    if case not in ("debian12-proprietary", "debian13-nvidia"):
        return
    # Every run, check mode included, hands the packages the role installs by name to the roles after it.
    named = {"debian12-proprietary": {"nvidia-kernel-dkms", "nvidia-smi", "libcuda1"},
             "debian13-nvidia": {"nvidia-kernel-open-dkms", "nvidia-driver-cuda"}}[case]
    assert ensured and all(named <= set(e) for e in ensured), ensured
    follow = "linux-headers-cloud-amd64"
    if case == "debian12-proprietary":
        assert not host.package(follow).is_installed and all(follow not in e for e in ensured)
        return
    assert host.package("linux-image-cloud-amd64").is_installed
    status = host.check_output("dpkg-query -W -f '${db:Status-Abbrev} ${Depends}' " + follow)
    assert status.startswith("ii ") and "linux-headers-" in status, status
    assert all(follow in e and "nvidia-driver-pinning-595" in e for e in ensured), ensured
    prediction = next(r for r in recorded_runs() if r["check"] and gpuhost_instance in r["changed"])
    printed = [p["msg"] for p in prediction["printed"].get(gpuhost_instance, []) if p["task"].endswith(" : " + INSTALL_TASK)]
    assert len(printed) == 1 and follow in printed[0], prediction["printed"]


BAD = {
    "flavour_cuda_secure_boot": ("debian12-proprietary", [
        "Blackwell GPUs (0000:01:00.0) require the open kernel modules",
        "driver branch 535 cannot run CUDA 12.8: it supports CUDA up to 12.2; CUDA 12.8 needs driver 570.26 or newer",
        "Secure Boot is enabled and the distro source on Debian 12",
    ]),
    "unknown_branch": ("debian12-proprietary", ["unknown driver branch 999"]),
    "unsupported_distribution": ("debian12-proprietary", ["unsupported distribution Gentoo 2.17"]),
    "pascal_branch_595": ("debian12-proprietary", [
        "driver branch 595 no longer supports Pascal GPU 0000:01:00.0: its last branch is 580; set nvidia_driver_branch: 580",
    ]),
    "pascal_default_debian13": ("debian13", [
        "driver branch 595 no longer supports Pascal GPU 0000:01:00.0: its last branch is 580; branch 595 is the default of "
        "the nvidia source on Debian 13",
        "set nvidia_driver_branch: 580 where a source offers it",
    ]),
    "hostile_repo_url": ("debian12-proprietary", [
        "nvidia_driver_repo_url: 'file:///srv/gpuhost-repos/apt\\nSigned-By: /tmp/other.asc' holds the control character '\\n'",
    ]),
    "rogue_key": ("rocky9", ["does not match the pinned fingerprint: expected "]),
    "unpinned_key": ("rocky10", [
        "The repository file:///srv/gpuhost-repos/rpm/cuda-rhel10 needs a key URL and the fingerprint the key must have "
        "(nvidia_driver_repo_key_url and nvidia_driver_repo_key_fingerprint): no public source quotes the full fingerprint",
        "Nothing was installed.",
    ]),
}


@pytest.fixture(scope="module")
def bad_runs():
    """bad_inputs.yml once, on one fresh unprepared host per bad request; per host: (stats, changed tasks, failure text)."""
    names = {bad: f"gpuhost-nvidia_driver-bad-{bad.replace('_', '-')}" for bad in BAD}
    images = {}
    for bad, (instance_case, _messages) in BAD.items():
        # The test host image of the case's family (what the scenario's instances run), so DISTRO runs have it too.
        images[bad] = f"localhost/gpuhost-{instance_case.split('-', maxsplit=1)[0]}:latest"
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(BAD)) as pool:
            list(pool.map(lambda bad: start_fresh_host(images[bad], names[bad]), BAD))
        subprocess.run(["podman", "exec", names["rogue_key"], "mkdir", "-p", "/srv/gpuhost-repos"], check=True)
        subprocess.run(["podman", "cp", str(REPOS.resolve() / "rogue"), f"{names['rogue_key']}:/srv/gpuhost-repos/rogue"], check=True)
        with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as inv:
            yaml.safe_dump({"all": {"hosts": {names[bad]: {"bad_case": bad, "ansible_connection": "gpuhost_podman",
                                                           "ansible_python_interpreter": "/usr/bin/python3"} for bad in BAD}}}, inv)
        try:
            result = run_playbook_json(str(SCENARIO / "bad_inputs.yml"), inventory=inv.name)
        finally:
            os.unlink(inv.name)
        repo_files = {bad: subprocess.run(["podman", "exec", names[bad], "ls", "/etc/yum.repos.d", "/etc/apt/sources.list.d"],
                                          capture_output=True, text=True, check=False).stdout for bad in BAD}
        out = {}
        for bad, name in names.items():
            failed = [task["hosts"][name].get("msg", "") for play in result["plays"] for task in play["tasks"]
                      if task["hosts"].get(name, {}).get("failed")]
            out[bad] = (result["stats"][name], changed_tasks(result, name), " ".join(failed), repo_files[bad])
        return out
    finally:
        remove_hosts(list(names.values()))


@pytest.mark.parametrize("bad_case", list(BAD))
def test_bad_input_fails_before_any_change(bad_runs, bad_case):
    stats, changed, message, repo_files = bad_runs[bad_case]
    assert stats["failures"] == 1, stats
    for expected in BAD[bad_case][1]:
        assert expected in message, message
    assert [t for t in changed if not t.startswith("Scene: ")] == [], changed
    assert "gpuhost-nvidia" not in repo_files
    if bad_case == "rogue_key":
        expected_fpr = (REPOS / "key" / "fingerprint").read_text(encoding="utf-8").strip()
        actual_fpr = (REPOS / "rogue" / "fingerprint").read_text(encoding="utf-8").strip()
        assert f"expected {expected_fpr}, got {actual_fpr}" in message
