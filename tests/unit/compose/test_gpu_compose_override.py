# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The module end to end through main(): check mode, diff, idempotence, backup, kept services, failures, validation."""

from __future__ import annotations

import os
import shutil
import stat
import typing as t

import pytest
import yaml

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _compose, _files
from ansible_collections.gpuhost.nvidia.plugins.modules import gpu_compose_override

H0 = "GPU-3f1c2a51-0a6e-4b6b-9a55-2d4ac6f0e001"
H1 = "GPU-8b0e6c1d-51f4-4a54-8d2e-0c9f3e7b4002"
EXISTING = "services:\n  sidecar:\n    image: busybox\n  app:\n    image: stale\nx-owner: ops\n"


@pytest.fixture
def project(tmp_path):
    tmp_path = tmp_path / "project"
    tmp_path.mkdir()
    (tmp_path / "docker-compose.yml").write_text("services:\n  app:\n    image: busybox\n  web:\n    image: busybox\n", encoding="utf-8")
    return tmp_path


@pytest.fixture
def run(run_compose_module, tmp_path, monkeypatch):
    # module.tmpdir lives under the remote tmp; keep it inside the test's tmp_path.
    remote_tmp = tmp_path / "remote-tmp"
    remote_tmp.mkdir()

    def call(args: dict[str, t.Any], check: bool = False, diff: bool = True) -> tuple[bool, dict[str, t.Any]]:
        full = dict(args, _ansible_check_mode=check, _ansible_diff=diff, _ansible_remote_tmp=str(remote_tmp), _ansible_keep_remote_files=False)
        return run_compose_module(gpu_compose_override.main, full)

    return call


def files_in(directory) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def args_for(project, get_facts, **extra: t.Any) -> dict[str, t.Any]:
    base = {
        "path": str(project / "docker-compose.gpu.yml"),
        "facts": get_facts("two_h100"),
        "services": [{"name": "app", "device_ids": [1], "environment_presets": ["nvidia"]}],
    }
    base.update(extra)
    return base


def test_check_mode_then_write_then_unchanged(run, project, facts):
    args = args_for(project, facts)
    target = project / "docker-compose.gpu.yml"

    failed, result = run(args, check=True)
    assert not failed and result["changed"] is True
    assert not target.exists()
    assert files_in(project) == ["docker-compose.yml"]  # no temp file either
    assert result["diff"]["before"] == "" and result["diff"]["before_header"].endswith("(absent)")
    assert H1 in result["diff"]["after"]

    failed, real = run(args)
    assert not failed and real["changed"] is True
    assert target.read_text(encoding="utf-8") == result["diff"]["after"]
    assert stat.S_IMODE(target.stat().st_mode) == 0o644 or stat.S_IMODE(target.stat().st_mode) == 0o666 & ~_umask()
    assert real["assignment"] == {"app": [H1]}
    assert real["services"]["app"]["environment"]["NVIDIA_VISIBLE_DEVICES"] == H1

    failed, again = run(args)
    assert not failed and again["changed"] is False
    assert again["diff"]["before"] == again["diff"]["after"]
    failed, again_check = run(args, check=True)
    assert not failed and again_check["changed"] is False
    assert files_in(project) == ["docker-compose.gpu.yml", "docker-compose.yml"]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_unmanaged_services_and_keys_survive(run, project, facts):
    target = project / "docker-compose.gpu.yml"
    target.write_text(EXISTING, encoding="utf-8")
    failed, result = run(args_for(project, facts))
    assert not failed and result["changed"]
    doc = yaml.safe_load(target.read_text(encoding="utf-8"))
    assert doc["services"]["sidecar"] == {"image": "busybox"}
    assert doc["x-owner"] == "ops"
    assert "image" not in doc["services"]["app"]  # a managed service is replaced as a whole
    assert result["unmanaged_services"] == ["sidecar"]
    assert result["document"] == doc


def test_prune_takes_the_file(run, project, facts):
    target = project / "docker-compose.gpu.yml"
    target.write_text(EXISTING, encoding="utf-8")
    failed, result = run(args_for(project, facts, prune=True))
    assert not failed
    assert yaml.safe_load(target.read_text(encoding="utf-8")) == {"services": {"app": result["services"]["app"]}}
    assert result["unmanaged_services"] == []


