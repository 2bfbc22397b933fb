# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""gpuhost.nvidia.nvidia_driver_host (#21): what the driver role plans from, in one read-only call.

The package listings are real: dpkg-query on Debian 12 (this machine and the debian12 test host), rpm 4.18 on the emulated
rocky9 host with the stub cuda-rhel9 nvidia-persistenced (epoch 3) and nvidia-fabricmanager (no epoch) installed, and
pacman -Q on the emulated arch host.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
import yaml

from ansible.module_utils import basic
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _driver_probe
from ansible_collections.gpuhost.nvidia.plugins.modules import nvidia_driver_host

from test_driver_vars import ROLE
from test_driver_vars import Host as RoleVars

# dpkg-query -W -f='${Package}\t${Architecture}\t${db:Status-Abbrev}\t${Version}\n' (Debian 12); the last two lines: a
# removed package whose configuration files remain (rc) and an i386 package beside the native amd64 ones.
DPKG = (
    "adduser\tall\tii \t3.134\n"
    "ca-certificates\tall\tii \t20230311+deb12u1\n"
    "dpkg\tamd64\tii \t1.21.22\n"
    "libc6\tamd64\tii \t2.36-9+deb12u14\n"
    "nvidia-open-kernel-dkms\tamd64\tii \t535.261.03-1~deb12u1\n"
    "nvidia-kernel-dkms\tamd64\trc \t535.261.03-1~deb12u1\n"
    "libnvidia-glcore\ti386\tii \t535.261.03-1~deb12u1\n"
)
RPM = "nvidia-fabricmanager\t(none)\t580.65.06\t1\tx86_64\nnvidia-persistenced\t3\t580.65.06\t1.el9\tx86_64\n"
PACMAN = "gpuhost-emulated-base 1-1\ngpuhost-emulated-libc 1-1\nnvidia-utils 580.76.05-1\n"


def test_dpkg_lists_installed_packages_as_package_facts_does():
    packages = _driver_probe.parse_installed("apt", DPKG)
    assert packages["nvidia-open-kernel-dkms"] == [
        {"name": "nvidia-open-kernel-dkms", "version": "535.261.03-1~deb12u1", "arch": "amd64", "source": "apt"}]
    # Removed with its configuration kept: not installed. Another architecture: name:arch, as python-apt names it.
    assert "nvidia-kernel-dkms" not in packages
    assert "libnvidia-glcore:i386" in packages and "libnvidia-glcore" not in packages
    assert packages["adduser"][0]["version"] == "3.134"


def test_rpm_versions_leave_epoch_and_release_apart():
    packages = _driver_probe.parse_installed("rpm", RPM)
    assert packages["nvidia-persistenced"] == [
        {"name": "nvidia-persistenced", "epoch": 3, "version": "580.65.06", "release": "1.el9", "arch": "x86_64", "source": "rpm"}]
    assert packages["nvidia-fabricmanager"][0]["epoch"] is None


def test_pacman_versions_as_pacman_prints_them():
    assert _driver_probe.parse_installed("pacman", PACMAN)["nvidia-utils"] == [{"name": "nvidia-utils", "version": "580.76.05-1", "source": "pacman"}]
    with pytest.raises(ValueError):
        _driver_probe.parse_installed("portage", "")


def test_the_role_gets_only_the_packages_it_reads():
    packages = _driver_probe.parse_installed("apt", DPKG)
    assert list(_driver_probe.select_installed(packages, ["ca-certificates", "absent"], ["nvidia", "libnvidia"])) == [
        "ca-certificates", "libnvidia-glcore:i386", "nvidia-open-kernel-dkms"]
    assert _driver_probe.select_installed(packages, [], []) == {}


def test_the_package_databases_are_read_in_the_roles_order():
    assert _driver_probe.database_order("dnf") == ["rpm", "apt", "pacman"]
    assert _driver_probe.database_order("apt") == ["apt", "pacman", "rpm"]
    assert _driver_probe.database_order("none") == ["apt", "pacman", "rpm"]


@pytest.mark.parametrize("found, output, expected", [
    (False, "", None),
    (False, "SecureBoot enabled\n", None),  # no mokutil: whatever else says so is not read
    (True, "SecureBoot enabled\n", True),
    (True, "SecureBoot disabled\n", False),
    (True, "SecureBoot disabled\nPlatform is in Setup Mode\n", False),
    (True, "SecureBoot enabled\r\n", True),
    (True, "  SecureBoot enabled  \n", True),
    # Unknown, never off: no EFI variables (mokutil says so on standard error and exits non-zero), nothing printed, a
    # failed run, text that only resembles a state line, and both lines at once.
    (True, "", None),
    (True, None, None),
    (True, "EFI variables are not supported on this system\n", None),
    (True, "SecureBoot enabledX\n", None),
    (True, "Is SecureBoot enabled? no\n", None),
    (True, "SecureBoot  enabled\n", None),
    (True, "secureboot enabled\n", None),
    (True, "SecureBoot unknown\n", None),
    (True, "SecureBoot enabled\nSecureBoot disabled\n", None),
    (True, "$(reboot)\n", None),
    (True, 0, None),
    (True, ["SecureBoot enabled"], None),
])
def test_secure_boot_from_mokutil(found, output, expected):
    assert _driver_probe.secure_boot_enabled(found, output) is expected


