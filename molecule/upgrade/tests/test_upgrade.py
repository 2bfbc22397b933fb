"""Verify the upgrade scenario (#20): each host moved from its prepare branch or version to its converge one.

The shared tests check that check mode on the prepared hosts predicted exactly what the move changed and that a check
after idempotence changes nothing. These tests read the installed versions, the pins and the role's report.
"""

from __future__ import annotations

import json

import pytest

from gpuhost_testinfra import test_check_after_converge_changes_nothing, test_check_mode_predicted_converge  # noqa: F401  pylint: disable=unused-import

PREFIX = "gpuhost-upgrade-"
# case: (from, to, packages that must be at `to`)
MOVES = {
    "debian12": ("580.159.04", "580.126.20",
                 ["nvidia-kernel-open-dkms", "nvidia-driver-cuda", "nvidia-smi", "nvidia-persistenced", "nvidia-fabricmanager-580"]),
    "rocky9": ("570.172.08", "580.65.06", ["nvidia-driver", "kmod-nvidia-open-dkms", "nvidia-persistenced", "nvidia-fabricmanager"]),
    "rocky10": ("580.65.06", "595.71.05", ["nvidia-driver", "kmod-nvidia-open-dkms", "nvidia-persistenced"]),
    "arch": ("580.76.05", "590.48.01", ["nvidia-utils", "nvidia-open-dkms"]),
}
ACTION = {"debian12": "downgrade", "rocky9": "upgrade", "rocky10": "upgrade", "arch": "upgrade"}


@pytest.fixture(scope="module")
def case(gpuhost_instance):
    return gpuhost_instance[len(PREFIX):]


@pytest.fixture(scope="module")
def runs(host):
    return [json.loads(line) for line in host.file("/root/upgrade_runs.jsonl").content_string.splitlines()]


def _version(host, case, name):
    if case == "debian12":
        return host.check_output("dpkg-query -W -f '${Version}' %s" % name)
    if case == "arch":
        return host.check_output("pacman -Q %s" % name).split()[1]
    return host.check_output("rpm -q --qf '%%{VERSION}' %s" % name)


def test_the_driver_moved(host, case):
    _old, new, names = MOVES[case]
    for name in names:
        assert _version(host, case, name).startswith(new), name


# Check mode on Arch: the new pacman repository is not there yet (check mode did not write it), so the move is named by
# the branch asked for.
PREDICTED_TO = {"arch": "branch 590"}


def test_the_move_was_predicted_reported_and_is_a_reboot_reason(case, runs):
    old, new, _names = MOVES[case]
    summary = "%s -> %s" % (old, new)
    predicted = "%s -> %s" % (old, PREDICTED_TO.get(case, new))
    check, real, again = [r for r in runs if r["step"] == "to"][:3]
    assert check["check_mode"] and not real["check_mode"] and not again["check_mode"]
    assert "nvidia_driver: driver to move %s (%s)" % (predicted, ACTION[case]) in check["report"], check["report"]
    assert "nvidia_driver: driver moved %s (%s)" % (summary, ACTION[case]) in real["report"], real["report"]
    reason = "driver %s (%s): the new kernel module loads at the next boot"
    assert reason % (predicted, ACTION[case]) in check["reboot_reasons"], check["reboot_reasons"]
    assert reason % (summary, ACTION[case]) in real["reboot_reasons"], real["reboot_reasons"]
    reason = reason % (summary, ACTION[case])
    # The second run finds the driver where the first left it.
    assert not [line for line in again["report"] if "driver moved" in line], again["report"]
    assert reason not in again["reboot_reasons"]


def test_the_pin_holds_the_new_branch_or_version(host, case):
    _old, new, _names = MOVES[case]
    if case == "debian12":
        pref = host.file("/etc/apt/preferences.d/gpuhost-nvidia-driver.pref").content_string
        assert f"Pin: version {new}-*" in pref and "Pin-Priority: 1001" in pref, pref
    elif case == "rocky9":
        stream = host.file("/etc/dnf/modules.d/nvidia-driver.module").content_string
        assert "stream=580-open" in stream and "state=enabled" in stream, stream
    elif case == "rocky10":
        lock = host.file("/etc/dnf/plugins/versionlock.list").content_string
        block = lock.split("# BEGIN gpuhost.nvidia.nvidia_driver\n")[1].split("# END gpuhost.nvidia.nvidia_driver")[0].splitlines()
        assert block and all(line.endswith("-595.*") for line in block), block
    else:
        assert "IgnorePkg = " in host.file("/etc/pacman.conf").content_string


