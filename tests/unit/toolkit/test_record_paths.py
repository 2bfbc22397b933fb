"""State records (#19 item 3): every module keeps its record under /var/lib/gpuhost (nvidia_smi_settings' locked clocks
under /run/gpuhost, since the GPU forgets them at reboot too), and the CDI record an earlier release kept in
/var/lib/gpuhost-nvidia is moved on the first run after an upgrade, so the host's state is not lost."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _files
from ansible_collections.gpuhost.nvidia.plugins.modules import gpu_compose_override, nvidia_cdi_spec, nvidia_container_runtime
from ansible_collections.gpuhost.nvidia.plugins.modules import nvidia_smi_settings, vfio_kernel_args

from test_modules import _ctk

ROOT = Path(__file__).resolve().parents[3]


def _default_record(module: object) -> str:
    options = yaml.safe_load(module.DOCUMENTATION)["options"]  # type: ignore[attr-defined]
    return options["record" if "record" in options else "state_path"]["default"]


def test_every_record_lives_under_one_prefix():
    for module in (nvidia_cdi_spec, nvidia_container_runtime, gpu_compose_override, vfio_kernel_args):
        assert _default_record(module) == "%s/%s.json" % (_files.STATE_DIR, module.__name__.rsplit(".", 1)[-1])
    assert _default_record(nvidia_smi_settings) == _files.RUN_STATE_DIR + "/nvidia_smi_settings.json"


def test_role_vars_name_the_modules_default_records():
    toolkit = yaml.safe_load((ROOT / "roles/nvidia_container_toolkit/vars/main.yml").read_text(encoding="utf-8"))
    assert toolkit["__nvidia_container_toolkit_cdi_record"] == nvidia_cdi_spec.DEFAULT_RECORD
    assert toolkit["__nvidia_container_toolkit_cdi_old_records"] == list(nvidia_cdi_spec.OLD_RECORDS)
    vfio = yaml.safe_load((ROOT / "roles/vfio_passthrough/vars/main.yml").read_text(encoding="utf-8"))
    assert vfio["__vfio_passthrough_record"] == _default_record(vfio_kernel_args)
    compose = yaml.safe_load((ROOT / "roles/gpu_compose/vars/main.yml").read_text(encoding="utf-8"))
    assert compose["__gpu_compose_record"] == _default_record(gpu_compose_override)
    for tasks in ("main.yml", "absent.yml"):
        assert "record: \"{{ __gpu_compose_record }}\"" in (ROOT / "roles/gpu_compose/tasks" / tasks).read_text(encoding="utf-8")


def test_cdi_record_at_the_old_path_is_moved_on_upgrade(run_module, tmp_path, monkeypatch):
    old, new = tmp_path / "var/lib/gpuhost-nvidia/cdi-nvidia.json", tmp_path / "var/lib/gpuhost/nvidia_cdi_spec.json"
    facts = {"state": "ok", "driver": {"version": "580.65.06"}, "gpus": []}
    args = {"dir": str(tmp_path / "cdi"), "nvidia_ctk": _ctk(tmp_path), "facts": facts, "_ansible_remote_tmp": str(tmp_path)}
    # The earlier release: its default record.
    assert run_module(nvidia_cdi_spec, dict(args, record=str(old)))["changed"]
    recorded = old.read_text(encoding="utf-8")
    monkeypatch.setattr(nvidia_cdi_spec, "DEFAULT_RECORD", str(new))
    monkeypatch.setattr(nvidia_cdi_spec, "OLD_RECORDS", (str(old),))

    predicted = run_module(nvidia_cdi_spec, args, check_mode=True)
    assert predicted["changed"] and not predicted["generated"] and old.exists() and not new.parent.exists()
    moved = run_module(nvidia_cdi_spec, args)
    assert moved["changed"] and not moved["generated"] and moved["command"] is None  # the spec is current: not generated
    assert not old.exists() and not old.parent.exists() and new.read_text(encoding="utf-8") == recorded
    again = run_module(nvidia_cdi_spec, args)
    assert not again["changed"] and not again["generated"]
    # A later change regenerates and records at the new path only.
    upgraded = run_module(nvidia_cdi_spec, dict(args, facts=dict(facts, driver={"version": "580.76.05"})))
    assert upgraded["generated"] and json.loads(new.read_text())["generated_for"]["driver_version"] == "580.76.05"
    assert not old.exists()


def test_cdi_record_moved_when_the_spec_is_generated_too(run_module, tmp_path, monkeypatch):
    old, new = tmp_path / "old/cdi-nvidia.json", tmp_path / "new/nvidia_cdi_spec.json"
    old.parent.mkdir()
    old.write_text('{"spec": "/elsewhere/nvidia.yaml", "generated": true, "generated_for": {}}', encoding="utf-8")
    monkeypatch.setattr(nvidia_cdi_spec, "DEFAULT_RECORD", str(new))
    monkeypatch.setattr(nvidia_cdi_spec, "OLD_RECORDS", (str(old),))
    args = {"dir": str(tmp_path / "cdi"), "nvidia_ctk": _ctk(tmp_path), "facts": {"state": "ok"}, "_ansible_remote_tmp": str(tmp_path)}
    result = run_module(nvidia_cdi_spec, args)
    assert result["changed"] and result["reason"] == "the spec moved to %s" % (tmp_path / "cdi" / "nvidia.yaml")
    assert not old.exists() and json.loads(new.read_text())["spec"] == str(tmp_path / "cdi" / "nvidia.yaml")


def test_cdi_record_that_is_not_json_fails_naming_it(run_module, tmp_path):
    record = tmp_path / "r.json"
    record.write_text("{not json", encoding="utf-8")
    args = {"dir": str(tmp_path / "cdi"), "record": str(record), "nvidia_ctk": _ctk(tmp_path), "_ansible_remote_tmp": str(tmp_path)}
    result = run_module(nvidia_cdi_spec, args)
    assert result["failed"] and "record %r is not valid JSON" % str(record) in result["msg"] and "fix or remove it" in result["msg"]
    assert record.read_text(encoding="utf-8") == "{not json"
