"""The nvidia_container_runtime and nvidia_cdi_spec modules on temporary files (check mode, real run, idempotence)."""

from __future__ import annotations

import json
import stat
import tomllib
from pathlib import Path

import pytest

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


CONTAINERD_IO_DEFAULT = """#   Copyright 2018-2022 Docker Inc.

#   Licensed under the Apache License, Version 2.0 (the "License");

disabled_plugins = ["cri"]

#root = "/var/lib/containerd"
#state = "/run/containerd"
"""


def _collect_warnings(monkeypatch) -> list[str]:
    from ansible.module_utils import basic
    seen: list[str] = []
    monkeypatch.setattr(basic.AnsibleModule, "warn", lambda self, warning: seen.append(warning))
    return seen


def test_containerd_v1_config_is_merged_in_place_not_given_a_v2_dropin(run_module, tmp_path, monkeypatch):
    # Issue #18 case 1: containerd.io's default config has no version line, so containerd (and nvidia-ctk) read it as
    # version 1. A v2 drop-in plus an imports line made containerd 1.7 refuse the merged config.
    main = tmp_path / "config.toml"
    main.write_text(CONTAINERD_IO_DEFAULT)
    dropin = tmp_path / "conf.d" / "99-nvidia.toml"
    args = {"runtime": "containerd", "path": str(main), "dropin": str(dropin), "cdi": True}
    warnings = _collect_warnings(monkeypatch)
    predicted = run_module(nvidia_container_runtime, args, check_mode=True)
    assert predicted["changed_files"] == [str(main)] and main.read_text() == CONTAINERD_IO_DEFAULT
    assert any("disables containerd's CRI plugin" in w for w in warnings)
    real = run_module(nvidia_container_runtime, args)
    assert real["changed_files"] == [str(main)] and len(real["backup_files"]) == 1
    assert not dropin.exists()
    parsed = tomllib.loads(main.read_text())
    assert parsed["version"] == 1 and "imports" not in parsed and parsed["disabled_plugins"] == ["cri"]
    cri = parsed["plugins"]["cri"]
    assert cri["enable_cdi"] is True
    assert cri["containerd"]["runtimes"]["nvidia"]["options"]["BinaryName"] == "/usr/bin/nvidia-container-runtime"
    assert not run_module(nvidia_container_runtime, args)["changed"]


def test_containerd_version_request_that_contradicts_the_file_is_refused(run_module, tmp_path):
    main = tmp_path / "config.toml"
    main.write_text("version = 2\n")
    result = run_module(nvidia_container_runtime, {"runtime": "containerd", "path": str(main), "config_version": 3,
                                                   "dropin": str(tmp_path / "d/x.toml")})
    assert result["failed"] and "Leave config_version unset" in result["msg"]
    assert main.read_text() == "version = 2\n"


