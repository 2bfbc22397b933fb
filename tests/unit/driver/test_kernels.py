# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Installed kernels and their nvidia modules (module_utils/_kernels.py), in the facts and in the doctor, on fake roots."""

from __future__ import annotations

import os
import typing as t

import fake_pynvml
import pytest
import sysfs

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _doctor, _facts, _kernels


def kernel(root: str, release: str, module: str | None = None, own: str = "kernel", vmlinuz: bool = False) -> None:
    """An installed kernel under root: its own modules (kernel/ or modules.dep) and optionally an nvidia module file."""
    base = os.path.join(root, "lib/modules", release)
    if own == "kernel":
        os.makedirs(os.path.join(base, "kernel/fs"), exist_ok=True)
    elif own == "modules.dep":
        os.makedirs(base, exist_ok=True)
        open(os.path.join(base, "modules.dep"), "w", encoding="utf-8").close()
    else:
        os.makedirs(base, exist_ok=True)
    if vmlinuz:
        os.makedirs(os.path.join(root, "boot"), exist_ok=True)
        open(os.path.join(root, "boot", "vmlinuz-" + release), "wb").close()
    if module:
        os.makedirs(os.path.join(base, os.path.dirname(module)), exist_ok=True)
        with open(os.path.join(base, module), "wb") as handle:
            handle.write(b"\x7fELF")


@pytest.mark.parametrize("release, flavour", [
    ("6.1.0-26-amd64", "amd64"), ("6.1.0-26-cloud-amd64", "cloud-amd64"), ("6.12.48+deb13-amd64", "amd64"), ("6.12.48+deb13-cloud-amd64", "cloud-amd64"),
    ("6.8.0-45-generic", "generic"), ("6.8.0-1015-azure", "azure"), ("5.14.0-427.13.1.el9_4.x86_64", None),
    ("6.10.10-arch1-1", None), ("", None), (None, None),
])
def test_debian_flavour(release: str | None, flavour: str | None) -> None:
    assert _kernels.debian_flavour(release) == flavour


def test_version_order() -> None:
    releases = ["6.1.0-9-amd64", "6.1.0-26-amd64", "5.10.0-30-amd64", "6.1.0-10-amd64"]
    assert sorted(releases, key=_kernels.version_key) == ["5.10.0-30-amd64", "6.1.0-9-amd64", "6.1.0-10-amd64", "6.1.0-26-amd64"]


def test_every_module_location_and_the_newest_kernel_boots(tmp_path: t.Any) -> None:
    root = str(tmp_path)
    kernel(root, "6.1.0-9-amd64", "updates/dkms/nvidia-current.ko.xz")
    kernel(root, "6.1.0-10-amd64", "extra/nvidia.ko.zst", own="modules.dep")
    kernel(root, "6.1.0-11-amd64", "kernel/drivers/video/nvidia-open.ko")
    kernel(root, "6.1.0-12-amd64", "kernel/nvidia-580srv-open/nvidia.ko")  # Ubuntu's linux-modules-nvidia-580-server-open-*
    kernel(root, "6.1.0-12-amd64", "kernel/nvidia-580srv-open/nvidia-peermem.ko")
    kernel(root, "6.1.0-26-amd64", None, own="none", vmlinuz=True)
    kernel(root, "6.1.0-5-amd64", "updates/dkms/nvidia.ko", own="none")  # what DKMS left of a removed kernel
    facts = _kernels.installed_kernels(root, running="6.1.0-9-amd64")
    assert [k["release"] for k in facts["installed"]] == ["6.1.0-9-amd64", "6.1.0-10-amd64", "6.1.0-11-amd64", "6.1.0-12-amd64", "6.1.0-26-amd64"]
    assert facts["installed"][0]["module_files"] == ["/lib/modules/6.1.0-9-amd64/updates/dkms/nvidia-current.ko.xz"]
    assert facts["installed"][1]["module_files"] == ["/lib/modules/6.1.0-10-amd64/extra/nvidia.ko.zst"]
    assert facts["installed"][2]["module_files"] == ["/lib/modules/6.1.0-11-amd64/kernel/drivers/video/nvidia-open.ko"]
    assert facts["installed"][3]["module_files"] == ["/lib/modules/6.1.0-12-amd64/kernel/nvidia-580srv-open/nvidia.ko"]
    assert facts["without_module"] == ["6.1.0-26-amd64"]
    assert (facts["running"], facts["boot"], facts["boot_source"]) == ("6.1.0-9-amd64", "6.1.0-26-amd64", "newest installed")
    problem = _kernels.boot_problem(facts)
    assert problem == ("the host boots 6.1.0-26-amd64 next (newest installed) and it has no nvidia module "
                       "(kernels with one: 6.1.0-9-amd64, 6.1.0-10-amd64, 6.1.0-11-amd64, 6.1.0-12-amd64)")
    fix = _kernels.boot_fix(facts)
    assert "linux-headers-6.1.0-26-amd64" in fix and "linux-headers-amd64" in fix and "dkms autoinstall -k 6.1.0-26-amd64" in fix


