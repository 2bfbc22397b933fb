# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Each doctor check against facts from the fake NVML + synthetic sysfs, and file fixtures under a test root."""

from __future__ import annotations

import copy
import json
import os
import shutil
import typing as t

import fake_pynvml
import pytest
import sysfs

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _doctor, _facts
from ansible_collections.gpuhost.nvidia.plugins.modules import nvidia_gpu_doctor

H100_UUID = "GPU-0a1b2c3d-0000-4000-8000-000000000000"
CDI_SPEC = """---
cdiVersion: 0.5.0
kind: nvidia.com/gpu
devices:
- name: "0"
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
- name: %s
containerEdits:
  mounts:
  - hostPath: /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.%s
"""


def gather(root: str, profile: dict[str, t.Any]) -> dict[str, t.Any]:
    fake = fake_pynvml.make_fake(profile)
    return _facts.gather_facts(gather=["health"], root=root, nv=fake.module, kernel_release=sysfs.KERNEL_RELEASE)


def one_h100(**health: t.Any) -> dict[str, t.Any]:
    profile = fake_pynvml.load_profile("h100_sxm_8x_nvswitch")
    profile["gpus"] = profile["gpus"][:1]
    profile["gpus"][0]["persistence_mode"] = 1
    profile["gpus"][0]["health"] = {
        "throttle_reasons_mask": 0x1,
        "pcie": {"gen_current": 2, "gen_max": 5, "width_current": 16, "width_max": 16},
        "ecc_errors": {"corrected_volatile": 0, "uncorrected_volatile": 0, "corrected_aggregate": 3, "uncorrected_aggregate": 0},
        "retired_pages": {"single_bit": [], "double_bit": [], "pending": 0},
        "remapped_rows": [0, 0, 0, 0],
    }
    profile["gpus"][0]["health"].update(health)
    profile.setdefault("host", {})["device_nodes"] = ["nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"]
    return profile


@pytest.fixture
def healthy(tmp_path: t.Any) -> tuple[str, dict[str, t.Any]]:
    profile = one_h100()
    root = sysfs.build(str(tmp_path / "root"), profile)
    facts = gather(root, profile)
    write(root, "/etc/docker/daemon.json", json.dumps({"runtimes": {"nvidia": {"args": [], "path": "nvidia-container-runtime"}}}))
    write(root, "/etc/cdi/nvidia.yaml", CDI_SPEC % (H100_UUID, facts["driver"]["version"]))
    return root, facts


def write(root: str, path: str, text: str) -> None:
    full = os.path.join(root, path.lstrip("/"))
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w", encoding="utf-8") as handle:
        handle.write(text)


def run(root: str, facts: dict[str, t.Any], **params: t.Any) -> dict[str, dict[str, str]]:
    settings = dict(_doctor.DEFAULTS, **params)
    host = _doctor.read_host(facts, settings, root=root, kernel_release=sysfs.KERNEL_RELEASE)
    return {c["id"]: c for c in _doctor.run_checks(facts, host, settings)}


def test_healthy_h100_is_all_ok(healthy: tuple[str, dict[str, t.Any]]) -> None:
    root, facts = healthy
    checks = run(root, facts, required_cuda="12.2")
    assert list(checks) == list(_doctor.CHECK_IDS)
    bad = {k: (c["status"], c["evidence"]) for k, c in checks.items() if c["status"] != "ok"}
    assert bad == {}
    assert all(c["fix"] == "" for c in checks.values())
    assert checks["driver_loaded"]["evidence"].startswith("nvidia 550.54.15 is loaded (open)")
    assert checks["pcie_link"]["evidence"] == "full width on 1 GPU(s)"  # gen 2 of 5 while idle is fine
    assert checks["cuda_version"]["evidence"] == "the driver supports CUDA 12.4; 12.2 is required"