def test_containerd_inherits_the_default_runtime_and_sets_enable_cdi(run_module, tmp_path):
    main = tmp_path / "config.toml"
    main.write_text('version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd]\ndefault_runtime_name = "crun"\n'
                    '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]\nSystemdCgroup = false\n'
                    '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.crun]\nruntime_type = ""\n'
                    'privileged_without_host_devices = true\n'
                    '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.crun.options]\n'
                    'BinaryName = "/usr/bin/crun"\nSystemdCgroup = true\n')
    dropin = tmp_path / "d" / "99-nvidia.toml"
    run_module(nvidia_container_runtime, {"runtime": "containerd", "path": str(main), "dropin": str(dropin), "cdi": True})
    cri = tomllib.loads(dropin.read_text())["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["enable_cdi"] is True
    assert cri["containerd"]["runtimes"]["nvidia"] == {
        "runtime_type": "io.containerd.runc.v2", "privileged_without_host_devices": True,
        "options": {"BinaryName": "/usr/bin/nvidia-container-runtime", "SystemdCgroup": True}}


def test_crio_inherits_from_crio_conf_and_warns_on_cdi(run_module, tmp_path, monkeypatch):
    conf = tmp_path / "crio.conf"
    conf.write_text('[crio.runtime]\ndefault_runtime = "crun"\n[crio.runtime.runtimes.crun]\nruntime_path = "/usr/bin/crun"\n'
                    'runtime_root = "/run/crun"\nmonitor_path = "/usr/libexec/crio/conmon"\n')
    dropin = tmp_path / "crio.conf.d" / "99-nvidia.conf"
    args = {"runtime": "crio", "path": str(dropin), "crio_config": str(conf), "cdi": True}
    warnings = _collect_warnings(monkeypatch)
    run_module(nvidia_container_runtime, args)
    assert any("cdi was ignored for crio" in w for w in warnings)
    assert tomllib.loads(dropin.read_text())["crio"]["runtime"]["runtimes"]["nvidia"] == {
        "runtime_path": "/usr/bin/nvidia-container-runtime", "runtime_type": "oci", "runtime_root": "/run/crun",
        "monitor_path": "/usr/libexec/crio/conmon"}
    assert not run_module(nvidia_container_runtime, args)["changed"]
    assert conf.read_text().startswith("[crio.runtime]")


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


@pytest.mark.parametrize("units, expected", [([], "/etc/cdi"), (["usr-lib"], "/var/run/cdi"), (["etc-masked"], "/var/run/cdi")])
def test_cdi_dir_auto_follows_the_refresh_units_in_the_same_call(run_module, tmp_path, units, expected):
    """dir=auto: /var/run/cdi when the toolkit's nvidia-cdi-refresh units are installed (a masked one, a link to /dev/null,
    counts, as stat's exists does), else /etc/cdi; the role reads both answers instead of a stat per unit directory.
    Check mode: the real /etc/cdi and /var/run/cdi are only read."""
    paths = {"usr-lib": tmp_path / "usr-lib" / "nvidia-cdi-refresh.path", "etc-masked": tmp_path / "etc" / "nvidia-cdi-refresh.path"}
    for name in units:
        paths[name].parent.mkdir(parents=True)
        if name == "etc-masked":
            paths[name].symlink_to("/dev/null")
        else:
            paths[name].write_text("[Path]\n")
    args = {"dir": "auto", "other_dirs": ["/etc/cdi", "/var/run/cdi"], "refresh_unit_paths": [str(path) for path in paths.values()],
            "record": str(tmp_path / "r.json"), "nvidia_ctk": _ctk(tmp_path), "facts": {"state": "ok", "gpus": []},
            "_ansible_remote_tmp": str(tmp_path)}
    result = run_module(nvidia_cdi_spec, args, check_mode=True)
    assert (result["dir"], result["spec"], result["refresh_units_installed"]) == (expected, expected + "/nvidia.yaml", bool(units))
    assert not (tmp_path / "r.json").exists()


def test_cdi_explicit_dir_still_reports_the_refresh_units(run_module, tmp_path):
    unit = tmp_path / "nvidia-cdi-refresh.path"
    unit.write_text("[Path]\n")
    args = {"dir": str(tmp_path / "cdi"), "refresh_unit_paths": [str(unit), str(tmp_path / "missing.path")], "record": str(tmp_path / "r.json"),
            "nvidia_ctk": _ctk(tmp_path), "facts": {"state": "ok", "gpus": []}, "_ansible_remote_tmp": str(tmp_path)}
    result = run_module(nvidia_cdi_spec, args)
    assert (result["dir"], result["refresh_units_installed"], result["changed"]) == (str(tmp_path / "cdi"), True, True)
    # The spec's own directory among other_dirs is not searched for duplicates: a nvidia.json beside it stays.
    (tmp_path / "cdi" / "nvidia.json").write_text("{}")
    mine = run_module(nvidia_cdi_spec, dict(args, other_dirs=[str(tmp_path / "cdi")], force=True))
    assert mine["duplicates"] == [] and (tmp_path / "cdi" / "nvidia.json").exists()
    bad = run_module(nvidia_cdi_spec, dict(args, dir="autox"))
    assert bad["failed"] and "dir:" in bad["msg"]


def test_cdi_spec_an_engine_cannot_load_is_not_written(run_module, tmp_path):
    # The stub writes cdiVersion 0.5.0, as nvidia-ctk does for a spec without newer features. containerd 1.7.0 vendors
    # CDI library v0.5.4 (0.5.0 at most), podman 4.1 v0.4.0 (0.4.0 at most: refused, naming the release that loads it).
    etc = tmp_path / "etc-cdi"
    args = {"dir": str(etc), "record": str(tmp_path / "r.json"), "nvidia_ctk": _ctk(tmp_path), "facts": {"state": "ok", "gpus": []},
            "_ansible_remote_tmp": str(tmp_path), "engines": {"containerd": "1.7.0", "podman": "4.1.1"}}
    refused = run_module(nvidia_cdi_spec, args)
    assert refused["failed"] and not (etc / "nvidia.yaml").exists()
    assert "podman 4.1.1 loads CDI specs up to cdiVersion 0.4.0, not 0.5.0: upgrade podman to 4.3.0 or later" in refused["msg"]
    assert "containerd" not in refused["msg"].split("cannot load:")[1]
    written = run_module(nvidia_cdi_spec, dict(args, engines={"containerd": "1.7.0", "podman": "4.9.3"}))
    assert written["changed"] and (etc / "nvidia.yaml").exists()
