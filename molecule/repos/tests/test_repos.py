"""The local signed test repositories, used for real by apt, dnf and pacman.

Each test runs on the one family it names (the others skip). Negative cases use the
package managers with throwaway configuration under /tmp, so the converged state is untouched.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpuhost_testinfra import run_playbook_json
from gpuhost_testinfra import test_check_after_converge_changes_nothing  # noqa: F401  pylint: disable=unused-import

R = "/srv/gpuhost-repos"
CACHE = Path(os.environ.get("MOLECULE_PROJECT_DIRECTORY", ".")) / ".cache" / "repos" / "current"
TOOLKIT = ["nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools", "libnvidia-container1"]


def only(instance: str, family: str) -> None:
    if f"-{family}-" not in instance:
        pytest.skip(f"{family} only")


# --- apt on Debian 12 ---------------------------------------------------------------------

def _apt(host, sources_line: str, *args: str):
    """`apt-get update`, then `apt-get ARGS`, with a throwaway sources list and lists dir.

    Returns (update, command); the host's own apt configuration is left alone.
    """
    host.run_expect([0], "rm -rf /tmp/apt-t && mkdir -p /tmp/apt-t/lists/partial /tmp/apt-t/archives/partial")
    host.run_expect([0], f"echo '{sources_line}' > /tmp/apt-t/sources.list")
    opts = ("-o Dir::Etc::sourcelist=/tmp/apt-t/sources.list -o Dir::Etc::sourceparts=- "
            "-o Dir::State::Lists=/tmp/apt-t/lists -o Dir::Cache::archives=/tmp/apt-t/archives")
    update = host.run(f"cd /tmp/apt-t && apt-get {opts} update")
    return update, (host.run(f"cd /tmp/apt-t && apt-get {opts} {' '.join(args)}") if args else None)


def test_debian_installed_the_pinned_toolkit_from_the_signed_repo(host, gpuhost_instance):
    only(gpuhost_instance, "debian12")
    for name in TOOLKIT:
        assert host.package(name).version == "1.17.8-1", name
    sources = host.file("/etc/apt/sources.list.d/gpuhost-test.sources").content_string
    assert "Signed-By: /etc/apt/keyrings/gpuhost-test.gpg" in sources
    policy = host.check_output("apt-cache policy nvidia-container-toolkit")
    assert "file:/srv/gpuhost-repos/apt ./ Packages" in policy
    assert "1.18.0-1" in policy  # the newer version is there; the pin kept 1.17.8-1


def test_debian_tampered_package_fails_its_hash_check(host, gpuhost_instance):
    only(gpuhost_instance, "debian12")
    line = f"deb [signed-by=/etc/apt/keyrings/gpuhost-test.gpg] file:{R}/tampered/apt ./"
    update, cmd = _apt(host, line, "download", "libnvidia-container1=1.18.0-1")
    assert update.rc == 0, update.stderr
    assert cmd.rc != 0
    assert "Hash Sum mismatch" in cmd.stderr or "Hashes of expected file" in cmd.stderr, cmd.stderr


def test_debian_repo_signed_by_another_key_is_refused(host, gpuhost_instance):
    only(gpuhost_instance, "debian12")
    host.run_expect([0], f"cp {R}/rogue/public.gpg /tmp/rogue.gpg")
    update, _none = _apt(host, f"deb [signed-by=/tmp/rogue.gpg] file:{R}/apt ./")
    assert "NO_PUBKEY" in update.stderr or "is not signed" in update.stderr, update.stderr


# --- dnf on the emulated Rocky 9 ----------------------------------------------------------

def _dnf_installroot(host, repo: str, key: str, package: str):
    """dnf install into a throwaway root from one repo, gpgcheck and repo_gpgcheck on."""
    return host.run(
        f"rm -rf /tmp/dnf-t && dnf -y --installroot /tmp/dnf-t --releasever 9 --disablerepo='*' "
        f"--repofrompath=t,file://{R}/{repo} --setopt=t.gpgcheck=1 --setopt=t.repo_gpgcheck=1 "
        f"--setopt=t.gpgkey=file://{R}/{key} install {package}"
    )


def test_rocky_dnf_installed_the_pinned_toolkit_with_signature_checks(host, gpuhost_instance):
    only(gpuhost_instance, "rocky9")
    for name in TOOLKIT:
        assert host.check_output(f"rpm -q --qf '%{{VERSION}}-%{{RELEASE}}' {name}") == "1.17.8-1", name
    repo = host.file("/etc/yum.repos.d/gpuhost-test-libnvidia-container.repo").content_string
    assert "gpgcheck = 1" in repo and "repo_gpgcheck = 1" in repo
    assert host.run("rpm -K /srv/gpuhost-repos/rpm/libnvidia-container/nvidia-container-toolkit-1.17.8-1.x86_64.rpm").stdout.strip().endswith(
        "digests signatures OK")


def test_rocky_untampered_control_install_succeeds(host, gpuhost_instance):
    only(gpuhost_instance, "rocky9")
    cmd = _dnf_installroot(host, "rpm/libnvidia-container", "key/public.asc", "libnvidia-container1-1.18.0-1")
    assert cmd.rc == 0, cmd.stdout + cmd.stderr


def test_rocky_tampered_package_is_refused(host, gpuhost_instance):
    only(gpuhost_instance, "rocky9")
    cmd = _dnf_installroot(host, "tampered/rpm", "key/public.asc", "libnvidia-container1-1.18.0-1")
    assert cmd.rc != 0
    assert "incorrect checksum" in cmd.stdout + cmd.stderr
    assert "DIGESTS SIGNATURES NOT OK" in host.run(f"rpm -K {R}/tampered/rpm/libnvidia-container1-1.18.0-1.x86_64.rpm").stdout


def test_rocky_repo_with_an_unpinned_key_is_refused(host, gpuhost_instance):
    only(gpuhost_instance, "rocky9")
    cmd = _dnf_installroot(host, "rpm/libnvidia-container", "rogue/public.asc", "libnvidia-container1-1.18.0-1")
    assert cmd.rc != 0
    assert "repomd.xml GPG signature verification error" in cmd.stdout + cmd.stderr or "Bad GPG signature" in cmd.stdout + cmd.stderr, cmd.stderr


def test_rocky_dnf_module_streams_come_from_the_repo_metadata(host, gpuhost_instance):
    only(gpuhost_instance, "rocky9")
    cmd = host.run(f"dnf --releasever 9 --disablerepo='*' --repofrompath=c,file://{R}/rpm/cuda-rhel9 --setopt=c.gpgcheck=1 "
                   f"--setopt=c.repo_gpgcheck=1 --setopt=c.gpgkey=file://{R}/key/public.asc -y module list nvidia-driver")
    assert cmd.rc == 0, cmd.stderr
    assert "580-open" in cmd.stdout and "open-dkms" in cmd.stdout


# --- pacman on the emulated Arch host -----------------------------------------------------

def _pacman_tmp(host, server: str, gpgdir: str = "/etc/pacman.d/gnupg"):
    """pacman -Sw (download + verify) from one repo into a throwaway db and cache."""
    host.run_expect([0], "rm -rf /tmp/pac-t && mkdir -p /tmp/pac-t/db /tmp/pac-t/cache")
    conf = f"[options]\\nArchitecture = auto\\nSigLevel = Required\\n[gpuhost-test]\\nServer = {server}\\n"
    host.run_expect([0], f"printf '{conf}' > /tmp/pac-t/pacman.conf")
    base = f"pacman --noconfirm --config /tmp/pac-t/pacman.conf --dbpath /tmp/pac-t/db --cachedir /tmp/pac-t/cache --gpgdir {gpgdir}"
    sync = host.run(f"{base} -Sy")
    return sync, host.run(f"{base} -Sw libnvidia-container")


def test_arch_pacman_installed_the_toolkit_with_signatures_required(host, gpuhost_instance):
    only(gpuhost_instance, "arch")
    assert host.check_output("pacman -Q nvidia-container-toolkit libnvidia-container").splitlines() == [
        "nvidia-container-toolkit 1.17.8-1", "libnvidia-container 1.17.8-1"]
    assert "SigLevel = Required" in host.file("/etc/pacman.conf").content_string
    assert host.file("/usr/share/gpuhost-stub/nvidia-container-toolkit/STUB").exists


def test_arch_untampered_control_download_succeeds(host, gpuhost_instance):
    only(gpuhost_instance, "arch")
    sync, download = _pacman_tmp(host, f"file://{R}/pacman")
    assert sync.rc == 0 and download.rc == 0, sync.stderr + download.stderr


def test_arch_tampered_package_is_refused(host, gpuhost_instance):
    only(gpuhost_instance, "arch")
    sync, download = _pacman_tmp(host, f"file://{R}/tampered/pacman")
    assert sync.rc == 0, sync.stderr
    assert download.rc != 0
    assert "invalid or corrupted package" in download.stderr or "signature" in download.stderr, download.stderr


def test_arch_repo_signed_by_an_untrusted_key_is_refused(host, gpuhost_instance):
    only(gpuhost_instance, "arch")
    host.run_expect([0], f"rm -rf /tmp/pac-gpg && pacman-key --gpgdir /tmp/pac-gpg --init >/dev/null 2>&1 && "
                         f"pacman-key --gpgdir /tmp/pac-gpg --add {R}/rogue/public.asc >/dev/null 2>&1")
    sync, _download = _pacman_tmp(host, f"file://{R}/pacman", gpgdir="/tmp/pac-gpg")
    host.run("gpgconf --homedir /tmp/pac-gpg --kill all")
    assert sync.rc != 0
    assert "signature" in sync.stderr.lower(), sync.stderr


# --- the pinned-fingerprint refusal, all families -----------------------------------------

def test_a_key_that_is_not_the_pinned_one_stops_the_play_before_any_change(gpuhost_instance):
    rogue = (CACHE / "rogue" / "fingerprint").read_text().strip()
    playbook = str(Path(os.environ["MOLECULE_SCENARIO_DIRECTORY"]) / "converge.yml")
    result = run_playbook_json(playbook, "-e", f"gpuhost_test_repo_fingerprint={rogue}", limit=gpuhost_instance)
    stats = result["stats"][gpuhost_instance]
    assert stats["failures"] == 1 and stats["changed"] == 0, stats
    failed = [t for p in result["plays"] for t in p["tasks"] if t["hosts"].get(gpuhost_instance, {}).get("failed")]
    assert [t["task"]["name"] for t in failed] == ["Refuse a repository key whose fingerprint is not the pinned one"]
    assert f"is not the pinned key {rogue}" in failed[0]["hosts"][gpuhost_instance]["msg"]