def test_backup_is_created_when_replacing(run, project, facts):
    target = project / "docker-compose.gpu.yml"
    target.write_text(EXISTING, encoding="utf-8")
    os.chmod(target, 0o640)
    failed, result = run(args_for(project, facts, backup=True))
    assert not failed and result["changed"]
    backup = result["backup_file"]
    assert os.path.dirname(backup) == str(project)
    with open(backup, encoding="utf-8") as handle:
        assert handle.read() == EXISTING
    assert stat.S_IMODE(target.stat().st_mode) == 0o640  # the existing mode is kept

    failed, again = run(args_for(project, facts, backup=True))
    assert not failed and not again["changed"] and "backup_file" not in again
    assert len([p for p in files_in(project) if p.startswith("docker-compose.gpu.yml.")]) == 1


def test_backup_in_check_mode_writes_nothing(run, project, facts):
    target = project / "docker-compose.gpu.yml"
    target.write_text(EXISTING, encoding="utf-8")
    failed, result = run(args_for(project, facts, backup=True), check=True)
    assert not failed and result["changed"] and "backup_file" not in result
    assert target.read_text(encoding="utf-8") == EXISTING
    assert files_in(project) == ["docker-compose.gpu.yml", "docker-compose.yml"]


def test_mode_option_is_applied_and_reported(run, project, facts):
    failed, _result = run(args_for(project, facts, mode="0600"))
    assert not failed
    assert stat.S_IMODE((project / "docker-compose.gpu.yml").stat().st_mode) == 0o600
    failed, result = run(args_for(project, facts, mode="0640"))
    assert not failed and result["changed"] is True
    assert stat.S_IMODE((project / "docker-compose.gpu.yml").stat().st_mode) == 0o640
    failed, result = run(args_for(project, facts, mode="0640"))
    assert not failed and result["changed"] is False


@pytest.mark.parametrize("check", [True, False])
@pytest.mark.parametrize("extra, message", [
    ({"mode": "0999"}, "mode: '0999' is not a file mode"),
    ({"mode": "u=rw;o=r"}, "is not a file mode"),
    ({"mode": 70000}, "mode: 70000 is not a file mode (0 to 0o7777)"),
    ({"owner": "no-such-user-gpuhost"}, "owner: 'no-such-user-gpuhost' does not exist on this host"),
    ({"group": "no-such-group-gpuhost"}, "group: 'no-such-group-gpuhost' does not exist on this host"),
    ({"owner": "$(reboot)"}, "owner: '$(reboot)' is not a user or group name"),
])
def test_bad_mode_owner_or_group_fail_before_the_file_is_written(run, project, facts, check, extra, message):
    failed, result = run(args_for(project, facts, **extra), check=check)
    assert failed and message in result["msg"], result
    assert not (project / "docker-compose.gpu.yml").exists()


def test_vm_mode_warns_about_privileged(run, project, facts):
    failed, result = run(args_for(project, facts, vm_mode=True))
    assert not failed
    assert any("run privileged" in w for w in result["warnings"])
    assert result["services"]["app"]["privileged"] is True


def test_builder_warnings_reach_the_result(run, project, facts):
    f = facts("mixed")
    f["gpus"][0]["mig_devices"][1]["uuid"] = None
    failed, result = run(args_for(project, facts, facts=f, services=[{"name": "app", "device_ids": ["0:1"]}]))
    assert not failed
    assert any("no UUID for device 0:1" in w for w in result["warnings"])