@pytest.mark.parametrize("found, rc, output, error, reason", [
    (False, None, "", "", "/usr/bin/mokutil does not exist"),
    (True, 0, "SecureBoot enabled\n", "", None),
    (True, 1, "SecureBoot disabled\n", "", None),
    (True, 255, "", "EFI variables are not supported on this system\n",
     "/usr/bin/mokutil --sb-state exited 255 and printed 'EFI variables are not supported on this system'"),
    (True, 0, "", "", "/usr/bin/mokutil --sb-state exited 0 and printed nothing"),
    (True, None, "", "[Errno 13] Permission denied", "/usr/bin/mokutil --sb-state could not run: [Errno 13] Permission denied"),
])
def test_why_the_secure_boot_state_is_unknown(found, rc, output, error, reason):
    assert _driver_probe.secure_boot_unknown("/usr/bin/mokutil", found, rc, output, error) == reason


@pytest.mark.skipif(shutil.which("dpkg-query") is None, reason="tool missing: dpkg-query")
def test_the_dpkg_query_format_reads_this_machine():
    out = subprocess.run(_driver_probe.INSTALLED_QUERIES["apt"], capture_output=True, text=True, check=True,
                         env=dict(os.environ, LC_ALL="C")).stdout
    packages = _driver_probe.parse_installed("apt", out)
    assert packages["dpkg"][0]["arch"] != "all" and packages["dpkg"][0]["version"]


class Host:
    """A host for the module: its commands answer from ``answers`` (by the command's name), every call is recorded."""

    def __init__(self, monkeypatch, answers):
        self.calls = []
        self.answers = answers

        def get_bin_path(module, arg, required=False, opt_dirs=None):
            return "/usr/bin/" + arg if arg in self.answers else None

        def run_command(module, argv, **kwargs):
            self.calls.append(argv)
            answer = self.answers[os.path.basename(argv[0])]
            return answer(argv) if callable(answer) else answer

        def exit_json(module, **kwargs):
            raise SystemExit(kwargs)

        def fail_json(module, **kwargs):
            raise SystemExit(dict(kwargs, failed=True))

        for name, value in (("get_bin_path", get_bin_path), ("run_command", run_command), ("exit_json", exit_json), ("fail_json", fail_json)):
            monkeypatch.setattr(basic.AnsibleModule, name, value)

    def run(self, **args):
        with patch_module_args(dict(args, _ansible_check_mode=True)):
            with pytest.raises(SystemExit) as caught:
                nvidia_driver_host.main()
        return caught.value.args[0]


def apt_cache(known, offered):
    """apt-cache on a host: pkgnames lists the ``known`` names that start with the prefix, show exits 0 when ``offered``."""
    def answer(argv):
        if argv[1:3] == ["--all-names", "pkgnames"]:
            return 0, "".join(name + "\n" for name in known if name.startswith(argv[3])), ""
        assert argv[1:3] == ["show", "--no-all-versions"], argv
        return (0, "Package: %s\n" % argv[3], "") if offered else (100, "", "E: No packages found\n")
    return answer


def test_one_call_reads_everything_the_plan_needs(monkeypatch, tmp_path):
    mokutil = tmp_path / "mokutil"
    mokutil.write_text("")
    marker = tmp_path / "nvidia-uninstall"
    marker.symlink_to(tmp_path / "nvidia-installer")  # a dangling link counts, as ansible.builtin.stat reports it
    sources = tmp_path / "sources.list.d"
    sources.mkdir()
    (sources / "cuda.list").write_text("deb [signed-by=/k.gpg] https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/ /\n")
    (sources / "gpuhost-nvidia-cuda.sources").write_text("URIs: https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/\n")
    (sources / ".hidden.list").write_text("deb https://developer.download.nvidia.com/ /\n")
    (sources / "debian.sources").write_text("URIs: http://deb.debian.org/debian\n")
    (sources / "sub").mkdir()
    host = Host(monkeypatch, {"mokutil": (1, "SecureBoot enabled\n", ""), "dpkg-query": (0, DPKG, ""), "apt-cache": apt_cache(
        ["linux-headers-6.1.0-28-amd64", "linux-headers-6.1.0-28-amd64-dbg"], offered=False)})
    result = host.run(package_manager="apt", packages=["ca-certificates"], package_prefixes=["nvidia"], mokutil=str(mokutil),
                      runfile_markers=[str(marker), str(tmp_path / "manifest")], repo_dirs=[str(sources), str(tmp_path / "missing")],
                      repo_mentions=["developer.download.nvidia.com"], repo_exclude=["gpuhost-nvidia-cuda.sources"],
                      headers_dir=str(tmp_path / "build"), headers_package="linux-headers-6.1.0-28-amd64")
    assert result["changed"] is False
    assert (result["secure_boot"], result["sb_state"]) == (True, "SecureBoot enabled\n")
    assert list(result["packages"]) == ["ca-certificates", "nvidia-open-kernel-dkms"] and result["package_database"] == "apt"
    assert result["runfile_install"] == [str(marker)]
    assert result["foreign_repo_files"] == [str(sources / "cuda.list")]
    assert (result["headers_present"], result["headers_offered"]) == (False, False)
    assert [argv[0] for argv in host.calls] == [str(mokutil), "/usr/bin/dpkg-query", "/usr/bin/apt-cache", "/usr/bin/apt-cache"]
    assert host.calls[2][1:] == ["--all-names", "pkgnames", "linux-headers-6.1.0-28-amd64"]
    assert host.calls[3][1:] == ["show", "--no-all-versions", "linux-headers-6.1.0-28-amd64"]