def test_boot_loader_hint_wins_when_it_names_an_installed_kernel(tmp_path: t.Any) -> None:
    root = str(tmp_path)
    kernel(root, "5.14.0-427.el9.x86_64", "extra/nvidia.ko.xz")
    kernel(root, "5.14.0-503.el9.x86_64")
    facts = _kernels.installed_kernels(root, running="5.14.0-427.el9.x86_64", boot_hint="/boot/vmlinuz-5.14.0-427.el9.x86_64\n")
    assert (facts["boot"], facts["boot_source"]) == ("5.14.0-427.el9.x86_64", "boot loader")
    assert _kernels.boot_problem(facts) is None
    unknown = _kernels.installed_kernels(root, running="x", boot_hint="/boot/vmlinuz-9.9.9")
    assert (unknown["boot"], unknown["boot_source"]) == ("5.14.0-503.el9.x86_64", "newest installed")
    assert "kernel-devel-5.14.0-503.el9.x86_64" in _kernels.boot_fix(unknown)
    assert _kernels.boot_release_from_hint("") is None and _kernels.boot_release_from_hint("/boot/vmlinuz-6.1.0-9-amd64") == "6.1.0-9-amd64"


def test_no_kernels(tmp_path: t.Any) -> None:
    facts = _kernels.installed_kernels(str(tmp_path), running="6.1.0-26-amd64")
    assert facts == {"running": "6.1.0-26-amd64", "boot": None, "boot_source": None, "installed": [], "without_module": [], "dkms": []}
    assert _kernels.boot_problem(facts) is None and _kernels.boot_problem(None) is None


def _h100(tmp_path: t.Any) -> tuple[str, t.Any]:
    profile = fake_pynvml.load_profile("h100_sxm_8x_nvswitch")
    profile["gpus"] = profile["gpus"][:1]
    root = sysfs.build(str(tmp_path / "root"), profile)
    return root, fake_pynvml.make_fake(profile)


def test_facts_report_the_kernels_under_their_root(tmp_path: t.Any) -> None:
    root, fake = _h100(tmp_path)
    kernel(root, sysfs.KERNEL_RELEASE)  # the fake tree already holds its updates/dkms/nvidia.ko
    kernel(root, "6.1.0-100-amd64")
    facts = _facts.gather_facts(root=root, nv=fake.module, kernel_release=sysfs.KERNEL_RELEASE)
    assert facts["kernels"]["running"] == sysfs.KERNEL_RELEASE
    assert [(k["release"], k["nvidia_module"]) for k in facts["kernels"]["installed"]] == [
        (sysfs.KERNEL_RELEASE, True), ("6.1.0-100-amd64", False)]
    assert facts["kernels"]["boot"] == "6.1.0-100-amd64"


def _doctor_check(root: str, facts: dict[str, t.Any]) -> dict[str, str]:
    settings = dict(_doctor.DEFAULTS)
    host = _doctor.read_host(facts, settings, root=root, kernel_release=sysfs.KERNEL_RELEASE)
    return {c["id"]: c for c in _doctor.run_checks(facts, host, settings)}["boot_kernel"]


def test_doctor_fails_when_the_next_kernel_has_no_module(tmp_path: t.Any) -> None:
    root, fake = _h100(tmp_path)
    kernel(root, sysfs.KERNEL_RELEASE)
    facts = _facts.gather_facts(gather=["health"], root=root, nv=fake.module, kernel_release=sysfs.KERNEL_RELEASE)
    assert _doctor_check(root, facts)["status"] == "ok"
    assert _doctor_check(root, facts)["evidence"] == "%s (newest installed) has one" % sysfs.KERNEL_RELEASE
    kernel(root, "6.1.0-100-amd64")  # a kernel update, no module built for it
    facts = _facts.gather_facts(gather=["health"], root=root, nv=fake.module, kernel_release=sysfs.KERNEL_RELEASE)
    check = _doctor_check(root, facts)
    assert check["status"] == "fail"
    assert check["evidence"].startswith("the host boots 6.1.0-100-amd64 next (newest installed) and it has no nvidia module")
    assert "dkms autoinstall -k 6.1.0-100-amd64" in check["fix"] and "linux-headers-amd64" in check["fix"]
    # Facts from before the key existed: the doctor reads the kernels itself, under its root.
    old = dict(facts)
    del old["kernels"]
    assert _doctor_check(root, old)["status"] == "fail"
    # The module built for it: fine again, and the older kernel without one is only named.
    kernel(root, "6.1.0-100-amd64", "updates/dkms/nvidia.ko")
    kernel(root, "6.1.0-3-amd64")
    facts = _facts.gather_facts(gather=["health"], root=root, nv=fake.module, kernel_release=sysfs.KERNEL_RELEASE)
    check = _doctor_check(root, facts)
    assert (check["status"], check["evidence"]) == ("ok", "6.1.0-100-amd64 (newest installed) has one; older kernels without one: 6.1.0-3-amd64")


