"""The nvidia_container_runtime and nvidia_cdi_spec modules on temporary files (check mode, real run, idempotence)."""

from __future__ import annotations

import json
import stat
import tomllib
from pathlib import Path

from ansible_collections.gpuhost.nvidia.plugins.modules import nvidia_cdi_spec, nvidia_container_runtime

STUB_CTK = Path(__file__).resolve().parents[3] / "tests/repos/files/nvidia-ctk"


def test_docker_check_mode_then_real_then_idempotent(run_module, tmp_path):
    daemon = tmp_path / "daemon.json"
    daemon.write_text('{"log-driver": "journald"}\n')
    args = {"runtime": "docker", "path": str(daemon), "cdi": True, "_ansible_remote_tmp": str(tmp_path)}
    predicted = run_module(nvidia_container_runtime, args, check_mode=True)
    assert predicted["changed"] and predicted["changed_files"] == [str(daemon)]
    assert daemon.read_text() == '{"log-driver": "journald"}\n'
    real = run_module(nvidia_container_runtime, args)
    assert real["changed"] and len(real["backup_files"]) == 1
    assert json.loads(daemon.read_text())["runtimes"]["nvidia"] == {"path": "/usr/bin/nvidia-container-runtime"}
    assert not run_module(nvidia_container_runtime, args)["changed"]


def test_docker_broken_json_fails_and_is_kept(run_module, tmp_path):
    daemon = tmp_path / "daemon.json"
    daemon.write_text('{"log-driver": ')
    result = run_module(nvidia_container_runtime, {"runtime": "docker", "path": str(daemon)})
    assert result["failed"] and "%s is not valid JSON" % daemon in result["msg"]
    assert daemon.read_text() == '{"log-driver": '


def test_containerd_creates_dirs_only_for_real(run_module, tmp_path):
    main = tmp_path / "containerd" / "config.toml"
    dropin = tmp_path / "containerd" / "conf.d" / "99-nvidia.toml"
    args = {"runtime": "containerd", "path": str(main), "dropin": str(dropin), "default_runtime": True}
    predicted = run_module(nvidia_container_runtime, args, check_mode=True)
    assert predicted["changed_files"] == [str(dropin), str(main)]
    assert not (tmp_path / "containerd").exists()
    real = run_module(nvidia_container_runtime, args)
    assert real["changed_files"] == predicted["changed_files"]
    assert tomllib.loads(main.read_text()) == {"version": 2, "imports": [str(dropin.parent / "*.toml")]}
    cri = tomllib.loads(dropin.read_text())["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["containerd"]["default_runtime_name"] == "nvidia"
    assert not run_module(nvidia_container_runtime, args)["changed"]


def test_containerd_broken_toml_fails(run_module, tmp_path):
    main = tmp_path / "config.toml"
    main.write_text("version = = 2\n")
    result = run_module(nvidia_container_runtime, {"runtime": "containerd", "path": str(main), "dropin": str(tmp_path / "d/x.toml")})
    assert result["failed"] and "is not valid TOML" in result["msg"]


def _ctk(tmp_path: Path, version: str = "1.18.0", fail: bool = False) -> str:
    ctk = tmp_path / "nvidia-ctk"
    text = STUB_CTK.read_text().replace("@VERSION@", version)
    if fail:
        text = "#!/bin/sh\necho 'failed to initialize NVML: ERROR_LIBRARY_NOT_FOUND' >&2\nexit 1\n"
    ctk.write_text(text)
    ctk.chmod(ctk.stat().st_mode | stat.S_IEXEC)
    return str(ctk)


def test_cdi_generate_record_and_regenerate_on_driver_change(run_module, tmp_path):
    etc, run = tmp_path / "etc-cdi", tmp_path / "run-cdi"
    run.mkdir()
    (run / "nvidia.yaml").write_text("stale")
    facts = {"state": "ok", "driver": {"version": "580.65.06"}, "gpus": []}
    args = {"dir": str(etc), "other_dirs": [str(run)], "record": str(tmp_path / "rec" / "r.json"), "nvidia_ctk": _ctk(tmp_path),
            "facts": facts, "toolkit_version": "1.18.0", "_ansible_remote_tmp": str(tmp_path)}
    predicted = run_module(nvidia_cdi_spec, args, check_mode=True)
    assert predicted["changed"] and predicted["reason"] == "the spec does not exist"
    assert not etc.exists() and (run / "nvidia.yaml").exists()
    real = run_module(nvidia_cdi_spec, args)
    assert real["changed"] and real["devices"] == ["nvidia.com/gpu=all"] and real["duplicates"] == [str(run / "nvidia.yaml")]
    assert not (run / "nvidia.yaml").exists()
    assert "device-name-strategy=index" in (etc / "nvidia.yaml").read_text()
    again = run_module(nvidia_cdi_spec, args)
    assert not again["changed"] and again["devices"] == ["nvidia.com/gpu=all"] and again["command"] is None
    upgraded = dict(args, facts=dict(facts, driver={"version": "580.76.05"}))
    assert run_module(nvidia_cdi_spec, upgraded, check_mode=True)["reason"] == "changed since it was generated: the driver version"


def test_cdi_failure_without_driver_is_recorded_not_fatal(run_module, tmp_path):
    args = {"dir": str(tmp_path / "cdi"), "record": str(tmp_path / "r.json"), "nvidia_ctk": _ctk(tmp_path, fail=True),
            "facts": {"state": "driver_not_loaded"}, "_ansible_remote_tmp": str(tmp_path)}
    first = run_module(nvidia_cdi_spec, args)
    assert first["changed"] and first["devices"] == [] and "ERROR_LIBRARY_NOT_FOUND" in first["error"]
    assert json.loads((tmp_path / "r.json").read_text())["generated"] is False
    second = run_module(nvidia_cdi_spec, args)
    assert not second["changed"] and "ERROR_LIBRARY_NOT_FOUND" in second["error"]
    with_driver = run_module(nvidia_cdi_spec, dict(args, facts={"state": "ok"}))
    assert with_driver["failed"] and "Generating the CDI spec failed" in with_driver["msg"]