def test_health_group_in_facts(healthy: tuple[str, dict[str, t.Any]]) -> None:
    _root, facts = healthy
    assert facts["gpus"][0]["health"] == {
        "throttle_reasons": ["gpu_idle"],
        "pcie": {"gen_current": 2, "gen_max": 5, "width_current": 16, "width_max": 16},
        "ecc_errors": {"corrected_volatile": 0, "uncorrected_volatile": 0, "corrected_aggregate": 3, "uncorrected_aggregate": 0},
        "retired_pages": {"single_bit": 0, "double_bit": 0, "pending": False},
        "remapped_rows": {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False},
    }


def test_health_group_null_where_unsupported(tmp_path: t.Any) -> None:
    profile = fake_pynvml.load_profile("rtx3090")
    root = sysfs.build(str(tmp_path / "root"), profile)
    health = gather(root, profile)["gpus"][0]["health"]
    assert health["throttle_reasons"] is None and health["remapped_rows"] is None
    assert health["pcie"] == {"gen_current": None, "gen_max": None, "width_current": None, "width_max": None}


def test_container_without_gpu_fails_exactly_driver_and_nodes(tmp_path: t.Any) -> None:
    """What a GPU-less test container shows: no NVIDIA PCI function, no module, no /dev/nvidia*; the rest ok."""
    profile = fake_pynvml.load_profile("no_gpu")
    root = sysfs.build(str(tmp_path / "root"), profile)
    facts = gather(root, profile)
    write(root, "/etc/docker/daemon.json", json.dumps({"runtimes": {"nvidia": {"path": "nvidia-container-runtime"}}}))
    write(root, "/etc/cdi/nvidia.yaml", CDI_SPEC % ("all", "535.261.03"))
    checks = run(root, facts)
    # Secure Boot is unknown, not off: the container cannot see the firmware (an empty /sys/firmware).
    assert {k for k, c in checks.items() if c["status"] != "ok"} == {"driver_loaded", "device_nodes", "secure_boot"}
    assert checks["secure_boot"]["status"] == "warn" and checks["secure_boot"]["evidence"].startswith("the Secure Boot state is unknown")
    assert checks["driver_loaded"]["status"] == "fail"
    assert "no NVIDIA GPU on the PCI bus; facts state no_gpu" in checks["driver_loaded"]["evidence"]
    assert checks["device_nodes"]["evidence"] == "missing /dev/nvidiactl, /dev/nvidia-uvm (present: none)"
    assert "modprobe nvidia-uvm" in checks["device_nodes"]["fix"]


def test_driver_not_loaded(tmp_path: t.Any) -> None:
    profile = fake_pynvml.load_profile("driver_not_loaded")
    root = sysfs.build(str(tmp_path / "root"), profile)
    checks = run(root, gather(root, profile))
    assert checks["driver_loaded"]["status"] == "fail"
    assert checks["driver_loaded"]["evidence"] == (
        "the nvidia kernel module is not loaded (/sys/module/nvidia absent); 1 NVIDIA GPU(s) on the PCI bus; facts state driver_not_loaded")
    assert "modprobe nvidia" in checks["driver_loaded"]["fix"]
    # The proprietary module is built for an H100: allowed.
    assert checks["driver_flavour"]["status"] == "ok"
    assert checks["bindings"]["status"] == "fail"
    assert "is bound to no driver, meant for nvidia" in checks["bindings"]["evidence"]


def test_flavour_mismatch(healthy: tuple[str, dict[str, t.Any]]) -> None:
    root, facts = healthy
    facts = copy.deepcopy(facts)
    facts["gpus"][0]["architecture"] = "Blackwell"
    facts["driver"]["kernel_module_type"] = "proprietary"
    check = run(root, facts)["driver_flavour"]
    assert (check["status"], check["evidence"]) == ("fail", "the proprietary kernel module is installed but Blackwell GPUs need the open one")
    assert check["fix"] == "Install the open module (nvidia_driver_flavour: open), then reboot"
    facts["gpus"][0]["architecture"] = "Pascal"
    facts["driver"]["kernel_module_type"] = "open"
    check = run(root, facts)["driver_flavour"]
    assert (check["status"], check["evidence"]) == ("fail", "the open kernel module is installed but Pascal GPUs need the proprietary one")