def test_headers_are_asked_about_only_when_the_build_directory_is_missing(monkeypatch, tmp_path):
    (tmp_path / "build").mkdir()
    host = Host(monkeypatch, {"rpm": (0, RPM, ""), "dnf": (0, "Name : kernel-devel\n", "")})
    present = host.run(package_manager="dnf", mokutil=str(tmp_path / "no-mokutil"), headers_dir=str(tmp_path / "build"),
                       headers_package="kernel-devel-5.14.0-570.el9.x86_64", package_prefixes=["nvidia"])
    assert (present["headers_present"], present["headers_offered"], present["secure_boot"]) == (True, None, None)
    assert [os.path.basename(argv[0]) for argv in host.calls] == ["rpm"]
    assert present["packages"]["nvidia-persistenced"][0]["epoch"] == 3 and present["package_database"] == "rpm"
    offered = host.run(package_manager="dnf", mokutil=str(tmp_path / "no-mokutil"), headers_dir=str(tmp_path / "nothing"),
                       headers_package="kernel-devel-5.14.0-570.el9.x86_64")
    assert (offered["headers_present"], offered["headers_offered"]) == (False, True)
    assert host.calls[-1][1:] == ["-q", "info", "kernel-devel-5.14.0-570.el9.x86_64"]


# apt-cache show of a name no package has reads it as a regular expression against every package name: 0.5-1 s on the
# Debian 12 test host for linux-headers-<the CI kernel>, which no repository has (issue 21); apt-cache pkgnames 0.03 s.
@pytest.mark.parametrize("known, show_rc, calls, expected", [
    # not a name APT knows: not offered, and apt-cache show is not run
    ([], None, ["pkgnames"], False),
    # only names that start with it (another kernel flavour's headers): still not that package
    (["linux-headers-6.1.0-28-amd64-dbg"], None, ["pkgnames"], False),
    # known: apt-cache show answers, as before
    (["linux-headers-6.1.0-28-amd64"], 0, ["pkgnames", "show"], True),
    (["linux-headers-6.1.0-28-amd64"], 100, ["pkgnames", "show"], False),
])
def test_apt_is_asked_about_headers_it_knows_by_name(monkeypatch, tmp_path, known, show_rc, calls, expected):
    host = Host(monkeypatch, {"dpkg-query": (0, DPKG, ""), "apt-cache": apt_cache(known, offered=show_rc == 0)})
    result = host.run(package_manager="apt", mokutil="", headers_dir=str(tmp_path / "build"), headers_package="linux-headers-6.1.0-28-amd64")
    assert result["headers_offered"] is expected and result["headers_present"] is False
    assert [argv[1:3] for argv in host.calls[1:]] == [{"pkgnames": ["--all-names", "pkgnames"], "show": ["show", "--no-all-versions"]}[c] for c in calls]


@pytest.mark.parametrize("package, pkgnames, asked", [
    # a name apt-cache pkgnames cannot answer for (an architecture qualifier, a glob): apt-cache show alone, as before
    ("linux-headers-6.1.0-28-amd64:amd64", None, ["show"]),
    ("linux-headers-*", None, ["show"]),
    ("Linux-Headers", None, ["show"]),
    # pkgnames fails (a broken cache): apt-cache show decides, as before
    ("linux-headers-6.1.0-28-amd64", (100, "", "E: cache"), ["pkgnames", "show"]),
])
def test_apt_show_answers_when_the_names_cannot(monkeypatch, tmp_path, package, pkgnames, asked):
    def answer(argv):
        if argv[2] == "pkgnames":
            return pkgnames
        return 0, "Package: x\n", ""
    host = Host(monkeypatch, {"dpkg-query": (0, DPKG, ""), "apt-cache": answer})
    result = host.run(package_manager="apt", mokutil="", headers_dir=str(tmp_path / "build"), headers_package=package)
    assert result["headers_offered"] is True
    assert [argv[2] if argv[2] == "pkgnames" else argv[1] for argv in host.calls[1:]] == asked