BAD_INPUTS = {
    "unknown capability": (
        {"services": [{"name": "app", "capabilities": ["gpu", "tensor"]}]},
        "capabilities must be one or more of",
    ),
    "device id not on the host": (
        {"services": [{"name": "app", "device_ids": [7]}]},
        "service 'app': device id 7 is not on this host (GPU indices here: 0, 1)",
    ),
    "count with device_ids": (
        {"services": [{"name": "app", "count": 1, "device_ids": [0]}]},
        "service 'app': count and device_ids are mutually exclusive",
    ),
    "MIG id on a GPU without MIG": (
        {"services": [{"name": "app", "device_ids": ["1:0"]}]},
        "service 'app': device id '1:0' is a MIG device, but GPU 1 (NVIDIA H100 PCIe, 0000:65:00.0) does not have MIG enabled",
    ),
    "VM mode without driver facts": (
        {"vm_mode": True, "facts": "driver_not_loaded"},
        "vm_mode: the facts lack the driver version (nvidia_gpu.driver.version); the path of libcuda.so.1",
    ),
    "exclusive shortfall": (
        {"strategy": "exclusive", "services": [{"name": "a"}, {"name": "b"}, {"name": "c"}]},
        "strategy exclusive: services a, b, c need 3 GPU(s) of their own, but the host has 2",
    ),
    "existing file is not YAML": (
        {"existing": "services: [\n"},
        "the existing override file is not valid YAML",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
@pytest.mark.parametrize("check", [False, True], ids=["real", "check"])
def test_bad_input_fails_before_writing(run, project, facts, case, check):
    extra, message = BAD_INPUTS[case]
    extra = dict(extra)
    target = project / "docker-compose.gpu.yml"
    existing = extra.pop("existing", None)
    if existing is not None:
        target.write_text(existing, encoding="utf-8")
    if isinstance(extra.get("facts"), str):
        extra["facts"] = facts(extra["facts"])
    failed, result = run(args_for(project, facts, **extra), check=check)
    assert failed, result
    assert message in result["msg"]
    if existing is None:
        assert not target.exists()
    else:
        assert target.read_text(encoding="utf-8") == existing
    assert files_in(project) == (["docker-compose.gpu.yml"] if existing is not None else []) + ["docker-compose.yml"]


def test_missing_directory_fails(run, tmp_path, facts):
    failed, result = run(args_for(tmp_path / "nope", facts))
    assert failed and "does not exist" in result["msg"]


# ------------------------------------------------------------------------------------------- validation


def test_validate_without_a_compose_binary_fails(run, project, facts, monkeypatch):
    monkeypatch.setattr(gpu_compose_override.AnsibleModule, "get_bin_path", lambda self, name, *a, **k: None)
    failed, result = run(args_for(project, facts, validate=True))
    assert failed and "needs docker compose or docker-compose" in result["msg"]
    assert not (project / "docker-compose.gpu.yml").exists()


class FakeRun:
    """Records run_command calls; answers ``docker compose version`` with rc 1 (no v2 plugin)."""

    def __init__(self, rc: int = 0, err: str = ""):
        self.calls: list[tuple[list[str], dict[str, t.Any]]] = []
        self.rc, self.err = rc, err
        self.seen_content: list[str] = []

    def __call__(self, args, **kwargs):
        self.calls.append((list(args), kwargs))
        if args[1:] == ["compose", "version"]:
            return 1, "", "docker: 'compose' is not a docker command."
        tmp = args[args.index("config") - 1]
        with open(tmp, encoding="utf-8") as handle:
            self.seen_content.append(handle.read())
        return self.rc, "", self.err


def fake_bins(monkeypatch, docker: bool = True):
    bins = {"docker-compose": "/usr/bin/docker-compose"}
    if docker:
        bins["docker"] = "/usr/bin/docker"
    monkeypatch.setattr(gpu_compose_override.AnsibleModule, "get_bin_path", lambda self, name, *a, **k: bins.get(name))


@pytest.mark.parametrize("check", [False, True], ids=["real", "check"])
def test_validate_runs_the_compose_binary_on_a_temp_copy_first(run, project, facts, monkeypatch, check):
    fake = FakeRun()
    fake_bins(monkeypatch)
    monkeypatch.setattr(gpu_compose_override.AnsibleModule, "run_command", fake)
    failed, result = run(args_for(project, facts, validate=True), check=check)
    assert not failed, result
    (version, vkw), (args, kwargs) = fake.calls
    assert version == ["/usr/bin/docker", "compose", "version"]
    assert args[:3] == ["/usr/bin/docker-compose", "--project-directory", str(project)]
    assert args[3:5] == ["-f", str(project / "docker-compose.yml")]
    assert args[-2:] == ["config", "-q"]
    assert kwargs["environ_update"]["LC_ALL"] == "C" and vkw["environ_update"]["LC_ALL"] == "C"
    assert args[-3] != str(project / "docker-compose.gpu.yml")  # a temporary copy, not the target
    assert os.path.dirname(args[-3]) == (str(project) if not check else os.path.dirname(args[-3]))
    assert not os.path.exists(args[-3])  # moved into place or removed
    assert fake.seen_content == [result["diff"]["after"]]
    assert result["validated_with"] == args
    assert (project / "docker-compose.gpu.yml").exists() is (not check)
    assert files_in(project) == (["docker-compose.yml"] if check else ["docker-compose.gpu.yml", "docker-compose.yml"])


def test_validate_prefers_docker_compose_v2(run, project, facts, monkeypatch):
    calls = []

    def fake(_module, args, **kwargs):
        calls.append(list(args))
        return 0, "", ""

    fake_bins(monkeypatch)
    monkeypatch.setattr(gpu_compose_override.AnsibleModule, "run_command", fake)
    failed, result = run(args_for(project, facts, validate=True, compose_files=[str(project / "docker-compose.yml")]))
    assert not failed
    assert calls[1][:4] == ["/usr/bin/docker", "compose", "--project-directory", str(project)]


def test_validation_failure_leaves_the_file_alone(run, project, facts, monkeypatch):
    target = project / "docker-compose.gpu.yml"
    target.write_text(EXISTING, encoding="utf-8")
    fake = FakeRun(rc=1, err="ERROR: The Compose file is invalid because: services.app.deploy ...")
    fake_bins(monkeypatch, docker=False)
    monkeypatch.setattr(gpu_compose_override.AnsibleModule, "run_command", fake)
    failed, result = run(args_for(project, facts, validate=True, backup=True))
    assert failed
    assert "does not validate (/usr/bin/docker-compose exited 1): ERROR: The Compose file is invalid" in result["msg"]
    assert target.read_text(encoding="utf-8") == EXISTING
    assert files_in(project) == ["docker-compose.gpu.yml", "docker-compose.yml"]  # no temp file, no backup


def test_validate_with_missing_base_file(run, project, facts, monkeypatch):
    fake_bins(monkeypatch, docker=False)
    failed, result = run(args_for(project, facts, validate=True, compose_files=[str(project / "compose.prod.yml")]))
    assert failed and "compose file(s) to validate with do not exist" in result["msg"]


@pytest.mark.skipif(shutil.which("docker-compose") is None, reason="tool missing: docker-compose (bindep.txt; tests/deps/install.sh)")
def test_validate_with_the_real_docker_compose(run, project, facts):
    failed, result = run(args_for(project, facts, validate=True, services=[{"name": "app", "device_ids": [0]}, {"name": "web"}]))
    assert not failed, result
    assert result["validated_with"][0].endswith("docker-compose") or result["validated_with"][1] == "compose"
    assert result["changed"] and (project / "docker-compose.gpu.yml").exists()


@pytest.mark.skipif(shutil.which("docker-compose") is None, reason="tool missing: docker-compose (bindep.txt; tests/deps/install.sh)")
def test_real_docker_compose_rejects_a_broken_merge(run, project, facts):
    # The base file has a misspelt key: the merged project is invalid, so the override is not written.
    (project / "docker-compose.yml").write_text("services:\n  web:\n    image: busybox\n    restrat: always\n", encoding="utf-8")
    failed, result = run(args_for(project, facts, validate=True, services=[{"name": "web"}]))
    assert failed and "does not validate" in result["msg"] and "restrat" in result["msg"]
    assert not (project / "docker-compose.gpu.yml").exists()


# ------------------------------------------------------------------------------------------- the file helper itself


def test_write_file_helper_directly(run_compose_module, tmp_path):
    """_files.write_file works for any module (add_file_common_args not required)."""
    from ansible.module_utils.basic import AnsibleModule
    from ansible.module_utils.testing import patch_module_args

    target = tmp_path / "x.conf"
    target.write_text("old\n", encoding="utf-8")
    with patch_module_args({"_ansible_check_mode": False, "_ansible_remote_tmp": str(tmp_path)}):
        module = AnsibleModule(argument_spec={}, supports_check_mode=True)
    result = _files.write_file(module, str(target), b"new\n", backup=True)
    assert result.changed and result.content_changed and result.existed and result.backup_file
    assert target.read_text(encoding="utf-8") == "new\n"
    assert result.diff == {"before": "old\n", "after": "new\n", "before_header": str(target), "after_header": str(target)}
    again = _files.write_file(module, str(target), b"new\n")
    assert not again.changed and again.backup_file is None


def test_render_has_the_header(run, project, facts):
    failed, result = run(args_for(project, facts))
    assert not failed
    assert (project / "docker-compose.gpu.yml").read_text(encoding="utf-8").startswith(_compose.HEADER)