def test_nouveau_loaded(healthy: tuple[str, dict[str, t.Any]]) -> None:
    root, facts = healthy
    os.makedirs(os.path.join(root, "sys/module/nouveau"))
    check = run(root, facts)["nouveau"]
    assert check["status"] == "fail" and check["evidence"] == "nouveau is loaded (/sys/module/nouveau)"
    assert "blacklist nouveau" in check["fix"] and "initramfs" in check["fix"]


def test_cuda_too_old(healthy: tuple[str, dict[str, t.Any]]) -> None:
    root, facts = healthy
    check = run(root, facts, required_cuda="12.8")["cuda_version"]
    assert check["status"] == "fail"
    assert check["evidence"] == "the driver supports CUDA 12.4, older than the required 12.8"
    assert check["fix"].startswith("Upgrade the driver to one that supports CUDA 12.8")


def _secure_boot(root: str, on: bool) -> None:
    path = os.path.join(root, _doctor.SECURE_BOOT_VAR.lstrip("/"))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as handle:
        handle.write(b"\x06\x00\x00\x00" + (b"\x01" if on else b"\x00"))


def test_secure_boot_unsigned_module(tmp_path: t.Any) -> None:
    profile = fake_pynvml.load_profile("driver_not_loaded")
    root = sysfs.build(str(tmp_path / "root"), profile)
    _secure_boot(root, True)
    check = run(root, gather(root, profile))["secure_boot"]
    assert check["status"] == "fail"
    assert check["evidence"] == (
        "Secure Boot is on and /lib/modules/%s/updates/dkms/nvidia.ko carries no signature, so the kernel refuses it" % sysfs.KERNEL_RELEASE)
    assert "mokutil --import" in check["fix"]
    module = os.path.join(root, "lib/modules", sysfs.KERNEL_RELEASE, "updates/dkms/nvidia.ko")
    with open(module, "ab") as handle:
        handle.write(b"sig" + _doctor.SIGNATURE_MAGIC)
    check = run(root, gather(root, profile))["secure_boot"]
    assert check["status"] == "warn" and "is signed, and the nvidia module is not loaded" in check["evidence"]
    _secure_boot(root, False)
    assert run(root, gather(root, profile))["secure_boot"]["evidence"] == "Secure Boot is off: unsigned modules load"


def test_secure_boot_finds_debians_module_name(tmp_path: t.Any) -> None:
    """Debian's DKMS builds nvidia-current.ko (and nvidia-current-open.ko); the check must find those too."""
    profile = fake_pynvml.load_profile("driver_not_loaded")
    root = sysfs.build(str(tmp_path / "root"), profile)
    _secure_boot(root, True)
    modules = os.path.join(root, "lib/modules", sysfs.KERNEL_RELEASE, "updates/dkms")
    os.rename(os.path.join(modules, "nvidia.ko"), os.path.join(modules, "nvidia-current.ko"))
    check = run(root, gather(root, profile))["secure_boot"]
    assert check["status"] == "fail"
    assert "/updates/dkms/nvidia-current.ko carries no signature" in check["evidence"]


def test_the_secure_boot_variable_is_efi_global_variables():
    # EFI_GLOBAL_VARIABLE's GUID as the UEFI specification and the kernel's efi.h give it (docs/sources.md).
    assert _doctor.SECURE_BOOT_VAR == "/sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"