def test_only_apt_lists_names_first():
    assert _driver_probe.apt_name_check("apt", "linux-headers-6.1.0-28-amd64")
    assert not _driver_probe.apt_name_check("dnf", "kernel-devel-5.14.0-570.el9.x86_64")
    assert not _driver_probe.apt_name_check("pacman", "linux-headers")
    assert not _driver_probe.apt_name_check("apt", "") and not _driver_probe.apt_name_check("apt", None)
    assert _driver_probe.apt_name_unknown("linux-headers-6.1.0-28-amd64-dbg\n", "linux-headers-6.1.0-28-amd64")
    assert not _driver_probe.apt_name_unknown("linux-headers-6.1.0-28-amd64-dbg\nlinux-headers-6.1.0-28-amd64\n", "linux-headers-6.1.0-28-amd64")
    assert _driver_probe.apt_name_unknown(None, "x")


@pytest.mark.skipif(shutil.which("apt-cache") is None, reason="tool missing: apt-cache")
@pytest.mark.parametrize("name, known", [
    ("dpkg", True),  # installed: in dpkg's status whatever the lists hold
    ("linux-headers-0.0.0-gpuhost-no-such-kernel", False),
    ("dpk", False),  # a prefix of a name is not that name
])
def test_apt_cache_pkgnames_agrees_with_apt_cache_show_on_this_machine(name, known):
    env = dict(os.environ, LC_ALL="C", LANGUAGE="C")
    names = subprocess.run(_driver_probe.APT_KNOWN_NAMES_QUERY + [name], capture_output=True, text=True, check=True, env=env).stdout
    assert _driver_probe.apt_name_unknown(names, name) is not known
    if known:
        show = subprocess.run(_driver_probe.HEADERS_QUERIES["apt"] + [name], capture_output=True, text=True, check=False, env=env)
        assert show.returncode == 0


def test_an_empty_database_of_the_hosts_own_manager_gives_way_to_the_others(monkeypatch, tmp_path):
    # The emulated EL host on Debian before its first rpm: package_facts' manager list [rpm, auto] read dpkg's database.
    host = Host(monkeypatch, {"rpm": (0, "", ""), "dpkg-query": (0, DPKG, "")})
    result = host.run(package_manager="dnf", mokutil=str(tmp_path / "none"), package_prefixes=["nvidia"])
    assert (result["package_database"], list(result["packages"])) == ("apt", ["nvidia-open-kernel-dkms"])
    assert [os.path.basename(argv[0]) for argv in host.calls] == ["rpm", "dpkg-query"]
    assert (result["headers_present"], result["headers_offered"]) == (None, None)
    nothing = Host(monkeypatch, {}).run(mokutil=str(tmp_path / "none"))
    assert (nothing["package_database"], nothing["packages"]) == (None, {})


def test_the_preflight_reads_the_host_in_one_task_that_changes_nothing():
    with open(os.path.join(ROLE, "tasks", "preflight.yml"), encoding="utf-8") as handle:
        tasks = yaml.safe_load(handle)
    remote = [t for t in tasks if not {"ansible.builtin.set_fact", "ansible.builtin.assert", "ansible.builtin.debug"} & set(t)]
    assert [t["name"] for t in remote] == ["Read what the role plans from on this host"]
    probe = remote[0]
    assert probe["check_mode"] is False and "gpuhost.nvidia.nvidia_driver_host" in probe
    decide_task = next(t for t in tasks if t["name"] == "Decide what to install")
    # The host is the task's variable, set as a fact with the plan made of it in the same task.
    assert decide_task["ansible.builtin.set_fact"]["__nvidia_driver_host"] == "{{ __nvidia_driver_host_now }}"
    assert "__nvidia_driver_host_now," in decide_task["ansible.builtin.set_fact"]["__nvidia_driver_plan"]
    decide = decide_task["vars"]["__nvidia_driver_host_now"]
    for key in ("secure_boot", "headers_present", "runfile_install", "installed_packages", "foreign_repo_files"):
        assert "__nvidia_driver_host_probe" in decide[key] or "__nvidia_driver_host_packages" in decide[key]


@pytest.mark.parametrize("name, wanted", [
    # Foreign packages of the other source, kernel image meta packages (the headers that follow kernel updates, #20),
    # the pin's dependencies; a templated name by its prefix; nvidia* and libnvidia* (pinning packages, NSCQ, Fabric
    # Manager of another branch).
    ("debian12", ["nvidia-tesla-535-driver", "cuda-drivers", "linux-image-cloud-amd64", "libcuda1", "firmware-nvidia-gsp", "nvlsm",
                  "xserver-xorg-video-nvidia", "nvidia-driver-pinning-595", "libnvidia-nscq-580", "nvidia-fabricmanager-570"]),
    ("ubuntu2404", ["linux-modules-nvidia-580-server-open-aws", "cuda-drivers-580", "libnvidia-compute-580-server"]),
    ("rocky9", ["akmod-nvidia", "kmod-nvidia-open-dkms", "xorg-x11-drv-nvidia", "nvidia-fabric-manager", "nvlsm"]),
    ("arch", ["lib32-nvidia-utils", "opencl-nvidia", "nvidia-lts"]),
])
def test_the_role_asks_for_every_package_it_reads(name, wanted):
    host = RoleVars(name)
    packages = {n: [{"version": "1"}] for n in wanted + ["bash", "linux-image-6.1.0-28-amd64"]}
    selected = _driver_probe.select_installed(packages, host["__nvidia_driver_probe_packages"], host["__nvidia_driver_probe_prefixes"])
    assert sorted(selected) == sorted(wanted)