def test_fabric_manager_follows_the_driver_on_the_nvswitch_host(host, case):
    if case not in ("rocky9", "debian12"):
        pytest.skip("only rocky9 and debian12 have NVSwitches")
    if case == "debian12":
        assert _version(host, case, "nvidia-fabricmanager-580") == _version(host, case, "nvidia-driver-cuda") == "580.126.20-1"
        assert host.service("nvidia-fabricmanager").is_enabled
        return
    assert _version(host, case, "nvidia-fabricmanager") == _version(host, case, "nvidia-driver") == "580.65.06"
    # EL renamed Fabric Manager at 580: the 570 package is gone, the unit is enabled.
    assert not host.package("nvidia-fabric-manager").is_installed
    assert host.service("nvidia-fabricmanager").is_enabled


LOCKSTEP_PREF = "/etc/apt/preferences.d/gpuhost-nvidia-driver-lockstep.pref"
BRANCH_ONLY = "Package: nvidia-fabricmanager-580\nPin: version 580.*\nPin-Priority: 1001\n"


def _policy(host, parts):
    """`apt-cache policy` of Fabric Manager with only these preferences files (a scratch preferences.d)."""
    script = "d=$(mktemp -d) && %s && apt-cache -o Dir::Etc::Preferences=/dev/null -o Dir::Etc::PreferencesParts=$d policy nvidia-fabricmanager-580"
    return host.check_output(script % " && ".join(parts + ["true"]))


def test_apt_does_not_move_fabric_manager_without_the_driver(host, case):
    """#20: a public bug had Fabric Manager 590 beside driver 580, because only a branch pin held it. The repository
    offers Fabric Manager 580.159.04 beside the driver's 580.126.20; the role's hold keeps it at the driver's."""
    if case != "debian12":
        pytest.skip("the apt NVSwitch host")
    pref = host.file(LOCKSTEP_PREF).content_string
    assert "Package: nvidia-fabricmanager-580\nPin: version 580.126.20-*\nPin-Priority: 1001" in pref, pref
    assert "Package: nvidia-fabricmanager-580\nPin: version *\nPin-Priority: -1" in pref, pref
    policy = host.check_output("apt-cache policy nvidia-fabricmanager-580")
    assert "Candidate: 580.126.20-1" in policy and "580.159.04-1 -1" in policy, policy
    # Neither an install by name nor an upgrade moves it: nothing to do.
    assert "Inst nvidia-fabricmanager-580" not in host.check_output("apt-get install -s nvidia-fabricmanager-580")
    assert "nvidia-fabricmanager-580" not in host.check_output("apt-get -s dist-upgrade")
    # What the role's file changes: with the branch pin alone (580.*), apt would take the newer release on its own.
    alone = _policy(host, ["printf '%s' > $d/gpuhost-nvidia-driver.pref" % BRANCH_ONLY])
    assert "Candidate: 580.159.04-1" in alone, alone
    held = _policy(host, ["printf '%s' > $d/gpuhost-nvidia-driver.pref" % BRANCH_ONLY, "cp %s $d/" % LOCKSTEP_PREF])
    assert "Candidate: 580.126.20-1" in held, held


def test_fabric_manager_versionlock_moved_with_the_driver(host, case):
    if case != "rocky9":
        pytest.skip("the dnf NVSwitch host")
    lock = host.file("/etc/dnf/plugins/versionlock.list").content_string
    block = lock.split("# BEGIN gpuhost.nvidia.nvidia_driver lockstep\n")[1].split("# END gpuhost.nvidia.nvidia_driver lockstep")[0]
    # The 580 name at the driver's exact version; the 570 entry (nvidia-fabric-manager-570.172.08-*) went with the move.
    assert block.splitlines() == ["nvidia-fabricmanager-580.65.06-*"], block
