"""Unit tests for the toolkit planner (plugins/module_utils/_toolkit.py)."""

from __future__ import annotations

import pytest

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _toolkit

FACTS = {
    "present": True,
    "state": "ok",
    "driver": {"version": "580.65.06"},
    "gpus": [
        {"index": 0, "uuid": "GPU-b", "name": "NVIDIA H100 80GB HBM3", "architecture": "Hopper", "mig": {"current": False},
         "mig_devices": []},
        {"index": 1, "uuid": "GPU-a", "name": "NVIDIA H100 80GB HBM3", "architecture": "Hopper", "mig": {"current": True},
         "mig_devices": [{"uuid": "MIG-2"}, {"uuid": "MIG-1"}]},
        {"index": None, "uuid": None, "name": "vfio", "bound_driver": "vfio-pci"},
    ],
}


def test_versions():
    assert _toolkit.version_tuple("1.17.8-1") == (1, 17, 8)
    assert _toolkit.version_tuple("0:1.18.0-1.el9") == (1, 18, 0)
    assert _toolkit.version_tuple("latest") == ()
    assert _toolkit.upstream("1:1.17.8-1") == "1.17.8"


ALL_CVES = ["CVE-2024-0132", "CVE-2025-23359", "CVE-2025-23266"]


def test_request_errors_accepts_the_defaults():
    assert _toolkit.request_errors({"version": "", "mode": "full", "cdi": True, "runtimes": ["docker"]}) == []


@pytest.mark.parametrize("request_, fragment", [
    ({"version": "banana"}, "'banana' is not a version"),
    ({"mode": "lite"}, "'lite': choose full or cdi"),
    ({"version": "1.11.0", "mode": "cdi", "accept_cves": ALL_CVES}, "1.11.0 is too old for CDI (nvidia_container_toolkit_mode: cdi)"),
    ({"version": "1.10.0", "cdi": True, "accept_cves": ALL_CVES}, "CDI needs 1.12.0 or newer"),
    ({"mode": "cdi", "runtimes": ["docker"]}, "has no nvidia-container-runtime for docker"),
    ({"cdi_location": "/tmp/cdi"}, "'/tmp/cdi': choose auto"),
    ({"cdi_device_name_strategy": "type-index"}, "'type-index': choose index or uuid"),
])
def test_request_errors(request_, fragment):
    errors = _toolkit.request_errors(request_)
    assert len(errors) == 1 and fragment in errors[0], errors


def test_old_version_without_cdi_is_fine():
    assert _toolkit.request_errors({"version": "1.10.0", "cdi": False, "accept_cves": ALL_CVES}) == []


def test_pick_version():
    offered = ["1.17.8-1", "1.18.0-1"]
    assert _toolkit.pick_version(offered, "", "repo") == ("1.18.0-1", [])
    assert _toolkit.pick_version(offered, "1.17.8", "repo") == ("1.17.8-1", [])
    assert _toolkit.pick_version(offered, "1.17.8-1", "repo") == ("1.17.8-1", [])
    version, errors = _toolkit.pick_version(offered, "1.16.2", "the apt repository")
    assert version is None
    assert errors == ["nvidia_container_toolkit_version 1.16.2 is not in the apt repository, which offers 1.17.8, 1.18.0"]
    assert "offers no nvidia-container-toolkit" in _toolkit.pick_version([], "", "repo")[1][0]


def test_candidate_errors():
    assert _toolkit.candidate_errors("1.11.0-1", {"cdi": True})[0].startswith("nvidia-container-toolkit 1.11.0 from")
    assert _toolkit.candidate_errors("1.11.0-1", {"cdi": False, "mode": "full", "accept_cves": ALL_CVES}) == []
    assert _toolkit.candidate_errors("1.17.8-1", {"mode": "cdi"}) == []


def test_cdi_location():
    assert _toolkit.cdi_location("auto", True) == {"dir": "/var/run/cdi", "other_dirs": ["/etc/cdi"], "refresh_units": True}
    assert _toolkit.cdi_location("auto", False) == {"dir": "/etc/cdi", "other_dirs": ["/var/run/cdi"], "refresh_units": False}
    assert _toolkit.cdi_location("/etc/cdi", True) == {"dir": "/etc/cdi", "other_dirs": ["/var/run/cdi"], "refresh_units": False}


def test_generated_for_and_needs_generate():
    wanted = _toolkit.generated_for(FACTS, "index", "1.18.0-1")
    assert wanted["driver_version"] == "580.65.06"
    assert [g["uuid"] for g in wanted["gpus"]] == ["GPU-a", "GPU-b"]
    assert wanted["gpus"][0]["mig_devices"] == ["MIG-1", "MIG-2"]
    assert wanted["toolkit_version"] == "1.18.0"
    assert _toolkit.needs_generate(True, wanted, wanted) is None
    assert _toolkit.needs_generate(False, wanted, wanted) == "the spec does not exist"
    assert _toolkit.needs_generate(True, None, wanted) == "no record of what the spec was generated for"
    upgraded = dict(FACTS, driver={"version": "580.76.05"})
    assert _toolkit.needs_generate(True, wanted, _toolkit.generated_for(upgraded, "index", "1.18.0")) == \
        "changed since it was generated: the driver version"
    remigged = {**FACTS, "gpus": [FACTS["gpus"][0], {**FACTS["gpus"][1], "mig_devices": [{"uuid": "MIG-3"}]}]}
    assert "the GPUs or their MIG layout" in _toolkit.needs_generate(True, wanted, _toolkit.generated_for(remigged, "index", "1.18.0"))
    assert "the device-name strategy" in _toolkit.needs_generate(True, wanted, _toolkit.generated_for(FACTS, "uuid", "1.18.0"))
    assert _toolkit.generated_for(None, "index", "") == {"driver_version": None, "gpus": [], "device_name_strategy": "index",
                                                         "toolkit_version": None}


SPEC_YAML = """---
cdiVersion: 0.5.0
kind: nvidia.com/gpu
devices:
- name: "0"
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
- name: all
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
containerEdits:
  deviceNodes:
  - path: /dev/nvidiactl
"""


def test_device_names_from_yaml_and_json():
    assert _toolkit.device_names(_toolkit.parse_spec(SPEC_YAML, "s")) == ["nvidia.com/gpu=0", "nvidia.com/gpu=all"]
    spec = '{"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu", "devices": [{"name": "GPU-a", "containerEdits": {}}]}'
    assert _toolkit.device_names(_toolkit.parse_spec(spec, "s")) == ["nvidia.com/gpu=GPU-a"]


@pytest.mark.parametrize("text", ["{not json", "just: text\n", "- a\n"])
def test_parse_spec_refuses_non_specs(text):
    with pytest.raises(ValueError, match="/etc/cdi/nvidia.yaml"):
        _toolkit.parse_spec(text, "/etc/cdi/nvidia.yaml")