BLACKLIST = "/etc/modprobe.d/gpuhost-nvidia-blacklist-nouveau.conf"
PASSTHROUGH = "/etc/modprobe.d/gpuhost-nvidia-passthrough.conf"
PARAMS = "/etc/modprobe.d/gpuhost-nvidia-params.conf"


def _template(host, expression):
    return Templar(loader=DataLoader(), variables=host.variables).template(trust_as_template(expression))


def _driver_tasks():
    with open(os.path.join(ROLE, "tasks", "driver.yml"), encoding="utf-8") as handle:
        return yaml.safe_load(handle)


ENSURED = "Tell the roles after this one which packages the driver ensured"


def _after_install(host):
    """driver.yml's facts of what the install did (read once, right after it): which modprobe.d files changed (the
    task's variable) and the three flags the report reads, and whether the driver packages changed."""
    task = next(t for t in _driver_tasks() if t["name"] == ENSURED)
    changed = _template(host, task["vars"]["__nvidia_driver_modprobe_changed"])
    facts = host.set_fact("driver.yml", ENSURED, ["__nvidia_driver_blacklist_changed", "__nvidia_driver_passthrough_changed",
                                                  "__nvidia_driver_params_changed", "__nvidia_driver_packages_changed"])
    return dict(facts, __nvidia_driver_modprobe_changed=changed)


PREFLIGHT_LISTS = "Set the repository and package lists for the plan"


@pytest.mark.parametrize("changed, blacklist, passthrough", [
    ([], False, False),
    ([BLACKLIST], True, False),
    ([PASSTHROUGH], False, True),
    (None, False, False),  # the write did not run (nothing to write)
])
@pytest.mark.parametrize("apt", [False, True])
def test_one_modprobe_write_tells_which_file_changed(changed, blacklist, passthrough, apt):
    host = RoleVars("debian12")
    if changed is not None and apt:
        # apt (#21): the transaction's call wrote them, with the pin, before the install.
        host.variables["__nvidia_driver_transaction"] = {"changed": True, "changed_files": ["/etc/apt/preferences.d/gpuhost-nvidia-driver.pref"] + changed}
    elif changed is not None:
        host.variables["__nvidia_driver_modprobe"] = {"changed": bool(changed), "changed_files": changed}
    host.variables["__nvidia_driver_install_predicted"] = {"skipped": True, "changed": False}
    facts = _after_install(host)
    assert (facts["__nvidia_driver_blacklist_changed"], facts["__nvidia_driver_passthrough_changed"]) == (blacklist, passthrough)
    assert facts["__nvidia_driver_modprobe_changed"] == (changed or [])
    # dnf and pacman write them in a call of their own at the end of their install files (one task, modprobe.yml,
    # imported by both), which regenerates the initramfs; apt in the transaction's call (install_apt.yml).
    with open(os.path.join(ROLE, "tasks", "modprobe.yml"), encoding="utf-8") as handle:
        (write,) = yaml.safe_load(handle)
    assert write["register"] == "__nvidia_driver_modprobe"
    assert write["gpuhost.nvidia.gpuhost_apply"] == {"files": "{{ __nvidia_driver_modprobe_files }}",
                                                     "absent": "{{ __nvidia_driver_modprobe_absent }}",
                                                     "regenerate": "{{ __nvidia_driver_regenerate }}"}
    assert write["when"] == "(__nvidia_driver_modprobe_files + __nvidia_driver_modprobe_absent) | length > 0"
    for name, calls in (("install_dnf.yml", 1), ("install_pacman.yml", 1), ("install_apt.yml", 0), ("driver.yml", 0)):
        with open(os.path.join(ROLE, "tasks", name), encoding="utf-8") as handle:
            tasks = yaml.safe_load(handle)
        assert not [t for t in tasks if t.get("register") == "__nvidia_driver_modprobe"], name
        imports = [t for t in tasks if t.get("ansible.builtin.import_tasks") == "modprobe.yml"]
        assert len(imports) == calls, name
        for task in imports:
            assert task is tasks[-1], name