def test_doctor_has_nothing_to_check_without_kernels_or_gpus(tmp_path: t.Any) -> None:
    root, fake = _h100(tmp_path)
    facts = _facts.gather_facts(gather=["health"], root=root, nv=fake.module, kernel_release=sysfs.KERNEL_RELEASE)
    assert _doctor_check(root, facts)["evidence"].startswith("no installed kernel found under /lib/modules")
    kernel(root, "6.1.0-100-amd64")
    os.remove(os.path.join(root, "lib/modules", sysfs.KERNEL_RELEASE, "updates/dkms/nvidia.ko"))
    facts = _facts.gather_facts(gather=["health"], root=root, nv=fake.module, kernel_release=sysfs.KERNEL_RELEASE)
    assert _doctor_check(root, facts)["status"] == "ok"  # no driver installed at all: driver_loaded's business
    facts = dict(facts, gpus=[], present=False)
    assert _doctor_check(root, facts)["evidence"] == "no GPU is meant for the nvidia driver; no module is needed"


def dkms_tree(root: str, module: str, version: str, built: t.Sequence[str] = (), installed: t.Sequence[str] = (), arch: str = "x86_64") -> None:
    """DKMS 3's tree for one module version, as `dkms add`, `build` and `install` leave it (Debian 12's dkms 3.0.10)."""
    base = os.path.join(root, "var/lib/dkms", module)
    os.makedirs(os.path.join(base, version, "build"), exist_ok=True)
    source = os.path.join(root, "usr/src", "%s-%s" % (module, version))
    os.makedirs(source, exist_ok=True)
    if not os.path.lexists(os.path.join(base, version, "source")):
        os.symlink(source, os.path.join(base, version, "source"))
    for release in built:
        os.makedirs(os.path.join(base, version, release, arch, "module"), exist_ok=True)
    for release in installed:
        os.symlink("%s/%s/%s" % (version, release, arch), os.path.join(base, "kernel-%s-%s" % (release, arch)))


def test_dkms_registrations_as_dkms_status_tells_them(tmp_path: t.Any) -> None:
    """`dkms status` would say: nvidia-current/535.261.03, 6.1.0-26-amd64, x86_64: installed; the same on 6.1.0-28: built;
    nvidia-current-open/535.261.03: added; and nothing of another module."""
    root = str(tmp_path)
    dkms_tree(root, "nvidia-current", "535.261.03", built=["6.1.0-28-amd64", "6.1.0-26-amd64"], installed=["6.1.0-26-amd64"])
    dkms_tree(root, "nvidia-current-open", "535.261.03")
    dkms_tree(root, "zfs", "2.1.11", built=["6.1.0-26-amd64"], installed=["6.1.0-26-amd64"])
    assert _kernels.dkms_registrations(root) == [
        {"module": "nvidia-current", "version": "535.261.03", "built": ["6.1.0-26-amd64", "6.1.0-28-amd64"], "installed": ["6.1.0-26-amd64"]},
        {"module": "nvidia-current-open", "version": "535.261.03", "built": [], "installed": []},
    ]
    assert _kernels.installed_kernels(root, "6.1.0-26-amd64")["dkms"] == _kernels.dkms_registrations(root)
    # An installed link of an older version: counted for that version, which DKMS still lists.
    dkms_tree(root, "nvidia-current", "525.147.05", built=["6.1.0-20-amd64"], installed=["6.1.0-20-amd64"])
    assert [(r["version"], r["installed"]) for r in _kernels.dkms_registrations(root) if r["module"] == "nvidia-current"] == [
        ("525.147.05", ["6.1.0-20-amd64"]), ("535.261.03", ["6.1.0-26-amd64"])]


def test_no_dkms_tree_no_registrations(tmp_path: t.Any) -> None:
    assert _kernels.dkms_registrations(str(tmp_path)) == []


def test_dkms_lines_sum_up_like_dkms_status(tmp_path: t.Any) -> None:
    root = str(tmp_path)
    dkms_tree(root, "nvidia-current", "535.261.03", built=["6.1.0-26-amd64", "6.1.0-28-amd64"], installed=["6.1.0-26-amd64"])
    dkms_tree(root, "nvidia-current-open", "535.261.03")
    assert _kernels.dkms_lines(_kernels.dkms_registrations(root)) == [
        "nvidia-current/535.261.03: installed for 6.1.0-26-amd64; built for 6.1.0-28-amd64",
        "nvidia-current-open/535.261.03: added (built for no kernel yet)",
    ]
    assert _kernels.dkms_lines([]) == [] and _kernels.dkms_lines(None) == []
