"""Verify gpu_settings against each test host's real state: Debian 12, emulated Rocky 9 and emulated Arch.

There is no GPU and no nvidia kernel module in the containers: the units are installed and enabled but not expected to
start, and the settings module must report that state instead of failing the play. What differs per family (packages,
where they come from, the persistence daemon's user and flags) is in FAMILY; everything else is asserted on every host.
"""

from __future__ import annotations

import json

import pytest

from gpuhost_testinfra import test_check_after_converge_changes_nothing, test_check_mode_predicted_converge  # noqa: F401  pylint: disable=unused-import

SPEC = "/etc/gpuhost/gpu_settings.json"
SCRIPT = "/usr/local/libexec/gpuhost/gpu-settings"
UNIT = "/etc/systemd/system/gpuhost-gpu-settings.service"
DROPIN = "/etc/systemd/system/nvidia-persistenced.service.d/gpuhost-persistence-mode.conf"

REPO = "/srv/gpuhost-repos"
# Per family: the packages the role installs and the version/origin they must have, and the nvidia-persistenced
# command line the drop-in sets (Debian's unit runs it as nvpd; NVIDIA's rpm unit as root; Arch's as nvidia-persistenced).
FAMILY = {
    "debian12": {
        "packages": {"nvidia-persistenced": None, "nvidia-smi": None, "python3-pynvml": None},
        "persistenced": "/usr/bin/nvidia-persistenced --user nvpd --persistence-mode",
    },
    "rocky9": {
        "packages": {"nvidia-persistenced": "580.65.06-1.el9", "nvidia-driver-cuda": "580.65.06-1.el9",
                     "nvidia-driver-cuda-libs": "580.65.06-1.el9"},
        "persistenced": "/usr/bin/nvidia-persistenced --persistence-mode --verbose",
    },
    "arch": {
        "packages": {"nvidia-utils": "580.76.05-1", "python-nvidia-ml-py": "12.575.51-1"},
        "persistenced": "/usr/bin/nvidia-persistenced --user nvidia-persistenced --persistence-mode --verbose",
    },
}


@pytest.fixture(scope="module")
def family(gpuhost_instance: str) -> str:
    return gpuhost_instance.split("-")[1]


FAKE_SMI = r"""#!/bin/sh
echo "$*" >> /tmp/fake-smi.log
case "$*" in
  --query-gpu=*)
    echo "0, GPU-5c6d7e8f-1111-4222-8333-444455556666, 00000000:07:00.0, NVIDIA A100-SXM4-40GB, Enabled"
    echo "1, GPU-0a1b2c3d-0000-4000-8000-000000000001, 00000000:2A:00.0, NVIDIA A100-SXM4-40GB, Disabled" ;;
  *" -lgi") echo "No GPU instances found: Not Found"; exit 6 ;;
  *" -cgi 3g.20gb") echo "Successfully created GPU instance ID  2 on GPU  0 using profile MIG 3g.20gb (ID  9)" ;;
  *" -cgi 1g.5gb") echo "Successfully created GPU instance ID  9 on GPU  0 using profile MIG 1g.5gb (ID 19)" ;;
esac
"""


def test_packages_are_installed(host, family):
    for name, version in FAMILY[family]["packages"].items():
        package = host.package(name)
        assert package.is_installed, name
        if family == "rocky9":
            assert f"{package.version}-{package.release}" == version, name
        elif family == "arch":
            assert package.version == version, name  # pacman's version includes the pkgrel


def test_emulated_hosts_installed_from_the_signed_test_repository(host, family):
    """The packages came through the package manager from the stub repository, not from anything else on the host."""
    if family == "debian12":
        pytest.skip("Debian installs the real packages from its own mirror")
    if family == "rocky9":
        listed = host.check_output("dnf -q list --installed nvidia-persistenced nvidia-driver-cuda nvidia-driver-cuda-libs")
        origins = {line.split()[0]: line.split()[-1] for line in listed.splitlines() if line.startswith("nvidia-")}
        assert origins == {f"{name}.x86_64": "@gpuhost-test-cuda-rhel9" for name in FAMILY[family]["packages"]}, listed
        assert "stream=580-open" in host.file("/etc/dnf/modules.d/nvidia-driver.module").content_string
        assert host.check_output("rpm -qf /usr/bin/nvidia-smi --qf '%{NAME}\\n'").splitlines().count("nvidia-driver-cuda") == 1
    else:
        assert host.check_output("pacman -Sl gpuhost-test").count(" [installed]") >= 2
        assert host.check_output("pacman -Qo /usr/bin/nvidia-persistenced") == "/usr/bin/nvidia-persistenced is owned by nvidia-utils 580.76.05-1"
    for name in FAMILY[family]["packages"]:
        assert host.file(f"/usr/share/gpuhost-stub/{name}/STUB").exists, name