@pytest.mark.parametrize("name, argv, tool", [
    ("debian12", ["update-initramfs", "-u", "-k", "all"], "/usr/sbin/update-initramfs"),
    ("rocky9", ["dracut", "-f", "--regenerate-all"], "/usr/bin/dracut"),
    ("arch", ["mkinitcpio", "-P"], "/usr/bin/mkinitcpio"),
])
def test_the_initramfs_is_regenerated_by_the_call_that_writes_the_modprobe_files(name, argv, tool):
    """No task of its own (#21): gpuhost_apply's regenerate runs the tool when one of the modprobe.d files that call wrote
    changed (also when the apt install after them failed: tests/unit/apply/test_apply_packages.py), where the tool exists.
    The removal path keeps its handler."""
    host = RoleVars(name)
    # the two files as tasks/preflight.yml renders them once (their templates are lookups the test's Templar has not)
    files = [{"path": BLACKLIST, "content": "blacklist nouveau\n"}, {"path": PASSTHROUGH, "content": "softdep nvidia pre: vfio-pci\n"}]
    regenerate = host.set_fact("preflight.yml", PREFLIGHT_LISTS, ["__nvidia_driver_regenerate"],
                               __nvidia_driver_modprobe_files_now=files)["__nvidia_driver_regenerate"]
    # the module parameters' file, removed when none are set, counts as a change when it goes
    assert regenerate == {"argv": argv, "when_changed": [BLACKLIST, PASSTHROUGH, PARAMS], "if_exists": tool}
    for task in _driver_tasks():
        assert "__nvidia_driver_initramfs_command" not in str(task), task["name"]
    # Only modprobe.d files count: the pin file the same apt call wrote does not.
    host.variables["__nvidia_driver_modprobe"] = {"changed": True, "changed_files": ["/etc/apt/preferences.d/gpuhost-nvidia-driver.pref"]}
    host.variables["__nvidia_driver_install_predicted"] = {"skipped": True, "changed": False}
    assert _after_install(host)["__nvidia_driver_modprobe_changed"] == []


@pytest.mark.parametrize("apt", [False, True])
def test_the_module_parameters_file_is_removed_when_none_are_set_and_its_change_is_a_reboot_reason(apt):
    host = RoleVars("debian12" if apt else "rocky9")

    def absent():
        return host.set_fact("preflight.yml", PREFLIGHT_LISTS, ["__nvidia_driver_modprobe_absent"])["__nvidia_driver_modprobe_absent"]

    assert absent() == [PARAMS]
    host.variables["nvidia_driver_module_params"] = {"NVreg_EnableGpuFirmware": 0}
    assert absent() == []
    host.variables["__nvidia_driver_install_predicted"] = {"skipped": True, "changed": False}
    key = "__nvidia_driver_transaction" if apt else "__nvidia_driver_modprobe"
    for result in ({"changed": True, "changed_files": [PARAMS], "removed": []}, {"changed": True, "changed_files": [], "removed": [PARAMS]}):
        host.variables[key] = result
        facts = _after_install(host)
        assert facts["__nvidia_driver_params_changed"] is True and facts["__nvidia_driver_modprobe_changed"] == [PARAMS]
    host.variables[key] = {"changed": False, "changed_files": [], "removed": []}
    assert _after_install(host)["__nvidia_driver_params_changed"] is False
    with open(os.path.join(ROLE, "tasks", "report.yml"), encoding="utf-8") as handle:
        report = yaml.safe_dump(yaml.safe_load(handle))
    assert "the nvidia module parameters changed" in report and "__nvidia_driver_params_changed" in report
    # state absent: the one gpuhost_apply call removes the modprobe.d files, the parameters' file among them.
    assert PARAMS in host["__nvidia_driver_modprobe_paths"]
    with open(os.path.join(ROLE, "tasks", "absent.yml"), encoding="utf-8") as handle:
        removal = next(t for t in yaml.safe_load(handle) if t.get("register") == "__nvidia_driver_absent_applied")
    assert "+ __nvidia_driver_modprobe_paths }}" in removal["gpuhost.nvidia.gpuhost_apply"]["absent"]
    assert removal["gpuhost.nvidia.gpuhost_apply"]["regenerate"]["when_changed"] == "{{ __nvidia_driver_modprobe_paths }}"


def test_the_module_parameters_filter_writes_what_the_check_accepts_and_refuses_the_rest():
    from ansible_collections.gpuhost.nvidia.plugins.filter.driver import FilterModule
    render = FilterModule().filters()["nvidia_driver_module_params_file"]
    text = render({"NVreg_RestrictProfilingToAdminUsers": 1, "NVreg_EnableGpuFirmware": "0"})
    assert text.splitlines()[-1] == "options nvidia NVreg_EnableGpuFirmware=0 NVreg_RestrictProfilingToAdminUsers=1"
    assert render({}) == ""
    with pytest.raises(Exception, match="NVreg_TemporaryFilePath"):
        render({"NVreg_TemporaryFilePath": "/tmp\noptions nvidia NVreg_EnableMSI=0"})


