"""state: absent of every role on a host that prepare.yml converged with state present (playbooks/site.yml).

The shared test checks that check mode, run on the converged host, predicted exactly what the removal then changed;
idempotence (in the test_sequence) that a second removal changes nothing. Here: every file under the directories the
roles write to is back to its pre-converge checksum (the user's daemon.json, containerd config, compose override and
modprobe.d file byte for byte; the roles' own files gone), and no package the roles installed from the driver and
toolkit tables is left.
"""

from __future__ import annotations

from gpuhost_testinfra import test_check_mode_predicted_converge  # noqa: F401  pylint: disable=unused-import

BASELINE = "/root/gpuhost-absent-baseline.txt"


def _files_and_packages(text: str) -> tuple[list[str], set[str]]:
    files, _sep, packages = text.partition("--- packages\n")
    return files.splitlines(), set(packages.split())


# Packages the roles install and leave on purpose (gnupg for the key checks, PyYAML for the modules, DKMS with the
# driver's module packages; see the roles' docs): the files they ship are theirs, not the roles'.
KEPT_PACKAGES = {"dkms", "gnupg", "python3-yaml", "ca-certificates"}


def _owner(host, path: str) -> str:
    return host.run("dpkg-query -S %s", path).stdout.split(":")[0]


def test_every_file_is_back_to_its_checksum(host):
    before = _files_and_packages(host.file(BASELINE).content_string)[0]
    after = _files_and_packages(host.check_output("/root/gpuhost-absent-state.sh"))[0]
    assert any(line.endswith(" /etc/docker/daemon.json") for line in before), "prepare recorded no daemon.json"
    kept = [line for line in set(after) - set(before) if _owner(host, line.split("  ", 1)[1]) in KEPT_PACKAGES]
    after = [line for line in after if line not in kept]
    assert after == before, ("files that differ from the baseline:\n  added or changed: %s\n  missing or changed: %s"
                             % (sorted(set(after) - set(before)), sorted(set(before) - set(after))))


def test_the_user_keys_were_there_while_converged(host):
    # The module kept a backup of the merged file: proof that the runtime really was in daemon.json in between.
    backups = host.check_output("ls /etc/docker").split()
    assert any(name.startswith("daemon.json.") and name.endswith("~") for name in backups), backups


def test_driver_and_toolkit_packages_are_gone(host):
    before = _files_and_packages(host.file(BASELINE).content_string)[1]
    after = _files_and_packages(host.check_output("/root/gpuhost-absent-state.sh"))[1]
    added = sorted(after - before)
    nvidia = [name for name in added if "nvidia" in name or "cuda" in name]
    assert nvidia == [], nvidia
    for name in ("nvidia-kernel-open-dkms", "nvidia-driver-cuda", "nvidia-smi", "nvidia-persistenced", "nvidia-driver-pinning-595",
                 "python3-pynvml", "nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container1",
                 "libnvidia-container-tools"):
        assert not host.package(name).is_installed, name


def test_the_records_are_gone(host):
    for path in ("/var/lib/gpuhost/nvidia_container_runtime.json", "/var/lib/gpuhost/gpu_compose_override.json",
                 "/var/lib/gpuhost/nvidia_cdi_spec.json", "/var/lib/gpuhost-nvidia/cdi-nvidia.json"):
        assert not host.file(path).exists, path