def test_persistenced_is_enabled_with_persistence_mode_on(host, family):
    expected = FAMILY[family]["persistenced"]
    dropin = host.file(DROPIN)
    assert (dropin.user, dropin.group, dropin.mode) == ("root", "root", 0o644)
    lines = [line for line in dropin.content_string.splitlines() if line and not line.startswith("#")]
    assert lines == ["[Service]", "ExecStart=", f"ExecStart={expected}"]
    assert host.service("nvidia-persistenced").is_enabled
    # systemd has loaded the drop-in: the effective command line is ours.
    exec_start = host.check_output("systemctl show -p ExecStart nvidia-persistenced.service")
    assert f"argv[]={expected} ;" in exec_start
    assert host.check_output("systemctl show -p DropInPaths --value nvidia-persistenced.service").split() == [DROPIN]


def test_boot_unit_is_installed_enabled_and_ordered_after_persistenced(host):
    unit = host.file(UNIT)
    assert (unit.user, unit.mode) == ("root", 0o644)
    assert host.service("gpuhost-gpu-settings").is_enabled
    props = dict(
        line.split("=", 1)
        for line in host.check_output("systemctl show -p After -p Wants -p Type -p RemainAfterExit -p WantedBy gpuhost-gpu-settings.service").splitlines()
    )
    assert "nvidia-persistenced.service" in props["After"].split()
    assert "nvidia-persistenced.service" in props["Wants"].split()
    assert (props["Type"], props["RemainAfterExit"]) == ("oneshot", "yes")
    assert "ExecStart=/usr/bin/python3 %s --spec %s --nvidia-smi /usr/bin/nvidia-smi" % (SCRIPT, SPEC) in unit.content_string


def test_spec_file_holds_the_role_spec(host):
    spec = host.file(SPEC)
    assert (spec.user, spec.mode) == ("root", 0o644)
    assert json.loads(spec.content_string) == {
        "gpus": ["all"],
        "persistence_mode": True,
        "compute_mode": "EXCLUSIVE_PROCESS",
        "power_limit": 250,
        "applications_clocks": {"reset": True},
        "locked_clocks": {"min_mhz": 1200, "max_mhz": 1400},
        "mig_layout": [
            {"profile": "3g.20gb", "compute_instances": ["1c.3g.20gb", "2c.3g.20gb"]},
            {"profile": "1g.5gb", "count": 2},
        ],
        "nvidia_smi": "/usr/bin/nvidia-smi",
    }
    assert host.file(SCRIPT).mode == 0o644


def test_boot_script_applies_the_same_settings(host):
    """Run the installed script against a stand-in nvidia-smi and check every argument list it runs."""
    host.run("rm -f /tmp/fake-smi.log /tmp/fake-smi")
    host.run("cat > /tmp/fake-smi <<'EOF'\n%sEOF\nchmod 0755 /tmp/fake-smi" % FAKE_SMI)
    result = host.run("/usr/bin/python3 %s --spec %s --nvidia-smi /tmp/fake-smi --driver-check %s" % (SCRIPT, SPEC, SPEC))
    assert result.rc == 0, result.stdout + result.stderr
    calls = host.file("/tmp/fake-smi.log").content_string.splitlines()
    assert calls == [
        "--query-gpu=index,uuid,pci.bus_id,name,mig.mode.current --format=csv,noheader",
        "-i 0000:07:00.0 -pm 1",
        "-i 0000:07:00.0 -c EXCLUSIVE_PROCESS",
        "-i 0000:07:00.0 -pl 250",
        "-i 0000:07:00.0 -rac",
        "-i 0000:07:00.0 -lgc 1200,1400",
        "mig -i 0000:07:00.0 -lgi",
        "mig -i 0000:07:00.0 -cgi 3g.20gb",
        "mig -i 0000:07:00.0 -gi 2 -cci 1c.3g.20gb",
        "mig -i 0000:07:00.0 -gi 2 -cci 2c.3g.20gb",
        "mig -i 0000:07:00.0 -cgi 1g.5gb",
        "mig -i 0000:07:00.0 -gi 9 -cci 1g.5gb",
        "mig -i 0000:07:00.0 -cgi 1g.5gb",
        "mig -i 0000:07:00.0 -gi 9 -cci 1g.5gb",
        "-i 0000:2a:00.0 -pm 1",
        "-i 0000:2a:00.0 -c EXCLUSIVE_PROCESS",
        "-i 0000:2a:00.0 -pl 250",
        "-i 0000:2a:00.0 -rac",
        "-i 0000:2a:00.0 -lgc 1200,1400",
    ]


def test_boot_script_without_driver_exits_quietly(host):
    result = host.run("/usr/bin/python3 %s --spec %s" % (SCRIPT, SPEC))
    assert result.rc == 0
    assert "the nvidia kernel module is not loaded (/proc/driver/nvidia/version is missing); nothing to apply" in result.stdout


def test_nvidia_smi_cannot_reach_a_driver(host):
    result = host.run("nvidia-smi")
    assert result.rc != 0


def test_settings_module_reported_the_host_state_without_failing(host):
    result = json.loads(host.file("/etc/gpuhost/test-gpu-settings-result.json").content_string)
    assert result["state"] in ("driver_not_loaded", "no_gpu"), result
    assert result["changed"] is False
    assert result["skipped"] is True
    assert "failed" not in result or result["failed"] is False
    assert (result["gpus"], result["reboot_required"], result["reset_required"], result["applied"]) == ([], False, False, [])