def test_apt_writes_the_pin_and_modprobe_files_installs_and_regenerates_in_one_call():
    with open(os.path.join(ROLE, "tasks", "install_apt.yml"), encoding="utf-8") as handle:
        tasks = yaml.safe_load(handle)
    names = [t["name"] for t in tasks]
    render = tasks[names.index("Render the pin of the driver branch or version with apt preferences, or its removal")]
    assert render["ansible.builtin.include_role"]["tasks_from"] == "apt_pin_deferred.yml"
    transaction = next(t for t in tasks if t.get("register") == "__nvidia_driver_transaction")
    call = transaction["gpuhost.nvidia.gpuhost_apply"]
    # The pin, the modprobe.d files, and the holds of the roles whose requests the transaction takes (gpuhost_package_plan).
    assert "internal_repository_pin_deferred.files" in call["files"]
    assert "+ __nvidia_driver_modprobe_files + __nvidia_driver_txn.taken.files" in call["files"]
    # ... and the module parameters' file when none are set
    assert call["absent"] == ("{{ internal_repository_pin_deferred.absent + __nvidia_driver_txn.taken.absent"
                              " + __nvidia_driver_modprobe_absent }}")
    assert "__nvidia_driver_txn.apt_headers + __nvidia_driver_txn.specs" in call["packages"]["install"]
    assert call["packages"]["allow_downgrade"] == "{{ __nvidia_driver_txn.downgrade }}"
    assert "__nvidia_driver_regenerate" in call["regenerate"]
    # NVIDIA's pinning package goes in before the transaction resolves; no block, no rescue: the call does both.
    assert names.index(render["name"]) < names.index("Install NVIDIA's pinning package before the driver") < names.index(transaction["name"])
    assert not [t for t in tasks if "block" in t or (t.get("ansible.builtin.apt") or {}).get("state") == "present"
                and "pinning" not in t["ansible.builtin.apt"]["name"]]
    # Which modprobe.d files changed is read from the call's result (no set_fact keeps it: nothing registers over it).
    assert not [t for t in _driver_tasks() if "__nvidia_driver_modprobe_written" in t.get("ansible.builtin.set_fact", {})]
    host = RoleVars("debian12")
    host.variables.update({"__nvidia_driver_pkg_mgr": "apt", "__nvidia_driver_transaction": {
        "changed_files": ["/etc/apt/preferences.d/gpuhost-nvidia-driver.pref", BLACKLIST], "packages": {"changed": True}},
        "__nvidia_driver_install_predicted": {"skipped": True, "changed": False}})
    facts = _after_install(host)
    assert facts["__nvidia_driver_modprobe_changed"] == [BLACKLIST]
    assert facts["__nvidia_driver_packages_changed"] is True
    host.variables["__nvidia_driver_transaction"]["packages"] = {}
    assert _after_install(host)["__nvidia_driver_packages_changed"] is False


def _registers(tasks):
    for task in tasks or []:
        if "register" in task:
            yield task["register"]
        for key in ("block", "rescue", "always"):
            yield from _registers(task.get(key))


def test_no_task_registers_over_a_role_variable():
    # A registered result takes precedence over role vars: `register: __nvidia_driver_installed` (the install task)
    # once hid a vars/main.yml variable of that name from every task after it.
    names = set()
    for folder in ("tasks", "handlers"):
        if not os.path.isdir(os.path.join(ROLE, folder)):
            continue
        for name in os.listdir(os.path.join(ROLE, folder)):
            with open(os.path.join(ROLE, folder, name), encoding="utf-8") as handle:
                names.update(_registers(yaml.safe_load(handle)))
    defined = set()
    for name in os.listdir(os.path.join(ROLE, "vars")):
        with open(os.path.join(ROLE, "vars", name), encoding="utf-8") as handle:
            defined.update(yaml.safe_load(handle) or {})
    assert "__nvidia_driver_host_probe" in names and "__nvidia_driver_probe_packages" in defined
    assert not names & defined, sorted(names & defined)


@pytest.mark.parametrize("name, database", [("debian12", "apt"), ("ubuntu2404", "apt"), ("rocky9", "rpm"), ("fedora42", "rpm"), ("arch", "pacman")])
def test_ca_certificates_counts_as_ensured_only_from_the_hosts_own_database(name, database):
    # An emulated EL host on Debian reads dpkg's database until its first rpm: its ca-certificates is not dnf's.
    assert RoleVars(name)["__nvidia_driver_own_database"] == database
    assert database == _driver_probe.database_order(RoleVars(name)["__nvidia_driver_pkg_mgr"])[0]


# apt-cache madison as bookworm's apt prints it (the names right-aligned), with a deb-src row of the source package.
MADISON = (
    "nvidia-open-kernel-dkms | 535.261.03-1~deb12u1 | http://deb.debian.org/debian bookworm/contrib amd64 Packages\n"
    "       libcuda1 | 535.261.03-1~deb12u1 | http://deb.debian.org/debian bookworm/non-free amd64 Packages\n"
    "nvidia-graphics-drivers | 535.261.03-1~deb12u1 | http://deb.debian.org/debian bookworm/non-free Sources\n"
)


def test_only_literal_names_are_asked_about_the_offered_versions():
    # apt reads a name with . + ? * | [ ^ $ as a regular expression when no package has it, name:arch as qualified.
    names = ["nvidia-smi", "libcuda1", "linux-headers-6.1.0-28-amd64", "libstdc++6", "nvidia-smi:i386", "nvidia-{branch}", "", "nvidia-smi"]
    assert _driver_probe.apt_offered_names(names) == ["libcuda1", "nvidia-smi"]
    assert _driver_probe.parse_offered(MADISON)[1] == ["libcuda1", "535.261.03-1~deb12u1", "http://deb.debian.org/debian bookworm/non-free amd64 Packages"]
    assert _driver_probe.parse_offered("") == [] and len(_driver_probe.parse_offered(MADISON + "\n")) == 3


