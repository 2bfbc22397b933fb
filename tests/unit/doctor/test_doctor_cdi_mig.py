"""CDI follows MIG (#18): after the MIG layout changes, a spec or compose override that names the old MIG devices fails
the doctor, the CDI record asks for a new spec, and the boot units are ordered so that the refresh runs after the
GPU settings unit re-creates the instances and before the container engines and kubelet start.

The MIG change goes through the fake NVML's own GPU-instance and compute-instance calls, the ones the settings
applier uses, so the new instances get new UUIDs just as they do on a real GPU.
"""

from __future__ import annotations

import os
import typing as t
from pathlib import Path

import fake_pynvml
import jinja2
import pytest
import sysfs

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _doctor, _facts, _toolkit

PROJECT = Path(__file__).resolve().parents[3]


def gather(root: str, fake: t.Any) -> dict[str, t.Any]:
    return _facts.gather_facts(root=root, nv=fake.module, kernel_release=sysfs.KERNEL_RELEASE)


def spec_for(facts: dict[str, t.Any]) -> str:
    """A CDI spec in nvidia-ctk's shape (uuid names) for the devices in the facts: what a regeneration writes."""
    lines = ["---", "cdiVersion: 0.5.0", "kind: nvidia.com/gpu", "devices:"]
    for gpu in facts["gpus"]:
        lines += ["- name: %s" % gpu["uuid"], "  containerEdits:", "    deviceNodes:", "    - path: /dev/nvidia0"]
        for mig in gpu.get("mig_devices") or []:
            lines += ["- name: %s" % mig["uuid"], "  containerEdits:", "    deviceNodes:", "    - path: /dev/nvidia-caps/nvidia-cap1"]
    lines += ["containerEdits:", "  mounts:", "  - hostPath: /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.%s" % facts["driver"]["version"]]
    return "\n".join(lines) + "\n"


def write(root: str, path: str, text: str) -> None:
    full = os.path.join(root, path.lstrip("/"))
    os.makedirs(os.path.dirname(full), exist_ok=True)
    Path(full).write_text(text, encoding="utf-8")


def cdi_check(root: str, facts: dict[str, t.Any], **params: t.Any) -> dict[str, str]:
    settings = dict(_doctor.DEFAULTS, **params)
    host = _doctor.read_host(facts, settings, root=root, kernel_release=sysfs.KERNEL_RELEASE)
    return {c["id"]: c for c in _doctor.run_checks(facts, host, settings)}["cdi_spec"]


def relayout(fake: t.Any) -> None:
    """Destroy every MIG instance of GPU 0 and create two 3g.20gb instances with one compute instance each."""
    nv = fake.module
    nv.nvmlInit()
    handle = nv.nvmlDeviceGetHandleByIndex(0)
    for gi in list(handle.gpu["gpu_instances"]):
        gi["compute_instances"] = []
        nv.nvmlGpuInstanceDestroy(nv.nvmlDeviceGetGpuInstanceById(handle, gi["id"]))
    for _instance in range(2):
        instance = nv.nvmlDeviceCreateGpuInstance(handle, 2)
        nv.nvmlGpuInstanceCreateComputeInstance(instance, 2)
    nv.nvmlShutdown()


@pytest.fixture
def mig_host(tmp_path: t.Any) -> tuple[str, t.Any]:
    profile = fake_pynvml.load_profile("a100_mig")
    root = sysfs.build(str(tmp_path / "root"), profile)
    return root, fake_pynvml.make_fake(profile)


def test_new_mig_layout_fails_the_old_spec_and_compose_override_until_regenerated(mig_host):
    root, fake = mig_host
    before = gather(root, fake)
    old_migs = [m["uuid"] for m in before["gpus"][0]["mig_devices"]]
    assert old_migs and all(u.startswith("MIG-") for u in old_migs)
    write(root, "/var/run/cdi/nvidia.yaml", spec_for(before))
    write(root, "/srv/app/compose.gpu.yaml", "services:\n  app:\n    environment:\n      NVIDIA_VISIBLE_DEVICES: %s\n" % old_migs[0])
    params = {"compose_files": ["/srv/app/compose.gpu.yaml", "/srv/absent/compose.yaml"]}
    assert cdi_check(root, before, **params)["status"] == "ok"

    relayout(fake)  # what the gpu_settings boot unit does after a reboot or a layout change
    after = gather(root, fake)
    new_migs = sorted(m["uuid"] for m in after["gpus"][0]["mig_devices"])
    assert len(new_migs) == 2 and not set(new_migs) & set(old_migs)

    check = cdi_check(root, after, **params)
    assert check["status"] == "fail"
    assert "/var/run/cdi/nvidia.yaml names %s" % ", ".join(sorted(old_migs)) in check["evidence"]
    assert "/srv/app/compose.gpu.yaml names %s" % old_migs[0] in check["evidence"]
    assert "gpuhost-gpu-settings.service" in check["fix"]
    # The role's record sees the change, so its next run regenerates the spec (nvidia_cdi_spec).
    assert _toolkit.generated_for(before, "uuid", "1.18.0") != _toolkit.generated_for(after, "uuid", "1.18.0")

    write(root, "/var/run/cdi/nvidia.yaml", spec_for(after))  # nvidia-cdi-refresh after the boot unit
    check = cdi_check(root, after)
    assert check["status"] == "ok", check
    spec_text = Path(root, "var/run/cdi/nvidia.yaml").read_text(encoding="utf-8")
    assert all(u in spec_text for u in new_migs)
    assert cdi_check(root, after, **params)["status"] == "fail"  # the override still names the old instance


def test_no_uuid_in_the_facts_judges_nothing(mig_host):
    root, fake = mig_host
    facts = gather(root, fake)
    write(root, "/etc/cdi/nvidia.yaml", spec_for(facts))
    assert _doctor.stale_devices({"gpus": []}, [{"path": "/etc/cdi/nvidia.yaml", "text": "GPU-5c6d7e8f-1111-4222-8333-444455556666"}]) == []


def _render(path: Path, **variables: t.Any) -> str:
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, trim_blocks=True)  # as Ansible
    return env.from_string(path.read_text(encoding="utf-8")).render(ansible_managed="managed", **variables)


def _directives(text: str, key: str) -> list[str]:
    return [unit for line in text.splitlines() if line.startswith(key + "=") for unit in line.split("=", 1)[1].split()]


def test_boot_order_settings_then_cdi_refresh_then_engines():
    settings_unit = _render(PROJECT / "roles/gpu_settings/templates/gpuhost-gpu-settings.service.j2",
                            gpu_settings_spec_path="/etc/x.json", gpu_settings_python_interpreter="/usr/bin/python3",
                            __gpu_settings_script_path="/usr/libexec/x", gpu_settings_nvidia_smi_path="/usr/bin/nvidia-smi")
    assert {"nvidia-cdi-refresh.service", "containerd.service", "docker.service", "crio.service",
            "kubelet.service"} <= set(_directives(settings_unit, "Before"))
    order = _render(PROJECT / "roles/nvidia_container_toolkit/templates/nvidia-cdi-refresh-order.conf.j2",
                    nvidia_container_toolkit_cdi_refresh_after=["gpuhost-gpu-settings.service"],
                    nvidia_container_toolkit_cdi_refresh_before=["containerd.service", "kubelet.service"])
    assert _directives(order, "After") == ["gpuhost-gpu-settings.service"]
    assert _directives(order, "Before") == ["containerd.service", "kubelet.service"]
    assert "[Unit]" in order.splitlines()