@pytest.mark.parametrize("layout, content, status, evidence", [
    ("efi", b"\x06\x00\x00\x00\x01", "fail", "Secure Boot is on and "),
    ("efi", b"\x06\x00\x00\x00\x00", "ok", "Secure Boot is off: unsigned modules load"),
    # Unknown, never off: a value that is not 0 or 1, a short or long read, no variable, no efivars.
    ("efi", b"\x06\x00\x00\x00\x02", "warn", "the Secure Boot state is unknown (UEFI, but the SecureBoot variable"),
    ("efi", b"\x06\x00\x00\x00", "warn", "the Secure Boot state is unknown (UEFI"),
    ("efi", b"", "warn", "the Secure Boot state is unknown (UEFI"),
    ("efi", b"\x06\x00\x00\x00\x01\x01", "warn", "the Secure Boot state is unknown (UEFI"),
    ("efi", None, "warn", "the Secure Boot state is unknown (UEFI"),
    ("efi-directory", None, "warn", "the Secure Boot state is unknown (UEFI"),
    # No efi directory: a legacy boot where /sys/firmware shows the firmware, unknown where it shows nothing.
    ("legacy", None, "ok", "no UEFI (legacy boot"),
    ("masked", None, "warn", "the Secure Boot state is unknown (/sys/firmware shows nothing here"),
    ("absent", None, "warn", "the Secure Boot state is unknown (/sys/firmware shows nothing here"),
])
def test_secure_boot_unknown_is_not_off(tmp_path: t.Any, layout: str, content: bytes | None, status: str, evidence: str) -> None:
    profile = fake_pynvml.load_profile("driver_not_loaded")
    root = sysfs.build(str(tmp_path / "root"), profile)
    firmware = os.path.join(root, "sys/firmware")
    if os.path.isdir(firmware):
        for name in os.listdir(firmware):
            path = os.path.join(firmware, name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
    if layout == "absent" and os.path.isdir(firmware):
        os.rmdir(firmware)
    elif layout == "legacy":
        # As an H200 host (a VM booted without UEFI, kernel 6.18) showed it: acpi and memmap, no efi, no mokutil.
        os.makedirs(os.path.join(firmware, "acpi"))
        os.makedirs(os.path.join(firmware, "memmap"))
    elif layout == "masked":
        os.makedirs(firmware, exist_ok=True)
    elif layout == "efi-directory":
        os.makedirs(os.path.join(firmware, "efi"))
    elif layout == "efi":
        os.makedirs(os.path.join(firmware, "efi", "efivars"))
        if content is not None:
            with open(os.path.join(root, _doctor.SECURE_BOOT_VAR.lstrip("/")), "wb") as handle:
                handle.write(content)
    check = run(root, gather(root, profile))["secure_boot"]
    assert (check["status"], check["evidence"][:len(evidence)]) == (status, evidence), check
    if status == "warn":
        # The module this host built is unsigned: the warning says what that means if Secure Boot is on.
        assert "carries no signature: if Secure Boot is on, the kernel refuses it" in check["evidence"]
        assert "mokutil --sb-state" in check["fix"]


def test_secure_boot_on_and_loaded_is_ok(healthy: tuple[str, dict[str, t.Any]]) -> None:
    root, facts = healthy
    _secure_boot(root, True)
    check = run(root, facts)["secure_boot"]
    assert check["status"] == "ok" and "signature was accepted" in check["evidence"]


def test_missing_uvm_node(healthy: tuple[str, dict[str, t.Any]]) -> None:
    root, facts = healthy
    facts = copy.deepcopy(facts)
    facts["device_nodes"] = [n for n in facts["device_nodes"] if n != "/dev/nvidia-uvm"]
    check = run(root, facts)["device_nodes"]
    assert check["status"] == "fail" and check["evidence"].startswith("missing /dev/nvidia-uvm (present: /dev/nvidia-uvm-tools, /dev/nvidia0")


@pytest.mark.parametrize(
    "content, status, evidence, fix",
    [
        (None, "warn", "/etc/docker/daemon.json does not exist: Docker knows no nvidia runtime", "nvidia-ctk runtime configure --runtime=docker"),
        ("{not json", "fail", "/etc/docker/daemon.json is not valid JSON: Expecting property name enclosed in double quotes: "
         "line 1 column 2 (char 1); dockerd will not start", "python3 -m json.tool"),
        ('{"default-runtime": "nvidia"}', "fail", "default-runtime is nvidia, which runtimes does not define", "Define runtimes.nvidia"),
        ('{"log-driver": "json-file"}', "warn", "/etc/docker/daemon.json defines no nvidia runtime and CDI is not enabled", "nvidia-ctk runtime configure"),
        ('{"features": {"cdi": true}}', "ok", "no nvidia runtime, but CDI is enabled (features.cdi): use --device nvidia.com/gpu=all", ""),
        ('{"runtimes": {"nvidia": {"path": "/usr/bin/nvidia-container-runtime"}}}', "fail",
         "runtimes.nvidia points at /usr/bin/nvidia-container-runtime, which does not exist", "restart docker"),
        ('{"runtimes": {"nvidia": {"path": "nvidia-container-runtime"}}, "default-runtime": "nvidia"}', "ok",
         "runtimes.nvidia -> nvidia-container-runtime; default-runtime nvidia", ""),
    ],
)
def test_docker_runtime(healthy: tuple[str, dict[str, t.Any]], content: str | None, status: str, evidence: str, fix: str) -> None:
    root, facts = healthy
    os.unlink(os.path.join(root, "etc/docker/daemon.json"))
    if content is not None:
        write(root, "/etc/docker/daemon.json", content)
    check = run(root, facts)["docker_runtime"]
    assert (check["status"], check["evidence"]) == (status, evidence)
    assert fix in check["fix"] and (check["fix"] == "") == (status == "ok")


def test_containerd_runtime(healthy: tuple[str, dict[str, t.Any]]) -> None:
    root, facts = healthy
    assert run(root, facts)["containerd_runtime"]["status"] == "ok"
    write(root, "/etc/containerd/config.toml", 'version = 2\nimports = ["/etc/containerd/conf.d/*.toml"]\n')
    check = run(root, facts)["containerd_runtime"]
    assert check["status"] == "warn"
    assert check["evidence"] == "no [...containerd.runtimes.nvidia] table in /etc/containerd/config.toml; imports: ['/etc/containerd/conf.d/*.toml']"
    write(root, "/etc/containerd/conf.d/99-nvidia.toml",
          'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\nBinaryName = "/usr/bin/nvidia-container-runtime"\n')
    check = run(root, facts)["containerd_runtime"]
    assert check["status"] == "ok"
    assert "/etc/containerd/conf.d/99-nvidia.toml (io.containerd.grpc.v1.cri, BinaryName /usr/bin/nvidia-container-runtime)" in check["evidence"]
    write(root, "/etc/containerd/conf.d/99-nvidia.toml", "[plugins\n")
    check = run(root, facts)["containerd_runtime"]
    assert check["status"] == "fail" and check["evidence"].startswith("/etc/containerd/conf.d/99-nvidia.toml is not valid TOML")
    assert check["fix"] == "Fix the TOML syntax in /etc/containerd/conf.d/99-nvidia.toml, then restart containerd"


def test_cdi_spec_missing_duplicated_stale(healthy: tuple[str, dict[str, t.Any]]) -> None:
    root, facts = healthy
    version = facts["driver"]["version"]
    write(root, "/var/run/cdi/nvidia.yaml", CDI_SPEC % (H100_UUID, version))
    check = run(root, facts)["cdi_spec"]
    assert check["status"] == "fail"
    assert check["evidence"] == "2 specs define nvidia.com/gpu: /etc/cdi/nvidia.yaml, /var/run/cdi/nvidia.yaml; CDI refuses duplicate device names"
    assert check["fix"].startswith("Keep one")
    os.unlink(os.path.join(root, "var/run/cdi/nvidia.yaml"))
    write(root, "/etc/cdi/nvidia.yaml", CDI_SPEC % (H100_UUID, "535.104.05"))
    check = run(root, facts)["cdi_spec"]
    assert (check["status"], check["evidence"]) == ("fail", "/etc/cdi/nvidia.yaml names driver 535.104.05 but the driver is %s" % version)
    assert "nvidia-ctk cdi generate" in check["fix"]
    write(root, "/etc/cdi/nvidia.yaml", CDI_SPEC % (H100_UUID, version))
    library = os.path.realpath(os.path.join(root, facts["driver"]["library_paths"]["nvml"].lstrip("/")))
    spec = os.path.join(root, "etc/cdi/nvidia.yaml")
    os.utime(spec, (os.path.getmtime(library) - 100,) * 2)
    check = run(root, facts)["cdi_spec"]
    assert (check["status"], check["evidence"]) == ("warn", "/etc/cdi/nvidia.yaml is older than the installed driver library")
    os.unlink(spec)
    check = run(root, facts)["cdi_spec"]
    assert (check["status"], check["evidence"]) == ("warn", "no CDI spec for nvidia.com/gpu in /etc/cdi, /var/run/cdi")


def test_persistence_off(healthy: tuple[str, dict[str, t.Any]]) -> None:
    root, facts = healthy
    facts = copy.deepcopy(facts)
    facts["gpus"][0]["persistence_mode"] = False
    check = run(root, facts)["persistence"]
    assert (check["status"], check["evidence"]) == ("warn", "persistence mode is off on GPU 0 (0000:18:00.0)")
    assert "nvidia-persistenced" in check["fix"]


def test_bindings_vfio(tmp_path: t.Any) -> None:
    profile = fake_pynvml.load_profile("vfio_bound")
    root = sysfs.build(str(tmp_path / "root"), profile)
    facts = gather(root, profile)
    bus = facts["gpus"][0]["pci_bus_id"]
    check = run(root, facts)["bindings"]
    assert (check["status"], check["evidence"]) == ("fail", "%s is bound to vfio-pci, meant for nvidia" % bus)
    assert "vfio_passthrough" in check["fix"]
    check = run(root, facts, vfio_devices=[bus])["bindings"]
    assert (check["status"], check["evidence"]) == ("ok", "%s:vfio-pci" % bus)


@pytest.mark.parametrize(
    "mask, status, evidence",
    [
        (0x4, "warn", "GPU 0 (0000:18:00.0): sw_power_cap"),
        (0x40 | 0x4, "fail", "GPU 0 (0000:18:00.0): sw_power_cap, hw_thermal_slowdown"),
        (0x1 | 0x2, "ok", "no throttling on 1 GPU(s)"),
    ],
)
def test_throttling(tmp_path: t.Any, mask: int, status: str, evidence: str) -> None:
    profile = one_h100(throttle_reasons_mask=mask)
    root = sysfs.build(str(tmp_path / "root"), profile)
    check = run(root, gather(root, profile))["throttling"]
    assert (check["status"], check["evidence"]) == (status, evidence)
    assert ("cooling" in check["fix"]) == (status != "ok")


def test_pcie_link_narrow_and_slow_under_load(tmp_path: t.Any) -> None:
    profile = one_h100(throttle_reasons_mask=0, pcie={"gen_current": 3, "gen_max": 5, "width_current": 8, "width_max": 16})
    root = sysfs.build(str(tmp_path / "root"), profile)
    check = run(root, gather(root, profile))["pcie_link"]
    assert check["status"] == "warn"
    assert check["evidence"] == "GPU 0 (0000:18:00.0): x8 of x16; GPU 0 (0000:18:00.0): gen 3 of 5 under load"
    assert "Reseat the GPU" in check["fix"]


@pytest.mark.parametrize(
    "health, status, evidence",
    [
        ({"ecc_errors": {"corrected_volatile": 0, "uncorrected_volatile": 2, "corrected_aggregate": 0, "uncorrected_aggregate": 2}},
         "fail", "GPU 0 (0000:18:00.0): 2 uncorrected ECC errors since boot"),
        ({"remapped_rows": [0, 1, 0, 1]}, "fail", "GPU 0 (0000:18:00.0): row remapping failed (no spare rows left)"),
        ({"remapped_rows": [0, 1, 1, 0]}, "warn", "GPU 0 (0000:18:00.0): a row remap is pending until the GPU is reset"),
        ({"retired_pages": {"single_bit": [1], "double_bit": [7, 9], "pending": 1}}, "warn",
         "GPU 0 (0000:18:00.0): a page retirement is pending until reboot; GPU 0 (0000:18:00.0): 2 pages retired for double-bit errors"),
        ({"ecc_errors": {"corrected_volatile": 150, "uncorrected_volatile": 0, "corrected_aggregate": 150, "uncorrected_aggregate": 0}},
         "warn", "GPU 0 (0000:18:00.0): 150 corrected ECC errors since boot"),
    ],
)
def test_ecc(tmp_path: t.Any, health: dict[str, t.Any], status: str, evidence: str) -> None:
    profile = one_h100(**health)
    root = sysfs.build(str(tmp_path / "root"), profile)
    check = run(root, gather(root, profile))["ecc"]
    assert (check["status"], check["evidence"]) == (status, evidence)
    assert "nvidia-smi -r" in check["fix"]


def test_nvml_cgroup_char_links() -> None:
    """Real character devices are needed, so this uses the host view directly (mknod needs root)."""
    facts = {"device_nodes": ["/dev/nvidia0"], "gpus": [], "driver": {}}
    host = {"char_links": {"/dev/nvidia0": {"dev": "195:0", "char_link": False}}, "docker_daemon_json": {"exists": False, "text": None},
            "cgroup_v2": True}
    check = _doctor.check_nvml_cgroup(facts, host, dict(_doctor.DEFAULTS))
    assert check["status"] == "warn"
    assert check["evidence"].startswith("no /dev/char link for /dev/nvidia0 (195:0); with the systemd cgroup driver on cgroup v2")
    assert "nvidia-ctk system create-dev-char-symlinks --create-all" in check["fix"]
    assert "native.cgroupdriver=cgroupfs" in check["fix"]
    host["docker_daemon_json"] = {"exists": True, "text": '{"exec-opts": ["native.cgroupdriver=cgroupfs"]}'}
    assert _doctor.check_nvml_cgroup(facts, host, dict(_doctor.DEFAULTS))["evidence"] == "Docker uses the cgroupfs driver"
    host["char_links"]["/dev/nvidia0"]["char_link"] = True
    host["docker_daemon_json"] = {"exists": False, "text": None}
    assert _doctor.check_nvml_cgroup(facts, host, dict(_doctor.DEFAULTS))["status"] == "ok"


def test_char_links_read_from_real_devices(tmp_path: t.Any) -> None:
    """/dev/null is a character device everywhere: read_host maps it to 1:3 and finds (or not) /dev/char/1:3."""
    links = _doctor._char_links("/", ["/dev/null"])
    assert links["/dev/null"]["dev"] == "1:3"
    assert _doctor._char_links(str(tmp_path), ["/dev/null"]) == {}


def test_table_and_markdown(healthy: tuple[str, dict[str, t.Any]]) -> None:
    root, facts = healthy
    facts = copy.deepcopy(facts)
    facts["gpus"][0]["persistence_mode"] = False
    checks = list(run(root, facts).values())
    lines = _doctor.table(checks)
    assert lines[0].split() == ["STAT", "CHECK", "EVIDENCE"]
    assert "WARN  persistence         persistence mode is off on GPU 0 (0000:18:00.0)" in lines
    assert any(line.strip().startswith("fix: Enable nvidia-persistenced") for line in lines)
    assert _doctor.summary(checks) == {"status": "warn", "counts": {"ok": 18, "warn": 1, "fail": 0}}
    md = _doctor.markdown("gpu01", checks)
    assert md.startswith("# GPU doctor: gpu01\n\n| status | check | evidence | fix |\n|---|---|---|---|\n")
    assert "| warn | persistence mode on | persistence mode is off on GPU 0 (0000:18:00.0) |" in md


def test_module_runs_and_rejects_unknown_skip(healthy: tuple[str, dict[str, t.Any]], run_module: t.Any) -> None:
    root, facts = healthy
    result = run_module(nvidia_gpu_doctor, {"facts": facts, "root": root, "required_cuda": "12.2"}, check_mode=True)
    assert result["changed"] is False
    # read_host uses the running kernel's release under root: no module file there, the rest as in the pure test.
    assert result["status"] == "ok", result["table"]
    assert [c["id"] for c in result["checks"]] == list(_doctor.CHECK_IDS)
    result = run_module(nvidia_gpu_doctor, {"facts": facts, "root": root, "skip": ["ecc", "nope"]})
    assert result["failed"] and result["msg"].startswith("skip names unknown checks: nope; the checks are driver_loaded, ")
    result = run_module(nvidia_gpu_doctor, {"facts": {"state": "ok"}, "root": root})
    assert result["failed"] and "no 'gpus'/'driver' keys" in result["msg"]