@pytest.mark.parametrize("pkg_mgr, rc, asked, offered", [
    ("apt", 0, ["libcuda1", "nvidia-open-kernel-dkms"], 3),
    ("apt", 100, [], None),  # a failed question: the role asks again after its repository step
    ("dnf", 0, [], None),
])
def test_the_host_read_asks_apt_about_the_offered_versions_in_the_same_call(monkeypatch, pkg_mgr, rc, asked, offered):
    def madison(argv):
        assert argv[1] == "madison", argv
        return rc, MADISON if rc == 0 else "", ""
    host = Host(monkeypatch, {"dpkg-query": (0, DPKG, ""), "rpm": (0, RPM, ""), "apt-cache": madison})
    result = host.run(package_manager=pkg_mgr, mokutil="", offered_packages=["nvidia-open-kernel-dkms", "libcuda1", "linux-headers-6.1.0-28-amd64"])
    assert result["offered_asked"] == asked
    assert (result["offered"] if offered is None else len(result["offered"])) == offered
    madison_calls = [argv for argv in host.calls if argv[1:2] == ["madison"]]
    assert madison_calls == ([["/usr/bin/apt-cache", "madison", "libcuda1", "nvidia-open-kernel-dkms"]] if pkg_mgr == "apt" else [])


def test_nothing_is_asked_without_names(monkeypatch):
    host = Host(monkeypatch, {"dpkg-query": (0, DPKG, "")})
    result = host.run(package_manager="apt", mokutil="")
    assert (result["offered"], result["offered_asked"]) == (None, [])
    assert [os.path.basename(argv[0]) for argv in host.calls] == ["dpkg-query"]


@pytest.mark.parametrize("variables, expected", [
    # Debian's own archive (source auto: the nvidia source adds NVIDIA's repository, its names are asked after it).
    ({}, ["libcuda1", "linux-headers-amd64", "linux-headers-arm64", "linux-headers-cloud-amd64", "linux-headers-cloud-arm64",
          "linux-headers-rt-amd64", "linux-headers-rt-arm64", "nvidia-kernel-dkms", "nvidia-open-kernel-dkms", "nvidia-smi"]),
    ({"nvidia_driver_source": "distro"}, None),
    # A repository for every source: nothing to ask ahead.
    ({"nvidia_driver_source": "nvidia"}, []),
    ({"nvidia_driver_repo_url": "https://mirror.example/debian12/x86_64/"}, []),
])
def test_the_host_read_asks_ahead_only_for_sources_without_a_repository(variables, expected):
    host = RoleVars("debian12")
    host.variables.update(variables)
    asked = host["__nvidia_driver_offered_ask"]
    if expected is None:
        assert "nvidia-open-kernel-dkms" in asked and "nvidia-kernel-open-dkms" not in asked
    else:
        assert asked == expected
    with open(os.path.join(ROLE, "tasks", "preflight.yml"), encoding="utf-8") as handle:
        task = next(t for t in yaml.safe_load(handle) if "gpuhost.nvidia.nvidia_driver_host" in t)
    assert task["gpuhost.nvidia.nvidia_driver_host"]["offered_packages"] == (
        "{{ __nvidia_driver_offered_ask if __nvidia_driver_pkg_mgr | default('') == 'apt' else [] }}")


@pytest.mark.parametrize("asked, refused", [([], False), (["driver"], True), (["toolkit"], False)])
def test_the_gpu_operators_driver_is_read_in_the_same_call(monkeypatch, tmp_path, asked, refused):
    """The Operator's driver container on the host (its PID file under the root, _gpu_operator's evidence) is refused
    when the call asks about the driver, naming the Operator setting; not asked, or asked about the toolkit, it is not."""
    from ansible_collections.gpuhost.nvidia.plugins.module_utils import _gpu_operator  # pylint: disable=import-outside-toplevel

    (tmp_path / "run/nvidia").mkdir(parents=True)
    (tmp_path / "run/nvidia/nvidia-driver.pid").write_text("4242\n")
    real = _gpu_operator.host_evidence
    monkeypatch.setattr(_gpu_operator, "host_evidence", lambda root="/": real(str(tmp_path)))
    host = Host(monkeypatch, {"dpkg-query": (0, DPKG, "")})
    result = host.run(package_manager="apt", gpu_operator=asked)
    assert bool(result["gpu_operator_refusals"]) is refused
    if refused:
        assert "nvidia-driver.pid" in result["gpu_operator_refusals"][0] and "driver.enabled=false" in result["gpu_operator_refusals"][0]
    if not asked:
        assert result["gpu_operator_evidence"] == {"driver": [], "toolkit": []}
